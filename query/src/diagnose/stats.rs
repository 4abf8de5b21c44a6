//! Small robust statistics used by the diagnosis.

/// Median of the finite values (NaN when none). Reorders `scratch`.
pub(crate) fn median(values: impl IntoIterator<Item = f64>, scratch: &mut Vec<f64>) -> f64 {
    scratch.clear();
    scratch.extend(values.into_iter().filter(|v| v.is_finite()));
    median_in_place(scratch)
}

/// Median of `v` (finite values only; NaN when empty), reordering it.
pub(crate) fn median_in_place(v: &mut [f64]) -> f64 {
    match v {
        [] => return f64::NAN,
        [one] => return *one,
        _ => {}
    }
    let len = v.len();
    let mid = len / 2;
    let (lower, m, _) = v.select_nth_unstable_by(mid, f64::total_cmp);
    let hi = *m;
    if len % 2 == 1 {
        return hi;
    }
    let lo = lower.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    lo / 2.0 + hi / 2.0
}

/// `q`-quantile (nearest rank) of the finite values; NaN when none. Reorders `scratch`.
pub(crate) fn quantile(values: impl IntoIterator<Item = f64>, q: f64, scratch: &mut Vec<f64>) -> f64 {
    scratch.clear();
    scratch.extend(values.into_iter().filter(|v| v.is_finite()));
    if scratch.is_empty() {
        return f64::NAN;
    }
    let k = ((scratch.len() - 1) as f64 * q.clamp(0.0, 1.0)).round() as usize;
    let (_, m, _) = scratch.select_nth_unstable_by(k, f64::total_cmp);
    *m
}

/// Robust scale: 1.4826 × median absolute deviation from `center`.
pub(crate) fn mad(values: impl IntoIterator<Item = f64>, center: f64, scratch: &mut Vec<f64>) -> f64 {
    1.4826 * median(values.into_iter().map(|v| (v - center).abs()), scratch)
}

/// Mean of the finite values (NaN when none).
pub(crate) fn mean(values: impl IntoIterator<Item = f64>) -> f64 {
    let (mut s, mut n) = (0.0, 0usize);
    for v in values.into_iter().filter(|v| v.is_finite()) {
        s += v;
        n += 1;
    }
    if n == 0 { f64::NAN } else { s / n as f64 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_quantiles_and_mad() {
        let mut s = Vec::new();
        assert_eq!(median([3.0, 1.0, 2.0], &mut s), 2.0);
        assert_eq!(median([4.0, 1.0, 2.0, 3.0], &mut s), 2.5);
        assert!(median([f64::NAN], &mut s).is_nan());
        assert_eq!(quantile([1.0, 2.0, 3.0, 4.0, 5.0], 1.0, &mut s), 5.0);
        assert_eq!(quantile([1.0, 2.0, 3.0, 4.0, 5.0], 0.0, &mut s), 1.0);
        assert!((mad([1.0, 2.0, 3.0], 2.0, &mut s) - 1.4826).abs() < 1e-12);
        assert_eq!(mean([1.0, f64::NAN, 3.0]), 2.0);
    }
}
