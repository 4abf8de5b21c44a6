//! Tests of the whole simulator: every scenario writes a readable, self-consistent bundle, and
//! the injected fault is visible in the exported signals (read back from the Parquet files, with
//! times mapped to the reference clock through the truth's clocks).
//! One file (over 600 lines) so that the scenarios share the bundle reader.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::path::Path;

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{Float64Type, Int64Type};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use super::*;

struct Bundle {
    _dir: tempfile::TempDir,
    summary: SimSummary,
    samples: Vec<RecordBatch>,
}

fn read_parquet(path: &Path) -> Vec<RecordBatch> {
    let file = File::open(path).unwrap();
    let reader = ParquetRecordBatchReaderBuilder::try_new(file).unwrap().build().unwrap();
    reader.map(|b| b.unwrap()).collect()
}

fn small(scenario: Scenario, seed: u64) -> SimConfig {
    SimConfig { scenario, nodes: 4, minutes: 4, seed, ..SimConfig::default() }
}

fn run(cfg: &SimConfig) -> Bundle {
    let dir = tempfile::tempdir().unwrap();
    let summary = simulate(cfg, dir.path()).unwrap();
    let samples = read_parquet(&dir.path().join("samples.parquet"));
    check_bundle(dir.path(), &summary, &samples);
    Bundle { _dir: dir, summary, samples }
}

/// Structural checks every bundle must pass.
fn check_bundle(dir: &Path, summary: &SimSummary, samples: &[RecordBatch]) {
    let rows: usize = samples.iter().map(|b| b.num_rows()).sum();
    assert_eq!(rows as u64, summary.samples);
    let schema = samples[0].schema();
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    assert_eq!(&names[..4], ["time", "host", "metric", "value"]);
    let mut series = HashSet::new();
    let mut hosts = HashSet::new();
    for b in samples {
        let label_cols: Vec<_> = (4..b.num_columns()).map(|i| b.column(i).as_string::<i32>()).collect();
        let host = b.column(1).as_string::<i32>();
        let metric = b.column(2).as_string::<i32>();
        for i in 0..b.num_rows() {
            let labels: Vec<Option<&str>> = label_cols.iter().map(|c| c.is_valid(i).then(|| c.value(i))).collect();
            series.insert((host.value(i).to_string(), metric.value(i).to_string(), format!("{labels:?}")));
            hosts.insert(host.value(i).to_string());
        }
    }
    assert_eq!(series.len() as u64, summary.series);
    let truth: Truth = serde_json::from_slice(&std::fs::read(dir.join("truth.json")).unwrap()).unwrap();
    assert_eq!(truth, summary.truth);
    for h in &hosts {
        assert!(truth.clocks.contains_key(h), "host {h} has no true clock");
    }
    let topo: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("topology.json")).unwrap()).unwrap();
    assert_eq!(topo["nodes"].as_array().map(Vec::len), Some(truth.nodes));
    assert!(topo["switches"].as_array().is_some_and(|s| s.iter().filter(|s| s["tier"] == "spine").count() >= 2));
    let jobs: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("jobs.json")).unwrap()).unwrap();
    assert_eq!(jobs[0]["job"], "llm-70b");
    assert_eq!(jobs[0]["storage_pool"], jobs[1]["storage_pool"]);
    let sync: usize = read_parquet(&dir.join("clock_sync.parquet")).iter().map(|b| b.num_rows()).sum();
    assert_eq!(sync as u64, summary.clock_exchanges);
    let mut chain = truth.chain.iter().map(|l| l.onset_ns).collect::<Vec<_>>();
    chain.sort_unstable();
    assert_eq!(chain, truth.chain.iter().map(|l| l.onset_ns).collect::<Vec<_>>());
}

/// Reference time of a sample stamped `local` by `host`.
fn to_ref(truth: &Truth, host: &str, local: i64) -> i64 {
    let c = truth.clocks[host];
    let since = (local - truth.start_ns - c.offset_ns) as f64 / (1.0 + c.drift_ppb as f64 * 1e-9);
    truth.start_ns + since as i64
}

