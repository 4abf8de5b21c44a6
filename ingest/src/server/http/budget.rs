//! The memory request bodies may take at once under a memory limit.
//!
//! The HTTP routes read a whole body before they decode it, and the memory check that refuses
//! writes looks at the process's RSS, which a body in flight is not yet part of: 100 clients
//! sending 60 MiB bodies at once took a server with `--memory-limit-mb 256` to 3.7 GiB (QA pass
//! 23a). A body takes its bytes from a [`BodyBudget`] of a quarter of the limit frame by frame
//! as they arrive (a slow client holds only what it sent), and while a compressed one is
//! decoded; a frame that cannot have its bytes within the admission wait is refused as the
//! server being busy (503 with `Retry-After`, which Prometheus and the OTel exporters retry),
//! a body larger than the whole budget as too large. What was taken is held until the request
//! is answered.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::{Code, Status};

use super::super::config::Limits;
use super::super::status::retryable;

/// The part of the memory limit request bodies may take at once.
const LIMIT_PART: u64 = 4;

/// The bytes request bodies may hold at once, counted in KiB.
#[derive(Debug, Clone)]
pub(crate) struct BodyBudget {
    permits: Arc<Semaphore>,
    kib: u32,
    wait: Duration,
    retry_after_ms: u64,
}

/// What one request holds of the budget; given back when dropped.
#[derive(Debug, Default)]
pub(crate) struct Held {
    permit: Option<OwnedSemaphorePermit>,
    /// Bytes taken (whole KiB).
    pub(crate) bytes: usize,
}

impl BodyBudget {
    /// A quarter of `limits.memory_limit_bytes`; none without a memory limit.
    pub(crate) fn for_limits(limits: &Limits) -> Option<BodyBudget> {
        let limit = limits.memory_limit_bytes?;
        let kib = u32::try_from(limit / LIMIT_PART / 1024).unwrap_or(u32::MAX).max(1);
        Some(BodyBudget {
            permits: Arc::new(Semaphore::new(kib as usize)),
            kib,
            wait: limits.admission_wait,
            retry_after_ms: limits.retry_after_ms,
        })
    }

    /// Room for `bytes` now, or the refusal a frame of a gRPC call gets (it cannot wait).
    pub(crate) fn take_now(&self, bytes: usize) -> Result<OwnedSemaphorePermit, Status> {
        let want = u32::try_from(bytes.div_ceil(1024)).unwrap_or(u32::MAX);
        if want > self.kib {
            return Err(self.too_large(bytes));
        }
        self.permits.clone().try_acquire_many_owned(want).map_err(|_| self.busy())
    }

    /// The budget's size in bytes.
    pub(crate) fn bytes(&self) -> usize {
        self.kib as usize * 1024
    }

    /// The refusal of a request of `bytes`, more than the whole budget.
    pub(crate) fn too_large(&self, bytes: usize) -> Status {
        Status::out_of_range(format!(
            "request body of {} MiB (decoded) is more than the server takes in at once: {} MiB, a quarter of its \
             memory limit (--memory-limit-mb); send smaller requests",
            bytes.div_ceil(1 << 20),
            u64::from(self.kib).div_ceil(1024)
        ))
    }

    fn busy(&self) -> Status {
        let busy = self.kib as usize - self.permits.available_permits().min(self.kib as usize);
        retryable(
            Code::ResourceExhausted,
            format!(
                "server busy: request bodies of {} MiB are being read, its limit for them ({} MiB, a quarter of \
                 --memory-limit-mb)",
                (busy as u64).div_ceil(1024),
                u64::from(self.kib).div_ceil(1024)
            ),
            self.retry_after_ms,
        )
    }

    /// Adds `bytes` to what `held` holds, waiting up to the admission wait.
    pub(crate) async fn take(&self, bytes: usize, held: &mut Held) -> Result<(), Status> {
        let want = u32::try_from(bytes.div_ceil(1024)).unwrap_or(u32::MAX);
        if want == 0 {
            return Ok(());
        }
        let have = (held.bytes / 1024) as u64;
        if have + u64::from(want) > u64::from(self.kib) {
            return Err(self.too_large(((have + u64::from(want)) * 1024) as usize));
        }
        let permit = match tokio::time::timeout(self.wait, self.permits.clone().acquire_many_owned(want)).await {
            Ok(Ok(permit)) => permit,
            Ok(Err(_)) => return Err(retryable(Code::Unavailable, "server is shutting down", self.retry_after_ms)),
            Err(_) => return Err(self.busy()),
        };
        held.bytes += want as usize * 1024;
        match &mut held.permit {
            Some(p) => p.merge(permit),
            None => held.permit = Some(permit),
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn budget(limit_mib: u64) -> BodyBudget {
        let limits = Limits {
            memory_limit_bytes: Some(limit_mib << 20),
            admission_wait: Duration::from_millis(50),
            ..Limits::default()
        };
        BodyBudget::for_limits(&limits).unwrap()
    }

    #[tokio::test]
    async fn bodies_share_a_quarter_of_the_limit() {
        assert!(BodyBudget::for_limits(&Limits::default()).is_none());
        let budget = budget(8);
        let mut a = Held::default();
        budget.take(1 << 20, &mut a).await.unwrap();
        budget.take(1, &mut a).await.unwrap();
        assert_eq!(a.bytes, (1 << 20) + 1024);
        // What is left (2 MiB - 1025 KiB) does not hold another MiB: busy, retryable.
        let mut b = Held::default();
        let busy = budget.take(1 << 20, &mut b).await.unwrap_err();
        assert_eq!(busy.code(), Code::ResourceExhausted);
        assert!(busy.message().contains("server busy: request bodies of 2 MiB"), "{}", busy.message());
        // More than the whole budget can never be had.
        let large = budget.take(3 << 20, &mut b).await.unwrap_err();
        assert_eq!(large.code(), Code::OutOfRange);
        assert!(large.message().contains("more than the server takes in at once: 2 MiB"), "{}", large.message());
        // Once the first request is answered, its bytes are free again.
        drop(a);
        budget.take(2 << 20, &mut b).await.unwrap();
    }
}
