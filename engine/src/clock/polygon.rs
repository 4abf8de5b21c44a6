//! The feasible set of clock lines, as a convex polygon in (drift, offset) space.
//!
//! Within one piece of a clock model the offset is assumed linear in local time:
//! `θ(X) = a + b·X`, with `X` in seconds since the piece origin, `a` in ns and `b` in ns per
//! second (= ppb). Every observation says `θ(x_lo) ≥ y_lo` and `θ(x_hi) ≤ y_hi`; each such
//! inequality is a half-plane in `(b, a)`, so the lines consistent with all observations form a
//! convex polygon. It is kept exactly (up to float rounding) by clipping one half-plane at a
//! time (Sutherland–Hodgman), which costs O(vertices) per observation; for real data the
//! polygon keeps a handful of vertices. The range of `θ(X)` over the polygon at any `X` is the
//! min/max of `a + b·X` over its vertices: that is the band every uncertainty is derived from.
//!
//! Floats are used only here, on values relative to the piece origin (|X| up to ~1e6 s,
//! offsets up to ~1e11 ns), where f64 resolves far below a nanosecond. Everything a reader of
//! corrected time sees is rounded outward to integer ns by the caller.

/// Slack (ns) granted to every half-plane so that exactly consistent data (zero delays) does
/// not collapse the polygon through rounding.
const EPS_NS: f64 = 1e-3;

/// A convex polygon of feasible lines; vertices are `(b, a)` in (ppb, ns).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Feasible {
    vertices: Vec<(f64, f64)>,
}

impl Feasible {
    /// The lines with `|b| ≤ b_max` consistent with one band observation
    /// (`θ(x_lo) ≥ y_lo`, `θ(x_hi) ≤ y_hi`), or `None` if it is empty (`y_lo > y_hi` beyond
    /// what the drift allowance can bridge).
    pub(crate) fn from_band(b_max: f64, x_lo: f64, y_lo: f64, x_hi: f64, y_hi: f64) -> Option<Self> {
        // Start from a box that surely contains every feasible line with |b| ≤ b_max, then
        // clip by both half-planes; the box is only as large as the band needs, so vertex
        // coordinates stay small and precise.
        let half = (y_hi - y_lo).abs() + b_max * (x_lo.abs() + x_hi.abs()) + 1.0;
        let mut poly = Feasible {
            vertices: vec![(-b_max, y_lo - half), (b_max, y_lo - half), (b_max, y_lo + half), (-b_max, y_lo + half)],
        };
        let lower_ok = poly.clip_lower(x_lo, y_lo);
        let upper_ok = lower_ok && poly.clip_upper(x_hi, y_hi);
        upper_ok.then_some(poly)
    }

    /// Keeps the lines with `θ(x) ≥ y`; returns false (and leaves the polygon empty) if none.
    pub(crate) fn clip_lower(&mut self, x: f64, y: f64) -> bool {
        self.clip(x, 1.0, y)
    }

    /// Keeps the lines with `θ(x) ≤ y`; returns false (and leaves the polygon empty) if none.
    pub(crate) fn clip_upper(&mut self, x: f64, y: f64) -> bool {
        self.clip(-x, -1.0, -y)
    }

    /// Keeps the lines with drift in `[lo, hi]` (ppb); returns false (and leaves the polygon
    /// empty) if none.
    pub(crate) fn clip_slope(&mut self, lo: f64, hi: f64) -> bool {
        self.clip(1.0, 0.0, lo) && self.clip(-1.0, 0.0, -hi)
    }

    /// Applies both sides of a band observation to a copy; `None` if the result is empty.
    pub(crate) fn with_band(&self, x_lo: f64, y_lo: f64, x_hi: f64, y_hi: f64) -> Option<Self> {
        let mut next = self.clone();
        (next.clip_lower(x_lo, y_lo) && next.clip_upper(x_hi, y_hi)).then_some(next)
    }

