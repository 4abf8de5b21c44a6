//! The store: the write path (WAL → buffer), flushes to Parquet, compaction, retention and
//! scans, over one directory.
//!
//! Directory layout:
//! ```text
//! manifest.json         live data files + WAL checkpoint (atomic replace)
//! series.json           series catalog snapshot (atomic replace)
//! series/<first>-<end>.json   catalog increments after the snapshot (see `SeriesCatalog::load_dir`)
//! wal/<seq>.wal         write-ahead log segments
//! data/p<part>/<id>.parquet   immutable data files, one time partition each
//! staging/              bulk-import files not yet committed (removed by the next writer)
//! LOCK                  the writer lock (see [`lock`]): one writing process at a time
//! clock/                clock-sync input logs and fitted model versions (see `crate::clock`)
//! ```
//!
//! Durability: [`Store::write`] returns only after the WAL record holding the samples (and
//! the definitions of any new series) is fsynced. Duplicate samples (same series, same local
//! timestamp) resolve last-write-wins: a later write replaces an earlier one, in the buffer,
//! across files (higher file id wins) and in compaction.
//! Over 600 lines because the store's shared state and its invariants (gate, buffer, manifest,
//! maintenance locks) are read best in one place; opening, flushing, scans, compaction,
//! retention and import live in `store/*.rs`.

mod check;
#[cfg(test)]
mod compat;
mod documents;
mod flush;
mod footers;
mod import;
pub mod lock;
mod open;
mod pending;
pub mod record;
mod retire;
mod scan;
#[cfg(test)]
mod tests;
mod union;
mod write;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use crate::buffer::WriteBuffer;
use crate::clock::{ClockRegistry, ClockSet, FitConfig};
use crate::datafile::WriteOptions;
use crate::error::{Error, Result};
use crate::manifest::{FileEntry, Manifest};
use crate::model::Rows;
use crate::model::{MAX_TIME_NS, MIN_TIME_NS, SeriesId, SeriesKey};
use crate::series::{CatalogFiles, SeriesCatalog};
use crate::storage::Storage;
use crate::wal::{Wal, WalConfig};
use crate::wallclock::WallClock;
use lock::WriterLock;

pub use check::{CheckProblem, CheckReport, WalTornTail};
pub use import::{BulkImport, ImportSummary};
pub use pending::{IMPORTS_DIR, ImportRest};
pub use scan::{
    PortablePart, PortableScan, Scan, ScanRequest, ScanUnit, SeriesSlice, SplitScan, rows_to_batch, scan_schema,
};
pub use union::{DatasetNode, is_node_name};

/// The documents a store keeps beside its data (see [`Store::read_document`]).
pub const DOCUMENTS: [&str; 3] = ["topology.json", "jobs.json", "metrics.toml"];

/// One hour: the default width of a time partition.
pub const DEFAULT_PARTITION_NS: i64 = 3_600_000_000_000;

/// Store settings. Libraries take typed config; only the binary reads files and flags.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Width of a time partition (used when the store is created; later taken from the manifest).
    pub partition_ns: i64,
    /// Flush the write buffer to Parquet once it holds this many rows.
    pub flush_rows: usize,
    /// A flush of at least this many rows (in one partition) is written as two data files,
    /// split at a series boundary and encoded on two threads; smaller flushes write one file.
    pub parallel_flush_rows: usize,
    /// Compact a partition once it has at least this many files.
    pub compaction_min_files: usize,
    /// Compaction also rewrites a partition holding a file written before checksums (no
    /// `footer_crc32` in its manifest entry), even a single one, so that it gets them
    /// (`lockstep serve` turns this on; its passes rewrite one partition at a time).
    pub rewrite_unchecked: bool,
    /// Drop partitions whose end is older than now minus this (None = keep forever).
    pub retention_ns: Option<i64>,
    /// Reject samples more than this far in the future of the wall clock (None = no limit).
    pub max_future_ns: Option<i64>,
    /// Accept NaN and ±inf values (off: they are rejected as invalid samples).
    pub allow_non_finite: bool,
    /// WAL settings.
    pub wal: WalConfig,
    /// Parquet settings for flushes.
    pub file_options: WriteOptions,
    /// Parquet settings for compaction output.
    pub compaction_file_options: WriteOptions,
    /// How clock models are fitted from clock-sync input.
    pub clock_fit: FitConfig,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            partition_ns: DEFAULT_PARTITION_NS,
            flush_rows: 4_000_000,
            parallel_flush_rows: 1_000_000,
            compaction_min_files: 4,
            rewrite_unchecked: false,
            retention_ns: None,
            max_future_ns: Some(86_400_000_000_000),
            allow_non_finite: false,
            wal: WalConfig::default(),
            file_options: WriteOptions { zstd_level: 3 },
            compaction_file_options: WriteOptions { zstd_level: 9 },
            clock_fit: FitConfig::default(),
        }
    }
}

