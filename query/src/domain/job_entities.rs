//! `job_entities('job')`: every entity a job depends on.
//!
//! Columns: `job`, `entity`, `entity_kind` (gpu, nic_port, switch_port, node, storage_pool,
//! job), `node` (the host of nodes, GPUs and NIC ports; NULL otherwise), `domain`
//! (training for the job itself, compute, network, storage). An unknown job is a plan
//! error. Join with `samples` on `entity` to get every series tied to the job.

use std::sync::Arc;

use arrow::array::{RecordBatch, StringBuilder};
use arrow::datatypes::{DataType, Field, Schema};
use datafusion::catalog::{TableFunctionArgs, TableFunctionImpl, TableProvider};
use datafusion::common::plan_err;
use datafusion::error::Result;

use crate::domain::{DomainModel, memtable, string_args};

/// The `job_entities` table function.
#[derive(Debug)]
pub struct JobEntitiesFunc {
    model: Arc<DomainModel>,
}

impl JobEntitiesFunc {
    /// A function over `model`.
    pub fn new(model: Arc<DomainModel>) -> Self {
        JobEntitiesFunc { model }
    }
}

impl TableFunctionImpl for JobEntitiesFunc {
    fn call_with_args(&self, args: TableFunctionArgs) -> Result<Arc<dyn TableProvider>> {
        let [job] = string_args::<1>(&args, "job_entities")?;
        let Some(entities) = self.model.index.entities(&job) else {
            return plan_err!("job_entities: unknown job {job:?}");
        };
        let names = ["job", "entity", "entity_kind", "node", "domain"];
        let mut cols: Vec<StringBuilder> = names.iter().map(|_| StringBuilder::new()).collect();
        for e in entities {
            cols[0].append_value(&job);
            cols[1].append_value(&e.entity);
            cols[2].append_value(e.kind.as_str());
            cols[3].append_option(e.node.as_deref());
            cols[4].append_value(e.domain.as_str());
        }
        let fields: Vec<Field> = names.iter().map(|n| Field::new(*n, DataType::Utf8, *n == "node")).collect();
        let columns = cols.iter_mut().map(|b| Arc::new(b.finish()) as _).collect();
        memtable(RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)?)
    }
}
