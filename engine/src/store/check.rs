//! A whole-store check (`lockstep check`): every data file read end to end.
//!
//! Opening a store already checks its manifest and catalog seals, replays and checks the WAL
//! records after the checkpoint and loads every sealed clock model version. A query reads only
//! the row groups and columns it needs, so a flipped bit in a file nobody queried stays
//! unnoticed until someone does (or until a compaction refuses the file). [`Store::check`]
//! reads every row group of every live data file: footer checksum, column-chunk checksums,
//! decoding, and the facts the manifest records about the file (size, rows, time and series
//! ranges), the order the writer guarantees (series, then time, no repeated timestamp within
//! a series) and series ids the catalog knows; and the store's documents are parsed. Problems
//! are collected, not raised: one report names every bad file, row group and document.

use std::path::PathBuf;
use std::sync::Arc;

use super::{LiveFile, Store, lock_poisoned};
use crate::datafile::{RowFilter, RowGroups};
use crate::error::Result;

/// What [`Store::check`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct CheckReport {
    /// Live data files.
    pub files: usize,
    /// Of those, files read that carry checksums (written since they were introduced).
    pub files_with_checksums: usize,
    /// Files read that carry no checksums (written before them): decoded and compared with
    /// their manifest entry, but a flipped value bit in them can go unnoticed.
    pub files_without_checksums: usize,
    /// Row groups read.
    pub row_groups: usize,
    /// Rows read from data files.
    pub rows: u64,
    /// Bytes of data files read.
    pub bytes: u64,
    /// Series ids in the catalog (retired ones included: a retired id is assigned).
    pub series: usize,
    /// Acknowledged rows not yet in a data file (replayed from the WAL when the store opened).
    pub buffered_rows: usize,
    /// Fitted clock model versions (each sealed and checked when the store opened).
    pub clock_versions: usize,
    /// The store's documents present (`topology.json`, `jobs.json`, `metrics.toml`), each
    /// parsed as the query layer and the diagnosis parse it.
    pub documents: usize,
    /// Files a compaction or retention replaced while the check ran, so not read: only on
    /// object storage (`--data-url`), where a snapshot holds the files already in the local
    /// cache and fetches the others when read; on a local disk the snapshot holds every file.
    pub files_replaced: usize,
    /// The incomplete record the last WAL segment ends in, if any: not a problem (a write is
    /// acknowledged once its whole record is synced, so nothing acknowledged is in it), but
    /// said, since the next writer cuts it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wal_torn_tail: Option<WalTornTail>,
    /// Everything wrong, one entry per file and row group.
    pub problems: Vec<CheckProblem>,
}

/// See [`CheckReport::wal_torn_tail`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct WalTornTail {
    /// The segment.
    pub path: PathBuf,
    /// Where the incomplete record starts.
    pub offset: u64,
    /// Its bytes, to the end of the file.
    pub bytes: u64,
}

/// One problem [`Store::check`] found.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CheckProblem {
    /// The data file.
    pub path: PathBuf,
    /// What is wrong with it.
    pub problem: String,
}

impl Store {
    /// The incomplete record the WAL replay of a reader stops at ([`CheckReport::wal_torn_tail`]):
    /// the replay is run again without keeping anything (it reads the unflushed segments a
    /// second time). A replay that fails (a segment a live writer's flush deleted meanwhile)
    /// reports no tail; a record a live writer is appending is reported, and the note says it
    /// may be a write in progress.
    fn wal_torn_tail(&self) -> Result<Option<WalTornTail>> {
        let manifest = self.state.read().map_err(lock_poisoned)?.manifest.clone();
        let checkpoint = manifest.checkpoint_for(self.storage.wal_owner().as_deref());
        let wal = self.dir.join("wal");
        let replayed =
            crate::wal::replay_read_only(self.storage.as_ref(), &wal, manifest.store_id, checkpoint, &mut |_| Ok(()));
        Ok(replayed.ok().and_then(|stats| stats.truncated_tail).map(|tail| WalTornTail {
            path: tail.path,
            offset: tail.offset,
            bytes: tail.dropped_bytes,
        }))
    }

