//! From observations to pieces: bands, step detection, outliers, piece splitting.
//!
//! Every observation becomes a [`Band`]: `θ(x_lo) ≥ y_lo` and `θ(x_hi) ≤ y_hi`. For an exchange
//! `(t1, t2, t3, t4)` the forward delay `t2 − ref(t1) ≥ d` and the reverse delay
//! `ref(t4) − t3 ≥ d` (with `d` the configured minimum one-way delay, default 0) give
//! `θ(t1) ≥ t1 − t2 + d` and `θ(t4) ≤ t4 − t3 − d`. Bands are ordered by reference time (which
//! never steps) and fed to a growing piece whose feasible polygon of lines is clipped by each
//! band. When a band leaves the polygon empty the model is broken there: if the next few bands
//! are consistent without it, it is an isolated outlier and is set aside; otherwise the gap
//! between the old prediction and the new data decides between a clock step (a new span, with
//! a discontinuity) and drift wander (a new continuous piece).

use super::config::FitConfig;
use super::polygon::Feasible;
use super::{OffsetObservation, SyncExchange, sync_error};
use crate::error::Result;

/// One observation as a two-sided bound on `θ`, integer ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Band {
    /// Approximate reference time, for ordering (reference time never steps).
    pub key: i64,
    /// Local time of the lower bound.
    pub x_lo: i64,
    /// `θ(x_lo) ≥ y_lo`.
    pub y_lo: i64,
    /// Local time of the upper bound.
    pub x_hi: i64,
    /// `θ(x_hi) ≤ y_hi`.
    pub y_hi: i64,
}

impl Band {
    /// The band of a validated exchange, tightened by the minimum one-way delay `d`. An
    /// exchange whose network delay is below `2·d` contradicts `d`; its allowance is reduced
    /// to half its network delay (its band collapses to the midpoint) instead of failing.
    ///
    /// Both sides are widened by `jitter` (timestamp quantisation and noise): without it, a
    /// 1 ns rounding at two tight observations far apart would tilt every feasible line off
    /// the truth by a lever-arm multiple of that nanosecond.
    pub(crate) fn from_exchange(e: &SyncExchange, min_delay: i64, jitter: i64) -> Result<Band> {
        e.validate()?;
        let network = (e.t4 - e.t1) - (e.t3 - e.t2);
        let d = min_delay.min(network / 2);
        Ok(Band {
            key: e.t2,
            x_lo: e.t1,
            y_lo: (e.t1 - e.t2 + d).saturating_sub(jitter),
            x_hi: e.t4,
            y_hi: (e.t4 - e.t3 - d).saturating_add(jitter),
        })
    }

    /// The band of a validated direct offset observation.
    pub(crate) fn from_offset(o: &OffsetObservation) -> Result<Band> {
        o.validate()?;
        Ok(Band::direct(o.local_time, o.offset_ns, o.uncertainty_ns))
    }

    /// `θ(local) ∈ [offset − u, offset + u]` (inputs already range-checked).
    pub(crate) fn direct(local: i64, offset: i64, u: i64) -> Band {
        let y_lo = offset.saturating_sub(u);
        let y_hi = offset.saturating_add(u);
        Band { key: local.saturating_sub(offset), x_lo: local, y_lo, x_hi: local, y_hi }
    }
}

/// One straight piece under construction: its origin and feasible polygon.
#[derive(Debug, Clone)]
pub(crate) struct Piece {
    x0: i64,
    y0: i64,
    poly: Feasible,
    /// Earliest local time constrained.
    pub first_x: i64,
    /// Latest local time constrained.
    pub last_x: i64,
    /// Reference-order key of the first and last observation.
    pub first_key: i64,
    /// See `first_key`.
    pub last_key: i64,
    /// Observations used.
    pub n: u32,
    /// The observations themselves (for the dispersion-weighted estimate).
    bands: Vec<Band>,
}

