//! Compatibility fixtures: a committed store directory as older releases left it
//! (`engine/tests/fixtures/store-v1/`, see its README.md), read by the current code.
//!
//! The fixture holds a data file of each format (the first layout with a required `time`
//! column, and the current one with shared, null timestamps), WAL segments with tag-1 and
//! tag-2 write records (one segment covered by the checkpoint, two still to replay), the
//! manifest, the series catalog and clock-sync state. The tests check the exact rows each
//! part decodes to and the merged contents seen by a writer and by a reader.
//!
//! `generate_fixture_store` wrote the files once; it is `#[ignore]`d and refuses to overwrite
//! them. Never regenerate the committed fixture with the current code: it guards that what
//! old releases wrote stays readable.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{ArrayRef, Float64Array, Int8Array, Int64Array, RecordBatch, UInt32Array};
use arrow::datatypes::{DataType, Field, Schema};
use bytes::Bytes;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};

use super::*;
use crate::clock::OffsetObservation;
use crate::datafile::{self, RowFilter};
use crate::model::WriteBatch;
use crate::storage::OsStorage;

const S: i64 = 1_000_000_000;
const H: i64 = 3_600 * S;
/// 2026-01-01T00:00:00Z, the start of partition 490896.
const T0: i64 = 1_767_225_600_000_000_000;
const P: i64 = T0 / H;

/// The committed fixture store.
fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/store-v1")
}

/// The series of the fixture, by id.
fn keys() -> Vec<SeriesKey> {
    vec![
        SeriesKey::new("cpu_temp", [("host", "h0")]),
        SeriesKey::new("gpu_power", [("host", "h0"), ("dev", "gpu0")]),
        SeriesKey::new("requests_total", [("host", "h0")]),
        SeriesKey::new("errors_total", [("host", "h0")]),
        // Defined by the first tag-1 record after the checkpoint.
        SeriesKey::new("mem_used", [("host", "h1")]),
        // Defined by the first tag-2 record.
        SeriesKey::new("disk_free", [("host", "h1"), ("mount", "/")]),
    ]
}

fn rows(samples: &[(u32, i64, f64)]) -> Rows {
    let mut out = Rows::default();
    for &(s, t, v) in samples {
        out.push(s, t, v);
    }
    out
}

/// `data/p490896/000000000001.parquet`, first data-file format (`time` required, no shared
/// timestamps). Series 0: short decimals (value_int, scale 2); 1: full-precision floats;
/// 2: integers up to 2^53 (scale 0); 3: NaN, +inf, -0.0 (value_float), same times as 2.
fn file_v1_rows() -> Rows {
    rows(&[
        (0, T0, 42.5),
        (0, T0 + 10 * S, 43.25),
        (0, T0 + 20 * S, -1.5),
        (1, T0, 0.1 + 0.2),
        (1, T0 + 10 * S, std::f64::consts::PI),
        (1, T0 + 20 * S, 1e300),
        (2, T0, 0.0),
        (2, T0 + 10 * S, 1.0),
        (2, T0 + 20 * S, 9_007_199_254_740_992.0),
        (3, T0, f64::NAN),
        (3, T0 + 10 * S, f64::INFINITY),
        (3, T0 + 20 * S, -0.0),
    ])
}

/// `data/p490897/000000000002.parquet`, current format with shared timestamps: series 1
/// shares a prefix of series 0's times, series 3 all of series 2's (jittered) times, so both
/// store `time` as NULL. Values mix scales 3 and 0 and floats within runs.
fn file_v2_rows() -> Rows {
    let t = T0 + H;
    rows(&[
        (0, t, 44.0),
        (0, t + 15 * S, 44.5),
        (0, t + 30 * S, 45.125),
        (1, t, 250.0),
        (1, t + 15 * S, 1.0 / 3.0),
        (2, t + 7, 10.0),
        (2, t + 15 * S + 3, 11.0),
        (2, t + 30 * S - 5, 12.0),
        (3, t + 7, 0.5),
        (3, t + 15 * S + 3, f64::NAN),
        (3, t + 30 * S - 5, f64::NEG_INFINITY),
    ])
}

