//! Flushing the write buffer to Parquet, compaction and retention: every manifest change.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, MutexGuard};

use super::{LiveFile, Store, lock_poisoned, split_by_partition_owned};
use crate::buffer::WriteBuffer;
use std::path::PathBuf;

use crate::datafile::{self, DataFileWriter, RowFilter, RowGroups, WriteOptions};
use crate::error::{Error, Result};
use crate::manifest::{FileEntry, Manifest};
use crate::merge::{merge_streams, sort_dedup, sort_dedup_chunks_into};
use crate::model::Rows;
use crate::wal::Wal;

/// What a compaction pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CompactionSummary {
    /// Partitions rewritten.
    pub partitions: usize,
    /// Input files replaced.
    pub files_in: usize,
    /// Output files written.
    pub files_out: usize,
    /// Files dropped by retention.
    pub files_expired: usize,
    /// Series retired because retention left them without samples (see `store/retire.rs`).
    pub series_retired: usize,
    /// Partitions not compacted because an input file could not be read (logged; later passes
    /// merge only the partition's newer files, see [`Store::compact`]).
    pub partitions_skipped: usize,
}

impl Store {
    /// Flushes everything buffered to data files and truncates the WAL.
    pub fn flush(&self) -> Result<()> {
        if self.is_read_only() {
            return Err(self.read_only_error());
        }
        let guard = self.manifest_lock.lock().map_err(lock_poisoned)?;
        self.flush_locked(&guard)
    }

    /// Hands out `n` consecutive data file ids.
    pub(super) fn alloc_file_ids(&self, n: u64) -> Result<u64> {
        let mut next = self.next_file_id.lock().map_err(lock_poisoned)?;
        let first = *next;
        *next += n;
        Ok(first)
    }

    /// Flushes, recording the outcome: a failure is logged and counted, and its rows stay
    /// buffered (visible to scans) and covered by the WAL until a later flush writes them.
    pub(super) fn flush_locked(&self, guard: &MutexGuard<'_, ()>) -> Result<()> {
        let result = self.flush_inner(guard);
        match &result {
            Ok(()) => {
                if let Ok(mut e) = self.flush_error.lock()
                    && e.take().is_some()
                {
                    tracing::info!("flushes succeed again");
                }
            }
            Err(e) => {
                self.metrics.flush_failures.fetch_add(1, Ordering::Relaxed);
                let error = self.describe_error(e);
                tracing::error!(%error, "flush failed; its rows stay buffered and in the wal, a later flush retries");
                if let Ok(mut slot) = self.flush_error.lock() {
                    *slot = Some(error);
                }
            }
        }
        result
    }

