//! OpenTelemetry OTLP `MetricsService/Export` → Lockstep series (mapping table in
//! `docs/ingest-server.md`).
//!
//! * resource `host.name` (else `service.instance.id`) → label `host`; without either, every
//!   data point of that resource is rejected; `service.name` → label `service`;
//! * data point attributes → labels (keys sanitised to `[A-Za-z0-9_]`, reserved keys and
//!   `host` prefixed with `otel_`); metric names sanitised to `[A-Za-z0-9_:]`;
//! * gauge and cumulative sum points → one sample each; delta sums are accumulated per series
//!   into a cumulative value held in memory (restarting at 0 after a server restart, which
//!   reads as a counter reset);
//! * histograms → `<name>_bucket{le}` cumulative counts (Prometheus style, `le="+Inf"` = count),
//!   `<name>_sum`, `<name>_count`, `<name>_min`, `<name>_max`;
//! * exponential histograms → the same series, with `le` bounds computed from scale and offset;
//! * summaries → `<name>{quantile}`, `<name>_sum`, `<name>_count`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use lockstep_engine::model::{Name, RESERVED_LABELS};
use lockstep_engine::{Labels, SeriesKey, Store, WriteBatch};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsPartialSuccess, ExportMetricsServiceRequest, ExportMetricsServiceResponse, metrics_service_server,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, ExponentialHistogramDataPoint, HistogramDataPoint, metric, number_data_point,
};
use tonic::{Request, Response, Status};

use super::convert::reason_code;
use super::status::internal_status;
use super::write::Shared;

/// Most bucket series one histogram data point may produce.
const MAX_BUCKETS: usize = 4096;
/// Most distinct messages quoted in a partial-success `error_message`.
const MAX_MESSAGES: usize = 5;
/// Bit of `flags` meaning "no recorded value" (such points are skipped).
const FLAG_NO_RECORDED_VALUE: u32 = 1;

/// Delta-to-cumulative accumulators, keyed by output series: each series' running value and
/// the time it was last written at.
#[derive(Debug, Default)]
pub(crate) struct DeltaState {
    sums: HashMap<SeriesKey, Acc>,
}

/// A running value and the newest time it was written at.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Acc {
    value: f64,
    time: i64,
}

/// How a delta sample folds into its running value: counts and sums add up; a delta
/// histogram's `_min` and `_max` are the interval's extremes, whose running value is the least
/// and the greatest seen (what a cumulative histogram's would be), never their sum.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Fold {
    Add,
    Min,
    Max,
}

/// What an export changed in the accumulators, to take back when its write fails (the store
/// refused it: the client sends the same deltas again, which must not count twice).
#[derive(Debug)]
pub(crate) struct Undo {
    key: SeriesKey,
    /// The entry before (None: the export created it).
    before: Option<Acc>,
    /// The entry it left.
    after: Acc,
}

impl DeltaState {
    /// Folds `v` at `time` into `key`'s running value; returns the sample to write: the new
    /// running value at `time`, or at the series' newest time when `time` is older (a delta
    /// that arrives late — a retry, another of the Collector's senders — is added where the
    /// series stands, so the stored running value never goes down).
    fn fold(&mut self, key: &SeriesKey, time: i64, now: i64, v: f64, fold: Fold, undo: &mut Vec<Undo>) -> (i64, f64) {
        let before = self.sums.get(key).copied();
        let after = match before {
            None => Acc { value: v, time },
            Some(acc) => Acc {
                value: match fold {
                    Fold::Add => acc.value + v,
                    Fold::Min => acc.value.min(v),
                    Fold::Max => acc.value.max(v),
                },
                // A newest time ahead of the server's clock (a point stamped up to a day ahead
                // is accepted) does not hold every later delta there.
                time: if acc.time > now { time } else { acc.time.max(time) },
            },
        };
        self.sums.insert(key.clone(), after);
        undo.push(Undo { key: key.clone(), before, after });
        (after.time, after.value)
    }

