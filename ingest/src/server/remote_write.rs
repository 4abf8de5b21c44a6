//! Prometheus remote write 1.0 (`POST /api/v1/write`) on the HTTP/1.1 listener ([`super::http`];
//! mapping and status codes in `docs/ingest-server.md`).
//!
//! * body: snappy *block* format compressed protobuf `prometheus.WriteRequest`;
//! * the same bearer tokens (role write), TLS material, size, in-flight and memory limits as
//!   the gRPC services, and the same durable write path: 204 only after the WAL fsync;
//! * `__name__` → metric; other labels → labels (reserved keys get a `prom_` prefix);
//!   `host` kept when present, else derived from `instance` without its port;
//! * stale markers (NaN `0x7ff0000000000002`) and other non-finite values are dropped;
//! * native histograms become `_bucket{le}`/`_count`/`_sum` series, and remote write 2.0
//!   (`proto=io.prometheus.write.v2.Request`) is accepted too ([`native`]).

use std::collections::HashMap;

use hyper::body::{Bytes, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use lockstep_engine::model::RESERVED_LABELS;
use lockstep_engine::{Labels, SeriesKey, SeriesSamples, Store, WriteBatch};
use tonic::Status;

use super::auth::Role;
use super::config::Limits;
use super::convert::reason_code;
use super::http::{Body, Encodings, HttpApi, http_status, method_not_allowed, read_body};
use super::otlp::{distinct_series, exp_histogram};
use native::PromHistogram;

mod native;

/// The path Prometheus posts to.
pub const WRITE_PATH: &str = "/api/v1/write";
/// Bit pattern of Prometheus's stale marker (a NaN).
pub const STALE_NAN_BITS: u64 = 0x7ff0_0000_0000_0002;
/// Most distinct rejection messages quoted in a 400 body.
const MAX_MESSAGES: usize = 5;

/// `prometheus.WriteRequest` (remote write 1.0), wire-compatible field numbers.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PromWriteRequest {
    /// Series with their samples.
    #[prost(message, repeated, tag = "1")]
    pub timeseries: Vec<PromTimeSeries>,
    // Tag 3 (metric metadata) is skipped as an unknown field.
}

/// `prometheus.TimeSeries`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PromTimeSeries {
    /// Labels, including `__name__`.
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<PromLabel>,
    /// Float samples.
    #[prost(message, repeated, tag = "2")]
    pub samples: Vec<PromSample>,
    /// Native histogram samples (tag 3, exemplars, is skipped).
    #[prost(message, repeated, tag = "4")]
    pub histograms: Vec<PromHistogram>,
}

/// `prometheus.Label`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PromLabel {
    /// Label name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Label value.
    #[prost(string, tag = "2")]
    pub value: String,
}

/// `prometheus.Sample`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PromSample {
    /// The value.
    #[prost(double, tag = "1")]
    pub value: f64,
    /// Milliseconds since the Unix epoch.
    #[prost(int64, tag = "2")]
    pub timestamp: i64,
}

/// A converted request.
#[derive(Debug, Default)]
pub(crate) struct Converted {
    pub(crate) batch: WriteBatch,
    /// Samples dropped on purpose (stale markers, non-finite values).
    pub(crate) dropped: u64,
    /// Native histogram samples converted.
    pub(crate) histograms: u64,
    /// Series values those histograms became (`_bucket`, `_count`, `_sum`).
    pub(crate) histogram_values: u64,
    pub(crate) rejected: u64,
    pub(crate) by_reason: Vec<(&'static str, u64)>,
    messages: Vec<String>,
}

impl Converted {
    fn reject(&mut self, reason: &'static str, samples: u64, message: impl FnOnce() -> String) {
        if samples == 0 {
            return;
        }
        self.rejected += samples;
        match self.by_reason.iter_mut().find(|(k, _)| *k == reason) {
            Some((_, n)) => *n += samples,
            None => self.by_reason.push((reason, samples)),
        }
        if self.messages.len() < MAX_MESSAGES {
            let m = message();
            if !self.messages.contains(&m) {
                self.messages.push(m);
            }
        }
    }

