//! Unit and property tests of the DDSketch: merge laws, error bound, special values, decoding.

use super::*;
use proptest::prelude::*;

fn sketch_of(values: &[f64]) -> DdSketch {
    let mut s = DdSketch::new(Mapping::new(DEFAULT_ALPHA).unwrap());
    values.iter().for_each(|v| s.insert(*v));
    s
}

fn exact(values: &[f64], q: f64) -> f64 {
    let mut v = values.to_vec();
    crate::functions::quantile_cont::quantile_of(&mut v, q).unwrap()
}

#[test]
fn empty_sketch_has_no_quantile_and_round_trips() {
    let s = sketch_of(&[]);
    assert_eq!(s.quantile(0.5), None);
    assert_eq!(DdSketch::decode(&s.encode()).unwrap(), s);
}

#[test]
fn special_values_order_like_quantile_cont() {
    let s = sketch_of(&[f64::NAN, 1.0, f64::NEG_INFINITY, f64::INFINITY, 0.0]);
    assert_eq!(s.quantile(0.0), Some(f64::NEG_INFINITY));
    assert_eq!(s.quantile(0.25), Some(0.0));
    assert!((s.quantile(0.5).unwrap() - 1.0).abs() <= DEFAULT_ALPHA);
    assert_eq!(s.quantile(0.75), Some(f64::INFINITY));
    assert!(s.quantile(1.0).unwrap().is_nan());
}

#[test]
fn single_value_is_exact_through_clamping() {
    let s = sketch_of(&[3.7]);
    assert_eq!(s.quantile(0.99), Some(3.7));
}

#[test]
fn wide_range_collapses_lowest_bins() {
    let s = sketch_of(&[1e-300, 1e300, 1.0]);
    assert!(s.positive.bins.len() <= MAX_BINS);
    assert_eq!(s.count(), 3);
    assert_eq!(s.quantile(1.0), Some(1e300));
}

#[test]
fn state_is_compact() {
    let values: Vec<f64> = (0..10_000).map(|i| 1.0 + f64::from(i % 997) / 10.0).collect();
    // 1 .. 100.6 spans about 230 bins of 2 or 3 bytes each.
    let len = sketch_of(&values).encode().len();
    assert!(len < 800, "{len} bytes");
}

#[test]
fn removal_keeps_bounds_sound() {
    let mut s = sketch_of(&[1.0, 2.0, 4.0]);
    s.remove(1.0);
    let min = s.quantile(0.0).unwrap();
    assert!((min - 2.0).abs() <= 2.0 * DEFAULT_ALPHA, "{min}");
    let decoded = DdSketch::decode(&s.encode()).unwrap();
    let min = decoded.quantile(0.0).unwrap();
    assert!((min - 2.0).abs() <= 2.0 * DEFAULT_ALPHA, "{min}");
    assert_eq!(decoded.quantile(1.0), Some(4.0));
}

#[test]
fn decode_rejects_garbage() {
    assert_eq!(DdSketch::decode(&[]), Err(SketchError::Truncated));
    assert_eq!(DdSketch::decode(&[9]), Err(SketchError::UnknownVersion(9)));
    let mut bytes = sketch_of(&[1.0, 2.0]).encode();
    bytes.push(0);
    assert_eq!(DdSketch::decode(&bytes), Err(SketchError::TrailingBytes(1)));
    let bytes = sketch_of(&[1.0, 2.0]).encode();
    assert_eq!(DdSketch::decode(&bytes[..bytes.len() - 1]), Err(SketchError::Truncated));
}

#[test]
fn merge_rejects_different_alpha() {
    let mut a = DdSketch::new(Mapping::new(0.01).unwrap());
    let b = DdSketch::new(Mapping::new(0.02).unwrap());
    assert_eq!(a.merge(&b), Err(SketchError::AlphaMismatch(0.01, 0.02)));
}

fn value() -> impl Strategy<Value = f64> {
    prop_oneof![
        8 => -1e6f64..1e6,
        2 => (0.0f64..20.0).prop_map(|e| 10f64.powf(e - 10.0)),
        1 => Just(0.0),
        1 => prop::sample::select(vec![f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -1e-310]),
    ]
}

