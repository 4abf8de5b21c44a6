//! Value encoding: exact decimals as (mantissa, scale), everything else as raw floats.

use arrow::array::{Array, Float64Array, Float64Builder, Int8Array, Int8Builder, Int64Array, Int64Builder};

/// Largest decimal scale tried (values with more fractional digits are stored as floats).
pub const MAX_SCALE: usize = 12;
const POW10: [f64; MAX_SCALE + 1] = [1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12];
/// Mantissas are kept within ±2^53 so that `m as f64` is exact.
const MAX_MANTISSA: f64 = 9_007_199_254_740_992.0;

/// The mantissa of `v` at `scale`, if `mantissa / 10^scale` reproduces `v` bit for bit.
#[inline]
fn mantissa_at(v: f64, scale: usize) -> Option<i64> {
    if v.to_bits() == (-0.0f64).to_bits() {
        return None; // the integer path would lose the sign of zero
    }
    let p = POW10[scale];
    let m = (v * p).round();
    if m.abs() <= MAX_MANTISSA && (m / p).to_bits() == v.to_bits() { Some(m as i64) } else { None }
}

/// The smallest scale at which `v` is an exact decimal.
#[inline]
fn min_scale(v: f64) -> Option<usize> {
    if !v.is_finite() {
        return None;
    }
    (0..=MAX_SCALE).find(|&k| mantissa_at(v, k).is_some())
}

/// Encodes the values of rows sorted by series: each series run gets one scale (the largest
/// scale its decimal values need), so that consecutive mantissas of a run delta-compress.
///
/// One pass per run: mantissas are computed at the running scale; when a value needs a larger
/// scale, the earlier mantissas are multiplied up. That is exact: `m·10^d / 10^(k)` and
/// `m / 10^(k−d)` are the same rational, and IEEE division rounds it the same way.
pub fn encode_values(series: &[u32], values: &[f64]) -> (Int64Array, Int8Array, Float64Array) {
    let n = values.len();
    let mut vint = Int64Builder::with_capacity(n);
    let mut vscale = Int8Builder::with_capacity(n);
    let mut vfloat = Float64Builder::with_capacity(n);
    let mut mantissas: Vec<Option<i64>> = Vec::new();
    let mut start = 0;
    while start < n {
        let mut end = start + 1;
        while end < n && series[end] == series[start] {
            end += 1;
        }
        let run = &values[start..end];
        mantissas.clear();
        let mut scale = 0usize;
        for &v in run {
            if let Some(m) = mantissa_at(v, scale) {
                mantissas.push(Some(m));
                continue;
            }
            match min_scale(v) {
                Some(k) if k > scale => {
                    let factor = 10i64.pow((k - scale) as u32);
                    for m in mantissas.iter_mut() {
                        *m = m.and_then(|m| m.checked_mul(factor)).filter(|m| m.unsigned_abs() <= MAX_MANTISSA as u64);
                    }
                    scale = k;
                    mantissas.push(mantissa_at(v, k));
                }
                _ => mantissas.push(None),
            }
        }
        for (&v, m) in run.iter().zip(&mantissas) {
            match m {
                Some(m) => {
                    vint.append_value(*m);
                    vscale.append_value(scale as i8);
                    vfloat.append_null();
                }
                None => {
                    vint.append_null();
                    vscale.append_null();
                    vfloat.append_value(v);
                }
            }
        }
        start = end;
    }
    (vint.finish(), vscale.finish(), vfloat.finish())
}

/// Decodes the three value columns back to `f64`.
pub fn decode_values(vint: &Int64Array, vscale: &Int8Array, vfloat: &Float64Array) -> Result<Vec<f64>, String> {
    let n = vint.len();
    if vscale.len() != n || vfloat.len() != n {
        return Err("value columns differ in length".into());
    }
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        if vfloat.is_valid(i) {
            out.push(vfloat.value(i));
        } else if vint.is_valid(i) && vscale.is_valid(i) {
            let scale = vscale.value(i);
            let p = usize::try_from(scale)
                .ok()
                .and_then(|s| POW10.get(s))
                .ok_or_else(|| format!("row {i} has invalid value_scale {scale}"))?;
            out.push(vint.value(i) as f64 / p);
        } else {
            return Err(format!("row {i} has no value"));
        }
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn round_trip(series: &[u32], values: &[f64]) -> Vec<f64> {
        let (a, b, c) = encode_values(series, values);
        decode_values(&a, &b, &c).unwrap()
    }

    #[test]
    fn decimals_become_mantissas() {
        let values = [42.7, 43.0, 43.15, -0.5];
        let (vint, vscale, vfloat) = encode_values(&[1, 1, 1, 1], &values);
        assert_eq!(vfloat.null_count(), 4);
        assert_eq!(vint.values().to_vec(), vec![4270, 4300, 4315, -50]);
        assert!(vscale.values().iter().all(|&s| s == 2));
    }

    #[test]
    fn specials_and_full_precision_are_floats() {
        let values = [f64::NAN, f64::INFINITY, -0.0, 0.1 + 0.2, 1e300, 5.0];
        let (vint, _, vfloat) = encode_values(&[0; 6], &values);
        assert_eq!(vint.null_count(), 5);
        assert_eq!(vfloat.null_count(), 1);
        let back = round_trip(&[0; 6], &values);
        for (a, b) in values.iter().zip(&back) {
            assert_eq!(a.to_bits(), b.to_bits());
        }
    }

    proptest! {
        #[test]
        fn bit_exact_round_trip(values in proptest::collection::vec(any::<f64>(), 0..200),
                                decimals in proptest::collection::vec(-1_000_000i64..1_000_000, 0..200),
                                scale in 0u32..6) {
            let mut all: Vec<f64> = values;
            all.extend(decimals.iter().map(|&m| m as f64 / 10f64.powi(scale as i32)));
            let series: Vec<u32> = (0..all.len() as u32).map(|i| i / 37).collect();
            let back = round_trip(&series, &all);
            for (a, b) in all.iter().zip(&back) {
                prop_assert_eq!(a.to_bits(), b.to_bits());
            }
        }
    }
}
