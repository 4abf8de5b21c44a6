//! Placing irregular `(time, value)` rows onto a regular time grid.
//!
//! The grid step is the mean of the positive spacings between consecutive timestamps that lie
//! within ±50 % of their median (the median alone, for exact grids; the mean absorbs jitter and
//! leaves gaps out); the grid starts at the earliest timestamp. Each row goes to the nearest grid slot, rows that
//! share a slot are averaged, and empty slots are gaps (`NaN`). Inputs produced by time
//! bucketing land exactly on the grid.

use crate::error::{Error, Result};

/// How many grid slots per input row are accepted before the grid is called too sparse.
pub const MAX_SLOTS_PER_ROW: u64 = 8;

/// Slack (in slots) added to the sparsity limit so short series with a gap still fit.
pub const SLOT_SLACK: u64 = 1024;

/// A regular time grid: slot `i` is at `start + i * step` nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grid {
    /// Time of slot 0 (ns).
    pub start: i64,
    /// Spacing between slots (ns, > 0).
    pub step: i64,
    /// Number of slots.
    pub slots: usize,
}

/// A grid and the per-slot means of `x` and `y` (`NaN` for empty slots).
pub type SnappedPairs = (Grid, Vec<f64>, Vec<f64>);

/// Infers the grid step from timestamps sorted ascending: the mean of the positive differences
/// between consecutive timestamps that are within ±50 % of their median. `None` when fewer
/// than two distinct timestamps exist.
pub fn infer_step(sorted_times: &[i64]) -> Option<i64> {
    let mut diffs: Vec<i64> = sorted_times.windows(2).map(|w| w[1].saturating_sub(w[0])).filter(|d| *d > 0).collect();
    if diffs.is_empty() {
        return None;
    }
    let mid = diffs.len() / 2;
    let (_, m, _) = diffs.select_nth_unstable(mid);
    let m = *m;
    // Jittered grids: the mean of the spacings near the median is the step (a median alone
    // is biased by the jitter pattern); gaps (about 2 steps or more) are left out.
    let (lo, hi) = (m / 2, m + m / 2);
    let (mut sum, mut count) = (0i128, 0i128);
    for d in &diffs {
        if *d >= lo && *d <= hi {
            sum += i128::from(*d);
            count += 1;
        }
    }
    let mean = (sum + count / 2) / count.max(1);
    Some(i64::try_from(mean).unwrap_or(m).max(1))
}