    fn flush_inner(&self, _guard: &MutexGuard<'_, ()>) -> Result<()> {
        // Freeze: after this point every record in segments <= sealed is in a frozen buffer.
        // Buffers of earlier failed flushes are still frozen and are written with this one, so
        // the checkpoint never passes rows that are in no data file.
        let (sealed, buffers, reopen) = {
            let gate = self.gate.write().map_err(lock_poisoned)?;
            let wal = gate.as_ref().ok_or_else(|| self.read_only_error())?;
            let (sealed, reopen) = if wal.is_poisoned() {
                // Nothing more reaches a poisoned WAL; its acknowledged records are buffered.
                (wal.stats().current_segment, true)
            } else {
                (wal.rotate()?, false)
            };
            let mut state = self.state.write().map_err(lock_poisoned)?;
            let frozen = Arc::new(std::mem::take(&mut state.active));
            if !frozen.is_empty() {
                state.frozen.push(frozen);
            }
            (sealed, state.frozen.clone(), reopen)
        };
        if !buffers.is_empty() {
            self.write_frozen(&buffers, sealed)?;
            let mut state = self.state.write().map_err(lock_poisoned)?;
            state.frozen.retain(|b| !buffers.iter().any(|f| Arc::ptr_eq(b, f)));
        } else {
            self.commit(Vec::new(), &[], Some(sealed))?;
        }
        if reopen {
            self.reopen_wal(sealed)?;
        } else if let Some(wal) = self.gate.read().map_err(lock_poisoned)?.as_ref() {
            wal.remove_through(sealed)?;
        }
        self.metrics.flushes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Replaces a poisoned WAL whose records through `sealed` are all in data files by a new
    /// one (the successful flush was the probe that the disk takes writes again).
    fn reopen_wal(&self, sealed: u64) -> Result<()> {
        let mut gate = self.gate.write().map_err(lock_poisoned)?;
        let Some(old) = gate.as_ref() else { return Err(self.read_only_error()) };
        old.remove_through_poisoned(sealed)?;
        let dir = old.dir().to_path_buf();
        let (wal, _) =
            Wal::open(self.storage.clone(), &dir, self.config.wal.clone(), old.store_id(), sealed, &mut |_| {
                Err(Error::Unavailable { reason: "a replaced wal has no records to replay".into() })
            })?;
        if let Some(old) = gate.replace(wal) {
            let _ = old.close();
        }
        self.metrics.wal_reopens.fetch_add(1, Ordering::Relaxed);
        tracing::info!(segment = sealed + 1, "wal reopened after a successful flush");
        Ok(())
    }

    fn write_frozen(&self, buffers: &[Arc<WriteBuffer>], sealed: u64) -> Result<()> {
        let partition_ns = self.partition_ns();
        let range = buffers.iter().filter_map(|b| b.time_range()).fold(None, |acc: Option<(i64, i64)>, (lo, hi)| {
            Some(acc.map_or((lo, hi), |(a, b)| (a.min(lo), b.max(hi))))
        });
        if let Some((lo, hi)) = range
            && lo.div_euclid(partition_ns) == hi.div_euclid(partition_ns)
        {
            // One partition (the usual case): sort straight from the chunks, no concatenation,
            // oldest buffer first so that the newest write of a duplicate wins.
            // Flushes run one at a time (under the flush lock), so one kept buffer serves all.
            let chunks: Vec<&Rows> = buffers.iter().flat_map(|b| b.chunks()).collect();
            // It is cleared after every use, so a panic that poisoned it left nothing to distrust.
            let mut sorted = self.flush_scratch.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            sort_dedup_chunks_into(&chunks, &mut sorted);
            let files = self.write_sorted_files(lo.div_euclid(partition_ns), &sorted);
            sorted.clear();
            // Keep it for the usual flush size; one that was much larger (a buffer that grew
            // during a slow flush, a long WAL replay) gives its memory back.
            if sorted.series.capacity() > self.config.flush_rows.max(1).saturating_mul(2) {
                *sorted = Rows::default();
            }
            drop(sorted);
            return self.commit(files?, &[], Some(sealed));
        }
        let mut rows = Rows::default();
        for b in buffers {
            rows.extend_from(&b.collect(&RowFilter::default()));
        }
        let mut new_files = Vec::new();
        for (partition, part_rows) in split_by_partition_owned(rows, partition_ns) {
            let sorted = sort_dedup(&part_rows);
            let written = self
                .alloc_file_ids(1)
                .and_then(|id| self.write_data_file(partition, id, &sorted, 0, self.config.file_options));
            match written {
                Ok(file) => new_files.push(file),
                Err(e) => {
                    self.discard(&new_files);
                    return Err(e);
                }
            }
        }
        self.commit(new_files, &[], Some(sealed))
    }

    /// Writes sorted rows of one partition as data files `first_id..`: one file, or for a
    /// large flush two (split at a series boundary) encoded on two threads, since Parquet
    /// encoding is most of a flush's CPU and writers may be waiting for it.
    fn write_sorted_files(&self, partition: i64, rows: &Rows) -> Result<Vec<FileEntry>> {
        let n = rows.len();
        let opts = self.config.file_options;
        let mut mid = n / 2;
        while mid > 0 && mid < n && rows.series[mid] == rows.series[mid - 1] {
            mid += 1;
        }
        if n < self.config.parallel_flush_rows.max(2) || mid >= n {
            let first_id = self.alloc_file_ids(1)?;
            return Ok(vec![self.write_data_file_range(partition, first_id, rows, 0..n, 0, opts)?]);
        }
        let first_id = self.alloc_file_ids(2)?;
        let (a, b) = std::thread::scope(|scope| {
            let second = scope.spawn(|| self.write_data_file_range(partition, first_id + 1, rows, mid..n, 0, opts));
            let first = self.write_data_file_range(partition, first_id, rows, 0..mid, 0, opts);
            let second = second
                .join()
                .unwrap_or_else(|_| Err(Error::Unavailable { reason: "a flush encoder thread panicked".into() }));
            (first, second)
        });
        match (a, b) {
            (Ok(a), Ok(b)) => Ok(vec![a, b]),
            (Ok(written), Err(e)) | (Err(e), Ok(written)) => {
                self.discard(&[written]);
                Err(e)
            }
            (Err(e), Err(_)) => Err(e),
        }
    }

    /// Writes one data file of rows `range` and returns its manifest entry.
    fn write_data_file_range(
        &self,
        partition: i64,
        id: u64,
        rows: &Rows,
        range: std::ops::Range<usize>,
        level: u32,
        options: WriteOptions,
    ) -> Result<FileEntry> {
        let (rel, path) = self.new_data_path(partition, id)?;
        // A file that failed half-way (a full disk) is named by no manifest: removed now, not
        // left to the next writer's orphan clean-up (a server retrying its flush every few
        // seconds would leave one per attempt).
        let stats = datafile::write_file_range(self.storage.as_ref(), &path, rows, range, options)
            .inspect_err(|_| self.discard_path(&path))?;
        Ok(FileEntry::new(id, partition, rel, &stats, level))
    }

    /// Removes data files written for a change that failed before its commit.
    fn discard(&self, written: &[FileEntry]) {
        for f in written {
            self.discard_path(&self.dir.join(&f.path));
        }
    }

    fn discard_path(&self, path: &std::path::Path) {
        if let Err(e) = self.storage.remove_file(path)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(path = %path.display(), error = %e, "could not remove a data file of a failed write");
        }
    }

