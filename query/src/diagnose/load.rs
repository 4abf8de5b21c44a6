//! Reading the job's series: the pace series first (the episodes), then every other series in
//! one engine scan; clock correction, counter rates, the common grid, the slowdown onset and the
//! per-series features, in parallel over series.
//!
//! Samples are read through the same clock-corrected split scan as the `samples` table
//! (`crate::samples::read`: the corrected window mapped to each host's local range, the scan's
//! units read in parallel, the same correction) and counters through the same rule as the SQL
//! counter functions (`crate::functions::counter::CounterRule`: wrap, reset, saturation, unit
//! scale), so a derived signal equals what SQL gives for the same series (tested in
//! `diagnose/tests.rs`).

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use lockstep_engine::Store;
use lockstep_engine::clock::{ClockModel, ClockSet};
use lockstep_engine::datafile::{Chunk, Columns};
use lockstep_engine::metrics::names;
use lockstep_engine::store::ScanRequest;
use roaring::RoaringBitmap;

use crate::functions::counter::CounterRule;
use crate::samples::read::{SeriesClocks, correct_into, read_units};

use super::analyze::{Features, Windows, features};
use super::context::{JobContext, SeriesMeta};
use super::episodes;
pub(crate) use super::signal::{Signal, Timeline};
use super::stats::median_in_place;
use super::{ClockInfo, ClockMode, DiagnoseError, DiagnoseOptions, NearMiss, Slowdown};

/// The step-time metric.
pub(crate) const STEP_METRIC: &str = names::STEP_TIME;
/// How far before the analysed span the scan starts (corrected time): a counter's first rate in
/// the span needs the reading before it.
const SCAN_PAD_NS: i64 = 600_000_000_000;
/// Series per work item of the parallel derivation (small items balance dense and sparse series).
const SERIES_PER_TASK: usize = 32;
/// Most grid slots in a window (the grid step grows beyond that).
const MAX_SLOTS: i64 = 4000;
use lockstep_engine::model::SEC;
/// How far before `--from` the diagnosis looks for a healthy baseline when the window has none.
const LOOKBACK_NS: i64 = 30 * 60 * SEC;
/// Fewest pace points (grid slots with data) for a verdict.
pub(crate) const MIN_PACE_POINTS: usize = 30;

/// The common grid of the window.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Grid {
    /// First slot start (reference ns).
    pub start: i64,
    /// Slot width (ns).
    pub step: i64,
    /// Number of slots.
    pub slots: usize,
}

impl Grid {
    fn new(from: i64, to: i64) -> Grid {
        let span = (to - from).max(1);
        let step = SEC.max((span + MAX_SLOTS - 1) / MAX_SLOTS);
        Grid { start: from, step, slots: usize::try_from((span + step - 1) / step).unwrap_or(0) }
    }

    /// Slot of a time, if inside.
    pub fn slot(&self, t: i64) -> Option<usize> {
        if t < self.start {
            return None;
        }
        let i = usize::try_from((t - self.start) / self.step).ok()?;
        (i < self.slots).then_some(i)
    }

    /// Start time of a slot.
    pub fn time(&self, i: usize) -> i64 {
        self.start + self.step * i as i64
    }
}

/// Result for one series.
#[derive(Debug)]
pub(crate) struct SeriesOut {
    /// Median per grid slot (NaN = no sample).
    pub grid: Vec<f32>,
    /// Features per episode (None: too few samples).
    pub feat: Vec<Option<Features>>,
}

/// One slowdown episode to diagnose.
#[derive(Debug, Clone)]
pub(crate) struct EpisodeData {
    /// Its onset, baseline and degraded levels.
    pub slowdown: Slowdown,
    /// The analysis windows (baseline: the healthy time before it, or after it when it starts
    /// with the signal).
    pub windows: Windows,
    /// When the pace recovered (None: slow until the end of the window).
    pub recovery: Option<i64>,
    /// The episode started with the analysed signal: no healthy time before it.
    pub from_start: bool,
    /// A further rise of the episode before it (an escalation: no recovery in between).
    pub continues: bool,
}

/// The pace signal the episodes were found on.
#[derive(Debug, Clone)]
pub(crate) struct Pace {
    /// Its metric (step time, or the collective time when no step time is recorded).
    pub metric: &'static str,
    /// Grid slots with data.
    pub points: usize,
    /// Healthy level.
    pub baseline: f64,
    /// Start of the analysed span (before the window when the window has no healthy time).
    pub from: i64,
    /// The largest rise of the signal that did not make an episode.
    pub near_miss: Option<NearMiss>,
}

