//! Store tests: round trips, last-write-wins, a model-based test, readers, retention and the
//! bad-data corpus; the crash and failure tests are in `faults`, sharing this module's
//! reference model and set-up.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod faults;
mod retire;
mod writers;

use std::collections::BTreeMap;
use std::sync::Arc;

use proptest::prelude::*;

use super::*;
use crate::error::ErrorKind;
use crate::model::{Name, WriteBatch};
use crate::series::SeriesFilter;
use crate::storage::{FaultyStorage, OsStorage};
use std::sync::atomic::Ordering;

const T0: i64 = 1_767_225_600_000_000_000; // 2026-01-01

fn cfg() -> StoreConfig {
    StoreConfig { max_future_ns: None, flush_rows: usize::MAX, ..Default::default() }
}

fn key(i: u32) -> SeriesKey {
    SeriesKey::new("m", [("host", format!("h{}", i % 3)), ("dev", format!("d{i}"))])
}

fn batch(samples: &[(u32, i64, f64)]) -> WriteBatch {
    let mut b = WriteBatch::default();
    for &(s, t, v) in samples {
        b.push(key(s), t, v);
    }
    b
}

/// Everything in the store as (series key, time) → value.
fn dump(store: &Store) -> BTreeMap<(String, i64), f64> {
    let rows = store.scan_all(ScanRequest::default()).unwrap();
    let mut out = BTreeMap::new();
    store
        .with_catalog(|c| {
            for i in 0..rows.len() {
                let k = c.key(rows.series[i]).unwrap().to_string();
                assert!(out.insert((k, rows.time[i]), rows.value[i]).is_none(), "duplicate row in scan");
            }
        })
        .unwrap();
    out
}

fn model_of(samples: &[(u32, i64, f64)], into: &mut BTreeMap<(String, i64), f64>) {
    for &(s, t, v) in samples {
        into.insert((key(s).to_string(), t), v);
    }
}

#[test]
fn write_flush_reopen_and_last_write_wins() {
    let dir = tempfile::tempdir().unwrap();
    let mut model = BTreeMap::new();
    {
        let store = Store::open(dir.path(), cfg()).unwrap();
        let a: Vec<_> = (0..100).map(|i| (i % 7, T0 + i as i64 * 1_000_000_000, i as f64)).collect();
        assert_eq!(store.write(&batch(&a)).unwrap().accepted, 100);
        model_of(&a, &mut model);
        store.flush().unwrap();
        // Overwrite some in the buffer: the buffer must win over the file.
        let b = vec![(0, T0, -1.0), (3, T0 + 3_000_000_000, -2.0)];
        store.write(&batch(&b)).unwrap();
        model_of(&b, &mut model);
        assert_eq!(dump(&store), model);
        store.flush().unwrap();
        assert_eq!(dump(&store), model, "after second flush (two files, newer wins)");
        let summary = store.compact(true).unwrap();
        assert_eq!(summary.files_in, 2);
        assert_eq!(dump(&store), model, "after compaction");
        let c = vec![(5, T0 + 7 * 3_600_000_000_000, 9.5)]; // another partition, only in the WAL
        store.write(&batch(&c)).unwrap();
        model_of(&c, &mut model);
    }
    let store = Store::open(dir.path(), cfg()).unwrap();
    assert_eq!(dump(&store), model, "after reopen (wal replay + files)");
    assert_eq!(store.manifest().unwrap().files.len(), 1);
}

#[test]
fn a_large_flush_is_two_files_split_at_a_series_boundary() {
    let dir = tempfile::tempdir().unwrap();
    let config = StoreConfig { parallel_flush_rows: 50, ..cfg() };
    let mut model = BTreeMap::new();
    {
        let store = Store::open(dir.path(), config.clone()).unwrap();
        // 9 series x 20 samples, written in time order across series (runs of one sample).
        let a: Vec<_> = (0..180).map(|i| (i % 9, T0 + (i / 9) as i64 * 1_000_000_000, f64::from(i))).collect();
        store.write(&batch(&a)).unwrap();
        model_of(&a, &mut model);
        store.flush().unwrap();
        let files = store.manifest().unwrap().files.clone();
        assert_eq!(files.len(), 2, "180 rows >= 50: two files");
        assert_eq!(files.iter().map(|f| f.stats.rows).sum::<u64>(), 180);
        assert!(files[0].stats.max_series < files[1].stats.min_series, "a series is in one file only: {files:?}");
        assert!(files.iter().all(|f| f.stats.rows >= 60), "split near the middle: {files:?}");
        assert_eq!(dump(&store), model);
        // Below the threshold: one file.
        let b = vec![(2, T0, -1.0), (7, T0 + 5_000_000_000, -2.0)];
        store.write(&batch(&b)).unwrap();
        model_of(&b, &mut model);
        store.flush().unwrap();
        assert_eq!(store.manifest().unwrap().files.len(), 3);
        assert_eq!(dump(&store), model, "the newest file wins over both halves");
    }
    let store = Store::open(dir.path(), config).unwrap();
    assert_eq!(dump(&store), model, "after reopen");
    assert_eq!(store.compact(true).unwrap().files_in, 3);
    assert_eq!(dump(&store), model, "after compaction");
}

