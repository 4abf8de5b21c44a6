//! Counter arithmetic for narrow hardware counters, and per-entity baselines.
//!
//! Hardware counters are narrower than the `f64` they are exported as. InfiniBand PMA
//! `PortCounters` (16-bit `SymbolErrorCounter`, 8-bit `LinkDownedCounter`, 32-bit
//! `PortXmitWait`, ...) **saturate**: they stop at all ones until cleared. mlx5 queue counters
//! (`out_of_sequence`, `local_ack_timeout_err`, ...) are 32 bits wide and **wrap**.
//! [`counter_step`] turns two consecutive raw readings into a non-negative increase:
//!
//! 1. A NaN, infinite or negative reading gives an unknown (NaN) increase.
//! 2. If a reading exceeds the declared width's maximum, the width is wrong for this exporter
//!    and is ignored (plain Prometheus rules apply).
//! 3. `cur >= prev`: the increase is `cur - prev`. If the counter saturates and `cur` is at
//!    the maximum, the step is flagged `saturated` and the increase is a lower bound; if
//!    `prev` was already at the maximum as well, nothing can be known and the increase is NaN.
//! 4. `cur < prev` on a wrapping counter of `bits < 53` that fell by at least half its range:
//!    a **wrap**; the increase is `max - prev + 1 + cur`.
//! 5. Any other decrease is a **reset** (cleared counter, restarted exporter, rebooted
//!    host); the increase is `cur` (counts since the reset), as in Prometheus.
//!
//! A wrap and a reset from the upper half of the range are indistinguishable from two
//! readings; on a counter known to wrap the wrap is far more likely, so rule 4 prefers it.
//! 64-bit counters never wrap in practice (and `f64` cannot represent their top range), so
//! their decreases are resets, with one exception: a declared 64-bit *wrapping* counter whose
//! previous reading was below 2^32 and that fell by at least 2^31 is read as a 32-bit wrap.
//! Switches and exporters without `PortCountersExtended` serve 32-bit `PortXmitData` under the
//! same name; at data rates those wrap every few seconds, and a reset from a value in the upper
//! half of the 32-bit range (the only case misread) overstates one step by less than 2^31.

use serde::{Deserialize, Serialize};

/// What a hardware counter does at its maximum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Overflow {
    /// Starts again from zero (mlx5 queue counters).
    Wrap,
    /// Stays at all ones until cleared (InfiniBand PMA `PortCounters`).
    Saturate,
}

impl Overflow {
    /// The name used in SQL, TOML and docs.
    pub fn as_str(self) -> &'static str {
        match self {
            Overflow::Wrap => "wrap",
            Overflow::Saturate => "saturate",
        }
    }
}

/// Width and overflow rule of a raw hardware counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CounterWidth {
    /// Width in bits, 1..=64.
    pub bits: u8,
    /// Behaviour at the maximum.
    pub overflow: Overflow,
}

impl CounterWidth {
    /// A counter of `bits` that wraps.
    pub const fn wrap(bits: u8) -> Self {
        CounterWidth { bits, overflow: Overflow::Wrap }
    }

    /// A counter of `bits` that saturates.
    pub const fn saturate(bits: u8) -> Self {
        CounterWidth { bits, overflow: Overflow::Saturate }
    }

    /// The largest raw value, `2^bits - 1` (as `f64`; inexact above 2^53).
    pub fn max(&self) -> f64 {
        if self.bits >= 64 { u64::MAX as f64 } else { ((1u64 << self.bits) - 1) as f64 }
    }
}

/// The outcome of comparing two consecutive counter readings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CounterStep {
    /// The increase, never negative; NaN when it cannot be known.
    pub increase: f64,
    /// The counter was cleared or restarted between the readings.
    pub reset: bool,
    /// The counter wrapped past its maximum between the readings.
    pub wrapped: bool,
    /// The counter is pinned at its saturation maximum: the increase is a lower bound (or
    /// NaN if it was already pinned); the counter needs clearing.
    pub saturated: bool,
}