    /// Writes one data file of all `rows` and returns its manifest entry.
    pub(super) fn write_data_file(
        &self,
        partition: i64,
        id: u64,
        rows: &Rows,
        level: u32,
        options: WriteOptions,
    ) -> Result<FileEntry> {
        self.write_data_file_range(partition, id, rows, 0..rows.len(), level, options)
    }

    /// The relative and full path of a new data file (its directory created).
    pub(super) fn new_data_path(&self, partition: i64, id: u64) -> Result<(String, PathBuf)> {
        let rel = format!("data/p{partition}/{id:012}.parquet");
        let path = self.dir.join(&rel);
        if let Some(parent) = path.parent() {
            self.storage.create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
        }
        Ok((rel, path))
    }

    /// Publishes a manifest change: adds `added`, drops the files with ids in `removed`,
    /// optionally advances the WAL checkpoint. Saves the catalog first, so every series that
    /// a published file refers to is known after a restart.
    pub(super) fn commit(&self, added: Vec<FileEntry>, removed: &[u64], wal_checkpoint: Option<u64>) -> Result<()> {
        self.commit_edit(added, removed, wal_checkpoint, |_| {})
    }

    /// [`Store::commit`], with `edit` applied to the new manifest before it is saved.
    pub(super) fn commit_edit(
        &self,
        added: Vec<FileEntry>,
        removed: &[u64],
        wal_checkpoint: Option<u64>,
        edit: impl FnOnce(&mut Manifest),
    ) -> Result<()> {
        // Data files must be durable in their directories before the manifest names them.
        let mut dirs: Vec<_> =
            added.iter().filter_map(|f| self.dir.join(&f.path).parent().map(|p| p.to_path_buf())).collect();
        dirs.sort();
        dirs.dedup();
        for d in dirs {
            self.storage.sync_dir(&d).map_err(|e| Error::io(&d, e))?;
        }
        // The series added since the last save (an increment, or now and then a new
        // snapshot; a new snapshot after a retirement).
        self.save_catalog()?;
        let (old_manifest, old_files) = {
            let s = self.state.read().map_err(lock_poisoned)?;
            (s.manifest.clone(), s.files.clone())
        };
        let mut manifest = Manifest::clone(&old_manifest);
        manifest.files.retain(|f| !removed.contains(&f.id));
        manifest.files.extend(added.iter().cloned());
        manifest.files.sort_by_key(|f| f.id);
        let reserved = *self.next_file_id.lock().map_err(lock_poisoned)?;
        manifest.next_file_id = manifest.next_file_id.max(reserved);
        if let Some(seq) = wal_checkpoint {
            manifest.advance_checkpoint(self.storage.wal_owner().as_deref(), seq);
        }
        edit(&mut manifest);
        manifest.save(self.storage.as_ref(), &self.dir.join("manifest.json"))?;
        let mut files: Vec<Arc<LiveFile>> = Vec::with_capacity(manifest.files.len());
        for f in old_files.iter() {
            if removed.contains(&f.entry.id) {
                f.obsolete.store(true, Ordering::SeqCst);
            } else {
                files.push(f.clone());
            }
        }
        for entry in added {
            files.push(Arc::new(LiveFile {
                path: self.dir.join(&entry.path),
                entry,
                series_offset: 0,
                storage: self.storage.clone(),
                obsolete: AtomicBool::new(false),
            }));
        }
        files.sort_by_key(|f| f.entry.id);
        let mut state = self.state.write().map_err(lock_poisoned)?;
        state.manifest = Arc::new(manifest);
        state.files = Arc::new(files);
        Ok(())
    }