#[test]
fn scan_filters_by_time_and_series() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), cfg()).unwrap();
    let a: Vec<_> = (0..1000).map(|i| (i % 10, T0 + i as i64 * 100_000_000, i as f64)).collect();
    store.write(&batch(&a)).unwrap();
    store.flush().unwrap();
    let b: Vec<_> = (0..1000).map(|i| (i % 10, T0 + 100_000_000_000 + i as i64, 0.5)).collect();
    store.write(&batch(&b)).unwrap();
    let id = store.with_catalog(|c| c.get(&key(4)).unwrap()).unwrap();
    let mut set = roaring::RoaringBitmap::new();
    set.insert(id);
    let rows = store
        .scan_all(ScanRequest {
            time: Some((T0 + 10_000_000_000, T0 + 100_000_000_100)),
            series: Some(set),
            value: None,
        })
        .unwrap();
    assert!(rows.series.iter().all(|&s| s == id));
    // From the file: i in [100, 1000) with i % 10 == 4 → 90 rows; from the buffer: i < 100 → 10.
    assert_eq!(rows.len(), 100);
    assert!(rows.time.windows(2).all(|w| w[0] < w[1]));
}

#[test]
fn invalid_samples_are_rejected_per_series_with_reasons() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(crate::wallclock::ManualClock(T0.into()));
    let config = StoreConfig { max_future_ns: Some(3_600_000_000_000), ..cfg() };
    let store = Store::open_with(dir.path(), config, Arc::new(OsStorage), clock).unwrap();
    let mut b = WriteBatch::default();
    b.push(key(1), T0, 1.0);
    b.push(key(2), T0, f64::NAN);
    b.push(key(3), T0, f64::INFINITY);
    b.push(key(4), -5, 1.0);
    b.push(key(5), T0 + 2 * 3_600_000_000_000, 1.0);
    b.push(SeriesKey::new("m", [("gpu", "0")]), T0, 1.0);
    let out = store.write(&b).unwrap();
    assert_eq!(out.accepted, 1);
    let reasons: Vec<String> = out.rejected.iter().map(|r| r.error.to_string()).collect();
    assert_eq!(reasons.len(), 5, "{reasons:?}");
    assert!(reasons[0].contains("not finite") && reasons[1].contains("not finite"), "{reasons:?}");
    assert!(reasons[2].contains("outside"), "{reasons:?}");
    assert!(reasons[3].contains("future"), "{reasons:?}");
    assert!(reasons[4].contains("no host label"), "{reasons:?}");
    assert!(out.rejected.iter().all(|r| r.error.kind() == ErrorKind::InvalidArgument));
}

#[derive(Debug, Clone)]
enum Op {
    Write(Vec<(u32, i64, i32)>),
    Flush,
    Compact,
    /// Drop without flushing (the WAL holds the data), then reopen.
    Crash,
    /// Crash with garbage appended to the newest WAL segment (a torn write).
    CrashTorn(Vec<u8>),
    /// A read-only snapshot taken now (kept while later ops run: it must not change).
    Reader,
    /// Flush, move the wall clock so that retention's cutoff is `T0 + k * 1000` (a partition
    /// boundary), and run a compaction pass (which applies retention first).
    Expire(i64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => proptest::collection::vec((0u32..6, 0i64..4_000, -50i32..50), 1..20).prop_map(Op::Write),
        2 => Just(Op::Flush),
        1 => Just(Op::Compact),
        1 => Just(Op::Crash),
        1 => proptest::collection::vec(any::<u8>(), 1..40).prop_map(Op::CrashTorn),
        2 => Just(Op::Reader),
        1 => (0i64..5).prop_map(Op::Expire),
    ]
}

