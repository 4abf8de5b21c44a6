//! Fitted clock models and their application to timestamps, in integer arithmetic.
//!
//! A host's model is a list of contiguous [`ClockSegment`]s in local time. Within a segment
//! the offset `θ = local − reference` is the straight line between the integer knot values
//! `offset_start_ns` and `offset_end_ns`, evaluated exactly in i128 and rounded down; knots are
//! shared by neighbouring segments, so the model is continuous. Every segment's slope is at
//! most 1, which makes [`ClockModel::to_reference`] monotonic (non-decreasing) over all of
//! `i64`: that is what lets [`ClockModel::local_range_for_reference`] turn a filter on
//! corrected time into an exact filter on raw local time. Outside the fitted range the first or
//! last segment is extended and its uncertainty grows by `growth_ppb`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{FitConfig, UNCERTAINTY_UNKNOWN};

/// Largest finite uncertainty reported (one below [`UNCERTAINTY_UNKNOWN`]).
const UNCERTAINTY_MAX: i64 = UNCERTAINTY_UNKNOWN - 1;

/// What a segment represents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SegmentKind {
    /// A straight piece fitted to observations.
    Fitted,
    /// The interval around a detected clock step, where a local time may belong to the clock
    /// before or after the step; its uncertainty covers both readings.
    StepBridge,
    /// The reference host: offset 0, uncertainty 0.
    Identity,
}

/// One straight piece of a host's offset model; all values in ns (drift as a ratio of knots).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClockSegment {
    /// What the segment represents.
    pub kind: SegmentKind,
    /// First local time covered (inclusive).
    pub local_start: i64,
    /// Last local time covered; the next segment starts here. `local_end ≥ local_start`.
    pub local_end: i64,
    /// `θ = local − reference` at `local_start`.
    pub offset_start_ns: i64,
    /// `θ` at `local_end`; `offset_end_ns − offset_start_ns ≤ local_end − local_start`.
    pub offset_end_ns: i64,
    /// Uncertainty bound at `local_start` (interpolated linearly inside the segment, which is
    /// conservative because the true bound is convex).
    pub uncertainty_start_ns: i64,
    /// Uncertainty bound at `local_end`.
    pub uncertainty_end_ns: i64,
    /// How fast the uncertainty grows (ppb of the distance) when the model is extended beyond
    /// its first or last segment.
    pub growth_ppb: i64,
    /// Observations that constrained this segment (exchanges, direct offsets, barriers).
    pub samples_used: u32,
}

impl ClockSegment {
    /// `θ` at `local` on this segment's line (extended beyond its ends), rounded down.
    pub fn offset_at(&self, local: i64) -> i64 {
        // Inside the segment (the common case) the result lies between the end offsets, so
        // `start + ⌊dθ·dx / de⌋` needs one division: in i64 when the product fits, else i128.
        // Same value as the general path below (⌊(dθ·q·de + dθ·r)/de⌋ = dθ·q + ⌊dθ·r/de⌋).
        if local >= self.local_start
            && local <= self.local_end
            && let (Some(de), Some(dtheta)) = (
                self.local_end.checked_sub(self.local_start).filter(|&d| d > 0),
                self.offset_end_ns.checked_sub(self.offset_start_ns),
            )
        {
            let dx = local - self.local_start;
            let part = match dtheta.checked_mul(dx) {
                Some(p) => p.div_euclid(de),
                None => (i128::from(dtheta) * i128::from(dx)).div_euclid(i128::from(de)) as i64,
            };
            return self.offset_start_ns + part;
        }
        self.offset_at_general(local)
    }

    /// [`Self::offset_at`] in i128 for any `local`, including far outside the segment.
    fn offset_at_general(&self, local: i64) -> i64 {
        let de = i128::from(self.local_end) - i128::from(self.local_start);
        let start = i128::from(self.offset_start_ns);
        if de <= 0 {
            return self.offset_start_ns;
        }
        let dtheta = i128::from(self.offset_end_ns) - start;
        let dx = i128::from(local) - i128::from(self.local_start);
        let (q, r) = (dx.div_euclid(de), dx.rem_euclid(de));
        // dθ·r < 2^64·2^64 cannot overflow i128 for i64 inputs except at the extreme corner;
        // saturate there rather than wrap.
        let whole = dtheta.saturating_mul(q);
        let part = dtheta.saturating_mul(r).div_euclid(de);
        clamp_i64(start.saturating_add(whole).saturating_add(part))
    }

    /// The segment's drift as a ratio, in ppb (for display only: never used for correction).
    pub fn drift_ppb(&self) -> f64 {
        let de = i128::from(self.local_end) - i128::from(self.local_start);
        if de <= 0 {
            return 0.0;
        }
        let dtheta = i128::from(self.offset_end_ns) - i128::from(self.offset_start_ns);
        dtheta as f64 * 1e9 / de as f64
    }

    /// The larger of the two end uncertainties: the bound anywhere inside the segment.
    pub fn uncertainty_ns(&self) -> i64 {
        self.uncertainty_start_ns.max(self.uncertainty_end_ns)
    }

