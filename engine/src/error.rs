//! The engine's error type and its classification into kinds.

use std::path::PathBuf;

/// Result alias for engine operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What kind of failure an [`Error`] is; edges (gRPC, SQL, CLI) map kinds to their own codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The caller sent something malformed or out of range.
    InvalidArgument,
    /// The thing asked for does not exist.
    NotFound,
    /// A bounded resource (queue, memory, disk budget) is full; retry later.
    ResourceExhausted,
    /// The engine is shutting down or a background thread died; retry elsewhere or later.
    Unavailable,
    /// Data on disk failed a check (CRC, schema, format).
    DataCorruption,
    /// A setting (store, writer, limits) is unusable: the operator's problem, not the caller's.
    InvalidConfig,
    /// An I/O error or a bug.
    Internal,
}

/// Every error the engine returns.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An I/O operation on a named file failed.
    #[error("i/o error on {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A series key has no `host` label.
    #[error("series {metric} has no host label (host is required)")]
    MissingHost {
        /// The metric name of the offending series.
        metric: String,
    },
    /// A metric name or label is empty or otherwise unusable.
    #[error("invalid series: {reason}")]
    InvalidSeries {
        /// Why it was rejected.
        reason: String,
    },
    /// A write batch is malformed (mismatched column lengths and similar).
    #[error("invalid write batch: {reason}")]
    InvalidBatch {
        /// Why it was rejected.
        reason: String,
    },
    /// A configuration value is unusable (e.g. a zero partition width or a bad zstd level).
    #[error("invalid configuration: {reason}")]
    InvalidConfig {
        /// What is wrong, naming the setting.
        reason: String,
    },
    /// A bug: a background thread panicked, an internal invariant does not hold.
    #[error("internal error: {reason}")]
    Internal {
        /// What went wrong.
        reason: String,
    },
    /// A value cannot be stored (e.g. a timestamp outside the accepted range).
    #[error("sample rejected for series {series}: {reason}")]
    InvalidSample {
        /// The series (metric and labels).
        series: String,
        /// Why it was rejected.
        reason: String,
    },
    /// A bounded queue or budget is full.
    #[error("{what} is full ({limit}); retry later")]
    ResourceExhausted {
        /// Which resource.
        what: &'static str,
        /// The configured limit, human-readable.
        limit: String,
    },
    /// The store is closed or its background writer stopped.
    #[error("store unavailable: {reason}")]
    Unavailable {
        /// Why.
        reason: String,
    },
    /// A WAL record failed its CRC or length check in the middle of the log.
    #[error("wal segment {path} corrupt at offset {offset}: {reason}")]
    WalCorrupt {
        /// Segment file.
        path: PathBuf,
        /// Byte offset of the bad record.
        offset: u64,
        /// What check failed.
        reason: String,
    },
    /// A WAL segment of another store: its header names another store id than this store's
    /// manifest (a backup restored into the wrong directory, a segment copied from another
    /// store and renumbered into place). Replaying it would mix two stores' series ids, so the
    /// store refuses to open until the file is moved away.
    #[error(
        "wal segment {path} belongs to another store: its header names store {found}, this store is {expected}; \
         it was copied or restored from another store's wal. Move the file out of the wal directory (keep it if \
         its data matters: it can only be replayed into the store it names) and open the store again"
    )]
    WalForeignSegment {
        /// Segment file.
        path: PathBuf,
        /// The store id in the segment's header (or why it has none).
        found: String,
        /// This store's id (or why it has none).
        expected: String,
    },
    /// A WAL append is larger than the configured record limit; nothing was written.
    #[error("wal record of {len} bytes exceeds the limit of {limit} bytes")]
    WalRecordTooLarge {
        /// Payload length of the rejected record.
        len: usize,
        /// The configured `max_record_bytes`.
        limit: usize,
    },
    /// A WAL record decoded but its payload is not a valid batch.
    #[error("wal record in {path} at offset {offset} does not decode: {reason}")]
    WalRecordInvalid {
        /// Segment file.
        path: PathBuf,
        /// Byte offset of the record.
        offset: u64,
        /// Decoder message.
        reason: String,
    },
    /// The manifest could not be parsed.
    #[error("manifest {path} is corrupt: {reason}")]
    ManifestCorrupt {
        /// Manifest file.
        path: PathBuf,
        /// Parser message.
        reason: String,
    },
    /// The series catalog file could not be parsed.
    #[error("series catalog {path} is corrupt: {reason}")]
    CatalogCorrupt {
        /// Catalog file.
        path: PathBuf,
        /// Parser message.
        reason: String,
    },
    /// A Parquet data file is unreadable or has the wrong schema.
    #[error("data file {path} is invalid: {reason}")]
    DataFileInvalid {
        /// Parquet file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Parquet encoding or decoding failed.
    #[error("parquet error on {path}: {source}")]
    Parquet {
        /// Parquet file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: parquet::errors::ParquetError,
    },
    /// A topology or jobs document is malformed or inconsistent.
    #[error("{document} is invalid: {reason}")]
    TopologyInvalid {
        /// Which document (`topology.json`, `jobs.json`).
        document: String,
        /// What is wrong, naming the node, switch, link or job.
        reason: String,
    },
    /// A node, storage pool, job or other named thing is not in the topology or jobs.
    #[error("unknown {what} {name}")]
    NotInTopology {
        /// What was looked up (`node`, `storage pool`, `job`).
        what: &'static str,
        /// The name asked for.
        name: String,
    },
    /// A metric catalog extension (TOML) is malformed.
    #[error("metric catalog extension is invalid: {reason}")]
    MetricCatalogInvalid {
        /// What is wrong, with the line or family name.
        reason: String,
    },
    /// Timestamps too irregular (or a gap too large) to place on a regular time grid.
    #[error("time grid too sparse: {rows} rows with a step of {step} ns need more than {limit} slots")]
    GridTooSparse {
        /// Rows being placed.
        rows: usize,
        /// Inferred grid step (ns).
        step: i64,
        /// Slot limit that was exceeded.
        limit: u64,
    },
    /// Arrow kernel failure (a bug if it happens).
    #[error("arrow error: {0}")]
    Arrow(#[from] arrow::error::ArrowError),
    /// Clock-sync input is unusable (impossible timestamps, no data for a host).
    #[error("clock sync for host {host}: {reason}")]
    ClockSync {
        /// The host.
        host: String,
        /// Why it was rejected.
        reason: String,
    },
    /// Another process holds the store's writer lock (`LOCK`): one writer per store.
    #[error(
        "store {path} is locked by another writer ({holder}); only one process may write to a store at a time (readers such as `lockstep sql` need no lock)"
    )]
    StoreLocked {
        /// The store directory.
        path: PathBuf,
        /// Who holds the lock, as recorded in `LOCK` (pid and command line).
        holder: String,
    },
    /// A read-only open of a path that holds no store.
    #[error(
        "no Lockstep store at {path} (no manifest.json); check --data-dir (or --data-url), or create one with `lockstep serve` or `lockstep import`"
    )]
    NoStore {
        /// The path given.
        path: PathBuf,
    },
    /// A store directory has data files or WAL segments but no manifest: refused instead of
    /// being "repaired" into an empty store.
    #[error(
        "store {path} has {files} data or wal files but no manifest.json; refusing to open it. If it is the local --data-dir of a store on object storage, give that store's --data-url (its wal/ holds acknowledged writes not yet in the bucket); otherwise restore manifest.json from a backup. Moving data/ and wal/ away starts an empty store and discards what they hold"
    )]
    ManifestMissing {
        /// The store directory.
        path: PathBuf,
        /// Data files and WAL segments found.
        files: usize,
    },
    /// A write to a store opened read-only.
    #[error("store {path} is opened read-only")]
    ReadOnly {
        /// The store directory.
        path: PathBuf,
    },
    /// A scan planned in another process names a data file this snapshot does not have
    /// (compacted away since, or newer than this snapshot); retryable with a newer snapshot.
    #[error("data file {path} is not in this snapshot of the store (compacted away or newer); run the query again")]
    ScanFileGone {
        /// The data file.
        path: PathBuf,
    },
    /// A read-only open kept racing the writer (its manifest changed while the snapshot was
    /// taken); retryable.
    #[error("store {path} changed {attempts} times while a read snapshot was taken; retry")]
    SnapshotRace {
        /// The store directory.
        path: PathBuf,
        /// Attempts made.
        attempts: u32,
    },
    /// The nodes of a dataset cannot be read as one store (see `Store::open_dataset_read_only`).
    #[error("dataset {path}: {reason}")]
    DatasetInvalid {
        /// The dataset root.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A persisted clock-sync log or model version failed to parse or its CRC check.
    #[error("clock state file {path} is corrupt: {reason}")]
    ClockStateCorrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

/// The `path` field of the variants that name a file or directory ([`Error::path`]).
macro_rules! path_field {
    ($error:expr) => {
        match $error {
            Error::Io { path, .. }
            | Error::WalCorrupt { path, .. }
            | Error::WalForeignSegment { path, .. }
            | Error::WalRecordInvalid { path, .. }
            | Error::ManifestCorrupt { path, .. }
            | Error::CatalogCorrupt { path, .. }
            | Error::DataFileInvalid { path, .. }
            | Error::Parquet { path, .. }
            | Error::StoreLocked { path, .. }
            | Error::NoStore { path, .. }
            | Error::ManifestMissing { path, .. }
            | Error::ReadOnly { path, .. }
            | Error::ScanFileGone { path, .. }
            | Error::SnapshotRace { path, .. }
            | Error::DatasetInvalid { path, .. }
            | Error::ClockStateCorrupt { path, .. } => Some(path),
            _ => None,
        }
    };
}

impl Error {
    /// The file or directory the error names, if it names one.
    pub fn path(&self) -> Option<&std::path::Path> {
        path_field!(self).map(PathBuf::as_path)
    }

    /// The file or directory the error names, to name it otherwise in a message
    /// ([`crate::Store::locate_error`]).
    pub fn path_mut(&mut self) -> Option<&mut PathBuf> {
        path_field!(self)
    }

    /// Classifies the error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::MissingHost { .. }
            | Error::InvalidSeries { .. }
            | Error::InvalidBatch { .. }
            | Error::WalRecordTooLarge { .. }
            | Error::InvalidSample { .. }
            | Error::TopologyInvalid { .. }
            | Error::MetricCatalogInvalid { .. }
            | Error::ClockSync { .. }
            | Error::GridTooSparse { .. }
            | Error::DatasetInvalid { .. } => ErrorKind::InvalidArgument,
            Error::ResourceExhausted { .. } => ErrorKind::ResourceExhausted,
            Error::NotInTopology { .. } => ErrorKind::NotFound,
            Error::Unavailable { .. }
            | Error::StoreLocked { .. }
            | Error::SnapshotRace { .. }
            | Error::ScanFileGone { .. } => ErrorKind::Unavailable,
            Error::NoStore { .. } => ErrorKind::NotFound,
            Error::ReadOnly { .. } => ErrorKind::InvalidArgument,
            Error::ManifestMissing { .. } => ErrorKind::DataCorruption,
            Error::WalCorrupt { .. }
            | Error::WalForeignSegment { .. }
            | Error::WalRecordInvalid { .. }
            | Error::ManifestCorrupt { .. }
            | Error::CatalogCorrupt { .. }
            | Error::DataFileInvalid { .. }
            | Error::ClockStateCorrupt { .. } => ErrorKind::DataCorruption,
            Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => ErrorKind::NotFound,
            Error::InvalidConfig { .. } => ErrorKind::InvalidConfig,
            Error::Io { .. } | Error::Parquet { .. } | Error::Arrow(_) | Error::Internal { .. } => ErrorKind::Internal,
        }
    }

    /// Whether the message names a file or directory of the server (the store, a segment, a
    /// data file): such messages are for the server's log, not for a remote client.
    pub fn names_path(&self) -> bool {
        self.path().is_some()
    }

    /// Wraps an I/O error with the path it happened on.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { path: path.into(), source }
    }
}
