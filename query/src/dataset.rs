//! Opening what a `--data-url` (or `--data-dir`) names, read-only: one store, or a dataset
//! of several ingest nodes read as one store.
//!
//! A dataset is a root (`s3://bucket/cluster-a`, `file:///srv/cluster-a` or a local directory)
//! with no `manifest.json` of its own whose entries `<root>/<node>` are stores (each with a
//! `manifest.json`), one per ingest node. [`open_dataset_read_only`] opens it with
//! [`Store::open_dataset_read_only`], the union whose catalog, scans, clock models and
//! documents are those of all nodes (`engine::store::union` documents the series id scheme).
//! The union's data files are addressed by paths relative to the root
//! (`<node>/data/p<partition>/<id>.parquet`, the union manifest's entries), readable through
//! the storage of the root's URL, so that a worker given the URL and such a path reads the
//! same bytes.

use std::path::Path;
use std::sync::Arc;

use lockstep_engine::error::{Error, Result};
use lockstep_engine::storage::{OsStorage, Storage};
use lockstep_engine::store::is_node_name;
use lockstep_engine::wallclock::SystemClock;
use lockstep_engine::{Store, StoreConfig};

use crate::objstore::ObjectStorage;

/// Opens the store or dataset at `url` (or, without a URL, in `local_dir`) read-only:
///
/// - a store (a `manifest.json` at the root): that store, as `Store::open_read_only_with`;
/// - a dataset root (no manifest, stores under it): the union of its nodes
///   ([`Store::open_dataset_read_only`]; [`Store::dataset_nodes`] lists them);
/// - neither: the error a store would give ([`Error::NoStore`], [`Error::ManifestMissing`]).
///
/// `local_dir` holds the read cache (at most `cache_bytes`) with a URL; without one it is the
/// store or dataset itself. Nothing is written to the object store.
pub fn open_dataset_read_only(url: Option<&str>, local_dir: &Path, cache_bytes: u64) -> Result<Store> {
    let config = StoreConfig::default();
    let (storage, nodes): (Arc<dyn Storage>, Vec<String>) = match url {
        None => (Arc::new(OsStorage), Vec::new()),
        Some(url) => {
            let s = ObjectStorage::open(url, local_dir, cache_bytes).map_err(|e| Error::io(local_dir, e))?;
            let nodes = if s.exists(&local_dir.join("manifest.json")) {
                Vec::new()
            } else {
                s.list_prefixes().map_err(|e| Error::io(local_dir, e))?
            };
            (Arc::new(s), nodes)
        }
    };
    let nodes = match url {
        None if !local_dir.join("manifest.json").exists() => local_nodes(local_dir),
        _ => nodes,
    };
    let nodes: Vec<String> = nodes
        .into_iter()
        .filter(|n| is_node_name(n) && storage.exists(&local_dir.join(n).join("manifest.json")))
        .collect();
    let located = |e| lockstep_engine::storage::locate_error(storage.as_ref(), e);
    if nodes.is_empty() {
        return Store::open_read_only_with(local_dir, config, storage.clone(), Arc::new(SystemClock)).map_err(located);
    }
    Store::open_dataset_read_only(local_dir, &nodes, config, storage.clone(), Arc::new(SystemClock)).map_err(located)
}

/// The dataset at `url` (or in `local_dir`) with the series ids of an earlier snapshot's
/// `Store::dataset_layout` ([`Store::open_dataset_read_only_pinned`]): what a process taking
/// part in a query planned on that snapshot opens, so that every series has the planner's id.
/// An empty layout (the planner read one store, not a dataset) opens as
/// [`open_dataset_read_only`] does.
pub fn open_dataset_read_only_pinned(
    url: Option<&str>,
    local_dir: &Path,
    cache_bytes: u64,
    layout: &[(String, u32)],
) -> Result<Store> {
    if layout.is_empty() {
        return open_dataset_read_only(url, local_dir, cache_bytes);
    }
    let storage: Arc<dyn Storage> = match url {
        None => Arc::new(OsStorage),
        Some(url) => Arc::new(ObjectStorage::open(url, local_dir, cache_bytes).map_err(|e| Error::io(local_dir, e))?),
    };
    Store::open_dataset_read_only_pinned(
        local_dir,
        layout,
        StoreConfig::default(),
        storage.clone(),
        Arc::new(SystemClock),
    )
    .map_err(|e| lockstep_engine::storage::locate_error(storage.as_ref(), e))
}

