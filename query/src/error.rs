//! The query layer's error type.

use lockstep_engine::ErrorKind;

/// Errors from planning or running SQL.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// The statement would change data or schema, or read outside the store.
    #[error("lockstep sql is read-only: {reason}")]
    ReadOnly {
        /// DataFusion's explanation.
        reason: String,
    },
    /// Planning or execution failed.
    #[error("{0}")]
    DataFusion(#[from] datafusion::error::DataFusionError),
    /// The storage engine failed.
    #[error("{0}")]
    Engine(#[from] lockstep_engine::Error),
}

impl QueryError {
    /// Classifies the error.
    pub fn kind(&self) -> ErrorKind {
        use datafusion::error::DataFusionError as D;
        match self {
            QueryError::ReadOnly { .. } => ErrorKind::InvalidArgument,
            QueryError::Engine(e) => e.kind(),
            QueryError::DataFusion(e) => match e.find_root() {
                D::SQL(..) | D::Plan(_) | D::SchemaError(..) | D::NotImplemented(_) => ErrorKind::InvalidArgument,
                D::ResourcesExhausted(_) => ErrorKind::ResourceExhausted,
                D::External(inner) => match inner.downcast_ref::<lockstep_engine::Error>() {
                    Some(engine) => engine.kind(),
                    None => ErrorKind::Internal,
                },
                _ => ErrorKind::Internal,
            },
        }
    }
}

/// Result alias for the query layer.
pub type Result<T, E = QueryError> = std::result::Result<T, E>;
