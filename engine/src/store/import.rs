//! Bulk import: all-or-nothing loading of large files with bounded memory.
//!
//! Rows are buffered up to `flush_rows`, then sorted per partition and spilled to Parquet
//! files under `staging/`. Nothing is visible until [`BulkImport::commit`], which moves the
//! staged files into `data/` and publishes them in one manifest update. Dropping an import
//! without committing (or crashing) leaves nothing behind: staging is cleared by the next writer's open.
//! Imports bypass the WAL: durability comes from the fsynced files and manifest.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{Rejection, Store, lock_poisoned, split_by_partition_owned};
use crate::datafile;
use crate::error::{Error, Result};
use crate::manifest::FileEntry;
use crate::merge::{merge_streams, sort_dedup_owned};
use crate::model::Rows;
use crate::model::WriteBatch;

static IMPORT_COUNTER: AtomicU64 = AtomicU64::new(0);

type Staged = (i64, PathBuf, datafile::FileStats);
type SpillHandle = std::thread::JoinHandle<(Vec<Staged>, Result<()>)>;

/// What an import added.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ImportSummary {
    /// Samples accepted (before deduplication).
    pub samples: u64,
    /// Rows published: `samples` less those that repeated a series and timestamp within the
    /// import (the last of each is kept). Rows already in the store at a timestamp the import
    /// also has are replaced on read (last write wins), and not counted here.
    pub stored: u64,
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
    staged: Vec<Staged>,
    series: roaring::RoaringBitmap,
    /// Dense bitset mirror of `series` (ids are dense): a per-row test without roaring's
    /// container search.
    seen: Vec<u64>,
    /// The background spill in progress: its staged files and result.
    spilling: Option<SpillHandle>,
    /// Spills started (names staged files).
    spills: usize,
    summary: ImportSummary,
    committed: bool,
    /// Counted among the store's open imports while it lives: no series is retired meanwhile.
    _active: super::retire::ImportActive<'a>,
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
            seen: Vec::new(),
            spilling: None,
            spills: 0,
            summary: ImportSummary::default(),
            committed: false,
            _active: super::retire::ImportActive::new(&self.active_imports),
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
        for &id in &rows.series {
            let (word, bit) = (id as usize / 64, id % 64);
            if word >= self.seen.len() {
                self.seen.resize(word + 1, 0);
            }
            if self.seen[word] & (1 << bit) == 0 {
                self.seen[word] |= 1 << bit;
                self.series.insert(id);
            }
        }
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

    /// Hands the buffer to a background thread that sorts and writes it (one staged file per
    /// partition), so parsing the next rows overlaps with encoding these. At most one spill
    /// runs at a time: memory stays at two buffers.
    fn spill(&mut self) -> Result<()> {
        self.join_spill()?;
        let rows = std::mem::take(&mut self.buffer);
        if rows.is_empty() {
            return Ok(());
        }
        let storage = self.store.storage.clone();
        let staging = self.store.dir.join("staging");
        let name = format!("{}-{}", self.prefix, self.spills);
        let (partition_ns, options) = (self.store.partition_ns(), self.store.config.file_options);
        self.spills += 1;
        self.spilling = Some(std::thread::spawn(move || {
            let mut staged = Vec::new();
            for (partition, part) in split_by_partition_owned(rows, partition_ns) {
                let sorted = sort_dedup_owned(part);
                let path = staging.join(format!("{name}-p{partition}.parquet"));
                // Recorded before writing, so a failed write is still cleaned up.
                staged.push((partition, path.clone(), datafile::FileStats::default()));
                match datafile::write_file(storage.as_ref(), &path, &sorted, options) {
                    Ok(stats) => {
                        if let Some(last) = staged.last_mut() {
                            last.2 = stats;
                        }
                    }
                    Err(e) => return (staged, Err(e)),
                }
            }
            (staged, Ok(()))
        }));
        Ok(())
    }

    /// Waits for the running spill and records its files.
    fn join_spill(&mut self) -> Result<()> {
        let Some(handle) = self.spilling.take() else { return Ok(()) };
        let (staged, result) =
            handle.join().map_err(|_| Error::Internal { reason: "import spill thread panicked".into() })?;
        self.staged.extend(staged);
        result
    }

    /// Merges the spills of each partition into one staged file (streaming: a row group per
    /// spill in memory), so an import leaves one file per partition: series runs stay long,
    /// which is what makes the delta and shared-time encodings pay.
    fn merge_spills(&mut self) -> Result<()> {
        let mut by_partition: std::collections::BTreeMap<i64, Vec<(PathBuf, datafile::FileStats)>> = Default::default();
        for (partition, path, stats) in self.staged.drain(..) {
            by_partition.entry(partition).or_default().push((path, stats));
        }
        let storage = self.store.storage.as_ref();
        for (partition, files) in by_partition {
            if let [(path, stats)] = files.as_slice() {
                self.staged.push((partition, path.clone(), *stats));
                continue;
            }
            let path = self.store.dir.join("staging").join(format!("{}-p{partition}.parquet", self.prefix));
            let inputs = files
                .iter()
                .map(|(p, stats)| {
                    datafile::RowGroups::open(storage, p, &datafile::RowFilter::default(), stats.footer_crc32)
                })
                .collect::<Result<Vec<_>>>()?;
            let mut writer = datafile::DataFileWriter::create(storage, &path, self.store.config.file_options)?;
            merge_streams(inputs, |rows| writer.append(&rows))?;
            let stats = writer.finish(storage)?;
            for (p, _) in &files {
                storage.remove_file(p).map_err(|e| Error::io(p, e))?;
            }
            self.staged.push((partition, path, stats));
        }
        Ok(())
    }

    /// Publishes everything imported, atomically.
    pub fn commit(self) -> Result<ImportSummary> {
        self.commit_with_rest(None)
    }

    /// [`BulkImport::commit`], naming in the same manifest update the import's rest staged by
    /// [`Store::stage_import_rest`] (`store/pending.rs`). Refused while the manifest names
    /// another rest: store that one first ([`Store::pending_import`]).
    pub fn commit_with_rest(mut self, rest: Option<&str>) -> Result<ImportSummary> {
        self.spill()?;
        self.join_spill()?;
        self.merge_spills()?;
        let guard = self.store.manifest_lock.lock().map_err(lock_poisoned)?;
        // Under the lock: two imports of one process cannot both name their rest.
        if let Some(id) = rest {
            self.store.check_no_other_rest(id)?;
        }
        let first_id = self.store.alloc_file_ids(self.staged.len() as u64)?;
        let mut entries = Vec::with_capacity(self.staged.len());
        for (next_id, (partition, path, stats)) in (first_id..).zip(&self.staged) {
            let rel = format!("data/p{partition}/{next_id:012}.parquet");
            let dest = self.store.dir.join(&rel);
            if let Some(parent) = dest.parent() {
                self.store.storage.create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
            }
            self.store.storage.rename(path, &dest).map_err(|e| Error::io(path, e))?;
            self.summary.min_time = Some(self.summary.min_time.map_or(stats.min_time, |t| t.min(stats.min_time)));
            self.summary.max_time = Some(self.summary.max_time.map_or(stats.max_time, |t| t.max(stats.max_time)));
            entries.push(FileEntry::new(next_id, *partition, rel, stats, 0));
        }
        self.summary.files = entries.len() as u64;
        self.summary.stored = self.staged.iter().map(|(_, _, stats)| stats.rows).sum();
        self.summary.series = self.series.len();
        let rest = rest.map(str::to_owned);
        self.store.commit_edit(entries, &[], None, |m| {
            if rest.is_some() {
                m.pending_import = rest;
            }
        })?;
        drop(guard);
        self.staged.clear();
        self.committed = true;
        Ok(self.summary)
    }
}

impl Drop for BulkImport<'_> {
    /// An import that was not committed (an error, a full disk) removes its staged files, and
    /// every other file of its own in `staging/` — a spill or merge cut short by the error —
    /// so that the space comes back now, not when the next writer opens the store.
    fn drop(&mut self) {
        if !self.committed {
            let _ = self.join_spill();
            for (_, path, _) in &self.staged {
                let _ = self.store.storage.remove_file(path);
            }
            let staging = self.store.dir.join("staging");
            let own = format!("{}-", self.prefix);
            for path in self.store.storage.list_dir(&staging).unwrap_or_default() {
                if path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(&own)) {
                    let _ = self.store.storage.remove_file(&path);
                }
            }
        }
    }
}
