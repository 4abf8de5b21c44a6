//! Change points and onset that hold on drifting, autocorrelated and heavy-tailed series.
//!
//! # Method (default model [`ChangeModel::Trend`]; write-up in `docs/change-points.md`)
//! 1. Values (time-ordered; `NaN` removed by the caller; ±inf become finite stand-ins beyond
//!    the finite range) are centred on their median and divided by a robust noise scale (a
//!    trimmed standard deviation of first differences / √2), then winsorised: each residual
//!    from an 11-sample running median is clipped at 3 robust standard deviations, so spikes
//!    and heavy tails lose their leverage while steps and ramps keep theirs.
//!    A strong seasonal cycle (an autocorrelation peak after a trough, at lags up to `n / 3`)
//!    is removed by subtracting its per-phase median profile.
//! 2. Segment cost: a Gaussian model per segment with its own level, variance and — when it
//!    pays for it — slope ([`super::linear_cost`]): a ramp is one segment, a change of slope
//!    one change, a change of spread is seen too, and a step in white noise stays a step.
//!    [`ChangeModel::Level`] fixes slopes at zero.
//! 3. Penalty: `β = penalty_scale · 2 · ln(n / VIF) · VIF` per parameter — 3 per change
//!    (level, variance, location) and 2 more for each sloped segment — with
//!    `VIF = (1 + ρ) / (1 − ρ)` the variance inflation of AR(1) noise, `ρ` a robust lag-1
//!    autocorrelation from first and second differences
//!    ([`super::robust::lag1_autocorrelation`]) clamped to `[0, 0.8]`; a smooth curve, whose
//!    first differences are themselves that persistent, has its VIF multiplied by theirs
//!    (9 more). Serially correlated
//!    noise carries less information per sample: the cost is judged on an effective sample
//!    size of `n / VIF` (each sample's likelihood weighs `1 / VIF`, BIC's `ln` is of the
//!    effective size, at least [`MIN_EFFECTIVE_N`]), so random walks and smooth curves are not
//!    cut into many changes, while a short series is not priced out of any change at all.
//! 4. PELT ([`super::pelt`]) finds the optimal segmentation (a candidate grid of at most
//!    1024 positions, each change then refined to the exact sample), with at least
//!    `min_size` samples per segment.
//! 5. Each change gets a kind (level, slope or spread: the largest standardised difference
//!    between the two adjacent fits), the value of that quantity either side, a confidence
//!    (the BIC posterior probability of the change against merging its two segments, with the
//!    autocorrelation correction) and a profile-likelihood interval on its position.
//!
//! [`ChangeModel::Rank`] is the previous method, kept for compatibility: PELT with the
//! Gaussian mean-and-variance cost on normal scores ([`super::ranks`]) and the independent-
//! samples penalty `3.5 · ln n`.

use super::linear_cost::{LineFit, LineStats, LinearCost};
use super::pelt::{Moments, NormalCost, PeltConfig, SegmentCost, pelt, profile_interval, refine};
use super::ranks::normal_scores;
use super::robust::{
    CLIP_SDS, MEDIAN_HALF_WIDTH, deseasonalise, finite_surrogates, lag1_autocorrelation, quantum, seasonal_period,
    trimmed_scale, winsorise,
};
use super::xcorr::CrossCorrelator;