    /// Takes back what a failed export changed where nobody changed it since. An entry another
    /// export moved on from keeps this one's addition too: that export already wrote a total
    /// holding it, and a lower total after it would read as a counter reset (a retry then
    /// counts the delta twice, as a retry of a written export does).
    pub(crate) fn rollback(&mut self, undo: Vec<Undo>) {
        for u in undo.into_iter().rev() {
            match self.sums.get_mut(&u.key) {
                Some(now) if *now == u.after => match u.before {
                    Some(before) => *now = before,
                    None => {
                        self.sums.remove(&u.key);
                    }
                },
                _ => {}
            }
        }
    }
}

/// Samples produced by one data point (all share its timestamp).
struct Point {
    time: i64,
    delta: bool,
    /// The histogram's name, whose `_min` and `_max` fold as extremes.
    histogram: Option<Name>,
    samples: Vec<(SeriesKey, f64)>,
}

/// The outcome of converting one export.
#[derive(Debug, Default)]
pub(crate) struct Converted {
    pub(crate) batch: WriteBatch,
    pub(crate) rejected_points: u64,
    pub(crate) by_reason: Vec<(&'static str, u64)>,
    messages: Vec<String>,
    more_messages: u64,
    /// What the export changed in the delta accumulators.
    pub(crate) undo: Vec<Undo>,
}

impl Converted {
    fn reject(&mut self, reason: &'static str, points: u64, message: impl FnOnce() -> String) {
        if points == 0 {
            return;
        }
        self.rejected_points += points;
        match self.by_reason.iter_mut().find(|(k, _)| *k == reason) {
            Some((_, n)) => *n += points,
            None => self.by_reason.push((reason, points)),
        }
        if self.messages.len() < MAX_MESSAGES {
            let m = message();
            if !self.messages.contains(&m) {
                self.messages.push(m);
            }
        } else {
            self.more_messages += 1;
        }
    }

    pub(crate) fn error_message(&self) -> String {
        let mut m = format!("{} data points rejected: {}", self.rejected_points, self.messages.join("; "));
        if self.more_messages > 0 {
            m.push_str(&format!(" (and {} more)", self.more_messages));
        }
        m
    }
}

/// Sanitises a metric name to letters and digits of any script, `_` and `:`, not starting
/// with a digit. Letters outside ASCII are kept: turned into `_`, every name of as many
/// Cyrillic (or Greek, CJK, …) letters became the same series (`тест` and `проб`: `____`).
fn metric_name(name: &str) -> String {
    let mut s: String =
        name.chars().map(|c| if c.is_alphanumeric() || c == '_' || c == ':' { c } else { '_' }).collect();
    if s.starts_with(|c: char| c.is_ascii_digit()) {
        s.insert(0, '_');
    }
    s
}

/// Sanitises an attribute key to a label key (letters and digits of any script and `_`, as
/// [`metric_name`]); reserved keys and `host` get an `otel_` prefix.
fn label_key(key: &str) -> Name {
    let clean = |c: char| c.is_alphanumeric() || c == '_';
    let prefixed = |s: &str| s == "host" || s == "le" || s == "quantile" || RESERVED_LABELS.contains(&s);
    // The usual key (`gpu`, `service_name`) is taken as it is: one allocation.
    if key.chars().all(clean) && !key.starts_with(|c: char| c.is_ascii_digit()) && !prefixed(key) {
        return Name::from(key);
    }
    let mut s: String = key.chars().map(|c| if clean(c) { c } else { '_' }).collect();
    if s.starts_with(|c: char| c.is_ascii_digit()) {
        s.insert(0, '_');
    }
    if prefixed(&s) {
        s.insert_str(0, "otel_");
    }
    s.into()
}

/// [`any_to_string`] as a [`Name`], a string value without the intermediate `String`.
fn any_to_name(v: &AnyValue) -> Name {
    match &v.value {
        Some(any_value::Value::StringValue(s)) => Name::from(s.as_str()),
        _ => any_to_string(v).into(),
    }
}

/// Renders an attribute value as a label value.
fn any_to_string(v: &AnyValue) -> String {
    match &v.value {
        None => String::new(),
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        Some(any_value::Value::BytesValue(b)) => b.iter().map(|x| format!("{x:02x}")).collect(),
        Some(any_value::Value::ArrayValue(a)) => {
            format!("[{}]", a.values.iter().map(any_to_string).collect::<Vec<_>>().join(","))
        }
        Some(any_value::Value::KvlistValue(l)) => format!(
            "{{{}}}",
            l.values
                .iter()
                .map(|kv| format!("{}={}", kv.key, kv.value.as_ref().map(any_to_string).unwrap_or_default()))
                .collect::<Vec<_>>()
                .join(",")
        ),
        Some(any_value::Value::StringValueStrindex(i)) => i.to_string(),
    }
}

fn attr<'a>(attrs: &'a [KeyValue], key: &str) -> Option<String> {
    attrs
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv: &'a KeyValue| kv.value.as_ref())
        .map(any_to_string)
        .filter(|s| !s.is_empty())
}

