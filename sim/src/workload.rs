//! The training workload: a synchronous data-parallel job stepping in lockstep. Each rank takes
//! its next batch from a bounded prefetch queue fed by data-loader workers (CPU time plus storage
//! reads), computes forward and backward, then joins the gradient all-reduce, which completes only
//! after the last rank arrives and the bytes have crossed the slowest link. Steps are generated
//! ahead of the metric emitters and dropped once every emitter has passed them.

use std::collections::VecDeque;

use super::cluster::{Cluster, GPUS_PER_NODE};
use super::fault::FaultPlan;
use super::rng::Rng;
use super::storage::{PoolModel, SNAPSHOT_PAUSE_NS};

const SEC_F: f64 = 1e9;
/// Batches a rank's data loader may hold ready (workers × prefetch factor).
const PREFETCH: usize = 4;

/// Shape of one job's step.
#[derive(Debug, Clone, Copy)]
pub(crate) struct JobParams {
    /// Forward and backward time per step on a healthy GPU (s).
    pub(crate) compute_s: f64,
    /// All-reduce transfer time at full bandwidth (s).
    pub(crate) xfer_s: f64,
    /// Optimizer step after the all-reduce (s).
    pub(crate) opt_s: f64,
    /// Data-loader CPU time per batch (core-seconds).
    pub(crate) cpu_core_s: f64,
    /// Data-loader worker processes per rank.
    pub(crate) workers: f64,
    /// Storage reads per batch.
    pub(crate) reads_per_batch: f64,
    /// Bytes read per batch.
    pub(crate) batch_bytes: f64,
    /// Bytes each fabric NIC sends (and receives) per all-reduce.
    pub(crate) nic_bytes_per_step: f64,
    /// All-reduce message size per rank, for NCCL's bus bandwidth.
    pub(crate) message_bytes: f64,
}

impl JobParams {
    /// Parameters of job `job` (0 = the large main job, 1 = the smaller job on the same pool).
    pub(crate) fn for_job(job: usize) -> Self {
        if job == 0 {
            Self {
                compute_s: 1.50,
                xfer_s: 0.30,
                opt_s: 0.03,
                cpu_core_s: 4.4,
                workers: 4.0,
                reads_per_batch: 256.0,
                batch_bytes: 32.0 * 1_048_576.0,
                nic_bytes_per_step: 10.5e9,
                message_bytes: 28.0e9,
            }
        } else {
            Self {
                compute_s: 0.80,
                xfer_s: 0.15,
                opt_s: 0.02,
                cpu_core_s: 2.0,
                workers: 4.0,
                reads_per_batch: 128.0,
                batch_bytes: 16.0 * 1_048_576.0,
                nic_bytes_per_step: 4.0e9,
                message_bytes: 7.0e9,
            }
        }
    }

    /// Expected storage read load of `ranks` ranks at nominal speed (bytes/s).
    pub(crate) fn nominal_read_bps(&self, ranks: usize) -> f64 {
        ranks as f64 * self.batch_bytes / (self.compute_s + self.xfer_s + self.opt_s)
    }
}

/// One rank's part of a step.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RankStep {
    /// Time spent waiting for the batch (ns).
    pub(crate) wait: i64,
    /// When the rank finished computing and entered the all-reduce (reference time).
    pub(crate) enter: i64,
}

/// One training step of a job.
#[derive(Debug, Clone)]
pub(crate) struct Step {
    /// Step number (also the all-reduce instance number).
    pub(crate) index: u64,
    /// When every rank asked for its next batch (reference time).
    pub(crate) start: i64,
    /// When the last rank entered the all-reduce: the transfer starts.
    pub(crate) xfer_start: i64,
    /// When the all-reduce completed on every rank.
    pub(crate) xfer_end: i64,
    /// When the optimizer step finished.
    pub(crate) end: i64,
    /// Per-rank data.
    pub(crate) ranks: Vec<RankStep>,
}

