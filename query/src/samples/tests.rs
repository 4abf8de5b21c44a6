//! Corrected-time filters map to local-time bounds that still prune data files.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use arrow::array::{Int64Array, StringArray};
use arrow::datatypes::DataType;
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

mod retire;
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
    set_offset(&store, "a", OFFSET);
    Arc::new(store)
}

/// Fits a clock model of a constant `offset` for `host` over the first four hours.
fn set_offset(store: &Store, host: &str, offset: i64) {
    store
        .with_clocks(|reg| {
            let offsets: Vec<OffsetObservation> = (0..4)
                .map(|h| OffsetObservation {
                    host: host.into(),
                    local_time: H + h * HOUR,
                    offset_ns: offset,
                    uncertainty_ns: 10,
                })
                .collect();
            reg.add_offsets(&offsets)?;
            reg.refit()
        })
        .unwrap();
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
    let (catalog, cache) = (MetricCatalog::builtin(), Dictionaries::default());
    let source = DictSource { store, catalog: &catalog, cache: &cache };
    let plan = ScanPlan::new(source, clocks, &labels, &pushdown, |_, _| Ok(None)).unwrap();
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

/// A store on an observed storage: 80 series a second for 3,500 s over two hosts (two row
/// groups in one file), a later file rewriting a slice of three series (a merged unit) and a few
/// buffered rows.
fn observed_store(dir: &std::path::Path) -> (Arc<Store>, lockstep_engine::storage::FaultyStorage) {
    use lockstep_engine::storage::{FaultyStorage, OsStorage};
    let faulty = FaultyStorage::new(Arc::new(OsStorage), u64::MAX);
    let config = StoreConfig { max_future_ns: None, flush_rows: usize::MAX, ..Default::default() };
    let store =
        Store::open_with(dir, config, Arc::new(faulty.clone()), Arc::new(lockstep_engine::wallclock::SystemClock))
            .unwrap();
    let write = |series: std::ops::Range<u32>, times: std::ops::Range<i64>, value: f64| {
        let mut b = WriteBatch::default();
        for s in series {
            let key = SeriesKey::new("m", [("host", format!("h{}", s % 2)), ("dev", format!("d{s}"))]);
            for k in times.clone() {
                b.push(key.clone(), H + k * SEC, value);
            }
        }
        store.write(&b).unwrap();
    };
    write(0..80, 0..3_500, 1.0);
    store.flush().unwrap();
    write(10..13, 100..200, 2.0);
    store.flush().unwrap();
    write(5..6, 3_490..3_510, 3.0);
    (Arc::new(store), faulty)
}

fn query_i64(ctx: &SessionContext, sql: &str) -> Vec<i64> {
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let batches =
        rt.block_on(async { ctx.sql(sql).await.unwrap().collect().await.map_err(|e| e.to_string()).unwrap() });
    let b = &batches[0];
    (0..b.num_columns())
        .map(|c| {
            let col = arrow::compute::cast(b.column(c), &DataType::Int64).unwrap();
            col.as_any().downcast_ref::<Int64Array>().unwrap().value(0)
        })
        .collect()
}

/// Every byte range of a data file is read at most once per query, whatever the parallelism;
/// a file's footer once per open store (the first query plans with it, later ones reuse it);
/// `count(*)` reads no column chunk but a merged unit's; `sum(value)` does not read the time
/// column.
#[test]
fn each_data_file_byte_is_read_at_most_once_per_query() {
    let dir = tempfile::tempdir().unwrap();
    let (store, faulty) = observed_store(dir.path());
    // 80 × 3,500 rows, 100 rewritten in place for 3 series, 10 new buffered rows.
    let rows = 80 * 3_500 + 10;
    let sum = 80 * 3_500 + 3 * 100 + 10 * 2 + 10 * 3; // rewrites add 1 each; the buffer 2 or 3 each
    let cases = [
        ("SELECT count(*) FROM samples", vec![rows]),
        ("SELECT count(*), CAST(sum(value) AS BIGINT) FROM samples", vec![rows, sum]),
        ("SELECT CAST(sum(value) AS BIGINT) FROM samples WHERE host = 'h1'", vec![40 * 3_500 + 100 + 10 * 2 + 10 * 3]),
        ("SELECT count(*), max(CAST(local_time AS BIGINT)) FROM samples", vec![rows, H + 3_509 * SEC]),
        ("SELECT count(DISTINCT series_id), count(*) FROM samples WHERE dev IN ('d5', 'd79')", vec![2, 2 * 3_500 + 10]),
    ];
    let mut bytes_read = std::collections::HashMap::new();
    let mut tail_reads = std::collections::BTreeMap::new();
    for threads in [1usize, 2] {
        let config = datafusion::prelude::SessionConfig::new().with_target_partitions(threads);
        let ctx = SessionContext::new_with_config(config);
        let table = SamplesTable::new(store.clone(), Arc::new(MetricCatalog::builtin()));
        ctx.register_table("samples", Arc::new(table)).unwrap();
        for (sql, want) in &cases {
            faulty.record_reads();
            assert_eq!(&query_i64(&ctx, sql), want, "{sql} on {threads} threads");
            let mut by_file: std::collections::BTreeMap<_, Vec<std::ops::Range<u64>>> = Default::default();
            for r in faulty.reads().into_iter().filter(|r| r.path.extension().is_some_and(|e| e == "parquet")) {
                by_file.entry(r.path).or_default().push(r.range);
            }
            // `dev IN (…)` selects series 5 and 79, which the rewriting file (series 10–12) lacks.
            let files = if sql.contains("dev IN") { 1 } else { 2 };
            assert_eq!(by_file.len(), files, "{sql}: data files read");
            for (path, mut ranges) in by_file.iter().map(|(p, r)| (p, r.clone())) {
                ranges.sort_by_key(|r| r.start);
                for w in ranges.windows(2) {
                    assert!(w[0].end <= w[1].start, "{sql} on {threads} threads read {path:?} {w:?} twice");
                }
                let len = std::fs::metadata(path).unwrap().len();
                *tail_reads.entry(path.clone()).or_insert(0) += ranges.iter().filter(|r| r.end == len).count();
                if sql.ends_with("count(*) FROM samples") {
                    // The footer (tail and metadata) on the first query, plus the five column
                    // chunks of the merged row group (a merge decodes everything); nothing of
                    // the second row group.
                    let footer = if threads == 1 { 2 } else { 0 };
                    assert!(ranges.len() <= footer + 5, "count(*) read {ranges:?}");
                }
            }
            let total: u64 = by_file.values().flatten().map(|r| r.end - r.start).sum();
            bytes_read.insert((*sql, threads), total);
        }
    }
    assert_eq!(tail_reads.len(), 2);
    assert!(tail_reads.values().all(|&n| n == 1), "footers read more than once: {tail_reads:?}");
    let value_only = bytes_read[&("SELECT count(*), CAST(sum(value) AS BIGINT) FROM samples", 2)];
    let time_only = bytes_read[&("SELECT count(*), max(CAST(local_time AS BIGINT)) FROM samples", 2)];
    let count_only = bytes_read[&("SELECT count(*) FROM samples", 2)];
    assert!(count_only < value_only && count_only < time_only, "{bytes_read:?}");
    assert_eq!(bytes_read[&("SELECT count(*), CAST(sum(value) AS BIGINT) FROM samples", 1)], value_only);
}

/// Bounds on `local_time` go to the engine as they are (and meet the corrected bounds).
#[test]
fn local_time_filters_prune_files() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let labels = store.with_catalog(|c| c.label_keys()).unwrap();
    let clocks = ClockVersion::Newest.resolve(&store).unwrap();
    let (catalog, cache) = (MetricCatalog::builtin(), Dictionaries::default());
    let request = |filters: &[Expr]| {
        let pushdown = pushdown::analyze(filters, &labels);
        let source = DictSource { store: &store, catalog: &catalog, cache: &cache };
        ScanPlan::new(source, clocks.clone(), &labels, &pushdown, |_, _| Ok(None)).unwrap().request
    };
    let (lo, hi) = (H + HOUR + 600 * SEC, H + HOUR + 1_200 * SEC);
    let local = [col("local_time").gt_eq(ts(lo)), col("local_time").lt(ts(hi))];
    let r = request(&local).unwrap();
    assert_eq!(r.time, Some((lo, hi)));
    assert_eq!(store.scan(r).unwrap().file_count(), 1);
    let between = [col("local_time").between(ts(lo), ts(hi))];
    assert_eq!(request(&between).unwrap().time, Some((lo, hi + 1)));
    // Corrected time 2 s behind local: both bounds together narrow to the intersection.
    let both = [col("local_time").gt_eq(ts(lo)), col("time").lt(ts(lo))];
    assert_eq!(request(&both).unwrap().time, Some((lo, lo + OFFSET)));
    // Disjoint bounds: nothing to scan.
    let none = [col("local_time").lt(ts(lo)), col("time").gt_eq(ts(lo))];
    assert!(request(&none).is_none());
}

