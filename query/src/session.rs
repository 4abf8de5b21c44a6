//! The Lockstep SQL session: a read-only DataFusion context over one store.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::common::tree_node::TreeNode;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::execution::config::SessionConfig;
use datafusion::prelude::{DataFrame, SQLOptions, SessionContext};
use datafusion::sql::sqlparser::dialect::{GenericDialect, dialect_from_str};
use futures::Stream;
use lockstep_engine::Store;
use lockstep_engine::analysis::Stop;

use crate::error::{QueryError, Result};
use crate::limits::QueryLimits;

use crate::clock::{ClockModelsTable, SamplesAtClockFunc};
use crate::samples::{ClockVersion, SamplesTable};

/// The first words of statements that write: data, files or the schema.
const WRITES: [&str; 11] =
    ["INSERT", "UPDATE", "DELETE", "MERGE", "TRUNCATE", "COPY", "CREATE", "DROP", "ALTER", "GRANT", "REVOKE"];

/// A read-only SQL session over a store, with the Lockstep tables and functions registered.
///
/// Its queries run under one memory pool of [`QueryLimits::memory_bytes`] (shared by the
/// queries it runs concurrently; clones share it too), spilling where DataFusion can: see
/// [`crate::limits`].
#[derive(Clone)]
pub struct QueryEngine {
    ctx: SessionContext,
    store: Arc<Store>,
    limits: QueryLimits,
    stop: Stop,
}

impl std::fmt::Debug for QueryEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueryEngine").field("store", &self.store.dir()).finish_non_exhaustive()
    }
}

impl QueryEngine {
    /// Builds a session over `store`, limited by [`QueryLimits::from_env`] (the default limit
    /// unless `LOCKSTEP_QUERY_MEMORY_LIMIT_MB` is set).
    pub fn new(store: Arc<Store>) -> Result<Self> {
        Self::with_clock(store, ClockVersion::Newest)
    }

    /// Builds a session whose `samples` table is corrected with the given clock-model version
    /// (for reproducing an earlier result; fails if the version does not exist), limited by
    /// [`QueryLimits::from_env`].
    pub fn with_clock(store: Arc<Store>, clock: ClockVersion) -> Result<Self> {
        Self::with_limits(store, clock, QueryLimits::from_env()?)
    }

    /// Builds a session with the given clock-model version and resource limits.
    pub fn with_limits(store: Arc<Store>, clock: ClockVersion, limits: QueryLimits) -> Result<Self> {
        Self::build(store, clock, limits, None)
    }

    /// Builds a coordinator's session: its queries are planned here and run on the workers of
    /// `cluster` (see [`crate::distributed`]); everything else is as [`Self::with_limits`].
    pub fn distributed(
        store: Arc<Store>,
        clock: ClockVersion,
        limits: QueryLimits,
        cluster: &crate::distributed::ClusterConfig,
    ) -> Result<Self> {
        Self::build(store, clock, limits, Some(cluster))
    }

    fn build(
        store: Arc<Store>,
        clock: ClockVersion,
        limits: QueryLimits,
        cluster: Option<&crate::distributed::ClusterConfig>,
    ) -> Result<Self> {
        clock.resolve(&store)?;
        let stop = Stop::new();
        let config =
            limits.fit(SessionConfig::new().with_information_schema(true)).with_extension(Arc::new(stop.clone()));
        let (catalog, domain) = crate::catalog::store_documents(&store)?;
        let mut builder =
            crate::plan::session_builder_with(config, cluster.is_none()).with_runtime_env(limits.runtime_env()?);
        if let Some(cluster) = cluster {
            builder = crate::distributed::coordinator(builder, cluster, store.clone(), catalog.clone());
        }
        let ctx = SessionContext::new_with_state(builder.build());
        ctx.register_table("samples", Arc::new(SamplesTable::new(store.clone(), catalog.clone()).with_clock(clock)))?;
        ctx.register_table("clock_models", Arc::new(ClockModelsTable::new(store.clone())))?;
        ctx.register_udtf("samples_at_clock", Arc::new(SamplesAtClockFunc::new(store.clone(), catalog.clone())));
        crate::functions::register_all_with_catalog(&ctx, catalog.clone());
        ctx.register_udtf("diagnose", Arc::new(crate::diagnose::DiagnoseFunc::new(store.clone())));
        match domain {
            Some(domain) => domain.register(&ctx)?,
            // The catalog does not depend on a topology: its table is there without one too
            // (QA pass 23a: "table 'metric_catalog' not found" on a store of switch counters).
            None => {
                ctx.register_table("metric_catalog", crate::domain::catalog_table(&catalog)?)?;
            }
        }
        Ok(QueryEngine { ctx, store, limits, stop })
    }

    /// The flag that ends the session's running analyses early (`lag_corr`, `change_points`,
    /// `onset` over a long series compute without yielding): set it when the statement is
    /// cancelled or passes its time limit ([`lockstep_engine::analysis::interrupt`]).
    pub fn stop(&self) -> &Stop {
        &self.stop
    }

