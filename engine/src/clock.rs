//! Per-host clock models: estimation from sync exchanges, application on read, persistence.
//!
//! Collectors stamp samples with their own clocks, which disagree by milliseconds to seconds
//! and drift by tens of ppm. Lockstep never rewrites those raw local timestamps; instead each
//! host gets a continuous piecewise-linear model of its offset `θ(local) = local − reference`
//! with an uncertainty bound, and corrected (reference) time is computed on read, in integer
//! arithmetic, from the newest model version:
//!
//! * input: NTP-style [`SyncExchange`]s, directly known offsets ([`OffsetObservation`], e.g.
//!   from chrony or PTP logs) and collective end times ([`BarrierEvent`]);
//! * estimation ([`fit_host`], [`fit_set`]): every observation bounds `θ` from both sides; the
//!   lines consistent with all bounds form a convex polygon per piece (an exact two-sided
//!   lower/upper-envelope fit, not an average), clock steps split the model, drift wander
//!   splits it into continuous pieces, and barriers tighten hosts of one job against each other;
//! * application: [`ClockModel::to_reference`], [`ClockModel::uncertainty_at`],
//!   [`ClockModel::local_range_for_reference`] (for pruning) and [`ClockSet::correct`];
//! * persistence ([`ClockRegistry`]): raw input is appended durably, every fit is a new
//!   immutable version, older versions stay readable.
//!
//! The model, its assumptions and the accuracy floor are documented in `docs/clock.md`.

mod barrier;
mod config;
mod fit;
mod log;
mod model;
mod polygon;
mod registry;
mod segments;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::model::{MAX_TIME_NS, MIN_TIME_NS};

pub use barrier::{barrier_observations, fit_host, fit_set};
pub use config::FitConfig;
pub use model::{ClockModel, ClockSegment, ClockSet, InputWatermark, SegmentKind};
pub use registry::ClockRegistry;

/// Uncertainty reported for a host that has no model: "unknown", larger than any real bound.
pub const UNCERTAINTY_UNKNOWN: i64 = i64::MAX;

/// One NTP-style exchange between a host and the reference clock, all times in ns.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SyncExchange {
    /// The host whose clock stamped `t1` and `t4`.
    pub host: String,
    /// The host sends the request (host clock).
    pub t1: i64,
    /// The reference receives it (reference clock).
    pub t2: i64,
    /// The reference replies (reference clock).
    pub t3: i64,
    /// The host receives the reply (host clock).
    pub t4: i64,
}

/// A directly known offset of a host's clock at one of its local times (chrony, PTP logs).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct OffsetObservation {
    /// The host.
    pub host: String,
    /// Local (host clock) time of the observation, ns.
    pub local_time: i64,
    /// `local − reference` at that time, ns (the sign convention of [`ClockModel`]).
    pub offset_ns: i64,
    /// The true offset is within `offset_ns ± uncertainty_ns`; must be ≥ 0.
    pub uncertainty_ns: i64,
}

/// The local end time of one collective instance on one host.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BarrierEvent {
    /// The host.
    pub host: String,
    /// Identifies the same collective instance across hosts (e.g. a sequence number per
    /// communicator, made unique per job by the caller).
    pub instance: u64,
    /// When the collective ended on this host (host clock), ns.
    pub local_end: i64,
}

/// Whether event `a` happened before event `b` beyond doubt: `t_a + u_a < t_b − u_b`, with
/// corrected times `t` and uncertainties `u` in ns (negative uncertainties count as 0; an
/// [`UNCERTAINTY_UNKNOWN`] never orders). Computed in i128, so it cannot overflow.
pub fn before(t_a: i64, u_a: i64, t_b: i64, u_b: i64) -> bool {
    if u_a == UNCERTAINTY_UNKNOWN || u_b == UNCERTAINTY_UNKNOWN {
        return false;
    }
    i128::from(t_a) + i128::from(u_a.max(0)) < i128::from(t_b) - i128::from(u_b.max(0))
}

fn sync_error(host: &str, reason: impl Into<String>) -> Error {
    Error::ClockSync { host: host.to_string(), reason: reason.into() }
}

