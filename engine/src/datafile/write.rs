//! Writing data files: a streaming writer that cuts row groups, encodes values and shares
//! timestamps between series runs.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{ArrayRef, BooleanBufferBuilder, Int64Array, RecordBatch, UInt32Array};
use arrow::buffer::NullBuffer;
use arrow::datatypes::SchemaRef;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;

use super::checksum;
use super::valuestats::{self, GroupRanges};
use super::{FileStats, ROW_GROUP_ROWS, WriteOptions, columns, encode_values, file_schema};
use crate::error::{Error, Result};
use crate::model::Rows;
use crate::storage::{Storage, StorageFile};

fn writer_properties(opts: WriteOptions) -> Result<WriterProperties> {
    let level = ZstdLevel::try_new(opts.zstd_level)
        .map_err(|e| Error::InvalidConfig { reason: format!("bad zstd level {}: {e}", opts.zstd_level) })?;
    let col = |name: &str| ColumnPath::from(name);
    Ok(WriterProperties::builder()
        .set_compression(Compression::ZSTD(level))
        .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
        // One page per column chunk where it fits: every page restarts the delta encoding and
        // the zstd frame (the default limit of 20,000 rows cost 0.2 B/sample on ms timestamps).
        .set_data_page_row_count_limit(ROW_GROUP_ROWS)
        .set_statistics_enabled(EnabledStatistics::Chunk)
        // Sorted ids: deltas are almost all 0 (cheaper to encode than a dictionary lookup).
        .set_column_dictionary_enabled(col(columns::SERIES), false)
        .set_column_encoding(col(columns::SERIES), Encoding::DELTA_BINARY_PACKED)
        .set_column_dictionary_enabled(col(columns::TIME), false)
        .set_column_encoding(col(columns::TIME), Encoding::DELTA_BINARY_PACKED)
        .set_column_dictionary_enabled(col(columns::VALUE_SCALE), false)
        .set_column_encoding(col(columns::VALUE_SCALE), Encoding::DELTA_BINARY_PACKED)
        .set_column_dictionary_enabled(col(columns::VALUE_INT), false)
        .set_column_encoding(col(columns::VALUE_INT), Encoding::BYTE_STREAM_SPLIT)
        .set_column_dictionary_enabled(col(columns::VALUE_FLOAT), false)
        .set_column_encoding(col(columns::VALUE_FLOAT), Encoding::BYTE_STREAM_SPLIT)
        .build())
}

/// Writes one data file from sorted, deduplicated rows handed over in any number of
/// [`DataFileWriter::append`] calls (each continuing the (series, time) order of the last);
/// memory stays at one row group. [`DataFileWriter::finish`] syncs the file.
pub struct DataFileWriter {
    path: PathBuf,
    schema: SchemaRef,
    writer: ArrowWriter<Tap>,
    pending: Rows,
    stats: FileStats,
    /// Value ranges of the series runs of each row group written (`datafile/valuestats.rs`).
    runs: Vec<GroupRanges>,
    /// Checksums of the column chunks written so far (`datafile/checksum.rs`).
    crcs: Vec<u32>,
}

/// The file being written, keeping a copy of the bytes since the last row group so that the
/// row group's column chunks can be checksummed as they were written.
struct Tap {
    file: Box<dyn StorageFile>,
    /// Bytes written so far.
    pos: u64,
    /// File offset of `held[0]`.
    held_from: u64,
    held: Vec<u8>,
}

impl std::io::Write for Tap {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.file.write(buf)?;
        self.held.extend_from_slice(&buf[..n]);
        self.pos += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

impl Tap {
    /// Checksums the chunks of the row group just written (all of it in `held`: the group's
    /// bytes reached the file in the last flush) and drops the held bytes.
    fn checksum_group(
        &mut self,
        group: &parquet::file::metadata::RowGroupMetaData,
        out: &mut Vec<u32>,
    ) -> std::result::Result<(), String> {
        for (leaf, column) in group.columns().iter().enumerate() {
            let (start, len) = column.byte_range();
            let at = start.checked_sub(self.held_from).and_then(|a| usize::try_from(a).ok());
            let chunk = at.and_then(|a| self.held.get(a..a.checked_add(usize::try_from(len).ok()?)?));
            let chunk = chunk
                .ok_or_else(|| format!("column {leaf} bytes {start}+{len} are not among the bytes just written"))?;
            out.push(checksum::of(chunk));
        }
        self.held.clear();
        self.held_from = self.pos;
        Ok(())
    }
}

impl std::fmt::Debug for DataFileWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataFileWriter")
            .field("path", &self.path)
            .field("rows", &self.stats.rows)
            .finish_non_exhaustive()
    }
}

