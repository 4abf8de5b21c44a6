//! The HTTP/1.1 listener of `lockstep serve --http-listen`: one router in front of
//!
//! * Prometheus remote write 1.0, `POST /api/v1/write` ([`super::remote_write`]);
//! * OTLP over HTTP, `POST /v1/metrics`, protobuf or JSON ([`super::otlp_http`]);
//! * the job and topology documents, `/api/v1/jobs` and `/api/v1/topology`
//!   ([`super::documents`]), so that a Slurm prolog/epilog or a Kubernetes controller can
//!   register jobs with the running server.
//!
//! Every route uses the same bearer tokens (role write to change, role read to read), TLS
//! material and size limits as the gRPC services; status codes are documented in
//! `docs/ingest-server.md`.

use std::io::Read;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;
use tonic::metadata::MetadataMap;
use tonic::{Code, Status};

use super::auth::{Role, TokenSet};
use super::documents::{self, Documents};
use super::otlp::OtlpService;
use super::otlp_http;
use super::remote_write::{self, WRITE_PATH};
use super::write::Shared;

mod budget;
pub(crate) use budget::{BodyBudget, Held};

/// How long a client may take to send the request headers.
const HEADER_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a client may take to send the request body.
const BODY_TIMEOUT: Duration = Duration::from_secs(60);

/// A response body.
pub(crate) type Body = Full<Bytes>;

/// Everything the HTTP routes need.
pub(crate) struct HttpApi {
    pub(crate) shared: Arc<Shared>,
    pub(crate) tokens: Option<Arc<TokenSet>>,
    /// The same OTLP service (and delta-temporality state) as the gRPC port.
    pub(crate) otlp: OtlpService,
    pub(crate) documents: Documents,
    /// Remote write's label sets → series ids.
    pub(crate) series_cache: remote_write::cache::SeriesCache,
    /// What request bodies may take at once under a memory limit.
    pub(crate) bodies: Option<BodyBudget>,
}

impl HttpApi {
    /// Handles one HTTP request; never fails (errors are responses).
    pub(crate) async fn handle(&self, request: Request<Incoming>) -> Response<Body> {
        let path = request.uri().path();
        if path == WRITE_PATH {
            remote_write::handle(self, request).await
        } else if path == otlp_http::METRICS_PATH {
            otlp_http::handle(self, request).await
        } else if documents::handles(path) {
            documents::handle(self, request).await
        } else {
            text(
                StatusCode::NOT_FOUND,
                format!(
                    "not found; this listener serves POST {WRITE_PATH} (Prometheus remote write), POST {} (OTLP), \
                     {} and {}",
                    otlp_http::METRICS_PATH,
                    documents::JOBS_PATH,
                    documents::TOPOLOGY_PATH
                ),
            )
        }
    }

    /// Checks the request's bearer token for `role` (no tokens configured: everyone may).
    pub(crate) fn authorize(&self, headers: &hyper::HeaderMap, role: Role, service: &str) -> Result<(), Status> {
        match &self.tokens {
            Some(tokens) => tokens.authorize(&MetadataMap::from_headers(headers.clone()), role, service),
            None => Ok(()),
        }
    }
}

/// A plain-text response.
pub(crate) fn text(code: StatusCode, message: impl Into<String>) -> Response<Body> {
    let mut body = message.into();
    body.push('\n');
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = code;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}

/// A `405 Method Not Allowed` naming the allowed methods.
pub(crate) fn method_not_allowed(allow: &'static str) -> Response<Body> {
    let mut r = text(StatusCode::METHOD_NOT_ALLOWED, format!("use {allow}"));
    r.headers_mut().insert(header::ALLOW, HeaderValue::from_static(allow));
    r
}

/// Seconds for `Retry-After` (at least 1).
fn retry_after_secs(ms: u64) -> u64 {
    ms.div_ceil(1000).max(1)
}

/// The HTTP status code for a gRPC status of the shared write path. Overload and
/// unavailability become 503, which Prometheus and the OTLP exporters retry; everything a
/// retry would not fix is 4xx.
pub(crate) fn http_code(code: Code) -> StatusCode {
    match code {
        Code::Ok => StatusCode::NO_CONTENT,
        Code::InvalidArgument | Code::NotFound | Code::AlreadyExists | Code::FailedPrecondition => {
            StatusCode::BAD_REQUEST
        }
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::OutOfRange => StatusCode::PAYLOAD_TOO_LARGE,
        Code::DeadlineExceeded => StatusCode::REQUEST_TIMEOUT,
        Code::Unimplemented => StatusCode::UNSUPPORTED_MEDIA_TYPE,
        Code::ResourceExhausted | Code::Unavailable | Code::Aborted => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// Adds `Retry-After` to a 503.
pub(crate) fn with_retry_after(mut r: Response<Body>, retry_after_ms: u64) -> Response<Body> {
    if r.status() == StatusCode::SERVICE_UNAVAILABLE {
        r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(retry_after_secs(retry_after_ms)));
    }
    r
}

/// The plain-text HTTP answer for a gRPC status (messages are client-safe).
pub(crate) fn http_status(status: &Status, retry_after_ms: u64) -> Response<Body> {
    with_retry_after(text(http_code(status.code()), status.message()), retry_after_ms)
}

/// Which `Content-Encoding`s a route accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Encodings {
    /// Identity or gzip (OTLP/HTTP, the documents).
    IdentityOrGzip,
    /// Snappy only, decoded by the caller (Prometheus remote write).
    Snappy,
}