    /// Compacts every partition with at least `compaction_min_files` files (or more than one
    /// file when `force`; or a file without checksums, with `StoreConfig::rewrite_unchecked`),
    /// and applies retention. Old files are deleted once no scan of this process uses them
    /// (readers in other processes pinned theirs when they opened). With retention, the pass
    /// then retires the series that retention left without any sample (after it dropped files,
    /// and on the first pass of an open store; `store/retire.rs`), counted in
    /// `CompactionSummary::series_retired`.
    ///
    /// A partition with an input file that does not read (a checksum mismatch, a file that does
    /// not decode: `Error::DataFileInvalid`; a file that is gone) is left as it is and counted
    /// in `CompactionSummary::partitions_skipped`; later passes of this open store merge only
    /// its files newer than the bad one, instead of failing on it again and never reaching the
    /// partitions after it. The file's sound row groups stay readable; `lockstep check` names
    /// it. Every other failure (writing the output, a transient read error) is returned.
    ///
    /// Each partition is merged outside the flush lock (flushes and writes go on meanwhile)
    /// and published in one manifest update; compaction passes run one at a time.
    pub fn compact(&self, force: bool) -> Result<CompactionSummary> {
        self.compact_with(force, usize::MAX)
    }

    /// [`Store::compact`] that rewrites at most `max_partitions` partitions (the oldest first):
    /// the background pass of `lockstep serve` bounds its work per round this way.
    pub fn compact_with(&self, force: bool, max_partitions: usize) -> Result<CompactionSummary> {
        if self.is_read_only() {
            return Err(self.read_only_error());
        }
        let _maintenance = self.maintenance_lock.lock().map_err(lock_poisoned)?;
        let mut summary = CompactionSummary { files_expired: self.expire()?, ..Default::default() };
        summary.series_retired = self.retire_if_due(summary.files_expired)?;
        let partitions: std::collections::BTreeSet<i64> =
            self.state.read().map_err(lock_poisoned)?.files.iter().map(|f| f.entry.partition).collect();
        let threshold = if force { 2 } else { self.config.compaction_min_files.max(2) };
        let skips = self.compaction_skips.lock().map_err(lock_poisoned)?.clone();
        for partition in partitions {
            if summary.partitions >= max_partitions {
                break;
            }
            #[cfg(test)]
            tests_hook::before_partition(self);
            // The partition's files and the output's id, taken together under the manifest
            // lock, which a flush (and an import) holds from allocating its files' ids to
            // publishing them: every file with a lower id than the output's is an input, and a
            // flush publishing later has a higher id, so its newer rows keep winning. (Files
            // listed once for the whole pass, outside the lock, missed a flush in flight whose
            // id was below the output's: the merge of older rows then won over it, and the next
            // compaction removed the acknowledged value.)
            let (files, id) = {
                let _guard = self.manifest_lock.lock().map_err(lock_poisoned)?;
                let files = self.state.read().map_err(lock_poisoned)?.files.clone();
                let mut group: Vec<Arc<LiveFile>> =
                    files.iter().filter(|f| f.entry.partition == partition).cloned().collect();
                // Files up to an unreadable one stay as they are; newer ones still merge (the
                // output's id is above theirs, so last-write-wins holds across the two).
                if let Some(&bad) = skips.get(&partition) {
                    group.retain(|f| f.entry.id > bad);
                }
                let unchecked =
                    self.config.rewrite_unchecked && group.iter().any(|f| f.entry.stats.footer_crc32.is_none());
                if group.len() < threshold && !unchecked {
                    continue;
                }
                (group, self.alloc_file_ids(1)?)
            };
            let group: Vec<&Arc<LiveFile>> = files.iter().collect();
            // A streaming merge of the files in id order (older first, so the newest value of a
            // duplicate wins); memory stays at a row group per input file.
            let level = group.iter().map(|f| f.entry.level).max().unwrap_or(0) + 1;
            let (rel, path) = self.new_data_path(partition, id)?;
            let storage = self.storage.as_ref();
            let merged = (|| {
                let inputs = group
                    .iter()
                    .map(|f| RowGroups::open(storage, &f.path, &RowFilter::default(), f.entry.stats.footer_crc32))
                    .collect::<Result<Vec<_>>>()?;
                let mut writer = DataFileWriter::create(storage, &path, self.config.compaction_file_options)?;
                merge_streams(inputs, |rows| writer.append(&rows))?;
                writer.finish(storage)
            })();
            let stats = match merged {
                Ok(stats) => stats,
                Err(e) => {
                    // The half-written output is named by no manifest: remove it now (a crash
                    // leaves it to the next writer's orphan clean-up).
                    let _ = storage.remove_file(&path);
                    // A damaged local copy of an input (an object store's read cache) is not
                    // read again: the next try (and every scan) fetches the original.
                    for f in &group {
                        storage.evict_cached(&f.path);
                    }
                    if let Some(bad) = unreadable_input(&e, &group, storage) {
                        let error = crate::storage::describe_error(storage, &e);
                        tracing::error!(partition, %error, "compaction leaves an unreadable data file and the older files of its partition as they are");
                        let mut skips = self.compaction_skips.lock().map_err(lock_poisoned)?;
                        let highest = skips.entry(partition).or_insert(bad);
                        *highest = (*highest).max(bad);
                        summary.partitions_skipped += 1;
                        continue;
                    }
                    return Err(e);
                }
            };
            let entry = FileEntry::new(id, partition, rel, &stats, level);
            let removed: Vec<u64> = group.iter().map(|f| f.entry.id).collect();
            {
                let _guard = self.manifest_lock.lock().map_err(lock_poisoned)?;
                self.commit(vec![entry], &removed, None)?;
            }
            summary.partitions += 1;
            summary.files_in += group.len();
            summary.files_out += 1;
        }
        self.metrics.compactions.fetch_add(1, Ordering::Relaxed);
        Ok(summary)
    }