/// The resource labels plus a data point's attributes (an attribute overrides a resource label
/// of the same key). Collected in one sort, so that any number of attributes in any order
/// costs O(n log n); `SeriesKey::validate` then refuses more than `MAX_LABELS`. Two attributes
/// whose keys sanitise to the same label (`gpu.id` and `gpu_id`) are an error, not a silent
/// choice of one value.
fn labels(base: &Labels, attrs: &[KeyValue]) -> Result<Labels, (&'static str, String)> {
    let mut point: Vec<(Name, &str, Name)> = attrs
        .iter()
        .filter_map(|kv| {
            let key = label_key(&kv.key);
            let value = kv.value.as_ref().map(any_to_name).unwrap_or_default();
            (!key.is_empty() && !value.is_empty()).then_some((key, kv.key.as_str(), value))
        })
        .collect();
    point.sort_by(|a, b| a.0.cmp(&b.0));
    if let Some(w) = point.windows(2).find(|w| w[0].0 == w[1].0) {
        let cut = |s: &str| s.chars().take(64).collect::<String>();
        return Err((
            "label_collision",
            format!(
                "attributes {:?} and {:?} both map to label {:?}; rename one",
                cut(w[0].1),
                cut(w[1].1),
                cut(&w[0].0)
            ),
        ));
    }
    Ok(base.iter().map(|(k, v)| (k.clone(), v.clone())).chain(point.into_iter().map(|(k, _, v)| (k, v))).collect())
}

fn with(labels: &Labels, k: &str, v: String) -> Labels {
    let mut l = labels.clone();
    l.insert(k.to_string(), v);
    l
}

fn key(metric: impl Into<Name>, labels: Labels) -> SeriesKey {
    SeriesKey { metric: metric.into(), labels }
}

/// `le` label value of a bucket bound (`+Inf` for the last bucket).
fn le(bound: f64) -> String {
    if bound == f64::INFINITY { "+Inf".to_string() } else { bound.to_string() }
}

fn histogram(name: &str, l: &Labels, p: &HistogramDataPoint) -> Result<Vec<(SeriesKey, f64)>, String> {
    let bounds = &p.explicit_bounds;
    if !p.bucket_counts.is_empty() && p.bucket_counts.len() != bounds.len() + 1 {
        return Err(format!(
            "histogram {name}: {} bucket_counts for {} explicit_bounds (want bounds + 1)",
            p.bucket_counts.len(),
            bounds.len()
        ));
    }
    if bounds.len() >= MAX_BUCKETS {
        return Err(format!("histogram {name}: {} buckets, limit {MAX_BUCKETS}", bounds.len() + 1));
    }
    if bounds.iter().any(|b| !b.is_finite()) || bounds.windows(2).any(|w| w[0] >= w[1]) {
        return Err(format!("histogram {name}: explicit_bounds must be finite and strictly increasing"));
    }
    let mut out = Vec::with_capacity(p.bucket_counts.len() + 4);
    let bucket = Name::from(format!("{name}_bucket"));
    let mut cum = 0u64;
    for (i, c) in p.bucket_counts.iter().enumerate() {
        cum = cum.saturating_add(*c);
        let bound = bounds.get(i).copied().unwrap_or(f64::INFINITY);
        out.push((key(bucket.clone(), with(l, "le", le(bound))), cum as f64));
    }
    if p.bucket_counts.is_empty() {
        out.push((key(bucket, with(l, "le", le(f64::INFINITY))), p.count as f64));
    }
    summary_parts(name, l, p.count, p.sum, p.min, p.max, &mut out);
    Ok(out)
}

