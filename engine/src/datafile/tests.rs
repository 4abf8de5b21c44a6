#![allow(clippy::unwrap_used, clippy::expect_used)]
use super::*;
use crate::error::Error;
use crate::model::Rows;
use crate::storage::OsStorage;
use arrow::array::{ArrayRef, Float64Array, Int8Array, Int64Array, RecordBatch, UInt32Array};
use parquet::arrow::ArrowWriter;

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
    let all = read_file(&OsStorage, &path, &RowFilter::default(), None).unwrap();
    assert_eq!(all.series, rows.series);
    assert_eq!(all.time, rows.time);
    assert!(all.value.iter().zip(&rows.value).all(|(a, b)| a.to_bits() == b.to_bits()));

    let mut set = RoaringBitmap::new();
    set.insert(3);
    set.insert(7);
    let t0 = 1_700_000_000_000_000_000 + 10 * 1_000_000_000;
    let filter = RowFilter { time: Some((t0, t0 + 5_000_000_000)), series: Some(&set), value: None };
    let some = read_file(&OsStorage, &path, &filter, None).unwrap();
    assert_eq!(some.len(), 10);
    assert!(some.series.iter().all(|s| *s == 3 || *s == 7));
}

#[test]
fn wrong_schema_and_garbage_are_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("g.parquet");
    std::fs::write(&garbage, b"PAR1 definitely not parquet").unwrap();
    let e = read_file(&OsStorage, &garbage, &RowFilter::default(), None).unwrap_err();
    assert!(matches!(e, Error::DataFileInvalid { .. }), "{e}");

    let other = dir.path().join("o.parquet");
    let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
    let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(vec![1i64]))]).unwrap();
    let mut w = ArrowWriter::try_new(std::fs::File::create(&other).unwrap(), schema, None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    let e = read_file(&OsStorage, &other, &RowFilter::default(), None).unwrap_err();
    assert!(e.to_string().contains("wrong schema"), "{e}");

    let e = read_file(&OsStorage, &dir.path().join("missing.parquet"), &RowFilter::default(), None).unwrap_err();
    assert!(matches!(e, Error::Io { .. }), "{e}");
}

/// Hosts scraped together: series 0..4 share timestamps, 4..8 share other ones, one run is a
/// prefix of its predecessor, files span several row groups and a partial last group.
#[test]
fn shared_timestamps_round_trip_across_row_groups_and_filters() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.parquet");
    let mut rows = Rows::default();
    let n = 70_000i64; // 8 series x 70k rows: runs cross row-group boundaries
    for s in 0..8u32 {
        let len = if s == 3 { n - 5 } else { n };
        for i in 0..len {
            let jitter = if s < 4 { (i * 7) % 13 } else { (i * 5) % 11 };
            rows.push(s, 1_700_000_000_000_000_000 + i * 1_000_000_000 + jitter * 1_000_000, (i % 100) as f64);
        }
    }
    let stats = write_file(&OsStorage, &path, &rows, WriteOptions::default()).unwrap();
    assert_eq!(stats.rows, rows.len() as u64);
    let md = parquet::file::reader::FileReader::metadata(
        &parquet::file::reader::SerializedFileReader::new(std::fs::File::open(&path).unwrap()).unwrap(),
    )
    .clone();
    assert!(md.num_row_groups() >= 3);
    let nulls: i64 = md
        .row_groups()
        .iter()
        .map(|rg| rg.column(1).statistics().and_then(|s| s.null_count_opt()).unwrap_or(0) as i64)
        .sum();
    assert!(nulls > 4 * n, "most runs share their timestamps ({nulls} nulls)");
    assert_eq!(read_file(&OsStorage, &path, &RowFilter::default(), None).unwrap(), rows);

    // Row-group pruning and filters see the resolved times.
    let mut set = RoaringBitmap::new();
    set.insert(6);
    let t0 = 1_700_000_000_000_000_000 + 60_000 * 1_000_000_000;
    let filter = RowFilter { time: Some((t0, t0 + 10 * 1_000_000_000)), series: Some(&set), value: None };
    let some = read_file(&OsStorage, &path, &filter, None).unwrap();
    let want: Vec<i64> =
        (0..rows.len()).filter(|&i| filter.matches(rows.series[i], rows.time[i])).map(|i| rows.time[i]).collect();
    assert_eq!(some.time, want);
    assert_eq!(some.len(), 10);
}

