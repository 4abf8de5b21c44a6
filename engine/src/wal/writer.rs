//! The single writer thread: group commit, segment rotation and poisoning.
//!
//! The thread blocks for one request, drains more with `try_recv` up to the batch byte cap,
//! writes every record of the batch, makes them durable with one `sync`, and only then
//! replies. A write or sync failure poisons the WAL: the failed batch and everything after it
//! get [`Error::Unavailable`]; a failed fsync is never retried (after a failed fsync the
//! kernel may already have dropped the dirty pages, so a later "successful" fsync proves
//! nothing).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use crossbeam::channel::{Receiver, Sender};

use super::WalStats;
use super::format::{self, RECORD_HEADER_LEN, SEGMENT_HEADER_LEN};
use crate::error::{Error, Result};
use crate::manifest::StoreId;
use crate::storage::{Storage, StorageFile};

/// One message to the writer thread. Every request carries its own reply channel.
pub(crate) enum Request {
    /// Append one record; replies with the segment seq once it is durable.
    Append {
        /// The record payload.
        payload: Vec<u8>,
        /// Where to send the result.
        reply: Sender<Result<u64>>,
    },
    /// Seal the active segment after everything before it is durable; replies with its seq.
    Rotate {
        /// Where to send the result.
        reply: Sender<Result<u64>>,
    },
}

impl Request {
    /// Bytes this request adds to a batch (its framed size; a rotate counts as nothing).
    fn batch_bytes(&self) -> usize {
        match self {
            Request::Append { payload, .. } => payload.len().saturating_add(RECORD_HEADER_LEN),
            Request::Rotate { .. } => 0,
        }
    }
}

/// State shared between the writer thread and [`super::Wal`] handles.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    records: AtomicU64,
    bytes: AtomicU64,
    fsyncs: AtomicU64,
    fsync_nanos_total: AtomicU64,
    fsync_nanos_max: AtomicU64,
    current_segment: AtomicU64,
    poisoned: OnceLock<String>,
}

impl Shared {
    /// A stats snapshot (each counter read independently).
    pub(crate) fn stats(&self) -> WalStats {
        WalStats {
            records: self.records.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            fsyncs: self.fsyncs.load(Ordering::Relaxed),
            fsync_nanos_total: self.fsync_nanos_total.load(Ordering::Relaxed),
            fsync_nanos_max: self.fsync_nanos_max.load(Ordering::Relaxed),
            current_segment: self.current_segment.load(Ordering::Relaxed),
        }
    }

    /// `Err(Unavailable)` once the WAL is poisoned.
    pub(crate) fn check_poisoned(&self) -> Result<()> {
        match self.poisoned.get() {
            Some(_) => Err(self.poisoned_error()),
            None => Ok(()),
        }
    }

    /// The error every request gets once the WAL is poisoned.
    pub(crate) fn poisoned_error(&self) -> Error {
        let reason = self.poisoned.get().map_or("wal poisoned", String::as_str);
        Error::Unavailable { reason: format!("{reason}; wal is poisoned until reopened") }
    }

    /// The error when the writer thread is gone: the poisoning reason if there is one.
    pub(crate) fn stopped_error(&self) -> Error {
        match self.poisoned.get() {
            Some(_) => self.poisoned_error(),
            None => Error::Unavailable { reason: "wal writer thread stopped".into() },
        }
    }

    fn poison(&self, reason: String) {
        tracing::error!(%reason, "wal poisoned; refusing appends until reopened");
        let _ = self.poisoned.set(reason);
    }

    fn record_fsync(&self, nanos: u64) {
        self.fsyncs.fetch_add(1, Ordering::Relaxed);
        self.fsync_nanos_total.fetch_add(nanos, Ordering::Relaxed);
        self.fsync_nanos_max.fetch_max(nanos, Ordering::Relaxed);
    }
}

/// The writer thread's state.
pub(crate) struct Writer {
    storage: Arc<dyn Storage>,
    dir: PathBuf,
    segment_bytes: u64,
    max_batch_bytes: usize,
    /// The store id written into every segment header.
    store: StoreId,
    shared: Arc<Shared>,
    /// Seq of the active segment; its file is created lazily by the first record.
    active_seq: u64,
    /// The active segment's file, once created.
    file: Option<Box<dyn StorageFile>>,
    /// Bytes in the active segment file (header included).
    file_len: u64,
    /// Whether the active segment holds at least one record.
    has_records: bool,
    /// Bytes written since the last sync.
    dirty: bool,
    /// A segment file was created since the last directory sync.
    dir_dirty: bool,
    /// Appends written but not yet durable: reply channel, seq, framed bytes.
    pending: Vec<(Sender<Result<u64>>, u64, u64)>,
}

impl Writer {
    /// A writer of store `store`'s segments whose first segment will be `first_seq`.
    pub(crate) fn new(
        storage: Arc<dyn Storage>,
        dir: &Path,
        (segment_bytes, max_batch_bytes): (u64, usize),
        store: StoreId,
        shared: Arc<Shared>,
        first_seq: u64,
    ) -> Self {
        shared.current_segment.store(first_seq, Ordering::Relaxed);
        Writer {
            storage,
            dir: dir.to_path_buf(),
            segment_bytes,
            max_batch_bytes,
            store,
            shared,
            active_seq: first_seq,
            file: None,
            file_len: 0,
            has_records: false,
            dirty: false,
            dir_dirty: false,
            pending: Vec::new(),
        }
    }

