//! The `samples` table: every stored sample, one row each, with its series' labels as columns.
//!
//! Columns: `time` (Timestamp ns, **corrected** reference time), `metric`, `value` (Float64),
//! `series_id` (UInt32), `domain` and `entity` (from the metric catalog; null for unknown
//! metrics), `local_time` (Timestamp ns, the raw timestamp in the clock of `host`),
//! `time_uncertainty` (Int64 ns, the clock model's bound; null when the host has no clock
//! model), then one nullable string column per label key (`host` first, then in first-seen
//! order). `metric`, `domain`, `entity` and the labels are `Utf8View`.
//!
//! Clock correction happens here, at read time, from one snapshot of the store's clock models
//! (the newest version, or a pinned one for reproducibility): `time = local_time − θ_host(local_time)`
//! in integer arithmetic (see `lockstep_engine::clock`), one model lookup per run of a series.
//! The correction and the corrected-to-local range mapping are in `read`, shared with the
//! diagnosis (`crate::diagnose`), which reads through them too. A
//! host without a model keeps its raw time. Filters on `time`, `local_time`, `metric`, `host` and
//! labels are pushed into the engine scan (labels via the roaring postings; any other
//! deterministic filter on the series' columns, such as `metric LIKE 'DCGM%'`, is evaluated once
//! per series, see [`pushdown`]); a corrected-time range
//! is mapped to the union of the hosts' local-time ranges, which is exact per host because every
//! correction is monotonic.
//!
//! The scan is the engine's [`SplitScan`]: units smaller than a time partition (a Parquet row
//! group; a slice of the write buffer; parts of different files or the buffer that overlap in
//! series and time, merged last-write-wins), each assigned to one DataFusion partition (largest
//! first to the least-loaded partition) and read by exactly one: a partition that has read its
//! own units takes the remaining ones of the running partition with the most left
//! (`samples/steal.rs`), so every data-file byte a query needs is read and decoded once, and
//! the partitions end together. Each partition runs on a blocking thread and holds one unit's
//! chunk (a row group) at a time, counted against the query's memory pool (`SamplesScan[i]`,
//! see [`crate::limits`]).
//!
//! Only what the query projects is decoded and built: values only for `value`, local times only
//! for `time`, `local_time` and `time_uncertainty` (clock correction only for `time` and
//! `time_uncertainty`), series ids only for the columns derived from the series; the string
//! columns are gathered from per-series arrays by series id (16-byte views, no string copies). `count(*)` (an empty projection) over row groups a
//! filter covers entirely reads no column at all: the row counts come from the file footers.
//! Over the whole table, where no sources overlap, the scan states its exact row count
//! ([`exec::SamplesExec::exact_rows`]) and DataFusion answers `count(*)` without running it.
//! The per-series string values (a column on its first use) and clock lookup are built once
//! per open store and reused by later scans in the process (a second scan in one statement, later statements,
//! other sessions of a server) while the series catalog, the label keys, the metric catalog
//! and the clock snapshot stay the same.

pub mod exec;
pub mod pushdown;
pub(crate) mod read;
mod steal;

use std::sync::Arc;

use arrow::array::{
    ArrayRef, Float64Array, Int64Array, RecordBatch, RecordBatchOptions, StringViewArray, TimestampNanosecondArray,
    UInt32Array,
};
use arrow::buffer::{NullBuffer, ScalarBuffer};
use arrow::datatypes::ArrowNativeType;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use async_trait::async_trait;
use datafusion::catalog::{Session, TableProvider};
use datafusion::datasource::TableType;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::memory_pool::MemoryReservation;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_plan::ExecutionPlan;
use lockstep_engine::Store;
use lockstep_engine::clock::{ClockModel, ClockSet, UNCERTAINTY_UNKNOWN};
use lockstep_engine::datafile::{Chunk, Columns};
use lockstep_engine::manifest::StoreId;
use lockstep_engine::metrics::MetricCatalog;
use lockstep_engine::store::{ScanRequest, ScanUnit, SeriesSlice, SplitScan};
use roaring::RoaringBitmap;