fn write_raw(path: &std::path::Path, time: Int64Array, series: Vec<u32>) {
    let n = series.len();
    let batch = RecordBatch::try_new(
        file_schema(),
        vec![
            Arc::new(UInt32Array::from(series)) as ArrayRef,
            Arc::new(time),
            Arc::new(Int64Array::from(vec![1i64; n])),
            Arc::new(Int8Array::from(vec![0i8; n])),
            Arc::new(Float64Array::from(vec![None::<f64>; n])),
        ],
    )
    .unwrap();
    let mut w = ArrowWriter::try_new(std::fs::File::create(path).unwrap(), file_schema(), None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
}

#[test]
fn plain_time_columns_read_and_dangling_shared_times_are_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    // A file of the first format (no shared times) reads as before.
    let plain = dir.path().join("plain.parquet");
    write_raw(&plain, Int64Array::from(vec![5, 6, 5]), vec![0, 0, 1]);
    assert_eq!(read_file(&OsStorage, &plain, &RowFilter::default(), None).unwrap().time, vec![5, 6, 5]);
    // A null time with no earlier run to copy from is corruption, not a panic.
    let bad = dir.path().join("bad.parquet");
    write_raw(&bad, Int64Array::from(vec![None, Some(6)]), vec![0, 0]);
    let e = read_file(&OsStorage, &bad, &RowFilter::default(), None).unwrap_err();
    assert!(matches!(e, Error::DataFileInvalid { .. }) && e.to_string().contains("no earlier run"), "{e}");
    // A shared run longer than the run it copies from, likewise.
    let long = dir.path().join("long.parquet");
    write_raw(&long, Int64Array::from(vec![Some(5), None, None]), vec![0, 1, 1]);
    assert!(read_file(&OsStorage, &long, &RowFilter::default(), None).is_err());
}

#[test]
fn streaming_writer_equals_one_shot_write() {
    let dir = tempfile::tempdir().unwrap();
    let rows = sample_rows();
    let one = dir.path().join("one.parquet");
    write_file(&OsStorage, &one, &rows, WriteOptions::default()).unwrap();
    let many = dir.path().join("many.parquet");
    let mut w = DataFileWriter::create(&OsStorage, &many, WriteOptions::default()).unwrap();
    for start in (0..rows.len()).step_by(7_777) {
        let mut part = Rows::default();
        part.extend_range(&rows, start, (start + 7_777).min(rows.len()));
        w.append(&part).unwrap();
    }
    let stats = w.finish(&OsStorage).unwrap();
    assert_eq!(stats.rows, rows.len() as u64);
    assert_eq!(read_file(&OsStorage, &many, &RowFilter::default(), None).unwrap(), rows);
    assert_eq!(std::fs::read(&one).unwrap().len(), std::fs::read(&many).unwrap().len());
}