    /// The thread body: runs until every sender is gone and the queue is drained.
    pub(crate) fn run(mut self, rx: Receiver<Request>) {
        let mut batch = Vec::new();
        while let Ok(first) = rx.recv() {
            let mut bytes = first.batch_bytes();
            batch.push(first);
            while bytes < self.max_batch_bytes {
                match rx.try_recv() {
                    Ok(request) => {
                        bytes = bytes.saturating_add(request.batch_bytes());
                        batch.push(request);
                    }
                    Err(_) => break,
                }
            }
            self.process(&mut batch);
        }
        // Everything was committed by `process`; the file handle is dropped here.
    }

    /// Writes a batch, commits it with one sync and replies to every request.
    fn process(&mut self, batch: &mut Vec<Request>) {
        for request in batch.drain(..) {
            if let Err(e) = self.shared.check_poisoned() {
                reply_to(request, Err(e));
                continue;
            }
            match request {
                Request::Append { payload, reply } => match self.write_record(&payload) {
                    Ok(()) => {
                        let framed = (payload.len() + RECORD_HEADER_LEN) as u64;
                        self.pending.push((reply, self.active_seq, framed));
                    }
                    Err(reason) => {
                        self.fail(reason);
                        let _ = reply.send(Err(self.shared.poisoned_error()));
                    }
                },
                Request::Rotate { reply } => {
                    let result = self.commit().and_then(|()| self.seal());
                    let _ = reply.send(result);
                }
            }
        }
        let _ = self.commit();
    }

    /// Writes one framed record into the active segment, moving to a new segment first if
    /// this record would push a non-empty segment past `segment_bytes`.
    fn write_record(&mut self, payload: &[u8]) -> std::result::Result<(), String> {
        let framed = (payload.len() + RECORD_HEADER_LEN) as u64;
        if self.has_records && self.file_len.saturating_add(framed) > self.segment_bytes {
            self.commit().map_err(|e| e.to_string())?;
            self.seal().map_err(|e| e.to_string())?;
        }
        let path = self.segment_path();
        if self.file.is_none() {
            let mut file =
                self.storage.create(&path).map_err(|e| format!("wal create of {} failed: {e}", path.display()))?;
            self.dir_dirty = true;
            self.dirty = true;
            file.write_all(&format::encode_segment_header(self.active_seq, self.store))
                .map_err(|e| format!("wal write to {} failed: {e}", path.display()))?;
            self.file = Some(file);
            self.file_len = SEGMENT_HEADER_LEN as u64;
        }
        let Some(file) = self.file.as_mut() else {
            return Err("wal segment file missing".into());
        };
        self.dirty = true;
        file.write_all(&format::encode_record_header(payload))
            .and_then(|()| file.write_all(payload))
            .map_err(|e| format!("wal write to {} failed: {e}", path.display()))?;
        self.file_len += framed;
        self.has_records = true;
        Ok(())
    }

    /// Makes everything written durable (one file sync, plus a directory sync if a segment was
    /// created) and acknowledges the pending appends. On failure the WAL is poisoned.
    fn commit(&mut self) -> Result<()> {
        self.shared.check_poisoned()?;
        if self.dirty {
            let path = self.segment_path();
            if let Some(file) = self.file.as_mut() {
                let start = Instant::now();
                let synced = file.sync();
                let nanos = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
                self.shared.record_fsync(nanos);
                if let Err(e) = synced {
                    self.fail(format!("wal fsync of {} failed: {e}", path.display()));
                    return self.shared.check_poisoned();
                }
            }
            self.dirty = false;
        }
        if self.dir_dirty {
            if let Err(e) = self.storage.sync_dir(&self.dir) {
                self.fail(format!("wal directory sync of {} failed: {e}", self.dir.display()));
                return self.shared.check_poisoned();
            }
            self.dir_dirty = false;
        }
        for (reply, seq, framed) in self.pending.drain(..) {
            self.shared.records.fetch_add(1, Ordering::Relaxed);
            self.shared.bytes.fetch_add(framed, Ordering::Relaxed);
            let _ = reply.send(Ok(seq));
        }
        Ok(())
    }

    /// Closes the active segment (already committed) and advances to the next seq.
    fn seal(&mut self) -> Result<u64> {
        let sealed = self.active_seq;
        let Some(next) = sealed.checked_add(1) else {
            self.fail("wal segment sequence exhausted".into());
            return Err(Error::ResourceExhausted { what: "wal segment sequence", limit: u64::MAX.to_string() });
        };
        self.file = None;
        self.file_len = 0;
        self.has_records = false;
        self.active_seq = next;
        self.shared.current_segment.store(next, Ordering::Relaxed);
        Ok(sealed)
    }

    /// Poisons the WAL and fails every append that was written but not yet durable.
    fn fail(&mut self, reason: String) {
        self.shared.poison(reason);
        self.file = None;
        for (reply, _, _) in self.pending.drain(..) {
            let _ = reply.send(Err(self.shared.poisoned_error()));
        }
    }

    fn segment_path(&self) -> PathBuf {
        self.dir.join(format::segment_file_name(self.active_seq))
    }
}

/// Sends `result` to whoever sent `request`.
fn reply_to(request: Request, result: Result<u64>) {
    match request {
        Request::Append { reply, .. } | Request::Rotate { reply } => {
            let _ = reply.send(result);
        }
    }
}
