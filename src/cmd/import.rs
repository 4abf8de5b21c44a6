//! `lockstep import`: load a bundle into a store.

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use lockstep_ingest::import::{ImportOptions, import_bundle};

/// Arguments of `lockstep import`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    store: super::StoreArgs,
    /// Bundle directory holding samples.parquet or samples.csv.
    bundle: PathBuf,
    /// Import the valid rows and report how many were skipped, instead of importing nothing.
    #[arg(long)]
    skip_bad_rows: bool,
}

/// Runs the import and prints a summary.
pub fn run(args: Args) -> anyhow::Result<()> {
    let store = args.store.open()?;
    let bar = std::io::stderr().is_terminal().then(|| {
        let bar = ProgressBar::new(0);
        bar.set_style(
            ProgressStyle::with_template("{spinner} importing [{bar:40}] {percent}% {elapsed}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar
    });
    let options = ImportOptions { skip_bad_rows: args.skip_bad_rows };
    let report = import_bundle(&store, &args.bundle, &options, &mut |done, total| {
        if let Some(bar) = &bar {
            if let Some(total) = total {
                bar.set_length(total);
            }
            bar.set_position(done);
        }
    })
    .with_context(|| format!("importing {}", args.bundle.display()))?;
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    store.compact(false).context("compacting after import")?;
    store.close().context("closing the store")?;
    let span = match report.time_span {
        Some((lo, hi)) => format!("{} .. {} ({:.1} s)", crate::output::format_ns(lo), crate::output::format_ns(hi), (hi - lo) as f64 / 1e9),
        None => "empty".into(),
    };
    println!("imported {} samples of {} series from {}", report.samples, report.series, report.file.display());
    println!("time span: {span}");
    println!("took {:.2} s ({:.0} samples/s)", report.seconds, report.samples as f64 / report.seconds.max(1e-9));
    if report.clock_exchanges + report.clock_offsets + report.clock_barriers > 0 {
        println!(
            "clock sync: {} exchanges, {} direct offsets, {} collective barriers; clock models version {}",
            report.clock_exchanges, report.clock_offsets, report.clock_barriers, report.clock_version
        );
    } else if report.clock_version == 0 {
        println!("clock sync: none (no clock_sync or clock_offsets file); times stay uncorrected");
    }
    if report.skipped > 0 {
        println!("skipped {} bad rows, e.g.:", report.skipped);
        for example in &report.skipped_examples {
            println!("  {example}");
        }
    }
    Ok(())
}