/// Read through the footer by row group and column: equal to `read_file` with and without a
/// filter, with shared timestamps resolved, and projections that decode less.
#[test]
fn footer_reads_row_groups_by_column() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.parquet");
    let rows = sample_rows();
    write_file(&OsStorage, &path, &rows, WriteOptions::default()).unwrap();
    let footer = FileFooter::read(&OsStorage, &path, None).unwrap();
    let groups = footer.groups();
    assert_eq!(groups.iter().map(|g| g.rows).sum::<u64>(), rows.len() as u64);
    let mut set = RoaringBitmap::new();
    set.insert(3);
    set.insert(7);
    let t0 = 1_700_000_000_000_000_000 + 10 * 1_000_000_000;
    for filter in
        [RowFilter::default(), RowFilter { time: Some((t0, t0 + 5_000_000_000)), series: Some(&set), value: None }]
    {
        let want = read_file(&OsStorage, &path, &filter, None).unwrap();
        let mut all = Rows::default();
        let mut counted = 0;
        for g in (0..groups.len()).filter(|&g| groups[g].may_match(&filter)) {
            let c = footer.read_group(&OsStorage, g, Columns::ALL, &filter).unwrap();
            all.extend_from(&Rows { series: c.series, time: c.time, value: c.value });
            let only_values =
                footer.read_group(&OsStorage, g, Columns { value: true, ..Columns::NONE }, &filter).unwrap();
            counted += footer.read_group(&OsStorage, g, Columns::NONE, &filter).unwrap().len;
            assert_eq!(only_values.value.len(), only_values.len);
            if filter.series.is_none() {
                assert!(only_values.series.is_empty() && only_values.time.is_empty());
            }
        }
        assert_eq!(all, want);
        assert_eq!(counted, want.len());
    }
    // The value columns of the store's own files take the direct byte-stream-split decoder
    // (`pages.rs`) and decode as parquet-rs does.
    let bytes = bytes::Bytes::from(std::fs::read(&path).unwrap());
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(bytes.clone()).unwrap();
    let meta = reader.metadata().clone();
    let batches: Vec<RecordBatch> = reader.build().unwrap().map(|b| b.unwrap()).collect();
    let whole = arrow::compute::concat_batches(&batches[0].schema(), &batches).unwrap();
    let mut offset = 0;
    for rg in meta.row_groups() {
        let n = rg.num_rows() as usize;
        for leaf in [2, 4] {
            let direct = pages::decode_split_chunk(std::sync::Arc::new(bytes.clone()), rg.column(leaf), n)
                .expect("the writer's value chunks decode directly");
            assert_eq!(direct.as_ref(), whole.column(leaf).slice(offset, n).as_ref());
        }
        offset += n;
    }
    // Shared (null) timestamps resolve as in `read_file`.
    let shared = dir.path().join("shared.parquet");
    write_raw(&shared, Int64Array::from(vec![Some(5), Some(6), None, None]), vec![0, 0, 1, 1]);
    let f = FileFooter::read(&OsStorage, &shared, None).unwrap();
    let c = f.read_group(&OsStorage, 0, Columns { time: true, ..Columns::NONE }, &RowFilter::default()).unwrap();
    assert_eq!((c.len, c.time), (4, vec![5, 6, 5, 6]));
    assert!(f.read_group(&OsStorage, 1, Columns::ALL, &RowFilter::default()).is_err());
    // A run mixing stored and shared times (resolved row by row), after a run shared in full
    // and before one stored in full; both readers agree, filtered or not.
    let mixed = dir.path().join("mixed.parquet");
    let time = Int64Array::from(vec![Some(5), Some(6), Some(7), None, None, None, None, Some(9), None, Some(1)]);
    write_raw(&mixed, time, vec![0, 0, 0, 1, 1, 1, 2, 2, 2, 3]);
    let want = vec![5, 6, 7, 5, 6, 7, 5, 9, 7, 1];
    assert_eq!(read_file(&OsStorage, &mixed, &RowFilter::default(), None).unwrap().time, want);
    let f = FileFooter::read(&OsStorage, &mixed, None).unwrap();
    let c = f.read_group(&OsStorage, 0, Columns::ALL, &RowFilter::default()).unwrap();
    assert_eq!((c.series, c.time), (vec![0, 0, 0, 1, 1, 1, 2, 2, 2, 3], want));
    let mut two = RoaringBitmap::new();
    two.insert(2);
    let filter = RowFilter { time: Some((6, 10)), series: Some(&two), value: None };
    let c = f.read_group(&OsStorage, 0, Columns::ALL, &filter).unwrap();
    assert_eq!((c.series, c.time), (vec![2, 2], vec![9, 7]));
    assert_eq!(read_file(&OsStorage, &mixed, &filter, None).unwrap().time, vec![9, 7]);
}

/// Files too short, with a bad footer or a footer claiming more than the file: typed errors.
#[test]
fn footer_of_garbage_is_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [&[u8]; 4] = [
        b"PAR1",
        b"PAR1 definitely not parquet",
        b"PAR1xxxxxxxx\xff\xff\xff\x7fPAR1",
        b"PAR1\0\0\0\0\0\0\0\0\x04\0\0\0PAR1",
    ];
    for (i, bytes) in cases.iter().enumerate() {
        let path = dir.path().join(format!("g{i}.parquet"));
        std::fs::write(&path, bytes).unwrap();
        let e = FileFooter::read(&OsStorage, &path, None).unwrap_err();
        assert!(matches!(e, Error::DataFileInvalid { .. }), "{i}: {e}");
    }
    assert!(FileFooter::read(&OsStorage, &dir.path().join("missing.parquet"), None).is_err());
}

