//! Lockstep ingestion: gRPC services, file importers and the workload simulator.
pub mod import;
pub mod prom_text;
pub mod simulate;
pub mod server;
