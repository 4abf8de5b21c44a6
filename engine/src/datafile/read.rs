//! Reading data files row group by row group, pruned by statistics, with shared timestamps
//! resolved.

use std::path::{Path, PathBuf};

use arrow::array::{Array, Float64Array, Int8Array, Int64Array, RecordBatch, UInt32Array};
use bytes::Bytes;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ParquetRecordBatchReaderBuilder};
use parquet::file::metadata::ParquetMetaData;
use parquet::file::statistics::Statistics;

use super::{RowFilter, decode_values, file_schema};
use crate::error::{Error, Result};
use crate::model::Rows;
use crate::storage::Storage;

pub(super) fn i64_range(stats: Option<&Statistics>) -> Option<(i64, i64)> {
    match stats? {
        Statistics::Int64(s) => Some((*s.min_opt()?, *s.max_opt()?)),
        _ => None,
    }
}

pub(super) fn u32_range(stats: Option<&Statistics>) -> Option<(u32, u32)> {
    match stats? {
        Statistics::Int32(s) => Some((*s.min_opt()? as u32, *s.max_opt()? as u32)),
        _ => None,
    }
}

/// Fails unless `actual` is the data-file schema ([`file_schema`]).
pub(super) fn check_schema(actual: &arrow::datatypes::Schema, invalid: &dyn Fn(String) -> Error) -> Result<()> {
    let expected = file_schema();
    if actual.fields().len() != expected.fields().len()
        || actual
            .fields()
            .iter()
            .zip(expected.fields())
            .any(|(a, e)| a.name() != e.name() || a.data_type() != e.data_type())
    {
        return Err(invalid(format!("wrong schema: expected {expected}, found {actual}")));
    }
    Ok(())
}

/// Checks that every column chunk of `meta` lies inside a file of `len` bytes. A corrupt
/// footer can claim a negative offset or size, on which parquet-rs's `byte_range` panics;
/// nothing may call it before this check.
pub(super) fn check_chunk_ranges(meta: &ParquetMetaData, len: u64) -> std::result::Result<(), String> {
    for (group, rg) in meta.row_groups().iter().enumerate() {
        for (leaf, column) in rg.columns().iter().enumerate() {
            let start = column.dictionary_page_offset().unwrap_or_else(|| column.data_page_offset());
            let size = column.compressed_size();
            let end = u64::try_from(start).ok().zip(u64::try_from(size).ok()).and_then(|(s, l)| s.checked_add(l));
            if end.is_none_or(|end| end > len) {
                return Err(format!(
                    "row group {group} column {leaf}: bytes {start}+{size} outside the {len}-byte file"
                ));
            }
        }
    }
    Ok(())
}

/// The row groups of one data file that may hold rows passing a filter, decoded one at a
/// time (memory: one row group). Yields each group's passing rows, in file order.
pub struct RowGroups {
    path: PathBuf,
    bytes: Bytes,
    metadata: ArrowReaderMetadata,
    /// Column-chunk checksums (`None`: an older file without them).
    crcs: Option<Vec<u32>>,
    groups: std::vec::IntoIter<usize>,
    time: Option<(i64, i64)>,
    series: Option<roaring::RoaringBitmap>,
}

impl std::fmt::Debug for RowGroups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RowGroups").field("path", &self.path).finish_non_exhaustive()
    }
}

