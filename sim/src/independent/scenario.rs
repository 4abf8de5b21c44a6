//! Drawing a run from its seed: label conventions, scrape intervals, hosts and clocks, the
//! fault(s) with their shape and magnitude, a missing exporter, the other jobs' behaviour; then
//! writing it and describing its truth.

use lockstep_engine::Store;
use lockstep_engine::model::SEC;

use super::documents::{Hosts, write_clocks, write_documents};
use super::dynamics::{Effect, HostClock, Kind, Wobble, draw_magnitude, draw_shape, windows};
use super::rand::Rand;
use super::scrapes::write_scrapes;
use super::steps::{write_neighbour, write_steps};
use super::{Band, Exporter, GPUS, IndependentConfig, IndependentTruth, JOB, NICS, POOL, START_NS, Shape, Situation};

/// Label conventions of one run.
#[derive(Debug, Clone, Copy)]
pub(super) struct Conventions {
    pub(super) nccl_rank: bool,
    pub(super) per_node_loader: bool,
    pub(super) gpu_prefix: bool,
    pub(super) pods: bool,
}

/// The run, drawn from the seed.
pub(super) struct Plan {
    pub(super) conv: Conventions,
    /// Scrape intervals (ns): dcgm-exporter, node_exporter (CPU and InfiniBand), storage.
    pub(super) dcgm_every: i64,
    pub(super) node_every: i64,
    pub(super) storage_every: i64,
    /// Absent exporters (at most one in the default band, up to three in the hard band).
    pub(super) missing: Vec<Exporter>,
    pub(super) clocks: Vec<HostClock>,
    pub(super) clock_step: Option<(usize, i64, i64)>,
    pub(super) storm: Effect,
    pub(super) server: Effect,
    pub(super) cpu: Effect,
    pub(super) link: Effect,
    pub(super) heat: Effect,
    /// The neighbour job's own slowdown (a red herring in the store) and the other job's
    /// harmless write bursts.
    pub(super) neighbour_slow: Effect,
    pub(super) other_burst: Effect,
    pub(super) cpu_node: usize,
    pub(super) heat_gpu: (usize, usize),
    pub(super) link_port: (usize, usize),
    pub(super) red_nic: (usize, usize),
    pub(super) shapes: Vec<(Kind, Shape)>,
    /// The benign drift of the pace (every run, faults or not).
    pub(super) wobble: Wobble,
}

impl Plan {
    /// Whether `x`'s series are absent from the run.
    pub(super) fn lacks(&self, x: Exporter) -> bool {
        self.missing.contains(&x)
    }
}

/// Generates one run into `store` (which should be empty) and returns its truth.
pub fn generate(store: &Store, cfg: &IndependentConfig) -> lockstep_engine::Result<IndependentTruth> {
    // The hard band draws from streams of its own: its seeds are other runs than the default
    // band's, and the default band's draws are exactly what they were before the band existed.
    let hard = cfg.band == Band::Hard;
    let mut rng = Rand::new(cfg.seed, cfg.situation as u64 + if hard { 101 } else { 11 });
    // The benign pace drift has streams of its own (drawn here, and step by step while the
    // steps are written), so that every other draw is what it was before the drift existed.
    let mut calm = Rand::new(cfg.seed, cfg.situation as u64 + if hard { 5101 } else { 5011 });
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
    // Scrape intervals 1–15 s (hard band: coarse, 5–15 s).
    let (every_lo, every_n) = if hard { (5, 11) } else { (1, 15) };
    let mut every = || (every_lo + rng.below(every_n) as i64) * SEC;
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
            // Hard band: the second fault follows within 10–60 s (closer than the diagnosis's
            // one-minute escalation rule can separate).
            let second = onset + if hard { rng.secs(10.0, 60.0) } else { rng.secs(60.0, 180.0) };
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
            _ => draw_magnitude(&mut rng, hard),
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
            let w = windows(&mut rng, shape, at, end);
            // Hard band: 40 % of single faults are very short blips of 10–30 s (fewer than three
            // samples of an exporter scraped every 5–15 s).
            if hard && cfg.situation != Situation::InsideSlowPeriod && cfg.fixed.shape.is_none() && rng.chance(0.4) {
                vec![(at, at + rng.secs(10.0, 30.0))]
            } else {
                w
            }
        };
        let shape = if (cfg.situation == Situation::TwoFaults || hard) && e.windows.len() == 1 && e.windows[0].1 < end {
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
    let mut missing: Vec<Exporter> =
        (rng.chance(0.3) && !cfg.fixed.all_exporters).then(|| candidates[pick]).into_iter().collect();
    if hard && !cfg.fixed.all_exporters {
        // Hard band: 0–3 exporters absent (each never one the truth depends on).
        missing.clear();
        let mut left = candidates.clone();
        let k = rng.below(4).min(left.len());
        for _ in 0..k {
            missing.push(left.remove(rng.below(left.len())));
        }
    }
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
        wobble: Wobble::draw(&mut calm, start, end, cfg.fixed.steady_pace),
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
    write_steps(
        store,
        &plan,
        &mut rng,
        &mut calm,
        &hosts,
        cfg.situation,
        start,
        end,
        base_compute,
        base_fetch,
        base_xfer,
    )?;
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
            if plan.missing.is_empty() {
                "none".to_string()
            } else {
                plan.missing.iter().map(|x| x.name()).collect::<Vec<_>>().join(" + ")
            },
            plan.clock_step.map_or("none".to_string(), |(h, at, j)| format!(
                "host #{h} at +{} s by {:+.1} s",
                (at - start) / SEC,
                j as f64 / 1e9
            )),
        ),
    })
}
