//! Lockstep ingestion: the gRPC/OTLP server and the file importers.
pub mod import;
pub mod prom_text;
pub mod server;