fn summary_parts(
    name: &str,
    l: &Labels,
    count: u64,
    sum: Option<f64>,
    min: Option<f64>,
    max: Option<f64>,
    out: &mut Vec<(SeriesKey, f64)>,
) {
    out.push((key(format!("{name}_count"), l.clone()), count as f64));
    for (suffix, v) in [("_sum", sum), ("_min", min), ("_max", max)] {
        if let Some(v) = v {
            out.push((key(format!("{name}{suffix}"), l.clone()), v));
        }
    }
}

/// `base^index` with `base = 2^(2^-scale)`: the lower bound of exponential bucket `index`
/// (and the upper bound of bucket `index - 1`).
fn exp_bound(index: i64, scale: i32) -> f64 {
    ((index as f64) * (-(scale as f64)).exp2()).exp2()
}

pub(crate) fn exp_histogram(
    name: &str,
    l: &Labels,
    p: &ExponentialHistogramDataPoint,
) -> Result<Vec<(SeriesKey, f64)>, String> {
    if !(-10..=20).contains(&p.scale) {
        return Err(format!("exponential histogram {name}: scale {} outside [-10, 20]", p.scale));
    }
    let empty = Vec::new();
    let (pos_off, pos) = p.positive.as_ref().map(|b| (b.offset, &b.bucket_counts)).unwrap_or((0, &empty));
    let (neg_off, neg) = p.negative.as_ref().map(|b| (b.offset, &b.bucket_counts)).unwrap_or((0, &empty));
    if pos.len() + neg.len() >= MAX_BUCKETS {
        return Err(format!("exponential histogram {name}: {} buckets, limit {MAX_BUCKETS}", pos.len() + neg.len()));
    }
    if !(p.zero_threshold >= 0.0 && p.zero_threshold.is_finite()) {
        return Err(format!("exponential histogram {name}: zero_threshold {} is invalid", p.zero_threshold));
    }
    // Every bound must be finite and the bounds strictly increasing: at extreme offsets
    // `base^index` overflows to infinity or underflows to 0, and equal bounds would merge
    // buckets into one `le` series.
    let bounds = neg
        .iter()
        .enumerate()
        .rev()
        .map(|(k, _)| -exp_bound(i64::from(neg_off) + k as i64, p.scale))
        .chain(std::iter::once(p.zero_threshold))
        .chain((0..pos.len()).map(|k| exp_bound(i64::from(pos_off) + k as i64 + 1, p.scale)));
    let mut previous = f64::NEG_INFINITY;
    for bound in bounds {
        if !bound.is_finite() || bound <= previous {
            return Err(format!(
                "exponential histogram {name}: bucket bounds at scale {} (positive offset {pos_off}, negative \
                 offset {neg_off}) are not finite and distinct in f64 (bound {bound} after {previous})",
                p.scale
            ));
        }
        previous = bound;
    }
    let bucket = Name::from(format!("{name}_bucket"));
    let mut out = Vec::with_capacity(pos.len() + neg.len() + 6);
    let mut cum = 0u64;
    // Negative buckets, most negative first: index i holds values in [-base^(i+1), -base^i).
    for (k, c) in neg.iter().enumerate().rev() {
        cum = cum.saturating_add(*c);
        let index = i64::from(neg_off) + k as i64;
        out.push((key(bucket.clone(), with(l, "le", le(-exp_bound(index, p.scale)))), cum as f64));
    }
    cum = cum.saturating_add(p.zero_count);
    out.push((key(bucket.clone(), with(l, "le", le(p.zero_threshold))), cum as f64));
    // Positive buckets: index i holds values in (base^i, base^(i+1)].
    for (k, c) in pos.iter().enumerate() {
        cum = cum.saturating_add(*c);
        let index = i64::from(pos_off) + k as i64;
        out.push((key(bucket.clone(), with(l, "le", le(exp_bound(index + 1, p.scale)))), cum as f64));
    }
    out.push((key(bucket, with(l, "le", le(f64::INFINITY))), p.count as f64));
    summary_parts(name, l, p.count, p.sum, p.min, p.max, &mut out);
    Ok(out)
}