/// Deterministic filters on series columns are evaluated once per series, not per row (pushdown
/// `Exact`: no `FilterExec` is left in the plan), and keep exactly the rows the same filter keeps
/// row by row, across files, a merged unit and the write buffer.
#[test]
fn series_level_filters_keep_exactly_their_series() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _faulty) = observed_store(dir.path());
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let collect = |ctx: &SessionContext, sql: &str| {
        rt.block_on(async { ctx.sql(sql).await.unwrap().collect().await.map_err(|e| e.to_string()).unwrap() })
    };
    // Per device (series `d{s}`, s in 0..80): rows and the sum of values, from the full scan.
    let ctx = SessionContext::new();
    ctx.register_table("samples", Arc::new(SamplesTable::new(store.clone(), Arc::new(MetricCatalog::builtin()))))
        .unwrap();
    let mut per_dev = std::collections::HashMap::new();
    for b in collect(&ctx, "SELECT CAST(dev AS VARCHAR), count(*), CAST(sum(value) AS BIGINT) FROM samples GROUP BY 1")
    {
        let dev = arrow::compute::cast(b.column(0), &DataType::Utf8).unwrap();
        let dev = dev.as_any().downcast_ref::<StringArray>().unwrap();
        let n = b.column(1).as_any().downcast_ref::<Int64Array>().unwrap();
        let sum = b.column(2).as_any().downcast_ref::<Int64Array>().unwrap();
        for i in 0..b.num_rows() {
            let s: u32 = dev.value(i)[1..].parse().unwrap();
            per_dev.insert(s, (n.value(i), sum.value(i)));
        }
    }
    assert_eq!(per_dev.len(), 80);
    // The string columns are string views, which DataFusion groups directly: grouping by the
    // column itself gives the same groups.
    let table = SamplesTable::new(store.clone(), Arc::new(MetricCatalog::builtin()));
    for name in ["metric", "domain", "entity", "host", "dev"] {
        let schema = datafusion::catalog::TableProvider::schema(&table);
        assert_eq!(schema.field_with_name(name).unwrap().data_type(), &DataType::Utf8View, "{name}");
    }
    let mut grouped = 0;
    for b in collect(&ctx, "SELECT dev, count(*) FROM samples GROUP BY dev") {
        let dev = arrow::array::AsArray::as_string_view(b.column(0));
        let n = b.column(1).as_any().downcast_ref::<Int64Array>().unwrap();
        for i in 0..b.num_rows() {
            let s: u32 = dev.value(i)[1..].parse().unwrap();
            assert_eq!(per_dev[&s].0, n.value(i), "d{s}");
            grouped += 1;
        }
    }
    assert_eq!(grouped, 80);
    type Keep = fn(u32) -> bool;
    // The first five fold to a constant after they are pushed down (`host IN (NULL)` is NULL),
    // which the scan applies too instead of dropping it (it once counted every row).
    let cases: [(&str, Keep); 12] = [
        ("host IN (NULL)", |_| false),
        ("dev NOT IN ('d1', NULL)", |_| false),
        ("metric = 'm' AND host IN (NULL, NULL)", |_| false),
        ("1 = 0", |_| false),
        ("host IN (NULL) IS NULL", |_| true),
        ("dev LIKE 'd1%'", |s| s == 1 || (10..20).contains(&s)),
        ("host = 'h1' OR dev = 'd4'", |s| s % 2 == 1 || s == 4),
        ("upper(dev) IN ('D7', 'D70', 'D700')", |s| s == 7 || s == 70),
        ("length(dev) = 2 AND metric = 'm'", |s| s < 10),
        ("domain IS NULL AND dev LIKE '%9'", |s| s % 10 == 9),
        ("NOT (dev LIKE 'd_') AND host <> 'h0'", |s| s >= 10 && s % 2 == 1),
        ("regexp_like(dev, '^d[0-3]$') OR entity = 'nothing'", |s| s <= 3),
    ];
    for threads in [1usize, 2] {
        let config = datafusion::prelude::SessionConfig::new().with_target_partitions(threads);
        let ctx = SessionContext::new_with_config(config);
        ctx.register_table("samples", Arc::new(SamplesTable::new(store.clone(), Arc::new(MetricCatalog::builtin()))))
            .unwrap();
        for (filter, keep) in cases {
            let want = per_dev
                .iter()
                .filter(|&(&s, _)| keep(s))
                .fold((0, 0), |(n, sum), (_, &(dn, dsum))| (n + dn, sum + dsum));
            let sql = format!("SELECT count(*), CAST(coalesce(sum(value), 0) AS BIGINT) FROM samples WHERE {filter}");
            assert_eq!(query_i64(&ctx, &sql), vec![want.0, want.1], "{filter} on {threads} threads");
            let plan = arrow::util::pretty::pretty_format_batches(&collect(&ctx, &format!("EXPLAIN {sql}")))
                .unwrap()
                .to_string();
            assert!(!plan.contains("FilterExec"), "{filter} is re-checked per row:\n{plan}");
        }
    }
    // A filter that fails says so, naming itself.
    let err = rt
        .block_on(async {
            ctx.sql("SELECT count(*) FROM samples WHERE CAST(dev AS INT) = 1").await.unwrap().collect().await
        })
        .unwrap_err()
        .to_string();
    assert!(err.contains("on the series' columns") && err.contains("Cast error"), "{err}");
    // A filter that also reads a per-row column stays a row filter.
    let plan = arrow::util::pretty::pretty_format_batches(&collect(
        &ctx,
        "EXPLAIN SELECT count(*) FROM samples WHERE dev LIKE 'd1%' OR value > 2",
    ))
    .unwrap()
    .to_string();
    assert!(plan.contains("FilterExec"), "{plan}");
}

