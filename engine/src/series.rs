//! The series catalog: metric + labels → dense [`SeriesId`], with roaring-bitmap postings.
//!
//! Ids are assigned in arrival order and never reused. Definitions of new series travel in
//! the WAL record of the write that created them, and the whole catalog is snapshotted
//! (atomically) before every manifest update, so a reopened store knows every series that
//! any durable sample refers to.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use roaring::RoaringBitmap;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::model::{HOST_LABEL, SeriesId, SeriesKey};
use crate::storage::{Storage, write_atomic};

/// In-memory series catalog with postings for metric names and label pairs.
#[derive(Debug, Default, Clone)]
pub struct SeriesCatalog {
    keys: Vec<Arc<SeriesKey>>,
    ids: HashMap<Arc<SeriesKey>, SeriesId>,
    metric_postings: HashMap<String, RoaringBitmap>,
    label_postings: HashMap<String, HashMap<String, RoaringBitmap>>,
    /// Label keys in first-seen order (stable, so that table schemas only ever grow at the end).
    label_order: Vec<String>,
}

#[derive(Deserialize)]
struct Snapshot {
    version: u32,
    series: Vec<SeriesKey>,
}

/// What [`SeriesCatalog::save`] writes: [`Snapshot`]'s layout, borrowing the keys.
#[derive(Serialize)]
struct SnapshotRef<'a> {
    version: u32,
    series: Vec<&'a SeriesKey>,
}

/// A filter on series: each present condition must hold (conjunction).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SeriesFilter {
    /// Allowed metric names (`None` = any).
    pub metrics: Option<Vec<String>>,
    /// For each label key, the allowed values (`None` in the value list position = absent).
    pub labels: Vec<(String, Vec<Option<String>>)>,
}

impl SeriesCatalog {
    /// An empty catalog.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of series.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether the catalog is empty.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The id of a key, if known.
    pub fn get(&self, key: &SeriesKey) -> Option<SeriesId> {
        self.ids.get(key).copied()
    }

    /// The key of an id.
    pub fn key(&self, id: SeriesId) -> Option<&Arc<SeriesKey>> {
        self.keys.get(id as usize)
    }

    /// All keys in id order.
    pub fn keys(&self) -> &[Arc<SeriesKey>] {
        &self.keys
    }

    /// Returns the id of `key`, inserting it (after validation) if new. The flag says whether
    /// it was inserted.
    pub fn get_or_insert(&mut self, key: &SeriesKey) -> Result<(SeriesId, bool)> {
        if let Some(id) = self.ids.get(key) {
            return Ok((*id, false));
        }
        key.validate()?;
        let id = self.push(Arc::new(key.clone()))?;
        Ok((id, true))
    }

    /// Adds a validated key that is not in the catalog yet under the next id.
    fn push(&mut self, key: Arc<SeriesKey>) -> Result<SeriesId> {
        let id = SeriesId::try_from(self.keys.len())
            .map_err(|_| Error::ResourceExhausted { what: "series catalog", limit: format!("{} series", u32::MAX) })?;
        match self.metric_postings.get_mut(&key.metric) {
            Some(p) => {
                p.insert(id);
            }
            None => {
                self.metric_postings.insert(key.metric.clone(), RoaringBitmap::from_iter([id]));
            }
        }
        for (k, v) in &key.labels {
            let values = match self.label_postings.get_mut(k) {
                Some(values) => values,
                None => {
                    self.label_order.push(k.clone());
                    self.label_postings.entry(k.clone()).or_default()
                }
            };
            match values.get_mut(v) {
                Some(p) => {
                    p.insert(id);
                }
                None => {
                    values.insert(v.clone(), RoaringBitmap::from_iter([id]));
                }
            }
        }
        self.ids.insert(key.clone(), id);
        self.keys.push(key);
        Ok(id)
    }

