//! Split scans across processes: [`PortableScan`], the units of a [`SplitScan`] in a form a
//! distributed query's worker turns back into a scan of the same rows.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use roaring::RoaringBitmap;

use super::{Part, ScanRequest, ScanUnit, SplitScan, shifted_series};
use crate::datafile::{Columns, ValueRange};
use crate::error::Result;
use crate::model::Rows;
use crate::store::{LiveFile, Store, lock_poisoned};

/// Some units of a [`SplitScan`] in a form another process can read (a distributed query's
/// worker, which opens the same store from its URL): the request, the data files the units
/// touch (paths relative to the store directory), the buffered rows they hold (copied: a
/// worker has no access to the planning process's write buffer), and each unit's parts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PortableScan {
    /// Local-time range `[lo, hi)`; `None` = all time.
    pub time: Option<(i64, i64)>,
    /// Series to read; `None` = all series.
    pub series: Option<RoaringBitmap>,
    /// Values wanted (`None` = all): prunes series runs as in [`ScanRequest::value`].
    pub value: Option<ValueRange>,
    /// Data files, relative to the store directory (`data/p<partition>/<id>.parquet`).
    pub files: Vec<PathBuf>,
    /// Buffered rows, each sorted by (series, time) and deduplicated.
    pub buffered: Vec<Rows>,
    /// Units: (source rank, part) in reading order.
    pub units: Vec<Vec<(u32, PortablePart)>>,
}

/// One part of a [`PortableScan`] unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortablePart {
    /// Row group `group` of `PortableScan::files[file]`.
    Group {
        /// Index into `files`.
        file: u32,
        /// Row group of that file.
        group: u32,
    },
    /// All rows of `PortableScan::buffered[buffer]`.
    Buffered {
        /// Index into `buffered`.
        buffer: u32,
    },
}

impl SplitScan {
    /// Units `units` (indices into [`Self::units`]) as a [`PortableScan`], with file paths
    /// relative to `root` (the store directory); the portable scan's units are numbered in
    /// the order given.
    pub fn portable(&self, units: &[usize], root: &Path) -> Result<PortableScan> {
        let mut out = PortableScan {
            time: self.request.time,
            series: self.request.series.clone(),
            value: self.request.value,
            ..Default::default()
        };
        let mut file_index: BTreeMap<usize, u32> = BTreeMap::new();
        for &u in units {
            let unit = self.units.get(u).ok_or_else(|| crate::error::Error::Internal {
                reason: format!("scan unit {u} of {}", self.units.len()),
            })?;
            let mut parts = Vec::with_capacity(unit.parts.len());
            for (rank, part) in &unit.parts {
                let rank = u32::try_from(*rank).unwrap_or(u32::MAX);
                let part = match part {
                    Part::Group { file, group } => {
                        let index = match file_index.get(file) {
                            Some(&i) => i,
                            None => {
                                let (live, _) = self.files.get(*file).ok_or_else(|| crate::error::Error::Internal {
                                    reason: format!("scan file {file} of {}", self.files.len()),
                                })?;
                                let path = &live.path;
                                let relative = path.strip_prefix(root).map_err(|_| crate::error::Error::Internal {
                                    reason: format!("data file {} is not under {}", path.display(), root.display()),
                                })?;
                                out.files.push(relative.to_path_buf());
                                let i = (out.files.len() - 1) as u32;
                                file_index.insert(*file, i);
                                i
                            }
                        };
                        PortablePart::Group { file: index, group: *group as u32 }
                    }
                    Part::Buffered { .. } => {
                        out.buffered.push(self.read_part(part, Columns::ALL, None, None).map(|c| Rows {
                            series: c.series,
                            time: c.time,
                            value: c.value,
                        })?);
                        PortablePart::Buffered { buffer: (out.buffered.len() - 1) as u32 }
                    }
                };
                parts.push((rank, part));
            }
            out.units.push(parts);
        }
        Ok(out)
    }
}

impl Store {
    /// A split scan of exactly the units of `portable` (made by [`SplitScan::portable`] in
    /// another process over the same store or dataset, opened with the same series ids: for a
    /// dataset, pinned to the planner's [`Store::dataset_layout`]). Each file must be one of this
    /// snapshot's data files; its footer comes from this store's footer cache or is read here. A file this snapshot does not name
    /// (compacted away since the scan was planned, or newer than the snapshot) is
    /// [`crate::error::Error::ScanFileGone`]: open a newer snapshot, or plan again.
    pub fn split_scan_portable(&self, portable: &PortableScan) -> Result<SplitScan> {
        let live: std::collections::HashMap<PathBuf, Arc<LiveFile>> =
            self.state.read().map_err(lock_poisoned)?.files.iter().map(|f| (f.path.clone(), f.clone())).collect();
        let mut files = Vec::with_capacity(portable.files.len());
        let mut shifted = BTreeMap::new();
        for relative in &portable.files {
            let plain = relative.components().all(|c| matches!(c, Component::Normal(_)));
            let path = self.dir.join(relative);
            let Some(file) = live.get(&path).filter(|_| plain) else {
                return Err(crate::error::Error::ScanFileGone { path });
            };
            let footer = self.footers.get(self.storage.as_ref(), file)?;
            if let Some(ids) = shifted_series(portable.series.as_ref(), file.series_offset) {
                shifted.entry(file.series_offset).or_insert(ids);
            }
            files.push((file.clone(), footer));
        }
        let count = |what: &str, i: u32, len: usize| {
            if (i as usize) < len {
                Ok(i as usize)
            } else {
                Err(crate::error::Error::Internal { reason: format!("portable scan: {what} {i} of {len}") })
            }
        };
        let mut buffered = Vec::with_capacity(portable.buffered.len());
        for rows in &portable.buffered {
            if rows.time.len() != rows.series.len() || rows.value.len() != rows.series.len() {
                return Err(crate::error::Error::Internal { reason: "portable scan: ragged buffered rows".into() });
            }
            buffered.push(rows.clone());
        }
        let mut units = Vec::with_capacity(portable.units.len());
        for parts in &portable.units {
            let mut unit = ScanUnit { parts: Vec::with_capacity(parts.len()), rows: 0, series: (u32::MAX, 0) };
            for (rank, part) in parts {
                let (part, lo, hi) = match *part {
                    PortablePart::Group { file, group } => {
                        let file = count("file", file, files.len())?;
                        let stats = files[file].1.groups();
                        let group = count("row group", group, stats.len())?;
                        unit.rows += stats[group].rows;
                        let offset = files[file].0.series_offset;
                        let (lo, hi) = stats[group].series.unwrap_or((0, u32::MAX - offset));
                        (Part::Group { file, group }, lo.saturating_add(offset), hi.saturating_add(offset))
                    }
                    PortablePart::Buffered { buffer } => {
                        let buffer = count("buffer", buffer, buffered.len())?;
                        let rows: &Rows = &buffered[buffer];
                        unit.rows += rows.len() as u64;
                        let lo = rows.series.first().copied().unwrap_or(0);
                        let hi = rows.series.last().copied().unwrap_or(0);
                        (Part::Buffered { buffer, range: 0..rows.len() }, lo, hi)
                    }
                };
                unit.series = (unit.series.0.min(lo), unit.series.1.max(hi));
                unit.parts.push((*rank as usize, part));
            }
            units.push(unit);
        }
        Ok(SplitScan {
            storage: self.storage.clone(),
            request: ScanRequest { time: portable.time, series: portable.series.clone(), value: portable.value },
            files,
            shifted,
            buffered,
            units,
        })
    }
}
