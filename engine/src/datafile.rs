//! Parquet data files: immutable, one time partition each, rows sorted by (series, time)
//! with no duplicate (series, time) pairs.
//!
//! Column layout (see `docs/format-storage.md`):
//! - `series_id` UInt32: dictionary/RLE, near free because rows are sorted by series;
//! - `time` Int64: `DELTA_BINARY_PACKED` (regular sampling makes deltas constant);
//! - `value_int` Int64 (nullable) + `value_scale` Int8 (nullable): values that are exact
//!   decimals `m / 10^k` are stored as the integer mantissa `m` (one scale per series run),
//!   delta-encoded, so counters and rounded gauges cost a few bits per sample;
//! - `value_float` Float64 (nullable): every other value (NaN, ±inf, full-precision floats),
//!   `BYTE_STREAM_SPLIT`.
//!
//! Every value round-trips bit-exactly. All columns are zstd-compressed.

mod codec;

use std::path::Path;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Float64Array, Int8Array, Int64Array, RecordBatch, UInt32Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::file::statistics::Statistics;
use parquet::schema::types::ColumnPath;
use roaring::RoaringBitmap;

use crate::error::{Error, Result};
use crate::storage::Storage;

pub use codec::{decode_values, encode_values};

/// Rows per Parquet row group; row groups are the unit of pruning by series and time.
pub const ROW_GROUP_ROWS: usize = 256 * 1024;

/// Column names of data files.
pub mod columns {
    /// Series id.
    pub const SERIES: &str = "series_id";
    /// Local (raw) timestamp, ns.
    pub const TIME: &str = "time";
    /// Integer mantissa of decimal values.
    pub const VALUE_INT: &str = "value_int";
    /// Decimal scale of `value_int`.
    pub const VALUE_SCALE: &str = "value_scale";
    /// Values that are not short decimals.
    pub const VALUE_FLOAT: &str = "value_float";
}

/// The Arrow schema of data files.
pub fn file_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new(columns::SERIES, DataType::UInt32, false),
        Field::new(columns::TIME, DataType::Int64, false),
        Field::new(columns::VALUE_INT, DataType::Int64, true),
        Field::new(columns::VALUE_SCALE, DataType::Int8, true),
        Field::new(columns::VALUE_FLOAT, DataType::Float64, true),
    ]))
}

/// Columnar rows, sorted by (series, time) and free of duplicates when they come from or go
/// to a data file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rows {
    /// Series ids.
    pub series: Vec<u32>,
    /// Local timestamps (ns).
    pub time: Vec<i64>,
    /// Values.
    pub value: Vec<f64>,
}

impl Rows {
    /// Number of rows.
    pub fn len(&self) -> usize {
        self.series.len()
    }
    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.series.is_empty()
    }
    /// An empty set with room for `n` rows.
    pub fn with_capacity(n: usize) -> Self {
        Rows { series: Vec::with_capacity(n), time: Vec::with_capacity(n), value: Vec::with_capacity(n) }
    }
    /// Appends one row.
    pub fn push(&mut self, series: u32, time: i64, value: f64) {
        self.series.push(series);
        self.time.push(time);
        self.value.push(value);
    }
    /// Appends all rows of `other`.
    pub fn extend_from(&mut self, other: &Rows) {
        self.series.extend_from_slice(&other.series);
        self.time.extend_from_slice(&other.time);
        self.value.extend_from_slice(&other.value);
    }
}

/// Facts about a written data file, recorded in the manifest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStats {
    /// Rows in the file.
    pub rows: u64,
    /// Size on disk.
    pub bytes: u64,
    /// Smallest and largest local timestamp.
    pub min_time: i64,
    /// Largest local timestamp.
    pub max_time: i64,
    /// Smallest series id.
    pub min_series: u32,
    /// Largest series id.
    pub max_series: u32,
}

/// Knobs for writing data files.
#[derive(Debug, Clone, Copy)]
pub struct WriteOptions {
    /// zstd level (1..=22).
    pub zstd_level: i32,
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions { zstd_level: 3 }
    }
}

fn writer_properties(opts: WriteOptions) -> Result<WriterProperties> {
    let level = ZstdLevel::try_new(opts.zstd_level).map_err(|e| Error::InvalidBatch {
        reason: format!("bad zstd level {}: {e}", opts.zstd_level),
    })?;
    let col = |name: &str| ColumnPath::from(name);
    Ok(WriterProperties::builder()
        .set_compression(Compression::ZSTD(level))
        .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
        .set_statistics_enabled(EnabledStatistics::Chunk)
        .set_column_dictionary_enabled(col(columns::TIME), false)
        .set_column_encoding(col(columns::TIME), Encoding::DELTA_BINARY_PACKED)
        .set_column_dictionary_enabled(col(columns::VALUE_INT), false)
        .set_column_encoding(col(columns::VALUE_INT), Encoding::DELTA_BINARY_PACKED)
        .set_column_dictionary_enabled(col(columns::VALUE_FLOAT), false)
        .set_column_encoding(col(columns::VALUE_FLOAT), Encoding::BYTE_STREAM_SPLIT)
        .build())
}

