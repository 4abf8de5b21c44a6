//! Reading a data file by parts: the footer once, then single row groups with only the columns
//! a query needs, each column chunk fetched with one [`Storage::read_range`] (so a split scan
//! reads every byte it needs exactly once, and no byte it does not need).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{Array, Float64Array, Int8Array, Int64Array, UInt32Array};
use bytes::Bytes;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ParquetRecordBatchReaderBuilder, RowSelection};
use parquet::file::metadata::{FooterTail, ParquetMetaDataReader};
use parquet::file::reader::{ChunkReader, Length};

use super::read::{SeriesRun, check_schema, i64_range, id_runs, resolve_times, u32_range};
use super::valuestats::{self, GroupRanges, RunRange, ValueRange};
use super::{RowFilter, decode_values};
use crate::error::{Error, Result};
use crate::storage::Storage;

/// Which columns a read decodes. `series` and `time` may be decoded anyway when a row filter
/// needs them (and `series` whenever `time` is: shared timestamps resolve per series run).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Columns {
    /// Series ids.
    pub series: bool,
    /// Local timestamps.
    pub time: bool,
    /// Values.
    pub value: bool,
}

impl Columns {
    /// Every column.
    pub const ALL: Columns = Columns { series: true, time: true, value: true };
    /// No column: only row counts (`count(*)`).
    pub const NONE: Columns = Columns { series: false, time: false, value: false };
}

/// Rows with only some columns decoded: `len` rows; a column that was not decoded is empty,
/// one that was has `len` entries.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Chunk {
    /// Number of rows.
    pub len: usize,
    /// Series ids (empty if not decoded).
    pub series: Vec<u32>,
    /// Local timestamps (empty if not decoded).
    pub time: Vec<i64>,
    /// Values (empty if not decoded).
    pub value: Vec<f64>,
}

impl Chunk {
    /// Heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.series.capacity() * size_of::<u32>()
            + self.time.capacity() * size_of::<i64>()
            + self.value.capacity() * size_of::<f64>()
    }
}

impl From<crate::model::Rows> for Chunk {
    fn from(rows: crate::model::Rows) -> Self {
        Chunk { len: rows.len(), series: rows.series, time: rows.time, value: rows.value }
    }
}

/// Statistics of one row group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupStats {
    /// Rows.
    pub rows: u64,
    /// Smallest and largest series id (`None`: no statistics).
    pub series: Option<(u32, u32)>,
    /// Smallest and largest local timestamp (`None`: no statistics).
    pub time: Option<(i64, i64)>,
}

impl GroupStats {
    /// Whether the group may hold rows passing `filter`.
    pub fn may_match(&self, filter: &RowFilter<'_>) -> bool {
        let time_ok = match (filter.time, self.time) {
            (Some((lo, hi)), Some((tmin, tmax))) => tmax >= lo && tmin < hi,
            _ => true,
        };
        let series_ok = match (filter.series, self.series) {
            (Some(set), Some((smin, smax))) => set.range_cardinality(smin..=smax) > 0,
            _ => true,
        };
        time_ok && series_ok
    }

    /// Whether every row of the group passes `filter`'s time bound (no per-row check needed).
    fn time_covered(&self, filter: &RowFilter<'_>) -> bool {
        match (filter.time, self.time) {
            (None, _) => true,
            (Some((lo, hi)), Some((tmin, tmax))) => tmin >= lo && tmax < hi,
            (Some(_), None) => false,
        }
    }

    /// Whether every row of the group passes `filter`'s series set.
    fn series_covered(&self, filter: &RowFilter<'_>) -> bool {
        match (filter.series, self.series) {
            (None, _) => true,
            (Some(set), Some((smin, smax))) => set.range_cardinality(smin..=smax) == u64::from(smax - smin) + 1,
            (Some(_), None) => false,
        }
    }
}

/// The footer of a data file, read once; row groups are then read one by one with
/// [`FileFooter::read_group`].
#[derive(Debug, Clone)]
pub struct FileFooter {
    path: PathBuf,
    len: u64,
    metadata: ArrowReaderMetadata,
    /// The value ranges of each row group's series runs, decoded on first use (`None`: the
    /// file has none; written before they were recorded).
    value_runs: std::sync::OnceLock<FileRuns>,
    /// The checksum of every column chunk, row group by row group (`None`: written before
    /// they were recorded; `datafile/checksum.rs`).
    crcs: Option<Vec<u32>>,
}