/// Why some samples of a write were not accepted.
#[derive(Debug)]
pub struct Rejection {
    /// The series (`metric{labels}`).
    pub series: String,
    /// How many of its samples were rejected.
    pub samples: usize,
    /// The first reason.
    pub error: Error,
}

/// The result of a write: how many samples are durable, and what was rejected and why.
#[derive(Debug, Default)]
pub struct WriteOutcome {
    /// Samples durably accepted.
    pub accepted: usize,
    /// Rejected samples grouped by series.
    pub rejected: Vec<Rejection>,
}

/// A write that finds the buffer at this many times `flush_rows` while a flush runs waits for
/// that flush. When clients write faster than flushes drain, at most about twice this factor
/// times `flush_rows` are buffered (the active buffer and the one being flushed), plus one
/// write per writer thread.
pub const BACKPRESSURE_FACTOR: usize = 2;

/// Counters about the store, for self-telemetry.
#[derive(Debug, Default)]
pub struct StoreMetrics {
    /// Samples acknowledged through the WAL path.
    pub samples_written: AtomicU64,
    /// Samples rejected.
    pub samples_rejected: AtomicU64,
    /// Flushes completed.
    pub flushes: AtomicU64,
    /// Writes that waited for a running flush because the buffer had reached
    /// `BACKPRESSURE_FACTOR` × `flush_rows` (writes outrunning the flush).
    pub flush_waits: AtomicU64,
    /// Compactions completed.
    pub compactions: AtomicU64,
    /// Flushes that failed (their rows stay buffered and in the WAL; a later flush retries).
    pub flush_failures: AtomicU64,
    /// Background maintenance passes (compaction, retention) that failed.
    pub maintenance_failures: AtomicU64,
    /// Data files dropped by retention.
    pub files_expired: AtomicU64,
    /// Series retired: retention left them without samples (see `Store::compact`).
    pub series_retired: AtomicU64,
    /// Times a poisoned WAL was replaced by a new one after a successful flush.
    pub wal_reopens: AtomicU64,
    /// Writes refused because the store could not make data durable (flush or WAL failing).
    pub writes_refused: AtomicU64,
}

/// A live data file; once marked obsolete, the file is deleted when the last reader drops it.
#[derive(Debug)]
pub struct LiveFile {
    /// Manifest entry.
    pub entry: FileEntry,
    /// Absolute path.
    pub path: PathBuf,
    /// Added to the series ids stored in the file to give the store's ids: 0, except in the
    /// union of a dataset's nodes (see [`Store::open_dataset_read_only`]), where each node's
    /// ids follow the previous nodes'.
    pub series_offset: u32,
    storage: Arc<dyn Storage>,
    obsolete: AtomicBool,
}

impl Drop for LiveFile {
    fn drop(&mut self) {
        if self.obsolete.load(Ordering::SeqCst)
            && let Err(e) = self.storage.remove_file(&self.path)
        {
            tracing::warn!(path = %self.path.display(), error = %e, "could not remove obsolete data file");
        }
    }
}

/// What readers see: the manifest with its files, plus the buffers not yet in files.
#[derive(Debug, Clone)]
struct State {
    manifest: Arc<Manifest>,
    files: Arc<Vec<Arc<LiveFile>>>,
    frozen: Vec<Arc<WriteBuffer>>,
    active: WriteBuffer,
}

