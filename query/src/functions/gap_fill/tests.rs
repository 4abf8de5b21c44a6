//! gap_fill: lists built in place, the groups accumulator's paths, and its reservations.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;

fn grid(buckets: usize, fill: Fill, agg: Agg) -> Grid {
    let item =
        Field::new_list_field(DataType::Struct(item_fields(&DataType::Timestamp(TimeUnit::Nanosecond, None))), true);
    Grid { start: 1000, stop: 1000 + 10 * buckets as i64, interval: 10, buckets, fill, agg, item: Arc::new(item) }
}

/// The grid filled bucket by bucket, as `gap_fill` did before it built its lists in place.
fn reference(grid: &Grid, series: &Series) -> Vec<Option<f64>> {
    let mut samples = series.samples.clone();
    samples.sort_unstable_by(order);
    let mut vals: Vec<Option<f64>> = vec![None; grid.buckets];
    let mut counts = vec![0u32; grid.buckets];
    for &(t, v) in &samples {
        let b = grid.bucket(t);
        vals[b] = Some(match (vals[b], grid.agg) {
            (None, _) => v,
            (Some(a), Agg::Avg | Agg::Sum) => a + v,
            (Some(a), Agg::Min) => std::cmp::min_by(a, v, |x, y| nan_greatest(*x, *y)),
            (Some(a), Agg::Max) => std::cmp::max_by(a, v, |x, y| nan_greatest(*x, *y)),
            (Some(a), Agg::First) => a,
            (Some(_), Agg::Last) => v,
        });
        counts[b] += 1;
    }
    if grid.agg == Agg::Avg {
        for (v, c) in vals.iter_mut().zip(&counts) {
            if let Some(x) = v {
                *x /= f64::from(*c);
            }
        }
    }
    match grid.fill {
        Fill::Null => {}
        Fill::Locf => {
            let mut prev = series.seed.map(|s| s.1);
            for v in vals.iter_mut() {
                match v {
                    Some(x) => prev = Some(*x),
                    None => *v = prev,
                }
            }
        }
        Fill::Linear => {
            let known: Vec<(usize, f64)> = vals.iter().enumerate().filter_map(|(k, v)| v.map(|x| (k, x))).collect();
            let mut next_known = 0;
            let mut prev = series.seed;
            for (k, slot) in vals.iter_mut().enumerate() {
                if let Some(x) = *slot {
                    prev = Some((grid.at(k), x));
                    next_known += 1;
                    continue;
                }
                let next = known.get(next_known).map(|&(j, x)| (grid.at(j), x)).or(series.anchor);
                if let (Some((ta, va)), Some((tb, vb))) = (prev, next) {
                    let w = (grid.at(k) - ta) as f64 / (tb - ta) as f64;
                    *slot = Some(va + (vb - va) * w);
                }
            }
        }
    }
    vals
}

/// Lists built in place hold, group by group, what the bucket-by-bucket fill gives, for
/// every fill and aggregation, over sparse and dense series with and without seed/anchor.
#[test]
fn lists_built_in_place_match_the_bucket_by_bucket_fill() {
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move |n: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % n
    };
    for fill in [Fill::Null, Fill::Locf, Fill::Linear] {
        for agg in [Agg::Avg, Agg::Sum, Agg::Min, Agg::Max, Agg::First, Agg::Last] {
            let g = grid(50, fill, agg);
            let mut series: Vec<Series> = (0..6)
                .map(|i| {
                    let mut s = Series::default();
                    let n = [0, 1, 5, 30, 200, 40][i];
                    for _ in 0..n {
                        let t = 900 + next(700) as i64;
                        let v = match next(20) {
                            0 => f64::NAN,
                            1 => f64::INFINITY,
                            x => x as f64 - 5.0,
                        };
                        s.push(&g, (t, v));
                    }
                    s
                })
                .collect();
            let want: Vec<Vec<Option<f64>>> = series.iter().map(|s| reference(&g, s)).collect();
            let lists = g.lists(&mut series).unwrap();
            assert_eq!(lists.len(), 6);
            for (i, want) in want.iter().enumerate() {
                let items = lists.value(i);
                let items = items.as_struct();
                let times = items.column(0).as_primitive::<TimestampNanosecondType>();
                assert_eq!(times.values().to_vec(), (0..50).map(|k| g.at(k)).collect::<Vec<_>>());
                let got: Vec<Option<f64>> = items.column(1).as_primitive::<Float64Type>().iter().collect();
                let same = got.iter().zip(want).all(|(a, b)| match (a, b) {
                    (Some(a), Some(b)) => a.to_bits() == b.to_bits(),
                    (a, b) => a.is_none() && b.is_none(),
                });
                assert!(same, "{fill:?} {agg:?} group {i}: {got:?} != {want:?}");
            }
        }
    }
}

