//! Cross-correlation of two real series, by FFT (`O(N log N)`) or directly (`O(n · lags)`).
//!
//! Convention used throughout: `S(k) = Σₙ y[n + k] · x[n]`, so a peak at a positive `k` means
//! `y` repeats `x` `k` samples later (x leads y). This is `scipy.signal.correlate(y, x)` with
//! lags from `scipy.signal.correlation_lags(len(y), len(x))`.

use std::sync::Arc;

use realfft::num_complex::Complex;
use realfft::{ComplexToReal, RealFftPlanner, RealToComplex};

/// Smallest even length `>= min` whose only prime factors are 2, 3 and 5 (fast FFT sizes).
pub fn fast_len(min: usize) -> usize {
    let target = min.max(2);
    let mut best = usize::MAX;
    let mut p5 = 1usize;
    while p5 < best {
        let mut p35 = p5;
        while p35 < best {
            // Smallest power of two times p35 that reaches the target, with at least one 2.
            let mut n = p35.saturating_mul(2);
            while n < target {
                n = n.saturating_mul(2);
            }
            best = best.min(n);
            p35 = p35.saturating_mul(3);
        }
        p5 = p5.saturating_mul(5);
    }
    best
}

/// Reusable FFT plans and buffers for repeated cross-correlations.
///
/// Plans are cached per length by the planner, so correlating many pairs of the same length
/// pays the planning cost once.
pub struct CrossCorrelator {
    planner: RealFftPlanner<f64>,
    input: Vec<f64>,
    spec_x: Vec<Complex<f64>>,
    spec_y: Vec<Complex<f64>>,
    scratch: Vec<Complex<f64>>,
}

impl std::fmt::Debug for CrossCorrelator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CrossCorrelator").finish_non_exhaustive()
    }
}

impl Default for CrossCorrelator {
    fn default() -> Self {
        Self::new()
    }
}

impl CrossCorrelator {
    /// Creates a correlator with no plans yet.
    pub fn new() -> Self {
        Self {
            planner: RealFftPlanner::new(),
            input: Vec::new(),
            spec_x: Vec::new(),
            spec_y: Vec::new(),
            scratch: Vec::new(),
        }
    }

    fn forward_plan(&mut self, len: usize) -> Arc<dyn RealToComplex<f64>> {
        self.planner.plan_fft_forward(len)
    }

    fn inverse_plan(&mut self, len: usize) -> Arc<dyn ComplexToReal<f64>> {
        self.planner.plan_fft_inverse(len)
    }

    /// Writes the spectrum of `x` zero-padded (or truncated) to `len` into `out`
    /// (`len / 2 + 1` bins, unnormalised).
    pub fn spectrum(&mut self, x: &[f64], len: usize, out: &mut Vec<Complex<f64>>) {
        let plan = self.forward_plan(len);
        self.input.clear();
        self.input.extend_from_slice(&x[..x.len().min(len)]);
        self.input.resize(len, 0.0);
        out.clear();
        out.resize(len / 2 + 1, Complex::new(0.0, 0.0));
        self.scratch.resize(plan.get_scratch_len(), Complex::new(0.0, 0.0));
        // Lengths match the plan by construction, so the transform cannot fail.
        let _ = plan.process_with_scratch(&mut self.input, out, &mut self.scratch);
    }

    /// Inverse transform of a `len / 2 + 1`-bin spectrum into `out` (`len` samples), divided
    /// by `len`. The imaginary parts of the DC bin (and the Nyquist bin when `len` is even)
    /// are ignored. `spec` is used as scratch space.
    pub fn inverse(&mut self, spec: &mut [Complex<f64>], len: usize, out: &mut Vec<f64>) {
        let plan = self.inverse_plan(len);
        if let Some(first) = spec.first_mut() {
            first.im = 0.0;
        }
        if len.is_multiple_of(2)
            && let Some(last) = spec.last_mut()
        {
            last.im = 0.0;
        }
        out.clear();
        out.resize(len, 0.0);
        self.scratch.resize(plan.get_scratch_len(), Complex::new(0.0, 0.0));
        let _ = plan.process_with_scratch(spec, out, &mut self.scratch);
        let scale = 1.0 / len as f64;
        for v in out.iter_mut() {
            *v *= scale;
        }
    }

    /// Circular cross-correlation of `x` and `y`, each zero-padded to `len`:
    /// `out[k] = Σₙ y[(n + k) mod len] · x[n]` for `k` in `0..len`.
    ///
    /// With `len >= x.len() + max_lag` (and `y.len() == x.len()`), `out[k]` and
    /// `out[len - k]` are the exact linear correlations at lags `+k` and `-k` for
    /// `k <= max_lag`.
    pub fn circular(&mut self, x: &[f64], y: &[f64], len: usize, out: &mut Vec<f64>) {
        let mut sx = std::mem::take(&mut self.spec_x);
        let mut sy = std::mem::take(&mut self.spec_y);
        self.spectrum(x, len, &mut sx);
        self.spectrum(y, len, &mut sy);
        for (a, b) in sy.iter_mut().zip(&sx) {
            *a *= b.conj();
        }
        self.inverse(&mut sy, len, out);
        self.spec_x = sx;
        self.spec_y = sy;
    }
}

