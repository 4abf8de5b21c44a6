//! Retiring series that retention left without any sample, so that the catalog (its memory,
//! `series.json`, a reader's start) tracks the live series of a store whose label values churn
//! (a new pod or job name every day) instead of every series it ever had.
//!
//! Run by the compaction pass of a store with retention, after retention dropped files, and
//! on the first pass after the store opens (a retirement that a crash kept from being saved is
//! done again; see [`Store::compact`]). A series id
//! below the catalog's length at the start of the pass is retired when no live data file, no
//! write buffer and no open bulk import holds a sample of it:
//! 1. without locks, the files live after retention are scanned newest partition first: a row
//!    group whose footer range of series ids holds no candidate is skipped, the others decode
//!    their series column only, and the scan stops once no candidate is left;
//! 2. under the flush lock (no flush or import commits meanwhile) the files committed since
//!    that scan are scanned the same way; then, with the WAL gate held exclusively (no write is
//!    between its catalog lookup and its buffer insert) and the catalog locked for writing, the
//!    ids in the write buffers are removed, and the rest retired unless an import is open;
//! 3. the catalog is saved (a new snapshot) outside the gate. A crash before that leaves the
//!    series live on reopen, and a later pass retires them again.
//!
//! Nothing is retired in a store that another node has written (object storage: the manifest
//! names another WAL owner's checkpoint), since that node's WAL may hold samples of series
//! that it refers to by id only.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use roaring::RoaringBitmap;

use super::{LiveFile, Store, lock_poisoned};
use crate::datafile::{Columns, RowFilter};
use crate::error::Result;
use crate::model::SeriesId;

/// Counts the open bulk imports of a store while it lives (see [`Store::bulk_import`]): their
/// series ids are resolved long before their files are committed, so no series is retired
/// while one is open.
#[derive(Debug)]
pub(super) struct ImportActive<'a>(&'a std::sync::atomic::AtomicUsize);

impl<'a> ImportActive<'a> {
    pub(super) fn new(count: &'a std::sync::atomic::AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        ImportActive(count)
    }
}

impl Drop for ImportActive<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Store {
    /// A number that changes whenever series are retired. A client that caches series ids
    /// (an ingest stream) forgets them when it changed and resolves its series by key again:
    /// a retired id is rejected as unknown, and the key gets a new id.
    pub fn catalog_generation(&self) -> u64 {
        self.catalog_generation.load(Ordering::SeqCst)
    }

    /// Retires the series after retention when due: after a pass's retention dropped files,
    /// on the first pass of an open store, and after a retirement that was put off. Returns how
    /// many series were retired.
    pub(super) fn retire_if_due(&self, files_expired: usize) -> Result<usize> {
        if self.config.retention_ns.is_none() {
            return Ok(0);
        }
        if files_expired > 0 {
            self.retire_due.store(true, Ordering::SeqCst);
        }
        if !self.retire_due.swap(false, Ordering::SeqCst) {
            return Ok(0);
        }
        let retired = self.retire_unused_series().inspect_err(|_| self.retire_due.store(true, Ordering::SeqCst))?;
        Ok(retired.unwrap_or_else(|| {
            self.retire_due.store(true, Ordering::SeqCst);
            0
        }))
    }

