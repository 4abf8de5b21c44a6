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

/// What every job does without a fault: its pace drifts by a few percent (a slow swing of the
/// compute time — sequence lengths, data mix, GPU clocks — and a slow trend over the run) and
/// each node's input fetch time wanders (an autocorrelated factor around one). Drawn from a
/// random stream of its own, so that the rest of a run's draws are the same with and without
/// it (`Fixed::steady_pace` leaves it out, reproducing the runs of earlier evaluations).
#[derive(Debug, Clone, Default)]
pub(super) struct Wobble {
    /// Amplitude of the swing (0.01 = ±1 % of the compute time), its period (ns) and phase.
    swing: f64,
    period_ns: f64,
    phase: f64,
    /// Change of the compute time from the first to the last step (0.01 = +1 %).
    trend: f64,
    start: i64,
    span_ns: f64,
    /// Standard deviation of each node's log fetch factor, and its correlation from one step
    /// to the next.
    pub(super) fetch_sd: f64,
    pub(super) fetch_rho: f64,
}

impl Wobble {
    /// Draws the pace drift of a run from `start` to `end` (none when `steady`).
    pub(super) fn draw(rng: &mut Rand, start: i64, end: i64, steady: bool) -> Wobble {
        if steady {
            return Wobble::default();
        }
        Wobble {
            swing: rng.range(0.003, 0.025),
            period_ns: rng.range(3.0, 12.0) * 60e9,
            phase: rng.range(0.0, std::f64::consts::TAU),
            trend: rng.range(-0.02, 0.02),
            start,
            span_ns: (end - start).max(1) as f64,
            fetch_sd: rng.range(0.03, 0.1),
            fetch_rho: rng.range(0.8, 0.97),
        }
    }

    /// The factor on the compute time at `t` (1 when steady).
    pub(super) fn pace(&self, t: i64) -> f64 {
        if self.period_ns <= 0.0 {
            return 1.0;
        }
        let x = (t - self.start) as f64;
        1.0 + self.swing * (std::f64::consts::TAU * x / self.period_ns + self.phase).sin()
            + self.trend * x / self.span_ns
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
