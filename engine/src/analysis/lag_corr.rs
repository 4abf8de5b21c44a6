//! Lag correlation of two series on a common grid: the best lag, the correlation at that lag
//! and a surrogate-based significance for the max-over-lags statistic.
//!
//! # Definition
//! Both series are normalised over the slots where both are present (`z = (v - mean) / std`,
//! population std); gap slots (`NaN`) contribute zero. With `n` present slots,
//! `coef(k) = Σᵢ zy[i + k] · zx[i] / n`, which is `scipy.signal.correlate(zy, zx) / n` at the
//! lag `k` from `correlation_lags(len(zy), len(zx))`. The best lag maximises `|coef(k)|` over
//! `|k| <= max_lag` (ties go to the smaller `|k|`, then to the positive lag). **A positive lag
//! means x leads y**: `y` repeats `x` `k` slots later.
//!
//! # Significance
//! The statistic is `T = max_{|k| <= max_lag} |S(k)| / sqrt(m(k))`, where `S(k)` is the raw
//! sum and `m(k)` the number of slot pairs it spans. It is compared with `T` computed for
//! surrogates of `x` that keep its autocorrelation but break its alignment with `y`;
//! `p = (1 + #{T_s >= T}) / (1 + N)`:
//! - *circular shifts* (free: read off the same FFT) when at least [`DEFAULT_SURROGATES`]
//!   disjoint shifted lag windows fit in the padded circle, i.e. `max_lag` is below about
//!   1/200 of the series; every such window is used;
//! - otherwise [`DEFAULT_SURROGATES`] *phase-randomised* surrogates (same power spectrum,
//!   random phases from a fixed seed), one inverse FFT each.

use super::rng::SplitMix64;
use super::xcorr::{CrossCorrelator, circular_direct, fast_len, lags_direct};
use realfft::num_complex::Complex;

/// Number of surrogates used by the phase-randomised test, and the minimum number of disjoint
/// circular shifts required before the (free) circular-shift test is used instead.
pub const DEFAULT_SURROGATES: usize = 99;

/// Default seed for phase-randomised surrogates (results are deterministic).
pub const DEFAULT_SEED: u64 = 0x1ac5_7e9c_0ff5_e7ed;

/// Fewest present slots for which a correlation is reported.
pub const MIN_POINTS: usize = 3;

/// How the correlation array is computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum XcorrMethod {
    /// Pick the cheaper of the two by an operation count.
    #[default]
    Auto,
    /// Direct summation (`O(n · lags)`, or `O(n · N)` when the whole circle is needed).
    Direct,
    /// FFT (`O(N log N)`).
    Fft,
}

/// The surrogate family used for the p-value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NullModel {
    /// Circular shifts of `x` by multiples of the lag-window width.
    CircularShift,
    /// Phase-randomised (Fourier) surrogates of `x`.
    PhaseRandomised,
}

/// Options for [`LagCorrelator::compute`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LagCorrConfig {
    /// Largest |lag| searched, in grid slots; `None` = a quarter of the series.
    pub max_lag: Option<usize>,
    /// Direct, FFT or automatic.
    pub method: XcorrMethod,
    /// Whether to compute the p-value.
    pub significance: bool,
    /// Number of phase-randomised surrogates.
    pub surrogates: usize,
    /// Seed of the phase-randomised surrogates.
    pub seed: u64,
}

impl Default for LagCorrConfig {
    fn default() -> Self {
        Self {
            max_lag: None,
            method: XcorrMethod::Auto,
            significance: true,
            surrogates: DEFAULT_SURROGATES,
            seed: DEFAULT_SEED,
        }
    }
}

/// Result of a lag correlation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LagCorr {
    /// Best lag in grid slots; positive = x leads y.
    pub lag: i64,
    /// Correlation coefficient at that lag (in `[-1, 1]`).
    pub coef: f64,
    /// Significance of the max-over-lags statistic; `None` when not requested or too few
    /// surrogates are possible.
    pub p_value: Option<f64>,
    /// The surrogate family used for `p_value`.
    pub null_model: Option<NullModel>,
    /// Number of surrogates behind `p_value`.
    pub surrogates: usize,
    /// Slots where both series are present.
    pub n: usize,
    /// The lag window actually searched (slots).
    pub max_lag: usize,
}

/// Reusable lag-correlation engine (holds FFT plans and buffers).
#[derive(Debug, Default)]
pub struct LagCorrelator {
    xc: CrossCorrelator,
    zx: Vec<f64>,
    zy: Vec<f64>,
    corr: Vec<f64>,
    spec_x: Vec<Complex<f64>>,
    spec_y: Vec<Complex<f64>>,
    spec_s: Vec<Complex<f64>>,
    surrogate: Vec<f64>,
}

