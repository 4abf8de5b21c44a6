//! Sorting rows by (series, time) with last-write-wins deduplication.
//!
//! Rows are given in write order (older first: files by id, then the write buffer in
//! arrival order). The result is sorted by (series, time) and keeps, for each (series, time),
//! the row that came last. A stable counting sort by series followed by a per-series check
//! (telemetry usually arrives time-ordered per series) makes this O(n) in the common case.

use crate::datafile::Rows;

/// Sorts `rows` by (series, time), keeping the last row of each duplicate (series, time).
pub fn sort_dedup(rows: &Rows) -> Rows {
    let n = rows.len();
    if n == 0 {
        return Rows::default();
    }
    if is_sorted_unique(rows) {
        return rows.clone();
    }
    let max_series = rows.series.iter().copied().max().unwrap_or(0) as usize;
    // Counting sort by series (stable): start offset of each series.
    let mut offsets = vec![0usize; max_series + 2];
    for &s in &rows.series {
        offsets[s as usize + 1] += 1;
    }
    for i in 1..offsets.len() {
        offsets[i] += offsets[i - 1];
    }
    let mut order = vec![0u32; n];
    let mut next = offsets.clone();
    for (i, &s) in rows.series.iter().enumerate() {
        order[next[s as usize]] = i as u32;
        next[s as usize] += 1;
    }
    let mut out = Rows::with_capacity(n);
    for s in 0..=max_series {
        let run = &mut order[offsets[s]..offsets[s + 1]];
        if run.is_empty() {
            continue;
        }
        if !run.windows(2).all(|w| rows.time[w[0] as usize] <= rows.time[w[1] as usize]) {
            // Stable: equal times keep write order, so the last one is the newest.
            run.sort_by_key(|&i| rows.time[i as usize]);
        }
        let mut k = 0;
        while k < run.len() {
            let t = rows.time[run[k] as usize];
            let mut last = k;
            while last + 1 < run.len() && rows.time[run[last + 1] as usize] == t {
                last += 1;
            }
            let i = run[last] as usize;
            out.push(s as u32, t, rows.value[i]);
            k = last + 1;
        }
    }
    out
}

/// Whether rows are already strictly increasing in (series, time).
pub fn is_sorted_unique(rows: &Rows) -> bool {
    (1..rows.len()).all(|i| {
        (rows.series[i - 1], rows.time[i - 1]) < (rows.series[i], rows.time[i])
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    proptest! {
        #[test]
        fn matches_btreemap_model(input in proptest::collection::vec((0u32..8, 0i64..20, -5i32..5), 0..300)) {
            let mut rows = Rows::default();
            let mut model = BTreeMap::new();
            for (s, t, v) in &input {
                rows.push(*s, *t, *v as f64);
                model.insert((*s, *t), *v as f64);
            }
            let out = sort_dedup(&rows);
            let got: Vec<((u32, i64), f64)> = (0..out.len()).map(|i| ((out.series[i], out.time[i]), out.value[i])).collect();
            let want: Vec<((u32, i64), f64)> = model.into_iter().collect();
            prop_assert_eq!(got, want);
        }
    }
}