impl Bundle {
    fn truth(&self) -> &Truth {
        &self.summary.truth
    }

    /// `(reference time, value)` of every sample of `metric` matching `host` and `labels`.
    fn select(&self, metric: &str, host: Option<&str>, labels: &[(&str, &str)]) -> Vec<(i64, f64)> {
        let mut out = Vec::new();
        for b in &self.samples {
            let hosts = b.column(1).as_string::<i32>();
            let metrics = b.column(2).as_string::<i32>();
            let times = b.column(0).as_primitive::<Int64Type>();
            let values = b.column(3).as_primitive::<Float64Type>();
            let cols: Vec<_> =
                labels.iter().map(|(k, v)| (b.column_by_name(k).unwrap().as_string::<i32>(), *v)).collect();
            for i in 0..b.num_rows() {
                if metrics.value(i) != metric || host.is_some_and(|h| hosts.value(i) != h) {
                    continue;
                }
                if cols.iter().all(|(c, v)| c.is_valid(i) && c.value(i) == *v) {
                    out.push((to_ref(self.truth(), hosts.value(i), times.value(i)), values.value(i)));
                }
            }
        }
        out.sort_by_key(|x| x.0);
        out
    }

    /// Increase of a counter per second over `[a, b)`.
    fn rate(&self, metric: &str, host: &str, labels: &[(&str, &str)], a: i64, b: i64) -> f64 {
        let s: Vec<_> = self.select(metric, Some(host), labels).into_iter().filter(|x| x.0 >= a && x.0 < b).collect();
        match (s.first(), s.last()) {
            (Some(f), Some(l)) if l.0 > f.0 => (l.1 - f.1) / ((l.0 - f.0) as f64 / 1e9),
            _ => 0.0,
        }
    }

    fn onset(&self) -> i64 {
        self.truth().onset_ns.unwrap()
    }

    /// Median of a series' values in `[a, b)` (all hosts).
    fn median(&self, metric: &str, labels: &[(&str, &str)], a: i64, b: i64) -> f64 {
        self.quantile(metric, labels, a, b, 0.5)
    }

    /// Quantile `q` of a series' values in `[a, b)` (all hosts).
    fn quantile(&self, metric: &str, labels: &[(&str, &str)], a: i64, b: i64, q: f64) -> f64 {
        let mut v: Vec<f64> =
            self.select(metric, None, labels).into_iter().filter(|x| x.0 >= a && x.0 < b).map(|x| x.1).collect();
        assert!(!v.is_empty(), "no samples of {metric} {labels:?}");
        v.sort_by(f64::total_cmp);
        v[((v.len() - 1) as f64 * q) as usize]
    }

    /// Asserts the main job's step time (as exported) rose after the truth's slowdown onset.
    fn assert_step_time_rises(&self, factor: f64) {
        let t = self.truth();
        let slow = t.slowdown_onset_ns.expect("a slowdown onset");
        assert!(slow > self.onset(), "slowdown before the fault");
        let rank = [("job", "llm-70b"), ("rank", "0")];
        let before = self.median("train_step_duration_seconds", &rank, t.start_ns, self.onset());
        let after = self.median("train_step_duration_seconds", &rank, slow, t.end_ns);
        assert!(after > factor * before, "step time {before} -> {after}");
        assert!((before - t.baseline_step_seconds).abs() < 0.05 * before);
    }

    fn split_entity(entity: &str) -> (String, String) {
        let (host, rest) = entity.split_once('/').unwrap();
        (host.to_string(), rest.to_string())
    }
}

