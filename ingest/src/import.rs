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
use lockstep_engine::store::{DOCUMENTS, ImportRest};
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
///
/// The bundle is imported as a whole: its documents and clock input are staged in the store
/// and named by the manifest update that publishes its samples (`lockstep_engine`'s
/// `store/pending.rs`), so a crash after that update leaves them for the next writer
/// ([`complete_pending_import`]), and a crash before it leaves nothing.
pub fn import_bundle(
    store: &Store,
    bundle: &Path,
    options: &ImportOptions,
    progress: Progress<'_>,
) -> Result<ImportReport, ImportError> {
    // An earlier import's rest first (the manifest names one at a time), and before the
    // bundle's jobs are checked against the store's topology, which it may hold.
    complete_pending_import(store, true)?;
    let file = samples_file(bundle);
    let metadata = read_metadata(store, bundle)?;
    let clock_input = clock::read_clock_input(bundle)?;
    let versions = metadata
        .iter()
        .map(|(name, _)| Ok(store.document_versions(name)?.last().copied().unwrap_or(0)))
        .collect::<Result<Vec<u64>, ImportError>>()?;
    let rest = ImportRest {
        bundle: bundle.display().to_string(),
        documents: metadata.into_iter().map(|(name, text)| (name.to_string(), text)).collect(),
        versions,
        exchanges: clock_input.exchanges,
        offsets: clock_input.offsets,
    };
    // Everything about the rest that can be refused is refused now, before the samples commit:
    // after it, the rest must store.
    store.check_clock_input(&rest.exchanges, &rest.offsets)?;
    let staged = if rest.is_empty() { None } else { Some(store.stage_import_rest(&rest)?) };
    let mut report = match file {
        // On an error the staged rest stays: a manifest save that failed after its rename may
        // still name it. The next writer's open removes it if no manifest does.
        Ok(file) => import_samples(store, &file, options, progress, staged.as_deref())?,
        // Clock sync that arrives later (a sync-only bundle) improves the correction of data
        // already imported; a bundle of only `topology.json`/`jobs.json` describes the
        // cluster and its jobs for data that arrives (or arrived) another way. It is committed
        // as a whole too: named by a manifest update of its own before any part of it is stored
        // (a topology stored without the jobs that go with it broke every query of the jobs,
        // QA pass 21).
        Err(e @ ImportError::NoSamples { .. }) => match &staged {
            Some(id) => {
                store.name_import_rest(id)?;
                ImportReport::default()
            }
            None => return Err(e),
        },
        Err(e) => return Err(e),
    };
    failpoint("import-committed");
    store_rest(store, &rest, false, &mut report)?;
    if let Some(id) = staged {
        store.finish_import_rest(&id)?;
    }
    Ok(report)
}

/// In debug builds (the tests'), ends the process as a kill would where the environment's
/// `LOCKSTEP_FAILPOINT` names point `name`: `import-committed` is just after an import's commit
/// point, before its documents and clock input are stored.
fn failpoint(name: &str) {
    if cfg!(debug_assertions) && std::env::var("LOCKSTEP_FAILPOINT").is_ok_and(|v| v == name) {
        std::process::abort();
    }
}

/// Stores the rest of an import whose samples a writer committed before it stopped (see
/// [`import_bundle`]): its documents and clock input. Returns the bundle it came from, or
/// `None` when no rest was pending. Every writer calls it on opening a store.
///
/// A staged rest that does not read (a damaged file), or that the store refuses (an error that
/// storing it again would repeat, not one of I/O), is an error, or with `give_up` (an import,
/// which could otherwise never commit again) logged and dropped: `lockstep check` said to
/// import that bundle again.
pub fn complete_pending_import(store: &Store, give_up: bool) -> Result<Option<String>, ImportError> {
    let Some(id) = store.pending_import()? else {
        return Ok(None);
    };
    // With `give_up`, an error that would come again (the rest does not read, or the store
    // refuses it) drops the rest.
    let drop_it = |e: ImportError| {
        tracing::error!(error = %e, "the staged topology, jobs and clock input of an earlier import cannot be \
            stored and are dropped: import that bundle again");
        store.finish_import_rest(&id).map(|()| None).map_err(ImportError::from)
    };
    let rest = match store.read_import_rest(&id) {
        Ok(rest) => rest,
        Err(e) if give_up => return drop_it(e.into()),
        Err(e) => return Err(e.into()),
    };
    match store_rest(store, &rest, true, &mut ImportReport::default()) {
        Ok(()) => {
            store.finish_import_rest(&id)?;
            Ok(Some(rest.bundle))
        }
        Err(e) if give_up && e.kind() == lockstep_engine::ErrorKind::InvalidArgument => drop_it(e),
        Err(e) => Err(e),
    }
}

