//! The catalog's files: the snapshot `series.json` and the increments after it in `series/`
//! ([`CatalogFiles`]), loaded by [`SeriesCatalog::load_dir`] and, for a read-only snapshot
//! that retries, [`SeriesCatalog::load_dir_after`].

use std::collections::HashMap as StdHashMap;
use std::path::Path;
use std::sync::Arc;

use serde::Serialize;

use super::SeriesCatalog;
use super::parse::{Snapshot, parse};
use crate::error::{Error, Result};
use crate::model::SeriesKey;
use crate::storage::{Storage, write_atomic};

/// What [`CatalogFiles::save`] writes: a [`Snapshot`]'s layout, borrowing the keys.
#[derive(Serialize)]
struct SnapshotRef<'a> {
    version: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    first: Option<usize>,
    series: Vec<&'a SeriesKey>,
    /// Version 3 only: the retired ids, as sorted half-open ranges.
    #[serde(skip_serializing_if = "Option::is_none")]
    retired: Option<&'a [(u32, u32)]>,
}

impl SeriesCatalog {
    /// Loads the catalog of the store in `dir`: the snapshot `series.json` and the increments
    /// after it in `series/` (see [`CatalogFiles`]). No files is an empty catalog.
    ///
    /// The increments are listed before the snapshot is read. A writer deletes an increment
    /// only after a snapshot that holds its series is durable, so every increment missing from
    /// the listing is covered by the snapshot read after it; one deleted between the listing and
    /// its read is an `Io` error of kind `NotFound` (a read-only snapshot retakes on it).
    pub fn load_dir(storage: &dyn Storage, dir: &Path) -> Result<(Self, CatalogFiles)> {
        let inc_dir = dir.join(CATALOG_DIR);
        let mut files = CatalogFiles::default();
        let listed = list_increments(storage, &inc_dir, &mut files.stale)?;
        let base = dir.join(CATALOG_FILE);
        let mut catalog = if storage.exists(&base) {
            let bytes = storage.read(&base).map_err(|e| Error::io(&base, e))?;
            let corrupt = |reason: String| Error::CatalogCorrupt { path: base.clone(), reason };
            let sealed = crate::seal::check(&bytes).map_err(&corrupt)?;
            let snapshot: Snapshot = parse(&bytes).map_err(|e| corrupt(e.to_string()))?;
            if !matches!(snapshot.version, 1 | CATALOG_VERSION | RETIRED_VERSION) {
                return Err(corrupt(format!("unknown version {}", snapshot.version)));
            }
            // Versions 2 and 3 were always written sealed: without its seal, the seal itself was hit.
            if snapshot.version != 1 && !sealed {
                return Err(corrupt(format!(
                    "a version {} snapshot must be sealed (end in its checksum)",
                    snapshot.version
                )));
            }
            if snapshot.first.is_some() {
                return Err(corrupt("a snapshot must not have `first` (that is an increment's field)".into()));
            }
            let retired = match (snapshot.version, snapshot.retired) {
                (RETIRED_VERSION, Some(r)) => r,
                (RETIRED_VERSION, None) => return Err(corrupt("a version 3 snapshot must have `retired`".into())),
                (v, Some(_)) => return Err(corrupt(format!("a version {v} snapshot must not have `retired`"))),
                (_, None) => Vec::new(),
            };
            files.base_bytes = bytes.len();
            files.base_current = snapshot.version != 1;
            files.base_seal = sealed.then(|| {
                bytes.get(bytes.len().saturating_sub(crate::seal::SEALED_TAIL)..).unwrap_or_default().to_vec()
            });
            let mut catalog = Self::new();
            catalog.reserve(snapshot.series.len());
            // One file's names are shared already (`parse`), and the catalog is empty.
            catalog.extend_with_retired(snapshot.series, &retired, &corrupt)?;
            files.retired_saved = catalog.retired.len();
            catalog
        } else {
            Self::new()
        };
        files.base_len = catalog.len();
        catalog.read_increments(storage, listed, &mut files)?;
        Ok((catalog, files))
    }

