#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::analysis::rng::SplitMix64;

fn noise(n: usize, seed: u64) -> Vec<f64> {
    let mut rng = SplitMix64::new(seed);
    (0..n).map(|_| rng.next_f64() - 0.5).collect()
}

/// AR(1) noise with coefficient `phi` (autocorrelated, like real telemetry).
fn ar1(n: usize, phi: f64, seed: u64) -> Vec<f64> {
    let e = noise(n, seed);
    let mut out = Vec::with_capacity(n);
    let mut prev = 0.0;
    for v in e {
        prev = phi * prev + v;
        out.push(prev);
    }
    out
}

/// y[i] = x[i - lag] + noise (positive lag: x leads).
fn lagged(x: &[f64], lag: isize, noise_amp: f64, seed: u64) -> Vec<f64> {
    let e = noise(x.len(), seed);
    (0..x.len() as isize)
        .map(|i| {
            let j = i - lag;
            let base = if j >= 0 && (j as usize) < x.len() { x[j as usize] } else { 0.0 };
            base + noise_amp * e[i as usize]
        })
        .collect()
}

fn cfg(max_lag: usize, method: XcorrMethod) -> LagCorrConfig {
    LagCorrConfig { max_lag: Some(max_lag), method, ..LagCorrConfig::default() }
}

#[test]
fn finds_positive_lag_when_x_leads_and_negative_when_it_lags() {
    let x = ar1(2_000, 0.5, 1);
    let y = lagged(&x, 7, 0.5, 2);
    let r = lag_corr(&x, &y, &cfg(8, XcorrMethod::Auto)).unwrap();
    assert_eq!(r.lag, 7);
    assert!(r.coef > 0.7, "{r:?}");
    assert_eq!(r.null_model, Some(NullModel::CircularShift));
    assert!(r.p_value.unwrap() < 0.02, "{r:?}");
    let r = lag_corr(&y, &x, &cfg(8, XcorrMethod::Auto)).unwrap();
    assert_eq!(r.lag, -7);
}

#[test]
fn anticorrelation_is_found_with_negative_coefficient() {
    let x = ar1(1_000, 0.3, 3);
    let y: Vec<f64> = lagged(&x, -4, 0.3, 4).iter().map(|v| -v).collect();
    let r = lag_corr(&x, &y, &cfg(10, XcorrMethod::Auto)).unwrap();
    assert_eq!(r.lag, -4);
    assert!(r.coef < -0.7, "{r:?}");
}

#[test]
fn direct_and_fft_paths_agree() {
    for (m, max_lag, seed) in [(50, 10, 5), (300, 60, 6), (1_000, 5, 7), (257, 256, 8)] {
        let x = ar1(m, 0.7, seed);
        let y = lagged(&x, 3, 1.0, seed + 100);
        for significance in [false, true] {
            let mut c = cfg(max_lag, XcorrMethod::Direct);
            c.significance = significance;
            let d = lag_corr(&x, &y, &c).unwrap();
            c.method = XcorrMethod::Fft;
            let f = lag_corr(&x, &y, &c).unwrap();
            assert_eq!(d.lag, f.lag, "m {m}");
            assert!((d.coef - f.coef).abs() < 1e-10, "m {m}: {d:?} vs {f:?}");
            assert_eq!(d.p_value.is_some(), f.p_value.is_some());
            if let (Some(a), Some(b)) = (d.p_value, f.p_value) {
                assert!((a - b).abs() < 1e-9, "m {m}: {a} vs {b}");
            }
        }
    }
}

#[test]
fn identical_series_correlate_perfectly_at_lag_zero() {
    let x = noise(100, 9);
    let r = lag_corr(&x, &x, &cfg(10, XcorrMethod::Auto)).unwrap();
    assert_eq!(r.lag, 0);
    assert!((r.coef - 1.0).abs() < 1e-12);
    assert_eq!(r.n, 100);
}

#[test]
fn degenerate_inputs_give_none() {
    let c = LagCorrConfig::default();
    assert!(lag_corr(&[1.0, 2.0], &[1.0, 2.0], &c).is_none());
    assert!(lag_corr(&[3.0; 10], &noise(10, 1), &c).is_none());
    assert!(lag_corr(&noise(10, 1), &[f64::NAN; 10], &c).is_none());
    assert!(lag_corr(&[], &[], &c).is_none());
}

#[test]
fn gaps_are_skipped_and_do_not_move_the_lag() {
    let x = ar1(600, 0.5, 10);
    let mut y = lagged(&x, -5, 0.3, 11);
    let mut xg = x.clone();
    for i in (100..590).step_by(37) {
        y[i] = f64::NAN;
        xg[i + 3] = f64::NAN;
    }
    let r = lag_corr(&xg, &y, &cfg(15, XcorrMethod::Auto)).unwrap();
    assert_eq!(r.lag, -5);
    assert_eq!(r.n, 600 - 2 * (100..590).step_by(37).count());
}

#[test]
fn wide_windows_use_phase_randomised_surrogates_deterministically() {
    let x = ar1(400, 0.5, 12);
    let y = lagged(&x, 30, 0.5, 13);
    let a = lag_corr(&x, &y, &LagCorrConfig::default()).unwrap();
    let b = lag_corr(&x, &y, &LagCorrConfig::default()).unwrap();
    assert_eq!(a, b);
    assert_eq!(a.max_lag, 100);
    assert_eq!(a.lag, 30);
    assert_eq!(a.null_model, Some(NullModel::PhaseRandomised));
    assert_eq!(a.surrogates, DEFAULT_SURROGATES);
    assert!((a.p_value.unwrap() - 0.01).abs() < 1e-12, "{a:?}");
}

#[test]
fn p_values_are_not_too_small_under_independence() {
    // Independent autocorrelated series: the test must not call them related more often
    // than its level (with slack for the finite number of trials).
    for (max_lag, model) in [(3, NullModel::CircularShift), (50, NullModel::PhaseRandomised)] {
        let trials = 100;
        let mut rejections = 0;
        for t in 0..trials {
            let x = ar1(1_000, 0.8, 1_000 + t);
            let y = ar1(1_000, 0.8, 5_000 + t);
            let r = lag_corr(&x, &y, &cfg(max_lag, XcorrMethod::Auto)).unwrap();
            assert_eq!(r.null_model, Some(model));
            if r.p_value.unwrap() <= 0.05 {
                rejections += 1;
            }
        }
        assert!(rejections <= 12, "{model:?}: {rejections} of {trials} rejected at 5%");
    }
}
