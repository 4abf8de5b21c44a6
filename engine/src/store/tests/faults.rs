//! Store tests under faults: a crash at every byte of the WAL tail, a crash anywhere in the
//! flushes that save the catalog, a failed flush and a full disk. After each, every
//! acknowledged sample is there (the parent module's reference model and set-up).

use super::*;

/// Crash at every byte offset of the WAL record of an unacknowledged write: after reopening,
/// every acknowledged sample is there and nothing of the torn write is.
#[test]
fn crash_at_every_byte_of_the_wal_tail() {
    let acked: Vec<_> = (0..20).map(|i| (i % 4, T0 + i as i64, i as f64)).collect();
    let torn = vec![(1, T0 + 500, 42.0), (9, T0 + 501, 43.0)];
    let mut model = BTreeMap::new();
    model_of(&acked, &mut model);
    // Calibrate: bytes written by open + the acked writes, and by the torn write.
    let measure = |samples: &[&[(u32, i64, f64)]]| {
        let dir = tempfile::tempdir().unwrap();
        let faulty = FaultyStorage::new(Arc::new(OsStorage), u64::MAX);
        let store =
            Store::open_with(dir.path(), cfg(), Arc::new(faulty.clone()), Arc::new(crate::wallclock::SystemClock))
                .unwrap();
        for s in samples {
            for one in s.iter() {
                store.write(&batch(std::slice::from_ref(one))).unwrap();
            }
        }
        u64::MAX - faulty.remaining()
    };
    let base = measure(&[&acked]);
    let with_torn = measure(&[&acked, &torn[..1]]);
    let record = with_torn - base;
    assert!(record > 20, "record of {record} bytes");
    for cut in 0..record {
        let dir = tempfile::tempdir().unwrap();
        {
            let faulty = FaultyStorage::new(Arc::new(OsStorage), base + cut);
            let store =
                Store::open_with(dir.path(), cfg(), Arc::new(faulty.clone()), Arc::new(crate::wallclock::SystemClock))
                    .unwrap();
            for one in &acked {
                store.write(&batch(std::slice::from_ref(one))).unwrap();
            }
            assert!(store.write(&batch(&torn[..1])).is_err(), "cut {cut}: write must fail");
            assert!(faulty.crashed());
        }
        let store = Store::open(dir.path(), cfg()).unwrap();
        assert_eq!(dump(&store), model, "cut at byte {cut} of {record}");
        // The store keeps working after recovery.
        store.write(&batch(&torn)).unwrap();
        let mut after = model.clone();
        model_of(&torn, &mut after);
        drop(store);
        let store = Store::open(dir.path(), cfg()).unwrap();
        assert_eq!(dump(&store), after, "cut {cut}: write after recovery");
    }
}

/// A crash at any byte of flushes that save the catalog — the first snapshot, increments of
/// one new series each, and a burst of new series that makes a new snapshot and deletes the
/// increments — loses no acknowledged sample, and every sample keeps its series.
#[test]
fn crash_anywhere_in_flushes_that_save_the_catalog() {
    // Round r writes one sample to each of its series; round 0 has 40 series, rounds 1..=6 one
    // new series each (and an old one), round 7 thirty new ones. Each round is then flushed.
    let rounds: Vec<Vec<(u32, i64, f64)>> = (0..8u32)
        .map(|r| {
            let series: Vec<u32> = match r {
                0 => (0..40).collect(),
                1..=6 => vec![r % 40, 39 + r],
                _ => (46..76).collect(),
            };
            series.into_iter().map(|s| (s, T0 + i64::from(r) * 10, f64::from(r * 100 + s))).collect()
        })
        .collect();
    // Runs the rounds on `storage` until something fails; returns the acknowledged model and
    // the catalog increments on disk after each flush.
    let run = |dir: &std::path::Path, storage: Arc<dyn Storage>| {
        let (mut acked, mut increments) = (BTreeMap::new(), Vec::new());
        let Ok(store) = Store::open_with(dir, cfg(), storage, Arc::new(crate::wallclock::SystemClock)) else {
            return (acked, increments);
        };
        for round in &rounds {
            if store.write(&batch(round)).is_err() {
                break;
            }
            model_of(round, &mut acked);
            if store.flush().is_err() {
                break;
            }
            increments.push(OsStorage.list_dir(&dir.join("series")).unwrap().len());
        }
        (acked, increments)
    };
    let measure = FaultyStorage::new(Arc::new(OsStorage), u64::MAX);
    let dir = tempfile::tempdir().unwrap();
    let (all, increments) = run(dir.path(), Arc::new(measure.clone()));
    let total = u64::MAX - measure.remaining();
    assert_eq!(increments, [0, 1, 2, 3, 4, 5, 6, 0], "a snapshot, six increments, a snapshot");
    assert_eq!(all.len(), 40 + 12 + 30);
    let stride = (total / 600).max(1);
    let mut cuts = 0;
    for cut in (0..total).step_by(stride as usize) {
        let dir = tempfile::tempdir().unwrap();
        let faulty = FaultyStorage::new(Arc::new(OsStorage), cut);
        let (acked, _) = run(dir.path(), Arc::new(faulty.clone()));
        assert!(faulty.crashed() || acked == all, "cut {cut}");
        let store = match Store::open(dir.path(), cfg()) {
            Ok(store) => store,
            // Crashed before the manifest existed: nothing was acknowledged.
            Err(e) => {
                assert!(acked.is_empty(), "cut {cut}: {e}");
                continue;
            }
        };
        assert_eq!(dump(&store), acked, "cut at byte {cut} of {total}");
        // The recovered store goes on: a new series, flushed, is there after a reopen.
        store.write(&batch(&[(99, T0 + 1_000, 1.0)])).unwrap();
        store.flush().unwrap();
        drop(store);
        let store = Store::open_read_only(dir.path()).unwrap();
        let mut after = acked.clone();
        model_of(&[(99, T0 + 1_000, 1.0)], &mut after);
        assert_eq!(dump(&store), after, "cut {cut}: after recovery");
        cuts += 1;
    }
    assert!(cuts > 500, "{cuts} crash points");
}