    pub(crate) fn uncertainty_inside(&self, local: i64) -> i64 {
        let de = i128::from(self.local_end) - i128::from(self.local_start);
        let (us, ue) = (i128::from(self.uncertainty_start_ns), i128::from(self.uncertainty_end_ns));
        if de <= 0 {
            return clamp_u(us.max(ue));
        }
        let dx = i128::from(local) - i128::from(self.local_start);
        clamp_u(us + ceil_div((ue - us).saturating_mul(dx), de))
    }
}

/// A host's clock model: contiguous segments sorted by local time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClockModel {
    /// The host.
    pub host: String,
    /// Contiguous segments (`segments[i].local_end == segments[i + 1].local_start`); empty
    /// means "no model" (identity with unknown uncertainty).
    pub segments: Vec<ClockSegment>,
    /// Clock steps detected in the input.
    pub steps: u32,
    /// Observations set aside as isolated outliers.
    pub outliers: u32,
}

impl ClockModel {
    /// The reference host's model: offset 0 and uncertainty 0 at every time.
    pub fn identity(host: impl Into<String>) -> Self {
        ClockModel {
            host: host.into(),
            segments: vec![ClockSegment {
                kind: SegmentKind::Identity,
                local_start: crate::model::MIN_TIME_NS,
                local_end: crate::model::MAX_TIME_NS,
                offset_start_ns: 0,
                offset_end_ns: 0,
                uncertainty_start_ns: 0,
                uncertainty_end_ns: 0,
                growth_ppb: 0,
                samples_used: 0,
            }],
            steps: 0,
            outliers: 0,
        }
    }

    fn segment_for(&self, local: i64) -> Option<&ClockSegment> {
        let idx = self.segments.partition_point(|s| s.local_start <= local);
        self.segments.get(idx.saturating_sub(1))
    }

    /// `θ = local − reference` at `local` (0 without segments).
    pub fn offset_at(&self, local: i64) -> i64 {
        self.segment_for(local).map_or(0, |s| s.offset_at(local))
    }

    /// Reference time of a local timestamp, ns; monotonic non-decreasing in `local`.
    pub fn to_reference(&self, local: i64) -> i64 {
        clamp_i64(i128::from(local) - i128::from(self.offset_at(local)))
    }

    /// Appends [`Self::to_reference`] of every time in `local` to `out`. Times in ascending
    /// order (a series' run of a scan) find their segment by walking forward instead of a
    /// search per sample; a time below the previous one starts the walk again.
    pub fn extend_reference(&self, local: &[i64], out: &mut Vec<i64>) {
        let segments = &self.segments;
        if segments.len() < 2 {
            out.extend(local.iter().map(|&t| self.to_reference(t)));
            return;
        }
        out.reserve(local.len());
        // `segment_for`: the last segment starting at or before the time (the first one before
        // every segment).
        let mut k = 0;
        let mut last = i64::MIN;
        for &t in local {
            if t < last {
                k = 0;
            }
            last = t;
            while k + 1 < segments.len() && segments[k + 1].local_start <= t {
                k += 1;
            }
            out.push(clamp_i64(i128::from(t) - i128::from(segments[k].offset_at(t))));
        }
    }

    /// Uncertainty (ns) of [`Self::to_reference`] at `local`; [`UNCERTAINTY_UNKNOWN`] if the
    /// model has no segments.
    pub fn uncertainty_at(&self, local: i64) -> i64 {
        let (Some(first), Some(last)) = (self.segments.first(), self.segments.last()) else {
            return UNCERTAINTY_UNKNOWN;
        };
        let grow = |u: i64, growth: i64, dist: i128| {
            clamp_u(i128::from(u) + ceil_div(i128::from(growth).saturating_mul(dist), 1_000_000_000))
        };
        if local < first.local_start {
            let dist = i128::from(first.local_start) - i128::from(local);
            return grow(first.uncertainty_start_ns, first.growth_ppb, dist);
        }
        if local > last.local_end {
            let dist = i128::from(local) - i128::from(last.local_end);
            return grow(last.uncertainty_end_ns, last.growth_ppb, dist);
        }
        self.segment_for(local).map_or(UNCERTAINTY_UNKNOWN, |s| s.uncertainty_inside(local))
    }

    /// The local-time range `[lo, hi]` holding exactly the local times whose reference time is
    /// in `[ref_lo, ref_hi]` (exact because [`Self::to_reference`] is monotonic, hence safe for
    /// pruning). Empty is returned as `lo > hi`.
    pub fn local_range_for_reference(&self, ref_lo: i64, ref_hi: i64) -> (i64, i64) {
        if ref_lo > ref_hi {
            return (1, 0);
        }
        // Smallest local with reference ≥ ref_lo, and largest with reference ≤ ref_hi.
        let Some(lo) = first_true(|x| self.to_reference(x) >= ref_lo) else {
            return (1, 0);
        };
        let hi = match first_true(|x| self.to_reference(x) > ref_hi) {
            None => i64::MAX,
            Some(i64::MIN) => return (1, 0),
            Some(x) => x - 1,
        };
        if lo <= hi { (lo, hi) } else { (1, 0) }
    }

