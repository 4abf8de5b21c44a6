//! The realistic cluster simulator behind `lockstep simulate` and the demo.
//!
//! It simulates a synchronous data-parallel training job (`llm-70b`) and a smaller job
//! (`vlm-8b`) on a two-tier InfiniBand (or RoCE) fat tree with a shared Lustre-like pool, injects
//! one fault in the middle third of the run, and writes a bundle that `lockstep import` reads:
//!
//! - `samples.parquet`: long format (`time`, `host`, `metric`, `value`, one nullable Utf8 column
//!   per label), real exporter metric names (dcgm-exporter, node_exporter, infiniband_exporter,
//!   NCCL Inspector, application and storage metrics), stamped by each host's own skewed and
//!   drifting clock;
//! - `clock_sync.parquet`: NTP-style exchanges (t1..t4) of every host with the reference;
//! - `topology.json`, `jobs.json`;
//! - `truth.json`: the injected fault, its entity, domain and onset, the expected causal chain
//!   and the true clocks ([`Truth`]).
//!
//! Causality is modelled mechanistically rather than painted on: steps are simulated rank by
//! rank (prefetch queue → compute → all-reduce barrier → transfer over the slowest link), and
//! every metric is derived from that timeline and from fault effects that start with realistic
//! lags (errors 1–3 s before collectives slow; data-loader waits only after the prefetch queue
//! drains). See `docs/simulator.md`.

mod app;
mod clock;
mod cluster;
mod error;
mod fault;
mod gpu;
mod host;
pub mod independent;
mod nic;
mod rng;
mod scenario;
mod sink;
mod storage;
mod switch;
mod topology;
mod truth;
mod workload;
mod world;

#[cfg(test)]
mod tests;

use std::fs::File;
use std::path::Path;
use std::sync::mpsc::sync_channel;

pub use error::SimError;
pub use scenario::Scenario;
pub use truth::{ChainLink, ClockTruth, Truth};

use clock::{ClockSync, HostClock};
use cluster::{Cluster, Fabric, GPUS_PER_NODE};
use fault::FaultPlan;
use rng::Rng;
use sink::{Sink, SinkStats, write_batches};
use storage::PoolModel;
use workload::{JobParams, JobSim};
use world::World;

use lockstep_engine::model::SEC;
const BATCH_ROWS: usize = 65_536;
/// Default start of a run: 2026-03-02T09:00:00Z.
pub const DEFAULT_START_NS: i64 = 1_772_442_000_000_000_000;

/// What to simulate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimConfig {
    /// The fault to inject.
    pub scenario: Scenario,
    /// Compute nodes of the main job `llm-70b` (8 GPUs and 4 fabric NICs each); at least 4.
    /// The other job `vlm-8b` runs on `max(1, nodes / 8)` more.
    pub nodes: usize,
    /// Seed: the same config and seed give byte-identical samples.
    pub seed: u64,
    /// Length of the run in minutes.
    pub minutes: u32,
    /// Start of the run (reference time, ns since the Unix epoch).
    pub start_ns: i64,
    /// Scrape interval of the periodic series (ns); events (steps, collectives) are exact.
    pub sample_interval_ns: i64,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            scenario: Scenario::Healthy,
            nodes: 32,
            seed: 1,
            minutes: 30,
            start_ns: DEFAULT_START_NS,
            sample_interval_ns: SEC,
        }
    }
}

impl SimConfig {
    /// The default configuration for `scenario`.
    pub fn new(scenario: Scenario) -> Self {
        Self { scenario, ..Self::default() }
    }

