//! Assembling the services, TLS, auth, background tasks and graceful shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockstep_engine::Store;
use lockstep_proto::ingest::v1::{
    clock_sync_server::ClockSyncServer, stats_server::StatsServer, write_server::WriteServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::MetricsServiceServer;
use tokio::sync::Semaphore;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Identity, ServerTlsConfig};
use tonic::{Request, Status};

use super::auth::{Role, TokenSet};
use super::clock::{ClockService, Refitter};
use super::config::ServerConfig;
use super::documents::Documents;
use super::grpc_budget::Budgeted;
use super::http::{self as http_api, HttpApi};
use super::memory;
use super::otlp::{DeltaState, OtlpService};
use super::stats::{StatsService, Telemetry};
use super::status::DecodeErrors;
use super::write::{Shared, WriteService};

/// The largest HTTP/2 DATA frame the server accepts (the protocol default is 16 KiB).
const H2_MAX_FRAME_SIZE: u32 = 256 * 1024;

/// PEM-encoded certificate chain and private key for TLS.
#[derive(Clone)]
pub struct TlsPem {
    /// Certificate chain (PEM).
    pub cert: Vec<u8>,
    /// Private key (PEM).
    pub key: Vec<u8>,
}

impl TlsPem {
    /// Parses the certificate chain and key as the server will: a caller checks this before
    /// announcing the server, so that a bad key fails before "listening".
    pub fn check(&self) -> Result<(), ServeError> {
        tonic::transport::Server::builder().tls_config(self.server_config()).map(drop).map_err(tls_error)
    }

    fn server_config(&self) -> ServerTlsConfig {
        ServerTlsConfig::new().identity(Identity::from_pem(&self.cert, &self.key))
    }
}

/// A TLS error with its causes: tonic's own message is only "transport error".
fn tls_error(error: tonic::transport::Error) -> ServeError {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(&error);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    ServeError::Tls(text)
}

impl std::fmt::Debug for TlsPem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TlsPem({} byte cert, key redacted)", self.cert.len())
    }
}

/// Everything `Server::run` needs besides the store and the listener.
#[derive(Debug, Clone, Default)]
pub struct ServeOptions {
    /// Limits, telemetry, clock refit and drain settings.
    pub config: ServerConfig,
    /// Accepted tokens; `None` runs without authentication (see [`check_exposure`]).
    pub tokens: Option<TokenSet>,
    /// TLS material; `None` serves plaintext HTTP/2.
    pub tls: Option<TlsPem>,
}

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Listening unauthenticated on a non-loopback address without `--insecure`.
    #[error("refusing to listen on {addr} without authentication: pass --token-file (recommended) or --insecure")]
    Unprotected {
        /// The address asked for.
        addr: SocketAddr,
    },
    /// TLS material was rejected.
    #[error("TLS configuration: {0}")]
    Tls(String),
    /// The transport failed.
    #[error("gRPC transport: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// Reading the listener address failed.
    #[error("listener: {0}")]
    Io(#[from] std::io::Error),
}

/// Refuses unauthenticated serving on anything but loopback unless `insecure`.
pub fn check_exposure(addr: SocketAddr, has_tokens: bool, insecure: bool) -> Result<(), ServeError> {
    if has_tokens || insecure || addr.ip().is_loopback() { Ok(()) } else { Err(ServeError::Unprotected { addr }) }
}

/// What a finished server reports.
#[derive(Debug, Clone, Copy, Default)]
pub struct ServeReport {
    /// Samples durably accepted while it ran.
    pub samples_accepted: u64,
    /// Writes still running when the drain timeout expired (0 after a clean drain).
    pub abandoned_writes: usize,
}

/// A configured server, ready to run on a listener.
#[derive(Debug)]
pub struct Server {
    store: Arc<Store>,
    options: ServeOptions,
    telemetry: Arc<Telemetry>,
}

fn interceptor(
    tokens: Option<Arc<TokenSet>>,
    role: Role,
    service: &'static str,
    telemetry: Arc<Telemetry>,
) -> impl FnMut(Request<()>) -> Result<Request<()>, Status> + Clone {
    move |request: Request<()>| {
        if let Some(tokens) = &tokens
            && let Err(status) = tokens.authorize(request.metadata(), role, service)
        {
            telemetry.request(status.code());
            return Err(status);
        }
        Ok(request)
    }
}

impl Server {
    /// A server over `store`.
    pub fn new(store: Arc<Store>, options: ServeOptions) -> Self {
        Server { store, options, telemetry: Arc::new(Telemetry::default()) }
    }

