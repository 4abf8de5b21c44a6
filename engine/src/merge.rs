//! Sorting rows by (series, time) with last-write-wins deduplication.
//!
//! Rows are given in write order (older first: files by id, then the write buffer in
//! arrival order). The result is sorted by (series, time) and keeps, for each (series, time),
//! the row that came last. A stable counting sort by series followed by a per-series check
//! (telemetry usually arrives time-ordered per series) makes this O(n) in the common case.

use crate::model::Rows;

/// Sorts `rows` by (series, time), keeping the last row of each duplicate (series, time).
pub fn sort_dedup(rows: &Rows) -> Rows {
    if is_sorted_unique(rows) {
        return rows.clone();
    }
    sort_dedup_chunks(&[rows])
}

/// [`sort_dedup`] over the concatenation of `chunks` (oldest first), without concatenating
/// them first: the write buffer's chunks go straight into the sorted output.
///
/// One pass counts rows per series, one scatters every run of rows to its series' range (stable, so
/// each range is in write order), and one pass per series checks the times; only a range that
/// is out of order is sorted (stably), and only duplicates make rows move again.
pub fn sort_dedup_chunks(chunks: &[&Rows]) -> Rows {
    let mut out = Rows::default();
    sort_dedup_chunks_into(chunks, &mut out);
    out
}

/// [`sort_dedup_chunks`] into `out` (its rows are replaced), reusing its allocation: a flush
/// that sorts millions of rows into a kept buffer writes into pages already mapped instead of
/// having the kernel fault in and zero fresh ones (large allocations are `mmap`s).
pub fn sort_dedup_chunks_into(chunks: &[&Rows], out: &mut Rows) {
    out.clear();
    let n: usize = chunks.iter().map(|c| c.len()).sum();
    if n == 0 {
        return;
    }
    let max_series = chunks.iter().flat_map(|c| c.series.iter().copied()).max().unwrap_or(0) as usize;
    let mut offsets = vec![0usize; max_series + 2];
    // Chunks come from write batches, which hold runs of one series: counting and scattering
    // work a run at a time (one offset lookup and three slice copies per run).
    for c in chunks {
        for r in c.runs() {
            offsets[c.series[r.start] as usize + 1] += r.len();
        }
    }
    for i in 1..offsets.len() {
        offsets[i] += offsets[i - 1];
    }
    out.series.resize(n, 0);
    out.time.resize(n, 0);
    out.value.resize(n, 0.0);
    let mut next = offsets.clone();
    for c in chunks {
        for r in c.runs() {
            let s = c.series[r.start];
            let at = next[s as usize];
            let end = at + r.len();
            out.series[at..end].fill(s);
            out.time[at..end].copy_from_slice(&c.time[r.clone()]);
            out.value[at..end].copy_from_slice(&c.value[r.clone()]);
            next[s as usize] = end;
        }
    }
    // Per series: order by time (stable) and keep the last row of equal times, compacting
    // into `w..` (which trails the read position once a duplicate was dropped).
    let mut w = 0;
    let mut pairs: Vec<(i64, f64)> = Vec::new();
    for s in 0..=max_series {
        let (a, b) = (offsets[s], offsets[s + 1]);
        if a == b {
            continue;
        }
        let times = &out.time[a..b];
        if !times.windows(2).all(|p| p[0] < p[1]) {
            if !times.windows(2).all(|p| p[0] <= p[1]) {
                pairs.clear();
                pairs.extend(out.time[a..b].iter().copied().zip(out.value[a..b].iter().copied()));
                pairs.sort_by_key(|&(t, _)| t);
                for (k, &(t, v)) in pairs.iter().enumerate() {
                    out.time[a + k] = t;
                    out.value[a + k] = v;
                }
            }
            let mut k = a;
            while k < b {
                let t = out.time[k];
                while k + 1 < b && out.time[k + 1] == t {
                    k += 1;
                }
                out.series[w] = s as u32;
                out.time[w] = t;
                out.value[w] = out.value[k];
                w += 1;
                k += 1;
            }
        } else if w == a {
            w = b;
        } else {
            out.series.copy_within(a..b, w);
            out.time.copy_within(a..b, w);
            out.value.copy_within(a..b, w);
            w += b - a;
        }
    }
    out.series.truncate(w);
    out.time.truncate(w);
    out.value.truncate(w);
}

/// Like [`sort_dedup`], without a copy when `rows` are already sorted and unique.
pub fn sort_dedup_owned(rows: Rows) -> Rows {
    if is_sorted_unique(&rows) { rows } else { sort_dedup(&rows) }
}

/// Whether rows are already strictly increasing in (series, time).
pub fn is_sorted_unique(rows: &Rows) -> bool {
    (1..rows.len()).all(|i| (rows.series[i - 1], rows.time[i - 1]) < (rows.series[i], rows.time[i]))
}

