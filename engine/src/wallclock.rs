//! Wall-clock access behind a trait, so tests control "now".

use std::fmt::Debug;
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of the current time in ns since the Unix epoch.
pub trait WallClock: Send + Sync + Debug {
    /// Now, in ns since the Unix epoch.
    fn now_ns(&self) -> i64;
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl WallClock for SystemClock {
    fn now_ns(&self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
            .unwrap_or(0)
    }
}

/// A clock that returns a fixed, settable time.
#[derive(Debug, Default)]
pub struct ManualClock(pub std::sync::atomic::AtomicI64);

impl WallClock for ManualClock {
    fn now_ns(&self) -> i64 {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}
