//! PELT (Killick, Fearnhead & Eckley 2012) over any [`SegmentCost`], searched on a candidate
//! grid and then refined to the exact sample.
//!
//! [`NormalCost`] is the Gaussian mean-and-variance cost: for a segment `[a, b)` of length `m`
//! it is `m · ln σ̂²` (−2 log-likelihood of a normal model with the segment's own mean and
//! variance, up to a constant that does not depend on the segmentation). The piecewise-linear
//! cost is in [`super::linear_cost`]. Both are `O(1)` per segment from prefix sums.
//!
//! Exact PELT is `O(n²)` on series without changes (nothing can be pruned), so candidate
//! change positions are restricted to multiples of `jump` (a coarse pass of at most about
//! `n / jump` candidates), and each change found is then moved to the best exact sample
//! within `±jump` with its neighbours fixed.

/// Smallest segment variance used in the cost (guards `ln 0` on tiny segments).
pub const VAR_FLOOR: f64 = 1e-8;

/// A segment cost for [`pelt`]: additive over segments and `O(1)` per call. Pruning is exact
/// when splitting a segment raises its cost by at most [`PeltConfig::prune_margin`].
pub trait SegmentCost {
    /// Number of samples.
    fn len(&self) -> usize;
    /// Cost of the segment `[a, b)`, `a < b <= len`.
    fn cost(&self, a: usize, b: usize) -> f64;
    /// Whether there are no samples.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl SegmentCost for NormalCost {
    fn len(&self) -> usize {
        NormalCost::len(self)
    }
    #[inline]
    fn cost(&self, a: usize, b: usize) -> f64 {
        NormalCost::cost(self, a, b)
    }
}

/// Prefix sums of a series and its squares: the state of the normal segment cost.
#[derive(Debug, Clone, Default)]
pub struct NormalCost {
    s1: Vec<f64>,
    s2: Vec<f64>,
}

impl NormalCost {
    /// Builds the prefix sums for `z`.
    pub fn new(z: &[f64]) -> Self {
        let mut s1 = Vec::with_capacity(z.len() + 1);
        let mut s2 = Vec::with_capacity(z.len() + 1);
        let (mut a, mut b) = (0.0, 0.0);
        s1.push(0.0);
        s2.push(0.0);
        for v in z {
            a += v;
            b += v * v;
            s1.push(a);
            s2.push(b);
        }
        Self { s1, s2 }
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.s1.len().saturating_sub(1)
    }

    /// Whether there are no samples.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Cost of the segment `[a, b)`, `a < b <= len`.
    #[inline]
    pub fn cost(&self, a: usize, b: usize) -> f64 {
        let m = (b - a) as f64;
        let mean = (self.s1[b] - self.s1[a]) / m;
        let var = (self.s2[b] - self.s2[a]) / m - mean * mean;
        m * var.max(VAR_FLOOR).ln()
    }

    /// Count, sum and sum of squares of `[a, b)`.
    pub fn moments(&self, a: usize, b: usize) -> Moments {
        Moments { m: (b - a) as f64, s1: self.s1[b] - self.s1[a], s2: self.s2[b] - self.s2[a] }
    }
}

/// Sufficient statistics of a (possibly non-contiguous) set of samples.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Moments {
    /// Number of samples.
    pub m: f64,
    /// Sum.
    pub s1: f64,
    /// Sum of squares.
    pub s2: f64,
}

impl Moments {
    /// The union of two disjoint sample sets.
    pub fn union(self, o: Moments) -> Moments {
        Moments { m: self.m + o.m, s1: self.s1 + o.s1, s2: self.s2 + o.s2 }
    }

    /// The normal cost of these samples, as [`NormalCost::cost`] for a segment.
    pub fn cost(&self) -> f64 {
        if self.m <= 0.0 {
            return 0.0;
        }
        let mean = self.s1 / self.m;
        let var = self.s2 / self.m - mean * mean;
        self.m * var.max(VAR_FLOOR).ln()
    }
}

/// Parameters of [`pelt`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PeltConfig {
    /// Penalty added per segment.
    pub penalty: f64,
    /// Fewest samples in a segment.
    pub min_size: usize,
    /// Candidate positions are multiples of this (1 = exact PELT).
    pub jump: usize,
    /// PELT's pruning constant `K`: how much splitting a segment can raise its cost (0 for
    /// maximum-likelihood costs; a per-segment model penalty for costs that choose a model).
    pub prune_margin: f64,
}

