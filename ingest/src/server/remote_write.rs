//! Prometheus remote write 1.0 (`POST /api/v1/write`) on a separate HTTP/1.1 listener
//! (mapping and status codes in `docs/ingest-server.md`).
//!
//! * body: snappy *block* format compressed protobuf `prometheus.WriteRequest`;
//! * the same bearer tokens (role write), TLS material, size, in-flight and memory limits as
//!   the gRPC services, and the same durable write path: 204 only after the WAL fsync;
//! * `__name__` → metric; other labels → labels (reserved keys get a `prom_` prefix);
//!   `host` kept when present, else derived from `instance` without its port;
//! * stale markers (NaN `0x7ff0000000000002`) and other non-finite values are dropped,
//!   native histograms are ignored; remote write 2.0 is refused with 415.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use lockstep_engine::model::RESERVED_LABELS;
use lockstep_engine::{Labels, SeriesKey, SeriesSamples, Store, WriteBatch};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;
use tonic::metadata::MetadataMap;
use tonic::{Code, Status};

use super::auth::{Role, TokenSet};
use super::config::Limits;
use super::convert::reason_code;
use super::write::Shared;

/// The path Prometheus posts to.
pub const WRITE_PATH: &str = "/api/v1/write";
/// Bit pattern of Prometheus's stale marker (a NaN).
pub const STALE_NAN_BITS: u64 = 0x7ff0_0000_0000_0002;
/// How long a client may take to send the request headers.
const HEADER_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a client may take to send the request body.
const BODY_TIMEOUT: Duration = Duration::from_secs(60);
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
    /// Native histograms, kept undecoded: they are counted and dropped (tag 3, exemplars, is skipped).
    #[prost(bytes = "vec", repeated, tag = "4")]
    pub histograms: Vec<Vec<u8>>,
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
    /// Samples dropped on purpose (stale markers, non-finite values, native histograms).
    pub(crate) dropped: u64,
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
    let total: usize = req.timeseries.iter().map(|t| t.samples.len()).sum();
    if total > max_samples {
        return Err(Status::invalid_argument(format!(
            "request has {total} samples; the limit is {max_samples} per request (lower max_samples_per_send)"
        )));
    }
    let now = store.now_ns();
    let mut out = Converted::default();
    for ts in req.timeseries {
        out.dropped += ts.histograms.len() as u64;
        let n = ts.samples.len() as u64;
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
    Ok(out)
}

/// What the HTTP handler needs.
pub(crate) struct RemoteWrite {
    pub(crate) shared: Arc<Shared>,
    pub(crate) tokens: Option<Arc<TokenSet>>,
}

type Body = Full<Bytes>;

fn text(code: StatusCode, message: impl Into<String>) -> Response<Body> {
    let mut body = message.into();
    body.push('\n');
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = code;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}

/// Seconds for `Retry-After` (at least 1).
fn retry_after_secs(ms: u64) -> u64 {
    ms.div_ceil(1000).max(1)
}

/// The HTTP answer for a gRPC status of the shared write path (messages are client-safe).
pub(crate) fn http_status(status: &Status, retry_after_ms: u64) -> Response<Body> {
    let code = match status.code() {
        Code::Ok => StatusCode::NO_CONTENT,
        Code::InvalidArgument | Code::NotFound | Code::AlreadyExists => StatusCode::BAD_REQUEST,
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::OutOfRange => StatusCode::PAYLOAD_TOO_LARGE,
        Code::DeadlineExceeded => StatusCode::REQUEST_TIMEOUT,
        // Overload and unavailability: 503, which Prometheus retries whatever its
        // retry_on_http_429 setting.
        Code::ResourceExhausted | Code::Unavailable | Code::Aborted => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    let mut r = text(code, status.message());
    if code == StatusCode::SERVICE_UNAVAILABLE {
        r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(retry_after_secs(retry_after_ms)));
    }
    r
}

impl RemoteWrite {
    /// Handles one HTTP request; never fails (errors are responses).
    pub(crate) async fn handle(&self, request: Request<Incoming>) -> Response<Body> {
        let retry = self.shared.limits.retry_after_ms;
        if request.uri().path() != WRITE_PATH {
            return text(StatusCode::NOT_FOUND, format!("not found; Prometheus remote write is POST {WRITE_PATH}"));
        }
        if request.method() != Method::POST {
            let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "use POST");
            r.headers_mut().insert(header::ALLOW, HeaderValue::from_static("POST"));
            return r;
        }
        let telemetry = self.shared.telemetry.clone();
        let result = self.write(request).await;
        match telemetry.finish(result) {
            Ok(()) => {
                let mut r = Response::new(Full::new(Bytes::new()));
                *r.status_mut() = StatusCode::NO_CONTENT;
                r
            }
            Err(status) if status.code() == Code::Unimplemented => {
                text(StatusCode::UNSUPPORTED_MEDIA_TYPE, status.message())
            }
            Err(status) => http_status(&status, retry),
        }
    }

    async fn write(&self, request: Request<Incoming>) -> Result<(), Status> {
        let (parts, body) = request.into_parts();
        if let Some(tokens) = &self.tokens {
            tokens.authorize(
                &MetadataMap::from_headers(parts.headers.clone()),
                Role::Write,
                "Prometheus remote write",
            )?;
        }
        check_content_type(&parts.headers)?;
        let max = self.shared.limits.max_message_bytes;
        let too_large = || Status::out_of_range(format!("request body is larger than the limit of {max} bytes"));
        let declared = parts.headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        if declared.is_some_and(|n| n > max as u64) {
            return Err(too_large());
        }
        let compressed = tokio::time::timeout(BODY_TIMEOUT, Limited::new(body, max).collect())
            .await
            .map_err(|_| {
                Status::deadline_exceeded(format!("request body not received within {} s", BODY_TIMEOUT.as_secs()))
            })?
            .map_err(|e| {
                if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() {
                    too_large()
                } else {
                    Status::invalid_argument(format!("reading the request body failed: {e}"))
                }
            })?;
        let req = decode(&compressed.to_bytes(), max)?;
        let shared = &self.shared;
        let samples: usize = req.timeseries.iter().map(|t| t.samples.len()).sum();
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
        Ok(())
    }
}

