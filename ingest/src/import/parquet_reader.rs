//! Streaming Parquet reader for the long format.

use std::fs::File;
use std::path::Path;

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Float64Type, Int64Type};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use super::{ImportError, Progress, RowSink};

/// Why a Parquet file did not open. The footer reader (parquet-rs) numbers row groups with an
/// i16 and refuses a file of more than 32,768 of them; writers' defaults (pyarrow and pandas
/// 1 Mi rows per group, DuckDB 122,880) get there only past 4 billion rows, a streaming
/// writer that ends a group per small batch much sooner.
pub(super) fn open_error(e: &parquet::errors::ParquetError) -> String {
    let text = e.to_string();
    if text.contains("Row group ordinal") && text.contains("exceeds i16 max") {
        return "the file has more than 32,768 row groups, more than the Parquet reader can open; \
                write it again with larger row groups (pyarrow `row_group_size=1_000_000`, \
                DuckDB `ROW_GROUP_SIZE 1000000`) or split it into several files"
            .to_string();
    }
    format!("not a parquet file: {text}")
}

/// Reads `path` into `sink`.
pub(super) fn read(path: &Path, sink: &mut RowSink<'_>, progress: Progress<'_>) -> Result<(), ImportError> {
    let bad_file = |reason: String| ImportError::BadFile { file: path.to_path_buf(), reason };
    let file = File::open(path).map_err(|e| bad_file(e.to_string()))?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| bad_file(open_error(&e)))?;
    let total = u64::try_from(builder.metadata().file_metadata().num_rows()).ok();
    let schema = builder.schema().clone();
    let names: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
    let find = |name: &str| {
        names.iter().position(|n| n == name).ok_or_else(|| bad_file(format!("missing required column {name}")))
    };
    let (time_i, metric_i, value_i, host_i) = (find("time")?, find("metric")?, find("value")?, find("host")?);
    let check_type = |i: usize, ok: &dyn Fn(&DataType) -> bool, want: &str| {
        let dt = schema.field(i).data_type();
        if ok(dt) { Ok(()) } else { Err(bad_file(format!("column {} has type {dt}, expected {want}", names[i]))) }
    };
    if let Some((i, name)) = names.iter().enumerate().find(|(i, n)| names[..*i].contains(n)) {
        return Err(bad_file(format!(
            "column {name} appears twice (columns {} and {}); name each column once",
            names.iter().position(|n| n == name).unwrap_or(0) + 1,
            i + 1
        )));
    }
    // A column of type null holds no value: pandas writes an object column of only None (a
    // label unset in this export, or any column of an empty frame) as one. Absent everywhere.
    let is_string = |dt: &DataType| {
        matches!(dt, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Null)
            || matches!(dt, DataType::Dictionary(_, v) if matches!(v.as_ref(), DataType::Utf8 | DataType::LargeUtf8))
    };
    check_type(time_i, &|dt| matches!(dt, DataType::Int64 | DataType::Timestamp(_, _)), "Int64 ns or a timestamp")?;
    check_type(value_i, &|dt| dt.is_numeric(), "Float64")?;
    let mut label_idx = vec![host_i];
    label_idx.extend((0..names.len()).filter(|&i| ![time_i, metric_i, value_i, host_i].contains(&i)));
    for &i in label_idx.iter().chain([&metric_i]) {
        check_type(i, &is_string, "a string")?;
    }
    sink.set_columns(label_idx.iter().map(|&i| names[i].clone()).collect())?;
    let reader = builder.with_batch_size(64 * 1024).build().map_err(|e| bad_file(e.to_string()))?;
    let mut row = 0u64;
    for batch in reader {
        let batch = batch.map_err(|e| bad_file(format!("decode failed after row {row}: {e}")))?;
        row = push_batch(&batch, row, time_i, value_i, metric_i, &label_idx, sink).map_err(|e| match e {
            Err(reason) => bad_file(reason),
            Ok(import_error) => import_error,
        })?;
        progress(row, total);
    }
    Ok(())
}

/// One interned code per row for string column `i` (field `field` of the resolver). A
/// dictionary column interns each dictionary value once per batch, not once per row.
fn codes(
    batch: &RecordBatch,
    i: usize,
    field: usize,
    sink: &mut RowSink<'_>,
    out: &mut Vec<u32>,
) -> Result<(), String> {
    out.clear();
    let column = batch.column(i);
    let resolver = sink.resolver();
    if let Some(dict) = column.as_any_dictionary_opt() {
        let values = cast(dict.values(), &DataType::Utf8).map_err(|e| e.to_string())?;
        let values = values.as_string::<i32>();
        let map: Vec<u32> =
            (0..values.len()).map(|k| resolver.intern(field, values.is_valid(k).then(|| values.value(k)))).collect();
        let keys = cast(dict.keys(), &DataType::UInt32).map_err(|e| e.to_string())?;
        let keys = keys.as_primitive::<arrow::datatypes::UInt32Type>();
        for r in 0..keys.len() {
            let code = if keys.is_valid(r) {
                map.get(keys.value(r) as usize).copied().ok_or("dictionary key out of range")?
            } else {
                0
            };
            out.push(code);
        }
        return Ok(());
    }
    let c = cast(column, &DataType::Utf8).map_err(|e| e.to_string())?;
    let strings = c.as_string::<i32>();
    out.extend((0..strings.len()).map(|r| resolver.intern(field, strings.is_valid(r).then(|| strings.value(r)))));
    Ok(())
}