impl DataFileWriter {
    /// Creates (truncating) the file at `path`.
    pub fn create(storage: &dyn Storage, path: &Path, opts: WriteOptions) -> Result<Self> {
        let file = storage.create(path).map_err(|e| Error::io(path, e))?;
        let file = Tap { file, pos: 0, held_from: 0, held: Vec::new() };
        let schema = file_schema();
        let writer = ArrowWriter::try_new(file, schema.clone(), Some(writer_properties(opts)?))
            .map_err(|source| Error::Parquet { path: path.to_path_buf(), source })?;
        Ok(DataFileWriter {
            path: path.to_path_buf(),
            schema,
            writer,
            pending: Rows::default(),
            stats: FileStats {
                rows: 0,
                bytes: 0,
                min_time: i64::MAX,
                max_time: i64::MIN,
                min_series: u32::MAX,
                max_series: 0,
                footer_crc32: None,
            },
            runs: Vec::new(),
            crcs: Vec::new(),
        })
    }

    /// Appends rows that continue the file's (series, time) order.
    pub fn append(&mut self, rows: &Rows) -> Result<()> {
        self.append_range(rows, 0..rows.len())
    }

    /// Appends rows `range` of `rows` (which continue the file's (series, time) order).
    pub fn append_range(&mut self, rows: &Rows, range: std::ops::Range<usize>) -> Result<()> {
        let (start, end) = (range.start, range.end.min(rows.len()));
        if start >= end {
            return Ok(());
        }
        let s = &mut self.stats;
        s.rows += (end - start) as u64;
        s.min_series = s.min_series.min(rows.series[start]);
        s.max_series = s.max_series.max(rows.series[end - 1]);
        for &t in &rows.time[start..end] {
            s.min_time = s.min_time.min(t);
            s.max_time = s.max_time.max(t);
        }
        let mut at = start;
        if self.pending.is_empty() {
            // Large appends go straight to row groups without a copy into `pending`.
            while end - at >= ROW_GROUP_ROWS {
                self.write_group(rows, at, at + ROW_GROUP_ROWS)?;
                at += ROW_GROUP_ROWS;
            }
        }
        while at < end {
            let take = (ROW_GROUP_ROWS - self.pending.len()).min(end - at);
            self.pending.extend_range(rows, at, at + take);
            at += take;
            if self.pending.len() == ROW_GROUP_ROWS {
                let group = std::mem::take(&mut self.pending);
                self.write_group(&group, 0, group.len())?;
                self.pending = group;
                self.pending.clear();
            }
        }
        Ok(())
    }

    fn write_group(&mut self, rows: &Rows, start: usize, end: usize) -> Result<()> {
        let (vint, vscale, vfloat) = encode_values(&rows.series[start..end], &rows.value[start..end]);
        self.runs.push(valuestats::group_ranges(&rows.series[start..end], &rows.value[start..end]));
        let time = share_times(&rows.series[start..end], &rows.time[start..end]);
        let batch = RecordBatch::try_new(
            self.schema.clone(),
            vec![
                Arc::new(UInt32Array::from(rows.series[start..end].to_vec())) as ArrayRef,
                Arc::new(time),
                Arc::new(vint),
                Arc::new(vscale),
                Arc::new(vfloat),
            ],
        )?;
        // One `write` per row group: the writer closes a row group at ROW_GROUP_ROWS, so the
        // groups are exactly the slices handed over here.
        self.writer.write(&batch).map_err(|source| Error::Parquet { path: self.path.clone(), source })?;
        self.writer.flush().map_err(|source| Error::Parquet { path: self.path.clone(), source })?;
        // Push the group's bytes through parquet's buffer into the tap, then checksum them.
        self.writer.sync().map_err(|e| Error::io(&self.path, e))?;
        let group = self.writer.flushed_row_groups().last().cloned();
        let group = group.ok_or_else(|| Error::DataFileInvalid {
            path: self.path.clone(),
            reason: "no row group after a flush".into(),
        })?;
        self.writer
            .inner_mut()
            .checksum_group(&group, &mut self.crcs)
            .map_err(|reason| Error::DataFileInvalid { path: self.path.clone(), reason })
    }