/// What the model-based test expects a store (or a reader snapshot) to hold: (series, time) → value.
type Model = BTreeMap<(String, i64), f64>;

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    /// Random write/flush/compact/retention/crash/reopen sequences and read-only snapshots
    /// against a BTreeMap model.
    #[test]
    fn model_based(ops in proptest::collection::vec(op(), 1..25)) {
        let dir = tempfile::tempdir().unwrap();
        // Small partitions so that writes spread over several files and partitions; flushes of
        // 8 rows or more are split into two files written on two threads.
        const RETENTION: i64 = 1_000_000_000;
        let config = StoreConfig { partition_ns: 1_000, compaction_min_files: 2, parallel_flush_rows: 8, retention_ns: Some(RETENTION), ..cfg() };
        // Retention's cutoff starts far before the data and only moves by `Op::Expire`.
        let wall = Arc::new(crate::wallclock::ManualClock((T0 - 10 * RETENTION).into()));
        let open = || Store::open_with(dir.path(), config.clone(), Arc::new(OsStorage), wall.clone()).unwrap();
        let mut store = Some(open());
        // What the store shows = `in_files` overlaid by `buffered` (retention drops files only).
        let mut in_files: BTreeMap<(String, i64), f64> = BTreeMap::new();
        let mut buffered: BTreeMap<(String, i64), f64> = BTreeMap::new();
        let mut cutoff = i64::MIN;
        let expire = |in_files: &mut BTreeMap<(String, i64), f64>, cutoff: i64| {
            in_files.retain(|(_, t), _| (t.div_euclid(1_000) + 1).saturating_mul(1_000) > cutoff);
        };
        let mut model = BTreeMap::new();
        // Read-only snapshots with the model they must keep showing, whatever the writer does.
        let mut readers: Vec<(Store, Model)> = Vec::new();
        for op in ops {
            match op.clone() {
                Op::Write(samples) => {
                    let samples: Vec<(u32, i64, f64)> = samples.into_iter().map(|(s, t, v)| (s, T0 + t, v as f64)).collect();
                    store.as_ref().unwrap().write(&batch(&samples)).unwrap();
                    model_of(&samples, &mut buffered);
                }
                Op::Flush => {
                    store.as_ref().unwrap().flush().unwrap();
                    in_files.append(&mut buffered);
                }
                Op::Compact => {
                    store.as_ref().unwrap().compact(false).unwrap();
                    expire(&mut in_files, cutoff);
                }
                Op::Expire(k) => {
                    store.as_ref().unwrap().flush().unwrap();
                    in_files.append(&mut buffered);
                    cutoff = cutoff.max(T0 + k * 1_000);
                    wall.0.store(cutoff + RETENTION, std::sync::atomic::Ordering::SeqCst);
                    store.as_ref().unwrap().compact(false).unwrap();
                    expire(&mut in_files, cutoff);
                }
                Op::Crash => {
                    drop(store.take());
                    store = Some(open());
                }
                Op::Reader => {
                    let reader = Store::open_read_only(dir.path()).unwrap();
                    prop_assert!(reader.write(&batch(&[(0, T0, 1.0)])).is_err());
                    readers.push((reader, model.clone()));
                }
                Op::CrashTorn(garbage) => {
                    drop(store.take());
                    let wal = dir.path().join("wal");
                    if let Some(last) = OsStorage.list_dir(&wal).unwrap().last() {
                        use std::io::Write;
                        std::fs::OpenOptions::new().append(true).open(last).unwrap().write_all(&garbage).unwrap();
                    }
                    store = Some(open());
                }
            }
            let compacted = matches!(op, Op::Compact | Op::Expire(_));
            model = in_files.clone();
            model.extend(buffered.iter().map(|(k, v)| (k.clone(), *v)));
            // Every scanned row's series has a live key (`dump` names each row's series).
            prop_assert_eq!(&dump(store.as_ref().unwrap()), &model);
            // Every series with data is live in the catalog; after a compaction pass (which
            // retires what retention left without samples) exactly those are.
            let live: std::collections::BTreeSet<String> =
                store.as_ref().unwrap().with_catalog(|c| c.live().map(|(_, k)| k.to_string()).collect()).unwrap();
            let with_data: std::collections::BTreeSet<String> = model.keys().map(|(k, _)| k.clone()).collect();
            prop_assert!(with_data.is_subset(&live), "a series with data is not live: {:?} {:?}", with_data, live);
            if compacted {
                prop_assert_eq!(&live, &with_data, "a series without data is still live");
            }
            for (reader, seen) in &readers {
                prop_assert_eq!(&dump(reader), seen, "a reader's snapshot changed");
            }
        }
        // A reader opened at the end sees exactly what the writer acknowledged.
        prop_assert_eq!(&dump(&Store::open_read_only(dir.path()).unwrap()), &model);
    }
}