/// Default fewest samples per segment.
pub const DEFAULT_MIN_SIZE: usize = 5;
/// Default number of coarse PELT candidates (more samples use a candidate grid).
pub const DEFAULT_MAX_CANDIDATES: usize = 1024;
/// Default profile threshold for the confidence interval (cost units, −2 log-likelihood).
pub const DEFAULT_CI_THRESHOLD: f64 = 10.0;
/// [`ChangeModel::Rank`]: penalty per segment in units of `ln n` (BIC's 3 — mean, variance,
/// location — raised so pure noise gives a change in well under 1 % of series).
pub const PENALTY_PER_LN_N: f64 = 3.5;
/// [`ChangeModel::Trend`] and [`ChangeModel::Level`]: penalty per parameter in units of
/// `ln(n / VIF) · VIF` (BIC has 1). Chosen on synthetic series and the tuning half of TCPD
/// only.
pub const PENALTY_PER_PARAM: f64 = 2.0;
/// Smallest effective sample size `n / VIF` in the penalty's logarithm (keeps `ln` positive).
pub const MIN_EFFECTIVE_N: f64 = 2.0;
/// What a segment's slope costs, in parameters: two, so that one sloped line through a
/// step in the middle of white noise does not beat the step itself.
pub const SLOPE_PARAMS: f64 = 2.0;
/// Largest lag-1 autocorrelation used in the variance inflation (`VIF ≤ 9`).
pub const MAX_AUTOCORRELATION: f64 = 0.8;
/// Default seed for tie-breaking among equal values.
pub const DEFAULT_SEED: u64 = 0x0c4a_6e9e_5eed_0001;
/// Smallest residual variance of a segment, in units of the noise variance.
const REL_VAR_FLOOR: f64 = 1e-6;

/// The segment model of change detection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ChangeModel {
    /// Level, slope and spread per segment, autocorrelation-aware penalty (the default).
    #[default]
    Trend,
    /// Level and spread per segment (no slope), autocorrelation-aware penalty.
    Level,
    /// The previous method: mean and variance of normal scores, independent-samples penalty.
    Rank,
}

impl ChangeModel {
    /// The names [`ChangeModel::parse`] accepts, quoted as in SQL, for error messages.
    pub const NAMES: &'static str = "'trend', 'level' or 'rank'";

    /// Parses `'trend'`, `'level'` or `'rank'` (case-insensitive).
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "trend" => Some(Self::Trend),
            "level" => Some(Self::Level),
            "rank" => Some(Self::Rank),
            _ => None,
        }
    }

    /// The name accepted by [`ChangeModel::parse`].
    pub fn name(self) -> &'static str {
        match self {
            Self::Trend => "trend",
            Self::Level => "level",
            Self::Rank => "rank",
        }
    }
}

/// What changed at a change point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    /// The level jumped.
    Level,
    /// The slope changed (the level is continuous).
    Slope,
    /// The spread (noise standard deviation) changed.
    Spread,
}

impl ChangeKind {
    /// `"level"`, `"slope"` or `"spread"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Level => "level",
            Self::Slope => "slope",
            Self::Spread => "spread",
        }
    }
}

/// Options for change detection.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChangeConfig {
    /// Segment model.
    pub model: ChangeModel,
    /// Fewest samples per segment.
    pub min_size: usize,
    /// Multiplier on the penalty (1.0 = default sensitivity; larger finds fewer changes).
    pub penalty_scale: f64,
    /// Cap on coarse candidates; longer series search every `⌈n / max_candidates⌉` samples.
    pub max_candidates: usize,
    /// Fewest samples the new level must hold for [`ChangeDetector::onset`] to call it
    /// sustained.
    pub sustain: usize,
    /// Profile-cost threshold for the confidence interval.
    pub ci_threshold: f64,
    /// Seed for tie-breaking among equal values ([`ChangeModel::Rank`]).
    pub seed: u64,
}

impl Default for ChangeConfig {
    fn default() -> Self {
        Self {
            model: ChangeModel::Trend,
            min_size: DEFAULT_MIN_SIZE,
            penalty_scale: 1.0,
            max_candidates: DEFAULT_MAX_CANDIDATES,
            sustain: 2 * DEFAULT_MIN_SIZE,
            ci_threshold: DEFAULT_CI_THRESHOLD,
            seed: DEFAULT_SEED,
        }
    }
}