/// WAL segment 1, covered by the checkpoint (its rows were flushed): one tag-1 record with
/// the definitions of series 0-3 and sentinel values that must never be replayed.
fn wal_segment_1() -> (Vec<u32>, Rows) {
    (vec![0, 1, 2, 3], rows(&[(0, T0, -999.0), (2, T0 + 10 * S, -999.0)]))
}

/// WAL segment 2, tag-1 records written after the flush: (defined series, rows) per record.
fn wal_segment_2() -> Vec<(Vec<u32>, Rows)> {
    let t = T0 + 2 * H;
    vec![
        (vec![4], rows(&[(4, t, 1024.0), (4, t + S, 2048.5), (4, t + 2 * S, 1e-7), (0, t, 46.75)])),
        // Series 2 at t+30s-5 replaces the value 12 of the data file (buffer over files).
        (vec![], rows(&[(2, T0 + H + 30 * S - 5, 13.0), (4, t + 3 * S, 0.1 + 0.2)])),
    ]
}

/// WAL segment 3, tag-2 records written by the next release.
fn wal_segment_3() -> Vec<(Vec<u32>, Rows)> {
    let t = T0 + 2 * H;
    vec![
        (
            vec![5],
            // Series 3's second time is coded against series 5's last interval (delta of
            // delta across runs); series 4 at t+1s replaces 2048.5 from segment 2 (later
            // record wins).
            rows(&[(5, t, 1.5), (5, t + S, -2.25), (3, t + S / 2, 7.0), (3, t + S / 2 + S, 8.0), (4, t + S, 4096.0)]),
        ),
        // Times going backwards within a run (negative deltas).
        (vec![], rows(&[(1, t + 10 * S, 1.0), (1, t + 5 * S, 2.0), (1, t + 5 * S - 1, f64::INFINITY)])),
    ]
}

