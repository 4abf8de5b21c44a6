//! Opening a store: for writing (under the writer lock, WAL replay, orphan clean-up) or as a
//! read-only snapshot that changes nothing on disk.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex, RwLock};

use super::lock::WriterLock;
use super::{LiveFile, State, Store, StoreConfig, StoreMetrics, lock_poisoned, record};
use crate::buffer::WriteBuffer;
use crate::clock::ClockRegistry;
use crate::error::{Error, Result};
use crate::manifest::Manifest;
use crate::model::Rows;
use crate::model::SeriesId;
use crate::series::{CatalogFiles, SeriesCatalog};
use crate::storage::{OsStorage, ReadOnlyStorage, Storage};
use crate::wal::Wal;
use crate::wallclock::{SystemClock, WallClock};

impl Store {
    /// Opens (or creates) a store in `dir` on the real file system, for writing: takes the
    /// writer lock (a second writer gets [`Error::StoreLocked`]), refuses a directory with
    /// data files but no manifest ([`Error::ManifestMissing`]), replays the WAL and removes
    /// orphans. Readers use [`Store::open_read_only`].
    pub fn open(dir: impl AsRef<Path>, config: StoreConfig) -> Result<Self> {
        Self::open_with(dir, config, Arc::new(OsStorage), Arc::new(SystemClock))
    }