/// The value ranges of a file's series runs by row group, `None` if it has none, or why they
/// are unreadable.
type FileRuns = std::result::Result<Option<Vec<GroupRanges>>, String>;

impl FileFooter {
    /// Reads the footer of `path` (two range reads: the 8-byte tail, then the metadata),
    /// checks it against `footer_crc` (the manifest's
    /// [`FileStats::footer_crc32`](super::FileStats); `None`: unchecked) and checks the schema.
    pub fn read(storage: &dyn Storage, path: &Path, footer_crc: Option<u32>) -> Result<Self> {
        let invalid = |reason: String| Error::DataFileInvalid { path: path.to_path_buf(), reason };
        let len = storage.len(path).map_err(|e| Error::io(path, e))?;
        if len < 12 {
            return Err(invalid(format!("{len} bytes is too short for a parquet file")));
        }
        let tail = storage.read_range(path, len - 8..len).map_err(|e| Error::io(path, e))?;
        let tail: [u8; 8] = tail.as_ref().try_into().map_err(|_| invalid("short footer read".into()))?;
        let footer = FooterTail::try_new(&tail).map_err(|e| invalid(format!("not a readable parquet file: {e}")))?;
        let meta_len = footer.metadata_length() as u64;
        if meta_len + 8 > len {
            return Err(invalid(format!("footer claims {meta_len} bytes of metadata in a {len}-byte file")));
        }
        let raw = storage.read_range(path, len - 8 - meta_len..len - 8).map_err(|e| Error::io(path, e))?;
        super::checksum::verify_footer(&[raw.as_ref(), &tail], footer_crc).map_err(invalid)?;
        // Unchecked bytes (a file written before footer checksums) can make the decoders panic.
        let metadata = super::without_panics(path, "footer", || {
            ParquetMetaDataReader::decode_metadata(&raw)
                .and_then(|metadata| ArrowReaderMetadata::try_new(Arc::new(metadata), super::reader_options()))
                .map_err(|e| invalid(format!("not a readable parquet file: {e}")))
        })?;
        check_schema(metadata.schema(), &invalid)?;
        super::read::check_chunk_ranges(metadata.metadata(), len).map_err(invalid)?;
        let crcs = super::checksum::of_metadata(metadata.metadata()).map_err(invalid)?;
        Ok(FileFooter { path: path.to_path_buf(), len, metadata, value_runs: std::sync::OnceLock::new(), crcs })
    }

    /// This footer as if its file had no chunk checksums (a file written before them).
    #[cfg(test)]
    pub(crate) fn without_chunk_checksums(mut self) -> Self {
        self.crcs = None;
        self
    }

    /// Estimated bytes this footer holds in memory: the Parquet metadata and the per-run value
    /// ranges, counted as decoded (24 bytes a run, 16 characters of their encoding) whether or
    /// not they are yet.
    pub fn heap_bytes(&self) -> usize {
        let runs = self.value_runs_text().map_or(0, |text| text.len() / 16 * 24);
        let crcs = self.crcs.as_ref().map_or(0, |c| c.len() * 4);
        self.metadata.metadata().memory_size() + runs + crcs + self.path.as_os_str().len()
    }

    /// The encoded per-run value statistics of the file (`None`: written before they were
    /// recorded).
    fn value_runs_text(&self) -> Option<&str> {
        let kv = self.metadata.metadata().file_metadata().key_value_metadata()?;
        kv.iter().find(|kv| kv.key == valuestats::KEY)?.value.as_deref()
    }

    /// The value ranges of row group `group` (`None`: not recorded).
    pub fn value_ranges(&self, group: usize) -> Result<Option<&GroupRanges>> {
        let decoded = self.value_runs.get_or_init(|| {
            let Some(text) = self.value_runs_text() else {
                return Ok(None);
            };
            let meta = self.metadata.metadata();
            let rows: Vec<u64> =
                meta.row_groups().iter().map(|rg| u64::try_from(rg.num_rows()).unwrap_or(u64::MAX)).collect();
            valuestats::decode(text, &rows).map(Some)
        });
        match decoded {
            Ok(None) => Ok(None),
            Ok(Some(groups)) => Ok(groups.get(group)),
            Err(reason) => Err(Error::DataFileInvalid { path: self.path.clone(), reason: reason.clone() }),
        }
    }