/// Everything a store opened on the fixture holds: (series key, time) → value bits.
fn expected_contents() -> BTreeMap<(String, i64), u64> {
    let t1 = T0 + H;
    let t2 = T0 + 2 * H;
    let table: &[(&str, i64, f64)] = &[
        // data file 1 (first format)
        ("cpu_temp{host=\"h0\"}", T0, 42.5),
        ("cpu_temp{host=\"h0\"}", T0 + 10 * S, 43.25),
        ("cpu_temp{host=\"h0\"}", T0 + 20 * S, -1.5),
        ("gpu_power{dev=\"gpu0\",host=\"h0\"}", T0, 0.1 + 0.2),
        ("gpu_power{dev=\"gpu0\",host=\"h0\"}", T0 + 10 * S, std::f64::consts::PI),
        ("gpu_power{dev=\"gpu0\",host=\"h0\"}", T0 + 20 * S, 1e300),
        ("requests_total{host=\"h0\"}", T0, 0.0),
        ("requests_total{host=\"h0\"}", T0 + 10 * S, 1.0),
        ("requests_total{host=\"h0\"}", T0 + 20 * S, 9_007_199_254_740_992.0),
        ("errors_total{host=\"h0\"}", T0, f64::NAN),
        ("errors_total{host=\"h0\"}", T0 + 10 * S, f64::INFINITY),
        ("errors_total{host=\"h0\"}", T0 + 20 * S, -0.0),
        // data file 2 (shared timestamps)
        ("cpu_temp{host=\"h0\"}", t1, 44.0),
        ("cpu_temp{host=\"h0\"}", t1 + 15 * S, 44.5),
        ("cpu_temp{host=\"h0\"}", t1 + 30 * S, 45.125),
        ("gpu_power{dev=\"gpu0\",host=\"h0\"}", t1, 250.0),
        ("gpu_power{dev=\"gpu0\",host=\"h0\"}", t1 + 15 * S, 1.0 / 3.0),
        ("requests_total{host=\"h0\"}", t1 + 7, 10.0),
        ("requests_total{host=\"h0\"}", t1 + 15 * S + 3, 11.0),
        ("requests_total{host=\"h0\"}", t1 + 30 * S - 5, 13.0), // 12 in the file, 13 in the WAL
        ("errors_total{host=\"h0\"}", t1 + 7, 0.5),
        ("errors_total{host=\"h0\"}", t1 + 15 * S + 3, f64::NAN),
        ("errors_total{host=\"h0\"}", t1 + 30 * S - 5, f64::NEG_INFINITY),
        // WAL segments 2 (tag 1) and 3 (tag 2)
        ("mem_used{host=\"h1\"}", t2, 1024.0),
        ("mem_used{host=\"h1\"}", t2 + S, 4096.0), // 2048.5 in tag 1, 4096 in tag 2
        ("mem_used{host=\"h1\"}", t2 + 2 * S, 1e-7),
        ("mem_used{host=\"h1\"}", t2 + 3 * S, 0.1 + 0.2),
        ("cpu_temp{host=\"h0\"}", t2, 46.75),
        ("disk_free{host=\"h1\",mount=\"/\"}", t2, 1.5),
        ("disk_free{host=\"h1\",mount=\"/\"}", t2 + S, -2.25),
        ("errors_total{host=\"h0\"}", t2 + S / 2, 7.0),
        ("errors_total{host=\"h0\"}", t2 + S / 2 + S, 8.0),
        ("gpu_power{dev=\"gpu0\",host=\"h0\"}", t2 + 10 * S, 1.0),
        ("gpu_power{dev=\"gpu0\",host=\"h0\"}", t2 + 5 * S, 2.0),
        ("gpu_power{dev=\"gpu0\",host=\"h0\"}", t2 + 5 * S - 1, f64::INFINITY),
    ];
    let out: BTreeMap<(String, i64), u64> = table.iter().map(|&(k, t, v)| ((k.to_string(), t), v.to_bits())).collect();
    assert_eq!(out.len(), table.len(), "no key twice in the table");
    out
}

/// Everything in a store as (series key, time) → value bits.
fn contents(store: &Store) -> BTreeMap<(String, i64), u64> {
    let rows = store.scan_all(ScanRequest::default()).unwrap();
    let mut out = BTreeMap::new();
    store
        .with_catalog(|c| {
            for i in 0..rows.len() {
                let k = c.key(rows.series[i]).unwrap().to_string();
                assert!(out.insert((k, rows.time[i]), rows.value[i].to_bits()).is_none(), "duplicate row");
            }
        })
        .unwrap();
    out
}

/// Rows as comparable tuples (values by their bits, so NaN and -0.0 compare exactly).
fn tuples(rows: &Rows) -> Vec<(u32, i64, u64)> {
    (0..rows.len()).map(|i| (rows.series[i], rows.time[i], rows.value[i].to_bits())).collect()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// A private copy of the fixture (opening a store creates directories and a lock file).
fn fixture_copy() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&fixture_dir(), dir.path());
    dir
}

fn cfg() -> StoreConfig {
    StoreConfig { max_future_ns: None, flush_rows: usize::MAX, ..Default::default() }
}

fn check_catalog(store: &Store) {
    let names: Vec<String> = store.with_catalog(|c| c.live().map(|(_, k)| k.to_string()).collect()).unwrap();
    let want: Vec<String> = keys().iter().map(ToString::to_string).collect();
    assert_eq!(names, want, "series ids as defined by series.json and the WAL");
}

fn check_clock(store: &Store) {
    let set = store.clock_models().unwrap();
    assert_eq!(set.version(), 1, "clock/versions/v…1.json");
    assert_eq!(set.inputs().offsets, 3);
    let model = set.model("h1").expect("a clock model for h1");
    // h1 runs 2 ms ahead (offset = local − reference).
    assert!((model.offset_at(T0 + 2 * H) - 2_000_000).abs() < 1_000, "{model:?}");
}