    /// Checks the configuration's ranges (what [`simulate`] checks before writing anything).
    pub fn validate(&self) -> Result<(), SimError> {
        let bad =
            |field: &'static str, reason: &str| Err(SimError::InvalidConfig { field, reason: reason.to_string() });
        if !(4..=2048).contains(&self.nodes) {
            return bad("nodes", "must be between 4 and 2048");
        }
        if !(1..=7 * 24 * 60).contains(&self.minutes) {
            return bad("minutes", "must be between 1 and 10080");
        }
        if !(100_000_000..=60 * SEC).contains(&self.sample_interval_ns) {
            return bad("sample_interval_ns", "must be between 100 ms and 60 s");
        }
        if i64::from(self.minutes) * 60 * SEC < 20 * self.sample_interval_ns {
            return bad("minutes", "run must span at least 20 sample intervals");
        }
        if self.start_ns.checked_add(i64::from(self.minutes) * 60 * SEC + 3_600 * SEC).is_none()
            || self.start_ns < 3_600 * SEC
        {
            return bad("start_ns", "out of range");
        }
        Ok(())
    }
}

/// What a run produced.
#[derive(Debug, Clone, PartialEq)]
pub struct SimSummary {
    /// Rows in `samples.parquet`.
    pub samples: u64,
    /// Distinct series in `samples.parquet`.
    pub series: u64,
    /// Clock exchanges in `clock_sync.parquet`.
    pub clock_exchanges: u64,
    /// Total size of the bundle's files (bytes).
    pub bytes: u64,
    /// The content of `truth.json`.
    pub truth: Truth,
}

/// Everything a run reads while ticking.
struct Run<'a> {
    cfg: &'a SimConfig,
    cluster: &'a Cluster,
    plan: &'a FaultPlan,
    pool: &'a PoolModel,
    hosts: &'a [String],
    clocks: &'a [HostClock],
    end: i64,
}

impl Run<'_> {
    fn world<'s>(&'s self, jobs: &'s [JobSim]) -> World<'s> {
        World { cluster: self.cluster, plan: self.plan, pool: self.pool, jobs, clocks: self.clocks }
    }
}

/// Simulates `cfg` and writes the bundle into `out_dir` (created if missing; existing bundle
/// files are overwritten).
pub fn simulate(cfg: &SimConfig, out_dir: &Path) -> Result<SimSummary, SimError> {
    cfg.validate()?;
    std::fs::create_dir_all(out_dir).map_err(|source| SimError::Io { path: out_dir.to_path_buf(), source })?;
    let start = cfg.start_ns;
    let end = start + i64::from(cfg.minutes) * 60 * SEC;
    let fabric = if cfg.scenario.uses_roce() { Fabric::Roce } else { Fabric::Infiniband };
    let cluster = Cluster::build(cfg.nodes, fabric, start, end, &mut Rng::stream(cfg.seed, 1));
    let plan = FaultPlan::new(cfg.scenario, &cluster, start, end, cfg.seed);
    let traits = gpu::gpu_traits(cluster.nodes.len() * GPUS_PER_NODE, cfg.seed);
    let speeds: Vec<f64> = traits.iter().map(|t| t.speed).collect();
    let nominal_read = (0..cluster.jobs.len())
        .map(|j| JobParams::for_job(j).nominal_read_bps(cluster.jobs[j].nodes.len() * GPUS_PER_NODE))
        .sum();
    let pool = PoolModel::new(cluster.servers.len(), nominal_read, &plan, start, end, cfg.seed);
    let hosts = cluster.host_names();
    let mut clock_rng = Rng::stream(cfg.seed, 2);
    let clocks: Vec<HostClock> = hosts.iter().map(|_| HostClock::random(&mut clock_rng, start)).collect();
    let mut jobs: Vec<JobSim> =
        (0..cluster.jobs.len()).map(|j| JobSim::new(j, &cluster, &speeds, start, cfg.seed)).collect();
    write_json(&out_dir.join("topology.json"), &cluster.topology_json())?;
    write_json(&out_dir.join("jobs.json"), &cluster.jobs_json())?;

    let samples_path = out_dir.join("samples.parquet");
    let sync_path = out_dir.join("clock_sync.parquet");
    let file = File::create(&samples_path).map_err(|source| SimError::Io { path: samples_path.clone(), source })?;
    let mut sync = ClockSync::create(&sync_path, hosts.len(), start, Rng::stream(cfg.seed, 3))?;
    let run = Run { cfg, cluster: &cluster, plan: &plan, pool: &pool, hosts: &hosts, clocks: &clocks, end };
    let stats = std::thread::scope(|scope| -> Result<SinkStats, SimError> {
        let (tx, rx) = sync_channel(2);
        let path = samples_path.clone();
        let writer = scope.spawn(move || write_batches(file, &path, rx));
        let mut sink = Sink::new(tx, BATCH_ROWS, &samples_path);
        let ticked = run_ticks(&run, traits, &mut jobs, &mut sink, &mut sync);
        let stats = sink.finish();
        let written = writer.join().map_err(|_| SimError::WriterStopped { path: samples_path.clone() })?;
        written?;
        ticked?;
        stats
    })?;
    let clock_exchanges = sync.finish()?;
    let facts = truth::RunFacts {
        seed: cfg.seed,
        start,
        end,
        interval: cfg.sample_interval_ns,
        hosts: &hosts,
        clocks: &clocks,
        history: &jobs[0].history,
    };
    let truth = truth::build(&cluster, &plan, &facts);
    let truth_path = out_dir.join("truth.json");
    write_json(&truth_path, &truth)?;
    let mut bytes = 0;
    for name in ["samples.parquet", "clock_sync.parquet", "topology.json", "jobs.json", "truth.json"] {
        let path = out_dir.join(name);
        bytes += std::fs::metadata(&path).map_err(|source| SimError::Io { path, source })?.len();
    }
    Ok(SimSummary { samples: stats.samples, series: stats.series, clock_exchanges, bytes, truth })
}