proptest! {
    #[test]
    fn merge_of_parts_equals_sketch_of_whole(
        values in prop::collection::vec(value(), 0..300),
        cuts in prop::collection::vec(0usize..300, 0..5),
    ) {
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(values.len())).collect();
        cuts.sort_unstable();
        let mut parts = Vec::new();
        let mut start = 0;
        for c in cuts.into_iter().chain([values.len()]) {
            parts.push(sketch_of(&values[start..c]));
            start = c;
        }
        let whole = sketch_of(&values);
        // Left fold, right fold and through the binary state all equal the whole.
        let mut left = sketch_of(&[]);
        for p in &parts { left.merge(&DdSketch::decode(&p.encode()).unwrap()).unwrap(); }
        let mut right = sketch_of(&[]);
        for p in parts.iter().rev() { right.merge(p).unwrap(); }
        prop_assert_eq!(left.encode(), whole.encode());
        prop_assert_eq!(right.encode(), whole.encode());
    }

    #[test]
    fn quantiles_stay_within_relative_error(
        values in prop::collection::vec(0.001f64..1e9, 1..400),
        q in 0.0f64..=1.0,
    ) {
        let s = sketch_of(&values);
        let est = s.quantile(q).unwrap();
        let truth = exact(&values, q);
        prop_assert!((est - truth).abs() <= DEFAULT_ALPHA * truth.abs() * (1.0 + 1e-9),
            "q={} est={} exact={}", q, est, truth);
    }

    #[test]
    fn negative_quantiles_stay_within_relative_error(
        values in prop::collection::vec(-1e9f64..-0.001, 1..400),
        q in 0.0f64..=1.0,
    ) {
        let s = sketch_of(&values);
        let est = s.quantile(q).unwrap();
        let truth = exact(&values, q);
        prop_assert!((est - truth).abs() <= DEFAULT_ALPHA * truth.abs() * (1.0 + 1e-9));
    }

    #[test]
    fn decode_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        let _ = DdSketch::decode(&bytes);
    }
}

/// A state with `zero` zeros, bounds `min`/`max` and one positive bin of `count` (QA pass
/// 18: the decoder took counts summing past u64, and a minimum above the maximum).
fn state(zero: u64, min: f64, max: f64, count: u64) -> Vec<u8> {
    let mut out = vec![VERSION];
    out.extend_from_slice(&DEFAULT_ALPHA.to_le_bytes());
    for c in [zero, 0, 0, 0] {
        put_varint(&mut out, c);
    }
    out.extend_from_slice(&min.to_le_bytes());
    out.extend_from_slice(&max.to_le_bytes());
    put_varint(&mut out, 1);
    put_varint(&mut out, zigzag(10));
    put_varint(&mut out, count);
    put_varint(&mut out, 0);
    out
}

#[test]
fn decode_rejects_counts_past_2_62_and_inverted_bounds() {
    assert!(DdSketch::decode(&state(0, 1.0, 1.1, 5)).is_ok());
    assert_eq!(DdSketch::decode(&state(0, 1.0, 1.1, MAX_COUNT + 1)), Err(SketchError::CountOutOfRange));
    assert_eq!(DdSketch::decode(&state(u64::MAX, 1.0, 1.1, u64::MAX)), Err(SketchError::CountOutOfRange));
    assert_eq!(DdSketch::decode(&state(0, 5.0, 1.0, 1)), Err(SketchError::MinAboveMax(5.0, 1.0)));
    // Two states within the limit whose merge is not.
    let mut a = DdSketch::decode(&state(0, 1.0, 1.1, MAX_COUNT / 2 + 1)).unwrap();
    let b = DdSketch::decode(&state(0, 1.0, 1.1, MAX_COUNT / 2)).unwrap();
    assert_eq!(a.merge(&b), Err(SketchError::CountOutOfRange));
    let c = DdSketch::decode(&state(0, 1.0, 1.1, MAX_COUNT / 2 - 1)).unwrap();
    assert_eq!(a.merge(&c), Ok(()));
    assert_eq!(a.count(), MAX_COUNT);
}

/// At the smallest α a store keeps the bins of a factor of [`MIN_SPAN`] (QA pass 23b: with
/// 32,768 bins at α = 0.0001 the median of (1, 2, 3, 100000) came out as 142.5, not 2.5).
#[test]
fn small_alpha_keeps_a_wide_span() {
    let mapping = Mapping::new(MIN_ALPHA).unwrap();
    assert!(mapping.max_bins() > MAX_BINS);
    assert_eq!(Mapping::new(DEFAULT_ALPHA).unwrap().max_bins(), MAX_BINS);
    let mut s = DdSketch::new(mapping);
    for v in [1.0, 2.0, 3.0, 100_000.0, 1e-3, 1e8] {
        s.insert(v);
    }
    // Sorted: 1e-3, 1, 2, 3, 1e5, 1e8; the second order statistic is 1.
    let second = s.quantile(0.2).unwrap();
    assert!((second - 1.0).abs() <= MIN_ALPHA * 1.0 + 1e-12, "{second}");
    let low = s.quantile(0.0).unwrap();
    assert_eq!(low, 1e-3);
}
