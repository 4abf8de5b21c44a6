//! Diagnosis: from "job X got slow" to the constrained domain, the component and the evidence.
//!
//! [`diagnose`] reads every series tied to a job (its GPUs, NIC ports, the switch ports on its
//! paths, its storage pool with that pool's servers and paths, its data loaders, collectives and
//! host CPUs) in one engine scan, places every sample on the corrected timeline with its clock
//! uncertainty, and then:
//!
//! 1. finds the **slowdown episodes** `[onset, recovery)` on the pace signal (median step time
//!    over ranks per 1 s bucket, or the median collective time without step time): segments of
//!    the engine's change-point detector at least 10 % above the healthy level that are
//!    sustained; persistent, transient or recurring; each is diagnosed against the healthy time
//!    around it (`episodes.rs`), and the main (costliest) one is the top level;
//! 2. computes, per series and episode, counter rates (wrap/reset/saturation handled by the
//!    metric catalog), a robust pre-onset baseline, the change magnitude against that baseline, the
//!    **peer outlierness** (the same metric on the other ranks/ports) and the **onset** (first
//!    sustained departure from the baseline) with its clock uncertainty;
//! 3. decomposes the step-time rise into what the ranks waited on: input (data-loader wait on
//!    all ranks), transfer (the fastest rank's collective time: the wire itself) or a straggler
//!    (all but one rank wait in the collective; the culprit has the lowest collective time),
//!    linking ranks, GPUs and hosts across exporter label conventions (`assoc.rs`);
//! 4. names the root cause inside that bottleneck by class, magnitude, peer outlierness,
//!    precedence on the corrected timeline and the causal topology; a storage slowdown whose
//!    storage path shows a fabric fault that does not start after it is a network problem;
//! 5. builds the evidence chain in corrected-time order, claiming no order finer than the
//!    clocks ([`lockstep_engine::clock::before`]).
//!
//! Verdicts are honest (`verdict/honest.rs`): `insufficient_data` with the missing signals
//! instead of "healthy", `slow_from_start` with a `--from` to try, a confidence per verdict.
//!
//! The method, scoring and JSON schema are documented in `docs/diagnosis.md`.

mod analyze;
mod assoc;
mod compare;
mod context;
mod episodes;
pub mod format;
mod load;
mod signal;
mod stats;
pub mod table;
#[cfg(test)]
mod tests;
mod verdict;

use std::sync::Arc;

use lockstep_engine::Store;
use serde::Serialize;

pub use compare::{Comparison, MetricComparison, compare};
pub use table::DiagnoseFunc;

/// Uncertainty reported when a host has no clock model (the clock's error is unknown).
pub const UNCERTAINTY_UNKNOWN: i64 = lockstep_engine::clock::UNCERTAINTY_UNKNOWN;

/// Errors of the diagnosis.
#[derive(Debug, thiserror::Error)]
pub enum DiagnoseError {
    /// The store directory has no `topology.json` or `jobs.json` (import a bundle that has them).
    #[error("store {dir} has no {file}: the diagnosis needs the topology and the jobs")]
    NoDomainModel {
        /// Store directory.
        dir: String,
        /// Missing file.
        file: &'static str,
    },
    /// The job is not in `jobs.json`.
    #[error("unknown job {job:?} (known: {known})")]
    UnknownJob {
        /// The job asked for.
        job: String,
        /// Known job names.
        known: String,
    },
    /// The window is empty or inverted.
    #[error(
        "empty diagnosis window: from {} is not before to {}; --from must be before --to, and without \
         --to the window ends at the job's end",
        utc_text(*.from),
        utc_text(*.to)
    )]
    EmptyWindow {
        /// Start (ns).
        from: i64,
        /// End (ns).
        to: i64,
    },
    /// A domain file could not be read.
    #[error("{file}: {reason}")]
    BadFile {
        /// File.
        file: String,
        /// Why.
        reason: String,
    },
    /// The engine failed.
    #[error("{0}")]
    Engine(#[from] lockstep_engine::Error),
}

/// A time in ns as RFC 3339 UTC text (as `--from`/`--to` are written), or the ns past
/// chrono's range.
fn utc_text(ns: i64) -> String {
    arrow::temporal_conversions::timestamp_ns_to_datetime(ns)
        .map_or_else(|| format!("{ns} ns"), |t| t.format("%Y-%m-%dT%H:%M:%S%.fZ").to_string())
}

