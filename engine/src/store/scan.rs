//! Scans: a time range and a series set in, rows out, duplicates resolved last-write-wins.
//!
//! Two shapes:
//! - [`Scan`]: one time partition at a time, each sorted by (series, time) (memory: a
//!   partition); for callers that need whole series in order.
//! - [`SplitScan`]: units smaller than a partition (a row group, a slice of the write buffer,
//!   or a group of those that overlap and must be merged), each readable on its own by any
//!   thread, decoding only the columns asked for; every byte of a data file it needs is read
//!   once ([`crate::storage::Storage::read_range`] per column chunk). For parallel queries.

use std::collections::{BTreeMap, BTreeSet};

use std::sync::Arc;

use arrow::array::{ArrayRef, Float64Array, Int64Array, RecordBatch, UInt32Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use roaring::RoaringBitmap;

use super::{LiveFile, Store, lock_poisoned, split_by_partition};
use crate::datafile::{self, Chunk, Columns, FileFooter, RowFilter, ValueRange};
use crate::error::Result;
use crate::merge::{merge_streams, sort_dedup, sort_dedup_owned};
use crate::model::Rows;
use crate::storage::Storage;

mod portable;
pub use portable::{PortablePart, PortableScan};

/// What to read.
#[derive(Debug, Clone, Default)]
pub struct ScanRequest {
    /// Local-time range `[lo, hi)`; `None` = all time.
    pub time: Option<(i64, i64)>,
    /// Series to read; `None` = all series.
    pub series: Option<RoaringBitmap>,
    /// Values wanted (`None` = all): a pruning hint for [`SplitScan`], which skips the row
    /// groups and series runs whose recorded values all lie outside (rows outside may still be
    /// returned: the caller filters). [`Scan`] ignores it.
    pub value: Option<ValueRange>,
}

/// The schema of scan batches: `series_id` UInt32, `time` Int64 (local ns), `value` Float64.
pub fn scan_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("series_id", DataType::UInt32, false),
        Field::new("time", DataType::Int64, false),
        Field::new("value", DataType::Float64, false),
    ]))
}

/// Wraps rows into a record batch of [`scan_schema`] without copying.
pub fn rows_to_batch(rows: Rows) -> Result<RecordBatch> {
    Ok(RecordBatch::try_new(
        scan_schema(),
        vec![
            Arc::new(UInt32Array::from(rows.series)) as ArrayRef,
            Arc::new(Int64Array::from(rows.time)),
            Arc::new(Float64Array::from(rows.value)),
        ],
    )?)
}

/// An iterator over the partitions of a scan; yields one batch per non-empty partition.
/// It holds a snapshot: concurrent writes, flushes and compactions do not affect it.
pub struct Scan {
    storage: Arc<dyn Storage>,
    request: ScanRequest,
    files: BTreeMap<i64, Vec<Arc<LiveFile>>>,
    buffered: BTreeMap<i64, Rows>,
    partitions: std::vec::IntoIter<i64>,
}

impl std::fmt::Debug for Scan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scan").field("request", &self.request).finish_non_exhaustive()
    }
}

impl Store {
    /// Starts a scan over a consistent snapshot of files and buffers.
    pub fn scan(&self, request: ScanRequest) -> Result<Scan> {
        let (by_partition, buffered) = self.snapshot(&request)?;
        let partitions: BTreeSet<i64> = by_partition.keys().chain(buffered.keys()).copied().collect();
        Ok(Scan {
            storage: self.storage.clone(),
            request,
            files: by_partition,
            buffered,
            partitions: partitions.into_iter().collect::<Vec<_>>().into_iter(),
        })
    }