/// Compares two consecutive raw readings of a counter (rules in the module docs).
pub fn counter_step(prev: f64, cur: f64, width: Option<CounterWidth>) -> CounterStep {
    let mut step = CounterStep { increase: f64::NAN, reset: false, wrapped: false, saturated: false };
    if !prev.is_finite() || !cur.is_finite() || prev < 0.0 || cur < 0.0 {
        return step;
    }
    let width = width.filter(|w| w.bits >= 1 && prev <= w.max() && cur <= w.max());
    if cur >= prev {
        step.increase = cur - prev;
        if let Some(w) = width
            && w.overflow == Overflow::Saturate
            && cur == w.max()
        {
            step.saturated = true;
            if prev == cur {
                step.increase = f64::NAN;
            }
        }
        return step;
    }
    match width {
        Some(w) if w.overflow == Overflow::Wrap && w.bits < 53 => {
            let range = w.max() + 1.0;
            if prev - cur >= range / 2.0 {
                step.wrapped = true;
                step.increase = range - prev + cur;
            } else {
                step.reset = true;
                step.increase = cur;
            }
        }
        // A 64-bit data counter served from the 32-bit PortCounters (switches or exporters
        // without PortCountersExtended): rule 4 at 32 bits when the reading fits in 32 bits.
        Some(w)
            if w.overflow == Overflow::Wrap
                && w.bits == 64
                && prev < NARROW_RANGE
                && prev - cur >= NARROW_RANGE / 2.0 =>
        {
            step.wrapped = true;
            step.increase = NARROW_RANGE - prev + cur;
        }
        _ => {
            step.reset = true;
            step.increase = cur;
        }
    }
    step
}

/// 2^32: the range of the narrow data counters a 64-bit counter may really be.
const NARROW_RANGE: f64 = 4_294_967_296.0;

/// The non-negative increase between two consecutive raw readings (NaN when unknown);
/// see [`counter_step`].
pub fn counter_increase(prev: f64, cur: f64, width: Option<CounterWidth>) -> f64 {
    counter_step(prev, cur, width).increase
}

/// Per-second rates of a counter series, scaled: `out[i]` is the rate between sample `i-1`
/// and `i` (`out[0]` is NaN), `increase × scale / Δt`. Non-increasing timestamps give NaN.
/// `out` is cleared first; `times` are ns and must be as long as `values` (extra entries of
/// the longer slice are ignored).
pub fn counter_rates_into(times: &[i64], values: &[f64], width: Option<CounterWidth>, scale: f64, out: &mut Vec<f64>) {
    out.clear();
    let n = times.len().min(values.len());
    if n == 0 {
        return;
    }
    out.reserve(n);
    out.push(f64::NAN);
    for i in 1..n {
        let dt = times[i].saturating_sub(times[i - 1]);
        if dt <= 0 {
            out.push(f64::NAN);
            continue;
        }
        let inc = counter_increase(values[i - 1], values[i], width);
        out.push(inc * scale / (dt as f64 / crate::model::SEC as f64));
    }
}

/// A robust baseline of one entity's own values (median and scaled MAD), for families that
/// are only comparable with their own history ([`crate::metrics::Comparison::OwnBaseline`]),
/// such as PortXmitWait tick rates.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Baseline {
    /// Median of the baseline values.
    pub median: f64,
    /// Median absolute deviation × 1.4826 (≈ σ for normal data).
    pub spread: f64,
}

impl Baseline {
    /// The baseline of the finite values, or `None` if there are none.
    pub fn from_values(values: &[f64]) -> Option<Baseline> {
        let mut finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
        if finite.is_empty() {
            return None;
        }
        let median = median_in_place(&mut finite);
        for v in &mut finite {
            *v = (*v - median).abs();
        }
        let spread = median_in_place(&mut finite) * 1.4826;
        Some(Baseline { median, spread })
    }

    /// How unusual `value` is against this baseline: `(value - median) / spread`, with the
    /// spread floored at 5% of |median| (and at `f64::MIN_POSITIVE`) so that a perfectly flat
    /// baseline still gives a finite score. Zero waits on a quiet port followed by any waits
    /// give a very large score, as they should.
    pub fn score(&self, value: f64) -> f64 {
        let floor = (self.median.abs() * 0.05).max(f64::MIN_POSITIVE);
        (value - self.median) / self.spread.max(floor)
    }

    /// `value / median`, or NaN when the median is zero.
    pub fn ratio(&self, value: f64) -> f64 {
        if self.median == 0.0 { f64::NAN } else { value / self.median }
    }
}

