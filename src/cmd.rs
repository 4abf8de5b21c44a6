//! One module per subcommand.

pub mod demo;
pub mod diagnose;
pub mod import;
pub mod serve;
pub mod simulate;
pub mod sql;

use std::path::PathBuf;

use anyhow::Context;
use lockstep_engine::{Store, StoreConfig};

/// Where the store lives (shared by every subcommand that opens one).
#[derive(Debug, Clone, clap::Args)]
pub struct StoreArgs {
    /// Store directory (writers create it if missing; readers require an existing store).
    #[arg(long, env = "LOCKSTEP_DATA_DIR", default_value = "lockstep-data")]
    pub data_dir: PathBuf,
}

impl StoreArgs {
    /// Opens the store for writing with default settings (takes the writer lock; creates
    /// the store if missing).
    pub fn open(&self) -> anyhow::Result<Store> {
        Store::open(&self.data_dir, StoreConfig::default())
            .with_context(|| format!("opening store {}", self.data_dir.display()))
    }

    /// Opens a read-only snapshot of an existing store: changes nothing on disk and works
    /// while a writer (`lockstep serve`) runs.
    pub fn open_read_only(&self) -> anyhow::Result<Store> {
        Store::open_read_only(&self.data_dir)
            .with_context(|| format!("opening store {} read-only", self.data_dir.display()))
    }
}