/// A counter's difference-coded run longer than one decode batch (64 k rows) and split over
/// two row groups reads back bit for bit through both readers.
#[test]
fn counter_runs_across_batches_and_row_groups_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.parquet");
    let mut rows = Rows::default();
    let n = ROW_GROUP_ROWS as i64 + 70_000;
    let mut counter = 5_000_000_000_000i64;
    for t in 0..n {
        counter += 1_000_000 + (t * 7919) % 65_536;
        rows.push(1, 1_700_000_000_000_000_000 + t * 1_000_000_000, counter as f64 / 100.0);
    }
    for t in 0..1000i64 {
        rows.push(2, 1_700_000_000_000_000_000 + t * 1_000_000_000, ((t * 31) % 97) as f64);
    }
    write_file(&OsStorage, &path, &rows, WriteOptions::default()).unwrap();
    let all = read_file(&OsStorage, &path, &RowFilter::default(), None).unwrap();
    assert_eq!(all.len(), rows.len());
    assert!(all.value.iter().zip(&rows.value).all(|(a, b)| a.to_bits() == b.to_bits()));
    let footer = FileFooter::read(&OsStorage, &path, None).unwrap();
    let mut values = Vec::new();
    for g in 0..footer.groups().len() {
        values.extend(footer.read_group(&OsStorage, g, Columns::ALL, &RowFilter::default()).unwrap().value);
    }
    assert!(values.iter().zip(&rows.value).all(|(a, b)| a.to_bits() == b.to_bits()));
}

/// A series filter decodes the value columns only for the runs of wanted series (a row
/// selection), and does not even fetch them from a row group that holds none: the rows equal
/// the full decode's, bit for bit, for counters (difference-coded runs), decimals and floats,
/// with and without a time filter.
#[test]
fn series_filter_selects_value_runs_and_skips_groups_without_them() {
    use crate::storage::{FaultyStorage, Storage};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sel.parquet");
    let mut rows = Rows::default();
    let t0 = 1_700_000_000_000_000_000i64;
    for s in 0..400u32 {
        let mut counter = 1_000_000i64 * i64::from(s);
        for t in 0..1000i64 {
            counter += 1 + (t * 7919 + i64::from(s)) % 4096;
            let v = match s % 4 {
                0 => counter as f64,                         // counter: difference-coded
                1 => (t % 97) as f64 / 100.0,                // decimals
                2 => (f64::from(s) + t as f64 * 0.37).sin(), // floats
                _ => {
                    if t % 50 == 0 {
                        f64::NAN
                    } else {
                        t as f64
                    }
                } // integers with NaN
            };
            rows.push(s, t0 + t * 1_000_000_000, v);
        }
    }
    write_file(&OsStorage, &path, &rows, WriteOptions::default()).unwrap();
    let footer = FileFooter::read(&OsStorage, &path, None).unwrap();
    let groups = footer.groups();
    assert!(groups.len() >= 2, "the test needs several row groups");
    let sets: Vec<RoaringBitmap> = vec![
        (0..400).step_by(7).collect(),
        [3u32, 4, 5, 6].into_iter().collect(),
        [399u32].into_iter().collect(),
        (0..400).filter(|s| s % 2 == 0).collect(),
    ];
    for set in &sets {
        for time in [None, Some((t0 + 100 * 1_000_000_000, t0 + 700 * 1_000_000_000))] {
            let filter = RowFilter { time, series: Some(set), value: None };
            let want = read_file(&OsStorage, &path, &filter, None).unwrap();
            let mut got = Rows::default();
            for g in 0..groups.len() {
                let c = footer.read_group(&OsStorage, g, Columns::ALL, &filter).unwrap();
                assert_eq!(c.len, c.value.len());
                got.extend_from(&Rows { series: c.series, time: c.time, value: c.value });
            }
            assert_eq!((got.series.len(), &got.series, &got.time), (want.series.len(), &want.series, &want.time));
            assert!(got.value.iter().zip(&want.value).all(|(a, b)| a.to_bits() == b.to_bits()), "{set:?} {time:?}");
        }
    }
    // A group without any wanted series: only the series column is fetched, no value column.
    let observed = FaultyStorage::new(Arc::new(OsStorage), u64::MAX);
    let last = groups.len() - 1;
    let set: RoaringBitmap = [0u32].into_iter().collect();
    assert!(groups[last].series.is_some_and(|(lo, _)| lo > 0), "series 0 lies in the first group only");
    observed.record_reads();
    let c = footer
        .read_group(
            &observed as &dyn Storage,
            last,
            Columns { value: true, ..Columns::NONE },
            &RowFilter { time: None, series: Some(&set), value: None },
        )
        .unwrap();
    assert_eq!(c.len, 0);
    let reads = observed.reads();
    assert_eq!(reads.len(), 1, "only the series_id column chunk: {reads:?}");
}

