//! Robust change-point detection and onset: PELT on normal scores.
//!
//! # Method
//! 1. Values (in time order; `NaN` removed by the caller, ±inf allowed) are replaced by their
//!    normal scores ([`super::ranks`]): standard normal under "no change" whatever the noise
//!    distribution, so heavy-tailed latency needs no special handling.
//! 2. PELT ([`super::pelt`]) with the Gaussian mean-and-variance cost finds the segmentation
//!    minimising `Σ cost + β · segments`, with the BIC-like penalty
//!    `β = penalty_scale · 3.5 · ln n` (two parameters and one location per segment, plus a
//!    margin). The scores have unit variance by construction, so β needs no noise-scale
//!    estimate and no per-series tuning.
//! 3. Each change is refined to the exact sample; a profile interval on the two-segment cost
//!    gives an approximate 95 % confidence interval on its position.
//! 4. `before` / `after` are the medians of the original values in the two adjacent segments.

use super::pelt::{NormalCost, PeltConfig, pelt, profile_interval, refine};
use super::ranks::normal_scores;

/// Default fewest samples per segment.
pub const DEFAULT_MIN_SIZE: usize = 5;
/// Default number of coarse PELT candidates (more samples use a candidate grid).
pub const DEFAULT_MAX_CANDIDATES: usize = 1024;
/// Default profile threshold for the confidence interval (cost units, −2 log-likelihood).
pub const DEFAULT_CI_THRESHOLD: f64 = 10.0;
/// Penalty per segment, in units of `ln n`: BIC's 3 (mean, variance, location), raised so
/// that pure noise gives a change in well under 1 % of series of 100 or more samples.
pub const PENALTY_PER_LN_N: f64 = 3.5;
/// Default seed for tie-breaking among equal values.
pub const DEFAULT_SEED: u64 = 0x0c4a_6e9e_5eed_0001;

/// Options for change detection.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChangeConfig {
    /// Fewest samples per segment.
    pub min_size: usize,
    /// Multiplier on the BIC-like penalty `3.5 · ln n` (1.0 = default sensitivity).
    pub penalty_scale: f64,
    /// Cap on coarse candidates; longer series search every `⌈n / max_candidates⌉` samples.
    pub max_candidates: usize,
    /// Fewest samples the new level must hold for [`onset`] to call it sustained.
    pub sustain: usize,
    /// Profile-cost threshold for the confidence interval.
    pub ci_threshold: f64,
    /// Seed for tie-breaking among equal values.
    pub seed: u64,
}

impl Default for ChangeConfig {
    fn default() -> Self {
        Self {
            min_size: DEFAULT_MIN_SIZE,
            penalty_scale: 1.0,
            max_candidates: DEFAULT_MAX_CANDIDATES,
            sustain: 2 * DEFAULT_MIN_SIZE,
            ci_threshold: DEFAULT_CI_THRESHOLD,
            seed: DEFAULT_SEED,
        }
    }
}

/// A detected change, by sample index.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChangePoint {
    /// First sample of the new segment.
    pub index: usize,
    /// Median of the segment before.
    pub before: f64,
    /// Median of the segment after.
    pub after: f64,
    /// Confidence interval on `index` (inclusive).
    pub ci: (usize, usize),
    /// Length of the segment after the change (samples).
    pub after_len: usize,
}

/// A detected change, in time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimedChange {
    /// Time of the first sample of the new segment (ns).
    pub time: i64,
    /// Median of the segment before.
    pub before: f64,
    /// Median of the segment after.
    pub after: f64,
    /// Earliest plausible change time (ns).
    pub ci_lo: i64,
    /// Latest plausible change time (ns).
    pub ci_hi: i64,
}

/// Reusable detector (keeps buffers across series).
#[derive(Debug, Default)]
pub struct ChangeDetector {
    scores: Vec<f64>,
    scratch: Vec<f64>,
}

impl ChangeDetector {
    /// A detector with empty buffers.
    pub fn new() -> Self {
        Self::default()
    }

    /// All change points of `values` (time-ordered, no `NaN`).
    pub fn detect(&mut self, values: &[f64], cfg: &ChangeConfig) -> Vec<ChangePoint> {
        let Some((cost, cps)) = self.segment(values, cfg) else {
            return Vec::new();
        };
        let n = values.len();
        let min_size = cfg.min_size.max(2);
        let mut out = Vec::with_capacity(cps.len());
        for (i, &cp) in cps.iter().enumerate() {
            let left = if i == 0 { 0 } else { cps[i - 1] };
            let right = cps.get(i + 1).copied().unwrap_or(n);
            let ci = profile_interval(&cost, left, cp, right, min_size, cfg.ci_threshold);
            out.push(ChangePoint {
                index: cp,
                before: median(&values[left..cp], &mut self.scratch),
                after: median(&values[cp..right], &mut self.scratch),
                ci,
                after_len: right - cp,
            });
        }
        out
    }

