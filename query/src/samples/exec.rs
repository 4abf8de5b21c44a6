//! The physical scan of the `samples` table: [`SamplesExec`].
//!
//! One output partition per list of scan units (see the [module docs](super)); each partition
//! runs on a blocking thread, holds one unit's chunk at a time (counted against the query's
//! memory pool) and stops early once a `LIMIT` is reached. A partition that has read its own
//! units takes units from the running partition with the most left (`samples/steal.rs`). The
//! node can cross process boundaries: [`SamplesExec::to_portable`] describes its units in a
//! form a distributed query's worker turns back into a scan of the same rows
//! ([`SamplesExec::from_portable`], used by [`crate::distributed`]).

use std::fmt;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::common::Statistics;
use datafusion::common::stats::Precision;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::memory_pool::MemoryConsumer;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{EquivalenceProperties, Partitioning, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::metrics::{BaselineMetrics, ExecutionPlanMetricsSet, MetricsSet, RecordOutput};
use datafusion::physical_plan::statistics::StatisticsArgs;
use datafusion::physical_plan::stream::RecordBatchReceiverStreamBuilder;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use lockstep_engine::Store;
use lockstep_engine::manifest::StoreId;
use lockstep_engine::metrics::MetricCatalog;
use lockstep_engine::store::{PortableScan, ScanRequest, SeriesSlice};
use roaring::RoaringBitmap;

use super::steal::{Reading, Rounds};
use super::{ClockVersion, ScanJob, ScanPlan, decode_columns, engine_err, run_scan, schema_for};

/// The `samples` scan: output partition `i` reads the units `assignment[i]` of its job's split
/// scan.
#[derive(Debug)]
pub struct SamplesExec {
    job: Arc<ScanJob>,
    assignment: Vec<Vec<usize>>,
    /// Per output partition, the series it keeps ([`Self::by_series`]); `None`: every
    /// partition keeps every row of its units.
    slices: Option<Arc<Vec<SeriesSlice>>>,
    limit: Option<usize>,
    properties: Arc<PlanProperties>,
    /// Per output partition: rows produced and the time spent reading and converting
    /// (`EXPLAIN ANALYZE`; `EXPLAIN ANALYZE VERBOSE` shows each partition).
    metrics: ExecutionPlanMetricsSet,
    /// The running executions, whose partitions take units from each other
    /// (`samples/steal.rs`); not for a scan split by series.
    rounds: Rounds,
}

/// What a [`SamplesExec`] needs to be rebuilt in another process over the same store.
#[derive(Debug, Clone, PartialEq)]
pub struct PortableSamples {
    /// Label columns of the schema.
    pub labels: Vec<String>,
    /// Output columns (indices into the full schema).
    pub output: Vec<usize>,
    /// Clock-model version the times are corrected with (resolved when planning).
    pub clock_version: u64,
    /// Row limit per partition.
    pub limit: Option<usize>,
    /// Number of units each output partition reads (units numbered consecutively).
    pub partition_units: Vec<usize>,
    /// Series the planner's catalog knew (a worker's catalog must know as many).
    pub series_count: u64,
    /// The units; `None`: the scan selects nothing.
    pub scan: Option<PortableScan>,
    /// For a dataset of several nodes: each node with its series count when the scan was
    /// planned (the series ids; a worker opens the dataset pinned to it). Empty for one store.
    pub layout: Vec<(String, u32)>,
    /// The store ids of the store (or the dataset's nodes, in layout order) the scan was
    /// planned on (`Store::store_ids`): a worker must read the same stores. Empty from a
    /// planner that did not send them.
    pub stores: Vec<Option<StoreId>>,
}

impl SamplesExec {
    pub(super) fn new(schema: SchemaRef, job: Arc<ScanJob>, assignment: Vec<Vec<usize>>, limit: Option<usize>) -> Self {
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(schema),
            Partitioning::UnknownPartitioning(assignment.len().max(1)),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        SamplesExec {
            job,
            assignment,
            slices: None,
            limit,
            properties,
            metrics: ExecutionPlanMetricsSet::new(),
            rounds: Rounds::default(),
        }
    }

    /// The same rows in `partitions` output partitions that each hold whole series: partition
    /// `k` keeps the series with ids in its range, from every unit that may hold them. A
    /// whole-series aggregate over it needs no repartition (see `crate::plan`). The ranges cut
    /// the scan's wanted rows into about equal parts (assuming a unit's rows spread evenly over
    /// the series ids of its range). A unit whose series straddle a cut is read by both partitions: its series
    /// ids (and times, under a time filter) are decoded twice, its values once. `None` with a
    /// `LIMIT` (partitions would stop at different series) or when already split.
    pub fn by_series(&self, partitions: usize) -> Option<SamplesExec> {
        if self.limit.is_some() || self.slices.is_some() || partitions < 2 {
            return None;
        }
        let Some(split) = &self.job.split else {
            return Some(self.with_assignment(vec![Vec::new(); partitions]));
        };
        let chosen: Vec<usize> = self.assignment.iter().flatten().copied().collect();
        let spans: Vec<(u32, u32, u64)> = chosen
            .iter()
            .filter_map(|&u| split.units().get(u))
            .map(|u| (u.series().0, u.series().1, u.rows()))
            .collect();
        let wanted = self.job.plan.request.as_ref().and_then(|r| r.series.as_ref());
        let series = u64::try_from(self.job.plan.clocks.series_count()).unwrap_or(u64::MAX);
        let cuts = series_cuts(&spans, wanted, series, partitions);
        let slices: Vec<SeriesSlice> = cuts.windows(2).map(|w| split.slice(w[0]..w[1])).collect();
        let mut assignment = vec![Vec::new(); partitions];
        for &u in &chosen {
            let Some(unit) = split.units().get(u) else { continue };
            for (k, slice) in slices.iter().enumerate() {
                if slice.intersects(unit.series()) {
                    assignment[k].push(u);
                }
            }
        }
        assignment.iter_mut().for_each(|a| a.sort_unstable());
        let mut exec = self.with_assignment(assignment);
        exec.slices = Some(Arc::new(slices));
        Some(exec)
    }

    /// Whether output column `column` is the table's `series_id`.
    pub(crate) fn is_series_id(&self, column: usize) -> bool {
        self.job.output.get(column) == Some(&3)
    }

    /// Rows stored in the units of the scan (before filters): its cost.
    pub fn rows(&self) -> u64 {
        let Some(split) = &self.job.split else { return 0 };
        self.assignment.iter().flatten().filter_map(|&u| split.units().get(u)).map(|u| u.rows()).sum()
    }

    /// The rows the scan (`None`) or one partition yields, when the footers and the write
    /// buffer already say: no row filter (time, series or value) reaches the scan, no unit
    /// merges overlapping sources (whose duplicates would count once), no `LIMIT` and no
    /// series slices; for one partition, only when partitions read their own units (one
    /// partition, or a scan split by series), since units move between running partitions.
    /// A scan that selects nothing yields 0.
    pub fn exact_rows(&self, partition: Option<usize>) -> Option<usize> {
        let Some(split) = &self.job.split else { return Some(0) };
        let request = self.job.plan.request.as_ref()?;
        if request.time.is_some() || request.series.is_some() || request.value.is_some() {
            return None;
        }
        if self.limit.is_some() || self.slices.is_some() || (partition.is_some() && self.shares_units()) {
            return None;
        }
        let units: Vec<usize> = match partition {
            None => self.assignment.iter().flatten().copied().collect(),
            Some(p) => self.assignment.get(p).cloned().unwrap_or_default(),
        };
        let mut rows = 0usize;
        for u in units {
            let unit = split.units().get(u)?;
            if unit.is_merge() {
                return None;
            }
            rows = rows.checked_add(usize::try_from(unit.rows()).ok()?)?;
        }
        Some(rows)
    }

    /// Whether running partitions take units from each other (several partitions, not split
    /// by series: those read units more than once, each for its own series).
    fn shares_units(&self) -> bool {
        self.assignment.len() > 1 && self.slices.is_none()
    }

    /// Number of scan units.
    pub fn unit_count(&self) -> usize {
        self.assignment.iter().map(Vec::len).sum()
    }

    /// The same scan split into `tasks` scans of about equal rows (each unit in exactly one),
    /// each with this scan's partition count.
    pub fn split_tasks(&self, tasks: usize) -> Vec<SamplesExec> {
        let tasks = tasks.max(1);
        if self.slices.is_some() {
            // Whole series per partition: one task keeps them together.
            let mut all = vec![self.with_slices(self.assignment.clone())];
            all.extend((1..tasks).map(|_| self.with_slices(vec![Vec::new(); self.assignment.len()])));
            return all;
        }
        let partitions = self.assignment.len().max(1);
        let units: Vec<usize> = self.assignment.iter().flatten().copied().collect();
        let Some(split) = &self.job.split else {
            return (0..tasks).map(|_| self.with_assignment(vec![Vec::new(); partitions])).collect();
        };
        let all = split.units();
        let chosen: Vec<_> = units.iter().filter_map(|&u| all.get(u).cloned()).collect();
        super::assign(&chosen, tasks)
            .into_iter()
            .map(|task| {
                let task_units: Vec<usize> = task.iter().filter_map(|&i| units.get(i).copied()).collect();
                let picked: Vec<_> = task_units.iter().filter_map(|&u| all.get(u).cloned()).collect();
                let mut per_partition: Vec<Vec<usize>> = super::assign(&picked, partitions)
                    .into_iter()
                    .map(|p| p.iter().filter_map(|&i| task_units.get(i).copied()).collect())
                    .collect();
                per_partition.resize(partitions, Vec::new());
                self.with_assignment(per_partition)
            })
            .collect()
    }

    fn with_assignment(&self, assignment: Vec<Vec<usize>>) -> SamplesExec {
        SamplesExec::new(self.schema(), self.job.clone(), assignment, self.limit)
    }

    fn with_slices(&self, assignment: Vec<Vec<usize>>) -> SamplesExec {
        let mut exec = self.with_assignment(assignment);
        exec.slices = self.slices.clone();
        exec
    }

    /// The per-series string arrays this scan gathers its string columns from.
    #[cfg(test)]
    pub(super) fn dict_values(&self) -> Arc<super::SeriesStrings> {
        self.job.plan.dict_values.clone()
    }

    /// This scan in a form [`Self::from_portable`] rebuilds in another process.
    pub fn to_portable(&self) -> DfResult<PortableSamples> {
        let job = &self.job;
        if self.slices.is_some() {
            return Err(DataFusionError::NotImplemented("a samples scan split by series is not portable".into()));
        }
        let scan = match &job.split {
            None => None,
            Some(split) => {
                let units: Vec<usize> = self.assignment.iter().flatten().copied().collect();
                Some(split.portable(&units, &job.root).map_err(engine_err)?)
            }
        };
        Ok(PortableSamples {
            labels: job.labels.clone(),
            output: job.output.clone(),
            clock_version: job.plan.clocks.clocks().version(),
            limit: self.limit,
            partition_units: self.assignment.iter().map(Vec::len).collect(),
            series_count: job.plan.clocks.series_count() as u64,
            scan,
            layout: job.layout.clone(),
            stores: job.stores.clone(),
        })
    }

    /// Rebuilds a scan described by [`Self::to_portable`] over `store` (the same dataset,
    /// opened by this process) with `catalog` for the `domain` and `entity` columns.
    /// The per-series strings come from the process-wide cache of `store` (a worker serves many
    /// scans over the same snapshot).
    pub fn from_portable(store: &Arc<Store>, catalog: &MetricCatalog, p: &PortableSamples) -> DfResult<SamplesExec> {
        let full = schema_for(&p.labels);
        if let Some(&bad) = p.output.iter().find(|&&c| c >= full.fields().len()) {
            return Err(DataFusionError::Plan(format!("samples scan: output column {bad} of {}", full.fields().len())));
        }
        let schema = Arc::new(full.project(&p.output)?);
        let clocks = ClockVersion::Pinned(p.clock_version).resolve(store)?;
        let split = match &p.scan {
            None => None,
            Some(scan) => Some(store.split_scan_portable(scan).map_err(engine_err)?),
        };
        let request = p.scan.as_ref().map(|s| ScanRequest { time: s.time, series: s.series.clone(), value: s.value });
        let cache = super::Dictionaries::of(store);
        let source = super::DictSource { store, catalog, cache: &cache };
        let plan = ScanPlan::for_request(source, clocks, &p.labels, request)?;
        let units = split.as_ref().map_or(0, |s| s.units().len());
        if p.partition_units.iter().sum::<usize>() != units {
            return Err(DataFusionError::Plan(format!(
                "samples scan: partitions name {} units, the scan has {units}",
                p.partition_units.iter().sum::<usize>()
            )));
        }
        if (plan.clocks.series_count() as u64) < p.series_count {
            return Err(DataFusionError::Plan(format!(
                "samples scan: this process's series catalog has {} series, the plan was made with {}",
                plan.clocks.series_count(),
                p.series_count
            )));
        }
        let mut assignment = Vec::with_capacity(p.partition_units.len());
        let mut next = 0;
        for &n in &p.partition_units {
            assignment.push((next..next + n).collect());
            next += n;
        }
        let job = Arc::new(ScanJob {
            decode: decode_columns(&p.output),
            output: p.output.clone(),
            plan,
            split,
            labels: p.labels.clone(),
            root: store.dir().to_path_buf(),
            layout: p.layout.clone(),
            stores: p.stores.clone(),
        });
        Ok(SamplesExec::new(schema, job, assignment, p.limit))
    }
}

/// `partitions + 1` series-id cuts (the first the smallest id, the last past the largest, at
/// most `series`, the number of series ids) that split the wanted rows of `spans` (each a
/// unit's smallest and largest series id and its rows) into about equal parts: a unit's rows
/// are taken as spread evenly over the ids of its range, and only those of wanted series
/// (`wanted`; `None`: all) count. One sweep over the units' boundaries (sorted), so planning
/// stays linear in units and partitions.
fn series_cuts(spans: &[(u32, u32, u64)], wanted: Option<&RoaringBitmap>, series: u64, partitions: usize) -> Vec<u32> {
    // Wanted ids in [lo, end).
    let count = |lo: u64, end: u64| -> u64 {
        if lo >= end {
            return 0;
        }
        match (wanted, u32::try_from(lo), u32::try_from(end)) {
            (None, _, _) => end - lo,
            (Some(set), Ok(lo), Ok(end)) => set.range_cardinality(lo..end),
            (Some(set), Ok(lo), Err(_)) => set.range_cardinality(lo..),
            (Some(_), Err(_), _) => 0,
        }
    };
    // The `m`-th (1-based) wanted id at or after `lo`.
    let nth = |lo: u64, m: u64| -> Option<u64> {
        match wanted {
            None => Some(lo + m - 1),
            Some(set) => {
                let before = match u32::try_from(lo) {
                    Ok(0) => 0,
                    Ok(lo) => set.rank(lo - 1),
                    Err(_) => return None,
                };
                set.select(u32::try_from(before + m - 1).ok()?).map(u64::from)
            }
        }
    };
    let mut events: Vec<(u64, f64)> = Vec::with_capacity(2 * spans.len());
    for &(lo, hi, rows) in spans {
        let (lo, end) = (u64::from(lo), (u64::from(hi) + 1).min(series));
        if count(lo, end) > 0 {
            let per = rows as f64 / (end - lo) as f64;
            events.push((lo, per));
            events.push((end, -per));
        }
    }
    events.sort_by_key(|e| e.0);
    let clamp = |c: u64| u32::try_from(c).unwrap_or(u32::MAX);
    let (Some(&(first, _)), Some(&(last, _))) = (events.first(), events.last()) else {
        return vec![0; partitions + 1];
    };
    // Segments between consecutive boundaries with their density (rows per id).
    let mut segments: Vec<(u64, u64, f64)> = Vec::with_capacity(events.len());
    let mut density = 0.0;
    let mut i = 0;
    while i < events.len() {
        let at = events[i].0;
        while i < events.len() && events[i].0 == at {
            density += events[i].1;
            i += 1;
        }
        if let Some(&(next, _)) = events.get(i) {
            segments.push((at, next, density.max(0.0)));
        }
    }
    let weight = |&(a, b, d): &(u64, u64, f64)| d * count(a, b) as f64;
    let total: f64 = segments.iter().map(weight).sum();
    let mut cuts = vec![first];
    let mut below = 0.0;
    for segment in &segments {
        let (a, b, d) = *segment;
        let w = weight(segment);
        while cuts.len() < partitions && below + w >= total * cuts.len() as f64 / partitions as f64 {
            let goal = total * cuts.len() as f64 / partitions as f64;
            // The smallest cut in (a, b] with the rows below it reaching the goal.
            let need = if d > 0.0 { ((goal - below) / d).ceil().max(0.0) as u64 } else { 0 };
            let cut = if need == 0 { a } else { nth(a, need).map_or(b, |id| id + 1).min(b) };
            let previous = cuts.last().copied().unwrap_or(first);
            cuts.push(cut.max(previous));
        }
        below += w;
    }
    cuts.resize(partitions, last);
    cuts.push(last);
    cuts.into_iter().map(clamp).collect()
}

impl DisplayAs for SamplesExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "SamplesExec: partitions={}, units={}, rows={}",
            self.assignment.len(),
            self.unit_count(),
            self.rows()
        )?;
        if self.slices.is_some() {
            write!(f, ", by_series")?;
        }
        if let Some(limit) = self.limit {
            write!(f, ", limit={limit}")?;
        }
        Ok(())
    }
}