    /// Appends every series of `other`, in `other`'s id order, under the ids `len()` onward,
    /// and returns the first of them: `other`'s id `i` is this catalog's id `offset + i`. This
    /// is how the union of a dataset's nodes numbers its series (see `Store::open_dataset_read_only`).
    /// Label keys new to this catalog are added in `other`'s first-seen order. A key already
    /// present (a host written by two nodes) gets a second id: [`SeriesCatalog::get`] returns
    /// the first, the postings (and so every filter) both.
    pub fn append_catalog(&mut self, other: &SeriesCatalog) -> Result<SeriesId> {
        self.append_catalog_prefix(other, other.len())
    }

    /// [`SeriesCatalog::append_catalog`] of the first `n` series of `other` only (its ids
    /// `0..n`; ids are never reused, so they are the series `other` had when it had `n`).
    pub fn append_catalog_prefix(&mut self, other: &SeriesCatalog, n: usize) -> Result<SeriesId> {
        let keys = other.keys.get(..n).unwrap_or(&other.keys);
        let offset = SeriesId::try_from(self.keys.len())
            .ok()
            .filter(|o| o.checked_add(u32::try_from(keys.len()).unwrap_or(u32::MAX)).is_some())
            .ok_or_else(|| Error::ResourceExhausted {
                what: "series catalog",
                limit: format!("{} series", u32::MAX),
            })?;
        // The keys of the appended series, in `other`'s first-seen order (a key's first use
        // by `other` is among the first `n` series if any of them uses it).
        let used: std::collections::HashSet<&str> =
            keys.iter().flat_map(|k| k.labels.iter().map(|(k, _)| k.as_str())).collect();
        for k in other.label_order.iter().filter(|k| used.contains(k.as_str())) {
            if !self.label_postings.contains_key(k) {
                self.label_order.push(k.clone());
                self.label_postings.insert(k.clone(), HashMap::new());
            }
        }
        for (i, key) in keys.iter().enumerate() {
            let id = offset + i as SeriesId;
            self.metric_postings.entry(key.metric.clone()).or_default().insert(id);
            for (k, v) in &key.labels {
                self.label_postings.entry(k.clone()).or_default().entry(v.clone()).or_default().insert(id);
            }
            self.ids.entry(key.clone()).or_insert(id);
            self.keys.push(key.clone());
        }
        Ok(offset)
    }

    /// All label keys in use: `host` first, then in first-seen order (new keys only ever
    /// append, so column positions derived from this list stay stable).
    pub fn label_keys(&self) -> Vec<String> {
        let mut keys = vec![HOST_LABEL.to_string()];
        keys.extend(self.label_order.iter().filter(|k| *k != HOST_LABEL).cloned());
        keys
    }

    /// Distinct values of a label.
    pub fn label_values(&self, key: &str) -> Vec<String> {
        let mut v: Vec<String> = self.label_postings.get(key).map(|m| m.keys().cloned().collect()).unwrap_or_default();
        v.sort();
        v
    }

    /// The series matching `filter`, via postings intersections.
    pub fn select(&self, filter: &SeriesFilter) -> RoaringBitmap {
        let mut out = RoaringBitmap::new();
        out.insert_range(0..self.keys.len() as u32);
        if let Some(metrics) = &filter.metrics {
            let mut m = RoaringBitmap::new();
            for name in metrics {
                if let Some(p) = self.metric_postings.get(name) {
                    m |= p;
                }
            }
            out &= m;
        }
        for (key, values) in &filter.labels {
            let postings = self.label_postings.get(key);
            let mut m = RoaringBitmap::new();
            for value in values {
                match value {
                    Some(v) => {
                        if let Some(p) = postings.and_then(|p| p.get(v)) {
                            m |= p;
                        }
                    }
                    None => {
                        let mut absent = RoaringBitmap::new();
                        absent.insert_range(0..self.keys.len() as u32);
                        if let Some(p) = postings {
                            for bm in p.values() {
                                absent -= bm;
                            }
                        }
                        m |= absent;
                    }
                }
            }
            out &= m;
        }
        out
    }