#[test]
fn healthy_run_has_no_step_change_and_wrapping_switch_counters() {
    let b = run(&small(Scenario::Healthy, 11));
    let t = b.truth();
    assert!(t.onset_ns.is_none() && t.fault_entity.is_none() && t.slowdown_onset_ns.is_none());
    let mid = t.start_ns + (t.end_ns - t.start_ns) / 2;
    let rank = [("job", "llm-70b"), ("rank", "3")];
    let first = b.median("train_step_duration_seconds", &rank, t.start_ns, mid);
    let second = b.median("train_step_duration_seconds", &rank, mid, t.end_ns);
    assert!((second / first - 1.0).abs() < 0.05, "{first} vs {second}");
    // The storage leaf's 32-bit data counters wrap under storage load.
    let leaf = &t.wrapping_counters[0];
    let tx = b.select("infiniband_switch_port_transmit_data_bytes_total", Some(leaf), &[("port", "1")]);
    assert!(tx.iter().all(|x| x.1 < 4_294_967_296.0));
    assert!(tx.windows(2).any(|w| w[1].1 < w[0].1), "no wrap on {leaf}:1");
    // Read through the catalog, a wrap is a wrap (not a reset) and the octets/4 unit is
    // scaled to bytes exactly once.
    let catalog = lockstep_engine::metrics::MetricCatalog::builtin();
    let info = catalog.get("infiniband_switch_port_transmit_data_bytes_total").unwrap();
    let steps: Vec<f64> = tx.windows(2).map(|w| info.increase(w[0].1, w[1].1)).collect();
    assert!(steps.iter().all(|d| d.is_finite() && *d >= 0.0), "{steps:?}");
    let words: f64 = tx.windows(2).map(|w| (w[1].1 - w[0].1).rem_euclid(4_294_967_296.0)).sum();
    assert_eq!(steps.iter().sum::<f64>(), 4.0 * words);
    // PortXmitWait is the 32-bit PortCounters field, as the catalog declares it.
    let wait = catalog.get("node_infiniband_port_transmit_wait_total").unwrap();
    let waits = b.select("node_infiniband_port_transmit_wait_total", None, &[]);
    assert!(!waits.is_empty() && waits.iter().all(|x| x.1 <= 4_294_967_295.0));
    assert_eq!(wait.counter_bits(), Some(32));
    // Samples are stamped in host clocks: mapped through the truth they land inside the run.
    let all = b.select("DCGM_FI_DEV_GPU_UTIL", None, &[]);
    assert!(all.iter().all(|x| x.0 > t.start_ns - 2 * SEC && x.0 < t.end_ns + 2 * SEC));
}

#[test]
fn ib_link_errors_raise_errors_then_collective_and_step_time() {
    let b = run(&small(Scenario::IbLinkErrors, 12));
    let t = b.truth();
    let (host, dev) = Bundle::split_entity(t.fault_entity.as_deref().unwrap());
    let device = dev.trim_end_matches(":1");
    let labels = [("device", device), ("port", "1")];
    let o = b.onset();
    let before = b.rate("node_infiniband_symbol_error_total", &host, &labels, t.start_ns, o);
    let after = b.rate("node_infiniband_symbol_error_total", &host, &labels, o + 10 * SEC, o + 40 * SEC);
    assert!(before < 0.5 && after > 10.0, "symbol errors/s {before} -> {after}");
    let (sw, port) = t.related_entities[0].split_once(':').unwrap();
    let sw_after =
        b.rate("infiniband_switch_port_symbol_error_total", sw, &[("port", port)], o + 10 * SEC, o + 40 * SEC);
    assert!(sw_after > 2.0, "switch end {sw_after}");
    let exec = [("slurm_job_id", "llm-70b"), ("rank", "5")];
    let e0 = b.median("nccl_collective_exec_time_microseconds", &exec, t.start_ns, o);
    let e1 = b.median("nccl_collective_exec_time_microseconds", &exec, o + 15 * SEC, t.end_ns);
    assert!(e1 > 2.0 * e0, "exec {e0} -> {e1}");
    b.assert_step_time_rises(1.15);
    // Errors lead: the first collective link in the chain comes after the error links.
    let first_coll = t.chain.iter().find(|l| l.signal.starts_with("nccl")).unwrap().onset_ns;
    assert!(first_coll - o >= SEC && first_coll - o <= 3 * SEC);
}

