//! A series on the diagnosis's timeline, and the timeline itself: corrected by the clock models
//! or raw. Shared by loading (`load.rs`), per-series features (`analyze.rs`) and the window
//! comparison (`compare.rs`).

use lockstep_engine::clock::{ClockModel, ClockSet};

use super::UNCERTAINTY_UNKNOWN;

/// A series on the chosen timeline.
#[derive(Debug, Default)]
pub(crate) struct Signal {
    /// Times (reference ns, or raw in raw mode), ascending.
    pub t: Vec<i64>,
    /// Values (rates for counters).
    pub v: Vec<f64>,
}

/// The timeline: clock models (corrected) or none (raw).
#[derive(Clone, Copy)]
pub(crate) struct Timeline<'a> {
    clocks: Option<&'a ClockSet>,
}

impl Timeline<'static> {
    /// Raw timestamps, taken as exact.
    pub fn raw() -> Self {
        Timeline { clocks: None }
    }
}

impl<'a> Timeline<'a> {
    /// Corrected time from `clocks`.
    pub fn corrected(clocks: &'a ClockSet) -> Self {
        Timeline { clocks: Some(clocks) }
    }
}

impl<'a> Timeline<'a> {
    /// The model of a host (None in raw mode or without a model).
    pub fn model(&self, host: &str) -> Option<&'a ClockModel> {
        self.clocks.and_then(|c| c.model(host))
    }

    /// Uncertainty (ns) of a corrected time of `host` (0 in raw mode).
    pub fn uncertainty(&self, host: &str, t: i64) -> i64 {
        match self.clocks {
            None => 0,
            Some(c) => match c.model(host) {
                None => UNCERTAINTY_UNKNOWN,
                // θ is tiny next to the model's segments: the local time of t is t + θ(t).
                Some(m) => m.uncertainty_at(t.saturating_add(m.offset_at(t))),
            },
        }
    }
}
