//! Value statistics per series run, so that a filter on values (`value > 90`) skips the runs
//! and row groups that cannot hold a matching value.
//!
//! Parquet's own statistics cannot serve: values are stored coded (integer mantissas with a
//! scale, counters as differences; see `codec.rs`), so the coded columns' minimum and maximum
//! say nothing about the values. The writer records, for every run of one series in a row
//! group, the smallest and largest *decoded* value, in the file's key-value metadata under
//! [`KEY`] (older files have none and are never pruned by value). A row group of short runs
//! (fewer than [`MIN_ROWS_PER_RUN`] rows on average) gets one range for all its rows instead.
//!
//! Ranges are compared in the total order of `f64::total_cmp` (`-0.0 < 0.0`, NaN above
//! `+inf`) and hold under IEEE comparison too, where the two zeros are equal (DataFusion's
//! filters treat `-0.0 >= 0.0` as true): a range that reaches a zero of either sign covers both
//! zeros, in a run's range and in a wanted range alike. A run holding NaN records
//! `[-inf, +inf]`, which no pushed-down bound excludes (bounds are never NaN and never beyond
//! the infinities), so it is always read. Bounds are rounded outward to `f32` (half the bytes;
//! a run's range only has to contain its values).

use base64::Engine as _;

/// The key-value metadata key of a data file's value statistics.
pub const KEY: &str = "lockstep.value_runs";

/// Format version of the encoded statistics.
const VERSION: u8 = 1;

/// Bytes per run: rows (u32), lower bound (f32), upper bound (f32).
const RUN_BYTES: usize = 12;

/// Fewest rows per run, on average over a row group, for which runs get ranges of their own;
/// a row group of shorter runs gets one range (12 bytes a run would be a sizeable part of a
/// small store, and selecting short runs saves little decoding).
const MIN_ROWS_PER_RUN: usize = 1024;

/// The value ranges of one row group: one per series run, or one for the whole group.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupRanges {
    /// Whether `runs` are the group's series runs (else one range covering every row).
    pub per_run: bool,
    /// The ranges, in row order.
    pub runs: Vec<RunRange>,
}

/// One run of one series in a row group: its length and a range holding all its values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunRange {
    /// Rows of the run.
    pub rows: u32,
    /// At most the smallest value.
    pub lo: f32,
    /// At least the largest value.
    pub hi: f32,
}

/// Values a reader wants, an inclusive range in total order; a scan may drop a run only when
/// no value of it can lie inside. Never NaN (a filter against NaN is not pushed down).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ValueRange {
    /// Smallest wanted value.
    pub lo: f64,
    /// Largest wanted value.
    pub hi: f64,
}

impl ValueRange {
    /// `[lo, hi]` (a zero bound covers both zeros); `None` if either bound is NaN.
    pub fn new(lo: f64, hi: f64) -> Option<Self> {
        (!lo.is_nan() && !hi.is_nan()).then_some(ValueRange { lo: zeros_down(lo), hi: zeros_up(hi) })
    }

    /// Every value.
    pub const ALL: ValueRange = ValueRange { lo: f64::NEG_INFINITY, hi: f64::INFINITY };

    /// The values above `x` (`value > x`), `None` if `x` is NaN.
    pub fn above(x: f64) -> Option<Self> {
        // The next value up in the total order: +0.0 follows -0.0 (`next_up` skips it).
        let lo = if x == 0.0 && x.is_sign_negative() { 0.0 } else { x.next_up() };
        Self::new(lo, f64::INFINITY)
    }

    /// The values below `x` (`value < x`), `None` if `x` is NaN.
    pub fn below(x: f64) -> Option<Self> {
        let hi = if x == 0.0 && x.is_sign_positive() { -0.0 } else { x.next_down() };
        Self::new(f64::NEG_INFINITY, hi)
    }

    /// The values in both ranges.
    pub fn intersect(self, other: ValueRange) -> ValueRange {
        let lo = if self.lo.total_cmp(&other.lo).is_ge() { self.lo } else { other.lo };
        let hi = if self.hi.total_cmp(&other.hi).is_le() { self.hi } else { other.hi };
        ValueRange { lo, hi }
    }

