//! The applications' series: each job's per-rank step times, collective times and data-loader
//! waits, stamped by the hosts' clocks (and the helpers every writer uses).

use lockstep_engine::Store;
use lockstep_engine::model::{SEC, SeriesKey, WriteBatch};

use super::rand::Rand;
use super::scenario::Plan;
use super::{Exporter, GPUS, JOB, NEIGHBOUR, NEIGHBOUR_SLURM_ID, SLURM_ID, Situation};

pub(super) fn key(metric: &str, host: &str, labels: &[(&str, String)]) -> SeriesKey {
    SeriesKey::new(
        metric,
        std::iter::once(("host", host.to_string())).chain(labels.iter().map(|(k, v)| (*k, v.clone()))),
    )
}

/// Writes and empties `batch` when it is large (or `force`).
pub(super) fn flush(store: &Store, batch: &mut WriteBatch, force: bool) -> lockstep_engine::Result<()> {
    if (force && !batch.is_empty()) || batch.len() > 200_000 {
        store.write(batch)?;
        *batch = WriteBatch::default();
    }
    Ok(())
}

/// The job's steps: per-rank step time, collective time and data-loader wait.
#[allow(clippy::too_many_arguments)]
pub(super) fn write_steps(
    store: &Store,
    plan: &Plan,
    rng: &mut Rand,
    calm: &mut Rand,
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
    let with_waits = !plan.lacks(Exporter::LoaderWait);
    let local = |n: usize, t: i64| plan.clocks[n].local(t);
    let mut batch = WriteBatch::default();
    let mut t = start + SEC;
    let mut step_index = 0u64;
    let mut waits = vec![0.0; ranks];
    let mut arrive = vec![0.0; ranks];
    // Each node's log fetch factor (the benign wander of its input pipeline).
    let mut wander = vec![0.0; nodes];
    let w = &plan.wobble;
    while t < end {
        if w.fetch_sd > 0.0 {
            let fresh = (1.0 - w.fetch_rho * w.fetch_rho).sqrt() * w.fetch_sd;
            for x in &mut wander {
                *x = w.fetch_rho * *x + fresh * calm.gauss();
            }
        }
        let pace = w.pace(t);
        let pool_mult = plan.storm.mult(t).max(plan.server.mult(t));
        let cpu_mult = plan.cpu.mult(t);
        let heat_mult = plan.heat.mult(t);
        let xfer = base_xfer * plan.link.mult(t) * (1.0 + 0.03 * rng.gauss()).max(0.5);
        for r in 0..ranks {
            let n = r / GPUS;
            let g = r % GPUS;
            let slow_gpu = if (n, g) == plan.heat_gpu { heat_mult } else { 1.0 };
            let c = base_compute * pace * slow_gpu * (1.0 + 0.015 * rng.gauss()).max(0.5);
            let cpu = if n == plan.cpu_node { cpu_mult } else { 1.0 };
            let fetch = base_fetch * wander[n].exp() * pool_mult * cpu * (1.0 + 0.1 * rng.gauss()).max(0.2);
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
pub(super) fn write_neighbour(
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
