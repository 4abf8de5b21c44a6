//! Slowdown episodes: the spans `[onset, recovery)` of the job's pace signal (median step time
//! over ranks, or the median collective time when no step time is recorded) whose level is
//! above the healthy baseline.
//!
//! The signal is cut into segments by the engine's change-point detector; the healthy baseline
//! is the level of the lowest sustained segments; every maximal run of segments at least 10 %
//! above it is an episode if it lasts (enough points, or 20 s of time with data: a gap in the
//! pace data beyond the next step's own duration, such as a job restart, does not count). A slow run that starts with the
//! signal has no healthy time before it: the window starts inside the slowdown.

use lockstep_engine::analysis::{ChangeConfig, ChangeDetector};
use lockstep_engine::model::SEC;

/// A slowdown must raise the pace signal by at least this factor.
pub(crate) const SLOWDOWN_FACTOR: f64 = 1.10;
/// A slower segment lasting this long is sustained even with few points in it.
const SUSTAIN_NS: i64 = 20 * SEC;
/// Consecutive pace points further apart than this many typical spacings, and than this many
/// times the later point's own duration, have a gap between them, whose time does not count
/// towards [`SUSTAIN_NS`].
const GAP_STEPS: i64 = 3;
/// Segments within this factor of the lowest sustained level form the healthy baseline.
const HEALTHY_BAND: f64 = 1.05;
/// A first stage must last this long before a further rise splits an episode into stages.
const ESCALATION_STAGE_NS: i64 = 60 * SEC;
/// Most episodes reported (the rest are the smallest ones).
pub(crate) const MAX_EPISODES: usize = 8;

/// One episode on the pace signal (indices into its points).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Span {
    /// First slow point.
    pub start: usize,
    /// One past the last slow point.
    pub end: usize,
    /// Level of the episode (trimmed mean).
    pub level: f64,
    /// Whether the signal recovered (a healthy segment follows); false for a stage that a
    /// further rise continues (the next span starts at its end).
    pub recovered: bool,
}

impl Span {
    /// Whether span `k` of `spans` continues the one before it (an escalation, no recovery).
    pub fn continues(spans: &[Span], k: usize) -> bool {
        k > 0 && !spans[k - 1].recovered && spans[k - 1].end == spans[k].start
    }
}

/// The episodes of a pace signal and its healthy baseline.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Episodes {
    /// Healthy level (trimmed mean of the healthy segments; of everything when none).
    pub baseline: f64,
    /// The episodes in time order.
    pub spans: Vec<Span>,
    /// Whether a healthy segment exists at all (false: no baseline in the window).
    pub has_healthy: bool,
    /// The highest stretch of the signal that is not part of an episode (at least two points):
    /// a rise below the threshold or too short to count. `None` when every segment is in an
    /// episode or the signal has no baseline.
    pub near_miss: Option<Span>,
}

