//! One module per subcommand.

pub mod demo;
pub mod diagnose;
pub mod import;
pub mod serve;
pub mod simulate;
pub mod sql;
pub mod worker;

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use lockstep_engine::storage::{OsStorage, Storage};
use lockstep_engine::wallclock::SystemClock;
use lockstep_engine::{Store, StoreConfig};
use lockstep_query::objstore::ObjectStorage;

/// Where the store lives (shared by every subcommand that opens one).
#[derive(Debug, Clone, clap::Args)]
pub struct StoreArgs {
    /// Store directory (writers create it if missing; readers require an existing store).
    /// With --data-url: the local directory of the WAL, the writer lock and the read cache.
    #[arg(long, env = "LOCKSTEP_DATA_DIR", default_value = "lockstep-data")]
    pub data_dir: PathBuf,
    /// Keep the store's data files, manifest, catalog, clock models and documents in an object
    /// store: `s3://bucket/prefix` (credentials and endpoint from AWS_* variables) or
    /// `file:///path`. See docs/object-storage.md.
    #[arg(long, env = "LOCKSTEP_DATA_URL")]
    pub data_url: Option<String>,
    /// Size of the local read cache of data files (MiB, under --data-dir/cache) with --data-url.
    #[arg(long, env = "LOCKSTEP_CACHE_SIZE_MB", default_value_t = lockstep_query::objstore::DEFAULT_CACHE_MB)]
    pub cache_size_mb: u64,
}

impl StoreArgs {
    /// Opens the store for writing with default settings (takes the writer lock; creates
    /// the store if missing).
    pub fn open(&self) -> anyhow::Result<Store> {
        self.open_with(StoreConfig::default())
    }

    /// Opens the store for writing with `config`.
    pub fn open_with(&self, config: StoreConfig) -> anyhow::Result<Store> {
        Store::open_with(&self.data_dir, config, self.storage()?, Arc::new(SystemClock))
            .with_context(|| format!("opening store {}", self.describe()))
    }

    /// Opens a read-only snapshot of an existing store: changes nothing on disk and works
    /// while a writer (`lockstep serve`) runs.
    pub fn open_read_only(&self) -> anyhow::Result<Store> {
        Store::open_read_only_with(&self.data_dir, StoreConfig::default(), self.storage()?, Arc::new(SystemClock))
            .with_context(|| format!("opening store {} read-only", self.describe()))
    }

    /// The local file system, or the object store of --data-url.
    pub fn storage(&self) -> anyhow::Result<Arc<dyn Storage>> {
        Ok(match &self.data_url {
            None => Arc::new(OsStorage),
            Some(url) => {
                Arc::new(ObjectStorage::open(url, &self.data_dir, self.cache_size_mb.saturating_mul(1 << 20))?)
            }
        })
    }

    /// The dataset's identity shared by a distributed query's coordinator and workers: the
    /// URL (without a trailing `/`), or the canonical store directory.
    pub fn dataset_name(&self) -> String {
        match &self.data_url {
            Some(url) => url.trim_end_matches('/').to_string(),
            None => {
                std::fs::canonicalize(&self.data_dir).unwrap_or_else(|_| self.data_dir.clone()).display().to_string()
            }
        }
    }

    /// The store named in messages: the directory, and the URL if there is one.
    pub fn describe(&self) -> String {
        match &self.data_url {
            None => self.data_dir.display().to_string(),
            Some(url) => format!("{url} (local {})", self.data_dir.display()),
        }
    }
}
