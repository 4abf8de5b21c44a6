//! Retiring series that retention left without samples (`store/retire.rs`): which series go,
//! which stay (samples buffered, written during the pass, an open import), and that the
//! retirement is durable, and redone after a crash kept it from being saved.

use super::*;
use crate::wallclock::ManualClock;

const HOUR: i64 = 3_600_000_000_000;

/// A store whose retention (3 h, hourly partitions) drops the partitions before `T0 + 7h`.
fn open(dir: &std::path::Path, storage: Arc<dyn Storage>) -> Arc<Store> {
    let clock = Arc::new(ManualClock((T0 + 10 * HOUR).into()));
    let config = StoreConfig { retention_ns: Some(3 * HOUR), ..cfg() };
    Arc::new(Store::open_with(dir, config, storage, clock).unwrap())
}

fn id(store: &Store, series: u32) -> Option<SeriesId> {
    store.series_id(&key(series)).unwrap()
}

/// Series 0 with a sample in an expired partition only, series 1 in a live one; flushed.
fn expired_0_live_1(store: &Store) {
    store.write(&batch(&[(0, T0, 1.0), (1, T0 + 9 * HOUR, 1.0)])).unwrap();
    store.flush().unwrap();
}

/// Runs `f` in the next retirement on this thread, between its scan and its locks.
fn after_scan(f: impl FnOnce() + 'static) {
    crate::store::retire::tests::AFTER_SCAN.with(|h| *h.borrow_mut() = Some(Box::new(f)));
}

/// The model of `samples` (as `dump` shows a store).
fn model(samples: &[(u32, i64, f64)]) -> Model {
    let mut m = Model::new();
    model_of(samples, &mut m);
    m
}

/// Series 0 only has samples in an expired partition, series 1 there and in a live one: the
/// pass that expires the old partition retires series 0 alone (no key, no lookup, no filter,
/// a smaller `series.json`); written again, series 0 is a new series, and the retirement holds
/// for a reopened writer and for readers.
#[test]
fn retention_retires_the_series_it_left_without_samples() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), Arc::new(OsStorage));
    store.write(&batch(&[(0, T0 + 5, 1.0), (1, T0 + 5, 2.0), (1, T0 + 9 * HOUR, 3.0)])).unwrap();
    store.flush().unwrap();
    let (a, b) = (id(&store, 0).unwrap(), id(&store, 1).unwrap());
    let catalog_bytes = || std::fs::metadata(dir.path().join("series.json")).unwrap().len();
    let before = catalog_bytes();
    let summary = store.compact(false).unwrap();
    assert_eq!((summary.files_expired, summary.series_retired), (1, 1));
    assert_eq!(store.metrics().series_retired.load(Ordering::Relaxed), 1);
    assert_eq!(store.catalog_generation(), 1);
    assert!(catalog_bytes() < before, "series.json holds the live series only");
    let retired = |s: &Store| {
        assert_ne!(id(s, 0), Some(a));
        assert_eq!(id(s, 1), Some(b));
        assert!(s.series_key(a).unwrap().is_none());
        s.with_catalog(|c| {
            assert!(c.key(a).is_none());
            assert!(!c.select(&SeriesFilter::default()).contains(a));
            let f = SeriesFilter { metrics: Some(vec!["m".into()]), labels: vec![] };
            assert!(!c.select(&f).contains(a));
            // `d0` is a value of a live series only once series 0 is written again.
            assert_eq!(c.label_values("dev").contains(&"d0".to_string()), c.get(&key(0)).is_some());
        })
        .unwrap();
    };
    retired(&store);
    // Written again: a new id; the old data of series 1 and the new of series 0 read back.
    let later = [(0, T0 + 9 * HOUR + 1, 4.0), (1, T0 + 9 * HOUR + 1, 5.0)];
    store.write(&batch(&later)).unwrap();
    assert_eq!(id(&store, 0), Some(2));
    let mut want = model(&[(1, T0 + 9 * HOUR, 3.0)]);
    model_of(&later, &mut want);
    assert_eq!(dump(&store), want);
    // A reader now (its WAL replay defines series 0 anew), a reopened writer (the same), and
    // both again after a flush saved the new series.
    let reader = Store::open_read_only(dir.path()).unwrap();
    retired(&reader);
    assert_eq!((id(&reader, 0), dump(&reader)), (Some(2), want.clone()));
    drop(store);
    let store = open(dir.path(), Arc::new(OsStorage));
    retired(&store);
    assert_eq!((id(&store, 0), dump(&store)), (Some(2), want.clone()));
    store.flush().unwrap();
    drop(store);
    let reader = Store::open_read_only(dir.path()).unwrap();
    assert_eq!((id(&reader, 0), dump(&reader)), (Some(2), want.clone()));
    let report = reader.check(1, &|_, _| {}).unwrap();
    assert!(report.problems.is_empty(), "{report:?}");
}

