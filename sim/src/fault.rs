//! The injected fault: which entities it hits, when it starts, and how strongly each effect
//! acts over time. Every effect is an explicit function of reference time, so the workload model
//! and the metric emitters see one consistent story, and each effect starts with a realistic lag
//! after its cause.

use super::cluster::{Cluster, GPUS_PER_NODE, NICS_PER_NODE, Peer, UPLINKS_PER_LEAF};
use super::rng::{Rng, hash_normal, ramp};
use super::scenario::Scenario;

use lockstep_engine::model::SEC;
/// Nominal boost clock of the simulated GPUs (MHz).
pub(crate) const MAX_SM_CLOCK: f64 = 1980.0;
/// Temperature at which the GPU starts software thermal slowdown (°C).
pub(crate) const SW_THERMAL_C: f64 = 87.0;
const THROTTLED_CLOCK: f64 = 1260.0;
const THERMAL_TAU_S: f64 = 40.0;
const FAULT_STEADY_TEMP: f64 = 97.0;
const LINK_RECOVERY_STALL_NS: i64 = 120_000_000;

/// How a storage fault changes the pool.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StorageFault {
    /// Multiplier on mean read latency.
    pub(crate) read_mult: f64,
    /// Extra multiplier on the 99th percentile (on top of `read_mult`).
    pub(crate) p99_mult: f64,
    /// Multiplier on write latency.
    pub(crate) write_mult: f64,
    /// Multiplier on the pool's bandwidth capacity.
    pub(crate) capacity_mult: f64,
}

/// The fault plan of one run.
#[derive(Debug, Clone)]
pub(crate) struct FaultPlan {
    /// The scenario.
    pub(crate) scenario: Scenario,
    /// When the root cause starts (reference time). For the healthy run: the middle of the run.
    pub(crate) onset: i64,
    /// Lag between the first fault signal and its first effect on collectives or storage.
    pub(crate) effect_delay: i64,
    /// The faulty host NIC port `(node, nic)` (bad cable or slow RoCE receiver).
    pub(crate) nic: Option<(usize, usize)>,
    /// The ring predecessor whose traffic goes into the faulty NIC `(node, nic)`.
    pub(crate) sender: Option<(usize, usize)>,
    /// The switch port whose receive side is faulty, or the switch end of the faulty NIC's cable.
    pub(crate) port: Option<(usize, usize)>,
    /// The other end of `port` when both ends are switches.
    pub(crate) port_peer: Option<(usize, usize)>,
    /// The overheating GPU `(node, gpu)`.
    pub(crate) gpu: Option<(usize, usize)>,
    /// The starved rank `(node, local gpu)`.
    pub(crate) starved: Option<(usize, usize)>,
    /// The degraded storage server.
    pub(crate) server: Option<usize>,
    /// Link error recovery events on the faulty cable (reference time).
    pub(crate) recoveries: Vec<i64>,
    /// When the overheating GPU reaches the slowdown temperature.
    pub(crate) throttle_at: i64,
    /// A NIC with a steady trickle of symbol errors in every scenario (not a fault).
    pub(crate) red_nic: (usize, usize),
    /// A leaf uplink with a steady trickle of symbol errors in every scenario (not a fault).
    pub(crate) red_port: (usize, usize),
    seed: u64,
}