impl RowGroups {
    /// Opens `path`, checks its footer against `footer_crc` (the manifest's
    /// [`FileStats::footer_crc32`](super::FileStats); `None`: unchecked) and its schema, and
    /// selects the row groups whose series and time statistics overlap `filter`.
    pub fn open(storage: &dyn Storage, path: &Path, filter: &RowFilter<'_>, footer_crc: Option<u32>) -> Result<Self> {
        let invalid = |reason: String| Error::DataFileInvalid { path: path.to_path_buf(), reason };
        let bytes = storage.read(path).map_err(|e| Error::io(path, e))?;
        if footer_crc.is_some() {
            let footer = super::checksum::footer_of(&bytes).map_err(invalid)?;
            super::checksum::verify_footer(&[footer], footer_crc).map_err(invalid)?;
        }
        // Unchecked bytes (a file written before footer checksums) can make the decoder panic.
        let metadata = super::without_panics(path, "footer", || {
            ArrowReaderMetadata::load(&bytes, super::reader_options())
                .map_err(|e| invalid(format!("not a readable parquet file: {e}")))
        })?;
        check_schema(metadata.schema(), &invalid)?;
        check_chunk_ranges(metadata.metadata(), bytes.len() as u64).map_err(invalid)?;
        let crcs = super::checksum::of_metadata(metadata.metadata()).map_err(invalid)?;
        let mut groups = Vec::new();
        for (i, rg) in metadata.metadata().row_groups().iter().enumerate() {
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
        Ok(RowGroups {
            path: path.to_path_buf(),
            bytes,
            metadata,
            crcs,
            groups: groups.into_iter(),
            time: filter.time,
            series: filter.series.cloned(),
        })
    }

    /// Whether the file carries column-chunk checksums (files written before them do not).
    pub fn has_checksums(&self) -> bool {
        self.crcs.is_some()
    }

    /// The row groups selected by the filter, in file order (what the iterator yields next).
    pub fn selected(&self) -> &[usize] {
        self.groups.as_slice()
    }

    /// Reads row group `group` (any of the file's, selected or not): checksums, decoding, the
    /// filter's rows.
    pub fn read_group(&self, group: usize) -> Result<Rows> {
        super::without_panics(&self.path, format_args!("row group {group}"), || self.read_group_unguarded(group))
    }

    fn read_group_unguarded(&self, group: usize) -> Result<Rows> {
        let invalid = |reason: String| Error::DataFileInvalid { path: self.path.clone(), reason };
        let meta = self.metadata.metadata();
        let rg = meta.row_groups().get(group).ok_or_else(|| invalid(format!("no row group {group}")))?;
        for (leaf, column) in rg.columns().iter().enumerate() {
            let Some(crc) = super::checksum::expected(self.crcs.as_deref(), group, leaf, rg.num_columns()) else {
                continue;
            };
            let (start, len) = column.byte_range();
            let chunk = usize::try_from(start)
                .ok()
                .zip(usize::try_from(len).ok())
                .and_then(|(s, l)| self.bytes.get(s..s.checked_add(l)?))
                .ok_or_else(|| {
                    invalid(format!("row group {group} column {leaf}: bytes {start}+{len} outside the file"))
                })?;
            super::checksum::verify(chunk, crc, group, leaf).map_err(invalid)?;
        }
        let rows = rg.num_rows();
        // One batch for the whole group: shared timestamps and difference-coded values refer
        // to earlier rows of the group.
        let reader = ParquetRecordBatchReaderBuilder::new_with_metadata(self.bytes.clone(), self.metadata.clone())
            .with_row_groups(vec![group])
            .with_batch_size(usize::try_from(rows).unwrap_or(0).max(1))
            .build()
            .map_err(|e| invalid(e.to_string()))?;
        let schema = self.metadata.schema().clone();
        let batches =
            reader.collect::<std::result::Result<Vec<_>, _>>().map_err(|e| invalid(format!("decode failed: {e}")))?;
        let batch = arrow::compute::concat_batches(&schema, &batches).map_err(|e| invalid(e.to_string()))?;
        let filter = RowFilter { time: self.time, series: self.series.as_ref(), value: None };
        group_rows(&batch, &filter).map_err(|e| invalid(format!("row group {group}: {e}")))
    }
}

impl Iterator for RowGroups {
    type Item = Result<Rows>;

    fn next(&mut self) -> Option<Result<Rows>> {
        let group = self.groups.next()?;
        Some(self.read_group(group))
    }
}

/// Reads the rows of a data file that pass `filter`, in file order (sorted by series, time).
pub fn read_file(storage: &dyn Storage, path: &Path, filter: &RowFilter<'_>, footer_crc: Option<u32>) -> Result<Rows> {
    let mut out = Rows::default();
    for rows in RowGroups::open(storage, path, filter, footer_crc)? {
        let rows = rows?;
        if out.is_empty() {
            out = rows;
        } else {
            out.extend_from(&rows);
        }
    }
    Ok(out)
}

fn column<T: 'static>(batch: &RecordBatch, i: usize) -> std::result::Result<&T, String> {
    batch.column(i).as_any().downcast_ref::<T>().ok_or_else(|| format!("column {i} has an unexpected type"))
}

/// One run of equal series ids in a row group: the id and its rows.
pub(super) type SeriesRun = (u32, std::ops::Range<usize>);

/// The times of one series run while resolving a row group: its stored rows, or resolved
/// times where it shares some.
enum RunView {
    Stored(std::ops::Range<usize>),
    Resolved(Vec<i64>),
}

