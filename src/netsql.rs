//! What the network SQL listeners of `lockstep serve` share (the PostgreSQL listener,
//! [`crate::pg`], and the Arrow Flight SQL listener, [`crate::flight`]): the statement session
//! (a fresh read-only [`QueryEngine`] under the per-statement memory limit), token passwords,
//! timestamps sent with a time zone, and the time limit / cancel guard of a result stream.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use arrow::array::{RecordBatch, make_array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::error::ArrowError;
use datafusion::common::ScalarValue;
use datafusion::execution::SendableRecordBatchStream;
use futures::Stream;
use lockstep_engine::Store;
use lockstep_ingest::server::{Role, TokenSet};
use lockstep_query::{ClockVersion, QueryEngine, QueryError, QueryLimits};

/// Settings of a network SQL listener.
#[derive(Debug, Clone)]
pub struct ListenerOptions {
    /// Accepted tokens (bearer, or as the password); `None` accepts every client.
    pub tokens: Option<TokenSet>,
    /// PEM certificate chain and key for TLS; plaintext when `None`.
    pub tls: Option<(Vec<u8>, Vec<u8>)>,
    /// Memory limit of each statement.
    pub limits: QueryLimits,
    /// Time limit of each statement (planning and streaming its rows).
    pub timeout: Duration,
}

/// What every statement of a listener shares: the store and the statement limits.
#[derive(Debug)]
pub struct Shared {
    /// The server's store.
    pub store: Arc<Store>,
    /// Memory limit of each statement.
    pub limits: QueryLimits,
    /// Time limit of each statement (planning and streaming its rows).
    pub timeout: Duration,
}

impl Shared {
    /// What the statements of a listener with `options` over `store` share.
    pub fn new(store: Arc<Store>, options: &ListenerOptions) -> Self {
        Shared { store, limits: options.limits.clone(), timeout: options.timeout }
    }

    /// Plans `sql` in a fresh session, binds `parameters` (`$1`, ...) and starts it: the
    /// result schema as sent (timestamps without a zone in `zone`) and the batches as
    /// DataFusion produces them (see [`wire_batch`]).
    pub async fn execute(
        &self,
        sql: &str,
        parameters: Vec<ScalarValue>,
        zone: &str,
    ) -> Result<(SchemaRef, SendableRecordBatchStream), QueryError> {
        let engine = self.engine()?;
        let mut frame = engine.sql(sql).await?;
        if !parameters.is_empty() {
            frame = frame.with_param_values(parameters)?;
        }
        let schema = Arc::new(wire_schema(frame.schema().as_arrow(), zone));
        let batches = frame.execute_stream().await.map_err(QueryError::from)?;
        Ok((schema, batches))
    }

    /// A fresh read-only session over the store, with the newest clock models and its own
    /// memory pool of the statement limit.
    pub fn engine(&self) -> Result<QueryEngine, QueryError> {
        QueryEngine::with_limits(self.store.clone(), ClockVersion::Newest, self.limits.clone())
    }
}

/// Whether `password` is a token with the read role.
pub fn password_ok(tokens: &TokenSet, password: &str, service: &str) -> bool {
    let mut metadata = tonic::metadata::MetadataMap::new();
    match format!("Bearer {password}").parse() {
        Ok(value) => {
            metadata.insert("authorization", value);
            tokens.authorize(&metadata, Role::Read, service).is_ok()
        }
        Err(_) => false,
    }
}

/// The type a column is sent as: timestamps without a zone get `zone` (they are UTC).
pub fn wire_type(data_type: &DataType, zone: &str) -> DataType {
    match data_type {
        DataType::Timestamp(unit, None) => DataType::Timestamp(*unit, Some(zone.into())),
        other => other.clone(),
    }
}

/// `schema` with its timestamps without a zone in `zone`.
pub fn wire_schema(schema: &Schema, zone: &str) -> Schema {
    let fields: Vec<Field> =
        schema.fields().iter().map(|f| f.as_ref().clone().with_data_type(wire_type(f.data_type(), zone))).collect();
    Schema::new(fields)
}

/// `batch` in `schema` (from [`wire_schema`]): the timestamps get the zone, their values are
/// unchanged (they already are UTC).
pub fn wire_batch(batch: RecordBatch, schema: &SchemaRef) -> Result<RecordBatch, ArrowError> {
    let columns = batch
        .columns()
        .iter()
        .zip(schema.fields())
        .map(|(column, field)| match (column.data_type(), field.data_type()) {
            (a, b) if a == b => Ok(column.clone()),
            (DataType::Timestamp(a, None), DataType::Timestamp(b, Some(_))) if a == b => {
                Ok(make_array(column.to_data().into_builder().data_type(field.data_type().clone()).build()?))
            }
            _ => arrow::compute::cast(column, field.data_type()),
        })
        .collect::<Result<Vec<_>, _>>()?;
    // A batch without columns (`SELECT FROM samples`) keeps its row count.
    let options = arrow::array::RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    RecordBatch::try_new_with_options(schema.clone(), columns, &options)
}

