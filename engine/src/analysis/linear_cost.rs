//! Piecewise-linear Gaussian segment cost: each segment has its own level, noise variance
//! and (when it pays for it) slope, so a ramp is one segment and a change of slope is one
//! change.
//!
//! The cost of `[a, b)` is `min(m · ln σ̂²_flat, m · ln σ̂²_line + slope_penalty)`, `σ̂²` the
//! mean squared residual of the segment's mean or of its least-squares line: a segment takes
//! a slope only when the slope pays its own BIC-like penalty, so a level shift in the middle
//! of white noise stays a step rather than being absorbed by one sloped line. Without a slope
//! penalty (`None`) every segment is flat. `O(1)` from prefix sums of `1, t, t², z, z², t·z`
//! with `t = i / n` (kept in `[0, 1)` for conditioning).

use super::pelt::SegmentCost;

/// Sufficient statistics of a set of samples for a line fit.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LineStats {
    /// Number of samples.
    pub m: f64,
    /// Σ t.
    pub st: f64,
    /// Σ t².
    pub stt: f64,
    /// Σ z.
    pub sz: f64,
    /// Σ z².
    pub szz: f64,
    /// Σ t·z.
    pub stz: f64,
}

/// Least-squares fit of one segment, in the cost's units (`t = i / n`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LineFit {
    /// Number of samples.
    pub m: f64,
    /// Slope per unit of `t` (0 for the level model).
    pub slope: f64,
    /// Fitted value at `t = 0`.
    pub intercept: f64,
    /// Residual variance (floored).
    pub var: f64,
}

impl LineFit {
    /// The fitted value at sample `i` of a series of `n`.
    pub fn at(&self, i: usize, n: usize) -> f64 {
        self.intercept + self.slope * (i as f64 / n.max(1) as f64)
    }
}

impl LineStats {
    /// The union of two disjoint sample sets.
    pub fn union(self, o: LineStats) -> LineStats {
        LineStats {
            m: self.m + o.m,
            st: self.st + o.st,
            stt: self.stt + o.stt,
            sz: self.sz + o.sz,
            szz: self.szz + o.szz,
            stz: self.stz + o.stz,
        }
    }

    /// The segment's model under `slope_penalty` (see the module doc): the flat fit, or the
    /// least-squares line when it is cheaper including the penalty.
    pub fn fit(&self, slope_penalty: Option<f64>, floor: f64) -> LineFit {
        let flat = self.fit_line(false, floor);
        let Some(p) = slope_penalty else {
            return flat;
        };
        let line = self.fit_line(true, floor);
        if self.m * line.var.ln() + p < self.m * flat.var.ln() { line } else { flat }
    }

    /// The segment cost of these samples under `slope_penalty`.
    pub fn cost(&self, slope_penalty: Option<f64>, floor: f64) -> f64 {
        if self.m <= 0.0 {
            return 0.0;
        }
        let flat = self.m * self.fit_line(false, floor).var.ln();
        match slope_penalty {
            None => flat,
            Some(p) => flat.min(self.m * self.fit_line(true, floor).var.ln() + p),
        }
    }

    /// The least-squares line (slope 0 unless `linear`) and residual variance floored at `floor`.
    pub fn fit_line(&self, linear: bool, floor: f64) -> LineFit {
        let m = self.m;
        if m <= 0.0 {
            return LineFit { m: 0.0, slope: 0.0, intercept: 0.0, var: floor };
        }
        let mean_z = self.sz / m;
        let mut rss = self.szz - self.sz * mean_z;
        let mut slope = 0.0;
        if linear {
            let mean_t = self.st / m;
            let vt = self.stt - self.st * mean_t;
            // Two or more distinct times; guards cancellation on tiny far-out segments.
            if m >= 2.0 && vt > 1e-13 * self.stt.max(f64::MIN_POSITIVE) {
                let ctz = self.stz - self.st * mean_z;
                slope = ctz / vt;
                rss -= ctz * slope;
            }
            let intercept = mean_z - slope * mean_t;
            return LineFit { m, slope, intercept, var: (rss / m).max(floor) };
        }
        LineFit { m, slope, intercept: mean_z, var: (rss / m).max(floor) }
    }
}