    /// The range of `θ(x)` over all feasible lines.
    pub(crate) fn range_at(&self, x: f64) -> (f64, f64) {
        let mut lo = f64::INFINITY;
        let mut hi = f64::NEG_INFINITY;
        for &(b, a) in &self.vertices {
            let v = a + b * x;
            lo = lo.min(v);
            hi = hi.max(v);
        }
        (lo, hi)
    }

    /// The vertices giving the lowest and the highest feasible `θ(x)`: the lines supported by
    /// the lower and by the upper constraints around `x` (one-sided envelope fits).
    pub(crate) fn extreme_lines_at(&self, x: f64) -> Option<((f64, f64), (f64, f64))> {
        let value = |v: &&(f64, f64)| v.1 + v.0 * x;
        let lo = self.vertices.iter().min_by(|p, q| value(p).total_cmp(&value(q)))?;
        let hi = self.vertices.iter().max_by(|p, q| value(p).total_cmp(&value(q)))?;
        Some((*lo, *hi))
    }

    /// The range of feasible drifts `b` (ppb).
    pub(crate) fn slope_range(&self) -> (f64, f64) {
        let mut lo = f64::INFINITY;
        let mut hi = f64::NEG_INFINITY;
        for &(b, _) in &self.vertices {
            lo = lo.min(b);
            hi = hi.max(b);
        }
        (lo, hi)
    }

    /// The max-margin line `(b, a)`: the drift at which the polygon is vertically thickest
    /// and the middle of that thickness. It keeps the largest equal distance from the lower and
    /// the upper constraints (the two-sided envelope fit); `None` if the polygon is empty. A
    /// plateau of equal thickness is resolved to its middle drift.
    pub(crate) fn center(&self) -> Option<(f64, f64)> {
        let thickest = self
            .vertices
            .iter()
            .filter_map(|&(b, _)| self.vertical_extent(b).map(|(lo, hi)| (b, hi - lo)))
            .collect::<Vec<_>>();
        let best = thickest.iter().map(|&(_, w)| w).fold(f64::NEG_INFINITY, f64::max);
        let tol = 1e-9 * (1.0 + best.abs());
        let (mut blo, mut bhi) = (f64::INFINITY, f64::NEG_INFINITY);
        for &(b, w) in &thickest {
            if w >= best - tol {
                blo = blo.min(b);
                bhi = bhi.max(b);
            }
        }
        if !blo.is_finite() {
            return None;
        }
        let b = blo + (bhi - blo) / 2.0;
        let (lo, hi) = self.vertical_extent(b)?;
        Some((b, lo + (hi - lo) / 2.0))
    }

    /// The range of `a` over the polygon at drift `b`.
    pub(crate) fn vertical_extent(&self, b: f64) -> Option<(f64, f64)> {
        let n = self.vertices.len();
        let mut lo = f64::INFINITY;
        let mut hi = f64::NEG_INFINITY;
        for i in 0..n {
            let (p, q) = (self.vertices[i], self.vertices[(i + 1) % n]);
            let (bmin, bmax) = (p.0.min(q.0), p.0.max(q.0));
            if b < bmin || b > bmax {
                continue;
            }
            if bmax - bmin <= f64::EPSILON * (1.0 + bmax.abs()) {
                lo = lo.min(p.1.min(q.1));
                hi = hi.max(p.1.max(q.1));
            } else {
                let a = p.1 + (b - p.0) / (q.0 - p.0) * (q.1 - p.1);
                lo = lo.min(a);
                hi = hi.max(a);
            }
        }
        (lo <= hi).then_some((lo, hi))
    }

    /// The largest deviation `|a + b·x − target|` over all feasible lines at `x`.
    pub(crate) fn max_deviation_at(&self, x: f64, target: f64) -> f64 {
        let (lo, hi) = self.range_at(x);
        (hi - target).max(target - lo).max(0.0)
    }