/// Optimal segmentation under `cfg`: the sorted start indices of every segment after the
/// first (each change point is the first sample of a new segment).
pub fn pelt<C: SegmentCost>(cost: &C, cfg: &PeltConfig) -> Vec<usize> {
    let n = cost.len();
    let min_size = cfg.min_size.max(1);
    let jump = cfg.jump.max(1);
    if n < 2 * min_size {
        return Vec::new();
    }
    let mut pos: Vec<usize> = (0..n).step_by(jump).collect();
    pos.push(n);
    let beta = cfg.penalty;
    let margin = cfg.prune_margin.max(0.0);
    let mut f = vec![f64::INFINITY; pos.len()];
    let mut prev = vec![0usize; pos.len()];
    f[0] = -beta;
    let mut cands: Vec<usize> = vec![0];
    let mut fits: Vec<f64> = Vec::new();
    for ti in 1..pos.len() {
        // A stopped statement's search ends here (its caller discards the result).
        if ti % 256 == 0 && super::interrupt::stopped() {
            return Vec::new();
        }
        let t = pos[ti];
        fits.clear();
        let (mut best, mut arg) = (f64::INFINITY, 0);
        for &c in &cands {
            let s = pos[c];
            if t - s < min_size {
                // Not admissible yet; kept as a candidate for later ends.
                fits.push(f64::NEG_INFINITY);
                continue;
            }
            let v = f[c] + cost.cost(s, t);
            fits.push(v);
            if v + beta < best {
                best = v + beta;
                arg = c;
            }
        }
        f[ti] = best;
        prev[ti] = arg;
        // PELT pruning: a candidate that cannot beat the optimum now, even without paying
        // another penalty and allowing for the margin K, never will.
        let mut keep = 0;
        for i in 0..cands.len() {
            if fits[i] - margin <= best {
                cands[keep] = cands[i];
                keep += 1;
            }
        }
        cands.truncate(keep);
        cands.push(ti);
    }
    let mut out = Vec::new();
    let mut ti = pos.len() - 1;
    while ti > 0 {
        ti = prev[ti];
        if ti > 0 {
            out.push(pos[ti]);
        }
    }
    out.reverse();
    out
}

/// Moves each change point to the exact sample within `±radius` that minimises the cost of
/// its two adjacent segments (neighbours fixed, left to right).
pub fn refine<C: SegmentCost>(cost: &C, cps: &mut [usize], min_size: usize, radius: usize) {
    let n = cost.len();
    for i in 0..cps.len() {
        let left = if i == 0 { 0 } else { cps[i - 1] };
        let right = cps.get(i + 1).copied().unwrap_or(n);
        let lo = cps[i].saturating_sub(radius).max(left + min_size);
        let hi = (cps[i] + radius).min(right.saturating_sub(min_size));
        let mut best = (cost.cost(left, cps[i]) + cost.cost(cps[i], right), cps[i]);
        for tau in lo..=hi {
            let v = cost.cost(left, tau) + cost.cost(tau, right);
            if v < best.0 {
                best = (v, tau);
            }
        }
        cps[i] = best.1;
    }
}

/// Approximate confidence interval for the change at `cp` between neighbours `left` and
/// `right`: the range of split positions whose two-segment cost is within `threshold` of the
/// best split (a profile-likelihood interval). Returns `(lo, hi)` sample indices.
pub fn profile_interval<C: SegmentCost>(
    cost: &C,
    left: usize,
    cp: usize,
    right: usize,
    min_size: usize,
    threshold: f64,
) -> (usize, usize) {
    let lo = left + min_size;
    let hi = right.saturating_sub(min_size);
    if lo > hi {
        return (cp, cp);
    }
    let split = |tau: usize| cost.cost(left, tau) + cost.cost(tau, right);
    let best = (lo..=hi).map(split).fold(split(cp), f64::min);
    let limit = best + threshold;
    // Walk outwards from cp while the profile stays under the limit.
    let mut a = cp;
    while a > lo && split(a - 1) <= limit {
        a -= 1;
    }
    let mut b = cp;
    while b < hi && split(b + 1) <= limit {
        b += 1;
    }
    (a, b)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn steps(levels: &[(usize, f64, f64)]) -> Vec<f64> {
        // Deterministic pseudo-noise: a fixed low-discrepancy wobble scaled per segment.
        let mut out = Vec::new();
        let mut k = 0u64;
        for &(len, mean, sd) in levels {
            for _ in 0..len {
                k += 1;
                let u = ((k as f64 * 0.618_033_988_749_894_9).fract() - 0.5) * 3.46;
                out.push(mean + sd * u);
            }
        }
        out
    }

    #[test]
    fn finds_mean_and_variance_steps_exactly_with_and_without_jump() {
        let z = steps(&[(300, 0.0, 1.0), (200, 3.0, 1.0), (300, 3.0, 5.0)]);
        let cost = NormalCost::new(&z);
        for jump in [1, 7, 20] {
            let cfg = PeltConfig { penalty: 3.0 * (z.len() as f64).ln(), min_size: 5, jump, prune_margin: 0.0 };
            let mut cps = pelt(&cost, &cfg);
            refine(&cost, &mut cps, 5, jump);
            assert_eq!(cps.len(), 2, "jump {jump}: {cps:?}");
            assert!(cps[0].abs_diff(300) <= 1 && cps[1].abs_diff(500) <= 3, "jump {jump}: {cps:?}");
        }
    }

    #[test]
    fn short_or_flat_series_have_no_changes() {
        let cfg = PeltConfig { penalty: 20.0, min_size: 5, jump: 1, prune_margin: 0.0 };
        assert!(pelt(&NormalCost::new(&[1.0; 9]), &cfg).is_empty());
        assert!(pelt(&NormalCost::new(&steps(&[(500, 0.0, 1.0)])), &cfg).is_empty());
        assert!(pelt(&NormalCost::new(&[]), &cfg).is_empty());
    }

    #[test]
    fn profile_interval_contains_the_change_and_narrows_with_size() {
        let small = steps(&[(200, 0.0, 1.0), (200, 0.8, 1.0)]);
        let big = steps(&[(200, 0.0, 1.0), (200, 4.0, 1.0)]);
        let (a, b) = profile_interval(&NormalCost::new(&small), 0, 200, 400, 5, 6.0);
        let (c, d) = profile_interval(&NormalCost::new(&big), 0, 200, 400, 5, 6.0);
        assert!(a <= 200 && 200 <= b && c <= 200 && 200 <= d);
        assert!(d - c <= b - a, "{c}..{d} vs {a}..{b}");
    }
}
