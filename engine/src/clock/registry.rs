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
//! The registry keeps the raw input in memory and refits from all of it; methods take
//! `&mut self`, callers share it behind a lock and hand out [`ClockRegistry::current`] snapshots.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::log::RawLog;
use super::{
    BarrierEvent, ClockSet, FitConfig, InputWatermark, OffsetObservation, SyncExchange, fit_set,
    sync_error,
};
use crate::error::{Error, Result};
use crate::storage::{Storage, write_atomic};

/// Raw clock-sync input and all fitted model versions, persisted through a [`Storage`].
#[derive(Debug)]
pub struct ClockRegistry {
    storage: Arc<dyn Storage>,
    versions_dir: PathBuf,
    config: FitConfig,
    exchanges: Vec<SyncExchange>,
    /// The stored exchanges, for skipping exact repeats.
    exchange_index: HashSet<SyncExchange>,
    offsets: Vec<OffsetObservation>,
    barriers: Vec<BarrierEvent>,
    barrier_index: HashMap<(String, u64), i64>,
    exchange_log: RawLog,
    offset_log: RawLog,
    barrier_log: RawLog,
    versions: BTreeMap<u64, Arc<ClockSet>>,
}

impl ClockRegistry {
    /// Opens (creating if needed) the registry in `dir`: replays the raw logs (truncating a
    /// torn tail) and loads every version. Fails on a corrupt version file or log.
    pub fn open(storage: Arc<dyn Storage>, dir: &Path, config: FitConfig) -> Result<Self> {
        config.validate()?;
        let versions_dir = dir.join("versions");
        storage
            .create_dir_all(&versions_dir)
            .map_err(|e| Error::io(&versions_dir, e))?;
        let (exchange_log, exchanges) = RawLog::open(storage.as_ref(), dir.join("exchanges.log"))?;
        let (offset_log, offsets) = RawLog::open(storage.as_ref(), dir.join("offsets.log"))?;
        let (barrier_log, barriers) =
            RawLog::open::<BarrierEvent>(storage.as_ref(), dir.join("barriers.log"))?;
        let barrier_index = barriers
            .iter()
            .map(|b| ((b.host.clone(), b.instance), b.local_end))
            .collect();
        let mut versions = BTreeMap::new();
        for path in storage
            .list_dir(&versions_dir)
            .map_err(|e| Error::io(&versions_dir, e))?
        {
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            let Some(number) = name.strip_prefix('v').and_then(|n| n.strip_suffix(".json")) else {
                continue; // temporary files of an interrupted write, foreign files
            };
            let corrupt = |reason: String| Error::ClockStateCorrupt {
                path: path.clone(),
                reason,
            };
            let version: u64 = number
                .parse()
                .map_err(|e| corrupt(format!("bad version number: {e}")))?;
            let bytes = storage.read(&path).map_err(|e| Error::io(&path, e))?;
            let set: ClockSet =
                serde_json::from_slice(&bytes).map_err(|e| corrupt(e.to_string()))?;
            if set.version() != version {
                return Err(corrupt(format!("file holds version {}", set.version())));
            }
            versions.insert(version, Arc::new(set));
        }
        Ok(ClockRegistry {
            storage,
            versions_dir,
            config,
            exchange_index: exchanges.iter().cloned().collect(),
            exchanges,
            offsets,
            barriers,
            barrier_index,
            exchange_log,
            offset_log,
            barrier_log,
            versions,
        })
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

    /// How many raw records of each kind are stored.
    pub fn input_counts(&self) -> InputWatermark {
        InputWatermark {
            exchanges: self.exchanges.len() as u64,
            offsets: self.offsets.len() as u64,
            barriers: self.barriers.len() as u64,
        }
    }

    /// Validates and durably appends exchanges; all or nothing. An exact repeat of a stored
    /// exchange (or of an earlier one in the same call) is skipped, so re-importing a bundle
    /// does not count its exchanges twice.
    pub fn add_exchanges(&mut self, exchanges: &[SyncExchange]) -> Result<()> {
        exchanges.iter().try_for_each(SyncExchange::validate)?;
        let mut fresh = Vec::with_capacity(exchanges.len());
        let mut batch = HashSet::new();
        for e in exchanges {
            if !self.exchange_index.contains(e) && batch.insert(e) {
                fresh.push(e.clone());
            }
        }
        self.exchange_log.append(self.storage.as_ref(), &fresh)?;
        self.exchange_index.extend(fresh.iter().cloned());
        self.exchanges.extend(fresh);
        Ok(())
    }

    /// Validates and durably appends direct offset observations; all or nothing.
    pub fn add_offsets(&mut self, offsets: &[OffsetObservation]) -> Result<()> {
        offsets.iter().try_for_each(OffsetObservation::validate)?;
        self.offset_log.append(self.storage.as_ref(), offsets)?;
        self.offsets.extend_from_slice(offsets);
        Ok(())
    }

    /// Validates and durably appends barrier events; all or nothing. An exact repeat of a
    /// stored event is skipped; the same host and instance with another end time is an error.
    pub fn add_barriers(&mut self, events: &[BarrierEvent]) -> Result<()> {
        let mut fresh: Vec<BarrierEvent> = Vec::with_capacity(events.len());
        let mut batch: HashMap<(&str, u64), i64> = HashMap::new();
        for e in events {
            e.validate()?;
            let known = self
                .barrier_index
                .get(&(e.host.clone(), e.instance))
                .copied();
            let seen = batch.get(&(e.host.as_str(), e.instance)).copied();
            match known.or(seen) {
                Some(t) if t == e.local_end => continue,
                Some(t) => {
                    return Err(sync_error(
                        &e.host,
                        format!(
                            "collective instance {} already ended at {t}, not {}",
                            e.instance, e.local_end
                        ),
                    ));
                }
                None => {
                    batch.insert((e.host.as_str(), e.instance), e.local_end);
                    fresh.push(e.clone());
                }
            }
        }
        self.barrier_log.append(self.storage.as_ref(), &fresh)?;
        for e in &fresh {
            self.barrier_index
                .insert((e.host.clone(), e.instance), e.local_end);
        }
        self.barriers.extend(fresh);
        Ok(())
    }

    /// Fits a new version from all stored input and persists it; returns its number. If the
    /// newest version already used exactly this input and config, returns it unchanged.
    pub fn refit(&mut self) -> Result<u64> {
        let counts = self.input_counts();
        let current = self.current();
        if current.version() > 0 && current.inputs() == counts && current.config() == &self.config {
            return Ok(current.version());
        }
        let version = current.version() + 1;
        let set = fit_set(&self.exchanges, &self.offsets, &self.barriers, &self.config)?
            .with_version(version, counts);
        let path = self.versions_dir.join(format!("v{version:020}.json"));
        let json = serde_json::to_vec(&set).map_err(|e| Error::ClockStateCorrupt {
            path: path.clone(),
            reason: format!("cannot encode: {e}"),
        })?;
        write_atomic(self.storage.as_ref(), &path, &json).map_err(|e| Error::io(&path, e))?;
        self.versions.insert(version, Arc::new(set));
        Ok(version)
    }

    /// The newest version (version 0, the empty set, before any fit).
    pub fn current(&self) -> Arc<ClockSet> {
        self.versions
            .values()
            .next_back()
            .cloned()
            .unwrap_or_default()
    }

    /// One version; `get(0)` is the empty set.
    pub fn get(&self, version: u64) -> Option<Arc<ClockSet>> {
        if version == 0 {
            return Some(Arc::default());
        }
        self.versions.get(&version).cloned()
    }

    /// All stored version numbers, ascending (0 is implicit and not listed).
    pub fn versions(&self) -> Vec<u64> {
        self.versions.keys().copied().collect()
    }
}
