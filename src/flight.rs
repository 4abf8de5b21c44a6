//! `lockstep serve --flight-listen`: Lockstep's SQL over Arrow Flight SQL (ADBC, JDBC,
//! Grafana's Flight SQL data source, `pyarrow.flight`), built on `arrow-flight`.
//!
//! The same statements as the PostgreSQL listener ([`crate::pg`]), through the same session
//! code ([`crate::netsql`]): every statement runs in a fresh read-only Lockstep session over
//! the server's store, under `--query-memory-limit-mb` (`RESOURCE_EXHAUSTED` past it) and
//! `--query-timeout-secs` (`DEADLINE_EXCEEDED`); results stream as Arrow record batches, with
//! timestamps without a zone (`samples.time`) sent as `Timestamp(ns, "UTC")`. A client that
//! goes away stops its statement, and so does the `CancelFlightInfo` action. DDL, DML and the
//! update commands are refused (`PERMISSION_DENIED`). At most `--flight-max-connections`
//! connections are open at once; the calls of one more fail with `RESOURCE_EXHAUSTED`
//! ([`limit`]).
//!
//! Statements are stateless on the server: the ticket of `GetFlightInfo` carries a statement
//! id (for cancelling) and the SQL. Prepared statements (what ADBC uses for parameters) live in
//! a bounded table.
//!
//! Authentication follows the gRPC port: without a tokens file (loopback, or `--insecure`)
//! every call is accepted; with one, each call carries `authorization: Bearer <token>` or
//! `Basic <user:token>` (the user name is not checked), the token having the `read` role. The
//! Flight handshake with Basic credentials answers with the bearer header to use (what ADBC's
//! `username`/`password` options and `pyarrow.flight`'s `authenticate_basic_token` do).

mod limit;
mod query;

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use arrow_flight::flight_service_server::FlightServiceServer;
use arrow_flight::{HandshakeRequest, HandshakeResponse};
use base64::Engine as _;
use futures::Stream;
use lockstep_engine::Store;
use lockstep_ingest::server::TokenSet;
use tonic::metadata::MetadataValue;
use tonic::{Request, Response, Status, Streaming};

use crate::netsql::{ListenerOptions, Shared};

/// The zone of timestamps sent without one.
const UTC: &str = "UTC";

/// The credential a call was authenticated with (for the handshake's answer).
#[derive(Debug, Clone)]
struct Credential(String);

/// Checks the `authorization` header of every call: a bearer token, or Basic credentials
/// whose password is the token. Without tokens every call passes.
fn authenticate(tokens: Option<&TokenSet>, mut request: Request<()>) -> Result<Request<()>, Status> {
    let header = request.metadata().get("authorization").map(|v| v.as_bytes().to_vec());
    let basic = header.as_deref().and_then(|h| match h.get(..6) {
        Some(scheme) if scheme.eq_ignore_ascii_case(b"basic ") => Some(h[6..].trim_ascii().to_vec()),
        _ => None,
    });
    let token = match basic {
        Some(encoded) => {
            // Padded (pyarrow) or not (Go's RawStdEncoding, ADBC).
            let engine = base64::engine::GeneralPurpose::new(
                &base64::alphabet::STANDARD,
                base64::engine::GeneralPurposeConfig::new()
                    .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
            );
            let decoded = engine
                .decode(&encoded)
                .ok()
                .and_then(|d| String::from_utf8(d).ok())
                .ok_or_else(|| Status::unauthenticated("malformed Basic authorization"))?;
            let password = decoded.split_once(':').map_or(decoded.as_str(), |(_, p)| p).to_string();
            if let Some(tokens) = tokens
                && !crate::netsql::password_ok(tokens, &password, "Flight SQL")
            {
                return Err(Status::unauthenticated(
                    "invalid user name or password (the password is a token with role read)",
                ));
            }
            Some(password)
        }
        None => {
            if let Some(tokens) = tokens {
                tokens.authorize(request.metadata(), lockstep_ingest::server::Role::Read, "Flight SQL")?;
            }
            header.and_then(|h| String::from_utf8(h).ok()).and_then(|h| h.get(7..).map(|t| t.trim().to_string()))
        }
    };
    if let Some(token) = token {
        request.extensions_mut().insert(Credential(token));
    }
    Ok(request)
}