    /// Retires the series that no live data file, write buffer or open import holds a sample
    /// of (see the module docs). Returns how many were retired, or `None` when the retirement
    /// was put off: an import is open, a file could not be read (logged: nothing is retired
    /// on incomplete information) or another node wrote the store.
    fn retire_unused_series(&self) -> Result<Option<usize>> {
        if self.active_imports.load(Ordering::SeqCst) > 0 {
            tracing::info!("an import is open: series retirement waits for a later pass");
            return Ok(None);
        }
        // Another node's WAL (object storage) may hold acknowledged samples that this node
        // cannot see, of series known by id only: retiring them would leave that node's replay
        // with ids whose keys are gone.
        let owner = self.storage.wal_owner();
        let manifest = self.manifest()?;
        if manifest.wal_checkpoints.keys().any(|o| Some(o.as_str()) != owner.as_deref()) {
            tracing::debug!("another node wrote this store: series are not retired");
            return Ok(None);
        }
        let mut candidates = self.catalog.read().map_err(lock_poisoned)?.live_ids();
        if candidates.is_empty() {
            return Ok(Some(0));
        }
        let scanned = self.state.read().map_err(lock_poisoned)?.files.clone();
        if !self.remove_present(&scanned, &mut candidates) {
            return Ok(None);
        }
        if candidates.is_empty() {
            return Ok(Some(0));
        }
        #[cfg(test)]
        tests::AFTER_SCAN.with(|hook| hook.borrow_mut().take().map(|f| f()));
        let mut retired = 0;
        let mut writes_stopped = std::time::Duration::ZERO;
        let mut finished = true;
        {
            let _flushes = self.manifest_lock.lock().map_err(lock_poisoned)?;
            let now = self.state.read().map_err(lock_poisoned)?.files.clone();
            let seen: std::collections::HashSet<u64> = scanned.iter().map(|f| f.entry.id).collect();
            let newer: Vec<Arc<LiveFile>> = now.iter().filter(|f| !seen.contains(&f.entry.id)).cloned().collect();
            if !self.remove_present(&newer, &mut candidates) {
                return Ok(None);
            }
            // Writes stop for one chunk of ids at a time (the buffers' check and the catalog's
            // removals of a large first retirement took seconds at once); they go on between
            // chunks, and the next chunk's check sees what they buffered. Flushes and import
            // commits wait for the whole (`manifest_lock`), so no buffered row moves into a
            // file that was not scanned.
            for chunk in chunks(&candidates, RETIRE_CHUNK) {
                let _writes = self.gate.write().map_err(lock_poisoned)?;
                let stopped = std::time::Instant::now();
                let mut chunk = chunk;
                {
                    let state = self.state.read().map_err(lock_poisoned)?;
                    let buffers = std::iter::once(&state.active).chain(state.frozen.iter().map(|b| b.as_ref()));
                    for rows in buffers.flat_map(|b| b.chunks()) {
                        remove_ids(&rows.series, &mut chunk);
                    }
                }
                let mut catalog = self.catalog.write().map_err(lock_poisoned)?;
                // An import resolves ids under the catalog lock after its guard is counted: one
                // that began now has resolved nothing yet, and will find the retired keys gone.
                if self.active_imports.load(Ordering::SeqCst) > 0 {
                    tracing::info!("an import is open: series retirement waits for a later pass");
                    finished = false;
                    break;
                }
                let n = catalog.retire(&chunk);
                if n > 0 {
                    self.catalog_generation.fetch_add(1, Ordering::SeqCst);
                }
                retired += n;
                writes_stopped = writes_stopped.max(stopped.elapsed());
            }
        }
        if retired > 0 {
            self.metrics.series_retired.fetch_add(retired as u64, Ordering::Relaxed);
            let writes_stopped_ms = writes_stopped.as_millis() as u64;
            tracing::info!(
                series = retired,
                writes_stopped_ms,
                "retired series that retention left without samples (writes_stopped_ms: the longest stop)"
            );
            self.save_catalog()?;
        }
        Ok(finished.then_some(retired))
    }

    /// Removes from `candidates` every series id with a row in `files` (newest partition
    /// first; a row group whose range of ids holds no candidate is not read, and the scan
    /// stops once none is left). `false` when a file could not be read (logged).
    fn remove_present(&self, files: &[Arc<LiveFile>], candidates: &mut RoaringBitmap) -> bool {
        let mut order: Vec<&Arc<LiveFile>> = files.iter().collect();
        order.sort_by_key(|f| std::cmp::Reverse((f.entry.partition, f.entry.id)));
        for file in order {
            if candidates.is_empty() {
                break;
            }
            let stats = &file.entry.stats;
            if stats.rows == 0 || candidates.range_cardinality(stats.min_series..=stats.max_series) == 0 {
                continue;
            }
            if let Err(e) = self.remove_present_in(file, candidates) {
                let error = self.describe_error(&e);
                tracing::warn!(path = %file.path.display(), %error, "series retirement skipped: a data file could not be read");
                return false;
            }
        }
        true
    }