    /// The first sustained change of `values` (time-ordered, no `NaN`).
    ///
    /// Segments shorter than `cfg.sustain` samples are transients and are skipped. The first
    /// sustained segment is the baseline; each following sustained segment is compared with
    /// the baseline (the union of all sustained segments so far), and the first one whose
    /// split from the baseline still pays the penalty marks the onset, placed at the end of
    /// the baseline (so a spike leading into a new level counts from the spike). Sustained
    /// segments that do not differ from the baseline join it. `None` if no change qualifies.
    pub fn onset(&mut self, values: &[f64], cfg: &ChangeConfig) -> Option<ChangePoint> {
        let (cost, cps) = self.segment(values, cfg)?;
        let n = values.len();
        let mut bounds = Vec::with_capacity(cps.len() + 2);
        bounds.push(0);
        bounds.extend_from_slice(&cps);
        bounds.push(n);
        let sustain = cfg.sustain.max(1);
        let mut long = bounds.windows(2).map(|w| (w[0], w[1])).filter(|(a, b)| b - a >= sustain);
        let first = long.next()?;
        let mut base = vec![first];
        let mut base_moments = cost.moments(first.0, first.1);
        let penalty = self.penalty(n, cfg);
        for (a, b) in long {
            let seg = cost.moments(a, b);
            let gain = base_moments.union(seg).cost() - base_moments.cost() - seg.cost();
            let last = base[base.len() - 1];
            if gain > penalty {
                let onset = last.1;
                let min_size = cfg.min_size.max(2);
                let ci = profile_interval(&cost, last.0, onset, b, min_size, cfg.ci_threshold);
                self.scratch.clear();
                let mut pool = Vec::new();
                for &(s, e) in &base {
                    pool.extend_from_slice(&values[s..e]);
                }
                return Some(ChangePoint {
                    index: onset,
                    before: median(&pool, &mut self.scratch),
                    after: median(&values[a..b], &mut self.scratch),
                    ci,
                    after_len: b - onset,
                });
            }
            base.push((a, b));
            base_moments = base_moments.union(seg);
        }
        None
    }

    /// Change points of a time series given as unsorted `(time, value)` rows. Rows with a
    /// `NaN` value are ignored; rows are ordered by time (then value).
    pub fn detect_timed(&mut self, times: &[i64], values: &[f64], cfg: &ChangeConfig) -> Vec<TimedChange> {
        let (t, v) = sorted_rows(times, values);
        self.detect(&v, cfg).into_iter().map(|c| timed(&t, &c)).collect()
    }

    /// [`ChangeDetector::onset`] of unsorted `(time, value)` rows (`NaN` values ignored).
    pub fn onset_timed(&mut self, times: &[i64], values: &[f64], cfg: &ChangeConfig) -> Option<TimedChange> {
        let (t, v) = sorted_rows(times, values);
        self.onset(&v, cfg).map(|c| timed(&t, &c))
    }

    fn penalty(&self, n: usize, cfg: &ChangeConfig) -> f64 {
        cfg.penalty_scale * PENALTY_PER_LN_N * (n as f64).ln()
    }

    /// Scores, cost and refined change points; `None` for series too short or constant.
    fn segment(&mut self, values: &[f64], cfg: &ChangeConfig) -> Option<(NormalCost, Vec<usize>)> {
        let n = values.len();
        let min_size = cfg.min_size.max(2);
        if n < 2 * min_size || is_constant(values) {
            return None;
        }
        normal_scores(values, cfg.seed, &mut self.scores);
        let cost = NormalCost::new(&self.scores);
        let jump = n.div_ceil(cfg.max_candidates.max(1)).max(1);
        let penalty = self.penalty(n, cfg);
        let mut cps = pelt(&cost, &PeltConfig { penalty, min_size, jump });
        if jump > 1 {
            refine(&cost, &mut cps, min_size, jump);
        }
        Some((cost, cps))
    }
}

fn timed(t: &[i64], c: &ChangePoint) -> TimedChange {
    TimedChange { time: t[c.index], before: c.before, after: c.after, ci_lo: t[c.ci.0], ci_hi: t[c.ci.1] }
}

/// One-off [`ChangeDetector::detect`].
pub fn change_points(values: &[f64], cfg: &ChangeConfig) -> Vec<ChangePoint> {
    ChangeDetector::new().detect(values, cfg)
}

/// One-off [`ChangeDetector::onset`].
pub fn onset(values: &[f64], cfg: &ChangeConfig) -> Option<ChangePoint> {
    ChangeDetector::new().onset(values, cfg)
}

fn sorted_rows(times: &[i64], values: &[f64]) -> (Vec<i64>, Vec<f64>) {
    let mut rows: Vec<(i64, f64)> =
        times.iter().zip(values).filter(|(_, v)| !v.is_nan()).map(|(t, v)| (*t, *v)).collect();
    rows.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
    rows.into_iter().unzip()
}

fn is_constant(values: &[f64]) -> bool {
    values.windows(2).all(|w| w[0] == w[1] || (w[0].is_nan() && w[1].is_nan()))
}

/// Median (mean of the two middle values for even lengths); `NaN` for an empty slice.
fn median(values: &[f64], scratch: &mut Vec<f64>) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    scratch.clear();
    scratch.extend_from_slice(values);
    let mid = scratch.len() / 2;
    let (lower, m, _) = scratch.select_nth_unstable_by(mid, f64::total_cmp);
    let hi = *m;
    if values.len() % 2 == 1 {
        return hi;
    }
    let lo = lower.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if lo == hi { hi } else { lo / 2.0 + hi / 2.0 }
}

#[cfg(test)]
mod tests;