/// A flush that fails (a partition directory that cannot take files) loses nothing: its rows
/// stay buffered and in the WAL, later writes are acknowledged, and the next good flush writes
/// both; the checkpoint never passes unwritten rows.
#[test]
fn failed_flush_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let faulty = FaultyStorage::new(Arc::new(OsStorage), u64::MAX);
    let config = StoreConfig { flush_rows: 40, ..cfg() };
    let store =
        Store::open_with(dir.path(), config.clone(), Arc::new(faulty.clone()), Arc::new(crate::wallclock::SystemClock))
            .unwrap();
    let mut model = BTreeMap::new();
    faulty.deny_create(Some("parquet"));
    let first: Vec<_> = (0..48).map(|i| (i % 6, T0 + i as i64, i as f64)).collect();
    // The write that triggers the failing flush is still acknowledged (it is durable).
    assert_eq!(store.write(&batch(&first)).unwrap().accepted, 48);
    model_of(&first, &mut model);
    assert!(store.metrics().flush_failures.load(Ordering::Relaxed) >= 1);
    assert!(store.flush_error().is_some());
    assert!(store.flush().is_err());
    assert_eq!(dump(&store), model, "failed rows stay visible");
    // Still failing: writes go on until the buffer is full, then are refused (retryable).
    let more: Vec<_> = (0..40).map(|i| (i % 6, T0 + 100 + i as i64, i as f64)).collect();
    assert_eq!(store.write(&batch(&more)).unwrap().accepted, 40);
    model_of(&more, &mut model);
    let refused = store.write(&batch(&[(0, T0 + 999, 9.0)])).unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::Unavailable, "{refused}");
    assert!(store.metrics().writes_refused.load(Ordering::Relaxed) >= 1);
    // The cause goes away: the store recovers by itself on the next write (after the heal
    // interval), and the next flush writes every buffered row.
    faulty.deny_create(None);
    std::thread::sleep(std::time::Duration::from_millis(1_100));
    let later: Vec<_> = (0..60).map(|i| (i % 6, T0 + 200 + i as i64, i as f64)).collect();
    assert_eq!(store.write(&batch(&later)).unwrap().accepted, 60);
    model_of(&later, &mut model);
    store.flush().unwrap();
    assert!(store.flush_error().is_none());
    assert_eq!(store.buffered_rows().unwrap(), 0);
    assert_eq!(dump(&store), model);
    drop(store);
    // Nothing depended on the WAL: every row is in data files after a restart.
    let store = Store::open(dir.path(), cfg()).unwrap();
    assert_eq!(dump(&store), model);
}

