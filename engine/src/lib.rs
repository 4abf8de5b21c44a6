//! Lockstep storage engine.
//!
//! Pure storage: no networking, no async runtime. Data arrives as [`model::WriteBatch`]es,
//! is made durable in the write-ahead log ([`wal`]), buffered in memory ([`buffer`]),
//! flushed to time-partitioned Parquet files ([`datafile`]) listed in a [`manifest`], and read
//! back through scans ([`store::Scan`]) that return Arrow record batches.

pub mod analysis;
pub mod buffer;
pub mod clock;
pub mod datafile;
pub mod error;
pub mod manifest;
pub mod merge;
pub mod metrics;
pub mod model;
pub(crate) mod parallel;
pub mod seal;
pub mod series;
pub mod storage;
pub mod store;
pub mod topology;
pub mod wal;
pub mod wallclock;

pub use error::{Error, ErrorKind, Result};
pub use model::{Labels, Rows, SeriesId, SeriesKey, SeriesSamples, WriteBatch};
pub use store::{Store, StoreConfig};
