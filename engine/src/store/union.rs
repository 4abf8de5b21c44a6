//! A dataset written by several ingest nodes, read as one store.
//!
//! Each node writes a store of its own under `<root>/<node>` (its own manifest, series catalog,
//! clock models and documents; docs/object-storage.md). [`Store::open_dataset_read_only`]
//! takes a read-only snapshot of every node and assembles them into one read-only [`Store`]
//! whose read API (catalog, scans, split scans, clock models, documents) is the union, so the
//! `samples` table, the SQL functions and the diagnosis read a dataset as they read one store:
//!
//! - **Series ids.** Nodes are taken in name order; node `k`'s series keep their order and are
//!   numbered after those of nodes `0..k`: a node's id `i` is the union's id `offset_k + i`,
//!   where `offset_k` is the number of series of the nodes before it
//!   ([`SeriesCatalog::append_catalog`]). Data files keep the node's ids; the scans shift them
//!   ([`LiveFile::series_offset`]), so ids never collide and each node's id order is kept (a
//!   file's rows stay sorted). The ids are stable within one snapshot, not across snapshots: a
//!   node that defines new series shifts the ids of the nodes after it. Identify series by
//!   their labels across queries; processes that must share one snapshot's ids open it with
//!   [`Store::open_dataset_read_only_pinned`] and that snapshot's [`Store::dataset_layout`].
//! - **Labels.** The label keys are the union of the nodes' keys, `host` first, then in
//!   first-seen order, node by node.
//! - **Clock models.** Each node fits the hosts it ingests (sharding is by host), so the union's
//!   models are every node's newest models together; a host modelled by two nodes takes the
//!   model of the first node in name order. The union's version number is the highest node
//!   version; only that version and 0 (uncorrected) can be pinned, and the `clock_models`
//!   table lists that one version.
//! - **Documents** (`topology.json`, `jobs.json`, `metrics.toml`): the dataset root's own copy
//!   if there is one (`<root>/topology.json`), otherwise the first node in name order that has
//!   the document.
//! - **Data file paths** are `<node>/data/p<partition>/<id>.parquet` relative to the root
//!   (the manifest entries of the union carry that path): unique across the dataset and
//!   readable through the root's storage.
//!
//! Each node's snapshot is consistent on its own; the union is not one atomic snapshot across
//! nodes (a node may flush between two nodes' snapshots), which is the same as reading the nodes
//! one after the other. The snapshots are taken eight at a time (on object storage each is a
//! dozen requests or more). All nodes must use the same partition width.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use super::{DOCUMENTS, LiveFile, ScanRequest, Store, StoreConfig, lock_poisoned};
use crate::buffer::WriteBuffer;
use crate::clock::{ClockRegistry, ClockSet, InputWatermark};
use crate::error::{Error, Result};
use crate::manifest::{Manifest, StoreId};
use crate::model::Rows;
use crate::series::SeriesCatalog;
use crate::storage::{ReadOnlyStorage, Storage};
use crate::wallclock::WallClock;

/// Names under a dataset root that are never nodes: a store's own entries.
const RESERVED: [&str; 9] = ["wal", "LOCK", "staging", "cache", "data", "clock", "history", "node-id", "series"];

/// Whether `name` can be a node of a dataset: one path component of ASCII letters, digits,
/// `-`, `_` and `.`, not starting with `.`, and not one of a store's own entries (`data`,
/// `wal`, `clock`, …).
pub fn is_node_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !RESERVED.contains(&name)
        && !DOCUMENTS.contains(&name)
}

/// One node of a dataset union, as [`Store::dataset_nodes`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DatasetNode {
    /// The node's name: its directory (prefix) under the dataset root.
    pub name: String,
    /// The union's id of the node's series id 0.
    pub series_offset: u32,
    /// Series in the node's catalog (its ids are `series_offset .. series_offset + series`).
    pub series: u32,
    /// Data files of the node in the snapshot.
    pub files: usize,
    /// The node's newest clock model version.
    pub clock_version: u64,
    /// The node's store id (`None` for a store whose manifest predates store ids).
    pub store_id: Option<StoreId>,
}

