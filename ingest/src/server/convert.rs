//! Native `WriteRequest` → engine rows: series refs, delta-decoded timestamps, limits, and
//! per-series sample validation with reason codes. Series the store knows become columnar
//! [`Rows`] by store id; a batch with a new series goes by key ([`WriteBatch`]).
//! Over 600 lines: decoding and validation are one pass over the request and share its limits.

use std::collections::HashMap;
use std::sync::Arc;

use lockstep_engine::Rows;
use lockstep_engine::model::{MAX_TIME_NS, MIN_TIME_NS};
use lockstep_engine::{SeriesId, SeriesKey, SeriesSamples, Store, WriteBatch};
use lockstep_proto::ingest::v1::{SeriesColumns, SeriesRejection, WriteRequest};
use tonic::Status;

use super::config::Limits;
use super::status::internal_status;
use crate::import::clock::COLLECTIVE_END_METRIC;

/// Series refs defined so far in one request or stream, with the store's id once the series
/// exists there: a stream's later batches skip hashing and comparing the series keys.
#[derive(Debug, Default)]
pub(crate) struct SeriesTable {
    refs: HashMap<u32, RefEntry, foldhash::fast::RandomState>,
    /// The store's catalog generation the ids were looked up in ([`Store::catalog_generation`]).
    generation: u64,
}

#[derive(Debug)]
struct RefEntry {
    key: Arc<SeriesKey>,
    id: Option<SeriesId>,
    barrier: bool,
}

impl SeriesTable {
    /// Forgets every store id once the store retired series since they were looked up: a
    /// series silent for longer than the retention was retired, and is looked up by key again
    /// (and defined anew) instead of having its samples rejected as an unknown id.
    fn forget_retired_ids(&mut self, store: &Store) {
        let generation = store.catalog_generation();
        if generation != self.generation {
            for entry in self.refs.values_mut() {
                entry.id = None;
            }
            self.generation = generation;
        }
    }

    /// The entry of `r` with its store id looked up if the series exists by now; `what`
    /// names the place in the request for the error.
    fn entry(&mut self, store: &Store, r: u32, what: impl FnOnce() -> String) -> Result<&RefEntry, Status> {
        let Some(entry) = self.refs.get_mut(&r) else {
            return Err(Status::invalid_argument(format!(
                "{}: ref {r} is not defined in this request or stream",
                what()
            )));
        };
        if entry.id.is_none() {
            let internal = |e: lockstep_engine::Error| internal_status("series lookup failed", e);
            entry.id = store.series_id(&entry.key).map_err(internal)?;
            // Share the catalog's copy of the key: a stream's table then costs a pointer per
            // series instead of a second copy of every key.
            if let Some(key) = entry.id.map(|id| store.series_key(id)).transpose().map_err(internal)?.flatten() {
                entry.key = key;
            }
        }
        Ok(entry)
    }
}

