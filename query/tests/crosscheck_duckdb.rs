//! Cross-check of `quantile_cont` against DuckDB's `quantile_cont`, and of the DDSketch
//! quantiles against the stated relative-error bound, on generated series: normal, lognormal
//! and Pareto (heavy-tailed), missing samples (NULLs), ties, negative and mixed-sign values,
//! constant and single-point series, and NaN/±inf.
//!
//! Exact results must agree with DuckDB to within 1 ulp (NaN matches NaN, ±inf match
//! themselves); on x86-64 they agree bit for bit, which the test reports. The data goes to
//! DuckDB as Parquet through `python3` with the `duckdb` package (`pip install duckdb pyarrow`);
//! the test FAILS with a clear message when they are missing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use arrow::array::{Array, AsArray, Float64Array, Int32Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Float64Type, Int32Type, Schema};
use datafusion::datasource::MemTable;
use datafusion::prelude::{SessionConfig, SessionContext};
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

const QS: [f64; 9] = [0.0, 0.001, 0.1, 0.25, 0.5, 1.0 / 3.0, 0.9, 0.99, 1.0];
const ALPHA: f64 = 0.01;

/// Deterministic generator (splitmix64).
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

    fn normal(&mut self) -> f64 {
        (-2.0 * self.uniform().ln()).sqrt() * (2.0 * std::f64::consts::PI * self.uniform()).cos()
    }
}

/// One row per sample: (series, bucket, value).
fn generate() -> (Vec<i32>, Vec<i32>, Vec<Option<f64>>) {
    let mut rng = Rng(42);
    let (mut series, mut buckets, mut values) = (Vec::new(), Vec::new(), Vec::new());
    for s in 0..24i32 {
        for b in 0..8i32 {
            let n = match s {
                20 => 1,
                21 => 2,
                _ => 1 + (rng.next() % 400) as usize,
            };
            for _ in 0..n {
                let v = match s % 10 {
                    0 => 50.0 + 10.0 * rng.normal(),
                    1 => (2.0 * rng.normal()).exp(),          // lognormal
                    2 => 1.0 / rng.uniform().powf(1.0 / 1.2), // Pareto, alpha 1.2
                    3 => -(1.5 * rng.normal()).exp(),         // negative heavy tail
                    4 => 1e6 * rng.normal(),                  // mixed signs
                    5 => (rng.next() % 5) as f64,             // many ties
                    6 => 7.25,                                // constant
                    7 => match rng.next() % 50 {
                        // specials
                        0 => f64::NAN,
                        1 => f64::INFINITY,
                        2 => f64::NEG_INFINITY,
                        _ => rng.normal(),
                    },
                    8 => 1e-300 * rng.uniform() + 1e300 * f64::from(u8::from(rng.next().is_multiple_of(2))),
                    _ => rng.uniform() * 1e-3,
                };
                // ~10% missing samples
                let v = if rng.next().is_multiple_of(10) { None } else { Some(v) };
                series.push(s);
                buckets.push(b);
                values.push(v);
            }
        }
    }
    (series, buckets, values)
}

fn batch(series: &[i32], buckets: &[i32], values: &[Option<f64>]) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("series", DataType::Int32, false),
        Field::new("bucket", DataType::Int32, false),
        Field::new("value", DataType::Float64, true),
    ]));
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int32Array::from(series.to_vec())),
            Arc::new(Int32Array::from(buckets.to_vec())),
            Arc::new(Float64Array::from(values.to_vec())),
        ],
    )
    .unwrap()
}

fn select_list(func: &str) -> String {
    QS.iter().map(|q| format!("{func}(value, {q:?})")).collect::<Vec<_>>().join(", ")
}

