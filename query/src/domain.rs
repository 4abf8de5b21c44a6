//! SQL over the domain model: topology, jobs and the metric catalog.
//!
//! [`register_domain`] adds, on a `SessionContext`:
//! - tables `topology_nodes`, `topology_nics`, `topology_switches`, `topology_links`,
//!   `storage_pools`, `jobs` and `metric_catalog` (in-memory; see [`tables`]);
//! - table functions `job_entities('job')` (every entity a job depends on),
//!   `entity_jobs('entity')` (the jobs an entity's alert touches, with their GPU count) and
//!   `topology_path('node', 'node or storage pool')` (the hops between them).
//!
//! Table-function arguments must be string literals. Column names and semantics are
//! documented in `docs/topology.md` and `docs/metrics.md`.

mod entity_jobs;
mod job_entities;
mod path;
pub mod tables;

use std::sync::Arc;

use arrow::array::RecordBatch;
use datafusion::catalog::{MemTable, TableFunctionArgs, TableProvider};
use datafusion::common::{ScalarValue, plan_err};
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::Expr;
use datafusion::prelude::SessionContext;
use lockstep_engine::metrics::MetricCatalog;
use lockstep_engine::topology::{Job, JobIndex, Topology};

pub use entity_jobs::EntityJobsFunc;
pub use job_entities::JobEntitiesFunc;
pub use path::TopologyPathFunc;

/// Topology, jobs and the job index shared by the table functions.
#[derive(Debug)]
pub struct DomainModel {
    /// The cluster topology.
    pub topology: Arc<Topology>,
    /// The jobs.
    pub jobs: Arc<Vec<Job>>,
    /// Entities of every job and the reverse mapping.
    pub index: JobIndex,
}

impl DomainModel {
    /// Builds the job index; fails when a job names an unknown node or storage pool.
    pub fn new(topology: Arc<Topology>, jobs: Arc<Vec<Job>>) -> Result<Self> {
        let index = JobIndex::build(&topology, &jobs).map_err(engine_error)?;
        Ok(DomainModel { topology, jobs, index })
    }
}

/// Registers the domain tables and table functions on `ctx` (names in the module docs).
/// Fails when a job names a node or storage pool the topology lacks.
pub fn register_domain(
    ctx: &SessionContext,
    topology: Arc<Topology>,
    jobs: Arc<Vec<Job>>,
    catalog: Arc<MetricCatalog>,
) -> Result<()> {
    Domain::build(topology, jobs, &catalog)?.register(ctx)
}

/// The domain tables and table functions of one topology, job list and metric catalog, built
/// once and registered on any number of sessions (a server builds a session per statement;
/// building this for 64 nodes took most of a `SELECT 1`'s 5 ms).
#[derive(Debug)]
pub struct Domain {
    model: Arc<DomainModel>,
    tables: Vec<(&'static str, Arc<dyn TableProvider>)>,
}

impl Domain {
    /// Builds the job index and the tables. Fails when a job names a node or storage pool the
    /// topology lacks.
    pub fn build(topology: Arc<Topology>, jobs: Arc<Vec<Job>>, catalog: &MetricCatalog) -> Result<Domain> {
        let model = Arc::new(DomainModel::new(Arc::clone(&topology), Arc::clone(&jobs))?);
        let batches: [(&'static str, RecordBatch); 7] = [
            ("topology_nodes", tables::topology_nodes(&topology)?),
            ("topology_nics", tables::topology_nics(&topology)?),
            ("topology_switches", tables::topology_switches(&topology)?),
            ("topology_links", tables::topology_links(&topology)?),
            ("storage_pools", tables::storage_pools(&topology)?),
            ("jobs", tables::jobs(&model.index)?),
            ("metric_catalog", tables::metric_catalog(catalog)?),
        ];
        let tables = batches.into_iter().map(|(name, batch)| Ok((name, memtable(batch)?))).collect::<Result<_>>()?;
        Ok(Domain { model, tables })
    }

    /// Registers the tables and table functions on `ctx`.
    pub fn register(&self, ctx: &SessionContext) -> Result<()> {
        for (name, table) in &self.tables {
            ctx.register_table(*name, Arc::clone(table))?;
        }
        ctx.register_udtf("job_entities", Arc::new(JobEntitiesFunc::new(Arc::clone(&self.model))));
        ctx.register_udtf("entity_jobs", Arc::new(EntityJobsFunc::new(Arc::clone(&self.model))));
        ctx.register_udtf("topology_path", Arc::new(TopologyPathFunc::new(Arc::clone(&self.model))));
        Ok(())
    }
}

/// The `metric_catalog` table of `catalog` alone (a store without a topology).
pub(crate) fn catalog_table(catalog: &MetricCatalog) -> Result<Arc<dyn TableProvider>> {
    memtable(tables::metric_catalog(catalog)?)
}

/// Wraps one batch as a single-partition in-memory table.
fn memtable(batch: RecordBatch) -> Result<Arc<dyn TableProvider>> {
    Ok(Arc::new(MemTable::try_new(batch.schema(), vec![vec![batch]])?))
}

/// Reads exactly `N` string-literal arguments of a table function.
fn string_args<const N: usize>(args: &TableFunctionArgs, function: &str) -> Result<[String; N]> {
    let exprs = args.exprs();
    if exprs.len() != N {
        return plan_err!("{function} takes {N} string argument(s), got {}", exprs.len());
    }
    let mut out: [String; N] = std::array::from_fn(|_| String::new());
    for (i, expr) in exprs.iter().enumerate() {
        out[i] = match expr {
            Expr::Literal(
                ScalarValue::Utf8(Some(s)) | ScalarValue::LargeUtf8(Some(s)) | ScalarValue::Utf8View(Some(s)),
                _,
            ) => s.clone(),
            _ => return plan_err!("{function}: argument {} must be a string literal", i + 1),
        };
    }
    Ok(out)
}

/// Carries an engine error through DataFusion, keeping its kind (see `QueryError::kind`).
fn engine_error(e: lockstep_engine::Error) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

#[cfg(test)]
mod tests;
