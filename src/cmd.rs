//! One module per subcommand.

pub mod bench_ingest;
pub mod demo;
pub mod diagnose;
pub mod import;
pub mod serve;
pub mod simulate;
pub mod sql;
pub mod write_loop;

use std::path::PathBuf;

use anyhow::Context;
use lockstep_engine::{Store, StoreConfig};

/// Where the store lives (shared by every subcommand that opens one).
#[derive(Debug, Clone, clap::Args)]
pub struct StoreArgs {
    /// Store directory (created if missing).
    #[arg(long, env = "LOCKSTEP_DATA_DIR", default_value = "lockstep-data")]
    pub data_dir: PathBuf,
}

impl StoreArgs {
    /// Opens the store with default settings.
    pub fn open(&self) -> anyhow::Result<Store> {
        Store::open(&self.data_dir, StoreConfig::default())
            .with_context(|| format!("opening store {}", self.data_dir.display()))
    }
}