    /// The server's counters.
    pub fn telemetry(&self) -> Arc<Telemetry> {
        self.telemetry.clone()
    }

    /// Serves on `listener` until `shutdown` completes, then stops accepting, lets open calls
    /// finish (up to `drain_timeout`), waits for running writes, refits clock models if new
    /// input arrived and writes a last self-telemetry sample. The caller then closes the store.
    pub async fn run(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<ServeReport, ServeError> {
        self.run_with_http(listener, None, shutdown).await
    }

    /// [`Server::run`], plus Prometheus remote write 1.0 (`POST /api/v1/write`) over HTTP/1.1
    /// on `http` when given (TLS and tokens as for gRPC; stopped and drained with it).
    pub async fn run_with_http(
        self,
        listener: tokio::net::TcpListener,
        http: Option<tokio::net::TcpListener>,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<ServeReport, ServeError> {
        let Server { store, options, telemetry } = self;
        let config = options.config.clone();
        let limits = config.limits.clone();
        let refitter = Arc::new(Refitter::default());
        let shared = Arc::new(Shared {
            store: store.clone(),
            limits: limits.clone(),
            telemetry: telemetry.clone(),
            permits: Arc::new(Semaphore::new(limits.max_in_flight.max(1))),
            refitter: refitter.clone(),
        });
        let tokens = options.tokens.map(Arc::new);
        let max = limits.max_message_bytes;
        // Request bodies (HTTP) and messages (gRPC) being received share a part of the memory limit.
        let bodies = http_api::BodyBudget::for_limits(&limits);
        let auth = |role, service| interceptor(tokens.clone(), role, service, telemetry.clone());

        let write = WriteServer::new(WriteService { shared: shared.clone() })
            .max_decoding_message_size(max)
            .max_encoding_message_size(max);
        let clock = ClockSyncServer::new(ClockService {
            store: store.clone(),
            telemetry: telemetry.clone(),
            refitter: refitter.clone(),
            retry_after_ms: limits.retry_after_ms,
        })
        .max_decoding_message_size(max);
        let otlp_service = OtlpService { shared: shared.clone(), deltas: Arc::new(Mutex::new(DeltaState::default())) };
        // gzip as the OTel Collector's otlp exporter sends by default (QA pass 23a: refused with
        // UNIMPLEMENTED); tonic limits the decompressed message to the same size.
        let otlp = MetricsServiceServer::new(otlp_service.clone())
            .max_decoding_message_size(max)
            .accept_compressed(tonic::codec::CompressionEncoding::Gzip);
        let stats = StatsServer::new(StatsService { store: store.clone(), telemetry: telemetry.clone() });

        let mut builder = tonic::transport::Server::builder()
            .tcp_nodelay(true)
            .max_concurrent_streams(Some(1024))
            // Write batches are ~100 KB–1 MB: larger DATA frames than the 16 KB default mean
            // fewer frames to parse and account per batch.
            .max_frame_size(Some(H2_MAX_FRAME_SIZE))
            .http2_keepalive_interval(Some(Duration::from_secs(30)));
        if let Some(limit) = limits.memory_limit_bytes {
            // HTTP/2 buffers up to a window of received, unread data per stream and connection.
            builder = builder
                .initial_stream_window_size(memory::h2_window_for_limit(limit))
                .initial_connection_window_size(memory::h2_connection_window_for_limit(limit));
        }
        if let Some(tls) = &options.tls {
            builder = builder.tls_config(tls.server_config()).map_err(tls_error)?;
        }
        let router = builder
            .add_service(Budgeted {
                inner: DecodeErrors(InterceptedService::new(write, auth(Role::Write, "lockstep.ingest.v1.Write"))),
                budget: bodies.clone(),
            })
            .add_service(DecodeErrors(InterceptedService::new(
                clock,
                auth(Role::Write, "lockstep.ingest.v1.ClockSync"),
            )))
            .add_service(Budgeted {
                inner: DecodeErrors(InterceptedService::new(otlp, auth(Role::Write, "OTLP MetricsService"))),
                budget: bodies.clone(),
            })
            .add_service(DecodeErrors(InterceptedService::new(stats, auth(Role::Read, "lockstep.ingest.v1.Stats"))));

        // Background: RSS sampling (memory-pressure flushes and trims), self-telemetry, clock refits.
        let background = {
            let store = store.clone();
            let telemetry = telemetry.clone();
            let host = config.telemetry_host.clone();
            let interval = config.telemetry_interval;
            let memory_limit = limits.memory_limit_bytes;
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_millis(100));
                let mut last_telemetry = tokio::time::Instant::now();
                let mut flushing: Option<tokio::task::JoinHandle<()>> = None;
                let mut last_flushes = 0;
                loop {
                    tick.tick().await;
                    let rss = telemetry.sample_rss();
                    if flushing.as_ref().is_some_and(|h| h.is_finished()) {
                        flushing = None;
                    }
                    if let Some(limit) = memory_limit
                        && flushing.is_none()
                    {
                        // Near the limit, flush a buffer worth flushing; after any flush (this
                        // one or a writer's), hand the freed pages back so that RSS shows it.
                        let high = limit - limit / 8;
                        let flushes = store.metrics().flushes.load(Ordering::Relaxed);
                        if rss > high || flushes != last_flushes {
                            last_flushes = flushes;
                            let s = store.clone();
                            let min_rows = s.config().flush_rows / 16;
                            flushing = Some(tokio::task::spawn_blocking(move || {
                                if rss > high
                                    && s.buffered_rows().unwrap_or(0) >= min_rows.max(1)
                                    && let Err(e) = s.flush()
                                {
                                    tracing::warn!(error = %e, "memory-pressure flush failed");
                                }
                                memory::release_free_memory();
                            }));
                        }
                    }
                    if last_telemetry.elapsed() >= interval {
                        last_telemetry = tokio::time::Instant::now();
                        write_telemetry(&store, &telemetry, &host).await;
                    }
                }
            })
        };
        let refit_task = tokio::spawn(refitter.clone().run(store.clone(), config.clock_refit_delay));