    /// The data files (by partition, oldest first) and buffered rows (by partition, unsorted,
    /// oldest first) that may hold rows matching `request`, from one consistent snapshot.
    #[allow(clippy::type_complexity)]
    pub(super) fn snapshot(
        &self,
        request: &ScanRequest,
    ) -> Result<(BTreeMap<i64, Vec<Arc<LiveFile>>>, BTreeMap<i64, Rows>)> {
        let (files, frozen, active, partition_ns) = {
            let s = self.state.read().map_err(lock_poisoned)?;
            (s.files.clone(), s.frozen.clone(), s.active.clone(), s.manifest.partition_ns)
        };
        let filter = RowFilter { time: request.time, series: request.series.as_ref(), value: None };
        let mut by_partition: BTreeMap<i64, Vec<Arc<LiveFile>>> = BTreeMap::new();
        for f in files.iter() {
            let e = &f.entry;
            if let Some((lo, hi)) = request.time
                && (e.stats.max_time < lo || e.stats.min_time >= hi)
            {
                continue;
            }
            if let Some(set) = &request.series
                && set.range_cardinality(
                    f.series_offset.saturating_add(e.stats.min_series)
                        ..=f.series_offset.saturating_add(e.stats.max_series),
                ) == 0
            {
                continue;
            }
            by_partition.entry(e.partition).or_default().push(f.clone());
        }
        for files in by_partition.values_mut() {
            files.sort_by_key(|f| f.entry.id);
        }
        // Buffered rows, oldest buffer first, so that later writes win in sort_dedup.
        let mut rows = Rows::default();
        for b in frozen.iter().map(|b| b.as_ref()).chain(std::iter::once(&active)) {
            rows.extend_from(&b.collect(&filter));
        }
        Ok((by_partition, split_by_partition(&rows, partition_ns)))
    }

    /// Reads everything matching `request` into one sorted batch (convenience for tests and
    /// small queries).
    pub fn scan_all(&self, request: ScanRequest) -> Result<Rows> {
        let mut out = Rows::default();
        let mut scan = self.scan(request)?;
        while let Some(rows) = scan.next_rows() {
            out.extend_from(&rows?);
        }
        Ok(out)
    }
}

impl Scan {
    /// Data files this scan still has to read (after pruning by the manifest's time and series
    /// statistics); for EXPLAIN-style diagnostics and pruning tests.
    pub fn file_count(&self) -> usize {
        self.files.values().map(Vec::len).sum()
    }

    /// The next partition's rows, sorted by (series, time), deduplicated.
    pub fn next_rows(&mut self) -> Option<Result<Rows>> {
        loop {
            let partition = self.partitions.next()?;
            let result = self.read_partition(partition);
            match result {
                Ok(rows) if rows.is_empty() => continue,
                other => return Some(other),
            }
        }
    }

    fn read_partition(&mut self, partition: i64) -> Result<Rows> {
        let filter = RowFilter { time: self.request.time, series: self.request.series.as_ref(), value: None };
        let files = self.files.remove(&partition).unwrap_or_default();
        let buffered = self.buffered.remove(&partition);
        match (files.as_slice(), buffered) {
            ([], Some(b)) => Ok(sort_dedup(&b)),
            ([only], None) => read_file(self.storage.as_ref(), only, &filter),
            (files, buffered) => {
                let mut rows = Rows::default();
                for f in files {
                    rows.extend_from(&read_file(self.storage.as_ref(), f, &filter)?);
                }
                if let Some(b) = buffered {
                    rows.extend_from(&b);
                }
                Ok(sort_dedup(&rows))
            }
        }
    }
}

/// `series` (ids of the store) as the ids stored in a file whose ids are shifted by `offset`
/// (a node of a dataset union, see [`LiveFile::series_offset`]); `None` when `offset` is 0 or
/// there is no series filter (the ids are the store's own, or every series is wanted).
fn shifted_series(series: Option<&RoaringBitmap>, offset: u32) -> Option<RoaringBitmap> {
    if offset == 0 {
        return None;
    }
    series.map(|s| s.range(offset..).map(|id| id - offset).collect())
}

/// Shifts a file's series ids to the store's ids (see [`LiveFile::series_offset`]).
fn shift_ids(series: &mut [u32], offset: u32) {
    if offset != 0 {
        series.iter_mut().for_each(|id| *id = id.saturating_add(offset));
    }
}

/// Reads one whole file through `filter` (in the store's ids), its rows in the store's ids.
fn read_file(storage: &dyn Storage, file: &LiveFile, filter: &RowFilter<'_>) -> Result<Rows> {
    let shifted = shifted_series(filter.series, file.series_offset);
    let local = RowFilter { time: filter.time, series: shifted.as_ref().or(filter.series), value: None };
    let mut rows = crate::storage::refetching(storage, &file.path, || {
        datafile::read_file(storage, &file.path, &local, file.entry.stats.footer_crc32)
    })?;
    shift_ids(&mut rows.series, file.series_offset);
    Ok(rows)
}