    /// Reads every row group of every live data file (what it checks: `docs/README.md`,
    /// *Checking a store*) on `threads` threads, calling `progress(bytes_done, bytes_total)`
    /// as files finish. The files checked are the ones live when the call starts; in a
    /// read-only store they are the snapshot taken at open, which a writer's compaction cannot
    /// take away on a local disk (on object storage a file replaced meanwhile is counted in
    /// `files_replaced`). `Err` only when the store itself cannot be read (a poisoned lock); a
    /// bad file is a problem in the report.
    ///
    /// The unit of work is a row group: the files are taken in windows of a few per thread,
    /// each window's files are opened on all threads, then all their row groups are read on
    /// all threads, so a store of one large file uses every thread too, and memory is bounded
    /// by the window's open files and one decoded row group per thread.
    pub fn check(&self, threads: usize, progress: &(dyn Fn(u64, u64) + Sync)) -> Result<CheckReport> {
        let files: Vec<Arc<LiveFile>> = self.state.read().map_err(lock_poisoned)?.files.iter().cloned().collect();
        let (series, retired) = {
            let catalog = self.catalog.read().map_err(lock_poisoned)?;
            (catalog.len(), catalog.retired().clone())
        };
        let total: u64 = files.iter().map(|f| f.entry.stats.bytes).sum();
        let threads = threads.max(1);
        let mut done = 0;
        let mut reports = Vec::with_capacity(files.len());
        for window in files.chunks(4 * threads) {
            let opened = crate::parallel::map(window.len(), threads, |i| open_file(&window[i]));
            let units: Vec<(usize, usize)> = opened
                .iter()
                .enumerate()
                .flat_map(|(f, (_, groups))| groups.iter().flat_map(move |g| g.selected().iter().map(move |&i| (f, i))))
                .collect();
            let checked = crate::parallel::map(units.len(), threads, |u| {
                let (f, group) = units[u];
                opened[f].1.as_ref().map(|groups| check_group(groups, group, &retired, window[f].series_offset))
            });
            // `units` and so `checked` are in file order, then row-group order.
            let mut checked = checked.into_iter().flatten();
            for (file, (mut report, groups)) in window.iter().zip(opened) {
                if let Some(groups) = groups {
                    let n = groups.selected().len();
                    finish_file(file, &mut report, checked.by_ref().take(n), self.catalog_of(file, series));
                }
                done += file.entry.stats.bytes;
                progress(done, total);
                reports.push(report);
            }
        }
        // (The nodes of a dataset union may share ids.)
        reports.sort_by(|a, b| (a.id, &a.path).cmp(&(b.id, &b.path)));
        let mut out = CheckReport {
            files: files.len(),
            series,
            buffered_rows: self.buffered_rows()?,
            clock_versions: self.clocks.lock().map_err(lock_poisoned)?.versions().len(),
            ..CheckReport::default()
        };
        let (mut topology, mut jobs) = (None, None);
        for name in super::DOCUMENTS {
            let problem = match self.read_document(name) {
                Ok(None) => continue,
                Ok(Some(text)) => {
                    let problem = document_problem(name, &text);
                    match name {
                        "topology.json" => topology = Some(text),
                        "jobs.json" => jobs = Some(text),
                        _ => {}
                    }
                    problem
                }
                Err(e) => Some(e.to_string()),
            };
            out.documents += 1;
            if let Some(problem) = problem {
                out.problems.push(CheckProblem { path: self.document_path(name)?, problem });
            }
        }
        // The jobs must run on the topology's nodes: every query of the jobs and the diagnosis
        // fail otherwise (a store written before imports checked it, QA pass 21).
        if let (Some(topology), Some(jobs)) = (topology, jobs)
            && let (Ok(topology), Ok(jobs)) =
                (crate::topology::Topology::from_json(&topology), crate::topology::parse_jobs(&jobs))
            && let Err(e) = crate::topology::check_jobs(&topology, &jobs)
        {
            out.problems.push(CheckProblem {
                path: self.document_path("jobs.json")?,
                problem: format!(
                    "{e}: jobs.json does not fit topology.json (import a bundle with both, or send either to \
                     serve's API)"
                ),
            });
        }
        out.wal_torn_tail = self.wal_torn_tail()?;
        if let Some(id) = self.pending_import()? {
            let problem = match self.read_import_rest(&id) {
                Ok(rest) => format!(
                    "the samples of an import of {} are committed, its topology, jobs and clock input not yet \
                     stored (an import under way, or one that stopped in between): the next writer on this store \
                     (`lockstep import` or `lockstep serve`) stores them",
                    rest.bundle
                ),
                Err(e) => format!(
                    "the manifest names the staged topology, jobs and clock input of an import, which do not read \
                     ({e}): import that bundle again (the import drops what does not read)"
                ),
            };
            out.problems.push(CheckProblem { path: self.import_rest_path(&id), problem });
        }
        for f in self.union.iter().flat_map(|u| &u.left_out) {
            out.problems.push(CheckProblem {
                path: f.path.clone(),
                problem: format!(
                    "series id {} is not in node {}'s catalog ({} series): the file is left out of the dataset",
                    f.max_series, f.node, f.series
                ),
            });
        }
        for r in reports {
            if r.gone && replaced(&files, &r) {
                out.files_replaced += 1;
                continue;
            }
            out.files_with_checksums += usize::from(r.checksums == Some(true));
            out.files_without_checksums += usize::from(r.checksums == Some(false));
            out.row_groups += r.row_groups;
            out.rows += r.rows;
            out.bytes += r.bytes;
            out.problems.extend(r.problems.into_iter().map(|problem| CheckProblem { path: r.path.clone(), problem }));
        }
        Ok(out)
    }
}