    /// Whether row group `group` may hold a value in `range` (by its runs' recorded value
    /// ranges; `true` when none are recorded).
    pub fn group_may_hold(&self, group: usize, range: &ValueRange) -> Result<bool> {
        Ok(self.value_ranges(group)?.is_none_or(|g| range.may_hold_any(&g.runs)))
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Statistics of every row group, in file order.
    pub fn groups(&self) -> Vec<GroupStats> {
        self.metadata
            .metadata()
            .row_groups()
            .iter()
            .map(|rg| GroupStats {
                rows: u64::try_from(rg.num_rows()).unwrap_or(0),
                series: u32_range(rg.column(0).statistics()),
                time: i64_range(rg.column(1).statistics()),
            })
            .collect()
    }

    /// Reads the rows of row group `group` that pass `filter`, decoding `columns` (plus what
    /// the filter needs). A group the filter covers entirely and from which no column is asked
    /// is answered from the footer's row count without reading anything.
    ///
    /// With a series filter the read has two phases: the series runs (and times) first, then
    /// the value columns only for the runs of wanted series (a Parquet row selection), and not
    /// at all — not even fetched — when the group holds none. Rows are sorted by series and a
    /// difference-coded value refers to the row before it in its run, so whole runs are
    /// selected; the time filter applies afterwards. Shared timestamps are resolved, and rows
    /// copied, for the wanted runs only. Where the value statistics prove that the group holds
    /// every id between its smallest and largest once (`GroupRanges::per_run`), the series
    /// column is not decoded at all: its runs are those ids with the recorded run lengths.
    ///
    /// A panic while decoding (parquet-rs and arrow panic on some corrupt pages; a file with
    /// chunk checksums never gets that far) is this group's `DataFileInvalid`.
    pub fn read_group(
        &self,
        storage: &dyn Storage,
        group: usize,
        columns: Columns,
        filter: &RowFilter<'_>,
    ) -> Result<Chunk> {
        super::without_panics(&self.path, format_args!("row group {group}"), || {
            self.read_group_unguarded(storage, group, columns, filter)
        })
    }

    fn read_group_unguarded(
        &self,
        storage: &dyn Storage,
        group: usize,
        columns: Columns,
        filter: &RowFilter<'_>,
    ) -> Result<Chunk> {
        let invalid = |reason: String| Error::DataFileInvalid { path: self.path.clone(), reason };
        let meta = self.metadata.metadata();
        let rg = meta.row_groups().get(group).ok_or_else(|| invalid(format!("no row group {group}")))?;
        let stats = self.groups().get(group).copied().ok_or_else(|| invalid(format!("no row group {group}")))?;
        let filter_time = !stats.time_covered(filter);
        let filter_series = !stats.series_covered(filter);
        // Runs whose recorded values all lie outside the wanted range (only when values are
        // read: otherwise nothing is saved, and the caller's count must not change).
        let value_runs = match (&filter.value, columns.value) {
            (Some(range), true) => self
                .value_ranges(group)?
                .filter(|g| g.per_run && !g.runs.iter().all(|r| range.may_hold(r)))
                .map(|g| g.runs.as_slice()),
            _ => None,
        };
        let filter_value = value_runs.is_some();
        let need_time = columns.time || filter_time;
        let need_series = columns.series || need_time || filter_series || filter_value;
        let need_value = columns.value;
        let rows = usize::try_from(rg.num_rows()).map_err(|_| invalid("negative row count".into()))?;
        if !need_series && !need_value {
            return Ok(Chunk { len: rows, ..Chunk::default() });
        }
        let context = |e: String| invalid(format!("row group {group}: {e}"));
        let known_runs = if need_series { self.runs_from_stats(group, &stats, rows)? } else { None };
        let decode_series = need_series && known_runs.is_none();
        // Whole runs are selected (by series, and by recorded values when values are read).
        let select = need_series && (filter_series || filter_value);
        let mut leaves = Vec::new();
        if decode_series {
            leaves.push(0);
        }
        if need_time {
            leaves.push(1);
        }
        // Phase 1: the key columns (and the values too when no run is selected).
        let values_now = need_value && !select;
        if values_now {
            leaves.extend([2, 3, 4]);
        }
        let decoded = self.decode(storage, group, &leaves, None)?;
        let mut next = decoded.iter();
        let mut series = Vec::new();
        if decode_series {
            let array = next.next().ok_or_else(|| context("series not decoded".into()))?;
            let array = downcast::<UInt32Array>(array).map_err(context)?;
            if array.null_count() > 0 {
                return Err(context("null series_id".into()));
            }
            if array.len() != rows {
                return Err(context("columns differ in length".into()));
            }
            series = array.values().to_vec();
        }
        let runs: Vec<SeriesRun> = match known_runs {
            Some(runs) => runs,
            None => id_runs(&series).collect(),
        };
        let time = if need_time {
            let time = next.next().ok_or_else(|| context("time not decoded".into()))?;
            let time = downcast::<Int64Array>(time).map_err(context)?;
            if time.len() != rows {
                return Err(context("columns differ in length".into()));
            }
            Some(time)
        } else {
            None
        };
        let mut out = Chunk { len: rows, ..Chunk::default() };
        if values_now {
            let v: Vec<&arrow::array::ArrayRef> = next.collect();
            out.value = decode_value_columns(&v).map_err(context)?;
            if out.value.len() != rows {
                return Err(context("columns differ in length".into()));
            }
        }
        let wanted: Vec<bool> = if select {
            if let Some(expected) = value_runs {
                check_runs(&runs, expected).map_err(context)?;
            }
            let set = filter.series;
            runs.iter()
                .enumerate()
                .map(|(i, (id, _))| {
                    set.is_none_or(|set| set.contains(*id))
                        && value_runs
                            .zip(filter.value)
                            .is_none_or(|(r, range)| r.get(i).is_none_or(|r| range.may_hold(r)))
                })
                .collect()
        } else {
            vec![true; runs.len()]
        };
        if let Some(time) = time {
            resolve_times(&runs, time, |i| wanted[i], &mut out.time).map_err(context)?;
        }
        if need_series {
            if !select && decode_series {
                out.series = series;
            } else {
                for ((id, rows), _) in runs.iter().zip(&wanted).filter(|(_, w)| **w) {
                    out.series.resize(out.series.len() + rows.len(), *id);
                }
            }
            out.len = out.series.len();
        }
        if need_value && !values_now {
            // Phase 2: the values of the selected runs only (runs are in row order).
            if out.len > 0 {
                let kept = runs.iter().zip(&wanted).filter(|(_, w)| **w).map(|((_, rows), _)| rows.clone());
                let selection = RowSelection::from_consecutive_ranges(kept, rows);
                let v = self.decode(storage, group, &[2, 3, 4], Some(selection))?;
                out.value = decode_value_columns(&v.iter().collect::<Vec<_>>()).map_err(context)?;
                if out.value.len() != out.len {
                    return Err(context("selected values differ in length".into()));
                }
            }
        }
        if need_time && out.time.len() != out.len {
            return Err(context("columns differ in length".into()));
        }
        if filter_time {
            // The series filter is applied (whole runs); what is left is the time bound.
            retain(&mut out, &RowFilter { time: filter.time, series: None, value: None });
        }
        Ok(out)
    }

    /// The series runs of row group `group` from its value statistics, without decoding the
    /// series column: when the group has one run per id from its smallest to its largest id
    /// (as many runs as ids; rows are sorted by series, so each id is one run), the runs are
    /// those ids in order, with the recorded lengths. `None` when that is not proven.
    fn runs_from_stats(&self, group: usize, stats: &GroupStats, rows: usize) -> Result<Option<Vec<SeriesRun>>> {
        let (Some(ranges), Some((lo, hi))) = (self.value_ranges(group)?, stats.series) else {
            return Ok(None);
        };
        if !ranges.per_run || lo > hi || ranges.runs.len() as u64 != u64::from(hi - lo) + 1 {
            return Ok(None);
        }
        let mut at = 0usize;
        let mut runs = Vec::with_capacity(ranges.runs.len());
        for (id, run) in (lo..=hi).zip(&ranges.runs) {
            let end = at.saturating_add(run.rows as usize);
            runs.push((id, at..end));
            at = end;
        }
        Ok((at == rows).then_some(runs))
    }

    /// Fetches the column chunks of `leaves` in row group `group` (one read each) and decodes
    /// them, optionally only the rows of `selection`; one array per leaf.
    fn decode(
        &self,
        storage: &dyn Storage,
        group: usize,
        leaves: &[usize],
        selection: Option<RowSelection>,
    ) -> Result<Vec<arrow::array::ArrayRef>> {
        let invalid = |reason: String| Error::DataFileInvalid { path: self.path.clone(), reason };
        let meta = self.metadata.metadata();
        let rg = meta.row_groups().get(group).ok_or_else(|| invalid(format!("no row group {group}")))?;
        let mut parts = Vec::with_capacity(leaves.len());
        for &leaf in leaves {
            let (start, len) = rg.column(leaf).byte_range();
            let end = start.checked_add(len).filter(|&e| e <= self.len).ok_or_else(|| {
                invalid(format!("row group {group} column {leaf}: bytes {start}+{len} outside the file"))
            })?;
            let bytes = storage.read_range(&self.path, start..end).map_err(|e| Error::io(&self.path, e))?;
            if let Some(crc) = super::checksum::expected(self.crcs.as_deref(), group, leaf, rg.num_columns()) {
                super::checksum::verify(&bytes, crc, group, leaf).map_err(invalid)?;
            }
            parts.push((start, bytes));
        }
        let sparse = SparseFile { len: self.len, parts };
        // The value columns of a whole group decode directly when they can (`pages.rs`); the
        // rest, and any chunk that path declines, through parquet-rs.
        let rows = usize::try_from(rg.num_rows()).map_err(|_| invalid("negative row count".into()))?;
        let mut direct: Vec<Option<arrow::array::ArrayRef>> = leaves
            .iter()
            .map(|&leaf| match leaf {
                _ if selection.is_some() => None,
                VALUE_INT_LEAF | VALUE_FLOAT_LEAF => {
                    super::pages::decode_split_chunk(Arc::new(sparse.clone()), rg.column(leaf), rows)
                }
                VALUE_SCALE_LEAF => {
                    super::pages::decode_delta_i8_chunk(Arc::new(sparse.clone()), rg.column(leaf), rows)
                }
                _ => None,
            })
            .collect();
        let rest: Vec<usize> = leaves.iter().zip(&direct).filter(|(_, d)| d.is_none()).map(|(&l, _)| l).collect();
        if rest.is_empty() {
            return Ok(direct.into_iter().flatten().collect());
        }
        let decoded = sparse.decode_with_parquet(self, group, &rest, selection)?;
        let mut decoded = decoded.into_iter();
        direct
            .iter_mut()
            .map(|d| {
                d.take()
                    .or_else(|| decoded.next())
                    .ok_or_else(|| invalid(format!("row group {group}: a column was not decoded")))
            })
            .collect()
    }
}

/// Leaf index of `value_int`, `value_scale` and `value_float` in the data-file schema.
const VALUE_INT_LEAF: usize = 2;
const VALUE_SCALE_LEAF: usize = 3;
const VALUE_FLOAT_LEAF: usize = 4;

/// The three value columns (`value_int`, `value_scale`, `value_float`) as `f64`.
fn decode_value_columns(v: &[&arrow::array::ArrayRef]) -> std::result::Result<Vec<f64>, String> {
    let [vint, vscale, vfloat] = v else { return Err("value columns not decoded".into()) };
    decode_values(downcast::<Int64Array>(vint)?, downcast::<Int8Array>(vscale)?, downcast::<Float64Array>(vfloat)?)
}

/// Checks that `runs` are the series runs recorded in the file's value statistics.
fn check_runs(runs: &[SeriesRun], expected: &[RunRange]) -> std::result::Result<(), String> {
    for (index, (id, rows)) in runs.iter().enumerate() {
        if expected.get(index).is_none_or(|r| r.rows as usize != rows.len()) {
            return Err(format!(
                "value statistics do not match series run {index} ({} rows of series {id})",
                rows.len()
            ));
        }
    }
    if expected.len() != runs.len() {
        return Err(format!("value statistics list {} series runs, the row group has {}", expected.len(), runs.len()));
    }
    Ok(())
}

fn downcast<T: 'static>(a: &arrow::array::ArrayRef) -> std::result::Result<&T, String> {
    a.as_any().downcast_ref::<T>().ok_or_else(|| "a column has an unexpected type".to_string())
}

