//! `lockstep sql`: run one read-only query, under a memory limit, streaming its result.

use std::io::Read;
use std::sync::Arc;

use anyhow::Context;
use datafusion::execution::memory_pool::MemoryConsumer;
use futures::StreamExt;
use lockstep_query::{ClockVersion, QueryEngine, QueryError, QueryLimits};

use crate::output::{Format, PipeWriter, Printer};

/// Arguments of `lockstep sql`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    store: super::StoreArgs,
    /// The query; `-` reads it from standard input.
    query: String,
    /// Output format. csv and json print rows as they are produced; table holds the whole
    /// result (within the memory limit) to align its columns.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// Correct `samples.time` with this clock-model version instead of the newest (see the
    /// `clock_models` table; 0 = uncorrected), to reproduce an earlier result.
    #[arg(long)]
    clock_version: Option<u64>,
    /// Memory limit of the query in MiB (0 = unbounded). Sorts and aggregates spill to the
    /// temporary directory before they reach it; a query that still needs more fails.
    /// Default: a quarter of the machine's memory, at least 256 MiB.
    #[arg(long, env = "LOCKSTEP_QUERY_MEMORY_LIMIT_MB", value_name = "MIB")]
    memory_limit_mb: Option<u64>,
}

/// Runs the query and prints the result as it arrives.
pub fn run(args: Args) -> anyhow::Result<()> {
    let query = if args.query == "-" {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text).context("reading the query from standard input")?;
        anyhow::ensure!(!text.trim().is_empty(), "no query on standard input");
        text
    } else {
        args.query.clone()
    };
    let limits = args.memory_limit_mb.map_or_else(QueryLimits::default, QueryLimits::memory_mb);
    let store = Arc::new(args.store.open_read_only()?);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async {
        let clock = args.clock_version.map_or(ClockVersion::Newest, ClockVersion::Pinned);
        let engine = QueryEngine::with_limits(store, clock, limits)?;
        let mut stream = engine.stream(&query).await?;
        // The table's batches are held until the end: they count against the query's limit.
        let held = MemoryConsumer::new("the table output (--format csv or json streams instead)")
            .register(&engine.context().runtime_env().memory_pool);
        let mut out = PipeWriter::new(std::io::stdout().lock());
        let mut printer = Printer::new(args.format, &mut out);
        let mut result = Ok(());
        while let Some(batch) = stream.next().await {
            let batch = batch?;
            if args.format == Format::Table {
                held.try_grow(batch.get_array_memory_size()).map_err(QueryError::from)?;
            }
            result = printer.write(batch);
            if result.is_err() {
                break;
            }
        }
        if result.is_ok() {
            result = printer.finish();
        } else {
            drop(printer);
        }
        // The reader went away (`| head`): stop the query quietly.
        if out.closed() { Ok(()) } else { result }
    })
}