/// Appends to `out` the times of the runs `runs` (each id with its rows, covering the whole
/// row group whose stored times are `time`) for which `wanted(run index)` holds. A run
/// with null times shares the previous run's; those are followed without copying, so the
/// unwanted runs cost nothing but their null count. Only a run mixing stored and shared times
/// is resolved into a buffer.
pub(super) fn resolve_times(
    runs: &[SeriesRun],
    time: &Int64Array,
    wanted: impl Fn(usize) -> bool,
    out: &mut Vec<i64>,
) -> std::result::Result<(), String> {
    let t = time.values();
    if runs.last().map_or(0, |(_, r)| r.end) != time.len() {
        return Err(format!("{} times for series runs of {} rows", time.len(), runs.last().map_or(0, |(_, r)| r.end)));
    }
    let Some(nulls) = time.nulls() else {
        for (i, (_, rows)) in runs.iter().enumerate() {
            if wanted(i) {
                out.extend_from_slice(&t[rows.clone()]);
            }
        }
        return Ok(());
    };
    let mut previous: Option<RunView> = None;
    for (i, (id, rows)) in runs.iter().enumerate() {
        let n = rows.len();
        let missing_here = nulls.slice(rows.start, n).null_count();
        let current = if missing_here == 0 {
            RunView::Stored(rows.clone())
        } else {
            let have = match &previous {
                Some(RunView::Stored(r)) => r.len(),
                Some(RunView::Resolved(v)) => v.len(),
                None => 0,
            };
            if missing_here == n {
                if have < n {
                    return Err(missing(*id, have));
                }
                match previous.take() {
                    Some(RunView::Stored(r)) => RunView::Stored(r.start..r.start + n),
                    Some(RunView::Resolved(mut v)) => {
                        v.truncate(n);
                        RunView::Resolved(v)
                    }
                    None => return Err(missing(*id, 0)),
                }
            } else {
                let shared: &[i64] = match &previous {
                    Some(RunView::Stored(r)) => &t[r.clone()],
                    Some(RunView::Resolved(v)) => v,
                    None => &[],
                };
                let mut v = Vec::with_capacity(n);
                for (pos, k) in rows.clone().enumerate() {
                    v.push(if nulls.is_valid(k) { t[k] } else { *shared.get(pos).ok_or_else(|| missing(*id, pos))? });
                }
                RunView::Resolved(v)
            }
        };
        if wanted(i) {
            match &current {
                RunView::Stored(r) => out.extend_from_slice(&t[r.clone()]),
                RunView::Resolved(v) => out.extend_from_slice(v),
            }
        }
        previous = Some(current);
    }
    Ok(())
}

fn missing(series: u32, position: usize) -> String {
    format!("series {series}: null time at run position {position} with no earlier run to share")
}

/// The rows of a whole row group's `batch` that pass `filter`, values decoded and shared
/// timestamps resolved (for the wanted series only).
fn group_rows(batch: &RecordBatch, filter: &RowFilter<'_>) -> std::result::Result<Rows, String> {
    let series = column::<UInt32Array>(batch, 0)?;
    let time = column::<Int64Array>(batch, 1)?;
    let vint = column::<Int64Array>(batch, 2)?;
    let vscale = column::<Int8Array>(batch, 3)?;
    let vfloat = column::<Float64Array>(batch, 4)?;
    if series.null_count() > 0 {
        return Err("null series_id".into());
    }
    let values = decode_values(vint, vscale, vfloat)?;
    let runs: Vec<SeriesRun> = id_runs(series.values()).collect();
    let wanted = |i: usize| filter.series.is_none_or(|set| set.contains(runs[i].0));
    let mut t = Vec::new();
    resolve_times(&runs, time, wanted, &mut t)?;
    let mut out = Rows::default();
    let mut at = 0;
    for (id, rows) in runs.iter().enumerate().filter(|&(i, _)| wanted(i)).map(|(_, run)| run) {
        for (&t, &v) in t[at..at + rows.len()].iter().zip(&values[rows.clone()]) {
            if filter.time.is_none_or(|(lo, hi)| t >= lo && t < hi) {
                out.push(*id, t, v);
            }
        }
        at += rows.len();
    }
    Ok(out)
}

/// The runs of equal series ids, in order: each id with its rows.
pub(super) fn id_runs(series: &[u32]) -> impl Iterator<Item = SeriesRun> + '_ {
    let mut i = 0;
    std::iter::from_fn(move || {
        let id = *series.get(i)?;
        let end = series[i..].iter().position(|&s| s != id).map_or(series.len(), |n| i + n);
        let rows = i..end;
        i = end;
        Some((id, rows))
    })
}
