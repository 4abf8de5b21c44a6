//! `lockstep simulate`: write a realistic cluster bundle with an injected fault.

use std::path::PathBuf;

use crate::output::outln;
use anyhow::Context;
use lockstep_sim::{Scenario, SimConfig, simulate};

/// Arguments of `lockstep simulate`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Scenario: healthy, ib-link-errors, roce-congestion, storage-latency, checkpoint-storm,
    /// dataloader-starvation, thermal-throttle, storage-over-fabric.
    #[arg(long, default_value = "ib-link-errors")]
    pub scenario: String,
    /// Output bundle directory.
    #[arg(long)]
    pub out: PathBuf,
    /// Nodes of the main job `llm-70b` (8 GPUs each; 32 = a 256-GPU job). The second job
    /// `vlm-8b` gets max(1, nodes/8) more.
    #[arg(long, default_value_t = 32)]
    pub nodes: usize,
    /// Random seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Simulated minutes.
    #[arg(long, default_value_t = 30)]
    pub minutes: u32,
}

/// Builds the simulator config from the arguments.
pub fn config(args: &Args) -> anyhow::Result<SimConfig> {
    let scenario: Scenario = args.scenario.parse().map_err(|e| anyhow::anyhow!("{e}"))?;
    let config = SimConfig { nodes: args.nodes, seed: args.seed, minutes: args.minutes, ..SimConfig::new(scenario) };
    config.validate().map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(config)
}

/// Runs the simulator and prints a summary.
pub fn run(args: Args) -> anyhow::Result<()> {
    let cfg = config(&args)?;
    // A bundle is a directory of its own: files already there would be mixed with it (a
    // `samples.csv` beside the new `samples.parquet` makes the bundle one import refuses) or
    // replaced without a word (a demo's bundle, no longer the data of its store).
    let held: Vec<String> = std::fs::read_dir(&args.out)
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).take(2).collect())
        .unwrap_or_default();
    if let Some(first) = held.first() {
        let more = if held.len() > 1 { ", …" } else { "" };
        anyhow::bail!(
            "{} is not empty (it holds {first:?}{more}): simulate writes a new bundle; give a new or empty directory",
            args.out.display()
        );
    }
    let started = std::time::Instant::now();
    let summary = simulate(&cfg, &args.out).with_context(|| format!("simulating into {}", args.out.display()))?;
    outln!(
        "wrote {} ({} series, {} samples, {} clock exchanges, {:.1} MB) in {:.1} s",
        args.out.display(),
        summary.series,
        summary.samples,
        summary.clock_exchanges,
        summary.bytes as f64 / 1e6,
        started.elapsed().as_secs_f64()
    );
    outln!(
        "injected: {} ({}) on {} at {}",
        summary.truth.scenario,
        summary.truth.fault_domain,
        summary.truth.fault_entity.as_deref().unwrap_or("none"),
        summary.truth.onset_ns.map_or("-".to_string(), crate::output::format_ns)
    );
    Ok(())
}