fn median_in_place(values: &mut [f64]) -> f64 {
    values.sort_unstable_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 { values[n / 2] } else { (values[n / 2 - 1] + values[n / 2]) / 2.0 }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    const U32: f64 = 4_294_967_295.0;

    #[test]
    fn plain_increase_and_no_width() {
        assert_eq!(counter_increase(10.0, 15.0, None), 5.0);
        // Without a width a decrease is a reset, as in Prometheus.
        let s = counter_step(100.0, 7.0, None);
        assert!(s.reset && !s.wrapped);
        assert_eq!(s.increase, 7.0);
    }

    #[test]
    fn wrap_32_bit_is_not_negative() {
        let s = counter_step(U32 - 99.0, 200.0, Some(CounterWidth::wrap(32)));
        assert!(s.wrapped && !s.reset);
        // 99 to reach max, 1 to roll to zero, 200 after.
        assert_eq!(s.increase, 300.0);
    }

    #[test]
    fn small_decrease_on_wrapping_counter_is_reset() {
        let s = counter_step(1000.0, 10.0, Some(CounterWidth::wrap(32)));
        assert!(s.reset && !s.wrapped);
        assert_eq!(s.increase, 10.0);
    }

    #[test]
    fn wrap_16_bit() {
        let s = counter_step(65_000.0, 100.0, Some(CounterWidth::wrap(16)));
        assert!(s.wrapped);
        assert_eq!(s.increase, 65_536.0 - 65_000.0 + 100.0);
    }

    #[test]
    fn saturating_counter_decrease_is_always_reset() {
        let s = counter_step(65_535.0, 3.0, Some(CounterWidth::saturate(16)));
        assert!(s.reset && !s.wrapped);
        assert_eq!(s.increase, 3.0);
    }

    #[test]
    fn saturation_gives_lower_bound_then_unknown() {
        let w = Some(CounterWidth::saturate(16));
        let s = counter_step(65_000.0, 65_535.0, w);
        assert!(s.saturated);
        assert_eq!(s.increase, 535.0);
        let s = counter_step(65_535.0, 65_535.0, w);
        assert!(s.saturated);
        assert!(s.increase.is_nan());
        // A wrapping counter at its maximum is not saturated.
        let s = counter_step(U32, U32, Some(CounterWidth::wrap(32)));
        assert!(!s.saturated);
        assert_eq!(s.increase, 0.0);
    }

    #[test]
    fn value_wider_than_declared_width_drops_the_width() {
        let s = counter_step(70_000.0, 5.0, Some(CounterWidth::wrap(16)));
        assert!(s.reset && !s.wrapped);
        assert_eq!(s.increase, 5.0);
    }

    #[test]
    fn bad_readings_are_unknown() {
        for (p, c) in [(f64::NAN, 1.0), (1.0, f64::INFINITY), (-1.0, 3.0), (3.0, -1.0)] {
            assert!(counter_increase(p, c, Some(CounterWidth::wrap(32))).is_nan());
        }
    }

    #[test]
    fn sixty_four_bit_decrease_is_reset() {
        let s = counter_step(1e19, 5.0, Some(CounterWidth::wrap(64)));
        assert!(s.reset);
        assert_eq!(s.increase, 5.0);
    }

    #[test]
    fn rates_scale_and_wrap() {
        let t = [0, 1_000_000_000, 2_000_000_000, 2_000_000_000];
        let v = [U32 - 9.0, 10.0, 30.0, 40.0];
        let mut out = Vec::new();
        counter_rates_into(&t, &v, Some(CounterWidth::wrap(32)), 4.0, &mut out);
        assert!(out[0].is_nan());
        assert_eq!(out[1], 20.0 * 4.0);
        assert_eq!(out[2], 20.0 * 4.0);
        assert!(out[3].is_nan(), "zero interval");
        counter_rates_into(&[], &[], None, 1.0, &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn baseline_scores_against_own_history() {
        let quiet = [100.0, 110.0, 90.0, 105.0, 95.0];
        let b = Baseline::from_values(&quiet).unwrap();
        assert_eq!(b.median, 100.0);
        assert!(b.score(100.0).abs() < 1e-9);
        assert!(b.score(400.0) > 10.0);
        assert_eq!(b.ratio(300.0), 3.0);
        let flat = Baseline::from_values(&[0.0, 0.0, f64::NAN]).unwrap();
        assert!(flat.score(5.0) > 1e6);
        assert!(flat.ratio(5.0).is_nan());
        assert!(Baseline::from_values(&[f64::NAN]).is_none());
    }
}
