//! Cross-checks against Python peers, through SQL:
//! - `lag_corr` against `scipy.signal.correlate` + `correlation_lags` on the same normalised
//!   data (lag exact, coefficient to 1e-9), on the direct, FFT and gap paths;
//! - `change_points` / `onset` against `ruptures` (PELT, "rank" and "normal" costs) on generated
//!   series with known truth: mean steps, variance steps, a ramp, heavy-tailed noise (with and
//!   without a step) and missing samples.
//!
//! Needs `python3` with `numpy`, `scipy` and `ruptures` (`pip install numpy scipy ruptures`);
//! fails with that message if they are missing.

#![allow(clippy::unwrap_used)]

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use arrow::array::{Array, AsArray, Float64Array, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Float64Type, Int64Type, Schema};
use datafusion::datasource::MemTable;
use datafusion::prelude::SessionContext;
use lockstep_engine::analysis::rng::SplitMix64;

const PEERS: &str = r#"
import sys
import numpy as np
from scipy.signal import correlate, correlation_lags
import ruptures as rpt

def lag(xf, yf, max_lag):
    x = np.loadtxt(xf); y = np.loadtxt(yf)
    ok = np.isfinite(x) & np.isfinite(y)
    n = ok.sum()
    zx = np.where(ok, (x - x[ok].mean()) / x[ok].std(), 0.0)
    zy = np.where(ok, (y - y[ok].mean()) / y[ok].std(), 0.0)
    c = correlate(zy, zx, mode="full") / n
    lags = correlation_lags(len(zy), len(zx), mode="full")
    w = np.abs(lags) <= max_lag
    i = np.argmax(np.abs(c[w]))
    return "%d %.17g" % (lags[w][i], c[w][i])

def cps(f):
    v = np.loadtxt(f).reshape(-1, 1)
    n = len(v)
    out = []
    # BIC-like penalties, (parameters per segment + 1) x ln n with the same 1.17 margin as
    # Lockstep's 3.5 ln n: rank (location only) 2.33 ln n, normal (mean and variance) 3.5 ln n.
    for model, k in (("rank", 2.33), ("normal", 3.5)):
        bk = rpt.Pelt(model=model, min_size=5, jump=5).fit(v).predict(pen=k * np.log(n))
        out.append(model + ":" + ",".join(str(b) for b in bk[:-1]))
    return " ".join(out)

for line in open(sys.argv[1]):
    p = line.split()
    if p[0] == "lag":
        print(p[1], lag(p[2], p[3], int(p[4])), flush=True)
    elif p[0] == "cp":
        print(p[1], cps(p[2]), flush=True)
"#;