/// Finds the episodes of `points` (time, value), time-ordered; a value is a duration of
/// `unit_seconds` seconds per unit (1 for step times in seconds, 1e-6 for collective times in
/// microseconds).
pub(crate) fn find(points: &[(i64, f64)], unit_seconds: f64) -> Episodes {
    let values: Vec<f64> = points.iter().map(|p| p.1).collect();
    let n = values.len();
    let overall = trimmed_mean(&values);
    let none =
        |baseline: f64, has_healthy: bool| Episodes { baseline, spans: Vec::new(), has_healthy, near_miss: None };
    if n < 2 {
        return none(overall, false);
    }
    let cfg = ChangeConfig::default();
    let cps = ChangeDetector::new().detect(&values, &cfg);
    let mut bounds = vec![0];
    bounds.extend(cps.iter().map(|c| c.index).filter(|&i| i > 0 && i < n));
    bounds.push(n);
    bounds.dedup();
    // Time with data: the time between two points counts, unless it is a gap — longer than
    // GAP_STEPS typical spacings and than GAP_STEPS times the later point's own duration (a
    // step of 10 s covers the 10 s before it) —, which counts as GAP_STEPS typical spacings:
    // a stretch without pace data (a job restart, a lost exporter) is not slow time, while a
    // run of very slow steps still is.
    let mut steps: Vec<i64> = points.windows(2).map(|w| w[1].0 - w[0].0).collect();
    let middle = steps.len() / 2;
    let typical = if steps.is_empty() { 0 } else { *steps.select_nth_unstable(middle).1 };
    let own = |v: f64| if v.is_finite() && v > 0.0 { (v * unit_seconds * 1e9).min(i64::MAX as f64) as i64 } else { 0 };
    let counted = |dt: i64, v: f64| {
        let gap = GAP_STEPS.saturating_mul(typical);
        if dt > gap.max(GAP_STEPS.saturating_mul(own(v))) { gap } else { dt }
    };
    let covered =
        |a: usize, b: usize| -> i64 { points[a..b].windows(2).map(|w| counted(w[1].0 - w[0].0, w[1].1)).sum() };
    let lasting = |a: usize, b: usize| b - a >= cfg.sustain || covered(a, b) >= SUSTAIN_NS;
    let segs: Vec<(usize, usize, f64, bool)> =
        bounds.windows(2).map(|w| (w[0], w[1], trimmed_mean(&values[w[0]..w[1]]), lasting(w[0], w[1]))).collect();
    let lowest = segs.iter().filter(|s| s.3 && s.2.is_finite()).map(|s| s.2).fold(f64::INFINITY, f64::min);
    if !lowest.is_finite() || lowest <= 0.0 {
        return none(overall, false);
    }
    let healthy: Vec<f64> = segs
        .iter()
        .filter(|s| s.3 && s.2 <= HEALTHY_BAND * lowest)
        .flat_map(|s| values[s.0..s.1].iter().copied())
        .collect();
    let baseline = trimmed_mean(&healthy);
    let slow = |level: f64| level >= SLOWDOWN_FACTOR * baseline;
    // Runs of slow segments; a short non-slow segment between two slow ones (a flapping link's
    // brief good spell) does not end the episode.
    let mut spans: Vec<Span> = Vec::new();
    let mut k = 0;
    while k < segs.len() {
        if !slow(segs[k].2) {
            k += 1;
            continue;
        }
        let start = segs[k].0;
        let mut last = k;
        let mut j = k + 1;
        while j < segs.len() {
            if slow(segs[j].2) {
                last = j;
                j += 1;
            } else if !segs[j].3 && j + 1 < segs.len() && slow(segs[j + 1].2) {
                j += 1;
            } else {
                break;
            }
        }
        let end = segs[last].1;
        if lasting(start, end) {
            // An escalation inside the run — a sustained further rise after a first stage of a
            // minute or more (a second fault joining the first) — ends a stage: each stage is
            // an episode of its own, the later ones continuing the first without recovery.
            let mut stage = start;
            if start > 0 {
                for seg in &segs[k + 1..=last] {
                    let lasted = points[seg.0 - 1].0 - points[stage].0 >= ESCALATION_STAGE_NS;
                    if !(seg.3 && slow(seg.2) && lasted) {
                        continue;
                    }
                    let level = trimmed_mean(&values[stage..seg.0]);
                    if seg.2 >= level + (SLOWDOWN_FACTOR - 1.0) * baseline {
                        spans.push(Span { start: stage, end: seg.0, level, recovered: false });
                        stage = seg.0;
                    }
                }
            }
            let level = trimmed_mean(&values[stage..end]);
            spans.push(Span { start: stage, end, level, recovered: end < n });
        }
        k = last + 1;
    }
    if spans.len() > MAX_EPISODES {
        // Keep the costliest (excess level × length), in time order.
        let cost = |s: &Span| (s.level - baseline) * (s.end - s.start) as f64;
        spans.sort_by(|a, b| cost(b).total_cmp(&cost(a)));
        spans.truncate(MAX_EPISODES);
        spans.sort_by_key(|s| s.start);
    }
    let has_healthy = segs.iter().any(|s| s.3 && !slow(s.2));
    // The largest rise that did not make an episode: a segment outside every span.
    let inside = |a: usize, b: usize| spans.iter().any(|s| a < s.end && s.start < b);
    let near_miss = segs
        .iter()
        .filter(|s| s.1 - s.0 >= 2 && s.2.is_finite() && !inside(s.0, s.1))
        .max_by(|a, b| a.2.total_cmp(&b.2))
        .map(|s| Span { start: s.0, end: s.1, level: s.2, recovered: s.1 < n });
    Episodes { baseline, spans, has_healthy, near_miss }
}