/// A whole-series aggregate grouped by `series_id` reads a scan split by series (no
/// repartition, see `crate::plan`) and answers as DataFusion's own partial/final plan does, at
/// any parallelism: across files, a merged unit and buffered rows, with series and time filters.
#[test]
fn whole_series_aggregates_read_a_scan_split_by_series() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _faulty) = observed_store(dir.path());
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let run = |ctx: &SessionContext, sql: &str| {
        rt.block_on(async {
            let df = ctx.sql(sql).await.unwrap();
            let plan = df.clone().create_physical_plan().await.unwrap();
            let plan = datafusion::physical_plan::displayable(plan.as_ref()).indent(true).to_string();
            let out = df.collect().await.map_err(|e| e.to_string()).unwrap();
            (plan, arrow::util::pretty::pretty_format_batches(&out).unwrap().to_string())
        })
    };
    let queries = [
        "SELECT series_id, date_bin(INTERVAL '100 seconds', local_time) AS b, p99(value) AS p, count(*) AS n, \
         sum(value) AS s FROM samples GROUP BY 1, 2 ORDER BY 1, 2"
            .to_string(),
        format!(
            "SELECT series_id, quantile_cont(value, 0.5) AS m, count(*) AS n, sum(value) AS s FROM samples \
             WHERE dev LIKE 'd1%' AND local_time >= to_timestamp_nanos({}) GROUP BY series_id ORDER BY 1",
            H + 150 * SEC
        ),
        "SELECT host, series_id, p50(value) AS m, count(*) AS n FROM samples WHERE host = 'h1' \
         GROUP BY host, series_id ORDER BY 2"
            .to_string(),
        // Sketches: a t-digest of a few rows holds them exactly, an HLL merges exactly.
        "SELECT series_id, date_bin(INTERVAL '100 seconds', local_time) AS b, \
         approx_percentile_cont(value, 0.99) AS p, approx_distinct(CAST(value * 1000 AS BIGINT)) AS d, \
         approx_median(value) AS m \
         FROM samples GROUP BY 1, 2 ORDER BY 1, 2"
            .to_string(),
    ];
    for threads in [1usize, 2, 3, 5] {
        let config = || datafusion::prelude::SessionConfig::new().with_target_partitions(threads);
        let table = || Arc::new(SamplesTable::new(store.clone(), Arc::new(MetricCatalog::builtin())));
        let ours = crate::plan::context(config());
        ours.register_table("samples", table()).unwrap();
        let plain = SessionContext::new_with_config(config());
        crate::functions::register_all(&plain);
        plain.register_table("samples", table()).unwrap();
        for sql in &queries {
            let (plan, result) = run(&ours, sql);
            let (plain_plan, expected) = run(&plain, sql);
            assert_eq!(result, expected, "{sql} on {threads} threads:\n{plan}");
            assert!(result.lines().count() > 4, "{result}");
            if threads > 1 {
                assert!(plan.contains("by_series") && !plan.contains("RepartitionExec"), "{plan}");
                assert!(plain_plan.contains("RepartitionExec"), "{plain_plan}");
            }
        }
        // A sketch over coarse groups (not by series) keeps DataFusion's two phases.
        let sql = "SELECT host, approx_percentile_cont(value, 0.5) AS p, approx_distinct(series_id) AS d \
                   FROM samples GROUP BY host ORDER BY host";
        let (plan, result) = run(&ours, sql);
        assert_eq!(result, run(&plain, sql).1, "{sql}");
        if threads > 1 {
            assert!(plan.contains("mode=Partial") && !plan.contains("by_series"), "{plan}");
        }
    }
}