impl ChangeConfig {
    /// The default configuration with another model.
    pub fn with_model(model: ChangeModel) -> Self {
        Self { model, ..Self::default() }
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
    /// What changed.
    pub kind: ChangeKind,
    /// The changed quantity before: the median (level), slope per sample (slope) or robust
    /// standard deviation (spread).
    pub kind_before: f64,
    /// The changed quantity after (as `kind_before`).
    pub kind_after: f64,
    /// Approximate probability that the change is real (0.5 = as likely as not).
    pub confidence: f64,
}

impl ChangePoint {
    /// The change of values `factor` times as large (a power of two: exact).
    fn times(self, factor: f64) -> ChangePoint {
        ChangePoint {
            before: self.before * factor,
            after: self.after * factor,
            kind_before: self.kind_before * factor,
            kind_after: self.kind_after * factor,
            ..self
        }
    }
}

/// Values of magnitude past 2^500 (about 3e150) or below 2^-500, scaled by a power of two
/// (exactly) to about 1, with the factor that scales back: the costs sum squares of the
/// values, which overflow to infinity (or vanish) out there, and a step of 1e170 was found as
/// no change at all. `None` for values in range.
fn rescaled(values: &[f64]) -> Option<(Vec<f64>, f64)> {
    let largest = values.iter().filter(|v| v.is_finite()).fold(0.0f64, |m, v| m.max(v.abs()));
    let exponent = largest.log2().floor();
    if largest == 0.0 || (-500.0..=500.0).contains(&exponent) {
        return None;
    }
    // In two factors: 2^1074 (for values near the smallest subnormal) is past f64's range.
    let k = -(exponent as i32);
    let (a, b) = (2f64.powi(k / 2), 2f64.powi(k - k / 2));
    Some((values.iter().map(|v| v * a * b).collect(), 2f64.powi(-k)))
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
    /// What changed.
    pub kind: ChangeKind,
    /// The changed quantity before (slopes per second of the sample times).
    pub kind_before: f64,
    /// The changed quantity after (slopes per second of the sample times).
    pub kind_after: f64,
    /// Approximate probability that the change is real.
    pub confidence: f64,
}

/// The segment cost in use.
#[derive(Debug)]
enum Cost {
    Normal(NormalCost),
    Linear(LinearCost),
}

impl SegmentCost for Cost {
    fn len(&self) -> usize {
        match self {
            Cost::Normal(c) => SegmentCost::len(c),
            Cost::Linear(c) => c.len(),
        }
    }

    #[inline]
    fn cost(&self, a: usize, b: usize) -> f64 {
        match self {
            Cost::Normal(c) => c.cost(a, b),
            Cost::Linear(c) => SegmentCost::cost(c, a, b),
        }
    }
}

/// Sufficient statistics of a union of segments, for either cost.
#[derive(Debug, Clone, Copy)]
enum Pool {
    Normal(Moments),
    Linear(LineStats),
}

/// A segmentation and what is needed to describe its changes.
#[derive(Debug)]
struct Segmentation {
    cost: Cost,
    cps: Vec<usize>,
    penalty: f64,
    vif: f64,
    /// Original units per standardised unit (1 for the rank model).
    scale: f64,
}

impl Segmentation {
    fn pool(&self, a: usize, b: usize) -> Pool {
        match &self.cost {
            Cost::Normal(c) => Pool::Normal(c.moments(a, b)),
            Cost::Linear(c) => Pool::Linear(c.stats(a, b)),
        }
    }

    fn union(&self, p: Pool, q: Pool) -> Pool {
        match (p, q) {
            (Pool::Normal(a), Pool::Normal(b)) => Pool::Normal(a.union(b)),
            (Pool::Linear(a), Pool::Linear(b)) => Pool::Linear(a.union(b)),
            (p, _) => p,
        }
    }

    fn pool_cost(&self, p: Pool) -> f64 {
        match (&self.cost, p) {
            (Cost::Linear(c), Pool::Linear(s)) => s.cost(c.slope_penalty(), c.floor()),
            (_, Pool::Normal(m)) => m.cost(),
            (_, Pool::Linear(_)) => 0.0,
        }
    }
}

/// Reusable detector (keeps buffers and FFT plans across series).
#[derive(Debug, Default)]
pub struct ChangeDetector {
    scores: Vec<f64>,
    scratch: Vec<f64>,
    xc: CrossCorrelator,
}

impl ChangeDetector {
    /// A detector with empty buffers.
    pub fn new() -> Self {
        Self::default()
    }

