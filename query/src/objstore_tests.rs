//! Tests of the object-store mapping on `InMemory` and `LocalFileSystem`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use lockstep_engine::storage::{Storage, write_atomic};
use lockstep_engine::wallclock::SystemClock;
use lockstep_engine::{Store, StoreConfig, WriteBatch};
use object_store::ObjectStoreExt;
use object_store::memory::InMemory;

use super::*;

fn in_memory(root: &Path, cache: u64) -> (Arc<InMemory>, ObjectStorage) {
    let mem = Arc::new(InMemory::new());
    let storage = ObjectStorage::with_store(mem.clone(), "node-a", root, cache, "memory://test/node-a");
    (mem, storage)
}

fn keys(mem: &Arc<InMemory>) -> Vec<String> {
    let mem = mem.clone();
    let mut out =
        block(
            async move { Ok(mem.list(None).map(|m| m.expect("list").location.to_string()).collect::<Vec<_>>().await) },
        )
        .unwrap();
    out.sort();
    out
}

#[test]
fn routes_wal_lock_and_temp_files_locally_and_the_rest_to_the_bucket() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (mem, s) = in_memory(root, 1 << 20);
    write_atomic(&s, &root.join("manifest.json"), b"{}").unwrap();
    s.create_dir_all(&root.join("wal")).unwrap();
    let mut f = s.create(&root.join("wal/00000000000000000001.wal")).unwrap();
    f.write_all(b"record").unwrap();
    f.sync().unwrap();
    drop(f);
    s.create_dir_all(&root.join("history")).unwrap();
    write_atomic(&s, &root.join("history/jobs.json.000001"), b"[]").unwrap();
    assert_eq!(keys(&mem), ["node-a/history/jobs.json.000001", "node-a/manifest.json"]);
    // No temporary file, no rename: the put is the atomic write.
    assert!(!root.join("manifest.json").exists() && !root.join("manifest.tmp").exists());
    assert_eq!(fs::read(root.join("wal/00000000000000000001.wal")).unwrap(), b"record");
    assert!(s.exists(&root.join("manifest.json")));
    assert!(!s.exists(&root.join("series.json")));
    assert_eq!(&s.read(&root.join("manifest.json")).unwrap()[..], b"{}");
    // Replacing is atomic too: a reader sees the new bytes whole.
    write_atomic(&s, &root.join("manifest.json"), b"{\"v\":2}").unwrap();
    assert_eq!(&s.read_copy(&root.join("manifest.json")).unwrap()[..], b"{\"v\":2}");
    assert_eq!(s.len(&root.join("manifest.json")).unwrap(), 7);
    // Appends (clock logs) rewrite the object at every sync; truncate cuts it.
    let log = root.join("clock/exchanges.log");
    for part in [&b"abc"[..], b"def"] {
        let mut f = s.open_append(&log).unwrap();
        f.write_all(part).unwrap();
        f.sync().unwrap();
    }
    assert_eq!(&s.read(&log).unwrap()[..], b"abcdef");
    s.truncate(&log, 4).unwrap();
    assert_eq!(&s.read(&log).unwrap()[..], b"abcd");
    // Nothing of the object part is left in the local directory but the (empty) cache.
    let mut local: Vec<String> =
        fs::read_dir(root).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    local.sort();
    assert_eq!(local, ["cache", "wal"]);
}

fn put_data(s: &ObjectStorage, root: &Path, rel: &str, bytes: &[u8]) {
    let mut f = s.create(&root.join(rel)).unwrap();
    f.write_all(bytes).unwrap();
    f.sync().unwrap();
}

