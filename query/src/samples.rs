//! The `samples` table: every stored sample, one row each, with its series' labels as columns.
//!
//! Columns: `time` (Timestamp ns), `metric`, `value` (Float64), `series_id` (UInt32), `domain`
//! and `entity` (from the metric catalog; null for unknown metrics), then one nullable
//! dictionary-encoded string column per label key (`host` first, then in first-seen order). Filters on `time`, `metric`, `host` and labels are pushed into the engine scan
//! (labels via the roaring postings); the scan runs on blocking threads, one stream per
//! DataFusion partition, each taking every n-th time partition.

pub mod pushdown;

use std::sync::Arc;

use arrow::array::{ArrayRef, DictionaryArray, Int32Array, RecordBatch, StringArray, TimestampNanosecondArray};
use arrow::datatypes::{DataType, Field, Int32Type, Schema, SchemaRef, TimeUnit};
use async_trait::async_trait;
use datafusion::catalog::{Session, TableProvider};
use datafusion::datasource::TableType;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::stream::RecordBatchReceiverStreamBuilder;
use datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};
use lockstep_engine::Store;
use lockstep_engine::datafile::Rows;
use lockstep_engine::store::ScanRequest;

use pushdown::Pushdown;

/// Rows per output batch.
const BATCH_ROWS: usize = 64 * 1024;

/// Fixed columns before the label columns.
const FIXED: [&str; 6] = ["time", "metric", "value", "series_id", "domain", "entity"];

/// The `samples` table over a store.
#[derive(Debug)]
pub struct SamplesTable {
    store: Arc<Store>,
}

impl SamplesTable {
    /// A table over `store`.
    pub fn new(store: Arc<Store>) -> Self {
        SamplesTable { store }
    }

    fn label_keys(&self) -> Vec<String> {
        self.store.with_catalog(|c| c.label_keys()).unwrap_or_default()
    }
}

fn dict_type() -> DataType {
    DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8))
}

fn schema_for(labels: &[String]) -> SchemaRef {
    let mut fields = vec![
        Field::new("time", DataType::Timestamp(TimeUnit::Nanosecond, None), false),
        Field::new("metric", dict_type(), false),
        Field::new("value", DataType::Float64, false),
        Field::new("series_id", DataType::UInt32, false),
        Field::new("domain", dict_type(), true),
        Field::new("entity", dict_type(), true),
    ];
    fields.extend(labels.iter().map(|k| Field::new(k, dict_type(), true)));
    Arc::new(Schema::new(fields))
}

#[async_trait]
impl TableProvider for SamplesTable {
    fn schema(&self) -> SchemaRef {
        schema_for(&self.label_keys())
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(&self, filters: &[&Expr]) -> DfResult<Vec<TableProviderFilterPushDown>> {
        let labels = self.label_keys();
        Ok(filters
            .iter()
            .map(|f| {
                if pushdown::is_pushable(f, &labels) {
                    TableProviderFilterPushDown::Inexact
                } else {
                    TableProviderFilterPushDown::Unsupported
                }
            })
            .collect())
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let labels = self.label_keys();
        let schema = schema_for(&labels);
        let pushdown = pushdown::analyze(filters, &labels);
        let shards = state.config().target_partitions().max(1);
        let partitions: Vec<Arc<dyn PartitionStream>> = (0..shards)
            .map(|shard| {
                Arc::new(SamplesPartition {
                    store: self.store.clone(),
                    schema: schema.clone(),
                    labels: labels.clone(),
                    pushdown: pushdown.clone(),
                    shard: (shard, shards),
                }) as Arc<dyn PartitionStream>
            })
            .collect();
        Ok(Arc::new(StreamingTableExec::try_new(schema, partitions, projection, [], false, limit)?))
    }
}

#[derive(Debug)]
struct SamplesPartition {
    store: Arc<Store>,
    schema: SchemaRef,
    labels: Vec<String>,
    pushdown: Pushdown,
    shard: (usize, usize),
}

impl PartitionStream for SamplesPartition {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let mut builder = RecordBatchReceiverStreamBuilder::new(self.schema.clone(), 4);
        let tx = builder.tx();
        let store = self.store.clone();
        let schema = self.schema.clone();
        let labels = self.labels.clone();
        let pushdown = self.pushdown.clone();
        let shard = self.shard;
        builder.spawn_blocking(move || {
            let result = run_scan(&store, &schema, &labels, &pushdown, shard, |batch| {
                tx.blocking_send(Ok(batch)).is_ok()
            });
            if let Err(e) = result {
                let _ = tx.blocking_send(Err(e));
            }
            Ok(())
        });
        builder.build()
    }
}