/// Subdirectories of a local directory (candidate nodes).
fn local_nodes(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .collect();
    names.sort();
    names
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use lockstep_engine::model::{SeriesKey, WriteBatch};
    use lockstep_engine::store::ScanRequest;

    const T0: i64 = 1_767_225_600_000_000_000;

    fn write(store: &Store, host: &str, label: (&str, &str)) {
        let mut b = WriteBatch::default();
        for k in 0..5 {
            b.push(SeriesKey::new("m", [("host", host), label]), T0 + k * 1_000_000_000, k as f64);
        }
        store.write(&b).unwrap();
    }

    /// Two writers under one `file://` root, each its own prefix and lease; the root opens as
    /// the union, a node's URL as that node alone, a second writer on a node is refused.
    #[test]
    fn file_url_dataset_opens_as_the_union_of_its_nodes() {
        let tmp = tempfile::tempdir().unwrap();
        let root_url = format!("file://{}", tmp.path().join("bucket/cluster").display());
        let config = StoreConfig { max_future_ns: None, ..Default::default() };
        for (node, host, label) in [("node-0", "a", ("gpu", "0")), ("node-1", "b", ("nic", "x"))] {
            let dir = tmp.path().join(format!("local-{node}"));
            std::fs::create_dir_all(&dir).unwrap();
            let lock = lockstep_engine::store::lock::WriterLock::acquire(&dir).unwrap();
            let storage = ObjectStorage::open(&format!("{root_url}/{node}"), &dir, 1 << 20).unwrap();
            storage.acquire_lease(std::time::Duration::from_secs(30)).unwrap();
            let store =
                Store::open_locked(&dir, config.clone(), Arc::new(storage), Arc::new(SystemClock), lock).unwrap();
            write(&store, host, label);
            store.close().unwrap();
        }
        let reader = tmp.path().join("reader");
        let union = open_dataset_read_only(Some(&root_url), &reader, 1 << 20).unwrap();
        let names: Vec<String> = union.dataset_nodes().into_iter().map(|n| n.name).collect();
        assert_eq!(names, ["node-0", "node-1"]);
        assert_eq!(union.with_catalog(|c| c.label_keys()).unwrap(), ["host", "gpu", "nic"]);
        let rows = union.scan_all(ScanRequest::default()).unwrap();
        assert_eq!((rows.len(), rows.series.iter().max().copied()), (10, Some(1)));
        let pinned = open_dataset_read_only_pinned(Some(&root_url), &reader, 1 << 20, &union.dataset_layout()).unwrap();
        assert_eq!(pinned.scan_all(ScanRequest::default()).unwrap().series, rows.series);
        let one = open_dataset_read_only(Some(&format!("{root_url}/node-1")), &reader, 1 << 20).unwrap();
        assert!(one.dataset_nodes().is_empty());
        let same = open_dataset_read_only_pinned(Some(&format!("{root_url}/node-1")), &reader, 1 << 20, &[]).unwrap();
        assert_eq!(same.scan_all(ScanRequest::default()).unwrap().len(), 5);
        assert_eq!(one.scan_all(ScanRequest::default()).unwrap().len(), 5);
        // The closed writers released their leases: a new writer on node-0 takes it at once,
        // and a third one (another data directory) is refused while it is held — on `file://`
        // by the writer lock of the node's directory, which it takes before the lease.
        let dir = tmp.path().join("local-new");
        std::fs::create_dir_all(&dir).unwrap();
        let s = ObjectStorage::open(&format!("{root_url}/node-0"), &dir, 0).unwrap();
        s.acquire_lease(std::time::Duration::from_secs(30)).unwrap();
        let other = tmp.path().join("local-other");
        std::fs::create_dir_all(&other).unwrap();
        let err = ObjectStorage::open(&format!("{root_url}/node-0"), &other, 0)
            .unwrap()
            .acquire_lease(std::time::Duration::from_secs(30))
            .unwrap_err();
        assert!(err.to_string().contains("node-0 is locked by another writer"), "{err}");
        // A missing root is no store.
        let none = open_dataset_read_only(Some(&format!("{root_url}-none")), &reader, 0).unwrap_err();
        assert!(matches!(none, Error::NoStore { .. }), "{none}");
    }
}
