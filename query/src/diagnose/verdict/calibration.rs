//! The confidence of a verdict as a probability of being right: a monotone mapping of the rule's
//! own score (`rule_confidence`), fitted on the independent generator's tuning seeds and frozen
//! before the held-out seeds were run (docs/diagnosis.md, "Calibration").

/// What kind of verdict a confidence belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum VerdictKind {
    /// A slowdown episode with a root cause (its rule score: 0.3 for a fallback, 0.4–1.0
    /// otherwise, lowered for missing signals and hard episodes).
    Episode,
    /// No episode: `healthy` (rule score 0.9, 0.7 with gaps).
    Healthy,
    /// No episode: `slow_from_start` or `insufficient_data` (no evaluation data: kept as is).
    Other,
}

/// Knots `(rule score, probability right)` of the episode mapping, linear in between, flat
/// outside; non-decreasing in both coordinates. Fitted by `benches/fit_confidence.py` on the
/// TUNING seeds 0–11 of both bands of the independent generator (192 runs at `882defe`,
/// `LOCKSTEP_EVAL_SEEDS=0:12 [LOCKSTEP_EVAL_BAND=hard] benches/diagnose_independent.sh`), then
/// frozen: isotonic regression of the AC@1 outcome of the 154 episode verdicts on the rule score,
/// each block smoothed as (right + p) / (runs + 1) towards their overall accuracy p = 0.96. The
/// blocks: 5 fallback verdicts at 0.19–0.30 (0 right), 101 at 0.44–0.80 (100 right; the wrong
/// one a hard-band pair of concurrent faults 10–60 s apart), 48 at 0.83–1.0 (48 right).
const EPISODE_KNOTS: [(f64, f64); 3] = [(0.244, 0.160), (0.686, 0.990), (0.942, 0.999)];
/// Probability that a `healthy` verdict is right, without and with gaps in the signals: on the
/// same tuning runs 18 of 29 without gaps and 6 of 8 with gaps were right (the wrong ones are
/// hard-band faults at or below the 10 % threshold, or 10–30 s blips); gaps did not make it
/// worse, so both are the pooled (24 + 1) / (37 + 2). It depends on how many runs have a fault
/// the diagnosis cannot see: 100 % of the default band's healthy verdicts were right.
const HEALTHY: (f64, f64) = (0.641, 0.641);

/// The calibrated confidence of a verdict of `kind` whose rule scored `rule` (in [0, 1]).
pub(crate) fn calibrated(kind: VerdictKind, rule: f64, gaps: bool) -> f64 {
    let rule = if rule.is_finite() { rule.clamp(0.0, 1.0) } else { 0.0 };
    let p = match kind {
        VerdictKind::Episode => interpolate(&EPISODE_KNOTS, rule),
        VerdictKind::Healthy => {
            if gaps {
                HEALTHY.1
            } else {
                HEALTHY.0
            }
        }
        VerdictKind::Other => rule,
    };
    (p.clamp(0.0, 1.0) * 100.0).round() / 100.0
}

/// Piecewise-linear interpolation through `knots` (sorted by x), flat outside them.
fn interpolate(knots: &[(f64, f64)], x: f64) -> f64 {
    let (first, last) = (knots[0], knots[knots.len() - 1]);
    if x <= first.0 {
        return first.1;
    }
    if x >= last.0 {
        return last.1;
    }
    for w in knots.windows(2) {
        let ((x0, y0), (x1, y1)) = (w[0], w[1]);
        if x <= x1 {
            return if x1 > x0 { y0 + (y1 - y0) * (x - x0) / (x1 - x0) } else { y1 };
        }
    }
    last.1
}
