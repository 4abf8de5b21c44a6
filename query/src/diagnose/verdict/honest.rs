//! Honest verdicts: what the diagnosis lacks, `insufficient_data` instead of a false "healthy",
//! "slow from the start of the window" when there is no healthy time to compare with, the main
//! episode, and the confidence of a verdict.

use std::fmt;

use lockstep_engine::metrics::names;

use super::super::load::{Loaded, MIN_PACE_POINTS, STEP_METRIC};
use super::super::{ClockMode, Diagnosis, Episode, NearMiss, Slowdown};
use super::JobContext;
use super::calibration::{VerdictKind, calibrated};

/// A median data-loader wait of at least this share of the step time is a slow job even
/// without a healthy baseline (ranks wait for input instead of computing).
const INPUT_SHARE_ABSOLUTE: f64 = 0.3;
/// Episodes shorter than this are harder to attribute (fewer samples of every signal).
const SHORT_EPISODE_NS: i64 = 60 * lockstep_engine::model::SEC;

/// A signal the diagnosis lacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Missing {
    /// No step-time series.
    StepTime,
    /// No per-rank collective times.
    Collectives,
    /// No data-loader wait.
    LoaderWait,
    /// No topology.json.
    Topology,
    /// Too little pace data in the window.
    Data,
    /// No clock model for any host of a job on several hosts (no clock input was imported).
    Clock,
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Missing::StepTime => {
                "step time (train_step_duration_seconds): episodes are found on the collective time, \
                 and a slowdown that delays every rank alike cannot be seen"
            }
            Missing::Collectives => {
                "collective times (nccl_collective_exec_time_microseconds): the step time cannot be split into \
                 transfer and straggler wait"
            }
            Missing::LoaderWait => {
                "data-loader wait (dataloader_wait_seconds): input-bound slowdowns are inferred from storage and CPU only"
            }
            Missing::Topology => {
                "topology (topology.json): NIC and switch ports on the job's paths are unknown, so fabric faults \
                 cannot be located"
            }
            Missing::Data => "pace data: fewer than 30 seconds of step or collective times in the window",
            Missing::Clock => {
                "clock input (clock_sync.csv in a bundle, or the server's clock sync): no host's clock is \
                 corrected, so onsets on different hosts are ordered by their own clocks, and a skew larger \
                 than the time between them reorders them"
            }
        })
    }
}

/// The signals the diagnosis of `ctx` lacks.
pub(crate) fn missing_signals(ctx: &JobContext, data: &Loaded) -> Vec<Missing> {
    let has = |metric: &str| ctx.series.iter().any(|m| m.metric() == metric);
    let mut out = Vec::new();
    if !has(STEP_METRIC) {
        out.push(Missing::StepTime);
    }
    if !has(names::COLLECTIVE_EXEC_TIME) {
        out.push(Missing::Collectives);
    }
    if !has(names::DATALOADER_WAIT) {
        out.push(Missing::LoaderWait);
    }
    if ctx.no_topology {
        out.push(Missing::Topology);
    }
    if data.pace.points < MIN_PACE_POINTS {
        out.push(Missing::Data);
    }
    // Raw time is what `--clock raw` asks for; corrected time without a single model is raw
    // time nobody asked for.
    let clock = &data.clock;
    if clock.mode == ClockMode::Corrected && clock.hosts > 1 && clock.hosts_with_model == 0 {
        out.push(Missing::Clock);
    }
    out
}

/// The top-level slowdown when there is no episode.
pub(crate) fn no_slowdown(data: &Loaded) -> Slowdown {
    let b = if data.pace.baseline.is_finite() { data.pace.baseline } else { 0.0 };
    Slowdown { time: None, uncertainty_ns: None, metric: data.pace.metric.to_string(), baseline: b, degraded: b }
}

/// A `--from` that reaches before the window, when the job's data may start earlier.
pub(crate) fn earlier_from(ctx: &JobContext, data: &Loaded) -> i64 {
    if data.pace.from < ctx.from {
        return data.pace.from;
    }
    ctx.from.saturating_sub(30 * 60 * lockstep_engine::model::SEC).max(ctx.job.start.min(ctx.from))
}

/// A `healthy` verdict whose confidence the near miss lowers below this names it (its text and
/// its next action): the near miss is then what to look at.
const NEAR_MISS_NAMED: f64 = 0.9;

/// The near miss a `healthy` verdict names: one that lowered its confidence below
/// [`NEAR_MISS_NAMED`].
pub(super) fn named_near_miss(d: &Diagnosis) -> Option<NearMiss> {
    d.near_miss.filter(|m| m.rise > 0.0 && d.confidence < NEAR_MISS_NAMED)
}