    /// Whether no value lies inside.
    pub fn is_empty(&self) -> bool {
        self.lo.total_cmp(&self.hi).is_gt()
    }

    /// Whether a run with range `run` may hold a wanted value.
    pub fn may_hold(&self, run: &RunRange) -> bool {
        if run.lo.is_nan() || run.hi.is_nan() {
            return true;
        }
        f64::from(run.hi).total_cmp(&self.lo).is_ge() && f64::from(run.lo).total_cmp(&self.hi).is_le()
    }

    /// Whether any run of `runs` may hold a wanted value.
    pub fn may_hold_any(&self, runs: &[RunRange]) -> bool {
        runs.iter().any(|r| self.may_hold(r))
    }
}

/// `x`, or `-0.0` for a zero of either sign: a lower bound that covers both zeros.
fn zeros_down(x: f64) -> f64 {
    if x == 0.0 { -0.0 } else { x }
}

/// `x`, or `+0.0` for a zero of either sign: an upper bound that covers both zeros.
fn zeros_up(x: f64) -> f64 {
    if x == 0.0 { 0.0 } else { x }
}

/// The largest `f32` not above `x` in the total order (`x` not NaN).
fn round_down(x: f64) -> f32 {
    let f = x as f32; // keeps a zero's sign; beyond the f32 range: an infinity
    if f64::from(f).total_cmp(&x).is_gt() { f.next_down() } else { f }
}

/// The smallest `f32` not below `x` in the total order (`x` not NaN).
fn round_up(x: f64) -> f32 {
    let f = x as f32;
    if f64::from(f).total_cmp(&x).is_lt() { f.next_up() } else { f }
}

/// The range of one run's values (see the module docs).
pub fn run_range(values: &[f64]) -> RunRange {
    let rows = u32::try_from(values.len()).unwrap_or(u32::MAX);
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for &v in values {
        if v.is_nan() {
            return RunRange { rows, lo: f32::NEG_INFINITY, hi: f32::INFINITY };
        }
        if v.total_cmp(&lo).is_lt() {
            lo = v;
        }
        if v.total_cmp(&hi).is_gt() {
            hi = v;
        }
    }
    RunRange { rows, lo: round_down(zeros_down(lo)), hi: round_up(zeros_up(hi)) }
}

/// The ranges of a row group's rows (sorted by series): per run when runs are long enough.
pub fn group_ranges(series: &[u32], values: &[f64]) -> GroupRanges {
    let mut runs = Vec::new();
    let mut start = 0;
    while start < series.len() {
        let id = series[start];
        let end = start + series[start..].iter().take_while(|&&s| s == id).count();
        runs.push(run_range(&values[start..end.min(values.len())]));
        start = end;
    }
    if runs.len().saturating_mul(MIN_ROWS_PER_RUN) > series.len() {
        return GroupRanges { per_run: false, runs: vec![run_range(values)] };
    }
    GroupRanges { per_run: true, runs }
}

