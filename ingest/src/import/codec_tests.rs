//! Every standard Parquet codec imports: files written by pyarrow (default settings = snappy,
//! and gzip, LZ4_RAW, brotli, zstd, none), by pandas `to_parquet` (defaults), by DuckDB
//! `COPY ... (FORMAT parquet)` (default = snappy, and gzip, zstd, lz4, brotli, uncompressed),
//! and the legacy Hadoop-framed `LZ4` codec (which neither writes) by the parquet crate; and
//! time columns as the microsecond timestamps pandas and DuckDB write.
//!
//! Needs `python3` with `pyarrow` and `duckdb` (`pip install duckdb pyarrow`, as
//! `scripts/test.sh` does); the test FAILS with a clear message when they are missing. The
//! pandas variant runs when pandas is installed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::Arc;

use arrow::array::{Float64Array, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use lockstep_engine::StoreConfig;
use lockstep_engine::store::ScanRequest;
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use parquet::file::reader::{FileReader, SerializedFileReader};

use super::*;

const T: i64 = 1_767_225_600_000_000_000;
const METRIC: &str = "DCGM_FI_DEV_GPU_UTIL";

/// The rows every fixture holds: 3 series (the third without a `gpu` label) of 200 samples.
struct Fixture {
    time: Vec<i64>,
    host: Vec<String>,
    value: Vec<f64>,
    gpu: Vec<Option<String>>,
}

fn fixture() -> Fixture {
    let mut f = Fixture { time: vec![], host: vec![], value: vec![], gpu: vec![] };
    for s in 0..3i64 {
        for i in 0..200i64 {
            f.time.push(T + i * 1_000_000_000 + s);
            f.host.push(format!("node-{s:02}"));
            f.value.push(s as f64 * 1000.0 + i as f64 * 0.25 - 7.5);
            f.gpu.push((s != 2).then(|| s.to_string()));
        }
    }
    f
}

/// (series key, time, value), sorted: what the store must hold after importing a fixture.
fn expected(f: &Fixture) -> Vec<(String, i64, f64)> {
    let mut out: Vec<_> = (0..f.time.len())
        .map(|r| {
            let key = match &f.gpu[r] {
                Some(g) => format!(r#"{METRIC}{{gpu="{g}",host="{}"}}"#, f.host[r]),
                None => format!(r#"{METRIC}{{host="{}"}}"#, f.host[r]),
            };
            (key, f.time[r], f.value[r])
        })
        .collect();
    out.sort_by(|a, b| a.partial_cmp(b).unwrap());
    out
}

/// Writes the pyarrow, pandas and DuckDB fixtures from `rows.json`.
const WRITE_FIXTURES: &str = r#"
import json, os, sys
import pyarrow as pa, pyarrow.parquet as pq, duckdb
out = sys.argv[1]
with open(os.path.join(out, "rows.json")) as f:
    rows = json.load(f)
table = pa.table({
    "time": pa.array(rows["time"], pa.int64()),
    "host": pa.array(rows["host"], pa.string()),
    "metric": pa.array([rows["metric"]] * len(rows["time"]), pa.string()),
    "value": pa.array(rows["value"], pa.float64()),
    "gpu": pa.array(rows["gpu"], pa.string()),
})
pq.write_table(table, os.path.join(out, "pyarrow-default.parquet"))
for codec in ["gzip", "lz4", "brotli", "zstd", "none"]:
    pq.write_table(table, os.path.join(out, f"pyarrow-{codec}.parquet"), compression=codec)
try:
    import pandas
    frame = table.to_pandas()
    frame.to_parquet(os.path.join(out, "pandas-default.parquet"))
    # Times as pandas datetimes at microseconds (pandas 3's default unit), naive and in UTC.
    frame["time"] = pandas.to_datetime(frame["time"], unit="ns").astype("datetime64[us]")
    frame.to_parquet(os.path.join(out, "pandas-datetime-us.parquet"))
    frame["time"] = frame["time"].dt.tz_localize("UTC")
    frame.to_parquet(os.path.join(out, "pandas-datetime-us-utc.parquet"))
except ImportError:
    print("pandas not installed: skipping the pandas fixtures", file=sys.stderr)
con = duckdb.connect()
con.register("t", table)
def copy(name, options, select="*"):
    path = os.path.join(out, name)
    con.execute(f"COPY (SELECT {select} FROM t) TO '{path}' (FORMAT parquet{options})")
copy("duckdb-default.parquet", "")
for codec in ["gzip", "zstd", "lz4", "brotli", "uncompressed"]:
    copy(f"duckdb-{codec}.parquet", f", CODEC '{codec}'")
# DuckDB's TIMESTAMP (microseconds).
copy("duckdb-timestamp.parquet", "", "* REPLACE (make_timestamp(time // 1000) AS time)")
"#;

/// The codec of every column chunk of `path` (they must all agree).
fn codec_of(path: &Path) -> String {
    let reader = SerializedFileReader::new(std::fs::File::open(path).unwrap()).unwrap();
    let mut codecs: Vec<String> = reader
        .metadata()
        .row_groups()
        .iter()
        .flat_map(|g| g.columns().iter().map(|c| codec_name(c.compression()).to_string()))
        .collect();
    codecs.sort();
    codecs.dedup();
    assert_eq!(codecs.len(), 1, "{}: mixed codecs {codecs:?}", path.display());
    codecs.remove(0)
}

fn codec_name(c: Compression) -> &'static str {
    match c {
        Compression::UNCOMPRESSED => "UNCOMPRESSED",
        Compression::SNAPPY => "SNAPPY",
        Compression::GZIP(_) => "GZIP",
        Compression::LZO => "LZO",
        Compression::BROTLI(_) => "BROTLI",
        Compression::LZ4 => "LZ4",
        Compression::ZSTD(_) => "ZSTD",
        Compression::LZ4_RAW => "LZ4_RAW",
    }
}

/// Writes the fixture with the parquet crate itself, in `codec`.
fn write_with_rust(path: &Path, f: &Fixture, codec: Compression) {
    let schema = Arc::new(Schema::new(vec![
        Field::new("time", DataType::Int64, false),
        Field::new("host", DataType::Utf8, false),
        Field::new("metric", DataType::Utf8, false),
        Field::new("value", DataType::Float64, false),
        Field::new("gpu", DataType::Utf8, true),
    ]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(Int64Array::from(f.time.clone())),
            Arc::new(StringArray::from(f.host.clone())),
            Arc::new(StringArray::from(vec![METRIC; f.time.len()])),
            Arc::new(Float64Array::from(f.value.clone())),
            Arc::new(StringArray::from(f.gpu.clone())),
        ],
    )
    .unwrap();
    let props = WriterProperties::builder().set_compression(codec).build();
    let mut w = ArrowWriter::try_new(std::fs::File::create(path).unwrap(), schema, Some(props)).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
}

/// Imports `file` into a fresh store; returns the sorted (key, time, value) rows it holds.
fn import_rows(dir: &Path, file: &Path) -> Result<Vec<(String, i64, f64)>, String> {
    let store =
        Store::open(dir, StoreConfig { max_future_ns: None, ..Default::default() }).map_err(|e| e.to_string())?;
    let report = import_file(&store, file, &ImportOptions::default(), &mut |_, _| {}).map_err(|e| e.to_string())?;
    if report.skipped != 0 {
        return Err(format!("skipped {} rows: {:?}", report.skipped, report.skipped_examples));
    }
    let rows = store.scan_all(ScanRequest::default()).map_err(|e| e.to_string())?;
    let keys =
        store.with_catalog(|c| c.live().map(|(_, k)| k.to_string()).collect::<Vec<_>>()).map_err(|e| e.to_string())?;
    let mut out: Vec<_> =
        (0..rows.len()).map(|r| (keys[rows.series[r] as usize].clone(), rows.time[r], rows.value[r])).collect();
    out.sort_by(|a, b| a.partial_cmp(b).unwrap());
    Ok(out)
}

#[test]
fn every_standard_parquet_codec_imports() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let f = fixture();
    let rows = serde_json::json!({
        "time": f.time, "host": f.host, "metric": METRIC, "value": f.value, "gpu": f.gpu,
    });
    std::fs::write(dir.join("rows.json"), rows.to_string()).unwrap();
    let script = dir.join("write_fixtures.py");
    std::fs::write(&script, WRITE_FIXTURES).unwrap();
    const NEEDS: &str = "the Parquet codec test needs python3 with pyarrow and duckdb (pip install duckdb pyarrow)";
    match Command::new("python3").arg(&script).arg(dir).output() {
        Ok(out) if out.status.success() => eprint!("{}", String::from_utf8_lossy(&out.stderr)),
        Ok(out) => panic!("{NEEDS}: {}", String::from_utf8_lossy(&out.stderr)),
        Err(e) => panic!("{NEEDS}: {e}"),
    }
    write_with_rust(&dir.join("rust-lz4-hadoop.parquet"), &f, Compression::LZ4);

    // (fixture, codec it must be written in); the pandas one only when pandas wrote it.
    let mut fixtures = vec![
        ("pyarrow-default", "SNAPPY"),
        ("pyarrow-gzip", "GZIP"),
        ("pyarrow-lz4", "LZ4_RAW"),
        ("pyarrow-brotli", "BROTLI"),
        ("pyarrow-zstd", "ZSTD"),
        ("pyarrow-none", "UNCOMPRESSED"),
        ("duckdb-default", "SNAPPY"),
        ("duckdb-gzip", "GZIP"),
        ("duckdb-zstd", "ZSTD"),
        ("duckdb-lz4", "LZ4_RAW"),
        ("duckdb-brotli", "BROTLI"),
        ("duckdb-uncompressed", "UNCOMPRESSED"),
        ("rust-lz4-hadoop", "LZ4"),
    ];
    if dir.join("pandas-default.parquet").is_file() {
        fixtures.push(("pandas-default", "SNAPPY"));
    }
    let want = expected(&f);
    let mut failures = BTreeMap::new();
    for (name, codec) in fixtures {
        let file = dir.join(format!("{name}.parquet"));
        assert_eq!(codec_of(&file), codec, "{name} is not written in the codec it should test");
        match import_rows(&dir.join(format!("db-{name}")), &file) {
            Ok(got) if got == want => {}
            Ok(got) => {
                let first_diff = got.iter().zip(&want).find(|(g, w)| g != w);
                failures
                    .insert(name, format!("{} rows (want {}), first difference {first_diff:?}", got.len(), want.len()));
            }
            Err(e) => {
                failures.insert(name, format!("{codec}: {e}"));
            }
        }
    }
    assert!(failures.is_empty(), "fixtures that did not import exactly:\n{failures:#?}");

    // A time column of microsecond timestamps (DuckDB's TIMESTAMP; pandas datetimes, naive and
    // in UTC) imports as the same instants in ns, its sub-microsecond digits gone.
    let want_us: Vec<_> = {
        let mut v: Vec<_> = want.iter().map(|(k, t, x)| (k.clone(), t / 1000 * 1000, *x)).collect();
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v
    };
    let mut timestamped = vec!["duckdb-timestamp"];
    if dir.join("pandas-datetime-us.parquet").is_file() {
        timestamped.extend(["pandas-datetime-us", "pandas-datetime-us-utc"]);
    }
    for name in timestamped {
        let file = dir.join(format!("{name}.parquet"));
        let got = import_rows(&dir.join(format!("db-{name}")), &file).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(got, want_us, "{name}");
    }
}

/// A corrupt Parquet file (a flipped bit anywhere, or a truncation) is imported or refused
/// with an error (`BadFile`, or the row that fails validation), never a panic, although parquet-rs panics on some such bytes: without a
/// page checksum (pyarrow, pandas and DuckDB write none) a flipped value bit can only import
/// a different value, but never takes the process down.
#[test]
fn corrupt_parquet_files_are_refused_never_a_panic() {
    let tmp = tempfile::tempdir().unwrap();
    let good_path = tmp.path().join("good.parquet");
    write_with_rust(&good_path, &fixture(), Compression::SNAPPY);
    let good = std::fs::read(&good_path).unwrap();
    let store =
        Store::open(tmp.path().join("store"), StoreConfig { max_future_ns: None, ..Default::default() }).unwrap();
    let bad = tmp.path().join("bad.parquet");
    let (mut refused, mut imported) = (0, 0);
    let mut cases: Vec<Vec<u8>> = Vec::new();
    for at in (0..good.len()).step_by(5) {
        for bit in [0x01u8, 0x80] {
            let mut bytes = good.clone();
            bytes[at] ^= bit;
            cases.push(bytes);
        }
    }
    cases.extend((0..good.len()).step_by(211).map(|len| good[..len].to_vec()));
    for (i, bytes) in cases.iter().enumerate() {
        std::fs::write(&bad, bytes).unwrap();
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            import_file(&store, &bad, &ImportOptions::default(), &mut |_, _| {})
        })) {
            Err(_) => panic!("case {i}: the import panicked"),
            Ok(Err(ImportError::BadFile { .. })) => refused += 1,
            // A decoded value that fails validation (a timestamp out of range) says which row.
            Ok(Err(e)) => assert!(e.to_string().contains("row "), "case {i}: {e}"),
            Ok(Ok(_)) => imported += 1,
        }
    }
    assert!(refused > 0 && imported > 0, "{refused} refused, {imported} imported");
}

