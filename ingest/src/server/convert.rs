//! Native `WriteRequest` → engine [`WriteBatch`]: series refs, delta-decoded timestamps,
//! limits, and per-series sample validation with reason codes.

use std::collections::HashMap;
use std::sync::Arc;

use lockstep_engine::model::{MAX_TIME_NS, MIN_TIME_NS};
use lockstep_engine::{SeriesKey, SeriesSamples, Store, WriteBatch};
use lockstep_proto::ingest::v1::{SeriesRejection, WriteRequest};
use tonic::Status;

use super::config::Limits;

/// Series refs defined so far in one request or stream.
#[derive(Debug, Default)]
pub(crate) struct SeriesTable {
    refs: HashMap<u32, Arc<SeriesKey>>,
}

/// A request turned into a batch of valid samples plus what was rejected.
#[derive(Debug, Default)]
pub(crate) struct Prepared {
    /// Valid samples only.
    pub batch: WriteBatch,
    /// Samples rejected before the store saw them.
    pub rejected: u64,
    /// Per-series reasons, bounded.
    pub rejections: Vec<SeriesRejection>,
    /// Whether `rejections` was cut.
    pub truncated: bool,
    /// Rejected samples per reason code.
    pub by_reason: Vec<(&'static str, u64)>,
}

impl Prepared {
    pub(crate) fn reject(&mut self, r: SeriesRejection, reason: &'static str, max: usize) {
        self.rejected += r.samples;
        match self.by_reason.iter_mut().find(|(k, _)| *k == reason) {
            Some((_, n)) => *n += r.samples,
            None => self.by_reason.push((reason, r.samples)),
        }
        if self.rejections.len() < max {
            self.rejections.push(r);
        } else {
            self.truncated = true;
        }
    }
}

/// Why a sample is invalid, as a stable reason code.
pub(crate) fn reason_code(store: &Store, time: i64, value: f64, now: i64) -> &'static str {
    if !(MIN_TIME_NS..=MAX_TIME_NS).contains(&time) {
        "time_out_of_range"
    } else if store.config().max_future_ns.is_some_and(|max| time > now.saturating_add(max)) {
        "future_timestamp"
    } else if !value.is_finite() {
        "non_finite_value"
    } else {
        "invalid_sample"
    }
}