/// The response stream of the handshake.
type HandshakeStream = Pin<Box<dyn Stream<Item = Result<HandshakeResponse, Status>> + Send>>;

/// The handshake's answer: the bearer header for later calls (the token itself).
fn handshake<T>(request: &Request<T>) -> Result<Response<HandshakeStream>, Status> {
    let reply = HandshakeResponse { protocol_version: 0, payload: Default::default() };
    let mut response: Response<HandshakeStream> = Response::new(Box::pin(futures::stream::iter([Ok(reply)])));
    // Clients read the header after Basic credentials; with none (no tokens) any works.
    let token = request.extensions().get::<Credential>().map_or("none", |c| c.0.as_str());
    let value = MetadataValue::try_from(format!("Bearer {token}"))
        .map_err(|_| Status::unauthenticated("the token is not a valid header value"))?;
    response.metadata_mut().insert("authorization", value);
    Ok(response)
}

/// A handshake request stream (named for [`query::Service::do_handshake`]).
type Handshake = Request<Streaming<HandshakeRequest>>;

/// Serves Flight SQL on `listener` until `stop` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    store: Arc<Store>,
    options: ListenerOptions,
    stop: impl std::future::Future<Output = ()> + Send,
) -> anyhow::Result<()> {
    let shared = Arc::new(Shared::new(store, &options));
    let service = FlightServiceServer::new(query::Service::new(shared)?)
        .max_decoding_message_size(64 << 20)
        .max_encoding_message_size(64 << 20);
    let tokens = options.tokens.clone();
    let service = tonic::service::interceptor::InterceptedService::new(service, move |request| {
        limit::check(&request)?;
        authenticate(tokens.as_ref(), request)
    });
    let mut builder = tonic::transport::Server::builder()
        .tcp_nodelay(true)
        .max_concurrent_streams(Some(1024))
        .http2_keepalive_interval(Some(Duration::from_secs(30)));
    if let Some((cert, key)) = &options.tls {
        let identity = tonic::transport::Identity::from_pem(cert, key);
        builder = builder.tls_config(tonic::transport::ServerTlsConfig::new().identity(identity))?;
    }
    let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
    let incoming = limit::limit(incoming, options.max_connections);
    builder.add_service(service).serve_with_incoming_shutdown(incoming, stop).await?;
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn request(header: &str) -> Request<()> {
        let mut request = Request::new(());
        request.metadata_mut().insert("authorization", header.parse().unwrap());
        request
    }

    #[test]
    fn bearer_and_basic_credentials() {
        let tokens = TokenSet::parse("read rrrrrrrrrrrrrrrrrrrr\nwrite wwwwwwwwwwwwwwwwwwww\n").unwrap();
        let basic = |s: &str| format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(s));
        let raw = |s: &str| format!("Basic {}", base64::engine::general_purpose::STANDARD_NO_PAD.encode(s));
        for ok in
            ["Bearer rrrrrrrrrrrrrrrrrrrr", &basic("me:rrrrrrrrrrrrrrrrrrrr"), &raw("lockstep:rrrrrrrrrrrrrrrrrrrr")]
        {
            let passed = authenticate(Some(&tokens), request(ok)).unwrap();
            assert_eq!(passed.extensions().get::<Credential>().unwrap().0, "rrrrrrrrrrrrrrrrrrrr", "{ok}");
        }
        for bad in [
            "Bearer nope",
            "Bearer wwwwwwwwwwwwwwwwwwww",
            &basic("me:wrong"),
            &basic("me:wwwwwwwwwwwwwwwwwwww"),
            "Basic !!!",
            "Basic ",
            "Digest x",
        ] {
            let e = authenticate(Some(&tokens), request(bad)).unwrap_err();
            assert!(matches!(e.code(), tonic::Code::Unauthenticated | tonic::Code::PermissionDenied), "{bad}: {e}");
        }
        assert_eq!(authenticate(Some(&tokens), Request::new(())).unwrap_err().code(), tonic::Code::Unauthenticated);
        // Without tokens everything passes; a handshake answers with some bearer header.
        let passed = authenticate(None, Request::new(())).unwrap();
        assert!(handshake(&passed).unwrap().metadata().get("authorization").is_some());
        assert!(authenticate(None, request(&basic("x:y"))).is_ok());
    }
}
