//! Distributed SQL on [`datafusion_distributed`]: a coordinator plans, workers execute.
//!
//! The coordinator is an ordinary [`crate::QueryEngine`] whose session has the distributed
//! planner ([`ClusterConfig`]): DataFusion's physical plan is cut into stages at its
//! repartitions, each stage runs as tasks on the workers (Arrow Flight over gRPC), and data
//! moves between stages by hash shuffle (`NetworkShuffleExec`) or coalescing
//! (`NetworkCoalesceExec`). A worker ([`worker`]) is a gRPC service that opens the same dataset
//! read-only (the same `--data-url`, or the same directory) and knows every Lockstep function
//! by name, so plans carrying `lag_corr`, `ddsketch` or `quantile_cont` decode there.
//!
//! The leaf of every plan over `samples` is a [`SamplesExec`]. [`SamplesCodec`] sends it to a
//! worker as its list of scan units (row groups of data files by path relative to the store,
//! plus copies of any write-buffer rows the coordinator holds), the clock-model version the
//! coordinator resolved, the label columns and the projection. The scale-up handler splits the
//! coordinator's units into one scan per task with about equal rows, so each unit — each
//! data-file byte range — is read by exactly one worker. The task count follows the rows to
//! read ([`ClusterConfig::rows_per_task`]), capped by the number of workers.
//!
//! Aggregates then distribute as DataFusion plans them: mergeable ones (`count`, `sum`,
//! `ddsketch`) partially on every task and finally after a shuffle on the group keys; whole-
//! series ones (`lag_corr`, `change_points`, `onset`, exact quantiles) after a hash shuffle of
//! the rows on the group keys (`series_id`, `host`, …), each group complete on one task.

use std::fmt;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::{SessionState, SessionStateBuilder, TaskContext};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::SessionContext;
use datafusion_distributed::{
    DesiredTaskCountEvent, DesiredTaskCountEventResponse, DistributedExt, DistributedLeafExec, ScaleUpLeafNodeEvent,
    ScaleUpLeafNodeEventResponse, SessionStateBuilderExt, Worker, WorkerQueryContext, WorkerResolver,
    WorkerSessionBuilder,
};
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalProtoConverterExtension};
use lockstep_engine::Store;
use lockstep_engine::datafile::ValueRange;
use lockstep_engine::manifest::StoreId;
use lockstep_engine::metrics::MetricCatalog;
use lockstep_engine::model::Rows;
use lockstep_engine::store::{PortablePart, PortableScan};
use prost::Message;
use roaring::RoaringBitmap;
use url::Url;

use crate::samples::exec::{PortableSamples, SamplesExec};

/// Default rows of stored samples per task of a scan stage.
pub const DEFAULT_ROWS_PER_TASK: u64 = 4 << 20;

/// How a coordinator distributes its queries.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// Worker URLs (`http://host:port`).
    pub workers: Vec<Url>,
    /// Rows of stored samples per task of a scan stage: a scan of `n` rows asks for
    /// `ceil(n / rows_per_task)` tasks (at most one per worker). Smaller scans run on one task.
    pub rows_per_task: u64,
    /// The dataset's name (its URL, or its canonical directory); workers refuse plans for
    /// another dataset.
    pub dataset: String,
}

impl ClusterConfig {
    /// Parses a comma-separated worker list (`host:port` or `http://host:port`).
    pub fn parse_workers(list: &str) -> Result<Vec<Url>, String> {
        let mut out: Vec<Url> = Vec::new();
        for w in list.split(',').map(str::trim) {
            if w.is_empty() {
                return Err(format!("{list:?}: an empty worker address (expected host:port,host:port,…)"));
            }
            let text = if w.contains("://") { w.to_string() } else { format!("http://{w}") };
            let url = Url::parse(&text).map_err(|e| format!("worker {w:?}: {e}"))?;
            if url.scheme() != "http" || url.host_str().is_none() || url.port_or_known_default().is_none() {
                return Err(format!("worker {w:?}: expected host:port or http://host:port"));
            }
            // A worker listed twice would get two tasks' shares in the plan's count of workers.
            if out.contains(&url) {
                return Err(format!("worker {w:?} is listed twice"));
            }
            out.push(url);
        }
        Ok(out)
    }
}