/// Decompresses (snappy block format, at most `max` bytes: the declared length is checked
/// before allocating) and decodes a request body.
pub(crate) fn decode(compressed: &[u8], max: usize) -> Result<PromWriteRequest, Status> {
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
    prost::Message::decode(raw.as_slice())
        .map_err(|e| Status::invalid_argument(format!("malformed prometheus.WriteRequest: {e}")))
}

/// Accepts remote write 1.0 (`application/x-protobuf`, optionally with
/// `proto=prometheus.WriteRequest`, or no content type) with snappy encoding; anything else is
/// `UNIMPLEMENTED` (answered 415).
fn check_content_type(headers: &hyper::HeaderMap) -> Result<(), Status> {
    if let Some(encoding) = headers.get(header::CONTENT_ENCODING) {
        let e = encoding.to_str().unwrap_or("").trim();
        if !e.eq_ignore_ascii_case("snappy") {
            return Err(Status::unimplemented(format!("Content-Encoding {e:?} is not supported; use snappy")));
        }
    }
    let Some(value) = headers.get(header::CONTENT_TYPE) else { return Ok(()) };
    let value = value.to_str().unwrap_or("").to_ascii_lowercase();
    let mut parts = value.split(';').map(str::trim);
    let media = parts.next().unwrap_or("");
    if media != "application/x-protobuf" {
        return Err(Status::unimplemented(format!(
            "Content-Type {media:?} is not supported; remote write 1.0 sends application/x-protobuf"
        )));
    }
    for p in parts {
        if let Some(proto) = p.strip_prefix("proto=")
            && proto != "prometheus.writerequest"
        {
            return Err(Status::unimplemented(format!(
                "{proto:?} is not supported: only remote write 1.0 (prometheus.WriteRequest); set \
                 protobuf_message: prometheus.WriteRequest in remote_write"
            )));
        }
    }
    Ok(())
}

/// Builds the TLS acceptor for the HTTP listener from PEM material (ALPN `http/1.1`).
pub(crate) fn tls_acceptor(cert: &[u8], key: &[u8]) -> Result<TlsAcceptor, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs =
        CertificateDer::pem_slice_iter(cert).collect::<Result<Vec<_>, _>>().map_err(|e| format!("certificate: {e}"))?;
    let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| format!("private key: {e}"))?;
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| e.to_string())?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Serves HTTP/1.1 (optionally over TLS) on `listener` until `stop` resolves, then lets open
/// connections finish their current request.
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    tls: Option<TlsAcceptor>,
    handler: Arc<RemoteWrite>,
    stop: impl std::future::Future<Output = ()>,
) {
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    tokio::pin!(stop);
    loop {
        let (stream, peer): (tokio::net::TcpStream, SocketAddr) = tokio::select! {
            () = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "remote write: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let handler = handler.clone();
        let service = hyper::service::service_fn(move |request| {
            let handler = handler.clone();
            async move { Ok::<_, std::convert::Infallible>(handler.handle(request).await) }
        });
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder.timer(TokioTimer::new()).header_read_timeout(HEADER_TIMEOUT);
        match &tls {
            None => {
                let conn = builder.serve_connection(TokioIo::new(stream), service);
                let conn = graceful.watch(conn);
                tokio::spawn(async move {
                    if let Err(e) = conn.await {
                        tracing::debug!(%peer, error = %e, "remote write connection");
                    }
                });
            }
            Some(acceptor) => {
                let acceptor = acceptor.clone();
                let watcher = graceful.watcher();
                tokio::spawn(async move {
                    let stream = match tokio::time::timeout(HEADER_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(s)) => s,
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, error = %e, "remote write TLS handshake failed");
                            return;
                        }
                        Err(_) => return,
                    };
                    let conn = builder.serve_connection(TokioIo::new(stream), service);
                    if let Err(e) = watcher.watch(conn).await {
                        tracing::debug!(%peer, error = %e, "remote write connection");
                    }
                });
            }
        }
    }
    drop(listener);
    graceful.shutdown().await;
}

#[cfg(test)]
mod tests;
