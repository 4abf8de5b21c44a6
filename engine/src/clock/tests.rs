//! Tests of the clock module: estimation against simulated truth, degenerate input, integer
//! math, pruning ranges, barriers and persistence.
//! One file (over 600 lines) so that every test shares the simulated-clock helpers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use super::*;
use crate::storage::{FaultyStorage, OsStorage, Storage};

use crate::model::SEC;
const EPOCH: i64 = 1_800_000_000 * SEC;

/// splitmix64: a tiny deterministic RNG for simulations.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
    fn exp(&mut self, mean_ns: f64) -> i64 {
        (-self.unit().ln() * mean_ns) as i64
    }
}

/// A simulated host clock: `local(r) = r + θ0 + drift·(r − EPOCH) + step·[r ≥ step_at]`.
#[derive(Clone, Copy)]
struct Truth {
    theta0: i64,
    drift_ppb: i64,
    step: i64,
    step_at: i64,
}

impl Truth {
    fn theta(&self, r: i64) -> i64 {
        let s = if r >= self.step_at { self.step } else { 0 };
        self.theta0 + ((i128::from(r - EPOCH) * i128::from(self.drift_ppb)) / 1_000_000_000) as i64 + s
    }
    fn local(&self, r: i64) -> i64 {
        r + self.theta(r)
    }
}

/// One exchange per `every` ns for `span` ns, forward/reverse delays 2 µs + Exp(50 µs / 5 µs);
/// exchanges straddling the step are dropped (as collectors do).
fn simulate(host: &str, truth: Truth, span: i64, every: i64, seed: u64) -> Vec<SyncExchange> {
    let mut rng = Rng(seed);
    let mut out = Vec::new();
    let mut r = EPOCH;
    while r < EPOCH + span {
        let r2 = r + 2_000 + rng.exp(50_000.0);
        let t3 = r2 + 1_000 + rng.exp(2_000.0);
        let r4 = t3 + 2_000 + rng.exp(5_000.0);
        if (r < truth.step_at) == (r4 < truth.step_at) {
            out.push(SyncExchange { host: host.into(), t1: truth.local(r), t2: r2, t3, t4: truth.local(r4) });
        }
        r += every;
    }
    out
}

/// Max |error| and whether truth was always inside the uncertainty, over reference times.
fn evaluate(model: &ClockModel, truth: Truth, from: i64, to: i64, step: i64) -> (i64, bool) {
    let (mut max_err, mut covered) = (0i64, true);
    let mut r = from;
    while r <= to {
        let local = truth.local(r);
        let err = (model.to_reference(local) - r).abs();
        max_err = max_err.max(err);
        covered &= err <= model.uncertainty_at(local);
        r += step;
    }
    (max_err, covered)
}

fn truth(theta0: i64, drift_ppb: i64) -> Truth {
    Truth { theta0, drift_ppb, step: 0, step_at: i64::MAX }
}

#[test]
fn recovers_offset_and_drift_despite_asymmetric_queueing() {
    let t = truth(1_234_567_891, 37_000);
    let ex = simulate("a", t, 3_600 * SEC, 5 * SEC, 7);
    let model = fit_host("a", &ex, &[], &FitConfig::default()).unwrap();
    assert_eq!(model.steps, 0);
    let (err, covered) = evaluate(&model, t, EPOCH, EPOCH + 3_600 * SEC, SEC);
    assert!(err < 1_000, "max error {err} ns");
    assert!(covered, "truth outside the stated uncertainty");
    // The bound is honest but not inflated: the band is ~4 µs wide (2 µs each way).
    assert!(model.max_uncertainty_ns() < 10_000, "{}", model.max_uncertainty_ns());
    let drift = model.segments[0].drift_ppb();
    assert!((drift - 37_000.0).abs() < 5.0, "drift {drift}");
}

#[test]
fn naive_midpoint_average_would_be_biased() {
    // Guards the premise of the benchmark: asymmetric queueing biases the NTP midpoint.
    let t = truth(0, 0);
    let ex = simulate("a", t, 600 * SEC, 5 * SEC, 3);
    let mean: f64 = ex.iter().map(|e| ((e.t1 - e.t2) + (e.t4 - e.t3)) as f64 / 2.0).sum::<f64>() / ex.len() as f64;
    assert!(mean < -15_000.0, "mean midpoint offset {mean}");
    let model = fit_host("a", &ex, &[], &FitConfig::default()).unwrap();
    assert!(model.offset_at(EPOCH + 300 * SEC).abs() < 1_000);
}