    /// [`SeriesCatalog::load_dir`] again, for a read-only snapshot that retries: `previous` is
    /// what an earlier load of the same store returned (or less: its first series). Ids are
    /// never reused, and a snapshot is rewritten only with a change (more series, or more
    /// retired ones: its bytes differ, so its size or its checksum do); when the snapshot file
    /// is the one read then (its size and checksum are unchanged), the ids known are still the
    /// store's first ones with the same series, retired or not, and only the increments after
    /// them are read, not the snapshot again (tens of MB for a million series). Otherwise
    /// (another snapshot: it may retire series the previous load had) this is a full
    /// [`SeriesCatalog::load_dir`].
    pub fn load_dir_after(
        storage: &dyn Storage,
        dir: &Path,
        previous: (SeriesCatalog, CatalogFiles),
    ) -> Result<(Self, CatalogFiles)> {
        let (mut catalog, previous) = previous;
        let inc_dir = dir.join(CATALOG_DIR);
        let mut files = CatalogFiles {
            retired_saved: previous.retired_saved,
            base_len: previous.base_len,
            base_bytes: previous.base_bytes,
            base_current: previous.base_current,
            base_seal: previous.base_seal.clone(),
            increments: previous.increments,
            ..CatalogFiles::default()
        };
        let listed = list_increments(storage, &inc_dir, &mut files.stale)?;
        let base = dir.join(CATALOG_FILE);
        // The same snapshot: the same size and the same sealing checksum (a store replaced
        // meanwhile may have a snapshot of the same size; an unsealed one is always reloaded).
        let unchanged = match (storage.len(&base), &previous.base_seal) {
            (Ok(len), Some(seal)) if len == previous.base_bytes as u64 && len >= seal.len() as u64 => {
                let tail = storage.read_range(&base, len - seal.len() as u64..len).map_err(|e| Error::io(&base, e))?;
                tail.as_ref() == seal.as_slice()
            }
            (Err(e), _) if e.kind() == std::io::ErrorKind::NotFound => previous.base_bytes == 0,
            (Err(e), _) => return Err(Error::io(&base, e)),
            _ => false,
        };
        if !unchanged || catalog.len() < files.base_len {
            // Free the old catalog before building the new one (hundreds of MB at a million
            // series).
            drop(catalog);
            return Self::load_dir(storage, dir);
        }
        catalog.read_increments(storage, listed, &mut files)?;
        Ok((catalog, files))
    }

    /// Adds the series of the `listed` increments after those known, in order; an increment
    /// the catalog covers is skipped (`files.stale` if the snapshot covers it).
    fn read_increments(&mut self, storage: &dyn Storage, listed: Vec<Listed>, files: &mut CatalogFiles) -> Result<()> {
        let catalog = self;
        // The increments to read, fetched at once: on object storage each is a request.
        let wanted: Vec<std::path::PathBuf> =
            listed.iter().filter(|l| l.end > catalog.len()).map(|l| l.path.clone()).collect();
        let mut fetched = fetch_all(storage, wanted);
        for inc in listed {
            if inc.end <= catalog.len() {
                // Covered by the snapshot: left behind by a writer that stopped before deleting
                // it (or, for `load_dir_after`, read before).
                if inc.end <= files.base_len {
                    files.stale.push(inc.path);
                }
                continue;
            }
            let corrupt = |reason: String| Error::CatalogCorrupt { path: inc.path.clone(), reason };
            if inc.first > catalog.len() {
                return Err(corrupt(format!(
                    "the catalog has {} series, but this increment starts at series {}: the increment before it is missing",
                    catalog.len(),
                    inc.first
                )));
            }
            let bytes = match fetched.remove(inc.path.as_path()) {
                Some(read) => read,
                None => storage.read(&inc.path),
            };
            let bytes = bytes.map_err(|e| Error::io(&inc.path, e))?;
            if !crate::seal::check(&bytes).map_err(&corrupt)? {
                return Err(corrupt("an increment must be sealed (end in its checksum)".into()));
            }
            let snapshot: Snapshot = parse(&bytes).map_err(|e| corrupt(e.to_string()))?;
            if snapshot.version != CATALOG_VERSION {
                return Err(corrupt(format!("unknown version {}", snapshot.version)));
            }
            if snapshot.first != Some(inc.first) {
                return Err(corrupt(format!(
                    "version {} and first series {:?} do not match the file name (version {CATALOG_VERSION}, first {})",
                    snapshot.version, snapshot.first, inc.first
                )));
            }
            if snapshot.series.len() != inc.end - inc.first {
                return Err(corrupt(format!(
                    "{} series in the file, {} in its name",
                    snapshot.series.len(),
                    inc.end - inc.first
                )));
            }
            // Only the series after those known (an increment that overlaps the snapshot), and
            // those it shares with the snapshot must be the same series.
            let known = catalog.len() - inc.first;
            let shared = catalog.keys.get(inc.first..).unwrap_or_default();
            let shared = |i: usize| shared.get(i).and_then(Option::as_deref);
            if let Some(i) = (0..known).find(|&i| snapshot.series.get(i) != shared(i)) {
                return Err(corrupt(format!(
                    "series {} is {} here but {} in the catalog before it",
                    inc.first + i,
                    snapshot.series.get(i).map_or_else(String::new, ToString::to_string),
                    shared(i).map_or_else(|| "retired".to_string(), ToString::to_string)
                )));
            }
            catalog.extend_checked(snapshot.series.into_iter().skip(known), true, &corrupt)?;
            files.increments.push(Increment { bytes: bytes.len(), path: inc.path });
        }
        files.saved = catalog.len();
        Ok(())
    }

