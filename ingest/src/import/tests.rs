#![allow(clippy::unwrap_used, clippy::expect_used)]
use super::*;
use lockstep_engine::StoreConfig;
use lockstep_engine::store::ScanRequest;

fn store(dir: &Path) -> Store {
    Store::open(dir, StoreConfig { max_future_ns: None, ..Default::default() }).unwrap()
}

fn write(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p
}

const T: i64 = 1_767_225_600_000_000_000;

#[test]
fn csv_imports_with_labels_and_reports() {
    let tmp = tempfile::tempdir().unwrap();
    let bundle = tmp.path().join("b");
    std::fs::create_dir(&bundle).unwrap();
    write(
        &bundle,
        "samples.csv",
        &format!(
            "time,host,metric,value,gpu,device\n{T},node-01,DCGM_FI_DEV_GPU_UTIL,97,3,\n{},node-01,DCGM_FI_DEV_GPU_UTIL,96.5,3,\n{T},node-02,node_infiniband_symbol_error_total,5,,mlx5_0\n",
            T + 1_000_000_000
        ),
    );
    let s = store(&tmp.path().join("db"));
    let report = import_bundle(&s, &bundle, &ImportOptions::default(), &mut |_, _| {}).unwrap();
    assert_eq!((report.samples, report.series, report.skipped), (3, 2, 0));
    assert_eq!(report.time_span, Some((T, T + 1_000_000_000)));
    let rows = s.scan_all(ScanRequest::default()).unwrap();
    assert_eq!(rows.value, vec![97.0, 96.5, 5.0]);
    let keys = s.with_catalog(|c| c.live().map(|(_, k)| k.to_string()).collect::<Vec<_>>()).unwrap();
    assert_eq!(keys[0], r#"DCGM_FI_DEV_GPU_UTIL{gpu="3",host="node-01"}"#);
}

/// Samples that repeat a series and timestamp within the import are counted as duplicates:
/// the store keeps the last of each, so the report does not overstate the rows stored (QA
/// finding 9).
#[test]
fn duplicates_within_an_import_are_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let bundle = tmp.path().join("b");
    std::fs::create_dir(&bundle).unwrap();
    let mut body = String::from("time,host,metric,value\n");
    for round in 0..3 {
        for i in 0..4 {
            body.push_str(&format!("{},h,m,{}\n", T + i * 1_000_000_000, round * 10 + i));
        }
    }
    write(&bundle, "samples.csv", &body);
    let s = store(&tmp.path().join("db"));
    let report = import_bundle(&s, &bundle, &ImportOptions::default(), &mut |_, _| {}).unwrap();
    assert_eq!((report.samples, report.duplicates, report.series), (12, 8, 1));
    let rows = s.scan_all(ScanRequest::default()).unwrap();
    assert_eq!(rows.value, vec![20.0, 21.0, 22.0, 23.0], "the last of each is kept");
}

/// A bundle with both samples files, or a `samples.parquet` directory (a partitioned
/// dataset), is refused, saying why, instead of one file winning without a word.
#[test]
fn ambiguous_samples_files_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let bundle = tmp.path().join("b");
    std::fs::create_dir(&bundle).unwrap();
    write(&bundle, "samples.csv", &format!("time,host,metric,value\n{T},h,m,1\n"));
    assert_eq!(samples_file(&bundle).unwrap(), bundle.join("samples.csv"));
    std::fs::create_dir(bundle.join("samples.parquet")).unwrap();
    let err = samples_file(&bundle).unwrap_err().to_string();
    assert!(err.contains("samples.parquet: is a directory (a partitioned dataset?)"), "{err}");
    std::fs::remove_dir(bundle.join("samples.parquet")).unwrap();
    write(&bundle, "samples.parquet", "");
    let s = store(&tmp.path().join("db"));
    let err = import_bundle(&s, &bundle, &ImportOptions::default(), &mut |_, _| {}).unwrap_err().to_string();
    assert!(err.contains("has both samples.parquet and samples.csv"), "{err}");
}