    /// Opens (or creates) a store with injected storage and clock.
    pub fn open_with(
        dir: impl AsRef<Path>,
        config: StoreConfig,
        storage: Arc<dyn Storage>,
        clock: Arc<dyn WallClock>,
    ) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        storage.create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        let writer_lock = WriterLock::acquire(&dir)?;
        Self::open_locked(dir, config, storage, clock, writer_lock)
    }

    /// [`Store::open_with`] under a writer lock the caller took on `dir` already
    /// ([`WriterLock::acquire`]): for a writer that must hold the local lock before it takes
    /// something else (the writer lease of a store on object storage) and opens the store.
    pub fn open_locked(
        dir: impl AsRef<Path>,
        config: StoreConfig,
        storage: Arc<dyn Storage>,
        clock: Arc<dyn WallClock>,
        writer_lock: WriterLock,
    ) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        storage.create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        let manifest_path = dir.join("manifest.json");
        if !storage.exists(&manifest_path) {
            let files = count_store_files(storage.as_ref(), &dir)?;
            if files > 0 {
                return Err(Error::ManifestMissing { path: dir, files });
            }
            let nodes = node_stores_under(storage.as_ref(), &dir)?;
            if !nodes.is_empty() {
                let shown = nodes.iter().take(5).cloned().collect::<Vec<_>>().join(", ");
                let more = if nodes.len() > 5 { format!(" and {} more", nodes.len() - 5) } else { String::new() };
                return Err(Error::DatasetInvalid {
                    path: dir.clone(),
                    reason: format!(
                        "it is a dataset root: the stores {shown}{more} are under it, and readers open it as their \
                         union; a store created at the root would hide them from every reader. Write to a node's \
                         directory ({}) or to another directory",
                        dir.join("<node>").display()
                    ),
                });
            }
        }
        for sub in ["wal", "data", "staging"] {
            let p = dir.join(sub);
            storage.create_dir_all(&p).map_err(|e| Error::io(&p, e))?;
        }
        let mut manifest = match Manifest::load(storage.as_ref(), &manifest_path)? {
            Some(m) => m,
            None => {
                if config.partition_ns <= 0 {
                    return Err(Error::InvalidConfig {
                        reason: format!("partition_ns must be positive, got {}", config.partition_ns),
                    });
                }
                let m = Manifest::new(config.partition_ns);
                m.save(storage.as_ref(), &manifest_path)?;
                m
            }
        };
        // A store created before store ids gets one now, durably, before the WAL writes a
        // segment carrying it (its existing segments are version 1 and replay as before).
        let store_id = match manifest.store_id {
            Some(id) => id,
            None => {
                let id = crate::manifest::StoreId::random();
                manifest.store_id = Some(id);
                manifest.save(storage.as_ref(), &manifest_path)?;
                tracing::info!(store_id = %id, "gave the store an id (its manifest predates store ids)");
                id
            }
        };
        let (mut catalog, mut catalog_files) = SeriesCatalog::load_dir(storage.as_ref(), &dir)?;
        // A writer must not hand out ids that data files already use (a catalog increment
        // lost or restored from an older copy): the new series would take over old rows.
        if let Some(f) = manifest.files.iter().filter(|f| f.stats.rows > 0).max_by_key(|f| f.stats.max_series)
            && f.stats.max_series as usize >= catalog.len()
        {
            return Err(Error::CatalogCorrupt {
                path: dir.join("series.json"),
                reason: format!(
                    "it holds {} series, but data file {} uses series id {}: a catalog file (series.json or \
                     an increment under series/) is missing or older than the data; a writer would give \
                     those ids to new series (`lockstep check` lists what is affected)",
                    catalog.len(),
                    f.path,
                    f.stats.max_series
                ),
            });
        }
        catalog_files.remove_stale(storage.as_ref());
        let mut active = WriteBuffer::default();
        let wal_dir = dir.join("wal");
        let owner = storage.wal_owner();
        let checkpoint = manifest.checkpoint_for(owner.as_deref());
        let mut remap = wal_remap(&manifest, owner.as_deref());
        let (wal, stats) =
            Wal::open(storage.clone(), &wal_dir, config.wal.clone(), store_id, checkpoint, &mut |rec| {
                replay_record(&wal_dir, rec, &mut catalog, &mut active, &mut remap)
            })?;
        if let Some(t) = &stats.truncated_tail {
            tracing::warn!(path = %t.path.display(), offset = t.offset, dropped = t.dropped_bytes,
                "truncated torn wal tail");
        }
        let files = live_files(&dir, &manifest, &storage);
        let mut clocks = ClockRegistry::open(storage.clone(), &dir.join("clock"), config.clock_fit.clone())?;
        // A writer killed between adding clock input and fitting it (an import's last step)
        // left the newest models behind their input: fit them now, so that models always
        // match the stored input.
        let input = clocks.input_counts()?;
        if input.exchanges + input.offsets > 0 && clocks.current().inputs() != input {
            match clocks.refit() {
                Ok(v) => tracing::info!(version = v, "refitted clock models left stale by an interrupted writer"),
                Err(e) => tracing::warn!(error = %e, "clock models are stale and could not be refitted"),
            }
        }
        let store = Store::assemble(
            dir,
            storage,
            clock,
            config,
            Some(writer_lock),
            Some(wal),
            (catalog, catalog_files),
            manifest,
            files,
            active,
            clocks,
        );
        store.remove_orphans()?;
        store.remove_orphan_rests()?;
        Ok(store)
    }

    #[allow(clippy::too_many_arguments)]
    fn assemble(
        dir: PathBuf,
        storage: Arc<dyn Storage>,
        clock: Arc<dyn WallClock>,
        config: StoreConfig,
        writer_lock: Option<WriterLock>,
        wal: Option<Wal>,
        (catalog, catalog_files): (SeriesCatalog, CatalogFiles),
        manifest: Manifest,
        files: Vec<Arc<LiveFile>>,
        active: WriteBuffer,
        clocks: ClockRegistry,
    ) -> Store {
        Store {
            clocks: Mutex::new(clocks),
            footers: super::footers::FooterCache::default(),
            union: None,
            dir,
            storage,
            clock,
            config,
            writer_lock,
            catalog: RwLock::new(catalog),
            catalog_generation: AtomicU64::new(0),
            active_imports: AtomicUsize::new(0),
            retire_due: AtomicBool::new(true),
            catalog_files: Mutex::new(catalog_files),
            flush_scratch: Mutex::new(Rows::default()),
            next_file_id: Mutex::new(manifest.next_file_id),
            state: RwLock::new(State {
                manifest: Arc::new(manifest),
                files: Arc::new(files),
                frozen: Vec::new(),
                active,
            }),
            gate: RwLock::new(wal),
            manifest_lock: Mutex::new(()),
            maintenance_lock: Mutex::new(()),
            compaction_skips: Mutex::default(),
            flush_error: Mutex::new(None),
            last_heal: Mutex::new(None),
            documents_last: Mutex::default(),
            metrics: StoreMetrics::default(),
        }
    }

    /// Opens the store in `dir` read-only, on the real file system: see
    /// [`Store::open_read_only_with`].
    pub fn open_read_only(dir: impl AsRef<Path>) -> Result<Self> {
        Self::open_read_only_with(dir, StoreConfig::default(), Arc::new(OsStorage), Arc::new(SystemClock))
    }

    /// Opens a consistent snapshot of the store in `dir` without changing anything on disk and
    /// without the writer lock, so it works while a writer (`lockstep serve`) runs.
    ///
    /// The snapshot is the manifest's data files plus every WAL record after its checkpoint
    /// (the acknowledged writes not yet flushed; a torn tail is ignored in memory). Every data
    /// file of the snapshot is mapped while the snapshot is taken, so a compaction that deletes
    /// it later cannot take it away from this reader. If the manifest changes while the
    /// snapshot is taken (a flush or compaction committed) or a file vanished, the snapshot is
    /// retaken; after 50 attempts the open fails with the retryable [`Error::SnapshotRace`].
    /// A path without a manifest is [`Error::NoStore`] (or [`Error::ManifestMissing`] if it has
    /// data files). Writes to the returned store fail with [`Error::ReadOnly`].
    pub fn open_read_only_with(
        dir: impl AsRef<Path>,
        config: StoreConfig,
        storage: Arc<dyn Storage>,
        clock: Arc<dyn WallClock>,
    ) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        Self::snapshot_retrying(&dir, &config, &storage, &clock, &|| Arc::new(ReadOnlyStorage::new(storage.clone())))
    }

    /// [`Store::open_read_only_with`] with the read-only storage of each attempt from `ro`
    /// (a dataset union pins the files of all its nodes in one).
    pub(super) fn snapshot_retrying(
        dir: &Path,
        config: &StoreConfig,
        storage: &Arc<dyn Storage>,
        clock: &Arc<dyn WallClock>,
        ro: &dyn Fn() -> Arc<ReadOnlyStorage>,
    ) -> Result<Self> {
        const ATTEMPTS: u32 = 50;
        // The catalog an attempt loaded, for the next: its ids are never reused, so a retry
        // reads what is new instead of the whole catalog (about a second for a million series,
        // during which a busy writer commits again), unless the snapshot was replaced (it may
        // retire series): see `SeriesCatalog::load_dir_after`.
        let mut catalog = None;
        for attempt in 0..ATTEMPTS {
            if let Some(store) = Self::try_snapshot(dir, config, storage, &ro(), clock, &mut catalog)? {
                return Ok(store);
            }
            std::thread::sleep(std::time::Duration::from_millis(u64::from(attempt.min(20)) * 5 + 1));
        }
        Err(Error::SnapshotRace { path: dir.to_path_buf(), attempts: ATTEMPTS })
    }

    /// One attempt at a read-only snapshot; `Ok(None)` when it raced the writer, with the
    /// catalog of the store's files left in `cached` for the next attempt.
    fn try_snapshot(
        dir: &Path,
        config: &StoreConfig,
        inner: &Arc<dyn Storage>,
        ro: &Arc<ReadOnlyStorage>,
        clock: &Arc<dyn WallClock>,
        cached: &mut Option<(SeriesCatalog, CatalogFiles)>,
    ) -> Result<Option<Self>> {
        let raced = |e: &Error| matches!(e, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound);
        let manifest_path = dir.join("manifest.json");
        let Some(manifest) = Manifest::load(inner.as_ref(), &manifest_path)? else {
            let files = count_store_files(inner.as_ref(), dir)?;
            return Err(if files > 0 {
                Error::ManifestMissing { path: dir.to_path_buf(), files }
            } else {
                Error::NoStore { path: dir.to_path_buf() }
            });
        };
        let storage: Arc<dyn Storage> = ro.clone();
        // The catalog is saved before every manifest that needs it, so this one (read after
        // the manifest) knows every series of the manifest's files. An increment deleted by a
        // new snapshot meanwhile is `NotFound`: retake.
        let loaded = match cached.take() {
            Some(previous) => SeriesCatalog::load_dir_after(inner.as_ref(), dir, previous),
            None => SeriesCatalog::load_dir(inner.as_ref(), dir),
        };
        let (mut catalog, catalog_files) = match loaded {
            Ok(loaded) => loaded,
            Err(e) if raced(&e) => return Ok(None),
            Err(e) => return Err(e),
        };
        // What a retry keeps: the catalog without the series the WAL replay below defines.
        let from_files = catalog.len();
        let retired_in_files = catalog.retired().len();
        let mut retry = |mut catalog: SeriesCatalog, files: CatalogFiles| -> Result<Option<Self>> {
            catalog.truncate(from_files);
            // A replay that retired a series of the files (`apply_def`) leaves a catalog that
            // is not theirs: the next attempt loads it whole.
            *cached = (catalog.retired().len() == retired_in_files).then_some((catalog, files));
            Ok(None)
        };
        for entry in &manifest.files {
            let path = dir.join(&entry.path);
            match ro.pin(&path) {
                Ok(()) => {}
                // Deleted by a compaction or retention that committed meanwhile: retake. With
                // the manifest unchanged the file is missing for good (no writer deletes a file
                // a durable manifest lists): open without it, and a read of it fails naming it.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    if Manifest::load(inner.as_ref(), &manifest_path)?.as_ref() != Some(&manifest) {
                        return retry(catalog, catalog_files);
                    }
                    tracing::warn!(path = %path.display(), "data file listed in the manifest is missing");
                }
                Err(e) => return Err(Error::io(&path, e)),
            }
        }
        let mut active = WriteBuffer::default();
        let wal_dir = dir.join("wal");
        let owner = inner.wal_owner();
        let checkpoint = manifest.checkpoint_for(owner.as_deref());
        let mut remap = wal_remap(&manifest, owner.as_deref());
        let replayed =
            crate::wal::replay_read_only(storage.as_ref(), &wal_dir, manifest.store_id, checkpoint, &mut |rec| {
                replay_record(&wal_dir, rec, &mut catalog, &mut active, &mut remap)
            });
        match replayed {
            Ok(_) => {}
            // A segment deleted by a flush that committed meanwhile, or a record cut short
            // where a later segment follows because a flush rotated meanwhile, or a segment
            // with an id this manifest (read before a writer gave the store its id) lacks: retake.
            Err(e)
                if raced(&e)
                    || matches!(
                        e,
                        Error::WalCorrupt { .. } | Error::WalRecordInvalid { .. } | Error::WalForeignSegment { .. }
                    ) =>
            {
                if Manifest::load(inner.as_ref(), &manifest_path)?.as_ref() != Some(&manifest) {
                    return retry(catalog, catalog_files);
                }
                return Err(e);
            }
            Err(e) => return Err(e),
        }
        if Manifest::load(inner.as_ref(), &manifest_path)?.as_ref() != Some(&manifest) {
            return retry(catalog, catalog_files);
        }
        let files = live_files(dir, &manifest, &storage);
        let clocks = ClockRegistry::open(storage.clone(), &dir.join("clock"), config.clock_fit.clone())?;
        let parts = ((catalog, catalog_files), manifest, files, active, clocks);
        Ok(Some(Store::assemble_read_only(dir.to_path_buf(), storage, clock.clone(), config.clone(), parts)))
    }

    /// A read-only store (no writer lock, no WAL) of its parts.
    #[allow(clippy::type_complexity)]
    pub(super) fn assemble_read_only(
        dir: PathBuf,
        storage: Arc<dyn Storage>,
        clock: Arc<dyn WallClock>,
        config: StoreConfig,
        (catalog, manifest, files, active, clocks): (
            (SeriesCatalog, CatalogFiles),
            Manifest,
            Vec<Arc<LiveFile>>,
            WriteBuffer,
            ClockRegistry,
        ),
    ) -> Store {
        Store::assemble(dir, storage, clock, config, None, None, catalog, manifest, files, active, clocks)
    }

    /// Deletes data files the manifest does not name and leftovers of unfinished imports.
    /// Runs only in a writer's open, under the writer lock: no other process can still adopt
    /// such a file, and readers pin the files of their snapshot when they open.
    fn remove_orphans(&self) -> Result<()> {
        let state = self.state.read().map_err(lock_poisoned)?;
        let live: std::collections::HashSet<&Path> = state.files.iter().map(|f| f.path.as_path()).collect();
        let data = self.dir.join("data");
        for part in self.storage.list_dir(&data).map_err(|e| Error::io(&data, e))? {
            for file in self.storage.list_dir(&part).map_err(|e| Error::io(&part, e))? {
                if !live.contains(file.as_path()) {
                    tracing::info!(path = %file.display(), "removing orphan data file");
                    self.storage.remove_file(&file).map_err(|e| Error::io(&file, e))?;
                }
            }
        }
        let staging = self.dir.join("staging");
        for file in self.storage.list_dir(&staging).map_err(|e| Error::io(&staging, e))? {
            self.storage.remove_file(&file).map_err(|e| Error::io(&file, e))?;
        }
        Ok(())
    }
}