    /// Adds a snapshot's live `keys` and `retired` id ranges (sorted half-open ranges; the keys
    /// fill the ids between them in order) under the next ids, to an empty catalog, checking
    /// the ranges: each non-empty, after the one before, and within the ids.
    fn extend_with_retired(
        &mut self,
        keys: Vec<SeriesKey>,
        retired: &[(u64, u64)],
        corrupt: &dyn Fn(String) -> Error,
    ) -> Result<()> {
        let total = (keys.len() as u64).saturating_add(retired.iter().map(|&(a, b)| b.saturating_sub(a)).sum());
        let mut keys = keys.into_iter();
        let mut prev_end = 0;
        for &(start, end) in retired {
            if start >= end {
                return Err(corrupt(format!("retired range [{start}, {end}) is empty or reversed")));
            }
            if start < prev_end {
                return Err(corrupt(format!(
                    "retired range [{start}, {end}) is not after the one before it (ending at {prev_end})"
                )));
            }
            if end > total {
                return Err(corrupt(format!(
                    "retired range [{start}, {end}) ends past the {total} ids of the snapshot"
                )));
            }
            let live = (start - prev_end) as usize;
            self.extend_checked(keys.by_ref().take(live), false, corrupt)?;
            self.push_retired((end - start) as usize).map_err(|e| corrupt(e.to_string()))?;
            prev_end = end;
        }
        self.extend_checked(keys, false, corrupt)
    }

    /// Adds loaded keys under the next ids, validating each and refusing duplicates; with
    /// `intern`, their names are first replaced by the catalog's own (keys of another file).
    fn extend_checked(
        &mut self,
        keys: impl IntoIterator<Item = SeriesKey>,
        intern: bool,
        corrupt: &dyn Fn(String) -> Error,
    ) -> Result<()> {
        for mut key in keys {
            key.validate().map_err(|e| corrupt(format!("bad series {key}: {e}")))?;
            if intern {
                self.intern(&mut key);
            }
            // A duplicate is pushed too (one hash of the key, not two); the half-built catalog
            // is dropped.
            if !self.push(key).map_err(|e| corrupt(e.to_string()))?.1 {
                let key = self.keys.last().and_then(Option::as_ref).map_or_else(String::new, ToString::to_string);
                return Err(corrupt(format!("duplicate series {key}")));
            }
        }
        Ok(())
    }
}

/// Reads `paths` on up to 8 threads (on object storage each read is a request; a catalog has
/// at most 63 increments), each path with its result.
fn fetch_all(
    storage: &dyn Storage,
    paths: Vec<std::path::PathBuf>,
) -> StdHashMap<std::path::PathBuf, std::io::Result<bytes::Bytes>> {
    let read = crate::parallel::map(paths.len(), 8, |i| storage.read(&paths[i]));
    paths.into_iter().zip(read).collect()
}