    /// All change points of `values` (time-ordered, no `NaN`).
    pub fn detect(&mut self, values: &[f64], cfg: &ChangeConfig) -> Vec<ChangePoint> {
        if let Some((scaled, factor)) = rescaled(values) {
            return self.detect(&scaled, cfg).into_iter().map(|c| c.times(factor)).collect();
        }
        let Some(seg) = self.segment(values, cfg) else {
            return Vec::new();
        };
        let n = values.len();
        let mut out = Vec::with_capacity(seg.cps.len());
        for (i, &cp) in seg.cps.iter().enumerate() {
            let left = if i == 0 { 0 } else { seg.cps[i - 1] };
            let right = seg.cps.get(i + 1).copied().unwrap_or(n);
            out.push(self.describe(values, &seg, cfg, left, cp, right));
        }
        out
    }

    /// The first sustained change of `values` (time-ordered, no `NaN`).
    ///
    /// Segments shorter than `cfg.sustain` samples are transients and are skipped. The first
    /// sustained segment is the baseline; each following sustained segment is compared with
    /// the baseline (the union of all sustained segments so far, one model fitted to all of
    /// them), and the first one whose split from the baseline still pays the penalty marks
    /// the onset, placed at the end of the baseline (so a spike leading into a new level
    /// counts from the spike, and a ramp counts from its start). Sustained segments that do
    /// not differ from the baseline join it. `None` if no change qualifies.
    pub fn onset(&mut self, values: &[f64], cfg: &ChangeConfig) -> Option<ChangePoint> {
        if let Some((scaled, factor)) = rescaled(values) {
            return self.onset(&scaled, cfg).map(|c| c.times(factor));
        }
        let seg = self.segment(values, cfg)?;
        let n = values.len();
        let mut bounds = Vec::with_capacity(seg.cps.len() + 2);
        bounds.push(0);
        bounds.extend_from_slice(&seg.cps);
        bounds.push(n);
        let sustain = cfg.sustain.max(1);
        let mut long = bounds.windows(2).map(|w| (w[0], w[1])).filter(|(a, b)| b - a >= sustain);
        let first = long.next()?;
        let mut base = vec![first];
        let mut pool = seg.pool(first.0, first.1);
        for (a, b) in long {
            let p = seg.pool(a, b);
            let gain = seg.pool_cost(seg.union(pool, p)) - seg.pool_cost(pool) - seg.pool_cost(p);
            let last = base[base.len() - 1];
            if gain > seg.penalty {
                let onset = last.1;
                let mut c = self.describe(values, &seg, cfg, last.0, onset, b);
                let mut all = Vec::new();
                for &(s, e) in &base {
                    all.extend_from_slice(&values[s..e]);
                }
                c.before = median(&all, &mut self.scratch);
                c.after = median(&values[a..b], &mut self.scratch);
                c.after_len = b - onset;
                if c.kind == ChangeKind::Level {
                    (c.kind_before, c.kind_after) = (c.before, c.after);
                }
                return Some(c);
            }
            base.push((a, b));
            pool = seg.union(pool, p);
        }
        None
    }

    /// Change points of a time series given as unsorted `(time, value)` rows. Rows with a
    /// `NaN` value are ignored; rows are ordered by time (then value).
    pub fn detect_timed(&mut self, times: &[i64], values: &[f64], cfg: &ChangeConfig) -> Vec<TimedChange> {
        let (t, v) = sorted_rows(times, values);
        let per_s = per_second(&t, &mut self.scratch);
        self.detect(&v, cfg).into_iter().map(|c| timed(&t, &c, per_s)).collect()
    }

    /// [`ChangeDetector::onset`] of unsorted `(time, value)` rows (`NaN` values ignored).
    pub fn onset_timed(&mut self, times: &[i64], values: &[f64], cfg: &ChangeConfig) -> Option<TimedChange> {
        let (t, v) = sorted_rows(times, values);
        let per_s = per_second(&t, &mut self.scratch);
        self.onset(&v, cfg).map(|c| timed(&t, &c, per_s))
    }