/// How long a coordinator waits to connect to a worker.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// How often a coordinator pings each worker's connection, and how long it waits for the
/// answer before it gives the connection up: a worker that accepted the connection but stopped
/// answering (a stopped process, a partition) fails the query instead of hanging it.
const KEEPALIVE: (std::time::Duration, std::time::Duration) =
    (std::time::Duration::from_secs(5), std::time::Duration::from_secs(10));

/// One channel per worker, built with the timeouts above (datafusion-distributed's default
/// resolver connects without any), reused by every request of the process.
#[derive(Default)]
struct WorkerChannels {
    channels: tokio::sync::Mutex<std::collections::HashMap<Url, datafusion_distributed::grpc::BoxCloneSyncChannel>>,
}

#[async_trait::async_trait]
impl datafusion_distributed::ChannelResolver for WorkerChannels {
    async fn get_worker_client_for_url(&self, url: &Url) -> DfResult<Box<dyn datafusion_distributed::WorkerChannel>> {
        use datafusion_distributed::grpc::{BoxCloneSyncChannel, create_worker_client};
        let mut channels = self.channels.lock().await;
        if let Some(channel) = channels.get(url) {
            return Ok(create_worker_client(channel.clone()));
        }
        let failed = |reason: String| DataFusionError::Execution(format!("worker {url}: {reason}"));
        let endpoint = tonic::transport::Channel::from_shared(url.to_string())
            .map_err(|e| failed(format!("not a worker address: {e}")))?
            .connect_timeout(CONNECT_TIMEOUT)
            .http2_keep_alive_interval(KEEPALIVE.0)
            .keep_alive_timeout(KEEPALIVE.1)
            .keep_alive_while_idle(true);
        // The HTTP/2 handshake is not under the connect timeout: bound the whole connection.
        let channel = match tokio::time::timeout(CONNECT_TIMEOUT + KEEPALIVE.1, endpoint.connect()).await {
            Ok(Ok(channel)) => channel,
            Ok(Err(e)) => return Err(failed(format!("cannot connect: {e}"))),
            Err(_) => return Err(failed(format!("no answer within {:?}", CONNECT_TIMEOUT + KEEPALIVE.1))),
        };
        let channel = BoxCloneSyncChannel::new(channel);
        channels.insert(url.clone(), channel.clone());
        Ok(create_worker_client(channel))
    }
}

#[derive(Debug, Clone)]
struct StaticWorkers(Vec<Url>);

impl WorkerResolver for StaticWorkers {
    fn get_urls(&self) -> DfResult<Vec<Url>> {
        Ok(self.0.clone())
    }
}

/// Adds the distributed planner to a coordinator's session: workers, Lockstep's codec and the
/// `samples` scan's task-count and split handlers.
pub(crate) fn coordinator(
    builder: SessionStateBuilder,
    cluster: &ClusterConfig,
    store: Arc<Store>,
    catalog: Arc<MetricCatalog>,
) -> SessionStateBuilder {
    let rows_per_task = cluster.rows_per_task.max(1);
    let source = Arc::new(DatasetSource::fixed(cluster.dataset.clone(), store, catalog));
    builder
        .with_distributed_worker_resolver(StaticWorkers(cluster.workers.clone()))
        .with_distributed_channel_resolver(WorkerChannels::default())
        .with_distributed_planner()
        .with_distributed_user_codec(SamplesCodec { source })
        .with_distributed_desired_task_count_handler(move |event: DesiredTaskCountEvent<'_>| {
            let exec = event.plan.downcast_ref::<SamplesExec>()?;
            let tasks = exec.rows().div_ceil(rows_per_task).max(1);
            Some(Ok(DesiredTaskCountEventResponse::desired(usize::try_from(tasks).unwrap_or(usize::MAX))))
        })
        .with_distributed_scale_up_leaf_node_handler(|event: ScaleUpLeafNodeEvent<'_>| {
            let exec = event.plan.downcast_ref::<SamplesExec>()?;
            let variants =
                exec.split_tasks(event.task_count).into_iter().map(|v| Arc::new(v) as Arc<dyn ExecutionPlan>);
            Some(
                DistributedLeafExec::try_new(Arc::clone(event.plan), variants)
                    .map(|leaf| ScaleUpLeafNodeEventResponse::new(Arc::new(leaf))),
            )
        })
}

