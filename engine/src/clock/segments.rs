//! From pieces to a continuous, monotonic [`ClockModel`]: knots, step bridges, clean-up.
//!
//! Within a span the pieces meet at knots. A knot's offset is the midpoint of the band both
//! neighbouring pieces allow there (their intersection when it is not empty), which is the
//! minimax estimate; each segment is the straight line between its two knots. Its uncertainty
//! at each end is the largest distance from that line to any line its piece's polygon allows,
//! plus 1 ns for rounding; since that distance is convex in time, interpolating the two end
//! values bounds it everywhere in between.
//!
//! Between two spans (a clock step) a bridge segment joins the last knot before the step to
//! the first knot after it. A local time in the bridge may have been stamped before or after
//! the step, so the bridge's uncertainty covers both readings (about the step size).

use super::config::FitConfig;
use super::fit::{HostFit, Piece, Span};
use super::model::{ClockModel, ClockSegment, SegmentKind, ceil_div, clamp_i64};

/// A span shorter than this (1 s) is stored as a single point without drift.
const MIN_SLOPE_SPAN_NS: i128 = 1_000_000_000;

/// Builds the model of `host` from its segmentation.
pub(crate) fn assemble(host: &str, fit: &HostFit, cfg: &FitConfig) -> ClockModel {
    let mut segments: Vec<ClockSegment> = Vec::new();
    let mut last_key: Option<i64> = None;
    for span in &fit.spans {
        let mut next = span_segments(span, cfg);
        let (Some(first), Some(last)) = (span.pieces.first(), span.pieces.last()) else {
            continue;
        };
        if next.is_empty() {
            continue;
        }
        if let Some(before_key) = last_key {
            bridge(&mut segments, &mut next, before_key, first.first_key);
        }
        segments.extend(next);
        last_key = Some(last.last_key);
    }
    normalize(&mut segments);
    ClockModel {
        host: host.to_string(),
        segments,
        steps: u32::try_from(fit.spans.len().saturating_sub(1)).unwrap_or(u32::MAX),
        outliers: fit.outliers,
    }
}

fn mid(lo: f64, hi: f64) -> f64 {
    lo + (hi - lo) / 2.0
}

/// Fitted segments of one span, one per piece, continuous at shared knots.
fn span_segments(span: &Span, cfg: &FitConfig) -> Vec<ClockSegment> {
    let pieces = &span.pieces;
    let Some(first) = pieces.first() else {
        return Vec::new();
    };
    let m = pieces.len();
    if m == 1 && i128::from(first.last_x) - i128::from(first.first_x) < MIN_SLOPE_SPAN_NS {
        // Too short to carry a drift: knot rounding alone would fake hundreds of ppm. One
        // point at the centre, drift 0, and the whole feasible drift range as growth.
        let centre = clamp_i64((i128::from(first.first_x) + i128::from(first.last_x)).div_euclid(2));
        let (lo, hi) = first.range_at(centre);
        let value = mid(lo, hi).round() as i64;
        let mut seg = fitted_segment(first, centre, centre, value, value, cfg);
        let (blo, bhi) = first.slope_range();
        seg.growth_ppb = bound(bhi.max(-blo)).saturating_add(cfg.wander_ppb);
        return vec![seg];
    }
    let mut knots: Vec<i64> = Vec::with_capacity(m + 1);
    knots.push(first.first_x);
    for j in 1..m {
        let between = clamp_i64((i128::from(pieces[j - 1].last_x) + i128::from(pieces[j].first_x)).div_euclid(2));
        knots.push(between.max(knots[j - 1].saturating_add(1)));
    }
    knots.push(pieces[m - 1].last_x.max(knots[m - 1]));
    // Knot values: the max-margin line of the piece(s) meeting there (averaged at inner knots,
    // kept inside the band both pieces allow when it is not empty).
    let values: Vec<i64> = (0..=m)
        .map(|j| {
            let k = knots[j];
            let value = match (j.checked_sub(1).map(|i| &pieces[i]), pieces.get(j)) {
                (Some(l), Some(r)) => {
                    let ((llo, lhi), (rlo, rhi)) = (l.range_at(k), r.range_at(k));
                    let (ilo, ihi) = (llo.max(rlo), lhi.min(rhi));
                    let centre = mid(l.center_at(k), r.center_at(k));
                    if ilo <= ihi { centre.clamp(ilo, ihi) } else { centre }
                }
                (Some(p), None) | (None, Some(p)) => p.center_at(k),
                (None, None) => 0.0,
            };
            value.round() as i64
        })
        .collect();
    pieces
        .iter()
        .enumerate()
        .map(|(j, p)| fitted_segment(p, knots[j], knots[j + 1], values[j], values[j + 1], cfg))
        .collect()
}

