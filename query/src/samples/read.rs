//! The clock-corrected read of stored samples, shared by the `samples` table and the diagnosis:
//! the clock model of every series (its host's, from one snapshot of the store's clock models),
//! the local-time range that holds a corrected-time range, the corrected time of each sample,
//! and the engine's split scan read on several threads.
//!
//! Correction is `time = local_time − θ_host(local_time)` in integer arithmetic (see
//! `lockstep_engine::clock`); a host without a model keeps its raw time. Every correction is
//! monotonic, so a corrected-time range maps exactly to one local-time range per host.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use lockstep_engine::Store;
use lockstep_engine::clock::{ClockModel, ClockSet};
use lockstep_engine::datafile::{Chunk, Columns};
use lockstep_engine::model::SeriesKey;
use lockstep_engine::store::SplitScan;
use roaring::RoaringBitmap;

/// The clock model of every series of a store: its host's, from one clock-model snapshot.
#[derive(Debug)]
pub(crate) struct SeriesClocks {
    /// The clock snapshot.
    clocks: Arc<ClockSet>,
    /// Host of every series id (index into `hosts`; `u32::MAX` = no host).
    series_host: Vec<u32>,
    /// Host names.
    hosts: Vec<String>,
}

impl SeriesClocks {
    /// The models of `keys` (indexed by series id) from `clocks`.
    pub(crate) fn for_keys(keys: &[Option<Arc<SeriesKey>>], clocks: Arc<ClockSet>) -> Self {
        let mut hosts: Vec<String> = Vec::new();
        let mut index = std::collections::HashMap::<&str, u32>::new();
        let series_host = keys
            .iter()
            .map(|k| match k.as_ref().and_then(|k| k.host()) {
                Some(h) => *index.entry(h).or_insert_with(|| {
                    hosts.push(h.to_string());
                    (hosts.len() - 1) as u32
                }),
                None => u32::MAX,
            })
            .collect();
        SeriesClocks { clocks, series_host, hosts }
    }

    /// The models of every series of `store` from `clocks`.
    pub(crate) fn for_store(store: &Store, clocks: Arc<ClockSet>) -> Result<Self, lockstep_engine::Error> {
        store.with_catalog(|c| Self::for_keys(c.keys(), clocks))
    }

    /// The clock snapshot.
    pub(crate) fn clocks(&self) -> &ClockSet {
        &self.clocks
    }

    /// Number of series ids known.
    pub(crate) fn series_count(&self) -> usize {
        self.series_host.len()
    }

    /// The clock model of a series (`None`: identity, unknown uncertainty).
    pub(crate) fn model(&self, series: u32) -> Option<&ClockModel> {
        let host = *self.series_host.get(series as usize)?;
        self.clocks.model(self.hosts.get(host as usize)?)
    }

    /// The smallest local-time range `[lo, hi)` holding every sample of the selected series
    /// (all without a selection) whose corrected time lies in `[ref_lo, ref_hi]`; `None` if
    /// there is none.
    pub(crate) fn local_range(&self, series: Option<&RoaringBitmap>, ref_lo: i64, ref_hi: i64) -> Option<(i64, i64)> {
        let mut wanted = vec![false; self.hosts.len()];
        let mut hostless = false;
        let mut mark = |id: usize| match self.series_host.get(id) {
            Some(&h) if h != u32::MAX => wanted[h as usize] = true,
            _ => hostless = true,
        };
        match series {
            Some(set) => set.iter().for_each(|id| mark(id as usize)),
            None => (0..self.series_host.len()).for_each(&mut mark),
        }
        let mut range: Option<(i64, i64)> = None;
        let mut widen = |(lo, hi): (i64, i64)| {
            if lo <= hi {
                range = Some(range.map_or((lo, hi), |(a, b)| (a.min(lo), b.max(hi))));
            }
        };
        if hostless {
            widen((ref_lo, ref_hi));
        }
        for (host, _) in self.hosts.iter().zip(&wanted).filter(|(_, w)| **w) {
            widen(self.clocks.local_range_for_reference(host, ref_lo, ref_hi));
        }
        range.map(|(lo, hi)| (lo, hi.saturating_add(1)))
    }
}