/// The time column as ns since the epoch: Int64 as it is; a timestamp of any unit (pandas
/// writes `timestamp[us]` by default since 3.0, DuckDB's `TIMESTAMP` is microseconds) scaled to
/// ns, with or without a time zone (the stored instant is UTC either way). A value outside the
/// ns range (years before 1677 or after 2262, such as an "end of time" 9999-12-31) is null in
/// the result and its row is in the returned list with the value, so that it is a bad row
/// naming it (skipped with `--skip-bad-rows`), not a failed file.
fn time_ns(column: &arrow::array::ArrayRef) -> Result<(arrow::array::ArrayRef, Vec<(usize, i64)>), String> {
    use arrow::datatypes::TimeUnit;
    let DataType::Timestamp(unit, _) = column.data_type() else {
        return Ok((cast(column, &DataType::Int64).map_err(|e| e.to_string())?, Vec::new()));
    };
    // The raw count of the column's unit (a cast to Int64 keeps it, whatever the zone).
    let raw = cast(column, &DataType::Int64).map_err(|e| e.to_string())?;
    let scale: i64 = match unit {
        TimeUnit::Nanosecond => return Ok((raw, Vec::new())),
        TimeUnit::Microsecond => 1_000,
        TimeUnit::Millisecond => 1_000_000,
        TimeUnit::Second => 1_000_000_000,
    };
    let raw = raw.as_primitive::<Int64Type>();
    let mut outside = Vec::new();
    let ns: arrow::array::Int64Array = (0..raw.len())
        .map(|r| {
            if raw.is_null(r) {
                return None;
            }
            let v = raw.value(r);
            let scaled = v.checked_mul(scale);
            if scaled.is_none() {
                outside.push((r, v));
            }
            scaled
        })
        .collect();
    Ok((std::sync::Arc::new(ns), outside))
}

/// Pushes one batch; returns the new row count. Errors: Ok(import error) or Err(file reason).
fn push_batch(
    batch: &RecordBatch,
    mut row: u64,
    time_i: usize,
    value_i: usize,
    metric_i: usize,
    label_idx: &[usize],
    sink: &mut RowSink<'_>,
) -> Result<u64, Result<ImportError, String>> {
    let (time, outside) = time_ns(batch.column(time_i)).map_err(Err)?;
    let time = time.as_primitive::<Int64Type>();
    let unit = batch.column(time_i).data_type().clone();
    let mut outside = outside.into_iter().peekable();
    let value = cast(batch.column(value_i), &DataType::Float64).map_err(|e| Err(e.to_string()))?;
    let value = value.as_primitive::<Float64Type>();
    // 64-bit integers beyond 2^53 lose their last digits as f64: each such row is counted.
    let exact: Option<Box<dyn Fn(usize) -> i128 + '_>> = match batch.column(value_i).data_type() {
        DataType::Int64 => {
            let ints = batch.column(value_i).as_primitive::<Int64Type>();
            Some(Box::new(move |r| i128::from(ints.value(r))))
        }
        DataType::UInt64 => {
            let ints = batch.column(value_i).as_primitive::<arrow::datatypes::UInt64Type>();
            Some(Box::new(move |r| i128::from(ints.value(r))))
        }
        _ => None,
    };
    // Column-wise interning: field 0 is the metric, then the labels.
    let mut columns: Vec<Vec<u32>> = vec![Vec::with_capacity(batch.num_rows()); label_idx.len() + 1];
    for (field, &i) in std::iter::once(&metric_i).chain(label_idx).enumerate() {
        codes(batch, i, field, sink, &mut columns[field]).map_err(Err)?;
    }
    let mut row_codes = vec![0u32; columns.len()];
    for r in 0..batch.num_rows() {
        row += 1;
        if time.is_null(r) {
            let reason = match outside.next_if(|&(at, _)| at == r) {
                Some((_, v)) => format!("time {v} ({unit}) is outside 1970-2262, the times the store keeps"),
                None => "time is null".into(),
            };
            sink.bad_row(row, reason).map_err(Ok)?;
            continue;
        }
        if value.is_null(r) {
            sink.bad_row(row, "value is null".into()).map_err(Ok)?;
            continue;
        }
        if let Some(exact) = &exact
            && let Some(exact) = super::inexact_integer(exact(r), value.value(r))
        {
            sink.rounded(row, exact, value.value(r));
        }
        for (slot, column) in row_codes.iter_mut().zip(&columns) {
            *slot = column[r];
        }
        sink.push_codes(row, time.value(r), value.value(r), &row_codes).map_err(Ok)?;
    }
    Ok(row)
}