/// A Lockstep store over one directory.
#[derive(Debug)]
pub struct Store {
    dir: PathBuf,
    storage: Arc<dyn Storage>,
    clock: Arc<dyn WallClock>,
    config: StoreConfig,
    /// The writer lock (`None` for a read-only store).
    writer_lock: Option<WriterLock>,
    catalog: RwLock<SeriesCatalog>,
    /// Changed by every retirement of series ([`Store::catalog_generation`]).
    catalog_generation: AtomicU64,
    /// Bulk imports open ([`Store::bulk_import`]): no series is retired meanwhile.
    active_imports: AtomicUsize,
    /// Whether the next compaction pass looks for series to retire (`store/retire.rs`).
    retire_due: AtomicBool,
    /// The catalog's files: what is saved, what the next save writes.
    catalog_files: Mutex<CatalogFiles>,
    /// The sorted copy of the write buffer a flush builds, kept between flushes so that each
    /// flush reuses mapped pages (released when a flush needed more than twice `flush_rows`).
    flush_scratch: Mutex<Rows>,
    state: RwLock<State>,
    /// The WAL (`None` for a read-only store). Writers hold it shared from WAL submit to
    /// buffer insert; a flush takes it exclusively to rotate the WAL and freeze the buffer at
    /// one consistent point, and to replace a poisoned WAL.
    gate: RwLock<Option<Wal>>,
    /// Serialises flushes and manifest changes (flush, compaction commit, retention, import
    /// commit).
    manifest_lock: Mutex<()>,
    /// Serialises compaction and retention passes (the merge runs outside `manifest_lock`).
    maintenance_lock: Mutex<()>,
    /// Per partition, the highest id of an input file compaction could not read (corrupt or
    /// gone): later passes merge only the partition's newer files instead of failing on it
    /// again (until the store is reopened).
    compaction_skips: Mutex<BTreeMap<i64, u64>>,
    /// The next data file id to hand out (ids are reserved in memory; the manifest records
    /// the highest used).
    next_file_id: Mutex<u64>,
    /// The last flush error while flushes fail (`None` once one succeeds).
    flush_error: Mutex<Option<String>>,
    /// When a write last tried to heal the store (flush after failures, WAL reopen).
    last_heal: Mutex<Option<std::time::Instant>>,
    /// Serialises document writes, so that versions are numbered without gaps or repeats, and
    /// keeps the version this writer last wrote of each document with its text: the base of the
    /// next version's delta, without listing the history and applying its deltas again.
    documents_last: Mutex<std::collections::HashMap<String, (u64, String)>>,
    metrics: StoreMetrics,
    /// Clock-sync input and fitted clock models; scans read snapshots of it.
    clocks: Mutex<ClockRegistry>,
    /// The footers of data files split scans read, kept for later scans.
    footers: footers::FooterCache,
    /// For the union of a dataset's nodes: the nodes and where documents come from (`None`
    /// for a store of one directory).
    union: Option<union::Union>,
}

fn lock_poisoned<T>(_: T) -> Error {
    Error::Unavailable { reason: "a store lock was poisoned by a panic".into() }
}

impl Store {
    /// Whether this store was opened read-only.
    pub fn is_read_only(&self) -> bool {
        self.writer_lock.is_none()
    }

    fn read_only_error(&self) -> Error {
        Error::ReadOnly { path: self.dir.clone() }
    }

    /// The store directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `e` naming its file where a person finds it ([`Storage::describe`]): a data file or
    /// manifest in a bucket by its URL rather than by the local path the store uses for it.
    /// For messages only; code that matches an error against its own paths does so before.
    pub fn locate_error(&self, e: Error) -> Error {
        crate::storage::locate_error(self.storage.as_ref(), e)
    }

    /// [`Store::locate_error`] for a message: the error's text with its file so named.
    pub fn describe_error(&self, e: &Error) -> String {
        crate::storage::describe_error(self.storage.as_ref(), e)
    }

    /// [`Store::locate_error`] for a path: where a person finds it, when that is not the path.
    pub fn describe_path(&self, path: &Path) -> Option<String> {
        self.storage.describe(path)
    }

    /// The configuration in force.
    pub fn config(&self) -> &StoreConfig {
        &self.config
    }

    /// Width of a time partition (ns).
    pub fn partition_ns(&self) -> i64 {
        self.state.read().map(|s| s.manifest.partition_ns).unwrap_or(self.config.partition_ns)
    }

    /// Self-telemetry counters.
    pub fn metrics(&self) -> &StoreMetrics {
        &self.metrics
    }

    /// WAL statistics (fsync count and latency); zero for a read-only store.
    pub fn wal_stats(&self) -> crate::wal::WalStats {
        match self.gate.read() {
            Ok(g) => g.as_ref().map(Wal::stats).unwrap_or_default(),
            Err(_) => crate::wal::WalStats::default(),
        }
    }

    /// The last flush error while flushes keep failing (`None` when the last flush succeeded).
    pub fn flush_error(&self) -> Option<String> {
        self.flush_error.lock().ok().and_then(|e| e.clone())
    }

