//! What the network SQL listeners of `lockstep serve` share (the PostgreSQL listener,
//! [`crate::pg`], and the Arrow Flight SQL listener, [`crate::flight`]): the statement session
//! (a fresh read-only [`QueryEngine`] under the per-statement memory limit), token passwords,
//! timestamps sent with a time zone, and the time limit / cancel guard of a result stream.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use arrow::array::{RecordBatch, make_array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::error::ArrowError;
use datafusion::common::ScalarValue;
use datafusion::execution::SendableRecordBatchStream;
use futures::Stream;
use lockstep_engine::Store;
use lockstep_engine::analysis::Stop;
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
    /// The runtime statements plan and run on, apart from the listener's: statements that keep
    /// their threads busy (a whole-series aggregate over millions of rows computes without
    /// yielding) then hold up neither the writes nor the watchdog that ends them at their time
    /// limit.
    pub runtime: tokio::runtime::Handle,
    /// Connections open at once: one more is refused with 53300 (PostgreSQL), or its calls
    /// fail with `RESOURCE_EXHAUSTED` (Flight SQL).
    pub max_connections: usize,
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
    /// See [`ListenerOptions::runtime`].
    runtime: tokio::runtime::Handle,
}

/// How many result batches a statement running on the statements' runtime sends ahead of
/// the connection that writes them.
const AHEAD: usize = 2;

impl Shared {
    /// What the statements of a listener with `options` over `store` share.
    pub fn new(store: Arc<Store>, options: &ListenerOptions) -> Self {
        Shared { store, limits: options.limits.clone(), timeout: options.timeout, runtime: options.runtime.clone() }
    }

    /// Plans `sql` in a fresh session, binds `parameters` (`$1`, ...) and starts it: the
    /// result schema as sent (timestamps without a zone in `zone`) and the batches as
    /// DataFusion produces them (see [`wire_batch`]). The statement plans and runs on the
    /// statements' runtime ([`ListenerOptions::runtime`]), [`AHEAD`] batches ahead of the
    /// returned stream; dropping this future or the stream stops it.
    pub async fn execute(
        &self,
        sql: &str,
        parameters: Vec<ScalarValue>,
        zone: &str,
    ) -> Result<(SchemaRef, SendableRecordBatchStream), QueryError> {
        let engine = self.engine()?;
        let stop = engine.stop().clone();
        let (sql, zone, store) = (sql.to_owned(), zone.to_owned(), self.store.clone());
        let (started, planned) = tokio::sync::oneshot::channel();
        let (send, receive) = tokio::sync::mpsc::channel(AHEAD);
        let task = self.runtime.spawn(async move {
            let mut batches = match start(engine, &sql, parameters, &zone, &store).await {
                Ok((schema, batches)) => {
                    let inner = batches.schema();
                    if started.send(Ok((schema, inner))).is_err() {
                        return;
                    }
                    batches
                }
                Err(e) => {
                    let _ = started.send(Err(e));
                    return;
                }
            };
            while let Some(item) = futures::StreamExt::next(&mut batches).await {
                if send.send(item).await.is_err() {
                    return;
                }
            }
        });
        let running = Running(task.abort_handle(), stop);
        let (schema, inner) = planned.await.map_err(|_| {
            QueryError::Engine(lockstep_engine::Error::Internal { reason: "the statement's task ended".into() })
        })??;
        let batches = futures::stream::unfold((receive, running), |(mut receive, running)| async move {
            receive.recv().await.map(|item| (item, (receive, running)))
        });
        let batches = datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(inner, batches);
        Ok((schema, Box::pin(batches)))
    }

    /// A fresh read-only session over the store, with the newest clock models and its own
    /// memory pool of the statement limit.
    pub fn engine(&self) -> Result<QueryEngine, QueryError> {
        QueryEngine::with_limits(self.store.clone(), ClockVersion::Newest, self.limits.clone())
    }
}

/// Plans and starts a statement in `engine` (see [`Shared::execute`]).
async fn start(
    engine: QueryEngine,
    sql: &str,
    parameters: Vec<ScalarValue>,
    zone: &str,
    store: &Store,
) -> Result<(SchemaRef, SendableRecordBatchStream), QueryError> {
    let mut frame = engine.sql(sql).await?;
    if !parameters.is_empty() {
        frame = frame.with_param_values(parameters)?;
    }
    let schema = Arc::new(wire_schema(frame.schema().as_arrow(), zone));
    let task = Arc::new(frame.task_ctx());
    let plan = frame.create_physical_plan().await.map_err(|e| QueryError::from(e).located(store))?;
    // A join computing from memory must yield, or a cancel or timeout cannot stop it.
    let plan = lockstep_query::plan::yielding_joins(plan)?;
    let batches =
        datafusion::physical_plan::execute_stream(plan, task).map_err(|e| QueryError::from(e).located(store))?;
    Ok((schema, batches))
}