/// What a union store keeps beyond a plain store.
#[derive(Debug)]
pub(super) struct Union {
    pub(super) nodes: Vec<DatasetNode>,
    /// Per document name, the directory its current version is read from.
    pub(super) documents: BTreeMap<String, PathBuf>,
    /// Data files left out because their series are not in their node's catalog (without a
    /// pinned layout, which leaves out newer files by design).
    pub(super) left_out: Vec<LeftOut>,
}

/// A data file a union left out: its series ids reach past its node's catalog.
#[derive(Debug)]
pub(super) struct LeftOut {
    pub(super) path: PathBuf,
    pub(super) node: String,
    pub(super) max_series: u32,
    pub(super) series: u32,
}

impl Store {
    /// Opens the dataset at `root` whose nodes are the stores `root/<node>` for each name in
    /// `nodes`, read-only, as one store: see the module docs of `store::union` for the series
    /// ids, labels, clock models and documents of the union. `storage` reads the whole dataset
    /// (an object store rooted at the dataset's URL, or the local file system). Each node's
    /// snapshot is taken as [`Store::open_read_only_with`] takes it (WAL records after the
    /// checkpoint included, where the WAL is readable). Fails if a node is not a store, if the
    /// nodes' partition widths differ, or if `nodes` is empty ([`Error::NoStore`]).
    pub fn open_dataset_read_only(
        root: impl AsRef<Path>,
        nodes: &[String],
        config: StoreConfig,
        storage: Arc<dyn Storage>,
        clock: Arc<dyn WallClock>,
    ) -> Result<Self> {
        let mut names = nodes.to_vec();
        names.sort();
        names.dedup();
        let nodes: Vec<(String, Option<u32>)> = names.into_iter().map(|n| (n, None)).collect();
        Self::open_union(root.as_ref(), &nodes, config, storage, clock)
    }

    /// [`Store::open_dataset_read_only`] with the series ids of an earlier snapshot's
    /// [`Store::dataset_layout`]: the nodes in that order, each with only the series it had
    /// then, so that every series has the id it had in that snapshot (what the processes of one
    /// distributed query need to agree on). Data files holding series newer than the layout,
    /// and such buffered rows, are left out of this snapshot (a file the layout's snapshot
    /// named holds none). Fails ([`Error::DatasetInvalid`]) if a node has fewer series than
    /// the layout says.
    pub fn open_dataset_read_only_pinned(
        root: impl AsRef<Path>,
        layout: &[(String, u32)],
        config: StoreConfig,
        storage: Arc<dyn Storage>,
        clock: Arc<dyn WallClock>,
    ) -> Result<Self> {
        let nodes: Vec<(String, Option<u32>)> = layout.iter().map(|(n, s)| (n.clone(), Some(*s))).collect();
        Self::open_union(root.as_ref(), &nodes, config, storage, clock)
    }