#[test]
fn bad_data_corpus_gives_typed_errors() {
    // Garbage manifest.
    let dir = tempfile::tempdir().unwrap();
    drop(Store::open(dir.path(), cfg()).unwrap());
    std::fs::write(dir.path().join("manifest.json"), b"\x00garbage").unwrap();
    let e = Store::open(dir.path(), cfg()).unwrap_err();
    assert!(matches!(e, Error::ManifestCorrupt { .. }), "{e}");
    assert_eq!(e.kind(), ErrorKind::DataCorruption);

    // Garbage series catalog.
    let dir = tempfile::tempdir().unwrap();
    drop(Store::open(dir.path(), cfg()).unwrap());
    std::fs::write(dir.path().join("series.json"), b"[").unwrap();
    let e = Store::open(dir.path(), cfg()).unwrap_err();
    assert!(matches!(e, Error::CatalogCorrupt { .. }), "{e}");

    // A data file replaced by one with the wrong schema: the scan fails with a typed error
    // and the acknowledged data in the WAL is still there.
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), cfg()).unwrap();
    store.write(&batch(&[(1, T0, 1.0)])).unwrap();
    store.flush().unwrap();
    store.write(&batch(&[(2, T0 + 1, 2.0)])).unwrap();
    let file = dir.path().join(&store.manifest().unwrap().files[0].path);
    drop(store);
    {
        use arrow::array::Int64Array;
        let schema = Arc::new(arrow::datatypes::Schema::new(vec![arrow::datatypes::Field::new(
            "x",
            arrow::datatypes::DataType::Int64,
            false,
        )]));
        let batch =
            arrow::array::RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(vec![1i64]))]).unwrap();
        let mut w = parquet::arrow::ArrowWriter::try_new(std::fs::File::create(&file).unwrap(), schema, None).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
    }
    let store = Store::open(dir.path(), cfg()).unwrap();
    let e = store.scan_all(ScanRequest::default()).unwrap_err();
    assert!(matches!(e, Error::DataFileInvalid { .. }), "{e}");
    let id = store.with_catalog(|c| c.get(&key(2)).unwrap()).unwrap();
    let mut set = roaring::RoaringBitmap::new();
    set.insert(id);
    let rows = store.scan_all(ScanRequest { time: Some((T0 + 1, T0 + 2)), series: Some(set), value: None }).unwrap();
    assert_eq!(rows.value, vec![2.0], "wal data survives a broken data file");

    // Zero-length and garbage WAL segments in the newest position are torn tails.
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), cfg()).unwrap();
    store.write(&batch(&[(1, T0, 1.0)])).unwrap();
    drop(store);
    std::fs::write(dir.path().join("wal").join(format!("{:020}.wal", 999)), b"").unwrap();
    let store = Store::open(dir.path(), cfg()).unwrap();
    assert_eq!(dump(&store).len(), 1);
}

#[test]
fn retention_drops_whole_expired_partitions_only() {
    let dir = tempfile::tempdir().unwrap();
    let hour = 3_600_000_000_000i64;
    let clock = Arc::new(crate::wallclock::ManualClock((T0 + 10 * hour).into()));
    let config = StoreConfig { retention_ns: Some(3 * hour), ..cfg() };
    let store = Store::open_with(dir.path(), config, Arc::new(OsStorage), clock.clone()).unwrap();
    // Partitions at T0 (expired), T0+7h (straddles the cutoff at T0+7h: its end is later, kept), T0+9h.
    let samples = vec![(1, T0 + 5, 1.0), (1, T0 + 7 * hour + 5, 2.0), (1, T0 + 9 * hour, 3.0)];
    store.write(&batch(&samples)).unwrap();
    store.flush().unwrap();
    let summary = store.compact(false).unwrap();
    assert_eq!(summary.files_expired, 1);
    let values: Vec<f64> = dump(&store).into_values().collect();
    assert_eq!(values, vec![2.0, 3.0]);
    drop(store);
    let store = Store::open(dir.path(), cfg()).unwrap();
    assert_eq!(dump(&store).len(), 2, "expiry is durable");
    let files = OsStorage.list_dir(&dir.path().join("data")).unwrap();
    let parquet: usize = files.iter().map(|d| OsStorage.list_dir(d).unwrap().len()).sum();
    assert_eq!(parquet, 2, "the expired file is deleted from disk");
}