    /// [`Store::remove_present`] of one file.
    fn remove_present_in(&self, file: &LiveFile, candidates: &mut RoaringBitmap) -> Result<()> {
        let storage = self.storage.as_ref();
        let footer = self.footers.get(storage, file)?;
        let series_only = Columns { series: true, time: false, value: false };
        for (group, stats) in footer.groups().iter().enumerate() {
            if candidates.is_empty() {
                break;
            }
            if let Some((lo, hi)) = stats.series
                && candidates.range_cardinality(lo..=hi) == 0
            {
                continue;
            }
            let chunk = crate::storage::refetching(storage, &file.path, || {
                footer.read_group(storage, group, series_only, &RowFilter::default())
            })?;
            // Every row's id, or no retirement: a short column would retire series with data.
            if chunk.series.len() != chunk.len {
                return Err(crate::error::Error::Internal {
                    reason: format!(
                        "row group {group} of {} read {} series ids for {} rows",
                        file.path.display(),
                        chunk.series.len(),
                        chunk.len
                    ),
                });
            }
            remove_ids(&chunk.series, candidates);
        }
        Ok(())
    }

    /// Saves the catalog's changes since the last save (the series new since then, or a new
    /// snapshot after a retirement). The keys are copied out under the catalog lock, and the
    /// file written outside it, so that writes adding series do not wait for the file.
    pub(super) fn save_catalog(&self) -> Result<()> {
        let mut files = self.catalog_files.lock().map_err(lock_poisoned)?;
        let pending = files.pending(&*self.catalog.read().map_err(lock_poisoned)?);
        if let Some(pending) = pending {
            files.save(self.storage.as_ref(), &self.dir, &pending)?;
        }
        Ok(())
    }
}

/// Ids retired under one stop of the writes (see [`Store::retire_unused_series`]); a few in
/// tests, so that their retirements go through several chunks.
const RETIRE_CHUNK: u64 = if cfg!(test) { 3 } else { 50_000 };

/// `ids` in bitmaps of at most `n` ids each, in id order.
fn chunks(ids: &RoaringBitmap, n: u64) -> Vec<RoaringBitmap> {
    let mut out = Vec::new();
    let mut iter = ids.iter().peekable();
    while iter.peek().is_some() {
        out.push(RoaringBitmap::from_sorted_iter(iter.by_ref().take(n as usize)).unwrap_or_default());
    }
    out
}

/// Removes the ids of `series` (sorted runs, as files and write chunks mostly hold them) from
/// `candidates`: one bitmap operation per run.
fn remove_ids(series: &[SeriesId], candidates: &mut RoaringBitmap) {
    let mut last = None;
    for &id in series {
        if last != Some(id) {
            candidates.remove(id);
            last = Some(id);
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    /// Chunks cover the ids once, in order, `n` at most each.
    #[test]
    fn chunks_split_ids_in_order() {
        let ids = roaring::RoaringBitmap::from_iter([1, 2, 5, 70_000, 70_001, 9_000_000, 9_000_002]);
        let parts = super::chunks(&ids, 3);
        let sizes: Vec<u64> = parts.iter().map(roaring::RoaringBitmap::len).collect();
        assert_eq!(sizes, [3, 3, 1]);
        assert_eq!(parts.iter().flat_map(|p| p.iter()).collect::<Vec<_>>(), ids.iter().collect::<Vec<_>>());
        assert!(super::chunks(&roaring::RoaringBitmap::new(), 3).is_empty());
    }

    /// Called (once) by a retirement on this thread between its scan of the files and taking
    /// the locks: a test's writes and flushes "during the pass".
    pub(in crate::store) type Hook = Box<dyn FnOnce()>;

    thread_local! {
        pub(in crate::store) static AFTER_SCAN: std::cell::RefCell<Option<Hook>> = const { std::cell::RefCell::new(None) };
    }
}