    /// The change at `cp` between segments `[left, cp)` and `[cp, right)`.
    fn describe(
        &mut self,
        values: &[f64],
        seg: &Segmentation,
        cfg: &ChangeConfig,
        left: usize,
        cp: usize,
        right: usize,
    ) -> ChangePoint {
        let min_size = cfg.min_size.max(2);
        let threshold = cfg.ci_threshold * seg.vif;
        let ci = profile_interval(&seg.cost, left, cp, right, min_size, threshold);
        let gain = seg.cost.cost(left, right) - seg.cost.cost(left, cp) - seg.cost.cost(cp, right);
        let evidence = (gain - seg.penalty) / (2.0 * seg.vif);
        let confidence = 1.0 / (1.0 + (-evidence.clamp(-700.0, 700.0)).exp());
        let before = median(&values[left..cp], &mut self.scratch);
        let after = median(&values[cp..right], &mut self.scratch);
        let n = values.len();
        let (kind, kind_before, kind_after) = match &seg.cost {
            Cost::Linear(c) => {
                let (l, r) = (c.fit(left, cp), c.fit(cp, right));
                match classify_fits(&l, &r, cp, n, l.slope != 0.0 || r.slope != 0.0) {
                    ChangeKind::Level => (ChangeKind::Level, before, after),
                    ChangeKind::Slope => {
                        let k = seg.scale / n as f64;
                        (ChangeKind::Slope, l.slope * k, r.slope * k)
                    }
                    ChangeKind::Spread => (ChangeKind::Spread, l.var.sqrt() * seg.scale, r.var.sqrt() * seg.scale),
                }
            }
            Cost::Normal(c) => {
                let (l, r) = (c.moments(left, cp), c.moments(cp, right));
                let (ml, vl) = mean_var(l);
                let (mr, vr) = mean_var(r);
                let pooled = ((vl * l.m + vr * r.m) / (l.m + r.m)).max(1e-12);
                let z_level = (mr - ml).abs() / (pooled * (1.0 / l.m + 1.0 / r.m)).sqrt();
                let z_spread = (vr.max(1e-12) / vl.max(1e-12)).ln().abs() / (2.0 / l.m + 2.0 / r.m).sqrt();
                if z_spread > z_level {
                    let sl = trimmed_scale(&values[left..cp], &mut self.scratch);
                    let sr = trimmed_scale(&values[cp..right], &mut self.scratch);
                    (ChangeKind::Spread, sl, sr)
                } else {
                    (ChangeKind::Level, before, after)
                }
            }
        };
        ChangePoint { index: cp, before, after, ci, after_len: right - cp, kind, kind_before, kind_after, confidence }
    }