/// Opens the dataset a process serves: a fixed store (the coordinator) or a fresh read-only
/// snapshot when a plan needs newer series or clock models than the last one (a worker).
pub struct DatasetSource {
    dataset: String,
    open: Option<OpenFn>,
    current: Mutex<Option<Snapshot>>,
}

/// A read-only snapshot of the dataset and its metric catalog.
type Snapshot = (Arc<Store>, Arc<MetricCatalog>);

/// Opens a read-only snapshot of the dataset, pinned to a node layout (empty: one store, or
/// the newest layout).
type OpenFn = Box<dyn Fn(&[(String, u32)]) -> Result<Store, String> + Send + Sync>;

impl fmt::Debug for DatasetSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DatasetSource").field("dataset", &self.dataset).finish_non_exhaustive()
    }
}

impl DatasetSource {
    fn fixed(dataset: String, store: Arc<Store>, catalog: Arc<MetricCatalog>) -> Self {
        DatasetSource { dataset, open: None, current: Mutex::new(Some((store, catalog))) }
    }

    /// A source that opens `dataset` with `open` (a read-only snapshot) when first needed
    /// and again whenever a plan was made on a newer snapshot.
    pub fn reopening(
        dataset: String,
        open: impl Fn(&[(String, u32)]) -> Result<Store, String> + Send + Sync + 'static,
    ) -> Self {
        DatasetSource { dataset, open: Some(Box::new(open)), current: Mutex::new(None) }
    }

    /// The metric catalog of the current snapshot (opening one if there is none).
    fn catalog(&self) -> DfResult<Arc<MetricCatalog>> {
        let mut current = self.lock()?;
        match current.as_ref() {
            Some((_, catalog)) => Ok(catalog.clone()),
            None => Ok(self.reopen(&mut current, &[])?.1),
        }
    }

    /// The store and metric catalog to decode `plan` with: the current snapshot if it has the
    /// plan's series ids and clock models (and `fresh` is false) or if this source cannot
    /// reopen (the coordinator's own store), else a new snapshot pinned to the plan's layout.
    fn for_plan(&self, plan: &PortableSamples, fresh: bool) -> DfResult<Snapshot> {
        let mut current = self.lock()?;
        if let Some((store, catalog)) = current.as_ref()
            && (self.open.is_none() || (!fresh && covers(store, plan)))
        {
            return Ok((store.clone(), catalog.clone()));
        }
        self.reopen(&mut current, &plan.layout)
    }

    fn lock(&self) -> DfResult<std::sync::MutexGuard<'_, Option<Snapshot>>> {
        self.current.lock().map_err(|_| DataFusionError::Internal("dataset source lock poisoned".into()))
    }

    /// Opens a new snapshot pinned to `layout` and makes it the current one.
    fn reopen(&self, current: &mut Option<Snapshot>, layout: &[(String, u32)]) -> DfResult<Snapshot> {
        let Some(open) = &self.open else {
            return Err(DataFusionError::Internal("no store to decode the samples scan with".into()));
        };
        let store =
            Arc::new(open(layout).map_err(|e| DataFusionError::Execution(format!("opening {}: {e}", self.dataset)))?);
        let catalog = catalog_of(&store)?;
        *current = Some((store.clone(), catalog.clone()));
        Ok((store, catalog))
    }
}

/// The store's metric catalog (built-in metrics plus its `metrics.toml` and topology).
fn catalog_of(store: &Store) -> DfResult<Arc<MetricCatalog>> {
    crate::catalog::store_catalog(store).map(Arc::new).map_err(|e| DataFusionError::External(Box::new(e)))
}

