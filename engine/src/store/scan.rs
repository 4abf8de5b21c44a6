//! Scans: a time range and a series set in, Arrow record batches out, one time partition at
//! a time (bounded memory), each sorted by (series, time) with duplicates resolved.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use arrow::array::{ArrayRef, Float64Array, Int64Array, RecordBatch, UInt32Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use roaring::RoaringBitmap;

use super::{LiveFile, Store, lock_poisoned, split_by_partition};
use crate::datafile::{self, RowFilter};
use crate::error::Result;
use crate::merge::sort_dedup;
use crate::model::Rows;
use crate::storage::Storage;

/// What to read.
#[derive(Debug, Clone, Default)]
pub struct ScanRequest {
    /// Local-time range `[lo, hi)`; `None` = all time.
    pub time: Option<(i64, i64)>,
    /// Series to read; `None` = all series.
    pub series: Option<RoaringBitmap>,
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
        let (files, frozen, active, partition_ns) = {
            let s = self.state.read().map_err(lock_poisoned)?;
            (s.files.clone(), s.frozen.clone(), s.active.clone(), s.manifest.partition_ns)
        };
        let filter = RowFilter { time: request.time, series: request.series.as_ref() };
        let mut by_partition: BTreeMap<i64, Vec<Arc<LiveFile>>> = BTreeMap::new();
        for f in files.iter() {
            let e = &f.entry;
            if let Some((lo, hi)) = request.time
                && (e.stats.max_time < lo || e.stats.min_time >= hi)
            {
                continue;
            }
            if let Some(set) = &request.series
                && set.range_cardinality(e.stats.min_series..=e.stats.max_series) == 0
            {
                continue;
            }
            by_partition.entry(e.partition).or_default().push(f.clone());
        }
        // Buffered rows, oldest buffer first, so that later writes win in sort_dedup.
        let mut rows = Rows::default();
        for b in frozen.iter().map(|b| b.as_ref()).chain(std::iter::once(&active)) {
            rows.extend_from(&b.collect(&filter));
        }
        let buffered = split_by_partition(&rows, partition_ns);
        let partitions: BTreeSet<i64> = by_partition.keys().chain(buffered.keys()).copied().collect();
        Ok(Scan {
            storage: self.storage.clone(),
            request,
            files: by_partition,
            buffered,
            partitions: partitions.into_iter().collect::<Vec<_>>().into_iter(),
        })
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
        let filter = RowFilter { time: self.request.time, series: self.request.series.as_ref() };
        let files = self.files.remove(&partition).unwrap_or_default();
        let buffered = self.buffered.remove(&partition);
        match (files.as_slice(), buffered) {
            ([], Some(b)) => Ok(sort_dedup(&b)),
            ([only], None) => datafile::read_file(self.storage.as_ref(), &only.path, &filter),
            (files, buffered) => {
                let mut rows = Rows::default();
                for f in files {
                    rows.extend_from(&datafile::read_file(self.storage.as_ref(), &f.path, &filter)?);
                }
                if let Some(b) = buffered {
                    rows.extend_from(&b);
                }
                Ok(sort_dedup(&rows))
            }
        }
    }
}

impl Iterator for Scan {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_rows().map(|r| r.and_then(rows_to_batch))
    }
}