/// Appends the corrected times of one series' local times to `out`: with its host's `model`
/// ([`ClockModel::extend_reference`]), the raw time without one.
pub(crate) fn correct_into(model: Option<&ClockModel>, local: &[i64], out: &mut Vec<i64>) {
    match model {
        Some(m) => m.extend_reference(local, out),
        None => out.extend_from_slice(local),
    }
}

/// A unit's index and its chunks.
type UnitChunks = (usize, Vec<Chunk>);

/// Reads every unit of `split` (decoding `columns`) on up to `threads` threads, the largest
/// units first, each unit by one thread; returns the chunks in unit order (see
/// [`SplitScan::units`]). The first error stops the read.
pub(crate) fn read_units(
    split: &SplitScan,
    columns: Columns,
    threads: usize,
) -> Result<Vec<Chunk>, lockstep_engine::Error> {
    let units = split.units();
    let mut order: Vec<usize> = (0..units.len()).collect();
    order.sort_by_key(|&u| std::cmp::Reverse(units[u].rows()));
    let next = AtomicUsize::new(0);
    let failed = std::sync::atomic::AtomicBool::new(false);
    let worker = || -> Result<Vec<UnitChunks>, lockstep_engine::Error> {
        let mut out = Vec::new();
        while !failed.load(Ordering::Relaxed) {
            let Some(&unit) = order.get(next.fetch_add(1, Ordering::Relaxed)) else { break };
            let mut chunks = Vec::new();
            let read = split.read(unit, columns, |chunk| {
                chunks.push(chunk);
                Ok(true)
            });
            if let Err(e) = read {
                failed.store(true, Ordering::Relaxed);
                return Err(e);
            }
            out.push((unit, chunks));
        }
        Ok(out)
    };
    let threads = threads.clamp(1, units.len().max(1));
    let results: Vec<Result<Vec<UnitChunks>, lockstep_engine::Error>> = if threads == 1 {
        vec![worker()]
    } else {
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..threads).map(|_| scope.spawn(worker)).collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(lockstep_engine::Error::Internal { reason: "a scan thread panicked".into() })
                    })
                })
                .collect()
        })
    };
    let mut read: Vec<UnitChunks> = Vec::with_capacity(units.len());
    for r in results {
        read.extend(r?);
    }
    read.sort_unstable_by_key(|(unit, _)| *unit);
    Ok(read.into_iter().flat_map(|(_, chunks)| chunks).collect())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use lockstep_engine::clock::{ClockSegment, SegmentKind};

    use super::*;

    fn segment(local_start: i64, local_end: i64, offset_start_ns: i64, offset_end_ns: i64) -> ClockSegment {
        ClockSegment {
            kind: SegmentKind::Fitted,
            local_start,
            local_end,
            offset_start_ns,
            offset_end_ns,
            uncertainty_start_ns: 10,
            uncertainty_end_ns: 10,
            growth_ppb: 0,
            samples_used: 2,
        }
    }

    #[test]
    fn walking_the_segments_equals_the_model_in_any_order() {
        let model = ClockModel {
            host: "a".into(),
            segments: vec![
                segment(1_000, 2_000, 50, 70),
                segment(2_000, 3_000, 70, -30),
                segment(3_000, 5_000, 400, 401),
            ],
            steps: 0,
            outliers: 0,
        };
        // Before, inside, on the boundaries of and after the segments; ascending, then jumping
        // back (a second run), then extreme values.
        let mut local: Vec<i64> = (0..60).map(|i| i * 97).collect();
        local.extend([2_000, 1_500, 999, 3_000, i64::MAX, i64::MIN, 4_999]);
        let mut out = Vec::new();
        correct_into(Some(&model), &local, &mut out);
        let expected: Vec<i64> = local.iter().map(|&t| model.to_reference(t)).collect();
        assert_eq!(out, expected);
        assert_ne!(out, local, "the offsets apply");
        out.clear();
        correct_into(None, &local, &mut out);
        assert_eq!(out, local);
    }
}