/// Direct linear cross-correlation over lags `-max_lag..=max_lag`:
/// `out[i] = Σₙ y[n + k] · x[n]` with `k = i - max_lag`, summing only where both indices
/// are in range. `O(len · max_lag)`.
pub fn lags_direct(x: &[f64], y: &[f64], max_lag: usize, out: &mut Vec<f64>) {
    let n = x.len().min(y.len());
    out.clear();
    out.resize(2 * max_lag + 1, 0.0);
    for (i, slot) in out.iter_mut().enumerate() {
        let k = i as isize - max_lag as isize;
        let shift = k.unsigned_abs();
        if shift >= n {
            continue;
        }
        *slot = if k >= 0 { dot(&x[..n - shift], &y[shift..n]) } else { dot(&x[shift..n], &y[..n - shift]) };
    }
}

/// Direct circular cross-correlation, the same quantity as [`CrossCorrelator::circular`].
/// `O(len · x.len())`; meant for short series.
pub fn circular_direct(x: &[f64], y: &[f64], len: usize, out: &mut Vec<f64>) {
    let n = x.len().min(y.len()).min(len);
    out.clear();
    out.resize(len, 0.0);
    for (k, slot) in out.iter_mut().enumerate() {
        // Pairs (x[i], y[i + k]) without wrap, then (x[i], y[i + k - len]) with wrap.
        let mut acc = 0.0;
        if k < n {
            acc += dot(&x[..n - k], &y[k..n]);
        }
        let wrap_start = len - k; // x index where i + k reaches len
        if k > 0 && wrap_start < n {
            let m = (n - wrap_start).min(n);
            acc += dot(&x[wrap_start..wrap_start + m], &y[..m]);
        }
        *slot = acc;
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    // Four accumulators let the compiler vectorise without reassociation flags.
    let mut acc = [0.0f64; 4];
    let chunks = a.len() / 4;
    for c in 0..chunks {
        let i = c * 4;
        acc[0] += a[i] * b[i];
        acc[1] += a[i + 1] * b[i + 1];
        acc[2] += a[i + 2] * b[i + 2];
        acc[3] += a[i + 3] * b[i + 3];
    }
    let mut tail = 0.0;
    for i in chunks * 4..a.len() {
        tail += a[i] * b[i];
    }
    (acc[0] + acc[1]) + (acc[2] + acc[3]) + tail
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn series(n: usize, seed: u64) -> Vec<f64> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((s >> 11) as f64 / (1u64 << 53) as f64) - 0.5
            })
            .collect()
    }

    #[test]
    fn fast_len_is_smooth_even_and_minimal() {
        assert_eq!(fast_len(0), 2);
        assert_eq!(fast_len(7), 8);
        assert_eq!(fast_len(11), 12);
        assert_eq!(fast_len(100_000), 100_000);
        assert_eq!(fast_len(100_001), 101_250);
        for m in 1..500 {
            let n = fast_len(m);
            assert!(n >= m && n.is_multiple_of(2));
            let mut r = n;
            for p in [2, 3, 5] {
                while r.is_multiple_of(p) {
                    r /= p;
                }
            }
            assert_eq!(r, 1);
        }
    }

    #[test]
    fn fft_circular_equals_direct_circular() {
        let x = series(37, 1);
        let y = series(37, 2);
        for len in [37, 40, 50, 74, 90] {
            let mut a = Vec::new();
            let mut b = Vec::new();
            CrossCorrelator::new().circular(&x, &y, len, &mut a);
            circular_direct(&x, &y, len, &mut b);
            for (u, v) in a.iter().zip(&b) {
                assert!((u - v).abs() < 1e-12, "len {len}: {u} vs {v}");
            }
        }
    }

    #[test]
    fn padded_circular_equals_linear_lags() {
        let x = series(64, 3);
        let y = series(64, 4);
        let max_lag = 10;
        let mut lin = Vec::new();
        lags_direct(&x, &y, max_lag, &mut lin);
        let len = fast_len(64 + max_lag);
        let mut circ = Vec::new();
        CrossCorrelator::new().circular(&x, &y, len, &mut circ);
        for k in -(max_lag as isize)..=(max_lag as isize) {
            let c = circ[k.rem_euclid(len as isize) as usize];
            let l = lin[(k + max_lag as isize) as usize];
            assert!((c - l).abs() < 1e-12, "lag {k}: {c} vs {l}");
        }
    }

    #[test]
    fn positive_lag_means_x_leads() {
        // y[n] = x[n - 3]: the peak is at k = +3.
        let x = series(50, 5);
        let mut y = vec![0.0; 50];
        y[3..].copy_from_slice(&x[..47]);
        let mut lin = Vec::new();
        lags_direct(&x, &y, 5, &mut lin);
        let best = (0..lin.len()).max_by(|&a, &b| lin[a].total_cmp(&lin[b])).unwrap_or(0);
        assert_eq!(best as isize - 5, 3);
    }
}