#[test]
fn roce_congestion_shows_ecn_cnp_and_drops_at_the_slow_receiver() {
    let b = run(&small(Scenario::RoceCongestion, 13));
    let t = b.truth();
    let (host, dev) = Bundle::split_entity(t.fault_entity.as_deref().unwrap());
    let labels = [("device", dev.trim_end_matches(":1")), ("port", "1")];
    let o = b.onset();
    let ecn = "node_infiniband_np_ecn_marked_roce_packets_received_total";
    let before = b.rate(ecn, &host, &labels, t.start_ns, o);
    let after = b.rate(ecn, &host, &labels, o + 10 * SEC, t.end_ns);
    assert!(after > 20.0 * before.max(1.0), "ecn {before} -> {after}");
    assert_eq!(b.rate("node_infiniband_out_of_buffer_drops_total", &host, &labels, t.start_ns, o), 0.0);
    assert!(b.rate("node_infiniband_out_of_buffer_drops_total", &host, &labels, o + 10 * SEC, t.end_ns) > 10.0);
    let (shost, sdev) = Bundle::split_entity(&t.related_entities[1]);
    let slabels = [("device", sdev.trim_end_matches(":1")), ("port", "1")];
    let cnp = "node_infiniband_rp_cnp_packets_handled_total";
    assert!(
        b.rate(cnp, &shost, &slabels, o + 10 * SEC, t.end_ns) > 10.0 * b.rate(cnp, &shost, &slabels, t.start_ns, o)
    );
    assert!(b.select("infiniband_switch_port_symbol_error_total", None, &[]).is_empty(), "no IB exporter on RoCE");
    b.assert_step_time_rises(1.1);
}

#[test]
fn storage_latency_slows_data_loading_then_steps() {
    let b = run(&small(Scenario::StorageLatency, 14));
    let t = b.truth();
    let o = b.onset();
    let q = [("pool", "lustre-a"), ("quantile", "0.5")];
    let l0 = b.median("storage_read_latency_seconds", &q, t.start_ns, o);
    let l1 = b.median("storage_read_latency_seconds", &q, o + 30 * SEC, t.end_ns);
    assert!(l1 > 8.0 * l0, "read p50 {l0} -> {l1}");
    let wait = [("job", "llm-70b"), ("rank", "2")];
    let w0 = b.median("dataloader_wait_seconds", &wait, t.start_ns, o);
    let w1 = b.median("dataloader_wait_seconds", &wait, t.slowdown_onset_ns.unwrap(), t.end_ns);
    assert!(w0 < 0.02 && w1 > 0.2, "wait {w0} -> {w1}");
    b.assert_step_time_rises(1.15);
    let wait_link = t.chain.iter().find(|l| l.signal == "dataloader_wait_seconds").unwrap();
    assert!(wait_link.onset_ns > o, "data-loader waits start after the storage fault");
}

#[test]
fn checkpoint_storm_from_the_other_job_saturates_the_pool() {
    let b = run(&small(Scenario::CheckpointStorm, 15));
    let t = b.truth();
    let o = b.onset();
    let host = "lustre-a-oss1";
    let w = [("pool", "lustre-a"), ("job", "vlm-8b")];
    let r0 = b.rate("storage_write_bytes_total", host, &w, o - 40 * SEC, o);
    let r1 = b.rate("storage_write_bytes_total", host, &w, o, t.end_ns);
    assert!(r1 > 3.0 * r0.max(1e9), "other job writes {r0} -> {r1}");
    let q = [("pool", "lustre-a"), ("quantile", "0.99")];
    assert!(
        b.median("storage_read_latency_seconds", &q, o, t.end_ns)
            > 4.0 * b.median("storage_read_latency_seconds", &q, t.start_ns, o)
    );
    assert!(t.related_entities.contains(&"vlm-8b".to_string()));
    b.assert_step_time_rises(1.1);
}

