//! Importing bundles: `samples.parquet` or `samples.csv` in the long format of the design; and
//! Prometheus text / OpenMetrics scrape files ([`prom`]).
//!
//! Long format: `time` (i64 ns since the Unix epoch, in the clock of `host`), `host`, `metric`,
//! `value` (f64); every other column is a string label (null or empty = absent). Files are
//! streamed in batches (memory stays bounded whatever the file size) into an all-or-nothing
//! [`lockstep_engine::store::BulkImport`]: by default the first bad row aborts the import and
//! nothing is kept; with `skip_bad_rows` bad rows are counted and skipped.

pub mod clock;
mod csv_reader;
mod parquet_reader;
pub mod prom;
mod resolver;

use std::path::{Path, PathBuf};
use std::time::Instant;

use lockstep_engine::Rows;
use lockstep_engine::Store;
use lockstep_engine::metrics::{CATALOG_FILE, MetricCatalog};
use lockstep_engine::topology::{Topology, check_jobs, parse_jobs};

/// Name of the topology file in a bundle and in a store directory.
pub const TOPOLOGY_FILE: &str = "topology.json";
/// Name of the jobs file in a bundle and in a store directory.
pub const JOBS_FILE: &str = "jobs.json";

pub use resolver::SeriesResolver;

/// Rows handed to the store per call.
const CHUNK_ROWS: usize = 64 * 1024;