use pushdown::Pushdown;
use read::SeriesClocks;

/// Fixed columns before the label columns.
pub const FIXED_COLUMNS: [&str; 8] =
    ["time", "metric", "value", "series_id", "domain", "entity", "local_time", "time_uncertainty"];

/// Which clock-model version a table corrects with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClockVersion {
    /// The newest version at the time each query is planned.
    #[default]
    Newest,
    /// A fixed version (0 = no correction at all: every host unknown).
    Pinned(u64),
}

impl ClockVersion {
    /// Resolves the version against the store.
    pub fn resolve(self, store: &Store) -> DfResult<Arc<ClockSet>> {
        match self {
            ClockVersion::Newest => store.clock_models().map_err(engine_err),
            ClockVersion::Pinned(v) => store.clock_models_version(v).map_err(engine_err)?.ok_or_else(|| {
                let known = store
                    .with_clocks(|r| Ok(r.versions()))
                    .map(|v| format!("{v:?}"))
                    .unwrap_or_else(|_| "unknown".into());
                DataFusionError::Plan(format!(
                    "clock model version {v} does not exist (stored versions: {known}; 0 = uncorrected)"
                ))
            }),
        }
    }
}

/// The `samples` table over a store.
#[derive(Debug)]
pub struct SamplesTable {
    store: Arc<Store>,
    catalog: Arc<MetricCatalog>,
    clock: ClockVersion,
    /// The per-series string values and clock lookup last built for this store, shared by
    /// every table over it in this process.
    dictionaries: Arc<Dictionaries>,
}

impl SamplesTable {
    /// A table over `store`, corrected with the newest clock models.
    pub fn new(store: Arc<Store>, catalog: Arc<MetricCatalog>) -> Self {
        let dictionaries = Dictionaries::of(&store);
        SamplesTable { store, catalog, clock: ClockVersion::Newest, dictionaries }
    }

    /// The same table corrected with a given clock-model version.
    pub fn with_clock(mut self, clock: ClockVersion) -> Self {
        self.clock = clock;
        self
    }

    fn label_keys(&self) -> Vec<String> {
        self.store.with_catalog(|c| c.label_keys()).unwrap_or_default()
    }
}

/// The type of the string columns (metric, domain, entity, labels): string views, gathered
/// per row from per-series values (a view is a 16-byte copy; strings of up to 12 bytes are
/// inline, longer ones share the per-series buffers). DataFusion groups and compares views
/// directly; the aggregation of `GROUP BY host` took 3.5-8x longer over dictionary columns
/// (`benches/README.md`, seventh round).
fn label_type() -> DataType {
    DataType::Utf8View
}