/// Everything read and computed per series.
#[derive(Debug)]
pub(crate) struct Loaded {
    /// The grid.
    pub grid: Grid,
    /// The slowdown episodes, in time order.
    pub episodes: Vec<EpisodeData>,
    /// The pace signal.
    pub pace: Pace,
    /// Per series, parallel to `JobContext::series`.
    pub series: Vec<SeriesOut>,
    /// Samples read.
    pub samples: usize,
    /// Clock information.
    pub clock: ClockInfo,
    /// Median step time per grid slot (for the report), compact `(time, value)`.
    pub step_points: Vec<(i64, f64)>,
}

/// Loads the job's data and computes the per-series features (see the module docs).
pub(crate) fn load(
    store: &Store,
    ctx: &JobContext,
    clocks: Option<&Arc<ClockSet>>,
    opts: &DiagnoseOptions,
) -> Result<Loaded, DiagnoseError> {
    let timeline = match clocks {
        Some(c) => Timeline::corrected(c),
        None => Timeline::raw(),
    };
    let models = SeriesClocks::for_store(store, clocks.cloned().unwrap_or_default())?;
    let threads =
        if opts.threads == 0 { std::thread::available_parallelism().map_or(2, |n| n.get()) } else { opts.threads };
    let lookback_from =
        if ctx.from > ctx.job.start { ctx.from.saturating_sub(LOOKBACK_NS).max(ctx.job.start) } else { ctx.from };
    let started = std::time::Instant::now();

    // 1. The pace (step time; the collective time without it): the episodes and their windows.
    let pace_metric =
        if ctx.series.iter().any(|m| m.metric() == STEP_METRIC) { STEP_METRIC } else { names::COLLECTIVE_EXEC_TIME };
    let is_pace: Vec<bool> = ctx.series.iter().map(|m| m.metric() == pace_metric).collect();
    let pace_idx: Vec<usize> = (0..ctx.series.len()).filter(|&i| is_pace[i]).collect();
    let ids = pace_idx.iter().map(|&i| ctx.series[i].id);
    let parts = scan(store, &models, (lookback_from, ctx.to), ids, threads)?;
    let mut samples: usize = parts.iter().map(|c| c.len).sum();
    let mut signals: Vec<Signal> = pace_idx
        .iter()
        .map(|&i| derive(&ctx.series[i], &parts, models.model(ctx.series[i].id), lookback_from, ctx.to))
        .collect();
    drop(parts);
    let pace_points = |grid: &Grid| {
        let grids: Vec<Vec<f32>> = signals.iter().map(|s| to_grid(s, grid)).collect();
        across_median(&grids, grid)
    };
    // A window far wider than the pace data (the last week, a long job's whole span) would
    // spread the data over a few of the grid's MAX_SLOTS slots: the grid then covers the data.
    let covering = |from: i64, to: i64| {
        let first = signals.iter().filter_map(|s| s.t.get(s.t.partition_point(|&t| t < from)).copied()).min();
        let last = signals
            .iter()
            .filter_map(|s| s.t.partition_point(|&t| t < to).checked_sub(1).and_then(|i| s.t.get(i).copied()))
            .max();
        match (first, last) {
            (Some(a), Some(b)) if a <= b && (b - a).saturating_mul(2) < to - from => Grid::new(a, b.saturating_add(1)),
            _ => Grid::new(from, to),
        }
    };
    let mut grid = covering(ctx.from, ctx.to);
    let mut step_points = pace_points(&grid);
    // The pace's values as durations: step times in seconds, collective times in microseconds.
    let unit_seconds = if pace_metric == STEP_METRIC { 1.0 } else { 1e-6 };
    let mut found = episodes::find(&step_points, unit_seconds);
    // No episode, or one that starts with the window: the window may lie inside a slowdown.
    let inside = found.spans.first().is_none_or(|s| s.start == 0) || !found.has_healthy;
    if inside && lookback_from < ctx.from {
        // No healthy time at the start of the window: look before it.
        let wide = covering(lookback_from, ctx.to);
        let points = pace_points(&wide);
        let before = points.iter().filter(|p| p.0 < ctx.from).count();
        let wider = episodes::find(&points, unit_seconds);
        // Switch only for an episode with healthy time before it that is still slow at `from`.
        let covers = wider
            .spans
            .iter()
            .any(|s| s.start > 0 && points[s.start].0 < ctx.from && (!s.recovered || points[s.end].0 > ctx.from));
        if before >= MIN_PACE_POINTS && wider.has_healthy && covers {
            grid = wide;
            step_points = points;
            found = wider;
        }
    }
    let pace_hosts: Vec<&str> = pace_idx.iter().map(|&i| ctx.series[i].host.as_str()).collect();
    let episodes = episode_windows(&found, &step_points, grid.start, ctx, pace_metric, &pace_hosts, timeline);
    let near_miss = found.near_miss.filter(|_| found.baseline > 0.0).map(|m| NearMiss {
        start: step_points[m.start].0,
        end: step_points[m.end.min(step_points.len() - 1)].0,
        rise: m.level / found.baseline - 1.0,
    });
    let pace =
        Pace { metric: pace_metric, points: step_points.len(), baseline: found.baseline, from: grid.start, near_miss };
    tracing::debug!(ms = started.elapsed().as_secs_f64() * 1e3, series = pace_idx.len(), "diagnose: pace and episodes");

    // 2. Every other series of the job, in one scan; the pace signals are kept (read over a span
    // that covers the analysed one), cut to it.
    let mut pace_signals: Vec<Option<Signal>> = (0..ctx.series.len()).map(|_| None).collect();
    for (&i, mut s) in pace_idx.iter().zip(signals.drain(..)) {
        let cut = s.t.partition_point(|&t| t < grid.start);
        s.t.drain(..cut);
        s.v.drain(..cut);
        pace_signals[i] = Some(s);
    }
    let ids = (0..ctx.series.len()).filter(|&i| !is_pace[i]).map(|i| ctx.series[i].id);
    let parts = scan(store, &models, (grid.start, ctx.to), ids, threads)?;
    samples += parts.iter().map(|c| c.len).sum::<usize>();
    tracing::debug!(ms = started.elapsed().as_secs_f64() * 1e3, samples, "diagnose: scan");
    let next = AtomicUsize::new(0);
    let work = || {
        let mut done: Vec<(usize, Vec<SeriesOut>)> = Vec::new();
        while let start = next.fetch_add(SERIES_PER_TASK, Ordering::Relaxed)
            && start < ctx.series.len()
        {
            let end = (start + SERIES_PER_TASK).min(ctx.series.len());
            let out = (start..end)
                .map(|i| {
                    let meta = &ctx.series[i];
                    let derived;
                    let s = match &pace_signals[i] {
                        Some(s) => s,
                        None => {
                            derived = derive(meta, &parts, models.model(meta.id), grid.start, ctx.to);
                            &derived
                        }
                    };
                    let feat = episodes.iter().map(|e| features(s, &e.windows, meta, timeline)).collect();
                    SeriesOut { grid: to_grid(s, &grid), feat }
                })
                .collect();
            done.push((start, out));
        }
        done
    };
    let mut done: Vec<(usize, Vec<SeriesOut>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (1..threads.max(1)).map(|_| scope.spawn(work)).collect();
        let mut done = work();
        // A panicking worker is a bug; its series are filled in with empty results below.
        handles.into_iter().filter_map(|h| h.join().ok()).for_each(|d| done.extend(d));
        done
    });
    done.sort_unstable_by_key(|(start, _)| *start);
    let mut series: Vec<SeriesOut> = Vec::with_capacity(ctx.series.len());
    for (start, out) in done {
        while series.len() < start {
            series.push(SeriesOut { grid: Vec::new(), feat: Vec::new() });
        }
        series.extend(out);
    }
    while series.len() < ctx.series.len() {
        series.push(SeriesOut { grid: Vec::new(), feat: Vec::new() });
    }
    tracing::debug!(ms = started.elapsed().as_secs_f64() * 1e3, "diagnose: features");

    let hosts: HashSet<&str> = ctx.series.iter().map(|s| s.host.as_str()).collect();
    let hosts_with_model = hosts.iter().filter(|h| timeline.model(h).is_some()).count();
    let clock = ClockInfo {
        mode: opts.clock,
        version: match opts.clock {
            ClockMode::Corrected => clocks.map_or(0, |c| c.version()),
            ClockMode::Raw => 0,
        },
        hosts_with_model,
        hosts: hosts.len(),
    };
    Ok(Loaded { grid, episodes, pace, series, samples, clock, step_points })
}

