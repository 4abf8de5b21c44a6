//! `lockstep serve --pg-listen`: Lockstep's SQL over the PostgreSQL wire protocol (psql,
//! Grafana's PostgreSQL data source, psycopg, JDBC, any Postgres driver), built on `pgwire`.
//!
//! Every statement runs in a fresh Lockstep session ([`QueryEngine`]) over the server's own
//! store, so it sees every acknowledged write (the write buffer included) and the newest
//! clock models, topology and jobs. The session is read-only (DDL, DML and `COPY` are
//! refused with SQLSTATE 25006), has its own memory pool of `--query-memory-limit-mb`
//! (SQLSTATE 53200 past it) and a time limit of `--query-timeout-secs` (57014); a cancel
//! request (psql's Ctrl-C) stops the running statement (57014), planning and streaming alike.
//! `BEGIN`/`COMMIT`/`ROLLBACK` are accepted (drivers send them); every statement sees the
//! store as it is when it starts. `SET statement_timeout` shortens a session's time limit;
//! other `SET`s are accepted quietly where Lockstep already does what they ask, with a NOTICE
//! where they have no effect, and refused for DataFusion's settings (the server's).
//!
//! Authentication follows the gRPC port: without a tokens file (loopback, or `--insecure`)
//! any user name connects without a password; with one, the password must be a token with
//! the `read` role (the user name is not checked). TLS uses the server's certificate.
//! Timestamps without a time zone (`samples.time`) are sent as `timestamptz` in UTC.

pub mod client;
mod floats;
mod frames;
mod params;
mod query;
mod session;
mod size;

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::{Sink, SinkExt};
use lockstep_engine::Store;
use lockstep_ingest::server::TokenSet;
use pgwire::api::auth::{DefaultServerParameterProvider, StartupHandler};
use pgwire::api::cancel::CancelHandler;
use pgwire::api::{ClientInfo, PgWireConnectionState, PgWireServerHandlers, PidSecretKeyGenerator};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::cancel::CancelRequest;
use pgwire::messages::startup::Authentication;
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use pgwire::tokio::tokio_rustls::TlsAcceptor;

use crate::netsql::{CancelFlag, ListenerOptions, Shared};

/// Connections by backend pid: their secret key and cancel flag.
type Registry = Mutex<HashMap<i32, (Vec<u8>, Arc<CancelFlag>)>>;

/// Removes a connection from the registry when its session ends.
struct Registered {
    pid: i32,
    registry: Arc<Registry>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        if let Ok(mut map) = self.registry.lock() {
            map.remove(&self.pid);
        }
    }
}

/// The pgwire handlers: startup (authentication), simple and extended queries, cancel.
struct Handlers {
    shared: Arc<Shared>,
    parser: Arc<query::Parser>,
    tokens: Option<TokenSet>,
    parameters: DefaultServerParameterProvider,
    pids: pgwire::api::RandomPidSecretKeyGenerator,
    registry: Arc<Registry>,
}