#[test]
fn fixture_store_opens_for_writing_with_every_part() {
    let dir = fixture_copy();
    let store = Store::open(dir.path(), cfg()).unwrap();
    assert_eq!(store.manifest().unwrap().wal_checkpoint, 1);
    assert_eq!(store.manifest().unwrap().files.len(), 2);
    check_catalog(&store);
    check_clock(&store);
    let want = expected_contents();
    assert_eq!(contents(&store), want);
    // Old rows survive a flush and a compaction of the old files (the merge path) and a reopen.
    store.flush().unwrap();
    let summary = store.compact(true).unwrap();
    assert!(summary.files_in >= 2, "{summary:?}");
    assert_eq!(contents(&store), want, "after flush and compaction");
    store.close().unwrap();
    let store = Store::open(dir.path(), cfg()).unwrap();
    assert_eq!(contents(&store), want, "after reopen");
    check_catalog(&store);
}

/// The fixture predates store ids: the first writer gives it one, saved before any segment
/// carries it; its version-1 segments still replay, new ones are version 2, and the id stays
/// across reopens. A reader of the store without an id changes nothing.
#[test]
fn fixture_store_gets_a_store_id_and_keeps_working() {
    let dir = fixture_copy();
    let manifest_path = dir.path().join("manifest.json");
    assert!(!std::fs::read_to_string(&manifest_path).unwrap().contains("store_id"));
    let reader = Store::open_read_only(dir.path()).unwrap();
    assert_eq!(reader.manifest().unwrap().store_id, None);
    drop(reader);
    assert!(!std::fs::read_to_string(&manifest_path).unwrap().contains("store_id"), "a reader wrote nothing");

    let store = Store::open(dir.path(), cfg()).unwrap();
    let id = store.manifest().unwrap().store_id.expect("a writer gives the store an id");
    let on_disk = crate::manifest::Manifest::load(&OsStorage, &manifest_path).unwrap().unwrap();
    assert_eq!(on_disk.store_id, Some(id), "saved durably at open");
    let mut want = expected_contents();
    assert_eq!(contents(&store), want);
    let mut batch = WriteBatch::default();
    batch.push(SeriesKey::new("new_metric", [("host", "h2")]), T0 + 5 * S, 1.0);
    store.write(&batch).unwrap();
    want.insert(("new_metric{host=\"h2\"}".to_string(), T0 + 5 * S), 1f64.to_bits());
    drop(store); // not flushed: the version-1 segments and the new one are all replayed

    let wal = dir.path().join("wal");
    let v2 = wal.join(format!("{:020}.wal", 4));
    let header = std::fs::read(&v2).unwrap();
    assert_eq!((&header[..8], &header[16..32]), (&b"LSTPWAL2"[..], &id.0[..]));
    assert_eq!(&std::fs::read(wal.join(format!("{:020}.wal", 3))).unwrap()[..8], b"LSTPWAL1");
    let reader = Store::open_read_only(dir.path()).unwrap();
    assert_eq!(contents(&reader), want, "read-only, version-1 and version-2 segments");
    drop(reader);
    let store = Store::open(dir.path(), cfg()).unwrap();
    assert_eq!(contents(&store), want, "after reopen");
    assert_eq!(store.manifest().unwrap().store_id, Some(id), "the id is kept");
    store.close().unwrap();
    let store = Store::open(dir.path(), cfg()).unwrap();
    assert_eq!((contents(&store), store.manifest().unwrap().store_id), (want, Some(id)));
}

#[test]
fn fixture_store_opens_read_only_with_every_part() {
    let dir = fixture_copy();
    let store = Store::open_read_only(dir.path()).unwrap();
    assert!(store.is_read_only());
    check_catalog(&store);
    check_clock(&store);
    assert_eq!(contents(&store), expected_contents());
}