    pub(crate) fn error_message(&self) -> String {
        format!("{} samples rejected: {}", self.rejected, self.messages.join("; "))
    }
}

/// `instance` without its port: `node-1:9100` → `node-1`, `[::1]:9090` → `::1`.
pub(crate) fn host_of_instance(instance: &str) -> &str {
    if let Some(rest) = instance.strip_prefix('[')
        && let Some(end) = rest.find(']')
    {
        return &rest[..end];
    }
    match instance.rsplit_once(':') {
        // More than one colon without brackets: an IPv6 address without a port.
        Some((host, port)) if !host.contains(':') && port.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => instance,
    }
}

/// Converts a decoded request into a write batch (see the module docs for the mapping).
pub(crate) fn convert(store: &Store, req: PromWriteRequest, limits: &Limits) -> Result<Converted, Status> {
    let (max_series, max_samples) = (limits.max_series_per_request, limits.max_samples_per_request);
    if req.timeseries.len() > max_series {
        return Err(Status::invalid_argument(format!(
            "request has {} series; the limit is {max_series} per request (lower max_samples_per_send)",
            req.timeseries.len()
        )));
    }
    let total: usize = req.timeseries.iter().map(|t| t.samples.len() + t.histograms.len()).sum();
    if total > max_samples {
        return Err(Status::invalid_argument(format!(
            "request has {total} samples; the limit is {max_samples} per request (lower max_samples_per_send)"
        )));
    }
    let now = store.now_ns();
    let mut out = Converted::default();
    // Histogram series, built from several histogram samples each.
    let mut histogram_series: HashMap<SeriesKey, SeriesSamples> = HashMap::new();
    for ts in req.timeseries {
        let n = (ts.samples.len() + ts.histograms.len()) as u64;
        if n == 0 {
            continue;
        }
        let mut metric = None;
        let mut labels = Labels::new();
        let mut instance = None;
        for l in ts.labels {
            if l.value.is_empty() {
                continue;
            }
            match l.name.as_str() {
                "__name__" => metric = Some(l.value),
                "instance" => {
                    instance = Some(l.value.clone());
                    labels.insert(l.name, l.value);
                }
                name if RESERVED_LABELS.contains(&name) => {
                    labels.insert(format!("prom_{name}"), l.value);
                }
                _ => {
                    labels.insert(l.name, l.value);
                }
            }
        }
        let Some(metric) = metric else {
            out.reject("invalid_series", n, || "series has no __name__ label".to_string());
            continue;
        };
        if !labels.contains_key("host") {
            match instance.as_deref().map(host_of_instance).filter(|h| !h.is_empty()) {
                Some(h) => {
                    labels.insert("host".to_string(), h.to_string());
                }
                None => {
                    out.reject("missing_host", n, || {
                        format!("{metric}: no host or instance label; add one with relabelling (write_relabel_configs)")
                    });
                    continue;
                }
            }
        }
        for h in &ts.histograms {
            native_histogram(store, &metric, &labels, h, now, &mut out, &mut histogram_series);
        }
        if ts.samples.is_empty() {
            continue;
        }
        let n = ts.samples.len() as u64;
        let key = SeriesKey { metric, labels };
        if let Err(e) = key.validate() {
            out.reject("invalid_series", n, || e.to_string());
            continue;
        }
        let mut samples = SeriesSamples::default();
        for s in ts.samples {
            if s.value.to_bits() == STALE_NAN_BITS || !s.value.is_finite() && !store.sample_ok(now, s.value, now) {
                out.dropped += 1;
                continue;
            }
            let Some(t) = s.timestamp.checked_mul(1_000_000) else {
                out.reject("time_out_of_range", 1, || format!("timestamp {} ms is out of range", s.timestamp));
                continue;
            };
            if !store.sample_ok(t, s.value, now) {
                let reason = reason_code(store, t, s.value, now);
                let msg = store.check_sample(&key, t, s.value, now).err().map(|e| e.to_string()).unwrap_or_default();
                out.reject(reason, 1, || msg);
                continue;
            }
            samples.timestamps.push(t);
            samples.values.push(s.value);
        }
        if !samples.timestamps.is_empty() {
            out.batch.series.push((key, samples));
        }
    }
    out.batch.series.extend(histogram_series);
    Ok(out)
}

/// Adds one native histogram sample's series values (see [`native`]) to `series`.
fn native_histogram(
    store: &Store,
    metric: &str,
    labels: &Labels,
    h: &PromHistogram,
    now: i64,
    out: &mut Converted,
    series: &mut HashMap<SeriesKey, SeriesSamples>,
) {
    let Some(t) = h.timestamp.checked_mul(1_000_000).filter(|&t| store.sample_ok(t, 0.0, now)) else {
        let reason =
            h.timestamp.checked_mul(1_000_000).map_or("time_out_of_range", |t| reason_code(store, t, 0.0, now));
        out.reject(reason, 1, || format!("{metric}: histogram timestamp {} ms is not accepted", h.timestamp));
        return;
    };
    let values = native::to_exponential(h)
        .and_then(|p| exp_histogram(metric, labels, &p))
        .map_err(|e| e.to_string())
        .and_then(|v| distinct_series(v).map_err(|(_, e)| e));
    let values = match values {
        Ok(v) => v,
        Err(e) => {
            out.reject("invalid_histogram", 1, || format!("{metric}: native histogram: {e}"));
            return;
        }
    };
    if let Some(Err(e)) = values.iter().map(|(k, _)| k.validate()).find(Result::is_err) {
        out.reject("invalid_series", 1, || e.to_string());
        return;
    }
    out.histograms += 1;
    out.histogram_values += values.len() as u64;
    for (key, value) in values {
        let s = series.entry(key).or_default();
        s.timestamps.push(t);
        s.values.push(value);
    }
}

/// Handles `POST /api/v1/write`; never fails (errors are responses).
pub(crate) async fn handle(api: &HttpApi, request: Request<Incoming>) -> Response<Body> {
    if request.method() != Method::POST {
        return method_not_allowed("POST");
    }
    let telemetry = api.shared.telemetry.clone();
    let result = write(api, request).await;
    match telemetry.finish(result) {
        Ok(written) => {
            let mut r = Response::new(Body::new(Bytes::new()));
            *r.status_mut() = StatusCode::NO_CONTENT;
            // Remote write 2.0 senders check what was written (1.0 ones ignore the headers).
            let h = r.headers_mut();
            h.insert("x-prometheus-remote-write-samples-written", HeaderValue::from(written.samples));
            h.insert("x-prometheus-remote-write-histograms-written", HeaderValue::from(written.histograms));
            h.insert("x-prometheus-remote-write-exemplars-written", HeaderValue::from(0u64));
            r
        }
        Err(status) => http_status(&status, api.shared.limits.retry_after_ms),
    }
}

/// What one request wrote.
struct Written {
    samples: u64,
    histograms: u64,
}

async fn write(api: &HttpApi, request: Request<Incoming>) -> Result<Written, Status> {
    let (parts, body) = request.into_parts();
    api.authorize(&parts.headers, Role::Write, "Prometheus remote write")?;
    let version = check_content_type(&parts.headers)?;
    let max = api.shared.limits.max_message_bytes;
    let compressed = read_body(&parts.headers, body, max, Encodings::Snappy).await?;
    let req = decode(&compressed, max, version)?;
    let shared = &api.shared;
    let samples: usize = req.timeseries.iter().map(|t| t.samples.len() + t.histograms.len()).sum();
    let _slot = shared.admit_now(samples as u64)?;
    let mut converted = convert(&shared.store, req, &shared.limits)?;
    let batch = std::mem::take(&mut converted.batch);
    let outcome = shared.write_blocking(batch).await?;
    for r in &outcome.rejected {
        converted.reject("store", r.samples as u64, || r.error.to_string());
    }
    for (reason, n) in &converted.by_reason {
        shared.telemetry.rejected(reason, *n);
    }
    if converted.dropped > 0 {
        shared.telemetry.rejected("prometheus_dropped", converted.dropped);
    }
    shared.telemetry.accepted(outcome.accepted as u64);
    if converted.rejected > 0 {
        // The accepted samples are durable; the rest would fail again: 400, no retry.
        return Err(Status::invalid_argument(format!(
            "{} samples accepted, {}",
            outcome.accepted,
            converted.error_message()
        )));
    }
    // Every value was accepted here (a rejection answered 400 above): the float samples are
    // what the histograms' series values do not account for.
    let samples = (outcome.accepted as u64).saturating_sub(converted.histogram_values);
    Ok(Written { samples, histograms: converted.histograms })
}

/// The two remote-write messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Version {
    /// `prometheus.WriteRequest` (remote write 1.0).
    V1,
    /// `io.prometheus.write.v2.Request` (remote write 2.0).
    V2,
}

