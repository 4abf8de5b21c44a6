//! Reading the job's series: one engine scan, clock correction, counter rates, the common grid,
//! the slowdown onset and the per-series features, in parallel over series.

use std::collections::HashSet;

use lockstep_engine::Rows;
use lockstep_engine::Store;
use lockstep_engine::analysis::{ChangeConfig, ChangeDetector};
use lockstep_engine::clock::ClockSet;
use lockstep_engine::metrics::names;
use lockstep_engine::store::ScanRequest;
use roaring::RoaringBitmap;

use super::analyze::{Features, Windows, features};
use super::context::{JobContext, SeriesMeta};
pub(crate) use super::signal::{Signal, Timeline};
use super::stats::median_in_place;
use super::{ClockInfo, ClockMode, DiagnoseError, DiagnoseOptions, Slowdown};

/// The step-time metric.
pub(crate) const STEP_METRIC: &str = names::STEP_TIME;
/// Local-time padding of the scan around the window (covers clock offsets).
const SCAN_PAD_NS: i64 = 600_000_000_000;
/// A slowdown must raise the median step time by at least this factor.
pub(crate) const SLOWDOWN_FACTOR: f64 = 1.10;
/// Most grid slots in a window (the grid step grows beyond that).
const MAX_SLOTS: i64 = 4000;
use lockstep_engine::model::SEC;
/// A slower segment lasting this long is sustained even with few steps in it.
const SUSTAIN_NS: i64 = 20 * SEC;

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
    /// Features (None: too few samples).
    pub feat: Option<Features>,
}

