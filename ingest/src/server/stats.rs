//! Self-telemetry: counters, the `Stats` RPC and periodic `lockstep_ingest_*` series.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use lockstep_engine::{SeriesKey, Store, WriteBatch};
use lockstep_proto::ingest::v1::{StatsRequest, StatsResponse, stats_server};
use tonic::{Code, Request, Response, Status};

use super::status::code_name;

/// Counters of a running server. Cheap to update from any task.
#[derive(Debug)]
pub struct Telemetry {
    started: Instant,
    accepted: AtomicU64,
    rejected: AtomicU64,
    in_flight: AtomicU64,
    rss: AtomicU64,
    by_reason: Mutex<BTreeMap<&'static str, u64>>,
    by_code: Mutex<BTreeMap<&'static str, u64>>,
}

impl Default for Telemetry {
    fn default() -> Self {
        Telemetry {
            started: Instant::now(),
            accepted: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            rss: AtomicU64::new(0),
            by_reason: Mutex::new(BTreeMap::new()),
            by_code: Mutex::new(BTreeMap::new()),
        }
    }
}

impl Telemetry {
    /// Counts durably accepted samples.
    pub fn accepted(&self, n: u64) {
        self.accepted.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts rejected samples under a reason code.
    pub fn rejected(&self, reason: &'static str, n: u64) {
        if n == 0 {
            return;
        }
        self.rejected.fetch_add(n, Ordering::Relaxed);
        if let Ok(mut m) = self.by_reason.lock() {
            *m.entry(reason).or_default() += n;
        }
    }

    /// Counts one answered request by status code.
    pub fn request(&self, code: Code) {
        if let Ok(mut m) = self.by_code.lock() {
            *m.entry(code_name(code)).or_default() += 1;
        }
    }

    /// Counts the outcome of a handler and passes it through.
    pub fn finish<T>(&self, result: Result<T, Status>) -> Result<T, Status> {
        self.request(match &result {
            Ok(_) => Code::Ok,
            Err(s) => s.code(),
        });
        result
    }

    pub(crate) fn in_flight_add(&self, delta: i64) {
        if delta >= 0 {
            self.in_flight.fetch_add(delta.unsigned_abs(), Ordering::Relaxed);
        } else {
            self.in_flight.fetch_sub(delta.unsigned_abs(), Ordering::Relaxed);
        }
    }

    /// Samples the process RSS (from `/proc/self/statm`) and returns it in bytes (0 if unknown).
    pub fn sample_rss(&self) -> u64 {
        let rss = read_rss_bytes().unwrap_or(0);
        self.rss.store(rss, Ordering::Relaxed);
        rss
    }

    /// The last sampled RSS in bytes.
    pub fn rss(&self) -> u64 {
        self.rss.load(Ordering::Relaxed)
    }

    /// Samples accepted so far.
    pub fn accepted_total(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }

    /// The counters as a `Stats` response.
    pub fn snapshot(&self, store: &Store) -> StatsResponse {
        let wal = store.wal_stats();
        let m = store.metrics();
        StatsResponse {
            samples_accepted: self.accepted.load(Ordering::Relaxed),
            samples_rejected: self.rejected.load(Ordering::Relaxed),
            rejected_by_reason: self
                .by_reason
                .lock()
                .map(|m| m.iter().map(|(k, v)| (k.to_string(), *v)).collect())
                .unwrap_or_default(),
            requests_by_code: self
                .by_code
                .lock()
                .map(|m| m.iter().map(|(k, v)| (k.to_string(), *v)).collect())
                .unwrap_or_default(),
            wal_fsyncs: wal.fsyncs,
            wal_fsync_mean_ns: wal.fsync_nanos_total.checked_div(wal.fsyncs).unwrap_or(0),
            wal_fsync_max_ns: wal.fsync_nanos_max,
            in_flight: self.in_flight.load(Ordering::Relaxed),
            rss_bytes: self.rss(),
            uptime_seconds: self.started.elapsed().as_secs(),
            flushes: m.flushes.load(Ordering::Relaxed),
            flush_failures: m.flush_failures.load(Ordering::Relaxed),
            flush_error: store.flush_error().unwrap_or_default(),
            compactions: m.compactions.load(Ordering::Relaxed),
            files_expired: m.files_expired.load(Ordering::Relaxed),
            wal_reopens: m.wal_reopens.load(Ordering::Relaxed),
            writes_refused: m.writes_refused.load(Ordering::Relaxed),
            data_files: store.manifest().map_or(0, |m| m.files.len() as u64),
        }
    }

    /// The counters as `lockstep_ingest_*` series with `host = host`, stamped `now`.
    pub fn batch(&self, store: &Store, host: &str, now: i64) -> WriteBatch {
        let s = self.snapshot(store);
        let wal = store.wal_stats();
        let mut batch = WriteBatch::default();
        let mut put = |metric: &str, extra: Option<(&str, &str)>, value: f64| {
            let mut labels = vec![("host", host.to_string())];
            if let Some((k, v)) = extra {
                labels.push((k, v.to_string()));
            }
            batch.push(SeriesKey::new(metric, labels), now, value);
        };
        put("lockstep_ingest_samples_accepted_total", None, s.samples_accepted as f64);
        put("lockstep_ingest_samples_rejected_total", None, s.samples_rejected as f64);
        for (reason, n) in &s.rejected_by_reason {
            put("lockstep_ingest_samples_rejected_by_reason_total", Some(("reason", reason)), *n as f64);
        }
        for (code, n) in &s.requests_by_code {
            put("lockstep_ingest_requests_total", Some(("code", code)), *n as f64);
        }
        put("lockstep_ingest_wal_fsyncs_total", None, wal.fsyncs as f64);
        put("lockstep_ingest_wal_fsync_seconds_total", None, wal.fsync_nanos_total as f64 / 1e9);
        put("lockstep_ingest_wal_fsync_max_seconds", None, wal.fsync_nanos_max as f64 / 1e9);
        let m = store.metrics();
        put("lockstep_ingest_flushes_total", None, m.flushes.load(std::sync::atomic::Ordering::Relaxed) as f64);
        put("lockstep_ingest_flush_waits_total", None, m.flush_waits.load(std::sync::atomic::Ordering::Relaxed) as f64);
        use std::sync::atomic::Ordering::Relaxed;
        put("lockstep_store_flush_failures_total", None, m.flush_failures.load(Relaxed) as f64);
        put("lockstep_store_compactions_total", None, m.compactions.load(Relaxed) as f64);
        put("lockstep_store_maintenance_failures_total", None, m.maintenance_failures.load(Relaxed) as f64);
        put("lockstep_store_files_expired_total", None, m.files_expired.load(Relaxed) as f64);
        put("lockstep_store_wal_reopens_total", None, m.wal_reopens.load(Relaxed) as f64);
        put("lockstep_store_writes_refused_total", None, m.writes_refused.load(Relaxed) as f64);
        if let Ok(manifest) = store.manifest() {
            put("lockstep_store_data_files", None, manifest.files.len() as f64);
            put("lockstep_store_data_bytes", None, manifest.total_bytes() as f64);
        }
        put("lockstep_ingest_in_flight", None, s.in_flight as f64);
        put("lockstep_ingest_rss_bytes", None, s.rss_bytes as f64);
        put("lockstep_ingest_uptime_seconds", None, s.uptime_seconds as f64);
        batch
    }
}

/// RSS of this process in bytes, from `/proc/self/statm` (Linux).
pub fn read_rss_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// The `Stats` service.
pub(crate) struct StatsService {
    pub(crate) store: Arc<Store>,
    pub(crate) telemetry: Arc<Telemetry>,
}

#[tonic::async_trait]
impl stats_server::Stats for StatsService {
    async fn get(&self, _request: Request<StatsRequest>) -> Result<Response<StatsResponse>, Status> {
        self.telemetry.request(Code::Ok);
        Ok(Response::new(self.telemetry.snapshot(&self.store)))
    }
}
