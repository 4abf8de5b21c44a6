//! Value encoding: exact decimals as (mantissa, scale), everything else as raw floats.
//!
//! A series run whose differences are small or steady (a cumulative counter, a random walk)
//! stores each integer row after the run's first as the zigzag-coded difference from the
//! previous row's mantissa, marked by [`DELTA_CODED`] added to its scale. A gauge that jumps
//! around keeps its values: in byte-stream-split columns, equal high bytes of neighbouring
//! values and recurring values are what zstd compresses best.

use arrow::array::{Array, Float64Array, Float64Builder, Int8Array, Int8Builder, Int64Array, Int64Builder};

/// Largest decimal scale tried (values with more fractional digits are stored as floats).
pub const MAX_SCALE: usize = 12;
const POW10: [f64; MAX_SCALE + 1] = [1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12];
/// Mantissas are kept within ±2^53 so that `m as f64` is exact.
const MAX_MANTISSA: f64 = 9_007_199_254_740_992.0;
/// Added to `value_scale` when `value_int` holds the difference from the previous row's
/// mantissa (the previous row is an integer row of the same run), zigzag-coded (sign in the
/// lowest bit).
pub const DELTA_CODED: i8 = 32;

/// `x` with its sign in the lowest bit, so that small negative numbers have zero high bytes.
#[inline]
fn zigzag(x: i64) -> u64 {
    ((x << 1) ^ (x >> 63)) as u64
}

/// The inverse of [`zigzag`].
#[inline]
fn unzigzag(u: u64) -> i64 {
    ((u >> 1) as i64) ^ -((u & 1) as i64)
}

/// Bytes up to the highest non-zero one.
#[inline]
fn bytes_of(u: u64) -> u64 {
    u64::from((64 - u.leading_zeros()).div_ceil(8))
}

/// Whether a run's integer rows are cheaper as differences. In a byte-stream-split column
/// zstd pays for the bytes that vary: differences win when they are small (a counter, a
/// random walk, a smooth gauge on a high level) or repeat (a steady rate) — at most 70 % of
/// the values' own bytes —, values win for gauges that jump around a level (per-interval
/// counts, utilisation), whose recurring values zstd matches.
fn use_differences(mantissas: &[Option<i64>]) -> bool {
    let (mut values, mut size, mut change) = (0u64, 0u64, 0u64);
    for w in mantissas.windows(3) {
        if let [Some(a), Some(b), Some(c)] = *w {
            let (d1, d2) = (zigzag(b - a), zigzag(c - b));
            values += bytes_of(zigzag(c));
            size += bytes_of(d2);
            change += bytes_of(d1 ^ d2);
        }
    }
    10 * size.min(change) < 7 * values
}

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
        let differences = use_differences(&mantissas);
        let mut previous: Option<i64> = None;
        for (&v, m) in run.iter().zip(&mantissas) {
            match *m {
                Some(m) => {
                    match previous.filter(|_| differences) {
                        Some(p) => {
                            vint.append_value(zigzag(m - p) as i64);
                            vscale.append_value(scale as i8 + DELTA_CODED);
                        }
                        None => {
                            vint.append_value(m);
                            vscale.append_value(scale as i8);
                        }
                    }
                    vfloat.append_null();
                    previous = Some(m);
                }
                None => {
                    vint.append_null();
                    vscale.append_null();
                    vfloat.append_value(v);
                    previous = None;
                }
            }
        }
        start = end;
    }
    (vint.finish(), vscale.finish(), vfloat.finish())
}

/// Decodes the three value columns of one row group back to `f64`.
pub fn decode_values(vint: &Int64Array, vscale: &Int8Array, vfloat: &Float64Array) -> Result<Vec<f64>, String> {
    let mut out = Vec::with_capacity(vint.len());
    ValueDecoder::default().decode(vint, vscale, vfloat, &mut out)?;
    Ok(out)
}

/// Decodes a row group's value columns batch by batch: a difference-coded row may follow the
/// last row of the previous batch.
#[derive(Debug, Default)]
pub struct ValueDecoder {
    previous: Option<i64>,
}

impl ValueDecoder {
    /// Appends the values of the next rows to `out`.
    pub fn decode(
        &mut self,
        vint: &Int64Array,
        vscale: &Int8Array,
        vfloat: &Float64Array,
        out: &mut Vec<f64>,
    ) -> Result<(), String> {
        let n = vint.len();
        if vscale.len() != n || vfloat.len() != n {
            return Err("value columns differ in length".into());
        }
        out.reserve(n);
        // Float rows (a valid `value_float`) cut the rows into integer segments; a segment
        // whose integer columns have no nulls decodes without per-row checks.
        let Some(floats) = vfloat.nulls() else {
            out.extend_from_slice(vfloat.values());
            if n > 0 {
                self.previous = None;
            }
            return Ok(());
        };
        let mut at = 0;
        for (start, end) in floats.valid_slices() {
            self.decode_segment(vint, vscale, at..start, out)?;
            out.extend_from_slice(&vfloat.values()[start..end]);
            self.previous = None;
            at = end;
        }
        self.decode_segment(vint, vscale, at..n, out)
    }