#[test]
fn bad_rows_fail_the_file_or_are_skipped() {
    let tmp = tempfile::tempdir().unwrap();
    let csv = write(
        tmp.path(),
        "samples.csv",
        &format!(
            "time,host,metric,value\n{T},h,m,1\n{T},h,m,notanumber\nxyz,h,m,2\n{T},,m,3\n{T},h,m,inf\n{T},h,m\n{},h,m,4\n",
            T + 1
        ),
    );
    let s = store(&tmp.path().join("db"));
    let e = import_file(&s, &csv, &ImportOptions::default(), &mut |_, _| {}).unwrap_err();
    assert_eq!(e.to_string(), format!("{}: row 2: value \"notanumber\" is not a number", csv.display()));
    assert!(s.scan_all(ScanRequest::default()).unwrap().is_empty(), "a bad file imports nothing");

    let opts = ImportOptions { skip_bad_rows: true };
    let report = import_file(&s, &csv, &opts, &mut |_, _| {}).unwrap();
    assert_eq!((report.samples, report.skipped), (2, 5), "{:?}", report.skipped_examples);
    let reasons = report.skipped_examples.join("\n");
    assert!(reasons.contains("row 3: time \"xyz\""), "{reasons}");
    assert!(reasons.contains("row 4: series m has no host label"), "{reasons}");
    assert!(reasons.contains("row 5: value inf is not finite"), "{reasons}");
    assert!(reasons.contains("row 6: has 3 fields, the header has 4"), "{reasons}");
}