/// Writes sorted, deduplicated rows to a new data file at `path` and syncs it.
pub fn write_file(
    storage: &dyn Storage,
    path: &Path,
    rows: &Rows,
    opts: WriteOptions,
) -> Result<FileStats> {
    let parquet_err = |source| Error::Parquet { path: path.to_path_buf(), source };
    let file = storage.create(path).map_err(|e| Error::io(path, e))?;
    let schema = file_schema();
    let mut writer =
        ArrowWriter::try_new(file, schema.clone(), Some(writer_properties(opts)?)).map_err(parquet_err)?;
    let mut start = 0;
    while start < rows.len() {
        let end = (start + ROW_GROUP_ROWS).min(rows.len());
        let (vint, vscale, vfloat) = encode_values(&rows.series[start..end], &rows.value[start..end]);
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(UInt32Array::from(rows.series[start..end].to_vec())) as ArrayRef,
                Arc::new(Int64Array::from(rows.time[start..end].to_vec())),
                Arc::new(vint),
                Arc::new(vscale),
                Arc::new(vfloat),
            ],
        )?;
        writer.write(&batch).map_err(parquet_err)?;
        start = end;
    }
    let mut file = writer.into_inner().map_err(parquet_err)?;
    file.sync().map_err(|e| Error::io(path, e))?;
    drop(file);
    let bytes = storage.len(path).map_err(|e| Error::io(path, e))?;
    Ok(FileStats {
        rows: rows.len() as u64,
        bytes,
        min_time: rows.time.iter().copied().min().unwrap_or(0),
        max_time: rows.time.iter().copied().max().unwrap_or(0),
        min_series: rows.series.first().copied().unwrap_or(0),
        max_series: rows.series.last().copied().unwrap_or(0),
    })
}

/// Which rows to read.
#[derive(Debug, Clone, Default)]
pub struct RowFilter<'a> {
    /// Inclusive lower and exclusive upper bound on local time.
    pub time: Option<(i64, i64)>,
    /// Allowed series (`None` = all).
    pub series: Option<&'a RoaringBitmap>,
}

impl RowFilter<'_> {
    /// Whether a row passes.
    #[inline]
    pub fn matches(&self, series: u32, time: i64) -> bool {
        self.time.is_none_or(|(lo, hi)| time >= lo && time < hi)
            && self.series.is_none_or(|s| s.contains(series))
    }
}

fn i64_range(stats: Option<&Statistics>) -> Option<(i64, i64)> {
    match stats? {
        Statistics::Int64(s) => Some((*s.min_opt()?, *s.max_opt()?)),
        _ => None,
    }
}

fn u32_range(stats: Option<&Statistics>) -> Option<(u32, u32)> {
    match stats? {
        Statistics::Int32(s) => Some((*s.min_opt()? as u32, *s.max_opt()? as u32)),
        _ => None,
    }
}

/// Reads the rows of a data file that pass `filter`, in file order (sorted by series, time).
/// Row groups are pruned by their series and time statistics.
pub fn read_file(storage: &dyn Storage, path: &Path, filter: &RowFilter<'_>) -> Result<Rows> {
    let invalid =
        |reason: String| Error::DataFileInvalid { path: path.to_path_buf(), reason };
    let bytes = storage.read(path).map_err(|e| Error::io(path, e))?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(bytes)
        .map_err(|e| invalid(format!("not a readable parquet file: {e}")))?;
    let expected = file_schema();
    let actual = builder.schema();
    if actual.fields().len() != expected.fields().len()
        || actual
            .fields()
            .iter()
            .zip(expected.fields())
            .any(|(a, e)| a.name() != e.name() || a.data_type() != e.data_type())
    {
        return Err(invalid(format!("wrong schema: expected {expected}, found {actual}")));
    }
    let metadata = builder.metadata().clone();
    let mut groups = Vec::new();
    for (i, rg) in metadata.row_groups().iter().enumerate() {
        if let (Some((lo, hi)), Some((tmin, tmax))) = (filter.time, i64_range(rg.column(1).statistics()))
            && (tmax < lo || tmin >= hi)
        {
            continue;
        }
        if let (Some(set), Some((smin, smax))) = (filter.series, u32_range(rg.column(0).statistics()))
            && set.range_cardinality(smin..=smax) == 0
        {
            continue;
        }
        groups.push(i);
    }
    let mut out = Rows::default();
    if groups.is_empty() {
        return Ok(out);
    }
    let reader = builder
        .with_row_groups(groups)
        .with_batch_size(64 * 1024)
        .build()
        .map_err(|e| invalid(e.to_string()))?;
    for batch in reader {
        let batch = batch.map_err(|e| invalid(format!("decode failed: {e}")))?;
        append_batch(&batch, filter, &mut out).map_err(invalid)?;
    }
    Ok(out)
}

fn column<'a, T: 'static>(batch: &'a RecordBatch, i: usize) -> std::result::Result<&'a T, String> {
    batch
        .column(i)
        .as_any()
        .downcast_ref::<T>()
        .ok_or_else(|| format!("column {i} has an unexpected type"))
}

fn append_batch(batch: &RecordBatch, filter: &RowFilter<'_>, out: &mut Rows) -> std::result::Result<(), String> {
    let series = column::<UInt32Array>(batch, 0)?;
    let time = column::<Int64Array>(batch, 1)?;
    let vint = column::<Int64Array>(batch, 2)?;
    let vscale = column::<Int8Array>(batch, 3)?;
    let vfloat = column::<Float64Array>(batch, 4)?;
    if series.null_count() > 0 || time.null_count() > 0 {
        return Err("null series_id or time".into());
    }
    let values = decode_values(vint, vscale, vfloat)?;
    let (s, t) = (series.values(), time.values());
    out.series.reserve(s.len());
    out.time.reserve(s.len());
    out.value.reserve(s.len());
    for i in 0..s.len() {
        if filter.matches(s[i], t[i]) {
            out.push(s[i], t[i], values[i]);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