        let (http_stop_tx, http_stop_rx) = tokio::sync::oneshot::channel::<()>();
        let http_task = match http {
            Some(http) => {
                let acceptor = match &options.tls {
                    Some(tls) => Some(http_api::tls_acceptor(&tls.cert, &tls.key).map_err(ServeError::Tls)?),
                    None => None,
                };
                let handler = Arc::new(HttpApi {
                    shared: shared.clone(),
                    tokens: tokens.clone(),
                    otlp: otlp_service.clone(),
                    documents: Documents::default(),
                    series_cache: Default::default(),
                    bodies: bodies.clone(),
                });
                Some(tokio::spawn(http_api::serve(http, acceptor, handler, async move {
                    let _ = http_stop_rx.await;
                })))
            }
            None => None,
        };

        let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let drain = config.drain_timeout;
        let serve = router.serve_with_incoming_shutdown(incoming, async move {
            let _ = stop_rx.await;
        });
        tokio::pin!(serve);
        let signal = async move {
            shutdown.await;
            let _ = stop_tx.send(());
            let _ = http_stop_tx.send(());
            tracing::info!("shutdown requested: no new connections, draining");
            tokio::time::sleep(drain).await;
        };
        tokio::pin!(signal);
        let result = tokio::select! {
            r = &mut serve => r,
            () = &mut signal => {
                tracing::warn!(timeout_s = drain.as_secs(), "drain timeout: closing open streams");
                Ok(())
            }
        };
        if let Some(task) = http_task
            && tokio::time::timeout(drain, task).await.is_err()
        {
            tracing::warn!("remote write listener did not drain in time");
        }
        background.abort();
        refit_task.abort();
        // Wait for writes still running (their acks may be lost, their data is not).
        let want = limits.max_in_flight.max(1);
        let deadline = tokio::time::Instant::now() + drain;
        while shared.permits.available_permits() < want && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let abandoned = want.saturating_sub(shared.permits.available_permits());
        shared.permits.close();
        refitter.refit_if_dirty(&store).await;
        telemetry.sample_rss();
        write_telemetry(&store, &telemetry, &config.telemetry_host).await;
        result?;
        Ok(ServeReport { samples_accepted: telemetry.accepted_total(), abandoned_writes: abandoned })
    }
}

/// Writes one self-telemetry sample per counter into the store.
async fn write_telemetry(store: &Arc<Store>, telemetry: &Arc<Telemetry>, host: &str) {
    let batch = telemetry.batch(store, host, store.now_ns());
    let store = store.clone();
    match tokio::task::spawn_blocking(move || store.write(&batch)).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "writing self-telemetry failed"),
        Err(e) => tracing::warn!(error = %e, "self-telemetry task failed"),
    }
}
