//! Robust helpers for change detection on drifting, autocorrelated, heavy-tailed series:
//! standardisation by the noise scale, winsorisation against a running median, and a robust
//! lag-1 autocorrelation that trends and a few level shifts do not bias, and removal of a
//! strong seasonal cycle.

use super::xcorr::{CrossCorrelator, fast_len};

/// Half-width of the running median used to winsorise (window `2 · 5 + 1 = 11`).
pub const MEDIAN_HALF_WIDTH: usize = 5;
/// Residuals from the running median are clipped at this many robust standard deviations.
pub const CLIP_SDS: f64 = 3.0;
/// Fraction of the smallest absolute deviations kept by [`trimmed_scale`].
pub const TRIM_KEEP: f64 = 0.8;

/// Replaces ±inf by finite stand-ins just beyond the finite range (one range further out), so
/// they stay the extremes without overflowing sums. All-infinite input maps to ±1.
pub fn finite_surrogates(values: &[f64], out: &mut Vec<f64>) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for &v in values.iter().filter(|v| v.is_finite()) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if lo > hi {
        (lo, hi) = (0.0, 0.0);
    }
    let span = (hi - lo).max(hi.abs().max(lo.abs()) * 1e-9).max(1.0);
    out.clear();
    out.extend(values.iter().map(|&v| {
        if v == f64::INFINITY {
            hi + span
        } else if v == f64::NEG_INFINITY {
            lo - span
        } else {
            v
        }
    }));
}