#[test]
fn dataloader_starvation_of_one_rank_makes_the_others_wait() {
    let b = run(&small(Scenario::DataloaderStarvation, 16));
    let t = b.truth();
    let o = b.onset();
    let node = t.fault_entity.as_deref().unwrap();
    let p0 = b.rate("node_pressure_cpu_waiting_seconds_total", node, &[], t.start_ns, o);
    let p1 = b.rate("node_pressure_cpu_waiting_seconds_total", node, &[], o + 10 * SEC, t.end_ns);
    assert!(p1 > 5.0 * p0, "cpu pressure {p0} -> {p1}");
    let slow = t.slowdown_onset_ns.unwrap();
    let starved = t.fault_rank.unwrap().to_string();
    let other = ((t.fault_rank.unwrap() + 9) % 24).to_string();
    let wait = b.median("dataloader_wait_seconds", &[("job", "llm-70b"), ("rank", &starved)], slow, t.end_ns);
    assert!(wait > 0.3, "starved rank waits {wait}");
    let exec = |rank: &str, a, z| {
        b.median("nccl_collective_exec_time_microseconds", &[("slurm_job_id", "llm-70b"), ("rank", rank)], a, z)
    };
    assert!(exec(&other, slow, t.end_ns) > 2.0 * exec(&other, t.start_ns, o));
    assert!(exec(&starved, slow, t.end_ns) < 0.5 * exec(&other, slow, t.end_ns), "the starved rank arrives last");
    b.assert_step_time_rises(1.15);
}

#[test]
fn thermal_throttle_heats_then_slows_one_gpu_and_everyone_waits() {
    let b = run(&small(Scenario::ThermalThrottle, 17));
    let t = b.truth();
    let (host, gpu) = Bundle::split_entity(t.fault_entity.as_deref().unwrap());
    let idx = gpu.trim_start_matches("gpu");
    let labels = [("gpu", idx)];
    let throttle = t.chain.iter().find(|l| l.signal == "DCGM_FI_DEV_SM_CLOCK").unwrap().onset_ns;
    let temps = b.select("DCGM_FI_DEV_GPU_TEMP", Some(&host), &labels);
    assert!(temps.iter().filter(|x| x.0 < b.onset()).all(|x| x.1 < 80.0));
    assert!(temps.iter().filter(|x| x.0 > throttle).all(|x| x.1 >= 84.0));
    let clocks = b.select("DCGM_FI_DEV_SM_CLOCK", Some(&host), &labels);
    assert!(clocks.iter().filter(|x| x.0 > throttle + 10 * SEC).all(|x| x.1 < 1400.0));
    let reasons = b.select("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", Some(&host), &labels);
    assert!(reasons.iter().filter(|x| x.0 > throttle + SEC).all(|x| (x.1 as u32) & 0x20 != 0));
    assert!(reasons.iter().filter(|x| x.0 < b.onset()).all(|x| (x.1 as u32) & 0x60 == 0));
    let rank = t.fault_rank.unwrap();
    let other = ((rank + 5) % 24).to_string();
    let exec = |r: &str, a, z| {
        b.median("nccl_collective_exec_time_microseconds", &[("slurm_job_id", "llm-70b"), ("rank", r)], a, z)
    };
    let slow = t.slowdown_onset_ns.unwrap();
    assert!(exec(&other, slow, t.end_ns) > 2.0 * exec(&other, t.start_ns, b.onset()));
    b.assert_step_time_rises(1.15);
}

#[test]
fn storage_over_fabric_turns_a_bad_link_into_storage_latency() {
    let b = run(&small(Scenario::StorageOverFabric, 18));
    let t = b.truth();
    let o = b.onset();
    let (sw, port) = t.fault_entity.as_deref().unwrap().split_once(':').unwrap();
    assert!(sw.starts_with("spine-"));
    let m = "infiniband_switch_port_symbol_error_total";
    assert!(b.rate(m, sw, &[("port", port)], t.start_ns, o) < 0.5);
    assert!(b.rate(m, sw, &[("port", port)], o + 10 * SEC, t.end_ns) > 10.0);
    let q = [("pool", "lustre-a"), ("quantile", "0.99")];
    let p0 = b.median("storage_read_latency_seconds", &q, t.start_ns, o);
    let p1 = b.median("storage_read_latency_seconds", &q, o + 10 * SEC, t.end_ns);
    assert!(p1 > 20.0 * p0, "read p99 {p0} -> {p1}");
    // The collectives are not on the bad link: the last rank to arrive (shortest execution
    // time, pure transfer) is as fast as before, although barrier skew grows for the others.
    assert!(t.fault_domain == "network" && t.bottleneck == "storage");
    let job = [("slurm_job_id", "llm-70b")];
    let slow = t.slowdown_onset_ns.unwrap();
    let x0 = b.quantile("nccl_collective_exec_time_microseconds", &job, t.start_ns, o, 0.01);
    let x1 = b.quantile("nccl_collective_exec_time_microseconds", &job, slow, t.end_ns, 0.01);
    assert!(x1 < 1.2 * x0, "transfer time {x0} -> {x1}");
    b.assert_step_time_rises(1.1);
}

