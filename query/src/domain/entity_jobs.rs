//! `entity_jobs('entity')`: which jobs an entity's alert touches.
//!
//! Columns: `entity` (as asked), `job`, `gpus`, `nodes`, `start`, `end` (NULL while
//! running), `storage_pool`, `related_entity` (the job entity that matched: the entity
//! itself, or for a switch name the first of its ports on the job's paths), `entity_kind`,
//! `domain` (how the job depends on it). Ordered by start, then job. An entity no job
//! depends on gives no rows. Filter on `start`/`end` for jobs running at a given time.

use std::sync::Arc;

use arrow::array::{RecordBatch, StringBuilder, TimestampNanosecondBuilder, UInt32Builder};
use arrow::datatypes::{DataType, Field, Schema};
use datafusion::catalog::{TableFunctionArgs, TableFunctionImpl, TableProvider};
use datafusion::error::Result;

use crate::domain::tables::time_type;
use crate::domain::{DomainModel, memtable, string_args};

/// The `entity_jobs` table function.
#[derive(Debug)]
pub struct EntityJobsFunc {
    model: Arc<DomainModel>,
}

impl EntityJobsFunc {
    /// A function over `model`.
    pub fn new(model: Arc<DomainModel>) -> Self {
        EntityJobsFunc { model }
    }
}

impl TableFunctionImpl for EntityJobsFunc {
    fn call_with_args(&self, args: TableFunctionArgs) -> Result<Arc<dyn TableProvider>> {
        let [entity] = string_args::<1>(&args, "entity_jobs")?;
        let hits = self.model.index.jobs_touching(&entity);
        let (mut ent, mut job, mut pool) = (StringBuilder::new(), StringBuilder::new(), StringBuilder::new());
        let (mut related, mut kind, mut domain) = (StringBuilder::new(), StringBuilder::new(), StringBuilder::new());
        let (mut gpus, mut nodes) = (UInt32Builder::new(), UInt32Builder::new());
        let (mut start, mut end) = (TimestampNanosecondBuilder::new(), TimestampNanosecondBuilder::new());
        for h in &hits {
            ent.append_value(&entity);
            job.append_value(&h.job.job);
            gpus.append_value(h.gpus);
            nodes.append_value(h.nodes as u32);
            start.append_value(h.job.start);
            end.append_option(h.job.end);
            pool.append_option(h.job.storage_pool.as_deref());
            related.append_value(&h.relation.entity);
            kind.append_value(h.relation.kind.as_str());
            domain.append_value(h.relation.domain.as_str());
        }
        let schema = Schema::new(vec![
            Field::new("entity", DataType::Utf8, false),
            Field::new("job", DataType::Utf8, false),
            Field::new("gpus", DataType::UInt32, false),
            Field::new("nodes", DataType::UInt32, false),
            Field::new("start", time_type(), false),
            Field::new("end", time_type(), true),
            Field::new("storage_pool", DataType::Utf8, true),
            Field::new("related_entity", DataType::Utf8, false),
            Field::new("entity_kind", DataType::Utf8, false),
            Field::new("domain", DataType::Utf8, false),
        ]);
        let batch = RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(ent.finish()),
                Arc::new(job.finish()),
                Arc::new(gpus.finish()),
                Arc::new(nodes.finish()),
                Arc::new(start.finish()),
                Arc::new(end.finish()),
                Arc::new(pool.finish()),
                Arc::new(related.finish()),
                Arc::new(kind.finish()),
                Arc::new(domain.finish()),
            ],
        )?;
        memtable(batch)
    }
}