impl Iterator for Scan {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_rows().map(|r| r.and_then(rows_to_batch))
    }
}

/// Rows per buffered part of a split scan: the write buffer is cut into parts this size so that
/// a late write overlaps (and is merged with) only the row groups of its own series.
const BUFFER_PART_ROWS: usize = 64 * 1024;

/// One piece of a [`ScanUnit`].
#[derive(Debug, Clone)]
enum Part {
    /// Row group `group` of `SplitScan::files[file]`.
    Group { file: usize, group: usize },
    /// Rows `range` of `SplitScan::buffered[buffer]` (sorted, deduplicated).
    Buffered { buffer: usize, range: std::ops::Range<usize> },
}

/// A unit of work of a [`SplitScan`]: a row group of a data file or a slice of the write buffer,
/// or, where those overlap in series and time (a (series, time) pair may be in both), every
/// overlapping part together, merged last-write-wins when read.
#[derive(Debug, Clone)]
pub struct ScanUnit {
    /// Parts with their source rank (file order by id, the buffer last: later sources win).
    parts: Vec<(usize, Part)>,
    rows: u64,
    /// Smallest and largest series id the parts may hold (from statistics; store ids).
    series: (u32, u32),
}

impl ScanUnit {
    /// Rows stored in the unit's parts (before row filters and deduplication): its cost.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Smallest and largest series id (of the store) the unit may hold.
    pub fn series(&self) -> (u32, u32) {
        self.series
    }

    /// Whether reading the unit merges several sources.
    pub fn is_merge(&self) -> bool {
        self.parts.first().is_some_and(|(first, _)| self.parts.iter().any(|(rank, _)| rank != first))
    }
}

/// A scan split into independent units, each read by one reader: every row group (and every
/// buffered row) belongs to exactly one unit, so a query reading each unit once reads each byte
/// once, whichever thread reads it. Holds a snapshot like [`Scan`]. Reading a unit holds one row
/// group (a merge: one row group per overlapping source) in memory, whatever the partition size.
pub struct SplitScan {
    storage: Arc<dyn Storage>,
    request: ScanRequest,
    files: Vec<(Arc<LiveFile>, Arc<FileFooter>)>,
    /// The request's series in the ids of files with a series offset (a dataset union), by offset.
    shifted: BTreeMap<u32, RoaringBitmap>,
    buffered: Vec<Rows>,
    units: Vec<ScanUnit>,
}

impl std::fmt::Debug for SplitScan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SplitScan")
            .field("request", &self.request)
            .field("files", &self.files.len())
            .field("units", &self.units.len())
            .finish_non_exhaustive()
    }
}

/// Why a merge stopped: an error, or the consumer wanting no more rows.
enum Halt {
    Stop,
    Failed(crate::error::Error),
}

impl From<crate::error::Error> for Halt {
    fn from(e: crate::error::Error) -> Self {
        Halt::Failed(e)
    }
}