#[test]
fn clock_step_is_detected_and_bridged() {
    let step_at = EPOCH + 1_802 * SEC;
    for (step, seed) in [(5_000_000, 11), (-80_000_000, 12), (250_000, 13), (-7 * SEC, 14)] {
        let t = Truth { theta0: -2 * SEC, drift_ppb: -21_000, step, step_at };
        let ex = simulate("a", t, 3_600 * SEC, 5 * SEC, seed);
        let model = fit_host("a", &ex, &[], &FitConfig::default()).unwrap();
        assert_eq!(model.steps, 1, "step {step}");
        assert!(model.segments.iter().any(|s| s.kind == SegmentKind::StepBridge));
        // Away from the step window the fit is as good as without a step.
        // (A backward step makes local times ambiguous for |step| more on each side.)
        let margin = 10 * SEC + step.min(0).abs();
        let (before_err, c1) = evaluate(&model, t, EPOCH, step_at - margin, SEC);
        let (after_err, c2) = evaluate(&model, t, step_at + margin, EPOCH + 3_600 * SEC, SEC);
        assert!(before_err < 1_000 && after_err < 1_000, "step {step}: {before_err} {after_err}");
        assert!(c1 && c2, "step {step}: coverage");
        // Inside the ambiguous window the answer is honest (covered), not precise.
        let (_, c3) = evaluate(&model, t, step_at - margin, step_at + margin, 100_000_000);
        assert!(c3, "step {step}: bridge coverage");
        assert_monotonic(&model, EPOCH - 100 * SEC, EPOCH + 3_700 * SEC);
    }
}

#[test]
fn drift_wander_gives_continuous_pieces_not_steps() {
    // Drift changes by 0.1 ppm every 10 minutes (a strongly wandering oscillator): no step,
    // but one line cannot fit the hour.
    let mut rng = Rng(5);
    let mut ex = Vec::new();
    let theta = |r: i64| -> i64 {
        let s = (r - EPOCH) as f64 / 1e9;
        let k = (s / 600.0).floor();
        // ∫ drift: drift_j = 10 ppm + 0.1 ppm·j (ns/s) on [600 j, 600 (j+1)).
        let whole: f64 = (0..k as i64).map(|j| (10_000.0 + 100.0 * j as f64) * 600.0).sum();
        (400_000.0 + whole + (10_000.0 + 100.0 * k) * (s - 600.0 * k)) as i64
    };
    let mut r = EPOCH;
    while r < EPOCH + 3_600 * SEC {
        let r2 = r + 2_000 + rng.exp(50_000.0);
        let t3 = r2 + 1_000;
        let r4 = t3 + 2_000 + rng.exp(5_000.0);
        ex.push(SyncExchange { host: "w".into(), t1: r + theta(r), t2: r2, t3, t4: r4 + theta(r4) });
        r += 5 * SEC;
    }
    // The wander allowance is set to what this oscillator does.
    let cfg = FitConfig { wander_ppb: 100, ..FitConfig::default() };
    let model = fit_host("w", &ex, &[], &cfg).unwrap();
    assert!(model.segments.len() > 1);
    assert_eq!(model.steps, 0);
    // Inside a piece the model is a line; the wander allowance covers the bend.
    let (mut r, mut covered, mut total) = (EPOCH, 0, 0);
    while r < EPOCH + 3_600 * SEC {
        let local = r + theta(r);
        let err = (model.to_reference(local) - r).abs();
        let u = model.uncertainty_at(local);
        assert!(err < 10_000, "at {}: error {err}", r - EPOCH);
        assert!(err <= u + u / 10, "at {}: error {err} > {u}", r - EPOCH);
        assert!(u < 50_000, "at {}: u {u}", r - EPOCH);
        covered += usize::from(err <= u);
        total += 1;
        r += SEC;
    }
    assert!(covered * 1000 >= total * 999, "coverage {covered}/{total}");
    assert!(model.segments.iter().all(|s| s.kind == SegmentKind::Fitted));
    for w in model.segments.windows(2) {
        assert_eq!(w[0].local_end, w[1].local_start);
        assert_eq!(w[0].offset_end_ns, w[1].offset_start_ns, "continuous at knots");
    }
}

