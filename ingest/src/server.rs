//! The ingestion server behind `lockstep serve`: native columnar writes
//! (`lockstep.ingest.v1.Write`), clock synchronisation (`ClockSync`), OpenTelemetry OTLP
//! `MetricsService/Export` and a read-role `Stats` service, all on one gRPC port; optionally
//! an HTTP/1.1 port ([`http`]) with Prometheus remote write 1.0 ([`remote_write`]), OTLP over
//! HTTP ([`otlp_http`]) and the job and topology documents ([`documents`]).
//!
//! Every write is acknowledged only after [`lockstep_engine::Store::write`] returned, that is
//! after its WAL record is fsynced. Bearer tokens ([`auth`]) guard every RPC; limits
//! ([`ServerConfig`]) bound message sizes, requests in flight and memory. The layout of the
//! protocol, the OTLP mapping and the status codes are documented in `docs/ingest-server.md`.

pub mod auth;
mod clock;
mod config;
mod convert;
pub mod documents;
mod grpc_budget;
pub mod http;
pub mod memory;
mod otlp;
pub mod otlp_http;
pub mod remote_write;
mod run;
mod stats;
mod status;
mod write;

pub use auth::{Role, TokenFileError, TokenSet};
pub use config::{Limits, ServerConfig};
pub use run::{ServeError, ServeOptions, ServeReport, Server, TlsPem, check_exposure};
pub use stats::Telemetry;

#[cfg(test)]
mod tests;
