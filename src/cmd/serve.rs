//! `lockstep serve`: the gRPC ingestion server (native writes, clock sync, OTLP, stats);
//! with `--http-listen`, Prometheus remote write 1.0 over HTTP; with `--pg-listen`, read-only
//! SQL over the PostgreSQL wire protocol (see [`crate::pg`]); with `--flight-listen`, the same
//! SQL over Arrow Flight SQL (see [`crate::flight`]).
//!
//! Settings come from flags, then environment variables (`LOCKSTEP_*`, listed in each flag's
//! help), then the TOML file given with `--config`, then defaults. See `docs/ingest-server.md`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use lockstep_engine::{Store, StoreConfig};
use lockstep_ingest::server::{ServeOptions, Server, ServerConfig, TlsPem, TokenSet, check_exposure, memory};

/// Arguments of `lockstep serve`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    store: super::StoreArgs,
    /// Address to listen on (default 127.0.0.1:4317; port 0 picks a free port).
    #[arg(long, env = "LOCKSTEP_LISTEN")]
    listen: Option<SocketAddr>,
    /// Tokens file (`role[,role] token` per line; roles read, write).
    #[arg(long, env = "LOCKSTEP_TOKEN_FILE")]
    token_file: Option<PathBuf>,
    /// TLS certificate chain (PEM); needs --tls-key.
    #[arg(long, env = "LOCKSTEP_TLS_CERT")]
    tls_cert: Option<PathBuf>,
    /// TLS private key (PEM); needs --tls-cert.
    #[arg(long, env = "LOCKSTEP_TLS_KEY")]
    tls_key: Option<PathBuf>,
    /// Allow serving without tokens on a non-loopback address.
    #[arg(long, env = "LOCKSTEP_INSECURE")]
    insecure: bool,
    /// Also serve Prometheus remote write 1.0 (`POST /api/v1/write`, HTTP/1.1) on this address
    /// (port 0 picks a free port); same tokens, TLS and limits as the gRPC port.
    #[arg(long, env = "LOCKSTEP_HTTP_LISTEN")]
    http_listen: Option<SocketAddr>,
    /// Also serve read-only SQL over the PostgreSQL wire protocol (psql, Grafana, drivers) on
    /// this address (port 0 picks a free port); same tokens (as the password) and TLS.
    #[arg(long, env = "LOCKSTEP_PG_LISTEN")]
    pg_listen: Option<SocketAddr>,
    /// Connections the PostgreSQL listener keeps open at once; one more is refused with
    /// SQLSTATE 53300, as PostgreSQL refuses past its max_connections (default 100).
    #[arg(long, env = "LOCKSTEP_PG_MAX_CONNECTIONS")]
    pg_max_connections: Option<usize>,
    /// Also serve read-only SQL over Arrow Flight SQL (ADBC, JDBC, Grafana's Flight SQL data
    /// source) on this address (port 0 picks a free port); same tokens (bearer, or as the
    /// password) and TLS.
    #[arg(long, env = "LOCKSTEP_FLIGHT_LISTEN")]
    flight_listen: Option<SocketAddr>,
    /// Connections the Flight SQL listener keeps open at once; the calls of one more fail with
    /// RESOURCE_EXHAUSTED (default 100).
    #[arg(long, env = "LOCKSTEP_FLIGHT_MAX_CONNECTIONS")]
    flight_max_connections: Option<usize>,
    /// Memory limit of each SQL statement of the network listeners, MiB (0 = unbounded;
    /// default: a quarter of the machine's memory, at least 256 MiB).
    #[arg(long, env = "LOCKSTEP_QUERY_MEMORY_LIMIT_MB", value_name = "MIB")]
    query_memory_limit_mb: Option<u64>,
    /// Memory of all SQL statements of the network listeners together, MiB: each statement's
    /// memory counts against its own limit and this one (0 = no shared limit; default: half
    /// the machine's memory, at least 512 MiB).
    #[arg(long, env = "LOCKSTEP_QUERY_MEMORY_TOTAL_MB", value_name = "MIB")]
    query_memory_total_mb: Option<u64>,
    /// Time limit of each SQL statement of the network listeners, seconds (default 300).
    #[arg(long, env = "LOCKSTEP_QUERY_TIMEOUT_SECS")]
    query_timeout_secs: Option<u64>,
    /// TOML config file (keys in docs/ingest-server.md); flags and env override it.
    #[arg(long, env = "LOCKSTEP_CONFIG")]
    config: Option<PathBuf>,
    /// Writes processed at once; beyond it RESOURCE_EXHAUSTED.
    #[arg(long, env = "LOCKSTEP_MAX_IN_FLIGHT")]
    max_in_flight: Option<usize>,
    /// Largest accepted gRPC message, bytes.
    #[arg(long, env = "LOCKSTEP_MAX_MESSAGE_BYTES")]
    max_message_bytes: Option<usize>,
    /// Refuse writes while the server's RSS is above this many MiB.
    #[arg(long, env = "LOCKSTEP_MEMORY_LIMIT_MB")]
    memory_limit_mb: Option<u64>,
    /// Seconds between self-telemetry samples written into the store.
    #[arg(long, env = "LOCKSTEP_TELEMETRY_INTERVAL_SECS")]
    telemetry_interval_secs: Option<u64>,
    /// Flush the in-memory write buffer to Parquet at this many rows.
    #[arg(long, env = "LOCKSTEP_FLUSH_ROWS")]
    flush_rows: Option<usize>,
    /// Drop time partitions older than this (e.g. `30d`, `12h`, `90m`, `3600s`); default: keep
    /// forever. Applied by the background maintenance.
    #[arg(long, env = "LOCKSTEP_RETENTION", value_parser = parse_duration_secs)]
    retention: Option<u64>,
    /// Compact a time partition once it has this many data files (default 4).
    #[arg(long, env = "LOCKSTEP_COMPACTION_MIN_FILES")]
    compaction_min_files: Option<usize>,
    /// Seconds between background maintenance passes (compaction, retention, recovery from
    /// failed flushes); 0 turns background maintenance off. Default 30.
    #[arg(long, env = "LOCKSTEP_MAINTENANCE_INTERVAL_SECS")]
    maintenance_interval_secs: Option<u64>,
}

