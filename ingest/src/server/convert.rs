//! Native `WriteRequest` → engine [`WriteBatch`]: series refs, delta-decoded timestamps,
//! limits, and per-series sample validation with reason codes.

use std::collections::HashMap;
use std::sync::Arc;

use lockstep_engine::model::{MAX_TIME_NS, MIN_TIME_NS};
use lockstep_engine::{SeriesId, SeriesKey, SeriesSamples, Store, WriteBatch};
use lockstep_proto::ingest::v1::{SeriesRejection, WriteRequest};
use tonic::Status;

use super::config::Limits;
use crate::import::clock::COLLECTIVE_END_METRIC;

/// Series refs defined so far in one request or stream, with the store's id once the series
/// exists there: a stream's later batches skip hashing and comparing the series keys.
#[derive(Debug, Default)]
pub(crate) struct SeriesTable {
    refs: HashMap<u32, RefEntry>,
}

#[derive(Debug)]
struct RefEntry {
    key: Arc<SeriesKey>,
    id: Option<SeriesId>,
    barrier: bool,
}

/// A request turned into a batch of valid samples plus what was rejected.
#[derive(Debug, Default)]
pub(crate) struct Prepared {
    /// Valid samples of series not yet in the store (by key).
    pub batch: WriteBatch,
    /// Valid samples of series the store knows (by id; the key for the keyed path).
    pub resolved: Vec<(SeriesId, Arc<SeriesKey>, SeriesSamples)>,
    /// Whether any series is a `collective_end` barrier series.
    pub barriers: bool,
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
    /// Total valid samples.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.batch.len() + self.resolved.iter().map(|(_, _, s)| s.timestamps.len()).sum::<usize>()
    }

    fn push(&mut self, entry: &RefEntry, samples: SeriesSamples) {
        self.barriers |= entry.barrier;
        match entry.id {
            Some(id) => self.resolved.push((id, entry.key.clone(), samples)),
            None => self.batch.series.push(((*entry.key).clone(), samples)),
        }
    }

    /// What to write: all by id when every series is known, else all by key (one WAL record
    /// either way; the keyed path defines the new series).
    pub(crate) fn take_write(&mut self) -> Write {
        let resolved = std::mem::take(&mut self.resolved);
        if self.batch.series.is_empty() {
            return Write::Resolved(resolved.into_iter().map(|(id, _, s)| (id, s)).collect());
        }
        let mut batch = std::mem::take(&mut self.batch);
        batch.series.extend(resolved.into_iter().map(|(_, key, s)| ((*key).clone(), s)));
        Write::Keyed(batch)
    }

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

/// A prepared write for the store.
#[derive(Debug)]
pub(crate) enum Write {
    /// Every series is in the store: [`Store::write_resolved`].
    Resolved(Vec<(SeriesId, SeriesSamples)>),
    /// Some series are new: [`Store::write`].
    Keyed(WriteBatch),
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
            Some(existing) if *existing.key == key => {}
            Some(existing) => {
                return Err(Status::invalid_argument(format!(
                    "definitions[{i}]: ref {} is already {}, cannot redefine it as {key}",
                    def.r#ref, existing.key
                )));
            }
            None => {
                if table.refs.len() >= limits.max_stream_definitions {
                    return Err(Status::invalid_argument(format!(
                        "definitions[{i}]: more than {} series defined in this stream; open a new stream",
                        limits.max_stream_definitions
                    )));
                }
                let barrier = key.metric == COLLECTIVE_END_METRIC;
                table.refs.insert(def.r#ref, RefEntry { key: Arc::new(key), id: None, barrier });
            }
        }
    }
    let mut out = Prepared::default();
    for (i, s) in request.series.into_iter().enumerate() {
        let Some(entry) = table.refs.get_mut(&s.r#ref) else {
            return Err(Status::invalid_argument(format!(
                "series[{i}]: ref {} is not defined in this request or stream",
                s.r#ref
            )));
        };
        if entry.id.is_none() {
            entry.id = store.series_id(&entry.key).map_err(|e| Status::internal(e.to_string()))?;
        }
        let entry = &*entry;
        let key = &entry.key;
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
            out.push(entry, SeriesSamples { timestamps, values: s.values });
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
            out.push(entry, kept);
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
        assert_eq!(p.len(), 4);
        assert_eq!(p.rejected, 2);
        assert_eq!(p.rejections[0].reason, "non_finite_value");
        assert!(p.rejections[0].message.contains("not finite"), "{}", p.rejections[0].message);

        // The stream keeps refs; unknown refs and mismatched lengths are malformed.
        let req = WriteRequest { series: vec![samples(1, &[T], &[1.0])], ..Default::default() };
        assert_eq!(prepare(&store, &mut table, req, &limits, now).unwrap().len(), 1);
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

    /// A stream's series resolve to store ids once they exist, later batches write by id, a
    /// batch with a new series goes by key as a whole, and both land in the store.
    #[test]
    fn known_series_are_written_by_id() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
        let limits = Limits::default();
        let mut table = SeriesTable::default();
        let req = WriteRequest {
            definitions: vec![def(1, "a", Some("h1")), def(2, COLLECTIVE_END_METRIC, Some("h1"))],
            series: vec![samples(1, &[T], &[1.0])],
            sequence: 1,
        };
        let mut p = prepare(&store, &mut table, req, &limits, T).unwrap();
        assert!(!p.barriers);
        let Write::Keyed(batch) = p.take_write() else { panic!("a new series must go by key") };
        assert_eq!(store.write(&batch).unwrap().accepted, 1);

        // Ref 1 is now in the store, ref 2 is not: the batch goes by key, with the barrier flag.
        let req = WriteRequest {
            series: vec![samples(1, &[T + 1], &[2.0]), samples(2, &[T + 1], &[5.0])],
            ..Default::default()
        };
        let mut p = prepare(&store, &mut table, req, &limits, T).unwrap();
        assert!(p.barriers);
        let Write::Keyed(batch) = p.take_write() else { panic!("mixed batch must go by key") };
        assert_eq!(batch.series.len(), 2);
        assert_eq!(store.write(&batch).unwrap().accepted, 2);

        // Both known: by id, invalid samples still rejected by the store.
        let req = WriteRequest {
            series: vec![samples(1, &[T + 2, MAX_TIME_NS + 1], &[3.0, 4.0]), samples(2, &[T + 2], &[6.0])],
            ..Default::default()
        };
        let mut p = prepare(&store, &mut table, req, &limits, T).unwrap();
        assert_eq!(p.rejected, 1);
        let Write::Resolved(series) = p.take_write() else { panic!("known series must go by id") };
        assert_eq!(series.len(), 2);
        let outcome = store.write_resolved(&series).unwrap();
        assert_eq!(outcome.accepted, 2);
        let mut bad = series.clone();
        bad[0].1.values[0] = f64::NAN;
        bad[1].0 = 999;
        let outcome = store.write_resolved(&bad).unwrap();
        assert_eq!(outcome.accepted, 0);
        assert_eq!(outcome.rejected.len(), 2);
        assert!(outcome.rejected.iter().any(|r| r.error.to_string().contains("not in the catalog")));
        assert!(outcome.rejected.iter().any(|r| r.series.starts_with("a{")), "{:?}", outcome.rejected);
        drop(store);

        // Reopened (WAL replay): all five accepted samples are there.
        let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
        assert_eq!(store.buffered_rows().unwrap(), 5);
    }
}