impl FaultPlan {
    /// Chooses the fault entities and times for `scenario` in `[start, end)`.
    pub(crate) fn new(scenario: Scenario, cluster: &Cluster, start: i64, end: i64, seed: u64) -> Self {
        let mut rng = Rng::stream(seed, 0xFA17 + scenario as u64);
        let third = (end - start) / 3;
        let onset = start + third + (rng.f64() * third as f64) as i64;
        let onset = if scenario == Scenario::Healthy { start + (end - start) / 2 } else { onset };
        let effect_delay = (rng.range(1.0, 3.0) * SEC as f64) as i64;
        let main = &cluster.jobs[0].nodes;
        let pos = rng.below(main.len());
        let node = main[pos];
        let nic = rng.below(NICS_PER_NODE);
        let gpu = rng.below(GPUS_PER_NODE);
        let pred = main[(pos + main.len() - 1) % main.len()];
        let red_node = main[(pos + 1 + rng.below(main.len().max(2) - 1)) % main.len()];
        let red_nic = (red_node, (nic + 1 + rng.below(NICS_PER_NODE - 1)) % NICS_PER_NODE);
        let leaf = rng.below(cluster.storage_leaf);
        let red_port = (leaf, cluster.switches[leaf].ports.len() - UPLINKS_PER_LEAF + rng.below(UPLINKS_PER_LEAF));
        let mut plan = Self {
            scenario,
            onset,
            effect_delay,
            nic: None,
            sender: None,
            port: None,
            port_peer: None,
            gpu: None,
            starved: None,
            server: None,
            recoveries: Vec::new(),
            throttle_at: i64::MAX,
            red_nic,
            red_port,
            seed,
        };
        match scenario {
            Scenario::IbLinkErrors | Scenario::RoceCongestion => {
                plan.nic = Some((node, nic));
                plan.sender = (pred != node).then_some((pred, nic));
                let n = &cluster.nodes[node].nics[nic];
                plan.port = Some((n.switch, n.switch_port));
                if scenario == Scenario::IbLinkErrors {
                    let mut t = onset + 4 * SEC;
                    while t < end {
                        plan.recoveries.push(t);
                        t += (rng.exp(40.0) * SEC as f64) as i64 + SEC;
                    }
                }
            }
            Scenario::StorageOverFabric => {
                let leaf = cluster.storage_leaf;
                let lp = cluster.switches[leaf].ports.len() - UPLINKS_PER_LEAF + rng.below(UPLINKS_PER_LEAF);
                if let Peer::Switch { switch, port } = cluster.switches[leaf].ports[lp].peer {
                    plan.port = Some((switch, port));
                    plan.port_peer = Some((leaf, lp));
                }
            }
            Scenario::ThermalThrottle => {
                plan.gpu = Some((node, gpu));
                let to_threshold = ((FAULT_STEADY_TEMP - 67.0) / (FAULT_STEADY_TEMP - SW_THERMAL_C)).ln();
                plan.throttle_at = onset + (THERMAL_TAU_S * to_threshold * SEC as f64) as i64;
            }
            Scenario::DataloaderStarvation => plan.starved = Some((node, gpu)),
            Scenario::StorageLatency => plan.server = Some(rng.below(cluster.servers.len())),
            Scenario::Healthy | Scenario::CheckpointStorm => {}
        }
        plan
    }

    /// Slow wobble in `[-1, 1]`-ish that changes every second (deterministic).
    fn wobble(&self, key: u64, t: i64) -> f64 {
        hash_normal(self.seed, key, (t / SEC) as u64).clamp(-2.5, 2.5) / 2.5
    }

    /// Symbol errors per second seen by the faulty receiver (bad NIC cable or bad switch port).
    pub(crate) fn symbol_error_rate(&self, t: i64) -> f64 {
        if !matches!(self.scenario, Scenario::IbLinkErrors | Scenario::StorageOverFabric) || t < self.onset {
            return 0.0;
        }
        (6.0 + 54.0 * ramp(t, self.onset, 30 * SEC)) * (1.0 + 0.3 * self.wobble(1, t))
    }

    /// Fraction of nominal collective bandwidth available to `job` at `t`.
    pub(crate) fn bw_factor(&self, job: usize, t: i64) -> f64 {
        if job != 0 {
            return 1.0;
        }
        let s_start = self.onset + self.effect_delay;
        match self.scenario {
            Scenario::IbLinkErrors => 1.0 - 0.70 * ramp(t, s_start, 6 * SEC) * (1.0 + 0.08 * self.wobble(2, t)),
            Scenario::RoceCongestion => {
                let s = ramp(t, s_start, 4 * SEC);
                let dcqcn = 0.08 * (std::f64::consts::TAU * (t - s_start) as f64 / (7 * SEC) as f64).sin();
                1.0 - s * (0.60 + dcqcn)
            }
            _ => 1.0,
        }
    }

    /// Severity (0–1) of the slow RoCE receiver at `t`.
    pub(crate) fn roce_severity(&self, t: i64) -> f64 {
        if self.scenario != Scenario::RoceCongestion {
            return 0.0;
        }
        ramp(t, self.onset, 2 * SEC)
    }

    /// Total link-recovery stall (ns) inside `[a, b)`.
    pub(crate) fn recovery_stall(&self, a: i64, b: i64) -> i64 {
        let from = self.recoveries.partition_point(|&r| r < a);
        let to = self.recoveries.partition_point(|&r| r < b);
        (to - from) as i64 * LINK_RECOVERY_STALL_NS
    }

