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
pub(crate) fn engine_status(error: &Error, retry_after_ms: u64) -> Status {
    match error.kind() {
        ErrorKind::InvalidArgument => Status::invalid_argument(error.to_string()),
        ErrorKind::NotFound => Status::not_found(error.to_string()),
        ErrorKind::ResourceExhausted => retryable(Code::ResourceExhausted, error, retry_after_ms),
        ErrorKind::Unavailable => retryable(Code::Unavailable, error, retry_after_ms),
        ErrorKind::DataCorruption => Status::data_loss(error.to_string()),
        ErrorKind::Internal => Status::internal(error.to_string()),
    }
}

/// The status when a blocking task could not be joined (it panicked or was cancelled).
pub(crate) fn join_status(error: tokio::task::JoinError) -> Status {
    Status::internal(format!("write task failed: {error}"))
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
}