/// Mean of the middle 90 % (5 % trimmed at each end); NaN when empty.
pub(crate) fn trimmed_mean(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let cut = v.len() / 20;
    let mid = &v[cut..v.len() - cut];
    mid.iter().sum::<f64>() / mid.len() as f64
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// Step times in seconds.
    fn find(points: &[(i64, f64)]) -> Episodes {
        super::find(points, 1.0)
    }

    fn signal(levels: &[(usize, f64)]) -> Vec<(i64, f64)> {
        let mut out = Vec::new();
        let mut i = 0i64;
        for &(len, level) in levels {
            for _ in 0..len {
                let noise = ((i * 7919) % 13) as f64 / 13.0 - 0.5;
                out.push((i * SEC, level * (1.0 + 0.02 * noise)));
                i += 1;
            }
        }
        out
    }

    #[test]
    fn persistent_transient_and_recurring_slowdowns() {
        let e = find(&signal(&[(300, 1.0), (300, 1.5)]));
        assert_eq!(e.spans.len(), 1, "{e:?}");
        assert!(!e.spans[0].recovered && (e.spans[0].start as i64 - 300).abs() <= 2);
        assert!((e.baseline - 1.0).abs() < 0.02);

        let e = find(&signal(&[(300, 1.0), (60, 1.6), (300, 1.0)]));
        assert_eq!(e.spans.len(), 1, "{e:?}");
        let s = e.spans[0];
        assert!(s.recovered && (s.start as i64 - 300).abs() <= 2 && (s.end as i64 - 360).abs() <= 2, "{s:?}");

        let e = find(&signal(&[(200, 1.0), (40, 1.5), (200, 1.0), (40, 1.5), (200, 1.0)]));
        assert_eq!(e.spans.len(), 2, "{e:?}");

        let e = find(&signal(&[(600, 1.0)]));
        assert!(e.spans.is_empty() && e.has_healthy);
    }

    /// A second fault joining the first: the further rise after a first stage of 150 s is a
    /// stage of its own that continues the first (no recovery between them); a ramp-like rise
    /// shorter than a minute is not.
    #[test]
    fn an_escalation_is_a_continuing_stage() {
        let e = find(&signal(&[(300, 1.0), (150, 1.2), (200, 1.6)]));
        assert_eq!(e.spans.len(), 2, "{e:?}");
        assert!(!e.spans[0].recovered && Span::continues(&e.spans, 1), "{e:?}");
        assert!((e.spans[1].start as i64 - 450).abs() <= 2, "{e:?}");
        let e = find(&signal(&[(300, 1.0), (30, 1.2), (200, 1.6)]));
        assert_eq!(e.spans.len(), 1, "{e:?}");
        let e = find(&signal(&[(300, 1.0), (150, 1.5), (200, 1.55)]));
        assert_eq!(e.spans.len(), 1, "a level within the noise of the first stage: {e:?}");
    }

    /// The largest rise outside every episode is the near miss: a +6 % stretch below the
    /// threshold, beside a real episode or alone; a flat signal's near miss is no rise at all.
    #[test]
    fn the_near_miss_is_the_highest_stretch_outside_every_episode() {
        let e = find(&signal(&[(300, 1.0), (90, 1.06), (300, 1.0)]));
        assert!(e.spans.is_empty(), "{e:?}");
        let m = e.near_miss.expect("a near miss");
        assert!((m.start as i64 - 300).abs() <= 3 && (m.end as i64 - 390).abs() <= 3, "{m:?}");
        assert!((m.level / e.baseline - 1.06).abs() < 0.01, "{m:?} over {}", e.baseline);

        let e = find(&signal(&[(300, 1.0), (60, 1.5), (200, 1.0), (90, 1.06), (200, 1.0)]));
        assert_eq!(e.spans.len(), 1, "{e:?}");
        let m = e.near_miss.expect("a near miss");
        assert!((m.start as i64 - 560).abs() <= 3, "the bump, not the episode: {m:?}");

        let e = find(&signal(&[(600, 1.0)]));
        let m = e.near_miss.expect("the flat signal itself");
        assert!((m.level / e.baseline - 1.0).abs() < 0.01, "{m:?}");
    }

    /// A job restart: no pace data for 100 s, then a long first step and three warm-up steps.
    /// The time without data is not slow time (QA pass 22: the gap made four slow points
    /// "last" 100 s, an episode of +273 % that blamed a GPU).
    #[test]
    fn a_gap_in_the_pace_data_is_not_a_slowdown() {
        let mut points = signal(&[(300, 1.0)]);
        let resume = points.last().unwrap().0 + 100 * SEC;
        for (i, v) in [12.0, 1.6, 1.6, 1.6].into_iter().enumerate() {
            points.push((resume + i as i64 * 2 * SEC, v));
        }
        let after = points.last().unwrap().0 + SEC;
        points.extend(signal(&[(300, 1.0)]).into_iter().map(|(t, v)| (after + t, v)));
        let e = find(&points);
        assert!(e.spans.is_empty(), "{e:?}");
        // A slowdown that lasts is still one across a gap in the data.
        let mut points = signal(&[(300, 1.0)]);
        let resume = points.last().unwrap().0 + 100 * SEC;
        points.extend(signal(&[(60, 1.6), (300, 1.0)]).into_iter().map(|(t, v)| (resume + t, v)));
        assert_eq!(find(&points).spans.len(), 1);
        // Steps ten times slower for a minute: six points 10 s apart, each a step of 10 s, are
        // a minute of slow time, not six points' worth of the typical spacing (review).
        let mut points = signal(&[(300, 1.0)]);
        let last = points.last().unwrap().0;
        points.extend((1..=6).map(|i| (last + i * 10 * SEC, 10.0)));
        let last = points.last().unwrap().0;
        points.extend(signal(&[(300, 1.0)]).into_iter().map(|(t, v)| (last + SEC + t, v)));
        assert_eq!(find(&points).spans.len(), 1, "a run of very slow steps");
    }

    #[test]
    fn slow_from_the_start_has_no_healthy_time_before_it() {
        let e = find(&signal(&[(200, 1.5), (300, 1.0)]));
        assert_eq!(e.spans.len(), 1);
        assert_eq!(e.spans[0].start, 0);
    }
}