    /// Writes the catalog atomically to `path`.
    pub fn save(&self, storage: &dyn Storage, path: &Path) -> Result<()> {
        let snapshot = SnapshotRef { version: 1, series: self.keys.iter().map(|k| k.as_ref()).collect() };
        let bytes = serde_json::to_vec(&snapshot)
            .map_err(|e| Error::CatalogCorrupt { path: path.to_path_buf(), reason: e.to_string() })?;
        write_atomic(storage, path, &crate::seal::seal(bytes)).map_err(|e| Error::io(path, e))
    }

    /// Loads a catalog written by [`SeriesCatalog::save`]; a missing file is an empty catalog.
    pub fn load(storage: &dyn Storage, path: &Path) -> Result<Self> {
        if !storage.exists(path) {
            return Ok(Self::new());
        }
        let bytes = storage.read(path).map_err(|e| Error::io(path, e))?;
        let corrupt = |reason: String| Error::CatalogCorrupt { path: path.to_path_buf(), reason };
        crate::seal::check(&bytes).map_err(&corrupt)?;
        let snapshot: Snapshot = serde_json::from_slice(&bytes).map_err(|e| corrupt(e.to_string()))?;
        if snapshot.version != 1 {
            return Err(corrupt(format!("unknown version {}", snapshot.version)));
        }
        let mut catalog = Self::new();
        catalog.keys.reserve(snapshot.series.len());
        catalog.ids.reserve(snapshot.series.len());
        for key in snapshot.series {
            key.validate().map_err(|e| corrupt(format!("bad series {key}: {e}")))?;
            let key = Arc::new(key);
            catalog.push(key.clone()).map_err(|e| corrupt(e.to_string()))?;
            // A duplicate replaced its first id in `ids` (one hash of the key, not two); the
            // half-built catalog is dropped.
            if catalog.ids.len() != catalog.keys.len() {
                return Err(corrupt(format!("duplicate series {key}")));
            }
        }
        Ok(catalog)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn key(metric: &str, host: &str, gpu: &str) -> SeriesKey {
        SeriesKey::new(metric, [("host", host), ("gpu", gpu)])
    }

    /// Appending catalogs (a dataset's nodes): ids shift by the series before, label keys are
    /// the union in first-seen order, a key in both keeps its first id for `get` and both in
    /// the postings.
    #[test]
    fn append_catalog_shifts_ids_and_unions_labels() {
        let mut a = SeriesCatalog::new();
        a.get_or_insert(&key("m", "h1", "0")).unwrap();
        a.get_or_insert(&SeriesKey::new("n", [("host", "h1")])).unwrap();
        let mut b = SeriesCatalog::new();
        b.get_or_insert(&SeriesKey::new("n", [("host", "h2"), ("port", "1")])).unwrap();
        b.get_or_insert(&key("m", "h1", "0")).unwrap();
        let mut union = SeriesCatalog::new();
        assert_eq!(union.append_catalog(&a).unwrap(), 0);
        assert_eq!(union.append_catalog(&b).unwrap(), 2);
        assert_eq!(union.len(), 4);
        assert_eq!(union.key(2).unwrap().as_ref(), b.key(0).unwrap().as_ref());
        assert_eq!(union.label_keys(), ["host", "gpu", "port"]);
        assert_eq!(union.get(&key("m", "h1", "0")), Some(0));
        let m = SeriesFilter { metrics: Some(vec!["m".into()]), ..Default::default() };
        assert_eq!(union.select(&m).iter().collect::<Vec<_>>(), [0, 3]);
        let port = SeriesFilter { labels: vec![("port".into(), vec![Some("1".into())])], ..Default::default() };
        assert_eq!(union.select(&port).iter().collect::<Vec<_>>(), [2]);
    }

    #[test]
    fn assigns_dense_ids_and_selects_by_postings() {
        let mut c = SeriesCatalog::new();
        assert_eq!(c.get_or_insert(&key("util", "n1", "0")).unwrap(), (0, true));
        assert_eq!(c.get_or_insert(&key("util", "n1", "1")).unwrap(), (1, true));
        assert_eq!(c.get_or_insert(&key("temp", "n2", "")).unwrap(), (2, true));
        assert_eq!(c.get_or_insert(&key("util", "n1", "0")).unwrap(), (0, false));
        let f = SeriesFilter { metrics: Some(vec!["util".into()]), labels: vec![] };
        assert_eq!(c.select(&f).iter().collect::<Vec<_>>(), vec![0, 1]);
        let f = SeriesFilter { metrics: None, labels: vec![("gpu".into(), vec![Some("1".into()), None])] };
        assert_eq!(c.select(&f).iter().collect::<Vec<_>>(), vec![1, 2]);
        assert_eq!(c.label_keys(), vec!["host", "gpu"]);
        c.get_or_insert(&SeriesKey::new("x", [("host", "a"), ("aaa", "1")])).unwrap();
        assert_eq!(c.label_keys(), vec!["host", "gpu", "aaa"]);
    }

    #[test]
    fn rejects_missing_host_and_reserved_labels() {
        let mut c = SeriesCatalog::new();
        let e = c.get_or_insert(&SeriesKey::new("m", [("gpu", "0")])).unwrap_err();
        assert!(matches!(e, Error::MissingHost { .. }), "{e}");
        let e = c.get_or_insert(&SeriesKey::new("m", [("host", "a"), ("value", "x")])).unwrap_err();
        assert!(e.to_string().contains("reserved"), "{e}");
    }

    #[test]
    fn save_load_round_trip_and_garbage() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("series.json");
        let storage = crate::storage::OsStorage;
        let mut c = SeriesCatalog::new();
        for i in 0..100 {
            c.get_or_insert(&key("m", &format!("h{i}"), "0")).unwrap();
        }
        c.save(&storage, &path).unwrap();
        let d = SeriesCatalog::load(&storage, &path).unwrap();
        assert_eq!(d.keys().len(), 100);
        assert_eq!(d.get(&key("m", "h42", "0")), Some(42));
        assert_eq!(d.label_keys(), vec!["host", "gpu"]);
        let f = SeriesFilter { metrics: None, labels: vec![("host".into(), vec![Some("h7".into())])] };
        assert_eq!(d.select(&f).iter().collect::<Vec<_>>(), vec![7], "postings rebuilt on load");
        let dup =
            r#"{"version":1,"series":[{"metric":"m","labels":{"host":"a"}},{"metric":"m","labels":{"host":"a"}}]}"#;
        std::fs::write(&path, dup).unwrap();
        let e = SeriesCatalog::load(&storage, &path).unwrap_err();
        assert!(e.to_string().contains("duplicate series"), "{e}");
        std::fs::write(&path, br#"{"version":1,"series":[{"metric":"m","labels":{"gpu":"0"}}]}"#).unwrap();
        let e = SeriesCatalog::load(&storage, &path).unwrap_err();
        assert!(matches!(e, Error::CatalogCorrupt { .. }), "a series without host: {e}");
        std::fs::write(&path, b"{not json").unwrap();
        let e = SeriesCatalog::load(&storage, &path).unwrap_err();
        assert!(matches!(e, Error::CatalogCorrupt { .. }), "{e}");
    }

    /// The saved catalog is sealed (`crate::seal`): a label value changed on disk, which
    /// still parses as another valid series, is `CatalogCorrupt`, not a renamed series.
    #[test]
    fn a_changed_label_on_disk_is_corruption_not_a_renamed_series() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("series.json");
        let storage = crate::storage::OsStorage;
        let mut c = SeriesCatalog::new();
        for i in 0..20 {
            c.get_or_insert(&key("m", &format!("node-{i:02}"), "0")).unwrap();
        }
        c.save(&storage, &path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replacen("node-13", "node-1;", 1)).unwrap();
        let e = SeriesCatalog::load(&storage, &path).unwrap_err();
        assert!(matches!(e, Error::CatalogCorrupt { .. }) && e.to_string().contains("checksum mismatch"), "{e}");
        std::fs::write(&path, &text).unwrap();
        assert_eq!(SeriesCatalog::load(&storage, &path).unwrap().len(), 20);
    }
}
