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
//!   (`proto=io.prometheus.write.v2.Request`) is accepted too (`native`).

use std::collections::HashMap;

use hyper::body::{Bytes, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use lockstep_engine::model::RESERVED_LABELS;
use lockstep_engine::{Labels, Rows, SeriesId, SeriesKey, SeriesSamples, Store, WriteBatch};
use tonic::Status;

use super::auth::Role;
use super::config::Limits;
use super::convert::{Rekey, into_write, reason_code};
use super::http::{Body, Encodings, HttpApi, http_status, method_not_allowed, read_body};
use super::otlp::{distinct_series, exp_histogram};
use super::status::internal_status;
use cache::{Keys, SeriesCache};
use native::PromHistogram;

pub(crate) mod cache;
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

/// `prometheus.Label`. The protobuf `string` fields are read as bytes (the same wire format):
/// decoded from a [`Bytes`] body they are slices of it, not copies, and the UTF-8 check is
/// done only for label sets not in the `cache::SeriesCache`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PromLabel {
    /// Label name (UTF-8).
    #[prost(bytes = "bytes", tag = "1")]
    pub name: Bytes,
    /// Label value (UTF-8).
    #[prost(bytes = "bytes", tag = "2")]
    pub value: Bytes,
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
    /// Samples of series the store knows, by id.
    pub(crate) rows: Rows,
    /// Samples of new series, and of native histograms, by key.
    pub(crate) batch: WriteBatch,
    /// Each id in `rows` with the index of its label set in `keys`, for an id retired
    /// before the write ([`Rekey`]).
    pub(crate) by_id: Vec<(SeriesId, u32)>,
    /// The request's label sets ([`Keys`]: their bytes, kept instead of the request's body).
    pub(crate) keys: Keys,
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

/// Converts a decoded request into rows by series id (label sets in `cache` or known to the
/// store) and a batch by key (new series, native histograms); see the module docs for the
/// mapping. Label sets the store resolves are added to `cache`.
pub(crate) fn convert(
    store: &Store,
    cache: &SeriesCache,
    req: PromWriteRequest,
    limits: &Limits,
) -> Result<Converted, Status> {
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
    let mut out = Converted { rows: Rows::with_capacity(total), ..Default::default() };
    let mut keys = Keys::default();
    for ts in &req.timeseries {
        keys.push(&ts.labels);
    }
    // Read before any id is: ids resolved under a generation that changed since are not kept.
    let generation = store.catalog_generation();
    let cached = cache.lookup(&keys, generation);
    let mut resolved: Vec<(Box<[u8]>, SeriesId)> = Vec::new();
    // Histogram series, built from several histogram samples each.
    let mut histogram_series: HashMap<SeriesKey, SeriesSamples> = HashMap::new();
    for (i, ts) in req.timeseries.into_iter().enumerate() {
        let n = (ts.samples.len() + ts.histograms.len()) as u64;
        if n == 0 {
            continue;
        }
        if let Some(id) = cached[i].filter(|_| ts.histograms.is_empty()) {
            add_samples(store, &ts.samples, now, &mut out, Target::Id(id));
            out.by_id.push((id, i as u32));
            continue;
        }
        let key = match series_key(ts.labels) {
            Ok(key) => key,
            Err((reason, message)) => {
                out.reject(reason, n, || message);
                continue;
            }
        };
        for h in &ts.histograms {
            native_histogram(store, &key.metric, &key.labels, h, now, &mut out, &mut histogram_series);
        }
        if ts.samples.is_empty() {
            continue;
        }
        if let Err(e) = key.validate() {
            out.reject("invalid_series", ts.samples.len() as u64, || e.to_string());
            continue;
        }
        let id = store.series_id(&key).map_err(|e| internal_status("series lookup failed", e))?;
        match id {
            Some(id) => {
                resolved.push((keys.get(i).into(), id));
                add_samples(store, &ts.samples, now, &mut out, Target::Id(id));
                out.by_id.push((id, i as u32));
            }
            None => add_samples(store, &ts.samples, now, &mut out, Target::Key(key)),
        }
    }
    cache.insert(resolved, generation);
    out.batch.series.extend(histogram_series);
    if !out.by_id.is_empty() {
        out.keys = keys;
    }
    Ok(out)
}

/// The keys of a converted request's ids, parsed again from its label sets when the store
/// retired one of them before the write.
pub(crate) fn rekey(converted: &mut Converted) -> Rekey {
    let keys = std::mem::take(&mut converted.keys);
    Rekey::new(std::mem::take(&mut converted.by_id), move |&i: &u32| series_key(keys.labels(i as usize)).ok())
}

/// Where valid samples go: rows of a known series id, or the batch under a new series' key.
enum Target {
    Id(SeriesId),
    Key(SeriesKey),
}

/// Validates samples (stale markers and non-finite values dropped, the rest checked as the
/// store checks them) and adds the valid ones to `out`.
fn add_samples(store: &Store, samples: &[PromSample], now: i64, out: &mut Converted, target: Target) {
    let mut batch = SeriesSamples::default();
    for s in samples {
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
            let key = match &target {
                Target::Id(id) => store.series_key(*id).ok().flatten(),
                Target::Key(key) => Some(std::sync::Arc::new(key.clone())),
            };
            let msg = key
                .and_then(|key| store.check_sample(&key, t, s.value, now).err())
                .map(|e| e.to_string())
                .unwrap_or_default();
            out.reject(reason, 1, || msg);
            continue;
        }
        match &target {
            Target::Id(id) => {
                out.rows.series.push(*id);
                out.rows.time.push(t);
                out.rows.value.push(s.value);
            }
            Target::Key(_) => {
                batch.timestamps.push(t);
                batch.values.push(s.value);
            }
        }
    }
    if let Target::Key(key) = target
        && !batch.timestamps.is_empty()
    {
        out.batch.series.push((key, batch));
    }
}

