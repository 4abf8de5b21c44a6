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
pub(super) fn unzigzag(u: u64) -> i64 {
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
    /// (for errors). Rows come in runs of one code (a series run has one scale, and after its
    /// first row either values or differences throughout), so each run of equal codes is
    /// decoded in one loop without a branch per row, and divided by its power of ten in a
    /// second one (none for scale 0: counters, byte and packet counts).
    fn decode_integers(&mut self, ints: &[i64], codes: &[i8], first: usize, out: &mut Vec<f64>) -> Result<(), String> {
        let mut previous = self.previous;
        let mut at = 0;
        while let Some(&code) = codes.get(at) {
            let end = at + same_prefix(&codes[at..], code);
            let run = &ints[at..end];
            let delta = code >= DELTA_CODED;
            let scale = if delta { code - DELTA_CODED } else { code };
            let Some(&p) = usize::try_from(scale).ok().and_then(|s| POW10.get(s)) else {
                return Err(format!("row {} has invalid value_scale {code}", first + at));
            };
            let from = out.len();
            if delta {
                let Some(start) = previous else {
                    return Err(format!("row {} is a difference but does not follow an integer row", first + at));
                };
                // An overflow is noted and reported after the run.
                let (mut m, mut overflow) = (start, false);
                out.extend(run.iter().map(|&stored| {
                    let (next, o) = m.overflowing_add(unzigzag(stored as u64));
                    overflow |= o;
                    m = next;
                    m as f64
                }));
                if overflow {
                    let mut m = start;
                    let k = run.iter().position(|&d| m.checked_add(unzigzag(d as u64)).inspect(|&n| m = n).is_none());
                    return Err(format!(
                        "row {} is a difference that does not fit the previous row",
                        first + at + k.unwrap_or(0)
                    ));
                }
                previous = Some(m);
            } else {
                out.extend(run.iter().map(|&m| m as f64));
                previous = run.last().copied();
            }
            // The same two operations as `m as f64 / p` in one loop (the conversion is exact
            // for the writer's mantissas, at most 2^53), but the division alone vectorises.
            if scale != 0 {
                out[from..].iter_mut().for_each(|v| *v /= p);
            }
            at = end;
        }
        self.previous = previous;
        Ok(())
    }
}

/// How many leading bytes of `codes` equal `code`, compared eight at a time.
#[inline]
fn same_prefix(codes: &[i8], code: i8) -> usize {
    let word = u64::from_ne_bytes([code as u8; 8]);
    let mut chunks = codes.chunks_exact(8);
    let mut at = 0;
    for chunk in chunks.by_ref() {
        let bytes: [u8; 8] = std::array::from_fn(|i| chunk[i] as u8);
        let differ = u64::from_ne_bytes(bytes) ^ word;
        if differ != 0 {
            let first = if cfg!(target_endian = "little") { differ.trailing_zeros() } else { differ.leading_zeros() };
            return at + first as usize / 8;
        }
        at += 8;
    }
    at + chunks.remainder().iter().take_while(|&&c| c == code).count()
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
    fn decimal_differences_and_mixed_scales_decode_bit_exactly() {
        // Two series: a decimal random walk (differences at scale 2), then integer values.
        let walk: Vec<f64> = (0..40).map(|i| f64::from(123_456 + i % 7 + 25 * i) / 100.0).collect();
        let levels: Vec<f64> = (0..40).map(|i| f64::from((i * 7919) % 101)).collect();
        let values: Vec<f64> = walk.iter().chain(&levels).copied().collect();
        let series: Vec<u32> = (0..80).map(|i| i / 40).collect();
        let (vint, vscale, vfloat) = encode_values(&series, &values);
        assert_eq!(vscale.value(0), 2);
        assert!((1..40).all(|i| vscale.value(i) == 2 + DELTA_CODED), "{vscale:?}");
        assert!((40..80).all(|i| vscale.value(i) == 0), "{vscale:?}");
        let back = decode_values(&vint, &vscale, &vfloat).unwrap();
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&back), bits(&values));
        // A code outside the scales, and an overflowing difference, name their row.
        let none = Float64Array::from(vec![None; 11]);
        let mut codes = vec![0i8; 11];
        codes[10] = 13;
        let e = decode_values(&Int64Array::from(vec![1; 11]), &Int8Array::from(codes), &none).unwrap_err();
        assert!(e.contains("row 10") && e.contains("value_scale 13"), "{e}");
        let mut ints = vec![2i64; 11];
        ints[0] = i64::MAX - 9; // row 9 reaches i64::MAX, row 10 overflows
        let codes: Vec<i8> = (0..11).map(|i| if i == 0 { 0 } else { DELTA_CODED }).collect();
        let e = decode_values(&Int64Array::from(ints), &Int8Array::from(codes), &none).unwrap_err();
        assert!(e.contains("row 10") && e.contains("difference"), "{e}");
    }

    #[test]
    fn same_prefix_counts_equal_leading_codes() {
        for len in 0..40usize {
            for cut in 0..=len {
                let codes: Vec<i8> = (0..len).map(|i| if i < cut { -3 } else { 7 }).collect();
                assert_eq!(same_prefix(&codes, -3), cut, "len {len} cut {cut}");
            }
        }
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
            // A random walk of decimals: runs stored as differences at this scale.
            let mut walk = 1_000_000i64;
            all.extend(decimals.iter().map(|&m| {
                walk += m % 1000;
                walk as f64 / 10f64.powi(scale as i32)
            }));
            let series: Vec<u32> = (0..all.len() as u32).map(|i| i / 37).collect();
            let back = round_trip(&series, &all);
            for (a, b) in all.iter().zip(&back) {
                prop_assert_eq!(a.to_bits(), b.to_bits());
            }
        }
    }
}
