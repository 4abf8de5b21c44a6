//! `lockstep diagnose`: which domain changed first, the evidence chain, the verdict, and the
//! HTML report; with `--baseline-from/--baseline-to`, a before/after comparison of two windows.

use std::path::PathBuf;

use anyhow::Context;
use lockstep::report::{html, text};

use crate::output::print_stdout;
use lockstep_engine::topology::{parse_rfc3339, rfc3339_error};
use lockstep_query::diagnose::{ClockMode, DiagnoseOptions, compare, diagnose};

/// Output formats of `lockstep diagnose`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// The chain, the verdict and the SQL for each piece of evidence.
    Text,
    /// One JSON object (schema in docs/diagnosis.md).
    Json,
}

/// Arguments of `lockstep diagnose`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub store: super::StoreArgs,
    /// The job (as in jobs.json).
    #[arg(long)]
    pub job: String,
    /// Window start: RFC 3339 or ns since the epoch (reference time); default: the job's start.
    #[arg(long)]
    pub from: Option<String>,
    /// Window end (exclusive); default: the job's end.
    #[arg(long)]
    pub to: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Also write the self-contained HTML report here.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Compare mode: the "before" window start (the "after" window is --from/--to).
    #[arg(long, requires = "baseline_to")]
    pub baseline_from: Option<String>,
    /// Compare mode: the "before" window end.
    #[arg(long, requires = "baseline_from")]
    pub baseline_to: Option<String>,
    /// (testing) Use raw collector timestamps as if they were exact, to show what an
    /// uncorrected timeline concludes.
    #[arg(long, hide = true)]
    pub raw_clocks: bool,
}

/// Parses RFC 3339 or integer ns.
pub fn parse_time(text: &str) -> anyhow::Result<i64> {
    let t = text.trim();
    if let Ok(ns) = t.parse::<i64>() {
        return Ok(ns);
    }
    parse_rfc3339(t).with_context(|| match rfc3339_error(t) {
        Some(e) if e.contains("outside") => e,
        _ => format!("{t:?} is neither RFC 3339 nor integer ns"),
    })
}

fn opt_time(t: &Option<String>) -> anyhow::Result<Option<i64>> {
    t.as_deref().map(parse_time).transpose()
}

/// Runs the diagnosis (or the comparison) and prints it.
pub fn run(args: Args) -> anyhow::Result<()> {
    let store = args.store.open_read_only()?;
    let from = opt_time(&args.from)?;
    let to = opt_time(&args.to)?;
    if let (Some(bf), Some(bt)) = (opt_time(&args.baseline_from)?, opt_time(&args.baseline_to)?) {
        let (Some(af), Some(at)) = (from, to) else {
            anyhow::bail!("compare mode needs --from and --to for the second window");
        };
        let c = compare(&store, &args.job, (bf, bt), (af, at))?;
        for w in c.warnings() {
            eprintln!("warning: {w}");
        }
        match args.format {
            Format::Text => print_stdout(&text::render_comparison(&c))?,
            Format::Json => print_stdout(&format!("{}\n", c.to_json()))?,
        }
        return Ok(());
    }
    let opts = DiagnoseOptions {
        from,
        to,
        clock: if args.raw_clocks { ClockMode::Raw } else { ClockMode::Corrected },
        threads: 0,
        lanes: args.report.is_some(),
    };
    let mut d = diagnose(&store, &args.job, &opts)?;
    // The commands a next action names run against the store diagnosed, not the default one.
    let flags = args.store.command_flags();
    for e in std::iter::once(&mut d.main).chain(d.episodes.iter_mut()) {
        for command in ["lockstep sql ", "lockstep diagnose "] {
            e.next_action = e.next_action.replace(&format!("`{command}"), &format!("`{command}{flags} "));
        }
    }
    match args.format {
        Format::Text => print_stdout(&text::render(&d))?,
        Format::Json => print_stdout(&format!("{}\n", d.to_json()))?,
    }
    if let Some(path) = &args.report {
        std::fs::write(path, html::render(&d)).with_context(|| format!("writing {}", path.display()))?;
        if args.format == Format::Text {
            print_stdout(&format!("\nreport: {}\n", path.display()))?;
        }
    }
    Ok(())
}
