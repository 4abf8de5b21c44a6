//! The simulator's error type.

use std::path::PathBuf;

use lockstep_engine::ErrorKind;

/// Errors of the simulator.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The scenario name is not one of [`Scenario::ALL`](crate::scenario::Scenario::ALL).
    #[error("unknown scenario {name:?} (known: {known})")]
    UnknownScenario {
        /// The name given.
        name: String,
        /// The known names, comma-separated.
        known: String,
    },
    /// A configuration value is out of range.
    #[error("invalid simulator config: {field} {reason}")]
    InvalidConfig {
        /// The offending field.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// Creating or writing a bundle file failed.
    #[error("i/o error on {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The Parquet writer failed.
    #[error("parquet error writing {path}: {source}")]
    Parquet {
        /// The Parquet file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: parquet::errors::ParquetError,
    },
    /// A record batch could not be assembled.
    #[error("arrow error building a batch for {path}: {source}")]
    Arrow {
        /// The file the batch was for.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: arrow::error::ArrowError,
    },
    /// A JSON file could not be written.
    #[error("json error writing {path}: {source}")]
    Json {
        /// The JSON file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: serde_json::Error,
    },
    /// The background Parquet writer stopped before the run finished.
    #[error("parquet writer thread for {path} stopped unexpectedly")]
    WriterStopped {
        /// The Parquet file.
        path: PathBuf,
    },
}

impl SimError {
    /// The error's kind, for mapping to exit or status codes.
    pub fn kind(&self) -> ErrorKind {
        match self {
            SimError::UnknownScenario { .. } | SimError::InvalidConfig { .. } => ErrorKind::InvalidArgument,
            _ => ErrorKind::Internal,
        }
    }
}