    /// Runs `f` with read access to the series catalog.
    pub fn with_catalog<R>(&self, f: impl FnOnce(&SeriesCatalog) -> R) -> Result<R> {
        let c = self.catalog.read().map_err(lock_poisoned)?;
        Ok(f(&c))
    }

    /// A copy of the current manifest.
    pub fn manifest(&self) -> Result<Arc<Manifest>> {
        Ok(self.state.read().map_err(lock_poisoned)?.manifest.clone())
    }

    /// Rows currently buffered in memory (not yet in data files).
    pub fn buffered_rows(&self) -> Result<usize> {
        let s = self.state.read().map_err(lock_poisoned)?;
        Ok(s.active.len() + s.frozen.iter().map(|b| b.len()).sum::<usize>())
    }

    /// Resolves a series key to its id, defining it if new (bulk-import path; the WAL path
    /// defines series inside [`Store::write`]). Call it while the [`Store::bulk_import`] that
    /// writes the rows is open: no series is retired while an import is open, and the id of
    /// one resolved outside may be retired before its rows are written.
    pub fn resolve_series(&self, key: &SeriesKey) -> Result<SeriesId> {
        if self.is_read_only() {
            return Err(self.read_only_error());
        }
        Ok(self.catalog.write().map_err(lock_poisoned)?.get_or_insert(key)?.0)
    }

    /// The store's wall clock, now.
    pub fn now_ns(&self) -> i64 {
        self.clock.now_ns()
    }

    /// Fast check of one sample against the store's limits; [`Store::check_sample`] says why not.
    #[inline]
    pub fn sample_ok(&self, time: i64, value: f64, now: i64) -> bool {
        (MIN_TIME_NS..=MAX_TIME_NS).contains(&time)
            && self.config.max_future_ns.is_none_or(|max| time <= now.saturating_add(max))
            && (self.config.allow_non_finite || value.is_finite())
    }

    /// Checks clock input against the future bound samples have: a reference time of an
    /// exchange (`t2`, `t3`) or an offset's `local_time` further ahead of the store's clock
    /// than `max_future_ns` is a broken clock, not a measurement (one exchange stamped 2262
    /// widened a host's time uncertainty to seconds). The ranges are checked when the input
    /// is added ([`ClockRegistry::add_exchanges`]).
    pub fn check_clock_input(
        &self,
        exchanges: &[crate::clock::SyncExchange],
        offsets: &[crate::clock::OffsetObservation],
    ) -> Result<()> {
        let Some(max) = self.config.max_future_ns else { return Ok(()) };
        let now = self.now_ns();
        let times = exchanges
            .iter()
            .map(|e| (e.host.as_str(), "t3", e.t2.max(e.t3)))
            .chain(offsets.iter().map(|o| (o.host.as_str(), "local_time", o.local_time)));
        for (host, what, t) in times {
            if t > now.saturating_add(max) {
                return Err(Error::ClockSync {
                    host: host.to_string(),
                    reason: format!("{what}={t} ns is more than {max} ns ahead of the writer's clock (now {now})"),
                });
            }
        }
        Ok(())
    }

    /// Checks one sample against the store's limits (range, future bound, finiteness).
    pub fn check_sample(&self, key: &SeriesKey, time: i64, value: f64, now: i64) -> Result<()> {
        if !(MIN_TIME_NS..=MAX_TIME_NS).contains(&time) {
            return Err(Error::InvalidSample {
                series: key.to_string(),
                reason: format!("timestamp {time} ns is outside [{MIN_TIME_NS}, {MAX_TIME_NS}]"),
            });
        }
        if let Some(max) = self.config.max_future_ns
            && time > now.saturating_add(max)
        {
            return Err(Error::InvalidSample {
                series: key.to_string(),
                reason: format!("timestamp {time} ns is more than {max} ns in the future (now {now})"),
            });
        }
        if !self.config.allow_non_finite && !value.is_finite() {
            return Err(Error::InvalidSample {
                series: key.to_string(),
                reason: format!("value {value} is not finite"),
            });
        }
        Ok(())
    }

    fn flush_failing(&self) -> bool {
        self.flush_error.lock().map(|e| e.is_some()).unwrap_or(true)
    }