fn schema_for(labels: &[String]) -> SchemaRef {
    let mut fields = vec![
        Field::new("time", DataType::Timestamp(TimeUnit::Nanosecond, None), false),
        Field::new("metric", label_type(), false),
        Field::new("value", DataType::Float64, false),
        Field::new("series_id", DataType::UInt32, false),
        Field::new("domain", label_type(), true),
        Field::new("entity", label_type(), true),
        Field::new("local_time", DataType::Timestamp(TimeUnit::Nanosecond, None), false),
        Field::new("time_uncertainty", DataType::Int64, true),
    ];
    fields.extend(labels.iter().map(|k| Field::new(k, label_type(), true)));
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
                if pushdown::series_level(f, &labels) {
                    TableProviderFilterPushDown::Exact
                } else if pushdown::is_pushable(f, &labels) {
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
        let full = schema_for(&labels);
        let pushdown = pushdown::analyze(filters, &labels);
        let clocks = self.clock.resolve(&self.store)?;
        let per_series: Vec<&Expr> = filters.iter().filter(|f| pushdown::series_level(f, &labels)).collect();
        let source = DictSource { store: &self.store, catalog: &self.catalog, cache: &self.dictionaries };
        let plan = ScanPlan::new(source, clocks, &labels, &pushdown, |within, dict_values| {
            pushdown::series_set(state, &per_series, within, dict_values, &labels)
        })?;
        let output: Vec<usize> = projection.cloned().unwrap_or_else(|| (0..full.fields().len()).collect());
        let schema = Arc::new(full.project(&output)?);
        let split = match &plan.request {
            Some(request) => Some(self.store.split_scan(request.clone()).map_err(engine_err)?),
            None => None,
        };
        let shards = state.config().target_partitions().max(1);
        let mut assignment = split.as_ref().map(|s| assign(s.units(), shards)).unwrap_or_default();
        assignment.resize(shards, Vec::new());
        let job = Arc::new(ScanJob {
            decode: decode_columns(&output),
            output,
            plan,
            split,
            labels,
            root: self.store.dir().to_path_buf(),
            layout: self.store.dataset_layout(),
            stores: self.store.store_ids().map_err(engine_err)?,
        });
        Ok(Arc::new(exec::SamplesExec::new(schema, job, assignment, limit)))
    }
}

/// Indices of the output columns that need the clock correction (`time`, `time_uncertainty`).
const CORRECTED: [usize; 2] = [0, 7];

/// What to decode for the output columns (indices into the full schema): series ids for every
/// column derived from the series (and for the correction, which is per host), local times for
/// the three time columns, values for `value`. None of them: row counts only (`count(*)`).
fn decode_columns(output: &[usize]) -> Columns {
    Columns {
        series: output.iter().any(|&c| c != 2 && c != 6),
        time: output.iter().any(|&c| c == 0 || c == 6 || c == 7),
        value: output.contains(&2),
    }
}

/// Units per shard: the largest unit first to the least-loaded shard (deterministic, so a
/// re-executed plan reads the same units; each unit in exactly one shard). Each shard then
/// reads its units in store order.
fn assign(units: &[ScanUnit], shards: usize) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..units.len()).collect();
    order.sort_by_key(|&u| std::cmp::Reverse(units[u].rows()));
    let mut load = vec![0u64; shards];
    let mut out = vec![Vec::new(); shards];
    for u in order {
        let (shard, _) = load.iter().enumerate().min_by_key(|&(i, l)| (*l, i)).unwrap_or((0, &0));
        load[shard] += units[u].rows().max(1);
        out[shard].push(u);
    }
    for units in &mut out {
        units.sort_unstable();
    }
    out
}

/// A planned query's scan, shared by its partitions: the engine's split scan and what to
/// produce from it.
#[derive(Debug)]
struct ScanJob {
    plan: ScanPlan,
    split: Option<SplitScan>,
    /// Output columns (indices into the full schema).
    output: Vec<usize>,
    decode: Columns,
    /// The label columns of the table's schema (a worker rebuilds the same schema).
    labels: Vec<String>,
    /// The store directory (data-file paths are sent relative to it).
    root: std::path::PathBuf,
    /// The dataset's node layout (series ids; empty for one store), see
    /// `Store::dataset_layout`.
    layout: Vec<(String, u32)>,
    /// The identity of the store(s) scanned: `Store::store_ids`.
    stores: Vec<Option<StoreId>>,
}

/// Everything a scan needs, computed once per query and shared by its partitions.
#[derive(Debug)]
struct ScanPlan {
    /// The engine request: series selection and the local-time range.
    request: Option<ScanRequest>,
    /// String values per series id: metric, domain, entity, then each label.
    dict_values: Arc<SeriesStrings>,
    /// The clock model of every series (shared with the diagnosis, see [`read`]).
    clocks: Arc<SeriesClocks>,
}

