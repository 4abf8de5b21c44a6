//! Writers racing or misplaced: a flush during a compaction of its partition, a store
//! created over a dataset root.

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
