//! The persisted state of clock sync: raw input (append-only) and every fitted version.
//!
//! Layout under the registry directory:
//! * `exchanges.log`, `offsets.log`, `barriers.log`: raw input, CRC-checked JSON lines
//!   (see the `log` module); an `add_*` call returns only after its records are fsynced;
//! * `versions/v<20-digit version>.json`: one immutable [`ClockSet`] per fit, written with
//!   [`crate::storage::write_atomic`]; all versions are loaded on open and stay readable.
//!
//! Version 0 is the empty set (every host unknown) and is never written. A version records the
//! config and the input counts it was fitted from, so it can be reproduced from the logs.
//! The registry replays the raw input on first use (a reader that only needs the fitted
//! versions never parses the logs), keeps it in memory and refits from all of it; methods take
//! `&mut self`, callers share it behind a lock and hand out [`ClockRegistry::current`] snapshots.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::log::RawLog;
use super::{BarrierEvent, ClockSet, FitConfig, InputWatermark, OffsetObservation, SyncExchange, fit_set};
use crate::error::{Error, Result};
use crate::storage::{Storage, write_atomic};

/// Raw clock-sync input and all fitted model versions, persisted through a [`Storage`].
#[derive(Debug)]
pub struct ClockRegistry {
    storage: Arc<dyn Storage>,
    dir: PathBuf,
    versions_dir: PathBuf,
    config: FitConfig,
    /// The raw input, read on first use: a reader that only needs the fitted versions never
    /// parses the logs (a day of sync exchanges is hundreds of MB of JSON).
    raw: Option<RawInput>,
    versions: BTreeMap<u64, Arc<ClockSet>>,
    /// Version 0, the empty set: one allocation, so that callers caching by pointer (the
    /// `samples` table's per-series columns) see the same set each time.
    empty: Arc<ClockSet>,
}

/// The replayed raw logs.
#[derive(Debug)]
struct RawInput {
    exchanges: Vec<SyncExchange>,
    /// The stored exchanges, for skipping exact repeats.
    exchange_index: HashSet<SyncExchange>,
    offsets: Vec<OffsetObservation>,
    /// The stored offsets, for skipping exact repeats.
    offset_index: HashSet<OffsetObservation>,
    /// The effective barrier events: the earliest end per (host, instance).
    barriers: Vec<BarrierEvent>,
    /// (host, instance) → position in `barriers`.
    barrier_index: HashMap<(String, u64), usize>,
    /// Barrier log records, superseded ones included (the input watermark counts them, so an
    /// earlier end that replaces a stored one still triggers a refit).
    barrier_records: u64,
    exchange_log: RawLog,
    offset_log: RawLog,
    barrier_log: RawLog,
}

impl RawInput {
    /// Replays the three logs in `dir` (truncating a torn tail).
    fn load(storage: &dyn Storage, dir: &Path) -> Result<RawInput> {
        let (exchange_log, exchanges) = RawLog::open(storage, dir.join("exchanges.log"))?;
        let (offset_log, offsets) = RawLog::open(storage, dir.join("offsets.log"))?;
        let (barrier_log, barrier_log_records) = RawLog::open::<BarrierEvent>(storage, dir.join("barriers.log"))?;
        let barrier_records = barrier_log_records.len() as u64;
        let mut barriers = Vec::new();
        let mut barrier_index = HashMap::new();
        for b in barrier_log_records {
            merge_barrier(&mut barriers, &mut barrier_index, b);
        }
        Ok(RawInput {
            exchange_index: exchanges.iter().cloned().collect(),
            exchanges,
            offset_index: offsets.iter().cloned().collect(),
            offsets,
            barriers,
            barrier_index,
            barrier_records,
            exchange_log,
            offset_log,
            barrier_log,
        })
    }

    fn counts(&self) -> InputWatermark {
        InputWatermark {
            exchanges: self.exchanges.len() as u64,
            offsets: self.offsets.len() as u64,
            barriers: self.barrier_records,
        }
    }
}