fn fitted_segment(p: &Piece, s: i64, e: i64, off_s: i64, off_e: i64, cfg: &FitConfig) -> ClockSegment {
    let mut seg = ClockSegment {
        kind: SegmentKind::Fitted,
        local_start: s,
        local_end: e,
        offset_start_ns: off_s,
        offset_end_ns: off_e,
        uncertainty_start_ns: bound(p.deviation_at(s, off_s)),
        uncertainty_end_ns: bound(p.deviation_at(e, off_e)),
        growth_ppb: 0,
        samples_used: p.n,
    };
    // Drift wander inside the piece: a curve whose slope changes by `wander` over the piece
    // stays within wander·length/8 of its chord.
    let length = i128::from(e) - i128::from(s);
    let bend = clamp_i64(ceil_div(i128::from(cfg.wander_ppb).saturating_mul(length), 8_000_000_000));
    seg.uncertainty_start_ns = seg.uncertainty_start_ns.saturating_add(bend);
    seg.uncertainty_end_ns = seg.uncertainty_end_ns.saturating_add(bend);
    let drift = seg.drift_ppb();
    let (blo, bhi) = p.slope_range();
    seg.growth_ppb = bound((bhi - drift).max(drift - blo)).saturating_add(cfg.wander_ppb);
    seg
}

/// A float deviation as an integer bound: rounded up, plus 1 ns for integer rounding.
fn bound(v: f64) -> i64 {
    if v.is_nan() {
        return i64::MAX - 1;
    }
    (v.max(0.0).ceil() as i64).saturating_add(1)
}

/// Joins `before` and `after` (the models of the spans before and after a step) with a bridge
/// segment. The step happened between reference times `key_before` (last observation of the
/// old clock) and `key_after` (first of the new one). A local time can come from the old clock
/// only up to `A` (old clock's reading at `key_after`) and from the new clock only from `B`
/// (new clock's reading at `key_before`); the bridge spans `[min(A, B), max(A, B)]`, which is
/// exactly the ambiguous range when `B < A`. Both models are cut or extended to meet it.
fn bridge(before: &mut Vec<ClockSegment>, after: &mut Vec<ClockSegment>, key_before: i64, key_after: i64) {
    let old = ClockModel { host: String::new(), segments: before.clone(), steps: 0, outliers: 0 };
    let new = ClockModel { host: String::new(), segments: after.clone(), steps: 0, outliers: 0 };
    let a = old.local_range_for_reference(key_after, i64::MAX).0;
    let a = a.saturating_add(old.uncertainty_at(a));
    let b = new.local_range_for_reference(key_before, i64::MAX).0;
    let b = b.saturating_sub(new.uncertainty_at(b));
    let lo = a.min(b);
    let mut hi = a.max(b);
    truncate_end(before, lo);
    truncate_start(after, hi);
    let model_a = ClockModel { host: String::new(), segments: before.clone(), steps: 0, outliers: 0 };
    let model_b = ClockModel { host: String::new(), segments: after.clone(), steps: 0, outliers: 0 };
    // The bridge must not map backwards: its end's reference time must not precede its start's.
    let ref_lo = model_a.to_reference(lo);
    if model_b.to_reference(hi) < ref_lo {
        let mut step = 1i64;
        while model_b.to_reference(hi.saturating_add(step)) < ref_lo && step < i64::MAX / 4 {
            step *= 2;
        }
        let (mut l, mut h) = (hi, hi.saturating_add(step));
        while h - l > 1 {
            let m = l + (h - l) / 2;
            if model_b.to_reference(m) < ref_lo { l = m } else { h = m }
        }
        hi = h;
        truncate_start(after, hi);
    }
    let model_b = ClockModel { host: String::new(), segments: after.clone(), steps: 0, outliers: 0 };
    let (off_s, off_e) = (model_a.offset_at(lo), model_b.offset_at(hi));
    // At x the bridge reads `own`; the truth is near either model's reading.
    let cover = |x: i64, own: i64| {
        let spread = (i128::from(own) - i128::from(model_a.offset_at(x)))
            .abs()
            .max((i128::from(own) - i128::from(model_b.offset_at(x))).abs());
        let u = i128::from(model_a.uncertainty_at(x).max(model_b.uncertainty_at(x)));
        clamp_i64(spread + u + 1)
    };
    let seg = ClockSegment {
        kind: SegmentKind::StepBridge,
        local_start: lo,
        local_end: hi,
        offset_start_ns: off_s,
        offset_end_ns: off_e,
        uncertainty_start_ns: cover(lo, off_s),
        uncertainty_end_ns: cover(hi, off_e),
        growth_ppb: before.last().map_or(0, |s| s.growth_ppb).max(after.first().map_or(0, |s| s.growth_ppb)),
        samples_used: 0,
    };
    before.push(seg);
}