/// Decompresses (snappy block format, at most `max` bytes: the declared length is checked
/// before allocating) and decodes a request body; a 2.0 request is resolved into the 1.0 shape.
pub(crate) fn decode(compressed: &[u8], max: usize, version: Version) -> Result<PromWriteRequest, Status> {
    let length = snap::raw::decompress_len(compressed)
        .map_err(|e| Status::invalid_argument(format!("body is not snappy (block format): {e}")))?;
    if length > max {
        return Err(Status::out_of_range(format!(
            "decompressed request is {length} bytes; the limit is {max} bytes (lower max_samples_per_send)"
        )));
    }
    let raw = snap::raw::Decoder::new()
        .decompress_vec(compressed)
        .map_err(|e| Status::invalid_argument(format!("body is not snappy (block format): {e}")))?;
    match version {
        Version::V1 => prost::Message::decode(raw.as_slice())
            .map_err(|e| Status::invalid_argument(format!("malformed prometheus.WriteRequest: {e}"))),
        Version::V2 => native::from_v2(
            prost::Message::decode(raw.as_slice())
                .map_err(|e| Status::invalid_argument(format!("malformed io.prometheus.write.v2.Request: {e}")))?,
        ),
    }
}

/// Accepts `application/x-protobuf` with `proto=prometheus.WriteRequest` (or none: 1.0) or
/// `proto=io.prometheus.write.v2.Request` (2.0); anything else is `UNIMPLEMENTED` (answered 415,
/// on which a 2.0 sender may fall back to 1.0).
fn check_content_type(headers: &hyper::HeaderMap) -> Result<Version, Status> {
    let Some(value) = headers.get(header::CONTENT_TYPE) else { return Ok(Version::V1) };
    let value = value.to_str().unwrap_or("").to_ascii_lowercase();
    let mut parts = value.split(';').map(str::trim);
    let media = parts.next().unwrap_or("");
    if media != "application/x-protobuf" {
        return Err(Status::unimplemented(format!(
            "Content-Type {media:?} is not supported; remote write sends application/x-protobuf"
        )));
    }
    let mut version = Version::V1;
    for p in parts {
        match p.strip_prefix("proto=") {
            Some("prometheus.writerequest") => version = Version::V1,
            Some("io.prometheus.write.v2.request") => version = Version::V2,
            Some(proto) => {
                return Err(Status::unimplemented(format!(
                    "{proto:?} is not supported: prometheus.WriteRequest (1.0) or io.prometheus.write.v2.Request (2.0)"
                )));
            }
            None => {}
        }
    }
    Ok(version)
}

#[cfg(test)]
mod tests;