    /// Rows `rows`, none of them a float row.
    fn decode_segment(
        &mut self,
        vint: &Int64Array,
        vscale: &Int8Array,
        rows: std::ops::Range<usize>,
        out: &mut Vec<f64>,
    ) -> Result<(), String> {
        if rows.is_empty() {
            return Ok(());
        }
        let complete = |nulls: Option<&arrow::buffer::NullBuffer>| {
            nulls.is_none_or(|n| n.slice(rows.start, rows.len()).null_count() == 0)
        };
        if complete(vint.nulls()) && complete(vscale.nulls()) {
            let (ints, codes) = (&vint.values()[rows.clone()], &vscale.values()[rows.clone()]);
            return self.decode_integers(ints, codes, rows.start, out);
        }
        for i in rows {
            if !(vint.is_valid(i) && vscale.is_valid(i)) {
                return Err(format!("row {i} has no value"));
            }
            self.decode_integers(&[vint.value(i)], &[vscale.value(i)], i, out)?;
        }
        Ok(())
    }

    /// Integer rows (mantissas or differences with their codes), the first of them row `first`
    /// (for errors), in a loop without validity checks.
    fn decode_integers(&mut self, ints: &[i64], codes: &[i8], first: usize, out: &mut Vec<f64>) -> Result<(), String> {
        let mut previous = self.previous;
        for (k, (&stored, &code)) in ints.iter().zip(codes).enumerate() {
            let i = first + k;
            let (m, scale) = if code >= DELTA_CODED {
                match previous.and_then(|p| p.checked_add(unzigzag(stored as u64))) {
                    Some(m) => (m, code - DELTA_CODED),
                    None => return Err(format!("row {i} is a difference but does not follow an integer row it fits")),
                }
            } else {
                (stored, code)
            };
            let Some(p) = usize::try_from(scale).ok().and_then(|s| POW10.get(s)) else {
                return Err(format!("row {i} has invalid value_scale {code}"));
            };
            out.push(m as f64 / p);
            previous = Some(m);
        }
        self.previous = previous;
        Ok(())
    }
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

    #[test]
    fn zigzag_round_trips() {
        for x in [0, 1, -1, 2, -2, i64::MAX, i64::MIN, 1 << 54, -(1 << 54)] {
            assert_eq!(unzigzag(zigzag(x)), x);
        }
        assert_eq!((zigzag(-1), zigzag(1)), (1, 2));
    }

    #[test]
    fn counters_become_differences_and_gauges_stay_values() {
        let counter: Vec<f64> = (0..50).map(|i| 1e12 + f64::from(i) * 12_500.0 + f64::from(i % 3)).collect();
        let (vint, vscale, _) = encode_values(&[4; 50], &counter);
        assert_eq!(vint.value(0), 1_000_000_000_000);
        assert!((1..50).all(|i| vscale.value(i) == DELTA_CODED), "{vscale:?}");
        assert_eq!(round_trip(&[4; 50], &counter), counter);
        let gauge: Vec<f64> = (0..50).map(|i| f64::from((i * 7919) % 101)).collect();
        let (vint, vscale, _) = encode_values(&[4; 50], &gauge);
        assert!(vscale.values().iter().all(|&s| s == 0));
        assert_eq!(vint.values().iter().map(|&m| m as f64).collect::<Vec<_>>(), gauge);
    }

    #[test]
    fn differences_restart_after_floats_and_carry_across_batches() {
        let values = [100.0, 200.0, 300.0, 0.1 + 0.2, 400.0, 500.0, 600.0, 700.0];
        let (vint, vscale, vfloat) = encode_values(&[1; 8], &values);
        assert_eq!(vscale.value(4), 0, "the row after a float is a value");
        assert_eq!(vscale.value(5), DELTA_CODED);
        let mut decoder = ValueDecoder::default();
        let mut out = Vec::new();
        for (start, len) in [(0, 6), (6, 2)] {
            decoder
                .decode(&vint.slice(start, len), &vscale.slice(start, len), &vfloat.slice(start, len), &mut out)
                .unwrap();
        }
        assert_eq!(out.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), values.map(f64::to_bits));
        // A difference with nothing before it is an error, not a wrong value.
        let e = decode_values(&vint.slice(5, 3), &vscale.slice(5, 3), &vfloat.slice(5, 3)).unwrap_err();
        assert!(e.contains("difference"), "{e}");
        let huge = Int64Array::from(vec![i64::MAX, 2]);
        let codes = Int8Array::from(vec![0, DELTA_CODED]);
        let none = Float64Array::from(vec![None, None]);
        assert!(decode_values(&huge, &codes, &none).is_err());
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