/// The split reader against the rows written, on groups whose runs are long enough for value
/// statistics per run: with every id from the smallest to the largest (the series column is
/// then not even fetched: the runs come from the statistics) and with gaps between ids (it
/// is decoded), with timestamps stored, shared in full, shared as a prefix and mixed, under
/// series, time and value filters and every choice of columns.
#[test]
fn runs_from_value_statistics_and_wanted_times_equal_the_rows_written() {
    use crate::storage::{FaultyStorage, Storage};
    let t0 = 1_700_000_000_000_000_000i64;
    for gaps in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("runs.parquet");
        let mut rows = Rows::default();
        for k in 0..150u32 {
            let s = if gaps { 2 * k } else { k };
            // Three hosts' scrapes: the first of each three stores its times, the second
            // differs from it at every 100th row (a mixed run), the third repeats the second
            // (shared in full, through the mixed one), every fifth run is a prefix.
            let len = if k % 5 == 4 { 1_900 } else { 2_000 };
            for i in 0..len {
                let base = t0 + i * 1_000_000_000 + i64::from(k / 3) * 7;
                let t = if k % 3 != 0 && i % 100 == 0 { base + 1_000_000 } else { base };
                let v = match k % 4 {
                    0 => (i * i64::from(k + 1)) as f64,
                    1 => (i % 97) as f64 / 100.0,
                    2 => (f64::from(k) + i as f64 * 0.37).sin(),
                    _ => i as f64,
                };
                rows.push(s, t, v);
            }
        }
        write_file(&OsStorage, &path, &rows, WriteOptions::default()).unwrap();
        let footer = FileFooter::read(&OsStorage, &path, None).unwrap();
        let groups = footer.groups();
        assert!(groups.len() >= 2, "runs cross a row-group boundary");
        assert!((0..groups.len()).all(|g| footer.value_ranges(g).unwrap().is_some_and(|r| r.per_run)));
        let ids: Vec<u32> = (0..150).map(|k| if gaps { 2 * k } else { k }).collect();
        let sets: Vec<RoaringBitmap> = vec![
            ids.iter().copied().step_by(3).collect(),
            ids.iter().copied().skip(1).step_by(3).collect(),
            [ids[2], ids[100]].into_iter().collect(),
            ids.iter().copied().filter(|&s| s != ids[77]).collect(),
        ];
        let window = Some((t0 + 300 * 1_000_000_000, t0 + 1_950 * 1_000_000_000));
        let columns = [
            Columns::ALL,
            Columns { value: true, ..Columns::NONE },
            Columns { time: true, ..Columns::NONE },
            Columns { series: true, ..Columns::NONE },
            Columns::NONE,
        ];
        let values = [None, ValueRange::new(0.5, 0.9), ValueRange::new(1.0e5, f64::INFINITY)];
        for set in sets.iter().map(Some).chain([None]) {
            for time in [None, window] {
                for value in values {
                    let filter = RowFilter { time, series: set, value };
                    let keep = |i: usize| {
                        filter.matches(rows.series[i], rows.time[i])
                            && value.is_none_or(|r| rows.value[i] >= r.lo && rows.value[i] <= r.hi)
                    };
                    let want: Vec<usize> = (0..rows.len()).filter(|&i| keep(i)).collect();
                    for cols in columns {
                        let mut got = Rows::default();
                        let mut count = 0;
                        for g in 0..groups.len() {
                            let c = footer.read_group(&OsStorage, g, cols, &filter).unwrap();
                            count += c.len;
                            got.extend_from(&Rows { series: c.series, time: c.time, value: c.value });
                        }
                        let case = format!("gaps {gaps}, {set:?}, {time:?}, {value:?}, {cols:?}");
                        // The value range is a hint: rows outside it may come back; keep the
                        // ones inside and compare those.
                        let inside: Vec<usize> = (0..count)
                            .filter(|&i| {
                                value.is_none()
                                    || !cols.value
                                    || got
                                        .value
                                        .get(i)
                                        .is_some_and(|v| *v >= value.unwrap().lo && *v <= value.unwrap().hi)
                            })
                            .collect();
                        if value.is_none() || !cols.value {
                            let want_len =
                                (0..rows.len()).filter(|&i| filter.matches(rows.series[i], rows.time[i])).count();
                            assert_eq!(count, want_len, "{case}");
                        } else {
                            assert_eq!(inside.len(), want.len(), "{case}");
                        }
                        if cols.series {
                            let a: Vec<u32> = inside.iter().map(|&i| got.series[i]).collect();
                            let b: Vec<u32> = want.iter().map(|&i| rows.series[i]).collect();
                            if value.is_some() && cols.value {
                                assert_eq!(a, b, "{case}");
                            } else {
                                let all: Vec<u32> = (0..rows.len())
                                    .filter(|&i| filter.matches(rows.series[i], rows.time[i]))
                                    .map(|i| rows.series[i])
                                    .collect();
                                assert_eq!(got.series, all, "{case}");
                            }
                        }
                        if cols.time && (value.is_none() || !cols.value) {
                            let all: Vec<i64> = (0..rows.len())
                                .filter(|&i| filter.matches(rows.series[i], rows.time[i]))
                                .map(|i| rows.time[i])
                                .collect();
                            assert_eq!(got.time, all, "{case}");
                        }
                        if cols.value && cols.time {
                            let a: Vec<(i64, u64)> =
                                inside.iter().map(|&i| (got.time[i], got.value[i].to_bits())).collect();
                            let b: Vec<(i64, u64)> =
                                want.iter().map(|&i| (rows.time[i], rows.value[i].to_bits())).collect();
                            assert_eq!(a, b, "{case}");
                        }
                    }
                }
            }
        }
        // The series column is fetched only where the ids have gaps.
        let observed = FaultyStorage::new(Arc::new(OsStorage), u64::MAX);
        let set: RoaringBitmap = [ids[2]].into_iter().collect();
        observed.record_reads();
        let filter = RowFilter { time: None, series: Some(&set), value: None };
        let c =
            footer.read_group(&observed as &dyn Storage, 0, Columns { value: true, ..Columns::NONE }, &filter).unwrap();
        assert_eq!(c.len, 2_000);
        let reads = observed.reads();
        // Without gaps: the three value columns only; with gaps: the series column too.
        assert_eq!(reads.len(), if gaps { 4 } else { 3 }, "{reads:?}");
    }
}

