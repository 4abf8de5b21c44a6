//! Postmortem before/after: what changed between two windows of a job (e.g. before and after a
//! fix): medians and p99 of step time, collective time, data-loader wait, storage latency and
//! GPU activity, and the job's fabric error rates.

use lockstep_engine::Store;
use lockstep_engine::metrics::{MetricClass, names};
use serde::Serialize;

use super::context::{JobContext, SeriesMeta};
use super::load::{derive, scan};
use super::stats::{mean, quantile};
use super::{ClockMode, DiagnoseError, DiagnoseOptions};
use crate::samples::read::SeriesClocks;

/// One compared quantity.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MetricComparison {
    /// What is compared, e.g. `train_step_duration_seconds (all ranks)`.
    pub metric: String,
    /// Unit.
    pub unit: String,
    /// Median in the first window.
    pub before_p50: f64,
    /// 99th percentile in the first window.
    pub before_p99: f64,
    /// Median in the second window.
    pub after_p50: f64,
    /// 99th percentile in the second window.
    pub after_p99: f64,
    /// Relative change of the median, in percent (NaN when the first median is 0).
    pub change_pct: f64,
}

/// The result of [`compare`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// The job.
    pub job: String,
    /// First window `[from, to)` (reference ns).
    pub before: (i64, i64),
    /// Second window.
    pub after: (i64, i64),
    /// Compared quantities.
    pub metrics: Vec<MetricComparison>,
    /// Samples of the compared series in the first and the second window; 0 means the window
    /// holds no data of the job, and its columns are NaN (see [`Comparison::warnings`]).
    pub samples: (usize, usize),
}

/// What a quantity pools.
struct Quantity {
    name: &'static str,
    unit: &'static str,
    pick: fn(&SeriesMeta) -> bool,
    /// Sum the per-series means (rates of a set of counters) instead of pooling samples.
    sum_of_means: bool,
}

fn is_error_counter(m: &SeriesMeta) -> bool {
    m.is_counter()
        && matches!(
            m.kind,
            lockstep_engine::metrics::EntityKind::NicPort | lockstep_engine::metrics::EntityKind::SwitchPort
        )
        && m.info.as_ref().is_some_and(|i| {
            matches!(
                i.class,
                MetricClass::PhysicalErrors | MetricClass::LinkFlaps | MetricClass::Drops | MetricClass::LossRetransmit
            )
        })
}

const QUANTITIES: [Quantity; 7] = [
    Quantity {
        name: "train_step_duration_seconds (all ranks)",
        unit: "s",
        pick: |m| m.metric() == names::STEP_TIME,
        sum_of_means: false,
    },
    Quantity {
        name: "nccl_collective_exec_time_microseconds (all ranks)",
        unit: "µs",
        pick: |m| m.metric() == names::COLLECTIVE_EXEC_TIME,
        sum_of_means: false,
    },
    Quantity {
        name: "dataloader_wait_seconds (all ranks)",
        unit: "s",
        pick: |m| m.metric() == names::DATALOADER_WAIT,
        sum_of_means: false,
    },
    Quantity {
        name: "storage_read_latency_seconds p99 (pool)",
        unit: "s",
        pick: |m| m.metric() == names::STORAGE_READ_LATENCY && m.label("quantile") == Some("0.99"),
        sum_of_means: false,
    },
    Quantity {
        name: "DCGM_FI_PROF_SM_ACTIVE (all GPUs)",
        unit: "ratio",
        pick: |m| m.metric() == names::SM_ACTIVE,
        sum_of_means: false,
    },
    Quantity {
        name: "fabric error, drop and retransmit rate (job paths, total)",
        unit: "/s",
        pick: is_error_counter,
        sum_of_means: true,
    },
    Quantity {
        name: "node_pressure_cpu_waiting_seconds rate (job nodes)",
        unit: "s/s",
        pick: |m| m.metric() == names::CPU_PRESSURE_WAITING && m.relation == lockstep_engine::metrics::Domain::Compute,
        sum_of_means: false,
    },
];

/// Compares two windows of `job` (reference ns, `[from, to)` each) on the corrected timeline.
pub fn compare(store: &Store, job: &str, before: (i64, i64), after: (i64, i64)) -> Result<Comparison, DiagnoseError> {
    for (from, to) in [before, after] {
        if to <= from {
            return Err(DiagnoseError::EmptyWindow { from, to });
        }
    }
    let lo = before.0.min(after.0);
    let hi = before.1.max(after.1);
    let opts = DiagnoseOptions { from: Some(lo), to: Some(hi), clock: ClockMode::Corrected, ..Default::default() };
    let ctx = JobContext::load(store, job, &opts)?;
    let models = SeriesClocks::for_store(store, store.clock_models()?)?;
    let picked: Vec<(usize, &SeriesMeta)> =
        ctx.series.iter().filter(|m| QUANTITIES.iter().any(|q| (q.pick)(m))).enumerate().collect();
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let parts = scan(store, &models, (lo, hi), picked.iter().map(|(_, m)| m.id), threads)?;
    let mut metrics = Vec::new();
    let mut scratch = Vec::new();
    let mut samples = [0usize; 2];
    for q in &QUANTITIES {
        let mut stats = [(f64::NAN, f64::NAN); 2];
        let mut any = false;
        for (k, (from, to)) in [before, after].into_iter().enumerate() {
            let mut pooled: Vec<f64> = Vec::new();
            let mut sum = 0.0;
            for (_, m) in picked.iter().filter(|(_, m)| (q.pick)(m)) {
                let s = derive(m, &parts, models.model(m.id), from, to);
                samples[k] += s.v.len();
                if q.sum_of_means {
                    let mu = mean(s.v.iter().copied());
                    if mu.is_finite() {
                        sum += mu;
                        any = true;
                    }
                } else {
                    any |= !s.v.is_empty();
                    pooled.extend(s.v);
                }
            }
            stats[k] = if q.sum_of_means {
                (sum, sum)
            } else {
                (
                    quantile(pooled.iter().copied(), 0.5, &mut scratch),
                    quantile(pooled.iter().copied(), 0.99, &mut scratch),
                )
            };
        }
        if !any {
            continue;
        }
        let change_pct = if stats[0].0 != 0.0 { (stats[1].0 / stats[0].0 - 1.0) * 100.0 } else { f64::NAN };
        metrics.push(MetricComparison {
            metric: q.name.to_string(),
            unit: q.unit.to_string(),
            before_p50: stats[0].0,
            before_p99: stats[0].1,
            after_p50: stats[1].0,
            after_p99: stats[1].1,
            change_pct,
        });
    }
    Ok(Comparison { job: job.to_string(), before, after, metrics, samples: (samples[0], samples[1]) })
}

impl Comparison {
    /// One warning per window that holds no samples of the job (a window outside the data,
    /// e.g. a mistyped date): its columns are NaN.
    pub fn warnings(&self) -> Vec<String> {
        let t = super::format::fmt_rfc3339;
        [("before", self.before, self.samples.0), ("after", self.after, self.samples.1)]
            .into_iter()
            .filter(|(_, _, n)| *n == 0)
            .map(|(name, (from, to), _)| {
                format!(
                    "the {name} window [{} .. {}) holds no samples of job {}, so its columns are NaN; \
                     choose windows inside the job's data (SELECT min(time), max(time) FROM samples)",
                    t(from),
                    t(to),
                    self.job
                )
            })
            .collect()
    }

    /// The comparison as JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }
}
