//! SQL over a store whose retention retired series.

use super::*;

/// A store whose retention retired series: SQL over the writer (its dictionaries built before
/// the retirement, then rebuilt) and over a reader opened after it names every live series by
/// its labels, including a key written again after its retirement (a new id).
#[test]
fn sql_names_live_series_right_after_a_retirement() {
    let dir = tempfile::tempdir().unwrap();
    let now = H + 10 * HOUR;
    let config = StoreConfig { retention_ns: Some(3 * HOUR), max_future_ns: None, ..StoreConfig::default() };
    let clock = Arc::new(lockstep_engine::wallclock::ManualClock(now.into()));
    let store =
        Arc::new(Store::open_with(dir.path(), config, Arc::new(lockstep_engine::storage::OsStorage), clock).unwrap());
    let write = |pod: &str, t: i64, v: f64| {
        let key = SeriesKey::new("m", [("host", "a"), ("pod", pod)]);
        store
            .write(&WriteBatch { series: vec![(key, SeriesSamples { timestamps: vec![t], values: vec![v] })] })
            .unwrap();
    };
    // Pods p0..p3 in an expired hour, p4 and p5 in a live one (p5 there too).
    for p in 0..4 {
        write(&format!("p{p}"), H + i64::from(p), f64::from(p));
    }
    write("p4", H + 9 * HOUR, 4.0);
    write("p5", H + 9 * HOUR, 5.0);
    write("p5", H, 50.0);
    store.flush().unwrap();
    let rows = |engine: &crate::QueryEngine| -> Vec<(String, i64)> {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let batches = rt
            .block_on(engine.collect("SELECT CAST(pod AS VARCHAR), CAST(value AS BIGINT) FROM samples ORDER BY 1, 2"))
            .unwrap();
        let mut out = Vec::new();
        for b in batches {
            let pod = arrow::compute::cast(b.column(0), &DataType::Utf8).unwrap();
            let pod = pod.as_any().downcast_ref::<StringArray>().unwrap();
            let v = b.column(1).as_any().downcast_ref::<Int64Array>().unwrap();
            out.extend((0..b.num_rows()).map(|i| (pod.value(i).to_string(), v.value(i))));
        }
        out
    };
    let engine = crate::QueryEngine::new(store.clone()).unwrap();
    assert_eq!(rows(&engine).len(), 7);
    let summary = store.compact(false).unwrap();
    assert_eq!((summary.files_expired, summary.series_retired), (1, 4));
    // p1 written again: a new id after the retired ones.
    write("p1", H + 9 * HOUR + 1, 11.0);
    assert_eq!(store.series_id(&SeriesKey::new("m", [("host", "a"), ("pod", "p1")])).unwrap(), Some(6));
    let want: Vec<(String, i64)> = vec![("p1".into(), 11), ("p4".into(), 4), ("p5".into(), 5)];
    assert_eq!(rows(&crate::QueryEngine::new(store.clone()).unwrap()), want, "the writer");
    store.flush().unwrap();
    let reader = Arc::new(Store::open_read_only(dir.path()).unwrap());
    assert_eq!(reader.with_catalog(|c| (c.len(), c.live_len())).unwrap(), (7, 3));
    assert_eq!(rows(&crate::QueryEngine::new(reader).unwrap()), want, "a reader opened after");
}