/// A file of more than 32,768 row groups (pyarrow, one row per group), which parquet-rs's
/// footer reader cannot open, is refused with what to do about it; one of 32,768 imports.
#[test]
fn too_many_row_groups_say_what_to_do() {
    let tmp = tempfile::tempdir().unwrap();
    let script = r#"
import sys, pyarrow as pa, pyarrow.parquet as pq
for n in (32768, 32769):
    t = pa.table({"time": pa.array([1767225600000000000 + i for i in range(n)], pa.int64()),
                  "host": ["h"] * n, "metric": ["m"] * n, "value": [float(i) for i in range(n)]})
    pq.write_table(t, f"{sys.argv[1]}/rg{n}.parquet", row_group_size=1)
"#;
    let out = Command::new("python3").args(["-c", script, tmp.path().to_str().unwrap()]).output();
    match out {
        Ok(out) if out.status.success() => {}
        Ok(out) => panic!("needs python3 with pyarrow: {}", String::from_utf8_lossy(&out.stderr)),
        Err(e) => panic!("needs python3 with pyarrow: {e}"),
    }
    let store =
        Store::open(tmp.path().join("store"), StoreConfig { max_future_ns: None, ..Default::default() }).unwrap();
    let most = import_file(&store, &tmp.path().join("rg32768.parquet"), &ImportOptions::default(), &mut |_, _| {});
    assert_eq!(most.unwrap().samples, 32_768);
    let file = tmp.path().join("rg32769.parquet");
    let e = import_file(&store, &file, &ImportOptions::default(), &mut |_, _| {}).unwrap_err();
    assert!(matches!(e, ImportError::BadFile { .. }), "{e}");
    assert!(e.to_string().contains("more than 32,768 row groups") && e.to_string().contains("row_group_size"), "{e}");
}