/// The catalog's snapshot file in a store directory.
pub const CATALOG_FILE: &str = "series.json";
/// The directory of the catalog's increments in a store directory.
pub const CATALOG_DIR: &str = "series";
/// The catalog format written: version 2 may continue in increments; version 1 (read too) is a
/// snapshot alone. Binaries from before increments refuse version 2 instead of missing series.
/// Increments are always version 2.
const CATALOG_VERSION: u32 = 2;
/// The snapshot version written when some ids are retired: version 2 plus `retired`, the
/// retired ids as sorted half-open ranges (the `series` fill the other ids in order); it may
/// continue in (version 2) increments. Binaries from before retirement refuse it ("unknown
/// version 3") instead of numbering the series wrongly. A store that never retired a series
/// keeps being written as version 2.
const RETIRED_VERSION: u32 = 3;
/// A save writes a new snapshot (and deletes the increments) instead of one more increment
/// once there are this many increments.
const MAX_INCREMENTS: usize = 64;

/// The files a store's catalog is kept in, and what the next save writes.
///
/// `series.json` is a sealed snapshot of the series `0..n`; `series/<first>-<end>.json` (ids,
/// zero-padded) are sealed increments with the series `first..end`, written after it in id
/// order. A save writes only the series added since the last one, as one increment, so a
/// store with a million series does not rewrite its whole catalog (tens of MB) on every flush
/// that brings a new series. A save writes a new snapshot instead, and then deletes the
/// increments, when the increments would reach half the snapshot's size (a burst of new
/// series: the bytes written stay proportional to the growth) or 64 files (`MAX_INCREMENTS`;
/// a trickle of new series rewrites the snapshot once in 64 saves), so an open reads at most
/// 64 increments.
#[derive(Debug, Default)]
pub struct CatalogFiles {
    /// Series ids in the files; the next save writes the series from here on.
    saved: usize,
    /// Retired ids in the files: a catalog with more is saved as a new snapshot.
    retired_saved: u64,
    /// Series ids in the snapshot (retired ones included).
    base_len: usize,
    /// Size of the snapshot file.
    base_bytes: usize,
    /// Whether the snapshot is of the current version (increments may follow it).
    base_current: bool,
    /// The snapshot's last bytes, with its checksum (a sealed snapshot): how a retrying reader
    /// tells that it is the one it read (see [`SeriesCatalog::load_dir_after`]).
    base_seal: Option<Vec<u8>>,
    /// The live increments, in id order.
    increments: Vec<Increment>,
    /// Increments the snapshot covers and temporary files of interrupted saves (see
    /// [`CatalogFiles::remove_stale`]).
    stale: Vec<std::path::PathBuf>,
    /// Whether `series/` is known to exist durably.
    dir_ready: bool,
}

#[derive(Debug)]
struct Increment {
    bytes: usize,
    path: std::path::PathBuf,
}

/// An increment file as listed: its series range from its name.
struct Listed {
    first: usize,
    end: usize,
    path: std::path::PathBuf,
}

/// The increments in `inc_dir`, by first series. A writer's temporary files (an interrupted
/// save) go to `leftovers`; other names are skipped.
fn list_increments(
    storage: &dyn Storage,
    inc_dir: &Path,
    leftovers: &mut Vec<std::path::PathBuf>,
) -> Result<Vec<Listed>> {
    let mut out = Vec::new();
    for path in storage.list_dir(inc_dir).map_err(|e| Error::io(inc_dir, e))? {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let range = name.strip_suffix(".json").and_then(|r| r.split_once('-'));
        let parse = |s: &str| s.bytes().all(|b| b.is_ascii_digit()).then(|| s.parse::<usize>().ok()).flatten();
        if let Some((first, end)) = range.and_then(|(a, b)| Some((parse(a)?, parse(b)?)))
            && first < end
        {
            out.push(Listed { first, end, path });
        } else if name.ends_with(".tmp") {
            leftovers.push(path);
        }
    }
    out.sort_by_key(|l| (l.first, l.end));
    Ok(out)
}