/// Runs the peer script on a manifest; panics with install instructions if peers are missing.
fn run_peers(dir: &Path, manifest: &str) -> Vec<String> {
    let check = Command::new("python3").args(["-c", "import numpy, scipy, ruptures"]).output();
    match check {
        Ok(o) if o.status.success() => {}
        _ => panic!(
            "crosscheck_scipy needs python3 with numpy, scipy and ruptures: \
             pip install numpy scipy ruptures"
        ),
    }
    let script = dir.join("peers.py");
    std::fs::write(&script, PEERS).unwrap();
    let list = dir.join("manifest.txt");
    std::fs::write(&list, manifest).unwrap();
    let out = Command::new("python3").arg(&script).arg(&list).output().unwrap();
    assert!(out.status.success(), "peer script failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().lines().map(str::to_string).collect()
}

fn write_series(path: &Path, v: &[f64]) {
    let mut s = String::with_capacity(v.len() * 24);
    for x in v {
        if x.is_finite() {
            writeln!(s, "{x:?}").unwrap();
        } else {
            s.push_str("nan\n");
        }
    }
    std::fs::write(path, s).unwrap();
}

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
    /// Student-t with 1.5 degrees of freedom (infinite variance).
    fn student(&mut self) -> f64 {
        let z = self.normal();
        // Chi-square with 1.5 dof via a Gamma(0.75, 2) draw (Marsaglia–Tsang with boost).
        let a: f64 = 0.75;
        let d = a + 1.0 - 1.0 / 3.0;
        let c = 1.0 / (9.0 * d).sqrt();
        let g = loop {
            let x = self.normal();
            let v = (1.0 + c * x).powi(3);
            let u = self.0.next_f64();
            if v > 0.0 && u.max(1e-300).ln() < 0.5 * x * x + d - d * v + d * v.ln() {
                break d * v * self.0.next_f64().max(1e-300).powf(1.0 / a);
            }
        };
        z / (2.0 * g / 1.5).sqrt()
    }
    /// Latency-like: lognormal body with Pareto(1.5) spikes on 3 % of samples.
    fn latency(&mut self, median: f64) -> f64 {
        let body = median * (0.2 * self.normal()).exp();
        if self.0.next_f64() < 0.03 { body * 5.0 * (1.0 - self.0.next_f64()).powf(-1.0 / 1.5) } else { body }
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

async fn context(batch: RecordBatch) -> SessionContext {
    let ctx = SessionContext::new();
    lockstep_query::functions::register_all(&ctx);
    let table = MemTable::try_new(batch.schema(), vec![vec![batch]]).unwrap();
    ctx.register_table("t", Arc::new(table)).unwrap();
    ctx
}

/// One lag-correlation case: `y(t) = sign · x(t − lag) + noise` on a 1 s grid.
struct LagCase {
    name: &'static str,
    len: usize,
    lag: i64,
    sign: f64,
    max_lag: usize,
    ar: f64,
    drop_every: usize,
}

#[test]
fn lag_corr_matches_scipy() {
    let cases = [
        LagCase { name: "fft_circular", len: 20_000, lag: 17, sign: 1.0, max_lag: 60, ar: 0.6, drop_every: 0 },
        LagCase { name: "fft_phase", len: 5_000, lag: -40, sign: 1.0, max_lag: 1_250, ar: 0.3, drop_every: 0 },
        LagCase { name: "direct", len: 40, lag: 3, sign: 1.0, max_lag: 8, ar: 0.0, drop_every: 0 },
        LagCase { name: "anti", len: 3_000, lag: 5, sign: -1.0, max_lag: 30, ar: 0.9, drop_every: 0 },
        LagCase { name: "gaps", len: 4_000, lag: -9, sign: 1.0, max_lag: 50, ar: 0.5, drop_every: 13 },
        LagCase { name: "noise_only", len: 2_000, lag: 0, sign: 0.0, max_lag: 100, ar: 0.7, drop_every: 0 },
    ];
    let dir = tempfile::tempdir().unwrap();
    let mut manifest = String::new();
    let mut ours = Vec::new();
    let rt = runtime();
    for (ci, c) in cases.iter().enumerate() {
        let mut g = Gen::new(40 + ci as u64);
        let mut x = Vec::with_capacity(c.len);
        let mut prev = 0.0;
        for _ in 0..c.len {
            prev = c.ar * prev + g.normal();
            x.push(prev);
        }
        let y: Vec<f64> = (0..c.len as i64)
            .map(|i| {
                let j = i - c.lag;
                let base = if j >= 0 && (j as usize) < c.len { x[j as usize] } else { 0.0 };
                c.sign * base + 0.7 * g.normal()
            })
            .collect();
        let keep: Vec<bool> = (0..c.len).map(|i| c.drop_every == 0 || i % c.drop_every != 5).collect();
        let times: Vec<i64> = (0..c.len as i64).filter(|i| keep[*i as usize]).map(|i| i * 1_000_000_000).collect();
        let xs: Vec<f64> = x.iter().zip(&keep).filter(|(_, k)| **k).map(|(v, _)| *v).collect();
        let ys: Vec<f64> = y.iter().zip(&keep).filter(|(_, k)| **k).map(|(v, _)| *v).collect();
        // The peer sees the full grid with NaN at the missing slots.
        let gx: Vec<f64> = x.iter().zip(&keep).map(|(v, k)| if *k { *v } else { f64::NAN }).collect();
        let gy: Vec<f64> = y.iter().zip(&keep).map(|(v, k)| if *k { *v } else { f64::NAN }).collect();
        let (xf, yf) = (dir.path().join(format!("{}_x.txt", c.name)), dir.path().join(format!("{}_y.txt", c.name)));
        write_series(&xf, &gx);
        write_series(&yf, &gy);
        writeln!(manifest, "lag {} {} {} {}", c.name, xf.display(), yf.display(), c.max_lag).unwrap();

        let schema = Arc::new(Schema::new(vec![
            Field::new("t", DataType::Int64, false),
            Field::new("x", DataType::Float64, false),
            Field::new("y", DataType::Float64, false),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![Arc::new(Int64Array::from(times)), Arc::new(Float64Array::from(xs)), Arc::new(Float64Array::from(ys))],
        )
        .unwrap();
        let sql = format!(
            "SELECT r['lag_ns'], r['coef'], r['p_value'], r['n'] FROM (SELECT lag_corr(t, x, y, {}) AS r FROM t)",
            c.max_lag as i64 * 1_000_000_000
        );
        let row = rt.block_on(async {
            let ctx = context(batch).await;
            ctx.sql(&sql).await.unwrap().collect().await.unwrap()
        });
        let b = &row[0];
        let lag_ns = b.column(0).as_primitive::<Int64Type>().value(0);
        let coef = b.column(1).as_primitive::<Float64Type>().value(0);
        let p = b.column(2).as_primitive::<Float64Type>();
        let p = if p.is_null(0) { None } else { Some(p.value(0)) };
        let n = b.column(3).as_primitive::<Int64Type>().value(0);
        assert_eq!(n as usize, keep.iter().filter(|k| **k).count(), "{}", c.name);
        ours.push((lag_ns, coef, p));
    }
    let peers = run_peers(dir.path(), &manifest);
    assert_eq!(peers.len(), cases.len(), "{peers:?}");
    for ((c, line), (lag_ns, coef, p)) in cases.iter().zip(&peers).zip(&ours) {
        let parts: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(parts[0], c.name);
        let scipy_lag: i64 = parts[1].parse().unwrap();
        let scipy_coef: f64 = parts[2].parse().unwrap();
        println!(
            "{:<12} lockstep lag {:>4} coef {coef:+.12} p {p:?} | scipy lag {scipy_lag:>4} coef {scipy_coef:+.12}",
            c.name,
            lag_ns / 1_000_000_000
        );
        assert_eq!(*lag_ns, scipy_lag * 1_000_000_000, "{}: lag differs from scipy", c.name);
        assert!((coef - scipy_coef).abs() < 1e-9, "{}: coef {coef} vs scipy {scipy_coef}", c.name);
        if c.sign != 0.0 {
            assert_eq!(*lag_ns, c.lag * 1_000_000_000, "{}: true lag missed", c.name);
            assert!(p.is_some_and(|p| p <= 0.01), "{}: p {p:?}", c.name);
        } else {
            assert!(p.is_some_and(|p| p > 0.01), "{}: noise called significant, p {p:?}", c.name);
        }
    }
}

/// A change-point scenario with its true change indices.
struct CpCase {
    name: &'static str,
    values: Vec<f64>,
    truth: Vec<usize>,
    /// Indices of samples that are missing (not sent to either side).
    missing_every: usize,
    heavy: bool,
}

fn cp_cases() -> Vec<CpCase> {
    let mut g = Gen::new(7);
    let seg = |parts: &[(usize, f64, f64)], g: &mut Gen| -> Vec<f64> {
        parts.iter().flat_map(|&(len, m, s)| (0..len).map(|_| m + s * g.normal()).collect::<Vec<_>>()).collect()
    };
    let mean_steps = seg(&[(300, 0.0, 1.0), (350, 2.0, 1.0), (350, 0.5, 1.0)], &mut g);
    let variance = seg(&[(500, 0.0, 1.0), (500, 0.0, 3.0)], &mut g);
    let mut ramp = seg(&[(400, 0.0, 1.0)], &mut g);
    ramp.extend((0..200).map(|i| 4.0 * f64::from(i) / 200.0 + g.normal()));
    ramp.extend(seg(&[(400, 4.0, 1.0)], &mut g));
    let student: Vec<f64> = (0..1_000).map(|_| g.student()).collect();
    let latency_null: Vec<f64> = (0..1_000).map(|_| g.latency(20.0)).collect();
    let latency_step: Vec<f64> = (0..1_000).map(|i| g.latency(if i < 600 { 20.0 } else { 28.0 })).collect();
    let student_step: Vec<f64> = (0..1_000).map(|i| g.student() + if i < 450 { 0.0 } else { 3.0 }).collect();
    let missing = seg(&[(500, 0.0, 1.0), (500, 1.5, 1.0)], &mut g);
    vec![
        CpCase { name: "mean_steps", values: mean_steps, truth: vec![300, 650], missing_every: 0, heavy: false },
        CpCase { name: "variance", values: variance, truth: vec![500], missing_every: 0, heavy: false },
        CpCase { name: "ramp", values: ramp, truth: vec![400, 600], missing_every: 0, heavy: false },
        CpCase { name: "student_null", values: student, truth: vec![], missing_every: 0, heavy: true },
        CpCase { name: "latency_null", values: latency_null, truth: vec![], missing_every: 0, heavy: true },
        CpCase { name: "latency_step", values: latency_step, truth: vec![600], missing_every: 0, heavy: true },
        CpCase { name: "student_step", values: student_step, truth: vec![450], missing_every: 0, heavy: true },
        CpCase { name: "missing", values: missing, truth: vec![500], missing_every: 7, heavy: false },
    ]
}

/// (true changes found within `tol`, false changes). For the ramp, any change inside the ramp
/// (± tol) counts as true and a hit on either end counts for that end.
fn score(found: &[usize], truth: &[usize], tol: usize, ramp: bool) -> (usize, usize) {
    if ramp {
        let inside = |c: &usize| *c + tol >= truth[0] && *c <= truth[1] + tol;
        let hits = usize::from(found.iter().any(inside));
        return (hits, found.iter().filter(|c| !inside(c)).count());
    }
    let hits = truth.iter().filter(|t| found.iter().any(|c| c.abs_diff(**t) <= tol)).count();
    let false_alarms = found.iter().filter(|c| !truth.iter().any(|t| c.abs_diff(*t) <= tol)).count();
    (hits, false_alarms)
}

#[test]
fn change_points_match_or_beat_ruptures() {
    const TOL: usize = 15;
    let cases = cp_cases();
    let dir = tempfile::tempdir().unwrap();
    let mut manifest = String::new();
    let rt = runtime();
    let mut ours = Vec::new();
    let mut onsets = Vec::new();
    for c in &cases {
        let keep: Vec<usize> =
            (0..c.values.len()).filter(|i| c.missing_every == 0 || i % c.missing_every != 3).collect();
        let times: Vec<i64> = keep.iter().map(|&i| i as i64 * 1_000_000_000).collect();
        let vals: Vec<f64> = keep.iter().map(|&i| c.values[i]).collect();
        let f = dir.path().join(format!("{}.txt", c.name));
        write_series(&f, &vals);
        writeln!(manifest, "cp {} {}", c.name, f.display()).unwrap();
        let schema = Arc::new(Schema::new(vec![
            Field::new("t", DataType::Int64, false),
            Field::new("v", DataType::Float64, false),
        ]));
        let batch =
            RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(times)), Arc::new(Float64Array::from(vals))])
                .unwrap();
        let (cps, onset) = rt.block_on(async {
            let ctx = context(batch).await;
            let cps = ctx
                .sql("SELECT c['time'] FROM (SELECT unnest(change_points(t, v)) AS c FROM t)")
                .await
                .unwrap()
                .collect()
                .await
                .unwrap();
            let onset = ctx.sql("SELECT onset(t, v)['time'] FROM t").await.unwrap().collect().await.unwrap();
            (cps, onset)
        });
        // Our results come back as times; map them to original sample indices.
        let mut found = Vec::new();
        for b in &cps {
            let col = b.column(0).as_primitive::<Int64Type>();
            found.extend(col.values().iter().map(|t| (*t / 1_000_000_000) as usize));
        }
        let o = onset[0].column(0).as_primitive::<Int64Type>();
        onsets.push(if o.is_null(0) { None } else { Some((o.value(0) / 1_000_000_000) as usize) });
        ours.push((found, keep));
    }
    let peers = run_peers(dir.path(), &manifest);
    assert_eq!(peers.len(), cases.len(), "{peers:?}");
    let mut report = String::from(
        "scenario      | truth      | lockstep (hits/false)      | ruptures rank            | ruptures normal\n",
    );
    for ((c, line), ((found, keep), onset)) in cases.iter().zip(&peers).zip(ours.iter().zip(&onsets)) {
        let mut parts = line.split_whitespace();
        assert_eq!(parts.next(), Some(c.name));
        let mut theirs = Vec::new();
        for p in parts {
            let (model, list) = p.split_once(':').unwrap();
            // ruptures reports positions among the samples it saw; map back to indices.
            let idx: Vec<usize> =
                list.split(',').filter(|s| !s.is_empty()).map(|s| keep[s.parse::<usize>().unwrap()]).collect();
            theirs.push((model.to_string(), idx));
        }
        let ramp = c.name == "ramp";
        let mine = score(found, &c.truth, TOL, ramp);
        let rank = score(&theirs[0].1, &c.truth, TOL, ramp);
        let normal = score(&theirs[1].1, &c.truth, TOL, ramp);
        // Padding applies to the whole Debug text only through an inner `format!`.
        #[allow(clippy::format_in_format_args)]
        writeln!(
            report,
            "{:<13} | {:<10} | {:<26} | {:<24} | {}",
            c.name,
            format!("{:?}", c.truth),
            format!("{found:?} {mine:?}"),
            format!("{:?} {rank:?}", theirs[0].1),
            format!("{:?} {normal:?}", theirs[1].1)
        )
        .unwrap();
        let want = if ramp { 1 } else { c.truth.len() };
        // Lockstep finds every true change with no false alarm, in every scenario.
        assert_eq!(mine, (want, 0), "{}: lockstep {found:?}", c.name);
        if c.heavy {
            // Heavy tails: Lockstep beats or matches both ruptures configurations.
            for (model, s) in [("rank", rank), ("normal", normal)] {
                assert!(
                    mine.0 >= s.0 && mine.1 <= s.1,
                    "{}: lockstep {mine:?} worse than ruptures {model} {s:?}",
                    c.name
                );
            }
        } else if c.name == "variance" {
            // Only the mean-and-variance cost can see a pure variance change.
            assert_eq!(normal, (want, 0), "{}: ruptures normal {:?}", c.name, theirs[1].1);
        } else {
            // Clean location changes: ruptures (rank) finds the truth too.
            assert_eq!(rank.0, want, "{}: ruptures rank {:?}", c.name, theirs[0].1);
        }
        // The onset is the first true change (for the ramp: at or shortly after its start).
        match c.truth.first() {
            None => assert_eq!(*onset, None, "{}", c.name),
            Some(&t0) if ramp => assert!(onset.is_some_and(|o| o + TOL >= t0 && o <= t0 + 60), "{}: {onset:?}", c.name),
            Some(&t0) => assert!(onset.is_some_and(|o| o.abs_diff(t0) <= TOL), "{}: {onset:?}", c.name),
        }
    }
    println!("{report}");
}