impl Store {
    /// Plans a scan split into units smaller than a partition (see [`SplitScan`]): reads the
    /// footer of every data file the request may touch, prunes row groups by their statistics
    /// and groups the parts that overlap.
    pub fn split_scan(&self, request: ScanRequest) -> Result<SplitScan> {
        let (by_partition, mut buffered_by_partition) = self.snapshot(&request)?;
        let filter = RowFilter { time: request.time, series: request.series.as_ref(), value: None };
        let partitions: BTreeSet<i64> = by_partition.keys().chain(buffered_by_partition.keys()).copied().collect();
        let mut scan = SplitScan {
            storage: self.storage.clone(),
            request: request.clone(),
            files: Vec::new(),
            shifted: BTreeMap::new(),
            buffered: Vec::new(),
            units: Vec::new(),
        };
        for partition in partitions {
            // (rank, part, series range, time range, rows)
            let mut items: Vec<Item> = Vec::new();
            let files = by_partition.get(&partition).map(Vec::as_slice).unwrap_or_default();
            for (rank, live) in files.iter().enumerate() {
                let footer = self.footers.get(self.storage.as_ref(), live)?;
                let file = scan.files.len();
                let offset = live.series_offset;
                if let Some(ids) = shifted_series(request.series.as_ref(), offset) {
                    scan.shifted.entry(offset).or_insert(ids);
                }
                let local =
                    RowFilter { time: filter.time, series: scan.shifted.get(&offset).or(filter.series), value: None };
                for (group, stats) in footer.groups().into_iter().enumerate() {
                    if stats.may_match(&local) {
                        let (lo, hi) = stats.series.unwrap_or((0, u32::MAX - offset));
                        items.push(Item {
                            rank,
                            part: Part::Group { file, group },
                            series: (lo.saturating_add(offset), hi.saturating_add(offset)),
                            time: stats.time.unwrap_or((i64::MIN, i64::MAX)),
                            rows: stats.rows,
                        });
                    }
                }
                scan.files.push((live.clone(), footer));
            }
            if let Some(rows) = buffered_by_partition.remove(&partition) {
                let rows = sort_dedup_owned(rows);
                let buffer = scan.buffered.len();
                let mut start = 0;
                while start < rows.len() {
                    let end = (start + BUFFER_PART_ROWS).min(rows.len());
                    let (lo, hi) =
                        rows.time[start..end].iter().fold((i64::MAX, i64::MIN), |(lo, hi), &t| (lo.min(t), hi.max(t)));
                    items.push(Item {
                        rank: files.len(),
                        part: Part::Buffered { buffer, range: start..end },
                        series: (rows.series[start], rows.series[end - 1]),
                        time: (lo, hi),
                        rows: (end - start) as u64,
                    });
                    start = end;
                }
                scan.buffered.push(rows);
            }
            let units = group_overlapping(items);
            for unit in units {
                if scan.may_hold_values(&unit)? {
                    scan.units.push(unit);
                }
            }
        }
        Ok(scan)
    }
}

/// A part with what decides whether it overlaps another.
struct Item {
    rank: usize,
    part: Part,
    series: (u32, u32),
    time: (i64, i64),
    rows: u64,
}