/// A bundle of only `topology.json` and `jobs.json` (the cluster and its jobs, for data that
/// collectors write) imports; a second one replaces them as new versions.
#[test]
fn a_bundle_of_only_topology_and_jobs_imports() {
    let tmp = tempfile::tempdir().unwrap();
    let s = store(&tmp.path().join("db"));
    let bundle = tmp.path().join("b");
    std::fs::create_dir(&bundle).unwrap();
    write(&bundle, "topology.json", r#"{"nodes": [{"name": "n1", "gpus": 8}]}"#);
    write(&bundle, "jobs.json", r#"[{"job": "j", "nodes": ["n1"], "start": "2026-01-01T00:00:00Z"}]"#);
    let report = import_bundle(&s, &bundle, &ImportOptions::default(), &mut |_, _| {}).unwrap();
    assert_eq!(report.samples, 0);
    assert_eq!(parse_jobs(&s.read_document("jobs.json").unwrap().unwrap()).unwrap()[0].start, T);
    write(&bundle, "jobs.json", r#"[{"job": "j", "nodes": ["n2"], "start": 0}]"#);
    let e = import_bundle(&s, &bundle, &ImportOptions::default(), &mut |_, _| {}).unwrap_err();
    assert!(e.to_string().contains("unknown node n2"), "{e}");
    write(&bundle, "jobs.json", r#"[{"job": "k", "nodes": ["n1"], "start": 0}]"#);
    import_bundle(&s, &bundle, &ImportOptions::default(), &mut |_, _| {}).unwrap();
    assert_eq!(s.document_versions("jobs.json").unwrap(), vec![1, 2]);
    assert_eq!(s.document_versions("topology.json").unwrap(), vec![1, 2]);
}

#[test]
fn wrong_files_get_specific_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let s = store(&tmp.path().join("db"));
    let e = import_bundle(&s, tmp.path(), &ImportOptions::default(), &mut |_, _| {}).unwrap_err();
    assert!(e.to_string().contains("has no samples.parquet or samples.csv"), "{e}");
    let csv = write(tmp.path(), "a.csv", "time,metric,value\n1,m,1\n");
    let e = import_file(&s, &csv, &ImportOptions::default(), &mut |_, _| {}).unwrap_err();
    assert!(e.to_string().ends_with("missing required column host"), "{e}");
    let csv = write(tmp.path(), "b.csv", "");
    let e = import_file(&s, &csv, &ImportOptions::default(), &mut |_, _| {}).unwrap_err();
    assert!(e.to_string().contains("missing required column"), "{e}");
    let pq = write(tmp.path(), "c.parquet", "PAR1garbagePAR1");
    let e = import_file(&s, &pq, &ImportOptions::default(), &mut |_, _| {}).unwrap_err();
    assert!(e.to_string().contains("not a parquet file"), "{e}");
    let csv = write(tmp.path(), "d.csv", &format!("time,host,metric,value,series_id\n{T},h,m,1,x\n"));
    let e = import_file(&s, &csv, &ImportOptions::default(), &mut |_, _| {}).unwrap_err();
    assert!(e.to_string().contains("reserved"), "{e}");
    // Text that is not UTF-8 (Latin-1) in a label, the host, the metric or a header name is an
    // error naming the row and column, not a missing label (which merged two series into one).
    let latin1 = |name: &str, body: String| {
        let p = tmp.path().join(name);
        std::fs::write(&p, body.bytes().map(|b| if b == 1 { 0xe9 } else { b }).collect::<Vec<u8>>()).unwrap();
        import_file(&s, &p, &ImportOptions::default(), &mut |_, _| {}).unwrap_err().to_string()
    };
    let e = latin1("e.csv", format!("time,host,metric,value,gpu\n{T},n1,m,1,0\n{T},n1,m,2,\u{1}\n"));
    assert!(e.ends_with("row 2: column gpu is not valid UTF-8 (byte 0xe9 at offset 0)"), "{e}");
    let e = latin1("f.csv", format!("time,host,metric,value\n{T},n\u{1},m,1\n"));
    assert!(e.ends_with("row 1: column host is not valid UTF-8 (byte 0xe9 at offset 1)"), "{e}");
    let e = latin1("g.csv", format!("time,host,metric,value\n{T},n1,temp\u{1},1\n"));
    assert!(e.ends_with("row 1: column metric is not valid UTF-8 (byte 0xe9 at offset 4)"), "{e}");
    let e = latin1("h.csv", format!("time,host,metric,value,r\u{1}gion\n{T},n1,m,1,eu\n"));
    assert!(e.contains("header column 5") && e.contains("is not valid UTF-8"), "{e}");
    let e = latin1("i.csv", format!("time,host,metric,value,gpu,gpu\n{T},n1,m,1,0,1\n"));
    assert!(e.ends_with("column \"gpu\" appears twice in the header"), "{e}");
    assert!(s.scan_all(ScanRequest::default()).unwrap().value.is_empty(), "nothing imported");
}

#[test]
fn parquet_imports_and_checks_types() {
    use arrow::array::{Float64Array, Int64Array, RecordBatch, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;
    let tmp = tempfile::tempdir().unwrap();
    let write_pq = |name: &str, value_type: DataType, values: Arc<dyn arrow::array::Array>| {
        let schema = Arc::new(Schema::new(vec![
            Field::new("time", DataType::Int64, false),
            Field::new("host", DataType::Utf8, true),
            Field::new("metric", DataType::Utf8, false),
            Field::new("value", value_type, true),
            Field::new("pool", DataType::Utf8, true),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(vec![T, T + 1])),
                Arc::new(StringArray::from(vec![Some("s1"), Some("s1")])),
                Arc::new(StringArray::from(vec!["lat", "lat"])),
                values,
                Arc::new(StringArray::from(vec![Some("lustre-a"), None])),
            ],
        )
        .unwrap();
        let p = tmp.path().join(name);
        let mut w = parquet::arrow::ArrowWriter::try_new(std::fs::File::create(&p).unwrap(), schema, None).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        p
    };
    let s = store(&tmp.path().join("db"));
    let good = write_pq("good.parquet", DataType::Float64, Arc::new(Float64Array::from(vec![0.5, 0.25])));
    let r = import_file(&s, &good, &ImportOptions::default(), &mut |_, _| {}).unwrap();
    assert_eq!((r.samples, r.series), (2, 2));
    let bad = write_pq("bad.parquet", DataType::Utf8, Arc::new(StringArray::from(vec!["a", "b"])));
    let e = import_file(&s, &bad, &ImportOptions::default(), &mut |_, _| {}).unwrap_err();
    assert!(e.to_string().contains("column value has type Utf8, expected Float64"), "{e}");
    // Integers beyond 2^53 are stored as the nearest f64, and the report says so (QA finding
    // 12b); 2^53 itself and i64::MIN (a power of two) are exact.
    for (ints, rounded) in
        [(vec![(1i64 << 53) + 1, 5], 1), (vec![1 << 53, i64::MIN], 0), (vec![i64::MAX, -(1 << 60) - 1], 2)]
    {
        let big = write_pq("big.parquet", DataType::Int64, Arc::new(Int64Array::from(ints.clone())));
        let r = import_file(&s, &big, &ImportOptions::default(), &mut |_, _| {}).unwrap();
        assert_eq!(r.rounded.0, rounded, "{ints:?}");
        if rounded > 0 {
            let shown = format!("row 1: {} is stored as {}", ints[0], ints[0] as f64 as i128);
            assert_eq!(r.rounded.1.as_deref(), Some(shown.as_str()));
        }
    }
    let csv =
        write(tmp.path(), "big.csv", &format!("time,host,metric,value\n{T},h,m,9007199254740993\n{T},h,n,12.5\n"));
    let r = import_file(&s, &csv, &ImportOptions::default(), &mut |_, _| {}).unwrap();
    assert_eq!(r.rounded, (1, Some("row 1: 9007199254740993 is stored as 9007199254740992".into())));
}

/// What pandas, pyarrow and DuckDB write by default, beyond the plain case: a label column of
/// only None (Parquet type null) is absent, an empty frame's object columns too; a repeated
/// column name is an error; an "end of time" in a microsecond column is one bad row (named, or
/// skipped with --skip-bad-rows), not a failed file.
#[test]
fn parquet_null_columns_repeated_names_and_times_beyond_2262() {
    use arrow::array::TimestampMicrosecondArray;
    use arrow::array::{ArrayRef, Float64Array, Int64Array, NullArray, RecordBatch, StringArray};
    use arrow::datatypes::{Field, Schema};
    use std::sync::Arc;
    let tmp = tempfile::tempdir().unwrap();
    // A file of the named columns, each nullable, of its array's type.
    let write_pq = |name: &str, columns: Vec<(&str, ArrayRef)>| {
        let fields: Vec<Field> = columns.iter().map(|(n, a)| Field::new(*n, a.data_type().clone(), true)).collect();
        let schema = Arc::new(Schema::new(fields));
        let batch = RecordBatch::try_new(schema.clone(), columns.into_iter().map(|(_, a)| a).collect()).unwrap();
        let p = tmp.path().join(name);
        let mut w = parquet::arrow::ArrowWriter::try_new(std::fs::File::create(&p).unwrap(), schema, None).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        p
    };
    let strings = |v: &str, n: usize| Arc::new(StringArray::from(vec![v; n])) as ArrayRef;
    let nulls = |n: usize| Arc::new(NullArray::new(n)) as ArrayRef;
    let times = |t: Vec<i64>| Arc::new(Int64Array::from(t)) as ArrayRef;
    let values = |v: Vec<f64>| Arc::new(Float64Array::from(v)) as ArrayRef;
    let s = store(&tmp.path().join("db"));
    let run = |p: &PathBuf, skip: bool| import_file(&s, p, &ImportOptions { skip_bad_rows: skip }, &mut |_, _| {});

    let null_label = write_pq(
        "null_label.parquet",
        vec![
            ("time", times(vec![T, T + 1])),
            ("host", strings("h", 2)),
            ("metric", strings("m", 2)),
            ("value", values(vec![1.0, 2.0])),
            ("gpu", nulls(2)),
        ],
    );
    let r = run(&null_label, false).unwrap();
    assert_eq!((r.samples, r.series), (2, 1));
    let empty = write_pq(
        "empty.parquet",
        vec![("time", times(vec![])), ("host", nulls(0)), ("metric", nulls(0)), ("value", values(vec![]))],
    );
    assert_eq!(run(&empty, false).unwrap().samples, 0);

    let twice = write_pq(
        "twice.parquet",
        vec![
            ("time", times(vec![T])),
            ("host", strings("h", 1)),
            ("metric", strings("m", 1)),
            ("value", values(vec![1.0])),
            ("gpu", strings("0", 1)),
            ("gpu", strings("x", 1)),
        ],
    );
    let e = run(&twice, false).unwrap_err().to_string();
    assert!(e.contains("column gpu appears twice (columns 5 and 6)"), "{e}");

    let end_of_time = 253_402_214_400_000_000; // 9999-12-31 in µs
    let micros = TimestampMicrosecondArray::from(vec![T / 1000, end_of_time, T / 1000 + 1]).with_timezone("UTC");
    let micros = write_pq(
        "micros.parquet",
        vec![
            ("time", Arc::new(micros) as ArrayRef),
            ("host", strings("h", 3)),
            ("metric", strings("m2", 3)),
            ("value", values(vec![1.0, 2.0, 3.0])),
        ],
    );
    let e = run(&micros, false).unwrap_err().to_string();
    assert!(e.contains("row 2: time 253402214400000000") && e.contains("is outside 1970-2262"), "{e}");
    let r = run(&micros, true).unwrap();
    assert_eq!((r.samples, r.skipped), (2, 1), "{:?}", r.skipped_examples);
}

#[test]
fn parquet_clock_offsets_in_any_timestamp_unit_are_read_as_ns() {
    use arrow::array::{Int64Array, RecordBatch, StringArray, TimestampMillisecondArray};
    use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    use std::sync::Arc;
    let tmp = tempfile::tempdir().unwrap();
    let schema = Arc::new(Schema::new(vec![
        Field::new("host", DataType::Utf8, false),
        Field::new("local_time", DataType::Timestamp(TimeUnit::Millisecond, None), false),
        Field::new("offset_ns", DataType::Int64, false),
        Field::new("uncertainty_ns", DataType::Int64, false),
    ]));
    let ms = T / 1_000_000;
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(StringArray::from(vec!["h"])),
            Arc::new(TimestampMillisecondArray::from(vec![ms])),
            Arc::new(Int64Array::from(vec![2_000])),
            Arc::new(Int64Array::from(vec![10])),
        ],
    )
    .unwrap();
    let path = tmp.path().join("clock_offsets.parquet");
    let mut w = parquet::arrow::ArrowWriter::try_new(std::fs::File::create(&path).unwrap(), schema, None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    let input = clock::read_clock_input(tmp.path()).unwrap();
    assert_eq!(input.offsets.len(), 1);
    assert_eq!(input.offsets[0].local_time, ms * 1_000_000, "milliseconds converted, not taken as ns");
}

/// A bundle whose clock input the store refuses (stamped two days ahead of the writer's
/// clock) imports nothing: the refusal comes before its samples commit, not after, when the
/// rest must store (review of the staged rest: such a rest was named by the manifest, and
/// every later import failed on it).
#[test]
fn a_bundle_with_refused_clock_input_imports_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let bundle = tmp.path().join("b");
    std::fs::create_dir(&bundle).unwrap();
    write(&bundle, "samples.csv", &format!("time,host,metric,value\n{T},h,m,1\n"));
    let s = Store::open(tmp.path().join("db"), StoreConfig::default()).unwrap();
    let ahead = s.now_ns() + 2 * 86_400_000_000_000;
    write(&bundle, "clock_offsets.csv", &format!("host,local_time,offset_ns,uncertainty_ns\nh,{ahead},0,10\n"));
    let e = import_bundle(&s, &bundle, &ImportOptions::default(), &mut |_, _| {}).unwrap_err().to_string();
    assert!(e.contains("ahead of the writer's clock"), "{e}");
    assert_eq!(s.scan_all(ScanRequest::default()).unwrap().value.len(), 0, "no sample committed");
    assert_eq!(s.pending_import().unwrap(), None);
    std::fs::remove_file(bundle.join("clock_offsets.csv")).unwrap();
    import_bundle(&s, &bundle, &ImportOptions::default(), &mut |_, _| {}).unwrap();
}

/// A bundle's clock input stamped beyond the store's future bound (a day ahead of the
/// importing machine's clock, as for samples) is refused before anything is added.
#[test]
fn clock_input_from_the_future_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path().join("db"), StoreConfig::default()).unwrap();
    let ahead = store.now_ns() + 2 * 86_400_000_000_000;
    let input = clock::ClockInput {
        offsets: vec![lockstep_engine::clock::OffsetObservation {
            host: "h".into(),
            local_time: ahead,
            offset_ns: 0,
            uncertainty_ns: 10,
        }],
        ..Default::default()
    };
    let e = add_clock_input(&store, &input.exchanges, &input.offsets, &[]).unwrap_err().to_string();
    assert!(e.contains("clock sync for host h: local_time=") && e.contains("ahead of the writer's clock"), "{e}");
    assert_eq!(store.with_clocks(|reg| reg.input_counts()).unwrap().offsets, 0);
}