/// A filter on values prunes, through the value ranges data files record per series run, the
/// series runs and row groups that cannot hold a wanted value: fewer bytes read, the same
/// answer at any parallelism. A value overridden by a later write never shows through, even
/// when only the older write is inside the range (a merged unit is read whole).
#[test]
fn value_filters_skip_runs_that_cannot_match() {
    use lockstep_engine::storage::{FaultyStorage, OsStorage};
    let dir = tempfile::tempdir().unwrap();
    let faulty = FaultyStorage::new(Arc::new(OsStorage), u64::MAX);
    let config = StoreConfig { max_future_ns: None, flush_rows: usize::MAX, ..Default::default() };
    let store = Store::open_with(
        dir.path(),
        config,
        Arc::new(faulty.clone()),
        Arc::new(lockstep_engine::wallclock::SystemClock),
    )
    .unwrap();
    // An error counter per port: zero on all ports but three; port 10 counts errors all hour.
    // 200 ports × 3,500 s: three row groups (ports 0–74, 74–149, 149–199).
    let value = |s: u32, k: i64| match s {
        7 if k % 100 == 0 => 12.0,
        10 => 9.0,
        100 => (k % 7) as f64,
        _ => 0.0,
    };
    let mut b = WriteBatch::default();
    for s in 0..200u32 {
        let key = SeriesKey::new("errors", [("host", format!("h{}", s % 2)), ("port", format!("p{s}"))]);
        for k in 0..3_500 {
            b.push(key.clone(), H + k * SEC, value(s, k));
        }
    }
    store.write(&b).unwrap();
    store.flush().unwrap();
    // A later write sets port 10's count to zero for 100 s; then a buffered error on port 3:
    // the first row group is merged with both.
    let rewrite = |s: u32, times: std::ops::Range<i64>, v: f64| {
        let mut b = WriteBatch::default();
        let key = SeriesKey::new("errors", [("host", format!("h{}", s % 2)), ("port", format!("p{s}"))]);
        for k in times {
            b.push(key.clone(), H + k * SEC, v);
        }
        store.write(&b).unwrap();
    };
    rewrite(10, 100..200, 0.0);
    store.flush().unwrap();
    rewrite(3, 3_400..3_410, 50.0);
    let store = Arc::new(store);
    let above_5 = 35 + (3_500 - 100) + 500 + 10; // port 7, port 10 but the rewrite, port 100's 6s, port 3
    let cases = [
        ("SELECT count(*) FROM samples WHERE value > 5", above_5),
        ("SELECT count(*) FROM samples WHERE 5 < value AND value <= 1e9", above_5),
        ("SELECT count(*) FROM samples WHERE value BETWEEN 10 AND 20", 35),
        ("SELECT count(*) FROM samples WHERE value = 9", 3_400),
        ("SELECT count(*) FROM samples WHERE value < -1", 0),
        ("SELECT count(*) FROM samples WHERE value > -1", 200 * 3_500),
        ("SELECT count(*) FROM samples WHERE value > 5 AND value < 5", 0),
    ];
    let mut bytes = std::collections::HashMap::new();
    // Footers are read by the first scan of the store only: plan one so that every case
    // below reads column chunks only.
    store.split_scan(lockstep_engine::store::ScanRequest::default()).unwrap();
    for threads in [1usize, 2] {
        let ctx =
            SessionContext::new_with_config(datafusion::prelude::SessionConfig::new().with_target_partitions(threads));
        ctx.register_table("samples", Arc::new(SamplesTable::new(store.clone(), Arc::new(MetricCatalog::builtin()))))
            .unwrap();
        for (sql, want) in cases {
            faulty.record_reads();
            assert_eq!(query_i64(&ctx, sql), vec![want], "{sql} on {threads} threads");
            let read: u64 = faulty
                .reads()
                .into_iter()
                .filter(|r| r.path.extension().is_some_and(|e| e == "parquet"))
                .map(|r| r.range.end - r.range.start)
                .sum();
            bytes.insert((sql, threads), read);
        }
    }
    // Per-series aggregates over a pruned scan (split by series where the plan allows).
    for threads in [1usize, 2, 3] {
        let ctx = crate::plan::context(datafusion::prelude::SessionConfig::new().with_target_partitions(threads));
        ctx.register_table("samples", Arc::new(SamplesTable::new(store.clone(), Arc::new(MetricCatalog::builtin()))))
            .unwrap();
        let sql = "SELECT count(*), sum(n), CAST(sum(m) AS BIGINT) FROM (SELECT series_id, count(*) AS n, \
                   max(value) AS m FROM samples WHERE value > 5 GROUP BY series_id)";
        assert_eq!(query_i64(&ctx, sql), vec![4, above_5, 12 + 9 + 6 + 50], "{threads} threads");
    }
    let all = bytes[&("SELECT count(*) FROM samples WHERE value > -1", 1)];
    for (sql, _) in &cases[..5] {
        assert!(bytes[&(*sql, 1)] < all, "{sql} read as much as a full scan: {bytes:?}");
        assert_eq!(bytes[&(*sql, 1)], bytes[&(*sql, 2)], "{sql}: {bytes:?}");
    }
    // Nothing is below -1: only the merged first row group is read; above 5 the
    // second row group's values too, for port 100's run only.
    assert!(bytes[&(cases[4].0, 1)] < bytes[&(cases[0].0, 1)], "{bytes:?}");
}