/// Where a plan's dictionaries come from: the store's series catalog, the metric catalog (for
/// `domain` and `entity`) and the table's cache of the last ones built.
#[derive(Clone, Copy)]
struct DictSource<'a> {
    store: &'a Store,
    catalog: &'a MetricCatalog,
    cache: &'a Dictionaries,
}

impl ScanPlan {
    fn new(
        source: DictSource<'_>,
        clocks: Arc<ClockSet>,
        labels: &[String],
        pushdown: &Pushdown,
        per_series: impl FnOnce(Option<&RoaringBitmap>, &SeriesStrings) -> DfResult<Option<RoaringBitmap>>,
    ) -> DfResult<Self> {
        let store = source.store;
        let mut series = if pushdown.has_series_filter() {
            Some(store.with_catalog(|c| c.select(&pushdown.series)).map_err(engine_err)?)
        } else {
            None
        };
        let (dict_values, clocks) = source.cache.get(store, source.catalog, labels, clocks)?;
        if let Some(set) = per_series(series.as_ref(), &dict_values)? {
            series = Some(set);
        }
        let mut plan = ScanPlan { request: None, dict_values, clocks };
        if series.as_ref().is_some_and(RoaringBitmap::is_empty) {
            return Ok(plan);
        }
        let corrected = match pushdown.time {
            None => None,
            Some((lo, hi)) if lo >= hi => return Ok(plan),
            Some((lo, hi)) => match plan.clocks.local_range(series.as_ref(), lo, hi - 1) {
                Some(range) => Some(range),
                None => return Ok(plan),
            },
        };
        let time = match (corrected, pushdown.local) {
            (Some((a, b)), Some((c, d))) => Some((a.max(c), b.min(d))),
            (one, other) => one.or(other),
        };
        if time.is_some_and(|(lo, hi)| lo >= hi) || pushdown.value.is_some_and(|v| v.is_empty()) {
            return Ok(plan);
        }
        plan.request = Some(ScanRequest { time, series, value: pushdown.value });
        Ok(plan)
    }

    /// The plan for a request made elsewhere (a distributed query's worker): the same
    /// dictionaries and clock lookup, built from this process's view of the store.
    fn for_request(
        source: DictSource<'_>,
        clocks: Arc<ClockSet>,
        labels: &[String],
        request: Option<ScanRequest>,
    ) -> DfResult<Self> {
        let (dict_values, clocks) = source.cache.get(source.store, source.catalog, labels, clocks)?;
        Ok(ScanPlan { request, dict_values, clocks })
    }

    /// The clock model of a series (`None`: identity, unknown uncertainty).
    fn model(&self, series: u32) -> Option<&ClockModel> {
        self.clocks.model(series)
    }
}

/// The string values per series id (metric, domain, entity, then each label) and the
/// clock lookup of every series, as last built; reused while the series catalog, the label
/// keys, the metric catalog and the clock snapshot are the same. Building every string column
/// reads every series key (about 12 ms for 20 k series with 15 label keys, by a profile), which
/// later scans of the same store should not pay again, and a scan builds only the columns it
/// uses ([`SeriesStrings`]).
#[derive(Debug, Default)]
pub(crate) struct Dictionaries(std::sync::Mutex<Option<BuiltDictionaries>>);

#[derive(Debug)]
struct BuiltDictionaries {
    /// The clock-model snapshot `series_clocks` was built from.
    clocks: Arc<ClockSet>,
    values: Arc<SeriesStrings>,
    series_clocks: Arc<SeriesClocks>,
}

/// The string values of every series id, one column each: metric, domain, entity, then each
/// label. A column is built on its first use (a query that projects or filters on `host`
/// builds `host` only), then kept with the table's cache for later scans.
#[derive(Debug)]
pub(crate) struct SeriesStrings {
    /// The catalog's keys when this was made, `None` for a retired id (ids are never reused
    /// or renamed, and retired ids only ever grow: a catalog with as many ids, as many retired
    /// and the same last key has the same keys).
    keys: Vec<Option<Arc<lockstep_engine::SeriesKey>>>,
    /// How many of `keys` are retired.
    retired: u64,
    /// The metric catalog the `domain` and `entity` values come from.
    catalog: MetricCatalog,
    labels: Vec<String>,
    columns: Vec<std::sync::OnceLock<ArrayRef>>,
}

