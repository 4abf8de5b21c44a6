//! The series catalog: metric + labels → dense [`SeriesId`], with roaring-bitmap postings.
//!
//! Ids are assigned in arrival order and never reused. Definitions of new series travel in
//! the WAL record of the write that created them, and the series new since the last save are
//! saved (atomically, as an increment or a new snapshot: [`CatalogFiles`]) before every
//! manifest update, so a reopened store knows every series that any durable sample refers to.
//!
//! A series that retention left without any sample is *retired* ([`SeriesCatalog::retire`],
//! by the store's compaction pass): its id stays assigned (data files and older read
//! snapshots hold ids) but names no series any more: [`SeriesCatalog::key`] is `None`, no
//! lookup or filter finds it, and writing its key again defines a new series under a new id.

mod files;
mod parse;

use std::hash::BuildHasher;
use std::sync::Arc;

use hashbrown::HashTable;
use hashbrown::hash_table::Entry;

use roaring::RoaringBitmap;

use crate::error::{Error, Result};
use crate::model::{HOST_LABEL, Labels, Name, SeriesId, SeriesKey, validate_parts};

pub use files::{CATALOG_DIR, CATALOG_FILE, CatalogFiles, CatalogSave, PendingSave};

/// The catalog's hash maps: foldhash (seeded per process) instead of SipHash. Every write
/// looks its series up here, and loading a million-series catalog does several lookups per
/// series. hashbrown's rather than std's for `get_key_value_mut`: one lookup both finds a
/// name's shared copy and its posting list.
type HashMap<K, V> = hashbrown::HashMap<K, V, foldhash::fast::RandomState>;

/// In-memory series catalog with postings for metric names and label pairs.
///
/// Each distinct metric name, label key and value of a label key is held once: a key added to
/// the catalog is stored with the [`Name`]s of the postings' keys (interned), so a million
/// series on 2,000 hosts hold 2,000 host names, not a million.
#[derive(Debug, Default, Clone)]
pub struct SeriesCatalog {
    /// The key of each id; `None` for a retired id (8 bytes each: an id is never reused).
    keys: Vec<Option<Arc<SeriesKey>>>,
    /// The retired ids (those whose `keys` entry is `None`).
    retired: RoaringBitmap,
    /// Each key's first id, found by the key's hash; the key itself is `keys[id]`, so the
    /// table holds 8 bytes a series (a map from `Arc<SeriesKey>` held 16): the id and 32 bits
    /// of the key's hash, of which the table's hash of the entry is made again when the table
    /// grows. Without them each growth hashed every key again through its pointers: a quarter
    /// of a reader's replay of a WAL that defines a million series.
    ids: HashTable<Slot>,
    hasher: foldhash::fast::RandomState,
    metric_postings: HashMap<Name, RoaringBitmap>,
    label_postings: HashMap<Name, HashMap<Name, RoaringBitmap>>,
    /// Label keys in first-seen order (stable, so that table schemas only ever grow at the end).
    label_order: Vec<Name>,
}

/// An entry of the ids table: a series id and the bits of its key's hash that the table's hash
/// of the entry is made of ([`slot_hash`]).
#[derive(Debug, Clone, Copy)]
struct Slot {
    id: SeriesId,
    hash: u32,
}

/// The 32 bits of a key's hash (`BuildHasher::hash_one`) that its [`Slot`] keeps.
fn fold_hash(hash: u64) -> u32 {
    (hash ^ (hash >> 32)) as u32
}