/// A request turned into valid samples plus what was rejected.
#[derive(Debug, Default)]
pub(crate) struct Prepared {
    /// Valid samples of series the store knows, by store id (one run per series entry).
    pub rows: Rows,
    /// Valid samples of series not yet in the store (by key).
    pub batch: WriteBatch,
    /// The key of each id in `rows`, for an id retired before the write ([`Rekey`]).
    pub keys: Vec<(SeriesId, Arc<SeriesKey>)>,
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
        self.batch.len() + self.rows.len()
    }

    fn push(&mut self, entry: &RefEntry, times: &[i64], values: &[f64]) {
        self.barriers |= entry.barrier;
        match entry.id {
            Some(id) => {
                self.keys.push((id, entry.key.clone()));
                self.rows.series.extend(std::iter::repeat_n(id, times.len()));
                self.rows.time.extend_from_slice(times);
                self.rows.value.extend_from_slice(values);
            }
            None => self
                .batch
                .series
                .push(((*entry.key).clone(), SeriesSamples { timestamps: times.to_vec(), values: values.to_vec() })),
        }
    }

    /// Validates one run of samples of `entry` and keeps the valid ones.
    #[allow(clippy::too_many_arguments)]
    fn add_run(
        &mut self,
        store: &Store,
        entry: &RefEntry,
        r#ref: u32,
        times: &[i64],
        values: &[f64],
        now: i64,
        limits: &Limits,
    ) {
        if times.iter().zip(values).all(|(&t, &v)| store.sample_ok(t, v, now)) {
            self.push(entry, times, values);
            return;
        }
        let (mut kept_t, mut kept_v) = (Vec::new(), Vec::new());
        let mut first: Option<(i64, f64)> = None;
        for (&t, &v) in times.iter().zip(values) {
            if store.sample_ok(t, v, now) {
                kept_t.push(t);
                kept_v.push(v);
            } else {
                first.get_or_insert((t, v));
            }
        }
        if let Some((t, v)) = first {
            let reason = reason_code(store, t, v, now);
            let message = match store.check_sample(&entry.key, t, v, now) {
                Err(e) => e.to_string(),
                Ok(()) => format!("sample at {t} rejected"),
            };
            let series = SeriesRejection {
                r#ref,
                series: entry.key.to_string(),
                samples: (times.len() - kept_t.len()) as u64,
                reason: reason.to_string(),
                message,
            };
            self.reject(series, reason, limits.max_rejections);
        }
        if !kept_t.is_empty() {
            self.push(entry, &kept_t, &kept_v);
        }
    }

    /// What to write: all by id when every series is known (the samples move into the
    /// store without a copy), else all by key (one WAL record either way; the keyed path
    /// defines the new series).
    pub(crate) fn take_write(&mut self, store: &Store) -> Result<Write, Status> {
        let rekey = Rekey::new(std::mem::take(&mut self.keys), |key: &Arc<SeriesKey>| Some((**key).clone()));
        into_write(store, std::mem::take(&mut self.rows), std::mem::take(&mut self.batch), rekey)
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

/// One store write of `rows` (by id) and `batch` (by key): rows alone when the batch is empty,
/// else everything by key (one WAL record either way). `rekey` names the ids of `rows` that
/// the store retired since they were resolved.
pub(crate) fn into_write(store: &Store, rows: Rows, mut batch: WriteBatch, mut rekey: Rekey) -> Result<Write, Status> {
    if batch.series.is_empty() {
        return Ok(Write::Rows(rows, rekey));
    }
    for run in rows.runs() {
        let id = rows.series[run.start];
        let key = match store.series_key(id).map_err(|e| internal_status("series lookup failed", e))? {
            Some(key) => (*key).clone(),
            None => (rekey.0)(id)
                .ok_or_else(|| internal_status("series lookup failed", format!("series id {id} vanished")))?,
        };
        let samples = SeriesSamples { timestamps: rows.time[run.clone()].to_vec(), values: rows.value[run].to_vec() };
        batch.series.push((key, samples));
    }
    Ok(Write::Keyed(batch))
}

/// The keys of the series ids a request resolved, for the ids the store retired between the
/// lookup and the write (a series silent for longer than the retention, written again while
/// the compaction pass retired it): [`Store::write_rows_keyed`] writes those by key, which
/// defines them anew, where [`Store::write_rows`] would reject them as unknown ids.
pub(crate) struct Rekey(Box<dyn FnMut(SeriesId) -> Option<SeriesKey> + Send>);

impl Rekey {
    /// From the request's `(id, what names its key)` pairs and how to make the key; the
    /// index by id is built on the first retired id only.
    pub(crate) fn new<T: Send + 'static>(
        known: Vec<(SeriesId, T)>,
        key: impl Fn(&T) -> Option<SeriesKey> + Send + 'static,
    ) -> Self {
        let mut index: Option<HashMap<SeriesId, usize>> = None;
        Rekey(Box::new(move |id| {
            let index = index.get_or_insert_with(|| known.iter().enumerate().map(|(i, (id, _))| (*id, i)).collect());
            index.get(&id).and_then(|&i| key(&known[i].1))
        }))
    }

    pub(crate) fn key_of(&mut self) -> &mut (dyn FnMut(SeriesId) -> Option<SeriesKey> + Send) {
        &mut *self.0
    }
}

impl std::fmt::Debug for Rekey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Rekey")
    }
}

