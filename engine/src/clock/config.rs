//! Tuning knobs of clock-model fitting.

use serde::{Deserialize, Serialize};

use crate::error::Result;

/// Parameters of [`super::fit_host`] and [`super::fit_set`]. Stored with every fitted version
/// so that a version can be reproduced from the raw input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FitConfig {
    /// The host whose clock *is* the reference (its model is the identity with zero
    /// uncertainty; sync data for it is ignored). `None` if the reference is not a collector.
    pub reference_host: Option<String>,
    /// Largest plausible drift of a host clock, ppb (default 500 ppm). Bounds the slope of
    /// every line and how fast uncertainty grows where data is sparse. At most 1% (10^7).
    pub max_drift_ppb: i64,
    /// A minimum one-way network delay the operator knows to hold in *both* directions, ns
    /// (default 0: assume only that delays are non-negative). Tightens every band by this
    /// much on each side; exchanges faster than twice this are rejected.
    pub min_one_way_delay_ns: i64,
    /// Timestamp quantisation and noise allowance per exchange, ns (default 1: nanosecond
    /// rounding). Widens every exchange's band by this much on each side.
    pub timestamp_jitter_ns: i64,
    /// A break in the model is treated as a clock step (a discontinuity) when the new data
    /// lies at least this far outside the band predicted by the old data, ns (default 10 µs).
    /// Smaller breaks become continuous knots.
    pub step_threshold_ns: i64,
    /// Largest drift change (ppb, default 500) expected where a step-free span is split into
    /// pieces; used to tell a clock step (offset jump) from drift wander (a kink).
    pub max_drift_change_ppb: i64,
    /// How many following observations are used to confirm a step or to recognise a single
    /// inconsistent observation as an outlier (default 8).
    pub step_confirm: usize,
    /// Longest piece of one straight line, ns (default 1 h); longer step-free spans are
    /// split into continuous pieces so drift may wander.
    pub max_piece_ns: i64,
    /// Drift wander allowance, ppb (default 5): the drift may change by this much within one
    /// piece, which adds `wander·length/8` to the piece's uncertainty (the largest distance of
    /// a curve whose slope changes by `wander` from its chord); outside the fitted range the
    /// uncertainty grows by this rate on top of the fitted drift's own uncertainty.
    pub wander_ppb: i64,
    /// Barrier assumption: all ranks of one collective instance leave it within this window of
    /// reference time, ns (default 100 µs).
    pub barrier_exit_spread_ns: i64,
    /// Rounds of barrier refinement (each uses the models tightened by the previous one;
    /// default 2, 0 disables barrier refinement).
    pub barrier_passes: u32,
}

impl Default for FitConfig {
    fn default() -> Self {
        FitConfig {
            reference_host: None,
            max_drift_ppb: 500_000,
            min_one_way_delay_ns: 0,
            timestamp_jitter_ns: 1,
            step_threshold_ns: 10_000,
            max_drift_change_ppb: 500,
            step_confirm: 8,
            max_piece_ns: 3_600_000_000_000,
            wander_ppb: 5,
            barrier_exit_spread_ns: 100_000,
            barrier_passes: 2,
        }
    }
}

impl FitConfig {
    /// Checks that every knob is in range.
    pub fn validate(&self) -> Result<()> {
        let bad = |reason: String| Err(crate::Error::InvalidConfig { reason: format!("clock fit: {reason}") });
        if !(1..=10_000_000).contains(&self.max_drift_ppb) {
            return bad(format!("max_drift_ppb={} must be in [1, 10000000]", self.max_drift_ppb));
        }
        if !(0..=1_000_000_000).contains(&self.min_one_way_delay_ns) {
            return bad(format!("min_one_way_delay_ns={} must be in [0, 1e9]", self.min_one_way_delay_ns));
        }
        if !(0..=1_000_000_000).contains(&self.timestamp_jitter_ns) {
            return bad(format!("timestamp_jitter_ns={} must be in [0, 1e9]", self.timestamp_jitter_ns));
        }
        if self.step_threshold_ns <= 0 {
            return bad(format!("step_threshold_ns={} must be positive", self.step_threshold_ns));
        }
        if !(0..=10_000_000).contains(&self.max_drift_change_ppb) {
            return bad(format!("max_drift_change_ppb={} must be in [0, 10000000]", self.max_drift_change_ppb));
        }
        if self.step_confirm == 0 || self.step_confirm > 1024 {
            return bad(format!("step_confirm={} must be in [1, 1024]", self.step_confirm));
        }
        if self.max_piece_ns <= 0 {
            return bad(format!("max_piece_ns={} must be positive", self.max_piece_ns));
        }
        if !(0..=10_000_000).contains(&self.wander_ppb) {
            return bad(format!("wander_ppb={} must be in [0, 10000000]", self.wander_ppb));
        }
        if self.barrier_exit_spread_ns < 0 {
            return bad(format!("barrier_exit_spread_ns={} must be >= 0", self.barrier_exit_spread_ns));
        }
        if self.reference_host.as_deref() == Some("") {
            return bad("reference_host is empty".to_string());
        }
        Ok(())
    }
}