/// Stores an import's documents, then its clock input with the barriers of the store's
/// `collective_end` samples, refitting the clock models. `again`: the rest may have been
/// stored in part before, and documents changed since: a document with a version newer than
/// the one the rest was staged over is not written (it is the rest's, or newer).
fn store_rest(store: &Store, rest: &ImportRest, again: bool, report: &mut ImportReport) -> Result<(), ImportError> {
    for (i, (name, text)) in rest.documents.iter().enumerate() {
        let Some(name) = DOCUMENTS.into_iter().find(|d| d == name) else {
            return Err(lockstep_engine::Error::Internal { reason: format!("{name:?} is not a store document") }.into());
        };
        let newest = store.document_versions(name)?.last().copied().unwrap_or(0);
        let version = match rest.versions.get(i) {
            Some(&staged_over) if again && newest != staged_over => newest,
            _ => store.write_document(name, text)?,
        };
        report.documents.push((name, version));
    }
    let barriers = clock::collective_barriers(store)?;
    report.clock_exchanges = rest.exchanges.len() as u64;
    report.clock_offsets = rest.offsets.len() as u64;
    report.clock_barriers = barriers.len() as u64;
    report.clock_version = add_clock_input(store, &rest.exchanges, &rest.offsets, &barriers)?;
    Ok(())
}

/// Adds clock input (durably) and refits the clock models when anything was added or there
/// is input the newest fitted version does not cover. Returns the version in effect.
pub fn add_clock_input(
    store: &Store,
    exchanges: &[lockstep_engine::clock::SyncExchange],
    offsets: &[lockstep_engine::clock::OffsetObservation],
    barriers: &[lockstep_engine::clock::BarrierEvent],
) -> Result<u64, ImportError> {
    store.check_clock_input(exchanges, offsets)?;
    Ok(store.with_clocks(|reg| {
        let before = reg.input_counts()?;
        reg.add_exchanges(exchanges)?;
        reg.add_offsets(offsets)?;
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
    // A new topology without new jobs must still hold the stored jobs' nodes, as a topology
    // sent to serve's API must (QA pass 21: one that dropped them made every query of the jobs
    // fail, and `lockstep check` said nothing).
    let new_topology = !out.is_empty();
    if let (Some(topology), true, None) = (&topology, new_topology, read(JOBS_FILE)?)
        && let Some(stored) = store.read_document(JOBS_FILE)?
    {
        let jobs = parse_jobs(&stored).map_err(|e| ImportError::BadFile {
            file: bundle.join(TOPOLOGY_FILE),
            reason: format!("the store's jobs.json does not parse ({e})"),
        })?;
        check_jobs(topology, &jobs).map_err(|e| ImportError::BadFile {
            file: bundle.join(TOPOLOGY_FILE),
            reason: format!(
                "{e}: the new topology must still hold every stored job's nodes (import a jobs.json with it)"
            ),
        })?;
    }
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
    import_samples(store, file, options, progress, None)
}

/// [`import_file`], its commit naming the import's staged rest `rest` (see [`import_bundle`]).
fn import_samples(
    store: &Store,
    file: &Path,
    options: &ImportOptions,
    progress: Progress<'_>,
    rest: Option<&str>,
) -> Result<ImportReport, ImportError> {
    let started = Instant::now();
    let mut sink = RowSink::new(store, file, options, rest);
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
    /// The import's staged rest, named by the commit (see [`import_bundle`]).
    rest: Option<String>,
}

impl<'a> RowSink<'a> {
    fn new(store: &'a Store, file: &Path, options: &ImportOptions, rest: Option<&str>) -> Self {
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
            rest: rest.map(str::to_owned),
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
        let summary = self.import.commit_with_rest(self.rest.as_deref())?;
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