/// A reader whose snapshot races a flush: the writer flushes (saving a catalog increment with
/// the series the reader had from the WAL) and defines another series between the reader's two
/// reads of the manifest. The retry keeps the catalog (without the WAL's series), reads only
/// the new increment and replays the new WAL: it sees exactly what the writer acknowledged,
/// every sample under its series, and read `series.json` once.
#[test]
fn a_snapshot_retry_keeps_its_catalog_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let writer = Arc::new(Store::open(dir.path(), cfg()).unwrap());
    let first: Vec<_> = (0..30).map(|s| (s, T0 + i64::from(s), f64::from(s))).collect();
    writer.write(&batch(&first)).unwrap();
    writer.flush().unwrap();
    // In the WAL only when the reader starts.
    let wal_only = [(30, T0 + 100, 1.5), (31, T0 + 101, 2.5)];
    writer.write(&batch(&wal_only)).unwrap();
    let later = [(32, T0 + 200, 3.5)];
    let mut model = BTreeMap::new();
    for s in [&first[..], &wal_only, &later] {
        model_of(s, &mut model);
    }
    let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let hook = {
        let (writer, ran) = (writer.clone(), ran.clone());
        crate::storage::hooked::once(move || {
            writer.flush().unwrap();
            writer.write(&batch(&later)).unwrap();
            ran.store(true, Ordering::SeqCst);
        })
    };
    // The writer acts just before the reader's second read of the manifest (the check that
    // its snapshot is still current); reads of `series.json` are counted.
    let manifest_reads = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let catalog_reads = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let storage = {
        let (manifest_reads, catalog_reads) = (manifest_reads.clone(), catalog_reads.clone());
        crate::storage::hooked::Hooked::new(move |event, path| {
            if event != crate::storage::hooked::Event::BeforeRead {
                return;
            }
            if path.ends_with("series.json") {
                catalog_reads.fetch_add(1, Ordering::SeqCst);
            }
            if path.ends_with("manifest.json") && manifest_reads.fetch_add(1, Ordering::SeqCst) + 1 == 2 {
                hook();
            }
        })
    };
    let reader =
        Store::open_read_only_with(dir.path(), cfg(), Arc::new(storage), Arc::new(crate::wallclock::SystemClock))
            .unwrap();
    assert!(ran.load(Ordering::SeqCst), "the writer ran inside the snapshot");
    assert!(manifest_reads.load(Ordering::SeqCst) >= 4, "a second attempt");
    assert_eq!(dump(&reader), model, "the writer's flush and its later write are both seen");
    assert_eq!(catalog_reads.load(Ordering::SeqCst), 1, "series.json read once");
    assert_eq!(reader.with_catalog(|c| c.len()).unwrap(), 33);
}

#[test]
fn writers_outrunning_a_slow_flush_wait_instead_of_growing_the_buffer() {
    let dir = tempfile::tempdir().unwrap();
    let flush_rows = 1_000;
    let config = StoreConfig { flush_rows, ..cfg() };
    // Every data file takes 300 ms to create: a flush slower than the writers.
    let storage = Arc::new(
        FaultyStorage::new(Arc::new(OsStorage), u64::MAX)
            .with_slow_create("parquet", std::time::Duration::from_millis(300)),
    );
    let store =
        Arc::new(Store::open_with(dir.path(), config, storage, Arc::new(crate::wallclock::SystemClock)).unwrap());
    const ROWS_PER_WRITE: u32 = 100;
    let rows_per_write = ROWS_PER_WRITE;
    fn write(store: &Store, n: u32) {
        let samples: Vec<(u32, i64, f64)> =
            (0..ROWS_PER_WRITE).map(|i| (i % 7, T0 + i64::from(n) * 1_000 + i64::from(i), 1.0)).collect();
        store.write(&batch(&samples)).unwrap();
    }
    // Four writers; the first to cross flush_rows flushes (300 ms), the others keep writing.
    let mut max_buffered = 0;
    let writers: Vec<_> = (0..4u32)
        .map(|w| {
            let store = store.clone();
            std::thread::spawn(move || {
                let mut max = 0;
                for n in 0..60 {
                    write(&store, w * 1_000 + n);
                    max = max.max(store.buffered_rows().unwrap());
                }
                max
            })
        })
        .collect();
    for w in writers {
        max_buffered = max_buffered.max(w.join().unwrap());
    }
    // Bound: the buffer being flushed (< factor × flush_rows + one write per writer) plus the
    // active one (the same), whatever the flush's speed. Without the wait, the writers would
    // pile up most of the 24,000 rows during the slow flushes.
    let bound = 2 * (BACKPRESSURE_FACTOR * flush_rows + 4 * rows_per_write as usize);
    assert!(max_buffered <= bound, "buffered {max_buffered} rows, bound {bound}");
    assert!(store.metrics().flush_waits.load(Ordering::Relaxed) > 0);
    // Every acknowledged sample is there.
    store.flush().unwrap();
    assert_eq!(dump(&store).len(), 4 * 60 * rows_per_write as usize);
}