    /// Drops whole partitions that ended before `now - retention`. Returns files dropped.
    fn expire(&self) -> Result<usize> {
        let Some(retention) = self.config.retention_ns else { return Ok(0) };
        let cutoff = self.clock.now_ns().saturating_sub(retention);
        let partition_ns = self.partition_ns();
        let _guard = self.manifest_lock.lock().map_err(lock_poisoned)?;
        let files = self.state.read().map_err(lock_poisoned)?.files.clone();
        let expired: Vec<u64> = files
            .iter()
            .filter(|f| f.entry.partition.saturating_add(1).saturating_mul(partition_ns) <= cutoff)
            .map(|f| f.entry.id)
            .collect();
        if !expired.is_empty() {
            self.commit(Vec::new(), &expired, None)?;
            self.metrics.files_expired.fetch_add(expired.len() as u64, Ordering::Relaxed);
            tracing::info!(files = expired.len(), "retention dropped expired data files");
        }
        Ok(expired.len())
    }
}

/// The id of the input file `e` says cannot be read for good: corrupt (`DataFileInvalid` naming
/// one of `group`'s files) or gone (`NotFound` naming one of them, which is still not there).
/// `None` for every other failure (the output, the disk, a transient read error), which the
/// next pass retries.
fn unreadable_input(e: &Error, group: &[&Arc<LiveFile>], storage: &dyn crate::storage::Storage) -> Option<u64> {
    let input = |path: &std::path::Path| group.iter().find(|f| f.path == path).map(|f| f.entry.id);
    match e {
        Error::DataFileInvalid { path, .. } => input(path),
        Error::Io { path, source } if source.kind() == std::io::ErrorKind::NotFound && !storage.exists(path) => {
            input(path)
        }
        _ => None,
    }
}

/// A test's hook into [`Store::compact_with`]: called before each partition's files are
/// taken, where a flush can run in between.
#[cfg(test)]
pub(super) mod tests_hook {
    use std::cell::RefCell;

    type Hook = Box<dyn FnMut(&super::Store)>;

    thread_local! {
        static BEFORE_PARTITION: RefCell<Option<Hook>> = RefCell::new(None);
    }

    /// Sets (or with `None` clears) this thread's hook.
    pub(in crate::store) fn set(hook: Option<Hook>) {
        BEFORE_PARTITION.with(|h| *h.borrow_mut() = hook);
    }

    pub(super) fn before_partition(store: &super::Store) {
        let hook = BEFORE_PARTITION.with(|h| h.borrow_mut().take());
        if let Some(mut hook) = hook {
            hook(store);
            BEFORE_PARTITION.with(|h| {
                let mut slot = h.borrow_mut();
                if slot.is_none() {
                    *slot = Some(hook);
                }
            });
        }
    }
}
