//! What every emitter reads during one tick (cluster, fault plan, pool, jobs, clocks), the byte
//! flows derived from job progress (shared by host NIC and switch counters so both ends of a cable
//! agree), and the scrape schedule of a collector (fixed phase plus a few ms of jitter).

use super::clock::HostClock;
use super::cluster::{Cluster, GPUS_PER_NODE, NICS_PER_NODE};
use super::fault::FaultPlan;
use super::rng::Rng;
use super::storage::PoolModel;
use super::workload::JobSim;

/// Share of a job's all-reduce bytes that leaves a leaf when the job spans several leaves.
const CROSS_LEAF_SHARE: f64 = 0.25;

/// Read-only context of one tick.
pub(crate) struct World<'a> {
    /// The cluster.
    pub(crate) cluster: &'a Cluster,
    /// The injected fault.
    pub(crate) plan: &'a FaultPlan,
    /// The storage pool.
    pub(crate) pool: &'a PoolModel,
    /// Jobs, index = job id.
    pub(crate) jobs: &'a [JobSim],
    /// Host clocks, index = host id.
    pub(crate) clocks: &'a [HostClock],
}

/// Bytes one host NIC moved in a window.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct NicTraffic {
    /// All-reduce bytes, sent and received alike.
    pub(crate) coll: f64,
    /// Storage bytes read (received).
    pub(crate) reads: f64,
    /// Checkpoint bytes written (sent).
    pub(crate) writes: f64,
    /// Seconds of the window the job spent in all-reduce transfers.
    pub(crate) xfer_s: f64,
}

impl World<'_> {
    /// Bytes each NIC of `node` moved during `[a, b)`.
    pub(crate) fn nic_traffic(&self, node: usize, a: i64, b: i64) -> NicTraffic {
        let n = &self.cluster.nodes[node];
        let job = &self.jobs[n.job];
        let (xfers, steps) = job.progress(a, b);
        let nodes_in_job = self.cluster.jobs[n.job].nodes.len().max(1) as f64;
        let nics = NICS_PER_NODE as f64;
        NicTraffic {
            coll: xfers * job.params.nic_bytes_per_step,
            reads: steps * job.params.batch_bytes * GPUS_PER_NODE as f64 / nics,
            writes: self.pool.written(n.job, a, b) / (nodes_in_job * nics),
            xfer_s: job.rank_activity(n.first_rank, a, b).xfer,
        }
    }

    /// Bytes read from the pool by `job` during `[a, b)`.
    pub(crate) fn job_reads(&self, job: usize, a: i64, b: i64) -> f64 {
        let j = &self.jobs[job];
        j.progress(a, b).1 * j.params.batch_bytes * j.n_ranks() as f64
    }

    /// Bytes read from and written to the pool by all jobs during `[a, b)`.
    pub(crate) fn pool_traffic(&self, a: i64, b: i64) -> (f64, f64) {
        let reads = (0..self.jobs.len()).map(|j| self.job_reads(j, a, b)).sum();
        let writes = (0..self.jobs.len()).map(|j| self.pool.written(j, a, b)).sum();
        (reads, writes)
    }

    /// Bytes a leaf sends up to the spines and receives from them during `[a, b)`.
    pub(crate) fn leaf_up(&self, leaf: usize, a: i64, b: i64) -> (f64, f64) {
        if leaf == self.cluster.storage_leaf {
            return self.pool_traffic(a, b);
        }
        let mut up = 0.0;
        let mut down = 0.0;
        for (i, node) in self.cluster.nodes.iter().enumerate().filter(|(_, n)| n.leaf == leaf) {
            let t = self.nic_traffic(i, a, b);
            let cross = if self.job_spans_leaves(node.job) { CROSS_LEAF_SHARE } else { 0.0 };
            up += NICS_PER_NODE as f64 * (t.coll * cross + t.writes);
            down += NICS_PER_NODE as f64 * (t.coll * cross + t.reads);
        }
        (up, down)
    }

    fn job_spans_leaves(&self, job: usize) -> bool {
        let nodes = &self.cluster.jobs[job].nodes;
        match (nodes.first(), nodes.last()) {
            (Some(&f), Some(&l)) => self.cluster.nodes[f].leaf != self.cluster.nodes[l].leaf,
            _ => false,
        }
    }
}

/// When one collector scrapes: a fixed phase within the interval plus jitter of a few ms and,
/// rarely, a longer scheduling delay.
#[derive(Debug, Clone)]
pub(crate) struct Scraper {
    phase: i64,
    prev: i64,
    rng: Rng,
}

impl Scraper {
    /// A collector with a random phase; its first window starts one interval before `start`.
    pub(crate) fn new(interval: i64, start: i64, mut rng: Rng) -> Self {
        let margin = (interval / 50).min(20_000_000);
        let phase = margin + (rng.f64() * (interval - 2 * margin).max(1) as f64) as i64;
        Self { phase, prev: start + phase - interval, rng }
    }

    /// The window `[previous scrape, this scrape)` for the tick starting at `tick_start`.
    pub(crate) fn next(&mut self, tick_start: i64) -> (i64, i64) {
        let mut jitter = self.rng.normal() * 1.5e6;
        if self.rng.chance(0.01) {
            jitter += self.rng.exp(15e6);
        }
        let now = (tick_start + self.phase + jitter as i64).max(self.prev + 1);
        let window = (self.prev, now);
        self.prev = now;
        window
    }
}