    /// Link recovery events inside `[a, b)`.
    pub(crate) fn recoveries_in(&self, a: i64, b: i64) -> u64 {
        (self.recoveries.partition_point(|&r| r < b) - self.recoveries.partition_point(|&r| r < a)) as u64
    }

    /// Temperature of the overheating GPU at `t`, if `(node, gpu)` is it and the fault started.
    pub(crate) fn gpu_temp(&self, node: usize, gpu: usize, t: i64) -> Option<f64> {
        if self.gpu != Some((node, gpu)) || t < self.onset {
            return None;
        }
        if t < self.throttle_at {
            let x = (t - self.onset) as f64 / SEC as f64 / THERMAL_TAU_S;
            return Some(FAULT_STEADY_TEMP - (FAULT_STEADY_TEMP - 67.0) * (-x).exp());
        }
        let phase = (t - self.throttle_at) as f64 / (11 * SEC) as f64;
        Some(SW_THERMAL_C + 1.4 + 1.6 * (std::f64::consts::TAU * phase).sin() + 0.4 * self.wobble(3, t))
    }

    /// SM clock of the overheating GPU at `t`, if `(node, gpu)` is it and it is throttling.
    pub(crate) fn gpu_clock(&self, node: usize, gpu: usize, t: i64) -> Option<f64> {
        if self.gpu != Some((node, gpu)) || t < self.throttle_at {
            return None;
        }
        let s = ramp(t, self.throttle_at, 8 * SEC);
        Some(MAX_SM_CLOCK - (MAX_SM_CLOCK - THROTTLED_CLOCK) * s + 30.0 * self.wobble(4, t))
    }

    /// Multiplier on a rank's compute time (thermal throttling; about 75% of the work is
    /// clock-bound).
    pub(crate) fn compute_factor(&self, node: usize, gpu: usize, t: i64) -> f64 {
        match self.gpu_clock(node, gpu, t) {
            Some(clock) => 1.0 + 0.75 * (MAX_SM_CLOCK / clock - 1.0),
            None => 1.0,
        }
    }

    /// Multiplier on a rank's data-loader CPU time per batch.
    pub(crate) fn cpu_factor(&self, node: usize, gpu: usize, t: i64) -> f64 {
        match self.starved {
            Some((n, g)) if n == node => {
                let s = ramp(t, self.onset, 5 * SEC);
                if g == gpu { 1.0 + 1.5 * s } else { 1.0 + 0.12 * s }
            }
            _ => 1.0,
        }
    }

    /// Extra CPU busy fraction on `node` from the process that steals the data loader's cores.
    pub(crate) fn rogue_cpu(&self, node: usize, t: i64) -> f64 {
        match self.starved {
            Some((n, _)) if n == node => ramp(t, self.onset, 5 * SEC),
            _ => 0.0,
        }
    }

    /// The storage pool's degradation at `t`.
    pub(crate) fn storage_fault(&self, t: i64) -> StorageFault {
        let none = StorageFault { read_mult: 1.0, p99_mult: 1.0, write_mult: 1.0, capacity_mult: 1.0 };
        match self.scenario {
            Scenario::StorageLatency => {
                let s = ramp(t, self.onset, 20 * SEC);
                StorageFault {
                    read_mult: 1.0 + 24.0 * s,
                    p99_mult: 1.0 + 2.0 * s,
                    write_mult: 1.0 + 6.0 * s,
                    capacity_mult: 1.0 - 0.55 * s,
                }
            }
            Scenario::StorageOverFabric => {
                let s = ramp(t, self.onset + self.effect_delay, 4 * SEC) * (1.0 + 0.15 * self.wobble(5, t));
                StorageFault {
                    read_mult: 1.0 + 18.0 * s,
                    p99_mult: 1.0 + 4.0 * s,
                    write_mult: 1.0 + 3.0 * s,
                    capacity_mult: 1.0 - 0.15 * s,
                }
            }
            _ => none,
        }
    }

    /// Multiplier on per-operation disk time of storage server `server` (the degraded server).
    pub(crate) fn disk_factor(&self, server: usize, t: i64) -> f64 {
        match self.server {
            Some(s) if s == server => 1.0 + 30.0 * ramp(t, self.onset, 10 * SEC),
            _ => 1.0,
        }
    }

    /// When the other job starts its checkpoint storm, if this run has one.
    pub(crate) fn storm_start(&self) -> Option<i64> {
        (self.scenario == Scenario::CheckpointStorm).then_some(self.onset)
    }
}
