//! A second scenario generator, written independently of `lockstep simulate` (it shares no code
//! with the simulator's world, workload, fault or emitter modules) to evaluate the diagnosis on
//! data it was not tuned on.
//!
//! Its own dynamics: a synchronous job whose step is `max over ranks (loader wait + compute) +
//! all-reduce transfer`, where the loader needs `fetch = base × pool latency × node CPU
//! contention` per batch and hides it behind half of the compute; collective time per rank is
//! the time it waited for the last rank plus the transfer. Faults are time windows (transient,
//! recurring or persistent) of multiplicative effects. It writes directly into a [`Store`]:
//! `topology.json`, `jobs.json`, the samples stamped by each host's skewed clock, and chrony-like
//! offset observations from which the store fits its clock models. Label conventions vary per
//! seed (NCCL Inspector with or without `rank`, per-rank or per-node loader metrics,
//! dcgm-exporter with `UUID`, `GPU5`-style indices, Kubernetes `pod` labels and a Prometheus
//! scrape `job` label).

use lockstep_engine::Store;
use lockstep_engine::clock::OffsetObservation;
use lockstep_engine::model::{SEC, SeriesKey, WriteBatch};

/// Start of every generated run: 2026-05-04T12:00:00Z.
pub const START_NS: i64 = 1_777_896_000_000_000_000;
const GPUS: usize = 8;
const NICS: usize = 2;
const JOB: &str = "train-a";
const SLURM_ID: &str = "48213";
const OTHER: &str = "batch-b";
const POOL: &str = "weka-1";

/// The situations of the evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Situation {
    /// No fault.
    Healthy,
    /// Another job floods the shared pool with checkpoint writes for 30 s to 4 min; recovers.
    StorageStorm,
    /// CPU contention on one node starves that node's data loaders.
    LoaderStarvation,
    /// A bad cable on one host NIC port (persistent or flapping).
    LinkErrors,
    /// One GPU overheats and throttles.
    Thermal,
    /// A degraded storage server, diagnosed with a window that starts inside the slowdown.
    InsideSlowPeriod,
    /// A storage storm on a store without step-time series (found on the collective time).
    MissingStepTime,
}

impl Situation {
    /// Every situation.
    pub const ALL: [Situation; 7] = [
        Situation::Healthy,
        Situation::StorageStorm,
        Situation::LoaderStarvation,
        Situation::LinkErrors,
        Situation::Thermal,
        Situation::InsideSlowPeriod,
        Situation::MissingStepTime,
    ];

    /// Name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Situation::Healthy => "healthy",
            Situation::StorageStorm => "transient storage storm",
            Situation::LoaderStarvation => "node loader starvation (rank/gpu labels)",
            Situation::LinkErrors => "link errors (persistent or flapping)",
            Situation::Thermal => "thermal throttle",
            Situation::InsideSlowPeriod => "window inside the slow period",
            Situation::MissingStepTime => "missing step time",
        }
    }
}

/// What to generate.
#[derive(Debug, Clone)]
pub struct IndependentConfig {
    /// The situation.
    pub situation: Situation,
    /// Seed.
    pub seed: u64,
    /// Nodes of the job (8 GPUs each).
    pub nodes: usize,
    /// Length in minutes.
    pub minutes: u32,
}

/// What was injected, and the window to diagnose.
#[derive(Debug, Clone, PartialEq)]
pub struct IndependentTruth {
    /// The situation.
    pub situation: Situation,
    /// The job to diagnose.
    pub job: String,
    /// Expected status (`slowdown`, `healthy`, `slow_from_start`).
    pub status: &'static str,
    /// Root-cause domain (`none` when healthy or without verdict).
    pub domain: &'static str,
    /// Root-cause entity (empty when healthy or without verdict).
    pub entity: String,
    /// Fault episodes `[start, end)` (reference ns; end None = persistent).
    pub episodes: Vec<(i64, Option<i64>)>,
    /// Window to diagnose.
    pub from: i64,
    /// Window end.
    pub to: i64,
    /// Label convention used (for reports).
    pub convention: String,
}

/// A small, self-contained random source (xorshift64* seeded by splitmix64).
struct Rand(u64);

