//! The shared storage pool: capacity, the checkpoint write schedule of both jobs (including the
//! other job's checkpoint storm), and latency as a queueing function of load and faults. Latency
//! noise comes from stateless hashes of the second, so the data-loader model and the exported
//! pool metrics see the same values.

use super::fault::FaultPlan;
use super::rng::{Rng, hash_normal, hash_unit};

use lockstep_engine::model::SEC;
/// Bandwidth each storage server contributes (bytes/s).
const SERVER_BPS: f64 = 10e9;
const BASE_READ_LAT_S: f64 = 1.1e-3;
const BASE_WRITE_LAT_S: f64 = 2.5e-3;
/// Size of one data-loader read (bytes).
pub(crate) const READ_OP_BYTES: f64 = 131_072.0;
const WRITE_OP_BYTES: f64 = 4_194_304.0;
/// Synchronous pause of the main job when it snapshots a checkpoint (ns).
pub(crate) const SNAPSHOT_PAUSE_NS: i64 = 1_800_000_000;

/// One checkpoint write burst.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Checkpoint {
    /// Job index.
    pub(crate) job: usize,
    /// Start (reference time).
    pub(crate) start: i64,
    /// End (reference time).
    pub(crate) end: i64,
    /// Write rate while active (bytes/s).
    pub(crate) rate: f64,
}

/// The pool's state at one instant.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PoolState {
    /// Mean read latency (s), what a data loader experiences per read.
    pub(crate) read_mean: f64,
    /// Median read latency (s).
    pub(crate) read_p50: f64,
    /// 99th percentile read latency (s).
    pub(crate) read_p99: f64,
    /// Median write latency (s).
    pub(crate) write_p50: f64,
    /// 99th percentile write latency (s).
    pub(crate) write_p99: f64,
    /// Outstanding requests (Little's law).
    pub(crate) queue_depth: f64,
}

/// The storage pool model.
#[derive(Debug, Clone)]
pub(crate) struct PoolModel {
    /// Bandwidth capacity (bytes/s).
    pub(crate) capacity: f64,
    /// Expected read load of both jobs' data loaders (bytes/s).
    nominal_read: f64,
    /// Checkpoint bursts, sorted by start.
    pub(crate) checkpoints: Vec<Checkpoint>,
    /// Total write rate per second bucket from `start`.
    write_by_sec: Vec<f64>,
    start: i64,
    seed: u64,
}

impl PoolModel {
    /// Builds the checkpoint schedule for `[start, end)`; `nominal_read` is the expected read load.
    pub(crate) fn new(servers: usize, nominal_read: f64, plan: &FaultPlan, start: i64, end: i64, seed: u64) -> Self {
        let capacity = servers as f64 * SERVER_BPS;
        let mut rng = Rng::stream(seed, 0x5703);
        let mut cps = Vec::new();
        // The other job: a modest checkpoint every ~8 minutes, then a storm if the scenario says so.
        let storm = plan.storm_start().unwrap_or(i64::MAX);
        let mut t = start + (rng.range(60.0, 300.0) * SEC as f64) as i64;
        while t < end {
            if t >= storm {
                break;
            }
            let dur = (rng.range(18.0, 24.0) * SEC as f64) as i64;
            cps.push(Checkpoint { job: 1, start: t, end: t + dur, rate: 0.25 * capacity });
            t += (rng.range(460.0, 500.0) * SEC as f64) as i64;
        }
        if storm < end {
            let mut t = storm;
            while t < end {
                let dur = (rng.range(16.0, 20.0) * SEC as f64) as i64;
                cps.push(Checkpoint { job: 1, start: t, end: t + dur, rate: 0.95 * capacity });
                t += dur + (rng.range(3.0, 6.0) * SEC as f64) as i64;
            }
        }
        let mut model = Self { capacity, nominal_read, checkpoints: cps, write_by_sec: Vec::new(), start, seed };
        // The main job: a 1 TB checkpoint every 10 minutes, slower when the pool is busy.
        let mut t = start + (rng.range(120.0, 480.0) * SEC as f64) as i64;
        let bytes = 1.0e12;
        while t < end {
            let busy = model.writes_at(t);
            let rate = (0.4 * capacity).min((capacity - busy).max(0.05 * capacity));
            let dur = (bytes / rate * SEC as f64) as i64;
            model.checkpoints.push(Checkpoint { job: 0, start: t, end: t + dur, rate });
            t += 600 * SEC + (rng.range(-5.0, 5.0) * SEC as f64) as i64;
        }
        model.checkpoints.sort_by_key(|c| c.start);
        let secs = ((end - start) / SEC + 120) as usize;
        model.write_by_sec = (0..secs).map(|s| model.writes_at(start + s as i64 * SEC + SEC / 2)).collect();
        model
    }

    fn writes_at(&self, t: i64) -> f64 {
        self.checkpoints.iter().filter(|c| c.start <= t && t < c.end).map(|c| c.rate).sum()
    }

    /// Total write rate (bytes/s) around `t` (one-second resolution).
    pub(crate) fn write_bps(&self, t: i64) -> f64 {
        let idx = (t - self.start).div_euclid(SEC);
        if idx < 0 {
            return 0.0;
        }
        self.write_by_sec.get(idx as usize).copied().unwrap_or(0.0)
    }

    /// Bytes job `job` wrote in `[a, b)`.
    pub(crate) fn written(&self, job: usize, a: i64, b: i64) -> f64 {
        self.checkpoints
            .iter()
            .filter(|c| c.job == job && c.start < b && c.end > a)
            .map(|c| (c.end.min(b) - c.start.max(a)) as f64 / SEC as f64 * c.rate)
            .sum()
    }

    /// Whether job `job` starts a checkpoint in `[a, b)`.
    pub(crate) fn checkpoint_starts(&self, job: usize, a: i64, b: i64) -> bool {
        self.checkpoints.iter().any(|c| c.job == job && c.start >= a && c.start < b)
    }

    /// The pool state at `t`.
    pub(crate) fn state(&self, t: i64, plan: &FaultPlan) -> PoolState {
        let fault = plan.storage_fault(t);
        let writes = self.write_bps(t);
        let util = (self.nominal_read + writes) / (self.capacity * fault.capacity_mult);
        let queueing = 1.0 / (1.0 - util.min(0.96));
        let sec = (t.div_euclid(SEC)) as u64;
        let mut noise = (0.12 * hash_normal(self.seed, 11, sec)).exp();
        if hash_unit(self.seed, 12, sec) < 0.01 {
            noise *= 1.0 + 3.0 * hash_unit(self.seed, 13, sec);
        }
        let read_mean = BASE_READ_LAT_S * queueing * fault.read_mult * noise;
        let tail = 4.5 * fault.p99_mult * (1.0 + 0.25 * hash_normal(self.seed, 14, sec).abs());
        let write_mean = BASE_WRITE_LAT_S * queueing * fault.write_mult * noise;
        let queue_depth = self.nominal_read / READ_OP_BYTES * read_mean + writes / WRITE_OP_BYTES * write_mean;
        PoolState {
            read_mean,
            read_p50: read_mean * 0.6,
            read_p99: read_mean * tail,
            write_p50: write_mean * 0.6,
            write_p99: write_mean * 5.0 * (1.0 + 0.2 * hash_normal(self.seed, 15, sec).abs()),
            queue_depth,
        }
    }
}