/// Errors of an import.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// The bundle has no samples file.
    #[error("bundle {dir} has no samples.parquet or samples.csv")]
    NoSamples {
        /// Bundle directory.
        dir: PathBuf,
    },
    /// The file cannot be read or is not of the expected format.
    #[error("{file}: {reason}")]
    BadFile {
        /// The file.
        file: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A row failed validation.
    #[error("{file}: row {row}: {reason}")]
    BadRow {
        /// The file.
        file: PathBuf,
        /// 1-based data row (for CSV, the header is line 1 and row 1 is line 2).
        row: u64,
        /// What is wrong.
        reason: String,
    },
    /// The store refused the data.
    #[error("{0}")]
    Store(#[from] lockstep_engine::Error),
}

impl ImportError {
    /// The error's kind.
    pub fn kind(&self) -> lockstep_engine::ErrorKind {
        match self {
            ImportError::Store(e) => e.kind(),
            ImportError::NoSamples { .. } => lockstep_engine::ErrorKind::NotFound,
            _ => lockstep_engine::ErrorKind::InvalidArgument,
        }
    }
}

/// Import settings.
#[derive(Debug, Clone, Default)]
pub struct ImportOptions {
    /// Skip invalid rows (and count them) instead of failing the whole import.
    pub skip_bad_rows: bool,
}

/// What an import did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ImportReport {
    /// The samples file read.
    pub file: PathBuf,
    /// Samples imported.
    pub samples: u64,
    /// Integer values beyond 2^53 that were stored as the nearest f64 (the stored `value` is a
    /// float: 9007199254740993 becomes 9007199254740992), with the first such row.
    pub rounded: (u64, Option<String>),
    /// Of `samples`, those that repeated the series and timestamp of another sample of the
    /// import: only the last of each is stored (last write wins), so the store holds
    /// `samples - duplicates` new rows.
    pub duplicates: u64,
    /// Rows skipped (only with `skip_bad_rows`).
    pub skipped: u64,
    /// The first few skipped rows' reasons.
    pub skipped_examples: Vec<String>,
    /// Distinct series.
    pub series: u64,
    /// Smallest and largest timestamp (ns).
    pub time_span: Option<(i64, i64)>,
    /// Wall-clock seconds.
    pub seconds: f64,
    /// Clock-sync exchanges added from `clock_sync.parquet|csv`.
    pub clock_exchanges: u64,
    /// Direct offsets added from `clock_offsets.parquet|csv`.
    pub clock_offsets: u64,
    /// Barrier events derived from `collective_end` samples.
    pub clock_barriers: u64,
    /// The clock-model version in effect after the import (0 = no clock data at all).
    pub clock_version: u64,
    /// The documents stored (`topology.json`, `jobs.json`, `metrics.toml`) with their new versions.
    pub documents: Vec<(&'static str, u64)>,
}

/// Progress callback: called with (rows read so far, total rows if known).
pub type Progress<'a> = &'a mut dyn FnMut(u64, Option<u64>);

/// Finds the samples file of a bundle: `samples.parquet` or `samples.csv`. Both at once is an
/// error (one would be left out without a word), and so is a directory of that name (a
/// partitioned dataset, whose partition columns are in its directory names).
pub fn samples_file(bundle: &Path) -> Result<PathBuf, ImportError> {
    let found: Vec<PathBuf> =
        ["samples.parquet", "samples.csv"].into_iter().map(|n| bundle.join(n)).filter(|p| p.exists()).collect();
    if let Some(dir) = found.iter().find(|p| p.is_dir()) {
        return Err(ImportError::BadFile {
            file: dir.clone(),
            reason: "is a directory (a partitioned dataset?), not a file: write the samples as one file \
                     (pandas: to_parquet without partition_cols; DuckDB: COPY … TO 'samples.parquet')"
                .into(),
        });
    }
    match found.as_slice() {
        [] => Err(ImportError::NoSamples { dir: bundle.to_path_buf() }),
        [one] => Ok(one.clone()),
        _ => Err(ImportError::BadFile {
            file: bundle.to_path_buf(),
            reason: "has both samples.parquet and samples.csv; an import reads one samples file, so remove the other"
                .into(),
        }),
    }
}

/// Imports a bundle directory into `store`: its `topology.json`, `jobs.json` and `metrics.toml`
/// (a catalog extension, see `docs/metrics.md`) and its clock
/// files (all validated first, so a bad one imports nothing), its samples, then the clock
/// input (sync exchanges, direct offsets, barriers from `collective_end`), refitting the clock
/// models. A bundle may hold only clock files (they then refine the correction of samples
/// imported earlier) or only documents (the topology and jobs of data written by collectors).
pub fn import_bundle(
    store: &Store,
    bundle: &Path,
    options: &ImportOptions,
    progress: Progress<'_>,
) -> Result<ImportReport, ImportError> {
    let file = samples_file(bundle);
    let metadata = read_metadata(store, bundle)?;
    let clock_input = clock::read_clock_input(bundle)?;
    // From before the samples are committed until the bundle's documents and clock input are
    // stored, the store names the bundle: an import killed in between is reported by `check`
    // and the next writer, with the bundle to import again.
    let pending = file.is_ok() && !(metadata.is_empty() && clock_input.is_empty());
    if pending {
        store.mark_import_pending(&bundle.display().to_string())?;
    }
    let mut report = match file {
        Ok(file) => match import_file(store, &file, options, progress) {
            Ok(report) => report,
            Err(e) => {
                // Nothing of the samples was committed.
                let _ = store.clear_import_pending();
                return Err(e);
            }
        },
        // Clock sync that arrives later (a sync-only bundle) improves the correction of data
        // already imported; a bundle of only `topology.json`/`jobs.json` describes the
        // cluster and its jobs for data that arrives (or arrived) another way.
        Err(ImportError::NoSamples { .. }) if !clock_input.is_empty() || !metadata.is_empty() => {
            ImportReport::default()
        }
        Err(e) => return Err(e),
    };
    for (name, text) in metadata {
        report.documents.push((name, store.write_document(name, &text)?));
    }
    let barriers = clock::collective_barriers(store)?;
    report.clock_exchanges = clock_input.exchanges.len() as u64;
    report.clock_offsets = clock_input.offsets.len() as u64;
    report.clock_barriers = barriers.len() as u64;
    report.clock_version = add_clock_input(store, &clock_input, &barriers)?;
    if pending {
        store.clear_import_pending()?;
    }
    Ok(report)
}

/// Adds clock input (durably) and refits the clock models when anything was added or there
/// is input the newest fitted version does not cover. Returns the version in effect. Samples committed before
/// a failure here stay; re-running the import adds the clock data (duplicates are ignored).
pub fn add_clock_input(
    store: &Store,
    input: &clock::ClockInput,
    barriers: &[lockstep_engine::clock::BarrierEvent],
) -> Result<u64, ImportError> {
    store.check_clock_input(&input.exchanges, &input.offsets)?;
    Ok(store.with_clocks(|reg| {
        let before = reg.input_counts()?;
        reg.add_exchanges(&input.exchanges)?;
        reg.add_offsets(&input.offsets)?;
        reg.add_barriers(barriers)?;
        let after = reg.input_counts()?;
        let has_input = after.exchanges + after.offsets > 0;
        // Refit when anything was added, or when the newest models do not cover the stored
        // input (an earlier import killed before its fit): `refit` is a no-op otherwise.
        if has_input && (after != before || reg.current().inputs() != after) {
            reg.refit()
        } else {
            Ok(reg.current().version())
        }
    })?)
}

/// Reads and validates the bundle's topology and jobs (jobs are checked against the bundle's
/// topology, or the one already in the store).
fn read_metadata(store: &Store, bundle: &Path) -> Result<Vec<(&'static str, String)>, ImportError> {
    let read = |name: &str| -> Result<Option<(PathBuf, String)>, ImportError> {
        let path = bundle.join(name);
        if !path.is_file() {
            return Ok(None);
        }
        let text = std::fs::read_to_string(&path)
            .map_err(|e| ImportError::BadFile { file: path.clone(), reason: e.to_string() })?;
        Ok(Some((path, text)))
    };
    let mut out = Vec::new();
    let topology = match read(TOPOLOGY_FILE)? {
        Some((path, text)) => {
            let topology = Topology::from_json(&text)
                .and_then(|t| t.validate().map(|()| t))
                .map_err(|e| ImportError::BadFile { file: path, reason: e.to_string() })?;
            out.push((TOPOLOGY_FILE, text));
            Some(topology)
        }
        None => store.read_document(TOPOLOGY_FILE)?.and_then(|t| Topology::from_json(&t).ok()),
    };
    if let Some((path, text)) = read(CATALOG_FILE)? {
        MetricCatalog::builtin()
            .extend_from_toml(&text)
            .map_err(|e| ImportError::BadFile { file: path, reason: e.to_string() })?;
        out.push((CATALOG_FILE, text));
    }
    if let Some((path, text)) = read(JOBS_FILE)? {
        let jobs = parse_jobs(&text).map_err(|e| ImportError::BadFile { file: path.clone(), reason: e.to_string() })?;
        let topology = topology.as_ref().ok_or_else(|| ImportError::BadFile {
            file: path.clone(),
            reason: "jobs need a topology.json (in the bundle or already imported)".into(),
        })?;
        check_jobs(topology, &jobs).map_err(|e| ImportError::BadFile { file: path, reason: e.to_string() })?;
        out.push((JOBS_FILE, text));
    }
    Ok(out)
}

/// Imports one samples file (`.parquet` or `.csv`).
pub fn import_file(
    store: &Store,
    file: &Path,
    options: &ImportOptions,
    progress: Progress<'_>,
) -> Result<ImportReport, ImportError> {
    let started = Instant::now();
    let mut sink = RowSink::new(store, file, options);
    let is_parquet = file.extension().is_some_and(|e| e.eq_ignore_ascii_case("parquet"));
    if is_parquet {
        without_panics(file, || parquet_reader::read(file, &mut sink, progress))?;
    } else {
        csv_reader::read(file, &mut sink, progress)?;
    }
    let mut report = sink.finish()?;
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// Runs a reader of a Parquet file that is not ours. parquet-rs (and arrow-ipc, for the
/// embedded Arrow schema) can panic on corrupt bytes instead of returning an error; such a
/// panic becomes a [`ImportError::BadFile`] here, and as with any error nothing of the file
/// is imported.
pub(crate) fn without_panics<T>(file: &Path, read: impl FnOnce() -> Result<T, ImportError>) -> Result<T, ImportError> {
    lockstep_engine::datafile::catch_panic(read).unwrap_or_else(|what| {
        Err(ImportError::BadFile {
            file: file.to_path_buf(),
            reason: format!("the Parquet reader failed on corrupt data: {what}"),
        })
    })
}

/// Collects validated rows and feeds them to the bulk import.
pub(crate) struct RowSink<'a> {
    store: &'a Store,
    file: PathBuf,
    options: ImportOptions,
    import: lockstep_engine::store::BulkImport<'a>,
    resolver: SeriesResolver,
    rows: Rows,
    now: i64,
    skipped: u64,
    skipped_examples: Vec<String>,
    rounded: u64,
    rounded_example: Option<String>,
}

impl<'a> RowSink<'a> {
    fn new(store: &'a Store, file: &Path, options: &ImportOptions) -> Self {
        RowSink {
            store,
            file: file.to_path_buf(),
            options: options.clone(),
            import: store.bulk_import(),
            resolver: SeriesResolver::default(),
            rows: Rows::with_capacity(CHUNK_ROWS),
            now: store.now_ns(),
            skipped: 0,
            skipped_examples: Vec::new(),
            rounded: 0,
            rounded_example: None,
        }
    }

    /// Notes that row `row`'s integer value `exact` is stored as the nearest f64, `stored`
    /// (an integer beyond 2^53: values are f64).
    pub(crate) fn rounded(&mut self, row: u64, exact: i128, stored: f64) {
        self.rounded += 1;
        if self.rounded_example.is_none() {
            self.rounded_example = Some(format!("row {row}: {exact} is stored as {}", stored as i128));
        }
    }

    /// Sets the label columns (in the order `push` receives their values).
    pub(crate) fn set_columns(&mut self, labels: Vec<String>) -> Result<(), ImportError> {
        self.resolver.set_columns(labels).map_err(|reason| ImportError::BadFile { file: self.file.clone(), reason })
    }

    /// Handles a row failure: an error, or a skip.
    pub(crate) fn bad_row(&mut self, row: u64, reason: String) -> Result<(), ImportError> {
        if !self.options.skip_bad_rows {
            return Err(ImportError::BadRow { file: self.file.clone(), row, reason });
        }
        self.skipped += 1;
        if self.skipped_examples.len() < 5 {
            self.skipped_examples.push(format!("row {row}: {reason}"));
        }
        Ok(())
    }

    /// Adds one row. `fields` = metric, then the label values in `set_columns` order (host first).
    pub(crate) fn push(&mut self, row: u64, time: i64, value: f64, fields: &[Option<&str>]) -> Result<(), ImportError> {
        let id = match self.resolver.resolve(self.store, fields) {
            Ok(id) => id,
            Err(reason) => return self.bad_row(row, reason),
        };
        self.accept(row, id, time, value)
    }

    /// The resolver, for interning a batch's label values into codes.
    pub(crate) fn resolver(&mut self) -> &mut SeriesResolver {
        &mut self.resolver
    }

    /// Adds one row whose fields are already interned (see [`SeriesResolver::intern`]).
    pub(crate) fn push_codes(&mut self, row: u64, time: i64, value: f64, codes: &[u32]) -> Result<(), ImportError> {
        let id = match self.resolver.resolve_codes(self.store, codes) {
            Ok(id) => id,
            Err(reason) => return self.bad_row(row, reason),
        };
        self.accept(row, id, time, value)
    }

    fn accept(&mut self, row: u64, id: u32, time: i64, value: f64) -> Result<(), ImportError> {
        if let Err(e) = self.check(id, time, value) {
            return self.bad_row(row, e);
        }
        self.rows.push(id, time, value);
        if self.rows.len() >= CHUNK_ROWS {
            self.flush_chunk()?;
        }
        Ok(())
    }

    fn check(&self, id: u32, time: i64, value: f64) -> Result<(), String> {
        if self.store.sample_ok(time, value, self.now) {
            return Ok(());
        }
        if let Some(key) = self.resolver.key(id) {
            self.store.check_sample(key, time, value, self.now).map_err(|e| match e {
                lockstep_engine::Error::InvalidSample { reason, .. } => reason,
                other => other.to_string(),
            })
        } else {
            Ok(())
        }
    }

    fn flush_chunk(&mut self) -> Result<(), ImportError> {
        let rows = std::mem::replace(&mut self.rows, Rows::with_capacity(CHUNK_ROWS));
        self.import.write_rows(&rows)?;
        Ok(())
    }

    fn finish(mut self) -> Result<ImportReport, ImportError> {
        self.flush_chunk()?;
        let summary = self.import.commit()?;
        Ok(ImportReport {
            file: self.file,
            samples: summary.samples,
            duplicates: summary.samples.saturating_sub(summary.stored),
            skipped: self.skipped,
            skipped_examples: self.skipped_examples,
            rounded: (self.rounded, self.rounded_example),
            series: summary.series,
            time_span: summary.min_time.zip(summary.max_time),
            ..ImportReport::default()
        })
    }
}

#[cfg(test)]
mod codec_tests;
#[cfg(test)]
mod tests;

/// The integer a value field or cell holds exactly, when it is one beyond 2^53 that `value`
/// (its nearest f64) does not equal: what [`RowSink::rounded`] reports.
pub(crate) fn inexact_integer(exact: i128, value: f64) -> Option<i128> {
    (exact.unsigned_abs() > 1 << 53 && value as i128 != exact).then_some(exact)
}