/// The series key of a label set: `__name__` → metric, reserved names prefixed `prom_`, `host`
/// from `instance` when missing; or the reason code and message of why there is none.
fn series_key(raw: Vec<PromLabel>) -> Result<SeriesKey, (&'static str, String)> {
    let mut metric = None;
    let mut labels = Labels::new();
    let mut instance = None;
    for l in raw {
        if l.value.is_empty() {
            continue;
        }
        let utf8 = |b: Bytes| {
            String::from_utf8(b.into()).map_err(|e| ("invalid_series", format!("a label is not UTF-8: {e}")))
        };
        let (name, value) = (utf8(l.name)?, utf8(l.value)?);
        // A name given twice (`a="1", a="2"`), or a reserved name whose `prom_` form is also
        // given (`time="x", prom_time="y"`), would keep one value and drop the other.
        let collision = |stored: &str| ("label_collision", format!("label {stored:?} is given twice ({name:?})"));
        let replaced = match name.as_str() {
            "__name__" => metric.replace(value).map(|_| "__name__".to_string()),
            "instance" => {
                instance = Some(value.clone());
                labels.insert(name.clone(), value).map(|_| name.clone())
            }
            n if RESERVED_LABELS.contains(&n) => {
                let stored = format!("prom_{name}");
                labels.insert(stored.clone(), value).map(|_| stored)
            }
            _ => labels.insert(name.clone(), value).map(|_| name.clone()),
        };
        if let Some(stored) = replaced {
            return Err(collision(&stored));
        }
    }
    let Some(metric) = metric else {
        return Err(("invalid_series", "series has no __name__ label".to_string()));
    };
    if !labels.contains_key("host") {
        match instance.as_deref().map(host_of_instance).filter(|h| !h.is_empty()) {
            Some(h) => {
                labels.insert("host".to_string(), h.to_string());
            }
            None => {
                let what = match instance.as_deref() {
                    Some(i) => format!("its instance label {i:?} has no host part and there is no host label"),
                    None => "no host or instance label".to_string(),
                };
                return Err((
                    "missing_host",
                    format!("{metric}: {what}; add one with relabelling (write_relabel_configs)"),
                ));
            }
        }
    }
    Ok(SeriesKey { metric: metric.into(), labels })
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
    // A native histogram's staleness marker: its sum is the stale NaN (and its counts 0).
    // Dropped whole, as a float stale marker is (QA pass 23a: it was stored as a histogram of
    // zeros and the request refused with 400 for its NaN `_sum`).
    if h.sum.to_bits() == STALE_NAN_BITS {
        out.dropped += 1;
        return;
    }
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
    let (compressed, mut held) = read_body(&parts.headers, body, max, Encodings::Snappy, api.bodies.as_ref()).await?;
    // The decoded request is in memory with the body: taken too (decode checks the length).
    if let (Some(budget), Ok(length)) = (&api.bodies, snap::raw::decompress_len(&compressed))
        && length <= max
    {
        budget.take(length, &mut held).await?;
    }
    let req = decode(&compressed, max, version)?;
    let shared = &api.shared;
    let samples: usize = req.timeseries.iter().map(|t| t.samples.len() + t.histograms.len()).sum();
    let _slot = shared.admit_now(samples as u64)?;
    let mut converted = convert(&shared.store, &api.series_cache, req, &shared.limits)?;
    let rows = std::mem::take(&mut converted.rows);
    let batch = std::mem::take(&mut converted.batch);
    let rekey = rekey(&mut converted);
    let outcome = shared.write(into_write(&shared.store, rows, batch, rekey)?).await?;
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
    let raw = Bytes::from(raw);
    let body_len = raw.len();
    match version {
        Version::V1 => prost::Message::decode(raw)
            .map_err(|e| Status::invalid_argument(format!("malformed prometheus.WriteRequest: {e}"))),
        Version::V2 => native::from_v2(
            prost::Message::decode(raw)
                .map_err(|e| Status::invalid_argument(format!("malformed io.prometheus.write.v2.Request: {e}")))?,
            body_len,
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