/// Refuses a data point whose samples name one series twice (duplicate quantiles, bucket
/// bounds that print alike): only one of the values could be kept.
pub(crate) fn distinct_series(samples: Vec<(SeriesKey, f64)>) -> Result<Vec<(SeriesKey, f64)>, (&'static str, String)> {
    if samples.len() > 1 {
        let mut seen = std::collections::HashSet::with_capacity(samples.len());
        if let Some((k, _)) = samples.iter().find(|(k, _)| !seen.insert(k)) {
            return Err(("label_collision", format!("data point maps to series {} twice", k.display_bounded(256))));
        }
    }
    Ok(samples)
}

fn time(t: u64) -> Result<i64, (&'static str, String)> {
    if t == 0 {
        return Err(("missing_timestamp", "time_unix_nano is 0".to_string()));
    }
    i64::try_from(t).map_err(|_| ("time_out_of_range", format!("time_unix_nano {t} does not fit i64")))
}

fn temporality(raw: i32, name: &str) -> Result<bool, String> {
    match AggregationTemporality::try_from(raw) {
        Ok(AggregationTemporality::Delta) => Ok(true),
        Ok(AggregationTemporality::Cumulative) => Ok(false),
        _ => Err(format!("{name}: aggregation_temporality {raw} is not DELTA or CUMULATIVE")),
    }
}

