//! node_exporter host series (CPU pressure, a few CPUs by mode, load, local disk) of every compute
//! node, disk series of the storage servers, and the storage pool's own exporter (latency
//! quantiles, bytes by job, queue depth) stamped by the pool's first server.

use super::SimError;
use super::cluster::POOL;
use super::rng::Rng;
use super::sink::{Label, SeriesId, Sink};
use super::world::{Scraper, World};

const CPUS: [&str; 4] = ["0", "1", "2", "3"];
const MODES: [&str; 4] = ["user", "system", "iowait", "idle"];
const LOAD_TAU_S: f64 = 60.0;
const HEALTHY_READ_LAT_S: f64 = 1.3e-3;
const DISK: &str = "nvme0n1";
const SERVER_READ_BYTES: f64 = 1_048_576.0;

struct NodeSeries {
    pressure: SeriesId,
    cpu: Vec<SeriesId>,
    load: SeriesId,
    disk_time: SeriesId,
    disk_reads: SeriesId,
    counters: Vec<f64>,
    load_value: f64,
    pressure_total: f64,
    disk: [f64; 2],
}

struct PoolSeries {
    gauges: [SeriesId; 5],
    read_bytes: Vec<SeriesId>,
    write_bytes: Vec<SeriesId>,
    read_total: Vec<f64>,
    write_total: Vec<f64>,
}

/// Emits host, storage-server disk and storage-pool series.
pub(crate) struct HostEmitter {
    nodes: Vec<(usize, Scraper, NodeSeries)>,
    servers: Vec<(usize, Scraper, [SeriesId; 2], [f64; 2])>,
    pool: PoolSeries,
    pool_scraper: Scraper,
    rng: Rng,
}

