//! Generated protobuf and gRPC code for the `lockstep.ingest.v1` package.
#![allow(missing_docs, clippy::all)]

/// `lockstep.ingest.v1`: the native ingestion protocol.
pub mod ingest {
    /// Version 1 of the protocol.
    pub mod v1 {
        tonic::include_proto!("lockstep.ingest.v1");
    }
}