impl Store {
    /// The catalog `file`'s series ids refer to: its node's in a dataset union (ids
    /// `0 .. series`, before the node's offset), else the store's (`series` series).
    fn catalog_of(&self, file: &LiveFile, series: usize) -> Catalog {
        let node =
            self.union.as_ref().and_then(|u| u.nodes.iter().find(|n| file.path.starts_with(self.dir.join(&n.name))));
        match node {
            Some(node) => Catalog { name: format!("node {}'s catalog", node.name), series: u64::from(node.series) },
            None => Catalog { name: "the catalog".into(), series: series as u64 },
        }
    }
}

/// The catalog a file's series ids must be in: a name for messages and its series count.
struct Catalog {
    name: String,
    series: u64,
}

/// What is wrong with the text of document `name`, parsed as its readers parse it (each alone:
/// whether the jobs' nodes are in the topology is the diagnosis's to say).
fn document_problem(name: &str, text: &str) -> Option<String> {
    let parsed = match name {
        "topology.json" => crate::topology::Topology::from_json(text).map(drop),
        "jobs.json" => crate::topology::parse_jobs(text).map(drop),
        "metrics.toml" => crate::metrics::MetricCatalog::builtin().extend_from_toml(text).map(drop),
        _ => Ok(()),
    };
    parsed.err().map(|e| e.to_string())
}

/// Whether the file of `report`, which was not found, is no longer in the manifest on disk of
/// its store (a dataset's node: the file's path less its entry's relative path).
fn replaced(files: &[Arc<LiveFile>], report: &FileReport) -> bool {
    let Some(file) = files.iter().find(|f| f.entry.id == report.id && f.path == report.path) else { return false };
    let depth = std::path::Path::new(&file.entry.path).components().count();
    let Some(dir) = file.path.ancestors().nth(depth) else { return false };
    match crate::manifest::Manifest::load(file.storage.as_ref(), &dir.join("manifest.json")) {
        Ok(Some(manifest)) => !manifest.files.iter().any(|f| f.id == file.entry.id),
        _ => false,
    }
}

/// What one file's check found.
struct FileReport {
    id: u64,
    path: PathBuf,
    /// The file was not found (replaced meanwhile on object storage, or missing).
    gone: bool,
    /// Whether the file carries checksums (`None`: it could not be opened).
    checksums: Option<bool>,
    row_groups: usize,
    rows: u64,
    bytes: u64,
    problems: Vec<String>,
}

/// Opens `file` (its size, footer and schema): the start of its report, and its row groups
/// unless it could not be opened.
fn open_file(file: &LiveFile) -> (FileReport, Option<RowGroups>) {
    let stats = &file.entry.stats;
    let mut report = FileReport {
        id: file.entry.id,
        path: file.path.clone(),
        gone: false,
        checksums: None,
        row_groups: 0,
        rows: 0,
        bytes: 0,
        problems: Vec::new(),
    };
    match file.storage.len(&file.path) {
        Ok(len) => {
            report.bytes = len;
            if report.bytes != stats.bytes {
                report.problems.push(format!("{} bytes on disk, the manifest says {}", report.bytes, stats.bytes));
            }
        }
        Err(e) => {
            report.gone = e.kind() == std::io::ErrorKind::NotFound;
            report.problems.push(format!("cannot be read: {e}"));
            return (report, None);
        }
    }
    let groups = match RowGroups::open(file.storage.as_ref(), &file.path, &RowFilter::default(), stats.footer_crc32) {
        Ok(groups) => groups,
        Err(e) => {
            report.gone = e.kind() == crate::error::ErrorKind::NotFound;
            report.problems.push(reason(&e));
            return (report, None);
        }
    };
    report.checksums = Some(groups.has_checksums());
    // The other way round is no problem: a release before checksums that rewrote the manifest
    // dropped the entries' footer checksums it did not know.
    if stats.footer_crc32.is_some() && !groups.has_checksums() {
        report.problems.push("the manifest entry has a footer checksum but the file no column checksums".into());
    }
    (report, Some(groups))
}

