//! Lockstep SQL layer: a read-only DataFusion `SessionContext` over engine scans ([`samples`]),
//! with the Lockstep SQL functions ([`functions`]) registered, running under a bounded memory
//! pool that spills where it can ([`limits`]).

pub mod catalog;
pub mod clock;
pub mod dataset;
pub mod diagnose;
pub mod distributed;
pub mod domain;
pub mod error;
pub mod functions;
pub mod limits;
pub mod nesting;
pub mod objstore;
mod per_store;
pub mod pg_array;
pub mod plan;
pub mod samples;
pub mod script;
pub mod session;

pub use error::{QueryError, Result};
pub use limits::QueryLimits;
pub use samples::ClockVersion;
pub use session::{QueryEngine, QueryStream};