#[test]
fn lists_directories_and_reads_ranges_through_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (mem, s) = in_memory(root, 1 << 20);
    put_data(&s, root, "data/p1/000000000001.parquet", b"0123456789");
    put_data(&s, root, "data/p1/000000000002.parquet", b"abcdefghij");
    put_data(&s, root, "data/p2/000000000003.parquet", b"ABCDEFGHIJ");
    assert_eq!(s.list_dir(&root.join("data")).unwrap(), [root.join("data/p1"), root.join("data/p2")]);
    assert_eq!(
        s.list_dir(&root.join("data/p1")).unwrap(),
        [root.join("data/p1/000000000001.parquet"), root.join("data/p1/000000000002.parquet")]
    );
    assert!(s.list_dir(&root.join("data/p9")).unwrap().is_empty());
    // Written through: cached at once.
    assert!(s.is_cached(&root.join("data/p1/000000000001.parquet")));
    assert_eq!(s.cached_bytes(), 30);
    assert_eq!(&s.read_range(&root.join("data/p1/000000000002.parquet"), 2..5).unwrap()[..], b"cde");
    assert!(s.read_range(&root.join("data/p1/000000000002.parquet"), 8..11).is_err());

    // A second process with a fresh local directory reads from the bucket, caching on first use.
    let dir2 = tempfile::tempdir().unwrap();
    let s2 = ObjectStorage::with_store(mem.clone(), "node-a", dir2.path(), 1 << 20, "memory://test/node-a");
    let f = dir2.path().join("data/p2/000000000003.parquet");
    assert!(!s2.is_cached(&f));
    assert_eq!(&s2.read_range(&f, 7..10).unwrap()[..], b"HIJ");
    assert!(s2.is_cached(&f));
    assert_eq!(&s2.read(&f).unwrap()[..], b"ABCDEFGHIJ");
    // Without a cache, a range read is a ranged GET.
    let dir3 = tempfile::tempdir().unwrap();
    let s3 = ObjectStorage::with_store(mem, "node-a", dir3.path(), 0, "memory://test/node-a");
    let f = dir3.path().join("data/p1/000000000001.parquet");
    assert_eq!(&s3.read_range(&f, 0..3).unwrap()[..], b"012");
    assert!(!s3.is_cached(&f));
    assert!(!dir3.path().join("cache/memory/test/node-a/data").exists());
}

#[test]
fn the_cache_evicts_least_recently_used_files_and_survives_restart() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (mem, s) = in_memory(root, 25);
    let file = |i: u32| root.join(format!("data/p1/{i:012}.parquet"));
    for i in 1..=3 {
        put_data(&s, root, &format!("data/p1/{i:012}.parquet"), &[b'0' + i as u8; 10]);
    }
    // 30 bytes written into a cache of 25: the oldest went.
    assert!(!s.is_cached(&file(1)) && s.is_cached(&file(2)) && s.is_cached(&file(3)));
    assert_eq!(s.cached_bytes(), 20);
    // Use 2, then read 1 back: 3 is now the least recently used.
    s.read(&file(2)).unwrap();
    assert_eq!(&s.read(&file(1)).unwrap()[..], &[b'1'; 10]);
    assert!(s.is_cached(&file(1)) && s.is_cached(&file(2)) && !s.is_cached(&file(3)));
    assert!(!root.join("cache/memory/test/node-a/data/p1/000000000003.parquet").exists());
    // A file larger than the whole cache is read without caching.
    put_data(&s, root, "data/p1/000000000009.parquet", &[b'x'; 40]);
    assert!(!s.is_cached(&file(9)));
    assert_eq!(s.read(&file(9)).unwrap().len(), 40);
    assert_eq!(s.cached_bytes(), 20);
    // A restarted process adopts the cache directory, removes the spool files of dead
    // processes and leaves those of live ones (a writer sharing the directory).
    drop(s);
    let dead = root.join("cache/memory/test/node-a/data/p1/000000000007.parquet.part-4294967-0");
    let live =
        root.join(format!("cache/memory/test/node-a/data/p1/000000000008.parquet.part-{}-0", std::process::id()));
    fs::write(&dead, b"partial").unwrap();
    fs::write(&live, b"partial").unwrap();
    let s = ObjectStorage::with_store(mem, "node-a", root, 25, "memory://test/node-a");
    assert!(!dead.exists() && live.exists());
    assert_eq!(s.cached_bytes(), 20);
    assert!(s.is_cached(&file(1)) && s.is_cached(&file(2)));
}

#[test]
fn a_file_deleted_from_the_bucket_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (mem, s) = in_memory(root, 0);
    put_data(&s, root, "data/p1/000000000001.parquet", b"0123456789");
    let path = root.join("data/p1/000000000001.parquet");
    block({
        let mem = mem.clone();
        async move { Ok(mem.delete(&ObjectPath::from("node-a/data/p1/000000000001.parquet")).await) }
    })
    .unwrap()
    .unwrap();
    for err in [s.read(&path).unwrap_err(), s.read_range(&path, 0..2).unwrap_err(), s.len(&path).unwrap_err()] {
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert!(
            err.to_string().contains("data/p1/000000000001.parquet is not in the object store memory://test/node-a")
        );
    }
    assert_eq!(s.snapshot_pin(&path).unwrap_err().kind(), io::ErrorKind::NotFound);
    // Removing a missing object is not an error (as on a file system).
    s.remove_file(&path).unwrap();
}