#[test]
fn degenerate_inputs_give_clear_errors() {
    let cfg = FitConfig::default();
    let err = fit_host("lonely", &[], &[], &cfg).unwrap_err();
    assert_eq!(err.kind(), crate::ErrorKind::InvalidArgument);
    assert!(err.to_string().contains("lonely") && err.to_string().contains("no clock sync data"), "{err}");

    let ok = SyncExchange { host: "h".into(), t1: EPOCH, t2: EPOCH + 10, t3: EPOCH + 20, t4: EPOCH + 40 };
    let swapped = SyncExchange { t4: EPOCH - 1, ..ok.clone() };
    let err = fit_host("h", &[ok.clone(), swapped.clone()], &[], &cfg).unwrap_err();
    assert!(err.to_string().contains("t4 < t1"), "{err}");
    let negative = SyncExchange { t4: EPOCH + 5, ..ok.clone() };
    assert!(fit_host("h", &[negative], &[], &cfg).unwrap_err().to_string().contains("negative network delay"));
    let reply_first = SyncExchange { t3: EPOCH + 5, ..ok.clone() };
    assert!(fit_host("h", &[reply_first], &[], &cfg).unwrap_err().to_string().contains("t3 precedes"));
    let out_of_range = SyncExchange { t1: -5, ..ok.clone() };
    assert!(fit_host("h", &[out_of_range], &[], &cfg).unwrap_err().to_string().contains("t1=-5"));
    let other = SyncExchange { host: "x".into(), ..ok.clone() };
    assert!(fit_host("h", &[other], &[], &cfg).is_err());
    let bad_direct = OffsetObservation { host: "h".into(), local_time: EPOCH, offset_ns: 0, uncertainty_ns: -1 };
    assert!(fit_host("h", &[], &[bad_direct], &cfg).is_err());
    // An offset that puts the reference time before 1970 (285 years: QA pass 19) is refused;
    // one of an hour is not.
    let far = OffsetObservation {
        host: "h".into(),
        local_time: EPOCH,
        offset_ns: 9_000_000_000_000_000_000,
        uncertainty_ns: 5,
    };
    let err = far.validate().unwrap_err().to_string();
    assert!(err.contains("puts the reference time outside") && err.contains("1970-2262"), "{err}");
    assert!(OffsetObservation { offset_ns: 3_600_000_000_000, ..far }.validate().is_ok());
    let bad_cfg = FitConfig { max_drift_ppb: 0, ..FitConfig::default() };
    let err = fit_host("h", &[ok], &[], &bad_cfg).unwrap_err();
    assert!(err.to_string().contains("max_drift_ppb"), "{err}");
    assert_eq!(err.kind(), crate::ErrorKind::InvalidConfig, "a bad setting is not the caller's input");
}

#[test]
fn single_exchange_gives_constant_offset_with_growing_uncertainty() {
    // θ = 1000 ns exactly; forward delay 3 µs, reverse 1 µs.
    let e =
        SyncExchange { host: "h".into(), t1: EPOCH, t2: EPOCH - 1_000 + 3_000, t3: EPOCH + 2_500, t4: EPOCH + 4_500 };
    let model = fit_host("h", std::slice::from_ref(&e), &[], &FitConfig::default()).unwrap();
    assert_eq!(model.segments.len(), 1);
    // Midpoint estimate: band [θ−3µs, θ+1µs] → 1000 − 1000; the bound covers the truth.
    let at = EPOCH + 2_000;
    let (t, u) = (model.to_reference(at), model.uncertainty_at(at));
    assert!((t - (at - 1_000)).abs() <= u, "{t} {u}");
    assert!(u <= 2_100, "u {u}");
    // A minute later the drift allowance (500 ppm) dominates.
    let later = model.uncertainty_at(EPOCH + 60 * SEC);
    assert!(later > 29_000_000 && later < 32_000_000, "{later}");
    // Duplicates change nothing.
    let twice = fit_host("h", &[e.clone(), e.clone(), e], &[], &FitConfig::default()).unwrap();
    assert_eq!(twice.segments, model.segments);
}