impl Rand {
    fn new(seed: u64, stream: u64) -> Rand {
        let mut z = seed.wrapping_add(stream.wrapping_mul(0x9E37_79B9_7F4A_7C15)).wrapping_add(0x632B_E59B_D9B4_E019);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Rand((z ^ (z >> 31)) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }
    fn below(&mut self, n: usize) -> usize {
        (self.unit() * n as f64) as usize % n.max(1)
    }
    fn gauss(&mut self) -> f64 {
        let u = self.unit().max(1e-12);
        let v = self.unit();
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
    fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }
}

/// Label conventions of one run.
#[derive(Debug, Clone, Copy)]
struct Conventions {
    nccl_rank: bool,
    per_node_loader: bool,
    gpu_prefix: bool,
    pods: bool,
}

/// Fault windows: a multiplicative effect active in each `[start, end)`, ramped over `ramp` s.
#[derive(Debug, Clone, Default)]
struct Effect {
    windows: Vec<(i64, i64)>,
    ramp_s: f64,
}

impl Effect {
    /// 0..1 strength at `t`.
    fn at(&self, t: i64) -> f64 {
        self.windows
            .iter()
            .map(|&(a, b)| {
                if t < a || t >= b {
                    return 0.0;
                }
                let r = (self.ramp_s * 1e9).max(1.0);
                (((t - a) as f64 / r).min(1.0)).min(((b - t) as f64 / r * 2.0).min(1.0))
            })
            .fold(0.0, f64::max)
    }
}

/// Generates one run into `store` (which should be empty) and returns its truth.
pub fn generate(store: &Store, cfg: &IndependentConfig) -> lockstep_engine::Result<IndependentTruth> {
    let mut rng = Rand::new(cfg.seed, cfg.situation as u64 + 11);
    let nodes = cfg.nodes.max(2);
    let start = START_NS;
    let end = start + i64::from(cfg.minutes.max(4)) * 60 * SEC;
    let span = end - start;
    let conv = Conventions {
        nccl_rank: rng.chance(0.4),
        per_node_loader: rng.chance(0.3),
        gpu_prefix: rng.chance(0.5),
        pods: rng.chance(0.5),
    };
    let conv = match cfg.situation {
        // The failure class of the issue: loader by rank, NCCL by GPU only.
        Situation::LoaderStarvation => Conventions { nccl_rank: false, per_node_loader: false, ..conv },
        _ => conv,
    };
    let interval = [1i64, 2, 5, 10, 15][rng.below(5)] * SEC;
    let host = |n: usize| format!("gn{:03}", n + 1);
    let hosts: Vec<String> = (0..nodes).map(host).collect();
    let aux = "gn-aux".to_string();
    let servers: Vec<String> = (0..3).map(|i| format!("wk{i}")).collect();
    let offsets: Vec<i64> = (0..nodes + 1).map(|_| (rng.range(-3.0, 3.0) * 1e9) as i64).collect();

    // The fault.
    let mut storm = Effect { ramp_s: 8.0, ..Default::default() };
    let mut server_slow = Effect { ramp_s: 20.0, ..Default::default() };
    let mut cpu = Effect { ramp_s: 15.0, ..Default::default() };
    let mut link = Effect { ramp_s: 2.0, ..Default::default() };
    let mut heat = Effect { ramp_s: 40.0, ..Default::default() };
    let victim = rng.below(nodes);
    let vgpu = rng.below(GPUS);
    let vnic = rng.below(NICS);
    let onset = start + (span as f64 * rng.range(0.35, 0.55)) as i64;
    let mut from = start;
    let (status, domain, entity) = match cfg.situation {
        Situation::Healthy => ("healthy", "none", String::new()),
        Situation::StorageStorm | Situation::MissingStepTime => {
            let dur = (rng.range(45.0, 240.0) * 1e9) as i64;
            storm.windows.push((onset, onset + dur));
            ("slowdown", "storage", POOL.to_string())
        }
        Situation::LoaderStarvation => {
            cpu.windows.push((onset, end));
            ("slowdown", "data_loading", hosts[victim].clone())
        }
        Situation::LinkErrors => {
            if rng.chance(0.5) {
                link.windows.push((onset, end));
            } else {
                // Flapping: bursts of 40-90 s every few minutes.
                let mut t = onset;
                while t < end - 60 * SEC {
                    let d = (rng.range(40.0, 90.0) * 1e9) as i64;
                    link.windows.push((t, t + d));
                    t += d + (rng.range(90.0, 180.0) * 1e9) as i64;
                }
            }
            ("slowdown", "network", format!("{}/mlx5_{vnic}:1", hosts[victim]))
        }
        Situation::Thermal => {
            heat.windows.push((onset, end));
            let gpu = lockstep_engine::metrics::entity::gpu_name(&hosts[victim], &vgpu.to_string());
            ("slowdown", "compute", gpu)
        }
        Situation::InsideSlowPeriod => {
            let on = start + span / 4;
            server_slow.windows.push((on, end));
            from = on + (span as f64 * rng.range(0.2, 0.35)) as i64;
            ("slow_from_start", "storage", POOL.to_string())
        }
    };

    // Documents.
    let nic_json = |n: usize| {
        (0..NICS)
            .map(|k| {
                format!(
                    r#"{{"device":"mlx5_{k}","port":1,"fabric":"infiniband","switch":"lf{}","switch_port":{}}}"#,
                    k,
                    n + 1
                )
            })
            .collect::<Vec<_>>()
            .join(",")
    };
    let mut node_docs: Vec<String> =
        (0..nodes).map(|n| format!(r#"{{"name":"{}","gpus":{GPUS},"nics":[{}]}}"#, hosts[n], nic_json(n))).collect();
    node_docs.push(format!(r#"{{"name":"{aux}","gpus":{GPUS},"nics":[{}]}}"#, nic_json(nodes)));
    let leaves: Vec<String> = (0..NICS)
        .map(|k| format!(r#"{{"name":"lf{k}","tier":"leaf","links":[{{"port":200,"peer":"sp0","peer_port":{k}}}]}}"#))
        .collect();
    let servers_json: Vec<String> = servers
        .iter()
        .enumerate()
        .map(|(i, s)| {
            format!(
                r#"{{"name":"{s}","nics":[{{"device":"mlx5_0","port":1,"fabric":"infiniband","switch":"lf0","switch_port":{}}}]}}"#,
                150 + i
            )
        })
        .collect();
    let topology = format!(
        r#"{{"nodes":[{}],"switches":[{},{{"name":"sp0","tier":"spine"}}],"storage_pools":[{{"name":"{POOL}","kind":"weka","servers":[{}]}}]}}"#,
        node_docs.join(","),
        leaves.join(","),
        servers_json.join(",")
    );
    store.write_document("topology.json", &topology)?;
    let job_nodes = hosts.iter().map(|h| format!("\"{h}\"")).collect::<Vec<_>>().join(",");
    let jobs = format!(
        r#"[{{"job":"{JOB}","nodes":[{job_nodes}],"start":{start},"end":{end},"storage_pool":"{POOL}","slurm_job_id":"{SLURM_ID}"}},
            {{"job":"{OTHER}","nodes":["{aux}"],"start":{start},"end":{end},"storage_pool":"{POOL}"}}]"#
    );
    store.write_document("jobs.json", &jobs)?;

    // Clock offsets (chrony-like observations every minute, ±1 ms).
    let mut obs = Vec::new();
    let all_hosts: Vec<&String> = hosts.iter().chain(std::iter::once(&aux)).collect();
    for (i, h) in all_hosts.iter().enumerate() {
        let mut t = start - 120 * SEC;
        while t <= end + 120 * SEC {
            obs.push(OffsetObservation {
                host: (*h).clone(),
                local_time: t + offsets[i],
                offset_ns: offsets[i],
                uncertainty_ns: 1_000_000,
            });
            t += 60 * SEC;
        }
    }
    for s in &servers {
        obs.push(OffsetObservation { host: s.clone(), local_time: start, offset_ns: 0, uncertainty_ns: 1_000_000 });
        obs.push(OffsetObservation { host: s.clone(), local_time: end, offset_ns: 0, uncertainty_ns: 1_000_000 });
    }
    store.with_clocks(|r| {
        r.add_offsets(&obs)?;
        r.refit().map(|_| ())
    })?;

    let key = |metric: &str, host: &str, labels: &[(&str, String)]| {
        SeriesKey::new(
            metric,
            std::iter::once(("host", host.to_string())).chain(labels.iter().map(|(k, v)| (*k, v.clone()))),
        )
    };
    let local = |n: usize, t: i64| t + offsets[n];
    let mut batch = WriteBatch::default();
    let flush = |batch: &mut WriteBatch| -> lockstep_engine::Result<()> {
        if !batch.is_empty() {
            store.write(batch)?;
            *batch = WriteBatch::default();
        }
        Ok(())
    };

    // Per-rank keys.
    let ranks = nodes * GPUS;
    let gpu_label = |g: usize| if conv.gpu_prefix { format!("GPU{g}") } else { g.to_string() };
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

    // Steps.
    let base_compute = rng.range(0.45, 0.8);
    let base_fetch = rng.range(0.08, 0.2);
    let base_xfer = rng.range(0.12, 0.3);
    // Input faults multiply the fetch time by at least enough to outgrow the half of the
    // compute that hides it (otherwise the fault would not slow the job at all).
    let amp = (0.8 * base_compute / base_fetch).max(4.0);
    let mut t = start + SEC;
    let mut step_index = 0u64;
    let mut waits = vec![0.0; ranks];
    let mut arrive = vec![0.0; ranks];
    while t < end {
        let storm_k = storm.at(t);
        let server_k = server_slow.at(t);
        let pool_mult = 1.0 + amp * storm_k.max(server_k);
        let xfer = base_xfer * (1.0 + 0.8 * link.at(t)) * (1.0 + 0.03 * rng.gauss()).max(0.5);
        for r in 0..ranks {
            let n = r / GPUS;
            let g = r % GPUS;
            let slow_gpu = if n == victim && g == vgpu { 1.0 + 0.4 * heat.at(t) } else { 1.0 };
            let c = base_compute * slow_gpu * (1.0 + 0.015 * rng.gauss()).max(0.5);
            let cpu_mult = if n == victim { 1.0 + amp * cpu.at(t) } else { 1.0 };
            let fetch = base_fetch * pool_mult * cpu_mult * (1.0 + 0.1 * rng.gauss()).max(0.2);
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
            if cfg.situation != Situation::MissingStepTime {
                let logged = t_end + (rng.range(0.5, 4.0) * 1e6) as i64;
                batch.push(step_keys[r].clone(), local(n, logged), (dur * 1e6).round() / 1e6);
            }
            if !conv.per_node_loader {
                batch.push(wait_keys[r].clone(), local(n, t + (waits[r] * 1e9) as i64), (waits[r] * 1e5).round() / 1e5);
            }
        }
        if conv.per_node_loader {
            for n in 0..nodes {
                let w = waits[n * GPUS..(n + 1) * GPUS].iter().copied().fold(0.0, f64::max);
                batch.push(wait_keys[n].clone(), local(n, t + (w * 1e9) as i64), (w * 1e5).round() / 1e5);
            }
        }
        t = t_end;
        step_index += 1;
        if batch.len() > 200_000 {
            flush(&mut batch)?;
        }
    }
    flush(&mut batch)?;

    // Scraped series.
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
    let red_nic = (rng.below(nodes), rng.below(NICS));
    let mut counters: std::collections::HashMap<String, f64> = std::collections::HashMap::new();
    let mut bump = |batch: &mut WriteBatch, k: SeriesKey, time: i64, inc: f64| {
        let c = counters.entry(k.to_string()).or_insert(1e6);
        *c += inc.max(0.0);
        batch.push(k, time, c.round());
    };
    let mut t = start;
    let dt = interval as f64 / 1e9;
    while t < end {
        for (n, name) in hosts.iter().enumerate() {
            let lt = local(n, t + (rng.range(0.0, 0.3) * 1e9) as i64);
            let cpu_rate = 0.05 + 0.03 * rng.unit() + if n == victim { 2.5 * cpu.at(t) } else { 0.0 };
            bump(&mut batch, key("node_pressure_cpu_waiting_seconds_total", name, &[]), lt, cpu_rate * dt);
            for g in 0..GPUS {
                let busy = (base_compute / (base_compute + base_fetch * 0.3 + base_xfer)).min(0.95);
                let starve = if n == victim { 1.0 / (1.0 + 3.0 * cpu.at(t)) } else { 1.0 };
                let pool = 1.0 / (1.0 + 2.0 * storm.at(t) + 1.5 * server_slow.at(t));
                let sm = (busy * starve * pool * (1.0 + 0.02 * rng.gauss())).clamp(0.0, 1.0);
                batch.push(key("DCGM_FI_PROF_SM_ACTIVE", name, &dcgm(n, g)), lt, (sm * 1000.0).round() / 1000.0);
                let hot = if n == victim && g == vgpu { heat.at(t) } else { 0.0 };
                let temp = 62.0 + 4.0 * rng.unit() + 28.0 * hot;
                batch.push(key("DCGM_FI_DEV_GPU_TEMP", name, &dcgm(n, g)), lt, temp.round());
                let bits = if temp > 88.0 { 0x20 } else { 0 };
                batch.push(key("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", name, &dcgm(n, g)), lt, f64::from(bits));
            }
            for k in 0..NICS {
                let labels = [("device", format!("mlx5_{k}")), ("port", "1".to_string())];
                let bad = if n == victim && k == vnic { link.at(t) } else { 0.0 };
                let red = if (n, k) == red_nic { 0.3 } else { 0.0 };
                let sym = (red + 40.0 * bad) * dt * rng.range(0.5, 1.5);
                bump(&mut batch, key("node_infiniband_symbol_error_total", name, &labels), lt, sym);
                bump(&mut batch, key("node_infiniband_port_errors_received_total", name, &labels), lt, 15.0 * bad * dt);
                let wait = (2e5 + 4e6 * link.at(t)) * dt * rng.range(0.8, 1.2);
                bump(&mut batch, key("node_infiniband_port_transmit_wait_total", name, &labels), lt, wait);
            }
        }
        // The other job's node and the pool (stamped by the first server).
        let storm_k = storm.at(t);
        let server_k = server_slow.at(t);
        let lat_mult = 1.0 + amp * storm_k.max(server_k);
        for (q, base) in [("0.5", 0.004), ("0.99", 0.02)] {
            let v = base * lat_mult * (1.0 + 0.08 * rng.gauss()).max(0.3);
            batch.push(
                key(
                    "storage_read_latency_seconds",
                    &servers[0],
                    &[("pool", POOL.to_string()), ("quantile", q.to_string())],
                ),
                t,
                (v * 1e6).round() / 1e6,
            );
        }
        for (job, rate) in [(JOB, 2e9 * (1.0 / lat_mult)), (OTHER, 1e8 + 2.5e10 * storm_k)] {
            let k =
                key("storage_write_bytes_total", &servers[0], &[("pool", POOL.to_string()), ("job", job.to_string())]);
            bump(&mut batch, k, t, rate * dt * rng.range(0.9, 1.1));
        }
        for (i, s) in servers.iter().enumerate() {
            let slow = if i == 1 { server_k } else { 0.0 };
            let busy = (0.2 + 0.6 * storm_k + 0.75 * slow) * dt * rng.range(0.9, 1.1);
            bump(
                &mut batch,
                key("node_disk_read_time_seconds_total", s, &[("device", "nvme0n1".to_string())]),
                t,
                busy,
            );
        }
        t += interval;
        if batch.len() > 200_000 {
            flush(&mut batch)?;
        }
    }
    flush(&mut batch)?;
    let episodes = [&storm, &server_slow, &cpu, &link, &heat]
        .iter()
        .flat_map(|e| e.windows.iter().map(|&(a, b)| (a, (b < end).then_some(b))))
        .collect();
    Ok(IndependentTruth {
        situation: cfg.situation,
        job: JOB.to_string(),
        status,
        domain,
        entity,
        episodes,
        from,
        to: end,
        convention: format!(
            "nccl {} | loader {} | dcgm gpu {}{} | every {} s",
            if conv.nccl_rank { "rank+gpu" } else { "gpu only" },
            if conv.per_node_loader { "per node" } else { "per rank" },
            if conv.gpu_prefix { "GPU<n>" } else { "<n>" },
            if conv.pods { " + pod" } else { "" },
            interval / SEC
        ),
    })
}