/// What reading one row group found.
struct GroupCheck {
    group: usize,
    /// Its rows, or why they could not be read.
    read: std::result::Result<(u64, Order), String>,
    /// The first out-of-order row within the group, or a row of a retired series.
    problem: Option<String>,
}

/// Reads row group `group` (checksums, decoding) and checks its order, and that no row has a
/// series id in `retired` (the catalog's retired ids; a file's ids plus `offset` are the
/// catalog's): its rows would be data without a series key.
fn check_group(groups: &RowGroups, group: usize, retired: &roaring::RoaringBitmap, offset: u32) -> GroupCheck {
    match groups.read_group(group) {
        Ok(rows) => {
            let mut order = Order::default();
            let problem = order.extend(&rows.series, &rows.time).or_else(|| {
                let mut ids = rows.series.iter().map(|&s| s.saturating_add(offset));
                let id = ids.find(|&s| !retired.is_empty() && retired.contains(s))?;
                Some(format!("series id {id} is retired in the catalog: its rows have no series key"))
            });
            GroupCheck { group, read: Ok((rows.len() as u64, order)), problem }
        }
        Err(e) => GroupCheck { group, read: Err(reason(&e)), problem: None },
    }
}

/// Adds the checks of `file`'s row groups (in order) to its report and compares the whole with
/// its manifest entry and `catalog`.
fn finish_file(file: &LiveFile, report: &mut FileReport, groups: impl Iterator<Item = GroupCheck>, catalog: Catalog) {
    let stats = &file.entry.stats;
    let mut order = Order::default();
    let mut unreadable = false;
    for checked in groups {
        report.row_groups += 1;
        let (rows, group_order) = match checked.read {
            Ok(read) => read,
            Err(reason) => {
                report.problems.push(reason);
                unreadable = true;
                continue;
            }
        };
        report.rows += rows;
        if let Some(problem) = order.append(group_order).or(checked.problem) {
            report.problems.push(format!("row group {}: {problem}", checked.group));
        }
    }
    // The rows and ranges of a file with unreadable row groups differ from the manifest's as a
    // consequence: not a problem of its own.
    if unreadable {
        return;
    }
    if report.rows != stats.rows {
        report.problems.push(format!("{} rows read, the manifest says {}", report.rows, stats.rows));
    }
    if let Some(((s_min, s_max), (t_min, t_max))) = order.series.zip(order.time) {
        if (s_min, s_max) != (stats.min_series, stats.max_series) {
            report.problems.push(format!(
                "series ids {s_min}..={s_max}, the manifest says {}..={}",
                stats.min_series, stats.max_series
            ));
        }
        if (t_min, t_max) != (stats.min_time, stats.max_time) {
            report
                .problems
                .push(format!("times {t_min}..={t_max}, the manifest says {}..={}", stats.min_time, stats.max_time));
        }
        if u64::from(s_max) >= catalog.series {
            report.problems.push(format!("series id {s_max} is not in {} ({} series)", catalog.name, catalog.series));
        }
    }
}

/// The text of a read error without the path (the report names the file).
fn reason(e: &crate::error::Error) -> String {
    match e {
        crate::error::Error::DataFileInvalid { reason, .. } => reason.clone(),
        e => e.to_string(),
    }
}

/// The order data files are written in, checked across row groups: by series, then time,
/// each (series, time) once; and the ranges seen.
#[derive(Default)]
struct Order {
    first: Option<(u32, i64)>,
    last: Option<(u32, i64)>,
    series: Option<(u32, u32)>,
    time: Option<(i64, i64)>,
}

/// The smallest range holding both.
fn span<T: Ord + Copy>(a: Option<(T, T)>, b: Option<(T, T)>) -> Option<(T, T)> {
    match (a, b) {
        (Some(a), Some(b)) => Some((a.0.min(b.0), a.1.max(b.1))),
        (a, b) => a.or(b),
    }
}

/// The problem when row `(s, t)` follows row `last` (not in increasing order).
fn disorder(last: (u32, i64), (s, t): (u32, i64)) -> String {
    if (s, t) == last {
        format!("series {s} has time {t} twice")
    } else {
        format!("rows out of order: series {s} time {t} after series {} time {}", last.0, last.1)
    }
}