/// Keeps the rows passing `filter` (series and time are decoded whenever it needs them). The
/// series set is looked up once per run of equal ids, not per row.
pub(crate) fn retain(chunk: &mut Chunk, filter: &RowFilter<'_>) {
    let mut w = 0;
    let mut keep = |chunk: &mut Chunk, rows: std::ops::Range<usize>| {
        for i in rows {
            if filter.time.is_none_or(|(lo, hi)| chunk.time.get(i).is_none_or(|&t| t >= lo && t < hi)) {
                if !chunk.series.is_empty() {
                    chunk.series[w] = chunk.series[i];
                }
                if !chunk.time.is_empty() {
                    chunk.time[w] = chunk.time[i];
                }
                if !chunk.value.is_empty() {
                    chunk.value[w] = chunk.value[i];
                }
                w += 1;
            }
        }
    };
    if chunk.series.is_empty() {
        keep(chunk, 0..chunk.len);
    } else {
        let wanted: Vec<_> = id_runs(&chunk.series)
            .filter(|(id, _)| filter.series.is_none_or(|set| set.contains(*id)))
            .map(|(_, rows)| rows)
            .collect();
        for rows in wanted {
            keep(chunk, rows);
        }
    }
    chunk.len = w;
    chunk.series.truncate(w);
    chunk.time.truncate(w);
    chunk.value.truncate(w);
}