    /// The segmentation of `values`; `None` for series too short or constant.
    fn segment(&mut self, values: &[f64], cfg: &ChangeConfig) -> Option<Segmentation> {
        let n = values.len();
        let min_size = cfg.min_size.max(2);
        if n < 2 * min_size || is_constant(values) {
            return None;
        }
        let penalty_scale =
            if cfg.penalty_scale.is_finite() && cfg.penalty_scale > 0.0 { cfg.penalty_scale } else { 1.0 };
        let ln_n = (n as f64).ln();
        let (cost, penalty, vif, scale, margin) = match cfg.model {
            ChangeModel::Rank => {
                normal_scores(values, cfg.seed, &mut self.scores);
                let penalty = penalty_scale * PENALTY_PER_LN_N * ln_n;
                (Cost::Normal(NormalCost::new(&self.scores)), penalty, 1.0, 1.0, 0.0)
            }
            ChangeModel::Trend | ChangeModel::Level => {
                let linear = cfg.model == ChangeModel::Trend;
                let mut z = Vec::with_capacity(n);
                finite_surrogates(values, &mut z);
                let center = super::robust::median(&z, &mut self.scratch);
                let diffs: Vec<f64> = z.windows(2).map(|w| w[1] - w[0]).collect();
                let mut scale = trimmed_scale(&diffs, &mut self.scratch) / std::f64::consts::SQRT_2;
                // Noise seen in the differences: quantised data floors at the rounding noise.
                let noisy = scale > 0.0 && scale.is_finite();
                if !noisy {
                    scale = trimmed_scale(&z, &mut self.scratch);
                }
                if !(scale > 0.0 && scale.is_finite()) {
                    scale = spread(&z).max(f64::MIN_POSITIVE);
                }
                for v in z.iter_mut() {
                    *v = (*v - center) / scale;
                }
                winsorise(&mut z, MEDIAN_HALF_WIDTH, CLIP_SDS, &mut self.scratch);
                if let Some(p) = seasonal_period(&z, &mut self.xc, &mut self.scores) {
                    deseasonalise(&mut z, p, &mut self.scratch);
                    // The cycle hid part of the noise: clip spikes against what is left.
                    winsorise(&mut z, MEDIAN_HALF_WIDTH, CLIP_SDS, &mut self.scratch);
                }
                let rho = lag1_autocorrelation(&z, &mut self.scratch);
                let vif = variance_inflation(rho) * second_order_inflation(&z, &mut self.scratch);
                let q = if noisy { quantum(&z, &mut self.scratch).unwrap_or(0.0) } else { 0.0 };
                let floor = (q * q / 12.0).max(REL_VAR_FLOOR);
                // Per change: level, variance and location; a slope pays for itself.
                // BIC on the effective sample size n / VIF, in units of the full-sample cost.
                let ln_eff = (n as f64 / vif).max(MIN_EFFECTIVE_N).ln();
                let per_param = penalty_scale * PENALTY_PER_PARAM * ln_eff * vif;
                let slope = linear.then_some(SLOPE_PARAMS * per_param);
                let cost = Cost::Linear(LinearCost::new(&z, slope, floor));
                (cost, 3.0 * per_param, vif, scale, slope.unwrap_or(0.0))
            }
        };
        let jump = n.div_ceil(cfg.max_candidates.max(1)).max(1);
        let mut cps = pelt(&cost, &PeltConfig { penalty, min_size, jump, prune_margin: margin });
        if jump > 1 {
            refine(&cost, &mut cps, min_size, jump);
        }
        if let Cost::Linear(c) = &cost {
            place_slope_changes(c, &mut cps, min_size);
        }
        // A stopped statement's search may have ended early: no segmentation.
        if super::interrupt::stopped() {
            return None;
        }
        Some(Segmentation { cost, cps, penalty, vif, scale })
    }
}

/// `(1 + ρ) / (1 − ρ)`, the variance inflation of AR(1) noise, with `ρ` clamped to
/// `[0, MAX_AUTOCORRELATION]` (an undefined estimate counts as the clamp).
fn variance_inflation(rho: f64) -> f64 {
    let rho = if rho.is_finite() { rho.clamp(0.0, MAX_AUTOCORRELATION) } else { MAX_AUTOCORRELATION };
    (1.0 + rho) / (1.0 - rho)
}

/// The extra variance inflation of a smooth curve: when the first differences of `z` are
/// themselves as persistent as the clamp on `ρ` (their lag-1 autocorrelation estimate is at
/// least [`MAX_AUTOCORRELATION`]: `z` behaves like an integrated random walk — a population
/// curve, the cumulative count of a drifting rate), the curve's local shape carries even less
/// information per sample than the clamped `ρ` of `z` says, and the differences' own
/// inflation (the clamp's, 9) multiplies it. 1 otherwise: white noise, random walks, AR(1)
/// noise, and steps, ramps and kinks in noise have much less persistent differences and keep
/// their penalty.
fn second_order_inflation(z: &[f64], scratch: &mut Vec<f64>) -> f64 {
    let diffs: Vec<f64> = z.windows(2).map(|w| w[1] - w[0]).collect();
    let steps: Vec<f64> = diffs.windows(2).map(|w| w[1] - w[0]).collect();
    let step_scale = trimmed_scale(&steps, scratch);
    if step_scale.is_nan() || step_scale <= 0.0 {
        // Piecewise-constant differences (exact lines or noiseless steps): no estimate.
        return 1.0;
    }
    let rho = lag1_autocorrelation(&diffs, scratch);
    if rho.is_finite() && rho >= MAX_AUTOCORRELATION { variance_inflation(rho) } else { 1.0 }
}

/// Moves each change of slope (where the two fits meet without a level jump) to the kink of
/// the best continuous broken line through its two segments. The segment cost lets a sloped
/// segment start with a small jump, so on its own it can place a ramp's start tens of samples
/// early or late; the broken line cannot. Neighbours fixed, left to right.
fn place_slope_changes(c: &LinearCost, cps: &mut [usize], min_size: usize) {
    let n = c.len();
    for i in 0..cps.len() {
        let left = if i == 0 { 0 } else { cps[i - 1] };
        let right = cps.get(i + 1).copied().unwrap_or(n);
        let (l, r) = (c.fit(left, cps[i]), c.fit(cps[i], right));
        if classify_fits(&l, &r, cps[i], n, l.slope != 0.0 || r.slope != 0.0) != ChangeKind::Slope {
            continue;
        }
        let (lo, hi) = (left + min_size, right.saturating_sub(min_size));
        let best = (lo..=hi)
            .filter_map(|tau| c.hinge_rss(left, tau, right).map(|rss| (rss, tau)))
            .min_by(|a, b| a.0.total_cmp(&b.0));
        if let Some((_, tau)) = best {
            cps[i] = tau;
        }
    }
}

/// The kind of change between two adjacent line fits meeting at `cp`: the largest of the
/// standardised level jump at `cp`, slope difference and log-variance ratio.
fn classify_fits(l: &LineFit, r: &LineFit, cp: usize, n: usize, linear: bool) -> ChangeKind {
    let (ml, mr) = (l.m.max(2.0), r.m.max(2.0));
    let pooled = ((l.var * l.m + r.var * r.m) / (l.m + r.m)).max(f64::MIN_POSITIVE);
    // A line's value at its end has about 4σ²/m variance; a mean σ²/m.
    let end_var = if linear { 4.0 } else { 1.0 };
    let jump = r.at(cp, n) - l.at(cp, n);
    let z_level = jump.abs() / (pooled * end_var * (1.0 / ml + 1.0 / mr)).sqrt();
    let z_slope = if linear {
        let nf = n.max(1) as f64;
        let d = (r.slope - l.slope) / nf;
        let se = (pooled * (12.0 / (ml * (ml * ml - 1.0)) + 12.0 / (mr * (mr * mr - 1.0)))).sqrt();
        d.abs() / se
    } else {
        0.0
    };
    let z_spread = (r.var / l.var).ln().abs() / (2.0 / ml + 2.0 / mr).sqrt();
    if z_spread > z_level && z_spread > z_slope {
        ChangeKind::Spread
    } else if z_slope > z_level {
        ChangeKind::Slope
    } else {
        ChangeKind::Level
    }
}

fn mean_var(m: Moments) -> (f64, f64) {
    if m.m <= 0.0 {
        return (0.0, 0.0);
    }
    let mean = m.s1 / m.m;
    (mean, (m.s2 / m.m - mean * mean).max(0.0))
}

/// Standard deviation (population); 0 for fewer than two values.
fn spread(v: &[f64]) -> f64 {
    if v.len() < 2 {
        return 0.0;
    }
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    (v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / v.len() as f64).sqrt()
}

/// Samples per second from the median spacing of `t` (ns); 1 when it is 0 or undefined.
fn per_second(t: &[i64], scratch: &mut Vec<f64>) -> f64 {
    if t.len() < 2 {
        return 1.0;
    }
    let gaps: Vec<f64> = t.windows(2).map(|w| (w[1] - w[0]) as f64).collect();
    let dt = super::robust::median(&gaps, scratch);
    if dt > 0.0 { 1e9 / dt } else { 1.0 }
}

fn timed(t: &[i64], c: &ChangePoint, per_s: f64) -> TimedChange {
    let k = if c.kind == ChangeKind::Slope { per_s } else { 1.0 };
    TimedChange {
        time: t[c.index],
        before: c.before,
        after: c.after,
        ci_lo: t[c.ci.0],
        ci_hi: t[c.ci.1],
        kind: c.kind,
        kind_before: c.kind_before * k,
        kind_after: c.kind_after * k,
        confidence: c.confidence,
    }
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
    if values.is_empty() { f64::NAN } else { super::robust::median(values, scratch) }
}

#[cfg(test)]
mod tests;