/// Runs DuckDB over the Parquet file and returns its result batches.
fn duckdb_quantiles(dir: &Path) -> Vec<RecordBatch> {
    let input = dir.join("samples.parquet");
    let output = dir.join("duckdb.parquet");
    let query = format!(
        "SELECT series, bucket, {} FROM read_parquet('{}') GROUP BY series, bucket ORDER BY series, bucket",
        select_list("quantile_cont"),
        input.display()
    );
    let script = format!(
        "import duckdb\ncon = duckdb.connect()\ncon.execute(\"COPY ({query}) TO '{}' (FORMAT PARQUET, COMPRESSION ZSTD)\")\n",
        output.display()
    );
    let result = Command::new("python3").arg("-c").arg(&script).output();
    match result {
        Ok(out) if out.status.success() => {}
        Ok(out) => panic!(
            "DuckDB cross-check needs python3 with duckdb (pip install duckdb pyarrow): {}",
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => {
            panic!("DuckDB cross-check needs python3 with duckdb (pip install duckdb pyarrow): {e}")
        }
    }
    let file = std::fs::File::open(&output).unwrap();
    ParquetRecordBatchReaderBuilder::try_new(file).unwrap().build().unwrap().map(|b| b.unwrap()).collect()
}

fn concat(batches: &[RecordBatch]) -> RecordBatch {
    arrow::compute::concat_batches(&batches[0].schema(), batches).unwrap()
}

/// Distance in units in the last place (0 for equal values, NaN/NaN and -0/+0).
fn ulps(a: f64, b: f64) -> u64 {
    if a == b || (a.is_nan() && b.is_nan()) {
        return 0;
    }
    if a.is_nan() || b.is_nan() || a.is_infinite() || b.is_infinite() || a.signum() != b.signum() {
        return u64::MAX;
    }
    a.to_bits().abs_diff(b.to_bits())
}

async fn lockstep(batch: &RecordBatch, func: &str) -> RecordBatch {
    // Several partitions and tiny batches so partial states are merged.
    let config = SessionConfig::new().with_target_partitions(4).with_batch_size(37);
    let ctx = SessionContext::new_with_config(config);
    lockstep_query::functions::register_all(&ctx);
    let parts: Vec<Vec<RecordBatch>> = (0..4)
        .map(|p| {
            let rows = batch.num_rows();
            let (start, end) = (rows * p / 4, rows * (p + 1) / 4);
            vec![batch.slice(start, end - start)]
        })
        .collect();
    let table = MemTable::try_new(batch.schema(), parts).unwrap();
    ctx.register_table("samples", Arc::new(table)).unwrap();
    let sql = format!(
        "SELECT series, bucket, {} FROM samples GROUP BY series, bucket ORDER BY series, bucket",
        select_list(func)
    );
    concat(&ctx.sql(&sql).await.unwrap().collect().await.unwrap())
}

#[tokio::test]
async fn quantiles_match_duckdb_and_sketches_stay_within_alpha() {
    let (series, buckets, values) = generate();
    let input = batch(&series, &buckets, &values);
    let dir = tempfile::tempdir().unwrap();
    let file = std::fs::File::create(dir.path().join("samples.parquet")).unwrap();
    let mut writer = ArrowWriter::try_new(file, input.schema(), None).unwrap();
    writer.write(&input).unwrap();
    writer.close().unwrap();

    let duck = concat(&duckdb_quantiles(dir.path()));
    let exact = lockstep(&input, "quantile_cont").await;
    let approx = lockstep(&input, "approx_quantile").await;
    assert_eq!(duck.num_rows(), exact.num_rows());
    assert_eq!(duck.num_rows(), approx.num_rows());
    for c in 0..2 {
        let d = duck.column(c).as_primitive::<Int32Type>();
        assert_eq!(d.values(), exact.column(c).as_primitive::<Int32Type>().values());
    }

    let (mut compared, mut bitwise, mut sketch_checked) = (0usize, 0usize, 0usize);
    for (i, q) in QS.iter().enumerate() {
        let d = duck.column(2 + i).as_primitive::<Float64Type>();
        let e = exact.column(2 + i).as_primitive::<Float64Type>();
        let a = approx.column(2 + i).as_primitive::<Float64Type>();
        for row in 0..d.len() {
            let group = (
                duck.column(0).as_primitive::<Int32Type>().value(row),
                duck.column(1).as_primitive::<Int32Type>().value(row),
            );
            assert_eq!(d.is_null(row), e.is_null(row), "null mismatch at {group:?} q={q}");
            assert_eq!(d.is_null(row), a.is_null(row), "sketch null mismatch at {group:?} q={q}");
            if d.is_null(row) {
                continue;
            }
            let (dv, ev, av) = (d.value(row), e.value(row), a.value(row));
            assert!(ulps(dv, ev) <= 1, "quantile_cont differs from DuckDB at {group:?} q={q}: {ev} vs {dv}");
            compared += 1;
            bitwise += usize::from(dv.to_bits() == ev.to_bits() || (dv.is_nan() && ev.is_nan()));
            if dv.is_finite() && dv.abs() > 1e-290 {
                // Bound: alpha times the magnitude of the exact value when both neighbouring
                // order statistics share a sign; mixed-sign neighbours are checked loosely
                // against the series scale.
                let mixed = group.0 % 10 == 4 || group.0 % 10 == 7;
                let scale = if mixed { dv.abs().max(if group.0 % 10 == 4 { 1e6 } else { 5.0 }) } else { dv.abs() };
                assert!(
                    (av - dv).abs() <= ALPHA * scale * (1.0 + 1e-9),
                    "approx_quantile outside alpha at {group:?} q={q}: {av} vs exact {dv}"
                );
                sketch_checked += 1;
            } else if !dv.is_finite() {
                assert!(ulps(av, dv) == 0, "approx_quantile special value at {group:?} q={q}: {av} vs {dv}");
            }
        }
    }
    println!(
        "compared {compared} quantiles with DuckDB: {bitwise} bit-identical; {sketch_checked} sketch quantiles within alpha"
    );
    assert!(compared > 1000);
}