/// The node stores directly under `dir` (a directory with a node's name holding a
/// `manifest.json`): what makes `dir` a dataset root to readers.
fn node_stores_under(storage: &dyn Storage, dir: &Path) -> Result<Vec<String>> {
    let mut nodes: Vec<String> = storage
        .list_dir(dir)
        .map_err(|e| Error::io(dir, e))?
        .iter()
        .filter_map(|p| p.file_name()?.to_str().map(str::to_string))
        .filter(|name| super::union::is_node_name(name) && storage.exists(&dir.join(name).join("manifest.json")))
        .collect();
    nodes.sort();
    nodes.dedup();
    Ok(nodes)
}

/// Data files and WAL segments under a store directory (to tell a store that lost its
/// manifest from an empty directory).
fn count_store_files(storage: &dyn Storage, dir: &Path) -> Result<usize> {
    let mut n = 0;
    let data = dir.join("data");
    for part in storage.list_dir(&data).map_err(|e| Error::io(&data, e))? {
        // A partition is a local directory, or (on an object store) a prefix with no local path.
        if part.is_dir() || !part.exists() {
            n += storage.list_dir(&part).map_err(|e| Error::io(&part, e))?.len();
        }
    }
    let wal = dir.join("wal");
    n += storage
        .list_dir(&wal)
        .map_err(|e| Error::io(&wal, e))?
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "wal"))
        .count();
    Ok(n)
}

