//! Mapping engine errors and overload to gRPC statuses with retry hints.

use lockstep_engine::{Error, ErrorKind};
use tonic::metadata::AsciiMetadataValue;
use tonic::{Code, Status};

/// Metadata key of the retry hint on `RESOURCE_EXHAUSTED` / `UNAVAILABLE` (milliseconds).
pub const RETRY_AFTER_MS: &str = "retry-after-ms";

/// A retryable status carrying `retry-after-ms` metadata and the hint in its message.
pub(crate) fn retryable(code: Code, message: impl std::fmt::Display, retry_after_ms: u64) -> Status {
    let mut status = Status::new(code, format!("{message}; retry after {retry_after_ms} ms"));
    status.metadata_mut().insert(RETRY_AFTER_MS, AsciiMetadataValue::from(retry_after_ms));
    status
}

/// The status for an engine error returned by a write or clock-sync call.
///
/// Errors about the request (invalid series, full queues) go to the client as they are. Errors
/// about the server (i/o, corruption, configuration, a failed WAL, bugs) and any message naming
/// a server file are logged in full with a reference id; the client gets the code, a generic
/// message and the id, never a path.
pub(crate) fn engine_status(error: &Error, retry_after_ms: u64) -> Status {
    let kind = error.kind();
    let client_side = matches!(kind, ErrorKind::InvalidArgument | ErrorKind::NotFound | ErrorKind::ResourceExhausted);
    if client_side && !error.names_path() {
        return match kind {
            ErrorKind::NotFound => Status::not_found(error.to_string()),
            ErrorKind::ResourceExhausted => retryable(Code::ResourceExhausted, error, retry_after_ms),
            _ => Status::invalid_argument(error.to_string()),
        };
    }
    let id = log_reference("store operation failed", error);
    match kind {
        ErrorKind::Unavailable => retryable(Code::Unavailable, format!("store unavailable (ref {id})"), retry_after_ms),
        ErrorKind::ResourceExhausted => {
            retryable(Code::ResourceExhausted, format!("store resource exhausted (ref {id})"), retry_after_ms)
        }
        ErrorKind::DataCorruption => {
            Status::data_loss(format!("stored data failed a check (ref {id}); see the server log"))
        }
        ErrorKind::InvalidConfig => Status::internal(format!("server misconfigured (ref {id}); see the server log")),
        ErrorKind::InvalidArgument => {
            Status::failed_precondition(format!("the store refused the request (ref {id}); see the server log"))
        }
        ErrorKind::NotFound | ErrorKind::Internal => {
            Status::internal(format!("internal error (ref {id}); see the server log"))
        }
    }
}

/// `INTERNAL` for a server-side failure: logged in full with a reference id, which is all the
/// client sees besides `what`.
pub(crate) fn internal_status(what: &str, error: impl std::fmt::Display) -> Status {
    let id = log_reference(what, error);
    Status::internal(format!("{what} (ref {id}); see the server log"))
}

/// The status when a blocking task could not be joined (it panicked or was cancelled).
pub(crate) fn join_status(error: tokio::task::JoinError) -> Status {
    internal_status("write task failed", error)
}

/// Logs `error` at error level under a new reference id and returns the id (16 hex digits,
/// random per process plus a counter), which ties a client's status to the log line.
fn log_reference(what: &str, error: impl std::fmt::Display) -> String {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};
    static SEED: OnceLock<u64> = OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let seed = *SEED.get_or_init(|| std::collections::hash_map::RandomState::new().build_hasher().finish());
    let id = format!("{:016x}", seed.wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed)));
    tracing::error!(reference = %id, error = %error, "{what}");
    id
}

/// Maps tonic's `INTERNAL` for a request body that is not valid protobuf (or ends inside a
/// message) to `INVALID_ARGUMENT`: the client sent malformed bytes, the server is fine.
pub(crate) fn decode_status(status: Status) -> Status {
    if is_decode_error(&status) {
        Status::invalid_argument(format!("malformed request: {}", status.message()))
    } else {
        status
    }
}

fn is_decode_error(status: &Status) -> bool {
    status.code() == Code::Internal
        && (status.message().starts_with("failed to decode Protobuf message")
            || status.message() == "Unexpected EOF decoding stream.")
}