/// Value pruning never changes an answer at the edges of the float order: runs of NaN, -0.0,
/// +0.0, ±inf and huge values, filtered with every comparison against those same numbers,
/// count what DataFusion counts over the same values in memory (no pruning there).
#[test]
fn value_pruning_keeps_every_match_at_zeros_nan_and_infinities() {
    let dir = tempfile::tempdir().unwrap();
    let config =
        StoreConfig { max_future_ns: None, flush_rows: usize::MAX, allow_non_finite: true, ..Default::default() };
    let store = Store::open(dir.path(), config).unwrap();
    let runs: [&[f64]; 7] =
        [&[f64::NAN, 1.0], &[-0.0], &[0.0], &[f64::INFINITY], &[f64::NEG_INFINITY], &[1e300, -1e300], &[0.1, 0.2]];
    let mut b = WriteBatch::default();
    let mut all = Vec::new();
    for (s, values) in runs.iter().enumerate() {
        let key = SeriesKey::new("m", [("host", format!("h{s}"))]);
        // 1,100 rows a run: long enough for ranges per run.
        for k in 0..1_100 {
            let v = values[k % values.len()];
            b.push(key.clone(), H + k as i64 * SEC, v);
            all.push(v);
        }
    }
    store.write(&b).unwrap();
    store.flush().unwrap();
    let ctx = SessionContext::new();
    ctx.register_table("samples", Arc::new(SamplesTable::new(Arc::new(store), Arc::new(MetricCatalog::builtin()))))
        .unwrap();
    let schema =
        Arc::new(arrow::datatypes::Schema::new(vec![arrow::datatypes::Field::new("value", DataType::Float64, false)]));
    let batch = arrow::array::RecordBatch::try_new(
        schema.clone(),
        vec![Arc::new(arrow::array::Float64Array::from(all)) as arrow::array::ArrayRef],
    )
    .unwrap();
    let mem = datafusion::datasource::MemTable::try_new(schema, vec![vec![batch]]).unwrap();
    ctx.register_table("reference", Arc::new(mem)).unwrap();
    assert_eq!(query_i64(&ctx, "SELECT count(*) FROM samples"), vec![7 * 1_100]);
    let numbers = ["'-inf'::DOUBLE", "-1e300", "-0.0", "0.0", "0.1", "1.0", "1e300", "'inf'::DOUBLE"];
    for op in [">", ">=", "<", "<=", "="] {
        for x in numbers {
            let ours = query_i64(&ctx, &format!("SELECT count(*) FROM samples WHERE value {op} {x}"));
            let want = query_i64(&ctx, &format!("SELECT count(*) FROM reference WHERE value {op} {x}"));
            assert_eq!(ours, want, "value {op} {x}");
        }
    }
    let between = "SELECT count(*) FROM {} WHERE value BETWEEN -0.0 AND 0.0";
    assert_eq!(
        query_i64(&ctx, &between.replace("{}", "samples")),
        query_i64(&ctx, &between.replace("{}", "reference"))
    );
}