/// The samples of `ids` from [`SCAN_PAD_NS`] before `from` to `to` (corrected time), through the
/// clock-corrected split scan shared with the `samples` table: chunks sorted by (series, local
/// time), in unit order.
pub(crate) fn scan(
    store: &Store,
    models: &SeriesClocks,
    (from, to): (i64, i64),
    ids: impl Iterator<Item = u32>,
    threads: usize,
) -> Result<Vec<Chunk>, DiagnoseError> {
    let set: RoaringBitmap = ids.collect();
    if set.is_empty() {
        return Ok(Vec::new());
    }
    let Some(time) = models.local_range(Some(&set), from.saturating_sub(SCAN_PAD_NS), to) else {
        return Ok(Vec::new());
    };
    let split = store.split_scan(ScanRequest { time: Some(time), series: Some(set), value: None })?;
    Ok(read_units(&split, Columns::ALL, threads)?)
}

/// The series' samples on the timeline (corrected with its host's `model`, raw without one), as
/// rates for counters (the SQL counter rule, over the host's own sampling intervals), inside
/// `[from, to)`.
pub(crate) fn derive(meta: &SeriesMeta, parts: &[Chunk], model: Option<&ClockModel>, from: i64, to: i64) -> Signal {
    let rule = meta.is_counter().then(|| CounterRule::of(meta.info.as_ref()));
    let throttle = matches!(meta.metric(), names::THROTTLE_REASONS | names::CLOCKS_EVENT_REASONS);
    // The series' runs, in time order (units of one partition may hold it at different times).
    let mut runs: Vec<(&Chunk, usize, usize)> = parts
        .iter()
        .filter_map(|c| {
            let lo = c.series.partition_point(|&s| s < meta.id);
            let hi = c.series.partition_point(|&s| s <= meta.id);
            (lo < hi).then_some((c, lo, hi))
        })
        .collect();
    runs.sort_by_key(|&(c, lo, _)| c.time[lo]);
    let n = runs.iter().map(|&(_, lo, hi)| hi - lo).sum();
    let mut out = Signal { t: Vec::with_capacity(n), v: Vec::with_capacity(n) };
    let mut corrected: Vec<i64> = Vec::new();
    let mut prev: Option<(i64, f64)> = None;
    for (rows, lo, hi) in runs {
        corrected.clear();
        correct_into(model, &rows.time[lo..hi], &mut corrected);
        for ((&local, &raw), &t) in rows.time[lo..hi].iter().zip(&rows.value[lo..hi]).zip(&corrected) {
            let value = if let Some(rule) = &rule {
                // As the SQL counter functions: non-finite readings are skipped.
                if !raw.is_finite() {
                    continue;
                }
                let Some(p) = prev.replace((local, raw)) else { continue };
                let Some(rate) = rule.rate(p, (local, raw)) else { continue };
                rate
            } else if throttle {
                // Thermal and hardware slowdown bits (0x8 HW slowdown, 0x20 SW thermal, 0x40 HW
                // thermal); power capping (0x4) is routine and ignored.
                let bits = if raw.is_finite() && raw >= 0.0 { raw as u64 } else { 0 };
                if bits & 0x68 != 0 { 1.0 } else { 0.0 }
            } else {
                raw
            };
            if t >= from && t < to && value.is_finite() {
                out.t.push(t);
                out.v.push(value);
            }
        }
    }
    out
}