/// Whether `store` has the series ids (the same dataset layout, every series) and the
/// clock-model version `plan` was made with.
fn covers(store: &Store, plan: &PortableSamples) -> bool {
    if store.dataset_layout() != plan.layout || !same_stores(store, plan) {
        return false;
    }
    let series = store.with_catalog(|c| c.len() as u64).unwrap_or(0);
    let clocks = plan.clock_version == 0 || matches!(store.clock_models_version(plan.clock_version), Ok(Some(_)));
    series >= plan.series_count && clocks
}

/// Whether `store` is (or its nodes are) the store(s) `plan` was made on, by store id; a plan
/// without ids (an older planner) is taken as it is.
fn same_stores(store: &Store, plan: &PortableSamples) -> bool {
    plan.stores.is_empty() || store.store_ids().is_ok_and(|ids| ids == plan.stores)
}

/// Whether `e` is the engine's "file not in this snapshot".
fn is_file_gone(e: &DataFusionError) -> bool {
    match e {
        DataFusionError::External(inner) => {
            matches!(inner.downcast_ref::<lockstep_engine::Error>(), Some(lockstep_engine::Error::ScanFileGone { .. }))
        }
        DataFusionError::Context(_, inner) => is_file_gone(inner),
        _ => false,
    }
}

/// The codec of Lockstep's physical nodes (the `samples` scan) for distributed plans.
#[derive(Debug, Clone)]
pub struct SamplesCodec {
    source: Arc<DatasetSource>,
}

impl SamplesCodec {
    /// An error unless `store` is the store(s) `portable` was planned on.
    fn check_stores(&self, store: &Store, portable: &PortableSamples) -> DfResult<()> {
        // The same path or URL can hold another store: on another machine, or replaced since
        // (QA pass 22: a worker answered from its own store, and the coordinator printed a
        // wrong result). A snapshot of another store was reopened by `for_plan`; still another
        // is not the dataset the plan reads.
        if !same_stores(store, portable) {
            let ids = |ids: &[Option<StoreId>]| {
                ids.iter().map(|id| id.map_or_else(|| "(none)".to_string(), |id| id.to_string())).collect::<Vec<_>>()
            };
            return Err(DataFusionError::Plan(format!(
                "this worker's store at {:?} is not the coordinator's: store id {} here, {} in the plan (the same \
                 path holds another store on this machine; start workers on the coordinator's dataset)",
                self.source.dataset,
                ids(&store.store_ids().map_err(|e| DataFusionError::External(Box::new(e)))?).join(","),
                ids(&portable.stores).join(",")
            )));
        }
        Ok(())
    }
}

impl PhysicalExtensionCodec for SamplesCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        _ctx: &TaskContext,
        _proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        if !inputs.is_empty() {
            return Err(DataFusionError::Internal(format!("SamplesExec has no inputs, got {}", inputs.len())));
        }
        let proto = SamplesScanProto::decode(buf)
            .map_err(|e| DataFusionError::Plan(format!("decoding a samples scan: {e}")))?;
        if proto.dataset != self.source.dataset {
            return Err(DataFusionError::Plan(format!(
                "this worker serves dataset {:?}, the plan reads {:?} (start workers with the coordinator's --data-url / --data-dir)",
                self.source.dataset, proto.dataset
            )));
        }
        let portable = proto.into_portable()?;
        let (store, catalog) = self.source.for_plan(&portable, false)?;
        self.check_stores(&store, &portable)?;
        match SamplesExec::from_portable(&store, &catalog, &portable) {
            // A file flushed after this worker's snapshot: take a newer one, once.
            Err(e) if is_file_gone(&e) => {
                let (store, catalog) = self.source.for_plan(&portable, true)?;
                self.check_stores(&store, &portable)?;
                Ok(Arc::new(SamplesExec::from_portable(&store, &catalog, &portable)?))
            }
            other => Ok(Arc::new(other?)),
        }
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        _proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> DfResult<()> {
        let Some(exec) = node.downcast_ref::<SamplesExec>() else {
            return Err(DataFusionError::Internal(format!("cannot encode {} for a worker", node.name())));
        };
        let proto = SamplesScanProto::from_portable(&self.source.dataset, exec.to_portable()?)?;
        proto.encode(buf).map_err(|e| DataFusionError::Internal(format!("encoding a samples scan: {e}")))
    }
}