fn sample_batch(n: i64) -> WriteBatch {
    let mut b = WriteBatch::default();
    for i in 0..n {
        let host = format!("h{}", i % 4);
        b.push(
            lockstep_engine::SeriesKey::new("gpu_util", [("host", host)]),
            1_767_225_600_000_000_000 + i * 1_000_000_000,
            i as f64,
        );
    }
    b
}

fn open(root: &Path, storage: ObjectStorage) -> Store {
    let config = StoreConfig { max_future_ns: None, flush_rows: usize::MAX, ..Default::default() };
    Store::open_with(root, config, Arc::new(storage), Arc::new(SystemClock)).unwrap()
}

fn values(store: &Store) -> Vec<(u32, i64, f64)> {
    let rows = store.scan_all(lockstep_engine::store::ScanRequest::default()).unwrap();
    (0..rows.len()).map(|i| (rows.series[i], rows.time[i], rows.value[i])).collect()
}

#[test]
fn a_store_on_a_local_bucket_round_trips_and_a_fresh_reader_sees_it() {
    let bucket = tempfile::tempdir().unwrap();
    let url = format!("file://{}/prefix", bucket.path().display());
    let node = tempfile::tempdir().unwrap();
    let store = open(node.path(), ObjectStorage::open(&url, node.path(), 1 << 20).unwrap());
    store.write(&sample_batch(100)).unwrap();
    // Acknowledged: in the local WAL, not yet in the bucket.
    assert!(!bucket.path().join("prefix/data").exists());
    store.flush().unwrap();
    store.write_document("jobs.json", "[]").unwrap();
    let expected = values(&store);
    assert_eq!(expected.len(), 100);
    store.close().unwrap();
    for name in ["manifest.json", "series.json", "jobs.json", "history/jobs.json.000001"] {
        assert!(bucket.path().join("prefix").join(name).is_file(), "{name}");
    }
    let parts: Vec<_> = fs::read_dir(bucket.path().join("prefix/data")).unwrap().collect();
    assert_eq!(parts.len(), 1);
    assert!(!node.path().join("data").exists() && !node.path().join("manifest.json").exists());

    // A reader on another machine: an empty local directory, the same URL.
    let reader_dir = tempfile::tempdir().unwrap();
    let storage = ObjectStorage::open(&url, reader_dir.path(), 1 << 20).unwrap();
    let reader =
        Store::open_read_only_with(reader_dir.path(), StoreConfig::default(), Arc::new(storage), Arc::new(SystemClock))
            .unwrap();
    assert_eq!(values(&reader), expected);
    assert_eq!(reader.read_document("jobs.json").unwrap().as_deref(), Some("[]"));

    // The writer reopens from its local WAL (empty now) and the bucket.
    let store = open(node.path(), ObjectStorage::open(&url, node.path(), 1 << 20).unwrap());
    assert_eq!(values(&store), expected);
}

#[test]
fn an_unflushed_write_is_recovered_from_the_wal_then_flushed_to_the_bucket() {
    let node = tempfile::tempdir().unwrap();
    let (mem, s) = in_memory(node.path(), 1 << 20);
    let store = open(node.path(), s.clone());
    store.write(&sample_batch(10)).unwrap();
    let expected = values(&store);
    // A crash: the store is never closed (no flush), its WAL stays on the local disk.
    drop(store);
    let store = open(node.path(), ObjectStorage::with_store(mem.clone(), "node-a", node.path(), 0, "memory://x"));
    assert_eq!(values(&store), expected);
    store.flush().unwrap();
    assert!(keys(&mem).iter().any(|k| k.starts_with("node-a/data/p")));
}