impl ClockRegistry {
    /// Opens (creating if needed) the registry in `dir` and loads every version. The raw logs
    /// are replayed (and a torn tail truncated) on the first call that needs them: an `add_*`,
    /// [`Self::input_counts`], [`Self::barriers`] or [`Self::refit`]. Fails on a corrupt
    /// version file.
    pub fn open(storage: Arc<dyn Storage>, dir: &Path, config: FitConfig) -> Result<Self> {
        config.validate()?;
        let versions_dir = dir.join("versions");
        storage.create_dir_all(&versions_dir).map_err(|e| Error::io(&versions_dir, e))?;
        let mut versions = BTreeMap::new();
        for path in storage.list_dir(&versions_dir).map_err(|e| Error::io(&versions_dir, e))? {
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            let Some(number) = name.strip_prefix('v').and_then(|n| n.strip_suffix(".json")) else {
                continue; // temporary files of an interrupted write, foreign files
            };
            let corrupt = |reason: String| Error::ClockStateCorrupt { path: path.clone(), reason };
            let version: u64 = number.parse().map_err(|e| corrupt(format!("bad version number: {e}")))?;
            let bytes = storage.read(&path).map_err(|e| Error::io(&path, e))?;
            crate::seal::check(&bytes).map_err(corrupt)?;
            let set: ClockSet = serde_json::from_slice(&bytes).map_err(|e| corrupt(e.to_string()))?;
            if set.version() != version {
                return Err(corrupt(format!("file holds version {}", set.version())));
            }
            versions.insert(version, Arc::new(set));
        }
        Ok(ClockRegistry {
            storage,
            dir: dir.to_path_buf(),
            versions_dir,
            config,
            raw: None,
            versions,
            empty: Arc::default(),
        })
    }

    /// The raw input, replayed from the logs on first use.
    fn raw(&mut self) -> Result<&mut RawInput> {
        let raw = match self.raw.take() {
            Some(raw) => raw,
            None => RawInput::load(self.storage.as_ref(), &self.dir)?,
        };
        Ok(self.raw.insert(raw))
    }

    /// The config the next [`Self::refit`] uses.
    pub fn config(&self) -> &FitConfig {
        &self.config
    }

    /// Replaces the config for future fits (existing versions keep theirs).
    pub fn set_config(&mut self, config: FitConfig) -> Result<()> {
        config.validate()?;
        self.config = config;
        Ok(())
    }

    /// How many raw records of each kind are stored (replays the logs on first use).
    pub fn input_counts(&mut self) -> Result<InputWatermark> {
        Ok(self.raw()?.counts())
    }

    /// Validates and durably appends exchanges; all or nothing. An exact repeat of a stored
    /// exchange (or of an earlier one in the same call) is skipped, so re-importing a bundle
    /// does not count its exchanges twice.
    pub fn add_exchanges(&mut self, exchanges: &[SyncExchange]) -> Result<()> {
        exchanges.iter().try_for_each(SyncExchange::validate)?;
        let storage = self.storage.clone();
        let raw = self.raw()?;
        let mut fresh = Vec::with_capacity(exchanges.len());
        let mut batch = HashSet::new();
        for e in exchanges {
            if !raw.exchange_index.contains(e) && batch.insert(e) {
                fresh.push(e.clone());
            }
        }
        raw.exchange_log.append(storage.as_ref(), &fresh)?;
        raw.exchange_index.extend(fresh.iter().cloned());
        raw.exchanges.extend(fresh);
        Ok(())
    }

    /// Validates and durably appends direct offset observations; all or nothing. An exact
    /// repeat of a stored observation (or of an earlier one in the same call) is skipped.
    pub fn add_offsets(&mut self, offsets: &[OffsetObservation]) -> Result<()> {
        offsets.iter().try_for_each(OffsetObservation::validate)?;
        let storage = self.storage.clone();
        let raw = self.raw()?;
        let mut fresh = Vec::with_capacity(offsets.len());
        let mut batch = HashSet::new();
        for o in offsets {
            if !raw.offset_index.contains(o) && batch.insert(o) {
                fresh.push(o.clone());
            }
        }
        raw.offset_log.append(storage.as_ref(), &fresh)?;
        raw.offset_index.extend(fresh.iter().cloned());
        raw.offsets.extend(fresh);
        Ok(())
    }