/// Parses `30d`, `12h`, `90m`, `3600s` or plain seconds.
fn parse_duration_secs(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => text.split_at(i),
        None => (text, "s"),
    };
    let n: u64 = number.parse().map_err(|_| format!("{text:?} is not a duration like 30d, 12h, 90m or 3600s"))?;
    let scale = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        "w" => 604_800,
        other => return Err(format!("unknown duration unit {other:?} in {text:?} (use s, m, h, d or w)")),
    };
    n.checked_mul(scale)
        .filter(|&s| s > 0)
        .ok_or_else(|| format!("duration {text:?} must be positive and below 2^64 s"))
}

/// Background maintenance: every `interval`, heal a failing store (flush retry, WAL reopen),
/// apply retention and compact at most one partition per step; while compaction has work it
/// pauses as long as the step took, so it uses at most about half of one core.
fn spawn_maintenance(
    store: Arc<Store>,
    interval: Duration,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    use std::sync::atomic::Ordering;
    std::thread::Builder::new().name("lockstep-maintenance".into()).spawn(move || {
        let mut wait = interval;
        while !stop.load(Ordering::Relaxed) {
            let deadline = std::time::Instant::now() + wait;
            while !stop.load(Ordering::Relaxed) && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50).min(wait));
            }
            if stop.load(Ordering::Relaxed) {
                break;
            }
            store.heal();
            let started = std::time::Instant::now();
            wait = match store.compact_with(false, 1) {
                Ok(summary) if summary.partitions + summary.partitions_skipped > 0 => {
                    tracing::info!(
                        files_in = summary.files_in,
                        expired = summary.files_expired,
                        skipped = summary.partitions_skipped,
                        "background compaction"
                    );
                    started.elapsed().max(Duration::from_millis(10))
                }
                Ok(_) => interval,
                Err(e) => {
                    store.metrics().maintenance_failures.fetch_add(1, Ordering::Relaxed);
                    let error = store.describe_error(&e);
                    tracing::error!(%error, "background maintenance failed; retrying next interval");
                    interval
                }
            };
        }
    })
}