    /// The union of `nodes` in this order, each limited to its first `n` series if given.
    fn open_union(
        root: &Path,
        nodes: &[(String, Option<u32>)],
        config: StoreConfig,
        storage: Arc<dyn Storage>,
        clock: Arc<dyn WallClock>,
    ) -> Result<Self> {
        let root = root.to_path_buf();
        let invalid = |reason: String| Error::DatasetInvalid { path: root.clone(), reason };
        let names: Vec<&String> = nodes.iter().map(|(n, _)| n).collect();
        if names.iter().collect::<std::collections::BTreeSet<_>>().len() != names.len() {
            return Err(invalid(format!("a node is named twice in {names:?}")));
        }
        if names.is_empty() {
            return Err(Error::NoStore { path: root.clone() });
        }
        if let Some(bad) = names.iter().find(|n| !is_node_name(n)) {
            return Err(invalid(format!("{bad:?} cannot be a node name")));
        }
        let ro = Arc::new(ReadOnlyStorage::new(storage.clone()));
        let ro_storage: Arc<dyn Storage> = ro.clone();
        let mut catalog = SeriesCatalog::new();
        let mut files: Vec<Arc<LiveFile>> = Vec::new();
        let mut entries = Vec::new();
        let mut active = WriteBuffer::default();
        let mut models = BTreeMap::new();
        let mut infos = Vec::with_capacity(names.len());
        let mut left_out = Vec::new();
        let (mut partition_ns, mut next_file_id, mut version, mut fit) = (None, 1, 0, None);
        let mut documents = BTreeMap::new();
        for doc in DOCUMENTS {
            if storage.exists(&root.join(doc)) {
                documents.insert(doc.to_string(), root.clone());
            }
        }
        // The nodes' snapshots are taken eight at a time: each is a manifest, a catalog and
        // its increments, a WAL and clock models, and on object storage every one of those is
        // a request (a dataset of 16 nodes behind a 20 ms link took the sum of 16 opens).
        // Which documents each node has is asked there too (a request each).
        let snapshots = crate::parallel::map(nodes.len(), 8, |i| {
            let dir = root.join(&nodes[i].0);
            let node = Store::snapshot_retrying(&dir, &config, &storage, &clock, &|| ro.clone())?;
            let docs: Vec<&str> = DOCUMENTS.iter().copied().filter(|doc| storage.exists(&dir.join(doc))).collect();
            Ok::<_, Error>((dir, node, docs))
        });
        for ((name, limit), snapshot) in nodes.iter().zip(snapshots) {
            let (dir, node, node_docs) = snapshot?;
            let manifest = node.manifest()?;
            match partition_ns {
                None => partition_ns = Some(manifest.partition_ns),
                Some(p) if p != manifest.partition_ns => {
                    return Err(invalid(format!(
                        "node {name} has time partitions of {} ns, the nodes before it {p} ns; every node of a dataset must use the same width",
                        manifest.partition_ns
                    )));
                }
                Some(_) => {}
            }
            next_file_id = next_file_id.max(manifest.next_file_id);
            let known = node.with_catalog(|c| c.len())?;
            let count = match limit {
                Some(n) if *n as usize > known => {
                    return Err(invalid(format!(
                        "node {name} has {known} series, fewer than the {n} of the layout pinned (was its catalog replaced?)"
                    )));
                }
                Some(n) => *n,
                None => known as u32,
            };
            let offset = node.with_catalog(|c| catalog.append_catalog_prefix(c, count as usize))??;
            let (node_files, beyond): (Vec<Arc<LiveFile>>, Vec<Arc<LiveFile>>) =
                (node.state.read().map_err(lock_poisoned)?.files.iter().cloned())
                    .partition(|f| f.entry.stats.max_series < count || f.entry.stats.rows == 0);
            // Files of series after a pinned layout's count are newer than the layout; without a
            // layout, a file of series the node's catalog lacks is damage (`check` names it).
            if limit.is_none() {
                for f in beyond {
                    tracing::warn!(path = %f.path.display(), node = %name, max_series = f.entry.stats.max_series,
                        series = count, "data file of series the node's catalog lacks is left out of the dataset");
                    left_out.push(LeftOut {
                        path: f.path.clone(),
                        node: name.clone(),
                        max_series: f.entry.stats.max_series,
                        series: count,
                    });
                }
            }
            for f in node_files.iter() {
                let mut entry = f.entry.clone();
                entry.path = format!("{name}/{}", entry.path);
                entries.push(entry.clone());
                files.push(Arc::new(LiveFile {
                    entry,
                    path: f.path.clone(),
                    series_offset: offset,
                    storage: ro_storage.clone(),
                    obsolete: AtomicBool::new(false),
                }));
            }
            // Acknowledged rows not yet in files (a node read through its WAL).
            let (_, buffered) = node.snapshot(&ScanRequest::default())?;
            for (_, rows) in buffered {
                let mut kept = Rows::default();
                for i in (0..rows.len()).filter(|&i| rows.series[i] < count) {
                    kept.push(rows.series[i].saturating_add(offset), rows.time[i], rows.value[i]);
                }
                active.push(kept);
            }
            let set = node.clock_models()?;
            for (host, model) in set.models() {
                models.entry(host.clone()).or_insert_with(|| model.clone());
            }
            version = version.max(set.version());
            fit.get_or_insert_with(|| set.config().clone());
            for doc in node_docs {
                if !documents.contains_key(doc) {
                    documents.insert(doc.to_string(), dir.clone());
                }
            }
            infos.push(DatasetNode {
                name: name.clone(),
                series_offset: offset,
                series: count,
                files: node_files.len(),
                clock_version: set.version(),
                store_id: node.manifest()?.store_id,
            });
        }
        let partition_ns = partition_ns.unwrap_or(config.partition_ns);
        // (A union has no WAL of its own: no store id.)
        let manifest = Manifest { files: entries, next_file_id, store_id: None, ..Manifest::new(partition_ns) };
        let mut fit = fit.unwrap_or_default();
        // Every model (the reference hosts' identities included) comes from its node.
        fit.reference_host = None;
        let clocks = Arc::new(ClockSet::new(version, fit, InputWatermark::default(), models));
        // The root's own clock directory holds nothing; the registry only presents the merged
        // models (as its one version: `clock_models`, `samples_at_clock(v)`).
        let mut registry = ClockRegistry::open(ro_storage.clone(), &root.join("clock"), config.clock_fit.clone())?;
        registry.adopt(clocks);
        files.sort_by_key(|f| f.entry.id);
        let parts = ((catalog, Default::default()), manifest, files, active, registry);
        let mut store = Store::assemble_read_only(root, ro_storage, clock, config, parts);
        store.union = Some(Union { nodes: infos, documents, left_out });
        Ok(store)
    }