/// What the truth needs to know about a finished step.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StepRecord {
    /// Step start (reference time).
    pub(crate) start: i64,
    /// Step end (reference time).
    pub(crate) end: i64,
    /// Longest data-loader wait of any rank (ns).
    pub(crate) max_wait: i64,
}

/// Seconds a rank spent in each phase within a window.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RankActivity {
    /// Waiting for data (GPU idle).
    pub(crate) data_wait: f64,
    /// Forward/backward and optimizer kernels.
    pub(crate) compute: f64,
    /// In the all-reduce, waiting for the slowest rank (NCCL kernel spinning).
    pub(crate) coll_wait: f64,
    /// In the all-reduce, moving bytes.
    pub(crate) xfer: f64,
}

#[derive(Debug, Clone)]
struct RankState {
    node: usize,
    gpu: usize,
    speed: f64,
    ready: i64,
    consumed: VecDeque<i64>,
}

/// A job being simulated.
#[derive(Debug, Clone)]
pub(crate) struct JobSim {
    /// Job index.
    pub(crate) job: usize,
    /// Step shape.
    pub(crate) params: JobParams,
    /// Generated steps not yet dropped, oldest first.
    pub(crate) steps: VecDeque<Step>,
    /// A summary of every step, for the truth's onsets.
    pub(crate) history: Vec<StepRecord>,
    ranks: Vec<RankState>,
    next_start: i64,
    next_index: u64,
    last_ckpt_check: i64,
    rng: Rng,
}

impl JobSim {
    /// A job whose first step starts at `start`; `speeds` holds a static speed factor per GPU of
    /// the cluster (node × 8 + gpu).
    pub(crate) fn new(job: usize, cluster: &Cluster, speeds: &[f64], start: i64, seed: u64) -> Self {
        let mut rng = Rng::stream(seed, 0x10B0 + job as u64);
        let first_start = start - 30_000_000_000 - (rng.range(0.0, 2.0) * SEC_F) as i64;
        let ranks = cluster.jobs[job]
            .nodes
            .iter()
            .flat_map(|&node| (0..GPUS_PER_NODE).map(move |gpu| (node, gpu)))
            .map(|(node, gpu)| RankState {
                node,
                gpu,
                speed: speeds[node * GPUS_PER_NODE + gpu],
                ready: first_start - 10_000_000_000,
                consumed: VecDeque::with_capacity(PREFETCH + 1),
            })
            .collect();
        let next_start = first_start;
        Self {
            job,
            params: JobParams::for_job(job),
            steps: VecDeque::new(),
            history: Vec::new(),
            ranks,
            next_start,
            next_index: 1 + rng.below(50_000) as u64,
            last_ckpt_check: next_start,
            rng,
        }
    }

    /// Number of ranks.
    pub(crate) fn n_ranks(&self) -> usize {
        self.ranks.len()
    }

    /// Generates steps until one starts at or after `until`.
    pub(crate) fn advance_until(&mut self, until: i64, plan: &FaultPlan, pool: &PoolModel) {
        while self.next_start < until {
            let step = self.next_step(plan, pool);
            self.next_start = step.end + 4_000_000 + (self.rng.exp(1.0e6)) as i64;
            let max_wait = step.ranks.iter().map(|r| r.wait).max().unwrap_or(0);
            self.history.push(StepRecord { start: step.start, end: step.end, max_wait });
            self.steps.push_back(step);
        }
    }