/// Encodes the ranges of every row group (in file order) for [`KEY`]: per group the number
/// of runs, or 0 for one range covering the group, then the ranges (runs with their rows).
pub fn encode(groups: &[GroupRanges]) -> String {
    let runs: usize = groups.iter().map(|g| g.runs.len()).sum();
    let mut bytes = Vec::with_capacity(5 + 4 * groups.len() + RUN_BYTES * runs);
    bytes.push(VERSION);
    bytes.extend_from_slice(&u32::try_from(groups.len()).unwrap_or(u32::MAX).to_le_bytes());
    for group in groups {
        let n = if group.per_run { u32::try_from(group.runs.len()).unwrap_or(u32::MAX) } else { 0 };
        bytes.extend_from_slice(&n.to_le_bytes());
        for r in &group.runs {
            if group.per_run {
                bytes.extend_from_slice(&r.rows.to_le_bytes());
            }
            bytes.extend_from_slice(&r.lo.to_bits().to_le_bytes());
            bytes.extend_from_slice(&r.hi.to_bits().to_le_bytes());
            if !group.per_run {
                break;
            }
        }
    }
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Decodes [`encode`]'s output and checks it against the file: `group_rows` are the row counts
/// of its row groups, which the runs of each group must add up to.
pub fn decode(text: &str, group_rows: &[u64]) -> Result<Vec<GroupRanges>, String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| format!("value statistics are not base64: {e}"))?;
    let mut at = 0usize;
    let mut take = |n: usize| -> Result<&[u8], String> {
        let part = bytes.get(at..at + n).ok_or_else(|| "value statistics are truncated".to_string())?;
        at += n;
        Ok(part)
    };
    let u32_at = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    let version = take(1)?[0];
    if version != VERSION {
        return Err(format!("value statistics of unknown version {version}"));
    }
    let groups = u32_at(take(4)?) as usize;
    if groups != group_rows.len() {
        return Err(format!("value statistics for {groups} row groups, the file has {}", group_rows.len()));
    }
    let mut out = Vec::with_capacity(groups);
    for (g, &want) in group_rows.iter().enumerate() {
        let runs = u32_at(take(4)?) as usize;
        if runs == 0 {
            let b = take(8)?;
            let lo = f32::from_bits(u32_at(&b[0..4]));
            let hi = f32::from_bits(u32_at(&b[4..8]));
            let rows = u32::try_from(want).unwrap_or(u32::MAX);
            out.push(GroupRanges { per_run: false, runs: vec![RunRange { rows, lo, hi }] });
            continue;
        }
        let raw = take(runs.checked_mul(RUN_BYTES).ok_or_else(|| "value statistics are truncated".to_string())?)?;
        let group: Vec<RunRange> = raw
            .chunks_exact(RUN_BYTES)
            .map(|b| RunRange {
                rows: u32_at(&b[0..4]),
                lo: f32::from_bits(u32_at(&b[4..8])),
                hi: f32::from_bits(u32_at(&b[8..12])),
            })
            .collect();
        let rows: u64 = group.iter().map(|r| u64::from(r.rows)).sum();
        if rows != want {
            return Err(format!("value statistics of row group {g} cover {rows} rows, it has {want}"));
        }
        out.push(GroupRanges { per_run: true, runs: group });
    }
    if at != bytes.len() {
        return Err(format!("{} bytes after the value statistics", bytes.len() - at));
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn values() -> impl Strategy<Value = f64> {
        prop_oneof![
            Just(0.0),
            Just(-0.0),
            Just(f64::NAN),
            Just(f64::INFINITY),
            Just(f64::NEG_INFINITY),
            Just(f64::MAX),
            Just(1e-320),
            -1e6f64..1e6,
            any::<i32>().prop_map(f64::from),
            (-40i32..40).prop_map(|e| 10f64.powi(e)),
        ]
    }

    /// Whether `v` passes a filter `value <op> x` in the total order or under IEEE.
    fn passes(v: f64, op: &str, x: f64) -> bool {
        let c = v.total_cmp(&x);
        let total = match op {
            ">" => c.is_gt(),
            ">=" => c.is_ge(),
            "<" => c.is_lt(),
            "<=" => c.is_le(),
            _ => c.is_eq(),
        };
        let ieee = match op {
            ">" => v > x,
            ">=" => v >= x,
            "<" => v < x,
            "<=" => v <= x,
            _ => v == x,
        };
        total || ieee
    }

    fn range_of(op: &str, x: f64) -> ValueRange {
        match op {
            ">" => ValueRange::above(x),
            ">=" => ValueRange::new(x, f64::INFINITY),
            "<" => ValueRange::below(x),
            "<=" => ValueRange::new(f64::NEG_INFINITY, x),
            _ => ValueRange::new(x, x),
        }
        .unwrap()
    }

    proptest! {
        /// A run is kept whenever one of its values passes the filter: pruning never drops a
        /// matching row.
        #[test]
        fn a_run_with_a_matching_value_is_kept(run in proptest::collection::vec(values(), 1..20),
                                               x in values(), op in prop_oneof![Just(">"), Just(">="), Just("<"), Just("<="), Just("=")]) {
            prop_assume!(!x.is_nan());
            let range = run_range(&run);
            let wanted = range_of(op, x);
            if run.iter().any(|&v| passes(v, op, x)) {
                prop_assert!(wanted.may_hold(&range), "{run:?} {op} {x} {wanted:?} {range:?}");
            }
        }

        /// Strict bounds are tight: a run whose values all equal the bound is pruned, zeros
        /// aside (a zero covers both zeros).
        #[test]
        fn a_run_at_a_strict_bound_is_pruned(x in any::<f32>(), n in 1usize..5) {
            prop_assume!(x.is_finite() && x != 0.0);
            let x = f64::from(x);
            let run = run_range(&vec![x; n]);
            prop_assert!(!ValueRange::above(x).unwrap().may_hold(&run));
            prop_assert!(!ValueRange::below(x).unwrap().may_hold(&run));
        }
    }

    #[test]
    fn ranges_prune_what_cannot_match_and_round_trip() {
        // Runs of 2,000, 1,000 and 1,500 rows: long enough for ranges of their own.
        let mut series = vec![1u32; 2_000];
        series.extend([4; 1_000]);
        series.extend([9; 1_500]);
        let mut values = vec![0.0; 2_000];
        values.extend((0..1_000).map(|i| if i == 500 { 95.5 } else { 12.25 }));
        values.extend([3.0; 1_500]);
        let per_run = group_ranges(&series, &values);
        assert!(per_run.per_run);
        let runs = &per_run.runs;
        assert_eq!(runs.iter().map(|r| r.rows).collect::<Vec<_>>(), [2_000, 1_000, 1_500]);
        let above_90 = ValueRange::new(90.0, f64::INFINITY).unwrap();
        let kept: Vec<bool> = runs.iter().map(|r| above_90.may_hold(r)).collect();
        assert_eq!(kept, [false, true, false]);
        assert!(above_90.may_hold_any(runs));
        // Short runs: one range for the group.
        let whole = group_ranges(&[1, 1, 2, 3], &[0.0, 5.0, -2.0, 1.0]);
        assert!(!whole.per_run);
        assert_eq!(whole.runs, [RunRange { rows: 4, lo: -2.0, hi: 5.0 }]);
        // f32 rounding is outward: 0.1 is not an f32, its range still holds it.
        let r = run_range(&[0.1]);
        assert!(f64::from(r.lo) <= 0.1 && f64::from(r.hi) >= 0.1 && r.lo < r.hi);

        let nan = GroupRanges { per_run: true, runs: vec![run_range(&[f64::NAN, 1.0])] };
        let groups = vec![per_run.clone(), whole.clone(), nan];
        let text = encode(&groups);
        assert_eq!(decode(&text, &[4_500, 4, 2]).unwrap(), groups);
        assert!(decode(&text, &[4_500, 4, 3]).unwrap_err().contains("row group 2 cover 2 rows, it has 3"));
        assert!(decode(&text, &[4_500, 4]).unwrap_err().contains("for 3 row groups"));
        assert!(decode(&text[..text.len() - 8], &[4_500, 4, 2]).is_err());
        assert!(decode("not base64!", &[6, 2]).unwrap_err().contains("base64"));
        assert!(ValueRange::new(f64::NAN, 1.0).is_none());
        assert!(ValueRange::new(5.0, 3.0).unwrap().is_empty());
        assert!(!ValueRange::new(0.0, -0.0).unwrap().is_empty());
        // `value > 0` skips a port's run of zeros (of either sign); `value > -0.0` and
        // `value >= 0` do not (+0.0 > -0.0 in the total order, -0.0 >= 0.0 under IEEE).
        for zeros in [run_range(&[0.0, 0.0]), run_range(&[-0.0])] {
            assert!(!ValueRange::above(0.0).unwrap().may_hold(&zeros));
            assert!(ValueRange::above(-0.0).unwrap().may_hold(&zeros));
            assert!(ValueRange::new(0.0, f64::INFINITY).unwrap().may_hold(&zeros));
            assert!(!ValueRange::below(-0.0).unwrap().may_hold(&zeros));
        }
    }
}
