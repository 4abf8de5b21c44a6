//! The `Write` service (unary and streaming) and the shared write path: admission control,
//! blocking store writes, acknowledgements.

use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use lockstep_engine::store::WriteOutcome;
use lockstep_engine::{Store, WriteBatch};
use lockstep_proto::ingest::v1::{SeriesRejection, WriteRequest, WriteResponse, write_server};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tonic::{Code, Request, Response, Status, Streaming};

use super::clock::Refitter;
use super::config::Limits;
use super::convert::{Prepared, SeriesTable, Write, prepare, request_size};
use super::stats::Telemetry;
use super::status::{decode_status, engine_status, join_status, retryable};

/// State shared by every service of one server.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) store: Arc<Store>,
    pub(crate) limits: Limits,
    pub(crate) telemetry: Arc<Telemetry>,
    pub(crate) permits: Arc<Semaphore>,
    /// Refits the clock models after clock input, including `collective_end` samples.
    pub(crate) refitter: Arc<Refitter>,
}

/// A held in-flight slot; released (and the gauge decremented) on drop.
pub(crate) struct InFlight {
    _permit: OwnedSemaphorePermit,
    telemetry: Arc<Telemetry>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.telemetry.in_flight_add(-1);
    }
}

impl Shared {
    fn slot(&self, permit: OwnedSemaphorePermit) -> InFlight {
        self.telemetry.in_flight_add(1);
        InFlight { _permit: permit, telemetry: self.telemetry.clone() }
    }

    fn overloaded(&self, samples: u64, why: String) -> Status {
        self.telemetry.rejected("overloaded", samples);
        retryable(Code::ResourceExhausted, why, self.limits.retry_after_ms)
    }

    /// Refuses work while the process is over its memory limit and the store holds enough
    /// buffered rows for the pressure flush to take them (a sixteenth of `flush_rows`). With
    /// fewer, refusing could not help: no flush would come, and memory held by something else (a
    /// SQL statement's, which the allocator may keep) refused every write for good (QA pass 24:
    /// an aggregate left the RSS at 310 MiB of a 256 MiB limit, and one-sample writes got 503
    /// for minutes).
    fn memory_ok(&self, samples: u64) -> Result<(), Status> {
        if let Some(limit) = self.limits.memory_limit_bytes {
            let rss = self.telemetry.rss();
            let flushable = (self.store.config().flush_rows / 16).max(1);
            if rss > limit && self.store.buffered_rows().unwrap_or(0) >= flushable {
                return Err(self.overloaded(
                    samples,
                    format!("server memory (RSS {} MiB) is above its limit of {} MiB", rss >> 20, limit >> 20),
                ));
            }
        }
        Ok(())
    }

    /// Takes an in-flight slot now or fails with `RESOURCE_EXHAUSTED` (unary calls).
    pub(crate) fn admit_now(&self, samples: u64) -> Result<InFlight, Status> {
        self.memory_ok(samples)?;
        match self.permits.clone().try_acquire_owned() {
            Ok(p) => Ok(self.slot(p)),
            Err(_) => Err(self
                .overloaded(samples, format!("server busy: {} writes in flight (limit)", self.limits.max_in_flight))),
        }
    }

    /// Waits up to `admission_wait` for a slot (stream batches), else `RESOURCE_EXHAUSTED`.
    pub(crate) async fn admit_wait(&self, samples: u64) -> Result<InFlight, Status> {
        self.memory_ok(samples)?;
        match tokio::time::timeout(self.limits.admission_wait, self.permits.clone().acquire_owned()).await {
            Ok(Ok(p)) => Ok(self.slot(p)),
            Ok(Err(_)) => Err(retryable(Code::Unavailable, "server is shutting down", self.limits.retry_after_ms)),
            Err(_) => Err(self.overloaded(
                samples,
                format!(
                    "server busy: no write slot free within {} ms ({} in flight)",
                    self.limits.admission_wait.as_millis(),
                    self.limits.max_in_flight
                ),
            )),
        }
    }

    /// Writes a batch on a blocking thread; returns after the store acknowledged it durably.
    pub(crate) async fn write_blocking(&self, batch: WriteBatch) -> Result<WriteOutcome, Status> {
        if batch.series.is_empty() {
            return Ok(WriteOutcome::default());
        }
        self.write(Write::Keyed(batch)).await
    }

    /// Writes rows or a batch on a blocking thread; returns after the store acknowledged it
    /// durably.
    pub(crate) async fn write(&self, write: Write) -> Result<WriteOutcome, Status> {
        if matches!(&write, Write::Rows(r, _) if r.is_empty()) {
            return Ok(WriteOutcome::default());
        }
        let store = self.store.clone();
        let retry = self.limits.retry_after_ms;
        let outcome = tokio::task::spawn_blocking(move || match write {
            Write::Rows(rows, mut rekey) => store.write_rows_keyed(rows, rekey.key_of()),
            Write::Keyed(batch) => store.write(&batch),
        })
        .await
        .map_err(join_status)?
        .map_err(|e| engine_status(&e, retry))?;
        Ok(outcome)
    }

