//! `lockstep write-loop` (hidden): writes batches through the WAL and prints `acked N` after
//! each durable acknowledgement. The crash tests kill this process and check that every
//! acknowledged sample survives.

/// Arguments of `lockstep write-loop`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    store: super::StoreArgs,
    /// Number of batches to write.
    #[arg(long, default_value_t = 1000)]
    batches: u64,
    /// Samples per batch.
    #[arg(long, default_value_t = 100)]
    batch_size: u64,
}

/// Writes until done (or killed).
pub fn run(args: Args) -> anyhow::Result<()> {
    use std::io::Write;
    let store = args.store.open()?;
    let mut out = std::io::stdout().lock();
    let t0 = 1_767_225_600_000_000_000i64;
    for b in 0..args.batches {
        let mut batch = lockstep_engine::WriteBatch::default();
        for i in 0..args.batch_size {
            let n = b * args.batch_size + i;
            let key = lockstep_engine::SeriesKey::new("crash_test", [("host", format!("h{}", n % 7))]);
            batch.push(key, t0 + n as i64, n as f64);
        }
        let outcome = store.write(&batch)?;
        anyhow::ensure!(outcome.rejected.is_empty(), "unexpected rejection");
        writeln!(out, "acked {}", (b + 1) * args.batch_size)?;
        out.flush()?;
    }
    Ok(())
}
