//! A second scenario generator, written independently of `lockstep simulate` (it shares no code
//! with the simulator's world, workload, fault or emitter modules) to evaluate the diagnosis on
//! data it was not tuned on.
//!
//! Its own dynamics: a synchronous job whose step is `max over ranks (loader wait + compute) +
//! all-reduce transfer`, where the loader needs `fetch = base × pool latency × node CPU
//! contention` per batch and hides it behind half of the compute; collective time per rank is
//! the time it waited for the last rank plus the transfer. Faults are time windows (transient,
//! recurring or persistent) of multiplicative effects. It writes directly into a [`Store`](lockstep_engine::Store):
//! `topology.json`, `jobs.json`, the samples stamped by each host's skewed (and possibly
//! stepping) clock, and chrony-like offset observations from which the store fits its clock
//! models.
//!
//! Randomised per seed ([`IndependentConfig::draw`] and [`generate`]): label conventions (NCCL
//! Inspector with or without `rank`, per-rank or per-node loader metrics, dcgm-exporter with
//! `UUID`, `GPU5`-style indices, Kubernetes `pod` labels, a Prometheus scrape `job` label); the
//! scrape interval of each exporter (1–15 s, independently); 4–64 nodes; the fault's shape
//! (persistent, transient from 30 s, or recurring bursts), onset and magnitude (the step-time
//! rise it causes, from 12 % — just above the diagnosis's 10 % threshold — to 80 %); one missing
//! exporter (a domain's series absent) that the truth does not depend on; other jobs sharing
//! the storage pool and the fabric leaves with their own traffic, step times and collectives
//! (labelled with their own job ids), some with slowdowns or write bursts of their own; every
//! host's clock offset (±5 s) and, on some runs, one host's clock stepping mid-run; a
//! red-herring NIC with a steady error trickle; and, in every run, a benign drift of the pace
//! (a slow swing of ±0.3–2.5 % and a trend of up to ±2 % in the compute time, and an
//! autocorrelated wander of 3–10 % in each node's input fetch time), so that healthy runs are
//! not flat. [`Situation::TwoFaults`] injects two concurrent faults of different kinds.
//! [`Band::Hard`] draws runs that are meant to be diagnosed wrong some of the time (faults at
//! and below the detection limit, 10–30 s blips, coarse scrapes, concurrent faults 10–60 s
//! apart, several exporters absent), to measure whether the confidence is calibrated; the
//! default band's draws do not depend on it.
//!
//! Layout: `scenario.rs` draws a run from its seed ([`generate`]: conventions, intervals, hosts,
//! faults, the truth), `dynamics.rs` holds the fault effects, shapes and host clocks,
//! `documents.rs` writes the topology, the jobs and the clock observations, `steps.rs` the
//! applications' series and `scrapes.rs` the exporters' series; `rand.rs` is the random source.

mod documents;
mod dynamics;
mod rand;
mod scenario;
mod scrapes;
mod steps;

pub use scenario::generate;

use rand::Rand;

/// Start of every generated run: 2026-05-04T12:00:00Z.
pub const START_NS: i64 = 1_777_896_000_000_000_000;
const GPUS: usize = 8;
const NICS: usize = 2;
const JOB: &str = "train-a";
const SLURM_ID: &str = "48213";
const OTHER: &str = "batch-b";
const NEIGHBOUR: &str = "eval-c";
const NEIGHBOUR_SLURM_ID: &str = "48377";
const POOL: &str = "weka-1";

/// The situations of the evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Situation {
    /// No fault.
    #[default]
    Healthy,
    /// Another job floods the shared pool with checkpoint writes (30 s to persistent, or recurring).
    StorageStorm,
    /// CPU contention on one node starves that node's data loaders.
    LoaderStarvation,
    /// A bad cable on one host NIC port (persistent, transient or flapping).
    LinkErrors,
    /// One GPU overheats and throttles.
    Thermal,
    /// A degraded storage server, diagnosed with a window that starts inside the slowdown.
    InsideSlowPeriod,
    /// A storage storm on a store without step-time series (found on the collective time).
    MissingStepTime,
    /// Two concurrent faults of different kinds (storm, loader starvation, link errors,
    /// thermal), the second starting 60–180 s after the first while it lasts.
    TwoFaults,
}

impl Situation {
    /// Every situation.
    pub const ALL: [Situation; 8] = [
        Situation::Healthy,
        Situation::StorageStorm,
        Situation::LoaderStarvation,
        Situation::LinkErrors,
        Situation::Thermal,
        Situation::InsideSlowPeriod,
        Situation::MissingStepTime,
        Situation::TwoFaults,
    ];

    /// Name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Situation::Healthy => "healthy",
            Situation::StorageStorm => "storage storm (transient, recurring or persistent)",
            Situation::LoaderStarvation => "node loader starvation (rank/gpu labels)",
            Situation::LinkErrors => "link errors (persistent, transient or flapping)",
            Situation::Thermal => "thermal throttle",
            Situation::InsideSlowPeriod => "window inside the slow period",
            Situation::MissingStepTime => "missing step time",
            Situation::TwoFaults => "two concurrent faults",
        }
    }
}