/// The verdict without a slowdown episode: healthy, slow from the start, or insufficient data.
pub(crate) fn without_episode(d: &mut Diagnosis, ctx: &JobContext, data: &Loaded, missing: &[Missing]) {
    let job = &ctx.job.job;
    let list = |m: &[Missing]| m.iter().map(|m| format!("no {m}")).collect::<Vec<_>>().join("; ");
    if missing.contains(&Missing::Data) || (missing.contains(&Missing::StepTime) && data.pace.points == 0) {
        d.status = "insufficient_data".into();
        d.rule_confidence = 0.0;
        d.confidence = 0.0;
        d.verdict = format!("insufficient data: cannot tell whether {job} is slow — {}", list(missing));
        return;
    }
    if missing.contains(&Missing::StepTime) {
        d.status = "insufficient_data".into();
        d.rule_confidence = 0.3;
        d.confidence = calibrated(VerdictKind::Other, 0.3);
        d.verdict = format!(
            "insufficient data: the collective time of {job} shows no slowdown, but without step time a slowdown \
             that delays every rank alike (input, checkpoints) cannot be excluded — {}",
            list(missing)
        );
        return;
    }
    // Slow throughout? The ranks' own input wait says so without a baseline.
    let step = d.slowdown.baseline;
    let share = loader_share(ctx, data, step);
    if step > 0.0 && share >= INPUT_SHARE_ABSOLUTE {
        d.status = "slow_from_start".into();
        d.rule_confidence = 0.5;
        d.confidence = calibrated(VerdictKind::Other, 0.5);
        let from = earlier_from(ctx, data);
        d.suggested_from = (from < ctx.from).then_some(from);
        let hint = match d.suggested_from {
            Some(t) => format!("try --from {}", super::super::format::fmt_rfc3339(t)),
            None => "the job's data starts with the window; no earlier --from can help".to_string(),
        };
        d.verdict = format!(
            "slow from the start of the window: the ranks of {job} wait for input {:.0} % of every step \
             (median step {step:.3} s) and the window holds no healthy time to compare with; {hint}",
            share * 100.0
        );
        return;
    }
    d.status = "healthy".into();
    d.rule_confidence = if missing.is_empty() { 0.9 } else { 0.7 };
    let rise = d.near_miss.map_or(0.0, |m| m.rise);
    d.confidence = calibrated(VerdictKind::Healthy { rise }, d.rule_confidence);
    let mut text = format!(
        "healthy: no sustained step-time slowdown of {job} (median step {:.3} s over the window); nothing to blame",
        d.slowdown.baseline
    );
    if let Some(m) = named_near_miss(d) {
        text.push_str(&format!(
            "; the largest rise outside any episode: {:+.0} % for {:.0} s from {} (below the {:.0} % threshold \
             or too short to be sustained: a fault near the detection limit looks like this)",
            m.rise * 100.0,
            (m.end - m.start) as f64 / 1e9,
            super::super::format::fmt_time(m.start),
            (super::super::episodes::SLOWDOWN_FACTOR - 1.0) * 100.0
        ));
    }
    if !missing.is_empty() {
        text.push_str(&format!(" (with gaps: {})", list(missing)));
    }
    d.verdict = text;
}

/// Median over ranks of the data-loader wait's median, as a share of the step time.
fn loader_share(ctx: &JobContext, data: &Loaded, step: f64) -> f64 {
    let mut scratch = Vec::new();
    let medians: Vec<f64> = ctx
        .series
        .iter()
        .zip(&data.series)
        .filter(|(m, _)| m.metric() == names::DATALOADER_WAIT)
        .map(|(_, s)| super::super::stats::median(s.grid.iter().map(|&v| f64::from(v)), &mut scratch))
        .collect();
    let wait = super::super::stats::median(medians, &mut scratch);
    if wait.is_finite() && step > 0.0 { wait / step } else { 0.0 }
}

/// The main episode: the first stage of the costliest slowdown (excess pace × duration, summed
/// over the stages of an escalation, `continues[k]` = episode `k` continues `k − 1`); ties go to
/// the first. The first stage is what changed first.
pub(crate) fn main_episode(episodes: &[Episode], continues: &[bool], to: i64) -> usize {
    let stage_end = |k: usize| {
        if continues.get(k + 1).copied().unwrap_or(false) {
            episodes.get(k + 1).map_or(to, Episode::start)
        } else {
            episodes[k].recovery.unwrap_or(to)
        }
    };
    let cost = |k: usize| {
        let e = &episodes[k];
        (e.slowdown.degraded - e.slowdown.baseline).max(0.0) * (stage_end(k) - e.start()).max(0) as f64
    };
    let (mut best, mut best_cost) = (0, f64::NEG_INFINITY);
    let mut k = 0;
    while k < episodes.len() {
        let first = k;
        let mut total = cost(k);
        while continues.get(k + 1).copied().unwrap_or(false) && k + 1 < episodes.len() {
            k += 1;
            total += cost(k);
        }
        if total > best_cost {
            (best, best_cost) = (first, total);
        }
        k += 1;
    }
    best
}

/// The confidence of an episode's verdict: the rule's own confidence, lowered for what the
/// diagnosis lacks and for episodes that are hard to attribute.
pub(crate) fn confidence(rule: f64, missing: &[Missing], e: &Episode) -> f64 {
    let mut c = rule.clamp(0.0, 1.0);
    for m in missing {
        c *= match m {
            Missing::StepTime => 0.7,
            Missing::Collectives => 0.8,
            Missing::LoaderWait => 0.9,
            Missing::Topology if e.root_cause_domain.as_deref() == Some("network") => 0.6,
            Missing::Topology => 0.95,
            Missing::Data => 0.5,
            Missing::Clock => 0.9,
        };
    }
    if e.from_start {
        c *= 0.8;
    }
    if e.recovery.is_some_and(|end| end - e.start() < SHORT_EPISODE_NS) {
        c *= 0.9;
    }
    (c * 100.0).round() / 100.0
}