/// `lockstep check` on an old store: every file of each older format reads end to end and
/// agrees with its (unsealed) manifest entry; none carries checksums.
#[test]
fn fixture_store_checks_clean_without_checksums() {
    let dir = fixture_copy();
    let report = Store::open_read_only(dir.path()).unwrap().check(2, &|_, _| {}).unwrap();
    assert_eq!(report.problems, vec![], "{report:?}");
    assert_eq!((report.files, report.files_with_checksums, report.files_without_checksums), (2, 0, 2));
    assert_eq!((report.rows, report.series, report.clock_versions), (12 + 11, keys().len(), 1));
    assert!(report.buffered_rows > 0, "the WAL segments after the checkpoint: {report:?}");
}

/// With `rewrite_unchecked` (as `lockstep serve` runs), compaction rewrites the partitions
/// whose files have no checksums, single files too: afterwards every file has them and the
/// store holds the same rows. Without it, single files are left as they are.
#[test]
fn fixture_files_get_checksums_when_rewritten() {
    let dir = fixture_copy();
    let store = Store::open(dir.path(), cfg()).unwrap();
    assert_eq!(store.compact(false).unwrap().partitions, 0);
    drop(store);
    let store = Store::open(dir.path(), StoreConfig { rewrite_unchecked: true, ..cfg() }).unwrap();
    let summary = store.compact_with(false, 1).unwrap();
    assert_eq!((summary.partitions, summary.files_in), (1, 1), "one partition per pass: {summary:?}");
    assert_eq!(store.compact(false).unwrap().partitions, 1, "the other one");
    assert_eq!(store.compact(false).unwrap().partitions, 0, "nothing left to rewrite");
    assert_eq!(contents(&store), expected_contents());
    store.close().unwrap();
    let report = Store::open_read_only(dir.path()).unwrap().check(1, &|_, _| {}).unwrap();
    assert_eq!(report.problems, vec![], "{report:?}");
    // The two rewritten files, and the WAL's rows the close flushed.
    assert_eq!((report.files, report.files_with_checksums, report.files_without_checksums), (4, 4, 0));
    assert_eq!(contents(&Store::open_read_only(dir.path()).unwrap()), expected_contents());
}

#[test]
fn fixture_data_files_of_each_format_decode_exactly() {
    let dir = fixture_dir();
    for (rel, want, shared) in [
        (format!("data/p{P}/000000000001.parquet"), file_v1_rows(), false),
        (format!("data/p{}/000000000002.parquet", P + 1), file_v2_rows(), true),
    ] {
        let path = dir.join(&rel);
        let got = datafile::read_file(&OsStorage, &path, &RowFilter::default(), None).unwrap();
        assert_eq!(tuples(&got), tuples(&want), "{rel}");
        // The fixture really is of the format it stands for.
        let meta =
            ArrowReaderMetadata::load(&Bytes::from(std::fs::read(&path).unwrap()), ArrowReaderOptions::default())
                .unwrap();
        let time = meta.metadata().file_metadata().schema_descr().column(1);
        assert_eq!(time.name(), "time");
        assert_eq!(time.max_def_level(), u16::from(shared) as i16, "{rel}: time nullable only in the later format");
        let nulls = meta.metadata().row_group(0).column(1).statistics().and_then(|s| s.null_count_opt());
        assert_eq!(nulls, Some(if shared { 5 } else { 0 }), "{rel}: shared (null) timestamps");
    }
}

/// `engine/tests/fixtures/datafile-v3/counters.parquet`, the third data-file format:
/// `value_int` byte-stream-split, counter runs difference-coded (`value_scale` + 32). Series 0:
/// an integer counter; 1: a two-decimal counter interrupted by a full-precision float (the
/// differences restart after it); 2: a gauge (stored as values).
fn file_v3_rows() -> Rows {
    let mut samples = Vec::new();
    for i in 0..12i64 {
        samples.push((0, T0 + i * S, (1_000_000_000_000 + i * 4096 + i % 3) as f64));
    }
    for i in 0..8i64 {
        let v = if i == 4 { 0.1 + 0.2 } else { (500_000 + i * 1250) as f64 / 100.0 };
        samples.push((1, T0 + i * S, v));
    }
    for (i, v) in [0.0, 97.0, 3.0, 88.0, 12.0, 95.0, 7.0, 91.0].into_iter().enumerate() {
        samples.push((2, T0 + i as i64 * S, v));
    }
    rows(&samples)
}