/// Merges streams of rows, each sorted by (series, time) without duplicates, into one such
/// stream: `emit` receives consecutive sorted chunks. For a (series, time) in several streams
/// the row of the later stream wins (pass streams oldest first). Memory: one chunk per stream.
///
/// Every round emits all buffered rows up to the smallest last key among the streams that may
/// still deliver more, so the stream holding that key is drained and refilled next round.
pub fn merge_streams<I, E>(streams: Vec<I>, mut emit: impl FnMut(Rows) -> Result<(), E>) -> Result<(), E>
where
    I: Iterator<Item = Result<Rows, E>>,
{
    struct Input<I> {
        iter: I,
        buf: Rows,
        pos: usize,
        done: bool,
    }
    let mut inputs: Vec<Input<I>> =
        streams.into_iter().map(|iter| Input { iter, buf: Rows::default(), pos: 0, done: false }).collect();
    loop {
        for input in inputs.iter_mut() {
            while input.pos == input.buf.len() && !input.done {
                match input.iter.next() {
                    Some(rows) => (input.buf, input.pos) = (rows?, 0),
                    None => input.done = true,
                }
            }
        }
        inputs.retain(|i| i.pos < i.buf.len());
        if inputs.is_empty() {
            return Ok(());
        }
        let frontier = inputs.iter().filter(|i| !i.done).map(|i| key(&i.buf, i.buf.len() - 1)).min();
        let mut chunk = Rows::default();
        let mut contributors = 0;
        for input in inputs.iter_mut() {
            let end = frontier.map_or(input.buf.len(), |f| upper_bound(&input.buf, input.pos, f));
            if end > input.pos {
                contributors += 1;
                chunk.extend_range(&input.buf, input.pos, end);
                input.pos = end;
            }
        }
        // Rows of a single stream are already sorted and unique.
        emit(if contributors > 1 { sort_dedup(&chunk) } else { chunk })?;
    }
}

fn key(rows: &Rows, i: usize) -> (u32, i64) {
    (rows.series[i], rows.time[i])
}

/// The first index in `from..` whose key is greater than `bound` (rows are sorted).
fn upper_bound(rows: &Rows, from: usize, bound: (u32, i64)) -> usize {
    let (mut lo, mut hi) = (from, rows.len());
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if key(rows, mid) <= bound { lo = mid + 1 } else { hi = mid }
    }
    lo
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
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

        /// Any split of the input into chunks sorts like the concatenation.
        #[test]
        fn chunks_match_model(input in proptest::collection::vec((0u32..8, 0i64..20, -5i32..5), 0..300),
                              cuts in proptest::collection::vec(0usize..300, 0..6)) {
            let mut rows = Rows::default();
            let mut model = BTreeMap::new();
            for (s, t, v) in &input {
                rows.push(*s, *t, *v as f64);
                model.insert((*s, *t), *v as f64);
            }
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(rows.len())).collect();
            cuts.push(0);
            cuts.push(rows.len());
            cuts.sort_unstable();
            let chunks: Vec<Rows> = cuts.windows(2).map(|w| {
                let mut c = Rows::default();
                c.extend_range(&rows, w[0], w[1]);
                c
            }).collect();
            let refs: Vec<&Rows> = chunks.iter().collect();
            let out = sort_dedup_chunks(&refs);
            let got: Vec<((u32, i64), f64)> = (0..out.len()).map(|i| ((out.series[i], out.time[i]), out.value[i])).collect();
            let want: Vec<((u32, i64), f64)> = model.into_iter().collect();
            prop_assert_eq!(got, want);
        }

        #[test]
        fn merge_streams_matches_model(
            streams in proptest::collection::vec(
                (proptest::collection::btree_map((0u32..6, 0i64..40), -5i32..5, 0..80), 1usize..9),
                0..5,
            )
        ) {
            let mut model = BTreeMap::new();
            let mut inputs = Vec::new();
            for (k, (rows, chunk)) in streams.iter().enumerate() {
                let mut all = Rows::default();
                for (&(s, t), &v) in rows {
                    // The value names its stream so that the winner is visible.
                    let v = f64::from(v) + 100.0 * k as f64;
                    all.push(s, t, v);
                    model.insert((s, t), v);
                }
                let chunks: Vec<Result<Rows, ()>> = (0..all.len()).step_by(*chunk).map(|a| {
                    let mut c = Rows::default();
                    c.extend_range(&all, a, (a + chunk).min(all.len()));
                    Ok(c)
                }).collect();
                inputs.push(chunks.into_iter());
            }
            let mut out = Rows::default();
            merge_streams(inputs, |rows| { out.extend_from(&rows); Ok::<(), ()>(()) }).unwrap();
            let got: Vec<((u32, i64), f64)> = (0..out.len()).map(|i| ((out.series[i], out.time[i]), out.value[i])).collect();
            let want: Vec<((u32, i64), f64)> = model.into_iter().collect();
            prop_assert_eq!(got, want);
        }
    }
}