fn engine_err(e: lockstep_engine::Error) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

/// Runs the engine scan for one shard and emits Arrow batches; stops early if `emit` says so.
fn run_scan(
    store: &Store,
    schema: &SchemaRef,
    labels: &[String],
    pushdown: &Pushdown,
    (shard, shards): (usize, usize),
    mut emit: impl FnMut(RecordBatch) -> bool,
) -> DfResult<()> {
    let (series, columns) = store
        .with_catalog(|c| {
            let series = pushdown.has_series_filter().then(|| c.select(&pushdown.series));
            // Per-series dictionary values: metric, then each label (null = absent).
            let metric: StringArray = c.keys().iter().map(|k| Some(k.metric.as_str())).collect();
            let catalog = lockstep_engine::metrics::MetricCatalog::builtin();
            let domain: StringArray =
                c.keys().iter().map(|k| catalog.classify(k).map(|m| m.info.domain.as_str())).collect();
            let entity: StringArray = c.keys().iter().map(|k| catalog.entity(k).map(|e| e.name)).collect();
            let mut cols = vec![Arc::new(metric) as ArrayRef, Arc::new(domain), Arc::new(entity)];
            for label in labels {
                let values: StringArray = c.keys().iter().map(|k| k.labels.get(label).map(String::as_str)).collect();
                cols.push(Arc::new(values));
            }
            (series, cols)
        })
        .map_err(engine_err)?;
    if series.as_ref().is_some_and(|s| s.is_empty()) {
        return Ok(());
    }
    if pushdown.time.is_some_and(|(lo, hi)| lo >= hi) {
        return Ok(());
    }
    let request = ScanRequest { time: pushdown.time, series };
    let mut scan = store.scan(request).map_err(engine_err)?;
    let mut index = 0usize;
    while let Some(rows) = scan.next_rows() {
        let mine = index % shards == shard;
        index += 1;
        if !mine {
            continue;
        }
        let rows = rows.map_err(engine_err)?;
        let mut start = 0;
        while start < rows.len() {
            let end = (start + BATCH_ROWS).min(rows.len());
            let batch = to_batch(schema, &rows, start, end, &columns)?;
            if !emit(batch) {
                return Ok(());
            }
            start = end;
        }
    }
    Ok(())
}

fn to_batch(schema: &SchemaRef, rows: &Rows, start: usize, end: usize, dict_values: &[ArrayRef]) -> DfResult<RecordBatch> {
    let series = &rows.series[start..end];
    let keys = Int32Array::from(series.iter().map(|&s| s as i32).collect::<Vec<_>>());
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(FIXED.len() + dict_values.len());
    columns.push(Arc::new(TimestampNanosecondArray::from(rows.time[start..end].to_vec())));
    let dict = |values: &ArrayRef| -> DfResult<ArrayRef> {
        Ok(Arc::new(DictionaryArray::<Int32Type>::try_new(keys.clone(), values.clone())?))
    };
    columns.push(dict(&dict_values[0])?);
    columns.push(Arc::new(arrow::array::Float64Array::from(rows.value[start..end].to_vec())));
    columns.push(Arc::new(arrow::array::UInt32Array::from(series.to_vec())));
    for values in &dict_values[1..] {
        // domain, entity, then the labels.
        columns.push(dict(values)?);
    }
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}
