//! `truth.json`: what was injected, where, when, and the causal chain of signals it should
//! produce (with the true onset of each, in reference time), plus the true host clocks.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::clock::HostClock;
use super::cluster::{Cluster, MAIN_JOB, OTHER_JOB, POOL};
use super::fault::FaultPlan;
use super::scenario::Scenario;
use super::workload::StepRecord;

/// A data-loader wait above this counts as the loader falling behind (ns).
const WAIT_ONSET_NS: i64 = 100_000_000;

/// One expected link of the causal chain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChainLink {
    /// Entity whose signal changes (`node-03/mlx5_2:1`, `leaf-2:17`, `lustre-a`, `llm-70b`, …).
    pub entity: String,
    /// Metric name that shows it.
    pub signal: String,
    /// True onset of the change (reference time, ns).
    pub onset_ns: i64,
}

/// A host's true clock: `local(t) = t + offset_ns + (t − start_ns) · drift_ppb / 10⁹`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClockTruth {
    /// `local − reference` at the run's `start_ns`.
    pub offset_ns: i64,
    /// Rate error in parts per billion.
    pub drift_ppb: i64,
}

/// The content of `truth.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Truth {
    /// Scenario name (kebab-case).
    pub scenario: String,
    /// The root-cause entity (`None` for the healthy run).
    pub fault_entity: Option<String>,
    /// Domain of the root cause: network, storage, compute, data_loading or none.
    pub fault_domain: String,
    /// What the job waits on once the fault bites: network, storage, compute, data_loading or none.
    pub bottleneck: String,
    /// When the root cause started (reference time, ns; `None` for the healthy run).
    pub onset_ns: Option<i64>,
    /// The job whose slowdown is to be diagnosed.
    pub job: String,
    /// Human-readable story of the fault.
    pub description: String,
    /// Other entities involved (cable peer, aggressor job, the starved rank's GPU, …).
    pub related_entities: Vec<String>,
    /// The global rank that is starved or throttled, when one rank is the culprit.
    pub fault_rank: Option<usize>,
    /// Expected causal chain, in true time order.
    pub chain: Vec<ChainLink>,
    /// End of the first step of a sustained slowdown of `job` (reference time, ns).
    pub slowdown_onset_ns: Option<i64>,
    /// Median step time of `job` before the onset (s).
    pub baseline_step_seconds: f64,
    /// Median step time of `job` after the slowdown onset (s).
    pub faulted_step_seconds: Option<f64>,
    /// First sample time of the run (reference time, ns).
    pub start_ns: i64,
    /// End of the run (reference time, ns).
    pub end_ns: i64,
    /// Seed the run was generated from.
    pub seed: u64,
    /// Compute nodes.
    pub nodes: usize,
    /// Scrape interval of the periodic series (ns).
    pub sample_interval_ns: i64,
    /// True clock of every host (nodes, storage servers, switches).
    pub clocks: BTreeMap<String, ClockTruth>,
    /// Switches whose data counters are 32-bit and wrap.
    pub wrapping_counters: Vec<String>,
    /// Entities with steady background errors that are not the fault.
    pub red_herrings: Vec<String>,
}

/// Inputs of [`build`] that come from the run itself.
pub(crate) struct RunFacts<'a> {
    pub(crate) seed: u64,
    pub(crate) start: i64,
    pub(crate) end: i64,
    pub(crate) interval: i64,
    pub(crate) hosts: &'a [String],
    pub(crate) clocks: &'a [HostClock],
    pub(crate) history: &'a [StepRecord],
}

