//! Label sets seen before → their store series id.
//!
//! Prometheus sends every series' full label set in every request. Turning those bytes into a
//! [`SeriesKey`](lockstep_engine::SeriesKey) (a `String` per label, validation, hashing and a
//! catalog lookup in the store) was most of the server's work per sample. The cache keys on
//! the label bytes as sent, so a series seen before is one hash of its bytes and one map
//! lookup; its samples go to the store by id ([`Store::write_rows`](lockstep_engine::Store)).
//!
//! Correct by construction: the conversion from label bytes to a series key is deterministic,
//! and the store never reuses a series id. It retires the ids of series that retention left
//! without samples, and then changes its catalog generation
//! ([`Store::catalog_generation`](lockstep_engine::Store)): the cache starts over when the
//! generation it is asked with is not the one its ids were resolved in, so a series silent for
//! longer than the retention is resolved by key again. Bounded by [`MAX_BYTES`] of label
//! bytes; when full the cache starts over (misses are only slower).

use std::collections::HashMap;
use std::sync::Mutex;

use lockstep_engine::SeriesId;

use super::PromLabel;
use hyper::body::Bytes;

/// Most label bytes (keys) held; about 300 k series of 200 label bytes each.
pub const MAX_BYTES: usize = 64 << 20;

/// The cache; one per HTTP listener.
#[derive(Debug, Default)]
pub(crate) struct SeriesCache {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    ids: HashMap<Box<[u8]>, SeriesId, foldhash::fast::RandomState>,
    bytes: usize,
    /// The store's catalog generation the ids were resolved in.
    generation: u64,
}

impl Inner {
    /// Starts over when the store's catalog `generation` is not the one of the ids held.
    fn at(&mut self, generation: u64) {
        if self.generation != generation {
            self.ids.clear();
            self.bytes = 0;
            self.generation = generation;
        }
    }
}

/// The cache keys of one request's series, in one buffer.
#[derive(Debug, Default)]
pub(crate) struct Keys {
    buf: Vec<u8>,
    ends: Vec<usize>,
}

impl Keys {
    /// Appends the key of one label set: each name and value with its length in front, so
    /// that different label sets never share a key.
    pub(crate) fn push(&mut self, labels: &[PromLabel]) {
        for l in labels {
            for part in [&l.name, &l.value] {
                self.buf.extend_from_slice(&(part.len() as u32).to_le_bytes());
                self.buf.extend_from_slice(part);
            }
        }
        self.ends.push(self.buf.len());
    }

    /// The key of the `i`-th label set pushed.
    pub(crate) fn get(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.buf[start..self.ends[i]]
    }

    /// The `i`-th label set pushed, as labels again (copies of its bytes).
    pub(crate) fn labels(&self, i: usize) -> Vec<PromLabel> {
        let mut key = self.get(i);
        let mut labels = Vec::new();
        let mut part = || {
            let (len, rest) = key.split_first_chunk::<4>()?;
            let len = u32::from_le_bytes(*len) as usize;
            let bytes = Bytes::copy_from_slice(rest.get(..len)?);
            key = &rest[len..];
            Some(bytes)
        };
        while let (Some(name), Some(value)) = (part(), part()) {
            labels.push(PromLabel { name, value });
        }
        labels
    }

    /// How many keys were pushed.
    pub(crate) fn len(&self) -> usize {
        self.ends.len()
    }
}

impl SeriesCache {
    /// The ids of `keys` (`None` where not cached), under one lock; `generation` is the
    /// store's catalog generation, read before.
    pub(crate) fn lookup(&self, keys: &Keys, generation: u64) -> Vec<Option<SeriesId>> {
        let Ok(mut inner) = self.inner.lock() else { return vec![None; keys.len()] };
        inner.at(generation);
        (0..keys.len()).map(|i| inner.ids.get(keys.get(i)).copied()).collect()
    }

    /// Remembers the ids of label sets resolved by the store in catalog `generation` (read
    /// before they were resolved); ids of an older generation than the cache's are dropped.
    pub(crate) fn insert(&self, resolved: impl IntoIterator<Item = (Box<[u8]>, SeriesId)>, generation: u64) {
        let Ok(mut inner) = self.inner.lock() else { return };
        if generation < inner.generation {
            return;
        }
        inner.at(generation);
        for (key, id) in resolved {
            if inner.bytes + key.len() > MAX_BYTES {
                inner.ids.clear();
                inner.bytes = 0;
            }
            inner.bytes += key.len();
            if let Some(old) = inner.ids.insert(key, id) {
                debug_assert_eq!(old, id);
            }
        }
    }

    /// Entries held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.inner.lock().map(|i| i.ids.len()).unwrap_or(0)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Vec<PromLabel> {
        pairs
            .iter()
            .map(|(n, v)| PromLabel { name: n.as_bytes().to_vec().into(), value: v.as_bytes().to_vec().into() })
            .collect()
    }

    /// A key gives its labels back as they were pushed (empty names and values too).
    #[test]
    fn keys_give_their_labels_back() {
        let mut keys = Keys::default();
        let sets = [labels(&[("a", "bc")]), labels(&[("__name__", "up"), ("", ""), ("instance", "n:9100")]), vec![]];
        for set in &sets {
            keys.push(set);
        }
        for (i, set) in sets.iter().enumerate() {
            assert_eq!(&keys.labels(i), set);
        }
    }

    #[test]
    fn keys_tell_label_sets_apart() {
        let mut keys = Keys::default();
        keys.push(&labels(&[("ab", "c")]));
        keys.push(&labels(&[("a", "bc")]));
        keys.push(&labels(&[("ab", "c")]));
        assert_ne!(keys.get(0), keys.get(1));
        assert_eq!(keys.get(0), keys.get(2));
        let cache = SeriesCache::default();
        cache.insert([(keys.get(0).into(), 7)], 0);
        assert_eq!(cache.lookup(&keys, 0), vec![Some(7), None, Some(7)]);
        // A retirement in the store (a new generation) empties it; an id resolved before it
        // is not kept.
        assert_eq!(cache.lookup(&keys, 1), vec![None, None, None]);
        cache.insert([(keys.get(0).into(), 7)], 0);
        assert_eq!(cache.lookup(&keys, 1), vec![None, None, None]);
        cache.insert([(keys.get(1).into(), 9)], 1);
        assert_eq!(cache.lookup(&keys, 1), vec![None, Some(9), None]);
    }

    #[test]
    fn a_full_cache_starts_over() {
        let cache = SeriesCache::default();
        let big = vec![0u8; MAX_BYTES / 2 + 1];
        cache.insert([(big.clone().into_boxed_slice(), 1)], 0);
        let mut other = big;
        other[0] = 1;
        cache.insert([(other.into_boxed_slice(), 2)], 0);
        assert_eq!(cache.len(), 1);
    }
}