/// The column chunks of one row group, at their file offsets: what the Parquet reader asks
/// for is served from these bytes; anything else is an error (never a second read).
#[derive(Clone)]
struct SparseFile {
    len: u64,
    parts: Vec<(u64, Bytes)>,
}

impl SparseFile {
    /// Decodes `leaves` of row group `group` of `file` from these bytes with parquet-rs.
    fn decode_with_parquet(
        self,
        file: &FileFooter,
        group: usize,
        leaves: &[usize],
        selection: Option<RowSelection>,
    ) -> Result<Vec<arrow::array::ArrayRef>> {
        let invalid = |reason: String| Error::DataFileInvalid { path: file.path.clone(), reason };
        let schema = file.metadata.metadata().file_metadata().schema_descr();
        let mask = ProjectionMask::leaves(schema, leaves.iter().copied());
        let mut builder = ParquetRecordBatchReaderBuilder::new_with_metadata(self, file.metadata.clone())
            .with_row_groups(vec![group])
            .with_projection(mask)
            .with_batch_size(super::ROW_GROUP_ROWS);
        if let Some(selection) = selection {
            builder = builder.with_row_selection(selection);
        }
        let reader = builder.build().map_err(|e| invalid(e.to_string()))?;
        let context = |e: String| invalid(format!("row group {group}: {e}"));
        let batches =
            reader.collect::<std::result::Result<Vec<_>, _>>().map_err(|e| invalid(format!("decode failed: {e}")))?;
        // One batch per row group (the batch size is the row group size); concatenated otherwise,
        // so that shared timestamps resolve across the whole group.
        (0..leaves.len())
            .map(|i| {
                let parts: Vec<&dyn Array> = batches.iter().map(|b| b.column(i).as_ref()).collect();
                match parts.as_slice() {
                    [one] => Ok(arrow::array::make_array(one.to_data())),
                    [] => {
                        Ok(arrow::array::new_empty_array(&file.metadata.schema().field(leaves[i]).data_type().clone()))
                    }
                    _ => arrow::compute::concat(&parts).map_err(|e| context(e.to_string())),
                }
            })
            .collect()
    }

    fn find(&self, start: u64, len: u64) -> parquet::errors::Result<Bytes> {
        for (at, bytes) in &self.parts {
            let end = at + bytes.len() as u64;
            if start >= *at && start.saturating_add(len) <= end {
                let from = (start - at) as usize;
                return Ok(bytes.slice(from..from + len as usize));
            }
        }
        Err(parquet::errors::ParquetError::General(format!("bytes {start}+{len} were not fetched")))
    }
}

impl Length for SparseFile {
    fn len(&self) -> u64 {
        self.len
    }
}

impl ChunkReader for SparseFile {
    type T = bytes::buf::Reader<Bytes>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        use bytes::Buf;
        for (at, bytes) in &self.parts {
            let end = at + bytes.len() as u64;
            if start >= *at && start < end {
                return Ok(bytes.slice((start - at) as usize..).reader());
            }
        }
        Err(parquet::errors::ParquetError::General(format!("offset {start} was not fetched")))
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        self.find(start, length as u64)
    }
}
