//! A second scenario generator, written independently of `lockstep simulate` (it shares no code
//! with the simulator's world, workload, fault or emitter modules) to evaluate the diagnosis on
//! data it was not tuned on.
//!
//! Its own dynamics: a synchronous job whose step is `max over ranks (loader wait + compute) +
//! all-reduce transfer`, where the loader needs `fetch = base × pool latency × node CPU
//! contention` per batch and hides it behind half of the compute; collective time per rank is
//! the time it waited for the last rank plus the transfer. Faults are time windows (transient,
//! recurring or persistent) of multiplicative effects. It writes directly into a [`Store`]:
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
//! host's clock offset (±5 s) and, on some runs, one host's clock stepping mid-run; and a
//! red-herring NIC with a steady error trickle. [`Situation::TwoFaults`] injects two concurrent
//! faults of different kinds.

use lockstep_engine::Store;
use lockstep_engine::clock::OffsetObservation;
use lockstep_engine::model::{SEC, SeriesKey, WriteBatch};

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
}

impl IndependentConfig {
    /// A configuration with the cluster size and run length drawn from the seed: mostly 4–16
    /// nodes for 12–20 min, sometimes 17–32 nodes (10–14 min), rarely 33–64 nodes (8–10 min,
    /// to keep the evaluation's run time reasonable).
    pub fn draw(situation: Situation, seed: u64) -> IndependentConfig {
        let mut rng = Rand::new(seed, 997);
        let u = rng.unit();
        let (nodes, minutes) = if u < 0.75 {
            (4 + rng.below(13), 12 + rng.below(9) as u32)
        } else if u < 0.92 {
            (17 + rng.below(16), 10 + rng.below(5) as u32)
        } else {
            (33 + rng.below(32), 8 + rng.below(3) as u32)
        };
        IndependentConfig { situation, seed, nodes, minutes, fixed: Fixed::default() }
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

/// A small, self-contained random source (xorshift64* seeded by splitmix64).
struct Rand(u64);

impl Rand {
    fn new(seed: u64, stream: u64) -> Rand {
        let mut z = seed.wrapping_add(stream.wrapping_mul(0x9E37_79B9_7F4A_7C15)).wrapping_add(0x632B_E59B_D9B4_E019);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Rand((z ^ (z >> 31)) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }
    fn below(&mut self, n: usize) -> usize {
        (self.unit() * n as f64) as usize % n.max(1)
    }
    fn gauss(&mut self) -> f64 {
        let u = self.unit().max(1e-12);
        let v = self.unit();
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
    fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }
    fn secs(&mut self, lo: f64, hi: f64) -> i64 {
        (self.range(lo, hi) * 1e9) as i64
    }
}

/// Label conventions of one run.
#[derive(Debug, Clone, Copy)]
struct Conventions {
    nccl_rank: bool,
    per_node_loader: bool,
    gpu_prefix: bool,
    pods: bool,
}

/// Fault windows: a multiplicative effect active in each `[start, end)`, ramped over `ramp` s.
#[derive(Debug, Clone, Default)]
struct Effect {
    windows: Vec<(i64, i64)>,
    ramp_s: f64,
    /// How much the effect multiplies its quantity at full strength (minus one).
    gain: f64,
    /// The step-time rise it was scaled to cause.
    magnitude: f64,
}

impl Effect {
    /// 0..1 strength at `t`.
    fn at(&self, t: i64) -> f64 {
        if self.windows.is_empty() {
            return 0.0;
        }
        self.windows
            .iter()
            .map(|&(a, b)| {
                if t < a || t >= b {
                    return 0.0;
                }
                let r = (self.ramp_s * 1e9).min((b - a) as f64 / 4.0).max(1.0);
                (((t - a) as f64 / r).min(1.0)).min(((b - t) as f64 / r * 2.0).min(1.0))
            })
            .fold(0.0, f64::max)
    }

    /// `1 + gain × strength`.
    fn mult(&self, t: i64) -> f64 {
        1.0 + self.gain * self.at(t)
    }

    fn onset(&self) -> i64 {
        self.windows.first().map_or(i64::MAX, |w| w.0)
    }
}

/// A host's clock: a constant offset, and possibly one step.
#[derive(Debug, Clone, Copy)]
struct HostClock {
    offset: i64,
    step: Option<(i64, i64)>,
}

impl HostClock {
    /// `local − reference` at reference time `t`.
    fn offset_at(&self, t: i64) -> i64 {
        match self.step {
            Some((at, jump)) if t >= at => self.offset + jump,
            _ => self.offset,
        }
    }

    fn local(&self, t: i64) -> i64 {
        t + self.offset_at(t)
    }
}

/// The kinds of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Storm,
    Cpu,
    Link,
    Heat,
    Server,
}

/// Windows of a fault of `shape` from `onset`, ending before `end` (persistent: at `end`).
fn windows(rng: &mut Rand, shape: Shape, onset: i64, end: i64) -> Vec<(i64, i64)> {
    match shape {
        Shape::Persistent => vec![(onset, end)],
        Shape::Transient => {
            // Log-uniform 30 s – 5 min, ending at least a minute before the run does.
            let dur = (rng.range(30f64.ln(), 300f64.ln()).exp() * 1e9) as i64;
            vec![(onset, (onset + dur).min(end - 60 * SEC).max(onset + 30 * SEC))]
        }
        Shape::Recurring => {
            let mut out = Vec::new();
            let mut t = onset;
            while t < end - 90 * SEC || out.len() < 2 {
                let d = rng.secs(30.0, 90.0);
                out.push((t, (t + d).min(end)));
                t += d + rng.secs(60.0, 180.0);
                if t >= end - 30 * SEC {
                    break;
                }
            }
            out
        }
    }
}

/// A shape for `kind`, drawn.
fn draw_shape(rng: &mut Rand, kind: Kind) -> Shape {
    let u = rng.unit();
    let (persistent, transient) = match kind {
        Kind::Storm => (0.15, 0.6),
        Kind::Cpu => (0.4, 0.35),
        Kind::Link => (0.35, 0.3),
        Kind::Heat => (0.5, 0.3),
        Kind::Server => (1.0, 0.0),
    };
    if u < persistent {
        Shape::Persistent
    } else if u < persistent + transient {
        Shape::Transient
    } else {
        Shape::Recurring
    }
}

/// The step-time rise of a fault: a third of the runs near the detection limit (+12–20 %),
/// the rest +20–80 %.
fn draw_magnitude(rng: &mut Rand) -> f64 {
    if rng.chance(0.35) { rng.range(0.12, 0.2) } else { rng.range(0.2, 0.8) }
}

/// The run, drawn from the seed.
struct Plan {
    conv: Conventions,
    /// Scrape intervals (ns): dcgm-exporter, node_exporter (CPU and InfiniBand), storage.
    dcgm_every: i64,
    node_every: i64,
    storage_every: i64,
    missing: Option<Exporter>,
    clocks: Vec<HostClock>,
    clock_step: Option<(usize, i64, i64)>,
    storm: Effect,
    server: Effect,
    cpu: Effect,
    link: Effect,
    heat: Effect,
    /// The neighbour job's own slowdown (a red herring in the store) and the other job's
    /// harmless write bursts.
    neighbour_slow: Effect,
    other_burst: Effect,
    cpu_node: usize,
    heat_gpu: (usize, usize),
    link_port: (usize, usize),
    red_nic: (usize, usize),
    shapes: Vec<(Kind, Shape)>,
}

/// Generates one run into `store` (which should be empty) and returns its truth.
pub fn generate(store: &Store, cfg: &IndependentConfig) -> lockstep_engine::Result<IndependentTruth> {
    let mut rng = Rand::new(cfg.seed, cfg.situation as u64 + 11);
    let nodes = cfg.nodes.max(2);
    let start = START_NS;
    let end = start + i64::from(cfg.minutes.max(6)) * 60 * SEC;
    let span = end - start;
    let conv = Conventions {
        nccl_rank: rng.chance(0.4),
        per_node_loader: rng.chance(0.3),
        gpu_prefix: rng.chance(0.5),
        pods: rng.chance(0.5),
    };
    let conv = match cfg.situation {
        // The failure class of the issue: loader by rank, NCCL by GPU only.
        Situation::LoaderStarvation => Conventions { nccl_rank: false, per_node_loader: false, ..conv },
        _ => conv,
    };
    let mut every = || (1 + rng.below(15) as i64) * SEC;
    let drawn = (every(), every(), every());
    let (dcgm_every, node_every, storage_every) = match cfg.fixed.every_s {
        Some(s) => (i64::from(s.max(1)) * SEC, i64::from(s.max(1)) * SEC, i64::from(s.max(1)) * SEC),
        None => drawn,
    };
    let host = |n: usize| format!("gn{:03}", n + 1);
    let hosts: Vec<String> = (0..nodes).map(host).collect();
    let aux = "gn-aux".to_string();
    let neighbour_nodes = 1 + rng.below(2);
    let neighbours: Vec<String> = (0..neighbour_nodes).map(|i| format!("gc{:02}", i + 1)).collect();
    let servers: Vec<String> = (0..3).map(|i| format!("wk{i}")).collect();
    // Clocks of the job's nodes, the other job's node, the neighbour's nodes.
    let n_clocks = nodes + 1 + neighbour_nodes;
    let mut clocks: Vec<HostClock> =
        (0..n_clocks).map(|_| HostClock { offset: rng.secs(-5.0, 5.0), step: None }).collect();
    let step_host = rng.below(n_clocks);
    let step_at = (start + (span as f64 * rng.range(0.2, 0.6)) as i64).clamp(start + 60 * SEC, end - 5 * 60 * SEC);
    let jump = rng.secs(0.3, 4.0) * if rng.chance(0.5) { 1 } else { -1 };
    let clock_step = (rng.chance(0.4) && !cfg.fixed.no_clock_step).then_some((step_host, step_at, jump));
    if let Some((h, at, j)) = clock_step {
        clocks[h].step = Some((at, j));
    }

    // Base timings of the job.
    let base_compute = rng.range(0.45, 0.8);
    let base_fetch = rng.range(0.08, 0.2);
    let base_xfer = rng.range(0.12, 0.3);
    let step0 = base_compute + base_xfer;
    // The gain that makes a fault raise the step time by `m`.
    let input_gain = |m: f64| ((0.5 * base_compute + m * step0) / base_fetch - 1.0).max(0.5);
    let gain = |kind: Kind, m: f64| match kind {
        Kind::Storm | Kind::Server | Kind::Cpu => input_gain(m),
        Kind::Link => m * step0 / base_xfer,
        // The throttled GPU must also outrun the slowest healthy rank of each step (about three
        // standard deviations of the 1.5 % compute noise) before the step slows.
        Kind::Heat => (m * step0 + 0.045 * base_compute) / base_compute,
    };

    // The fault(s).
    let mut effects: [Effect; 5] = Default::default();
    let ramps = [8.0, 20.0, 15.0, 2.0, 40.0];
    let slot = |k: Kind| match k {
        Kind::Storm => 0,
        Kind::Server => 1,
        Kind::Cpu => 2,
        Kind::Link => 3,
        Kind::Heat => 4,
    };
    let cpu_node = rng.below(nodes);
    let heat_gpu = (rng.below(nodes), rng.below(GPUS));
    let link_port = (rng.below(nodes), rng.below(NICS));
    let onset = start + (span as f64 * rng.range(0.3, 0.5)) as i64;
    let first_shape = draw_shape(&mut rng, Kind::Storm);
    let mut kinds: Vec<(Kind, i64, Shape)> = match cfg.situation {
        Situation::Healthy => Vec::new(),
        Situation::StorageStorm | Situation::MissingStepTime => vec![(Kind::Storm, onset, first_shape)],
        Situation::LoaderStarvation => vec![(Kind::Cpu, onset, draw_shape(&mut rng, Kind::Cpu))],
        Situation::LinkErrors => vec![(Kind::Link, onset, draw_shape(&mut rng, Kind::Link))],
        Situation::Thermal => vec![(Kind::Heat, onset, draw_shape(&mut rng, Kind::Heat))],
        Situation::InsideSlowPeriod => vec![(Kind::Server, start + span / 4, Shape::Persistent)],
        Situation::TwoFaults => {
            let pool = [Kind::Storm, Kind::Cpu, Kind::Link, Kind::Heat];
            let a = rng.below(4);
            let b = (a + 1 + rng.below(3)) % 4;
            let second = onset + rng.secs(60.0, 180.0);
            vec![(pool[a], onset, Shape::Persistent), (pool[b], second, Shape::Persistent)]
        }
    };
    if let Some(s) = cfg.fixed.shape
        && let Some(first) = kinds.first_mut()
        && cfg.situation != Situation::InsideSlowPeriod
    {
        first.2 = s;
    }
    let mut shapes = Vec::new();
    for (i, &(kind, at, shape)) in kinds.iter().enumerate() {
        let m = match (i, cfg.fixed.magnitude) {
            (0, Some(m)) => m,
            _ => draw_magnitude(&mut rng),
        };
        let e = &mut effects[slot(kind)];
        e.ramp_s = ramps[slot(kind)];
        e.magnitude = m;
        e.gain = gain(kind, m);
        e.windows = if cfg.situation == Situation::TwoFaults {
            // Concurrent: the first lasts past the second's onset (it lasts at least 4 min, the
            // second starts at most 3 min later).
            let until = if rng.chance(0.5) { end } else { at + rng.secs(240.0, 420.0) };
            vec![(at, until.min(end))]
        } else {
            windows(&mut rng, shape, at, end)
        };
        let shape = if cfg.situation == Situation::TwoFaults && e.windows.iter().all(|w| w.1 < end) {
            Shape::Transient
        } else {
            shape
        };
        shapes.push((kind, shape));
    }
    kinds.sort_by_key(|k| k.1);
    let [storm, server, cpu, link, heat] = effects;
    // One exporter absent on some runs, never one the truth depends on.
    let needed = |x: Exporter| {
        kinds.iter().any(|(k, _, _)| match k {
            Kind::Storm | Kind::Server => x == Exporter::LoaderWait,
            Kind::Cpu => matches!(x, Exporter::LoaderWait | Exporter::NodeCpu),
            Kind::Link => x == Exporter::Infiniband,
            Kind::Heat => false,
        })
    };
    let candidates: Vec<Exporter> =
        [Exporter::Dcgm, Exporter::NodeCpu, Exporter::Infiniband, Exporter::StorageServers, Exporter::LoaderWait]
            .into_iter()
            .filter(|x| !needed(*x))
            .collect();
    let pick = rng.below(candidates.len());
    let missing = (rng.chance(0.3) && !cfg.fixed.all_exporters).then(|| candidates[pick]);
    // Other jobs: the neighbour slows down on its own (a red herring) and the other job writes
    // harmless bursts to the pool.
    let mut neighbour_slow = Effect { ramp_s: 5.0, gain: rng.range(0.3, 1.0), ..Default::default() };
    if rng.chance(0.5) {
        let at = start + (span as f64 * rng.range(0.1, 0.8)) as i64;
        neighbour_slow.windows.push((at, (at + rng.secs(60.0, 300.0)).min(end)));
    }
    let mut other_burst = Effect { ramp_s: 5.0, gain: rng.range(2.0, 8.0), ..Default::default() };
    if rng.chance(0.5) {
        let at = start + (span as f64 * rng.range(0.1, 0.8)) as i64;
        other_burst.windows.push((at, (at + rng.secs(60.0, 180.0)).min(end)));
    }
    let red_nic = (rng.below(nodes), rng.below(NICS));
    let plan = Plan {
        conv,
        dcgm_every,
        node_every,
        storage_every,
        missing,
        clocks,
        clock_step,
        storm,
        server,
        cpu,
        link,
        heat,
        neighbour_slow,
        other_burst,
        cpu_node,
        heat_gpu,
        link_port,
        red_nic,
        shapes,
    };

    let fault_of = |kind: Kind| -> (&'static str, String) {
        match kind {
            Kind::Storm | Kind::Server => ("storage", POOL.to_string()),
            Kind::Cpu => ("data_loading", hosts[plan.cpu_node].clone()),
            Kind::Link => ("network", format!("{}/mlx5_{}:1", hosts[plan.link_port.0], plan.link_port.1)),
            Kind::Heat => (
                "compute",
                lockstep_engine::metrics::entity::gpu_name(&hosts[plan.heat_gpu.0], &plan.heat_gpu.1.to_string()),
            ),
        }
    };
    let faults: Vec<(&'static str, String)> = kinds.iter().map(|k| fault_of(k.0)).collect();
    let (status, from) = match cfg.situation {
        Situation::Healthy => ("healthy", start),
        Situation::InsideSlowPeriod => {
            let on = start + span / 4;
            ("slow_from_start", on + (span as f64 * rng.range(0.2, 0.35)) as i64)
        }
        _ => ("slowdown", start),
    };
    let (domain, entity) = faults.first().cloned().unwrap_or(("none", String::new()));

    let names = Hosts { job: &hosts, aux: &aux, neighbours: &neighbours, servers: &servers };
    write_documents(store, &names, start, end)?;
    write_clocks(store, &plan, &names, start, end)?;
    write_steps(store, &plan, &mut rng, &hosts, cfg.situation, start, end, base_compute, base_fetch, base_xfer)?;
    write_neighbour(store, &plan, &mut rng, &neighbours, nodes + 1, start, end)?;
    write_scrapes(
        store,
        &plan,
        &mut rng,
        &hosts,
        &neighbours,
        &servers,
        start,
        end,
        (base_compute, base_fetch, base_xfer),
    )?;

    let episodes = [&plan.storm, &plan.server, &plan.cpu, &plan.link, &plan.heat]
        .iter()
        .flat_map(|e| e.windows.iter().map(|&(a, b)| (a, (b < end).then_some(b))))
        .collect();
    let magnitude = kinds
        .first()
        .map_or(0.0, |k| [&plan.storm, &plan.server, &plan.cpu, &plan.link, &plan.heat][slot(k.0)].magnitude);
    let shapes = plan
        .shapes
        .iter()
        .map(|(k, s)| {
            let e = [&plan.storm, &plan.server, &plan.cpu, &plan.link, &plan.heat][slot(*k)];
            let total: i64 = e.windows.iter().map(|w| w.1 - w.0).sum();
            let onset = (e.onset() - start) / SEC;
            format!(
                "{k:?} {s:?} at +{onset} s, {} window(s) {} s, +{:.0} %",
                e.windows.len(),
                total / SEC,
                100.0 * e.magnitude
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    Ok(IndependentTruth {
        situation: cfg.situation,
        job: JOB.to_string(),
        status,
        domain,
        entity,
        faults,
        episodes,
        from,
        to: end,
        magnitude,
        convention: format!(
            "{nodes} nodes, {} min | nccl {} | loader {} | dcgm gpu {}{} | every {}/{}/{} s | {} | missing {} | clock step {}",
            cfg.minutes,
            if conv.nccl_rank { "rank+gpu" } else { "gpu only" },
            if conv.per_node_loader { "per node" } else { "per rank" },
            if conv.gpu_prefix { "GPU<n>" } else { "<n>" },
            if conv.pods { " + pod" } else { "" },
            plan.dcgm_every / SEC,
            plan.node_every / SEC,
            plan.storage_every / SEC,
            if shapes.is_empty() { "no fault".to_string() } else { shapes },
            plan.missing.map_or("none", Exporter::name),
            plan.clock_step.map_or("none".to_string(), |(h, at, j)| format!(
                "host #{h} at +{} s by {:+.1} s",
                (at - start) / SEC,
                j as f64 / 1e9
            )),
        ),
    })
}

/// The hosts of a run: the job's nodes, the other job's node, the neighbour job's nodes and
/// the storage servers.
#[derive(Clone, Copy)]
struct Hosts<'a> {
    job: &'a [String],
    aux: &'a str,
    neighbours: &'a [String],
    servers: &'a [String],
}

/// `topology.json` and `jobs.json`.
fn write_documents(store: &Store, names: &Hosts<'_>, start: i64, end: i64) -> lockstep_engine::Result<()> {
    let Hosts { job: hosts, aux, neighbours, servers } = *names;
    let nic_json = |n: usize| {
        (0..NICS)
            .map(|k| {
                format!(
                    r#"{{"device":"mlx5_{k}","port":1,"fabric":"infiniband","switch":"lf{}","switch_port":{}}}"#,
                    k,
                    n + 1
                )
            })
            .collect::<Vec<_>>()
            .join(",")
    };
    let mut node_docs: Vec<String> = hosts
        .iter()
        .enumerate()
        .map(|(n, h)| format!(r#"{{"name":"{h}","gpus":{GPUS},"nics":[{}]}}"#, nic_json(n)))
        .collect();
    node_docs.push(format!(r#"{{"name":"{aux}","gpus":{GPUS},"nics":[{}]}}"#, nic_json(hosts.len())));
    for (i, h) in neighbours.iter().enumerate() {
        node_docs.push(format!(r#"{{"name":"{h}","gpus":{GPUS},"nics":[{}]}}"#, nic_json(hosts.len() + 1 + i)));
    }
    let leaves: Vec<String> = (0..NICS)
        .map(|k| format!(r#"{{"name":"lf{k}","tier":"leaf","links":[{{"port":200,"peer":"sp0","peer_port":{k}}}]}}"#))
        .collect();
    let servers_json: Vec<String> = servers
        .iter()
        .enumerate()
        .map(|(i, s)| {
            format!(
                r#"{{"name":"{s}","nics":[{{"device":"mlx5_0","port":1,"fabric":"infiniband","switch":"lf0","switch_port":{}}}]}}"#,
                150 + i
            )
        })
        .collect();
    let topology = format!(
        r#"{{"nodes":[{}],"switches":[{},{{"name":"sp0","tier":"spine"}}],"storage_pools":[{{"name":"{POOL}","kind":"weka","servers":[{}]}}]}}"#,
        node_docs.join(","),
        leaves.join(","),
        servers_json.join(",")
    );
    store.write_document("topology.json", &topology)?;
    let list = |hs: &[String]| hs.iter().map(|h| format!("\"{h}\"")).collect::<Vec<_>>().join(",");
    let jobs = format!(
        r#"[{{"job":"{JOB}","nodes":[{}],"start":{start},"end":{end},"storage_pool":"{POOL}","slurm_job_id":"{SLURM_ID}"}},
            {{"job":"{OTHER}","nodes":["{aux}"],"start":{start},"end":{end},"storage_pool":"{POOL}"}},
            {{"job":"{NEIGHBOUR}","nodes":[{}],"start":{start},"end":{end},"storage_pool":"{POOL}","slurm_job_id":"{NEIGHBOUR_SLURM_ID}"}}]"#,
        list(hosts),
        list(neighbours)
    );
    store.write_document("jobs.json", &jobs).map(|_| ())
}

/// Chrony-like offset observations every 30 s (±1 ms), following each host's clock steps.
fn write_clocks(store: &Store, plan: &Plan, names: &Hosts<'_>, start: i64, end: i64) -> lockstep_engine::Result<()> {
    let Hosts { job: hosts, aux, neighbours, servers } = *names;
    let mut obs = Vec::new();
    let all_hosts =
        hosts.iter().map(String::as_str).chain(std::iter::once(aux)).chain(neighbours.iter().map(String::as_str));
    for (i, h) in all_hosts.enumerate() {
        let c = plan.clocks[i];
        let mut t = start - 120 * SEC;
        while t <= end + 120 * SEC {
            obs.push(OffsetObservation {
                host: h.to_string(),
                local_time: c.local(t),
                offset_ns: c.offset_at(t),
                uncertainty_ns: 1_000_000,
            });
            t += 30 * SEC;
        }
    }
    for s in servers {
        obs.push(OffsetObservation { host: s.clone(), local_time: start, offset_ns: 0, uncertainty_ns: 1_000_000 });
        obs.push(OffsetObservation { host: s.clone(), local_time: end, offset_ns: 0, uncertainty_ns: 1_000_000 });
    }
    store.with_clocks(|r| {
        r.add_offsets(&obs)?;
        r.refit().map(|_| ())
    })
}

fn key(metric: &str, host: &str, labels: &[(&str, String)]) -> SeriesKey {
    SeriesKey::new(
        metric,
        std::iter::once(("host", host.to_string())).chain(labels.iter().map(|(k, v)| (*k, v.clone()))),
    )
}

/// Writes and empties `batch` when it is large (or `force`).
fn flush(store: &Store, batch: &mut WriteBatch, force: bool) -> lockstep_engine::Result<()> {
    if (force && !batch.is_empty()) || batch.len() > 200_000 {
        store.write(batch)?;
        *batch = WriteBatch::default();
    }
    Ok(())
}

/// The job's steps: per-rank step time, collective time and data-loader wait.
#[allow(clippy::too_many_arguments)]
fn write_steps(
    store: &Store,
    plan: &Plan,
    rng: &mut Rand,
    hosts: &[String],
    situation: Situation,
    start: i64,
    end: i64,
    base_compute: f64,
    base_fetch: f64,
    base_xfer: f64,
) -> lockstep_engine::Result<()> {
    let conv = plan.conv;
    let nodes = hosts.len();
    let ranks = nodes * GPUS;
    let app = |r: usize| vec![("job", JOB.to_string()), ("rank", r.to_string())];
    let nccl = |r: usize| {
        let mut l = vec![
            ("gpu", (r % GPUS).to_string()),
            ("slurm_job_id", SLURM_ID.to_string()),
            ("collective", "AllReduce".to_string()),
        ];
        if conv.nccl_rank {
            l.push(("rank", r.to_string()));
        }
        l
    };
    let step_keys: Vec<SeriesKey> =
        (0..ranks).map(|r| key("train_step_duration_seconds", &hosts[r / GPUS], &app(r))).collect();
    let wait_keys: Vec<SeriesKey> = if conv.per_node_loader {
        (0..nodes).map(|n| key("dataloader_wait_seconds", &hosts[n], &[("job", JOB.to_string())])).collect()
    } else {
        (0..ranks).map(|r| key("dataloader_wait_seconds", &hosts[r / GPUS], &app(r))).collect()
    };
    let exec_keys: Vec<SeriesKey> =
        (0..ranks).map(|r| key("nccl_collective_exec_time_microseconds", &hosts[r / GPUS], &nccl(r))).collect();
    let with_waits = plan.missing != Some(Exporter::LoaderWait);
    let local = |n: usize, t: i64| plan.clocks[n].local(t);
    let mut batch = WriteBatch::default();
    let mut t = start + SEC;
    let mut step_index = 0u64;
    let mut waits = vec![0.0; ranks];
    let mut arrive = vec![0.0; ranks];
    while t < end {
        let pool_mult = plan.storm.mult(t).max(plan.server.mult(t));
        let cpu_mult = plan.cpu.mult(t);
        let heat_mult = plan.heat.mult(t);
        let xfer = base_xfer * plan.link.mult(t) * (1.0 + 0.03 * rng.gauss()).max(0.5);
        for r in 0..ranks {
            let n = r / GPUS;
            let g = r % GPUS;
            let slow_gpu = if (n, g) == plan.heat_gpu { heat_mult } else { 1.0 };
            let c = base_compute * slow_gpu * (1.0 + 0.015 * rng.gauss()).max(0.5);
            let cpu = if n == plan.cpu_node { cpu_mult } else { 1.0 };
            let fetch = base_fetch * pool_mult * cpu * (1.0 + 0.1 * rng.gauss()).max(0.2);
            let w = (fetch - 0.5 * c).max(0.0) + 0.002 * rng.unit();
            waits[r] = w;
            arrive[r] = w + c;
        }
        // A checkpoint of the job every 5 minutes costs one long step.
        let ckpt = if step_index > 0 && step_index.is_multiple_of(300) { rng.range(2.0, 4.0) } else { 0.0 };
        let last = arrive.iter().copied().fold(0.0, f64::max);
        let dur = last + xfer + ckpt;
        let t_end = t + (dur * 1e9) as i64;
        for r in 0..ranks {
            let n = r / GPUS;
            let done = t_end - (ckpt * 1e9) as i64;
            let exec = (last - arrive[r] + xfer) * 1e6 + rng.range(5.0, 40.0);
            batch.push(exec_keys[r].clone(), local(n, done), exec.round());
            if situation != Situation::MissingStepTime {
                let logged = t_end + (rng.range(0.5, 4.0) * 1e6) as i64;
                batch.push(step_keys[r].clone(), local(n, logged), (dur * 1e6).round() / 1e6);
            }
            if with_waits && !conv.per_node_loader {
                batch.push(wait_keys[r].clone(), local(n, t + (waits[r] * 1e9) as i64), (waits[r] * 1e5).round() / 1e5);
            }
        }
        if with_waits && conv.per_node_loader {
            for n in 0..nodes {
                let w = waits[n * GPUS..(n + 1) * GPUS].iter().copied().fold(0.0, f64::max);
                batch.push(wait_keys[n].clone(), local(n, t + (w * 1e9) as i64), (w * 1e5).round() / 1e5);
            }
        }
        t = t_end;
        step_index += 1;
        flush(store, &mut batch, false)?;
    }
    flush(store, &mut batch, true)
}

/// The neighbour job on the same leaves and pool: its own steps, collectives and loader waits,
/// labelled with its own job and Slurm ids (clocks from index `clock0`).
fn write_neighbour(
    store: &Store,
    plan: &Plan,
    rng: &mut Rand,
    neighbours: &[String],
    clock0: usize,
    start: i64,
    end: i64,
) -> lockstep_engine::Result<()> {
    let ranks = neighbours.len() * GPUS;
    let mut batch = WriteBatch::default();
    let base = rng.range(0.6, 1.2);
    let mut t = start + SEC;
    while t < end {
        let dur = base * plan.neighbour_slow.mult(t) * (1.0 + 0.02 * rng.gauss()).max(0.5);
        let t_end = t + (dur * 1e9) as i64;
        for r in 0..ranks {
            let n = r / GPUS;
            let h = &neighbours[n];
            let local = plan.clocks[clock0 + n].local(t_end);
            let app = [("job", NEIGHBOUR.to_string()), ("rank", r.to_string())];
            batch.push(key("train_step_duration_seconds", h, &app), local, (dur * 1e6).round() / 1e6);
            batch.push(key("dataloader_wait_seconds", h, &app), local, (0.01 * rng.unit() * 1e5).round() / 1e5);
            let nccl = [
                ("gpu", (r % GPUS).to_string()),
                ("slurm_job_id", NEIGHBOUR_SLURM_ID.to_string()),
                ("collective", "AllReduce".to_string()),
            ];
            let exec = 0.2 * dur * 1e6 * rng.range(0.9, 1.1);
            batch.push(key("nccl_collective_exec_time_microseconds", h, &nccl), local, exec.round());
        }
        t = t_end;
        flush(store, &mut batch, false)?;
    }
    flush(store, &mut batch, true)
}

/// A counter that grows by a rate, rounded to integers like the exporters' counters.
#[derive(Default)]
struct Counters(std::collections::HashMap<SeriesKey, f64>);

impl Counters {
    fn bump(&mut self, batch: &mut WriteBatch, k: SeriesKey, time: i64, inc: f64) {
        let c = self.0.entry(k.clone()).or_insert(1e6);
        *c += inc.max(0.0);
        batch.push(k, time, c.round());
    }
}

/// The scraped series: dcgm-exporter, node_exporter (CPU pressure, InfiniBand) and the pool,
/// each on its own interval.
#[allow(clippy::too_many_arguments)]
fn write_scrapes(
    store: &Store,
    plan: &Plan,
    rng: &mut Rand,
    hosts: &[String],
    neighbours: &[String],
    servers: &[String],
    start: i64,
    end: i64,
    (base_compute, base_fetch, base_xfer): (f64, f64, f64),
) -> lockstep_engine::Result<()> {
    let conv = plan.conv;
    let nodes = hosts.len();
    let local = |n: usize, t: i64| plan.clocks[n].local(t);
    let mut batch = WriteBatch::default();
    let mut counters = Counters::default();
    let gpu_label = |g: usize| if conv.gpu_prefix { format!("GPU{g}") } else { g.to_string() };
    let scrape = "dcgm-exporter".to_string();
    let dcgm = |n: usize, g: usize| {
        let mut l = vec![
            ("gpu", gpu_label(g)),
            ("UUID", format!("GPU-{:08x}-{:04x}", 0x5eed_0000u32 + n as u32, g)),
            ("job", scrape.clone()),
        ];
        if conv.pods {
            l.push(("pod", format!("{JOB}-worker-{n}")));
            l.push(("namespace", "ml".to_string()));
            l.push(("container", "trainer".to_string()));
        }
        l
    };
    // dcgm-exporter.
    if plan.missing != Some(Exporter::Dcgm) {
        let mut t = start;
        while t < end {
            for (n, name) in hosts.iter().enumerate() {
                let lt = local(n, t + rng.secs(0.0, 0.3));
                for g in 0..GPUS {
                    let busy = (base_compute / (base_compute + base_fetch * 0.3 + base_xfer)).min(0.95);
                    let starve = if n == plan.cpu_node { 1.0 / plan.cpu.mult(t).sqrt() } else { 1.0 };
                    let pool = 1.0 / plan.storm.mult(t).max(plan.server.mult(t)).sqrt();
                    let sm = (busy * starve * pool * (1.0 + 0.02 * rng.gauss())).clamp(0.0, 1.0);
                    let labels = dcgm(n, g);
                    batch.push(key("DCGM_FI_PROF_SM_ACTIVE", name, &labels), lt, (sm * 1000.0).round() / 1000.0);
                    let hot = if (n, g) == plan.heat_gpu { plan.heat.at(t) } else { 0.0 };
                    let temp = 62.0 + 4.0 * rng.unit() + (8.0 + 40.0 * plan.heat.magnitude) * hot;
                    batch.push(key("DCGM_FI_DEV_GPU_TEMP", name, &labels), lt, temp.round());
                    let bits = if hot > 0.5 { 0x20 } else { 0 };
                    batch.push(key("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", name, &labels), lt, f64::from(bits));
                }
            }
            t += plan.dcgm_every;
            flush(store, &mut batch, false)?;
        }
    }
    // node_exporter: CPU pressure and the InfiniBand ports, of the job's and the neighbour's nodes.
    let dt = plan.node_every as f64 / 1e9;
    let mut t = start;
    while t < end {
        for n in 0..nodes + neighbours.len() {
            let (name, clock) = if n < nodes { (&hosts[n], n) } else { (&neighbours[n - nodes], n + 1) };
            let lt = local(clock, t + rng.secs(0.0, 0.3));
            if plan.missing != Some(Exporter::NodeCpu) {
                let starved = if n == plan.cpu_node { (0.3 + 3.0 * plan.cpu.magnitude) * plan.cpu.at(t) } else { 0.0 };
                let cpu_rate = 0.05 + 0.03 * rng.unit() + starved;
                counters.bump(&mut batch, key("node_pressure_cpu_waiting_seconds_total", name, &[]), lt, cpu_rate * dt);
            }
            if plan.missing == Some(Exporter::Infiniband) {
                continue;
            }
            for k in 0..NICS {
                let labels = [("device", format!("mlx5_{k}")), ("port", "1".to_string())];
                let bad = if (n, k) == plan.link_port { plan.link.at(t) } else { 0.0 };
                let red = if (n, k) == plan.red_nic { 0.3 } else { 0.0 };
                let errors = 5.0 + 60.0 * plan.link.magnitude;
                let sym = (red + errors * bad) * dt * rng.range(0.5, 1.5);
                counters.bump(&mut batch, key("node_infiniband_symbol_error_total", name, &labels), lt, sym);
                let rcv = (1.0 + 20.0 * plan.link.magnitude) * bad * dt;
                counters.bump(&mut batch, key("node_infiniband_port_errors_received_total", name, &labels), lt, rcv);
                let job_link = if n < nodes { plan.link.at(t) * plan.link.magnitude } else { 0.0 };
                let wait = (2e5 + 6e6 * job_link) * dt * rng.range(0.8, 1.2);
                counters.bump(&mut batch, key("node_infiniband_port_transmit_wait_total", name, &labels), lt, wait);
                let bytes = 3e9 * dt * rng.range(0.8, 1.2);
                counters.bump(
                    &mut batch,
                    key("node_infiniband_port_data_transmitted_bytes_total", name, &labels),
                    lt,
                    bytes,
                );
            }
        }
        t += plan.node_every;
        flush(store, &mut batch, false)?;
    }
    // The pool (stamped by the first server) and the servers' disks.
    let dt = plan.storage_every as f64 / 1e9;
    let mut t = start;
    while t < end {
        let storm_k = plan.storm.at(t);
        let server_k = plan.server.at(t);
        let lat_mult = plan.storm.mult(t).max(plan.server.mult(t));
        for (q, base) in [("0.5", 0.004), ("0.99", 0.02)] {
            let v = base * lat_mult * (1.0 + 0.08 * rng.gauss()).max(0.3);
            let labels = [("pool", POOL.to_string()), ("quantile", q.to_string())];
            batch.push(key("storage_read_latency_seconds", &servers[0], &labels), t, (v * 1e6).round() / 1e6);
        }
        let other = 1e8 * plan.other_burst.mult(t) + 2.5e10 * storm_k;
        for (job, rate) in [(JOB, 2e9 * (1.0 / lat_mult)), (OTHER, other), (NEIGHBOUR, 5e8)] {
            let k =
                key("storage_write_bytes_total", &servers[0], &[("pool", POOL.to_string()), ("job", job.to_string())]);
            counters.bump(&mut batch, k, t, rate * dt * rng.range(0.9, 1.1));
        }
        if plan.missing != Some(Exporter::StorageServers) {
            for (i, s) in servers.iter().enumerate() {
                let slow = if i == 1 { server_k } else { 0.0 };
                let busy = (0.2 + 0.6 * storm_k + 0.75 * slow) * dt * rng.range(0.9, 1.1);
                let k = key("node_disk_read_time_seconds_total", s, &[("device", "nvme0n1".to_string())]);
                counters.bump(&mut batch, k, t, busy);
            }
        }
        t += plan.storage_every;
        flush(store, &mut batch, false)?;
    }
    flush(store, &mut batch, true)
}