/// Builds the truth of a finished run.
pub(crate) fn build(cluster: &Cluster, plan: &FaultPlan, run: &RunFacts<'_>) -> Truth {
    let sc = plan.scenario;
    let t0 = plan.onset;
    let dur = |r: &StepRecord| (r.end - r.start) as f64 / 1e9;
    let mut before: Vec<f64> = run.history.iter().filter(|r| r.end < t0 && r.start >= run.start).map(dur).collect();
    let baseline = median(&mut before);
    let slow_idx = (sc != Scenario::Healthy)
        .then(|| {
            (0..run.history.len()).find(|&k| {
                let r = &run.history[k];
                let mut next: Vec<f64> = run.history[k..(k + 5).min(run.history.len())].iter().map(dur).collect();
                r.end >= t0 && dur(r) > 1.1 * baseline && next.len() == 5 && median(&mut next) > 1.1 * baseline
            })
        })
        .flatten();
    let slowdown = slow_idx.map(|k| run.history[k].end);
    let faulted = slow_idx.map(|k| median(&mut run.history[k..].iter().map(dur).collect::<Vec<_>>()));
    let first_wait =
        run.history.iter().find(|r| r.start >= t0 && r.max_wait > WAIT_ONSET_NS).map(|r| r.start + r.max_wait);
    let nic = |(n, k): (usize, usize)| cluster.nodes[n].nics[k].entity.clone();
    let port = |(s, p): (usize, usize)| cluster.switches[s].ports[p].entity.clone();
    let gpu = |(n, g): (usize, usize)| format!("{}/gpu{g}", cluster.nodes[n].name);
    let link = |entity: &str, signal: &str, onset_ns: i64| ChainLink {
        entity: entity.to_string(),
        signal: signal.to_string(),
        onset_ns,
    };
    let effect = t0 + plan.effect_delay;
    let mut chain = Vec::new();
    let mut related = Vec::new();
    let mut fault_rank = None;
    let (entity, description) = match sc {
        Scenario::Healthy => (
            None,
            "healthy control run: no fault; natural noise, periodic checkpoints, red-herring error counters"
                .to_string(),
        ),
        Scenario::IbLinkErrors | Scenario::RoceCongestion => {
            let f = plan.nic.map(nic).unwrap_or_default();
            let sender = plan.sender.map(nic).unwrap_or_default();
            related.extend(plan.port.map(port));
            related.push(sender.clone());
            if sc == Scenario::IbLinkErrors {
                chain.push(link(&f, "node_infiniband_symbol_error_total", t0));
                chain.extend(plan.port.map(|p| link(&port(p), "infiniband_switch_port_symbol_error_total", t0)));
                chain.push(link(&sender, "node_infiniband_local_ack_timeout_errors_total", t0));
            } else {
                chain.push(link(&f, "node_infiniband_out_of_buffer_drops_total", t0));
                chain.push(link(&f, "node_infiniband_np_ecn_marked_roce_packets_received_total", t0));
                chain.push(link(&sender, "node_infiniband_rp_cnp_packets_handled_total", t0));
            }
            chain.push(link(MAIN_JOB, "nccl_collective_exec_time_microseconds", effect));
            chain.push(link(MAIN_JOB, "DCGM_FI_PROF_SM_ACTIVE", effect));
            let what = if sc == Scenario::IbLinkErrors {
                format!(
                    "degrading cable on {f}: symbol and receive errors, link recoveries and retransmits; all-reduce bandwidth of {MAIN_JOB} drops ~70%"
                )
            } else {
                format!(
                    "slow RoCE receiver {f} (NIC PCIe link trained down): out-of-buffer drops, PFC back-pressure on its sender {sender}, ECN marks and CNPs; DCQCN cuts all-reduce bandwidth of {MAIN_JOB} ~60%"
                )
            };
            (Some(f), what)
        }
        Scenario::StorageLatency => {
            let server = plan.server.map(|s| cluster.servers[s].name.clone()).unwrap_or_default();
            chain.push(link(&server, "node_disk_read_time_seconds_total", t0));
            chain.push(link(POOL, "storage_read_latency_seconds", t0));
            related.push(server.clone());
            (
                Some(POOL.to_string()),
                format!(
                    "degraded storage server {server} in {POOL}: read latency ~25x, queue depth up, capacity down; data loading of {MAIN_JOB} falls behind"
                ),
            )
        }
        Scenario::CheckpointStorm => {
            chain.push(link(OTHER_JOB, "storage_write_bytes_total", t0));
            chain.push(link(POOL, "storage_read_latency_seconds", t0));
            related.push(OTHER_JOB.to_string());
            (
                Some(POOL.to_string()),
                format!(
                    "checkpoint storm: {OTHER_JOB} writes checkpoints back to back (~18 s each, ~4 s apart) at pool saturation; {POOL} latency rises and data loading of {MAIN_JOB} falls behind"
                ),
            )
        }
        Scenario::DataloaderStarvation => {
            let (n, g) = plan.starved.unwrap_or_default();
            let node = cluster.nodes[n].name.clone();
            fault_rank = Some(cluster.nodes[n].first_rank + g);
            chain.push(link(&node, "node_pressure_cpu_waiting_seconds_total", t0));
            related.push(gpu((n, g)));
            (
                Some(node.clone()),
                format!(
                    "a CPU-hungry process on {node} steals the cores of rank {}'s data loader ({}); that rank waits for data and every other rank waits for it in the all-reduce",
                    cluster.nodes[n].first_rank + g,
                    gpu((n, g))
                ),
            )
        }
        Scenario::ThermalThrottle => {
            let (n, g) = plan.gpu.unwrap_or_default();
            let e = gpu((n, g));
            fault_rank = Some(cluster.nodes[n].first_rank + g);
            chain.push(link(&e, "DCGM_FI_DEV_GPU_TEMP", t0));
            chain.push(link(&e, "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", plan.throttle_at));
            chain.push(link(&e, "DCGM_FI_DEV_SM_CLOCK", plan.throttle_at));
            chain.push(link(MAIN_JOB, "nccl_collective_exec_time_microseconds", plan.throttle_at));
            related.push(cluster.nodes[n].name.clone());
            (
                Some(e.clone()),
                format!(
                    "cooling failure on {e}: temperature climbs, thermal slowdown cuts its SM clock to ~1260 MHz; every other rank waits for it in the all-reduce"
                ),
            )
        }
        Scenario::StorageOverFabric => {
            let p = plan.port.map(port).unwrap_or_default();
            let peer = plan.port_peer.map(port).unwrap_or_default();
            chain.push(link(&p, "infiniband_switch_port_symbol_error_total", t0));
            chain.push(link(&peer, "infiniband_switch_port_transmit_wait_total", t0));
            chain.push(link(POOL, "storage_read_latency_seconds", effect));
            related.extend([peer.clone(), POOL.to_string()]);
            (
                Some(p.clone()),
                format!(
                    "bad link {peer} -> {p} between the storage leaf and a spine: read replies are corrupted and retransmitted, {POOL} tail latency rises and data loading of {MAIN_JOB} falls behind; training collectives are unaffected"
                ),
            )
        }
    };
    let loader_bound = matches!(
        sc,
        Scenario::StorageLatency
            | Scenario::CheckpointStorm
            | Scenario::StorageOverFabric
            | Scenario::DataloaderStarvation
    );
    if let Some(w) = first_wait.filter(|_| loader_bound) {
        chain.push(link(MAIN_JOB, "dataloader_wait_seconds", w));
        let signal = if sc == Scenario::DataloaderStarvation {
            "nccl_collective_exec_time_microseconds"
        } else {
            "DCGM_FI_DEV_GPU_UTIL"
        };
        chain.push(link(MAIN_JOB, signal, w));
    }
    if let Some(s) = slowdown {
        chain.push(link(MAIN_JOB, "train_step_duration_seconds", s));
    }
    chain.sort_by_key(|l| l.onset_ns);
    let mut red_herrings = vec![nic(plan.red_nic)];
    if cluster.has_switch_metrics() {
        red_herrings.push(port(plan.red_port));
    }
    let wrapping = if cluster.has_switch_metrics() {
        cluster.switches.iter().filter(|s| s.counters_32bit).map(|s| s.name.clone()).collect()
    } else {
        Vec::new()
    };
    let clocks = run
        .hosts
        .iter()
        .zip(run.clocks)
        .map(|(h, c)| (h.clone(), ClockTruth { offset_ns: c.local(run.start) - run.start, drift_ppb: c.drift_ppb }))
        .collect();
    Truth {
        scenario: sc.name().to_string(),
        fault_entity: entity,
        fault_domain: sc.fault_domain().to_string(),
        bottleneck: sc.bottleneck().to_string(),
        onset_ns: (sc != Scenario::Healthy).then_some(t0),
        job: MAIN_JOB.to_string(),
        description,
        related_entities: related,
        fault_rank,
        chain,
        slowdown_onset_ns: slowdown,
        baseline_step_seconds: baseline,
        faulted_step_seconds: faulted,
        start_ns: run.start,
        end_ns: run.end,
        seed: run.seed,
        nodes: cluster.nodes.len(),
        sample_interval_ns: run.interval,
        clocks,
        wrapping_counters: wrapping,
        red_herrings,
    }
}

/// Median of `xs` (0 for an empty slice); sorts in place.
fn median(xs: &mut [f64]) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}
