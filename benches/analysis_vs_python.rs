//! Peer benchmark: `lag_corr` vs numpy/scipy and `change_points` vs ruptures.
//!
//! Generates the series (deterministic), writes them as raw f64 for the Python driver
//! (`benches/analysis_vs_python.py`), times Lockstep through the engine API (one thread, the
//! same work as the Python loop) and through SQL (`GROUP BY` over a `MemTable`, all cores),
//! times the peers, checks that the answers agree, and prints a Markdown table with ratios.
//!
//! ```text
//! cargo bench --bench analysis_vs_python
//! # smaller: LOCKSTEP_BENCH_LAG_PAIRS=50 LOCKSTEP_BENCH_CP_SERIES=50 cargo bench --bench analysis_vs_python
//! ```
//! Environment (defaults = the issue's sizes): `LOCKSTEP_BENCH_LAG_PAIRS` (1000),
//! `LOCKSTEP_BENCH_LAG_LEN` (100000), `LOCKSTEP_BENCH_LAG_MAX` (500 slots),
//! `LOCKSTEP_BENCH_CP_SERIES` (1000), `LOCKSTEP_BENCH_CP_LEN` (10000),
//! `LOCKSTEP_BENCH_KERNEL_SAMPLE` (10) and `LOCKSTEP_BENCH_PELT_SAMPLE` (1): ruptures is timed on
//! that many series and its time extrapolated to the full count (its Python PELT needs about
//! a minute per 10,000-point series), `LOCKSTEP_BENCH_SQL` (1; 0 skips the SQL runs).

#![allow(missing_docs)]

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use arrow::array::{Array, AsArray, Float64Array, Int32Array, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Int32Type, Int64Type, Schema};
use datafusion::datasource::MemTable;
use datafusion::prelude::SessionContext;
use lockstep_engine::analysis::change_points::{ChangeConfig, ChangeDetector};
use lockstep_engine::analysis::lag_corr::{LagCorrConfig, LagCorrelator};
use lockstep_engine::analysis::rng::SplitMix64;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

struct Gen(SplitMix64);

