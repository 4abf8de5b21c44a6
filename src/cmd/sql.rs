//! `lockstep sql`: run one read-only query.

use std::sync::Arc;

use lockstep_query::{ClockVersion, QueryEngine};

use crate::output::{Format, print_batches};

/// Arguments of `lockstep sql`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    store: super::StoreArgs,
    /// The query.
    query: String,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// Correct `samples.time` with this clock-model version instead of the newest (see the
    /// `clock_models` table; 0 = uncorrected), to reproduce an earlier result.
    #[arg(long)]
    clock_version: Option<u64>,
}

/// Runs the query and prints the result.
pub fn run(args: Args) -> anyhow::Result<()> {
    let store = Arc::new(args.store.open()?);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let batches = runtime.block_on(async {
        let clock = args.clock_version.map_or(ClockVersion::Newest, ClockVersion::Pinned);
        let engine = QueryEngine::with_clock(store, clock)?;
        engine.collect(&args.query).await
    })?;
    print_batches(&batches, args.format, &mut std::io::stdout().lock())
}
