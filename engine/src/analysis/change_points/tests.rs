#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::analysis::rng::SplitMix64;

/// Test-signal generator: Gaussian and heavy-tailed noise around piecewise levels.
struct Gen(SplitMix64);

impl Gen {
    fn new(seed: u64) -> Self {
        Self(SplitMix64::new(seed))
    }
    fn normal(&mut self) -> f64 {
        let u = self.0.next_f64().max(1e-300);
        let v = self.0.next_f64();
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
    fn cauchy(&mut self) -> f64 {
        (std::f64::consts::PI * (self.0.next_f64() - 0.5)).tan()
    }
    /// Latency-like: lognormal body with Pareto(α = 1.5) spikes on 2 % of samples.
    fn latency(&mut self, median: f64) -> f64 {
        let body = median * (0.25 * self.normal()).exp();
        if self.0.next_f64() < 0.02 { body * (1.0 - self.0.next_f64()).powf(-1.0 / 1.5) * 5.0 } else { body }
    }
}

fn gaussian(seed: u64, parts: &[(usize, f64, f64)]) -> Vec<f64> {
    let mut g = Gen::new(seed);
    parts.iter().flat_map(|&(len, mean, sd)| (0..len).map(|_| mean + sd * g.normal()).collect::<Vec<_>>()).collect()
}

fn indices(cps: &[ChangePoint]) -> Vec<usize> {
    cps.iter().map(|c| c.index).collect()
}

#[test]
fn mean_step_is_found_with_medians_and_interval() {
    let v = gaussian(1, &[(500, 10.0, 1.0), (500, 12.0, 1.0)]);
    let cps = change_points(&v, &ChangeConfig::default());
    assert_eq!(cps.len(), 1, "{:?}", indices(&cps));
    let c = cps[0];
    assert!(c.index.abs_diff(500) <= 5, "{c:?}");
    assert!((c.before - 10.0).abs() < 0.2 && (c.after - 12.0).abs() < 0.2, "{c:?}");
    assert!(c.ci.0 <= c.index && c.index <= c.ci.1 && c.ci.1 - c.ci.0 < 40, "{c:?}");
}

#[test]
fn variance_step_is_found() {
    let v = gaussian(2, &[(500, 0.0, 1.0), (500, 0.0, 4.0)]);
    let cps = change_points(&v, &ChangeConfig::default());
    assert_eq!(cps.len(), 1, "{:?}", indices(&cps));
    assert!(cps[0].index.abs_diff(500) <= 25, "{:?}", cps[0]);
}

#[test]
fn no_false_alarms_on_heavy_tailed_noise() {
    let mut alarms = 0;
    for seed in 0..40 {
        let mut g = Gen::new(100 + seed);
        let cauchy: Vec<f64> = (0..2_000).map(|_| g.cauchy()).collect();
        let latency: Vec<f64> = (0..2_000).map(|_| g.latency(20.0)).collect();
        alarms += change_points(&cauchy, &ChangeConfig::default()).len();
        alarms += change_points(&latency, &ChangeConfig::default()).len();
    }
    assert!(alarms <= 2, "{alarms} false change points in 80 null series");
}

#[test]
fn no_false_alarms_on_gaussian_noise() {
    let mut alarms = 0;
    for seed in 0..40 {
        alarms += change_points(&gaussian(200 + seed, &[(3_000, 5.0, 2.0)]), &ChangeConfig::default()).len();
    }
    assert!(alarms <= 2, "{alarms} false change points in 40 null series");
}

#[test]
fn latency_step_under_heavy_tails_is_found() {
    let mut g = Gen::new(3);
    let v: Vec<f64> = (0..2_000).map(|i| g.latency(if i < 1_200 { 20.0 } else { 26.0 })).collect();
    let cps = change_points(&v, &ChangeConfig::default());
    assert_eq!(cps.len(), 1, "{:?}", indices(&cps));
    assert!(cps[0].index.abs_diff(1_200) <= 20, "{:?}", cps[0]);
    assert!((cps[0].before - 20.0).abs() < 1.0 && (cps[0].after - 26.0).abs() < 1.5, "{:?}", cps[0]);
}

#[test]
fn ramp_onset_is_at_or_after_its_start_and_not_before() {
    let mut v = gaussian(4, &[(400, 0.0, 1.0)]);
    let mut g = Gen::new(5);
    v.extend((0..200).map(|i| 5.0 * f64::from(i) / 200.0 + g.normal()));
    v.extend(gaussian(6, &[(400, 5.0, 1.0)]));
    let cps = change_points(&v, &ChangeConfig::default());
    assert!(!cps.is_empty());
    assert!(cps[0].index >= 390 && cps[0].index <= 520, "{:?}", indices(&cps));
    assert!(cps.last().is_some_and(|c| c.index <= 620), "{:?}", indices(&cps));
}

#[test]
fn long_series_use_the_candidate_grid_and_stay_exact() {
    let v = gaussian(7, &[(6_000, 0.0, 1.0), (4_000, 1.0, 1.0)]);
    let cps = change_points(&v, &ChangeConfig::default());
    assert_eq!(indices(&cps).len(), 1, "{:?}", indices(&cps));
    assert!(cps[0].index.abs_diff(6_000) <= 15, "{:?}", cps[0]);
}

#[test]
fn onset_skips_transient_blips_shorter_than_sustain() {
    let mut v = gaussian(8, &[(300, 0.0, 1.0), (6, 50.0, 1.0), (300, 0.0, 1.0), (300, 4.0, 1.0)]);
    v[0] = 0.0;
    let all = change_points(&v, &ChangeConfig::default());
    assert!(all.len() >= 3, "{:?}", indices(&all));
    let o = onset(&v, &ChangeConfig::default()).unwrap();
    assert!(o.index.abs_diff(606) <= 5, "{o:?}");
}

#[test]
fn degenerate_series() {
    let cfg = ChangeConfig::default();
    assert!(change_points(&[], &cfg).is_empty());
    assert!(change_points(&[1.0], &cfg).is_empty());
    assert!(change_points(&[7.0; 1_000], &cfg).is_empty());
    assert!(onset(&[7.0; 1_000], &cfg).is_none());
    // A plateau that jumps to +inf: infinities are just the largest values.
    let mut v = vec![1.0; 200];
    v.extend([f64::INFINITY; 200]);
    let cps = change_points(&v, &cfg);
    assert_eq!(indices(&cps), vec![200]);
    assert_eq!((cps[0].before, cps[0].after), (1.0, f64::INFINITY));
    // Quantised data: two levels.
    let q: Vec<f64> = (0..400).map(|i| if i < 250 { 0.0 } else { 1.0 }).collect();
    assert_eq!(indices(&change_points(&q, &cfg)), vec![250]);
}

#[test]
fn timed_api_sorts_rows_and_drops_nan() {
    let v = gaussian(9, &[(100, 0.0, 1.0), (100, 5.0, 1.0)]);
    let times: Vec<i64> = (0..200).map(|i| i * 1_000).collect();
    let mut rt: Vec<i64> = times.iter().rev().copied().collect();
    let mut rv: Vec<f64> = v.iter().rev().copied().collect();
    rt.push(50_500);
    rv.push(f64::NAN);
    let cps = ChangeDetector::new().detect_timed(&rt, &rv, &ChangeConfig::default());
    assert_eq!(cps.len(), 1);
    assert!((cps[0].time - 100_000).abs() <= 3_000, "{:?}", cps[0]);
    assert!(cps[0].ci_lo <= cps[0].time && cps[0].time <= cps[0].ci_hi);
    let o = ChangeDetector::new().onset_timed(&rt, &rv, &ChangeConfig::default()).unwrap();
    assert_eq!(o, cps[0]);
}

#[test]
fn confidence_interval_covers_the_truth_most_of_the_time() {
    let mut covered = 0;
    let trials = 200;
    for seed in 0..trials {
        let v = gaussian(1_000 + seed, &[(250, 0.0, 1.0), (250, 1.0, 1.0)]);
        if let Some(c) = change_points(&v, &ChangeConfig::default()).first()
            && c.ci.0 <= 250
            && 250 <= c.ci.1
        {
            covered += 1;
        }
    }
    assert!(covered >= trials * 88 / 100, "covered {covered} of {trials}");
}