#[test]
fn clock_sync_exchanges_match_the_true_clocks() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = SimConfig { minutes: 2, ..small(Scenario::Healthy, 21) };
    let summary = simulate(&cfg, dir.path()).unwrap();
    let truth = &summary.truth;
    let mut errors: std::collections::HashMap<String, Vec<i64>> = Default::default();
    for b in read_parquet(&dir.path().join("clock_sync.parquet")) {
        let host = b.column(0).as_string::<i32>();
        let col = |i: usize| b.column(i).as_primitive::<Int64Type>().clone();
        let (t1, t2, t3, t4) = (col(1), col(2), col(3), col(4));
        for i in 0..b.num_rows() {
            let c = truth.clocks[host.value(i)];
            let true_offset =
                c.offset_ns + ((t2.value(i) - truth.start_ns) as i128 * c.drift_ppb as i128 / 1_000_000_000) as i64;
            assert!(t1.value(i) < t4.value(i) && t2.value(i) < t3.value(i));
            assert!(t2.value(i) - t1.value(i) >= 2_000 - true_offset - 1_000, "forward delay below the minimum");
            let est = ((t1.value(i) - t2.value(i)) + (t4.value(i) - t3.value(i))) / 2;
            errors.entry(host.value(i).to_string()).or_default().push(est - true_offset);
        }
    }
    assert_eq!(errors.len(), truth.clocks.len(), "every host exchanges");
    let mut offsets: Vec<i64> = truth.clocks.values().map(|c| c.offset_ns.abs()).collect();
    offsets.sort_unstable();
    assert!(offsets[offsets.len() - 1] > 500_000_000 && offsets[offsets.len() - 1] <= 2_000_000_000);
    assert!(truth.clocks.values().all(|c| c.drift_ppb.abs() <= 50_000));
    for (host, mut e) in errors {
        assert!(e.len() >= 20, "{host} has {} exchanges", e.len());
        e.sort_unstable();
        let median = e[e.len() / 2];
        assert!((-60_000..0).contains(&median), "{host}: median offset error {median} ns");
    }
}

#[test]
fn same_seed_same_bundle_other_seed_other_bundle() {
    let generate = |seed| {
        let dir = tempfile::tempdir().unwrap();
        let cfg = SimConfig { minutes: 1, ..small(Scenario::IbLinkErrors, seed) };
        let s = simulate(&cfg, dir.path()).unwrap();
        (std::fs::read(dir.path().join("samples.parquet")).unwrap(), s.truth)
    };
    let (a, ta) = generate(5);
    let (b, tb) = generate(5);
    let (c, tc) = generate(6);
    assert!(a == b && ta == tb);
    assert!(a != c && ta != tc);
}

#[test]
fn invalid_configs_are_rejected_with_the_field_named() {
    let dir = tempfile::tempdir().unwrap();
    let err = simulate(&SimConfig { nodes: 2, ..SimConfig::default() }, dir.path()).err().map(|e| e.to_string());
    assert!(err.is_some_and(|e| e.contains("nodes")));
    let err = simulate(&SimConfig { sample_interval_ns: 0, ..SimConfig::default() }, dir.path()).err();
    assert!(err.is_some_and(|e| e.kind() == lockstep_engine::ErrorKind::InvalidArgument));
}
