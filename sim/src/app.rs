//! Event series written by the training application and NCCL Inspector: one sample per rank per
//! step (step duration, data-loader wait, all-reduce execution time and bus bandwidth, and the
//! `collective_end` barrier marker), plus one per checkpoint. Each is stamped by the rank's host
//! clock at the moment it happened.

use super::SimError;
use super::rng::Rng;
use super::sink::{Label, SeriesId, Sink};
use super::world::World;

struct RankSeries {
    host: usize,
    step: SeriesId,
    wait: SeriesId,
    exec: SeriesId,
    busbw: SeriesId,
    end: SeriesId,
}

struct JobSeries {
    ranks: Vec<RankSeries>,
    checkpoint: SeriesId,
    checkpoint_host: usize,
}

/// Emits the per-step and per-checkpoint events of every job.
pub(crate) struct AppEmitter {
    jobs: Vec<JobSeries>,
    rng: Rng,
}

impl AppEmitter {
    /// Registers every rank's series.
    pub(crate) fn new(world: &World<'_>, sink: &mut Sink, seed: u64) -> Self {
        let c = world.cluster;
        let jobs = world
            .jobs
            .iter()
            .map(|job| {
                let name = c.jobs[job.job].name.as_str();
                let comm = format!("{name}/world");
                let ranks = (0..job.n_ranks())
                    .map(|r| {
                        let (node, gpu) = job.rank_location(r);
                        let host = c.nodes[node].name.as_str();
                        let rank = r.to_string();
                        let gpu = gpu.to_string();
                        let app = [(Label::Job, name), (Label::Rank, rank.as_str())];
                        let nccl = [
                            (Label::Collective, "AllReduce"),
                            (Label::Gpu, gpu.as_str()),
                            (Label::CommName, comm.as_str()),
                            (Label::SlurmJobId, name),
                            (Label::Rank, rank.as_str()),
                        ];
                        RankSeries {
                            host: node,
                            step: sink.register(host, "train_step_duration_seconds", &app),
                            wait: sink.register(host, "dataloader_wait_seconds", &app),
                            exec: sink.register(host, "nccl_collective_exec_time_microseconds", &nccl),
                            busbw: sink.register(host, "nccl_bus_bandwidth_gbs", &nccl),
                            end: sink.register(host, "collective_end", &app),
                        }
                    })
                    .collect();
                let first = c.jobs[job.job].nodes.first().copied().unwrap_or(0);
                let checkpoint =
                    sink.register(&c.nodes[first].name, "checkpoint_write_duration_seconds", &[(Label::Job, name)]);
                JobSeries { ranks, checkpoint, checkpoint_host: first }
            })
            .collect();
        Self { jobs, rng: Rng::stream(seed, 0xA99) }
    }

    /// Emits every event that happened in `[t0, t1)`.
    pub(crate) fn tick(&mut self, world: &World<'_>, t0: i64, t1: i64, sink: &mut Sink) -> Result<(), SimError> {
        for (job, series) in world.jobs.iter().zip(&self.jobs) {
            let n = job.n_ranks() as f64;
            let algo_factor = if n > 1.0 { 2.0 * (n - 1.0) / n } else { 1.0 };
            for st in job.steps.iter().filter(|st| st.end >= t0 && st.end < t1) {
                let duration = (st.end - st.start) as f64 / 1e9;
                for (rs, r) in series.ranks.iter().zip(&st.ranks) {
                    let clock = &world.clocks[rs.host];
                    sink.push(rs.wait, clock.local(st.start + r.wait), r.wait as f64 / 1e9)?;
                    let done = st.xfer_end + 2_000 + self.rng.exp(15_000.0) as i64;
                    let exec_us = ((done - r.enter) as f64 / 1e3).max(1.0);
                    let local_done = clock.local(done);
                    sink.push(rs.exec, local_done, exec_us.round())?;
                    let busbw = job.params.message_bytes * algo_factor / (exec_us * 1e-6) / 1e9;
                    sink.push(rs.busbw, local_done, (busbw * 100.0).round() / 100.0)?;
                    sink.push(rs.end, local_done, st.index as f64)?;
                    let logged = st.end + self.rng.range(0.5e6, 3e6) as i64;
                    let own = duration + 2e-4 * self.rng.normal();
                    sink.push(rs.step, clock.local(logged), (own * 1e6).round() / 1e6)?;
                }
            }
            for cp in world.pool.checkpoints.iter().filter(|cp| cp.job == job.job && cp.end >= t0 && cp.end < t1) {
                let secs = (cp.end - cp.start) as f64 / 1e9 * self.rng.lognormal(0.01);
                let local = world.clocks[series.checkpoint_host].local(cp.end);
                sink.push(series.checkpoint, local, (secs * 1000.0).round() / 1000.0)?;
            }
        }
        Ok(())
    }
}
