//! What the ranks waited on: the step-time rise split into input wait, transfer and straggler
//! wait, and the straggler rank.

use super::*;

/// The straggler rank: its host and GPU.
#[derive(Debug, Clone)]
pub(super) struct Culprit {
    pub(super) rank: String,
    pub(super) host: String,
    pub(super) gpu: Option<String>,
}

impl Culprit {
    /// `rank 5`, or `the rank on node-03/gpu5` when no series links its rank.
    pub(super) fn display(&self) -> String {
        match (&self.rank, &self.gpu) {
            (r, Some(g)) if r == "?" => {
                format!("the rank on {}", lockstep_engine::metrics::entity::gpu_name(&self.host, g))
            }
            (r, None) if r == "?" => format!("a rank on {}", self.host),
            (r, _) => format!("rank {r}"),
        }
    }
}

/// Splits the step-time rise into input wait, transfer and straggler wait.
/// The rise (s) of the pure transfer time: per grid slot the fastest rank's all-reduce time
/// (the rank that entered last waits for nobody, so its time is the transfer), then the median
/// after the slowdown minus the median of the baseline. Per slot, not per rank: when a
/// different rank is late every step (bursty input waits), every rank's own median includes
/// waiting, but the fastest rank of each step does not. None with fewer than 2 ranks.
pub(super) fn fastest_transfer_rise(ctx: &JobContext, data: &Loaded, w: Windows) -> Option<f64> {
    let execs: Vec<&[f32]> = ctx
        .series
        .iter()
        .zip(&data.series)
        .filter(|(m, _)| m.metric() == EXEC_METRIC)
        .map(|(_, s)| s.grid.as_slice())
        .collect();
    if execs.len() < 2 {
        return None;
    }
    let quorum = (execs.len() / 2).max(2);
    let (mut before, mut after) = (Vec::new(), Vec::new());
    for k in 0..data.grid.slots {
        let t = data.grid.start + k as i64 * data.grid.step;
        let bucket = if t >= w.from && t < w.base_end {
            &mut before
        } else if t >= w.slowdown && t < w.to {
            &mut after
        } else {
            continue;
        };
        let present = execs.iter().filter_map(|g| g.get(k).copied()).filter(|v| v.is_finite());
        let (n, min) = present.fold((0usize, f64::INFINITY), |(n, m), v| (n + 1, m.min(f64::from(v))));
        if n >= quorum {
            bucket.push(min);
        }
    }
    let mut scratch = Vec::new();
    let rise = (median(after, &mut scratch) - median(before, &mut scratch)) / 1e6;
    rise.is_finite().then_some(rise)
}

pub(super) fn decompose(
    scored: &[Scored<'_>],
    pace_rise: f64,
    fastest: Option<f64>,
    assoc: &assoc::Assoc,
) -> (Decomposition, Option<Culprit>) {
    let mut scratch = Vec::new();
    let waits: Vec<&Scored<'_>> = scored.iter().filter(|s| s.meta.metric() == WAIT_METRIC).collect();
    let execs: Vec<&Scored<'_>> = scored.iter().filter(|s| s.meta.metric() == EXEC_METRIC).collect();
    let input_wait = median(waits.iter().map(|s| s.feat.mean1 - s.feat.mean0), &mut scratch);
    let rises: Vec<f64> = execs.iter().map(|s| (s.feat.m1 - s.feat.m0) / 1e6).collect();
    let min_rise = rises.iter().copied().fold(f64::INFINITY, f64::min);
    let med_rise = median(rises.iter().copied(), &mut scratch);
    let culprit = execs.iter().zip(&rises).min_by(|a, b| a.1.total_cmp(b.1)).map(|(s, _)| {
        let who = assoc.worker(s.meta);
        Culprit { rank: who.rank.unwrap_or_else(|| "?".to_string()), host: who.host, gpu: who.gpu }
    });
    // Transfer: the per-step fastest rank's rise (falls back to the smallest per-rank rise);
    // straggler wait: what the typical rank waits beyond that.
    let transfer = fastest.map_or(min_rise, |f| f.min(med_rise));
    let (transfer, straggler) =
        if transfer.is_finite() { (transfer, (med_rise - transfer).max(0.0)) } else { (0.0, 0.0) };
    let mut sorted = rises.clone();
    sorted.sort_by(f64::total_cmp);
    let isolation = match sorted.as_slice() {
        [a, b, ..] if med_rise - a > 1e-9 => ((b - a) / (med_rise - a)).clamp(0.0, 1.0),
        _ => 0.0,
    };
    let wait_p90 = super::super::stats::quantile(waits.iter().map(|s| s.feat.mean1 - s.feat.mean0), 0.9, &mut scratch);
    let dec = Decomposition {
        step: pace_rise,
        input_wait: if input_wait.is_finite() { input_wait } else { 0.0 },
        transfer,
        straggler: if straggler.is_finite() { straggler } else { 0.0 },
        straggler_rank: culprit.as_ref().map(|c| if c.rank == "?" { c.display() } else { c.rank.clone() }),
        straggler_isolation: isolation,
        input_wait_p90: if wait_p90.is_finite() { wait_p90 } else { 0.0 },
    };
    (dec, culprit)
}