fn check_time(host: &str, what: &str, t: i64) -> Result<()> {
    if (MIN_TIME_NS..=MAX_TIME_NS).contains(&t) {
        Ok(())
    } else {
        Err(sync_error(host, format!("{what}={t} is outside [{MIN_TIME_NS}, {MAX_TIME_NS}]")))
    }
}

/// A host name must be usable as the `host` label of a series: not empty, at most
/// [`crate::model::MAX_LABEL_VALUE_BYTES`] bytes, no NUL.
fn check_host(host: &str) -> Result<()> {
    use crate::model::MAX_LABEL_VALUE_BYTES;
    if host.is_empty() {
        return Err(sync_error(host, "host name is empty"));
    }
    if host.len() > MAX_LABEL_VALUE_BYTES || host.contains('\0') {
        let shown: String = host.chars().take(64).collect();
        return Err(sync_error(
            &format!("{shown:?}..."),
            format!("host name of {} bytes must be at most {MAX_LABEL_VALUE_BYTES} bytes without NUL", host.len()),
        ));
    }
    Ok(())
}

impl SyncExchange {
    /// Checks that the exchange is physically possible for a clock that did not step during
    /// it: times in range, `t3 ≥ t2`, `t4 ≥ t1` and `t4 − t1 ≥ t3 − t2` (a round trip is never
    /// shorter than the reference's hold time). Collectors must drop exchanges that straddle a
    /// clock step; this rejects the ones that betray themselves.
    pub fn validate(&self) -> Result<()> {
        check_host(&self.host)?;
        for (what, t) in [("t1", self.t1), ("t2", self.t2), ("t3", self.t3), ("t4", self.t4)] {
            check_time(&self.host, what, t)?;
        }
        if self.t3 < self.t2 {
            return Err(sync_error(
                &self.host,
                format!("exchange at t1={}: reference reply t3 precedes receive t2", self.t1),
            ));
        }
        if self.t4 < self.t1 {
            return Err(sync_error(
                &self.host,
                format!(
                    "exchange at t1={}: t4 < t1 (reply received before the request was sent; \
                     clock stepped during the exchange or fields swapped)",
                    self.t1
                ),
            ));
        }
        if self.t4 - self.t1 < self.t3 - self.t2 {
            return Err(sync_error(
                &self.host,
                format!(
                    "exchange at t1={}: round trip t4-t1={} is shorter than the reference hold \
                     time t3-t2={} (negative network delay)",
                    self.t1,
                    self.t4 - self.t1,
                    self.t3 - self.t2
                ),
            ));
        }
        Ok(())
    }
}

impl OffsetObservation {
    /// Checks the time range, that the reference time `local_time − offset_ns` is in the
    /// store's range too (a 285-year offset moved a host's samples to 1740, where no filter
    /// finds them) and `uncertainty_ns ≥ 0`.
    pub fn validate(&self) -> Result<()> {
        check_host(&self.host)?;
        check_time(&self.host, "local_time", self.local_time)?;
        let reference = self.local_time.checked_sub(self.offset_ns);
        if !reference.is_some_and(|t| (MIN_TIME_NS..=MAX_TIME_NS).contains(&t)) {
            return Err(sync_error(
                &self.host,
                format!(
                    "offset_ns={} at local_time={} puts the reference time outside [{MIN_TIME_NS}, {MAX_TIME_NS}] \
                     (1970-2262, the times the store keeps)",
                    self.offset_ns, self.local_time
                ),
            ));
        }
        if !(0..=MAX_TIME_NS).contains(&self.uncertainty_ns) {
            return Err(sync_error(
                &self.host,
                format!("uncertainty_ns={} must be in [0, {MAX_TIME_NS}]", self.uncertainty_ns),
            ));
        }
        Ok(())
    }
}

impl BarrierEvent {
    /// Checks the host name and the time range.
    pub fn validate(&self) -> Result<()> {
        check_host(&self.host)?;
        check_time(&self.host, "local_end", self.local_end)
    }
}

#[cfg(test)]
mod tests;