/// A run mixing stored and shared times (another writer may produce one), and runs sharing
/// through it, resolve the same in the split reader whichever runs are wanted.
#[test]
fn mixed_shared_runs_resolve_for_any_wanted_subset() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mixed.parquet");
    let time = Int64Array::from(vec![Some(10), Some(20), Some(30), None, Some(25), None, None, None, Some(5)]);
    write_raw(&path, time, vec![0, 0, 0, 1, 1, 1, 2, 2, 3]);
    let footer = FileFooter::read(&OsStorage, &path, None).unwrap();
    let all = [(0u32, 10i64), (0, 20), (0, 30), (1, 10), (1, 25), (1, 30), (2, 10), (2, 25), (3, 5)];
    for mask in 0u32..16 {
        let set: RoaringBitmap = (0..4).filter(|s| mask & (1 << s) != 0).collect();
        for time in [None, Some((11, 30))] {
            let filter = RowFilter { time, series: Some(&set), value: None };
            let c = footer.read_group(&OsStorage, 0, Columns::ALL, &filter).unwrap();
            let got: Vec<(u32, i64)> = c.series.iter().copied().zip(c.time.iter().copied()).collect();
            let want: Vec<(u32, i64)> = all.iter().copied().filter(|&(s, t)| filter.matches(s, t)).collect();
            assert_eq!(got, want, "{set:?} {time:?}");
        }
    }
    // A first run with nothing to share from is an error, wanted or not.
    write_raw(&path, Int64Array::from(vec![None, Some(1), Some(2)]), vec![0, 1, 1]);
    let footer = FileFooter::read(&OsStorage, &path, None).unwrap();
    let set: RoaringBitmap = [1u32].into_iter().collect();
    let filter = RowFilter { time: None, series: Some(&set), value: None };
    assert!(matches!(footer.read_group(&OsStorage, 0, Columns::ALL, &filter), Err(Error::DataFileInvalid { .. })));
}