impl Order {
    /// Takes the next rows; the first out-of-order row, if any.
    fn extend(&mut self, series: &[u32], time: &[i64]) -> Option<String> {
        let mut problem = None;
        for (&s, &t) in series.iter().zip(time) {
            if problem.is_none()
                && let Some(last) = self.last
                && (s, t) <= last
            {
                problem = Some(disorder(last, (s, t)));
            }
            self.first = self.first.or(Some((s, t)));
            self.last = Some((s, t));
            self.series = Some(self.series.map_or((s, s), |(lo, hi)| (lo.min(s), hi.max(s))));
            self.time = Some(self.time.map_or((t, t), |(lo, hi)| (lo.min(t), hi.max(t))));
        }
        problem
    }

    /// Takes the rows `next` saw, which follow these: the problem where they meet, if any.
    fn append(&mut self, next: Order) -> Option<String> {
        let (Some(first), Some(last)) = (next.first, next.last) else { return None };
        let problem = self.last.filter(|&prev| first <= prev).map(|prev| disorder(prev, first));
        self.series = span(self.series, next.series);
        self.time = span(self.time, next.time);
        self.first = self.first.or(Some(first));
        self.last = Some(last);
        problem
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::path::Path;

    use super::*;
    use crate::model::{SeriesKey, WriteBatch};
    use crate::store::StoreConfig;

    const T0: i64 = 1_767_225_600_000_000_000; // 2026-01-01
    const SEC: i64 = 1_000_000_000;

    fn check(dir: &Path) -> CheckReport {
        Store::open_read_only(dir).unwrap().check(2, &|_, _| {}).unwrap()
    }

    /// Three data files in two partitions (one of them rewriting values of another, as
    /// last-write-wins leaves them), and acknowledged rows only in the WAL.
    fn store_with_files(dir: &Path) -> Vec<PathBuf> {
        let config = StoreConfig { max_future_ns: None, flush_rows: usize::MAX, ..Default::default() };
        let store = Store::open(dir, config).unwrap();
        let write = |from: i64, to: i64, value: f64| {
            let mut b = WriteBatch::default();
            for s in 0..20 {
                let key = SeriesKey::new("m", [("host", format!("h{}", s % 3)), ("dev", format!("d{s}"))]);
                for k in from..to {
                    b.push(key.clone(), T0 + k * SEC, value + k as f64 * 0.5);
                }
            }
            store.write(&b).unwrap();
        };
        write(0, 3000, 1.0);
        store.flush().unwrap();
        write(1000, 2000, 7.0);
        store.flush().unwrap();
        write(3600, 4000, 2.0);
        store.flush().unwrap();
        write(4000, 4010, 3.0);
        let files = store.manifest().unwrap().files.iter().map(|f| dir.join(&f.path)).collect();
        drop(store);
        files
    }

    /// `path`'s bytes with bit 4 of the byte in the middle of row group 0's column `column`
    /// flipped.
    fn flip_in_column(path: &Path, column: usize) {
        flip_in_group(path, 0, column);
    }

    /// [`flip_in_column`] in row group `group`.
    fn flip_in_group(path: &Path, group: usize, column: usize) {
        use parquet::file::reader::{FileReader, SerializedFileReader};
        let reader = SerializedFileReader::new(std::fs::File::open(path).unwrap()).unwrap();
        let (start, len) = reader.metadata().row_group(group).column(column).byte_range();
        let mut bytes = std::fs::read(path).unwrap();
        bytes[usize::try_from(start + len / 2).unwrap()] ^= 0x10;
        std::fs::write(path, bytes).unwrap();
    }

    #[test]
    fn a_sound_store_checks_clean_and_every_damaged_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let files = store_with_files(dir.path());
        assert_eq!(files.len(), 3);
        let clean = check(dir.path());
        assert_eq!(clean.problems, vec![], "{clean:?}");
        assert_eq!((clean.files, clean.files_with_checksums, clean.files_without_checksums), (3, 3, 0));
        assert_eq!(clean.rows, 20 * (3000 + 1000 + 400), "every row of every file");
        assert_eq!(clean.buffered_rows, 20 * 10);
        assert_eq!(clean.series, 20);
        let on_disk: u64 = files.iter().map(|f| std::fs::metadata(f).unwrap().len()).sum();
        assert_eq!(clean.bytes, on_disk);

        // A flipped bit in a value chunk, a truncated file, a missing file.
        flip_in_column(&files[0], 2);
        let len = std::fs::metadata(&files[1]).unwrap().len();
        std::fs::OpenOptions::new().write(true).open(&files[1]).unwrap().set_len(len - 10).unwrap();
        std::fs::remove_file(&files[2]).unwrap();
        let damaged = check(dir.path());
        let about = |file: &Path| -> Vec<&str> {
            damaged.problems.iter().filter(|p| p.path == file).map(|p| p.problem.as_str()).collect()
        };
        let flipped = about(&files[0]);
        assert_eq!(flipped.len(), 1, "{damaged:#?}");
        assert!(flipped[0].starts_with("row group 0 column value_int: checksum mismatch"), "{flipped:?}");
        let truncated = about(&files[1]);
        assert!(truncated.iter().any(|p| p.contains(&format!("{} bytes on disk, the manifest says {len}", len - 10))));
        assert!(truncated.len() >= 2, "the size and the footer: {truncated:?}");
        let missing = about(&files[2]);
        assert_eq!(missing.len(), 1, "{damaged:#?}");
        assert!(missing[0].starts_with("cannot be read"), "{missing:?}");
        assert_eq!(damaged.problems.len(), flipped.len() + truncated.len() + missing.len());
        // Each file is one row group: none is read; the WAL rows are untouched.
        assert_eq!((damaged.rows, damaged.files_with_checksums), (0, 1), "{damaged:?}");
        assert_eq!(damaged.buffered_rows, clean.buffered_rows);
    }

