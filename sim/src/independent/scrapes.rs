//! The scraped series: dcgm-exporter, node_exporter (CPU pressure, InfiniBand) and the storage
//! pool and servers, each exporter on its own interval, counters as integers.

use lockstep_engine::Store;
use lockstep_engine::model::{SeriesKey, WriteBatch};

use super::rand::Rand;
use super::scenario::Plan;
use super::steps::{flush, key};
use super::{Exporter, GPUS, JOB, NEIGHBOUR, NICS, OTHER, POOL};

/// A counter that grows by a rate, rounded to integers like the exporters' counters.
#[derive(Default)]
pub(super) struct Counters(std::collections::HashMap<SeriesKey, f64>);

impl Counters {
    pub(super) fn bump(&mut self, batch: &mut WriteBatch, k: SeriesKey, time: i64, inc: f64) {
        let c = self.0.entry(k.clone()).or_insert(1e6);
        *c += inc.max(0.0);
        batch.push(k, time, c.round());
    }
}

/// The scraped series: dcgm-exporter, node_exporter (CPU pressure, InfiniBand) and the pool,
/// each on its own interval.
#[allow(clippy::too_many_arguments)]
pub(super) fn write_scrapes(
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
    if !plan.lacks(Exporter::Dcgm) {
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
            if !plan.lacks(Exporter::NodeCpu) {
                let starved = if n == plan.cpu_node { (0.3 + 3.0 * plan.cpu.magnitude) * plan.cpu.at(t) } else { 0.0 };
                let cpu_rate = 0.05 + 0.03 * rng.unit() + starved;
                counters.bump(&mut batch, key("node_pressure_cpu_waiting_seconds_total", name, &[]), lt, cpu_rate * dt);
            }
            if plan.lacks(Exporter::Infiniband) {
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
        if !plan.lacks(Exporter::StorageServers) {
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
