//! Corrected-time filters map to local-time bounds that still prune data files.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use datafusion::logical_expr::{col, lit};
use datafusion::prelude::SessionContext;
use datafusion::scalar::ScalarValue;
use lockstep_engine::clock::OffsetObservation;
use lockstep_engine::model::{SeriesKey, SeriesSamples};
use lockstep_engine::store::StoreConfig;
use lockstep_engine::{Store, WriteBatch};

use super::*;

const HOUR: i64 = 3_600_000_000_000;
use lockstep_engine::model::SEC;
/// A partition boundary (partitions are 1 h of local time).
const H: i64 = 490_000 * HOUR;
/// Host `a`'s clock runs 2 s ahead of the reference.
const OFFSET: i64 = 2 * SEC;

/// Host `a`: one sample a second in each of three hourly partitions, flushed to three files,
/// with a clock model of offset +2 s.
fn store(dir: &std::path::Path) -> Arc<Store> {
    let store = Store::open(dir, StoreConfig::default()).unwrap();
    let timestamps: Vec<i64> = (0..3 * 3_600).map(|i| H + i * SEC).collect();
    let values = vec![1.0; timestamps.len()];
    let key = SeriesKey::new("m", [("host", "a")]);
    store.write(&WriteBatch { series: vec![(key, SeriesSamples { timestamps, values })] }).unwrap();
    store.flush().unwrap();
    store
        .with_clocks(|reg| {
            let offsets: Vec<OffsetObservation> = (0..4)
                .map(|h| OffsetObservation {
                    host: "a".into(),
                    local_time: H + h * HOUR,
                    offset_ns: OFFSET,
                    uncertainty_ns: 10,
                })
                .collect();
            reg.add_offsets(&offsets)?;
            reg.refit()
        })
        .unwrap();
    Arc::new(store)
}

fn ts(t: i64) -> Expr {
    lit(ScalarValue::TimestampNanosecond(Some(t), None))
}

/// The engine request for `ref_lo <= time < ref_hi` and how many files it reads.
fn plan(store: &Store, ref_lo: i64, ref_hi: i64) -> (Option<(i64, i64)>, usize) {
    let labels = store.with_catalog(|c| c.label_keys()).unwrap();
    let filters = [col("time").gt_eq(ts(ref_lo)), col("time").lt(ts(ref_hi))];
    let pushdown = pushdown::analyze(&filters, &labels);
    let clocks = ClockVersion::Newest.resolve(store).unwrap();
    let plan = ScanPlan::new(store, &MetricCatalog::builtin(), clocks, &labels, &pushdown).unwrap();
    let request = plan.request.unwrap();
    let time = request.time;
    (time, store.scan(request).unwrap().file_count())
}

#[test]
fn corrected_time_filters_map_bounds_and_prune_files() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    assert_eq!(store.scan(lockstep_engine::store::ScanRequest::default()).unwrap().file_count(), 3);

    // Ten corrected minutes inside the second hour: local bounds shifted by the offset, one file.
    let (lo, hi) = (H + HOUR + 600 * SEC, H + HOUR + 1_200 * SEC);
    assert_eq!(plan(&store, lo, hi), (Some((lo + OFFSET, hi + OFFSET)), 1));
    // Corrected [H+1h−3 s, H+1h−1 s) is local [H+1h−1 s, H+1h+1 s): it straddles a partition
    // boundary only after correction, so two files are read, not one.
    let (lo, hi) = (H + HOUR - 3 * SEC, H + HOUR - SEC);
    assert_eq!(plan(&store, lo, hi), (Some((lo + OFFSET, hi + OFFSET)), 2));

    // The SQL answer over the pruned scan is exact: the two samples stamped H+1h−1 s and H+1h
    // locally are the ones in that corrected window.
    let ctx = SessionContext::new();
    ctx.register_table("samples", Arc::new(SamplesTable::new(store.clone(), Arc::new(MetricCatalog::builtin()))))
        .unwrap();
    let sql = format!(
        "SELECT CAST(min(local_time) AS BIGINT) AS lo, count(*) AS n FROM samples \
         WHERE time >= to_timestamp_nanos({lo}) AND time < to_timestamp_nanos({hi})"
    );
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let batches =
        rt.block_on(async { ctx.sql(&sql).await.unwrap().collect().await.map_err(|e| e.to_string()).unwrap() });
    let b = &batches[0];
    let first = b.column(0).as_any().downcast_ref::<arrow::array::Int64Array>().unwrap().value(0);
    let n = b.column(1).as_any().downcast_ref::<arrow::array::Int64Array>().unwrap().value(0);
    assert_eq!((first, n), (H + HOUR - SEC, 2));
}