/// The ids table's hash of a slot, from the bits it keeps: spread over 64 bits by an odd
/// multiplier (hashbrown takes the bucket from the low bits, which stay those of `hash`, and a
/// tag from the top seven, which mix all 32).
fn slot_hash(hash: u32) -> u64 {
    u64::from(hash).wrapping_mul(0x9e37_79b9_7f4a_7c15)
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

    /// Number of ids assigned, retired ones included: the next new series gets this id.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Number of live series (ids assigned and not retired).
    pub fn live_len(&self) -> usize {
        self.keys.len() - self.retired.len() as usize
    }

    /// The retired ids: assigned once, naming no series now (see [`SeriesCatalog::retire`]).
    pub fn retired(&self) -> &RoaringBitmap {
        &self.retired
    }

    /// Whether the catalog is empty.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The id of a key, if known.
    pub fn get(&self, key: &SeriesKey) -> Option<SeriesId> {
        let keys = &self.keys;
        let hash = fold_hash(self.hasher.hash_one(key));
        let same = |s: &Slot| s.hash == hash && live(keys, s.id).is_some_and(|k| **k == *key);
        self.ids.find(slot_hash(hash), same).map(|s| s.id)
    }

    /// The key of an id (`None` for an id not assigned or retired).
    pub fn key(&self, id: SeriesId) -> Option<&Arc<SeriesKey>> {
        live(&self.keys, id)
    }

    /// The key of every id in id order, `None` for a retired id.
    pub fn keys(&self) -> &[Option<Arc<SeriesKey>>] {
        &self.keys
    }

    /// The live series with their ids, in id order.
    pub fn live(&self) -> impl Iterator<Item = (SeriesId, &Arc<SeriesKey>)> {
        self.keys.iter().enumerate().filter_map(|(id, k)| Some((id as SeriesId, k.as_ref()?)))
    }

    /// Returns the id of `key`, inserting it (after validation) if new. The flag says whether
    /// it was inserted.
    pub fn get_or_insert(&mut self, key: &SeriesKey) -> Result<(SeriesId, bool)> {
        if let Some(id) = self.get(key) {
            return Ok((id, false));
        }
        key.validate()?;
        let mut key = key.clone();
        self.intern(&mut key);
        let (id, _) = self.push(key)?;
        Ok((id, true))
    }

    /// [`SeriesCatalog::get_or_insert`] of the key `metric{labels}`, given as text borrowed
    /// from elsewhere (a WAL record's definition, replayed): the same id, flag and errors as
    /// `get_or_insert` of the key that [`crate::store::record::def_key`] builds of the same
    /// parts. With `labels` sorted by key and each key once (as writers write them), no key is
    /// built to look it up: the text is hashed once (as the key would hash), checked in place,
    /// and each name is looked up once, in the postings that both hold its shared copy and
    /// take the new id; only a name new to the catalog is allocated. Other labels go through
    /// `get_or_insert`.
    pub fn get_or_insert_parts(&mut self, metric: &str, labels: &[(&str, &str)]) -> Result<(SeriesId, bool)> {
        if !labels.windows(2).all(|w| w[0].0 < w[1].0) {
            return self.get_or_insert(&crate::store::record::def_key(metric, labels));
        }
        // `SeriesKey`'s derived `Hash` hashes the metric's text, then the labels as a slice of
        // pairs of text: the same calls as this tuple's (`key_hash_matches_parts_hash`).
        let hash = fold_hash(self.hasher.hash_one((metric, labels)));
        let keys = &self.keys;
        let same = |s: &Slot| s.hash == hash && live(keys, s.id).is_some_and(|k| k.eq_parts(metric, labels));
        if let Some(s) = self.ids.find(slot_hash(hash), same) {
            return Ok((s.id, false));
        }
        validate_parts(metric, labels.iter().copied())?;
        let id = SeriesId::try_from(self.keys.len())
            .map_err(|_| Error::ResourceExhausted { what: "series catalog", limit: format!("{} series", u32::MAX) })?;
        let metric = match self.metric_postings.get_key_value_mut(metric) {
            Some((name, p)) => {
                append(p, id);
                name.clone()
            }
            None => {
                let name = Name::from(metric);
                self.metric_postings.insert(name.clone(), RoaringBitmap::from_iter([id]));
                name
            }
        };
        let mut pairs = Vec::with_capacity(labels.len());
        for &(k, v) in labels {
            let (k, values) = match self.label_postings.get_key_value_mut(k) {
                Some((k, values)) => (k.clone(), values),
                None => {
                    let k = Name::from(k);
                    self.label_order.push(k.clone());
                    (k.clone(), self.label_postings.entry(k).or_default())
                }
            };
            let v = match values.get_key_value_mut(v) {
                Some((v, p)) => {
                    append(p, id);
                    v.clone()
                }
                None => {
                    let v = Name::from(v);
                    values.insert(v.clone(), RoaringBitmap::from_iter([id]));
                    v
                }
            };
            pairs.push((k, v));
        }
        self.keys.push(Some(Arc::new(SeriesKey { metric, labels: Labels::from_sorted(pairs) })));
        self.ids.insert_unique(slot_hash(hash), Slot { id, hash }, |s| slot_hash(s.hash));
        Ok((id, true))
    }

    /// Replaces the names of `key` by the catalog's own where it has them (the same text):
    /// a key kept by the catalog then holds no copy of a name that it already had.
    fn intern(&self, key: &mut SeriesKey) {
        let share = |name: &mut Name, known: Option<&Name>| {
            if let Some(known) = known
                && !Name::ptr_eq(name, known)
            {
                *name = known.clone();
            }
        };
        let metric = self.metric_postings.get_key_value(key.metric.as_str()).map(|(k, _)| k);
        share(&mut key.metric, metric);
        for (k, v) in key.labels.pairs_mut() {
            if let Some((known, values)) = self.label_postings.get_key_value(k.as_str()) {
                share(k, Some(known));
                share(v, values.get_key_value(v.as_str()).map(|(v, _)| v));
            }
        }
    }

    /// Adds a validated key under the next id, and says whether it is new: a key already in
    /// the catalog (a host written by two nodes of a dataset union) gets the new id too, but
    /// [`SeriesCatalog::get`] goes on returning the first. The postings keep the names of the
    /// first key that brings each, so a key should hold the catalog's own names
    /// ([`SeriesCatalog::intern`]), as those parsed from one file do.
    fn push(&mut self, key: SeriesKey) -> Result<(SeriesId, bool)> {
        let id = SeriesId::try_from(self.keys.len())
            .map_err(|_| Error::ResourceExhausted { what: "series catalog", limit: format!("{} series", u32::MAX) })?;
        let new = self.insert_id(&key, id);
        match self.metric_postings.get_mut(key.metric.as_str()) {
            Some(p) => append(p, id),
            None => {
                self.metric_postings.insert(key.metric.clone(), RoaringBitmap::from_iter([id]));
            }
        }
        for (k, v) in &key.labels {
            let values = match self.label_postings.get_mut(k.as_str()) {
                Some(values) => values,
                None => {
                    self.label_order.push(k.clone());
                    self.label_postings.entry(k.clone()).or_default()
                }
            };
            match values.get_mut(v.as_str()) {
                Some(p) => append(p, id),
                None => {
                    values.insert(v.clone(), RoaringBitmap::from_iter([id]));
                }
            }
        }
        self.keys.push(Some(Arc::new(key)));
        Ok((id, new))
    }

    /// Records `id` as the id of `key` unless the key has one (`false`). `id` must be
    /// `keys.len()`, the key pushed after.
    fn insert_id(&mut self, key: &SeriesKey, id: SeriesId) -> bool {
        let keys = &self.keys;
        let hash = fold_hash(self.hasher.hash_one(key));
        let same = |s: &Slot| s.hash == hash && live(keys, s.id).is_some_and(|k| **k == *key);
        match self.ids.entry(slot_hash(hash), same, |s| slot_hash(s.hash)) {
            Entry::Occupied(_) => false,
            Entry::Vacant(e) => {
                e.insert(Slot { id, hash });
                true
            }
        }
    }

    /// Room for `n` more series.
    fn reserve(&mut self, n: usize) {
        self.ids.reserve(n, |s| slot_hash(s.hash));
        self.keys.reserve(n);
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
        // Retired ids of `other` are retired here too: the node's data files keep its ids.
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
            keys.iter().flatten().flat_map(|k| k.labels.iter().map(|(k, _)| k.as_str())).collect();
        for k in other.label_order.iter().filter(|k| used.contains(k.as_str())) {
            if !self.label_postings.contains_key(k) {
                self.label_order.push(k.clone());
                self.label_postings.insert(k.clone(), HashMap::default());
            }
        }
        for (i, key) in keys.iter().enumerate() {
            let id = offset + i as SeriesId;
            let Some(key) = key else {
                self.retired.insert(id);
                self.keys.push(None);
                continue;
            };
            append(self.metric_postings.entry(key.metric.clone()).or_default(), id);
            for (k, v) in &key.labels {
                append(self.label_postings.entry(k.clone()).or_default().entry(v.clone()).or_default(), id);
            }
            self.insert_id(key, id);
            self.keys.push(Some(key.clone()));
        }
        Ok(offset)
    }

    /// All label keys in use: `host` first, then in first-seen order (new keys only ever
    /// append, so column positions derived from this list stay stable). A key whose last
    /// series was retired stays in the list of this catalog (positions stay stable for the
    /// readers of this process); a catalog loaded from the files afterwards lists only the
    /// keys of live series.
    pub fn label_keys(&self) -> Vec<String> {
        let mut keys = vec![HOST_LABEL.to_string()];
        keys.extend(self.label_order.iter().filter(|k| *k != HOST_LABEL).map(Name::to_string));
        keys
    }

    /// Distinct values of a label among the live series.
    pub fn label_values(&self, key: &str) -> Vec<String> {
        let mut v: Vec<String> =
            self.label_postings.get(key).map(|m| m.keys().map(Name::to_string).collect()).unwrap_or_default();
        v.sort();
        v
    }

    /// The live series matching `filter`, via postings intersections.
    pub fn select(&self, filter: &SeriesFilter) -> RoaringBitmap {
        let mut out = self.live_ids();
        if let Some(metrics) = &filter.metrics {
            let mut m = RoaringBitmap::new();
            for name in metrics {
                if let Some(p) = self.metric_postings.get(name.as_str()) {
                    m |= p;
                }
            }
            out &= m;
        }
        for (key, values) in &filter.labels {
            let postings = self.label_postings.get(key.as_str());
            let mut m = RoaringBitmap::new();
            for value in values {
                match value {
                    Some(v) => {
                        if let Some(p) = postings.and_then(|p| p.get(v.as_str())) {
                            m |= p;
                        }
                    }
                    None => {
                        let mut absent = self.live_ids();
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

    /// Every live id (assigned and not retired).
    pub fn live_ids(&self) -> RoaringBitmap {
        let mut all = RoaringBitmap::new();
        all.insert_range(0..self.keys.len() as u32);
        all -= &self.retired;
        all
    }

    /// Retires the live series among `ids`: each keeps its id (never reused), but no lookup,
    /// filter or posting finds it any more, [`SeriesCatalog::key`] is `None`, and writing its
    /// key again defines a new series. A label key whose last series is retired stays in
    /// [`SeriesCatalog::label_keys`] (column positions stay stable). Returns how many were
    /// live. The store calls this for series that retention left without any sample
    /// (`Store::compact`); the files are rewritten as a snapshot by the next save.
    pub fn retire(&mut self, ids: &RoaringBitmap) -> usize {
        let mut n = 0;
        for id in ids.iter() {
            let Some(key) = self.keys.get_mut(id as usize).and_then(Option::take) else { continue };
            n += 1;
            self.retired.insert(id);
            self.unindex(&key, id);
        }
        n
    }

    /// Removes `id` (whose key was `key`) from the ids table and the postings; a label key
    /// keeps its (possibly empty) map of values, so that it stays in `label_order` once.
    fn unindex(&mut self, key: &SeriesKey, id: SeriesId) {
        // `ids` holds a key's first id (a dataset union may hold a key twice).
        if let Ok(e) = self.ids.find_entry(slot_hash(fold_hash(self.hasher.hash_one(key))), |s| s.id == id) {
            e.remove();
        }
        remove_posting(&mut self.metric_postings, &key.metric, id);
        for (k, v) in &key.labels {
            if let Some(values) = self.label_postings.get_mut(k.as_str()) {
                remove_posting(values, v, id);
            }
        }
    }

    /// Appends `n` ids that are retired from the start (a loaded catalog's retired ranges).
    fn push_retired(&mut self, n: usize) -> Result<()> {
        let start = self.keys.len();
        let end = start.checked_add(n).filter(|&e| e <= u32::MAX as usize).ok_or_else(|| Error::ResourceExhausted {
            what: "series catalog",
            limit: format!("{} series", u32::MAX),
        })?;
        self.retired.insert_range(start as u32..end as u32);
        self.keys.resize(end, None);
        Ok(())
    }

    /// Removes the series from id `n` on, as if they had never been added (what a read-only
    /// snapshot that retries does to the series its WAL replay defined).
    pub fn truncate(&mut self, n: usize) {
        while self.keys.len() > n {
            let Some(key) = self.keys.pop() else { break };
            let id = self.keys.len() as SeriesId;
            let Some(key) = key else {
                self.retired.remove(id);
                continue;
            };
            // `ids` holds a key's first id (a dataset union may hold a key twice).
            if let Ok(e) = self.ids.find_entry(slot_hash(fold_hash(self.hasher.hash_one(&*key))), |s| s.id == id) {
                e.remove();
            }
            remove_posting(&mut self.metric_postings, &key.metric, id);
            for (k, v) in &key.labels {
                if let Some(values) = self.label_postings.get_mut(k.as_str()) {
                    remove_posting(values, v, id);
                    // A key no earlier series has was first seen in this one: the last in order.
                    if values.is_empty() {
                        self.label_postings.remove(k.as_str());
                        self.label_order.retain(|o| o != k);
                    }
                }
            }
        }
    }
}

/// The live key of `id` in `keys`.
fn live(keys: &[Option<Arc<SeriesKey>>], id: SeriesId) -> Option<&Arc<SeriesKey>> {
    keys.get(id as usize).and_then(Option::as_ref)
}

/// Removes `id` from the posting list of `name`, and the list once it is empty.
fn remove_posting(postings: &mut HashMap<Name, RoaringBitmap>, name: &str, id: SeriesId) {
    if let Some(p) = postings.get_mut(name) {
        p.remove(id);
        if p.is_empty() {
            postings.remove(name);
        }
    }
}

/// Adds `id` to a posting list (ids are assigned in increasing order, so it is past the
/// list's end). An insert, not `try_push`: on a container in bitmap form (4,096 ids or more of
/// 65,536) `try_push` first finds the container's largest id by scanning its words down from
/// the top, up to 1,024 a push, where an insert sets the bit (on an array it searches, 12
/// steps at most); adding 1.2 M series to 6 postings each took 2.4-5x longer with `try_push`
/// (benches/README.md, "Readers of a WAL full of new series").
fn append(postings: &mut RoaringBitmap, id: SeriesId) {
    postings.insert(id);
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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

    /// The catalog keeps one copy of each name: keys added separately (as ingest adds them,
    /// each with its own strings) share the names of the series before them.
    #[test]
    fn keys_share_their_names() {
        let mut c = SeriesCatalog::new();
        for gpu in ["0", "1"] {
            c.get_or_insert(&key("util", "n1", gpu)).unwrap();
        }
        c.get_or_insert(&SeriesKey::new("temp", [("host", "n1"), ("gpu", "1")])).unwrap();
        let [a, b, t] = [0, 1, 2].map(|id| c.key(id).unwrap().clone());
        assert!(Name::ptr_eq(&a.metric, &b.metric));
        let names = |k: &SeriesKey| k.labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect::<Vec<_>>();
        let (a, b, t) = (names(&a), names(&b), names(&t));
        assert!(Name::ptr_eq(&a[0].0, &b[0].0) && Name::ptr_eq(&a[1].0, &t[1].0), "label keys");
        assert!(Name::ptr_eq(&a[1].1, &t[1].1), "host n1");
        assert!(Name::ptr_eq(&b[0].1, &t[0].1), "gpu 1");
        assert!(!Name::ptr_eq(&a[0].1, &b[0].1), "gpu 0 and gpu 1 differ");
    }

    /// The hash `get_or_insert_parts` computes of borrowed text is the key's own: a series
    /// defined from a WAL record is found by `get` and the ids table grows by the same hash.
    #[test]
    fn key_hash_matches_parts_hash() {
        let c = SeriesCatalog::new();
        for key in [
            key("util", "n1", "0"),
            SeriesKey::new("m", [("host", "h")]),
            SeriesKey::new("ünits", [("host", "nöde"), ("a", ""), ("b", "x")]),
            SeriesKey { metric: "m".into(), labels: Labels::new() },
        ] {
            let labels: Vec<(&str, &str)> = key.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            assert_eq!(c.hasher.hash_one(&key), c.hasher.hash_one((key.metric.as_str(), labels.as_slice())), "{key}");
        }
    }

    /// A series definition's parts, as a WAL record may hold them: labels sorted or not, a key
    /// twice, invalid or reserved names, no host.
    fn def_parts() -> impl Strategy<Value = (String, Vec<(String, String)>)> {
        let name = prop_oneof![
            8 => prop::sample::select(vec!["host", "gpu", "pod", "rank", "a", "zz"]).prop_map(String::from),
            1 => Just("value".to_string()),
            1 => Just("bad key".to_string()),
            1 => Just(String::new()),
        ];
        let value = prop_oneof![
            8 => (0..6u8).prop_map(|i| format!("v{i}")),
            1 => Just("nöde 1".to_string()),
            1 => Just("nul\0".to_string()),
        ];
        let metric = prop_oneof![
            8 => prop::sample::select(vec!["util", "temp", "ünits"]).prop_map(String::from),
            1 => Just("bad metric".to_string()),
        ];
        let labels = prop::collection::vec((name, value), 0..5).prop_map(|mut pairs| {
            // Mostly as writers write them: sorted by key, each once, with a host.
            if pairs.len() % 4 != 3 {
                pairs.push(("host".into(), "h".into()));
                pairs.sort();
                pairs.dedup_by(|a, b| a.0 == b.0);
            }
            pairs
        });
        (metric, labels)
    }

    proptest::proptest! {
        /// `get_or_insert_parts` of borrowed parts is `get_or_insert` of the key `def_key`
        /// builds of them: the same ids, flags and errors, the same keys, label keys and
        /// postings, and names shared the same way.
        #[test]
        fn get_or_insert_parts_is_get_or_insert_of_the_key(defs in prop::collection::vec(def_parts(), 1..60)) {
            let (mut owned, mut parts) = (SeriesCatalog::new(), SeriesCatalog::new());
            for (metric, labels) in &defs {
                let labels: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                let want = owned.get_or_insert(&crate::store::record::def_key(metric, &labels));
                let got = parts.get_or_insert_parts(metric, &labels);
                proptest::prop_assert_eq!(format!("{got:?}"), format!("{want:?}"));
            }
            proptest::prop_assert_eq!(parts.keys(), owned.keys());
            proptest::prop_assert_eq!(parts.label_keys(), owned.label_keys());
            for key in owned.keys().iter().flatten() {
                proptest::prop_assert_eq!(parts.get(key), owned.get(key));
            }
            let mut filters = vec![SeriesFilter { metrics: Some(vec!["util".into(), "ünits".into()]), labels: vec![] }];
            for k in ["host", "gpu", "pod", "zz"] {
                proptest::prop_assert_eq!(parts.label_values(k), owned.label_values(k));
                let values = vec![Some("v1".to_string()), Some("h".to_string()), Some("nöde 1".to_string()), None];
                for v in values {
                    filters.push(SeriesFilter { metrics: None, labels: vec![(k.into(), vec![v])] });
                }
            }
            for f in &filters {
                proptest::prop_assert_eq!(parts.select(f), owned.select(f), "{:?}", f);
            }
            // Each distinct name held once: two series with the same host share its text.
            let hosts: Vec<&Name> = parts.keys().iter().flatten().filter_map(|k| k.labels.get("host")).collect();
            for pair in hosts.windows(2) {
                proptest::prop_assert_eq!(Name::ptr_eq(pair[0], pair[1]), pair[0] == pair[1]);
            }
            // And the catalog truncates and grows again as one built the other way.
            let n = parts.len() / 2;
            parts.truncate(n);
            owned.truncate(n);
            proptest::prop_assert_eq!(parts.keys(), owned.keys());
            let (metric, labels) = &defs[0];
            let labels: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let want = owned.get_or_insert(&crate::store::record::def_key(metric, &labels));
            proptest::prop_assert_eq!(format!("{:?}", parts.get_or_insert_parts(metric, &labels)), format!("{want:?}"));
        }
    }

    /// A retired id keeps its place (ids are not reused) but names no series: no key, no
    /// lookup, no posting or filter (the "label absent" one included), no label value; its
    /// label key stays listed; its key written again is a new series under a new id; a union
    /// numbers past it.
    #[test]
    fn retired_ids_name_no_series() {
        let mut c = SeriesCatalog::new();
        let a = SeriesKey::new("m", [("host", "h1"), ("pod", "p1")]);
        let b = SeriesKey::new("m", [("host", "h2")]);
        let d = key("n", "h1", "0");
        for k in [&a, &b, &d] {
            c.get_or_insert(k).unwrap();
        }
        assert_eq!(c.retire(&RoaringBitmap::from_iter([0, 2, 7])), 2);
        assert_eq!(c.retire(&RoaringBitmap::from_iter([0])), 0, "retired once");
        assert_eq!((c.len(), c.live_len()), (3, 1));
        assert!(c.key(0).is_none() && c.key(2).is_none());
        assert_eq!((c.get(&a), c.get(&b), c.get(&d)), (None, Some(1), None));
        let all = SeriesFilter::default();
        assert_eq!(c.select(&all).iter().collect::<Vec<_>>(), [1]);
        let m = SeriesFilter { metrics: Some(vec!["m".into(), "n".into()]), labels: vec![] };
        assert_eq!(c.select(&m).iter().collect::<Vec<_>>(), [1]);
        let no_pod = SeriesFilter { metrics: None, labels: vec![("pod".into(), vec![None, Some("p1".into())])] };
        assert_eq!(c.select(&no_pod).iter().collect::<Vec<_>>(), [1]);
        assert_eq!(c.label_values("host"), ["h2"]);
        assert!(c.label_values("pod").is_empty());
        assert_eq!(c.label_keys(), ["host", "pod", "gpu"], "label keys stay in place");
        assert_eq!(c.live().map(|(id, k)| (id, k.to_string())).collect::<Vec<_>>(), [(1, b.to_string())]);
        // Written again: a new series.
        assert_eq!(c.get_or_insert(&a).unwrap(), (3, true));
        assert_eq!(c.get_or_insert_parts("n", &[("gpu", "0"), ("host", "h1")]).unwrap(), (4, true));
        assert_eq!(c.get(&a), Some(3));
        assert_eq!(c.label_keys(), ["host", "pod", "gpu"], "no key listed twice");
        assert_eq!(c.select(&no_pod).iter().collect::<Vec<_>>(), [1, 3, 4]);
        // A union keeps the node's ids: retired ones stay retired, offsets count them.
        let mut union = SeriesCatalog::new();
        union.get_or_insert(&SeriesKey::new("x", [("host", "h9")])).unwrap();
        assert_eq!(union.append_catalog(&c).unwrap(), 1);
        assert_eq!((union.len(), union.live_len()), (6, 4));
        assert_eq!(union.retired().iter().collect::<Vec<_>>(), [1, 3]);
        assert_eq!(union.key(4).map(|k| k.to_string()), Some(a.to_string()));
        // Truncating over retired ids forgets them too.
        c.truncate(1);
        assert_eq!((c.len(), c.live_len(), c.retired().len()), (1, 0, 1));
        assert_eq!(c.get_or_insert(&b).unwrap(), (1, true));
    }

    #[test]
    fn rejects_missing_host_and_reserved_labels() {
        let mut c = SeriesCatalog::new();
        let e = c.get_or_insert(&SeriesKey::new("m", [("gpu", "0")])).unwrap_err();
        assert!(matches!(e, Error::MissingHost { .. }), "{e}");
        let e = c.get_or_insert(&SeriesKey::new("m", [("host", "a"), ("value", "x")])).unwrap_err();
        assert!(e.to_string().contains("reserved"), "{e}");
    }

    /// `truncate(n)` leaves the catalog the first `n` series would have built: keys, ids,
    /// postings and label keys (a key first seen after `n` is gone).
    #[test]
    fn truncate_undoes_the_newest_series() {
        let keys: Vec<SeriesKey> = (0..10)
            .map(|i| match i {
                7 => SeriesKey::new("late", [("host", "h7"), ("nic", "mlx5_0")]),
                _ => key(if i % 2 == 0 { "m" } else { "n" }, &format!("h{}", i % 4), &i.to_string()),
            })
            .collect();
        let build = |n: usize| {
            let mut c = SeriesCatalog::new();
            for k in &keys[..n] {
                c.get_or_insert(k).unwrap();
            }
            c
        };
        for n in [0, 3, 6, 7, 8, 10] {
            let mut c = build(10);
            c.truncate(n);
            let want = build(n);
            assert_eq!(c.keys(), want.keys(), "n = {n}");
            assert_eq!(c.label_keys(), want.label_keys(), "n = {n}");
            assert_eq!(c.ids.len(), n);
            assert!((0..n as SeriesId).all(|id| c.get(&keys[id as usize]) == Some(id)));
            for k in &keys {
                assert_eq!(c.get(k), want.get(k), "n = {n}, {k}");
            }
            let filters = [
                SeriesFilter { metrics: Some(vec!["m".into(), "late".into()]), labels: vec![] },
                SeriesFilter { metrics: None, labels: vec![("host".into(), vec![Some("h3".into())])] },
                SeriesFilter { metrics: None, labels: vec![("nic".into(), vec![Some("mlx5_0".into()), None])] },
            ];
            for f in &filters {
                assert_eq!(c.select(f), want.select(f), "n = {n}, {f:?}");
            }
            assert_eq!(c.label_values("gpu"), want.label_values("gpu"));
            // And it grows again as the shorter catalog would.
            c.get_or_insert(&keys[9]).unwrap();
            let id = if n == 10 { 9 } else { n as SeriesId };
            assert_eq!(c.get(&keys[9]), Some(id), "n = {n}");
        }
    }
}
