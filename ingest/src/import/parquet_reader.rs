//! Streaming Parquet reader for the long format.

use std::fs::File;
use std::path::Path;

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Float64Type, Int64Type};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use super::{ImportError, Progress, RowSink};

/// Reads `path` into `sink`.
pub(super) fn read(path: &Path, sink: &mut RowSink<'_>, progress: Progress<'_>) -> Result<(), ImportError> {
    let bad_file = |reason: String| ImportError::BadFile { file: path.to_path_buf(), reason };
    let file = File::open(path).map_err(|e| bad_file(e.to_string()))?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| bad_file(format!("not a parquet file: {e}")))?;
    let total = u64::try_from(builder.metadata().file_metadata().num_rows()).ok();
    let schema = builder.schema().clone();
    let names: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
    let find = |name: &str| names.iter().position(|n| n == name).ok_or_else(|| bad_file(format!("missing required column {name}")));
    let (time_i, metric_i, value_i, host_i) = (find("time")?, find("metric")?, find("value")?, find("host")?);
    let check_type = |i: usize, ok: &dyn Fn(&DataType) -> bool, want: &str| {
        let dt = schema.field(i).data_type();
        if ok(dt) { Ok(()) } else { Err(bad_file(format!("column {} has type {dt}, expected {want}", names[i]))) }
    };
    let is_string = |dt: &DataType| {
        matches!(dt, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
            || matches!(dt, DataType::Dictionary(_, v) if matches!(v.as_ref(), DataType::Utf8 | DataType::LargeUtf8))
    };
    check_type(time_i, &|dt| matches!(dt, DataType::Int64 | DataType::Timestamp(arrow::datatypes::TimeUnit::Nanosecond, _)), "Int64 ns")?;
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

fn strings(batch: &RecordBatch, i: usize) -> Result<arrow::array::StringArray, String> {
    let c = cast(batch.column(i), &DataType::Utf8).map_err(|e| e.to_string())?;
    Ok(c.as_string::<i32>().clone())
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
    let time = cast(batch.column(time_i), &DataType::Int64).map_err(|e| Err(e.to_string()))?;
    let time = time.as_primitive::<Int64Type>();
    let value = cast(batch.column(value_i), &DataType::Float64).map_err(|e| Err(e.to_string()))?;
    let value = value.as_primitive::<Float64Type>();
    let metric = strings(batch, metric_i).map_err(Err)?;
    let labels: Vec<arrow::array::StringArray> =
        label_idx.iter().map(|&i| strings(batch, i)).collect::<Result<_, _>>().map_err(Err)?;
    let mut fields: Vec<Option<&str>> = Vec::with_capacity(labels.len() + 1);
    for r in 0..batch.num_rows() {
        row += 1;
        if time.is_null(r) {
            sink.bad_row(row, "time is null".into()).map_err(Ok)?;
            continue;
        }
        if value.is_null(r) {
            sink.bad_row(row, "value is null".into()).map_err(Ok)?;
            continue;
        }
        fields.clear();
        fields.push(metric.is_valid(r).then(|| metric.value(r)));
        for l in &labels {
            fields.push(l.is_valid(r).then(|| l.value(r)));
        }
        sink.push(row, time.value(r), value.value(r), &fields).map_err(Ok)?;
    }
    Ok(row)
}