impl SeriesStrings {
    fn new(c: &lockstep_engine::series::SeriesCatalog, catalog: &MetricCatalog, labels: &[String]) -> SeriesStrings {
        SeriesStrings {
            keys: c.keys().to_vec(),
            retired: c.retired().len(),
            catalog: catalog.clone(),
            labels: labels.to_vec(),
            columns: (0..3 + labels.len()).map(|_| std::sync::OnceLock::new()).collect(),
        }
    }

    /// Number of series ids.
    pub(crate) fn len(&self) -> usize {
        self.keys.len()
    }

    /// Column `i` (0 metric, 1 domain, 2 entity, `3 + k` label `k`), built if not yet.
    pub(crate) fn column(&self, i: usize) -> DfResult<&ArrayRef> {
        let cell = self.columns.get(i).ok_or_else(|| DataFusionError::Internal(format!("no string column {i}")))?;
        Ok(cell.get_or_init(|| {
            // A retired id has no rows in the files a scan reads after its retirement: nulls.
            let keys = self.keys.iter().map(Option::as_deref);
            let values: StringViewArray = match i {
                0 => keys.map(|k| Some(k?.metric.as_str())).collect(),
                1 => keys.map(|k| self.catalog.classify(k?).map(|m| m.info.domain.as_str())).collect(),
                2 => keys.map(|k| self.catalog.entity(k?).map(|e| e.name)).collect(),
                _ => {
                    let label = self.labels.get(i - 3).map_or("", String::as_str);
                    keys.map(|k| k?.labels.get(label).map(|v| v.as_str())).collect()
                }
            };
            Arc::new(values)
        }))
    }

    /// Whether these are the strings of the series of `c` with `labels` and `catalog`.
    fn is_for(&self, c: &lockstep_engine::series::SeriesCatalog, labels: &[String], catalog: &MetricCatalog) -> bool {
        let keys = c.keys();
        let last = |k: &[Option<Arc<lockstep_engine::SeriesKey>>]| k.last().map(|k| k.as_ref().map(Arc::as_ptr));
        self.keys.len() == keys.len()
            && self.retired == c.retired().len()
            && last(&self.keys) == last(keys)
            && self.labels == labels
            && self.catalog == *catalog
    }

    /// How many columns have been built.
    #[cfg(test)]
    pub(crate) fn built(&self) -> usize {
        self.columns.iter().filter(|c| c.get().is_some()).count()
    }
}

impl Dictionaries {
    /// The dictionaries of `store`, shared by every session over it in this process
    /// (`lockstep sql` and the servers build a session per statement): while the store is
    /// open, a statement reuses what an earlier one built. Held until the store is dropped.
    fn of(store: &Arc<Store>) -> Arc<Dictionaries> {
        crate::per_store::shared(store)
    }

    fn get(
        &self,
        store: &Store,
        catalog: &MetricCatalog,
        labels: &[String],
        clocks: Arc<ClockSet>,
    ) -> DfResult<(Arc<SeriesStrings>, Arc<SeriesClocks>)> {
        let mut cached = self.0.lock().map_err(|_| DataFusionError::Internal("dictionary cache poisoned".into()))?;
        store
            .with_catalog(|c| {
                let same = cached
                    .as_ref()
                    .is_some_and(|b| Arc::ptr_eq(&b.clocks, &clocks) && b.values.is_for(c, labels, catalog));
                if !same {
                    *cached = Some(BuiltDictionaries {
                        series_clocks: Arc::new(SeriesClocks::for_keys(c.keys(), clocks.clone())),
                        clocks,
                        values: Arc::new(SeriesStrings::new(c, catalog, labels)),
                    });
                }
            })
            .map_err(engine_err)?;
        let built = cached.as_ref().ok_or_else(|| DataFusionError::Internal("dictionaries not built".into()))?;
        Ok((built.values.clone(), built.series_clocks.clone()))
    }
}