    /// Validates and durably appends barrier events; all or nothing. Per host and collective
    /// instance the earliest end counts (several ranks share a host; every rank leaves after
    /// the last one entered, so the earliest exit is still a barrier exit): an event that
    /// repeats or ends after the stored one is skipped, an earlier one supersedes it.
    pub fn add_barriers(&mut self, events: &[BarrierEvent]) -> Result<()> {
        events.iter().try_for_each(BarrierEvent::validate)?;
        let storage = self.storage.clone();
        let raw = self.raw()?;
        let mut fresh: Vec<BarrierEvent> = Vec::new();
        let mut position: HashMap<(&str, u64), usize> = HashMap::new();
        for e in events {
            let stored = raw.barrier_index.get(&(e.host.clone(), e.instance)).map(|&i| raw.barriers[i].local_end);
            if stored.is_some_and(|t| t <= e.local_end) {
                continue;
            }
            match position.entry((e.host.as_str(), e.instance)) {
                Entry::Occupied(o) => {
                    let i = *o.get();
                    if e.local_end < fresh[i].local_end {
                        fresh[i] = e.clone();
                    }
                }
                Entry::Vacant(v) => {
                    v.insert(fresh.len());
                    fresh.push(e.clone());
                }
            }
        }
        raw.barrier_log.append(storage.as_ref(), &fresh)?;
        raw.barrier_records += fresh.len() as u64;
        for e in fresh {
            merge_barrier(&mut raw.barriers, &mut raw.barrier_index, e);
        }
        Ok(())
    }

    /// The effective barrier events (the earliest end per host and collective instance;
    /// replays the logs on first use).
    pub fn barriers(&mut self) -> Result<&[BarrierEvent]> {
        Ok(&self.raw()?.barriers)
    }

    /// Fits a new version from all stored input and persists it; returns its number. If the
    /// newest version already used exactly this input and config, returns it unchanged.
    pub fn refit(&mut self) -> Result<u64> {
        let counts = self.input_counts()?;
        let current = self.current();
        if current.version() > 0 && current.inputs() == counts && current.config() == &self.config {
            return Ok(current.version());
        }
        let version = current.version() + 1;
        let config = self.config.clone();
        let raw = self.raw()?;
        let set = fit_set(&raw.exchanges, &raw.offsets, &raw.barriers, &config)?.with_version(version, counts);
        let path = self.versions_dir.join(format!("v{version:020}.json"));
        let json = serde_json::to_vec(&set)
            .map_err(|e| Error::ClockStateCorrupt { path: path.clone(), reason: format!("cannot encode: {e}") })?;
        write_atomic(self.storage.as_ref(), &path, &crate::seal::seal(json)).map_err(|e| Error::io(&path, e))?;
        self.versions.insert(version, Arc::new(set));
        Ok(version)
    }

    /// The newest version (version 0, the empty set, before any fit).
    pub fn current(&self) -> Arc<ClockSet> {
        self.versions.values().next_back().unwrap_or(&self.empty).clone()
    }

    /// One version; `get(0)` is the empty set.
    pub fn get(&self, version: u64) -> Option<Arc<ClockSet>> {
        if version == 0 {
            return Some(self.empty.clone());
        }
        self.versions.get(&version).cloned()
    }

    /// Makes `set` a version of this registry in memory (nothing is written): how the read-only
    /// union of a dataset's nodes presents their merged models. Version 0 is ignored.
    pub(crate) fn adopt(&mut self, set: Arc<ClockSet>) {
        if set.version() > 0 {
            self.versions.insert(set.version(), set);
        }
    }

    /// All stored version numbers, ascending (0 is implicit and not listed).
    pub fn versions(&self) -> Vec<u64> {
        self.versions.keys().copied().collect()
    }
}

/// Adds `event` to the effective barrier list unless an earlier end for its (host, instance)
/// is there; an earlier end replaces the stored one in place.
fn merge_barrier(barriers: &mut Vec<BarrierEvent>, index: &mut HashMap<(String, u64), usize>, event: BarrierEvent) {
    match index.get(&(event.host.clone(), event.instance)) {
        Some(&i) => {
            if event.local_end < barriers[i].local_end {
                barriers[i] = event;
            }
        }
        None => {
            index.insert((event.host.clone(), event.instance), barriers.len());
            barriers.push(event);
        }
    }
}
