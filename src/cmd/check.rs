//! `lockstep check`: read every data file of a store end to end (checksums, decoding, the
//! manifest's facts about each file) and report every problem; see `Store::check`. Read-only:
//! it runs beside a live `lockstep serve` on the snapshot it opened.

use std::io::IsTerminal;
use std::sync::Mutex;

use indicatif::{ProgressBar, ProgressStyle};
use lockstep_engine::store::CheckReport;

use crate::output::outln;

/// Arguments of `lockstep check`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    store: super::StoreArgs,
    /// Threads reading row groups, of one file or several (default: one per core).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    threads: Option<u16>,
    /// Print the report as one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// Runs `lockstep check`: exit status 0 when nothing is wrong, 1 (after the report) when a
/// problem was found or the store cannot be opened.
pub fn run(args: Args) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    let store = args.store.open_read_only()?;
    let threads = args
        .threads
        .map(usize::from)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get));
    let bar = std::io::stderr().is_terminal().then(|| {
        let bar = ProgressBar::new(0);
        bar.set_style(
            ProgressStyle::with_template("{spinner} checking [{bar:40}] {percent}% {elapsed}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        Mutex::new(bar)
    });
    let mut report = store.check(threads, &|done, total| {
        if let Some(bar) = &bar {
            let bar = bar.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            bar.set_length(total);
            bar.set_position(done);
        }
    })?;
    if let Some(bar) = bar {
        bar.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner).finish_and_clear();
    }
    // On object storage the store names its files by local paths under --data-dir; the
    // operator looks for them in the bucket.
    for p in &mut report.problems {
        if let Some(name) = store.describe_path(&p.path) {
            p.path = name.into();
        }
    }
    if args.json {
        outln!("{}", serde_json::to_string(&report)?);
    } else {
        print_text(&report, &args.store.describe(), started.elapsed().as_secs_f64())?;
    }
    // The process ends next: the catalog (a million series are millions of small
    // allocations) is left to the exit instead of freed one by one.
    std::mem::forget(store);
    anyhow::ensure!(
        report.problems.is_empty(),
        "{} in store {}",
        count(report.problems.len(), "problem"),
        args.store.describe()
    );
    Ok(())
}

/// `n` and `noun`, plural unless `n` is 1.
fn count(n: usize, noun: &str) -> String {
    format!("{n} {noun}{}", if n == 1 { "" } else { "s" })
}

fn print_text(report: &CheckReport, store: &str, seconds: f64) -> std::io::Result<()> {
    outln!(
        "checked store {store} in {seconds:.2} s: {} ({} with checksums), {}, {} rows, {:.1} MB; {} series; {} in \
         the WAL; {}; {}",
        count(report.files, "data file"),
        report.files_with_checksums,
        count(report.row_groups, "row group"),
        report.rows,
        report.bytes as f64 / 1e6,
        report.series,
        count(report.buffered_rows, "acknowledged row"),
        count(report.clock_versions, "clock model version"),
        count(report.documents, "document")
    );
    let unchecked = report.files_without_checksums;
    if unchecked > 0 {
        outln!(
            "note: {unchecked} data file{} written before checksums: decoded and compared with the manifest, but a \
             changed value in {} cannot be detected (`lockstep serve` rewrites such files with checksums)",
            if unchecked == 1 { " was" } else { "s were" },
            if unchecked == 1 { "it" } else { "them" }
        );
    }
    if report.files_replaced > 0 {
        outln!(
            "note: {} replaced by a compaction while the check ran (object storage), not read",
            count(report.files_replaced, "data file")
        );
    }
    if let Some(tail) = &report.wal_torn_tail {
        outln!(
            "note: the WAL segment {} ends in an incomplete record ({} from offset {}): a write in progress, or one \
             a writer stopped in the middle of; nothing acknowledged is in it (a write is acknowledged once its \
             whole record is synced), and the next writer cuts it",
            tail.path.display(),
            count(usize::try_from(tail.bytes).unwrap_or(usize::MAX), "byte"),
            tail.offset
        );
    }
    for p in &report.problems {
        outln!("problem: {}: {}", p.path.display(), p.problem);
    }
    if report.problems.is_empty() {
        outln!("no problems found");
    }
    Ok(())
}