/// Applies one replayed WAL record: its series definitions to the catalog, its rows to the buffer.
fn replay_record(
    wal_dir: &Path,
    rec: crate::wal::RecordRef<'_>,
    catalog: &mut SeriesCatalog,
    active: &mut WriteBuffer,
    remap: &mut Option<HashMap<SeriesId, SeriesId>>,
) -> Result<()> {
    let bad = |reason: String| Error::WalRecordInvalid {
        path: wal_dir.join(format!("{:020}.wal", rec.segment)),
        offset: rec.offset,
        reason,
    };
    // The definitions' names are read in place: the catalog allocates only those it lacks.
    let mut decoded = record::decode_ref(rec.payload).map_err(bad)?;
    match remap {
        // The WAL's own ids are the catalog's: a definition must match it exactly.
        None => {
            for (id, metric, labels) in decoded.defs.iter() {
                apply_def(catalog, id, metric, labels).map_err(bad)?;
            }
        }
        // Another node wrote the store since this WAL was written (see `wal_remap`): the ids
        // this WAL defined may name other series now. Each definition is resolved by its
        // key, and the samples follow; ids it did not define are the ones it shared with the
        // store when it opened, which no writer renames.
        Some(map) => {
            for (id, metric, labels) in decoded.defs.iter() {
                let (now, _) = catalog
                    .get_or_insert_parts(metric, labels)
                    .map_err(|e| bad(format!("bad series definition: {e}")))?;
                map.insert(id, now);
            }
            for id in decoded.rows.series.iter_mut() {
                if let Some(&now) = map.get(id) {
                    *id = now;
                }
            }
        }
    }
    if let Some(&max) = decoded.rows.series.iter().max()
        && max as usize >= catalog.len()
    {
        return Err(bad(format!("samples refer to undefined series id {max}")));
    }
    // A retired id had no sample in the write buffers when it was retired, so no record after
    // the checkpoint uses it.
    if !catalog.retired().is_empty()
        && let Some(id) = decoded.rows.series.iter().find(|&&id| catalog.retired().contains(id))
    {
        return Err(bad(format!("samples refer to series id {id}, which the catalog has retired")));
    }
    active.push(decoded.rows);
    Ok(())
}