impl Gen {
    fn normal(&mut self) -> f64 {
        let u = self.0.next_f64().max(1e-300);
        let v = self.0.next_f64();
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
    fn latency(&mut self, median: f64) -> f64 {
        let body = median * (0.2 * self.normal()).exp();
        if self.0.next_f64() < 0.03 { body * 5.0 * (1.0 - self.0.next_f64()).powf(-1.0 / 1.5) } else { body }
    }
}

fn write_f64(path: &Path, data: &[f64]) -> Result<()> {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    for v in data {
        f.write_all(&v.to_le_bytes())?;
    }
    f.flush()?;
    Ok(())
}

fn python(args: &[String]) -> Result<serde_json::Value> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/analysis_vs_python.py");
    let out = Command::new("python3").arg(script).args(args).output().context("running python3")?;
    if !out.status.success() {
        bail!(
            "python driver failed (needs numpy scipy ruptures: pip install numpy scipy ruptures): {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(serde_json::from_slice(&out.stdout)?)
}

fn sql_ctx(batches: Vec<RecordBatch>) -> Result<SessionContext> {
    let ctx = lockstep_query::plan::context(datafusion::prelude::SessionConfig::new());
    let schema = batches[0].schema();
    // Two partitions (the machine's cores), pairs dealt round-robin.
    let mut parts = vec![Vec::new(), Vec::new()];
    for (i, b) in batches.into_iter().enumerate() {
        parts[i % 2].push(b);
    }
    ctx.register_table("s", Arc::new(MemTable::try_new(schema, parts)?))?;
    Ok(ctx)
}

fn main() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let d = dir.path().display().to_string();
    let sql = env("LOCKSTEP_BENCH_SQL", 1) == 1;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let mut table = String::from(
        "| benchmark | Lockstep engine (1 thread) | Lockstep SQL (2 partitions) | peer | peer time | peer / Lockstep engine |\n|---|---|---|---|---|---|\n",
    );

    // ---------------------------------------------------------------- lag_corr
    let (pairs, len, max_lag) = (
        env("LOCKSTEP_BENCH_LAG_PAIRS", 1000),
        env("LOCKSTEP_BENCH_LAG_LEN", 100_000),
        env("LOCKSTEP_BENCH_LAG_MAX", 500),
    );
    eprintln!("generating {pairs} pairs x {len} points");
    let mut xs = Vec::with_capacity(pairs * len);
    let mut ys = Vec::with_capacity(pairs * len);
    let mut truth = Vec::with_capacity(pairs);
    let mut g = Gen(SplitMix64::new(1));
    for p in 0..pairs {
        let lag = (p % 81) as i64 - 40;
        truth.push(lag);
        let start = xs.len();
        let mut prev = 0.0;
        for _ in 0..len {
            prev = 0.8 * prev + g.normal();
            xs.push(prev);
        }
        for i in 0..len as i64 {
            let j = i - lag;
            let base = if j >= 0 && (j as usize) < len { xs[start + j as usize] } else { 0.0 };
            ys.push(base + 2.0 * g.normal());
        }
    }
    write_f64(&dir.path().join("lag_x.f64"), &xs)?;
    write_f64(&dir.path().join("lag_y.f64"), &ys)?;

    eprintln!("lockstep engine lag_corr");
    let cfg = LagCorrConfig { max_lag: Some(max_lag), ..LagCorrConfig::default() };
    let mut lc = LagCorrelator::new();
    let t0 = Instant::now();
    let mut ours = Vec::with_capacity(pairs);
    for p in 0..pairs {
        let r = lc.compute(&xs[p * len..(p + 1) * len], &ys[p * len..(p + 1) * len], &cfg);
        ours.push(r.context("lag_corr returned no result")?);
    }
    let lag_engine = t0.elapsed().as_secs_f64();
    let found = ours.iter().zip(&truth).filter(|(r, t)| r.lag == **t).count();
    let significant = ours.iter().filter(|r| r.p_value.is_some_and(|p| p <= 0.01)).count();

    let lag_sql = if sql {
        eprintln!("lockstep SQL lag_corr");
        let schema = Arc::new(Schema::new(vec![
            Field::new("pair", DataType::Int32, false),
            Field::new("t", DataType::Int64, false),
            Field::new("x", DataType::Float64, false),
            Field::new("y", DataType::Float64, false),
        ]));
        let times: Arc<Int64Array> = Arc::new((0..len as i64).map(|i| i * 1_000_000_000).collect());
        let mut batches = Vec::with_capacity(pairs);
        for p in 0..pairs {
            batches.push(RecordBatch::try_new(
                schema.clone(),
                vec![
                    Arc::new(Int32Array::from(vec![p as i32; len])),
                    times.clone(),
                    Arc::new(Float64Array::from(xs[p * len..(p + 1) * len].to_vec())),
                    Arc::new(Float64Array::from(ys[p * len..(p + 1) * len].to_vec())),
                ],
            )?);
        }
        let ctx = sql_ctx(batches)?;
        let q = format!(
            "SELECT pair, r['lag_ns'] FROM (SELECT pair, lag_corr(t, x, y, {}) AS r FROM s GROUP BY pair)",
            max_lag as i64 * 1_000_000_000
        );
        let t0 = Instant::now();
        let out = rt.block_on(async { ctx.sql(&q).await?.collect().await })?;
        let secs = t0.elapsed().as_secs_f64();
        for b in &out {
            let (pc, lc) = (b.column(0).as_primitive::<Int32Type>(), b.column(1).as_primitive::<Int64Type>());
            for i in 0..b.num_rows() {
                if lc.is_null(i) || lc.value(i) != ours[pc.value(i) as usize].lag * 1_000_000_000 {
                    bail!("SQL lag_corr differs from the engine for pair {}", pc.value(i));
                }
            }
        }
        Some(secs)
    } else {
        None
    };
    drop((xs, ys));

    eprintln!("scipy lag_corr");
    let py = python(&["lag".into(), d.clone(), pairs.to_string(), len.to_string(), max_lag.to_string()])?;
    let py_secs = py["seconds"].as_f64().context("seconds")?;
    let (mut same_lag, mut max_diff) = (0, 0.0f64);
    for (i, r) in ours.iter().enumerate() {
        if py["lags"][i].as_i64() == Some(r.lag) {
            same_lag += 1;
        }
        max_diff = max_diff.max((py["coefs"][i].as_f64().unwrap_or(f64::NAN) - r.coef).abs());
    }
    table.push_str(&format!(
        "| lag_corr, {pairs} pairs x {len} points, max lag {max_lag} | {:.2} s (with p-values) | {} | scipy {} correlate + correlation_lags (no p-value) | {:.2} s | {:.2}x |\n",
        lag_engine,
        lag_sql.map_or("-".into(), |s| format!("{s:.2} s")),
        py["scipy"].as_str().unwrap_or("?"),
        py_secs,
        py_secs / lag_engine
    ));
    let lag_note = format!(
        "lag_corr agreement: same lag as scipy for {same_lag}/{pairs} pairs, max |coef diff| {max_diff:.2e}; true lag found for {found}/{pairs}; p <= 0.01 for {significant}/{pairs}",
    );

    // ---------------------------------------------------------------- change_points
    let (series, cp_len) = (env("LOCKSTEP_BENCH_CP_SERIES", 1000), env("LOCKSTEP_BENCH_CP_LEN", 10_000));
    let (kernel_sample, pelt_sample) =
        (env("LOCKSTEP_BENCH_KERNEL_SAMPLE", 10).min(series), env("LOCKSTEP_BENCH_PELT_SAMPLE", 1).min(series));
    eprintln!("generating {series} series x {cp_len} points");
    let mut vs = Vec::with_capacity(series * cp_len);
    let mut cp_truth = Vec::with_capacity(series);
    for s in 0..series {
        // Latency-like heavy-tailed series; three in four have one step up by 40 %.
        let step = if s % 4 == 3 { None } else { Some(cp_len / 5 + (s * 7919) % (cp_len * 3 / 5)) };
        cp_truth.push(step);
        for i in 0..cp_len {
            let m = if step.is_some_and(|c| i >= c) { 28.0 } else { 20.0 };
            vs.push(g.latency(m));
        }
    }
    write_f64(&dir.path().join("cp.f64"), &vs)?;
    let hit = |found: &[usize], t: Option<usize>| -> bool {
        match t {
            None => found.is_empty(),
            Some(c) => found.len() == 1 && found[0].abs_diff(c) <= 20,
        }
    };

    eprintln!("lockstep engine change_points");
    let mut det = ChangeDetector::new();
    let ccfg = ChangeConfig::default();
    let t0 = Instant::now();
    let mut cp_ours = Vec::with_capacity(series);
    for s in 0..series {
        cp_ours.push(det.detect(&vs[s * cp_len..(s + 1) * cp_len], &ccfg).iter().map(|c| c.index).collect::<Vec<_>>());
    }
    let cp_engine = t0.elapsed().as_secs_f64();
    let cp_correct = cp_ours.iter().zip(&cp_truth).filter(|(f, t)| hit(f, **t)).count();

    let cp_sql = if sql {
        eprintln!("lockstep SQL change_points");
        let schema = Arc::new(Schema::new(vec![
            Field::new("series", DataType::Int32, false),
            Field::new("t", DataType::Int64, false),
            Field::new("v", DataType::Float64, false),
        ]));
        let times: Arc<Int64Array> = Arc::new((0..cp_len as i64).map(|i| i * 1_000_000_000).collect());
        let mut batches = Vec::with_capacity(series);
        for s in 0..series {
            batches.push(RecordBatch::try_new(
                schema.clone(),
                vec![
                    Arc::new(Int32Array::from(vec![s as i32; cp_len])),
                    times.clone(),
                    Arc::new(Float64Array::from(vs[s * cp_len..(s + 1) * cp_len].to_vec())),
                ],
            )?);
        }
        let ctx = sql_ctx(batches)?;
        let q = "SELECT series, array_length(change_points(t, v)) FROM s GROUP BY series";
        let t0 = Instant::now();
        let out = rt.block_on(async { ctx.sql(q).await?.collect().await })?;
        let secs = t0.elapsed().as_secs_f64();
        for b in &out {
            let (sc, nc) =
                (b.column(0).as_primitive::<Int32Type>(), b.column(1).as_primitive::<arrow::datatypes::UInt64Type>());
            for i in 0..b.num_rows() {
                let n = if nc.is_null(i) { 0 } else { nc.value(i) as usize };
                if n != cp_ours[sc.value(i) as usize].len() {
                    bail!("SQL change_points differs from the engine for series {}", sc.value(i));
                }
            }
        }
        Some(secs)
    } else {
        None
    };

    eprintln!("ruptures change points ({kernel_sample} kernel, {pelt_sample} pelt series)");
    let py = python(&[
        "cp".into(),
        d.clone(),
        series.to_string(),
        cp_len.to_string(),
        kernel_sample.to_string(),
        pelt_sample.to_string(),
    ])?;
    let mut notes = vec![
        lag_note,
        format!(
            "change_points accuracy (one step within 20 samples, or none when none): Lockstep {cp_correct}/{series}"
        ),
    ];
    for (name, label) in [("kernel_rbf", "ruptures KernelCPD(rbf), C"), ("pelt_rank", "ruptures Pelt(rank, jump=5)")] {
        let r = &py[name];
        let count = r["series"].as_u64().unwrap_or(0) as usize;
        if count == 0 {
            continue;
        }
        let secs = r["seconds"].as_f64().unwrap_or(f64::NAN);
        let full = secs / count as f64 * series as f64;
        let mut ok = 0;
        let mut ours_ok = 0;
        for s in 0..count {
            let f: Vec<usize> = r["found"][s]
                .as_array()
                .map(|a| a.iter().filter_map(|v| v.as_u64()).map(|v| v as usize).collect())
                .unwrap_or_default();
            ok += usize::from(hit(&f, cp_truth[s]));
            ours_ok += usize::from(hit(&cp_ours[s], cp_truth[s]));
        }
        table.push_str(&format!(
            "| change_points, {series} series x {cp_len} points | {:.2} s | {} | {label} {} | {:.1} s ({count} series, x{} extrapolated) | {:.0}x |\n",
            cp_engine,
            cp_sql.map_or("-".into(), |s| format!("{s:.2} s")),
            py["ruptures"].as_str().unwrap_or("?"),
            full,
            series / count,
            full / cp_engine
        ));
        notes
            .push(format!("{label}: correct on {ok}/{count} sampled series (Lockstep on the same: {ours_ok}/{count})"));
    }
    println!("\n{table}");
    for n in notes {
        println!("- {n}");
    }
    Ok(())
}