    fn next_step(&mut self, plan: &FaultPlan, pool: &PoolModel) -> Step {
        let p = self.params;
        let s = self.next_start;
        let pause =
            if self.job == 0 && pool.checkpoint_starts(0, self.last_ckpt_check, s) { SNAPSHOT_PAUSE_NS } else { 0 };
        self.last_ckpt_check = s;
        let mut ranks = Vec::with_capacity(self.ranks.len());
        let mut last_enter = i64::MIN;
        for r in &mut self.ranks {
            // Produce this step's batch: it starts once the previous one is done and a slot is free.
            let slot_free =
                if r.consumed.len() >= PREFETCH { r.consumed.front().copied().unwrap_or(r.ready) } else { r.ready };
            let prod_start = r.ready.max(slot_free);
            let lat = pool.state(prod_start, plan).read_mean;
            let cpu = p.cpu_core_s * plan.cpu_factor(r.node, r.gpu, prod_start) * self.rng.lognormal(0.06);
            let produce = (cpu + p.reads_per_batch * lat) / p.workers;
            r.ready = prod_start + (produce * SEC_F) as i64;
            let dequeue = (0.003 * self.rng.lognormal(0.4) * SEC_F) as i64;
            let wait = (r.ready - s).max(0) + dequeue;
            let got = s + wait;
            r.consumed.push_back(got);
            if r.consumed.len() > PREFETCH {
                r.consumed.pop_front();
            }
            let mut compute =
                p.compute_s * r.speed * plan.compute_factor(r.node, r.gpu, got) * self.rng.lognormal(0.012);
            if self.rng.chance(0.0005) {
                compute += (0.05 * self.rng.pareto(1.5)).min(1.5);
            }
            let enter = got + (compute * SEC_F) as i64 + pause;
            last_enter = last_enter.max(enter);
            ranks.push(RankStep { wait, enter });
        }
        let bw = plan.bw_factor(self.job, last_enter).max(0.05);
        let mut xfer = p.xfer_s / bw * self.rng.lognormal(0.04);
        if self.rng.chance(0.01) {
            xfer += (0.02 * self.rng.pareto(1.3)).min(2.0);
        }
        let xfer_ns = (xfer * SEC_F) as i64;
        let stall = if self.job == 0 { plan.recovery_stall(last_enter, last_enter + xfer_ns) } else { 0 };
        let xfer_end = last_enter + xfer_ns + stall;
        let end = xfer_end + (p.opt_s * self.rng.lognormal(0.05) * SEC_F) as i64;
        let index = self.next_index;
        self.next_index += 1;
        Step { index, start: s, xfer_start: last_enter, xfer_end, end, ranks }
    }

    /// Drops steps that ended before `before`.
    pub(crate) fn prune(&mut self, before: i64) {
        while self.steps.front().is_some_and(|s| s.end < before) {
            self.steps.pop_front();
        }
    }

    /// Seconds rank `rank` spent in each phase during `[a, b)`.
    pub(crate) fn rank_activity(&self, rank: usize, a: i64, b: i64) -> RankActivity {
        let mut act = RankActivity::default();
        for st in self.steps.iter().filter(|st| st.start < b && st.end > a) {
            let Some(r) = st.ranks.get(rank) else {
                continue;
            };
            let got = st.start + r.wait;
            act.data_wait += overlap(a, b, st.start, got);
            act.compute += overlap(a, b, got, r.enter) + overlap(a, b, st.xfer_end, st.end);
            act.coll_wait += overlap(a, b, r.enter, st.xfer_start);
            act.xfer += overlap(a, b, st.xfer_start, st.xfer_end);
        }
        act
    }

    /// `(all-reduces, steps)` worth of work done during `[a, b)`, counting partial ones
    /// proportionally: drives byte counters.
    pub(crate) fn progress(&self, a: i64, b: i64) -> (f64, f64) {
        let mut xfers = 0.0;
        let mut steps = 0.0;
        for st in self.steps.iter().filter(|st| st.start < b && st.end > a) {
            xfers += overlap(a, b, st.xfer_start, st.xfer_end) / ((st.xfer_end - st.xfer_start).max(1) as f64 / SEC_F);
            steps += overlap(a, b, st.start, st.end) / ((st.end - st.start).max(1) as f64 / SEC_F);
        }
        (xfers, steps)
    }

    /// Node and local GPU of `rank`.
    pub(crate) fn rank_location(&self, rank: usize) -> (usize, usize) {
        self.ranks.get(rank).map_or((0, 0), |r| (r.node, r.gpu))
    }
}

/// Seconds of overlap between `[a, b)` and `[x, y)`.
fn overlap(a: i64, b: i64, x: i64, y: i64) -> f64 {
    (b.min(y) - a.max(x)).max(0) as f64 / SEC_F
}