/// How a WAL replays into the store: `None` (its ids are the catalog's) unless the manifest
/// names the checkpoint of another WAL owner than `owner` — another node wrote the store,
/// possibly giving new series the ids this WAL had defined — then a map from the WAL's ids to
/// the catalog's, built from the WAL's definitions by key.
fn wal_remap(manifest: &Manifest, owner: Option<&str>) -> Option<HashMap<SeriesId, SeriesId>> {
    manifest.wal_checkpoints.keys().any(|o| Some(o.as_str()) != owner).then(HashMap::new)
}

/// The live files of a manifest.
fn live_files(dir: &Path, manifest: &Manifest, storage: &Arc<dyn Storage>) -> Vec<Arc<LiveFile>> {
    manifest
        .files
        .iter()
        .map(|entry| {
            Arc::new(LiveFile {
                path: dir.join(&entry.path),
                entry: entry.clone(),
                series_offset: 0,
                storage: storage.clone(),
                obsolete: AtomicBool::new(false),
            })
        })
        .collect()
}

/// Applies a series definition replayed from the WAL: `metric{labels}` with the labels as
/// the record holds them (see [`record::DefsRef::iter`]).
pub(super) fn apply_def(
    catalog: &mut SeriesCatalog,
    id: SeriesId,
    metric: &str,
    labels: &[(&str, &str)],
) -> std::result::Result<(), String> {
    match catalog.key(id) {
        Some(existing) => {
            let same = if labels.windows(2).all(|w| w[0].0 < w[1].0) {
                existing.eq_parts(metric, labels)
            } else {
                **existing == record::def_key(metric, labels)
            };
            if same {
                Ok(())
            } else {
                let key = record::def_key(metric, labels);
                Err(format!("series id {id} is {existing} in the catalog but {key} in the wal"))
            }
        }
        None if catalog.retired().contains(id) => Err(format!(
            "series id {id} is defined in the wal but retired in the catalog (retirement leaves alone the series of buffered writes)"
        )),
        None if id as usize == catalog.len() => {
            let bad = |e: crate::error::Error| format!("bad series definition: {e}");
            let (first, inserted) = catalog.get_or_insert_parts(metric, labels).map_err(bad)?;
            if !inserted {
                // The key is live under an older id: a retirement this catalog lacks came first
                // (the writer crashed before saving it, or a reader loaded the catalog before it
                // was saved). The writer retired that id, with no sample anywhere, before the
                // key was written again: retire it here too, and define the key anew.
                catalog.retire(&roaring::RoaringBitmap::from_iter([first]));
                let (again, _) = catalog.get_or_insert_parts(metric, labels).map_err(bad)?;
                if again != id {
                    return Err(format!("series id {id} is defined as {again} after retiring {first}"));
                }
            }
            Ok(())
        }
        None => Err(format!(
            "series id {id} skips ahead of the catalog ({} series): the records that defined the ids between are \
             missing (a WAL segment before this one deleted or lost?)",
            catalog.len()
        )),
    }
}