    /// Admission before a write reaches the WAL. While flushes fail or the WAL is poisoned,
    /// it retries a flush (at most once a second; a successful flush also replaces a poisoned
    /// WAL); a write is refused with [`Error::Unavailable`] (retryable) only while the WAL
    /// cannot take it or the buffer is full and cannot be flushed.
    fn admit(&self) -> Result<()> {
        let poisoned = self.gate.read().map_err(lock_poisoned)?.as_ref().is_some_and(Wal::is_poisoned);
        if !poisoned && !self.flush_failing() {
            return Ok(());
        }
        self.heal();
        let poisoned = self.gate.read().map_err(lock_poisoned)?.as_ref().is_some_and(Wal::is_poisoned);
        let full =
            self.flush_failing() && self.buffered_rows()? >= self.config.flush_rows.saturating_mul(BACKPRESSURE_FACTOR);
        if poisoned || full {
            self.metrics.writes_refused.fetch_add(1, Ordering::Relaxed);
            let reason = match (poisoned, self.flush_error()) {
                (true, Some(e)) => format!("the wal failed and the buffer cannot be flushed ({e}); retry later"),
                (true, None) => "the wal failed; it is reopened after the next successful flush; retry later".into(),
                (false, e) => {
                    format!("the write buffer is full and flushes fail ({}); retry later", e.unwrap_or_default())
                }
            };
            return Err(Error::Unavailable { reason });
        }
        Ok(())
    }

    /// Tries to bring a failing store back (at most once a second): flushes the buffer, which
    /// also replaces a poisoned WAL once the flush succeeds. Returns whether the store is
    /// healthy afterwards.
    pub fn heal(&self) -> bool {
        if self.is_read_only() {
            return true;
        }
        {
            let Ok(mut last) = self.last_heal.lock() else { return false };
            if last.is_some_and(|t| t.elapsed() < std::time::Duration::from_secs(1)) {
                return false;
            }
            *last = Some(std::time::Instant::now());
        }
        let poisoned = self.gate.read().ok().is_some_and(|g| g.as_ref().is_some_and(Wal::is_poisoned));
        if !poisoned && !self.flush_failing() {
            return true;
        }
        self.flush().is_ok()
    }

    /// Runs `f` with exclusive access to the clock registry: add sync exchanges, direct
    /// offsets or barrier events, refit, list versions. Every `add_*` is durable when it returns.
    pub fn with_clocks<R>(&self, f: impl FnOnce(&mut ClockRegistry) -> Result<R>) -> Result<R> {
        let mut reg = self.clocks.lock().map_err(lock_poisoned)?;
        f(&mut reg)
    }

    /// The newest fitted clock models (version 0, every host unknown, before any fit).
    pub fn clock_models(&self) -> Result<Arc<ClockSet>> {
        Ok(self.clocks.lock().map_err(lock_poisoned)?.current())
    }

    /// One version of the clock models, for reproducing an older result; `None` if it does
    /// not exist.
    pub fn clock_models_version(&self, version: u64) -> Result<Option<Arc<ClockSet>>> {
        Ok(self.clocks.lock().map_err(lock_poisoned)?.get(version))
    }

    /// Flushes, then stops the WAL writer (a read-only store just closes).
    pub fn close(self) -> Result<()> {
        if self.is_read_only() {
            return Ok(());
        }
        self.flush()?;
        let wal = self.gate.write().map_err(lock_poisoned)?.take();
        wal.map_or(Ok(()), Wal::close)
    }
}

/// Groups rows by time partition, preserving order within each.
/// Like [`split_by_partition`], without a copy when all rows are in one partition.
pub(crate) fn split_by_partition_owned(rows: Rows, partition_ns: i64) -> BTreeMap<i64, Rows> {
    if let (Some(&lo), Some(&hi)) = (rows.time.iter().min(), rows.time.iter().max())
        && lo.div_euclid(partition_ns) == hi.div_euclid(partition_ns)
    {
        return BTreeMap::from([(lo.div_euclid(partition_ns), rows)]);
    }
    split_by_partition(&rows, partition_ns)
}

pub(crate) fn split_by_partition(rows: &Rows, partition_ns: i64) -> BTreeMap<i64, Rows> {
    let mut out: BTreeMap<i64, Rows> = BTreeMap::new();
    if let (Some(&lo), Some(&hi)) = (rows.time.iter().min(), rows.time.iter().max())
        && lo.div_euclid(partition_ns) == hi.div_euclid(partition_ns)
    {
        out.insert(lo.div_euclid(partition_ns), rows.clone());
        return out;
    }
    for i in 0..rows.len() {
        out.entry(rows.time[i].div_euclid(partition_ns)).or_default().push(rows.series[i], rows.time[i], rows.value[i]);
    }
    out
}