/// A prepared write for the store.
#[derive(Debug)]
pub(crate) enum Write {
    /// Every series is in the store: [`Store::write_rows_keyed`].
    Rows(Rows, Rekey),
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

/// Series entries (`series` plus column runs) and samples of a request, for limits.
pub(crate) fn request_size(r: &WriteRequest) -> (usize, usize) {
    let cols = r.columns.as_ref();
    let series = r.series.len() + cols.map_or(0, |c| c.refs.len());
    let samples =
        r.series.iter().map(|s| s.timestamp_deltas.len()).sum::<usize>() + cols.map_or(0, |c| c.timestamp_deltas.len());
    (series, samples)
}

/// Turns delta-encoded timestamps into absolute ones in place; `None` on i64 overflow (the
/// index of the offending delta).
fn undelta(deltas: &mut [i64]) -> Result<(), usize> {
    let mut acc: i64 = 0;
    for (k, t) in deltas.iter_mut().enumerate() {
        acc = acc.checked_add(*t).ok_or(k)?;
        *t = acc;
    }
    Ok(())
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
    table.forget_retired_ids(store);
    let (series, samples) = request_size(&request);
    let entries = request.definitions.len().max(series);
    if entries > limits.max_series_per_request {
        return Err(Status::invalid_argument(format!(
            "request has {} definitions and {series} series entries; the limit is {} per request, split the batch",
            request.definitions.len(),
            limits.max_series_per_request
        )));
    }
    if samples > limits.max_samples_per_request {
        return Err(Status::invalid_argument(format!(
            "request has {samples} samples; the limit is {} per request, split the batch",
            limits.max_samples_per_request
        )));
    }
    for (i, def) in request.definitions.into_iter().enumerate() {
        let key = SeriesKey::new(def.metric, def.labels);
        key.validate().map_err(|e| Status::invalid_argument(format!("definitions[{i}] (ref {}): {e}", def.r#ref)))?;
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
        let entry = table.entry(store, s.r#ref, || format!("series[{i}]"))?;
        if s.timestamp_deltas.len() != s.values.len() {
            return Err(Status::invalid_argument(format!(
                "series[{i}] (ref {}, {}): {} timestamp_deltas but {} values",
                s.r#ref,
                entry.key,
                s.timestamp_deltas.len(),
                s.values.len()
            )));
        }
        let mut timestamps = s.timestamp_deltas;
        undelta(&mut timestamps).map_err(|_| {
            Status::invalid_argument(format!(
                "series[{i}] (ref {}, {}): timestamp_deltas overflow i64",
                s.r#ref, entry.key
            ))
        })?;
        out.add_run(store, entry, s.r#ref, &timestamps, &s.values, now, limits);
    }
    if let Some(columns) = request.columns {
        prepare_columns(store, table, columns, limits, now, &mut out)?;
    }
    Ok(out)
}

/// The `columns` part of a request. When every run's series is in the store and every sample
/// is valid (a steady stream), the decoded columns become the store's rows as they are.
fn prepare_columns(
    store: &Store,
    table: &mut SeriesTable,
    columns: SeriesColumns,
    limits: &Limits,
    now: i64,
    out: &mut Prepared,
) -> Result<(), Status> {
    let SeriesColumns { refs, counts, timestamp_deltas: mut times, values } = columns;
    if refs.len() != counts.len() {
        return Err(Status::invalid_argument(format!(
            "columns: {} refs but {} counts (one of each per run)",
            refs.len(),
            counts.len()
        )));
    }
    if times.len() != values.len() {
        return Err(Status::invalid_argument(format!(
            "columns: {} timestamp_deltas but {} values",
            times.len(),
            values.len()
        )));
    }
    let total: u64 = counts.iter().map(|&n| u64::from(n)).sum();
    if total != times.len() as u64 {
        return Err(Status::invalid_argument(format!(
            "columns: counts sum to {total} but there are {} samples",
            times.len()
        )));
    }
    undelta(&mut times)
        .map_err(|k| Status::invalid_argument(format!("columns: timestamp_deltas[{k}] overflows i64")))?;
    // Resolve every run first; the whole-column fast path needs all of them known and valid.
    let mut ids = Vec::with_capacity(refs.len());
    let mut keys = Vec::with_capacity(refs.len());
    let mut fast = out.rows.is_empty() && out.batch.series.is_empty();
    let mut at = 0;
    for (j, (&r, &n)) in refs.iter().zip(&counts).enumerate() {
        let entry = table.entry(store, r, || format!("columns.refs[{j}]"))?;
        let end = at + n as usize;
        out.barriers |= entry.barrier;
        fast &= entry.id.is_some()
            && times[at..end].iter().zip(&values[at..end]).all(|(&t, &v)| store.sample_ok(t, v, now));
        if let Some(id) = entry.id.filter(|_| fast) {
            keys.push((id, entry.key.clone()));
        }
        ids.push(entry.id.unwrap_or(0));
        at = end;
    }
    if fast {
        out.keys = keys;
        let mut series = Vec::with_capacity(times.len());
        for (&id, &n) in ids.iter().zip(&counts) {
            series.extend(std::iter::repeat_n(id, n as usize));
        }
        // The decoder grew the columns by doubling; give the slack back before they sit in
        // the write buffer (shrinking in place, no copy, with glibc malloc).
        times.shrink_to_fit();
        let mut values = values;
        values.shrink_to_fit();
        out.rows = Rows { series, time: times, value: values };
        return Ok(());
    }
    let mut at = 0;
    for (j, (&r, &n)) in refs.iter().zip(&counts).enumerate() {
        let entry = table.entry(store, r, || format!("columns.refs[{j}]"))?;
        let end = at + n as usize;
        out.add_run(store, entry, r, &times[at..end], &values[at..end], now, limits);
        at = end;
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
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
        let deltas = ts
            .iter()
            .map(|&t| {
                let d = t - prev;
                prev = t;
                d
            })
            .collect();
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
            columns: None,
        };
        let p = prepare(&store, &mut table, req, &limits, now).unwrap();
        assert_eq!(p.batch.series[0].1.timestamps, vec![T, T + 10, T + 5]);
        assert_eq!(p.batch.series[1].1.timestamps, vec![T + 1]);
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
        let e =
            prepare(&store, &mut table, WriteRequest { series: vec![overflow], ..Default::default() }, &limits, now)
                .unwrap_err();
        assert!(e.message().contains("overflow"));
        let small = Limits { max_samples_per_request: 2, ..Limits::default() };
        let req = WriteRequest { series: vec![samples(1, &[T, T + 1, T + 2], &[1.0; 3])], ..Default::default() };
        assert!(prepare(&store, &mut table, req, &small, now).unwrap_err().message().contains("limit is 2"));
    }

    /// A stream resolved its series' ids, and the compaction pass retired one of them (silent
    /// for longer than the retention) before the write: its samples are written by key, and
    /// the series is defined anew, instead of rejected as an unknown id. The same for a batch
    /// that goes by key because it also defines a new series.
    #[test]
    fn ids_retired_between_lookup_and_write_go_by_key() {
        use lockstep_engine::{storage::OsStorage, wallclock::ManualClock};
        const HOUR: i64 = 3_600_000_000_000;
        let dir = tempfile::tempdir().unwrap();
        let now = T + 10 * HOUR;
        let config = StoreConfig { retention_ns: Some(3 * HOUR), ..StoreConfig::default() };
        let store =
            Store::open_with(dir.path(), config, Arc::new(OsStorage), Arc::new(ManualClock(now.into()))).unwrap();
        let (limits, mut table) = (Limits::default(), SeriesTable::default());
        let req = WriteRequest {
            definitions: vec![def(1, "a", Some("h1")), def(2, "b", Some("h1"))],
            series: vec![samples(1, &[T], &[1.0]), samples(2, &[T + 9 * HOUR], &[2.0])],
            ..Default::default()
        };
        let Write::Keyed(batch) = prepare(&store, &mut table, req, &limits, now).unwrap().take_write(&store).unwrap()
        else {
            panic!("new series go by key")
        };
        assert_eq!(store.write(&batch).unwrap().accepted, 2);
        store.flush().unwrap();
        let old = store.series_id(&batch.series[0].0).unwrap().unwrap();
        // Prepared while `a` is live: one batch by id, one by key (with a new series).
        let t = T + 9 * HOUR + 1;
        let req =
            WriteRequest { series: vec![samples(1, &[t], &[3.0]), samples(2, &[t], &[4.0])], ..Default::default() };
        let mut by_id = prepare(&store, &mut table, req, &limits, now).unwrap();
        let req = WriteRequest {
            definitions: vec![def(3, "c", Some("h1"))],
            series: vec![samples(1, &[t + 1], &[5.0]), samples(3, &[t + 1], &[6.0])],
            ..Default::default()
        };
        let mut mixed = prepare(&store, &mut table, req, &limits, now).unwrap();
        assert_eq!(store.compact(false).unwrap().series_retired, 1);
        assert!(store.series_key(old).unwrap().is_none(), "`a` is retired");
        let Write::Rows(rows, mut rekey) = by_id.take_write(&store).unwrap() else { panic!("known series go by id") };
        assert!(rows.series.contains(&old));
        let outcome = store.write_rows_keyed(rows, rekey.key_of()).unwrap();
        assert_eq!((outcome.accepted, outcome.rejected.len()), (2, 0), "{:?}", outcome.rejected);
        let Write::Keyed(batch) = mixed.take_write(&store).unwrap() else { panic!("a new series goes by key") };
        let outcome = store.write(&batch).unwrap();
        assert_eq!((outcome.accepted, outcome.rejected.len()), (2, 0), "{:?}", outcome.rejected);
        let renewed = store.series_id(&batch.series[1].0).unwrap().unwrap();
        assert_ne!(renewed, old);
        let rows = store.scan_all(lockstep_engine::store::ScanRequest::default()).unwrap();
        let got: Vec<(i64, f64)> =
            (0..rows.len()).filter(|&i| rows.series[i] == renewed).map(|i| (rows.time[i], rows.value[i])).collect();
        assert_eq!(got, [(t, 3.0), (t + 1, 5.0)]);
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
            columns: None,
        };
        let mut p = prepare(&store, &mut table, req, &limits, T).unwrap();
        assert!(!p.barriers);
        let Write::Keyed(batch) = p.take_write(&store).unwrap() else { panic!("a new series must go by key") };
        assert_eq!(store.write(&batch).unwrap().accepted, 1);

        // Ref 1 is now in the store, ref 2 is not: the batch goes by key, with the barrier flag.
        let req = WriteRequest {
            series: vec![samples(1, &[T + 1], &[2.0]), samples(2, &[T + 1], &[5.0])],
            ..Default::default()
        };
        let mut p = prepare(&store, &mut table, req, &limits, T).unwrap();
        assert!(p.barriers);
        let Write::Keyed(batch) = p.take_write(&store).unwrap() else { panic!("mixed batch must go by key") };
        assert_eq!(batch.series.len(), 2);
        assert_eq!(store.write(&batch).unwrap().accepted, 2);

        // Both known: by id, invalid samples still rejected by the store.
        let req = WriteRequest {
            series: vec![samples(1, &[T + 2, MAX_TIME_NS + 1], &[3.0, 4.0]), samples(2, &[T + 2], &[6.0])],
            ..Default::default()
        };
        let mut p = prepare(&store, &mut table, req, &limits, T).unwrap();
        assert_eq!(p.rejected, 1);
        let Write::Rows(rows, _) = p.take_write(&store).unwrap() else { panic!("known series must go by id") };
        assert_eq!(rows.runs().count(), 2);
        let outcome = store.write_rows(rows.clone()).unwrap();
        assert_eq!(outcome.accepted, 2);
        let mut bad = rows.clone();
        bad.value[0] = f64::NAN;
        *bad.series.last_mut().unwrap() = 999;
        let outcome = store.write_rows(bad).unwrap();
        assert_eq!(outcome.accepted, 0);
        assert_eq!(outcome.rejected.len(), 2);
        assert!(outcome.rejected.iter().any(|r| r.error.to_string().contains("not in the catalog")));
        assert!(outcome.rejected.iter().any(|r| r.series.starts_with("a{")), "{:?}", outcome.rejected);
        // The per-series form of the same API: unknown ids and ragged series are rejected.
        let ragged = SeriesSamples { timestamps: vec![T + 3, T + 4], values: vec![1.0] };
        let outcome = store.write_resolved(&[(999, ragged.clone()), (rows.series[0], ragged)]).unwrap();
        assert_eq!(outcome.accepted, 0);
        assert!(outcome.rejected[0].error.to_string().contains("not in the catalog"));
        assert!(outcome.rejected[1].error.to_string().contains("2 timestamps but 1 values"), "{:?}", outcome.rejected);
        drop(store);

        // Reopened (WAL replay): all five accepted samples are there.
        let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
        assert_eq!(store.buffered_rows().unwrap(), 5);
    }

    /// A stream that wrote a series, fell silent for longer than the retention (its series was
    /// retired) and writes it again: the ref is looked up by key again (a new series id)
    /// instead of its samples being rejected as an unknown id.
    #[test]
    fn a_stream_writes_a_retired_series_again_by_key() {
        const HOUR: i64 = 3_600_000_000_000;
        let dir = tempfile::tempdir().unwrap();
        let clock = std::sync::Arc::new(lockstep_engine::wallclock::ManualClock((T + 10 * HOUR).into()));
        let config = StoreConfig { retention_ns: Some(3 * HOUR), ..StoreConfig::default() };
        let storage = std::sync::Arc::new(lockstep_engine::storage::OsStorage);
        let store = Store::open_with(dir.path(), config, storage, clock).unwrap();
        let limits = Limits::default();
        let mut table = SeriesTable::default();
        let write = |table: &mut SeriesTable, req: WriteRequest| {
            let mut p = prepare(&store, table, req, &limits, T).unwrap();
            match p.take_write(&store).unwrap() {
                Write::Rows(rows, _) => store.write_rows(rows).unwrap(),
                Write::Keyed(batch) => store.write(&batch).unwrap(),
            }
        };
        let first = WriteRequest {
            definitions: vec![def(1, "a", Some("h1"))],
            series: vec![samples(1, &[T], &[1.0])],
            ..Default::default()
        };
        assert_eq!(write(&mut table, first).accepted, 1);
        let by_id = WriteRequest { series: vec![samples(1, &[T + 1], &[2.0])], ..Default::default() };
        assert_eq!(write(&mut table, by_id).accepted, 1, "by id");
        store.flush().unwrap();
        assert_eq!(store.compact(false).unwrap().series_retired, 1);
        let again = WriteRequest { series: vec![samples(1, &[T + 9 * HOUR], &[3.0])], ..Default::default() };
        let outcome = write(&mut table, again);
        assert_eq!((outcome.accepted, outcome.rejected.len()), (1, 0), "{:?}", outcome.rejected);
        assert_eq!(store.series_id(&table.refs[&1].key).unwrap(), Some(1), "a new id");
        let later = WriteRequest { series: vec![samples(1, &[T + 9 * HOUR + 1], &[4.0])], ..Default::default() };
        assert_eq!(write(&mut table, later).accepted, 1, "by the new id");
    }

    /// Columns with deltas running across runs.
    fn columns(runs: &[(u32, &[i64], &[f64])]) -> SeriesColumns {
        let mut c = SeriesColumns::default();
        let mut prev = 0;
        for (r, ts, vs) in runs {
            c.refs.push(*r);
            c.counts.push(ts.len() as u32);
            for &t in *ts {
                c.timestamp_deltas.push(t - prev);
                prev = t;
            }
            c.values.extend_from_slice(vs);
        }
        c
    }

    /// The columnar form yields exactly the rows of the per-series form, moves the columns
    /// as they are on a steady stream, rejects invalid samples per run, and checks its shape.
    #[test]
    fn columns_match_the_series_form() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
        let limits = Limits::default();
        let mut table = SeriesTable::default();
        let runs: [(u32, &[i64], &[f64]); 3] =
            [(1, &[T, T + 5, T + 9], &[1.0, 2.0, 3.0]), (2, &[T - 4, T], &[7.0, 8.0]), (1, &[T + 20], &[4.0])];
        // First batch: new series go by key; the columns and the series form agree.
        let req = WriteRequest {
            definitions: vec![def(1, "a", Some("h1")), def(2, COLLECTIVE_END_METRIC, Some("h2"))],
            columns: Some(columns(&runs)),
            ..Default::default()
        };
        let mut p = prepare(&store, &mut table, req, &limits, T).unwrap();
        assert!(p.barriers);
        let Write::Keyed(batch) = p.take_write(&store).unwrap() else { panic!("new series go by key") };
        let got: Vec<_> =
            batch.series.iter().map(|(k, s)| (k.metric.to_string(), s.timestamps.clone(), s.values.clone())).collect();
        let want: Vec<_> = runs
            .iter()
            .map(|(r, ts, vs)| {
                (if *r == 1 { "a".to_string() } else { COLLECTIVE_END_METRIC.to_string() }, ts.to_vec(), vs.to_vec())
            })
            .collect();
        assert_eq!(got, want);
        assert_eq!(store.write(&batch).unwrap().accepted, 6);

        // Steady state: the same data by id, once per form, gives identical rows.
        let mut p = prepare(
            &store,
            &mut table,
            WriteRequest { columns: Some(columns(&runs)), ..Default::default() },
            &limits,
            T,
        )
        .unwrap();
        let series_form =
            WriteRequest { series: runs.iter().map(|(r, ts, vs)| samples(*r, ts, vs)).collect(), ..Default::default() };
        let mut q = prepare(&store, &mut table, series_form, &limits, T).unwrap();
        let (Write::Rows(a, _), Write::Rows(b, _)) = (p.take_write(&store).unwrap(), q.take_write(&store).unwrap())
        else {
            panic!("known series go by id")
        };
        assert_eq!(a, b);
        assert_eq!(a.time, vec![T, T + 5, T + 9, T - 4, T, T + 20]);
        assert_eq!(a.runs().count(), 3);
        // Both forms in one request: `series` first, then the columns.
        let both = WriteRequest {
            series: vec![samples(2, &[T + 1], &[9.0])],
            columns: Some(columns(&runs[..1])),
            ..Default::default()
        };
        let p = prepare(&store, &mut table, both, &limits, T).unwrap();
        assert_eq!(p.rows.time, vec![T + 1, T, T + 5, T + 9]);

        // An invalid sample rejects only itself, with the ref of its run.
        let bad: [(u32, &[i64], &[f64]); 2] = [(1, &[T + 30, T + 31], &[1.0, f64::NAN]), (2, &[T + 30], &[1.0])];
        let p = prepare(
            &store,
            &mut table,
            WriteRequest { columns: Some(columns(&bad)), ..Default::default() },
            &limits,
            T,
        )
        .unwrap();
        assert_eq!((p.len(), p.rejected), (2, 1));
        assert_eq!((p.rejections[0].r#ref, p.rejections[0].reason.as_str()), (1, "non_finite_value"));
        assert_eq!(p.rows.time, vec![T + 30, T + 30]);

        // Shape errors are INVALID_ARGUMENT with the place named.
        let check = |c: SeriesColumns, want: &str| {
            let mut table = SeriesTable::default();
            let req =
                WriteRequest { definitions: vec![def(1, "a", Some("h1"))], columns: Some(c), ..Default::default() };
            let e = prepare(&store, &mut table, req, &limits, T).unwrap_err();
            assert_eq!(e.code(), Code::InvalidArgument);
            assert!(e.message().contains(want), "{} should contain {want}", e.message());
        };
        let mut c = columns(&runs[..1]);
        c.counts.push(1);
        check(c, "1 refs but 2 counts");
        let mut c = columns(&runs[..1]);
        c.counts[0] = 2;
        check(c, "counts sum to 2 but there are 3 samples");
        let mut c = columns(&runs[..1]);
        c.values.pop();
        check(c, "3 timestamp_deltas but 2 values");
        let mut c = columns(&runs[..1]);
        c.timestamp_deltas[1] = i64::MAX;
        check(c, "timestamp_deltas[1] overflows");
        check(columns(&[(5, &[T], &[1.0])]), "columns.refs[0]: ref 5 is not defined");
        let mut c = columns(&runs[..1]);
        c.counts[0] = u32::MAX;
        check(c, "counts sum to 4294967295");
        let small = Limits { max_samples_per_request: 2, ..Limits::default() };
        let req = WriteRequest { columns: Some(columns(&runs[..1])), ..Default::default() };
        let e = prepare(&store, &mut table, req, &small, T).unwrap_err();
        assert!(e.message().contains("limit is 2"), "{}", e.message());
    }
}