fn file_v3_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/datafile-v3/counters.parquet")
}

#[test]
fn fixture_difference_coded_data_file_decodes_exactly() {
    let path = file_v3_path();
    let got = datafile::read_file(&OsStorage, &path, &RowFilter::default(), None).unwrap();
    assert_eq!(tuples(&got), tuples(&file_v3_rows()));
    let meta =
        ArrowReaderMetadata::load(&Bytes::from(std::fs::read(&path).unwrap()), ArrowReaderOptions::default()).unwrap();
    let value_int = meta.metadata().row_group(0).column(2);
    assert!(value_int.encodings().any(|e| e == parquet::basic::Encoding::BYTE_STREAM_SPLIT));
}

#[test]
#[ignore = "writes the committed compatibility fixture; run once, never again"]
fn generate_fixture_difference_coded_data_file() {
    let path = std::env::var_os("LOCKSTEP_FIXTURE_OUT").map_or_else(file_v3_path, PathBuf::from);
    assert!(!path.exists(), "{} exists: committed fixtures are never regenerated", path.display());
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    datafile::write_file(&OsStorage, &path, &file_v3_rows(), WriteOptions { zstd_level: 3 }).unwrap();
}

#[test]
fn fixture_wal_segments_decode_record_by_record() {
    let dir = fixture_copy();
    let wal_dir = dir.path().join("wal");
    let mut seen = Vec::new();
    crate::wal::replay_read_only(&OsStorage, &wal_dir, None, 0, &mut |rec| {
        let decoded = record::decode(rec.payload).map_err(|reason| Error::InvalidBatch { reason })?;
        seen.push((rec.segment, rec.payload[0], decoded));
        Ok(())
    })
    .unwrap();
    let keys = keys();
    let mut want = vec![(1, 1u8, wal_segment_1())];
    want.extend(wal_segment_2().into_iter().map(|r| (2, 1, r)));
    want.extend(wal_segment_3().into_iter().map(|r| (3, 2, r)));
    assert_eq!(seen.len(), want.len(), "records in the fixture's segments");
    for ((segment, tag, rec), (want_segment, want_tag, (defs, rows))) in seen.iter().zip(&want) {
        assert_eq!((segment, tag), (want_segment, want_tag), "segment and record tag");
        let want_defs: Vec<(SeriesId, SeriesKey)> = defs.iter().map(|&id| (id, keys[id as usize].clone())).collect();
        assert_eq!(rec.defs, want_defs, "definitions in segment {segment}");
        assert_eq!(tuples(&rec.rows), tuples(rows), "rows in segment {segment}");
    }
}