/// Rows of every value encoding: integers, decimals, a counter, full-precision floats, NaN
/// and ±inf, with series that share their timestamps and one that does not.
fn mixed_rows(series: u32, len: i64) -> Rows {
    let t0 = 1_700_000_000_000_000_000i64;
    let mut rows = Rows::default();
    for s in 0..series {
        for i in 0..len {
            let t = t0 + i * 1_000_000_000 + if s % 4 == 3 { i64::from(s) } else { 0 };
            let v = match s % 4 {
                0 => (i * 3 + i64::from(s)) as f64,
                1 => (i % 97) as f64 / 100.0,
                2 if i % 50 == 7 => [f64::NAN, f64::INFINITY, f64::NEG_INFINITY][(i / 50 % 3) as usize],
                2 => (f64::from(s) + i as f64 * 0.37).sin(),
                _ => (1_000 + i * i) as f64,
            };
            rows.push(s, t, v);
        }
    }
    rows
}

/// Every row of a data file through both readers (the split reader, group by group, and the
/// whole-file reader), or the first error.
fn read_both(path: &std::path::Path, footer_crc: Option<u32>) -> std::result::Result<(Rows, Rows), Error> {
    let footer = FileFooter::read(&OsStorage, path, footer_crc)?;
    let mut split = Rows::default();
    for g in 0..footer.groups().len() {
        let c = footer.read_group(&OsStorage, g, Columns::ALL, &RowFilter::default())?;
        split.extend_from(&Rows { series: c.series, time: c.time, value: c.value });
    }
    Ok((split, read_file(&OsStorage, path, &RowFilter::default(), footer_crc)?))
}