/// Prefix sums for the piecewise-linear (or piecewise-constant) Gaussian cost.
#[derive(Debug, Clone, Default)]
pub struct LinearCost {
    pre: Vec<LineStats>,
    slope_penalty: Option<f64>,
    floor: f64,
}

impl LinearCost {
    /// Builds the prefix sums of `z`. `slope_penalty = None` fixes every slope at zero (mean
    /// and variance per segment); `floor` is the smallest residual variance (guards `ln 0`).
    pub fn new(z: &[f64], slope_penalty: Option<f64>, floor: f64) -> Self {
        let n = z.len().max(1) as f64;
        let mut pre = Vec::with_capacity(z.len() + 1);
        let mut acc = LineStats::default();
        pre.push(acc);
        for (i, &v) in z.iter().enumerate() {
            let t = i as f64 / n;
            acc.m += 1.0;
            acc.st += t;
            acc.stt += t * t;
            acc.sz += v;
            acc.szz += v * v;
            acc.stz += t * v;
            pre.push(acc);
        }
        Self { pre, slope_penalty, floor: floor.max(f64::MIN_POSITIVE) }
    }

    /// The penalty a segment pays for a slope (`None`: segments are flat).
    pub fn slope_penalty(&self) -> Option<f64> {
        self.slope_penalty
    }

    /// The residual-variance floor.
    pub fn floor(&self) -> f64 {
        self.floor
    }

    /// Statistics of `[a, b)`.
    #[inline]
    pub fn stats(&self, a: usize, b: usize) -> LineStats {
        let (p, q) = (&self.pre[a], &self.pre[b]);
        LineStats {
            m: q.m - p.m,
            st: q.st - p.st,
            stt: q.stt - p.stt,
            sz: q.sz - p.sz,
            szz: q.szz - p.szz,
            stz: q.stz - p.stz,
        }
    }

    /// The fit of `[a, b)`.
    pub fn fit(&self, a: usize, b: usize) -> LineFit {
        self.stats(a, b).fit(self.slope_penalty, self.floor)
    }
}

impl LinearCost {
    /// Residual sum of squares of the continuous broken line (a hinge) through `[a, b)` whose
    /// slope changes at `tau`: `z ≈ c₀ + c₁·t + c₂·max(0, t − τ)`. `None` when degenerate.
    pub fn hinge_rss(&self, a: usize, tau: usize, b: usize) -> Option<f64> {
        if !(a < tau && tau < b) || b >= self.pre.len() {
            return None;
        }
        let w = self.stats(a, b);
        let r = self.stats(tau, b);
        let n = self.len().max(1) as f64;
        let tt = tau as f64 / n;
        // Sums of h = t − τ over [tau, b) and its products.
        let sh = r.st - r.m * tt;
        let shh = r.stt - 2.0 * tt * r.st + r.m * tt * tt;
        let sth = r.stt - tt * r.st;
        let shz = r.stz - tt * r.sz;
        let a_mat = [[w.m, w.st, sh], [w.st, w.stt, sth], [sh, sth, shh]];
        let rhs = [w.sz, w.stz, shz];
        let coef = solve3(a_mat, rhs)?;
        let fit = coef[0] * rhs[0] + coef[1] * rhs[1] + coef[2] * rhs[2];
        Some((w.szz - fit).max(0.0))
    }
}

