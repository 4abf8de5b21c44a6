//! The generator's dynamics: fault effects over time (windows ramped in and out, transient,
//! recurring or persistent), their drawn shapes and magnitudes, and the hosts' clocks.

use super::Shape;
use super::rand::Rand;
use lockstep_engine::model::SEC;

/// Fault windows: a multiplicative effect active in each `[start, end)`, ramped over `ramp` s.
#[derive(Debug, Clone, Default)]
pub(super) struct Effect {
    pub(super) windows: Vec<(i64, i64)>,
    pub(super) ramp_s: f64,
    /// How much the effect multiplies its quantity at full strength (minus one).
    pub(super) gain: f64,
    /// The step-time rise it was scaled to cause.
    pub(super) magnitude: f64,
}

impl Effect {
    /// 0..1 strength at `t`.
    pub(super) fn at(&self, t: i64) -> f64 {
        if self.windows.is_empty() {
            return 0.0;
        }
        self.windows
            .iter()
            .map(|&(a, b)| {
                if t < a || t >= b {
                    return 0.0;
                }
                let r = (self.ramp_s * 1e9).min((b - a) as f64 / 4.0).max(1.0);
                (((t - a) as f64 / r).min(1.0)).min(((b - t) as f64 / r * 2.0).min(1.0))
            })
            .fold(0.0, f64::max)
    }

    /// `1 + gain × strength`.
    pub(super) fn mult(&self, t: i64) -> f64 {
        1.0 + self.gain * self.at(t)
    }

    pub(super) fn onset(&self) -> i64 {
        self.windows.first().map_or(i64::MAX, |w| w.0)
    }
}

/// A host's clock: a constant offset, and possibly one step.
#[derive(Debug, Clone, Copy)]
pub(super) struct HostClock {
    pub(super) offset: i64,
    pub(super) step: Option<(i64, i64)>,
}

impl HostClock {
    /// `local − reference` at reference time `t`.
    pub(super) fn offset_at(&self, t: i64) -> i64 {
        match self.step {
            Some((at, jump)) if t >= at => self.offset + jump,
            _ => self.offset,
        }
    }

    pub(super) fn local(&self, t: i64) -> i64 {
        t + self.offset_at(t)
    }
}

/// The kinds of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Storm,
    Cpu,
    Link,
    Heat,
    Server,
}

/// Windows of a fault of `shape` from `onset`, ending before `end` (persistent: at `end`).
pub(super) fn windows(rng: &mut Rand, shape: Shape, onset: i64, end: i64) -> Vec<(i64, i64)> {
    match shape {
        Shape::Persistent => vec![(onset, end)],
        Shape::Transient => {
            // Log-uniform 30 s – 5 min, ending at least a minute before the run does.
            let dur = (rng.range(30f64.ln(), 300f64.ln()).exp() * 1e9) as i64;
            vec![(onset, (onset + dur).min(end - 60 * SEC).max(onset + 30 * SEC))]
        }
        Shape::Recurring => {
            let mut out = Vec::new();
            let mut t = onset;
            while t < end - 90 * SEC || out.len() < 2 {
                let d = rng.secs(30.0, 90.0);
                out.push((t, (t + d).min(end)));
                t += d + rng.secs(60.0, 180.0);
                if t >= end - 30 * SEC {
                    break;
                }
            }
            out
        }
    }
}

/// A shape for `kind`, drawn.
pub(super) fn draw_shape(rng: &mut Rand, kind: Kind) -> Shape {
    let u = rng.unit();
    let (persistent, transient) = match kind {
        Kind::Storm => (0.15, 0.6),
        Kind::Cpu => (0.4, 0.35),
        Kind::Link => (0.35, 0.3),
        Kind::Heat => (0.5, 0.3),
        Kind::Server => (1.0, 0.0),
    };
    if u < persistent {
        Shape::Persistent
    } else if u < persistent + transient {
        Shape::Transient
    } else {
        Shape::Recurring
    }
}

/// The step-time rise of a fault: a third of the runs near the detection limit (+12–20 %),
/// the rest +20–80 %. In the hard band half the runs at or below the diagnosis's 10 % episode
/// threshold (+3–12 %), the rest just above it (+12–20 %).
pub(super) fn draw_magnitude(rng: &mut Rand, hard: bool) -> f64 {
    if hard {
        return if rng.chance(0.5) { rng.range(0.03, 0.12) } else { rng.range(0.12, 0.2) };
    }
    if rng.chance(0.35) { rng.range(0.12, 0.2) } else { rng.range(0.2, 0.8) }
}