/// The session every query runs in on a worker: Lockstep's functions and codec.
#[derive(Debug, Clone)]
pub struct WorkerSession {
    source: Arc<DatasetSource>,
}

#[async_trait]
impl WorkerSessionBuilder for WorkerSession {
    async fn build_session_state(&self, ctx: WorkerQueryContext) -> DfResult<SessionState> {
        let state = ctx
            .builder
            .with_physical_optimizer_rule(Arc::new(crate::plan::WholeSeriesAggregates::new(false)))
            .with_distributed_user_codec(SamplesCodec { source: self.source.clone() })
            .build();
        let ctx = SessionContext::new_with_state(state);
        let source = self.source.clone();
        let catalog = tokio::task::spawn_blocking(move || source.catalog())
            .await
            .map_err(|e| DataFusionError::Execution(format!("opening the dataset: {e}")))??;
        crate::functions::register_all_with_catalog(&ctx, catalog);
        Ok(ctx.state())
    }
}

/// A worker over `source`: mount [`Worker::into_worker_server`] on a tonic server.
pub fn worker(source: DatasetSource, limits: &crate::limits::QueryLimits) -> crate::error::Result<Worker> {
    let session = WorkerSession { source: Arc::new(source) };
    Ok(Worker::from_session_builder(session).with_runtime_env(limits.runtime_env()?))
}

// --- wire format of the samples scan --------------------------------------------------------

#[derive(Clone, PartialEq, Message)]
struct SamplesScanProto {
    #[prost(string, tag = "1")]
    dataset: String,
    #[prost(string, repeated, tag = "2")]
    labels: Vec<String>,
    #[prost(uint32, repeated, tag = "3")]
    output: Vec<u32>,
    #[prost(uint64, tag = "4")]
    clock_version: u64,
    #[prost(uint64, optional, tag = "5")]
    limit: Option<u64>,
    #[prost(uint32, repeated, tag = "6")]
    partition_units: Vec<u32>,
    #[prost(uint64, tag = "7")]
    series_count: u64,
    #[prost(message, optional, tag = "8")]
    scan: Option<ScanProto>,
    #[prost(message, repeated, tag = "9")]
    layout: Vec<NodeProto>,
    /// The store ids (`Store::store_ids`, hex; empty for a store without one).
    #[prost(string, repeated, tag = "10")]
    stores: Vec<String>,
}

#[derive(Clone, PartialEq, Message)]
struct NodeProto {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(uint32, tag = "2")]
    series: u32,
}

#[derive(Clone, PartialEq, Message)]
struct ScanProto {
    #[prost(int64, optional, tag = "1")]
    time_lo: Option<i64>,
    #[prost(int64, optional, tag = "2")]
    time_hi: Option<i64>,
    #[prost(bytes = "vec", optional, tag = "3")]
    series: Option<Vec<u8>>,
    #[prost(string, repeated, tag = "4")]
    files: Vec<String>,
    #[prost(message, repeated, tag = "5")]
    buffered: Vec<RowsProto>,
    #[prost(message, repeated, tag = "6")]
    units: Vec<UnitProto>,
    /// The wanted value range, both bounds or neither (see `ScanRequest::value`).
    #[prost(double, optional, tag = "7")]
    value_lo: Option<f64>,
    #[prost(double, optional, tag = "8")]
    value_hi: Option<f64>,
}

#[derive(Clone, PartialEq, Message)]
struct RowsProto {
    #[prost(uint32, repeated, tag = "1")]
    series: Vec<u32>,
    #[prost(int64, repeated, tag = "2")]
    time: Vec<i64>,
    #[prost(double, repeated, tag = "3")]
    value: Vec<f64>,
}