/// Aborts a statement's task on the statements' runtime when dropped (its result stream, or
/// the future planning it, went away), and sets its session's stop flag: an analysis computing
/// without yielding (`lag_corr` over millions of rows) is not reached by the abort, and ends at
/// its next check of the flag instead of keeping a statement thread busy to the end.
struct Running(tokio::task::AbortHandle, Stop);

impl Drop for Running {
    fn drop(&mut self) {
        self.1.set();
        self.0.abort();
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

/// A statement's items (rows or batches) as a stream.
pub type ItemStream<T, E> = Pin<Box<dyn Stream<Item = Result<T, E>> + Send>>;

/// The items of a [`Guarded`] stream, shared with its watchdog.
type Items<T, E> = Arc<Mutex<Option<ItemStream<T, E>>>>;

/// How a [`Guarded`] stream learns of its interrupt.
enum Watch<E> {
    /// A watchdog task awaits the interrupt, drops the items and sends the error.
    Task(tokio::sync::oneshot::Receiver<E>, tokio::task::AbortHandle),
    /// No Tokio runtime to run a watchdog: the interrupt is polled with the items.
    Inline(Interrupt<E>),
    /// The watchdog ended without an interrupt (the runtime is shutting down).
    Gone,
}

/// Items that end with the interrupt's error when it fires first; dropping it drops (and so
/// stops) the statement.
///
/// The interrupt is awaited by a watchdog task, not only when the stream is polled: a client
/// that stops reading blocks the connection's write, and then nothing polls the result stream.
/// When the time limit passes or a cancel request comes, the watchdog drops the statement
/// (its batches in flight, its scan threads) there and then; the client gets the error once it
/// reads again.
pub struct Guarded<T, E> {
    items: Items<T, E>,
    /// `None` once the stream has ended.
    watch: Option<Watch<E>>,
}

/// Takes the items out of their slot (a poisoned lock still holds them).
fn take<T, E>(items: &Items<T, E>) -> Option<ItemStream<T, E>> {
    items.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take()
}

impl<T: 'static, E: Send + 'static> Guarded<T, E> {
    /// `items` until `stop` resolves.
    pub fn new(items: ItemStream<T, E>, stop: Interrupt<E>) -> Self {
        let items: Items<T, E> = Arc::new(Mutex::new(Some(items)));
        let watch = match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let (tell, told) = tokio::sync::oneshot::channel();
                let shared = items.clone();
                let task = runtime.spawn(async move {
                    let e = stop.await;
                    drop(take(&shared));
                    let _ = tell.send(e);
                });
                Watch::Task(told, task.abort_handle())
            }
            Err(_) => Watch::Inline(stop),
        };
        Guarded { items, watch: Some(watch) }
    }
}

impl<T, E> Guarded<T, E> {
    /// Ends the stream: stops the watchdog and drops the items.
    fn finish(&mut self) {
        if let Some(Watch::Task(_, task)) = self.watch.take() {
            task.abort();
        }
        drop(take(&self.items));
    }
}

impl<T, E> Drop for Guarded<T, E> {
    fn drop(&mut self) {
        self.finish();
    }
}

impl<T, E> Stream for Guarded<T, E> {
    type Item = Result<T, E>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        let fired = match this.watch.as_mut() {
            None => return Poll::Ready(None),
            Some(Watch::Task(told, _)) => match Pin::new(told).poll(cx) {
                Poll::Ready(Ok(e)) => Some(e),
                Poll::Ready(Err(_)) => {
                    this.watch = Some(Watch::Gone);
                    None
                }
                Poll::Pending => None,
            },
            Some(Watch::Inline(stop)) => match stop.as_mut().poll(cx) {
                Poll::Ready(e) => Some(e),
                Poll::Pending => None,
            },
            Some(Watch::Gone) => None,
        };
        if let Some(e) = fired {
            this.finish();
            return Poll::Ready(Some(Err(e)));
        }
        let polled = {
            let mut slot = this.items.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            match slot.as_mut() {
                Some(items) => items.as_mut().poll_next(cx),
                // The watchdog has just taken them; its error follows (and wakes this task).
                None => Poll::Pending,
            }
        };
        match polled {
            Poll::Ready(None) => {
                this.finish();
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(e))) => {
                this.finish();
                Poll::Ready(Some(Err(e)))
            }
            other => other,
        }
    }
}

