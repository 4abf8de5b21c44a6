//! `lockstep demo`: the main job. Simulates a 256-GPU training job with an injected fabric
//! fault, imports it into an embedded store in a local directory, shows the timeline evidence
//! with SQL, diagnoses the slowdown and writes the HTML report.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use lockstep_engine::{Store, StoreConfig};
use lockstep_ingest::import::{ImportOptions, import_bundle};
use lockstep_query::QueryEngine;
use lockstep_sim::simulate;

use crate::output::outln;
use crate::output::{Format, print_batches};

/// Arguments of `lockstep demo`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Working directory for the bundle and the store: created, or replaced if an earlier
    /// demo run created it; any other non-empty directory is refused.
    #[arg(long, default_value = "lockstep-demo")]
    dir: PathBuf,
    /// Scenario to inject (see `lockstep simulate --help`).
    #[arg(long, default_value = "ib-link-errors")]
    scenario: String,
    /// Nodes of the main job `llm-70b` (8 GPUs each; 32 = a 256-GPU job). The second job
    /// `vlm-8b` gets max(1, nodes/8) more.
    #[arg(long, default_value_t = 32)]
    nodes: usize,
    /// Simulated minutes.
    #[arg(long, default_value_t = 10)]
    minutes: u32,
    /// Random seed.
    #[arg(long, default_value_t = 7)]
    seed: u64,
}

/// Marks a directory as the demo's own, so that a later run may replace it.
const MARKER: &str = ".lockstep-demo";

/// Makes `dir` an empty demo directory: creates it, or clears one an earlier demo run created
/// (it holds the marker file). A non-empty directory without the marker is refused: the demo
/// never deletes files it did not write.
fn prepare_dir(dir: &std::path::Path) -> anyhow::Result<()> {
    if dir.exists() {
        let mut entries = std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
        if entries.next().is_some() {
            anyhow::ensure!(
                dir.join(MARKER).is_file(),
                "{} is not empty and was not created by `lockstep demo`; refusing to replace it (choose another --dir)",
                dir.display()
            );
            // A writer (`lockstep serve --data-dir DIR/db`) may be using the earlier demo's
            // store: its lock is taken (and held while the directory is cleared) or the demo
            // stops, naming the holder.
            let db = dir.join("db");
            let _held = if db.join(lockstep_engine::store::lock::LOCK_FILE).exists() {
                Some(lockstep_engine::store::lock::WriterLock::acquire(&db).with_context(|| {
                    format!("{} is the store of an earlier demo that a process has open; stop it first", db.display())
                })?)
            } else {
                None
            };
            std::fs::remove_dir_all(dir).with_context(|| format!("clearing {}", dir.display()))?;
        }
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    std::fs::write(dir.join(MARKER), b"created by lockstep demo; the next demo run replaces this directory\n")
        .with_context(|| format!("marking {}", dir.display()))
}

/// Runs the demo.
pub fn run(args: Args) -> anyhow::Result<()> {
    let bundle = args.dir.join("bundle");
    let db = args.dir.join("db");
    let sim = super::simulate::Args {
        scenario: args.scenario.clone(),
        out: bundle.clone(),
        nodes: args.nodes,
        seed: args.seed,
        minutes: args.minutes,
    };
    // Validate everything before the disk is touched.
    let cfg = super::simulate::config(&sim)?;
    prepare_dir(&args.dir)?;
    outln!(
        "== 1. simulating a {}-GPU job ({} nodes x 8 GPUs, plus {} nodes of a second job) for {} min, scenario {}",
        args.nodes * 8,
        args.nodes,
        (args.nodes / 8).max(1),
        args.minutes,
        args.scenario
    );
    let started = std::time::Instant::now();
    let summary = simulate(&cfg, &bundle)?;
    outln!(
        "   {} series, {} samples, {:.1} MB bundle in {:.1} s",
        summary.series,
        summary.samples,
        summary.bytes as f64 / 1e6,
        started.elapsed().as_secs_f64()
    );

    outln!("== 2. importing into the embedded store {}", db.display());
    let store = Store::open(&db, StoreConfig { max_future_ns: None, ..Default::default() })?;
    let report = import_bundle(&store, &bundle, &ImportOptions::default(), &mut |_, _| {})?;
    store.compact(false)?;
    let manifest = store.manifest()?;
    outln!(
        "   {} samples of {} series in {:.1} s ({:.1} M samples/s), {:.2} bytes/sample on disk",
        report.samples,
        report.series,
        report.seconds,
        report.samples as f64 / report.seconds / 1e6,
        manifest.total_bytes() as f64 / report.samples.max(1) as f64
    );

    let job = summary.truth.job.clone();
    let queries = [
        (
            "step time per minute (p50 / max over ranks)",
            format!(
                "SELECT date_bin(INTERVAL '1 minute', time) AS minute, round(median(value), 3) AS p50_s, round(max(value), 3) AS max_s \
             FROM samples WHERE metric = 'train_step_duration_seconds' AND job = '{job}' GROUP BY 1 ORDER BY 1"
            ),
        ),
        (
            "fabric error counters with the largest increase (raw counters, per entity)",
            "SELECT entity, metric, max(value) - min(value) AS increase FROM samples \
             WHERE domain = 'network' AND (metric LIKE '%error%' OR metric LIKE '%discard%' OR metric LIKE '%downed%') \
             GROUP BY entity, metric HAVING max(value) - min(value) > 0 ORDER BY increase DESC LIMIT 8"
                .to_string(),
        ),
        ("jobs and their placement", "SELECT * FROM jobs".to_string()),
    ];
    let runtime = crate::runtime::build()?;
    let engine = QueryEngine::new(Arc::new(store))?;
    for (title, sql) in &queries {
        outln!("== 3. {title}\n   {sql}");
        let batches = runtime.block_on(engine.collect(sql))?;
        print_batches(&batches, Format::Table, &mut std::io::stdout().lock())?;
    }
    outln!("== 4. diagnosis of {job} (lockstep diagnose --data-dir {} --job {job})", db.display());
    let store = engine.store();
    let diagnosis = lockstep_query::diagnose::diagnose(
        store,
        &job,
        &lockstep_query::diagnose::DiagnoseOptions { lanes: true, ..Default::default() },
    )?;
    crate::output::print_stdout(&lockstep::report::text::render(&diagnosis))?;
    let report = args.dir.join("report.html");
    std::fs::write(&report, lockstep::report::html::render(&diagnosis))
        .with_context(|| format!("writing {}", report.display()))?;
    outln!("== verdict: {}", diagnosis.verdict);
    outln!("== report: {}  (diagnosed in {} ms)", report.display(), diagnosis.elapsed_ms);
    outln!(
        "== injected fault (truth.json): {} on {} ({}) at {}",
        summary.truth.scenario,
        summary.truth.fault_entity.as_deref().unwrap_or("none"),
        summary.truth.fault_domain,
        summary.truth.onset_ns.map_or("-".to_string(), crate::output::format_ns)
    );
    outln!("== store: {}  (try: lockstep sql --data-dir {} \"SELECT ...\")", db.display(), db.display());
    Ok(())
}
