//! Per-series, per-1-second-bucket p99 and average over 10 million samples of 1,000 series:
//! Lockstep (DataFusion with the Lockstep functions) against DuckDB, same data, same machine,
//! same run, same thread count.
//!
//! The data (1,000 series × 10,000 samples at 100 Hz with ±2 ms jitter in whole microseconds,
//! lognormal values, ~1% of samples missing, rows sorted by series then time as the engine
//! stores them) is written once to Parquet; both engines load it into memory and then run, for 1 and 2 threads:
//! - exact:  `SELECT series, date_bin(1 s, time) b, quantile_cont(value, 0.99), avg(value) .. GROUP BY 1, 2`
//! - sketch: the same with `approx_quantile(value, 0.99)` (Lockstep DDSketch, DuckDB t-digest).
//!
//! Each query runs `LOCKSTEP_BENCH_REPEAT` times (default 3) after one warm-up; the best time
//! counts. The DuckDB side runs in `benches/percentiles_vs_duckdb.py` (needs
//! `pip install duckdb pyarrow`). Run:
//! `cargo bench --bench percentiles_vs_duckdb` (`LOCKSTEP_BENCH_ROWS=1000000` for a quick run).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{AsArray, Float64Array, Int32Array, RecordBatch, TimestampNanosecondArray};
use arrow::datatypes::{DataType, Field, Float64Type, Schema, TimeUnit};
use datafusion::datasource::MemTable;
use datafusion::prelude::{SessionConfig, SessionContext};
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::file::properties::WriterProperties;

const SERIES: usize = 1_000;
const START_NS: i64 = 1_700_000_000_000_000_000;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn uniform(&mut self) -> f64 {
        ((self.next() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
}

fn generate(rows: usize, path: &Path) -> usize {
    let per_series = rows / SERIES;
    let schema = Arc::new(Schema::new(vec![
        Field::new("series", DataType::Int32, false),
        Field::new("time", DataType::Timestamp(TimeUnit::Nanosecond, None), false),
        Field::new("value", DataType::Float64, false),
    ]));
    let props = WriterProperties::builder().set_max_row_group_row_count(Some(1 << 20)).build();
    let mut writer = ArrowWriter::try_new(std::fs::File::create(path).unwrap(), schema.clone(), Some(props)).unwrap();
    let mut rng = Rng(7);
    let mut total = 0;
    for chunk in (0..SERIES).collect::<Vec<_>>().chunks(50) {
        let (mut s, mut t, mut v) = (Vec::new(), Vec::new(), Vec::new());
        for &series in chunk {
            let scale = 1.0 + (series % 17) as f64;
            for i in 0..per_series {
                if rng.next().is_multiple_of(100) {
                    continue; // missing sample
                }
                // Microsecond jitter: DuckDB rounds nanosecond timestamps to microseconds when bucketing.
                let jitter = ((rng.next() % 4_001) as i64 - 2_000) * 1_000;
                s.push(series as i32);
                t.push(START_NS + i as i64 * 10_000_000 + jitter);
                // lognormal via Box-Muller
                let z = (-2.0 * rng.uniform().ln()).sqrt() * (2.0 * std::f64::consts::PI * rng.uniform()).cos();
                v.push(scale * (0.8 * z).exp());
            }
        }
        total += s.len();
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int32Array::from(s)),
                Arc::new(TimestampNanosecondArray::from(t)),
                Arc::new(Float64Array::from(v)),
            ],
        )
        .unwrap();
        writer.write(&batch).unwrap();
    }
    writer.close().unwrap();
    total
}

fn query(percentile: &str, table: &str) -> String {
    format!(
        "SELECT series, date_bin(INTERVAL '1 second', time) AS b, {percentile}(value, 0.99) AS p99, avg(value) AS mean \
         FROM {table} GROUP BY 1, 2"
    )
}

