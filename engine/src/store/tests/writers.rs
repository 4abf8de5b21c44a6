//! Writers racing, misplaced or stopped: a flush during a compaction of its partition, a
//! store created over a dataset root, an import stopped between its samples and its rest.

use super::*;

/// An overwrite flushed while a compaction of its partition is under way keeps winning (QA
/// pass 19, finding 1). The compaction listed its files once for the whole pass, outside the
/// manifest lock; a flush published after that list, with an id below the output's, was left
/// out of the merge and lost to it — the merge of the older values got the higher id — and the
/// next compaction removed the acknowledged value. The hook flushes at the point where that
/// happened: after the pass began, before the partition's files are taken.
#[test]
fn an_overwrite_flushed_during_a_compaction_keeps_winning() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), cfg()).unwrap();
    let round =
        |v: f64| -> Vec<(u32, i64, f64)> { (0..50).map(|i| (i % 5, T0 + i64::from(i) * 1_000_000_000, v)).collect() };
    let mut model = BTreeMap::new();
    for v in [1.0, 2.0] {
        store.write(&batch(&round(v))).unwrap();
        store.flush().unwrap();
    }
    // A second partition, compacted first, so that the flush comes between two partitions too.
    let early: Vec<_> = (0..10).map(|i| (i, T0 - 7_200_000_000_000 + i64::from(i), 5.0)).collect();
    for _ in 0..2 {
        store.write(&batch(&early)).unwrap();
        store.flush().unwrap();
    }
    model_of(&early, &mut model);
    let newest = round(3.0);
    model_of(&newest, &mut model);
    let mut calls = 0;
    flush::tests_hook::set(Some(Box::new(move |s: &Store| {
        calls += 1;
        if calls == 2 {
            s.write(&batch(&round(3.0))).unwrap();
            s.flush().unwrap();
        }
    })));
    let summary = store.compact(true);
    flush::tests_hook::set(None);
    assert_eq!(summary.unwrap().partitions, 2);
    assert_eq!(dump(&store), model, "the overwrite acknowledged last wins after the compaction");
    store.compact(true).unwrap();
    assert_eq!(dump(&store), model, "and after the next one");
    drop(store);
    assert_eq!(dump(&Store::open(dir.path(), cfg()).unwrap()), model, "and after a reopen");
}

/// A writer is not created at a dataset root (QA pass 19, finding 3): readers open a
/// directory with node stores under it and no manifest of its own as their union, so a store
/// created there hid every node from them. A directory with other subdirectories is fine, and
/// a store that already is at a root (created before) still opens.
#[test]
fn a_store_is_not_created_over_a_dataset_root() {
    let root = tempfile::tempdir().unwrap();
    drop(Store::open(root.path().join("node-0"), cfg()).unwrap());
    drop(Store::open(root.path().join("node-1"), cfg()).unwrap());
    std::fs::create_dir_all(root.path().join("notes")).unwrap();
    let e = Store::open(root.path(), cfg()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    let text = e.to_string();
    assert!(text.contains("dataset root: the stores node-0, node-1 are under it"), "{text}");
    assert!(!root.path().join("manifest.json").exists(), "nothing was created at the root");
    let plain = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(plain.path().join("notes")).unwrap();
    drop(Store::open(plain.path(), cfg()).unwrap());
    // A store that is already at the root opens as before.
    drop(Store::open(plain.path().join("node-0"), cfg()).unwrap());
    drop(Store::open(plain.path(), cfg()).unwrap());
}

/// An import's rest (documents, clock input) is committed with its samples: the manifest
/// update that publishes them names the staged rest, so a writer that stops before storing
/// it leaves it to the next writer, and a writer that stops before that update leaves
/// nothing (the staged file is an orphan the next writer removes).
#[test]
fn an_import_rest_is_named_by_the_commit_of_its_samples() {
    let dir = tempfile::tempdir().unwrap();
    let rest = ImportRest {
        bundle: "/bundles/b1".into(),
        documents: vec![("topology.json".into(), "{}".into())],
        versions: vec![0],
        exchanges: Vec::new(),
        offsets: vec![crate::clock::OffsetObservation {
            host: "h".into(),
            local_time: T0,
            offset_ns: 5,
            uncertainty_ns: 1,
        }],
    };
    let rests = |store: &Store| store.storage.list_dir(&store.dir.join(IMPORTS_DIR)).unwrap().len();

    // Stopped before the samples' commit: nothing is pending, and the next writer removes
    // the staged file.
    let store = Store::open(dir.path(), cfg()).unwrap();
    let staged = store.stage_import_rest(&rest).unwrap();
    let mut import = store.bulk_import();
    import.write(&batch(&[(0, T0, 1.0)])).unwrap();
    drop(import);
    assert_eq!(store.pending_import().unwrap(), None);
    drop(store);
    let store = Store::open(dir.path(), cfg()).unwrap();
    assert_eq!((rests(&store), store.pending_import().unwrap()), (0, None));
    assert!(store.read_import_rest(&staged).is_err());

    // Stopped after it: readers and the next writer find the rest, whole; a second import
    // cannot name its own rest until that one is stored.
    let staged = store.stage_import_rest(&rest).unwrap();
    let mut import = store.bulk_import();
    import.write(&batch(&[(0, T0, 2.0)])).unwrap();
    import.commit_with_rest(Some(&staged)).unwrap();
    store.flush().unwrap();
    drop(store);
    let reader = Store::open_read_only(dir.path()).unwrap();
    assert_eq!(reader.pending_import().unwrap().as_deref(), Some(staged.as_str()));
    let problems = reader.check(1, &|_, _| {}).unwrap().problems;
    assert!(problems.iter().any(|p| p.problem.contains("an import of /bundles/b1 are committed")), "{problems:?}");
    drop(reader);
    let store = Store::open(dir.path(), cfg()).unwrap();
    assert_eq!(store.pending_import().unwrap().as_deref(), Some(staged.as_str()), "kept through a flush and a reopen");
    assert_eq!(store.read_import_rest(&staged).unwrap(), rest);
    let other = store.stage_import_rest(&rest).unwrap();
    let mut import = store.bulk_import();
    import.write(&batch(&[(1, T0, 3.0)])).unwrap();
    let e = import.commit_with_rest(Some(&other)).unwrap_err().to_string();
    assert!(e.contains(&format!("the rest of an earlier import ({staged}) is not stored yet")), "{e}");
    store.discard_import_rest(&other).unwrap();

    // Stored: the manifest no longer names it and its file is gone, for good.
    store.finish_import_rest(&staged).unwrap();
    assert_eq!((rests(&store), store.pending_import().unwrap()), (0, None));
    drop(store);
    let reader = Store::open_read_only(dir.path()).unwrap();
    assert_eq!(reader.pending_import().unwrap(), None);
    assert!(reader.check(1, &|_, _| {}).unwrap().problems.is_empty());
}