    /// The nodes of a dataset union (see [`Store::open_dataset_read_only`]); empty for a store
    /// of one directory.
    pub fn dataset_nodes(&self) -> Vec<DatasetNode> {
        self.union.as_ref().map(|u| u.nodes.clone()).unwrap_or_default()
    }

    /// The layout of this union's series ids — each node in id order with its series count —
    /// for [`Store::open_dataset_read_only_pinned`] (empty for a store of one directory).
    pub fn dataset_layout(&self) -> Vec<(String, u32)> {
        self.dataset_nodes().into_iter().map(|n| (n.name, n.series)).collect()
    }

    /// The identity of the stores this one reads: its store id, or for a dataset union each
    /// node's, in the order of [`Self::dataset_layout`] (`None` for a store whose manifest
    /// predates store ids). A process that takes over a plan made on another process's copy
    /// of "the same" dataset checks it: the same path can hold another store.
    pub fn store_ids(&self) -> Result<Vec<Option<StoreId>>> {
        Ok(match &self.union {
            Some(u) => u.nodes.iter().map(|n| n.store_id).collect(),
            None => vec![self.manifest()?.store_id],
        })
    }

    /// The directory a document is read from: the store's, or in a union the one chosen when
    /// it was opened.
    pub(super) fn document_dir(&self, name: &str) -> &Path {
        match &self.union {
            Some(u) => u.documents.get(name).map(PathBuf::as_path).unwrap_or(self.dir.as_path()),
            None => &self.dir,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::model::{SeriesKey, WriteBatch};
    use crate::storage::OsStorage;
    use crate::wallclock::SystemClock;

    const T0: i64 = 1_767_225_600_000_000_000;
    const SEC: i64 = 1_000_000_000;

    /// Rows shifted to a union's ids.
    fn shifted(mut rows: Rows, offset: u32) -> Rows {
        rows.series.iter_mut().for_each(|id| *id += offset);
        rows
    }

    fn config() -> StoreConfig {
        StoreConfig { max_future_ns: None, ..Default::default() }
    }

    /// Writes `metric{host, extra}` for each host, 10 samples each, into a node.
    fn node(dir: &Path, hosts: &[&str], extra: (&str, &str), flush: bool) {
        let store = Store::open(dir, config()).unwrap();
        let mut b = WriteBatch::default();
        for (i, h) in hosts.iter().enumerate() {
            for k in 0..10 {
                b.push(SeriesKey::new("m", [("host", *h), extra]), T0 + k * SEC, (i * 100 + k as usize) as f64);
                b.push(SeriesKey::new("n", [("host", *h)]), T0 + k * SEC, 1.0);
            }
        }
        store.write(&b).unwrap();
        if flush {
            store.close().unwrap();
        }
    }

    fn open(root: &Path, nodes: &[&str]) -> Store {
        let names: Vec<String> = nodes.iter().map(|s| s.to_string()).collect();
        Store::open_dataset_read_only(root, &names, config(), Arc::new(OsStorage), Arc::new(SystemClock)).unwrap()
    }

    /// A node whose catalog lacks series its files use: the union leaves those files out (as it
    /// leaves out files newer than a pinned layout), and `check` on the union names them.
    #[test]
    fn check_compares_series_ids_with_the_files_node() {
        let root = tempfile::tempdir().unwrap();
        node(&root.path().join("node-0"), &["a", "b"], ("gpu", "0"), true);
        node(&root.path().join("node-1"), &["c", "d", "e"], ("gpu", "1"), true);
        let clean = open(root.path(), &["node-0", "node-1"]).check(2, &|_, _| {}).unwrap();
        assert_eq!((clean.files, clean.series, clean.problems.len()), (2, 10, 0), "{clean:?}");
        // node-0's catalog replaced by one of its first two series (its files use four).
        let n0 = root.path().join("node-0");
        let (catalog, _) = SeriesCatalog::load_dir(&OsStorage, &n0).unwrap();
        let keys: Vec<_> = catalog.keys()[..2].iter().flatten().cloned().collect();
        let first_two = crate::series::PendingSave { from: 0, end: 2, keys, retired: Vec::new() };
        crate::series::CatalogFiles::default().save(&OsStorage, &n0, &first_two).unwrap();
        let report = open(root.path(), &["node-0", "node-1"]).check(2, &|_, _| {}).unwrap();
        assert_eq!(report.series, 8);
        let problems: Vec<&str> = report.problems.iter().map(|p| p.problem.as_str()).collect();
        assert_eq!(
            problems,
            ["series id 3 is not in node node-0's catalog (2 series): the file is left out of the dataset"],
            "{report:?}"
        );
        assert!(report.problems[0].path.starts_with(&n0));
        // The node alone: its file is in the store and names the same problem.
        let alone = Store::open_read_only(&n0).unwrap().check(1, &|_, _| {}).unwrap();
        let problems: Vec<&str> = alone.problems.iter().map(|p| p.problem.as_str()).collect();
        assert_eq!(problems, ["series id 3 is not in the catalog (2 series)"], "{alone:?}");
    }

    /// Ids are remapped node by node (name order, each node's order kept), labels are the union
    /// of the nodes' keys, every scan shape returns the union with remapped ids, and a series
    /// filter in union ids selects the right rows of each node.
    #[test]
    fn union_remaps_ids_and_unions_labels() {
        let root = tempfile::tempdir().unwrap();
        node(&root.path().join("node-1"), &["c", "d"], ("nic", "mlx5_0"), true);
        node(&root.path().join("node-0"), &["a", "b"], ("gpu", "0"), true);
        let union = open(root.path(), &["node-1", "node-0"]);
        let nodes = union.dataset_nodes();
        assert_eq!(
            nodes.iter().map(|n| (n.name.as_str(), n.series_offset, n.series)).collect::<Vec<_>>(),
            [("node-0", 0, 4), ("node-1", 4, 4)]
        );
        let keys: Vec<String> = union.with_catalog(|c| c.live().map(|(_, k)| k.to_string()).collect()).unwrap();
        let n0 = Store::open_read_only(root.path().join("node-0")).unwrap();
        let n1 = Store::open_read_only(root.path().join("node-1")).unwrap();
        let node_keys = |s: &Store| s.with_catalog(|c| c.live().map(|(_, k)| k.to_string()).collect::<Vec<_>>());
        assert_eq!(keys, [node_keys(&n0).unwrap(), node_keys(&n1).unwrap()].concat());
        assert_eq!(union.with_catalog(|c| c.label_keys()).unwrap(), ["host", "gpu", "nic"]);
        // Every row of the union is a node's row with its id shifted.
        let mut want = n0.scan_all(ScanRequest::default()).unwrap();
        want.extend_from(&shifted(n1.scan_all(ScanRequest::default()).unwrap(), 4));
        let want = crate::merge::sort_dedup(&want);
        let got = union.scan_all(ScanRequest::default()).unwrap();
        assert_eq!((got.series.clone(), got.time.clone(), got.value.clone()), (want.series, want.time, want.value));
        // A filter in union ids: host c's series (ids 4, 5) and one of node-0's.
        let c = union
            .with_catalog(|cat| {
                cat.select(&crate::series::SeriesFilter {
                    labels: vec![("host".into(), vec![Some("c".into())])],
                    ..Default::default()
                })
            })
            .unwrap();
        assert_eq!(c.iter().collect::<Vec<_>>(), [4, 5]);
        let mut series = c.clone();
        series.insert(1);
        let request = ScanRequest { time: Some((T0 + 2 * SEC, T0 + 5 * SEC)), series: Some(series), value: None };
        let rows = union.scan_all(request.clone()).unwrap();
        assert_eq!(rows.len(), 9);
        assert!(rows.series.iter().all(|id| [1, 4, 5].contains(id)));
        let split = union.split_scan(request).unwrap();
        let mut n = 0;
        for u in 0..split.units().len() {
            split
                .read(u, crate::datafile::Columns::ALL, |chunk| {
                    assert!(chunk.series.iter().all(|id| [1, 4, 5].contains(id)), "{:?}", chunk.series);
                    n += chunk.len;
                    Ok(true)
                })
                .unwrap();
        }
        assert_eq!(n, 9);
        // Data file paths are relative to the root and unique across the dataset.
        let paths: Vec<String> = union.manifest().unwrap().files.iter().map(|f| f.path.clone()).collect();
        assert!(paths.iter().any(|p| p.starts_with("node-0/data/")) && paths.iter().any(|p| p.starts_with("node-1/")));
        assert_eq!(paths.iter().collect::<std::collections::BTreeSet<_>>().len(), paths.len());
        assert!(union.write(&WriteBatch::default()).is_err() || union.is_read_only());
    }

    /// A node that defines new series shifts the ids of the nodes after it in a new snapshot;
    /// a snapshot pinned to the earlier layout keeps every id (and the label columns) of the
    /// earlier one and leaves the newer series out.
    #[test]
    fn pinned_layout_keeps_the_ids_of_an_earlier_snapshot() {
        let root = tempfile::tempdir().unwrap();
        node(&root.path().join("n0"), &["a"], ("gpu", "0"), true);
        node(&root.path().join("n1"), &["b"], ("gpu", "1"), true);
        let before = open(root.path(), &["n0", "n1"]);
        let layout = before.dataset_layout();
        assert_eq!(layout, [("n0".to_string(), 2), ("n1".to_string(), 2)]);
        // n0 learns a new series (a new label key too) and writes an old one, in one new file.
        {
            let n0 = Store::open(root.path().join("n0"), config()).unwrap();
            let mut b = WriteBatch::default();
            b.push(SeriesKey::new("m", [("host", "a"), ("port", "7")]), T0, 5.0);
            b.push(SeriesKey::new("n", [("host", "a")]), T0 + 20 * SEC, 2.0);
            n0.write(&b).unwrap();
            n0.flush().unwrap();
            n0.close().unwrap();
        }
        let after = open(root.path(), &["n0", "n1"]);
        assert_eq!(after.dataset_nodes()[1].series_offset, 3);
        let pin = |layout: &[(String, u32)]| {
            Store::open_dataset_read_only_pinned(
                root.path(),
                layout,
                config(),
                Arc::new(OsStorage),
                Arc::new(SystemClock),
            )
        };
        let pinned = pin(&layout).unwrap();
        assert_eq!(pinned.dataset_layout(), layout);
        let keys = |s: &Store| s.with_catalog(|c| (c.keys().to_vec(), c.label_keys())).unwrap();
        assert_eq!(keys(&pinned), keys(&before));
        let rows = |s: &Store| s.scan_all(ScanRequest::default()).unwrap();
        assert_eq!(rows(&pinned).series, rows(&before).series);
        assert_eq!(rows(&after).len(), rows(&before).len() + 2);
        // A layout the nodes cannot satisfy is refused.
        let err = pin(&[("n0".to_string(), 9), ("n1".to_string(), 2)]).unwrap_err();
        assert!(matches!(err, Error::DatasetInvalid { .. }), "{err}");
    }

    /// Ten nodes, snapshotted eight at a time, come out in name order: ids follow the nodes'
    /// order, a document comes from the first node in that order that has it (not the first
    /// snapshot taken), and a node that cannot be opened fails the union with its own error.
    #[test]
    fn many_nodes_keep_their_order_documents_and_errors() {
        let root = tempfile::tempdir().unwrap();
        let names: Vec<String> = (0..10).map(|i| format!("node-{i}")).collect();
        for (i, name) in names.iter().enumerate() {
            let host = format!("h{i}");
            node(&root.path().join(name), &[host.as_str()], ("gpu", "0"), true);
            if i >= 3 {
                let s = Store::open(root.path().join(name), config()).unwrap();
                s.write_document("jobs.json", &format!("{{\"node\": {i}}}")).unwrap();
                s.close().unwrap();
            }
        }
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let union = open(root.path(), &refs);
        assert_eq!(union.read_document("jobs.json").unwrap().as_deref(), Some("{\"node\": 3}"));
        for (i, info) in union.dataset_nodes().iter().enumerate() {
            assert_eq!((info.name.as_str(), info.series_offset), (names[i].as_str(), 2 * i as u32));
            let host = union.with_catalog(|c| c.key(info.series_offset).map(|k| k.host().unwrap_or("").to_string()));
            assert_eq!(host.unwrap(), Some(format!("h{i}")));
        }
        std::fs::remove_file(root.path().join("node-8").join("manifest.json")).unwrap();
        let err =
            Store::open_dataset_read_only(root.path(), &names, config(), Arc::new(OsStorage), Arc::new(SystemClock))
                .unwrap_err();
        assert!(err.to_string().contains("node-8"), "{err}");
    }

    /// A node's acknowledged rows still in its WAL are in the union (shifted); documents come
    /// from the first node that has them; nodes with different partition widths are refused.
    #[test]
    fn union_reads_wal_rows_documents_and_refuses_mixed_partitions() {
        let root = tempfile::tempdir().unwrap();
        node(&root.path().join("a"), &["h1"], ("gpu", "0"), true);
        {
            let b = Store::open(root.path().join("b"), config()).unwrap();
            b.write_document("jobs.json", "{\"jobs\": []}").unwrap();
            b.close().unwrap();
        }
        // Written, acknowledged, not flushed: only in b's WAL.
        node(&root.path().join("b"), &["h2"], ("gpu", "1"), false);
        assert!(Store::open_read_only(root.path().join("b")).unwrap().manifest().unwrap().files.is_empty());
        let union = open(root.path(), &["a", "b"]);
        let all = union.scan_all(ScanRequest::default()).unwrap();
        assert_eq!(all.len(), 40);
        assert_eq!(all.series.iter().max(), Some(&3));
        assert_eq!(union.read_document("jobs.json").unwrap().as_deref(), Some("{\"jobs\": []}"));
        assert_eq!(union.read_document("topology.json").unwrap(), None);
        assert_eq!(union.document_versions("jobs.json").unwrap(), [1]);
        let other = StoreConfig { partition_ns: 60 * SEC, ..config() };
        Store::open(root.path().join("c"), other).unwrap().close().unwrap();
        let names = ["a".to_string(), "c".to_string()];
        let err =
            Store::open_dataset_read_only(root.path(), &names, config(), Arc::new(OsStorage), Arc::new(SystemClock))
                .unwrap_err();
        assert!(matches!(err, Error::DatasetInvalid { .. }), "{err}");
        assert!(!is_node_name("data") && !is_node_name("../x") && is_node_name("node-0"));
    }
}