/// Reads a request body of at most `max` bytes (after gzip decoding too), with the body
/// timeout; the declared length is checked before anything is read. Under a memory limit the
/// body's bytes (and a gzip body's decoded ones) are taken from `budget` as they arrive, and
/// held by the returned [`Held`] until the request is answered.
pub(crate) async fn read_body(
    headers: &hyper::HeaderMap,
    body: Incoming,
    max: usize,
    encodings: Encodings,
    budget: Option<&BodyBudget>,
) -> Result<(Bytes, Held), Status> {
    let encoding = headers.get(header::CONTENT_ENCODING).map(|e| e.to_str().unwrap_or("?").trim().to_ascii_lowercase());
    let gzip = match (encoding.as_deref(), encodings) {
        (None | Some("identity"), Encodings::IdentityOrGzip) => false,
        (Some("gzip"), Encodings::IdentityOrGzip) => true,
        (None | Some("snappy"), Encodings::Snappy) => false,
        (Some(e), Encodings::IdentityOrGzip) => {
            return Err(Status::unimplemented(format!("Content-Encoding {e:?} is not supported; use gzip or none")));
        }
        (e, Encodings::Snappy) => {
            return Err(Status::unimplemented(format!(
                "Content-Encoding {:?} is not supported; use snappy",
                e.unwrap_or("")
            )));
        }
    };
    let too_large = || Status::out_of_range(format!("request body is larger than the limit of {max} bytes"));
    let declared = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return Err(too_large());
    }
    // The bytes are taken as they arrive, not as declared: a client sending slowly holds only
    // what it sent (QA pass 24: two clients declaring 31 MiB at a byte a second held the share,
    // and every other writer got 503 for a minute).
    let mut held = Held::default();
    if let (Some(budget), Some(n)) = (budget, declared)
        && n > budget.bytes() as u64
    {
        return Err(budget.too_large(n as usize));
    }
    let read = async {
        let mut body = Limited::new(body, max);
        let mut raw = Vec::with_capacity(declared.map_or(0, |n| n as usize));
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| {
                if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() {
                    too_large()
                } else {
                    Status::invalid_argument(format!("reading the request body failed: {e}"))
                }
            })?;
            let Ok(data) = frame.into_data() else { continue };
            if let Some(budget) = budget
                && raw.len() + data.len() > held.bytes
            {
                budget.take(raw.len() + data.len() - held.bytes, &mut held).await?;
            }
            raw.extend_from_slice(&data);
        }
        Ok::<_, Status>(raw)
    };
    let raw = tokio::time::timeout(BODY_TIMEOUT, read).await.map_err(|_| {
        Status::deadline_exceeded(format!("request body not received within {} s", BODY_TIMEOUT.as_secs()))
    })??;
    if !gzip {
        return Ok((Bytes::from(raw), held));
    }
    // Decoded size is bounded too: a small gzip bomb must not allocate without limit; under a
    // memory limit the decoded bytes are taken from the budget a MiB at a time.
    const STEP: usize = 1 << 20;
    let mut decoder = flate2::read::GzDecoder::new(raw.as_slice());
    let mut out = Vec::new();
    let mut chunk = vec![0u8; 64 << 10];
    let mut taken = 0;
    loop {
        let n =
            decoder.read(&mut chunk).map_err(|e| Status::invalid_argument(format!("body is not valid gzip: {e}")))?;
        if n == 0 {
            break;
        }
        if out.len() + n > max {
            return Err(Status::out_of_range(format!("decompressed request is larger than the limit of {max} bytes")));
        }
        if let Some(budget) = budget
            && out.len() + n > taken
        {
            budget.take(STEP, &mut held).await?;
            taken += STEP;
        }
        out.extend_from_slice(&chunk[..n]);
    }
    drop(raw);
    Ok((Bytes::from(out), held))
}

/// The media type of a request (`application/json` from `application/json; charset=utf-8`),
/// lower case; `None` without a `Content-Type`.
pub(crate) fn media_type(headers: &hyper::HeaderMap) -> Option<String> {
    let value = headers.get(header::CONTENT_TYPE)?.to_str().unwrap_or("?").to_ascii_lowercase();
    Some(value.split(';').next().unwrap_or("").trim().to_string())
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
    handler: Arc<HttpApi>,
    stop: impl std::future::Future<Output = ()>,
) {
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    // Each connection holds a task and buffers; Prometheus opens one per shard (`max_shards`
    // defaults to 50), so the default limit is far above honest use.
    let max_connections = handler.shared.limits.max_http_connections;
    let connections = Arc::new(tokio::sync::Semaphore::new(max_connections));
    tokio::pin!(stop);
    loop {
        let (stream, peer): (tokio::net::TcpStream, SocketAddr) = tokio::select! {
            () = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "http: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Ok(permit) = connections.clone().try_acquire_owned() else {
            tracing::warn!(%peer, limit = max_connections, "http: too many open connections; closing this one");
            drop(stream);
            continue;
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
                    let _permit = permit;
                    if let Err(e) = conn.await {
                        tracing::debug!(%peer, error = %e, "http connection");
                    }
                });
            }
            Some(acceptor) => {
                let acceptor = acceptor.clone();
                let watcher = graceful.watcher();
                tokio::spawn(async move {
                    let _permit = permit;
                    let stream = match tokio::time::timeout(HEADER_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(s)) => s,
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, error = %e, "http TLS handshake failed");
                            return;
                        }
                        Err(_) => return,
                    };
                    let conn = builder.serve_connection(TokioIo::new(stream), service);
                    if let Err(e) = watcher.watch(conn).await {
                        tracing::debug!(%peer, error = %e, "http connection");
                    }
                });
            }
        }
    }
    drop(listener);
    graceful.shutdown().await;
}

#[cfg(test)]
pub(crate) mod testing;