/// The table reuses its per-series dictionaries between queries, and rebuilds them when a
/// series, a label key or a clock model arrives in between: later queries see all three.
#[test]
fn dictionaries_follow_new_series_labels_and_clock_models() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let ctx = SessionContext::new();
    let table = Arc::new(SamplesTable::new(store.clone(), Arc::new(MetricCatalog::builtin())));
    ctx.register_table("samples", table.clone()).unwrap();
    let count_metric = |m: &str| query_i64(&ctx, &format!("SELECT count(*) FROM samples WHERE metric = '{m}'"))[0];
    assert_eq!(count_metric("m"), 3 * 3_600);
    let first = table.dictionaries.0.lock().unwrap().as_ref().map(|b| b.values.clone()).unwrap();
    assert_eq!(count_metric("m"), 3 * 3_600);
    let again = table.dictionaries.0.lock().unwrap().as_ref().map(|b| b.values.clone()).unwrap();
    assert!(Arc::ptr_eq(&first, &again), "an unchanged catalog reuses the dictionaries");
    // A new session over the same store (as `lockstep sql` and the servers make per
    // statement) reuses them too; one with another metric catalog gets its own values.
    let second = SessionContext::new();
    second
        .register_table("samples", Arc::new(SamplesTable::new(store.clone(), Arc::new(MetricCatalog::builtin()))))
        .unwrap();
    assert_eq!(query_i64(&second, "SELECT count(*) FROM samples WHERE metric = 'm'"), vec![3 * 3_600]);
    let shared = table.dictionaries.0.lock().unwrap().as_ref().map(|b| b.values.clone()).unwrap();
    assert!(Arc::ptr_eq(&first, &shared), "a second session over the store reuses them");
    // So does a scan rebuilt from its portable form (a distributed worker's, per request).
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let physical = rt.block_on(async {
        second.sql("SELECT value FROM samples WHERE metric = 'm'").await.unwrap().create_physical_plan().await.unwrap()
    });
    let mut scans = vec![physical];
    let portable = loop {
        let node = scans.pop().expect("a SamplesExec in the plan");
        if let Some(exec) = node.downcast_ref::<exec::SamplesExec>() {
            break exec.to_portable().unwrap();
        }
        scans.extend(node.children().into_iter().cloned());
    };
    let rebuilt = exec::SamplesExec::from_portable(&store, &MetricCatalog::builtin(), &portable).unwrap();
    assert!(Arc::ptr_eq(&first, &rebuilt.dict_values()), "a rebuilt scan reuses them");
    let mut custom = MetricCatalog::builtin();
    let toml = "[[metric]]\nfamily = \"m\"\ndomain = \"storage\"\nkind = \"gauge\"\nunit = \"bytes\"\n\
                class = \"throughput\"\nentity = \"node\"\nmeaning = \"a test gauge\"\n";
    custom.extend_from_toml(toml).unwrap();
    let third = SessionContext::new();
    third.register_table("samples", Arc::new(SamplesTable::new(store.clone(), Arc::new(custom)))).unwrap();
    assert_eq!(query_i64(&third, "SELECT count(*) FROM samples WHERE domain = 'storage'"), vec![3 * 3_600]);
    assert_eq!(query_i64(&ctx, "SELECT count(*) FROM samples WHERE domain = 'storage'"), vec![0]);

    // A new series with a new metric and a new label key (written, not yet flushed).
    let key = SeriesKey::new("m2", [("host", "b"), ("rack", "r9")]);
    let timestamps: Vec<i64> = (0..10).map(|i| H + i * SEC).collect();
    store.write(&WriteBatch { series: vec![(key, SeriesSamples { timestamps, values: vec![2.0; 10] })] }).unwrap();
    assert_eq!(count_metric("m2"), 10);
    assert_eq!(query_i64(&ctx, "SELECT count(*) FROM samples WHERE rack = 'r9' AND host = 'b'"), vec![10]);

    // A new clock model for host b (+5 s): the corrected time of its samples moves.
    let earliest =
        |h: &str| query_i64(&ctx, &format!("SELECT CAST(min(time) AS BIGINT) FROM samples WHERE host = '{h}'"))[0];
    assert_eq!(earliest("b"), H);
    set_offset(&store, "b", 5 * SEC);
    assert_eq!(earliest("b"), H - 5 * SEC);
    assert_eq!(earliest("a"), H - OFFSET);
}

