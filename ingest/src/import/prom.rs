//! Importing scrapes in the Prometheus text exposition format or OpenMetrics
//! (`lockstep import --host node-01 scrape-*.prom`): what `curl node:9100/metrics > file`
//! saved, or what `promtool`/an exporter dumped with timestamps.
//!
//! Each file is one scrape of one target, parsed by [`crate::prom_text`]. A sample's time is its
//! own timestamp when it has one (milliseconds; OpenMetrics, recognised by its closing `# EOF`:
//! seconds), otherwise the scrape time: [`PromImportOptions::scrape_time_ns`] when given, else
//! the file's modification time (when `curl` wrote it). Samples without a `host` label get
//! [`PromImportOptions::host`] (the scrape target; exporters do not label themselves). All
//! files go into one all-or-nothing bulk import: a bad line in any file imports nothing, and
//! the error names the file and line.

use std::path::{Path, PathBuf};
use std::time::{Instant, UNIX_EPOCH};

use lockstep_engine::Store;

use super::{ImportError, ImportReport};
use crate::prom_text::{ParseOptions, parse};

/// Settings of a Prometheus text import.
#[derive(Debug, Clone, Default)]
pub struct PromImportOptions {
    /// Host of samples without a `host` label (the scrape target).
    pub host: Option<String>,
    /// Time (ns since the epoch, the target's clock) of samples without a timestamp; `None`:
    /// each file's modification time.
    pub scrape_time_ns: Option<i64>,
}

/// Imports Prometheus text / OpenMetrics scrape files into `store`, all or nothing.
pub fn import_prom_files(
    store: &Store,
    files: &[PathBuf],
    options: &PromImportOptions,
) -> Result<ImportReport, ImportError> {
    let started = Instant::now();
    let mut import = store.bulk_import();
    let (mut skipped, mut skipped_examples) = (0u64, Vec::new());
    for file in files {
        let bad = |reason: String| ImportError::BadFile { file: file.clone(), reason };
        let text = std::fs::read_to_string(file).map_err(|e| bad(e.to_string()))?;
        let time = match options.scrape_time_ns {
            Some(t) => t,
            None => modified_ns(file).map_err(bad)?,
        };
        let parse_options = ParseOptions {
            default_host: options.host.as_deref(),
            default_time_ns: time,
            openmetrics: is_openmetrics(&text),
        };
        let exposition = parse(&text, &parse_options).map_err(|e| match e {
            crate::prom_text::PromTextError::MissingHost { .. } => {
                bad(format!("{e}; give the scrape target with --host"))
            }
            e => bad(e.to_string()),
        })?;
        let mut batch = exposition.batch;
        if !store.config().allow_non_finite {
            skipped += drop_non_finite(&mut batch, file, &mut skipped_examples);
        }
        import.write(&batch).map_err(|e| bad(e.to_string()))?;
    }
    let summary = import.commit()?;
    Ok(ImportReport {
        file: files.first().cloned().unwrap_or_default(),
        samples: summary.samples,
        duplicates: summary.samples.saturating_sub(summary.stored),
        series: summary.series,
        time_span: summary.min_time.zip(summary.max_time),
        seconds: started.elapsed().as_secs_f64(),
        skipped,
        skipped_examples,
        ..ImportReport::default()
    })
}

/// Removes NaN and ±inf samples from `batch` (a store that does not keep them would refuse
/// the whole import): an exposition's NaN is an empty window of a summary's quantile (what the
/// Go client exposes before the first observation) or a gauge without a value, which remote
/// write drops too. Returns how many were removed; the first few series go to `examples`.
fn drop_non_finite(batch: &mut lockstep_engine::WriteBatch, file: &Path, examples: &mut Vec<String>) -> u64 {
    let mut dropped = 0u64;
    for (key, samples) in &mut batch.series {
        let gone = samples.values.iter().filter(|v| !v.is_finite()).count();
        if gone == 0 {
            continue;
        }
        (samples.timestamps, samples.values) = samples
            .timestamps
            .iter()
            .zip(&samples.values)
            .filter(|(_, v)| v.is_finite())
            .map(|(t, v)| (*t, *v))
            .unzip();
        if examples.len() < 5 {
            examples.push(format!("{}: {key}: {gone} non-finite value(s) (NaN or ±inf) not stored", file.display()));
        }
        dropped += gone as u64;
    }
    batch.series.retain(|(_, s)| !s.values.is_empty());
    dropped
}

/// OpenMetrics expositions end with `# EOF`.
fn is_openmetrics(text: &str) -> bool {
    text.lines().rev().map(str::trim).find(|l| !l.is_empty()) == Some("# EOF")
}

fn modified_ns(file: &Path) -> Result<i64, String> {
    let modified = std::fs::metadata(file).and_then(|m| m.modified()).map_err(|e| e.to_string())?;
    let since = modified.duration_since(UNIX_EPOCH).map_err(|_| "modification time before 1970".to_string())?;
    i64::try_from(since.as_nanos()).map_err(|_| "modification time out of range".to_string())
}