/// Every file under `dir` with its length and modification time.
fn tree(dir: &std::path::Path) -> BTreeMap<std::path::PathBuf, (u64, std::time::SystemTime)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let md = e.metadata().unwrap();
            if md.is_dir() {
                stack.push(e.path());
            }
            out.insert(e.path(), (md.len(), md.modified().unwrap()));
        }
    }
    out
}

#[test]
fn one_writer_and_readers_that_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let writer = Store::open(dir.path(), cfg()).unwrap();
    let flushed: Vec<_> = (0..50).map(|i| (i % 5, T0 + i as i64, i as f64)).collect();
    writer.write(&batch(&flushed)).unwrap();
    writer.flush().unwrap();
    let buffered: Vec<_> = (0..30).map(|i| (i % 4, T0 + 1_000 + i as i64, -(i as f64))).collect();
    writer.write(&batch(&buffered)).unwrap();
    let mut model = BTreeMap::new();
    model_of(&flushed, &mut model);
    model_of(&buffered, &mut model);

    // A second writer is refused at once, naming the holder.
    let e = Store::open(dir.path(), cfg()).unwrap_err();
    assert!(matches!(e, Error::StoreLocked { .. }), "{e}");
    assert!(e.to_string().contains(&format!("pid {}", std::process::id())), "{e}");

    // Leftovers a reader must not "repair": an orphan data file, a staging file, a torn WAL tail.
    let orphan = dir.path().join("data").join("p0").join("000000009999.parquet");
    std::fs::create_dir_all(orphan.parent().unwrap()).unwrap();
    std::fs::write(&orphan, b"not yet adopted").unwrap();
    std::fs::write(dir.path().join("staging").join("x.parquet"), b"spill").unwrap();
    let before = tree(dir.path());

    // A reader sees flushed and acknowledged-but-buffered rows (from the WAL) ...
    let reader = Store::open_read_only(dir.path()).unwrap();
    assert_eq!(dump(&reader), model);
    assert!(reader.is_read_only());
    let e = reader.write(&batch(&[(0, T0, 1.0)])).unwrap_err();
    assert!(matches!(e, Error::ReadOnly { .. }), "{e}");
    assert!(reader.flush().is_err() && reader.compact(true).is_err());
    drop(reader);
    // ... and changed nothing on disk.
    assert_eq!(tree(dir.path()), before);

    // The writer goes on; the lock is released when it is dropped.
    drop(writer);
    let writer = Store::open(dir.path(), cfg()).unwrap();
    assert_eq!(dump(&writer), model);
    assert!(!orphan.exists(), "orphans are removed by the next writer");
}

/// A reader replaying a WAL that defines thousands of series (with its names read in place,
/// `SeriesCatalog::get_or_insert_parts`) ends with the writer's catalog: the same key under
/// every id, the same label keys in the same order (one first seen in the WAL included), the
/// same postings for label matchers, names shared, and every acknowledged sample.
#[test]
fn a_reader_replaying_many_new_series_has_the_writers_ids_and_postings() {
    let dir = tempfile::tempdir().unwrap();
    let writer = Store::open(dir.path(), cfg()).unwrap();
    let pod_key = |generation: usize, i: usize| {
        let mut labels = vec![
            ("host".to_string(), format!("node-{:02}", i % 13)),
            ("gpu".to_string(), (i % 8).to_string()),
            ("pod".to_string(), format!("trainer-{generation}-{:04}", i / 8)),
        ];
        if generation >= 2 {
            labels.push(("rank".to_string(), i.to_string()));
        }
        SeriesKey::new(if i.is_multiple_of(3) { "gpu.util" } else { "gpu.temp" }, labels)
    };
    let mut sent = 0;
    for generation in 0..4usize {
        for chunk in 0..5 {
            let mut b = WriteBatch::default();
            for i in chunk * 400..(chunk + 1) * 400 {
                // Each series twice in its batch, and the previous generation's again: known
                // series in the records beside the new ones.
                for (j, t) in [(generation, 0), (generation, 1), (generation.saturating_sub(1), 2)] {
                    b.push(pod_key(j, i), T0 + (generation * 10 + t) as i64, i as f64);
                    sent += 1;
                }
            }
            assert_eq!(writer.write(&b).unwrap().accepted, 1200);
        }
        if generation == 0 {
            writer.flush().unwrap(); // generation 0 in the catalog file, the rest only in the WAL
        }
    }
    let reader = Store::open_read_only(dir.path()).unwrap();
    let catalog = |s: &Store| s.with_catalog(|c| (c.keys().to_vec(), c.label_keys())).unwrap();
    let (keys, label_keys) = catalog(&reader);
    assert_eq!(keys.len(), 4 * 2000);
    assert_eq!((&keys, &label_keys), (&catalog(&writer).0, &catalog(&writer).1));
    assert_eq!(label_keys, ["host", "gpu", "pod", "rank"]);
    let filters = [
        SeriesFilter { metrics: Some(vec!["gpu.util".into()]), labels: vec![] },
        SeriesFilter { metrics: None, labels: vec![("pod".into(), vec![Some("trainer-3-0017".into())])] },
        SeriesFilter {
            metrics: Some(vec!["gpu.temp".into()]),
            labels: vec![("host".into(), vec![Some("node-05".into())]), ("rank".into(), vec![None])],
        },
        SeriesFilter { metrics: None, labels: vec![("rank".into(), vec![Some("1999".into()), Some("7".into())])] },
    ];
    for f in &filters {
        let (got, want) =
            (reader.with_catalog(|c| c.select(f)).unwrap(), writer.with_catalog(|c| c.select(f)).unwrap());
        assert!(!got.is_empty(), "{f:?}");
        assert_eq!(got, want, "{f:?}");
    }
    let key = |i: usize| keys[i].as_ref().unwrap();
    let (a, b) = (key(2500), key(7999));
    assert_eq!((a.metric.as_str(), b.metric.as_str()), ("gpu.temp", "gpu.temp"));
    assert!(Name::ptr_eq(&a.metric, &b.metric) && Name::ptr_eq(&a.labels["host"], &key(2500 + 13).labels["host"]));
    assert_eq!(reader.scan_all(ScanRequest::default()).unwrap().len(), sent);
    assert_eq!(dump(&reader), dump(&writer));
}