/// Flushes that fail on a disk out of blocks (the file is created, its writes fail) leave no
/// data file behind, however often they are retried — once one per attempt was left until a
/// restart — and the rows stay buffered until a flush succeeds.
#[test]
fn failed_flushes_leave_no_partial_files() {
    let dir = tempfile::tempdir().unwrap();
    let faulty = FaultyStorage::new(Arc::new(OsStorage), u64::MAX);
    let store =
        Store::open_with(dir.path(), cfg(), Arc::new(faulty.clone()), Arc::new(crate::wallclock::SystemClock)).unwrap();
    let mut model = BTreeMap::new();
    // Two partitions, so that one flush writes two files.
    let rows: Vec<_> = (0..40)
        .map(|i| (i % 4, T0 + (i as i64 % 2) * crate::store::DEFAULT_PARTITION_NS + i as i64, i as f64))
        .collect();
    store.write(&batch(&rows)).unwrap();
    model_of(&rows, &mut model);
    let data_files = || -> Vec<std::path::PathBuf> {
        let mut found = Vec::new();
        for part in std::fs::read_dir(dir.path().join("data")).into_iter().flatten().flatten() {
            found.extend(std::fs::read_dir(part.path()).unwrap().flatten().map(|f| f.path()));
        }
        found
    };
    faulty.set_out_of_blocks(true);
    for _ in 0..3 {
        let e = store.flush().unwrap_err();
        assert!(e.to_string().contains("No space left") || e.to_string().contains("os error 28"), "{e}");
    }
    assert_eq!(data_files(), Vec::<std::path::PathBuf>::new(), "partial files left by failed flushes");
    assert_eq!(dump(&store), model);
    faulty.set_out_of_blocks(false);
    store.flush().unwrap();
    assert_eq!(data_files().len(), 2);
    drop(store);
    assert_eq!(dump(&Store::open(dir.path(), cfg()).unwrap()), model);
}

/// A bulk import that fails on a disk out of blocks while it merges its spills removes every
/// file it staged, the half-written merge too: the space comes back at once, not when the next
/// writer opens the store; nothing of it is visible.
#[test]
fn failed_import_leaves_nothing_staged() {
    let dir = tempfile::tempdir().unwrap();
    let faulty = FaultyStorage::new(Arc::new(OsStorage), u64::MAX);
    let config = StoreConfig { flush_rows: 10, ..cfg() };
    let store = Store::open_with(dir.path(), config, Arc::new(faulty.clone()), Arc::new(crate::wallclock::SystemClock))
        .unwrap();
    let mut import = store.bulk_import();
    for part in 0..3 {
        let rows: Vec<_> = (0..10).map(|i| (i % 4, T0 + part * 100 + i as i64, i as f64)).collect();
        import.write(&batch(&rows)).unwrap();
    }
    faulty.set_out_of_blocks(true);
    assert!(import.commit().is_err());
    faulty.set_out_of_blocks(false);
    let staged: Vec<_> = std::fs::read_dir(dir.path().join("staging")).unwrap().flatten().map(|e| e.path()).collect();
    assert!(staged.is_empty(), "left in staging: {staged:?}");
    assert!(dump(&store).is_empty());
}

/// A store whose data files use series ids its catalog lacks (the catalog files lost) is not
/// opened for writing: a writer would give those ids to new series, which would take over the
/// old rows.
#[test]
fn a_catalog_behind_the_data_is_refused_for_writing() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), cfg()).unwrap();
    let rows: Vec<_> = (0..20).map(|i| (i % 5, T0 + i as i64, i as f64)).collect();
    store.write(&batch(&rows)).unwrap();
    store.close().unwrap();
    std::fs::remove_file(dir.path().join("series.json")).unwrap();
    let _ = std::fs::remove_dir_all(dir.path().join("series"));
    let e = Store::open(dir.path(), cfg()).unwrap_err();
    assert!(matches!(e, Error::CatalogCorrupt { .. }), "{e}");
    assert!(
        e.to_string().contains("it holds 0 series, but data file") && e.to_string().contains("uses series id 4"),
        "{e}"
    );
}

/// A full disk poisons the WAL (writes refused, retryable); once space returns, a write heals
/// the store by itself: the buffer is flushed, the WAL replaced, and nothing acknowledged lost.
#[test]
fn full_disk_then_space_returns() {
    let dir = tempfile::tempdir().unwrap();
    let faulty = FaultyStorage::new(Arc::new(OsStorage), u64::MAX);
    let store =
        Store::open_with(dir.path(), cfg(), Arc::new(faulty.clone()), Arc::new(crate::wallclock::SystemClock)).unwrap();
    let mut model = BTreeMap::new();
    let acked: Vec<_> = (0..30).map(|i| (i % 5, T0 + i as i64, i as f64)).collect();
    store.write(&batch(&acked)).unwrap();
    model_of(&acked, &mut model);
    faulty.set_full(true);
    let e = store.write(&batch(&[(1, T0 + 500, 5.0)])).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    std::thread::sleep(std::time::Duration::from_millis(1_100));
    let e = store.write(&batch(&[(1, T0 + 501, 5.0)])).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "still full: {e}");
    faulty.set_full(false);
    std::thread::sleep(std::time::Duration::from_millis(1_100));
    let after: Vec<_> = (0..10).map(|i| (i % 5, T0 + 1_000 + i as i64, i as f64)).collect();
    store.write(&batch(&after)).unwrap();
    model_of(&after, &mut model);
    assert_eq!(store.metrics().wal_reopens.load(Ordering::Relaxed), 1);
    assert_eq!(dump(&store), model);
    drop(store);
    let store = Store::open(dir.path(), cfg()).unwrap();
    assert_eq!(dump(&store), model, "after a restart");
}