/// Best wall time over `repeat` runs, plus the result row count and the sum of p99s.
async fn run_lockstep(batches: &[RecordBatch], threads: usize, percentile: &str, repeat: usize) -> (f64, usize, f64) {
    let config = SessionConfig::new().with_target_partitions(threads);
    let ctx = if std::env::var("LOCKSTEP_BENCH_DF_PLAN").is_ok_and(|v| v == "1") {
        let ctx = SessionContext::new_with_config(config);
        lockstep_query::functions::register_all(&ctx);
        ctx
    } else {
        lockstep_query::plan::context(config)
    };
    // One memory partition per thread, each a contiguous range of series.
    let mut parts = vec![Vec::new(); threads];
    for (i, b) in batches.iter().enumerate() {
        parts[i * threads / batches.len()].push(b.clone());
    }
    ctx.register_table("t", Arc::new(MemTable::try_new(batches[0].schema(), parts).unwrap())).unwrap();
    let sql = query(percentile, "t");
    let mut best = f64::INFINITY;
    let mut result = (0, 0.0);
    for i in 0..=repeat {
        let start = Instant::now();
        let out = ctx.sql(&sql).await.unwrap().collect().await.unwrap();
        let secs = start.elapsed().as_secs_f64();
        if i > 0 {
            best = best.min(secs);
        }
        let rows = out.iter().map(RecordBatch::num_rows).sum();
        let sum = out.iter().map(|b| b.column(2).as_primitive::<Float64Type>().iter().flatten().sum::<f64>()).sum();
        result = (rows, sum);
    }
    (best, result.0, result.1)
}

/// DuckDB timings from the Python driver: (threads, kind) -> (seconds, rows, p99 sum).
fn run_duckdb(path: &Path, repeat: usize) -> Vec<(usize, String, f64, usize, f64)> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/percentiles_vs_duckdb.py");
    let out = Command::new("python3")
        .arg(&script)
        .arg(path)
        .arg(repeat.to_string())
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e} (needs python3 with duckdb)", script.display()));
    assert!(
        out.status.success(),
        "DuckDB driver failed (pip install duckdb pyarrow): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 5).then(|| {
                (
                    f[0].parse().unwrap(),
                    f[1].to_string(),
                    f[2].parse().unwrap(),
                    f[3].parse().unwrap(),
                    f[4].parse().unwrap(),
                )
            })
        })
        .collect()
}

#[tokio::main]
async fn main() {
    let rows: usize = std::env::var("LOCKSTEP_BENCH_ROWS").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000_000);
    let repeat: usize = std::env::var("LOCKSTEP_BENCH_REPEAT").ok().and_then(|v| v.parse().ok()).unwrap_or(3);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("samples.parquet");
    let generated = generate(rows, &path);
    let reader = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&path).unwrap()).unwrap();
    let batches: Vec<RecordBatch> = reader.with_batch_size(8192).build().unwrap().map(|b| b.unwrap()).collect();
    println!("{generated} samples, {SERIES} series, 1 s buckets; best of {repeat} runs after a warm-up\n");

    let duck = run_duckdb(&path, repeat);
    println!(
        "| threads | query | Lockstep s | DuckDB s | Lockstep Mrows/s | DuckDB Mrows/s | Lockstep / DuckDB speed |"
    );
    println!("|---|---|---|---|---|---|---|");
    for threads in [1, 2] {
        for (kind, func) in [("exact p99 + avg", "quantile_cont"), ("sketch p99 + avg", "approx_quantile")] {
            let (secs, groups, sum) = run_lockstep(&batches, threads, func, repeat).await;
            let Some(d) = duck.iter().find(|d| d.0 == threads && d.1 == func) else {
                panic!("no DuckDB result for {threads} threads {func}");
            };
            assert_eq!(groups, d.3, "group count differs from DuckDB");
            if func == "quantile_cont" {
                assert!((sum - d.4).abs() <= 1e-9 * d.4.abs(), "exact p99 sums differ: {sum} vs {}", d.4);
            }
            let mrows = |s: f64| generated as f64 / s / 1e6;
            println!(
                "| {threads} | {kind} | {secs:.3} | {:.3} | {:.1} | {:.1} | {:.2}x |",
                d.2,
                mrows(secs),
                mrows(d.2),
                d.2 / secs
            );
        }
    }
    println!("\n({} result groups per query)", duck.first().map_or(0, |d| d.3));
}
