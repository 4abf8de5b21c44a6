//! SQL over the clock models: the `clock_models` table and the `samples_at_clock(version)`
//! table function.
//!
//! `clock_models` lists every segment of every host's model in every stored version (a
//! version is immutable once fitted, so results stay reproducible): `version`, `host`,
//! `segment` (0-based), `kind` (`fitted`, `step_bridge`, `identity`), `local_start`,
//! `local_end` (host clock), `reference_start`, `reference_end` (corrected), `offset_start_ns`,
//! `offset_end_ns` (θ = local − reference at the two knots), `drift_ppb`,
//! `uncertainty_start_ns`, `uncertainty_end_ns`, `samples_used`, and per host `steps`
//! (clock steps detected) and `outliers` (observations set aside). The newest version is
//! `max(version)`.
//!
//! `samples_at_clock(v)` is the `samples` table corrected with version `v` instead of the
//! newest (0 = no correction).

use std::sync::Arc;

use arrow::array::{
    Float64Builder, Int64Builder, RecordBatch, StringBuilder, TimestampNanosecondBuilder, UInt32Builder, UInt64Builder,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use async_trait::async_trait;
use datafusion::catalog::{MemTable, Session, TableFunctionArgs, TableFunctionImpl, TableProvider};
use datafusion::common::{ScalarValue, plan_err};
use datafusion::datasource::TableType;
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;
use lockstep_engine::Store;
use lockstep_engine::clock::{ClockSet, SegmentKind};
use lockstep_engine::metrics::MetricCatalog;

use crate::samples::{ClockVersion, SamplesTable};

/// The `clock_models` table (columns in the module docs).
#[derive(Debug)]
pub struct ClockModelsTable {
    store: Arc<Store>,
}

impl ClockModelsTable {
    /// A table over the store's clock registry.
    pub fn new(store: Arc<Store>) -> Self {
        ClockModelsTable { store }
    }
}

fn ts() -> DataType {
    DataType::Timestamp(TimeUnit::Nanosecond, None)
}

fn clock_models_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("version", DataType::UInt64, false),
        Field::new("host", DataType::Utf8, false),
        Field::new("segment", DataType::UInt32, false),
        Field::new("kind", DataType::Utf8, false),
        Field::new("local_start", ts(), false),
        Field::new("local_end", ts(), false),
        Field::new("reference_start", ts(), false),
        Field::new("reference_end", ts(), false),
        Field::new("offset_start_ns", DataType::Int64, false),
        Field::new("offset_end_ns", DataType::Int64, false),
        Field::new("drift_ppb", DataType::Float64, false),
        Field::new("uncertainty_start_ns", DataType::Int64, false),
        Field::new("uncertainty_end_ns", DataType::Int64, false),
        Field::new("samples_used", DataType::UInt32, false),
        Field::new("steps", DataType::UInt32, false),
        Field::new("outliers", DataType::UInt32, false),
    ]))
}

/// One batch with every segment of the given versions.
pub fn clock_models_batch(sets: &[Arc<ClockSet>]) -> Result<RecordBatch> {
    let mut version = UInt64Builder::new();
    let (mut host, mut kind) = (StringBuilder::new(), StringBuilder::new());
    let mut segment = UInt32Builder::new();
    let mut times: [TimestampNanosecondBuilder; 4] = std::array::from_fn(|_| TimestampNanosecondBuilder::new());
    let mut ints: [Int64Builder; 4] = std::array::from_fn(|_| Int64Builder::new());
    let mut drift = Float64Builder::new();
    let mut counts: [UInt32Builder; 3] = std::array::from_fn(|_| UInt32Builder::new());
    for set in sets {
        for (name, model) in set.models() {
            for (i, s) in model.segments.iter().enumerate() {
                version.append_value(set.version());
                host.append_value(name);
                segment.append_value(i as u32);
                kind.append_value(match s.kind {
                    SegmentKind::Fitted => "fitted",
                    SegmentKind::StepBridge => "step_bridge",
                    SegmentKind::Identity => "identity",
                });
                times[0].append_value(s.local_start);
                times[1].append_value(s.local_end);
                times[2].append_value(model.to_reference(s.local_start));
                times[3].append_value(model.to_reference(s.local_end));
                ints[0].append_value(s.offset_start_ns);
                ints[1].append_value(s.offset_end_ns);
                ints[2].append_value(s.uncertainty_start_ns);
                ints[3].append_value(s.uncertainty_end_ns);
                drift.append_value(s.drift_ppb());
                counts[0].append_value(s.samples_used);
                counts[1].append_value(model.steps);
                counts[2].append_value(model.outliers);
            }
        }
    }
    let [l0, l1, r0, r1] = times.map(|mut b| b.finish());
    let [o0, o1, u0, u1] = ints.map(|mut b| b.finish());
    let [used, steps, outliers] = counts.map(|mut b| b.finish());
    Ok(RecordBatch::try_new(
        clock_models_schema(),
        vec![
            Arc::new(version.finish()),
            Arc::new(host.finish()),
            Arc::new(segment.finish()),
            Arc::new(kind.finish()),
            Arc::new(l0),
            Arc::new(l1),
            Arc::new(r0),
            Arc::new(r1),
            Arc::new(o0),
            Arc::new(o1),
            Arc::new(drift.finish()),
            Arc::new(u0),
            Arc::new(u1),
            Arc::new(used),
            Arc::new(steps),
            Arc::new(outliers),
        ],
    )?)
}

#[async_trait]
impl TableProvider for ClockModelsTable {
    fn schema(&self) -> SchemaRef {
        clock_models_schema()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let engine = |e: lockstep_engine::Error| DataFusionError::External(Box::new(e));
        let sets = self
            .store
            .with_clocks(|r| Ok(r.versions().into_iter().filter_map(|v| r.get(v)).collect::<Vec<_>>()))
            .map_err(engine)?;
        let batch = clock_models_batch(&sets)?;
        MemTable::try_new(batch.schema(), vec![vec![batch]])?.scan(state, projection, filters, limit).await
    }
}

/// The `samples_at_clock(version)` table function.
#[derive(Debug)]
pub struct SamplesAtClockFunc {
    store: Arc<Store>,
    catalog: Arc<MetricCatalog>,
}

impl SamplesAtClockFunc {
    /// A function over `store`.
    pub fn new(store: Arc<Store>, catalog: Arc<MetricCatalog>) -> Self {
        SamplesAtClockFunc { store, catalog }
    }
}

impl TableFunctionImpl for SamplesAtClockFunc {
    fn call_with_args(&self, args: TableFunctionArgs) -> Result<Arc<dyn TableProvider>> {
        let exprs = args.exprs();
        let version = match exprs {
            [Expr::Literal(v, _)] => match v {
                ScalarValue::Int64(Some(v)) if *v >= 0 => *v as u64,
                ScalarValue::Int32(Some(v)) if *v >= 0 => *v as u64,
                ScalarValue::UInt64(Some(v)) => *v,
                other => return plan_err!("samples_at_clock: version must be a non-negative integer, got {other}"),
            },
            _ => {
                return plan_err!(
                    "samples_at_clock takes one integer literal (the clock model version), got {} arguments",
                    exprs.len()
                );
            }
        };
        let version = ClockVersion::Pinned(version);
        // Fail at planning time for an unknown version, with the list of known ones.
        version.resolve(&self.store)?;
        Ok(Arc::new(SamplesTable::new(self.store.clone(), self.catalog.clone()).with_clock(version)))
    }
}