fn engine_err(e: lockstep_engine::Error) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

/// Reads scan units (as `units` hands them out) and emits Arrow batches of at most `batch_rows`
/// rows; stops early if `emit` says so.
///
/// `batch_rows` is the session's `batch_size` (DataFusion's 8192 by default), not a whole row
/// group (256 k rows): the batches a query holds in flight are counted in batches (four in each
/// scan partition's channel, more in a `CoalescePartitionsExec` or `RepartitionExec`, none of
/// them in the memory pool), and for a wide `SELECT *` a row-group batch is about 70 MB, so a
/// result streamed to a client held about 1 GB in those queues whatever the statement's memory
/// limit.
///
/// The decoded rows of the chunk being converted (one row group, or a merge's chunk) are held
/// in `reservation`. It grows without a check: the scan cannot spill, and failing it because a
/// sort holds its fair share would be worse than the sort spilling earlier (which the
/// reservation makes it do).
fn run_scan(
    schema: &SchemaRef,
    job: &ScanJob,
    units: impl IntoIterator<Item = usize>,
    slice: Option<&SeriesSlice>,
    batch_rows: usize,
    reservation: &MemoryReservation,
    mut emit: impl FnMut(RecordBatch) -> bool,
) -> DfResult<()> {
    let Some(split) = &job.split else { return Ok(()) };
    let mut failed: Option<DataFusionError> = None;
    for unit in units {
        let mut open = true;
        split
            .read_slice(unit, job.decode, slice, |chunk| {
                reservation.resize(chunk.heap_bytes());
                let chunk = Decoded::from(chunk);
                let mut start = 0;
                while open && start < chunk.len {
                    let end = start.saturating_add(batch_rows.max(1)).min(chunk.len);
                    match to_batch(schema, job, &chunk, start, end) {
                        Ok(batch) => open = emit(batch),
                        Err(e) => {
                            failed = Some(e);
                            open = false;
                        }
                    }
                    start = end;
                }
                reservation.free();
                Ok(open)
            })
            .map_err(engine_err)?;
        if let Some(e) = failed {
            return Err(e);
        }
        if !open {
            return Ok(());
        }
    }
    Ok(())
}

/// Corrected times and uncertainties of rows sorted by (series, local time): one model lookup
/// per run of equal series ids.
fn correct(plan: &ScanPlan, series: &[u32], local: &[i64]) -> (Vec<i64>, Vec<i64>, Option<NullBuffer>) {
    let mut time = Vec::with_capacity(local.len());
    let mut unc = Vec::with_capacity(local.len());
    let mut i = 0;
    while i < series.len() {
        let id = series[i];
        let run = series[i..].iter().take_while(|&&s| s == id).count();
        match plan.model(id) {
            Some(model) => {
                read::correct_into(Some(model), &local[i..i + run], &mut time);
                unc.extend(local[i..i + run].iter().map(|&t| model.uncertainty_at(t)));
            }
            None => {
                read::correct_into(None, &local[i..i + run], &mut time);
                unc.extend(std::iter::repeat_n(UNCERTAINTY_UNKNOWN, run));
            }
        }
        i += run;
    }
    let nulls = unc
        .contains(&UNCERTAINTY_UNKNOWN)
        .then(|| NullBuffer::from(unc.iter().map(|&u| u != UNCERTAINTY_UNKNOWN).collect::<Vec<bool>>()));
    (time, unc, nulls)
}

/// A chunk's decoded columns as Arrow buffers (moved, not copied): an output batch of the whole
/// chunk shares them, a smaller one copies its rows (see [`rows`]).
struct Decoded {
    len: usize,
    series: ScalarBuffer<u32>,
    time: ScalarBuffer<i64>,
    value: ScalarBuffer<f64>,
}