/// Converts an export; delta accumulators advance only for accepted points.
pub(crate) fn convert(
    store: &Store,
    deltas: &Mutex<DeltaState>,
    req: ExportMetricsServiceRequest,
    max_samples: usize,
    max_delta_series: usize,
) -> Result<Converted, Status> {
    let now = store.now_ns();
    let mut out = Converted::default();
    let mut points: Vec<Point> = Vec::new();
    let mut total = 0usize;
    for rm in req.resource_metrics {
        let rattrs = rm.resource.map(|r| r.attributes).unwrap_or_default();
        let host = attr(&rattrs, "host.name").or_else(|| attr(&rattrs, "service.instance.id"));
        let Some(host) = host else {
            let n: usize = rm.scope_metrics.iter().flat_map(|s| &s.metrics).map(point_count).sum();
            out.reject("missing_host", n as u64, || {
                "resource has neither host.name nor service.instance.id; set the host.name resource attribute \
                 (e.g. OTEL_RESOURCE_ATTRIBUTES=host.name=$(hostname))"
                    .to_string()
            });
            continue;
        };
        let mut base = Labels::new();
        base.insert("host".to_string(), host);
        if let Some(service) = attr(&rattrs, "service.name") {
            base.insert("service".to_string(), service);
        }
        for sm in rm.scope_metrics {
            for m in sm.metrics {
                let name = Name::from(metric_name(&m.name));
                if name.is_empty() {
                    out.reject("invalid_series", point_count(&m) as u64, || "metric name is empty".into());
                    continue;
                }
                let mut add =
                    |out: &mut Converted,
                     t: u64,
                     flags: u32,
                     delta: bool,
                     histogram: bool,
                     made: Result<Vec<(SeriesKey, f64)>, (&'static str, String)>| {
                        if flags & FLAG_NO_RECORDED_VALUE != 0 {
                            return;
                        }
                        let made = made.and_then(distinct_series).and_then(|s| time(t).map(|t| (t, s)));
                        match made {
                            Err((reason, msg)) => out.reject(reason, 1, || format!("{name}: {msg}")),
                            Ok((t, samples)) => {
                                if let Some((k, v)) = samples.iter().find(|(_, v)| !store.sample_ok(t, *v, now)) {
                                    let reason = reason_code(store, t, *v, now);
                                    let msg = store
                                        .check_sample(k, t, *v, now)
                                        .err()
                                        .map(|e| e.to_string())
                                        .unwrap_or_default();
                                    out.reject(reason, 1, || msg);
                                } else {
                                    total += samples.len();
                                    let histogram = histogram.then(|| name.clone());
                                    points.push(Point { time: t, delta, histogram, samples });
                                }
                            }
                        }
                    };
                match m.data {
                    None => out.reject("unsupported", 1, || format!("{name}: metric has no data")),
                    Some(metric::Data::Gauge(g)) => {
                        for p in g.data_points {
                            let made = labels(&base, &p.attributes)
                                .and_then(|l| number(&p.value).map(|v| vec![(key(name.clone(), l), v)]));
                            add(&mut out, p.time_unix_nano, p.flags, false, false, made);
                        }
                    }
                    Some(metric::Data::Sum(s)) => match temporality(s.aggregation_temporality, &name) {
                        Err(msg) => out.reject("unspecified_temporality", s.data_points.len() as u64, || msg),
                        Ok(delta) => {
                            for p in s.data_points {
                                let made = labels(&base, &p.attributes)
                                    .and_then(|l| number(&p.value).map(|v| vec![(key(name.clone(), l), v)]));
                                add(&mut out, p.time_unix_nano, p.flags, delta, false, made);
                            }
                        }
                    },
                    Some(metric::Data::Histogram(h)) => match temporality(h.aggregation_temporality, &name) {
                        Err(msg) => out.reject("unspecified_temporality", h.data_points.len() as u64, || msg),
                        Ok(delta) => {
                            for p in h.data_points {
                                let made = labels(&base, &p.attributes)
                                    .and_then(|l| histogram(&name, &l, &p).map_err(|m| ("invalid_histogram", m)));
                                add(&mut out, p.time_unix_nano, p.flags, delta, true, made);
                            }
                        }
                    },
                    Some(metric::Data::ExponentialHistogram(h)) => {
                        match temporality(h.aggregation_temporality, &name) {
                            Err(msg) => out.reject("unspecified_temporality", h.data_points.len() as u64, || msg),
                            // Its buckets move with every export (offset and scale follow that
                            // interval's values), so adding each `le` series on its own stored
                            // buckets that were no longer cumulative (QA pass 23a).
                            Ok(true) => out.reject("unsupported_temporality", h.data_points.len() as u64, || {
                                format!(
                                    "{name}: delta exponential histograms are not accumulated (their buckets move \
                                     with every export); export them with cumulative temporality"
                                )
                            }),
                            Ok(delta) => {
                                for p in h.data_points {
                                    let made = labels(&base, &p.attributes).and_then(|l| {
                                        exp_histogram(&name, &l, &p).map_err(|m| ("invalid_histogram", m))
                                    });
                                    add(&mut out, p.time_unix_nano, p.flags, delta, true, made);
                                }
                            }
                        }
                    }
                    Some(metric::Data::Summary(s)) => {
                        for p in s.data_points {
                            let made = labels(&base, &p.attributes).map(|l| {
                                let mut samples: Vec<(SeriesKey, f64)> = p
                                    .quantile_values
                                    .iter()
                                    .map(|q| (key(name.clone(), with(&l, "quantile", q.quantile.to_string())), q.value))
                                    .collect();
                                summary_parts(&name, &l, p.count, Some(p.sum), None, None, &mut samples);
                                samples
                            });
                            add(&mut out, p.time_unix_nano, p.flags, false, false, made);
                        }
                    }
                }
            }
        }
    }
    if total > max_samples {
        return Err(Status::invalid_argument(format!(
            "export maps to {total} samples; the limit is {max_samples} per request, export smaller batches"
        )));
    }
    let mut state = deltas.lock().map_err(|_| internal_status("delta accumulator failed", "lock poisoned"))?;
    for p in points {
        if p.delta {
            let new = p.samples.iter().filter(|(k, _)| !state.sums.contains_key(k)).count();
            if state.sums.len() + new > max_delta_series {
                out.reject("too_many_delta_series", 1, || {
                    format!("delta accumulator holds {max_delta_series} series (limit); use cumulative temporality")
                });
                continue;
            }
        }
        for (k, v) in p.samples {
            if !p.delta {
                out.batch.push(k, p.time, v);
                continue;
            }
            let fold = match p.histogram.as_ref().and_then(|h| k.metric.strip_prefix(h.as_str())) {
                Some("_min") => Fold::Min,
                Some("_max") => Fold::Max,
                _ => Fold::Add,
            };
            let (t, v) = state.fold(&k, p.time, now, v, fold, &mut out.undo);
            out.batch.push(k, t, v);
        }
    }
    Ok(out)
}