/// Solves a symmetric 3×3 system by Gaussian elimination with partial pivoting.
fn solve3(mut m: [[f64; 3]; 3], mut v: [f64; 3]) -> Option<[f64; 3]> {
    let scale = m.iter().flatten().fold(0.0f64, |a, x| a.max(x.abs()));
    if !(scale > 0.0 && scale.is_finite()) {
        return None;
    }
    for col in 0..3 {
        let piv = (col..3).max_by(|&x, &y| m[x][col].abs().total_cmp(&m[y][col].abs()))?;
        if m[piv][col].abs() <= 1e-14 * scale {
            return None;
        }
        m.swap(col, piv);
        v.swap(col, piv);
        for row in col + 1..3 {
            let f = m[row][col] / m[col][col];
            let pivot_row = m[col];
            for (dst, src) in m[row].iter_mut().zip(pivot_row).skip(col) {
                *dst -= f * src;
            }
            v[row] -= f * v[col];
        }
    }
    let mut x = [0.0; 3];
    for row in (0..3).rev() {
        let mut acc = v[row];
        for k in row + 1..3 {
            acc -= m[row][k] * x[k];
        }
        x[row] = acc / m[row][row];
    }
    x.iter().all(|c| c.is_finite()).then_some(x)
}

impl SegmentCost for LinearCost {
    fn len(&self) -> usize {
        self.pre.len().saturating_sub(1)
    }

    #[inline]
    fn cost(&self, a: usize, b: usize) -> f64 {
        self.stats(a, b).cost(self.slope_penalty, self.floor)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_noiseless_line_has_floor_variance_and_its_slope() {
        let z: Vec<f64> = (0..100).map(|i| 2.0 + 0.5 * i as f64).collect();
        let c = LinearCost::new(&z, Some(5.0), 1e-6);
        let f = c.fit(10, 60);
        assert!((f.var - 1e-6).abs() < 1e-9, "{f:?}");
        assert!((f.slope - 50.0).abs() < 1e-6, "{f:?}"); // 0.5 per sample = 50 per unit t
        assert!((f.at(30, 100) - 17.0).abs() < 1e-6, "{f:?}");
        let level = LinearCost::new(&z, None, 1e-6);
        assert!(level.cost(0, 100) > c.cost(0, 100) + 100.0);
    }

    #[test]
    fn a_hinge_fits_a_broken_line_exactly_only_at_its_kink() {
        let z: Vec<f64> = (0..100).map(|i| if i < 40 { 1.0 } else { 1.0 + 0.5 * (i - 40) as f64 }).collect();
        let c = LinearCost::new(&z, Some(1.0), 1e-9);
        assert!(c.hinge_rss(0, 40, 100).unwrap() < 1e-9);
        assert!(c.hinge_rss(0, 30, 100).unwrap() > 1.0);
        assert!(c.hinge_rss(0, 0, 100).is_none());
    }

    #[test]
    fn union_of_parts_matches_the_whole() {
        let z: Vec<f64> = (0..50).map(|i| ((i * 7) % 11) as f64).collect();
        let c = LinearCost::new(&z, Some(2.0), 1e-9);
        let whole = c.cost(0, 50);
        let parts = c.stats(0, 20).union(c.stats(20, 50)).cost(Some(2.0), 1e-9);
        assert!((whole - parts).abs() < 1e-9);
        assert!(c.cost(0, 20) + c.cost(20, 50) <= whole + 2.0 + 1e-9);
    }

    #[test]
    fn a_small_slope_does_not_pay_its_penalty_but_a_ramp_does() {
        let wobble: Vec<f64> = (0..200).map(|i| ((i * 37) % 17) as f64 / 17.0 - 0.5).collect();
        let tilt: Vec<f64> = wobble.iter().enumerate().map(|(i, w)| w + 1e-4 * i as f64).collect();
        let ramp: Vec<f64> = wobble.iter().enumerate().map(|(i, w)| w + 0.05 * i as f64).collect();
        assert_eq!(LinearCost::new(&tilt, Some(20.0), 1e-9).fit(0, 200).slope, 0.0);
        let f = LinearCost::new(&ramp, Some(20.0), 1e-9).fit(0, 200);
        assert!((f.slope / 200.0 - 0.05).abs() < 0.005, "{f:?}");
    }
}