/// Median per grid slot (NaN when empty); samples arrive in time order.
pub(crate) fn to_grid(s: &Signal, grid: &Grid) -> Vec<f32> {
    let mut out = vec![f32::NAN; grid.slots];
    let mut buf: Vec<f64> = Vec::new();
    let mut cur: Option<usize> = None;
    let flush = |slot: Option<usize>, buf: &mut Vec<f64>, out: &mut Vec<f32>| {
        if let Some(i) = slot
            && !buf.is_empty()
        {
            out[i] = median_in_place(buf) as f32;
        }
        buf.clear();
    };
    // The current slot's `[lo, hi)`: sorted samples stay in it for a while, without a division.
    let (mut lo, mut hi) = (i64::MAX, i64::MIN);
    for (&t, &v) in s.t.iter().zip(&s.v) {
        let slot = if t >= lo && t < hi {
            cur
        } else {
            let slot = grid.slot(t);
            (lo, hi) = slot.map_or((i64::MAX, i64::MIN), |i| (grid.time(i), grid.time(i).saturating_add(grid.step)));
            slot
        };
        if slot != cur {
            flush(cur, &mut buf, &mut out);
            cur = slot;
        }
        if slot.is_some() {
            buf.push(v);
        }
    }
    flush(cur, &mut buf, &mut out);
    out
}