/// Groups parts of different sources whose series and time ranges both overlap (transitively)
/// into one unit; every other part is a unit of its own. Parts of one source never hold the
/// same (series, time) twice, so they need no merge with each other.
fn group_overlapping(mut items: Vec<Item>) -> Vec<ScanUnit> {
    fn root(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    items.sort_by_key(|it| (it.series.0, it.rank));
    let mut parent: Vec<usize> = (0..items.len()).collect();
    let mut active: Vec<usize> = Vec::new();
    for i in 0..items.len() {
        let it = &items[i];
        active.retain(|&j| items[j].series.1 >= it.series.0);
        for &j in &active {
            let other = &items[j];
            if other.rank != it.rank && other.time.1 >= it.time.0 && it.time.1 >= other.time.0 {
                let (a, b) = (root(&mut parent, i), root(&mut parent, j));
                parent[a.max(b)] = a.min(b);
            }
        }
        active.push(i);
    }
    let mut units: BTreeMap<usize, ScanUnit> = BTreeMap::new();
    for (i, item) in items.into_iter().enumerate() {
        let r = root(&mut parent, i);
        let unit = units.entry(r).or_insert_with(|| ScanUnit { parts: Vec::new(), rows: 0, series: item.series });
        unit.rows += item.rows;
        unit.series = (unit.series.0.min(item.series.0), unit.series.1.max(item.series.1));
        unit.parts.push((item.rank, item.part));
    }
    // Parts in source order, each source's parts in file (series, time) order.
    units
        .into_values()
        .map(|mut u| {
            u.parts.sort_by_key(|(rank, part)| match part {
                Part::Group { group, .. } => (*rank, *group),
                Part::Buffered { range, .. } => (*rank, range.start),
            });
            u
        })
        .collect()
}

impl SplitScan {
    /// Whether `unit` may hold a value the request wants: `false` only for a unit of one source
    /// whose row groups' recorded value ranges all lie outside. A merged unit is always read:
    /// a newer value outside the range may override an older one inside.
    fn may_hold_values(&self, unit: &ScanUnit) -> Result<bool> {
        let Some(range) = &self.request.value else { return Ok(true) };
        if unit.is_merge() {
            return Ok(true);
        }
        for (_, part) in &unit.parts {
            match part {
                Part::Group { file, group } => match self.files.get(*file) {
                    Some((_, footer)) if !footer.group_may_hold(*group, range)? => {}
                    _ => return Ok(true),
                },
                Part::Buffered { .. } => return Ok(true),
            }
        }
        Ok(false)
    }

    /// The units, in (partition, series) order.
    pub fn units(&self) -> &[ScanUnit] {
        &self.units
    }

    /// Data files the scan reads (after pruning by the manifest's statistics).
    pub fn file_count(&self) -> usize {
        self.files.len()
    }

    /// Reads unit `unit`, decoding `columns` (see [`Columns`]), and hands its rows to `emit` in
    /// chunks (one per row group; a merge emits sorted, deduplicated chunks as it goes). Stops
    /// early, without error, when `emit` returns `Ok(false)`. A merged unit decodes every
    /// column (deduplication needs series and time, last-write-wins the values).
    pub fn read(&self, unit: usize, columns: Columns, emit: impl FnMut(Chunk) -> Result<bool>) -> Result<()> {
        self.read_slice(unit, columns, None, emit)
    }

    /// [`Self::read`], keeping only the rows of `slice`'s series (see [`Self::slice`]) when
    /// given. The rows of the unit's other series are decoded only where a row group holds
    /// series of both (its series ids, and its times when a time range filters): a slice reader
    /// shares those key columns with the reader of the neighbouring slice.
    pub fn read_slice(
        &self,
        unit: usize,
        columns: Columns,
        slice: Option<&SeriesSlice>,
        mut emit: impl FnMut(Chunk) -> Result<bool>,
    ) -> Result<()> {
        let unit = self.units.get(unit).ok_or_else(|| crate::error::Error::Internal {
            reason: format!("scan unit {unit} of {}", self.units.len()),
        })?;
        if !unit.is_merge() {
            for (_, part) in &unit.parts {
                if !emit(self.read_part(part, columns, slice, self.request.value)?)? {
                    return Ok(());
                }
            }
            return Ok(());
        }
        let mut streams: Vec<Vec<&Part>> = Vec::new();
        let mut last_rank = None;
        for (rank, part) in &unit.parts {
            if last_rank != Some(*rank) {
                streams.push(Vec::new());
                last_rank = Some(*rank);
            }
            if let Some(s) = streams.last_mut() {
                s.push(part);
            }
        }
        let streams = streams
            .into_iter()
            .map(|parts| {
                parts.into_iter().map(|p| {
                    let c = self.read_part(p, Columns::ALL, slice, None)?;
                    Ok::<Rows, Halt>(Rows { series: c.series, time: c.time, value: c.value })
                })
            })
            .collect();
        let merged = merge_streams(streams, |rows| if emit(Chunk::from(rows))? { Ok(()) } else { Err(Halt::Stop) });
        match merged {
            Ok(()) | Err(Halt::Stop) => Ok(()),
            Err(Halt::Failed(e)) => Err(e),
        }
    }

    /// Reads one part; `value` prunes its series runs by value (never for a part of a merge).
    fn read_part(
        &self,
        part: &Part,
        columns: Columns,
        slice: Option<&SeriesSlice>,
        value: Option<ValueRange>,
    ) -> Result<Chunk> {
        let series = slice.map_or(self.request.series.as_ref(), |s| Some(&s.series));
        match part {
            Part::Group { file, group } => {
                let (live, footer) = self.files.get(*file).ok_or_else(|| crate::error::Error::Internal {
                    reason: format!("scan file {file} of {}", self.files.len()),
                })?;
                let offset = live.series_offset;
                let shifted = match slice {
                    Some(s) => s.shifted.get(&offset),
                    None => self.shifted.get(&offset),
                };
                let local = RowFilter { time: self.request.time, series: shifted.or(series), value };
                let mut chunk = footer.read_group(self.storage.as_ref(), *group, columns, &local)?;
                shift_ids(&mut chunk.series, offset);
                Ok(chunk)
            }
            Part::Buffered { buffer, range } => {
                let rows = self.buffered.get(*buffer).filter(|r| range.end <= r.len()).ok_or_else(|| {
                    crate::error::Error::Internal { reason: format!("scan buffer part {buffer} {range:?}") }
                })?;
                let mut out = Rows::default();
                out.extend_range(rows, range.start, range.end);
                let mut chunk = Chunk::from(out);
                // The buffer was filtered by the request when the scan was planned; a slice
                // keeps the rows of its own series.
                if let Some(s) = slice {
                    datafile::retain(&mut chunk, &RowFilter { time: None, series: Some(&s.series), value: None });
                }
                Ok(chunk)
            }
        }
    }

    /// The scan restricted to the series ids in `range` (ids of the store), for
    /// [`Self::read_slice`]: a reader that must see whole series reads every unit that may
    /// hold series of its slice, and only their rows.
    pub fn slice(&self, range: std::ops::Range<u32>) -> SeriesSlice {
        let mut series = RoaringBitmap::new();
        series.insert_range(range);
        if let Some(wanted) = &self.request.series {
            series &= wanted;
        }
        let offsets: BTreeSet<u32> = self.files.iter().map(|(live, _)| live.series_offset).collect();
        let shifted = offsets
            .into_iter()
            .filter_map(|offset| shifted_series(Some(&series), offset).map(|ids| (offset, ids)))
            .collect();
        SeriesSlice { series, shifted }
    }
}

/// The series a reader of a [`SplitScan`] keeps (see [`SplitScan::slice`]): the request's
/// series within a range of ids, and the same in the ids of each file with a series offset.
#[derive(Debug, Clone)]
pub struct SeriesSlice {
    series: RoaringBitmap,
    shifted: BTreeMap<u32, RoaringBitmap>,
}

impl SeriesSlice {
    /// Whether the slice holds a series id in `lo..=hi`.
    pub fn intersects(&self, (lo, hi): (u32, u32)) -> bool {
        lo <= hi && self.series.range_cardinality(lo..=hi) > 0
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod split_tests {
    use super::*;
    use crate::model::{SeriesKey, WriteBatch};
    use crate::store::StoreConfig;

    const T0: i64 = 1_767_225_600_000_000_000;
    const SEC: i64 = 1_000_000_000;

    fn write(store: &Store, series: std::ops::Range<u32>, times: std::ops::Range<i64>, value: f64) {
        let mut b = WriteBatch::default();
        for s in series {
            for k in times.clone() {
                b.push(SeriesKey::new("m", [("host", format!("h{s}"))]), T0 + k * SEC, value + k as f64);
            }
        }
        store.write(&b).unwrap();
    }

    /// Every unit read with `columns`, rows sorted by (series, time).
    fn read_all(scan: &SplitScan, columns: Columns) -> (usize, Rows) {
        let mut n = 0;
        let mut rows: Vec<(u32, i64, u64)> = Vec::new();
        for u in 0..scan.units().len() {
            scan.read(u, columns, |c| {
                n += c.len;
                if columns == Columns::ALL {
                    rows.extend((0..c.len).map(|i| (c.series[i], c.time[i], c.value[i].to_bits())));
                }
                Ok(true)
            })
            .unwrap();
        }
        rows.sort_unstable();
        let mut out = Rows::default();
        for (s, t, v) in rows {
            out.push(s, t, f64::from_bits(v));
        }
        (n, out)
    }

    /// A file of two row groups, a later file rewriting three series of it (duplicates with new
    /// values), and buffered rewrites: the split scan returns what the partition scan returns,
    /// merging only the parts that overlap.
    #[test]
    fn split_scan_matches_partition_scan_with_duplicates() {
        let dir = tempfile::tempdir().unwrap();
        let config = StoreConfig { max_future_ns: None, flush_rows: usize::MAX, ..Default::default() };
        let store = Store::open(dir.path(), config).unwrap();
        write(&store, 0..80, 0..3_500, 0.0); // 280 k rows: two row groups
        write(&store, 0..80, 3_600..3_700, 0.0); // the next partition
        store.flush().unwrap();
        write(&store, 10..13, 100..200, 0.5);
        store.flush().unwrap();
        write(&store, 79..80, 3_490..3_510, 0.25); // buffered; overlaps the second row group
        let requests = [
            ScanRequest::default(),
            ScanRequest { time: Some((T0 + 150 * SEC, T0 + 3_495 * SEC)), series: None, value: None },
            ScanRequest { time: None, series: Some([0u32, 11, 79].into_iter().collect()), value: None },
        ];
        for request in requests {
            let want = sort_dedup_owned(store.scan_all(request.clone()).unwrap());
            let split = store.split_scan(request.clone()).unwrap();
            assert!(split.units().iter().any(ScanUnit::is_merge));
            let (n, got) = read_all(&split, Columns::ALL);
            assert_eq!((n, got.len()), (want.len(), want.len()), "{request:?}");
            let diff = (0..want.len()).find(|&i| {
                (got.series[i], got.time[i], got.value[i].to_bits())
                    != (want.series[i], want.time[i], want.value[i].to_bits())
            });
            assert_eq!(diff, None, "{request:?}");
            assert_eq!(read_all(&split, Columns::NONE).0, want.len());
            assert_eq!(read_all(&split, Columns { series: true, time: false, value: false }).0, want.len());
        }
        let all = store.split_scan(ScanRequest::default()).unwrap();
        assert!(all.units().len() >= 3, "{:?}", all.units());
        assert_eq!(all.units().iter().filter(|u| u.is_merge()).count(), 2);
    }

    /// Stopping early is not an error, in a plain unit and in a merge.
    #[test]
    fn split_scan_stops_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        let config = StoreConfig { max_future_ns: None, flush_rows: usize::MAX, ..Default::default() };
        let store = Store::open(dir.path(), config).unwrap();
        write(&store, 0..3, 0..10, 0.0);
        store.flush().unwrap();
        write(&store, 0..3, 5..15, 1.0);
        let split = store.split_scan(ScanRequest::default()).unwrap();
        assert_eq!(split.units().len(), 1);
        let mut calls = 0;
        split
            .read(0, Columns::ALL, |_| {
                calls += 1;
                Ok(false)
            })
            .unwrap();
        assert_eq!(calls, 1);
        assert!(split.read(1, Columns::ALL, |_| Ok(true)).is_err());
    }

    /// Units made portable (files by relative path, buffered rows copied) and rebuilt read the
    /// same rows, in any subset; a portable scan naming a file the snapshot does not have, or a
    /// path outside the store, is `ScanFileGone`, not a read of that path.
    #[test]
    fn portable_units_read_the_same_rows_and_unknown_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let config = StoreConfig { max_future_ns: None, flush_rows: usize::MAX, ..Default::default() };
        let store = Store::open(dir.path(), config).unwrap();
        write(&store, 0..80, 0..3_500, 0.0);
        store.flush().unwrap();
        write(&store, 10..13, 100..200, 0.5);
        store.flush().unwrap();
        write(&store, 79..80, 3_490..3_510, 0.25); // buffered, merged with a row group
        let request = ScanRequest { time: None, series: Some([0u32, 11, 79].into_iter().collect()), value: None };
        let split = store.split_scan(request).unwrap();
        let (n, want) = read_all(&split, Columns::ALL);
        let all: Vec<usize> = (0..split.units().len()).collect();
        let (odd, even): (Vec<usize>, Vec<usize>) = all.iter().partition(|&&u| u % 2 == 1);
        let mut rows = Vec::new();
        for part in [odd, even] {
            let portable = split.portable(&part, store.dir()).unwrap();
            assert!(portable.files.iter().all(|f| f.is_relative() && f.starts_with("data")), "{:?}", portable.files);
            let rebuilt = store.split_scan_portable(&portable).unwrap();
            assert_eq!(rebuilt.units().len(), part.len());
            let (_, got) = read_all(&rebuilt, Columns::ALL);
            rows.extend((0..got.len()).map(|i| (got.series[i], got.time[i], got.value[i].to_bits())));
        }
        rows.sort_unstable();
        assert_eq!(rows.len(), n);
        let want: Vec<_> = (0..want.len()).map(|i| (want.series[i], want.time[i], want.value[i].to_bits())).collect();
        assert_eq!(rows, want);

        let mut bogus = split.portable(&all, store.dir()).unwrap();
        for path in ["data/p0/999999.parquet", "data/../manifest.json", "/etc/passwd"] {
            bogus.files[0] = path.into();
            let err = store.split_scan_portable(&bogus).err().unwrap();
            assert!(matches!(err, crate::error::Error::ScanFileGone { .. }), "{path}: {err}");
        }
    }
}