impl DiagnoseError {
    /// The error's kind.
    pub fn kind(&self) -> lockstep_engine::ErrorKind {
        use lockstep_engine::ErrorKind;
        match self {
            DiagnoseError::Engine(e) => e.kind(),
            DiagnoseError::UnknownJob { .. } | DiagnoseError::NoDomainModel { .. } => ErrorKind::NotFound,
            DiagnoseError::EmptyWindow { .. } | DiagnoseError::BadFile { .. } => ErrorKind::InvalidArgument,
        }
    }
}

/// Which timeline the diagnosis uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ClockMode {
    /// Corrected reference time from the store's clock models, with their uncertainty (default).
    #[default]
    Corrected,
    /// Raw collector timestamps taken as exact (uncertainty 0). Only for showing what a naive
    /// timeline would conclude; never the right choice for a real diagnosis.
    Raw,
}

/// Options of [`diagnose`].
#[derive(Debug, Clone, Default)]
pub struct DiagnoseOptions {
    /// Window start (reference ns); default: the job's start.
    pub from: Option<i64>,
    /// Window end (reference ns, exclusive); default: the job's end, or the end of its data.
    pub to: Option<i64>,
    /// Timeline to use.
    pub clock: ClockMode,
    /// Worker threads (0 = available parallelism).
    pub threads: usize,
    /// Keep per-lane time series for the HTML report ([`Diagnosis::lanes`]).
    pub lanes: bool,
}

/// The slowdown of the job.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Slowdown {
    /// Onset of the sustained step-time rise (reference ns), `None` for a healthy job.
    pub time: Option<i64>,
    /// Clock uncertainty of `time` (ns; [`UNCERTAINTY_UNKNOWN`] without clock models).
    pub uncertainty_ns: Option<i64>,
    /// The metric (`train_step_duration_seconds`).
    pub metric: String,
    /// Median step time before the onset (s).
    pub baseline: f64,
    /// Median step time after the onset (s; equal to `baseline` when healthy).
    pub degraded: f64,
}

/// The largest rise of the pace signal (median step time, or collective time) that did not make
/// an episode: below the 10 % threshold, or too short to be sustained. A `healthy` verdict is
/// less certain the larger it is (a fault near the detection limit looks like this).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct NearMiss {
    /// Its first slot (reference ns).
    pub start: i64,
    /// Its end (reference ns; the last slot when it lasts to the end of the window).
    pub end: i64,
    /// Its level over the healthy baseline, minus one (0.06 = 6 % slower).
    pub rise: f64,
}

/// One suspect, best first in [`Episode::suspects`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Suspect {
    /// Root-cause domain of this suspect: compute, network, storage or data_loading.
    pub domain: String,
    /// Entity name (`node-03/gpu5`, `node-03/mlx5_2:1`, `leaf-2:17`, `lustre-a`, `node-03`).
    pub entity: String,
    /// Onset of its earliest changed signal (reference ns).
    pub onset: i64,
    /// Clock uncertainty of `onset` (ns).
    pub uncertainty_ns: i64,
    /// Score in [0, 1]; higher is more likely the root cause.
    pub score: f64,
    /// Human-readable evidence.
    pub evidence: Vec<String>,
    /// SQL reproducing each evidence line that comes from a series (same order as the series
    /// evidence; may be shorter than `evidence`).
    pub sql: Vec<String>,
    /// The other end of the same link (a NIC port and its switch port, or two switch ports),
    /// when both ends changed: one fault, merged into this suspect ("inspect that link").
    pub link: Option<String>,
}

/// Another job that shares the root-cause pool or port during an episode.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OtherJob {
    /// The job (as in `jobs.json`).
    pub job: String,
    /// `aggressor` (its own traffic on the shared entity rose with the slowdown: a cause, also
    /// listed as a suspect) or `victim` (it uses the entity during the episode: affected too,
    /// the blast radius).
    pub role: String,
    /// The shared pool or port.
    pub via: String,
    /// Why: the aggressor's traffic change, or what the victim shares.
    pub evidence: String,
}

