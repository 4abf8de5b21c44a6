//! `lockstep import`: load a bundle directory, or Prometheus text / OpenMetrics scrape files,
//! into a store.

use std::io::IsTerminal;
use std::path::PathBuf;

use crate::output::outln;
use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use lockstep_ingest::import::prom::{PromImportOptions, import_prom_files};
use lockstep_ingest::import::{ImportOptions, ImportReport, import_bundle};

/// Arguments of `lockstep import`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    store: super::StoreArgs,
    /// A bundle directory (samples.parquet or samples.csv, topology.json, jobs.json, clock
    /// files), or one or more Prometheus text / OpenMetrics scrape files.
    #[arg(required = true, value_name = "BUNDLE | SCRAPE...")]
    paths: Vec<PathBuf>,
    /// Import the valid rows and report how many were skipped, instead of importing nothing
    /// (bundles only).
    #[arg(long)]
    skip_bad_rows: bool,
    /// Scrape files: the host of samples without a `host` label (the scrape target).
    #[arg(long)]
    host: Option<String>,
    /// Scrape files: the time of samples without a timestamp, RFC 3339 or ns since the epoch
    /// (the target's clock); default: each file's modification time.
    #[arg(long)]
    scrape_time: Option<String>,
}

/// Runs the import and prints a summary.
pub fn run(args: Args) -> anyhow::Result<()> {
    let scrape_files = !(args.paths.len() == 1 && args.paths[0].is_dir());
    if scrape_files {
        return import_scrapes(args);
    }
    anyhow::ensure!(
        args.host.is_none() && args.scrape_time.is_none(),
        "--host and --scrape-time apply to scrape files, not to the bundle directory {}",
        args.paths[0].display()
    );
    let bundle = &args.paths[0];
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
    let report = import_bundle(&store, bundle, &options, &mut |done, total| {
        if let Some(bar) = &bar {
            if let Some(total) = total {
                bar.set_length(total);
            }
            bar.set_position(done);
        }
    })
    .with_context(|| format!("importing {}", bundle.display()))?;
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    store.compact(false).context("compacting after import")?;
    store.close().context("closing the store")?;
    let span = match report.time_span {
        Some((lo, hi)) => format!(
            "{} .. {} ({:.1} s)",
            crate::output::format_ns(lo),
            crate::output::format_ns(hi),
            (hi - lo) as f64 / 1e9
        ),
        None => "empty".into(),
    };
    if report.file.as_os_str().is_empty() {
        outln!("no samples file in {}", bundle.display());
    } else {
        outln!("imported {} samples of {} series from {}", report.samples, report.series, report.file.display());
        print_notes(&report)?;
        outln!("time span: {span}");
        outln!("took {:.2} s ({:.0} samples/s)", report.seconds, report.samples as f64 / report.seconds.max(1e-9));
    }
    for (name, version) in &report.documents {
        outln!("stored {name} (version {version})");
    }
    if report.clock_exchanges + report.clock_offsets + report.clock_barriers > 0 {
        outln!(
            "clock sync: {} exchanges, {} direct offsets, {} collective barriers; clock models version {}",
            report.clock_exchanges,
            report.clock_offsets,
            report.clock_barriers,
            report.clock_version
        );
    } else if report.clock_version == 0 {
        outln!("clock sync: none (no clock_sync or clock_offsets file); times stay uncorrected");
    }
    if report.skipped > 0 {
        outln!("skipped {} bad rows, e.g.:", report.skipped);
        for example in &report.skipped_examples {
            outln!("  {example}");
        }
    }
    Ok(())
}

/// `lockstep import [--host H] [--scrape-time T] FILE...`: Prometheus text / OpenMetrics scrapes.
fn import_scrapes(args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(!args.skip_bad_rows, "--skip-bad-rows applies to bundles; a scrape import is all or nothing");
    for path in &args.paths {
        anyhow::ensure!(
            path.is_file(),
            "{} is not a file (give one bundle directory, or Prometheus text scrape files)",
            path.display()
        );
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("").to_ascii_lowercase();
        anyhow::ensure!(
            ext != "parquet" && ext != "csv",
            "{} is a samples file: import the bundle directory that holds it",
            path.display()
        );
    }
    let scrape_time_ns = args.scrape_time.as_deref().map(super::diagnose::parse_time).transpose()?;
    let options = PromImportOptions { host: args.host.clone(), scrape_time_ns };
    let store = args.store.open()?;
    let report = import_prom_files(&store, &args.paths, &options).context("importing scrape files")?;
    store.compact(false).context("compacting after import")?;
    store.close().context("closing the store")?;
    let span = match report.time_span {
        Some((lo, hi)) => format!("{} .. {}", crate::output::format_ns(lo), crate::output::format_ns(hi)),
        None => "empty".into(),
    };
    outln!("imported {} samples of {} series from {} scrape file(s)", report.samples, report.series, args.paths.len());
    print_notes(&report)?;
    if report.skipped > 0 {
        outln!("not stored: {} NaN or ±inf samples (empty summary windows, gauges without a value)", report.skipped);
        for example in &report.skipped_examples {
            outln!("  {example}");
        }
    }
    outln!("time span: {span}");
    Ok(())
}

/// Says how many integer values were rounded to a float, and how many of the imported samples
/// repeated a series and timestamp (the count of samples overstates the rows stored by that many).
fn print_notes(report: &ImportReport) -> anyhow::Result<()> {
    if let (n @ 1.., example) = &report.rounded {
        outln!(
            "  {n} integer value(s) beyond 2^53 were stored as the nearest float (values are f64), e.g. {}",
            example.as_deref().unwrap_or("")
        );
    }
    if report.duplicates > 0 {
        outln!(
            "  {} of them repeated a series and timestamp earlier in the import: the last of each is kept, {} rows stored",
            report.duplicates,
            report.samples - report.duplicates
        );
    }
    Ok(())
}