impl Piece {
    fn start(b: &Band, b_max: f64) -> Option<Piece> {
        let (x0, y0) = (b.x_lo, b.y_lo);
        let rel_x = |x: i64| ((i128::from(x) - i128::from(x0)) as f64) / 1e9;
        let rel_y = |y: i64| (i128::from(y) - i128::from(y0)) as f64;
        let poly = Feasible::from_band(b_max, rel_x(b.x_lo), rel_y(b.y_lo), rel_x(b.x_hi), rel_y(b.y_hi))?;
        Some(Piece {
            x0,
            y0,
            poly,
            first_x: b.x_lo.min(b.x_hi),
            last_x: b.x_lo.max(b.x_hi),
            first_key: b.key,
            last_key: b.key,
            n: 1,
            bands: vec![*b],
        })
    }

    fn rel_x(&self, x: i64) -> f64 {
        ((i128::from(x) - i128::from(self.x0)) as f64) / 1e9
    }

    fn rel_y(&self, y: i64) -> f64 {
        (i128::from(y) - i128::from(self.y0)) as f64
    }

    fn clipped(&self, b: &Band) -> Option<Feasible> {
        self.poly.with_band(self.rel_x(b.x_lo), self.rel_y(b.y_lo), self.rel_x(b.x_hi), self.rel_y(b.y_hi))
    }

    fn commit(&mut self, poly: Feasible, b: &Band) {
        self.poly = poly;
        self.first_x = self.first_x.min(b.x_lo.min(b.x_hi));
        self.last_x = self.last_x.max(b.x_lo.max(b.x_hi));
        self.first_key = self.first_key.min(b.key);
        self.last_key = self.last_key.max(b.key);
        self.n = self.n.saturating_add(1);
        self.bands.push(*b);
    }

    /// Adds a band if the piece stays feasible; returns whether it was added.
    pub(crate) fn try_add(&mut self, b: &Band) -> bool {
        match self.clipped(b) {
            Some(p) => {
                self.commit(p, b);
                true
            }
            None => false,
        }
    }

    fn consistent_with_all(&self, bands: &[Band]) -> bool {
        let mut probe = self.clone();
        bands.iter().all(|b| probe.try_add(b))
    }

    /// `θ` range at local time `x`, absolute ns as f64 (relative values are exact; the
    /// absolute sum is rounded outward by the callers).
    pub(crate) fn range_at(&self, x: i64) -> (f64, f64) {
        let (lo, hi) = self.poly.range_at(self.rel_x(x));
        (self.y0 as f64 + lo, self.y0 as f64 + hi)
    }

    /// The estimated line `(b, a)` in piece coordinates.
    ///
    /// Start from the max-margin line; take the one-sided envelope fits (the highest and the
    /// lowest feasible line at the piece's mean time: the lines resting on the upper and on the
    /// lower constraints) and average their drifts, each weighted by the inverse square of its
    /// side's excess-delay dispersion, since a side with short queueing pins the slope far
    /// better; then the offset is the middle of the feasible band at that drift, i.e. the
    /// minimum-delay sides split evenly (the unobservable asymmetry is assumed zero).
    fn estimate(&self) -> Option<(f64, f64)> {
        let (bc, ac) = self.poly.center()?;
        let n = self.bands.len() as f64;
        let mid_x = |b: &Band| self.rel_x(b.x_lo) + (self.rel_x(b.x_hi) - self.rel_x(b.x_lo)) / 2.0;
        let x_mean = self.bands.iter().map(mid_x).sum::<f64>() / n;
        let ((b_low, _), (b_up, _)) = self.poly.extreme_lines_at(x_mean)?;
        let line = |x: f64| ac + bc * x;
        let spread = |r: &mut dyn Iterator<Item = f64>| {
            let (mut sum, mut min, mut count) = (0.0, f64::INFINITY, 0.0);
            for v in r {
                sum += v;
                min = min.min(v);
                count += 1.0;
            }
            sum / count - min + 1.0
        };
        let s_up = spread(&mut self.bands.iter().map(|b| self.rel_y(b.y_hi) - line(self.rel_x(b.x_hi))));
        let s_low = spread(&mut self.bands.iter().map(|b| line(self.rel_x(b.x_lo)) - self.rel_y(b.y_lo)));
        let (w_up, w_low) = (1.0 / (s_up * s_up), 1.0 / (s_low * s_low));
        let b = (w_up * b_up + w_low * b_low) / (w_up + w_low);
        let (lo, hi) = self.poly.vertical_extent(b)?;
        Some((b, lo + (hi - lo) / 2.0))
    }