/// `θ` and uncertainty of one segment's line at `at` (extrapolated outside it).
fn read_at(s: &ClockSegment, at: i64) -> (i64, i64) {
    let m = ClockModel { host: String::new(), segments: vec![s.clone()], steps: 0, outliers: 0 };
    (m.offset_at(at), m.uncertainty_at(at))
}

/// Cuts (or extends) the segments so that they end at `at`.
fn truncate_end(segs: &mut Vec<ClockSegment>, at: i64) {
    while segs.len() > 1 && segs.last().is_some_and(|s| s.local_start >= at) {
        segs.pop();
    }
    if let Some(s) = segs.last_mut() {
        let (off, u) = read_at(s, at);
        if at < s.local_start {
            s.local_start = at;
            s.offset_start_ns = off;
            s.uncertainty_start_ns = u;
        }
        s.local_end = at;
        s.offset_end_ns = off;
        s.uncertainty_end_ns = u;
    }
}

/// Cuts (or extends) the segments so that they start at `at`.
fn truncate_start(segs: &mut Vec<ClockSegment>, at: i64) {
    while segs.len() > 1 && segs.first().is_some_and(|s| s.local_end <= at) {
        segs.remove(0);
    }
    if let Some(s) = segs.first_mut() {
        let (off, u) = read_at(s, at);
        if at > s.local_end {
            s.local_end = at;
            s.offset_end_ns = off;
            s.uncertainty_end_ns = u;
        }
        s.local_start = at;
        s.offset_start_ns = off;
        s.uncertainty_start_ns = u;
    }
}

/// Drops inner zero-length segments, makes knots shared and slopes ≤ 1 (monotonic reference
/// time), widening the uncertainty by every adjustment.
fn normalize(segs: &mut Vec<ClockSegment>) {
    if segs.len() > 1 {
        segs.retain(|s| s.local_end > s.local_start);
    }
    for i in 0..segs.len() {
        if i > 0 {
            let (prev_end, prev_off) = (segs[i - 1].local_end, segs[i - 1].offset_end_ns);
            let s = &mut segs[i];
            s.local_start = prev_end;
            let diff = (i128::from(s.offset_start_ns) - i128::from(prev_off)).abs();
            s.offset_start_ns = prev_off;
            s.uncertainty_start_ns = clamp_i64(i128::from(s.uncertainty_start_ns) + diff);
        }
        let s = &mut segs[i];
        if s.local_end < s.local_start {
            s.local_end = s.local_start;
        }
        let len = i128::from(s.local_end) - i128::from(s.local_start);
        let rise = i128::from(s.offset_end_ns) - i128::from(s.offset_start_ns);
        if rise > len {
            let excess = rise - len;
            s.offset_end_ns = clamp_i64(i128::from(s.offset_end_ns) - excess);
            s.uncertainty_end_ns = clamp_i64(i128::from(s.uncertainty_end_ns) + excess);
        }
    }
}