/// `count(*)` over the whole table is answered from the footers' and the buffer's row counts
/// (no scan in the plan) when no unit merges overlapping sources; with a merge, a filter or
/// a limit the scan runs, and every count is the deduplicated one.
#[test]
fn whole_table_count_comes_from_row_counts_unless_sources_overlap() {
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let plan_of = |ctx: &SessionContext, sql: &str| {
        let batches = rt.block_on(async { ctx.sql(&format!("EXPLAIN {sql}")).await.unwrap().collect().await.unwrap() });
        arrow::util::pretty::pretty_format_batches(&batches).unwrap().to_string()
    };
    let dir = tempfile::tempdir().unwrap();
    let plain = store(dir.path());
    let key = SeriesKey::new("m", [("host", "z")]);
    let timestamps: Vec<i64> = (0..7).map(|i| H + i * SEC).collect();
    plain.write(&WriteBatch { series: vec![(key, SeriesSamples { timestamps, values: vec![1.0; 7] })] }).unwrap();
    let other = tempfile::tempdir().unwrap();
    let (merged, _faulty) = observed_store(other.path());
    for (store, rows, from_counts) in [(plain, 3 * 3_600 + 7, true), (merged, 80 * 3_500 + 10, false)] {
        for threads in [1usize, 2] {
            let config = datafusion::prelude::SessionConfig::new().with_target_partitions(threads);
            let ctx = SessionContext::new_with_config(config);
            ctx.register_table(
                "samples",
                Arc::new(SamplesTable::new(store.clone(), Arc::new(MetricCatalog::builtin()))),
            )
            .unwrap();
            let sql = "SELECT count(*) FROM samples";
            assert_eq!(query_i64(&ctx, sql), vec![rows]);
            let plan = plan_of(&ctx, sql);
            assert_eq!(!plan.contains("SamplesExec"), from_counts, "{plan}");
            // Filtered or limited: the scan runs and counts the same rows.
            let filtered = "SELECT count(*) FROM samples WHERE local_time >= to_timestamp_nanos(0)";
            assert_eq!(query_i64(&ctx, filtered), vec![rows]);
            assert!(plan_of(&ctx, filtered).contains("SamplesExec"));
            // EXPLAIN ANALYZE shows what the scan produced and the time it took.
            let analyzed = plan_of(&ctx, &format!("ANALYZE {filtered}"));
            let scan = analyzed.lines().find(|l| l.contains("SamplesExec")).unwrap_or_default();
            assert!(scan.contains("output_rows=") && scan.contains("elapsed_compute="), "{analyzed}");
            // Batches and bytes are counted too (they stayed 0 when only rows were recorded).
            for counted in ["output_batches=", "output_bytes="] {
                let shown = scan.split(counted).nth(1).unwrap_or_default();
                assert!(!shown.is_empty() && !shown.starts_with('0'), "{counted} in {analyzed}");
            }
            let limited = "SELECT count(*) FROM (SELECT value FROM samples LIMIT 5)";
            assert_eq!(query_i64(&ctx, limited), vec![5]);
        }
    }
}

/// The scan's batches are of the session's `batch_size` (8192 rows here), not whole row groups
/// (256 k rows, about 70 MB for a wide `SELECT *`; every queue of batches between the scan
/// and the client held that many: about 1 GB for one result streamed to a slow PostgreSQL
/// client), and they hold their own rows: DataFusion's per-batch memory accounting (what a
/// sort reserves) adds up to about the bytes of the rows, not to a row group's buffers once per
/// slice (32 times with zero-copy slices of 8192 rows), also under series and time filters.
#[test]
fn batch_memory_accounting_matches_the_rows() {
    use datafusion::common::utils::memory::get_record_batch_memory_size;
    let dir = tempfile::tempdir().unwrap();
    let (store, _faulty) = observed_store(dir.path());
    let ctx = SessionContext::new_with_config(datafusion::prelude::SessionConfig::new().with_target_partitions(1));
    ctx.register_table("samples", Arc::new(SamplesTable::new(store, Arc::new(MetricCatalog::builtin())))).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    for (sql, bytes_per_row) in [
        ("SELECT value FROM samples", 8),
        ("SELECT value, local_time FROM samples WHERE local_time < to_timestamp_nanos(0) + INTERVAL '1' SECOND", 16),
        ("SELECT value FROM samples WHERE dev = 'd7'", 8),
        ("SELECT value, local_time FROM samples WHERE dev IN ('d7', 'd8')", 16),
    ] {
        let sql = sql.replace("to_timestamp_nanos(0)", &format!("to_timestamp_nanos({})", H + 1_000 * SEC));
        let batches = rt.block_on(async { ctx.sql(&sql).await.unwrap().collect().await.unwrap() });
        let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
        let counted: usize = batches.iter().map(get_record_batch_memory_size).sum();
        assert!(rows > 0, "{sql}");
        let batch_size = ctx.state().config().batch_size();
        assert!(batches.iter().all(|b| b.num_rows() <= batch_size), "{sql}: batches over {batch_size} rows");
        let allowed = rows * bytes_per_row * 3 / 2 + 4096;
        assert!(counted <= allowed, "{sql}: {counted} bytes counted for {rows} rows in {} batches", batches.len());
    }
}

