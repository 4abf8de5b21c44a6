//! Bulk import: all-or-nothing loading of large files with bounded memory.
//!
//! Rows are buffered up to `flush_rows`, then sorted per partition and spilled to Parquet
//! files under `staging/`. Nothing is visible until [`BulkImport::commit`], which moves the
//! staged files into `data/` and publishes them in one manifest update. Dropping an import
//! without committing (or crashing) leaves nothing behind: staging is cleared on open.
//! Imports bypass the WAL: durability comes from the fsynced files and manifest.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{Rejection, Store, lock_poisoned, split_by_partition};
use crate::datafile::{self, Rows};
use crate::error::{Error, Result};
use crate::manifest::FileEntry;
use crate::merge::sort_dedup;
use crate::model::WriteBatch;

static IMPORT_COUNTER: AtomicU64 = AtomicU64::new(0);

/// What an import added.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ImportSummary {
    /// Samples accepted (before deduplication).
    pub samples: u64,
    /// Distinct series touched.
    pub series: u64,
    /// Smallest local timestamp.
    pub min_time: Option<i64>,
    /// Largest local timestamp.
    pub max_time: Option<i64>,
    /// Data files published.
    pub files: u64,
}

/// An import in progress; see the module docs.
#[derive(Debug)]
pub struct BulkImport<'a> {
    store: &'a Store,
    prefix: String,
    buffer: Rows,
    staged: Vec<(i64, PathBuf, datafile::FileStats)>,
    series: roaring::RoaringBitmap,
    summary: ImportSummary,
    committed: bool,
}

impl Store {
    /// Starts an all-or-nothing bulk import.
    pub fn bulk_import(&self) -> BulkImport<'_> {
        let n = IMPORT_COUNTER.fetch_add(1, Ordering::Relaxed);
        BulkImport {
            store: self,
            prefix: format!("import-{}-{n}", std::process::id()),
            buffer: Rows::default(),
            staged: Vec::new(),
            series: roaring::RoaringBitmap::new(),
            summary: ImportSummary::default(),
            committed: false,
        }
    }
}

impl BulkImport<'_> {
    /// Adds a batch. Any invalid sample fails the call with its reason (the caller decides
    /// whether to skip); nothing of a failed batch is kept.
    pub fn write(&mut self, batch: &WriteBatch) -> Result<()> {
        let (valid, rejected) = self.store.validate(batch);
        if let Some(Rejection { error, .. }) = rejected.into_iter().next() {
            return Err(error);
        }
        let mut ids = Vec::with_capacity(valid.len());
        {
            let mut catalog = self.store.catalog.write().map_err(lock_poisoned)?;
            for (key, _) in &valid {
                ids.push(catalog.get_or_insert(key)?.0);
            }
        }
        for ((_, rows), id) in valid.iter().zip(ids) {
            self.series.insert(id);
            self.buffer.series.extend(std::iter::repeat_n(id, rows.len()));
            self.buffer.time.extend_from_slice(&rows.time);
            self.buffer.value.extend_from_slice(&rows.value);
            self.summary.samples += rows.len() as u64;
        }
        if self.buffer.len() >= self.store.config.flush_rows {
            self.spill()?;
        }
        Ok(())
    }

    /// Adds rows whose series ids were resolved by [`Store::resolve_series`]; rows must be
    /// valid (the caller checked them).
    pub fn write_rows(&mut self, rows: &Rows) -> Result<()> {
        self.series.extend(rows.series.iter().copied());
        self.buffer.extend_from(rows);
        self.summary.samples += rows.len() as u64;
        if self.buffer.len() >= self.store.config.flush_rows {
            self.spill()?;
        }
        Ok(())
    }

    /// Samples added so far.
    pub fn samples(&self) -> u64 {
        self.summary.samples
    }

    fn spill(&mut self) -> Result<()> {
        let rows = std::mem::take(&mut self.buffer);
        let staging = self.store.dir.join("staging");
        for (partition, part) in split_by_partition(&rows, self.store.partition_ns()) {
            let sorted = sort_dedup(&part);
            let path = staging.join(format!("{}-{}.parquet", self.prefix, self.staged.len()));
            let stats = datafile::write_file(self.store.storage.as_ref(), &path, &sorted, self.store.config.file_options)?;
            self.staged.push((partition, path, stats));
        }
        Ok(())
    }

    /// Publishes everything imported, atomically.
    pub fn commit(mut self) -> Result<ImportSummary> {
        self.spill()?;
        let guard = self.store.manifest_lock.lock().map_err(lock_poisoned)?;
        let mut next_id = self.store.manifest()?.next_file_id;
        let mut entries = Vec::with_capacity(self.staged.len());
        for (partition, path, stats) in &self.staged {
            let rel = format!("data/p{partition}/{next_id:012}.parquet");
            let dest = self.store.dir.join(&rel);
            if let Some(parent) = dest.parent() {
                self.store.storage.create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
            }
            self.store.storage.rename(path, &dest).map_err(|e| Error::io(path, e))?;
            self.summary.min_time = Some(self.summary.min_time.map_or(stats.min_time, |t| t.min(stats.min_time)));
            self.summary.max_time = Some(self.summary.max_time.map_or(stats.max_time, |t| t.max(stats.max_time)));
            entries.push(FileEntry {
                id: next_id,
                partition: *partition,
                path: rel,
                rows: stats.rows,
                bytes: stats.bytes,
                min_time: stats.min_time,
                max_time: stats.max_time,
                min_series: stats.min_series,
                max_series: stats.max_series,
                level: 0,
            });
            next_id += 1;
        }
        self.summary.files = entries.len() as u64;
        self.summary.series = self.series.len();
        self.store.commit(entries, &[], None, next_id)?;
        drop(guard);
        self.staged.clear();
        self.committed = true;
        Ok(self.summary)
    }
}

impl Drop for BulkImport<'_> {
    fn drop(&mut self) {
        if !self.committed {
            for (_, path, _) in &self.staged {
                let _ = self.store.storage.remove_file(path);
            }
        }
    }
}