/// Everything read and computed per series.
#[derive(Debug)]
pub(crate) struct Loaded {
    /// The grid.
    pub grid: Grid,
    /// The slowdown (time None = healthy).
    pub slowdown: Slowdown,
    /// Analysis windows (None when healthy).
    pub windows: Option<Windows>,
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
    clocks: Option<&ClockSet>,
    opts: &DiagnoseOptions,
) -> Result<Loaded, DiagnoseError> {
    let timeline = match clocks {
        Some(c) => Timeline::corrected(c),
        None => Timeline::raw(),
    };
    let grid = Grid::new(ctx.from, ctx.to);
    let threads =
        if opts.threads == 0 { std::thread::available_parallelism().map_or(2, |n| n.get()) } else { opts.threads };
    let range = Some((ctx.from.saturating_sub(SCAN_PAD_NS), ctx.to.saturating_add(SCAN_PAD_NS)));

    // 1. Step time: the slowdown and the analysis windows.
    let step_idx: Vec<usize> = (0..ctx.series.len()).filter(|&i| ctx.series[i].metric() == STEP_METRIC).collect();
    let parts = scan(store, range, step_idx.iter().map(|&i| ctx.series[i].id))?;
    let step_grids: Vec<Vec<f32>> = step_idx
        .iter()
        .map(|&i| {
            let s = derive(&ctx.series[i], &parts, timeline, ctx.from, ctx.to);
            to_grid(&s, &grid)
        })
        .collect();
    drop(parts);
    let step_points = across_median(&step_grids, &grid);
    let step_hosts: Vec<&str> = step_idx.iter().map(|&i| ctx.series[i].host.as_str()).collect();
    let (slowdown, windows) = find_slowdown(&step_points, ctx, &step_hosts, timeline);

    // 2. Every series of the job, in one scan.
    let parts = scan(store, range, ctx.series.iter().map(|s| s.id))?;
    let samples = parts.iter().map(Rows::len).sum();
    let chunk = ctx.series.len().div_ceil(threads.max(1)).max(1);
    let mut series: Vec<SeriesOut> = Vec::with_capacity(ctx.series.len());
    std::thread::scope(|scope| {
        let handles: Vec<_> = ctx
            .series
            .chunks(chunk)
            .map(|metas| {
                let parts = &parts;
                let windows = windows.as_ref();
                scope.spawn(move || {
                    metas
                        .iter()
                        .map(|meta| {
                            let s = derive(meta, parts, timeline, ctx.from, ctx.to);
                            let feat = windows.and_then(|w| features(&s, w, meta, timeline));
                            SeriesOut { grid: to_grid(&s, &grid), feat }
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for h in handles {
            match h.join() {
                Ok(out) => series.extend(out),
                // A panicking worker is a bug; keep the positions aligned with empty results.
                Err(_) => series.extend((0..chunk).map(|_| SeriesOut { grid: Vec::new(), feat: None })),
            }
        }
    });
    series.truncate(ctx.series.len());
    while series.len() < ctx.series.len() {
        series.push(SeriesOut { grid: Vec::new(), feat: None });
    }

    let hosts: HashSet<&str> = ctx.series.iter().map(|s| s.host.as_str()).collect();
    let hosts_with_model = hosts.iter().filter(|h| timeline.model(h).is_some()).count();
    let clock = ClockInfo {
        mode: opts.clock,
        version: match opts.clock {
            ClockMode::Corrected => clocks.map_or(0, ClockSet::version),
            ClockMode::Raw => 0,
        },
        hosts_with_model,
        hosts: hosts.len(),
    };
    Ok(Loaded { grid, slowdown, windows, series, samples, clock, step_points })
}

/// One scan of `ids` over a local-time range; rows per time partition, sorted by (series, time).
fn scan(store: &Store, time: Option<(i64, i64)>, ids: impl Iterator<Item = u32>) -> Result<Vec<Rows>, DiagnoseError> {
    let set: RoaringBitmap = ids.collect();
    if set.is_empty() {
        return Ok(Vec::new());
    }
    let mut scan = store.scan(ScanRequest { time, series: Some(set) })?;
    let mut parts = Vec::new();
    while let Some(rows) = scan.next_rows() {
        parts.push(rows?);
    }
    Ok(parts)
}

/// The series' samples on the timeline, as rates for counters, inside `[from, to)`.
pub(crate) fn derive(meta: &SeriesMeta, parts: &[Rows], timeline: Timeline<'_>, from: i64, to: i64) -> Signal {
    let model = timeline.model(&meta.host);
    let info = meta.info.as_ref();
    let counter = meta.is_counter();
    let throttle = matches!(meta.metric(), names::THROTTLE_REASONS | names::CLOCKS_EVENT_REASONS);
    let mut out = Signal::default();
    let mut prev: Option<(i64, f64)> = None;
    for rows in parts {
        let lo = rows.series.partition_point(|&s| s < meta.id);
        let hi = rows.series.partition_point(|&s| s <= meta.id);
        for k in lo..hi {
            let (local, raw) = (rows.time[k], rows.value[k]);
            let t = model.map_or(local, |m| m.to_reference(local));
            let value = if counter {
                let p = prev.replace((local, raw));
                let Some((pl, pv)) = p else { continue };
                if local <= pl {
                    continue;
                }
                let inc = info.map_or(raw - pv, |i| i.increase(pv, raw));
                inc / ((local - pl) as f64 / 1e9)
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
    for (&t, &v) in s.t.iter().zip(&s.v) {
        let slot = grid.slot(t);
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

/// The slowdown onset on the median step time: the first robust change point (PELT on normal
/// scores) after which the step time stays at least 10 % above the baseline.
fn find_slowdown(
    points: &[(i64, f64)],
    ctx: &JobContext,
    hosts: &[&str],
    timeline: Timeline<'_>,
) -> (Slowdown, Option<Windows>) {
    let values: Vec<f64> = points.iter().map(|p| p.1).collect();
    let overall = trimmed_mean(&values);
    let healthy = |baseline: f64| {
        (
            Slowdown {
                time: None,
                uncertainty_ns: None,
                metric: STEP_METRIC.to_string(),
                baseline: if baseline.is_finite() { baseline } else { 0.0 },
                degraded: if baseline.is_finite() { baseline } else { 0.0 },
            },
            None,
        )
    };
    let cfg = ChangeConfig::default();
    let cps = ChangeDetector::new().detect(&values, &cfg);
    let first_cp = cps.first().map_or(values.len(), |c| c.index);
    let baseline = trimmed_mean(&values[..first_cp]);
    if !baseline.is_finite() || baseline <= 0.0 {
        return healthy(overall);
    }
    for (k, cp) in cps.iter().enumerate() {
        let end = cps.get(k + 1).map_or(values.len(), |c| c.index);
        // Sustained: enough steps, or long enough (very slow steps are few per minute).
        let lasting = points[end - 1].0 - points[cp.index].0 >= SUSTAIN_NS;
        if end - cp.index < cfg.sustain && !lasting {
            continue;
        }
        // Levels are trimmed means: bursts of slow steps cost throughput even when the median
        // step is unchanged; a lone checkpoint step or straggler is trimmed away.
        let segment = trimmed_mean(&values[cp.index..end]);
        let degraded = trimmed_mean(&values[cp.index..]);
        if segment >= SLOWDOWN_FACTOR * baseline && degraded >= SLOWDOWN_FACTOR * baseline {
            if cp.index < cfg.min_size {
                break;
            }
            let t = points[cp.index].0;
            let u = hosts.iter().map(|h| timeline.uncertainty(h, t)).max().unwrap_or(0);
            let slowdown = Slowdown {
                time: Some(t),
                uncertainty_ns: Some(u),
                metric: STEP_METRIC.to_string(),
                baseline,
                degraded,
            };
            return (slowdown, Some(Windows::around(ctx.from, ctx.to, t)));
        }
    }
    healthy(baseline)
}

/// Mean of the middle 90 % (5 % trimmed at each end); NaN when empty.
fn trimmed_mean(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let cut = v.len() / 20;
    let mid = &v[cut..v.len() - cut];
    mid.iter().sum::<f64>() / mid.len() as f64
}