impl From<Chunk> for Decoded {
    fn from(c: Chunk) -> Decoded {
        Decoded { len: c.len, series: c.series.into(), time: c.time.into(), value: c.value.into() }
    }
}

/// Rows `start..end` of a buffer, or an empty one when the column was not decoded. All of it
/// is the buffer itself; part of it is a copy: DataFusion's memory accounting (what a sort
/// reserves, `get_record_batch_memory_size`) counts a batch that slices a larger buffer with
/// the whole buffer, so 32 zero-copy batches of a row group would be counted as 32 row groups.
fn rows<T: ArrowNativeType>(b: &ScalarBuffer<T>, start: usize, end: usize) -> ScalarBuffer<T> {
    match b.get(start..end) {
        Some(_) if start == 0 && end == b.len() => b.clone(),
        Some(part) => ScalarBuffer::from(part.to_vec()),
        None => ScalarBuffer::from(Vec::new()),
    }
}

/// Rows `start..end` of `chunk` as a batch of the output columns.
fn to_batch(schema: &SchemaRef, job: &ScanJob, chunk: &Decoded, start: usize, end: usize) -> DfResult<RecordBatch> {
    if job.output.is_empty() {
        let options = RecordBatchOptions::new().with_row_count(Some(end - start));
        return Ok(RecordBatch::try_new_with_options(schema.clone(), vec![], &options)?);
    }
    let plan = &job.plan;
    let series = rows(&chunk.series, start, end);
    // A data file may use ids the catalog lacks (a catalog file lost or restored from an
    // older copy): an error, not an out-of-bounds panic in the lookups below.
    let known = plan.dict_values.len();
    if let Some(&id) = series.iter().max()
        && id as usize >= known
    {
        return Err(DataFusionError::Execution(format!(
            "a data file holds rows of series id {id}, but the series catalog has {known} series: a catalog \
             file (series.json or an increment under series/) is missing or older than the data; \
             `lockstep check` lists the files affected"
        )));
    }
    let local = rows(&chunk.time, start, end);
    let corrected = job.output.iter().any(|c| CORRECTED.contains(c)).then(|| correct(plan, &series, &local));
    let decoded = |len: usize, what: &str| -> DfResult<()> {
        if len == end - start { Ok(()) } else { Err(DataFusionError::Internal(format!("scan chunk without {what}"))) }
    };
    let ids = UInt32Array::new(series.clone(), None);
    let strings = |values: usize| -> DfResult<ArrayRef> {
        let values = plan.dict_values.column(values)?;
        decoded(ids.len(), "series")?;
        Ok(arrow::compute::take(values.as_ref(), &ids, None)?)
    };
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(job.output.len());
    for &c in &job.output {
        columns.push(match c {
            0 | 7 => {
                let (time, unc, nulls) =
                    corrected.as_ref().ok_or_else(|| DataFusionError::Internal("time not corrected".into()))?;
                decoded(time.len(), "time")?;
                if c == 0 {
                    Arc::new(TimestampNanosecondArray::from(time.clone()))
                } else {
                    Arc::new(Int64Array::new(unc.clone().into(), nulls.clone()))
                }
            }
            1 => strings(0)?,
            2 => {
                let values = rows(&chunk.value, start, end);
                decoded(values.len(), "values")?;
                Arc::new(Float64Array::new(values, None))
            }
            3 => {
                decoded(series.len(), "series")?;
                Arc::new(UInt32Array::new(series.clone(), None))
            }
            4 => strings(1)?,
            5 => strings(2)?,
            6 => {
                decoded(local.len(), "time")?;
                Arc::new(TimestampNanosecondArray::new(local.clone(), None))
            }
            label => strings(label - FIXED_COLUMNS.len() + 3)?,
        });
    }
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

#[cfg(test)]
mod tests;