/// The first release's value encoding (`datafile/codec.rs` as of commit 49213e7): one scale
/// per series run, chosen first, then every value whose mantissa reproduces it at that scale.
fn encode_values_v1(series: &[u32], values: &[f64]) -> (Int64Array, Int8Array, Float64Array) {
    const POW10: [f64; 13] = [1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12];
    fn mantissa_at(v: f64, scale: usize) -> Option<i64> {
        if v.to_bits() == (-0.0f64).to_bits() {
            return None;
        }
        let p = POW10[scale];
        let m = (v * p).round();
        if m.abs() <= 9_007_199_254_740_992.0 && (m / p).to_bits() == v.to_bits() { Some(m as i64) } else { None }
    }
    fn min_scale(v: f64) -> Option<usize> {
        if !v.is_finite() {
            return None;
        }
        (0..=12).find(|&k| mantissa_at(v, k).is_some())
    }
    let (mut vint, mut vscale, mut vfloat) = (Vec::new(), Vec::new(), Vec::new());
    let mut start = 0;
    while start < values.len() {
        let mut end = start + 1;
        while end < values.len() && series[end] == series[start] {
            end += 1;
        }
        let run = &values[start..end];
        let mut scale = 0usize;
        for &v in run {
            if mantissa_at(v, scale).is_none()
                && let Some(k) = min_scale(v)
                && k > scale
            {
                scale = k;
            }
        }
        for &v in run {
            match mantissa_at(v, scale).filter(|_| v.is_finite()) {
                Some(m) => {
                    vint.push(Some(m));
                    vscale.push(Some(scale as i8));
                    vfloat.push(None);
                }
                None => {
                    vint.push(None);
                    vscale.push(None);
                    vfloat.push(Some(v));
                }
            }
        }
        start = end;
    }
    (Int64Array::from(vint), Int8Array::from(vscale), Float64Array::from(vfloat))
}

/// Writes a data file of the first format (`datafile.rs` as of commit 49213e7): `time`
/// required, dictionary-encoded `series_id` and `value_scale`, default page sizes.
fn write_file_v1(path: &Path, rows: &Rows) -> u64 {
    use parquet::arrow::ArrowWriter;
    use parquet::basic::{Compression, Encoding, ZstdLevel};
    use parquet::file::properties::{EnabledStatistics, WriterProperties};
    use parquet::schema::types::ColumnPath;

    let schema = Arc::new(Schema::new(vec![
        Field::new("series_id", DataType::UInt32, false),
        Field::new("time", DataType::Int64, false),
        Field::new("value_int", DataType::Int64, true),
        Field::new("value_scale", DataType::Int8, true),
        Field::new("value_float", DataType::Float64, true),
    ]));
    let col = |name: &str| ColumnPath::from(name);
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(3).unwrap()))
        .set_max_row_group_row_count(Some(256 * 1024))
        .set_statistics_enabled(EnabledStatistics::Chunk)
        .set_column_dictionary_enabled(col("time"), false)
        .set_column_encoding(col("time"), Encoding::DELTA_BINARY_PACKED)
        .set_column_dictionary_enabled(col("value_int"), false)
        .set_column_encoding(col("value_int"), Encoding::DELTA_BINARY_PACKED)
        .set_column_dictionary_enabled(col("value_float"), false)
        .set_column_encoding(col("value_float"), Encoding::BYTE_STREAM_SPLIT)
        .build();
    let (vint, vscale, vfloat) = encode_values_v1(&rows.series, &rows.value);
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(UInt32Array::from(rows.series.clone())) as ArrayRef,
            Arc::new(Int64Array::from(rows.time.clone())),
            Arc::new(vint),
            Arc::new(vscale),
            Arc::new(vfloat),
        ],
    )
    .unwrap();
    let mut writer = ArrowWriter::try_new(std::fs::File::create(path).unwrap(), schema, Some(props)).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
    std::fs::metadata(path).unwrap().len()
}

/// One WAL segment file: header plus framed records (`docs/format-wal.md`).
fn write_segment(dir: &Path, seq: u64, payloads: &[Vec<u8>]) {
    let mut out = Vec::new();
    out.extend_from_slice(b"LSTPWAL1");
    out.extend_from_slice(&seq.to_le_bytes());
    for p in payloads {
        let len = (p.len() as u32).to_le_bytes();
        let mut crc = crc32fast::Hasher::new();
        crc.update(&len);
        crc.update(p);
        out.extend_from_slice(&len);
        out.extend_from_slice(&crc.finalize().to_le_bytes());
        out.extend_from_slice(p);
    }
    std::fs::write(dir.join(format!("{seq:020}.wal")), out).unwrap();
}