    /// The estimated `θ` at local time `x`, absolute ns as f64.
    pub(crate) fn center_at(&self, x: i64) -> f64 {
        match self.estimate() {
            Some((b, a)) => self.y0 as f64 + a + b * self.rel_x(x),
            None => {
                let (lo, hi) = self.range_at(x);
                lo + (hi - lo) / 2.0
            }
        }
    }

    /// The largest `|θ(x) − target|` over all feasible lines, ns (exact relative arithmetic).
    pub(crate) fn deviation_at(&self, x: i64, target: i64) -> f64 {
        self.poly.max_deviation_at(self.rel_x(x), self.rel_y(target))
    }

    /// The feasible drift range, ppb.
    pub(crate) fn slope_range(&self) -> (f64, f64) {
        self.poly.slope_range()
    }

    /// `θ` range at local time `x`, relative to `base` (exact as long as the two origins are
    /// within f64's integer range of each other).
    fn range_rel(&self, x: i64, base: i64) -> (f64, f64) {
        let shift = (i128::from(self.y0) - i128::from(base)) as f64;
        let (lo, hi) = self.poly.range_at(self.rel_x(x));
        (shift + lo, shift + hi)
    }

    /// How far (ns) the data of `window` lies outside this piece's band: the smallest gap
    /// between the two bands over the times `probes` (recent observations of this piece) and
    /// the window's start; ≤ 0 when they meet somewhere. The window is fitted on its own (as
    /// far as it is consistent). A change of drift makes the two lines cross near the kink, so
    /// the gap closes there; a jump of the offset keeps them apart.
    /// The window's drift is kept within `drift_change` (ppb) of this piece's: a clock step
    /// changes the phase, not the frequency, and a drift change larger than that in one
    /// window is not expected.
    fn step_gap(&self, window: &[Band], probes: &[Band], b_max: f64, drift_change: f64) -> (f64, Option<Piece>) {
        let Some(first) = window.first() else {
            return (0.0, None);
        };
        let Some(mut fresh) = Piece::start(first, b_max) else {
            return (0.0, None);
        };
        let (blo, bhi) = self.poly.slope_range();
        let mut limited = fresh.poly.clone();
        if limited.clip_slope(blo - drift_change, bhi + drift_change) {
            fresh.poly = limited;
        }
        for w in &window[1..] {
            if !fresh.try_add(w) {
                break;
            }
        }
        let gap_at = |x: i64| {
            let (wlo, whi) = fresh.range_rel(x, self.y0);
            let (plo, phi) = self.range_rel(x, self.y0);
            (wlo - phi).max(plo - whi)
        };
        let gap =
            probes.iter().filter(|p| p.x_hi >= self.first_x).map(|p| gap_at(p.x_hi)).fold(gap_at(first.x_lo), f64::min);
        (gap, Some(fresh))
    }

    /// After a step: the last observations of this piece that the new clock explains as well
    /// (`fresh`) may have been stamped after the step; they are removed (at most `max`), so the
    /// step is placed no later than the last observation only the old clock explains. Returns
    /// how many were removed.
    fn trim_ambiguous_tail(&mut self, fresh: &Piece, max: usize, b_max: f64) -> u32 {
        let mut keep = self.bands.len();
        while keep > 1 && self.bands.len() - keep < max && fresh.clipped(&self.bands[keep - 1]).is_some() {
            keep -= 1;
        }
        if keep == self.bands.len() {
            return 0;
        }
        let removed = (self.bands.len() - keep) as u32;
        let kept: Vec<Band> = self.bands[..keep].to_vec();
        if let Some(mut rebuilt) = Piece::start(&kept[0], b_max) {
            for b in &kept[1..] {
                rebuilt.try_add(b);
            }
            *self = rebuilt;
        }
        removed
    }
}