/// Series with samples only in the write buffer stay: a late sample for an expired partition
/// (series 1), samples written during the pass after its scan of the files, buffered (series
/// 2) or flushed into a new file (series 3). Series 0 goes. Once the late sample's partition is
/// flushed and expired in turn, series 1 goes too.
#[test]
fn series_of_buffered_or_concurrent_writes_stay() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), Arc::new(OsStorage));
    store.write(&batch(&[(0, T0, 1.0), (1, T0, 1.0), (2, T0, 1.0), (3, T0, 1.0), (4, T0 + 9 * HOUR, 1.0)])).unwrap();
    store.flush().unwrap();
    store.write(&batch(&[(1, T0 + HOUR, 2.0)])).unwrap();
    let hook = {
        let store = store.clone();
        move || {
            store.write(&batch(&[(3, T0 + 9 * HOUR + 3, 3.0)])).unwrap();
            store.flush().unwrap();
            store.write(&batch(&[(2, T0 + 9 * HOUR + 2, 2.0)])).unwrap();
        }
    };
    after_scan(hook);
    let summary = store.compact(false).unwrap();
    assert!(crate::store::retire::tests::AFTER_SCAN.with(|h| h.borrow().is_none()), "the hook ran");
    assert_eq!(summary.series_retired, 1);
    assert_eq!((0..5).map(|s| id(&store, s).is_some()).collect::<Vec<_>>(), [false, true, true, true, true]);
    let want = model(&[
        (1, T0 + HOUR, 2.0),
        (2, T0 + 9 * HOUR + 2, 2.0),
        (3, T0 + 9 * HOUR + 3, 3.0),
        (4, T0 + 9 * HOUR, 1.0),
    ]);
    assert_eq!(dump(&store), want);
    // The late sample's partition is expired once flushed: series 1 has nothing left.
    store.flush().unwrap();
    let summary = store.compact(false).unwrap();
    assert_eq!((summary.files_expired, summary.series_retired), (1, 1));
    assert_eq!(id(&store, 1), None);
    assert_eq!(store.with_catalog(|c| (c.len(), c.live_len())).unwrap(), (5, 3));
}

/// No series is retired while a bulk import is open (its ids are resolved long before its
/// commit); the first pass after it ends retires them.
#[test]
fn an_open_import_puts_retirement_off() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), Arc::new(OsStorage));
    expired_0_live_1(&store);
    let mut import = store.bulk_import();
    let summary = store.compact(false).unwrap();
    assert_eq!((summary.files_expired, summary.series_retired), (1, 0));
    assert!(id(&store, 0).is_some());
    // The import writes series 0 (resolved while it is open), then commits.
    import.write(&batch(&[(0, T0 + 9 * HOUR, 2.0)])).unwrap();
    import.commit().unwrap();
    assert_eq!(store.compact(false).unwrap().series_retired, 0, "series 0 has the import's sample");
    assert_eq!(dump(&store), model(&[(0, T0 + 9 * HOUR, 2.0), (1, T0 + 9 * HOUR, 1.0)]));
    // And a series an import only resolved (an import that failed) is retired once it is
    // over, with series 6, whose late sample's partition retention drops meanwhile.
    store.write(&batch(&[(6, T0 + HOUR, 1.0)])).unwrap();
    store.flush().unwrap();
    let import = store.bulk_import();
    store.resolve_series(&key(5)).unwrap();
    let summary = store.compact(false).unwrap();
    assert_eq!((summary.files_expired, summary.series_retired), (1, 0));
    drop(import);
    assert_eq!(store.compact(false).unwrap().series_retired, 2, "put off, then done");
    assert_eq!((id(&store, 5), id(&store, 6)), (None, None));
}