/// What [`CatalogFiles::plan`] says the next save writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CatalogSave {
    /// Nothing: the files hold every series.
    Nothing,
    /// An increment of the series from this id on.
    Increment(usize),
    /// A new snapshot of every series.
    Snapshot,
}

impl CatalogFiles {
    /// Series the files hold.
    pub fn saved(&self) -> usize {
        self.saved
    }

    /// Increment files live (after the snapshot).
    pub fn increments(&self) -> usize {
        self.increments.len()
    }

    /// What saving `catalog` writes: a retirement since the last save (the increments only
    /// add ids) forces a new snapshot.
    pub fn plan(&self, catalog: &SeriesCatalog) -> CatalogSave {
        let len = catalog.len();
        if catalog.retired.len() != self.retired_saved {
            return CatalogSave::Snapshot;
        }
        if len <= self.saved {
            return CatalogSave::Nothing;
        }
        if !self.base_current || self.base_len == 0 || self.increments.len() + 1 >= MAX_INCREMENTS {
            return CatalogSave::Snapshot;
        }
        // The new increment's size, estimated from the snapshot's bytes per series.
        let estimate = (len - self.saved).saturating_mul(self.base_bytes / self.base_len.max(1));
        let increments: usize = self.increments.iter().map(|i| i.bytes).sum();
        if (increments + estimate).saturating_mul(2) >= self.base_bytes {
            CatalogSave::Snapshot
        } else {
            CatalogSave::Increment(self.saved)
        }
    }

    /// What the next save writes for `catalog`, copied out (so that the caller need not hold a
    /// lock on the catalog while it is written), or `None` when the files hold every series
    /// and every retirement.
    pub fn pending(&self, catalog: &SeriesCatalog) -> Option<PendingSave> {
        let from = match self.plan(catalog) {
            CatalogSave::Nothing => return None,
            CatalogSave::Increment(from) => from,
            CatalogSave::Snapshot => 0,
        };
        let keys: Vec<Arc<SeriesKey>> =
            catalog.keys().get(from..).unwrap_or_default().iter().flatten().cloned().collect();
        let retired = if from == 0 { retired_ranges(&catalog.retired) } else { Vec::new() };
        Some(PendingSave { from, end: catalog.len(), keys, retired })
    }