/// A node killed before it flushed, replaced by another node that then flushed its own writes,
/// and started again on its own disk, replays its acknowledged writes: the replacement's WAL
/// checkpoint in the manifest is its own (per node), not one that covers the first node's
/// segments — it once did, and they were skipped and deleted.
#[test]
fn a_replaced_node_started_again_replays_its_own_wal() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mem = Arc::new(InMemory::new());
    let node = |root: &Path| {
        let s = ObjectStorage::with_store(mem.clone(), "cluster", root, 0, "memory://x");
        s.acquire_lease(std::time::Duration::from_secs(30)).unwrap();
        open(root, s)
    };
    let store = node(a.path());
    store.write(&sample_batch(10)).unwrap();
    let first = values(&store);
    // Killed: never closed, its 10 acknowledged samples only in its WAL (dropping the
    // storage releases the lease, as an expired lease would let the replacement take over).
    drop(store);
    let store = node(b.path());
    let mut later = sample_batch(5);
    for (key, _) in &mut later.series {
        key.labels.insert("host", "replacement");
    }
    store.write(&later).unwrap();
    store.flush().unwrap();
    store.close().unwrap();
    let store = node(a.path());
    let got = values(&store);
    assert_eq!(got.len(), 15, "{got:?}");
    for row in &first {
        assert!(got.iter().any(|g| g.1 == row.1 && g.2 == row.2), "acknowledged sample {row:?} lost");
    }
    store.flush().unwrap();
    let checkpoints = store.manifest().unwrap().wal_checkpoints.clone();
    assert_eq!(checkpoints.len(), 2, "one checkpoint per node: {checkpoints:?}");
    store.close().unwrap();
}

/// The store id of the manifest in the bucket goes into every node's local WAL segments; a
/// store that predates ids gets one from the first node that opens it for writing; and a data
/// directory whose WAL holds another store's segments is refused, not replayed into this one.
#[test]
fn every_node_writes_the_buckets_store_id_and_another_stores_wal_is_refused() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mem = Arc::new(InMemory::new());
    let storage = |prefix: &str, root: &Path| {
        let s = ObjectStorage::with_store(mem.clone(), prefix, root, 0, "memory://x");
        s.acquire_lease(std::time::Duration::from_secs(30)).unwrap();
        s
    };
    let config = || StoreConfig { max_future_ns: None, flush_rows: usize::MAX, ..Default::default() };
    let wal_store_ids = |root: &Path| -> Vec<Vec<u8>> {
        let mut paths: Vec<_> = fs::read_dir(root.join("wal")).unwrap().map(|e| e.unwrap().path()).collect();
        paths.sort();
        paths.iter().map(|p| fs::read(p).unwrap()[16..32].to_vec()).collect()
    };
    // Created by node a, then its manifest rewritten as a release before ids left it.
    let store = open(a.path(), storage("cluster", a.path()));
    store.write(&sample_batch(4)).unwrap();
    store.close().unwrap();
    let s = storage("cluster", a.path());
    let manifest_path = a.path().join("manifest.json");
    let mut manifest = lockstep_engine::manifest::Manifest::load(&s, &manifest_path).unwrap().unwrap();
    manifest.store_id = None;
    manifest.save(&s, &manifest_path).unwrap();
    drop(s);

    // Node b opens it first: it gives the store its id, in the bucket, and writes with it.
    let store = open(b.path(), storage("cluster", b.path()));
    let id = store.manifest().unwrap().store_id.unwrap();
    store.write(&sample_batch(6)).unwrap();
    drop(store); // unflushed
    assert_eq!(wal_store_ids(b.path()), vec![id.0.to_vec()]);
    // Node a takes over: the same id, from the bucket, in its segments too; b's rows are in
    // b's WAL only, a's reopen sees the flushed ones.
    let store = open(a.path(), storage("cluster", a.path()));
    assert_eq!(store.manifest().unwrap().store_id, Some(id));
    store.write(&sample_batch(8)).unwrap();
    drop(store);
    assert_eq!(wal_store_ids(a.path()), vec![id.0.to_vec()]);

    // Node a's data directory used for another store (another prefix, created by node c):
    // its WAL is refused.
    let c = tempfile::tempdir().unwrap();
    let store = open(c.path(), storage("elsewhere", c.path()));
    let other = store.manifest().unwrap().store_id.unwrap();
    store.close().unwrap();
    let opened = Store::open_with(a.path(), config(), Arc::new(storage("elsewhere", a.path())), Arc::new(SystemClock));
    let Err(err) = opened else { panic!("another store's wal is replayed") };
    assert!(
        matches!(&err, lockstep_engine::Error::WalForeignSegment { found, expected, .. }
            if *found == id.to_string() && *expected == other.to_string()),
        "{err}"
    );
    // Back on its own store, node a replays its WAL as before.
    let store = open(a.path(), storage("cluster", a.path()));
    assert_eq!(values(&store).len(), 8);
    store.close().unwrap();
}