/// The time shape of a fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// From the onset to the end of the run.
    Persistent,
    /// One window of 30 s to 5 min.
    Transient,
    /// Bursts of 30–90 s separated by 60–180 s.
    Recurring,
}

/// An exporter whose series can be absent from a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exporter {
    /// dcgm-exporter (GPU activity, temperature, throttle reasons).
    Dcgm,
    /// node_exporter's CPU pressure.
    NodeCpu,
    /// The InfiniBand port counters.
    Infiniband,
    /// The storage servers' disk times.
    StorageServers,
    /// The application's data-loader wait.
    LoaderWait,
}

impl Exporter {
    fn name(self) -> &'static str {
        match self {
            Exporter::Dcgm => "dcgm",
            Exporter::NodeCpu => "node cpu",
            Exporter::Infiniband => "infiniband",
            Exporter::StorageServers => "storage servers",
            Exporter::LoaderWait => "loader wait",
        }
    }
}

/// Parts of a run that are otherwise drawn per seed, fixed (for tests of one behaviour).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Fixed {
    /// The fault's shape.
    pub shape: Option<Shape>,
    /// The step-time rise the fault causes (0.3 = +30 %).
    pub magnitude: Option<f64>,
    /// No missing exporter.
    pub all_exporters: bool,
    /// No clock step.
    pub no_clock_step: bool,
    /// One scrape interval (s) for every exporter.
    pub every_s: Option<u32>,
    /// No benign pace drift: step times without a fault keep one level apart from i.i.d. noise
    /// and the job's checkpoints (the generator before the drift existed; `Wobble` in
    /// `dynamics.rs`).
    pub steady_pace: bool,
}

/// The band of difficulty a run is drawn from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Band {
    /// The evaluation's default draws (see the module documentation).
    #[default]
    Default,
    /// Runs made to be diagnosed wrong some of the time, to measure whether the confidence is
    /// calibrated: magnitudes at and below the detection limit (+3–20 %, half of them at most
    /// +12 %), 40 % of single faults 10–30 s blips, scrape intervals 5–15 s, two concurrent
    /// faults 10–60 s apart, 0–3 exporters absent. Its own random streams: hard-band seed `s`
    /// is another run than default-band seed `s`.
    Hard,
}

impl Band {
    /// `hard` for the hard band, anything else the default band.
    pub fn parse(s: &str) -> Band {
        if s.trim().eq_ignore_ascii_case("hard") { Band::Hard } else { Band::Default }
    }
}

/// What to generate.
#[derive(Debug, Clone, Default)]
pub struct IndependentConfig {
    /// The situation.
    pub situation: Situation,
    /// Seed.
    pub seed: u64,
    /// Nodes of the job (8 GPUs each).
    pub nodes: usize,
    /// Length in minutes.
    pub minutes: u32,
    /// What not to draw.
    pub fixed: Fixed,
    /// The band of difficulty.
    pub band: Band,
}

impl IndependentConfig {
    /// A configuration with the cluster size and run length drawn from the seed: mostly 4–16
    /// nodes for 12–20 min, sometimes 17–32 nodes (10–14 min), rarely 33–64 nodes (8–10 min,
    /// to keep the evaluation's run time reasonable).
    pub fn draw(situation: Situation, seed: u64) -> IndependentConfig {
        IndependentConfig::draw_in(situation, seed, Band::Default)
    }

    /// [`IndependentConfig::draw`] in a band: the hard band draws its size from a stream of its
    /// own (same proportions).
    pub fn draw_in(situation: Situation, seed: u64, band: Band) -> IndependentConfig {
        let mut rng = Rand::new(seed, if band == Band::Hard { 998 } else { 997 });
        let u = rng.unit();
        let (nodes, minutes) = if u < 0.75 {
            (4 + rng.below(13), 12 + rng.below(9) as u32)
        } else if u < 0.92 {
            (17 + rng.below(16), 10 + rng.below(5) as u32)
        } else {
            (33 + rng.below(32), 8 + rng.below(3) as u32)
        };
        IndependentConfig { situation, seed, nodes, minutes, fixed: Fixed::default(), band }
    }
}

/// What was injected, and the window to diagnose.
#[derive(Debug, Clone, PartialEq)]
pub struct IndependentTruth {
    /// The situation.
    pub situation: Situation,
    /// The job to diagnose.
    pub job: String,
    /// Expected status (`slowdown`, `healthy`, `slow_from_start`).
    pub status: &'static str,
    /// Root-cause domain (`none` when healthy or without verdict); with two faults, the one
    /// whose onset is earlier.
    pub domain: &'static str,
    /// Root-cause entity (empty when healthy or without verdict); with two faults, the earlier.
    pub entity: String,
    /// Every injected fault as `(domain, entity)`, earliest onset first (two with two faults).
    pub faults: Vec<(&'static str, String)>,
    /// Fault episodes `[start, end)` (reference ns; end None = persistent).
    pub episodes: Vec<(i64, Option<i64>)>,
    /// Window to diagnose.
    pub from: i64,
    /// Window end.
    pub to: i64,
    /// The step-time rise the (first) fault was scaled to cause (0 when healthy).
    pub magnitude: f64,
    /// Label convention, intervals, shape, missing exporter, clock step (for reports).
    pub convention: String,
}
