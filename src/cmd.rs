//! One module per subcommand.

pub mod check;
pub mod demo;
pub mod diagnose;
pub mod import;
pub mod serve;
pub mod simulate;
pub mod sql;
pub mod worker;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use lockstep_engine::storage::{OsStorage, Storage};
use lockstep_engine::store::lock::WriterLock;
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
    /// With --data-url, writers (`serve`, `import`) hold a lease on their prefix in the bucket
    /// (`writer-lease.json`), renewed every third of this time to live: a second writer on the
    /// prefix is refused while it is live, and takes over once a dead writer's lease expires.
    #[arg(long, env = "LOCKSTEP_LEASE_TTL_SECS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub lease_ttl_secs: u64,
}

impl StoreArgs {
    /// Opens the store for writing with default settings (takes the writer lock; creates
    /// the store if missing).
    pub fn open(&self) -> anyhow::Result<Store> {
        self.open_with(StoreConfig::default())
    }

    /// Opens the store for writing with `config`.
    /// With --data-url: the local writer lock first, then the writer lease in the bucket
    /// (docs/object-storage.md), then the store.
    pub fn open_with(&self, config: StoreConfig) -> anyhow::Result<Store> {
        let opened = match &self.data_url {
            None => Store::open_with(&self.data_dir, config, Arc::new(OsStorage), Arc::new(SystemClock)),
            Some(url) => {
                std::fs::create_dir_all(&self.data_dir)
                    .with_context(|| format!("creating {}", self.data_dir.display()))?;
                let lock = WriterLock::acquire(&self.data_dir)
                    .with_context(|| format!("opening store {}", self.describe()))?;
                let storage = ObjectStorage::open(url, &self.data_dir, self.cache_size_mb.saturating_mul(1 << 20))?;
                storage
                    .acquire_lease(Duration::from_secs(self.lease_ttl_secs))
                    .with_context(|| format!("opening store {} for writing", self.describe()))?;
                let storage: Arc<dyn Storage> = Arc::new(storage);
                Store::open_locked(&self.data_dir, config, storage.clone(), Arc::new(SystemClock), lock)
                    .map_err(|e| lockstep_engine::storage::locate_error(storage.as_ref(), e))
            }
        };
        let store = opened.with_context(|| format!("opening store {}", self.describe()))?;
        // An import that committed its samples and stopped before storing its bundle's
        // topology, jobs and clock input left them staged: store them now. A failure leaves
        // them staged (`lockstep check` reports them) and does not keep the writer from
        // starting.
        match lockstep_ingest::import::complete_pending_import(&store, false) {
            Ok(None) => {}
            Ok(Some(bundle)) => tracing::warn!(
                %bundle,
                "stored the topology, jobs and clock input of an import that stopped after its samples"
            ),
            Err(e) => tracing::error!(error = %e, "the topology, jobs and clock input of an import that stopped \
                after its samples could not be stored"),
        }
        Ok(store)
    }

    /// Opens a read-only snapshot of an existing store — or of a whole dataset, the union of
    /// the stores (ingest nodes) under the URL or directory when it holds no store itself
    /// (`lockstep_query::dataset::open_dataset_read_only`): changes nothing on disk and works
    /// while writers (`lockstep serve`) run.
    pub fn open_read_only(&self) -> anyhow::Result<Store> {
        let cache = self.cache_size_mb.saturating_mul(1 << 20);
        lockstep_query::dataset::open_dataset_read_only(self.data_url.as_deref(), &self.data_dir, cache)
            .with_context(|| format!("opening store {} read-only", self.describe()))
    }

    /// The read cache's bound in bytes.
    pub fn cache_bytes(&self) -> u64 {
        self.cache_size_mb.saturating_mul(1 << 20)
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

    /// The options that name this store on a command line (`--data-dir DIR`, and with an
    /// object store `--data-url URL`), quoted for a POSIX shell where needed.
    pub fn command_flags(&self) -> String {
        let quote = |s: &str| {
            if !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "_./:@=+,-".contains(c)) {
                s.to_string()
            } else {
                format!("'{}'", s.replace('\'', r"'\''"))
            }
        };
        let dir = format!("--data-dir {}", quote(&self.data_dir.display().to_string()));
        match &self.data_url {
            None => dir,
            Some(url) => format!("--data-url {} {dir}", quote(url)),
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
