//! Parsed data-file footers, kept per open store within a memory budget.
//!
//! Data files are immutable and their ids are never reused, so a footer read once stays right
//! for as long as its file is live. Planning a split scan reads the footer of every file the
//! request may touch: on the 67.8 M-sample benchmark store that is 463 kB of Parquet metadata
//! and per-run value ranges, parsed again by every statement before this cache. The cache keeps
//! the most recently used footers up to `FOOTER_CACHE_BYTES` of their estimated in-memory
//! size; a footer over the budget on its own is used and not kept.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use super::LiveFile;
use crate::datafile::FileFooter;
use crate::error::Result;
use crate::storage::Storage;

/// The memory budget of one store's footer cache (about the footers of 10 G samples).
const FOOTER_CACHE_BYTES: usize = 64 << 20;

/// The footers of one store's files, least recently used first out.
#[derive(Debug)]
pub(super) struct FooterCache {
    budget: usize,
    inner: Mutex<Entries>,
}

#[derive(Debug, Default)]
struct Entries {
    /// By file id and path (the path tells the nodes of a dataset union apart).
    map: HashMap<(u64, PathBuf), Entry>,
    bytes: usize,
    /// Incremented per lookup: an entry's `used` orders it by recency.
    tick: u64,
}

#[derive(Debug)]
struct Entry {
    footer: Arc<FileFooter>,
    bytes: usize,
    used: u64,
}

impl Default for FooterCache {
    fn default() -> Self {
        FooterCache::with_budget(FOOTER_CACHE_BYTES)
    }
}

impl FooterCache {
    pub(super) fn with_budget(budget: usize) -> Self {
        FooterCache { budget, inner: Mutex::new(Entries::default()) }
    }

    /// The footer of `file`, from the cache or read through `storage` (and then kept, evicting
    /// the least recently used footers over the budget). The read happens outside the lock:
    /// two scans missing the same file at once both read it, and one copy is kept.
    pub(super) fn get(&self, storage: &dyn Storage, file: &LiveFile) -> Result<Arc<FileFooter>> {
        let key = (file.entry.id, file.path.clone());
        {
            let mut entries = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
            entries.tick += 1;
            let tick = entries.tick;
            if let Some(entry) = entries.map.get_mut(&key) {
                entry.used = tick;
                return Ok(entry.footer.clone());
            }
        }
        let footer = Arc::new(crate::storage::refetching(storage, &file.path, || {
            FileFooter::read(storage, &file.path, file.entry.stats.footer_crc32)
        })?);
        let bytes = footer.heap_bytes();
        if bytes > self.budget {
            return Ok(footer);
        }
        let mut entries = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        entries.tick += 1;
        let used = entries.tick;
        if let Some(old) = entries.map.insert(key, Entry { footer: footer.clone(), bytes, used }) {
            entries.bytes -= old.bytes;
        }
        entries.bytes += bytes;
        while entries.bytes > self.budget {
            let Some(oldest) = entries.map.iter().min_by_key(|(_, e)| e.used).map(|(k, _)| k.clone()) else { break };
            if let Some(gone) = entries.map.remove(&oldest) {
                entries.bytes -= gone.bytes;
            }
        }
        Ok(footer)
    }

    /// Footers held and their estimated bytes.
    #[cfg(test)]
    pub(super) fn held(&self) -> (usize, usize) {
        let entries = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        (entries.map.len(), entries.bytes)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::model::{SeriesKey, WriteBatch};
    use crate::storage::{FaultyStorage, OsStorage};
    use crate::store::{ScanRequest, Store, StoreConfig};

    const T0: i64 = 1_767_225_600_000_000_000;
    const HOUR: i64 = 3_600_000_000_000;

    /// Parquet reads recorded since the last call, and a fresh recording started.
    fn parquet_reads(faulty: &FaultyStorage) -> usize {
        let n = faulty.reads().iter().filter(|r| r.path.extension().is_some_and(|e| e == "parquet")).count();
        faulty.record_reads();
        n
    }

    /// Rows of every unit of a split scan (counted by reading row counts only).
    fn rows(store: &Store) -> usize {
        let scan = store.split_scan(ScanRequest::default()).unwrap();
        let mut n = 0;
        for u in 0..scan.units().len() {
            scan.read(u, crate::datafile::Columns::NONE, |c| {
                n += c.len;
                Ok(true)
            })
            .unwrap();
        }
        n
    }

    fn files(store: &Store) -> Vec<Arc<LiveFile>> {
        store.state.read().unwrap().files.iter().cloned().collect()
    }

    /// A second scan plans without reading any footer; files written by a compaction are read
    /// once, and the rows stay the same; a budget too small for two footers keeps one, and the
    /// evicted one is read again.
    #[test]
    fn footers_are_read_once_per_store_within_the_budget() {
        let dir = tempfile::tempdir().unwrap();
        let faulty = FaultyStorage::new(Arc::new(OsStorage), u64::MAX);
        let config = StoreConfig { max_future_ns: None, flush_rows: usize::MAX, ..Default::default() };
        let store =
            Store::open_with(dir.path(), config, Arc::new(faulty.clone()), Arc::new(crate::wallclock::SystemClock))
                .unwrap();
        // Two partitions; the second gets two files apart in time (no unit merges them).
        for (hour, first) in [(0, 0), (1, 0), (1, 100)] {
            let mut b = WriteBatch::default();
            for s in 0..20 {
                for k in first..first + 100 {
                    b.push(SeriesKey::new("m", [("host", format!("h{s}"))]), T0 + hour * HOUR + k * 1_000_000_000, 1.0);
                }
            }
            store.write(&b).unwrap();
            store.flush().unwrap();
        }
        assert_eq!(files(&store).len(), 3);
        faulty.record_reads();
        assert_eq!(rows(&store), 6_000);
        // Footers of three files: tail and metadata each; nothing more for row counts.
        assert_eq!(parquet_reads(&faulty), 6);
        assert_eq!(rows(&store), 6_000);
        assert_eq!(parquet_reads(&faulty), 0, "the second scan read footers again");
        assert_eq!(store.footers.held().0, 3);

        store.compact(true).unwrap();
        assert_eq!(files(&store).len(), 2);
        faulty.record_reads();
        assert_eq!(rows(&store), 6_000);
        assert_eq!(parquet_reads(&faulty), 2, "only the compacted file's footer is new");

        let files = files(&store);
        let storage: &dyn Storage = &faulty;
        let one = FooterCache::default().get(storage, &files[0]).unwrap().heap_bytes();
        let small = FooterCache::with_budget(one + 1);
        faulty.record_reads();
        small.get(storage, &files[0]).unwrap();
        small.get(storage, &files[1]).unwrap();
        assert_eq!(small.held().0, 1);
        assert!(small.held().1 <= one + 1);
        parquet_reads(&faulty);
        small.get(storage, &files[1]).unwrap();
        assert_eq!(parquet_reads(&faulty), 0, "the newest footer stays");
        small.get(storage, &files[0]).unwrap();
        assert_eq!(parquet_reads(&faulty), 2, "the evicted footer is read again");
    }
}