/// The `--config` TOML file. Every key is optional.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    listen: Option<SocketAddr>,
    http_listen: Option<SocketAddr>,
    pg_listen: Option<SocketAddr>,
    pg_max_connections: Option<usize>,
    flight_listen: Option<SocketAddr>,
    flight_max_connections: Option<usize>,
    token_file: Option<PathBuf>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    insecure: Option<bool>,
    drain_timeout_secs: Option<u64>,
    #[serde(default)]
    limits: FileLimits,
    #[serde(default)]
    telemetry: FileTelemetry,
    #[serde(default)]
    clock: FileClock,
    #[serde(default)]
    store: FileStore,
    #[serde(default)]
    query: FileQuery,
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct FileQuery {
    memory_limit_mb: Option<u64>,
    memory_total_mb: Option<u64>,
    timeout_secs: Option<u64>,
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct FileLimits {
    max_message_bytes: Option<usize>,
    max_series_per_request: Option<usize>,
    max_samples_per_request: Option<usize>,
    max_stream_definitions: Option<usize>,
    max_in_flight: Option<usize>,
    stream_window: Option<usize>,
    admission_wait_ms: Option<u64>,
    memory_limit_mb: Option<u64>,
    retry_after_ms: Option<u64>,
    max_rejections: Option<usize>,
    max_delta_series: Option<usize>,
    max_http_connections: Option<usize>,
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct FileTelemetry {
    interval_secs: Option<u64>,
    host: Option<String>,
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct FileClock {
    refit_delay_secs: Option<u64>,
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct FileStore {
    flush_rows: Option<usize>,
    max_future_secs: Option<i64>,
    /// Same syntax as `--retention`.
    retention: Option<String>,
    compaction_min_files: Option<usize>,
    maintenance_interval_secs: Option<u64>,
}

fn read(path: &Path, what: &str) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("reading {what} {}", path.display()))
}

/// Starts the server and blocks until SIGTERM or SIGINT, then drains and closes the store.
pub fn run(args: Args) -> anyhow::Result<()> {
    let file: FileConfig = match &args.config {
        Some(p) => {
            let text = std::fs::read_to_string(p).with_context(|| format!("reading config {}", p.display()))?;
            toml::from_str(&text).with_context(|| format!("parsing config {}", p.display()))?
        }
        None => FileConfig::default(),
    };
    let listen = args.listen.or(file.listen).unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 4317)));
    let http_listen = args.http_listen.or(file.http_listen);
    let pg_listen = args.pg_listen.or(file.pg_listen);
    let flight_listen = args.flight_listen.or(file.flight_listen);
    let token_file = args.token_file.or(file.token_file);
    let insecure = args.insecure || file.insecure.unwrap_or(false);
    let tls_cert = args.tls_cert.or(file.tls_cert);
    let tls_key = args.tls_key.or(file.tls_key);

    let mut config = ServerConfig::default();
    let l = &mut config.limits;
    let fl = &file.limits;
    l.max_message_bytes = args.max_message_bytes.or(fl.max_message_bytes).unwrap_or(l.max_message_bytes);
    l.max_series_per_request = fl.max_series_per_request.unwrap_or(l.max_series_per_request);
    l.max_samples_per_request = fl.max_samples_per_request.unwrap_or(l.max_samples_per_request);
    l.max_stream_definitions = fl.max_stream_definitions.unwrap_or(l.max_stream_definitions);
    l.max_in_flight = args.max_in_flight.or(fl.max_in_flight).unwrap_or(l.max_in_flight);
    l.stream_window = fl.stream_window.unwrap_or(l.stream_window);
    if let Some(ms) = fl.admission_wait_ms {
        l.admission_wait = Duration::from_millis(ms);
    }
    l.memory_limit_bytes = args.memory_limit_mb.or(fl.memory_limit_mb).map(|mb| mb << 20).or(l.memory_limit_bytes);
    l.retry_after_ms = fl.retry_after_ms.unwrap_or(l.retry_after_ms);
    l.max_rejections = fl.max_rejections.unwrap_or(l.max_rejections);
    l.max_delta_series = fl.max_delta_series.unwrap_or(l.max_delta_series);
    l.max_http_connections = fl.max_http_connections.unwrap_or(l.max_http_connections).max(1);
    if let Some(s) = args.telemetry_interval_secs.or(file.telemetry.interval_secs) {
        config.telemetry_interval = Duration::from_secs(s.max(1));
    }
    if let Some(h) = file.telemetry.host {
        config.telemetry_host = h;
    }
    if let Some(s) = file.clock.refit_delay_secs {
        config.clock_refit_delay = Duration::from_secs(s);
    }
    if let Some(s) = file.drain_timeout_secs {
        config.drain_timeout = Duration::from_secs(s);
    }

    let tokens = match &token_file {
        Some(p) => {
            let text = String::from_utf8(read(p, "tokens file")?).context("tokens file is not UTF-8")?;
            Some(TokenSet::parse(&text).with_context(|| format!("tokens file {}", p.display()))?)
        }
        None => None,
    };
    check_exposure(listen, tokens.is_some(), insecure)?;
    for addr in [http_listen, pg_listen, flight_listen].into_iter().flatten() {
        check_exposure(addr, tokens.is_some(), insecure)?;
    }
    let tls = match (&tls_cert, &tls_key) {
        (Some(c), Some(k)) => {
            let pem = TlsPem { cert: read(c, "TLS certificate")?, key: read(k, "TLS key")? };
            // Before the store is opened and "listening" is printed: a bad key fails here.
            pem.check().with_context(|| format!("TLS certificate {} and key {}", c.display(), k.display()))?;
            Some(pem)
        }
        (None, None) => None,
        _ => anyhow::bail!("--tls-cert and --tls-key must be given together"),
    };
    if tokens.is_none() {
        eprintln!("warning: serving without authentication (no --token-file)");
    } else if tls.is_none()
        && ![Some(listen), http_listen, pg_listen, flight_listen].into_iter().flatten().all(|a| a.ip().is_loopback())
    {
        eprintln!("warning: bearer tokens travel in cleartext without --tls-cert/--tls-key");
    }

    memory::tune_allocator(config.limits.memory_limit_bytes);
    let mut store_config = StoreConfig::default();
    if let Some(rows) = args.flush_rows.or(file.store.flush_rows) {
        // 0 flushed after every write: a Parquet file per request (QA pass 19).
        anyhow::ensure!(rows > 0, "--flush-rows (flush_rows) must be at least 1, got 0");
        store_config.flush_rows = rows;
    } else if let Some(limit) = config.limits.memory_limit_bytes {
        store_config.flush_rows = memory::flush_rows_for_limit(limit);
    }
    if let Some(s) = file.store.max_future_secs {
        store_config.max_future_ns = Some(s.saturating_mul(1_000_000_000));
    }
    let retention = match (args.retention, &file.store.retention) {
        (Some(s), _) => Some(s),
        (None, Some(text)) => {
            Some(parse_duration_secs(text).map_err(|e| anyhow::anyhow!("config store.retention: {e}"))?)
        }
        (None, None) => None,
    };
    store_config.retention_ns = retention.map(|s| i64::try_from(s).unwrap_or(i64::MAX).saturating_mul(1_000_000_000));
    if let Some(n) = args.compaction_min_files.or(file.store.compaction_min_files) {
        store_config.compaction_min_files = n.max(2);
    }
    // Files written before checksums get them, one partition per maintenance pass.
    store_config.rewrite_unchecked = true;
    let maintenance_interval = args.maintenance_interval_secs.or(file.store.maintenance_interval_secs).unwrap_or(30);
    let store = Arc::new(args.store.open_with(store_config)?);
    let stop_maintenance = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let maintenance = (maintenance_interval > 0)
        .then(|| spawn_maintenance(store.clone(), Duration::from_secs(maintenance_interval), stop_maintenance.clone()))
        .transpose()
        .context("starting background maintenance")?;

    let query_limits = args
        .query_memory_limit_mb
        .or(file.query.memory_limit_mb)
        .map_or_else(lockstep_query::QueryLimits::default, lockstep_query::QueryLimits::memory_mb);
    let total = match args.query_memory_total_mb.or(file.query.memory_total_mb) {
        None => Some(lockstep_query::limits::default_shared_bytes()),
        Some(0) => None,
        Some(mb) => Some(usize::try_from(mb).ok().and_then(|mb| mb.checked_mul(1 << 20)).unwrap_or(usize::MAX)),
    };
    let query_limits = lockstep_query::QueryLimits {
        shared: total.map(|bytes| lockstep_query::limits::SharedBudget::new(bytes, "--query-memory-total-mb")),
        ..query_limits
    };
    let query_timeout = Duration::from_secs(args.query_timeout_secs.or(file.query.timeout_secs).unwrap_or(300).max(1));
    // Statements run on their own runtime, so that a busy one does not hold up writes.
    let sql_runtime = crate::runtime::build_for_statements().context("starting the SQL statements' runtime")?;
    let sql_options = crate::netsql::ListenerOptions {
        tokens: tokens.clone(),
        tls: tls.as_ref().map(|t| (t.cert.clone(), t.key.clone())),
        limits: query_limits,
        timeout: query_timeout,
        runtime: sql_runtime.handle().clone(),
        max_connections: args.pg_max_connections.or(file.pg_max_connections).unwrap_or(100).max(1),
    };
    let pg = pg_listen.map(|_| sql_options.clone());
    let flight_max_connections = args.flight_max_connections.or(file.flight_max_connections).unwrap_or(100).max(1);
    let flight = flight_listen
        .map(|_| crate::netsql::ListenerOptions { max_connections: flight_max_connections, ..sql_options });

    let runtime = crate::runtime::build()?;
    let report = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(listen).await.with_context(|| format!("binding {listen}"))?;
        let local = listener.local_addr()?;
        let http = match http_listen {
            Some(addr) => Some(tokio::net::TcpListener::bind(addr).await.with_context(|| format!("binding {addr}"))?),
            None => None,
        };
        let pg_listener = match pg_listen {
            Some(addr) => Some(tokio::net::TcpListener::bind(addr).await.with_context(|| format!("binding {addr}"))?),
            None => None,
        };
        let flight_listener = match flight_listen {
            Some(addr) => Some(tokio::net::TcpListener::bind(addr).await.with_context(|| format!("binding {addr}"))?),
            None => None,
        };
        let shutdown = futures::FutureExt::shared(shutdown_signal()?);
        {
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            writeln!(out, "listening on {local}{}", if tls.is_some() { " (tls)" } else { "" })?;
            if let Some(http) = &http {
                let scheme = if tls.is_some() { "https" } else { "http" };
                let addr = http.local_addr()?;
                writeln!(out, "prometheus remote write on {scheme}://{addr}/api/v1/write")?;
                writeln!(out, "otlp/http on {scheme}://{addr}/v1/metrics")?;
                writeln!(out, "jobs and topology on {scheme}://{addr}/api/v1/jobs and /api/v1/topology")?;
            }
            if let Some(pg) = &pg_listener {
                writeln!(out, "postgresql on {}{}", pg.local_addr()?, if tls.is_some() { " (tls)" } else { "" })?;
            }
            if let Some(flight) = &flight_listener {
                writeln!(out, "flight sql on {}{}", flight.local_addr()?, if tls.is_some() { " (tls)" } else { "" })?;
            }
            out.flush()?;
        }
        if let (Some(pg_listener), Some(pg)) = (pg_listener, pg) {
            let (store, stop) = (store.clone(), shutdown.clone());
            tokio::spawn(async move {
                if let Err(e) = crate::pg::serve(pg_listener, store, pg, stop).await {
                    tracing::error!(error = %e, "the PostgreSQL listener stopped");
                }
            });
        }
        if let (Some(flight_listener), Some(flight)) = (flight_listener, flight) {
            let (store, stop) = (store.clone(), shutdown.clone());
            tokio::spawn(async move {
                if let Err(e) = crate::flight::serve(flight_listener, store, flight, stop).await {
                    tracing::error!(error = %e, "the Flight SQL listener stopped");
                }
            });
        }
        let server = Server::new(store.clone(), ServeOptions { config, tokens, tls });
        let report = server.run_with_http(listener, http, shutdown).await?;
        anyhow::Ok(report)
    })?;
    drop(runtime);
    // A statement still computing is given a moment; one that does not end keeps its threads
    // (and its hold on the store, which is then flushed rather than closed) until the exit.
    sql_runtime.shutdown_timeout(Duration::from_secs(2));
    stop_maintenance.store(true, std::sync::atomic::Ordering::Relaxed);
    if let Some(m) = maintenance {
        let _ = m.join();
    }
    match Arc::try_unwrap(store) {
        Ok(store) => store.close().context("closing store")?,
        Err(store) => store.flush().context("flushing store")?,
    }
    eprintln!(
        "stopped: {} samples accepted{}",
        report.samples_accepted,
        if report.abandoned_writes > 0 {
            format!(", {} writes abandoned", report.abandoned_writes)
        } else {
            String::new()
        }
    );
    Ok(())
}

/// Installs the SIGTERM and SIGINT handlers now and returns a future that resolves on either.
///
/// The handlers must exist before the server announces its address: a supervisor (or a test)
/// may send SIGTERM the moment it reads "listening on", and a signal that arrives before
/// registration would kill the process with the default action instead of draining.
pub(crate) fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}