/// The tick loop: generate steps ahead, scrape every collector once per interval, emit events,
/// run clock exchanges, drop steps nobody needs any more.
fn run_ticks(
    run: &Run<'_>,
    traits: Vec<gpu::GpuTraits>,
    jobs: &mut [JobSim],
    sink: &mut Sink,
    sync: &mut ClockSync,
) -> Result<(), SimError> {
    let (cfg, interval) = (run.cfg, run.cfg.sample_interval_ns);
    let start = cfg.start_ns;
    let lookahead = 2 * interval + 5 * SEC;
    for job in jobs.iter_mut() {
        job.advance_until(start + lookahead, run.plan, run.pool);
    }
    let (mut gpu, mut nic, mut switch, mut host, mut app) = {
        let w = run.world(jobs);
        (
            gpu::GpuEmitter::new(&w, sink, traits, interval, start, cfg.seed),
            nic::NicEmitter::new(&w, sink, interval, start, cfg.seed),
            switch::SwitchEmitter::new(&w, sink, interval, start, cfg.seed),
            host::HostEmitter::new(&w, sink, interval, start, cfg.seed),
            app::AppEmitter::new(&w, sink, cfg.seed),
        )
    };
    let mut t0 = start;
    while t0 < run.end {
        let t1 = (t0 + interval).min(run.end);
        for job in jobs.iter_mut() {
            job.advance_until(t1 + lookahead, run.plan, run.pool);
        }
        let w = run.world(jobs);
        gpu.tick(&w, t0, sink)?;
        nic.tick(&w, t0, sink)?;
        switch.tick(&w, t0, sink)?;
        host.tick(&w, t0, sink)?;
        app.tick(&w, t0, t1, sink)?;
        sync.advance(t1, run.hosts, run.clocks)?;
        for job in jobs.iter_mut() {
            job.prune(t0 - interval);
        }
        t0 = t1;
    }
    Ok(())
}

fn write_json<T: serde::Serialize>(path: &Path, value: &T) -> Result<(), SimError> {
    let file = File::create(path).map_err(|source| SimError::Io { path: path.to_path_buf(), source })?;
    let mut w = std::io::BufWriter::new(file);
    serde_json::to_writer_pretty(&mut w, value)
        .map_err(|source| SimError::Json { path: path.to_path_buf(), source })?;
    std::io::Write::flush(&mut w).map_err(|source| SimError::Io { path: path.to_path_buf(), source })
}