#[test]
fn duplicate_exchanges_are_counted_once() {
    let t = truth(SEC, 10_000);
    let ex = simulate("a", t, 600 * SEC, 5 * SEC, 1);
    let mut doubled = ex.clone();
    doubled.extend(ex.iter().cloned());
    let a = fit_host("a", &ex, &[], &FitConfig::default()).unwrap();
    let b = fit_host("a", &doubled, &[], &FitConfig::default()).unwrap();
    assert_eq!(a, b);
}

#[test]
fn reference_host_is_identity() {
    let cfg = FitConfig { reference_host: Some("ref".into()), ..FitConfig::default() };
    let ex = simulate("ref", truth(SEC, 0), 60 * SEC, 5 * SEC, 1);
    let model = fit_host("ref", &ex, &[], &cfg).unwrap();
    assert_eq!(model, ClockModel::identity("ref"));
    let set = fit_set(&ex, &[], &[], &cfg).unwrap();
    assert_eq!(set.correct("ref", EPOCH), (EPOCH, 0));
    assert_eq!(set.correct("nobody", 42), (42, UNCERTAINTY_UNKNOWN));
}

#[test]
fn integer_math_at_epoch_scale_and_extremes() {
    let seg = ClockSegment {
        kind: SegmentKind::Fitted,
        local_start: EPOCH,
        local_end: EPOCH + 3_600 * SEC,
        offset_start_ns: 5 * SEC,
        offset_end_ns: 5 * SEC + 180_000_000, // 50 ppm
        uncertainty_start_ns: 100,
        uncertainty_end_ns: 300,
        growth_ppb: 2_000,
        samples_used: 1,
    };
    let model = ClockModel { host: "h".into(), segments: vec![seg], steps: 0, outliers: 0 };
    // Exact: 50 ppm of 1 800 s = 90 ms.
    assert_eq!(model.to_reference(EPOCH + 1_800 * SEC), EPOCH + 1_800 * SEC - 5 * SEC - 90_000_000);
    assert_eq!(model.uncertainty_at(EPOCH + 1_800 * SEC), 200);
    // 1 ns resolution: 50 ppm of 20 µs is exactly 1 ns.
    assert_eq!(model.offset_at(EPOCH + 20_000) - model.offset_at(EPOCH), 1);
    for x in [i64::MIN, i64::MIN + 1, -1, 0, i64::MAX - 1, i64::MAX] {
        let _ = model.to_reference(x);
        assert!(model.uncertainty_at(x) >= 100);
    }
    assert_eq!(model.uncertainty_at(EPOCH + 3_600 * SEC + SEC), 300 + 2_000);
    assert!(before(EPOCH, 10, EPOCH + 21, 10));
    assert!(!before(EPOCH, 10, EPOCH + 20, 10));
    assert!(!before(i64::MAX, 0, i64::MIN, 0));
    assert!(before(i64::MIN, 0, i64::MAX, 0));
    assert!(!before(0, UNCERTAINTY_UNKNOWN, i64::MAX, 0));
}

fn assert_monotonic(model: &ClockModel, from: i64, to: i64) {
    let mut rng = Rng(99);
    let mut xs: Vec<i64> = (0..20_000).map(|_| from + (rng.next_u64() % (to - from) as u64) as i64).collect();
    for s in &model.segments {
        xs.extend([s.local_start - 1, s.local_start, s.local_start + 1, s.local_end - 1, s.local_end, s.local_end + 1]);
    }
    xs.sort_unstable();
    for w in xs.windows(2) {
        assert!(model.to_reference(w[0]) <= model.to_reference(w[1]), "not monotonic at {} {}", w[0], w[1]);
    }
}

#[test]
fn to_reference_is_monotonic_and_ranges_are_exact() {
    let t = Truth { theta0: 3 * SEC, drift_ppb: 45_000, step: -40_000_000, step_at: EPOCH + 900 * SEC };
    let model = fit_host("a", &simulate("a", t, 1_800 * SEC, 5 * SEC, 21), &[], &FitConfig::default()).unwrap();
    assert_monotonic(&model, EPOCH - 10 * SEC, EPOCH + 1_900 * SEC);
    let mut rng = Rng(4);
    for _ in 0..200 {
        let lo = EPOCH + (rng.next_u64() % (1_800 * SEC as u64)) as i64;
        let hi = lo + (rng.next_u64() % (100 * SEC as u64)) as i64;
        let (llo, lhi) = model.local_range_for_reference(lo, hi);
        assert!(llo <= lhi);
        assert!(model.to_reference(llo) >= lo && model.to_reference(llo - 1) < lo);
        assert!(model.to_reference(lhi) <= hi && model.to_reference(lhi + 1) > hi);
    }
    let (a, b) = model.local_range_for_reference(10, 5);
    assert!(a > b);
    let identity = ClockModel::identity("r");
    assert_eq!(identity.local_range_for_reference(EPOCH, EPOCH + 7), (EPOCH, EPOCH + 7));
}

