//! The Lockstep SQL session: a read-only DataFusion context over one store.

use std::sync::Arc;

use arrow::array::RecordBatch;
use datafusion::execution::config::SessionConfig;
use datafusion::prelude::{DataFrame, SQLOptions, SessionContext};
use lockstep_engine::Store;

use crate::error::{QueryError, Result};
use lockstep_engine::metrics::MetricCatalog;

use crate::clock::{ClockModelsTable, SamplesAtClockFunc};
use crate::samples::{ClockVersion, SamplesTable};

/// A read-only SQL session over a store, with the Lockstep tables and functions registered.
#[derive(Clone)]
pub struct QueryEngine {
    ctx: SessionContext,
    store: Arc<Store>,
}

impl std::fmt::Debug for QueryEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueryEngine").field("store", &self.store.dir()).finish_non_exhaustive()
    }
}

impl QueryEngine {
    /// Builds a session over `store`.
    pub fn new(store: Arc<Store>) -> Result<Self> {
        Self::with_clock(store, ClockVersion::Newest)
    }

    /// Builds a session whose `samples` table is corrected with the given clock-model version
    /// (for reproducing an earlier result; fails if the version does not exist).
    pub fn with_clock(store: Arc<Store>, clock: ClockVersion) -> Result<Self> {
        clock.resolve(&store)?;
        let config = SessionConfig::new().with_information_schema(true);
        let state = crate::plan::session_state(config);
        let ctx = SessionContext::new_with_state(state);
        let catalog = Arc::new(crate::catalog::store_catalog(store.dir())?);
        ctx.register_table("samples", Arc::new(SamplesTable::new(store.clone(), catalog.clone()).with_clock(clock)))?;
        ctx.register_table("clock_models", Arc::new(ClockModelsTable::new(store.clone())))?;
        ctx.register_udtf("samples_at_clock", Arc::new(SamplesAtClockFunc::new(store.clone(), catalog.clone())));
        crate::functions::register_all_with_catalog(&ctx, catalog.clone());
        ctx.register_udtf("diagnose", Arc::new(crate::diagnose::DiagnoseFunc::new(store.clone())));
        register_domain_from_dir(&ctx, store.dir(), catalog)?;
        Ok(QueryEngine { ctx, store })
    }

    /// The DataFusion context (to register more tables or functions).
    pub fn context(&self) -> &SessionContext {
        &self.ctx
    }

    /// The store.
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// Options that refuse DDL (CREATE/DROP, CREATE EXTERNAL TABLE) and DML (INSERT, COPY).
    pub fn read_only_options() -> SQLOptions {
        SQLOptions::new().with_allow_ddl(false).with_allow_dml(false)
    }

    /// Plans a read-only SQL statement.
    pub async fn sql(&self, sql: &str) -> Result<DataFrame> {
        self.ctx.sql_with_options(sql, Self::read_only_options()).await.map_err(|e| {
            let msg = e.to_string();
            if msg.contains("not supported") && (msg.contains("DDL") || msg.contains("DML")) {
                QueryError::ReadOnly { reason: msg }
            } else {
                QueryError::DataFusion(e)
            }
        })
    }

    /// Runs a statement and collects its result.
    pub async fn collect(&self, sql: &str) -> Result<Vec<RecordBatch>> {
        Ok(self.sql(sql).await?.collect().await?)
    }
}

/// Registers the topology/jobs tables when the store directory holds `topology.json` (and
/// optionally `jobs.json`), as written by `lockstep import`.
fn register_domain_from_dir(ctx: &SessionContext, dir: &std::path::Path, catalog: Arc<MetricCatalog>) -> Result<()> {
    use lockstep_engine::topology::{Topology, parse_jobs};
    let Ok(text) = std::fs::read_to_string(dir.join("topology.json")) else { return Ok(()) };
    let topology = Topology::from_json(&text)?;
    let jobs = match std::fs::read_to_string(dir.join("jobs.json")) {
        Ok(text) => parse_jobs(&text)?,
        Err(_) => Vec::new(),
    };
    crate::domain::register_domain(
        ctx,
        Arc::new(topology),
        Arc::new(jobs),
        catalog,
    )?;
    Ok(())
}