/// The WAL segments of a store directory, in seq order.
fn wal_segments(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out: Vec<_> = std::fs::read_dir(dir.join("wal")).unwrap().map(|e| e.unwrap().path()).collect();
    out.sort();
    out
}

#[test]
fn a_wal_segment_of_another_store_is_refused_by_writers_and_readers() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut model = BTreeMap::new();
    let mut ids = Vec::new();
    for (dir, samples) in [(&a, vec![(0, T0, 1.0), (1, T0, 2.0)]), (&b, vec![(7, T0, 70.0), (8, T0 + 1, 80.0)])] {
        let store = Store::open(dir.path(), cfg()).unwrap();
        let id = store.manifest().unwrap().store_id.unwrap();
        store.write(&batch(&samples)).unwrap();
        if ids.is_empty() {
            model_of(&samples, &mut model);
        }
        ids.push(id);
        drop(store); // not flushed: the rows are only in the WAL
    }
    assert_ne!(ids[0], ids[1], "every store gets its own id");
    // A fresh store's segments carry its id (format version 2).
    let ours = wal_segments(a.path());
    let header = std::fs::read(&ours[0]).unwrap();
    assert_eq!((&header[..8], &header[16..32]), (&b"LSTPWAL2"[..], &ids[0].0[..]));

    // B's segment copied into A's WAL and renumbered as its next segment.
    let theirs = wal_segments(b.path());
    let seq: u64 = ours.last().unwrap().file_stem().unwrap().to_str().unwrap().parse().unwrap();
    let planted = a.path().join("wal").join(format!("{:020}.wal", seq + 1));
    std::fs::copy(&theirs[0], &planted).unwrap();
    let before = std::fs::read(&planted).unwrap();
    let check = |e: Error| {
        assert_eq!(e.kind(), ErrorKind::DataCorruption);
        let message = e.to_string();
        assert!(
            matches!(&e, Error::WalForeignSegment { path, found, expected }
                if *path == planted && *found == ids[1].to_string() && *expected == ids[0].to_string()),
            "{e:?}"
        );
        assert!(message.contains("Move the file") && message.contains(&ids[1].to_string()), "{message}");
    };
    check(Store::open(a.path(), cfg()).unwrap_err());
    check(Store::open_read_only(a.path()).unwrap_err());
    assert_eq!(std::fs::read(&planted).unwrap(), before, "neither open changed the segment");

    // Moved away, the store opens with its own rows only, and keeps its id across reopens.
    std::fs::remove_file(&planted).unwrap();
    let store = Store::open(a.path(), cfg()).unwrap();
    assert_eq!(dump(&store), model);
    store.write(&batch(&[(2, T0, 3.0)])).unwrap();
    model_of(&[(2, T0, 3.0)], &mut model);
    store.close().unwrap();
    let store = Store::open(a.path(), cfg()).unwrap();
    assert_eq!((dump(&store), store.manifest().unwrap().store_id), (model, Some(ids[0])));
}