#[test]
fn direct_offsets_alone_make_a_model() {
    let obs: Vec<OffsetObservation> = (0..100)
        .map(|i| OffsetObservation {
            host: "p".into(),
            local_time: EPOCH + i * 10 * SEC,
            offset_ns: 2_000 + i * 10 * 20, // 20 ppb
            uncertainty_ns: 50,
        })
        .collect();
    let model = fit_host("p", &[], &obs, &FitConfig::default()).unwrap();
    let x = EPOCH + 505 * SEC;
    assert!((model.offset_at(x) - (2_000 + 505 * 20)).abs() <= 50);
    // ±50 ns observations plus the drift-wander allowance over a ~16 min piece (~2.5 µs).
    assert!(model.uncertainty_at(x) <= 3_000, "{}", model.uncertainty_at(x));
}

#[test]
fn barriers_tighten_a_poorly_synced_host_and_place_an_unsynced_one() {
    let cfg = FitConfig { reference_host: Some("ref".into()), barrier_exit_spread_ns: 20_000, ..FitConfig::default() };
    // Host a: offset known to ±2 ms only (e.g. a coarse NTP log), truly 1 ms, drift 0.
    let offsets: Vec<OffsetObservation> = (0..=6)
        .map(|i| OffsetObservation {
            host: "a".into(),
            local_time: EPOCH + i * 600 * SEC + 1_000_000,
            offset_ns: 0,
            uncertainty_ns: 2_000_000,
        })
        .collect();
    // Collectives every 10 s: ref, a (θ = +1 ms) and b (no sync data, θ = −3 s) exit within 15 µs.
    let mut rng = Rng(8);
    let mut barriers = Vec::new();
    for n in 0..360u64 {
        let t = EPOCH + 5 * SEC + n as i64 * 10 * SEC;
        for (host, theta) in [("ref", 0), ("a", 1_000_000), ("b", -3 * SEC)] {
            let jitter = (rng.next_u64() % 15_000) as i64;
            barriers.push(BarrierEvent { host: host.into(), instance: n, local_end: t + jitter + theta });
        }
    }
    let coarse = fit_set(&[], &offsets, &[], &cfg).unwrap();
    assert!(coarse.correct("a", EPOCH + 1_800 * SEC).1 >= 2_000_000);
    let set = fit_set(&[], &offsets, &barriers, &cfg).unwrap();
    for (host, theta) in [("a", 1_000_000i64), ("b", -3 * SEC)] {
        let local = EPOCH + 1_800 * SEC + theta;
        let (t, u) = set.correct(host, local);
        assert!(u < 40_000, "{host}: u {u}");
        assert!((t - (EPOCH + 1_800 * SEC)).abs() <= u, "{host}: error {} > {u}", t - (EPOCH + 1_800 * SEC));
    }
    // A conflicting end time for the same instance is an error.
    let mut bad = barriers.clone();
    bad.push(BarrierEvent { host: "a".into(), instance: 0, local_end: 1 });
    assert!(fit_set(&[], &offsets, &bad, &cfg).unwrap_err().to_string().contains("two end times"));
}

fn temp_storage() -> (tempfile::TempDir, Arc<dyn Storage>) {
    (tempfile::tempdir().unwrap(), Arc::new(OsStorage))
}

