//! The `ClockSync` service: NTP-style exchanges against the server clock, uploads of
//! completed exchanges and direct offsets, and a debounced background refit.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use lockstep_engine::Store;
use lockstep_engine::clock::{OffsetObservation, SyncExchange};
use lockstep_proto::ingest::v1::{
    ClockUpload, ClockUploadResponse, ExchangeRequest, ExchangeResponse, SyncRecord, clock_sync_server,
};
use tokio::sync::Notify;
use tonic::{Request, Response, Status};

use super::stats::Telemetry;
use super::status::{engine_status, join_status};
use crate::import::clock::collective_barriers;

/// Most records in one `Exchange.completed` or `Upload`.
pub(crate) const MAX_CLOCK_RECORDS: usize = 100_000;

/// Marks clock input as new and refits a while later, off the request path.
#[derive(Debug, Default)]
pub(crate) struct Refitter {
    dirty: AtomicBool,
    notify: Notify,
}

impl Refitter {
    pub(crate) fn mark(&self) {
        self.dirty.store(true, Ordering::SeqCst);
        self.notify.notify_one();
    }

    /// Refits now if input arrived since the last fit. Barriers are derived again from every
    /// stored `collective_end` sample first (a scan of that one metric), as an import does.
    pub(crate) async fn refit_if_dirty(&self, store: &Arc<Store>) {
        if !self.dirty.swap(false, Ordering::SeqCst) {
            return;
        }
        let store = store.clone();
        let refit = move || -> Result<u64, String> {
            let barriers = collective_barriers(&store).map_err(|e| e.to_string())?;
            store
                .with_clocks(|reg| {
                    reg.add_barriers(&barriers)?;
                    let counts = reg.input_counts()?;
                    if counts.exchanges + counts.offsets == 0 {
                        // Barriers alone relate hosts to each other, not to the reference.
                        return Ok(reg.current().version());
                    }
                    reg.refit()
                })
                .map_err(|e| e.to_string())
        };
        match tokio::task::spawn_blocking(refit).await {
            Ok(Ok(version)) => tracing::info!(version, "clock models refitted"),
            Ok(Err(e)) => tracing::warn!(error = %e, "clock refit failed"),
            Err(e) => tracing::warn!(error = %e, "clock refit task failed"),
        }
    }

    /// Background loop: after each mark, wait `delay` (collecting more input), then refit.
    pub(crate) async fn run(self: Arc<Self>, store: Arc<Store>, delay: Duration) {
        loop {
            self.notify.notified().await;
            tokio::time::sleep(delay).await;
            self.refit_if_dirty(&store).await;
        }
    }
}

/// The `lockstep.ingest.v1.ClockSync` service.
pub(crate) struct ClockService {
    pub(crate) store: Arc<Store>,
    pub(crate) telemetry: Arc<Telemetry>,
    pub(crate) refitter: Arc<Refitter>,
    pub(crate) retry_after_ms: u64,
}

fn exchange(r: SyncRecord) -> SyncExchange {
    SyncExchange { host: r.host, t1: r.t1, t2: r.t2, t3: r.t3, t4: r.t4 }
}

impl ClockService {
    /// Stores records durably (all or nothing) on a blocking thread.
    async fn store(&self, exchanges: Vec<SyncExchange>, offsets: Vec<OffsetObservation>) -> Result<(), Status> {
        if exchanges.len() + offsets.len() > MAX_CLOCK_RECORDS {
            return Err(Status::invalid_argument(format!(
                "{} clock records in one call; the limit is {MAX_CLOCK_RECORDS}",
                exchanges.len() + offsets.len()
            )));
        }
        if exchanges.is_empty() && offsets.is_empty() {
            return Ok(());
        }
        if let Some(i) = exchanges.iter().position(|e| e.host.is_empty()) {
            return Err(Status::invalid_argument(format!("exchanges[{i}]: host is empty")));
        }
        if let Some(i) = offsets.iter().position(|o| o.host.is_empty()) {
            return Err(Status::invalid_argument(format!("offsets[{i}]: host is empty")));
        }
        let store = self.store.clone();
        let retry = self.retry_after_ms;
        tokio::task::spawn_blocking(move || {
            store.check_clock_input(&exchanges, &offsets)?;
            store.with_clocks(|reg| {
                // All or nothing: check the offsets before any exchange becomes durable.
                offsets.iter().try_for_each(OffsetObservation::validate)?;
                if !exchanges.is_empty() {
                    reg.add_exchanges(&exchanges)?;
                }
                if !offsets.is_empty() {
                    reg.add_offsets(&offsets)?;
                }
                Ok(())
            })
        })
        .await
        .map_err(join_status)?
        .map_err(|e| engine_status(&e, retry))?;
        self.refitter.mark();
        Ok(())
    }
}

#[tonic::async_trait]
impl clock_sync_server::ClockSync for ClockService {
    async fn exchange(&self, request: Request<ExchangeRequest>) -> Result<Response<ExchangeResponse>, Status> {
        let t2 = self.store.now_ns();
        let req = request.into_inner();
        let result = async {
            if req.host.is_empty() {
                return Err(Status::invalid_argument("host is empty"));
            }
            let recorded = req.completed.len() as u32;
            self.store(req.completed.into_iter().map(exchange).collect(), Vec::new()).await?;
            let t3 = self.store.now_ns();
            Ok(ExchangeResponse { t1: req.t1, t2, t3, recorded })
        }
        .await;
        self.telemetry.finish(result).map(Response::new)
    }

    async fn upload(&self, request: Request<ClockUpload>) -> Result<Response<ClockUploadResponse>, Status> {
        let req = request.into_inner();
        let response = ClockUploadResponse { exchanges: req.exchanges.len() as u32, offsets: req.offsets.len() as u32 };
        let offsets = req
            .offsets
            .into_iter()
            .map(|o| OffsetObservation {
                host: o.host,
                local_time: o.local_time,
                offset_ns: o.offset_ns,
                uncertainty_ns: o.uncertainty_ns,
            })
            .collect();
        let result = self.store(req.exchanges.into_iter().map(exchange).collect(), offsets).await;
        self.telemetry.finish(result.map(|()| Response::new(response)))
    }
}