/// A result over what the pool has left fails before it is built, with the pool's error
/// naming `gap_fill`; one that fits is held until the next emission replaces it.
#[test]
fn results_are_reserved_in_the_pool() {
    use datafusion::execution::memory_pool::GreedyMemoryPool;
    let pool: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(10_000));
    let g = grid(100, Fill::Locf, Agg::Avg);
    let mut groups =
        GapFillGroups { grid: g, series: Vec::new(), sample_bytes: 0, memory: ResultMemory::new(Some(pool.clone())) };
    groups.grow(8);
    // 8 × 100 buckets × 17 bytes > 10,000.
    let error = groups.evaluate(EmitTo::All).unwrap_err().to_string();
    assert!(error.contains("gap_fill (a result of 8 lists of 100 buckets)"), "{error}");
    assert_eq!(pool.reserved(), 0);
    assert_eq!(groups.series.len(), 8, "nothing taken");
    let first = groups.evaluate(EmitTo::First(2)).unwrap();
    assert_eq!(first.len(), 2);
    let held = pool.reserved();
    assert!(held >= 2 * 100 * 16, "{held}");
    let rest = groups.evaluate(EmitTo::First(5)).unwrap();
    assert_eq!(rest.len(), 5);
    assert!(pool.reserved() > held && pool.reserved() < 2 * held + 5 * 100 * BUCKET_BYTES);
    drop(groups);
    assert_eq!(pool.reserved(), 0);
}

/// Under `GROUP BY` the same lists come out whether the rows are added, merged from a
/// partial state, or merged from per-row states (partial aggregation skipped); filtered
/// and NULL rows count nowhere.
#[test]
fn groups_update_state_merge_and_converted_rows_agree() {
    let groups = || GapFillGroups {
        grid: grid(10, Fill::Linear, Agg::Avg),
        series: Vec::new(),
        sample_bytes: 0,
        memory: ResultMemory::new(None),
    };
    let times = TimestampNanosecondArray::from(vec![
        Some(995),
        Some(1003),
        None,
        Some(1047),
        Some(1111),
        Some(1020),
        Some(1021),
    ]);
    let values = Float64Array::from(vec![Some(1.0), Some(2.0), Some(9.0), None, Some(5.0), Some(4.0), Some(100.0)]);
    let batch: Vec<ArrayRef> = vec![Arc::new(times), Arc::new(values)];
    let (indices, filter) =
        ([0, 1, 0, 1, 0, 0, 0], BooleanArray::from(vec![true, true, true, true, true, true, false]));

    let mut direct = groups();
    direct.update_batch(&batch, &indices, Some(&filter), 2).unwrap();
    assert!(direct.size() >= 4 * 16);
    let mut partial = groups();
    partial.update_batch(&batch, &indices, Some(&filter), 2).unwrap();
    let state = partial.state(EmitTo::All).unwrap();
    let mut merged = groups();
    merged.merge_batch(&state, &[0, 1], 2).unwrap();
    let rows = direct.convert_to_state(&batch, Some(&filter)).unwrap();
    let mut converted = groups();
    converted.merge_batch(&rows, &indices, 2).unwrap();

    let want = direct.evaluate(EmitTo::All).unwrap();
    assert_eq!(want.len(), 2);
    assert_eq!(merged.evaluate(EmitTo::All).unwrap().as_ref(), want.as_ref());
    assert_eq!(converted.evaluate(EmitTo::All).unwrap().as_ref(), want.as_ref());
    // Group 0: seed 1.0 at 995, 4.0 in bucket 2 (1020), anchor 5.0 at 1111; interpolated
    // between them.
    let g0 = want.as_list::<i32>().value(0);
    let got: Vec<Option<f64>> = g0.as_struct().column(1).as_primitive::<Float64Type>().iter().collect();
    assert_eq!(&got[..4], &[Some(1.6), Some(2.8), Some(4.0), Some(4.0 + 10.0 / 91.0)]);
    assert_eq!(direct.size(), size_of_val(&direct) + direct.series.capacity() * size_of::<Series>());
}