    /// Keeps the half-plane `cb·b + ca·a ≥ r` (with [`EPS_NS`] slack).
    fn clip(&mut self, cb: f64, ca: f64, r: f64) -> bool {
        let n = self.vertices.len();
        if n == 0 {
            return false;
        }
        let side = |&(b, a): &(f64, f64)| cb * b + ca * a - r + EPS_NS;
        let mut out = Vec::with_capacity(n + 2);
        for i in 0..n {
            let p = self.vertices[i];
            let q = self.vertices[(i + 1) % n];
            let (sp, sq) = (side(&p), side(&q));
            if sp >= 0.0 {
                out.push(p);
            }
            if (sp >= 0.0) != (sq >= 0.0) {
                let t = sp / (sp - sq);
                out.push((p.0 + t * (q.0 - p.0), p.1 + t * (q.1 - p.1)));
            }
        }
        out.dedup_by(|q, p| (q.0 - p.0).abs() <= 1e-12 && (q.1 - p.1).abs() <= 1e-9);
        if out.len() > 1 {
            let (first, last) = (out[0], out[out.len() - 1]);
            if (first.0 - last.0).abs() <= 1e-12 && (first.1 - last.1).abs() <= 1e-9 {
                out.pop();
            }
        }
        self.vertices = out;
        !self.vertices.is_empty()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn single_band_gives_drift_cone() {
        let p = Feasible::from_band(100.0, 0.0, -10.0, 0.0, 10.0).unwrap();
        let close = |a: f64, b: f64| (a - b).abs() <= 2.0 * EPS_NS;
        let (lo, hi) = p.range_at(0.0);
        assert!(close(lo, -10.0) && close(hi, 10.0), "{lo} {hi}");
        let (lo, hi) = p.range_at(2.0);
        assert!(close(lo, -210.0) && close(hi, 210.0), "{lo} {hi}");
        assert_eq!(p.slope_range(), (-100.0, 100.0));
    }

    #[test]
    fn two_bands_pin_the_slope() {
        let mut p = Feasible::from_band(1e5, 0.0, -1.0, 0.0, 1.0).unwrap();
        assert!(p.clip_lower(10.0, 49.0));
        assert!(p.clip_upper(10.0, 51.0));
        let (blo, bhi) = p.slope_range();
        assert!(blo >= 4.8 - 1e-3 && bhi <= 5.2 + 1e-3, "{blo} {bhi}");
        let (lo, hi) = p.range_at(5.0);
        assert!(lo >= 24.0 - 1e-2 && hi <= 26.0 + 1e-2);
    }

    #[test]
    fn center_is_the_max_margin_line() {
        // Lower points on θ = 2X − 1, upper points on θ = 2X + 3: the centre is θ = 2X + 1.
        let mut p = Feasible::from_band(100.0, 0.0, -1.0, 0.0, 3.0).unwrap();
        for x in [10.0, 20.0, 30.0] {
            assert!(p.clip_lower(x, 2.0 * x - 1.0) && p.clip_upper(x, 2.0 * x + 3.0));
        }
        let (b, a) = p.center().unwrap();
        assert!((b - 2.0).abs() < 1e-6 && (a - 1.0).abs() < 1e-3, "{b} {a}");
    }

    #[test]
    fn contradiction_empties() {
        let p = Feasible::from_band(10.0, 0.0, 0.0, 0.0, 1.0).unwrap();
        assert!(p.with_band(1.0, 100.0, 1.0, 101.0).is_none());
        assert!(Feasible::from_band(10.0, 0.0, 5.0, 0.0, 1.0).is_none());
    }

    #[test]
    fn exact_data_collapses_without_emptying() {
        let mut p = Feasible::from_band(1e5, 0.0, 3.0, 0.0, 3.0).unwrap();
        for i in 1..100 {
            let x = f64::from(i);
            let y = 3.0 + 7.0 * x;
            assert!(p.clip_lower(x, y) && p.clip_upper(x, y), "emptied at {i}");
        }
        let (lo, hi) = p.range_at(1000.0);
        assert!((lo - 7003.0).abs() < 1.0 && (hi - 7003.0).abs() < 1.0, "{lo} {hi}");
    }
}