impl LagCorrelator {
    /// A correlator with empty caches.
    pub fn new() -> Self {
        Self::default()
    }

    /// Correlates `x` and `y`, two series on the same grid (equal length; `NaN` = missing).
    /// Returns `None` when fewer than [`MIN_POINTS`] slots have both values or either series
    /// is constant there.
    pub fn compute(&mut self, x: &[f64], y: &[f64], cfg: &LagCorrConfig) -> Option<LagCorr> {
        let m = x.len().min(y.len());
        let n = normalise(&x[..m], &y[..m], &mut self.zx, &mut self.zy)?;
        let max_lag = cfg.max_lag.unwrap_or(m / 4).min(m - 1);
        let len = fast_len(m + max_lag);
        let width = 2 * max_lag + 1;
        let tiles = (len - 2 * max_lag - 1) / width;
        let circular_ok = tiles >= DEFAULT_SURROGATES && 2 * m >= len + m / 2;
        let need_circle = cfg.significance && circular_ok;

        let direct_ops = if need_circle { len * m } else { m * width };
        let fft_ops = 3 * len * (usize::BITS - len.leading_zeros()) as usize;
        let direct = match cfg.method {
            XcorrMethod::Direct => true,
            XcorrMethod::Fft => false,
            XcorrMethod::Auto => direct_ops <= fft_ops,
        };
        // `at(k)` reads lag k from `corr`, whichever layout was computed.
        let circle_layout = need_circle || !direct;
        if direct && !need_circle {
            lags_direct(&self.zx, &self.zy, max_lag, &mut self.corr);
        } else if direct {
            circular_direct(&self.zx, &self.zy, len, &mut self.corr);
        } else {
            self.xc.circular(&self.zx, &self.zy, len, &mut self.corr);
        }
        let corr = &self.corr;
        let at = |k: isize| -> f64 {
            if circle_layout {
                corr[k.rem_euclid(len as isize) as usize]
            } else {
                corr[(k + max_lag as isize) as usize]
            }
        };

        let mut best_k = 0isize;
        let mut best = at(0).abs();
        let mut t_obs = best / (m as f64).sqrt();
        for d in 1..=max_lag as isize {
            let span = ((m as isize - d) as f64).sqrt();
            for k in [d, -d] {
                let v = at(k).abs();
                if v > best {
                    best = v;
                    best_k = k;
                }
                t_obs = t_obs.max(v / span);
            }
        }
        let coef = (at(best_k) / n as f64).clamp(-1.0, 1.0);

        let (p_value, null_model, surrogates) = if !cfg.significance {
            (None, None, 0)
        } else if circular_ok {
            let (count, ge) = circular_tiles(corr, m, len, max_lag, t_obs);
            (Some(p_from(ge, count)), Some(NullModel::CircularShift), count)
        } else if cfg.surrogates > 0 {
            let ge = self.phase_surrogates(m, max_lag, t_obs, cfg);
            (Some(p_from(ge, cfg.surrogates)), Some(NullModel::PhaseRandomised), cfg.surrogates)
        } else {
            (None, None, 0)
        };
        if super::interrupt::stopped() {
            // The surrogates were cut short: no result.
            return None;
        }
        Some(LagCorr { lag: best_k as i64, coef, p_value, null_model, surrogates, n, max_lag })
    }

    /// Counts phase-randomised surrogates whose statistic reaches `t_obs`.
    fn phase_surrogates(&mut self, m: usize, max_lag: usize, t_obs: f64, cfg: &LagCorrConfig) -> usize {
        self.xc.spectrum(&self.zx, m, &mut self.spec_x);
        self.xc.spectrum(&self.zy, m, &mut self.spec_y);
        let mut rng = SplitMix64::new(cfg.seed);
        let norm = (m as f64).sqrt();
        let mut ge = 0;
        for _ in 0..cfg.surrogates {
            // One inverse FFT of the series' length per surrogate: a stopped statement ends
            // after the current one (its caller discards the result).
            if super::interrupt::stopped() {
                break;
            }
            self.spec_s.clear();
            for (i, (xf, yf)) in self.spec_x.iter().zip(&self.spec_y).enumerate() {
                let nyquist = m.is_multiple_of(2) && i == m / 2;
                let xs = if i == 0 {
                    *xf
                } else if nyquist {
                    // A real bin: keep the magnitude, randomise the sign.
                    let s = if rng.next_u64() & 1 == 0 { 1.0 } else { -1.0 };
                    Complex::new(s * xf.norm(), 0.0)
                } else {
                    xf.norm() * random_unit(&mut rng)
                };
                self.spec_s.push(yf * xs.conj());
            }
            let mut spec = std::mem::take(&mut self.spec_s);
            self.xc.inverse(&mut spec, m, &mut self.surrogate);
            self.spec_s = spec;
            let s = &self.surrogate;
            let mut t = s[0].abs();
            for d in 1..=max_lag {
                t = t.max(s[d].abs()).max(s[m - d].abs());
            }
            if t / norm >= t_obs {
                ge += 1;
            }
        }
        ge
    }
}