/// One link of the evidence chain.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChainLink {
    /// Onset on the corrected timeline (reference ns).
    pub time: i64,
    /// Clock uncertainty of `time` (ns).
    pub uncertainty_ns: i64,
    /// Domain of the signal (compute, network, storage, data_loading, collective, training).
    pub domain: String,
    /// Entity (or the job, for job-wide aggregates).
    pub entity: String,
    /// Metric name (with ` (median over ranks)` style qualifiers for aggregates).
    pub metric: String,
    /// The change, e.g. `0 → 340/s`.
    pub change: String,
    /// Value before (baseline median).
    pub before: f64,
    /// Value after (median after the onset).
    pub after: f64,
    /// Whether this link is after the previous one beyond the clock uncertainty (false: the
    /// clocks cannot order them; the list order is then only the best estimate).
    pub after_previous: bool,
    /// SQL that shows the change.
    pub sql: String,
}

/// How the step-time rise splits into what the ranks waited on (seconds per step).
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Decomposition {
    /// Rise of the step time (degraded − baseline).
    pub step: f64,
    /// Rise of the data-loader wait, median over ranks (input-bound).
    pub input_wait: f64,
    /// Rise of the fastest rank's collective time (the transfer itself: network-bound).
    pub transfer: f64,
    /// Rise of the median rank's collective time beyond the transfer (waiting for a straggler).
    pub straggler: f64,
    /// The straggler rank (lowest collective-time rise), when there is one.
    pub straggler_rank: Option<String>,
    /// How isolated that rank is: (second-lowest rise − lowest rise) / (median rise − lowest
    /// rise); near 1 for one consistent straggler, near 0 when the late rank changes every step.
    pub straggler_isolation: f64,
    /// 90th percentile over ranks of the data-loader wait rise (s): broad but bursty input waits.
    pub input_wait_p90: f64,
}

/// About the timeline the diagnosis used.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClockInfo {
    /// Corrected or raw.
    pub mode: ClockMode,
    /// Version of the clock models used (0 = none fitted).
    pub version: u64,
    /// Hosts of the analysed series that have a clock model.
    pub hosts_with_model: usize,
    /// Hosts of the analysed series.
    pub hosts: usize,
}

/// One lane of the report timeline: a named series on the corrected timeline.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Lane {
    /// Lane group (step time, GPU activity, collective time, fabric, storage, data loader).
    pub group: String,
    /// Label of the line.
    pub label: String,
    /// Unit.
    pub unit: String,
    /// Times (reference ns).
    pub times: Vec<i64>,
    /// Values.
    pub values: Vec<f64>,
}

/// One slowdown episode `[slowdown.time, recovery)`, diagnosed against the healthy time around
/// it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Episode {
    /// The episode started with the analysed data (no healthy time before it): diagnosed
    /// against the healthy time after it.
    pub from_start: bool,
    /// The slowdown of this episode.
    pub slowdown: Slowdown,
    /// When the pace recovered (reference ns); `None` while slow until the end of the window
    /// (and for a healthy verdict).
    pub recovery: Option<i64>,
    /// What the job waits on in this episode.
    pub bottleneck: Option<String>,
    /// Where the root cause is.
    pub root_cause_domain: Option<String>,
    /// One-paragraph verdict.
    pub verdict: String,
    /// Suspects, best first.
    pub suspects: Vec<Suspect>,
    /// Evidence chain in corrected-time order.
    pub chain: Vec<ChainLink>,
    /// Step-time decomposition.
    pub decomposition: Decomposition,
    /// Confidence that the verdict is right, in [0, 1]: `rule_confidence` mapped to the
    /// probability of being right measured on the independent generator's tuning seeds (see
    /// docs/diagnosis.md).
    pub confidence: f64,
    /// The root-cause rule's own score, lowered for missing signals and hard episodes, before
    /// calibration (also the first suspect's `score`).
    pub rule_confidence: f64,
    /// For a pool or fabric root cause: the other jobs that use that pool or port during the
    /// episode (the aggressor, when the evidence names one, and the blast radius).
    pub other_jobs: Vec<String>,
    /// The same jobs with their role (aggressors first, then victims) and what they share.
    pub blast_radius: Vec<OtherJob>,
    /// One concrete next step for an operator: what to inspect, which command or SQL to run.
    pub next_action: String,
    /// A suspect of another domain that changed within three minutes of the root cause with a
    /// comparable score: two faults close together, whose order the evidence may get wrong
    /// (the confidence is capped for such verdicts).
    pub contested_by: Option<String>,
}