    /// The row groups of one file are checked on several threads: any thread count gives the
    /// same report, a damaged row group in the middle is named alone, and the order is checked
    /// across the groups' boundaries.
    #[test]
    fn the_row_groups_of_one_file_are_checked_in_parallel() {
        let dir = tempfile::tempdir().unwrap();
        let config = StoreConfig { max_future_ns: None, flush_rows: usize::MAX, ..Default::default() };
        let store = Store::open(dir.path(), config).unwrap();
        let mut b = WriteBatch::default();
        let per_series = 2 * crate::datafile::ROW_GROUP_ROWS as i64 / 5 + 1_000;
        for s in 0..6 {
            let key = SeriesKey::new("m", [("host", format!("h{s}"))]);
            for k in 0..per_series {
                // 1 ms apart: one partition, one file.
                b.push(key.clone(), T0 + k * 1_000_000, (k % 1000) as f64 * 0.25);
            }
        }
        store.write(&b).unwrap();
        store.flush().unwrap();
        let files = store.manifest().unwrap().files.clone();
        assert_eq!(files.len(), 1);
        let path = dir.path().join(&files[0].path);
        drop(store);
        let reports: Vec<CheckReport> = [1, 2, 5]
            .iter()
            .map(|&threads| Store::open_read_only(dir.path()).unwrap().check(threads, &|_, _| {}).unwrap())
            .collect();
        assert!(reports[0].row_groups >= 3, "{:?}", reports[0]);
        assert_eq!(reports[0].rows, 6 * per_series as u64);
        assert_eq!(reports[0].problems, vec![]);
        assert!(reports.iter().all(|r| *r == reports[0]), "{reports:#?}");
        flip_in_group(&path, 1, 2);
        let reports: Vec<CheckReport> = [1, 2, 5]
            .iter()
            .map(|&threads| Store::open_read_only(dir.path()).unwrap().check(threads, &|_, _| {}).unwrap())
            .collect();
        assert_eq!(reports[0].problems.len(), 1, "{:#?}", reports[0]);
        assert!(reports[0].problems[0].problem.starts_with("row group 1 column value_int: checksum mismatch"));
        assert!(reports.iter().all(|r| *r == reports[0]), "{reports:#?}");
    }

    /// A WAL that ends in an incomplete record (a writer killed in the middle of a write) is
    /// said, not counted as a problem; once a writer has opened the store (and cut it) it is
    /// gone.
    #[test]
    fn a_torn_wal_tail_is_said_and_is_not_a_problem() {
        let dir = tempfile::tempdir().unwrap();
        store_with_files(dir.path());
        assert_eq!(check(dir.path()).wal_torn_tail, None);
        let mut segments: Vec<_> =
            std::fs::read_dir(dir.path().join("wal")).unwrap().map(|e| e.unwrap().path()).collect();
        segments.sort();
        let last = segments.last().unwrap();
        let len = std::fs::metadata(last).unwrap().len();
        let mut f = std::fs::OpenOptions::new().append(true).open(last).unwrap();
        std::io::Write::write_all(&mut f, &[7, 0, 0, 0, 1, 2]).unwrap();
        drop(f);
        let report = check(dir.path());
        assert_eq!(report.wal_torn_tail, Some(WalTornTail { path: last.clone(), offset: len, bytes: 6 }));
        assert!(report.problems.is_empty(), "{report:#?}");
        let rows = report.buffered_rows;
        drop(Store::open(dir.path(), StoreConfig { max_future_ns: None, ..Default::default() }).unwrap());
        let report = check(dir.path());
        assert_eq!((report.wal_torn_tail, report.buffered_rows), (None, rows), "cut, and nothing else lost");
    }