/// Median across series per slot, compact `(slot time, value)` for slots with data.
pub(crate) fn across_median(grids: &[Vec<f32>], grid: &Grid) -> Vec<(i64, f64)> {
    let mut out = Vec::new();
    let mut buf: Vec<f64> = Vec::with_capacity(grids.len());
    for i in 0..grid.slots {
        buf.clear();
        buf.extend(grids.iter().filter_map(|g| g.get(i)).filter(|v| v.is_finite()).map(|&v| f64::from(v)));
        if !buf.is_empty() {
            out.push((grid.time(i), median_in_place(&mut buf)));
        }
    }
    out
}

/// Healthy time before an episode shorter than this (between recurring episodes) is too short
/// for a baseline of every series (a 15 s scrape gives two samples in 30 s).
const SHORT_GAP_NS: i64 = 240 * SEC;

/// The longest healthy stretch `[start, end)` before episode `k` (from the start of the
/// analysed data or a recovery to the next episode's onset), if any.
fn longest_healthy(spans: &[episodes::Span], points: &[(i64, f64)], from: i64, k: usize) -> Option<(i64, i64)> {
    (0..=k)
        .filter_map(|j| {
            let start = if j == 0 { from } else { spans[j - 1].recovered.then(|| points[spans[j - 1].end].0)? };
            let end = points[spans[j].start].0;
            (spans[j].start > 0 && end > start).then_some((start, end))
        })
        .max_by_key(|(a, b)| b - a)
}

/// The windows of each episode: the degraded span `[onset, recovery)` against the healthy time
/// before it (since the previous episode's recovery), or after it when it starts with the signal.
fn episode_windows(
    found: &episodes::Episodes,
    points: &[(i64, f64)],
    from: i64,
    ctx: &JobContext,
    metric: &str,
    hosts: &[&str],
    timeline: Timeline<'_>,
) -> Vec<EpisodeData> {
    let mut out: Vec<EpisodeData> = Vec::new();
    let spans = &found.spans;
    for (k, span) in spans.iter().enumerate() {
        let t = points[span.start].0;
        let recovery = span.recovered.then(|| points[span.end].0);
        // A stage that a further rise continues is analysed up to that rise.
        let escalates = spans.get(k + 1).is_some() && episodes::Span::continues(spans, k + 1);
        let to = if escalates { points[span.end].0 } else { recovery.unwrap_or(ctx.to) };
        if to <= ctx.from {
            continue;
        }
        let from_start = span.start == 0;
        let windows = if from_start {
            let Some(r) = recovery else { continue };
            let next = spans.get(k + 1).map_or(ctx.to, |s| points[s.start].0);
            Windows { from: r, base_end: next, search: t, slowdown: t, to: r }
        } else {
            let prev = if k > 0 { spans[k - 1].recovered.then(|| points[spans[k - 1].end].0) } else { None };
            let own = prev.unwrap_or(from);
            let mut first = k;
            while episodes::Span::continues(spans, first) {
                first -= 1;
            }
            match longest_healthy(spans, points, from, k) {
                // A later stage: compared with the healthy time before the first stage.
                Some((a, b)) if first < k => Windows::borrowed(a, b, points[spans[first].start].0, to, t),
                // Too little healthy time since the previous episode (recurring faults): the
                // longest healthy stretch before it is the baseline.
                Some((a, b)) if t - own < SHORT_GAP_NS && b - a > t - own => Windows::borrowed(a, b, own, to, t),
                _ => Windows::around(own, to, t),
            }
        };
        let u = hosts.iter().map(|h| timeline.uncertainty(h, t)).max().unwrap_or(0);
        let slowdown = Slowdown {
            time: Some(t),
            uncertainty_ns: Some(u),
            metric: metric.to_string(),
            baseline: found.baseline,
            degraded: span.level,
        };
        let continues = episodes::Span::continues(spans, k);
        out.push(EpisodeData { slowdown, windows, recovery, from_start, continues });
    }
    out
}