/// Median of `values` (copied into `scratch`); 0 for an empty slice.
pub fn median(values: &[f64], scratch: &mut Vec<f64>) -> f64 {
    if values.is_empty() {
        return 0.0;
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

/// A robust standard deviation: the root mean square of the smallest [`TRIM_KEEP`] of the
/// absolute deviations from the median, rescaled to σ for Gaussian data. Unlike the MAD it
/// does not collapse to 0 on coarsely quantised data. 0 for fewer than two values.
pub fn trimmed_scale(values: &[f64], scratch: &mut Vec<f64>) -> f64 {
    if values.len() < 2 {
        return 0.0;
    }
    let med = median(values, scratch);
    scratch.clear();
    scratch.extend(values.iter().map(|v| (v - med).abs()));
    let keep = ((TRIM_KEEP * scratch.len() as f64).ceil() as usize).clamp(1, scratch.len());
    if keep < scratch.len() {
        scratch.select_nth_unstable_by(keep - 1, f64::total_cmp);
    }
    let ms = scratch[..keep].iter().map(|d| d * d).sum::<f64>() / keep as f64;
    // E[d² | |d| below its 80 % quantile] = 0.4377 σ² for Gaussian d.
    (ms / 0.437_7).sqrt()
}

/// Robust lag-1 autocorrelation from first and second differences:
/// `Var(x[t+2] − x[t]) / Var(x[t+1] − x[t]) = 1 + ρ` for AR(1) noise, with trimmed scales
/// centred on the median difference, so a linear trend and a few level shifts cancel out.
/// About 0 for white noise, 1 for a random walk, above 1 (up to 3) for smooth curves.
/// Returns 1 when the differences have no spread.
pub fn lag1_autocorrelation(z: &[f64], scratch: &mut Vec<f64>) -> f64 {
    if z.len() < 8 {
        return 0.0;
    }
    let d1: Vec<f64> = z.windows(2).map(|w| w[1] - w[0]).collect();
    let d2: Vec<f64> = z.windows(3).map(|w| w[2] - w[0]).collect();
    let s1 = trimmed_scale(&d1, scratch);
    let s2 = trimmed_scale(&d2, scratch);
    if s1 <= 0.0 || !s1.is_finite() || !s2.is_finite() {
        return 1.0;
    }
    (s2 / s1).powi(2) - 1.0
}

/// Clips each value's residual from the running median (window `2 · half + 1`) at `sds`
/// robust standard deviations of those residuals: isolated spikes and heavy tails lose their
/// leverage, steps and ramps (which a running median follows) keep theirs. In place.
pub fn winsorise(z: &mut [f64], half: usize, sds: f64, scratch: &mut Vec<f64>) {
    let n = z.len();
    if n < 3 {
        return;
    }
    let mut win = Vec::with_capacity(2 * half + 1);
    let rm: Vec<f64> = (0..n)
        .map(|i| {
            let (a, b) = (i.saturating_sub(half), (i + half + 1).min(n));
            median(&z[a..b], &mut win)
        })
        .collect();
    let res: Vec<f64> = z.iter().zip(&rm).map(|(v, m)| v - m).collect();
    let s = trimmed_scale(&res, scratch);
    if s <= 0.0 || !s.is_finite() {
        return;
    }
    let lim = sds * s;
    for (v, m) in z.iter_mut().zip(&rm) {
        *v = m + (*v - m).clamp(-lim, lim);
    }
}

/// The smallest positive gap between distinct values (the quantum of quantised data); `None`
/// when all values are equal.
pub fn quantum(z: &[f64], scratch: &mut Vec<f64>) -> Option<f64> {
    scratch.clear();
    scratch.extend_from_slice(z);
    scratch.sort_unstable_by(f64::total_cmp);
    scratch.windows(2).map(|w| w[1] - w[0]).filter(|d| *d > 0.0).min_by(f64::total_cmp)
}

/// Shortest season [`seasonal_period`] looks for (samples).
pub const MIN_PERIOD: usize = 4;
/// A season needs at least this autocorrelation at its period.
pub const SEASON_MIN_ACF: f64 = 0.5;
/// ... and this rise from the lowest autocorrelation at a shorter lag (a real cycle goes
/// through a trough at half its period; trends, walks and AR noise decay without one).
pub const SEASON_MIN_SWING: f64 = 0.8;

/// The period of a strong seasonal cycle in `z`, if any: the first local maximum of the
/// autocorrelation (of `z` less its least-squares line, by FFT) at lags `MIN_PERIOD..=n/3`
/// that reaches [`SEASON_MIN_ACF`] after a swing of [`SEASON_MIN_SWING`] from the lowest
/// shorter-lag value, moved to the highest autocorrelation within half a period after it.
pub fn seasonal_period(z: &[f64], xc: &mut CrossCorrelator, buf: &mut Vec<f64>) -> Option<usize> {
    let n = z.len();
    let max_lag = n / 3;
    if max_lag < MIN_PERIOD + 1 {
        return None;
    }
    // Detrend by least squares.
    let nf = n as f64;
    let tm = (nf - 1.0) / 2.0;
    let zm = z.iter().sum::<f64>() / nf;
    let (mut stz, mut stt) = (0.0, 0.0);
    for (i, v) in z.iter().enumerate() {
        let t = i as f64 - tm;
        stz += t * (v - zm);
        stt += t * t;
    }
    let slope = if stt > 0.0 { stz / stt } else { 0.0 };
    let d: Vec<f64> = z.iter().enumerate().map(|(i, v)| v - zm - slope * (i as f64 - tm)).collect();
    let len = fast_len(n + max_lag + 1);
    xc.circular(&d, &d, len, buf);
    let c0 = buf.first().copied().unwrap_or(0.0);
    if !(c0 > 0.0 && c0.is_finite()) {
        return None;
    }
    let acf = |k: usize| buf[k] / c0 * nf / (nf - k as f64);
    let mut low = f64::INFINITY;
    for k in 1..max_lag {
        let a = acf(k);
        if k >= MIN_PERIOD && a >= SEASON_MIN_ACF && a - low >= SEASON_MIN_SWING && a >= acf(k - 1) && a >= acf(k + 1) {
            let end = (k + k / 2).min(max_lag);
            let best = (k..=end).max_by(|&x, &y| acf(x).total_cmp(&acf(y))).unwrap_or(k);
            return Some(best);
        }
        low = low.min(a);
    }
    None
}

/// Removes a seasonal cycle of period `p` in place: the per-phase median of the residuals
/// from a centred moving average of width `p`, centred to mean zero, is subtracted. Level
/// shifts and trends pass through (the moving average follows them, the median ignores the
/// few cycles they disturb).
pub fn deseasonalise(z: &mut [f64], p: usize, scratch: &mut Vec<f64>) {
    let n = z.len();
    if p < 2 || n < 2 * p {
        return;
    }
    let mut pre = Vec::with_capacity(n + 1);
    pre.push(0.0);
    let mut acc = 0.0;
    for v in z.iter() {
        acc += v;
        pre.push(acc);
    }
    let h = p / 2;
    let res: Vec<f64> = (0..n)
        .map(|i| {
            let (a, b) = (i.saturating_sub(h), (i + h + 1).min(n));
            z[i] - (pre[b] - pre[a]) / (b - a) as f64
        })
        .collect();
    let mut phase = Vec::with_capacity(n / p + 1);
    let mut profile: Vec<f64> = (0..p)
        .map(|k| {
            phase.clear();
            phase.extend(res.iter().skip(k).step_by(p));
            median(&phase, scratch)
        })
        .collect();
    let mean = profile.iter().sum::<f64>() / p as f64;
    for v in profile.iter_mut() {
        *v -= mean;
    }
    for (i, v) in z.iter_mut().enumerate() {
        *v -= profile[i % p];
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::analysis::rng::SplitMix64;

    fn normals(seed: u64, n: usize) -> Vec<f64> {
        let mut g = SplitMix64::new(seed);
        (0..n)
            .map(|_| {
                let u = g.next_f64().max(1e-300);
                (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * g.next_f64()).cos()
            })
            .collect()
    }

    #[test]
    fn autocorrelation_tells_white_ar_and_random_walk_apart_despite_trend_and_shift() {
        let mut s = Vec::new();
        let e = normals(1, 4_000);
        let white: Vec<f64> = e.iter().enumerate().map(|(i, v)| v + 0.01 * i as f64).collect();
        let mut ar = vec![0.0; e.len()];
        for i in 1..e.len() {
            ar[i] = 0.6 * ar[i - 1] + e[i] + if i == 2_000 { 10.0 } else { 0.0 };
        }
        let walk: Vec<f64> = e
            .iter()
            .scan(0.0, |a, v| {
                *a += v;
                Some(*a)
            })
            .collect();
        let (r0, r1, r2) = (
            lag1_autocorrelation(&white, &mut s),
            lag1_autocorrelation(&ar, &mut s),
            lag1_autocorrelation(&walk, &mut s),
        );
        assert!(r0.abs() < 0.1, "{r0}");
        assert!((r1 - 0.6).abs() < 0.12, "{r1}");
        assert!((r2 - 1.0).abs() < 0.15, "{r2}");
    }

    #[test]
    fn winsorising_clips_spikes_but_keeps_steps() {
        let mut z = normals(2, 400);
        for v in z.iter_mut().skip(200) {
            *v += 8.0;
        }
        z[100] = 1e6;
        let mut s = Vec::new();
        winsorise(&mut z, MEDIAN_HALF_WIDTH, CLIP_SDS, &mut s);
        assert!(z[100] < 10.0, "{}", z[100]);
        let before: f64 = z[150..200].iter().sum::<f64>() / 50.0;
        let after: f64 = z[200..250].iter().sum::<f64>() / 50.0;
        assert!((after - before - 8.0).abs() < 0.6, "{before} {after}");
    }

    #[test]
    fn seasons_are_found_and_removed_but_walks_and_ar_noise_have_none() {
        let mut xc = CrossCorrelator::new();
        let (mut buf, mut s) = (Vec::new(), Vec::new());
        let e = normals(3, 1_200);
        let mut z: Vec<f64> = e
            .iter()
            .enumerate()
            .map(|(i, v)| 3.0 * (std::f64::consts::TAU * i as f64 / 60.0).sin() + 0.5 * v)
            .collect();
        assert_eq!(seasonal_period(&z, &mut xc, &mut buf), Some(60));
        for v in z.iter_mut().skip(700) {
            *v += 4.0;
        }
        deseasonalise(&mut z, 60, &mut s);
        let sd = |w: &[f64]| {
            let m = w.iter().sum::<f64>() / w.len() as f64;
            (w.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / w.len() as f64).sqrt()
        };
        assert!(sd(&z[..650]) < 0.7 && sd(&z[750..]) < 0.7, "{} {}", sd(&z[..650]), sd(&z[750..]));
        let walk: Vec<f64> = e
            .iter()
            .scan(0.0, |a, v| {
                *a += v;
                Some(*a)
            })
            .collect();
        assert_eq!(seasonal_period(&walk, &mut xc, &mut buf), None);
        assert_eq!(seasonal_period(&e, &mut xc, &mut buf), None);
        assert_eq!(seasonal_period(&[1.0; 30], &mut xc, &mut buf), None);
    }

    #[test]
    fn degenerate_inputs_are_finite() {
        let mut s = Vec::new();
        let mut out = Vec::new();
        finite_surrogates(&[f64::INFINITY, 1.0, f64::NEG_INFINITY], &mut out);
        assert!(out.iter().all(|v| v.is_finite()) && out[0] > 1.0 && out[2] < 1.0);
        finite_surrogates(&[f64::INFINITY; 3], &mut out);
        assert!(out.iter().all(|v| v.is_finite()));
        assert_eq!(trimmed_scale(&[], &mut s), 0.0);
        assert_eq!(lag1_autocorrelation(&[1.0; 20], &mut s), 1.0);
        assert_eq!(quantum(&[2.0, 2.0], &mut s), None);
        assert_eq!(quantum(&[0.0, 0.5, 2.0, 0.5], &mut s), Some(0.5));
    }
}