/// A service wrapper that applies [`decode_status`] to unary responses: tonic answers a
/// request it cannot decode before the handler runs, with the status in the response headers.
#[derive(Debug, Clone)]
pub(crate) struct DecodeErrors<S>(pub(crate) S);

impl<S: tonic::server::NamedService> tonic::server::NamedService for DecodeErrors<S> {
    const NAME: &'static str = S::NAME;
}

impl<S, Req, B> tonic::codegen::Service<Req> for DecodeErrors<S>
where
    S: tonic::codegen::Service<Req, Response = tonic::codegen::http::Response<B>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = futures::future::MapOk<S::Future, fn(S::Response) -> S::Response>;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: Req) -> Self::Future {
        use futures::TryFutureExt;
        self.0.call(request).map_ok(fix_decode_response as fn(S::Response) -> S::Response)
    }
}

fn fix_decode_response<B>(mut response: tonic::codegen::http::Response<B>) -> tonic::codegen::http::Response<B> {
    let Some(status) = Status::from_header_map(response.headers()).filter(is_decode_error) else {
        return response;
    };
    let status = decode_status(status);
    if status.add_header(response.headers_mut()).is_ok() {
        response.extensions_mut().insert(status);
    }
    response
}

/// Upper-case gRPC name of a code (`OK`, `INVALID_ARGUMENT`, ...), for telemetry.
pub(crate) fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overload_maps_to_resource_exhausted_with_hint() {
        let e = Error::ResourceExhausted { what: "wal append queue", limit: "4 requests".into() };
        let s = engine_status(&e, 250);
        assert_eq!(s.code(), Code::ResourceExhausted);
        assert!(s.message().contains("retry after 250 ms"), "{}", s.message());
        assert_eq!(s.metadata().get(RETRY_AFTER_MS).and_then(|v| v.to_str().ok()), Some("250"));
        let e = Error::Unavailable { reason: "closed".into() };
        assert_eq!(engine_status(&e, 1).code(), Code::Unavailable);
        let e = Error::MissingHost { metric: "m".into() };
        assert_eq!(engine_status(&e, 1).code(), Code::InvalidArgument);
    }

    #[test]
    fn server_side_errors_reach_clients_without_paths() {
        let path = std::path::PathBuf::from("/srv/lockstep/secret-store/wal/00000001.wal");
        let errors = [
            (Error::io(&path, std::io::Error::other("disk on fire")), Code::Internal),
            (Error::io(&path, std::io::Error::from(std::io::ErrorKind::NotFound)), Code::Internal),
            (Error::WalCorrupt { path: path.clone(), offset: 7, reason: "crc".into() }, Code::DataLoss),
            (Error::ReadOnly { path: path.clone() }, Code::FailedPrecondition),
            (Error::InvalidConfig { reason: format!("bad setting in {}", path.display()) }, Code::Internal),
            (Error::Internal { reason: "spill thread panicked".into() }, Code::Internal),
            (
                Error::Unavailable { reason: format!("i/o error on {}; wal is poisoned", path.display()) },
                Code::Unavailable,
            ),
        ];
        for (error, code) in errors {
            let status = engine_status(&error, 10);
            assert_eq!(status.code(), code, "{error}");
            assert!(!status.message().contains("secret-store"), "{error} -> {}", status.message());
            assert!(!status.message().contains("fire"), "{error} -> {}", status.message());
            assert!(status.message().contains("(ref "), "{}", status.message());
        }
        let status = engine_status(&Error::InvalidSeries { reason: "metric name is empty".into() }, 1);
        assert_eq!((status.code(), status.message()), (Code::InvalidArgument, "invalid series: metric name is empty"));
    }

    #[test]
    fn only_decode_failures_become_invalid_argument() {
        let s = decode_status(Status::internal("failed to decode Protobuf message: invalid wire type value: 7"));
        assert_eq!(s.code(), Code::InvalidArgument);
        assert_eq!(decode_status(Status::internal("internal error (ref 1)")).code(), Code::Internal);
        assert_eq!(decode_status(Status::out_of_range("too large")).code(), Code::OutOfRange);
    }
}