    /// The largest uncertainty over all segments (ns), for summaries.
    pub fn max_uncertainty_ns(&self) -> i64 {
        self.segments.iter().map(ClockSegment::uncertainty_ns).max().unwrap_or(UNCERTAINTY_UNKNOWN)
    }
}

/// Which raw input a fitted version consumed (record counts of the append-only logs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputWatermark {
    /// Sync exchanges.
    pub exchanges: u64,
    /// Direct offset observations.
    pub offsets: u64,
    /// Barrier events.
    pub barriers: u64,
}

/// One version of every host's clock model.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ClockSet {
    version: u64,
    reference_host: Option<String>,
    config: FitConfig,
    inputs: InputWatermark,
    models: BTreeMap<String, ClockModel>,
}

impl ClockSet {
    /// A set of models; the reference host (if any) gets the identity model.
    pub fn new(
        version: u64,
        config: FitConfig,
        inputs: InputWatermark,
        mut models: BTreeMap<String, ClockModel>,
    ) -> Self {
        let reference_host = config.reference_host.clone();
        if let Some(r) = &reference_host {
            models.insert(r.clone(), ClockModel::identity(r.clone()));
        }
        ClockSet { version, reference_host, config, inputs, models }
    }

    /// The version number (0 = nothing fitted yet).
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The reference host, if it is a collector.
    pub fn reference_host(&self) -> Option<&str> {
        self.reference_host.as_deref()
    }

    /// The configuration this version was fitted with.
    pub fn config(&self) -> &FitConfig {
        &self.config
    }

    /// The raw input this version consumed.
    pub fn inputs(&self) -> InputWatermark {
        self.inputs
    }

    /// The model of one host.
    pub fn model(&self, host: &str) -> Option<&ClockModel> {
        self.models.get(host)
    }

    /// All models, by host.
    pub fn models(&self) -> &BTreeMap<String, ClockModel> {
        &self.models
    }

    /// `(reference time, uncertainty)` of a local timestamp of `host`, ns. A host without a
    /// model maps identically with uncertainty [`UNCERTAINTY_UNKNOWN`].
    pub fn correct(&self, host: &str, local: i64) -> (i64, i64) {
        match self.models.get(host) {
            Some(m) => (m.to_reference(local), m.uncertainty_at(local)),
            None => (local, UNCERTAINTY_UNKNOWN),
        }
    }

    /// [`ClockModel::local_range_for_reference`] for `host` (identity for unknown hosts).
    pub fn local_range_for_reference(&self, host: &str, ref_lo: i64, ref_hi: i64) -> (i64, i64) {
        match self.models.get(host) {
            Some(m) => m.local_range_for_reference(ref_lo, ref_hi),
            None if ref_lo <= ref_hi => (ref_lo, ref_hi),
            None => (1, 0),
        }
    }

    /// Every segment of every host, for the `clock_models` table.
    pub fn segments(&self) -> impl Iterator<Item = (&str, &ClockSegment)> {
        self.models.iter().flat_map(|(h, m)| m.segments.iter().map(move |s| (h.as_str(), s)))
    }

    pub(crate) fn with_version(mut self, version: u64, inputs: InputWatermark) -> Self {
        self.version = version;
        self.inputs = inputs;
        self
    }
}

/// The smallest `x` in `i64` with `pred(x)` for a monotone predicate (false…false true…true).
fn first_true(pred: impl Fn(i64) -> bool) -> Option<i64> {
    if !pred(i64::MAX) {
        return None;
    }
    let (mut lo, mut hi) = (i128::from(i64::MIN), i128::from(i64::MAX)); // pred(hi) holds
    if pred(i64::MIN) {
        return Some(i64::MIN);
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if pred(clamp_i64(mid)) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Some(clamp_i64(hi))
}

pub(crate) fn clamp_i64(v: i128) -> i64 {
    v.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

fn clamp_u(v: i128) -> i64 {
    v.clamp(0, i128::from(UNCERTAINTY_MAX)) as i64
}

/// `⌈n / d⌉` for `d > 0`.
pub(crate) fn ceil_div(n: i128, d: i128) -> i128 {
    let q = n.div_euclid(d);
    if n.rem_euclid(d) != 0 { q + 1 } else { q }
}

#[cfg(test)]
mod fast_path_tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The one-division path inside a segment equals the general i128 path.
        #[test]
        fn offset_fast_path_equals_general(
            start in -(1i64 << 62)..(1i64 << 62),
            len in 1i64..(1i64 << 45),
            theta0 in -(1i64 << 40)..(1i64 << 40),
            dtheta in -(1i64 << 36)..(1i64 << 36),
            at in 0.0f64..=1.0,
        ) {
            let seg = ClockSegment {
                local_start: start,
                local_end: start + len,
                offset_start_ns: theta0,
                offset_end_ns: theta0 + dtheta,
                kind: SegmentKind::Fitted,
                uncertainty_start_ns: 0,
                uncertainty_end_ns: 0,
                growth_ppb: 0,
                samples_used: 0,
            };
            let local = start + (len as f64 * at) as i64;
            prop_assert_eq!(seg.offset_at(local), seg.offset_at_general(local));
        }
    }
}