fn same_rows(a: &Rows, b: &Rows) -> bool {
    a.series == b.series
        && a.time == b.time
        && a.value.len() == b.value.len()
        && a.value.iter().zip(&b.value).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// A flipped byte inside any column chunk of any row group is a `DataFileInvalid` naming the
/// row group and column, from both readers; the other row group still reads. (Without the
/// checksums most of these flips decode to different values with no error at all.)
#[test]
fn a_flipped_byte_in_any_column_chunk_is_a_checksum_error() {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crc.parquet");
    let rows = mixed_rows(8, (ROW_GROUP_ROWS as i64 + 40_000) / 8);
    let stats = write_file(&OsStorage, &path, &rows, WriteOptions::default()).unwrap();
    let (split, whole) = read_both(&path, stats.footer_crc32).unwrap();
    assert!(same_rows(&split, &rows) && same_rows(&whole, &rows));
    let good = std::fs::read(&path).unwrap();
    let reader = SerializedFileReader::new(std::fs::File::open(&path).unwrap()).unwrap();
    let meta = reader.metadata();
    assert_eq!(meta.num_row_groups(), 2);
    let bad = dir.path().join("bad.parquet");
    for group in 0..2 {
        for (leaf, column) in meta.row_group(group).columns().iter().enumerate() {
            let (start, len) = column.byte_range();
            let name = file_schema().field(leaf).name().clone();
            for at in [start + len / 2, start + len - 1, start] {
                let mut bytes = good.clone();
                bytes[at as usize] ^= 0x10;
                std::fs::write(&bad, &bytes).unwrap();
                let case = format!("group {group} column {name} byte {at}");
                let footer = FileFooter::read(&OsStorage, &bad, None).unwrap();
                match footer.read_group(&OsStorage, group, Columns::ALL, &RowFilter::default()) {
                    Err(e) => {
                        let text = e.to_string();
                        assert!(matches!(e, Error::DataFileInvalid { .. }), "{case}: {text}");
                        let want = format!("row group {group} column {name}: checksum mismatch");
                        assert!(text.contains(&want), "{case}: {text}");
                    }
                    // The series ids of a group with one run per id come from the value
                    // statistics: that chunk is never fetched, so the rows are intact.
                    Ok(c) => assert!(leaf == 0 && c.len > 0, "{case}: read without an error"),
                }
                let e = read_file(&OsStorage, &bad, &RowFilter::default(), None).err().map(|e| e.to_string());
                assert!(e.is_some_and(|e| e.contains("checksum mismatch")), "{case}");
                let other = footer.read_group(&OsStorage, 1 - group, Columns::ALL, &RowFilter::default()).unwrap();
                assert!(other.len > 0, "{case}");
            }
        }
    }
}

/// Corrupt files never panic a reader and never read back different rows: a flipped byte
/// anywhere (data pages, page headers, footer, key-value metadata, the tail) and every
/// truncation either reads the rows written, unchanged, or is an error — with the footer's
/// checksum from the manifest and without it (a file written before it was recorded). With
/// it, every flip inside the footer is an error.
#[test]
fn corrupt_files_never_panic_and_never_read_back_different_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fuzz.parquet");
    let rows = mixed_rows(8, 400);
    let stats = write_file(&OsStorage, &path, &rows, WriteOptions::default()).unwrap();
    let good = std::fs::read(&path).unwrap();
    let footer_len = checksum::footer_of(&good).unwrap().len();
    assert_eq!(stats.footer_crc32, Some(checksum::of(checksum::footer_of(&good).unwrap())));
    let bad = dir.path().join("bad.parquet");
    // Whether the corrupt bytes are an error (else they read back unchanged).
    let check = |bytes: &[u8], crc: Option<u32>, case: String| -> bool {
        std::fs::write(&bad, bytes).unwrap();
        match std::panic::catch_unwind(|| read_both(&bad, crc)) {
            Err(_) => panic!("{case}: a reader panicked"),
            Ok(Err(_)) => true,
            Ok(Ok((split, whole))) => {
                assert!(same_rows(&split, &rows), "{case}: the split reader read different rows");
                assert!(same_rows(&whole, &rows), "{case}: the whole-file reader read different rows");
                false
            }
        }
    };
    let (mut errors, mut unchanged) = (0, 0);
    for crc in [stats.footer_crc32, None] {
        for at in 0..good.len() {
            for bit in [0x01u8, 0x80] {
                let mut bytes = good.clone();
                bytes[at] ^= bit;
                let erred = check(&bytes, crc, format!("byte {at} of {} ^ {bit:#x}, footer crc {crc:?}", good.len()));
                if crc.is_some() && at >= good.len() - footer_len {
                    assert!(erred, "byte {at} of the footer flipped, read without an error");
                }
                (errors, unchanged) = if erred { (errors + 1, unchanged) } else { (errors, unchanged + 1) };
            }
        }
        for len in (0..good.len()).step_by(97) {
            let erred = check(&good[..len], crc, format!("truncated to {len} of {}, footer crc {crc:?}", good.len()));
            assert!(erred, "truncated to {len}: read without an error");
            errors += 1;
        }
    }
    assert!(errors > 0 && unchanged > 0, "{errors} errors, {unchanged} unchanged");

    // A file written before the checksums: corrupt pages reach the decoders, which may read
    // back different values, but a panic of parquet-rs or arrow is the group's error.
    let mut decoder_panics = 0;
    for at in 0..good.len() - footer_len {
        for bit in [0x01u8, 0x80] {
            let mut bytes = good.clone();
            bytes[at] ^= bit;
            std::fs::write(&bad, &bytes).unwrap();
            let footer = FileFooter::read(&OsStorage, &bad, None).unwrap().without_chunk_checksums();
            for g in 0..footer.groups().len() {
                let read =
                    std::panic::catch_unwind(|| footer.read_group(&OsStorage, g, Columns::ALL, &RowFilter::default()));
                match read {
                    Err(_) => panic!("byte {at} ^ {bit:#x} of a file without checksums: a reader panicked"),
                    Ok(Err(e)) if e.to_string().contains("decoding failed on corrupt data") => decoder_panics += 1,
                    Ok(_) => {}
                }
            }
        }
    }
    assert!(decoder_panics > 0, "no flip reached a decoder panic: the guard is untested");
}

/// `catch_panic` nests, counts itself out again after a panic, and leaves other panics alone.
#[test]
fn catch_panic_nests_and_unwinds() {
    let inner = super::catch_panic(|| super::catch_panic(|| panic!("inner")));
    assert_eq!(inner, Ok(Err("inner".to_string())));
    let outer = super::catch_panic(|| {
        let _ = super::catch_panic(|| 1);
        panic!("outer {}", 2)
    });
    assert_eq!(outer, Err::<(), _>("outer 2".to_string()));
    assert_eq!(super::CATCHING.with(std::cell::Cell::get), 0, "every call counted itself out");
}