    /// The resource limits the session was built with.
    pub fn limits(&self) -> &QueryLimits {
        &self.limits
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
        // The dialect only: `state()` would clone the whole session state for every statement.
        let dialect = self.ctx.state_ref().read().config().options().sql_parser.dialect;
        crate::nesting::check(sql, dialect_from_str(dialect.as_ref()).as_deref().unwrap_or(&GenericDialect {}))?;
        // A statement that writes is refused by what it is, before DataFusion plans it: its
        // planning fails first on other grounds for some (`INSERT … VALUES` of the wrong
        // width, `COPY … TO STDOUT`, which its parser does not know).
        let word: String = crate::script::code_start(sql).chars().take_while(char::is_ascii_alphabetic).collect();
        let word = word.to_ascii_uppercase();
        if WRITES.contains(&word.as_str()) {
            return Err(QueryError::ReadOnly {
                reason: format!("{word} is not supported: only queries run (SELECT, WITH, VALUES, EXPLAIN, SHOW)"),
            });
        }
        self.ctx.sql_with_options(sql, Self::read_only_options()).await.map_err(|e| {
            let msg = e.to_string();
            if msg.contains("not supported") && (msg.contains("DDL") || msg.contains("DML")) {
                QueryError::ReadOnly { reason: msg }
            } else if let Some(table) = missing_domain_table(&msg)
                && !self.ctx.table_exist(table).unwrap_or(true)
            {
                // The domain tables exist once a topology (and jobs) was imported.
                QueryError::DataFusion(datafusion::error::DataFusionError::Plan(format!(
                    "{}: this store has no {} imported (lockstep import of a bundle with topology.json and \
                     jobs.json; docs/topology.md)",
                    root_message(&e),
                    if table == "jobs" { "jobs.json" } else { "topology.json" }
                )))
            } else if msg.contains("not found") && msg.contains(".pg_catalog.") {
                // What ORMs and psql's `\d` ask for first (SQLAlchemy's reflection, pandas'
                // `read_sql_table` and `to_sql`).
                QueryError::DataFusion(datafusion::error::DataFusionError::Plan(format!(
                    "{}: the pg_catalog tables are not provided, so table reflection (psql's \\d, \
                     SQLAlchemy's inspect, pandas' read_sql_table) does not work; read with a SELECT \
                     (pandas.read_sql), and find the columns in information_schema.columns",
                    root_message(&e)
                )))
            } else {
                QueryError::from(e).located(&self.store)
            }
        })
    }

    /// Runs a statement and collects its result (held in memory outside the pool: prefer
    /// [`Self::stream`] for results of unknown size).
    pub async fn collect(&self, sql: &str) -> Result<Vec<RecordBatch>> {
        self.sql(sql).await?.collect().await.map_err(|e| QueryError::from(e).located(&self.store))
    }

    /// Runs a statement and returns its result as a stream of batches, produced as the
    /// consumer pulls them (dropping the stream cancels the query). A query over the memory
    /// limit fails with [`QueryError::MemoryLimit`], at planning or from the stream.
    pub async fn stream(&self, sql: &str) -> Result<QueryStream> {
        Ok(self.stream_planned(sql).await?.0)
    }

    /// [`Self::stream`], and whether the statement runs distributed: its plan was cut into
    /// stages that run on the workers of a [`Self::distributed`] engine. `false` on a local
    /// engine, and for a statement whose stages all have one task (a scan of fewer rows than
    /// [`ClusterConfig::rows_per_task`](crate::distributed::ClusterConfig::rows_per_task), a
    /// single worker, no scan at all), which runs in this process.
    pub async fn stream_planned(&self, sql: &str) -> Result<(QueryStream, bool)> {
        let located = |e| QueryError::from(e).located(&self.store);
        let frame = self.sql(sql).await?;
        let task_ctx = Arc::new(frame.task_ctx());
        let plan = frame.create_physical_plan().await.map_err(located)?;
        // At the root, or under EXPLAIN ANALYZE's node.
        let distributed = plan
            .exists(|p| Ok(p.downcast_ref::<datafusion_distributed::DistributedExec>().is_some()))
            .map_err(located)?;
        let inner = datafusion::physical_plan::execute_stream(plan, task_ctx).map_err(located)?;
        Ok((QueryStream { inner, store: self.store.clone() }, distributed))
    }
}

/// The result batches of [`QueryEngine::stream`], with DataFusion's errors turned into
/// [`QueryError`]s.
pub struct QueryStream {
    inner: SendableRecordBatchStream,
    /// Names the files of errors ([`QueryError::located`]).
    store: Arc<Store>,
}

impl QueryStream {
    /// The result's schema (known before the first batch).
    pub fn schema(&self) -> SchemaRef {
        self.inner.schema()
    }
}

impl std::fmt::Debug for QueryStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueryStream").field("schema", &self.inner.schema()).finish_non_exhaustive()
    }
}

impl Stream for QueryStream {
    type Item = Result<RecordBatch>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let item = std::task::ready!(this.inner.as_mut().poll_next(cx));
        Poll::Ready(item.map(|r| r.map_err(|e| QueryError::from(e).located(&this.store))))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.inner.size_hint()
    }
}

/// A planning error's own message, without DataFusion's "Error during planning: " (a hint
/// that extends it is a planning error again, which adds the prefix once).
fn root_message(e: &datafusion::error::DataFusionError) -> String {
    match e.find_root() {
        datafusion::error::DataFusionError::Plan(m) => m.clone(),
        other => other.to_string(),
    }
}

/// The domain table (`topology_nodes`, …, `jobs`) a "table … not found" planning error names.
fn missing_domain_table(message: &str) -> Option<&'static str> {
    const DOMAIN: [&str; 5] = ["topology_nodes", "topology_nics", "topology_switches", "topology_links", "jobs"];
    if !message.contains("not found") {
        return None;
    }
    DOMAIN
        .into_iter()
        .find(|t| message.contains(&format!(".{t}' not found")) || message.contains(&format!("'{t}' not found")))
}