#[test]
fn registry_persists_input_and_versions() {
    let (dir, storage) = temp_storage();
    let t = truth(SEC, 20_000);
    let ex = simulate("a", t, 1_200 * SEC, 5 * SEC, 2);
    {
        let mut reg = ClockRegistry::open(storage.clone(), dir.path(), FitConfig::default()).unwrap();
        assert_eq!(reg.current().version(), 0);
        assert_eq!(reg.current().correct("a", 5), (5, UNCERTAINTY_UNKNOWN));
        reg.add_exchanges(&ex[..100]).unwrap();
        assert_eq!(reg.refit().unwrap(), 1);
        assert_eq!(reg.refit().unwrap(), 1, "no new input, no new version");
        reg.add_exchanges(&ex[100..]).unwrap();
        reg.add_barriers(&[BarrierEvent { host: "a".into(), instance: 1, local_end: EPOCH }]).unwrap();
        reg.add_barriers(&[BarrierEvent { host: "a".into(), instance: 1, local_end: EPOCH }]).unwrap();
        // A later end of the same (host, instance) is skipped (the earliest exit counts) ...
        reg.add_barriers(&[BarrierEvent { host: "a".into(), instance: 1, local_end: EPOCH + 1 }]).unwrap();
        assert_eq!(reg.input_counts().unwrap().barriers, 1);
        // ... an earlier one (another rank of the host, imported later) supersedes it, and a
        // batch keeps only its own earliest end per key.
        let earlier = |d| BarrierEvent { host: "a".into(), instance: 1, local_end: EPOCH - d };
        reg.add_barriers(&[earlier(5), earlier(10), earlier(7)]).unwrap();
        assert_eq!(reg.input_counts().unwrap().barriers, 2, "one new record, counted so a refit follows");
        let offset =
            OffsetObservation { host: "a".into(), local_time: EPOCH + SEC, offset_ns: SEC, uncertainty_ns: 1_000_000 };
        reg.add_offsets(&[offset.clone(), offset.clone()]).unwrap();
        reg.add_offsets(std::slice::from_ref(&offset)).unwrap();
        assert_eq!(reg.input_counts().unwrap().offsets, 1, "repeated offsets are stored once");
        assert!(reg.add_exchanges(&[SyncExchange { t4: 0, ..ex[0].clone() }]).is_err());
        assert_eq!(reg.refit().unwrap(), 2);
        assert_eq!(reg.input_counts().unwrap(), InputWatermark { exchanges: ex.len() as u64, offsets: 1, barriers: 2 });
        assert_eq!(reg.barriers().unwrap(), &[earlier(10)]);
    }
    let mut reg = ClockRegistry::open(storage, dir.path(), FitConfig::default()).unwrap();
    assert_eq!(reg.versions(), vec![1, 2]);
    assert_eq!(reg.barriers().unwrap().len(), 1, "replay keeps the earliest end per key");
    assert_eq!(reg.barriers().unwrap()[0].local_end, EPOCH - 10);
    let v1 = reg.get(1).unwrap();
    let v2 = reg.current();
    assert_eq!(v1.inputs().exchanges, 100);
    assert_eq!(v2.version(), 2);
    // Version 1 saw only the first 100 exchanges: it extrapolates with a wider bound later on.
    let late = t.local(EPOCH + 1_100 * SEC);
    assert!(v1.correct("a", late).1 > v2.correct("a", late).1);
    assert_eq!(reg.refit().unwrap(), 2, "reopened registry needs no refit");
    reg.set_config(FitConfig { step_confirm: 4, ..FitConfig::default() }).unwrap();
    assert_eq!(reg.refit().unwrap(), 3, "a new config is a new version");
    assert!(reg.get(7).is_none());
    assert_eq!(reg.get(0).unwrap().version(), 0);
}

