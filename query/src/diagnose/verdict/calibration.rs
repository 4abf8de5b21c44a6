//! The confidence of a verdict as a probability of being right: for an episode a monotone mapping
//! of the rule's own score (`rule_confidence`), capped when a rival suspect contests it; for a
//! `healthy` verdict a non-increasing mapping of the near miss (the largest pace rise outside
//! every episode). Fitted on the independent generator's tuning seeds and frozen before the
//! held-out seeds were run (docs/diagnosis.md, "Calibration").

/// What kind of verdict a confidence belongs to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum VerdictKind {
    /// A slowdown episode with a root cause (its rule score: 0.3 for a fallback, 0.4–1.0
    /// otherwise, lowered for missing signals and hard episodes). `contested`: a suspect of
    /// another domain changed within three minutes of the root cause (two faults close together,
    /// whose order the evidence may get wrong).
    Episode {
        /// Whether a rival suspect of another domain is close in time and score.
        contested: bool,
    },
    /// No episode: `healthy`, with the largest rise of the pace signal outside every episode
    /// (`NearMiss::rise`; 0 when there is none).
    Healthy {
        /// The near miss's rise over the baseline (0.06 = 6 %).
        rise: f64,
    },
    /// No episode: `slow_from_start` or `insufficient_data` (no evaluation data: kept as is).
    Other,
}

/// Knots `(rule score, probability right)` of the episode mapping, linear in between, flat
/// outside; non-decreasing in both coordinates. Fitted by `benches/fit_confidence.py` on the
/// TUNING runs of both bands of the independent generator with its benign pace drift
/// (`Wobble`) — seeds 0–11 of each band, hard seeds 400–414, default seeds 500–514, and seeds
/// 600–614 and 700–714 of both bands (912 runs; every range after the first was the held-out set
/// of an earlier mapping, looked at and so a tuning range now) — then frozen before the held-out
/// seeds 1100–1114 and 1200–1214 were run: isotonic regression of the AC@1 outcome of the 727
/// episode verdicts on the rule score, each block's accuracy smoothed as
/// (right + 0.5) / (runs + 1) and flat from its lowest to its highest rule score. Blocks: 21
/// fallbacks at 0.19–0.27 (none right), 155 at 0.43–0.66 (147 right), 437 at 0.67–0.92 (427
/// right), 114 at 0.93–1.00 (all right).
const EPISODE_KNOTS: [(f64, f64); 8] = [
    (0.190, 0.023),
    (0.270, 0.023),
    (0.430, 0.946),
    (0.660, 0.946),
    (0.670, 0.976),
    (0.920, 0.976),
    (0.930, 0.996),
    (1.000, 0.996),
];
/// Most an episode verdict gets when it is contested (`Episode::contested_by`): on the same
/// tuning runs 67 of 72 contested verdicts were right, (67 + 0.5) / (72 + 1). The rival
/// thresholds (`RIVAL_SHARE`, `RIVAL_NS` in verdict.rs) also decide when the fault that changed
/// first leads, and were kept from the previous fit.
const CONTESTED: f64 = 0.925;
/// Knots `(near-miss rise, probability right)` of a `healthy` verdict, linear in between, flat
/// outside; non-increasing in probability. Same tuning runs: 106 healthy verdicts with a near
/// miss of at most +1.08 % (the benign drift of healthy runs, or none) were all right; 10 at
/// +1.1–1.7 % were 8 right; the 63 at +1.9 % and more (up to +56 %: faults at and below the
/// detection limit, blips too short to be sustained) none. Each block is flat over its rises.
/// How far real jobs drift without a fault is the generator's assumption (a swing of ±0.3–2.5 %
/// and a trend of up to ±2 % in compute time, a wander of 3–10 % in each node's input fetch): a
/// job that drifts more reads as a likely miss, which names the rise to look at.
const HEALTHY_KNOTS: [(f64, f64); 6] =
    [(0.0, 0.995), (0.0108, 0.995), (0.0112, 0.773), (0.0170, 0.773), (0.0191, 0.008), (0.5584, 0.008)];

/// The calibrated confidence of a verdict of `kind` whose rule scored `rule` (in [0, 1]).
pub(crate) fn calibrated(kind: VerdictKind, rule: f64) -> f64 {
    let rule = if rule.is_finite() { rule.clamp(0.0, 1.0) } else { 0.0 };
    let p = match kind {
        VerdictKind::Episode { contested } => {
            let p = interpolate(&EPISODE_KNOTS, rule);
            if contested { p.min(CONTESTED) } else { p }
        }
        VerdictKind::Healthy { rise } => {
            interpolate(&HEALTHY_KNOTS, if rise.is_finite() { rise.max(0.0) } else { 0.0 })
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