    /// Writes what is pending, closes and syncs the file; returns its statistics.
    pub fn finish(mut self, storage: &dyn Storage) -> Result<FileStats> {
        let rest = std::mem::take(&mut self.pending);
        if !rest.is_empty() {
            self.write_group(&rest, 0, rest.len())?;
        }
        let path = self.path;
        let runs = valuestats::encode(&self.runs);
        self.writer
            .append_key_value_metadata(parquet::file::metadata::KeyValue::new(valuestats::KEY.to_string(), runs));
        self.writer.append_key_value_metadata(parquet::file::metadata::KeyValue::new(
            checksum::KEY.to_string(),
            checksum::encode(&self.crcs),
        ));
        let tap = self.writer.into_inner().map_err(|source| Error::Parquet { path: path.clone(), source })?;
        // All the tap holds now is what followed the last row group: the footer.
        let footer =
            checksum::footer_of(&tap.held).map_err(|reason| Error::DataFileInvalid { path: path.clone(), reason })?;
        let footer_crc = checksum::of(footer);
        let mut file = tap.file;
        file.sync().map_err(|e| Error::io(&path, e))?;
        drop(file);
        let mut stats = self.stats;
        stats.footer_crc32 = Some(footer_crc);
        stats.bytes = storage.len(&path).map_err(|e| Error::io(&path, e))?;
        if stats.rows == 0 {
            (stats.min_time, stats.max_time, stats.min_series) = (0, 0, 0);
        }
        Ok(stats)
    }
}

/// Writes sorted, deduplicated rows to a new data file at `path` and syncs it.
pub fn write_file(storage: &dyn Storage, path: &Path, rows: &Rows, opts: WriteOptions) -> Result<FileStats> {
    write_file_range(storage, path, rows, 0..rows.len(), opts)
}

/// [`write_file`] of rows `range`.
pub fn write_file_range(
    storage: &dyn Storage,
    path: &Path,
    rows: &Rows,
    range: std::ops::Range<usize>,
    opts: WriteOptions,
) -> Result<FileStats> {
    let mut writer = DataFileWriter::create(storage, path, opts)?;
    writer.append_range(rows, range)?;
    writer.finish(storage)
}

/// The `time` column of one row group: a series run whose timestamps equal the first ones of
/// the run before it in the row group is stored as nulls ("same as the previous run"). Series
/// scraped together (one target, one scrape) share their timestamps, so all but the first
/// series of a target cost nothing for time; see `docs/format-storage.md`.
fn share_times(series: &[u32], time: &[i64]) -> Int64Array {
    let mut valid = BooleanBufferBuilder::new(time.len());
    let mut any = false;
    let mut prev: Option<std::ops::Range<usize>> = None;
    let mut start = 0;
    while start < series.len() {
        let mut end = start + 1;
        while end < series.len() && series[end] == series[start] {
            end += 1;
        }
        let same = prev.as_ref().is_some_and(|p| {
            let p = &time[p.clone()];
            p.len() >= end - start && p[..end - start] == time[start..end]
        });
        valid.append_n(end - start, !same);
        any |= same;
        prev = Some(start..end);
        start = end;
    }
    let nulls = any.then(|| NullBuffer::new(valid.finish()));
    Int64Array::new(time.to_vec().into(), nulls)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_with_the_previous_runs_times_become_null() {
        // Series 1 repeats series 0's times, series 2 a prefix of them, series 3 differs, and
        // series 4 repeats series 3 (chains are resolved in order by the reader).
        let series = [0, 0, 0, 1, 1, 1, 2, 2, 3, 3, 4, 4];
        let time = [10, 20, 30, 10, 20, 30, 10, 20, 11, 20, 11, 20];
        let a = share_times(&series, &time);
        let nulls: Vec<bool> = (0..time.len()).map(|i| arrow::array::Array::is_null(&a, i)).collect();
        assert_eq!(nulls, [false, false, false, true, true, true, true, true, false, false, true, true]);
        // Nothing shared: no null buffer at all.
        assert_eq!(arrow::array::Array::null_count(&share_times(&[0, 1], &[1, 2])), 0);
    }
}