/// A crash after the retirement but before the catalog was saved: the series are live again
/// on reopen, and the first pass of the reopened store retires them again.
#[test]
fn a_retirement_lost_in_a_crash_is_done_again() {
    let dir = tempfile::tempdir().unwrap();
    let faulty = Arc::new(FaultyStorage::new(Arc::new(OsStorage), u64::MAX));
    let store = open(dir.path(), faulty.clone());
    expired_0_live_1(&store);
    let crash = faulty.clone();
    after_scan(move || crash.crash());
    assert!(store.compact(false).is_err(), "the catalog could not be saved");
    assert_eq!(id(&store, 0), None, "retired in memory");
    drop(store);
    let store = open(dir.path(), Arc::new(OsStorage));
    assert!(id(&store, 0).is_some(), "the retirement was not saved: series 0 is back");
    assert_eq!(dump(&store), model(&[(1, T0 + 9 * HOUR, 1.0)]));
    let summary = store.compact(false).unwrap();
    assert_eq!((summary.files_expired, summary.series_retired), (0, 1));
    drop(store);
    assert_eq!(id(&Store::open_read_only(dir.path()).unwrap(), 0), None);
}

/// A key written again after its retirement, before the retirement was saved, then a crash:
/// the WAL defines the key under a new id while the catalog on disk still has it live under
/// the old one. The replay retires the old id and opens with the new (writer and reader).
#[test]
fn a_key_redefined_before_its_retirement_was_saved_replays() {
    let dir = tempfile::tempdir().unwrap();
    let faulty = Arc::new(FaultyStorage::new(Arc::new(OsStorage), u64::MAX));
    let store = open(dir.path(), faulty.clone());
    expired_0_live_1(&store);
    let deny = faulty.clone();
    after_scan(move || deny.deny_create(Some("tmp")));
    assert!(store.compact(false).is_err(), "series.json.tmp cannot be created");
    faulty.deny_create(None);
    store.write(&batch(&[(0, T0 + 9 * HOUR + 1, 2.0)])).unwrap();
    assert_eq!(id(&store, 0), Some(2));
    drop(store);
    let want = model(&[(0, T0 + 9 * HOUR + 1, 2.0), (1, T0 + 9 * HOUR, 1.0)]);
    let reader = Store::open_read_only(dir.path()).unwrap();
    assert_eq!((id(&reader, 0), dump(&reader)), (Some(2), want.clone()));
    let store = open(dir.path(), Arc::new(OsStorage));
    assert_eq!((id(&store, 0), dump(&store)), (Some(2), want.clone()));
    assert!(store.series_key(0).unwrap().is_none());
    store.flush().unwrap();
    drop(store);
    let reader = Store::open_read_only(dir.path()).unwrap();
    assert_eq!((id(&reader, 0), dump(&reader)), (Some(2), want));
    assert_eq!(reader.with_catalog(|c| (c.len(), c.live_len())).unwrap(), (3, 2));
}

/// A WAL record that defines a retired id, or samples of one (which retirement never leaves
/// behind: such ids had no sample in the write buffers), is refused, saying so.
#[test]
fn a_wal_definition_of_a_retired_id_is_refused() {
    let mut catalog = crate::series::SeriesCatalog::new();
    for s in 0..2 {
        catalog.get_or_insert(&key(s)).unwrap();
    }
    catalog.retire(&roaring::RoaringBitmap::from_iter([0]));
    let e = crate::store::open::apply_def(&mut catalog, 0, "m", &[("dev", "d0"), ("host", "h0")]).unwrap_err();
    assert!(e.contains("series id 0 is defined in the wal but retired in the catalog"), "{e}");
    // The next id is still defined as usual.
    crate::store::open::apply_def(&mut catalog, 2, "m", &[("dev", "d0"), ("host", "h0")]).unwrap();
    assert_eq!(catalog.get(&key(0)), Some(2));
}