/// Validates and converts one request. Structural problems (limits, unknown refs, length
/// mismatches, bad series definitions, timestamp overflow) fail the whole request with
/// `INVALID_ARGUMENT`; invalid samples are rejected per series.
pub(crate) fn prepare(
    store: &Store,
    table: &mut SeriesTable,
    request: WriteRequest,
    limits: &Limits,
    now: i64,
) -> Result<Prepared, Status> {
    let entries = request.definitions.len().max(request.series.len());
    if entries > limits.max_series_per_request {
        return Err(Status::invalid_argument(format!(
            "request has {} definitions and {} series; the limit is {} per request, split the batch",
            request.definitions.len(),
            request.series.len(),
            limits.max_series_per_request
        )));
    }
    let samples: usize = request.series.iter().map(|s| s.timestamp_deltas.len()).sum();
    if samples > limits.max_samples_per_request {
        return Err(Status::invalid_argument(format!(
            "request has {samples} samples; the limit is {} per request, split the batch",
            limits.max_samples_per_request
        )));
    }
    for (i, def) in request.definitions.into_iter().enumerate() {
        let key = SeriesKey::new(def.metric, def.labels);
        key.validate().map_err(|e| {
            Status::invalid_argument(format!("definitions[{i}] (ref {}): {e}", def.r#ref))
        })?;
        match table.refs.get(&def.r#ref) {
            Some(existing) if **existing == key => {}
            Some(existing) => {
                return Err(Status::invalid_argument(format!(
                    "definitions[{i}]: ref {} is already {existing}, cannot redefine it as {key}",
                    def.r#ref
                )));
            }
            None => {
                if table.refs.len() >= limits.max_stream_definitions {
                    return Err(Status::invalid_argument(format!(
                        "definitions[{i}]: more than {} series defined in this stream; open a new stream",
                        limits.max_stream_definitions
                    )));
                }
                table.refs.insert(def.r#ref, Arc::new(key));
            }
        }
    }
    let mut out = Prepared::default();
    out.batch.series.reserve(request.series.len());
    for (i, s) in request.series.into_iter().enumerate() {
        let Some(key) = table.refs.get(&s.r#ref) else {
            return Err(Status::invalid_argument(format!(
                "series[{i}]: ref {} is not defined in this request or stream",
                s.r#ref
            )));
        };
        if s.timestamp_deltas.len() != s.values.len() {
            return Err(Status::invalid_argument(format!(
                "series[{i}] (ref {}, {key}): {} timestamp_deltas but {} values",
                s.r#ref,
                s.timestamp_deltas.len(),
                s.values.len()
            )));
        }
        let mut timestamps = s.timestamp_deltas;
        let mut acc: i64 = 0;
        let mut all_ok = true;
        for t in timestamps.iter_mut() {
            acc = acc.checked_add(*t).ok_or_else(|| {
                Status::invalid_argument(format!(
                    "series[{i}] (ref {}, {key}): timestamp_deltas overflow i64",
                    s.r#ref
                ))
            })?;
            *t = acc;
        }
        for (&t, &v) in timestamps.iter().zip(&s.values) {
            all_ok &= store.sample_ok(t, v, now);
        }
        if all_ok {
            out.batch.series.push(((**key).clone(), SeriesSamples { timestamps, values: s.values }));
            continue;
        }
        let mut kept = SeriesSamples::default();
        let mut bad = 0u64;
        let mut first: Option<(i64, f64)> = None;
        for (&t, &v) in timestamps.iter().zip(&s.values) {
            if store.sample_ok(t, v, now) {
                kept.timestamps.push(t);
                kept.values.push(v);
            } else {
                bad += 1;
                first.get_or_insert((t, v));
            }
        }
        if let Some((t, v)) = first {
            let reason = reason_code(store, t, v, now);
            let message = match store.check_sample(key, t, v, now) {
                Err(e) => e.to_string(),
                Ok(()) => format!("sample at {t} rejected"),
            };
            out.reject(
                SeriesRejection {
                    r#ref: s.r#ref,
                    series: key.to_string(),
                    samples: bad,
                    reason: reason.to_string(),
                    message,
                },
                reason,
                limits.max_rejections,
            );
        }
        if !kept.timestamps.is_empty() {
            out.batch.series.push(((**key).clone(), kept));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockstep_engine::StoreConfig;
    use lockstep_proto::ingest::v1::{SeriesDefinition, SeriesSamples as PSamples};
    use tonic::Code;

    const T: i64 = 1_767_225_600_000_000_000;

    fn def(r: u32, metric: &str, host: Option<&str>) -> SeriesDefinition {
        let mut labels = std::collections::HashMap::new();
        if let Some(h) = host {
            labels.insert("host".to_string(), h.to_string());
        }
        labels.insert("gpu".to_string(), "0".to_string());
        SeriesDefinition { r#ref: r, metric: metric.into(), labels }
    }

    fn samples(r: u32, ts: &[i64], vs: &[f64]) -> PSamples {
        let mut prev = 0;
        let deltas = ts.iter().map(|&t| { let d = t - prev; prev = t; d }).collect();
        PSamples { r#ref: r, timestamp_deltas: deltas, values: vs.to_vec() }
    }

    #[test]
    fn decode_validate_and_reject() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
        let now = T;
        let limits = Limits::default();
        let mut table = SeriesTable::default();
        let req = WriteRequest {
            definitions: vec![def(1, "a", Some("h1")), def(2, "b", Some("h1"))],
            series: vec![
                samples(1, &[T, T + 10, T + 5], &[1.0, 2.0, 3.0]),
                samples(2, &[T, T + 1, T + 400 * 86_400_000_000_000], &[f64::NAN, 1.0, 2.0]),
            ],
            sequence: 7,
        };
        let p = prepare(&store, &mut table, req, &limits, now).unwrap();
        assert_eq!(p.batch.series[0].1.timestamps, vec![T, T + 10, T + 5]);
        assert_eq!(p.batch.len(), 4);
        assert_eq!(p.rejected, 2);
        assert_eq!(p.rejections[0].reason, "non_finite_value");
        assert!(p.rejections[0].message.contains("not finite"), "{}", p.rejections[0].message);

        // The stream keeps refs; unknown refs and mismatched lengths are malformed.
        let req = WriteRequest { series: vec![samples(1, &[T], &[1.0])], ..Default::default() };
        assert_eq!(prepare(&store, &mut table, req, &limits, now).unwrap().batch.len(), 1);
        let req = WriteRequest { series: vec![samples(9, &[T], &[1.0])], ..Default::default() };
        let e = prepare(&store, &mut table, req, &limits, now).unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument);
        assert!(e.message().contains("ref 9 is not defined"), "{}", e.message());
        let mut bad = samples(1, &[T, T], &[1.0]);
        bad.values.clear();
        let e = prepare(&store, &mut table, WriteRequest { series: vec![bad], ..Default::default() }, &limits, now)
            .unwrap_err();
        assert!(e.message().contains("2 timestamp_deltas but 0 values"), "{}", e.message());
        let req = WriteRequest { definitions: vec![def(3, "c", None)], ..Default::default() };
        let e = prepare(&store, &mut table, req, &limits, now).unwrap_err();
        assert!(e.message().contains("no host label"), "{}", e.message());
        let req = WriteRequest { definitions: vec![def(1, "other", Some("h1"))], ..Default::default() };
        assert!(prepare(&store, &mut table, req, &limits, now).unwrap_err().message().contains("cannot redefine"));
        let overflow = PSamples { r#ref: 1, timestamp_deltas: vec![i64::MAX, 1], values: vec![1.0, 1.0] };
        let e = prepare(&store, &mut table, WriteRequest { series: vec![overflow], ..Default::default() }, &limits, now)
            .unwrap_err();
        assert!(e.message().contains("overflow"));
        let small = Limits { max_samples_per_request: 2, ..Limits::default() };
        let req = WriteRequest { series: vec![samples(1, &[T, T + 1, T + 2], &[1.0; 3])], ..Default::default() };
        assert!(prepare(&store, &mut table, req, &small, now).unwrap_err().message().contains("limit is 2"));
    }
}