/// The cancel flag of one connection: a cancel request bumps `epoch`; a statement that
/// started at another epoch stops.
#[derive(Debug, Default)]
pub struct CancelFlag {
    epoch: AtomicU64,
    notify: tokio::sync::Notify,
}

impl CancelFlag {
    /// Stops the statements running under the flag.
    pub fn cancel(&self) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
        self.notify.notify_waiters();
    }

    /// The current epoch (read when a statement starts).
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }

    /// Resolves once a cancel request arrives after `started` was read from `epoch`.
    pub async fn cancelled(&self, started: u64) {
        loop {
            let notified = self.notify.notified();
            if self.epoch.load(Ordering::SeqCst) != started {
                return;
            }
            notified.await;
        }
    }
}

/// A future that resolves with the error once the statement is cancelled or out of time.
pub type Interrupt<E> = Pin<Box<dyn Future<Output = E> + Send>>;

/// Resolves with `why(cancelled)` when `flag` is cancelled (`true`) or `timeout` passes
/// (`false`), whichever comes first.
pub fn interrupt<E: 'static>(
    flag: Option<Arc<CancelFlag>>,
    timeout: Duration,
    why: impl FnOnce(bool) -> E + Send + 'static,
) -> Interrupt<E> {
    let started = flag.as_ref().map(|f| f.epoch());
    Box::pin(async move {
        let cancel = async {
            match (&flag, started) {
                (Some(flag), Some(started)) => flag.cancelled(started).await,
                _ => std::future::pending().await,
            }
        };
        tokio::select! {
            () = cancel => why(true),
            () = tokio::time::sleep(timeout) => why(false),
        }
    })
}

/// Items that end with the interrupt's error when it fires first; dropping it drops (and so
/// stops) the statement.
pub struct Guarded<T, E> {
    items: Pin<Box<dyn Stream<Item = Result<T, E>> + Send>>,
    stop: Option<Interrupt<E>>,
}

impl<T, E> Guarded<T, E> {
    /// `items` until `stop` resolves.
    pub fn new(items: Pin<Box<dyn Stream<Item = Result<T, E>> + Send>>, stop: Interrupt<E>) -> Self {
        Guarded { items, stop: Some(stop) }
    }
}

impl<T, E> Stream for Guarded<T, E> {
    type Item = Result<T, E>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let Some(stop) = self.stop.as_mut() else { return Poll::Ready(None) };
        if let Poll::Ready(e) = stop.as_mut().poll(cx) {
            self.stop = None;
            return Poll::Ready(Some(Err(e)));
        }
        match self.items.as_mut().poll_next(cx) {
            Poll::Ready(None) => {
                self.stop = None;
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(e))) => {
                self.stop = None;
                Poll::Ready(Some(Err(e)))
            }
            other => other,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use arrow::array::{Array, TimestampNanosecondArray};
    use arrow::datatypes::TimeUnit;

    #[test]
    fn timestamps_without_zone_get_the_zone_and_keep_their_values() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("time", DataType::Timestamp(TimeUnit::Nanosecond, None), false),
            Field::new("value", DataType::Float64, false),
        ]));
        let wire = Arc::new(wire_schema(&schema, "UTC"));
        assert_eq!(wire.field(0).data_type(), &DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into())));
        assert_eq!(wire.field(1).data_type(), &DataType::Float64);
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(TimestampNanosecondArray::from(vec![1_772_442_060_000_000_000])),
                Arc::new(arrow::array::Float64Array::from(vec![1.5])),
            ],
        )
        .unwrap();
        let sent = wire_batch(batch, &wire).unwrap();
        let time = sent.column(0).as_any().downcast_ref::<TimestampNanosecondArray>().unwrap();
        assert_eq!(time.value(0), 1_772_442_060_000_000_000);
        assert_eq!(time.timezone(), Some("UTC"));
        assert_eq!(sent.column(1).len(), 1);
        // No columns (`SELECT FROM samples LIMIT 3`): the rows stay, as rows of nothing.
        let empty = Arc::new(Schema::empty());
        let rows = RecordBatch::try_new_with_options(
            empty.clone(),
            vec![],
            &arrow::array::RecordBatchOptions::new().with_row_count(Some(3)),
        )
        .unwrap();
        assert_eq!(wire_batch(rows, &empty).unwrap().num_rows(), 3);
    }
}
