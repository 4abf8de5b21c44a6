//! dcgm-exporter series for every GPU (label `gpu` = index on the host).
//!
//! Like real DCGM, `DCGM_FI_DEV_GPU_UTIL` counts any running kernel, including NCCL kernels that
//! spin while waiting for the slowest rank, so a rank stuck at the collective barrier still looks
//! busy there; the barrier wait shows up in `DCGM_FI_PROF_SM_ACTIVE`, `..._PIPE_TENSOR_ACTIVE` and
//! power. Only a rank waiting for data (no kernel at all) drops `GPU_UTIL`.

use super::SimError;
use super::cluster::GPUS_PER_NODE;
use super::fault::MAX_SM_CLOCK;
use super::rng::Rng;
use super::sink::{Label, SeriesId, Sink};
use super::world::{Scraper, World};

const METRICS: [&str; 10] = [
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_PROF_SM_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
    "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_PROF_NVLINK_TX_BYTES",
    "DCGM_FI_PROF_PCIE_TX_BYTES",
];
const THROTTLE_IDLE: u32 = 0x1;
const THROTTLE_SW_POWER_CAP: u32 = 0x4;
const THROTTLE_HW_SLOWDOWN: u32 = 0x8;
const THROTTLE_SW_THERMAL: u32 = 0x20;
const THROTTLE_HW_THERMAL: u32 = 0x40;
const HW_THERMAL_C: f64 = 89.5;
const THERMAL_TAU_S: f64 = 30.0;

/// Static per-GPU traits: silicon lottery, power-cap proneness, cooling.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GpuTraits {
    /// Multiplier on compute time (≈1; power-capped parts are ~2% slower).
    pub(crate) speed: f64,
    /// Whether the part runs at its power limit under load (sets the SW power-cap bit).
    pub(crate) power_capped: bool,
    /// Cooling offset (°C).
    pub(crate) temp_offset: f64,
}

/// Draws the traits of `n` GPUs.
pub(crate) fn gpu_traits(n: usize, seed: u64) -> Vec<GpuTraits> {
    let mut rng = Rng::stream(seed, 0x6E0);
    (0..n)
        .map(|_| {
            let power_capped = rng.chance(0.1);
            let speed = (1.0 + 0.004 * rng.normal()) * if power_capped { 1.02 } else { 1.0 };
            GpuTraits { speed, power_capped, temp_offset: 3.0 * rng.normal() }
        })
        .collect()
}

struct GpuState {
    ids: [SeriesId; METRICS.len()],
    temp: f64,
}

/// Emits the DCGM series of every node.
pub(crate) struct GpuEmitter {
    traits: Vec<GpuTraits>,
    gpus: Vec<GpuState>,
    scrapers: Vec<Scraper>,
    rng: Rng,
}

impl GpuEmitter {
    /// Registers the series of every GPU.
    pub(crate) fn new(
        world: &World<'_>,
        sink: &mut Sink,
        traits: Vec<GpuTraits>,
        interval: i64,
        start: i64,
        seed: u64,
    ) -> Self {
        let mut gpus = Vec::new();
        let mut scrapers = Vec::new();
        for (n, node) in world.cluster.nodes.iter().enumerate() {
            scrapers.push(Scraper::new(interval, start, Rng::stream(seed, 0x6E1_0000 + n as u64)));
            for g in 0..GPUS_PER_NODE {
                let label = g.to_string();
                let ids = METRICS.map(|m| sink.register(&node.name, m, &[(Label::Gpu, &label)]));
                let temp = 27.0 + 0.058 * 600.0 + traits[n * GPUS_PER_NODE + g].temp_offset;
                gpus.push(GpuState { ids, temp });
            }
        }
        Self { traits, gpus, scrapers, rng: Rng::stream(seed, 0x6E2) }
    }

    /// Scrapes every node once for the tick starting at `tick_start`.
    pub(crate) fn tick(&mut self, world: &World<'_>, tick_start: i64, sink: &mut Sink) -> Result<(), SimError> {
        for (n, node) in world.cluster.nodes.iter().enumerate() {
            let (a, b) = self.scrapers[n].next(tick_start);
            let dt = (b - a) as f64 / 1e9;
            let local = world.clocks[n].local(b);
            let job = &world.jobs[node.job];
            for g in 0..GPUS_PER_NODE {
                let idx = n * GPUS_PER_NODE + g;
                let tr = self.traits[idx];
                let act = job.rank_activity(node.first_rank + g, a, b);
                let comp = (act.compute / dt).min(1.0);
                let wait = (act.coll_wait / dt).min(1.0);
                let xfer = (act.xfer / dt).min(1.0);
                let rng = &mut self.rng;
                let util = (100.0 * (comp + wait + xfer).min(1.0) * (1.0 - 0.01 * rng.f64())).round();
                let sm = (comp * 0.80 * rng.lognormal(0.02) + (wait + xfer) * 0.07).clamp(0.0, 1.0);
                let tensor = (comp * 0.47 * rng.lognormal(0.03) + xfer * 0.01).clamp(0.0, 1.0);
                let mut clock = MAX_SM_CLOCK;
                if let Some(c) = world.plan.gpu_clock(n, g, b) {
                    clock = c;
                } else if tr.power_capped && comp > 0.5 {
                    clock -= rng.range(60.0, 240.0);
                }
                let clock = (clock / 15.0).round() * 15.0;
                let clock_ratio = clock / MAX_SM_CLOCK;
                let mut power = 88.0 + 610.0 * (sm / 0.8).powf(0.9) * clock_ratio.powf(1.5) + 8.0 * rng.normal();
                if tr.power_capped {
                    power = power.min(700.0 - rng.range(0.0, 12.0));
                }
                let power = power.clamp(60.0, 712.0);
                let state = &mut self.gpus[idx];
                let target = 27.0 + 0.058 * power + tr.temp_offset;
                state.temp += (target - state.temp) * (1.0 - (-dt / THERMAL_TAU_S).exp());
                let temp = world.plan.gpu_temp(n, g, b).unwrap_or(state.temp) + 0.3 * rng.normal();
                let mut reasons = 0u32;
                if util < 5.0 {
                    reasons |= THROTTLE_IDLE;
                }
                if tr.power_capped && comp > 0.5 && power > 680.0 {
                    reasons |= THROTTLE_SW_POWER_CAP;
                }
                if world.plan.gpu == Some((n, g)) && b >= world.plan.throttle_at {
                    reasons |= THROTTLE_SW_THERMAL;
                    if temp >= HW_THERMAL_C {
                        reasons |= THROTTLE_HW_THERMAL | THROTTLE_HW_SLOWDOWN;
                    }
                }
                let nvlink = (act.xfer * 160e9 + act.coll_wait * 0.4e9) / dt * rng.lognormal(0.05);
                let pcie = (act.xfer * 11e9 + act.compute * 0.4e9) / dt * rng.lognormal(0.05);
                let values = [
                    util,
                    sm,
                    tensor,
                    clock,
                    temp.round(),
                    (power * 1000.0).round() / 1000.0,
                    f64::from(reasons),
                    0.0,
                    nvlink.round(),
                    pcie.round(),
                ];
                for (id, v) in state.ids.iter().zip(values) {
                    sink.push(*id, local, v)?;
                }
            }
        }
        Ok(())
    }
}