    /// The documents are parsed as their readers parse them: an invalid one is a problem
    /// naming it, a valid one is counted.
    #[test]
    fn documents_that_do_not_parse_are_problems() {
        let dir = tempfile::tempdir().unwrap();
        store_with_files(dir.path());
        let config = StoreConfig { max_future_ns: None, flush_rows: usize::MAX, ..Default::default() };
        let store = Store::open(dir.path(), config.clone()).unwrap();
        store.write_document("jobs.json", "[]").unwrap();
        store.write_document("topology.json", "{\"nodes\": [").unwrap();
        drop(store);
        let report = check(dir.path());
        assert_eq!(report.documents, 2, "{report:?}");
        assert_eq!(report.problems.len(), 1, "{report:#?}");
        assert_eq!(report.problems[0].path, dir.path().join("topology.json"));
        assert!(report.problems[0].problem.contains("topology.json"), "{:?}", report.problems[0]);
        // Both parse, but a job runs on a node the topology lacks.
        let store = Store::open(dir.path(), config).unwrap();
        store.write_document("topology.json", r#"{"nodes": [{"name": "n1"}]}"#).unwrap();
        store.write_document("jobs.json", r#"[{"job": "j", "nodes": ["n2"], "start": 0}]"#).unwrap();
        drop(store);
        let report = check(dir.path());
        assert_eq!(report.problems.len(), 1, "{report:#?}");
        assert_eq!(report.problems[0].path, dir.path().join("jobs.json"));
        assert!(report.problems[0].problem.contains("does not fit topology.json"), "{:?}", report.problems[0]);
    }

    /// What a manifest records about a file is compared with the file: an unsealed manifest
    /// (an older release's) whose entry says other rows or ranges than the file holds.
    #[test]
    fn an_entry_that_disagrees_with_its_file_is_a_problem() {
        let dir = tempfile::tempdir().unwrap();
        store_with_files(dir.path());
        let path = dir.path().join("manifest.json");
        let mut manifest: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let object = manifest.as_object_mut().unwrap();
        object.remove("crc32");
        let files = object["files"].as_array_mut().unwrap();
        for f in files.iter_mut() {
            f.as_object_mut().unwrap().remove("footer_crc32");
        }
        let rows = files[0]["rows"].as_u64().unwrap();
        files[0]["rows"] = (rows - 1).into();
        files[1]["max_time"] = (files[1]["max_time"].as_i64().unwrap() + 1).into();
        files[2]["max_series"] = 40.into();
        std::fs::write(&path, serde_json::to_vec(&manifest).unwrap()).unwrap();
        let report = check(dir.path());
        let problems: Vec<&str> = report.problems.iter().map(|p| p.problem.as_str()).collect();
        assert_eq!(problems.len(), 3, "{problems:#?}");
        assert_eq!(problems[0], format!("{rows} rows read, the manifest says {}", rows - 1));
        assert!(problems[1].starts_with("times ") && problems[1].contains("the manifest says"), "{problems:?}");
        assert_eq!(problems[2], "series ids 0..=19, the manifest says 0..=40");
        // Files with checksums whose entries lost their footer checksum (an older release
        // rewrote the manifest) are not a problem of their own.
        assert_eq!(report.files_with_checksums, 3);
    }

    /// A corrupt file does not stop compaction: its partition is left as it is, the partitions
    /// after it are still compacted, and later passes merge only the partition's files newer
    /// than the corrupt one.
    #[test]
    fn compaction_leaves_a_corrupt_file_and_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let files = store_with_files(dir.path());
        flip_in_column(&files[0], 2);
        let config = StoreConfig { max_future_ns: None, flush_rows: usize::MAX, ..Default::default() };
        let store = Store::open(dir.path(), config).unwrap();
        store.flush().unwrap(); // a second file in the later partition
        let summary = store.compact(true).unwrap();
        assert_eq!((summary.partitions, summary.partitions_skipped, summary.files_in), (1, 1, 2), "{summary:?}");
        let again = store.compact(true).unwrap();
        assert_eq!((again.partitions, again.partitions_skipped), (0, 0), "{again:?}");
        // Late rows in the corrupt file's partition: its newer files merge, it stays.
        let key = SeriesKey::new("m", [("host", "h0"), ("dev", "d0")]);
        let mut late = WriteBatch::default();
        late.push(key, T0 + 3500 * SEC, 1.0);
        store.write(&late).unwrap();
        store.flush().unwrap();
        let merged = store.compact(true).unwrap();
        assert_eq!((merged.partitions, merged.partitions_skipped, merged.files_in), (1, 0, 2), "{merged:?}");
        drop(store);
        let report = check(dir.path());
        assert_eq!(report.files, 3, "the corrupt file, the merge of its newer ones, the other partition: {report:?}");
        assert!(report.problems.iter().all(|p| p.path == files[0]) && report.problems.len() == 1, "{report:#?}");
    }

    /// A file that is gone and that the manifest on disk no longer lists was replaced while the
    /// check ran (a compaction beside a check on object storage, whose snapshot does not hold
    /// every file): counted, not a problem. Simulated in a writer's store, whose in-memory list
    /// still names the file after the manifest on disk dropped it.
    #[test]
    fn a_file_replaced_during_the_check_is_not_a_problem() {
        let dir = tempfile::tempdir().unwrap();
        let files = store_with_files(dir.path());
        let config = StoreConfig { max_future_ns: None, flush_rows: usize::MAX, ..Default::default() };
        let store = Store::open(dir.path(), config).unwrap();
        let path = dir.path().join("manifest.json");
        let mut manifest = crate::manifest::Manifest::load(&crate::storage::OsStorage, &path).unwrap().unwrap();
        let gone = manifest.files.remove(2);
        manifest.save(&crate::storage::OsStorage, &path).unwrap();
        std::fs::remove_file(dir.path().join(&gone.path)).unwrap();
        // A file that is gone but still listed is missing, a problem.
        std::fs::remove_file(&files[1]).unwrap();
        let report = store.check(2, &|_, _| {}).unwrap();
        assert_eq!((report.files, report.files_replaced), (3, 1), "{report:?}");
        assert_eq!(report.problems.len(), 1, "{report:#?}");
        assert_eq!(report.problems[0].path, files[1]);
    }

    /// A failure that is not about an input (the disk is full while the output is written) is
    /// returned, and the next pass compacts the partition.
    #[test]
    fn compaction_failing_on_its_output_is_retried_not_skipped() {
        use crate::storage::{FaultyStorage, OsStorage};
        let dir = tempfile::tempdir().unwrap();
        store_with_files(dir.path());
        let faulty = FaultyStorage::new(Arc::new(OsStorage), u64::MAX);
        let config = StoreConfig { max_future_ns: None, flush_rows: usize::MAX, ..Default::default() };
        let clock = Arc::new(crate::wallclock::SystemClock);
        let store = Store::open_with(dir.path(), config, Arc::new(faulty.clone()), clock).unwrap();
        faulty.set_full(true);
        assert!(store.compact(true).is_err());
        faulty.set_full(false);
        let summary = store.compact(true).unwrap();
        assert_eq!((summary.partitions, summary.partitions_skipped, summary.files_in), (1, 0, 2), "{summary:?}");
    }

    #[test]
    fn rows_out_of_order_or_repeated_are_found_across_row_groups() {
        // Each row group is checked alone (on its own thread), then appended in file order.
        let group = |series: &[u32], time: &[i64]| {
            let mut order = Order::default();
            (order.extend(series, time), order)
        };
        let mut order = Order::default();
        let (problem, g) = group(&[0, 0, 1], &[5, 6, 1]);
        assert_eq!((problem, order.append(g)), (None, None));
        let (problem, g) = group(&[1, 2], &[2, 0]);
        assert_eq!((problem, order.append(g)), (None, None), "continues across row groups");
        let (problem, g) = group(&[2], &[0]);
        assert_eq!((problem, order.append(g).as_deref()), (None, Some("series 2 has time 0 twice")));
        assert_eq!(order.append(Order::default()), None, "an empty group");
        let (problem, g) = group(&[1, 3, 3], &[9, 1, 1]);
        assert_eq!(problem.as_deref(), Some("series 3 has time 1 twice"), "within a group");
        assert_eq!(order.append(g).as_deref(), Some("rows out of order: series 1 time 9 after series 2 time 0"));
        assert_eq!((order.series, order.time), (Some((0, 3)), Some((0, 9))));
    }
}