fn number(v: &Option<number_data_point::Value>) -> Result<f64, (&'static str, String)> {
    match v {
        Some(number_data_point::Value::AsDouble(d)) => Ok(*d),
        Some(number_data_point::Value::AsInt(i)) => Ok(*i as f64),
        None => Err(("no_value", "data point has no value".to_string())),
    }
}

fn point_count(m: &opentelemetry_proto::tonic::metrics::v1::Metric) -> usize {
    match &m.data {
        None => 1,
        Some(metric::Data::Gauge(g)) => g.data_points.len(),
        Some(metric::Data::Sum(s)) => s.data_points.len(),
        Some(metric::Data::Histogram(h)) => h.data_points.len(),
        Some(metric::Data::ExponentialHistogram(h)) => h.data_points.len(),
        Some(metric::Data::Summary(s)) => s.data_points.len(),
    }
}

/// The OTLP `MetricsService` (gRPC, and behind `POST /v1/metrics` on the HTTP listener).
#[derive(Clone)]
pub(crate) struct OtlpService {
    pub(crate) shared: Arc<Shared>,
    pub(crate) deltas: Arc<Mutex<DeltaState>>,
}

impl OtlpService {
    pub(crate) async fn export_inner(
        &self,
        req: ExportMetricsServiceRequest,
    ) -> Result<ExportMetricsServiceResponse, Status> {
        let shared = &self.shared;
        let _slot = shared.admit_now(0)?;
        let limits = &shared.limits;
        let converted =
            convert(&shared.store, &self.deltas, req, limits.max_samples_per_request, limits.max_delta_series)?;
        let mut converted = converted;
        let batch = std::mem::take(&mut converted.batch);
        let outcome = match shared.write_blocking(batch).await {
            Ok(outcome) => outcome,
            Err(status) => {
                // Refused (the store unavailable, say): the client sends these deltas again.
                let undo = std::mem::take(&mut converted.undo);
                if let Ok(mut state) = self.deltas.lock() {
                    state.rollback(undo);
                }
                return Err(status);
            }
        };
        for r in &outcome.rejected {
            converted.reject("store", 1, || r.error.to_string());
        }
        for (reason, n) in &converted.by_reason {
            shared.telemetry.rejected(reason, *n);
        }
        shared.telemetry.accepted(outcome.accepted as u64);
        let partial_success = (converted.rejected_points > 0).then(|| ExportMetricsPartialSuccess {
            rejected_data_points: i64::try_from(converted.rejected_points).unwrap_or(i64::MAX),
            error_message: converted.error_message(),
        });
        Ok(ExportMetricsServiceResponse { partial_success })
    }
}

#[tonic::async_trait]
impl metrics_service_server::MetricsService for OtlpService {
    async fn export(
        &self,
        request: Request<ExportMetricsServiceRequest>,
    ) -> Result<Response<ExportMetricsServiceResponse>, Status> {
        let result = self.export_inner(request.into_inner()).await;
        self.shared.telemetry.finish(result).map(Response::new)
    }
}

#[cfg(test)]
mod tests;