    /// Saves `pending` (what [`CatalogFiles::pending`] returned) durably: after it returns, a
    /// load finds every series up to `pending.end`, and every retirement of a snapshot.
    pub fn save(&mut self, storage: &dyn Storage, dir: &Path, pending: &PendingSave) -> Result<()> {
        let PendingSave { from, end, ref keys, ref retired } = *pending;
        let retired_count: u64 = retired.iter().map(|&(a, b)| u64::from(b - a)).sum();
        if end <= self.saved && (from != 0 || retired_count == self.retired_saved) {
            return Ok(());
        }
        let ids = keys.len() as u64 + retired_count;
        if ids != (end - from) as u64 || (from != 0 && !retired.is_empty()) {
            return Err(Error::Internal {
                reason: format!(
                    "catalog save of ids {from}..{end} with {} series and {retired_count} retired",
                    keys.len()
                ),
            });
        }
        let series: Vec<&SeriesKey> = keys.iter().map(|k| k.as_ref()).collect();
        // The file's size, from the snapshot's bytes per series (a 73 MB snapshot serialised
        // into a growing buffer ends in a 128 MB one, after copying 64 MB on the way).
        let per_series = self.base_bytes.checked_div(self.base_len).unwrap_or(96);
        // At most 256 MiB up front: a snapshot of a few odd series says little about the next.
        let size_hint = keys.len().saturating_mul(per_series + per_series / 16).saturating_add(256).min(256 << 20);
        if from == 0 {
            let path = dir.join(CATALOG_FILE);
            // Version 2 unless some ids are retired: older binaries keep reading a store that
            // never retired a series.
            let (version, retired) =
                if retired.is_empty() { (CATALOG_VERSION, None) } else { (RETIRED_VERSION, Some(retired.as_slice())) };
            let snapshot = SnapshotRef { version, first: None, series, retired };
            let bytes = seal_json(&path, &snapshot, size_hint)?;
            write_atomic(storage, &path, &bytes).map_err(|e| Error::io(&path, e))?;
            self.saved = end;
            self.retired_saved = retired_count;
            self.base_len = end;
            self.base_bytes = bytes.len();
            self.base_current = true;
            self.base_seal = bytes.get(bytes.len().saturating_sub(crate::seal::SEALED_TAIL)..).map(<[u8]>::to_vec);
            // Every increment is in the snapshot now; one left behind is skipped by loads and
            // removed by the next writer's open.
            for inc in std::mem::take(&mut self.increments) {
                if let Err(e) = storage.remove_file(&inc.path) {
                    tracing::warn!(path = %inc.path.display(), error = %e, "could not remove a catalog increment");
                    self.stale.push(inc.path);
                }
            }
            return Ok(());
        }
        if from != self.saved {
            return Err(Error::Internal {
                reason: format!("catalog increment from series {from}, but {} are saved", self.saved),
            });
        }
        let inc_dir = dir.join(CATALOG_DIR);
        if !self.dir_ready {
            // A new directory is durable once its parent is synced (always, once per process:
            // a process that created it may have died before its sync).
            storage.create_dir_all(&inc_dir).map_err(|e| Error::io(&inc_dir, e))?;
            storage.sync_dir(dir).map_err(|e| Error::io(dir, e))?;
            self.dir_ready = true;
        }
        let path = inc_dir.join(format!("{from:012}-{end:012}.json"));
        let increment = SnapshotRef { version: CATALOG_VERSION, first: Some(from), series, retired: None };
        let bytes = seal_json(&path, &increment, size_hint)?;
        write_atomic(storage, &path, &bytes).map_err(|e| Error::io(&path, e))?;
        self.saved = end;
        self.increments.push(Increment { bytes: bytes.len(), path });
        Ok(())
    }

    /// Deletes the increments a snapshot covers (left by a writer that stopped between writing
    /// the snapshot and deleting them) and temporary files of interrupted saves. For a writer's
    /// open only: a reader that listed them
    /// before the snapshot replaced the old one may still read them.
    ///
    /// A file that cannot be removed is left with a warning: loads skip it, and it must not
    /// keep the writer from opening the store.
    pub fn remove_stale(&mut self, storage: &dyn Storage) {
        for path in std::mem::take(&mut self.stale) {
            match storage.remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => tracing::warn!(path = %path.display(), error = %e, "could not remove a stale catalog file"),
            }
        }
    }
}

/// What [`CatalogFiles::save`] writes, copied out of the catalog by [`CatalogFiles::pending`].
#[derive(Debug, Clone)]
pub struct PendingSave {
    /// The first id written: an increment's first series, or 0 for a snapshot.
    pub from: usize,
    /// The ids written end here (the catalog's length).
    pub end: usize,
    /// The live series of `from..end`, in id order.
    pub keys: Vec<Arc<SeriesKey>>,
    /// A snapshot's retired ids as sorted half-open ranges (empty for an increment).
    pub retired: Vec<(u32, u32)>,
}

/// The ids of `bitmap` as sorted, non-adjacent half-open ranges.
fn retired_ranges(bitmap: &roaring::RoaringBitmap) -> Vec<(u32, u32)> {
    let mut out: Vec<(u32, u32)> = Vec::new();
    for id in bitmap {
        match out.last_mut() {
            Some((_, end)) if *end == id => *end = id + 1,
            _ => out.push((id, id + 1)),
        }
    }
    out
}

/// `value` as sealed JSON, serialised into a buffer of `size_hint` bytes to start with.
fn seal_json(path: &Path, value: &impl Serialize, size_hint: usize) -> Result<Vec<u8>> {
    let mut bytes = Vec::with_capacity(size_hint);
    serde_json::to_writer(&mut bytes, value)
        .map_err(|e| Error::CatalogCorrupt { path: path.to_path_buf(), reason: e.to_string() })?;
    Ok(crate::seal::seal(bytes))
}

#[cfg(test)]
mod tests;