#[derive(Clone, PartialEq, Message)]
struct UnitProto {
    #[prost(message, repeated, tag = "1")]
    parts: Vec<PartProto>,
}

#[derive(Clone, PartialEq, Message)]
struct PartProto {
    #[prost(uint32, tag = "1")]
    rank: u32,
    #[prost(bool, tag = "2")]
    buffered: bool,
    #[prost(uint32, tag = "3")]
    index: u32,
    #[prost(uint32, tag = "4")]
    group: u32,
}

fn to_u32(n: usize, what: &str) -> DfResult<u32> {
    u32::try_from(n).map_err(|_| DataFusionError::Internal(format!("samples scan: {what} {n} too large")))
}

impl SamplesScanProto {
    fn from_portable(dataset: &str, p: PortableSamples) -> DfResult<Self> {
        let scan = match p.scan {
            None => None,
            Some(scan) => {
                let series = match &scan.series {
                    None => None,
                    Some(set) => {
                        let mut bytes = Vec::with_capacity(set.serialized_size());
                        set.serialize_into(&mut bytes)
                            .map_err(|e| DataFusionError::Internal(format!("serialising a series set: {e}")))?;
                        Some(bytes)
                    }
                };
                let files = scan
                    .files
                    .iter()
                    .map(|f| {
                        f.to_str().map(str::to_string).ok_or_else(|| {
                            DataFusionError::Internal(format!("data file path is not UTF-8: {}", f.display()))
                        })
                    })
                    .collect::<DfResult<Vec<_>>>()?;
                let buffered = scan
                    .buffered
                    .into_iter()
                    .map(|r| RowsProto { series: r.series, time: r.time, value: r.value })
                    .collect();
                let units = scan
                    .units
                    .into_iter()
                    .map(|parts| UnitProto {
                        parts: parts
                            .into_iter()
                            .map(|(rank, part)| match part {
                                PortablePart::Group { file, group } => {
                                    PartProto { rank, buffered: false, index: file, group }
                                }
                                PortablePart::Buffered { buffer } => {
                                    PartProto { rank, buffered: true, index: buffer, group: 0 }
                                }
                            })
                            .collect(),
                    })
                    .collect();
                Some(ScanProto {
                    time_lo: scan.time.map(|t| t.0),
                    time_hi: scan.time.map(|t| t.1),
                    series,
                    files,
                    buffered,
                    units,
                    value_lo: scan.value.map(|v| v.lo),
                    value_hi: scan.value.map(|v| v.hi),
                })
            }
        };
        Ok(SamplesScanProto {
            dataset: dataset.to_string(),
            labels: p.labels,
            output: p.output.iter().map(|&c| to_u32(c, "column")).collect::<DfResult<_>>()?,
            clock_version: p.clock_version,
            limit: p.limit.map(|l| l as u64),
            partition_units: p.partition_units.iter().map(|&n| to_u32(n, "unit count")).collect::<DfResult<_>>()?,
            series_count: p.series_count,
            scan,
            layout: p.layout.into_iter().map(|(name, series)| NodeProto { name, series }).collect(),
            stores: p.stores.iter().map(|id| id.map(|id| id.to_string()).unwrap_or_default()).collect(),
        })
    }