impl ExecutionPlan for SamplesExec {
    fn name(&self) -> &str {
        "SamplesExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(self: Arc<Self>, children: Vec<Arc<dyn ExecutionPlan>>) -> DfResult<Arc<dyn ExecutionPlan>> {
        if children.is_empty() {
            Ok(self)
        } else {
            Err(DataFusionError::Internal("SamplesExec has no children".into()))
        }
    }

    /// The exact row count where it is known without reading (see [`SamplesExec::exact_rows`]),
    /// so that DataFusion answers `count(*)` from it; nothing else.
    fn statistics_from_inputs(
        &self,
        _input_stats: &[Arc<Statistics>],
        args: &StatisticsArgs,
    ) -> DfResult<Arc<Statistics>> {
        let mut stats = Statistics::new_unknown(&self.schema());
        if let Some(rows) = self.exact_rows(args.partition()) {
            stats.num_rows = Precision::Exact(rows);
        }
        Ok(Arc::new(stats))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    fn execute(&self, partition: usize, ctx: Arc<TaskContext>) -> DfResult<SendableRecordBatchStream> {
        let schema = self.schema();
        let units = match self.assignment.get(partition) {
            Some(units) => units.clone(),
            None if partition == 0 && self.assignment.is_empty() => Vec::new(),
            None => {
                return Err(DataFusionError::Internal(format!(
                    "SamplesExec partition {partition} of {}",
                    self.assignment.len()
                )));
            }
        };
        let mut builder = RecordBatchReceiverStreamBuilder::new(schema.clone(), 4);
        let tx = builder.tx();
        let job = self.job.clone();
        let slices = self.slices.clone();
        let mut left = self.limit.unwrap_or(usize::MAX);
        let wanted = left > 0;
        let batch_rows = ctx.session_config().batch_size();
        let reservation = MemoryConsumer::new(format!("SamplesScan[{partition}]")).register(ctx.memory_pool());
        let baseline = BaselineMetrics::new(&self.metrics, partition);
        let reading = self.shares_units().then(|| {
            let units = self.job.split.as_ref().map_or(0, |s| s.units().len());
            Reading::new(self.rounds.join(&ctx, &self.assignment, units, partition), partition)
        });
        builder.spawn_blocking(move || {
            let elapsed = baseline.elapsed_compute().clone();
            // Time spent in this thread, less the waits for the consumer to take a batch.
            let mut timer = elapsed.timer();
            let emit = |batch: RecordBatch| {
                let batch = if batch.num_rows() > left { batch.slice(0, left) } else { batch };
                left -= batch.num_rows();
                // Rows, batches and bytes.
                let batch = batch.record_output(&baseline);
                timer.stop();
                let sent = tx.blocking_send(Ok(batch)).is_ok();
                timer = elapsed.timer();
                sent && left > 0
            };
            let slice = slices.as_ref().and_then(|s| s.get(partition));
            let mut own = units.into_iter();
            let next = || match &reading {
                Some(reading) => reading.next(),
                None => own.next(),
            };
            let result = if wanted {
                run_scan(&schema, &job, std::iter::from_fn(next), slice, batch_rows, &reservation, emit)
            } else {
                Ok(())
            };
            // The partition ends in its round here, or when the task is dropped unrun.
            drop(reading);
            if let Err(e) = result {
                let _ = tx.blocking_send(Err(e));
            }
            Ok(())
        });
        Ok(builder.build())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// The cuts split the wanted rows evenly: each partition's rows (per id: the rows of every
    /// span holding it, spread over the span's ids) are at most an equal share plus one id's
    /// rows, the cuts never decrease, and they start and end at the first and past the last id.
    #[test]
    fn series_cuts_split_wanted_rows_evenly() {
        let mut state = 7u64;
        let mut next = |n: u64| {
            state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            (state >> 33) % n
        };
        for case in 0..200 {
            let ids = 50 + next(300);
            let spans: Vec<(u32, u32, u64)> = (0..1 + next(20))
                .map(|_| {
                    let lo = next(ids);
                    let hi = (lo + next(80)).min(ids - 1);
                    (lo as u32, hi as u32, 1 + next(100_000))
                })
                .collect();
            let wanted: Option<RoaringBitmap> =
                (case % 2 == 0).then(|| (0..ids as u32).filter(|_| next(3) == 0).collect());
            let partitions = 1 + next(9) as usize;
            let cuts = series_cuts(&spans, wanted.as_ref(), ids, partitions);
            assert_eq!(cuts.len(), partitions + 1);
            assert!(cuts.windows(2).all(|w| w[0] <= w[1]), "{cuts:?}");
            let per_id: Vec<f64> = (0..ids)
                .map(|id| {
                    if wanted.as_ref().is_some_and(|w| !w.contains(id as u32)) {
                        return 0.0;
                    }
                    spans
                        .iter()
                        .filter(|&&(lo, hi, _)| (u64::from(lo)..=u64::from(hi)).contains(&id))
                        .map(|&(lo, hi, rows)| rows as f64 / f64::from(hi - lo + 1))
                        .sum()
                })
                .collect();
            let total: f64 = per_id.iter().sum();
            if total == 0.0 {
                continue;
            }
            let held = |a: u32, b: u32| -> f64 { per_id[a as usize..b as usize].iter().sum() };
            assert!((held(cuts[0], cuts[partitions]) - total).abs() < 1e-6 * total, "{cuts:?}");
            let biggest = per_id.iter().copied().fold(0.0, f64::max);
            for w in cuts.windows(2) {
                let share = held(w[0], w[1]);
                assert!(share <= total / partitions as f64 + biggest + 1e-6 * total, "case {case}: {cuts:?}");
            }
        }
        // Ten thousand units and 64 partitions: one sweep (the binary search this replaced made
        // 64 x 32 passes over the units).
        let spans: Vec<(u32, u32, u64)> = (0..10_000u32).map(|i| (i * 10, i * 10 + 30, 262_144)).collect();
        let cuts = series_cuts(&spans, None, 200_000, 64);
        assert_eq!(cuts.len(), 65);
        assert_eq!((cuts[0], cuts[64]), (0, 100_021));
    }
}