impl Episode {
    /// An episode (or a verdict without one) with only its slowdown known.
    pub fn new(slowdown: Slowdown) -> Episode {
        Episode {
            from_start: false,
            slowdown,
            recovery: None,
            bottleneck: None,
            root_cause_domain: None,
            verdict: String::new(),
            suspects: Vec::new(),
            chain: Vec::new(),
            decomposition: Decomposition::default(),
            confidence: 0.0,
            rule_confidence: 0.0,
            other_jobs: Vec::new(),
            blast_radius: Vec::new(),
            next_action: String::new(),
            contested_by: None,
        }
    }

    /// Onset of the episode (reference ns; `i64::MIN` without a slowdown).
    pub fn start(&self) -> i64 {
        self.slowdown.time.unwrap_or(i64::MIN)
    }
}

/// The result of [`diagnose`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Diagnosis {
    /// The job.
    pub job: String,
    /// Window start (reference ns).
    pub from: i64,
    /// Window end (reference ns).
    pub to: i64,
    /// `slowdown` (the main episode starts inside the analysed data), `slow_from_start` (the
    /// window starts inside the slowdown), `healthy`, or `insufficient_data` (see `missing`).
    pub status: String,
    /// Signals the diagnosis lacks (each with what it costs).
    pub missing: Vec<String>,
    /// A `--from` to try when the window starts inside the slowdown (reference ns).
    pub suggested_from: Option<i64>,
    /// The main (costliest) episode, flattened into the top level: `slowdown`, `recovery`,
    /// `bottleneck`, `root_cause_domain`, `verdict`, `suspects`, `chain`, `decomposition`,
    /// `confidence` (a healthy or insufficient verdict has no slowdown time and no suspects).
    /// The fields read directly on the diagnosis (`d.verdict`).
    #[serde(flatten)]
    pub main: Episode,
    /// Every slowdown episode of the window in time order; the top level repeats the main
    /// (costliest) one.
    pub episodes: Vec<Episode>,
    /// The largest rise of the pace signal outside every episode (`None` without a baseline).
    pub near_miss: Option<NearMiss>,
    /// Clock models used.
    pub clock: ClockInfo,
    /// Series analysed.
    pub series: usize,
    /// Samples read.
    pub samples: usize,
    /// Wall time of the diagnosis (ms).
    pub elapsed_ms: u64,
    /// Report lanes (only with [`DiagnoseOptions::lanes`]; not serialised).
    #[serde(skip)]
    pub lanes: Vec<Lane>,
}

impl std::ops::Deref for Diagnosis {
    type Target = Episode;

    fn deref(&self) -> &Episode {
        &self.main
    }
}

impl std::ops::DerefMut for Diagnosis {
    fn deref_mut(&mut self) -> &mut Episode {
        &mut self.main
    }
}

impl Diagnosis {
    /// The diagnosis as one JSON object (the CLI's `--format json`).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }
}

/// Diagnoses `job` over the window in `opts` (see the module docs).
pub fn diagnose(store: &Store, job: &str, opts: &DiagnoseOptions) -> Result<Diagnosis, DiagnoseError> {
    let started = std::time::Instant::now();
    let ctx = context::JobContext::load(store, job, opts)?;
    let clocks = match opts.clock {
        ClockMode::Corrected => Some(store.clock_models()?),
        ClockMode::Raw => None,
    };
    tracing::debug!(ms = started.elapsed().as_secs_f64() * 1e3, series = ctx.series.len(), "diagnose: context");
    let data = load::load(store, &ctx, clocks.as_ref(), opts)?;
    let mut diagnosis = verdict::decide(&ctx, &data, opts);
    tracing::debug!(ms = started.elapsed().as_secs_f64() * 1e3, "diagnose: verdict");
    diagnosis.elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    Ok(diagnosis)
}

/// [`diagnose`] over a shared store (convenience for the SQL table function).
pub fn diagnose_arc(store: &Arc<Store>, job: &str, opts: &DiagnoseOptions) -> Result<Diagnosis, DiagnoseError> {
    diagnose(store.as_ref(), job, opts)
}