/// `lockstep check` reports rows of a retired id (data without a series key): here a catalog
/// snapshot that retires series 0 while a live file still has its rows.
#[test]
fn check_reports_rows_of_a_retired_id() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), Arc::new(OsStorage));
    store.write(&batch(&[(0, T0 + 9 * HOUR, 1.0), (1, T0 + 9 * HOUR, 1.0)])).unwrap();
    store.flush().unwrap();
    drop(store);
    let (mut catalog, mut files) = crate::series::SeriesCatalog::load_dir(&OsStorage, dir.path()).unwrap();
    catalog.retire(&roaring::RoaringBitmap::from_iter([0]));
    let pending = files.pending(&catalog).unwrap();
    files.save(&OsStorage, dir.path(), &pending).unwrap();
    let report = Store::open_read_only(dir.path()).unwrap().check(1, &|_, _| {}).unwrap();
    let problems: Vec<&str> = report.problems.iter().map(|p| p.problem.as_str()).collect();
    assert_eq!(problems, ["row group 0: series id 0 is retired in the catalog: its rows have no series key"]);
}

/// A retirement of many series stops the writes for a chunk of ids at a time (three in tests):
/// eight expired series go in three chunks (one generation each), the live one stays, and all
/// of it holds for a reader.
#[test]
fn a_large_retirement_goes_in_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), Arc::new(OsStorage));
    let mut samples: Vec<(u32, i64, f64)> = (0..8).map(|s| (s, T0 + i64::from(s), 1.0)).collect();
    samples.push((8, T0 + 9 * HOUR, 2.0));
    store.write(&batch(&samples)).unwrap();
    store.flush().unwrap();
    let summary = store.compact(false).unwrap();
    assert_eq!(summary.series_retired, 8);
    assert_eq!(store.catalog_generation(), 3, "chunks of 3, 3 and 2 ids");
    let reader = Store::open_read_only(dir.path()).unwrap();
    for s in [&*store, &reader] {
        assert!((0..8).all(|k| id(s, k).is_none()));
        assert!(id(s, 8).is_some());
        assert_eq!(s.with_catalog(|c| (c.len(), c.live_len())).unwrap(), (9, 1));
        assert_eq!(dump(s), model(&[(8, T0 + 9 * HOUR, 2.0)]));
    }
}

/// A writer that resolved a series' id before the retirement and writes by it after (an
/// ingest stream between its lookup and its write): `write_rows` rejects the retired id, while
/// `write_rows_keyed` writes that run by the key the writer gives, which defines the series
/// anew, beside the runs of live ids. Both records replay for a reader, and an id the writer
/// cannot name, or one never assigned, is still rejected.
#[test]
fn rows_of_an_id_retired_after_its_lookup_go_by_key() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), Arc::new(OsStorage));
    expired_0_live_1(&store);
    let (a, b) = (id(&store, 0).unwrap(), id(&store, 1).unwrap());
    assert_eq!(store.compact(false).unwrap().series_retired, 1);
    let t = T0 + 9 * HOUR + 1;
    let rows = |ids: &[SeriesId]| {
        let mut rows = Rows::default();
        for (i, &id) in ids.iter().enumerate() {
            rows.push(id, t, i as f64 + 10.0);
        }
        rows
    };
    let plain = store.write_rows(rows(&[a, b])).unwrap();
    assert_eq!(plain.accepted, 1);
    assert!(plain.rejected[0].error.to_string().contains(&format!("series id {a} is not in the catalog")));
    let mut asked = Vec::new();
    let mut key_of = |id: SeriesId| {
        asked.push(id);
        (id == a).then(|| key(0))
    };
    let outcome = store.write_rows_keyed(rows(&[b, a, 999]), &mut key_of).unwrap();
    assert_eq!(asked, [a], "only the retired id is looked up (999 was never assigned)");
    assert_eq!(outcome.accepted, 2);
    assert_eq!(outcome.rejected.len(), 1);
    assert!(outcome.rejected[0].error.to_string().contains("series id 999 is not in the catalog"));
    let renewed = id(&store, 0).unwrap();
    assert!(renewed > b, "a new id: {renewed}");
    let want = model(&[(1, T0 + 9 * HOUR, 1.0), (1, t, 10.0), (0, t, 11.0)]);
    assert_eq!(dump(&store), want);
    let reader = Store::open_read_only(dir.path()).unwrap();
    assert_eq!((id(&reader, 0), dump(&reader)), (Some(renewed), want));
    // An id the writer cannot name stays rejected.
    let outcome = store.write_rows_keyed(rows(&[a]), &mut |_| None).unwrap();
    assert_eq!((outcome.accepted, outcome.rejected.len()), (0, 1));
}