#[test]
fn reader_snapshot_survives_compaction_and_retention() {
    let dir = tempfile::tempdir().unwrap();
    let config = StoreConfig { partition_ns: 1_000, compaction_min_files: 2, ..cfg() };
    let writer = Store::open(dir.path(), config.clone()).unwrap();
    let mut model = BTreeMap::new();
    for round in 0..3i64 {
        let s: Vec<_> =
            (0..40).map(|i| (i % 3, T0 + round * 7 + i as i64 * 50, (round * 100 + i as i64) as f64)).collect();
        writer.write(&batch(&s)).unwrap();
        writer.flush().unwrap();
        model_of(&s, &mut model);
    }
    let reader = Store::open_read_only(dir.path()).unwrap();
    let files_before = writer.manifest().unwrap().files.len();
    let summary = writer.compact(false).unwrap();
    assert!(summary.files_in >= 2, "{summary:?}");
    // The compacted inputs are gone from disk; the reader still reads its snapshot.
    let live: Vec<_> = std::fs::read_dir(dir.path().join("data")).unwrap().collect();
    assert!(!live.is_empty());
    assert!(writer.manifest().unwrap().files.len() < files_before);
    assert_eq!(dump(&reader), model);
    assert_eq!(dump(&Store::open_read_only(dir.path()).unwrap()), model);
    // Retention (the data is from 2026-01-01, far older than 30 days) drops every file; the
    // reader's snapshot still reads, a new reader sees the empty store.
    drop(writer);
    let day = 86_400_000_000_000;
    let writer = Store::open(dir.path(), StoreConfig { retention_ns: Some(30 * day), ..config }).unwrap();
    let expired = writer.compact(false).unwrap().files_expired;
    assert!(expired >= 1 && writer.manifest().unwrap().files.is_empty(), "{expired}");
    assert_eq!(dump(&reader), model);
    assert!(dump(&Store::open_read_only(dir.path()).unwrap()).is_empty());
}

#[test]
fn refuses_what_looks_wrong() {
    let dir = tempfile::tempdir().unwrap();
    // Not a store: readers get a clear error and nothing is created.
    let missing = dir.path().join("typo");
    let e = Store::open_read_only(&missing).unwrap_err();
    assert!(matches!(e, Error::NoStore { .. }) && e.to_string().contains("no Lockstep store at"), "{e}");
    assert!(!missing.exists());
    // A store that lost its manifest is refused by readers and writers, files untouched.
    let db = dir.path().join("db");
    {
        let store = Store::open(&db, cfg()).unwrap();
        store.write(&batch(&[(0, T0, 1.0), (1, T0, 2.0)])).unwrap();
        store.flush().unwrap();
    }
    std::fs::remove_file(db.join("manifest.json")).unwrap();
    let before = tree(&db);
    for e in [Store::open_read_only(&db).unwrap_err(), Store::open(&db, cfg()).unwrap_err()] {
        assert!(matches!(e, Error::ManifestMissing { files, .. } if files >= 1), "{e}");
        // It names the way that keeps acknowledged writes first (a writer's local directory of a
        // store on object storage), and what moving the files away costs.
        let text = e.to_string();
        assert!(text.contains("restore manifest.json") && text.contains("give that store's --data-url"), "{e}");
        assert!(text.contains("discards what they hold"), "{e}");
    }
    let mut after = tree(&db);
    after.remove(&db.join("LOCK"));
    let mut before = before;
    before.remove(&db.join("LOCK"));
    assert_eq!(after, before);
}

/// A writer killed after adding clock input but before fitting it (an import's last step)
/// leaves stale models; the next writer's open fits them, so models match the stored input.
#[test]
fn stale_clock_models_are_refitted_by_the_next_writer() {
    use crate::clock::OffsetObservation;
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path(), cfg()).unwrap();
        let obs: Vec<OffsetObservation> = (0..50)
            .map(|i| OffsetObservation {
                host: "h0".into(),
                local_time: T0 + i * 10_000_000_000,
                offset_ns: 2_000,
                uncertainty_ns: 50,
            })
            .collect();
        store.with_clocks(|r| r.add_offsets(&obs)).unwrap();
        assert_eq!(store.clock_models().unwrap().version(), 0, "added, not fitted: the 'kill' point");
    }
    // A reader does not write a version ...
    assert_eq!(Store::open_read_only(dir.path()).unwrap().clock_models().unwrap().version(), 0);
    // ... the next writer fits the stored input.
    let store = Store::open(dir.path(), cfg()).unwrap();
    let models = store.clock_models().unwrap();
    assert_eq!(models.version(), 1);
    assert_eq!(models.inputs(), store.with_clocks(|r| r.input_counts()).unwrap());
}