#[test]
fn registry_truncates_a_torn_tail_and_rejects_mid_file_corruption() {
    let (dir, storage) = temp_storage();
    let ex = simulate("a", truth(0, 0), 100 * SEC, 5 * SEC, 2);
    {
        let mut reg = ClockRegistry::open(storage.clone(), dir.path(), FitConfig::default()).unwrap();
        reg.add_exchanges(&ex).unwrap();
    }
    let log = dir.path().join("exchanges.log");
    let mut bytes = std::fs::read(&log).unwrap();
    let full = bytes.len();
    bytes.extend_from_slice(b"0badc0de [{\"host\":\"a\",\"t1\":");
    std::fs::write(&log, &bytes).unwrap();
    {
        let mut reg = ClockRegistry::open(storage.clone(), dir.path(), FitConfig::default()).unwrap();
        assert_eq!(reg.input_counts().unwrap().exchanges, ex.len() as u64);
        assert_eq!(std::fs::metadata(&log).unwrap().len() as usize, full);
        reg.add_exchanges(&ex[..1]).unwrap();
        assert_eq!(reg.input_counts().unwrap().exchanges, ex.len() as u64, "an exact repeat is skipped");
        let other = SyncExchange { host: "b".into(), ..ex[0].clone() };
        reg.add_exchanges(&[other.clone(), other]).unwrap();
        assert_eq!(reg.input_counts().unwrap().exchanges, ex.len() as u64 + 1, "a repeat within one call too");
        assert_eq!(reg.refit().unwrap(), 1);
    }
    let mut bytes = std::fs::read(&log).unwrap();
    bytes[10] ^= 0x55; // inside the first record
    std::fs::write(&log, &bytes).unwrap();
    // The fitted versions stay readable without the logs; the first use of the raw input fails.
    let mut reg = ClockRegistry::open(storage, dir.path(), FitConfig::default()).unwrap();
    assert_eq!(reg.current().version(), 1, "open reads the versions, not the raw logs");
    let err = reg.input_counts().unwrap_err();
    assert_eq!(err.kind(), crate::ErrorKind::DataCorruption, "{err}");
    assert!(reg.add_exchanges(&ex[..1]).is_err(), "no append after a corrupt log");
    assert!(reg.refit().is_err());
}

/// A fitted version is sealed JSON (`crate::seal`): a changed digit of a model, which still
/// parses, makes the registry refuse to open instead of correcting clocks by another model.
#[test]
fn a_changed_model_on_disk_is_corruption() {
    let (dir, storage) = temp_storage();
    let ex = simulate("a", truth(0, 0), 100 * SEC, 5 * SEC, 2);
    {
        let mut reg = ClockRegistry::open(storage.clone(), dir.path(), FitConfig::default()).unwrap();
        reg.add_exchanges(&ex).unwrap();
        assert_eq!(reg.refit().unwrap(), 1);
    }
    let versions: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_dir())
        .flat_map(|d| std::fs::read_dir(d.path()).unwrap().flatten().map(|e| e.path()))
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with('v') && n.ends_with(".json")))
        .collect();
    assert_eq!(versions.len(), 1, "{versions:?}");
    let text = std::fs::read_to_string(&versions[0]).unwrap();
    assert!(text.ends_with("\"}") && text.contains(",\"crc32\":\""), "{text}");
    // Change one digit of the file (the first one after the version field).
    let at = text.find(|c: char| c.is_ascii_digit()).unwrap();
    let digit = text.as_bytes()[at];
    let mut changed = text.clone().into_bytes();
    changed[at] = if digit == b'9' { b'8' } else { digit + 1 };
    std::fs::write(&versions[0], &changed).unwrap();
    let err = ClockRegistry::open(storage.clone(), dir.path(), FitConfig::default()).unwrap_err();
    assert!(err.to_string().contains("checksum mismatch"), "{err}");
    std::fs::write(&versions[0], &text).unwrap();
    assert_eq!(ClockRegistry::open(storage, dir.path(), FitConfig::default()).unwrap().current().version(), 1);
}

#[test]
fn failed_append_is_not_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let inner: Arc<dyn Storage> = Arc::new(OsStorage);
    let ex = simulate("a", truth(0, 0), 100 * SEC, 5 * SEC, 2);
    let faulty = Arc::new(FaultyStorage::new(inner.clone(), 600));
    {
        let mut reg = ClockRegistry::open(faulty.clone(), dir.path(), FitConfig::default()).unwrap();
        reg.add_exchanges(&ex[..1]).unwrap();
        assert!(reg.add_exchanges(&ex[1..]).is_err());
        assert_eq!(reg.input_counts().unwrap().exchanges, 1);
    }
    let mut reg = ClockRegistry::open(inner, dir.path(), FitConfig::default()).unwrap();
    assert_eq!(reg.input_counts().unwrap().exchanges, 1);
}

#[test]
fn host_names_are_bounded_like_label_values() {
    let exchange = |host: String| SyncExchange { host, t1: EPOCH, t2: EPOCH + 10, t3: EPOCH + 20, t4: EPOCH + 30 };
    assert!(exchange("node-1".into()).validate().is_ok());
    for host in ["h".repeat(1 << 20), "node\0one".to_string()] {
        let err = exchange(host).validate().unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::InvalidArgument);
        let text = err.to_string();
        assert!(text.contains("without NUL") && text.len() < 300, "{}", &text[..text.len().min(300)]);
    }
}
