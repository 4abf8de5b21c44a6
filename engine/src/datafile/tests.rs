use super::*;
use crate::storage::OsStorage;

fn sample_rows() -> Rows {
    let mut rows = Rows::default();
    for s in 0..50u32 {
        for t in 0..1000i64 {
            let v = if s % 3 == 0 { (t * 17) as f64 } else { (s as f64).sin() + t as f64 * 0.001 };
            rows.push(s, 1_700_000_000_000_000_000 + t * 1_000_000_000, v);
        }
    }
    rows
}

#[test]
fn write_read_round_trip_with_pruning() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.parquet");
    let rows = sample_rows();
    let stats = write_file(&OsStorage, &path, &rows, WriteOptions::default()).unwrap();
    assert_eq!(stats.rows, 50_000);
    assert_eq!((stats.min_series, stats.max_series), (0, 49));
    let all = read_file(&OsStorage, &path, &RowFilter::default()).unwrap();
    assert_eq!(all.series, rows.series);
    assert_eq!(all.time, rows.time);
    assert!(all.value.iter().zip(&rows.value).all(|(a, b)| a.to_bits() == b.to_bits()));

    let mut set = RoaringBitmap::new();
    set.insert(3);
    set.insert(7);
    let t0 = 1_700_000_000_000_000_000 + 10 * 1_000_000_000;
    let filter = RowFilter { time: Some((t0, t0 + 5_000_000_000)), series: Some(&set) };
    let some = read_file(&OsStorage, &path, &filter).unwrap();
    assert_eq!(some.len(), 10);
    assert!(some.series.iter().all(|s| *s == 3 || *s == 7));
}

#[test]
fn wrong_schema_and_garbage_are_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("g.parquet");
    std::fs::write(&garbage, b"PAR1 definitely not parquet").unwrap();
    let e = read_file(&OsStorage, &garbage, &RowFilter::default()).unwrap_err();
    assert!(matches!(e, Error::DataFileInvalid { .. }), "{e}");

    let other = dir.path().join("o.parquet");
    let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
    let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(vec![1i64]))]).unwrap();
    let mut w = ArrowWriter::try_new(std::fs::File::create(&other).unwrap(), schema, None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    let e = read_file(&OsStorage, &other, &RowFilter::default()).unwrap_err();
    assert!(e.to_string().contains("wrong schema"), "{e}");

    let e = read_file(&OsStorage, &dir.path().join("missing.parquet"), &RowFilter::default()).unwrap_err();
    assert!(matches!(e, Error::Io { .. }), "{e}");
}