    /// Writes a prepared request and builds its acknowledgement.
    pub(crate) async fn commit(&self, sequence: u64, mut prepared: Prepared) -> Result<WriteResponse, Status> {
        let barriers = prepared.barriers;
        let write = prepared.take_write(&self.store)?;
        let outcome = self.write(write).await?;
        if barriers && outcome.accepted > 0 {
            // Collective ends are barrier constraints between the job's hosts' clocks.
            self.refitter.mark();
        }
        for r in outcome.rejected {
            prepared.reject(
                SeriesRejection {
                    r#ref: 0,
                    series: r.series,
                    samples: r.samples as u64,
                    reason: "store".into(),
                    message: r.error.to_string(),
                },
                "store",
                self.limits.max_rejections,
            );
        }
        for (reason, n) in &prepared.by_reason {
            self.telemetry.rejected(reason, *n);
        }
        self.telemetry.accepted(outcome.accepted as u64);
        Ok(WriteResponse {
            sequence,
            accepted: outcome.accepted as u64,
            rejected: prepared.rejected,
            rejections: prepared.rejections,
            rejections_truncated: prepared.truncated,
        })
    }
}

fn request_samples(r: &WriteRequest) -> u64 {
    request_size(r).1 as u64
}

/// The `lockstep.ingest.v1.Write` service.
pub(crate) struct WriteService {
    pub(crate) shared: Arc<Shared>,
}

type AckStream = Pin<Box<dyn Stream<Item = Result<WriteResponse, Status>> + Send>>;

/// What the stream reader hands the acknowledger, in request order.
enum Pending {
    Write(tokio::task::JoinHandle<Result<WriteResponse, Status>>),
    Fail(Status),
}

impl WriteService {
    async fn unary(&self, request: WriteRequest) -> Result<WriteResponse, Status> {
        let shared = &self.shared;
        let _slot = shared.admit_now(request_samples(&request))?;
        let sequence = request.sequence;
        let now = shared.store.now_ns();
        let prepared = prepare(&shared.store, &mut SeriesTable::default(), request, &shared.limits, now)?;
        let response = shared.commit(sequence, prepared).await?;
        if response.accepted == 0 && response.rejected > 0 {
            let first =
                response.rejections.first().map(|r| format!("{} ({})", r.message, r.reason)).unwrap_or_default();
            return Err(Status::invalid_argument(format!(
                "all {} samples rejected; first: {first}",
                response.rejected
            )));
        }
        Ok(response)
    }
}

#[tonic::async_trait]
impl write_server::Write for WriteService {
    async fn write(&self, request: Request<WriteRequest>) -> Result<Response<WriteResponse>, Status> {
        let result = self.unary(request.into_inner()).await;
        self.shared.telemetry.finish(result).map(Response::new)
    }

    type WriteStreamStream = AckStream;

    async fn write_stream(
        &self,
        request: Request<Streaming<WriteRequest>>,
    ) -> Result<Response<Self::WriteStreamStream>, Status> {
        let mut inbound = request.into_inner();
        let window = self.shared.limits.stream_window.max(1);
        let (pending_tx, mut pending_rx) = mpsc::channel::<Pending>(window);
        let (out_tx, out_rx) = mpsc::channel::<Result<WriteResponse, Status>>(window);
        let shared = self.shared.clone();
        // Reader: decode, admit, start the write; stops at the first error.
        tokio::spawn(async move {
            let mut table = SeriesTable::default();
            loop {
                let request = match inbound.message().await {
                    Ok(Some(r)) => r,
                    Ok(None) => break,
                    Err(status) => {
                        let _ = pending_tx.send(Pending::Fail(decode_status(status))).await;
                        break;
                    }
                };
                let sequence = request.sequence;
                let samples = request_samples(&request);
                let slot = match shared.admit_wait(samples).await {
                    Ok(s) => s,
                    Err(status) => {
                        let _ = pending_tx.send(Pending::Fail(status)).await;
                        break;
                    }
                };
                let now = shared.store.now_ns();
                let prepared = match prepare(&shared.store, &mut table, request, &shared.limits, now) {
                    Ok(p) => p,
                    Err(status) => {
                        let _ = pending_tx.send(Pending::Fail(status)).await;
                        break;
                    }
                };
                let writer = shared.clone();
                let handle = tokio::spawn(async move {
                    let _slot = slot;
                    writer.commit(sequence, prepared).await
                });
                if pending_tx.send(Pending::Write(handle)).await.is_err() {
                    break;
                }
            }
        });
        // Acknowledger: in request order, each ack only after its write returned.
        let telemetry = self.shared.telemetry.clone();
        tokio::spawn(async move {
            while let Some(item) = pending_rx.recv().await {
                let result = match item {
                    Pending::Write(handle) => handle.await.unwrap_or_else(|e| Err(join_status(e))),
                    Pending::Fail(status) => Err(status),
                };
                let failed = result.is_err();
                let result = telemetry.finish(result);
                if out_tx.send(result).await.is_err() || failed {
                    break;
                }
            }
        });
        let stream = futures::stream::unfold(out_rx, |mut rx| async move { rx.recv().await.map(|item| (item, rx)) });
        Ok(Response::new(Box::pin(stream)))
    }
}