    fn into_portable(self) -> DfResult<PortableSamples> {
        let bad = |what: String| DataFusionError::Plan(format!("malformed samples scan: {what}"));
        let scan = match self.scan {
            None => None,
            Some(scan) => {
                let time = match (scan.time_lo, scan.time_hi) {
                    (Some(lo), Some(hi)) => Some((lo, hi)),
                    (None, None) => None,
                    _ => return Err(bad("half a time range".into())),
                };
                let value = match (scan.value_lo, scan.value_hi) {
                    (Some(lo), Some(hi)) => {
                        Some(ValueRange::new(lo, hi).ok_or_else(|| bad("a NaN value bound".into()))?)
                    }
                    (None, None) => None,
                    _ => return Err(bad("half a value range".into())),
                };
                let series = match scan.series {
                    None => None,
                    Some(bytes) => Some(
                        RoaringBitmap::deserialize_from(bytes.as_slice())
                            .map_err(|e| bad(format!("series set: {e}")))?,
                    ),
                };
                let mut buffered = Vec::with_capacity(scan.buffered.len());
                for r in scan.buffered {
                    if r.time.len() != r.series.len() || r.value.len() != r.series.len() {
                        return Err(bad("ragged buffered rows".into()));
                    }
                    buffered.push(Rows { series: r.series, time: r.time, value: r.value });
                }
                let units = scan
                    .units
                    .into_iter()
                    .map(|u| {
                        u.parts
                            .into_iter()
                            .map(|p| {
                                let part = if p.buffered {
                                    PortablePart::Buffered { buffer: p.index }
                                } else {
                                    PortablePart::Group { file: p.index, group: p.group }
                                };
                                (p.rank, part)
                            })
                            .collect()
                    })
                    .collect();
                Some(PortableScan {
                    time,
                    series,
                    value,
                    files: scan.files.into_iter().map(Into::into).collect(),
                    buffered,
                    units,
                })
            }
        };
        Ok(PortableSamples {
            labels: self.labels,
            output: self.output.into_iter().map(|c| c as usize).collect(),
            clock_version: self.clock_version,
            limit: self.limit.map(|l| usize::try_from(l).unwrap_or(usize::MAX)),
            partition_units: self.partition_units.into_iter().map(|n| n as usize).collect(),
            series_count: self.series_count,
            scan,
            layout: self.layout.into_iter().map(|n| (n.name, n.series)).collect(),
            stores: self
                .stores
                .iter()
                .map(|id| match id.as_str() {
                    "" => Ok(None),
                    id => id.parse().map(Some).map_err(|e| bad(format!("store id {id:?}: {e}"))),
                })
                .collect::<DfResult<_>>()?,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn worker_lists_parse_and_reject_garbage() {
        let urls = ClusterConfig::parse_workers("127.0.0.1:7701, http://localhost:7702").unwrap();
        assert_eq!(urls.len(), 2);
        assert_eq!(urls[0].as_str(), "http://127.0.0.1:7701/");
        assert!(ClusterConfig::parse_workers("grpc://x:1").is_err());
        assert!(ClusterConfig::parse_workers("not a url").is_err());
        // Empty entries and a worker listed twice (QA pass 22: accepted without a word).
        for bad in ["", "a:1,,b:2", "a:1,"] {
            assert!(ClusterConfig::parse_workers(bad).unwrap_err().contains("an empty worker address"), "{bad}");
        }
        let twice = ClusterConfig::parse_workers("127.0.0.1:7701,http://127.0.0.1:7701").unwrap_err();
        assert!(twice.contains("listed twice"), "{twice}");
    }

    /// Garbage bytes and inconsistent messages are errors, not panics.
    #[test]
    fn malformed_scans_are_errors() {
        assert!(SamplesScanProto::decode(&b"\xff\xff\xff"[..]).is_err());
        let half =
            SamplesScanProto { scan: Some(ScanProto { time_lo: Some(1), ..Default::default() }), ..Default::default() };
        assert!(half.into_portable().is_err());
        for (lo, hi) in [(Some(1.0), None), (Some(f64::NAN), Some(2.0))] {
            let bad = SamplesScanProto {
                scan: Some(ScanProto { value_lo: lo, value_hi: hi, ..Default::default() }),
                ..Default::default()
            };
            assert!(bad.into_portable().is_err(), "{lo:?} {hi:?}");
        }
        let ragged = SamplesScanProto {
            scan: Some(ScanProto {
                buffered: vec![RowsProto { series: vec![1, 2], time: vec![1], value: vec![] }],
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(ragged.into_portable().is_err());
        let bits = SamplesScanProto {
            scan: Some(ScanProto { series: Some(vec![1, 2, 3]), ..Default::default() }),
            ..Default::default()
        };
        assert!(bits.into_portable().is_err());
    }
}