impl Handlers {
    fn new(store: Arc<Store>, options: &ListenerOptions) -> Self {
        let shared = Arc::new(Shared::new(store, options));
        let mut parameters = DefaultServerParameterProvider::default();
        parameters.server_version = format!("16.6 (Lockstep {})", env!("CARGO_PKG_VERSION"));
        parameters.default_transaction_read_only = true;
        parameters.is_superuser = false;
        parameters.time_zone = "UTC".into();
        Handlers {
            parser: Arc::new(query::Parser { shared: shared.clone() }),
            shared,
            tokens: options.tokens.clone(),
            parameters,
            pids: pgwire::api::RandomPidSecretKeyGenerator::default(),
            registry: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// Completes the start-up: backend key (for cancel requests), parameters, ReadyForQuery.
    async fn accept<C>(&self, client: &mut C) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let (pid, key) = self.pids.generate(client);
        client.set_pid_and_secret_key(pid, key.clone());
        let flag = Arc::new(CancelFlag::default());
        if let Ok(mut map) = self.registry.lock() {
            map.insert(pid, (key.to_bytes().to_vec(), flag.clone()));
        }
        client.session_extensions().insert(flag);
        client.session_extensions().insert(Registered { pid, registry: self.registry.clone() });
        pgwire::api::auth::finish_authentication(client, &self.parameters).await
    }
}

#[async_trait]
impl StartupHandler for Handlers {
    async fn on_startup<C>(&self, client: &mut C, message: PgWireFrontendMessage) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        match message {
            PgWireFrontendMessage::Startup(ref startup) => {
                pgwire::api::auth::protocol_negotiation(client, startup).await?;
                pgwire::api::auth::save_startup_parameters_to_metadata(client, startup);
                if self.tokens.is_none() {
                    return self.accept(client).await;
                }
                client.set_state(PgWireConnectionState::AuthenticationInProgress);
                client.send(PgWireBackendMessage::Authentication(Authentication::CleartextPassword)).await?;
            }
            PgWireFrontendMessage::PasswordMessageFamily(password) => {
                let password = password.into_password()?;
                let user = client.metadata().get(pgwire::api::METADATA_USER).cloned().unwrap_or_default();
                match &self.tokens {
                    Some(tokens) if crate::netsql::password_ok(tokens, &password.password, "PostgreSQL") => {
                        return self.accept(client).await;
                    }
                    _ => {
                        tracing::info!(user = %user, peer = %client.socket_addr(), "PostgreSQL login refused");
                        return Err(PgWireError::InvalidPassword(user));
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }
}

#[async_trait]
impl CancelHandler for Handlers {
    async fn on_cancel_request(&self, request: CancelRequest) {
        let flag = self.registry.lock().ok().and_then(|map| {
            map.get(&request.pid)
                .filter(|(key, _)| key.as_slice() == request.secret_key.to_bytes().as_ref())
                .map(|(_, flag)| flag.clone())
        });
        if let Some(flag) = flag {
            flag.cancel();
        }
    }
}

/// `PgWireServerHandlers` of one connection over the shared [`Handlers`]: `refuse` (the limit)
/// when it came past `--pg-max-connections`.
struct Factory {
    handlers: Arc<Handlers>,
    refuse: Option<usize>,
}

impl PgWireServerHandlers for Factory {
    fn simple_query_handler(&self) -> Arc<impl pgwire::api::query::SimpleQueryHandler> {
        self.handlers.clone()
    }

    fn extended_query_handler(&self) -> Arc<impl pgwire::api::query::ExtendedQueryHandler> {
        self.handlers.clone()
    }

    fn startup_handler(&self) -> Arc<impl StartupHandler> {
        Arc::new(Startup { handlers: self.handlers.clone(), refuse: self.refuse })
    }

    fn cancel_handler(&self) -> Arc<impl CancelHandler> {
        self.handlers.clone()
    }
}

/// The start-up of one connection: [`Handlers`]' authentication, or, past the connection
/// limit, the error PostgreSQL gives past its max_connections (FATAL, 53300), which ends it.
struct Startup {
    handlers: Arc<Handlers>,
    refuse: Option<usize>,
}

#[async_trait]
impl StartupHandler for Startup {
    async fn on_startup<C>(&self, client: &mut C, message: PgWireFrontendMessage) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if let Some(max) = self.refuse {
            tracing::warn!(peer = %client.socket_addr(), max, "refused a PostgreSQL connection: too many open");
            let message = format!("sorry, too many clients already (--pg-max-connections {max})");
            return Err(PgWireError::UserError(Box::new(ErrorInfo::new("FATAL".into(), "53300".into(), message))));
        }
        self.handlers.on_startup(client, message).await
    }
}

/// The TLS acceptor for the PostgreSQL listener (ALPN `postgresql`, ring provider).
fn tls_acceptor(cert: &[u8], key: &[u8]) -> anyhow::Result<TlsAcceptor> {
    use pgwire::tokio::tokio_rustls::rustls::{self, crypto::ring, pki_types};
    use pki_types::pem::PemObject;
    let chain = pki_types::CertificateDer::pem_slice_iter(cert).collect::<Result<Vec<_>, _>>()?;
    let key = pki_types::PrivateKeyDer::from_pem_slice(key)?;
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(ring::default_provider()))
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    config.alpn_protocols = vec![b"postgresql".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// How long a connection may take to start (TLS, start-up, authentication), as pgwire's own.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);

/// One connection: pgwire's `process_socket`, but every extended-query message is checked
/// ([`frames::check`]) before pgwire decodes it, whose decoders panic on some malformed ones;
/// such a message ends the connection with FATAL 08P01.
async fn connection(
    socket: tokio::net::TcpStream,
    tls: Option<TlsAcceptor>,
    factory: Factory,
) -> Result<(), std::io::Error> {
    use futures::StreamExt as _;
    use pgwire::tokio::server::{negotiate_tls, process_message};
    let startup_timeout = tokio::time::sleep(STARTUP_TIMEOUT);
    tokio::pin!(startup_timeout);
    // A first packet of a length PostgreSQL refuses: closed at once, as there (pgwire waited
    // for more bytes until the start-up limit).
    let first = tokio::select! {
        () = &mut startup_timeout => return Ok(()),
        ok = frames::first_length(&socket) => ok?,
    };
    if !first {
        tracing::debug!(peer = ?socket.peer_addr().ok(), "PostgreSQL startup packet of an invalid length");
        frames::drain(&socket);
        return Ok(());
    }
    let negotiated = tokio::select! {
        () = &mut startup_timeout => return Ok(()),
        socket = negotiate_tls::<query::Statement>(socket, tls) => socket?,
    };
    // A client that asked for TLS directly where there is none.
    let Some(mut socket) = negotiated else { return Ok(()) };
    use pgwire::api::ErrorHandler as _;
    let startup = Arc::new(Startup { handlers: factory.handlers.clone(), refuse: factory.refuse });
    let (copy, errors, handlers) = (factory.copy_handler(), factory.error_handler(), factory.handlers.clone());
    loop {
        let starting = matches!(
            socket.state(),
            PgWireConnectionState::AwaitingStartup | PgWireConnectionState::AuthenticationInProgress
        );
        let message = if starting {
            tokio::select! {
                () = &mut startup_timeout => None,
                message = socket.next() => message,
            }
        } else {
            if !frames::fill(&mut socket).await? {
                break;
            }
            if let Err(reason) = frames::check(socket.read_buffer_mut()) {
                tracing::debug!(peer = %socket.socket_addr(), %reason, "PostgreSQL protocol violation");
                let error = PgWireError::UserError(Box::new(ErrorInfo::new("FATAL".into(), "08P01".into(), reason)));
                answer_error(&mut socket, error, false).await?;
                break;
            }
            socket.next().await
        };
        let Some(Ok(message)) = message else { break };
        // Terminate: the client is going; close (some clients wait for the server to).
        if matches!(message, PgWireFrontendMessage::Terminate(_)) {
            break;
        }
        let extended_query = match socket.state() {
            PgWireConnectionState::CopyInProgress(extended) => extended,
            _ => message.is_extended_query(),
        };
        let processed = process_message(
            message,
            &mut socket,
            startup.clone(),
            handlers.clone(),
            handlers.clone(),
            copy.clone(),
            handlers.clone(),
        )
        .await;
        if let Err(mut e) = processed {
            errors.on_error(&socket, &mut e);
            answer_error(&mut socket, e, extended_query).await?;
        }
    }
    Ok(())
}

/// Sends `error`: an ERROR as pgwire's `process_error` does (ReadyForQuery after it, or
/// waiting for Sync), a FATAL one alone before the connection closes, as PostgreSQL sends it
/// (`process_error` sent ReadyForQuery first, inviting a query on a connection about to close).
async fn answer_error<S, ST>(
    socket: &mut tokio_util::codec::Framed<S, pgwire::tokio::server::PgWireMessageServerCodec<ST>>,
    error: PgWireError,
    wait_for_sync: bool,
) -> Result<(), std::io::Error>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + Sync + 'static,
{
    let info: ErrorInfo = error.into();
    if !info.is_fatal() {
        return pgwire::tokio::server::process_error(socket, PgWireError::UserError(Box::new(info)), wait_for_sync)
            .await;
    }
    socket.send(PgWireBackendMessage::ErrorResponse(info.into())).await?;
    socket.close().await
}

/// Serves the PostgreSQL protocol on `listener` until `stop` resolves; connections still open
/// then end with the runtime.
pub async fn serve(
    listener: tokio::net::TcpListener,
    store: Arc<Store>,
    options: ListenerOptions,
    stop: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    let tls = match &options.tls {
        Some((cert, key)) => Some(tls_acceptor(cert, key)?),
        None => None,
    };
    let handlers = Arc::new(Handlers::new(store, &options));
    let slots = Arc::new(tokio::sync::Semaphore::new(options.max_connections));
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => return Ok(()),
            accepted = listener.accept() => match accepted {
                Ok((socket, peer)) => {
                    // Past the limit the connection is refused at its startup message (after
                    // TLS, with SQLSTATE 53300); a cancel request has none, so it is still
                    // served: a client at the limit must be able to stop its statements.
                    let slot = slots.clone().try_acquire_owned().ok();
                    let refuse = slot.is_none().then_some(options.max_connections);
                    let (factory, tls) = (Factory { handlers: handlers.clone(), refuse }, tls.clone());
                    tokio::spawn(async move {
                        if let Err(e) = connection(socket, tls, factory).await {
                            tracing::debug!(%peer, error = %e, "PostgreSQL connection ended with an error");
                        }
                        drop(slot);
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a PostgreSQL connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
    }
}