#[test]
fn a_bucket_with_data_files_but_no_manifest_is_refused_not_emptied() {
    let node = tempfile::tempdir().unwrap();
    let (mem, s) = in_memory(node.path(), 0);
    let store = open(node.path(), s);
    store.write(&sample_batch(10)).unwrap();
    store.close().unwrap();
    block({
        let mem = mem.clone();
        async move { Ok(mem.delete(&ObjectPath::from("node-a/manifest.json")).await) }
    })
    .unwrap()
    .unwrap();
    let storage = ObjectStorage::with_store(mem.clone(), "node-a", node.path(), 0, "memory://x");
    let config = StoreConfig { max_future_ns: None, ..Default::default() };
    let err = Store::open_with(node.path(), config, Arc::new(storage), Arc::new(SystemClock)).unwrap_err();
    assert!(matches!(err, lockstep_engine::Error::ManifestMissing { files: 1, .. }), "{err}");
    assert!(keys(&mem).iter().any(|k| k.starts_with("node-a/data/p")));
}

/// A cached copy damaged on the local disk (cut short, or bytes overwritten) is dropped and
/// fetched again from the bucket when a scan or a footer read fails on it; before, every
/// query failed, naming the bucket's file, until the cache was cleared by hand.
#[test]
fn a_damaged_cached_copy_is_fetched_again() {
    let bucket = tempfile::tempdir().unwrap();
    let url = format!("file://{}/prefix", bucket.path().display());
    let node = tempfile::tempdir().unwrap();
    let store = open(node.path(), ObjectStorage::open(&url, node.path(), 1 << 20).unwrap());
    store.write(&sample_batch(1000)).unwrap();
    store.flush().unwrap();
    let expected = values(&store);
    store.close().unwrap();
    let original: Vec<_> = fs::read_dir(bucket.path().join("prefix/data")).unwrap().collect();
    let original = fs::read_dir(original[0].as_ref().unwrap().path()).unwrap().next().unwrap().unwrap().path();
    let original_bytes = fs::read(&original).unwrap();

    let reader_dir = tempfile::tempdir().unwrap();
    let reader = |dir: &Path| {
        let storage = ObjectStorage::open(&url, dir, 1 << 20).unwrap();
        Store::open_read_only_with(dir, StoreConfig::default(), Arc::new(storage), Arc::new(SystemClock)).unwrap()
    };
    assert_eq!(values(&reader(reader_dir.path())), expected);
    let cached = |dir: &Path| {
        let mut stack = vec![dir.join("cache")];
        let mut found = Vec::new();
        while let Some(d) = stack.pop() {
            for e in fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p)
                } else if p.extension().is_some_and(|x| x == "parquet") {
                    found.push(p)
                }
            }
        }
        assert_eq!(found.len(), 1, "{found:?}");
        found.pop().unwrap()
    };
    let copy = cached(reader_dir.path());
    assert_eq!(fs::read(&copy).unwrap(), original_bytes);
    for damage in ["overwrite", "truncate", "footer"] {
        let mut bytes = original_bytes.clone();
        match damage {
            "overwrite" => bytes[original_bytes.len() / 3..original_bytes.len() / 3 + 64].fill(0xA5),
            "truncate" => bytes.truncate(original_bytes.len() / 2),
            _ => {
                let n = bytes.len();
                bytes[n - 20..n - 8].fill(0);
            }
        }
        fs::write(&copy, &bytes).unwrap();
        // A new reader adopts the damaged copy from the cache directory, as after a restart.
        assert_eq!(values(&reader(reader_dir.path())), expected, "{damage}");
        assert_eq!(fs::read(cached(reader_dir.path())).unwrap(), original_bytes, "{damage}: fetched again");
    }
    // The writer too: its scans and its compaction's reads.
    let copy = cached(node.path());
    fs::write(&copy, &original_bytes[..original_bytes.len() / 2]).unwrap();
    let store = open(node.path(), ObjectStorage::open(&url, node.path(), 1 << 20).unwrap());
    assert_eq!(values(&store), expected);
}