/// What a listener adds to a memory-limit error: the `serve` option of the limit that was
/// hit — the one all statements share (`--query-memory-total-mb`), or each statement's.
pub(crate) fn memory_limit_message(message: &str) -> String {
    let option = if message.contains("shared by every statement") {
        "the limit of all statements together is set by `lockstep serve --query-memory-total-mb`"
    } else {
        "the server's per-statement limit is set by `lockstep serve --query-memory-limit-mb`"
    };
    format!("{message}; {option}")
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use arrow::array::{Array, TimestampNanosecondArray};
    use arrow::datatypes::TimeUnit;

    /// A memory-limit error names the option of the limit that was hit (QA pass 21: a refusal
    /// by the budget all statements share named the per-statement option).
    #[test]
    fn a_memory_limit_error_names_the_limit_hit() {
        let shared = memory_limit_message("query exceeded the memory limit of 1024 MiB shared by every statement");
        assert!(shared.ends_with("set by `lockstep serve --query-memory-total-mb`"), "{shared}");
        let own = memory_limit_message("query exceeded the memory limit of 64 MiB: SortExec needed 2 MiB more");
        assert!(own.ends_with("set by `lockstep serve --query-memory-limit-mb`"), "{own}");
    }

    /// Sets its flag when dropped: stands for a running statement's resources.
    struct Dropped(Arc<std::sync::atomic::AtomicBool>);

    impl Drop for Dropped {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    /// A statement that never ends, whose drop sets the returned flag.
    fn endless() -> (ItemStream<u32, String>, Arc<std::sync::atomic::AtomicBool>) {
        let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let held = Dropped(dropped.clone());
        let items = futures::stream::unfold(held, |held| async move {
            std::future::pending::<()>().await;
            Some((Ok(0), held))
        });
        (Box::pin(items), dropped)
    }

    /// A client that stops reading blocks the connection's write, so nothing polls the result
    /// stream: the time limit and a cancel request still drop the statement at once, and the
    /// client gets the error when it reads again.
    /// A statement's result stream (or the future planning it) going away sets its session's
    /// stop flag as well as aborting its task: the abort does not reach an analysis computing
    /// without yielding, the flag does.
    #[test]
    fn dropping_a_running_statement_sets_its_stop_flag() {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let task = rt.spawn(futures::future::pending::<()>());
        let stop = Stop::new();
        drop(Running(task.abort_handle(), stop.clone()));
        assert!(stop.is_set());
        assert!(rt.block_on(task).unwrap_err().is_cancelled());
    }

    #[test]
    fn an_interrupt_drops_the_statement_that_nobody_polls() {
        use futures::StreamExt;
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_time().build().unwrap();
        rt.block_on(async {
            let why = |cancelled: bool| if cancelled { "cancelled".to_string() } else { "timeout".to_string() };
            let (items, dropped) = endless();
            let mut guarded = Guarded::new(items, interrupt(None, Duration::from_millis(50), why));
            // Polled once (the first rows went out), then never again for a while.
            assert!(futures::poll!(guarded.next()).is_pending());
            tokio::time::sleep(Duration::from_millis(500)).await;
            assert!(dropped.load(Ordering::SeqCst), "the timed-out statement is still held");
            assert_eq!(guarded.next().await, Some(Err("timeout".to_string())));
            assert_eq!(guarded.next().await, None);

            let flag = Arc::new(CancelFlag::default());
            let (items, dropped) = endless();
            let guarded = Guarded::new(items, interrupt(Some(flag.clone()), Duration::from_secs(600), why));
            flag.cancel();
            tokio::time::sleep(Duration::from_millis(200)).await;
            assert!(dropped.load(Ordering::SeqCst), "the cancelled statement is still held");
            assert_eq!(guarded.collect::<Vec<_>>().await, vec![Err("cancelled".to_string())]);

            // Without an interrupt the items go through, and dropping the stream drops them.
            let rows = futures::stream::iter([Ok(1), Ok(2)]);
            let guarded = Guarded::new(Box::pin(rows), interrupt(None, Duration::from_secs(600), why));
            assert_eq!(guarded.collect::<Vec<_>>().await, vec![Ok(1), Ok(2)]);
            let (items, dropped) = endless();
            drop(Guarded::new(items, interrupt(None, Duration::from_secs(600), why)));
            assert!(dropped.load(Ordering::SeqCst));
        });
    }

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
