//! The in-memory write buffer: append-only chunks of rows in arrival order.
//!
//! Each acknowledged write appends one immutable chunk, so a scan takes a cheap snapshot (a
//! list of `Arc`s) and never blocks writers. A flush freezes the chunk list, writes it to
//! data files and drops it once the manifest names those files.

use std::sync::Arc;

use roaring::RoaringBitmap;

use crate::datafile::RowFilter;
use crate::model::Rows;

/// Append-only list of row chunks.
#[derive(Debug, Default, Clone)]
pub struct WriteBuffer {
    chunks: Vec<Arc<Rows>>,
    rows: usize,
    series: RoaringBitmap,
    min_time: i64,
    max_time: i64,
}

impl WriteBuffer {
    /// Appends a chunk.
    pub fn push(&mut self, chunk: Rows) {
        if chunk.is_empty() {
            return;
        }
        let (lo, hi) = chunk.time.iter().fold((i64::MAX, i64::MIN), |(lo, hi), &t| (lo.min(t), hi.max(t)));
        if self.rows == 0 {
            (self.min_time, self.max_time) = (lo, hi);
        } else {
            self.min_time = self.min_time.min(lo);
            self.max_time = self.max_time.max(hi);
        }
        // Chunks hold runs of one series: one bitmap insert per run, not per row.
        for run in chunk.runs() {
            self.series.insert(chunk.series[run.start]);
        }
        self.rows += chunk.len();
        self.chunks.push(Arc::new(chunk));
    }

    /// Number of rows (duplicates included).
    pub fn len(&self) -> usize {
        self.rows
    }

    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// Smallest and largest local time, if any rows.
    pub fn time_range(&self) -> Option<(i64, i64)> {
        (self.rows > 0).then_some((self.min_time, self.max_time))
    }

    /// Whether the buffer may hold rows passing `filter`.
    pub fn may_match(&self, filter: &RowFilter<'_>) -> bool {
        if self.rows == 0 {
            return false;
        }
        if let Some((lo, hi)) = filter.time
            && (self.max_time < lo || self.min_time >= hi)
        {
            return false;
        }
        filter.series.is_none_or(|s| !s.is_disjoint(&self.series))
    }

    /// The chunks, in arrival order.
    pub fn chunks(&self) -> impl Iterator<Item = &Rows> {
        self.chunks.iter().map(|c| c.as_ref())
    }

    /// Rows passing `filter`, in arrival order.
    pub fn collect(&self, filter: &RowFilter<'_>) -> Rows {
        let mut out = Rows::default();
        if !self.may_match(filter) {
            return out;
        }
        if filter.time.is_none() && filter.series.is_none() {
            out = Rows::with_capacity(self.rows);
            for chunk in &self.chunks {
                out.extend_from(chunk);
            }
            return out;
        }
        for chunk in &self.chunks {
            for i in 0..chunk.len() {
                if filter.matches(chunk.series[i], chunk.time[i]) {
                    out.push(chunk.series[i], chunk.time[i], chunk.value[i]);
                }
            }
        }
        out
    }
}