/// Convenience wrapper: one-off [`LagCorrelator::compute`].
pub fn lag_corr(x: &[f64], y: &[f64], cfg: &LagCorrConfig) -> Option<LagCorr> {
    LagCorrelator::new().compute(x, y, cfg)
}

/// A uniformly distributed point on the unit circle (rejection sampling, no trigonometry).
fn random_unit(rng: &mut SplitMix64) -> Complex<f64> {
    loop {
        let u = 2.0 * rng.next_f64() - 1.0;
        let v = 2.0 * rng.next_f64() - 1.0;
        let r2 = u * u + v * v;
        if r2 > 1e-12 && r2 <= 1.0 {
            let r = r2.sqrt();
            return Complex::new(u / r, v / r);
        }
    }
}

fn p_from(ge: usize, count: usize) -> f64 {
    (1 + ge) as f64 / (1 + count) as f64
}

/// Normalises the present pairs to zero mean and unit variance (zero at gaps). Returns the
/// number of present slots, or `None` if it is below [`MIN_POINTS`] or a series is constant.
fn normalise(x: &[f64], y: &[f64], zx: &mut Vec<f64>, zy: &mut Vec<f64>) -> Option<usize> {
    let present = |a: f64, b: f64| a.is_finite() && b.is_finite();
    let (mut n, mut sx, mut sy) = (0usize, 0.0, 0.0);
    for (&a, &b) in x.iter().zip(y) {
        if present(a, b) {
            n += 1;
            sx += a;
            sy += b;
        }
    }
    if n < MIN_POINTS {
        return None;
    }
    let (mx, my) = (sx / n as f64, sy / n as f64);
    let (mut vx, mut vy) = (0.0, 0.0);
    for (&a, &b) in x.iter().zip(y) {
        if present(a, b) {
            vx += (a - mx) * (a - mx);
            vy += (b - my) * (b - my);
        }
    }
    let (sdx, sdy) = ((vx / n as f64).sqrt(), (vy / n as f64).sqrt());
    // Relative tolerance: a series whose spread is rounding noise around its mean is constant.
    let flat = |sd: f64, mean: f64| !sd.is_finite() || sd <= 1e-12 * mean.abs().max(f64::MIN_POSITIVE);
    if flat(sdx, mx) || flat(sdy, my) {
        return None;
    }
    zx.clear();
    zy.clear();
    for (&a, &b) in x.iter().zip(y) {
        if present(a, b) {
            zx.push((a - mx) / sdx);
            zy.push((b - my) / sdy);
        } else {
            zx.push(0.0);
            zy.push(0.0);
        }
    }
    Some(n)
}

/// Circular-shift test: tiles of width `2L + 1` centred at multiples of the width, disjoint
/// from the observed window and from each other. Returns (tiles, tiles with `T >= t_obs`).
fn circular_tiles(corr: &[f64], m: usize, len: usize, max_lag: usize, t_obs: f64) -> (usize, usize) {
    let width = 2 * max_lag + 1;
    let tiles = (len - 2 * max_lag - 1) / width;
    // Number of slot pairs at circular lag j of two length-m blocks in a circle of len.
    let span = |j: usize| -> f64 {
        let a = m.saturating_sub(j);
        let b = m.saturating_sub(len - j);
        ((a + b).max(1)) as f64
    };
    // Every span is at most m, so |S| below t_obs · sqrt(min span) can never reach t_obs:
    // only larger values need the exact (square-root) test.
    let min_span = (2 * m).saturating_sub(len).max(1) as f64;
    let floor = t_obs * min_span.sqrt();
    let mut ge = 0;
    for t in 1..=tiles {
        let centre = t * width;
        let window = &corr[centre - max_lag..=centre + max_lag];
        let reaches = window.iter().enumerate().any(|(i, v)| {
            let a = v.abs();
            a >= floor && a / span(centre - max_lag + i).sqrt() >= t_obs
        });
        if reaches {
            ge += 1;
        }
    }
    (tiles, ge)
}

#[cfg(test)]
mod tests;