/// Places paired rows onto the inferred grid. Rows need not be sorted. Rows where `x` or `y`
/// is not finite are ignored. Returns the grid and the per-slot means of `x` and `y`
/// (`NaN` for empty slots); `None` when no row remains.
///
/// Fails with [`Error::GridTooSparse`] when the grid would need more than
/// `MAX_SLOTS_PER_ROW * rows + SLOT_SLACK` slots (timestamps too irregular or a huge gap).
pub fn snap_pairs(times: &[i64], x: &[f64], y: &[f64]) -> Result<Option<SnappedPairs>> {
    let n = times.len().min(x.len()).min(y.len());
    let (times, x, y) = (&times[..n], &x[..n], &y[..n]);
    // Fast path: rows from the store arrive in time order without duplicates; then no copy
    // and no sort is needed. Otherwise filter, and sort by (time, x, y) so that rows sharing
    // a slot are summed in an order independent of how partial states were merged.
    let owned: (Vec<i64>, Vec<f64>, Vec<f64>);
    let (ts, xs, ys) = if times.windows(2).all(|w| w[0] < w[1]) && x.iter().chain(y).all(|v| v.is_finite()) {
        (times, x, y)
    } else {
        let mut rows: Vec<(i64, f64, f64)> = times
            .iter()
            .zip(x)
            .zip(y)
            .filter(|((_, a), b)| a.is_finite() && b.is_finite())
            .map(|((t, a), b)| (*t, *a, *b))
            .collect();
        rows.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)).then(a.2.total_cmp(&b.2)));
        owned = (
            rows.iter().map(|r| r.0).collect(),
            rows.iter().map(|r| r.1).collect(),
            rows.iter().map(|r| r.2).collect(),
        );
        (&owned.0[..], &owned.1[..], &owned.2[..])
    };
    let (Some(&start), Some(&end)) = (ts.first(), ts.last()) else {
        return Ok(None);
    };
    let step = infer_step(ts).unwrap_or(1);
    let span = (end as i128 - start as i128) as u128;
    let step_u = step as u128;
    let half = (step / 2) as u128;
    let last_slot = (span + half) / step_u;
    let limit = MAX_SLOTS_PER_ROW * ts.len() as u64 + SLOT_SLACK;
    if last_slot >= limit as u128 {
        return Err(Error::GridTooSparse { rows: ts.len(), step, limit });
    }
    let slots = last_slot as usize + 1;
    let mut sx = vec![0.0; slots];
    let mut sy = vec![0.0; slots];
    let mut count = vec![0u32; slots];
    // Rows are sorted, so the slot only moves forward: compare against the next slot's lower
    // edge instead of dividing per row (a division only to jump over a long gap).
    let mut slot = 0usize;
    let mut edge = step_u; // (slot + 1) * step, compared with offset + half
    for ((&t, &a), &b) in ts.iter().zip(xs).zip(ys) {
        let pos = (t as i128 - start as i128) as u128 + half;
        if pos >= edge {
            if pos >= edge + 4 * step_u {
                slot = (pos / step_u) as usize;
                edge = (slot as u128 + 1) * step_u;
            } else {
                while pos >= edge {
                    slot += 1;
                    edge += step_u;
                }
            }
        }
        sx[slot] += a;
        sy[slot] += b;
        count[slot] += 1;
    }
    for ((a, b), c) in sx.iter_mut().zip(sy.iter_mut()).zip(&count) {
        if *c == 0 {
            *a = f64::NAN;
            *b = f64::NAN;
        } else if *c > 1 {
            *a /= f64::from(*c);
            *b /= f64::from(*c);
        }
    }
    Ok(Some((Grid { start, step, slots }, sx, sy)))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn median_step_and_slot_placement_with_jitter_and_gaps() {
        let times = [0, 10, 21, 29, 60, 70];
        let x = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let (grid, sx, _) = snap_pairs(&times, &x, &x).unwrap().unwrap();
        assert_eq!(grid, Grid { start: 0, step: 10, slots: 8 });
        assert_eq!(&sx[..4], &[1.0, 2.0, 3.0, 4.0]);
        assert!(sx[4].is_nan() && sx[5].is_nan());
        assert_eq!(&sx[6..], &[5.0, 6.0]);
    }

    #[test]
    fn jittered_grid_recovers_the_true_step() {
        let times: Vec<i64> = (0..301).map(|i| i * 1_000 + (i % 3) * 100).collect();
        assert_eq!(infer_step(&times), Some(1_000));
        let mut gappy: Vec<i64> = (0..100).map(|i| i * 10).collect();
        gappy.extend((200..300).map(|i| i * 10));
        assert_eq!(infer_step(&gappy), Some(10));
    }

    #[test]
    fn duplicates_are_averaged_and_non_finite_rows_dropped() {
        let times = [20, 0, 10, 10, 30];
        let x = [3.0, 1.0, 2.0, 4.0, f64::NAN];
        let y = [0.0, 0.0, 0.0, 0.0, 0.0];
        let (grid, sx, _) = snap_pairs(&times, &x, &y).unwrap().unwrap();
        assert_eq!(grid.slots, 3);
        assert_eq!(sx, vec![1.0, 3.0, 3.0]);
    }

    #[test]
    fn single_row_is_one_slot_and_empty_is_none() {
        let (grid, _, _) = snap_pairs(&[5], &[1.0], &[2.0]).unwrap().unwrap();
        assert_eq!(grid.slots, 1);
        assert!(snap_pairs(&[5], &[f64::INFINITY], &[2.0]).unwrap().is_none());
    }

    #[test]
    fn sparse_grid_is_rejected() {
        let times = [0, 1, 2, 3, 1_000_000_000];
        let v = [0.0; 5];
        let err = snap_pairs(&times, &v, &v).unwrap_err();
        assert!(matches!(err, Error::GridTooSparse { rows: 5, step: 1, .. }), "{err}");
    }

    proptest::proptest! {
        /// The forward-walking slot assignment equals `round((t − start) / step)` by division,
        /// and a shuffled copy of the rows (the sorting path) gives the same grid.
        #[test]
        fn slot_walk_equals_division_and_order_does_not_matter(
            gaps in proptest::collection::vec((1i64..3_000, 0u8..20), 1..300),
            seed in 0u64..1_000,
        ) {
            let mut t = -5_000i64;
            let mut times = Vec::new();
            for (d, g) in &gaps {
                t += if *g == 0 { d * 20 } else { *d };
                times.push(t);
            }
            let x: Vec<f64> = (0..times.len()).map(|i| i as f64).collect();
            let (grid, sx, sy) = snap_pairs(&times, &x, &x).unwrap().unwrap();
            let mut expect = vec![(0.0, 0u32); grid.slots];
            for (&t, &v) in times.iter().zip(&x) {
                let slot = ((t - grid.start + grid.step / 2) / grid.step) as usize;
                expect[slot].0 += v;
                expect[slot].1 += 1;
            }
            for (i, (sum, c)) in expect.iter().enumerate() {
                if *c == 0 {
                    proptest::prop_assert!(sx[i].is_nan());
                } else {
                    proptest::prop_assert_eq!(sx[i], sum / f64::from(*c));
                }
            }
            let mut order: Vec<usize> = (0..times.len()).collect();
            let mut r = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            for i in (1..order.len()).rev() {
                r ^= r << 13;
                r ^= r >> 7;
                r ^= r << 17;
                order.swap(i, (r % (i as u64 + 1)) as usize);
            }
            let st: Vec<i64> = order.iter().map(|&i| times[i]).collect();
            let sv: Vec<f64> = order.iter().map(|&i| x[i]).collect();
            let (g2, sx2, sy2) = snap_pairs(&st, &sv, &sv).unwrap().unwrap();
            proptest::prop_assert_eq!(grid, g2);
            for ((a, b), c) in sx.iter().zip(&sx2).zip(&sy2) {
                proptest::prop_assert!(a == b || (a.is_nan() && b.is_nan()));
                proptest::prop_assert!(a == c || (a.is_nan() && c.is_nan()));
            }
            proptest::prop_assert_eq!(sx.len(), sy.len());
        }
    }
}
