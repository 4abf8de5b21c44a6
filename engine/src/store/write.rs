//! The write path: a batch by key ([`Store::write`], defining new series), rows by series id
//! ([`Store::write_rows`], [`Store::write_rows_keyed`], [`Store::write_resolved`]), each
//! checked under the WAL gate, durable in the WAL and then visible in the write buffer.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::{BACKPRESSURE_FACTOR, Rejection, Store, WriteOutcome, lock_poisoned, record};
use crate::error::{Error, Result};
use crate::model::{MAX_METRIC_NAME_BYTES, Rows, SeriesId, SeriesKey, WriteBatch};
use crate::wal::Wal;

impl Store {
    /// Splits a batch into valid rows per series and rejections.
    pub(super) fn validate<'a>(&self, batch: &'a WriteBatch) -> (Vec<(&'a SeriesKey, Rows)>, Vec<Rejection>) {
        let now = self.clock.now_ns();
        let mut ok = Vec::with_capacity(batch.series.len());
        let mut rejected = Vec::new();
        for (key, samples) in &batch.series {
            let (t, v) = (samples.timestamps.len(), samples.values.len());
            if t != v {
                rejected.push(length_mismatch(key, t, v));
                continue;
            }
            if let Err(error) = key.validate() {
                let series = key.display_bounded(MAX_METRIC_NAME_BYTES);
                rejected.push(Rejection { series, samples: samples.timestamps.len(), error });
                continue;
            }
            let mut rows = Rows::with_capacity(samples.timestamps.len());
            let mut first: Option<Error> = None;
            let mut bad = 0;
            for (&t, &v) in samples.timestamps.iter().zip(&samples.values) {
                match self.check_sample(key, t, v, now) {
                    Ok(()) => rows.push(0, t, v),
                    Err(e) => {
                        bad += 1;
                        first.get_or_insert(e);
                    }
                }
            }
            if let Some(error) = first {
                rejected.push(Rejection { series: key.to_string(), samples: bad, error });
            }
            if !rows.is_empty() {
                ok.push((key, rows));
            }
        }
        (ok, rejected)
    }

    /// Writes a batch durably. Returns once the accepted samples are fsynced in the WAL;
    /// invalid samples are rejected per series with a reason, the rest is accepted.
    pub fn write(&self, batch: &WriteBatch) -> Result<WriteOutcome> {
        let (valid, rejected) = self.validate(batch);
        let rejected_count: usize = rejected.iter().map(|r| r.samples).sum();
        self.metrics.samples_rejected.fetch_add(rejected_count as u64, Ordering::Relaxed);
        if valid.is_empty() {
            return Ok(WriteOutcome { accepted: 0, rejected });
        }
        self.admit()?;
        let gate = self.gate.read().map_err(lock_poisoned)?;
        let wal = gate.as_ref().ok_or_else(|| self.read_only_error())?;
        // Resolve ids. New series are defined under the catalog write lock, and the record
        // carrying their definitions is queued before the lock is released, so every later
        // record that uses those ids follows it in the WAL.
        let mut ids = Vec::with_capacity(valid.len());
        let ticket = {
            let catalog = self.catalog.read().map_err(lock_poisoned)?;
            let mut missing = false;
            for (key, _) in &valid {
                match catalog.get(key) {
                    Some(id) => ids.push(id),
                    None => {
                        missing = true;
                        break;
                    }
                }
            }
            if !missing {
                let rows = assemble(&valid, &ids);
                let payload = record::encode(&[], &rows);
                drop(catalog);
                (wal.submit(payload)?, rows)
            } else {
                drop(catalog);
                ids.clear();
                let mut catalog = self.catalog.write().map_err(lock_poisoned)?;
                let mut defs: Vec<SeriesId> = Vec::new();
                for (key, _) in &valid {
                    let (id, inserted) = catalog.get_or_insert(key)?;
                    if inserted {
                        defs.push(id);
                    }
                    ids.push(id);
                }
                let rows = assemble(&valid, &ids);
                let def_refs: Vec<(SeriesId, &SeriesKey)> =
                    defs.iter().filter_map(|&id| catalog.key(id).map(|k| (id, k.as_ref()))).collect();
                let payload = record::encode(&def_refs, &rows);
                let ticket = wal.submit(payload)?;
                drop(catalog);
                (ticket, rows)
            }
        };
        let (ticket, rows) = ticket;
        self.finish_write(gate, ticket, rows, rejected)
    }

    /// The id of a series already in the catalog (collectors cache it and write with
    /// [`Store::write_resolved`]); `None` for a series never written.
    pub fn series_id(&self, key: &SeriesKey) -> Result<Option<SeriesId>> {
        Ok(self.catalog.read().map_err(lock_poisoned)?.get(key))
    }

    /// The key of a series id (`None` for an id not in the catalog).
    pub fn series_key(&self, id: SeriesId) -> Result<Option<Arc<SeriesKey>>> {
        Ok(self.catalog.read().map_err(lock_poisoned)?.key(id).cloned())
    }

    /// Writes samples of series resolved with [`Store::series_id`], durably, like
    /// [`Store::write`] but without hashing and comparing series keys: the path of a long
    /// ingest stream that names the same series in every batch. An id not in the catalog
    /// (never assigned, or retired) rejects that series' samples: a client that caches ids
    /// forgets them when [`Store::catalog_generation`] changed.
    pub fn write_resolved(&self, batch: &[(SeriesId, crate::SeriesSamples)]) -> Result<WriteOutcome> {
        let total = batch.iter().map(|(_, s)| s.timestamps.len().min(s.values.len())).sum();
        let mut rows = Rows::with_capacity(total);
        let mut rejected = Vec::new();
        {
            let catalog = self.catalog.read().map_err(lock_poisoned)?;
            for (id, samples) in batch {
                let (t, v) = (samples.timestamps.len(), samples.values.len());
                if t != v {
                    // Unknown ids are rejected by `write_rows_with`, but only whole runs.
                    rejected.push(match catalog.key(*id) {
                        Some(key) => length_mismatch(key, t, v),
                        None => unknown_id(*id, t.max(v)),
                    });
                    continue;
                }
                rows.series.extend(std::iter::repeat_n(*id, samples.timestamps.len()));
                rows.time.extend_from_slice(&samples.timestamps);
                rows.value.extend_from_slice(&samples.values);
            }
        }
        self.write_rows_with(rows, rejected, None)
    }

    /// [`Store::write_resolved`] for samples already in columns: `rows.series` holds the
    /// [`Store::series_id`] of each sample, and consecutive samples of one series form a run.
    /// Rows are moved into the WAL record and the write buffer without a copy when all are
    /// valid (the ingest server's path); invalid samples and unknown ids are rejected per run.
    pub fn write_rows(&self, rows: Rows) -> Result<WriteOutcome> {
        self.write_rows_with(rows, Vec::new(), None)
    }

    /// [`Store::write_rows`] for a writer that caches ids and still knows their keys: a run
    /// whose id was retired after the writer resolved it (a series silent for longer than the
    /// retention, written again while the compaction pass retired it) is written by its key
    /// instead, `key_of(id)`, which defines the series anew, rather than rejected as an
    /// unknown id. Those runs go in a second WAL record after the first; both are durable
    /// when this returns. An error after the first record leaves it written: resending the
    /// whole batch is harmless, as duplicates are (see [`Store::write`]).
    pub fn write_rows_keyed(
        &self,
        rows: Rows,
        key_of: &mut dyn FnMut(SeriesId) -> Option<SeriesKey>,
    ) -> Result<WriteOutcome> {
        self.write_rows_with(rows, Vec::new(), Some(key_of))
    }

    fn write_rows_with(
        &self,
        mut rows: Rows,
        mut rejected: Vec<Rejection>,
        mut key_of: Option<&mut dyn FnMut(SeriesId) -> Option<SeriesKey>>,
    ) -> Result<WriteOutcome> {
        let now = self.clock.now_ns();
        if rows.series.len() != rows.time.len() || rows.time.len() != rows.value.len() {
            return Err(Error::InvalidBatch {
                reason: format!(
                    "row columns differ in length: {} series ids, {} times, {} values",
                    rows.series.len(),
                    rows.time.len(),
                    rows.value.len()
                ),
            });
        }
        if rows.is_empty() {
            let rejected_count: usize = rejected.iter().map(|r| r.samples).sum();
            self.metrics.samples_rejected.fetch_add(rejected_count as u64, Ordering::Relaxed);
            return Ok(WriteOutcome { accepted: 0, rejected });
        }
        self.admit()?;
        // The gate is held from the ids' check to the buffer insert: a retirement of series
        // (which takes it exclusively) sees these rows in the buffer, or these ids retired.
        let gate = self.gate.read().map_err(lock_poisoned)?;
        // Runs of retired ids that `key_of` named: written by key after the rows.
        let mut rekeyed = WriteBatch::default();
        {
            let catalog = self.catalog.read().map_err(lock_poisoned)?;
            let mut clean = true;
            for run in rows.runs() {
                let id = rows.series[run.start];
                clean &= catalog.key(id).is_some()
                    && rows.time[run.clone()].iter().zip(&rows.value[run]).all(|(&t, &v)| self.sample_ok(t, v, now));
                if !clean {
                    break;
                }
            }
            if !clean {
                let mut kept = Rows::with_capacity(rows.len());
                for run in rows.runs() {
                    let id = rows.series[run.start];
                    let Some(key) = catalog.key(id) else {
                        match key_of.as_mut().filter(|_| catalog.retired().contains(id)).and_then(|f| f(id)) {
                            Some(key) => rekeyed.series.push((
                                key,
                                crate::SeriesSamples {
                                    timestamps: rows.time[run.clone()].to_vec(),
                                    values: rows.value[run].to_vec(),
                                },
                            )),
                            None => rejected.push(unknown_id(id, run.len())),
                        }
                        continue;
                    };
                    let (mut bad, mut first) = (0, None);
                    for (&t, &v) in rows.time[run.clone()].iter().zip(&rows.value[run]) {
                        match self.check_sample(key, t, v, now) {
                            Ok(()) => kept.push(id, t, v),
                            Err(e) => {
                                bad += 1;
                                first.get_or_insert(e);
                            }
                        }
                    }
                    if let Some(error) = first {
                        rejected.push(Rejection { series: key.to_string(), samples: bad, error });
                    }
                }
                rows = kept;
            }
        }
        let rejected_count: usize = rejected.iter().map(|r| r.samples).sum();
        self.metrics.samples_rejected.fetch_add(rejected_count as u64, Ordering::Relaxed);
        let mut outcome = if rows.is_empty() {
            drop(gate);
            WriteOutcome { accepted: 0, rejected }
        } else {
            let wal = gate.as_ref().ok_or_else(|| self.read_only_error())?;
            let ticket = wal.submit(record::encode(&[], &rows))?;
            self.finish_write(gate, ticket, rows, rejected)?
        };
        if !rekeyed.series.is_empty() {
            let more = self.write(&rekeyed)?;
            outcome.accepted += more.accepted;
            outcome.rejected.extend(more.rejected);
        }
        Ok(outcome)
    }

    /// Waits for the WAL record, makes its rows visible, and flushes when the buffer is full.
    fn finish_write(
        &self,
        gate: std::sync::RwLockReadGuard<'_, Option<Wal>>,
        ticket: crate::wal::WalTicket,
        rows: Rows,
        rejected: Vec<Rejection>,
    ) -> Result<WriteOutcome> {
        ticket.wait()?;
        let accepted = rows.len();
        self.state.write().map_err(lock_poisoned)?.active.push(rows);
        drop(gate);
        self.metrics.samples_written.fetch_add(accepted as u64, Ordering::Relaxed);
        let buffered = self.buffered_rows()?;
        // The write is durable and visible: a flush failing now is logged and counted (its
        // rows stay buffered and in the WAL), never reported as this write's failure.
        if buffered >= self.config.flush_rows && !self.flush_failing() {
            if let Ok(guard) = self.manifest_lock.try_lock() {
                let _ = self.flush_locked(&guard);
            } else if buffered >= self.config.flush_rows.saturating_mul(BACKPRESSURE_FACTOR) {
                // Writes outrun the flush: wait for it (and flush again if still behind), so
                // that the buffer stays bounded however fast clients write. The write itself is
                // already durable and visible; only its return is delayed.
                let guard = self.manifest_lock.lock().map_err(lock_poisoned)?;
                self.metrics.flush_waits.fetch_add(1, Ordering::Relaxed);
                if self.buffered_rows()? >= self.config.flush_rows {
                    let _ = self.flush_locked(&guard);
                }
            }
        }
        Ok(WriteOutcome { accepted, rejected })
    }
}

/// The rejection of a series whose timestamps and values differ in count.
fn length_mismatch(key: &SeriesKey, t: usize, v: usize) -> Rejection {
    Rejection {
        series: key.to_string(),
        samples: t.max(v),
        error: Error::InvalidBatch { reason: format!("series {key} has {t} timestamps but {v} values") },
    }
}

fn unknown_id(id: SeriesId, samples: usize) -> Rejection {
    Rejection {
        series: format!("series id {id}"),
        samples,
        error: Error::InvalidBatch { reason: format!("series id {id} is not in the catalog") },
    }
}

/// Concatenates per-series rows, stamping the resolved ids.
fn assemble(valid: &[(&SeriesKey, Rows)], ids: &[SeriesId]) -> Rows {
    let total = valid.iter().map(|(_, r)| r.len()).sum();
    let mut rows = Rows::with_capacity(total);
    for ((_, r), &id) in valid.iter().zip(ids) {
        rows.series.extend(std::iter::repeat_n(id, r.len()));
        rows.time.extend_from_slice(&r.time);
        rows.value.extend_from_slice(&r.value);
    }
    rows
}