impl HostEmitter {
    /// Registers every series.
    pub(crate) fn new(world: &World<'_>, sink: &mut Sink, interval: i64, start: i64, seed: u64) -> Self {
        let c = world.cluster;
        let mut rng = Rng::stream(seed, 0x4057);
        let scraper = |h: usize| Scraper::new(interval, start, Rng::stream(seed, 0x4058_0000 + h as u64));
        let nodes = c
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let name = n.name.as_str();
                let cpu = CPUS
                    .iter()
                    .flat_map(|cpu| MODES.map(|m| (*cpu, m)))
                    .map(|(cpu, mode)| {
                        sink.register(name, "node_cpu_seconds_total", &[(Label::Cpu, cpu), (Label::Mode, mode)])
                    })
                    .collect();
                let boot = rng.range(1e5, 3e6);
                let counters = MODES
                    .iter()
                    .cycle()
                    .take(CPUS.len() * MODES.len())
                    .map(|m| boot * if *m == "idle" { 0.5 } else { 0.15 })
                    .collect();
                let series = NodeSeries {
                    pressure: sink.register(name, "node_pressure_cpu_waiting_seconds_total", &[]),
                    cpu,
                    load: sink.register(name, "node_load1", &[]),
                    disk_time: sink.register(name, "node_disk_read_time_seconds_total", &[(Label::Device, DISK)]),
                    disk_reads: sink.register(name, "node_disk_reads_completed_total", &[(Label::Device, DISK)]),
                    counters,
                    load_value: 40.0,
                    pressure_total: boot * 0.02,
                    disk: [boot * 0.01, boot * 40.0],
                };
                (i, scraper(i), series)
            })
            .collect();
        let servers = c
            .servers
            .iter()
            .enumerate()
            .map(|(s, srv)| {
                let h = c.server_host(s);
                let ids = [
                    sink.register(&srv.name, "node_disk_read_time_seconds_total", &[(Label::Device, DISK)]),
                    sink.register(&srv.name, "node_disk_reads_completed_total", &[(Label::Device, DISK)]),
                ];
                (h, scraper(h), ids, [rng.range(1e4, 1e5), rng.range(1e7, 1e8)])
            })
            .collect();
        let host = c.servers.first().map_or(POOL, |s| s.name.as_str());
        let mut q = |metric, quantile| sink.register(host, metric, &[(Label::Pool, POOL), (Label::Quantile, quantile)]);
        let gauges = [
            q("storage_read_latency_seconds", "0.5"),
            q("storage_read_latency_seconds", "0.99"),
            q("storage_write_latency_seconds", "0.5"),
            q("storage_write_latency_seconds", "0.99"),
            sink.register(host, "storage_queue_depth", &[(Label::Pool, POOL)]),
        ];
        let mut by_job = |metric| {
            std::iter::once(sink.register(host, metric, &[(Label::Pool, POOL)]))
                .chain(
                    c.jobs.iter().map(|j| sink.register(host, metric, &[(Label::Pool, POOL), (Label::Job, &j.name)])),
                )
                .collect::<Vec<_>>()
        };
        let read_bytes = by_job("storage_read_bytes_total");
        let write_bytes = by_job("storage_write_bytes_total");
        let mut totals = || (0..=c.jobs.len()).map(|_| rng.range(1e13, 1e15).round()).collect::<Vec<_>>();
        let pool = PoolSeries { gauges, read_bytes, write_bytes, read_total: totals(), write_total: totals() };
        let pool_host = c.server_host(0);
        Self { nodes, servers, pool, pool_scraper: scraper(pool_host + 10_000), rng: Rng::stream(seed, 0x4059) }
    }

    /// Scrapes every host and the pool once for the tick starting at `tick_start`.
    pub(crate) fn tick(&mut self, world: &World<'_>, tick_start: i64, sink: &mut Sink) -> Result<(), SimError> {
        let plan = world.plan;
        let rng = &mut self.rng;
        for (n, scraper, s) in &mut self.nodes {
            let (a, b) = scraper.next(tick_start);
            let dt = (b - a) as f64 / 1e9;
            let local = world.clocks[*n].local(b);
            let rogue = plan.rogue_cpu(*n, b);
            let lat_factor = world.pool.state(b, plan).read_mean / HEALTHY_READ_LAT_S;
            let system = 0.06;
            let mut iowait_sum = 0.0;
            for (c, chunk) in s.counters.chunks_mut(MODES.len()).enumerate() {
                let mut user = (0.42 + 0.03 * rng.normal()).clamp(0.0, 0.9);
                let mut iowait = (0.012 * lat_factor * rng.lognormal(0.2)).min(0.25);
                user += (0.97 - user - system) * rogue;
                iowait *= 1.0 - rogue;
                iowait_sum += iowait;
                let idle = (1.0 - user - system - iowait).max(0.0);
                for (m, frac) in [user, system, iowait, idle].into_iter().enumerate() {
                    chunk[m] += frac * dt;
                    sink.push(s.cpu[c * MODES.len() + m], local, (chunk[m] * 100.0).round() / 100.0)?;
                }
            }
            let iowait = iowait_sum / CPUS.len() as f64;
            let pressure_rate = 0.03 * rng.lognormal(0.3) + 0.55 * rogue;
            let runnable = 40.0 + 3.0 * rng.normal() + 110.0 * rogue + 30.0 * iowait;
            s.load_value += (runnable - s.load_value) * (1.0 - (-dt / LOAD_TAU_S).exp());
            let reads = rng.poisson(40.0 * dt) as f64;
            s.disk[0] += reads * 0.15e-3 * rng.lognormal(0.2);
            s.disk[1] += reads;
            s.pressure_total += pressure_rate * dt;
            sink.push(s.pressure, local, (s.pressure_total * 1000.0).round() / 1000.0)?;
            sink.push(s.load, local, (s.load_value * 100.0).round() / 100.0)?;
            sink.push(s.disk_time, local, (s.disk[0] * 1000.0).round() / 1000.0)?;
            sink.push(s.disk_reads, local, s.disk[1])?;
        }
        let n_servers = self.servers.len().max(1) as f64;
        for (i, (h, scraper, ids, totals)) in self.servers.iter_mut().enumerate() {
            let (a, b) = scraper.next(tick_start);
            let local = world.clocks[*h].local(b);
            let (reads, _) = world.pool_traffic(a, b);
            let ops = (reads / n_servers / SERVER_READ_BYTES).round();
            let queueing = (world.pool.state(b, plan).read_mean / HEALTHY_READ_LAT_S).max(1.0).sqrt();
            totals[0] += ops * 0.5e-3 * queueing * plan.disk_factor(i, b) * rng.lognormal(0.1);
            totals[1] += ops;
            sink.push(ids[0], local, (totals[0] * 1000.0).round() / 1000.0)?;
            sink.push(ids[1], local, totals[1])?;
        }
        let (a, b) = self.pool_scraper.next(tick_start);
        let local = world.clocks[world.cluster.server_host(0)].local(b);
        let st = world.pool.state(b, plan);
        let p = &mut self.pool;
        let gauges = [st.read_p50, st.read_p99, st.write_p50, st.write_p99, st.queue_depth.round()];
        for (id, v) in p.gauges.iter().zip(gauges) {
            sink.push(*id, local, v)?;
        }
        for j in 0..world.jobs.len() {
            p.read_total[j + 1] += world.job_reads(j, a, b).round();
            p.write_total[j + 1] += world.pool.written(j, a, b).round();
        }
        let (reads, writes) = world.pool_traffic(a, b);
        p.read_total[0] += reads.round();
        p.write_total[0] += writes.round();
        for (ids, totals) in [(&p.read_bytes, &p.read_total), (&p.write_bytes, &p.write_total)] {
            for (id, v) in ids.iter().zip(totals.iter()) {
                sink.push(*id, local, *v)?;
            }
        }
        Ok(())
    }
}