fn file_entry(id: u64, partition: i64, rows: &Rows, bytes: u64) -> serde_json::Value {
    serde_json::json!({
        "id": id,
        "partition": partition,
        "path": format!("data/p{partition}/{id:012}.parquet"),
        "rows": rows.len(),
        "bytes": bytes,
        "min_time": rows.time.iter().min().unwrap(),
        "max_time": rows.time.iter().max().unwrap(),
        "min_series": rows.series[0],
        "max_series": rows.series[rows.len() - 1],
        "level": 0,
    })
}

/// Writes the fixture store (once; see the module docs). Run with
/// `LOCKSTEP_FIXTURE_OUT=/some/new/dir cargo nextest run -p lockstep-engine --run-ignored only
/// generate_fixture_store`; without the variable it writes the committed location, and it
/// refuses to write into an existing directory.
#[test]
#[ignore = "writes the committed compatibility fixture; run once, never again"]
fn generate_fixture_store() {
    let out = std::env::var_os("LOCKSTEP_FIXTURE_OUT").map_or_else(fixture_dir, PathBuf::from);
    assert!(!out.exists(), "{} exists: committed fixtures are never regenerated", out.display());
    let keys = keys();
    let key_refs =
        |ids: &[u32]| -> Vec<(SeriesId, &SeriesKey)> { ids.iter().map(|&i| (i, &keys[i as usize])).collect() };

    // Data files: the first format, then the current one.
    let (v1, v2) = (file_v1_rows(), file_v2_rows());
    std::fs::create_dir_all(out.join(format!("data/p{P}"))).unwrap();
    std::fs::create_dir_all(out.join(format!("data/p{}", P + 1))).unwrap();
    let v1_bytes = write_file_v1(&out.join(format!("data/p{P}/000000000001.parquet")), &v1);
    let v2_path = out.join(format!("data/p{}/000000000002.parquet", P + 1));
    let v2_stats = datafile::write_file(&OsStorage, &v2_path, &v2, WriteOptions { zstd_level: 3 }).unwrap();

    // Manifest and catalog (series 0-3; 4 and 5 are defined only in the WAL).
    let manifest = serde_json::json!({
        "version": 1,
        "partition_ns": H,
        "next_file_id": 3,
        "wal_checkpoint": 1,
        "files": [file_entry(1, P, &v1, v1_bytes), file_entry(2, P + 1, &v2, v2_stats.bytes)],
    });
    std::fs::write(out.join("manifest.json"), serde_json::to_vec_pretty(&manifest).unwrap()).unwrap();
    let series = serde_json::json!({ "version": 1, "series": keys[..4] });
    std::fs::write(out.join("series.json"), serde_json::to_vec(&series).unwrap()).unwrap();

    // WAL: segment 1 (checkpointed) and 2 with tag 1, segment 3 with tag 2.
    let wal = out.join("wal");
    std::fs::create_dir_all(&wal).unwrap();
    let (defs, rows) = wal_segment_1();
    write_segment(&wal, 1, &[record::encode_v1(&key_refs(&defs), &rows)]);
    let seg2: Vec<_> = wal_segment_2().iter().map(|(d, r)| record::encode_v1(&key_refs(d), r)).collect();
    write_segment(&wal, 2, &seg2);
    let seg3: Vec<_> = wal_segment_3().iter().map(|(d, r)| record::encode(&key_refs(d), r)).collect();
    write_segment(&wal, 3, &seg3);

    // Clock sync: direct offsets of h1 (2 ms ahead) and one fitted version.
    let mut clocks =
        crate::clock::ClockRegistry::open(Arc::new(OsStorage), &out.join("clock"), Default::default()).unwrap();
    let offsets: Vec<_> = (0..3)
        .map(|i| OffsetObservation {
            host: "h1".into(),
            local_time: T0 + i * H,
            offset_ns: 2_000_000,
            uncertainty_ns: 50_000,
        })
        .collect();
    clocks.add_offsets(&offsets).unwrap();
    assert_eq!(clocks.refit().unwrap(), 1);
}
