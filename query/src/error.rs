//! The query layer's error type.

use lockstep_engine::ErrorKind;

/// How `lockstep sql` users raise the limit; part of [`QueryError::MemoryLimit`]'s message.
const RAISE_LIMIT: &str =
    "raise it with --memory-limit-mb (or LOCKSTEP_QUERY_MEMORY_LIMIT_MB; 0 = unbounded) or narrow the query";

/// Errors from planning or running SQL.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// The statement would change data or schema, or read outside the store.
    #[error("lockstep sql is read-only: {reason}")]
    ReadOnly {
        /// DataFusion's explanation.
        reason: String,
    },
    /// The query needed more memory than the engine's limit (see [`crate::limits`]) after
    /// the operators that can spill had spilled.
    #[error("{message}; {RAISE_LIMIT}")]
    MemoryLimit {
        /// Which limit, which operator asked for how much, the largest consumers.
        message: String,
    },
    /// Planning or execution failed.
    #[error("{0}")]
    DataFusion(#[source] datafusion::error::DataFusionError),
    /// The storage engine failed.
    #[error("{0}")]
    Engine(#[from] lockstep_engine::Error),
    /// An error that names a file of the store by where a person finds it (an object in a
    /// bucket by its URL) instead of the local path the store uses for it
    /// ([`QueryError::located`]).
    #[error("{message}")]
    Located {
        /// The kind of the error it replaces.
        kind: ErrorKind,
        /// Its message, the file named as [`lockstep_engine::Store::describe_path`] names it.
        message: String,
    },
}

impl From<datafusion::error::DataFusionError> for QueryError {
    /// Recognises the memory-limit error of [`crate::limits::LimitPool`] wherever DataFusion
    /// wrapped it (a shared error from a repartition, a join's context, ...).
    fn from(e: datafusion::error::DataFusionError) -> Self {
        use datafusion::error::DataFusionError as D;
        match e.find_root() {
            D::ResourcesExhausted(message) if message.starts_with(crate::limits::EXCEEDED) => {
                QueryError::MemoryLimit { message: message.clone() }
            }
            // From an operator rather than the pool: a sort that may not spill (spilling
            // disabled), or spill files over the temporary-directory limit.
            D::ResourcesExhausted(message) => {
                QueryError::MemoryLimit { message: format!("query exceeded its memory limit: {message}") }
            }
            _ => QueryError::DataFusion(e),
        }
    }
}

impl QueryError {
    /// The error naming the store's file where a person finds it: a data file in a bucket by
    /// its URL, not by the local path (under `--data-dir`) that names nothing on disk.
    pub fn located(self, store: &lockstep_engine::Store) -> Self {
        let engine = match &self {
            QueryError::Engine(e) => Some(e),
            QueryError::DataFusion(e) => match e.find_root() {
                datafusion::error::DataFusionError::External(inner) => inner.downcast_ref::<lockstep_engine::Error>(),
                _ => None,
            },
            _ => None,
        };
        let Some(path) = engine.and_then(lockstep_engine::Error::path) else { return self };
        let Some(name) = store.describe_path(path) else { return self };
        let local = path.display().to_string();
        QueryError::Located { kind: self.kind(), message: self.to_string().replace(&local, &name) }
    }

    /// Classifies the error.
    pub fn kind(&self) -> ErrorKind {
        use datafusion::error::DataFusionError as D;
        match self {
            QueryError::ReadOnly { .. } => ErrorKind::InvalidArgument,
            QueryError::MemoryLimit { .. } => ErrorKind::ResourceExhausted,
            QueryError::Engine(e) => e.kind(),
            QueryError::Located { kind, .. } => *kind,
            QueryError::DataFusion(e) => match e.find_root() {
                D::SQL(..) | D::Plan(_) | D::SchemaError(..) | D::NotImplemented(_) | D::Configuration(_) => {
                    ErrorKind::InvalidArgument
                }
                D::ResourcesExhausted(_) => ErrorKind::ResourceExhausted,
                D::External(inner) => match inner.downcast_ref::<lockstep_engine::Error>() {
                    Some(engine) => engine.kind(),
                    // `diagnose('nope')`: an unknown job or an empty window is the caller's.
                    None => {
                        inner.downcast_ref::<crate::diagnose::DiagnoseError>().map_or(ErrorKind::Internal, |d| d.kind())
                    }
                },
                _ => ErrorKind::Internal,
            },
        }
    }
}

/// Result alias for the query layer.
pub type Result<T, E = QueryError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnose::DiagnoseError;
    use datafusion::error::DataFusionError;

    /// An unknown job or an empty window of `diagnose(…)` reaches the listeners through
    /// DataFusion as an external error: it keeps its kind (not found, invalid argument), so
    /// Flight SQL answers NOT_FOUND or INVALID_ARGUMENT and not INTERNAL.
    #[test]
    fn diagnose_errors_keep_their_kind_through_datafusion() {
        let wrapped = |e: DiagnoseError| QueryError::DataFusion(DataFusionError::External(Box::new(e)));
        let unknown = wrapped(DiagnoseError::UnknownJob { job: "nope".into(), known: "a".into() });
        assert_eq!(unknown.kind(), ErrorKind::NotFound);
        assert_eq!(wrapped(DiagnoseError::EmptyWindow { from: 2, to: 1 }).kind(), ErrorKind::InvalidArgument);
        // The window in the RFC 3339 times `--from`/`--to` are written in (QA pass 19).
        let window = DiagnoseError::EmptyWindow { from: 1_772_442_300_000_000_000, to: 1_772_442_060_000_000_000 };
        assert!(
            window.to_string().starts_with(
                "empty diagnosis window: from 2026-03-02T09:05:00Z is not before to 2026-03-02T09:01:00Z; --from"
            ),
            "{window}"
        );
        let other = QueryError::DataFusion(DataFusionError::External("disk on fire".into()));
        assert_eq!(other.kind(), ErrorKind::Internal);
    }
}