/// Units move between the running partitions of a scan: partition 1 stalls (nobody takes its
/// batches) while partition 0 is read to the end, and partition 0 reads what partition 1 had
/// not claimed. Every row is read once, in either order of reading, and again when the plan
/// runs a second time.
#[test]
fn a_stalled_partition_gives_its_units_to_a_running_one() {
    use datafusion::physical_plan::ExecutionPlanProperties;
    use futures::StreamExt;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreConfig { max_future_ns: None, ..Default::default() }).unwrap();
    // 20 hourly files (one unit each) of 60 rows.
    for hour in 0..20 {
        let timestamps: Vec<i64> = (0..60).map(|i| H + hour * HOUR + i * SEC).collect();
        let values = vec![1.0; timestamps.len()];
        let key = SeriesKey::new("m", [("host", "a")]);
        store.write(&WriteBatch { series: vec![(key, SeriesSamples { timestamps, values })] }).unwrap();
        store.flush().unwrap();
    }
    let store = Arc::new(store);
    let ctx = SessionContext::new_with_config(datafusion::prelude::SessionConfig::new().with_target_partitions(2));
    let table = SamplesTable::new(store, Arc::new(MetricCatalog::builtin()));
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).build().unwrap();
    let plan = rt.block_on(async { table.scan(&ctx.state(), Some(&vec![6]), &[], None).await.unwrap() });
    assert_eq!(plan.output_partitioning().partition_count(), 2);
    let times = |batches: Vec<RecordBatch>| -> Vec<i64> {
        batches
            .iter()
            .flat_map(|b| {
                let t = b.column(0).as_any().downcast_ref::<TimestampNanosecondArray>().unwrap();
                t.values().to_vec()
            })
            .collect()
    };
    let everything: Vec<i64> = (0..20).flat_map(|hour| (0..60).map(move |i| H + hour * HOUR + i * SEC)).collect();
    for first in [0usize, 1, 0] {
        let (read_first, read_second) = rt.block_on(async {
            let task = ctx.task_ctx();
            let mut stalled = plan.execute(1 - first, task.clone()).unwrap();
            let running = plan.execute(first, task).unwrap();
            let first_batches: Vec<RecordBatch> = running.map(|b| b.unwrap()).collect().await;
            let mut second_batches = Vec::new();
            while let Some(b) = stalled.next().await {
                second_batches.push(b.unwrap());
            }
            (times(first_batches), times(second_batches))
        });
        // The stalled partition claims at most its channel's 4 batches and the one it waits
        // to send (a unit each); the running one reads its own 10 and takes the rest.
        assert!(read_first.len() >= (20 - 5) * 60, "{} rows read first", read_first.len());
        let mut all: Vec<i64> = read_first.into_iter().chain(read_second).collect();
        all.sort_unstable();
        assert_eq!(all, everything);
    }
}

/// A scan builds only the per-series string columns it projects or filters on (a filter
/// evaluated per series gets the columns it names), and later scans reuse what was built, on a
/// store without clock models too (whose empty model set is a new one at each scan).
#[test]
fn string_columns_are_built_as_they_are_used() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _faulty) = observed_store(dir.path());
    let table = Arc::new(SamplesTable::new(store, Arc::new(MetricCatalog::builtin())));
    let ctx = SessionContext::new();
    ctx.register_table("samples", table.clone()).unwrap();
    let built = || table.dictionaries.0.lock().unwrap().as_ref().map_or(0, |b| b.values.built());
    assert_eq!(query_i64(&ctx, "SELECT count(*) FROM samples WHERE value > 0"), vec![80 * 3_500 + 10]);
    assert_eq!(built(), 0, "no string column is needed");
    assert_eq!(query_i64(&ctx, "SELECT count(DISTINCT host) FROM samples"), vec![2]);
    assert_eq!(built(), 1, "host only");
    // A function of a label is evaluated per series, over `dev` only: d0–d9 (d5 has 10
    // buffered rows more).
    assert_eq!(query_i64(&ctx, "SELECT count(*) FROM samples WHERE length(dev) = 2"), vec![10 * 3_500 + 10]);
    assert_eq!(built(), 2);
    let even = "SELECT count(*) FROM samples WHERE length(dev) = 2 AND host = 'h0'";
    assert_eq!(query_i64(&ctx, even), vec![5 * 3_500]);
    assert_eq!(query_i64(&ctx, "SELECT count(DISTINCT metric) FROM samples WHERE upper(host) = 'H1'"), vec![1]);
    assert_eq!(built(), 3);
}

/// Rows of a series id the catalog lacks (its catalog files lost) are an error naming the
/// cause, not an index-out-of-bounds panic in the scan (the writer refuses such a store).
#[test]
fn rows_of_series_the_catalog_lacks_are_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreConfig { max_future_ns: None, ..Default::default() }).unwrap();
    let mut batch = WriteBatch::default();
    for i in 0..5i64 {
        batch.push(SeriesKey::new("m", [("host", format!("h{i}"))]), H + i, i as f64);
    }
    store.write(&batch).unwrap();
    store.close().unwrap();
    std::fs::remove_file(dir.path().join("series.json")).unwrap();
    let _ = std::fs::remove_dir_all(dir.path().join("series"));
    let store = Arc::new(Store::open_read_only(dir.path()).unwrap());
    let ctx = SessionContext::new();
    ctx.register_table("samples", Arc::new(SamplesTable::new(store, Arc::new(MetricCatalog::builtin())))).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let err = rt
        .block_on(async { ctx.sql("SELECT metric, time, value FROM samples").await.unwrap().collect().await })
        .unwrap_err()
        .to_string();
    assert!(err.contains("holds rows of series id 4, but the series catalog has 0 series"), "{err}");
}