/// A step-free run of continuous pieces.
#[derive(Debug, Clone)]
pub(crate) struct Span {
    /// Pieces in reference-time order.
    pub pieces: Vec<Piece>,
}

/// The segmentation of one host's observations.
#[derive(Debug, Clone, Default)]
pub(crate) struct HostFit {
    /// Spans separated by clock steps.
    pub spans: Vec<Span>,
    /// Observations set aside as outliers.
    pub outliers: u32,
}

impl HostFit {
    /// Adds a soft constraint (from barriers) to the piece it falls in, only if that piece
    /// stays feasible; never changes the segmentation. Returns whether it was used.
    pub(crate) fn add_soft(&mut self, b: &Band) -> bool {
        let Some(span) = self.spans.iter_mut().find(|s| {
            let first = s.pieces.first().map_or(i64::MAX, |p| p.first_key);
            let last = s.pieces.last().map_or(i64::MIN, |p| p.last_key);
            (first..=last).contains(&b.key)
        }) else {
            return false;
        };
        let distance = |p: &Piece| {
            if b.key < p.first_key { p.first_key - b.key } else { b.key.saturating_sub(p.last_key).max(0) }
        };
        span.pieces.iter_mut().min_by_key(|p| distance(p)).is_some_and(|p| p.try_add(b))
    }
}

/// Segments bands (any order, duplicates allowed) into spans and pieces.
pub(crate) fn segment(mut bands: Vec<Band>, cfg: &FitConfig) -> HostFit {
    bands.sort_unstable();
    bands.dedup();
    let b_max = cfg.max_drift_ppb as f64;
    let mut fit = HostFit::default();
    let mut pieces: Vec<Piece> = Vec::new();
    let mut cur: Option<Piece> = None;
    let n = bands.len();
    for i in 0..n {
        let band = &bands[i];
        let Some(piece) = cur.as_mut() else {
            cur = Piece::start(band, b_max);
            continue;
        };
        let too_long = i128::from(band.x_hi.max(band.x_lo)) - i128::from(piece.first_x) > i128::from(cfg.max_piece_ns);
        if !too_long && piece.try_add(band) {
            continue;
        }
        if !too_long {
            let ahead = &bands[(i + 1).min(n)..(i + 1 + cfg.step_confirm).min(n)];
            if !ahead.is_empty() && piece.consistent_with_all(ahead) {
                fit.outliers += 1;
                continue;
            }
        }
        let window = &bands[i..(i + cfg.step_confirm).min(n)];
        let probes = &bands[i.saturating_sub(cfg.step_confirm)..i];
        let (gap, fresh) =
            if too_long { (0.0, None) } else { piece.step_gap(window, probes, b_max, cfg.max_drift_change_ppb as f64) };
        let is_step = gap >= cfg.step_threshold_ns as f64;
        if is_step && let Some(fresh) = &fresh {
            fit.outliers += piece.trim_ambiguous_tail(fresh, cfg.step_confirm, b_max);
        }
        if let Some(done) = cur.take() {
            pieces.push(done);
        }
        if is_step {
            fit.spans.push(Span { pieces: std::mem::take(&mut pieces) });
        }
        cur = Piece::start(band, b_max);
    }
    if let Some(done) = cur {
        pieces.push(done);
    }
    if !pieces.is_empty() {
        fit.spans.push(Span { pieces });
    }
    fit
}

/// Validates and converts one host's observations to bands.
pub(crate) fn host_bands(
    host: &str,
    exchanges: &[SyncExchange],
    direct: &[OffsetObservation],
    cfg: &FitConfig,
) -> Result<Vec<Band>> {
    let mut bands = Vec::with_capacity(exchanges.len() + direct.len());
    for e in exchanges {
        if e.host != host {
            return Err(sync_error(host, format!("exchange of host {:?} passed for this host", e.host)));
        }
        bands.push(Band::from_exchange(e, cfg.min_one_way_delay_ns, cfg.timestamp_jitter_ns)?);
    }
    for o in direct {
        if o.host != host {
            return Err(sync_error(host, format!("offset of host {:?} passed for this host", o.host)));
        }
        bands.push(Band::from_offset(o)?);
    }
    Ok(bands)
}
