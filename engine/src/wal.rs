//! Write-ahead log: segmented, CRC-framed, group-committed.
//!
//! Appends go through a bounded crossbeam channel to one writer thread, which drains whatever
//! is queued (up to [`WalConfig::max_batch_bytes`]), writes it, syncs once and then acknowledges
//! every record of the batch: an `Ok` from [`Wal::append`] means the record is on stable
//! storage. A failed write or fsync poisons the WAL; from then on every append returns
//! [`Error::Unavailable`] until the WAL is reopened (fsyncs are never retried).
//!
//! On [`Wal::open`] every segment after the flushed point is replayed in order; a torn tail of
//! the last segment is truncated, any other damage is [`Error::WalCorrupt`], and a segment of
//! another store (its header names another store id) is [`Error::WalForeignSegment`]. New
//! appends always start a new segment. The byte format and policies are in `docs/format-wal.md`.

mod format;
mod replay;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam::channel::{self, Receiver, Sender, TrySendError};

use crate::error::{Error, Result};
use crate::manifest::StoreId;
use crate::storage::Storage;
use writer::{Request, Shared, Writer};

/// Tuning knobs of the WAL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalConfig {
    /// A segment is sealed once the next record would take it past this size (a segment
    /// always holds at least one record, so one huge record may exceed it). Default 64 MiB.
    pub segment_bytes: u64,
    /// Capacity of the append queue in requests; `append` blocks and `try_append` fails when
    /// it is full. Default 4096 (0 is treated as 1).
    pub queue_capacity: usize,
    /// Largest accepted payload; larger appends fail with [`Error::WalRecordTooLarge`] before
    /// anything is written. Default 256 MiB; values above `u32::MAX` are capped to it.
    pub max_record_bytes: usize,
    /// Group-commit cap: the writer stops draining the queue into a batch once the batch holds
    /// this many framed bytes. Default 16 MiB.
    pub max_batch_bytes: usize,
}

impl Default for WalConfig {
    fn default() -> Self {
        WalConfig {
            segment_bytes: 64 << 20,
            queue_capacity: 4096,
            max_record_bytes: 256 << 20,
            max_batch_bytes: 16 << 20,
        }
    }
}

/// One record handed to the replay callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordRef<'a> {
    /// Sequence number of the segment holding the record.
    pub segment: u64,
    /// Byte offset of the record header within the segment file.
    pub offset: u64,
    /// The record payload.
    pub payload: &'a [u8],
}

/// What [`Wal::open`] replayed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplayStats {
    /// Segment files read (those with seq greater than `replay_after`).
    pub segments: usize,
    /// Records handed to the callback.
    pub records: u64,
    /// Framed bytes of those records (8-byte headers plus payloads).
    pub bytes: u64,
    /// The torn tail cut from the last segment, if there was one.
    pub truncated_tail: Option<TruncatedTail>,
}

/// A torn tail removed during replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TruncatedTail {
    /// The segment file.
    pub path: PathBuf,
    /// Where the file was cut (0: the file was removed because its header was torn).
    pub offset: u64,
    /// How many bytes were dropped.
    pub dropped_bytes: u64,
}

/// Counters of a running WAL; a cheap snapshot of atomics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WalStats {
    /// Records acknowledged since open.
    pub records: u64,
    /// Framed bytes (headers plus payloads) of those records.
    pub bytes: u64,
    /// File syncs issued by the writer (one per group commit, plus one before a size-triggered
    /// segment switch inside a batch). Directory syncs are not counted.
    pub fsyncs: u64,
    /// Total time spent in those syncs, in nanoseconds.
    pub fsync_nanos_total: u64,
    /// Longest single sync, in nanoseconds.
    pub fsync_nanos_max: u64,
    /// Sequence number of the segment new appends go to.
    pub current_segment: u64,
}

/// The write-ahead log. `Send + Sync`: share it behind an `Arc` and append from any thread.
#[derive(Debug)]
pub struct Wal {
    storage: Arc<dyn Storage>,
    dir: PathBuf,
    store: StoreId,
    max_record_bytes: usize,
    queue_capacity: usize,
    shared: Arc<Shared>,
    sender: Option<Sender<Request>>,
    thread: Option<JoinHandle<()>>,
}

impl Wal {
    /// Opens (creating if needed) the WAL in `dir`.
    ///
    /// Replays every record of the segments with seq greater than `replay_after`, in order,
    /// calling `on_record`; segments at or below `replay_after` are not read. A torn tail of
    /// the last segment is truncated and reported in [`ReplayStats::truncated_tail`]; a bad
    /// record anywhere else returns [`Error::WalCorrupt`]. If `on_record` fails, open fails
    /// with its error (the callback may already have seen a prefix of the records).
    ///
    /// Then starts the writer thread. New appends go to a new segment whose seq is greater
    /// than both every existing segment and `replay_after`.
    ///
    /// Every segment written carries `store` in its header (format version 2). Replay refuses
    /// a segment whose header names another store with [`Error::WalForeignSegment`] — the
    /// skipped ones too (only their headers are read) — and so does a version-1 segment (no
    /// id, accepted otherwise) numbered after a version-2 one.
    pub fn open(
        storage: Arc<dyn Storage>,
        dir: &Path,
        config: WalConfig,
        store: StoreId,
        replay_after: u64,
        on_record: &mut dyn FnMut(RecordRef<'_>) -> Result<()>,
    ) -> Result<(Wal, ReplayStats)> {
        storage.create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let segments = replay::list_segments(storage.as_ref(), dir)?;
        let last_seq = segments.last().map_or(0, |s| s.seq).max(replay_after);
        let (skipped, to_replay): (Vec<_>, Vec<_>) = segments.into_iter().partition(|s| s.seq <= replay_after);
        for segment in &skipped {
            replay::check_skipped(storage.as_ref(), segment, Some(store))?;
        }
        let stats = replay::replay(storage.as_ref(), dir, Some(store), &to_replay, on_record)?;
        let first_seq = last_seq
            .checked_add(1)
            .ok_or_else(|| Error::ResourceExhausted { what: "wal segment sequence", limit: u64::MAX.to_string() })?;

        let queue_capacity = config.queue_capacity.max(1);
        let max_record_bytes = config.max_record_bytes.min(u32::MAX as usize);
        let shared = Arc::new(Shared::default());
        let writer = Writer::new(
            storage.clone(),
            dir,
            (config.segment_bytes, config.max_batch_bytes),
            store,
            shared.clone(),
            first_seq,
        );
        let (sender, receiver) = channel::bounded(queue_capacity);
        let thread = std::thread::Builder::new()
            .name("lockstep-wal".into())
            .spawn(move || writer.run(receiver))
            .map_err(|e| Error::io(dir, e))?;
        let wal = Wal {
            storage,
            dir: dir.to_path_buf(),
            store,
            max_record_bytes,
            queue_capacity,
            shared,
            sender: Some(sender),
            thread: Some(thread),
        };
        Ok((wal, stats))
    }

    /// Appends one record and returns once it is durable (group commit: one fsync covers every
    /// record the writer drained together). Returns the seq of the segment it landed in.
    /// Blocks while the queue is full.
    pub fn append(&self, payload: Vec<u8>) -> Result<u64> {
        self.submit(payload)?.wait()
    }

    /// Queues one record and returns a ticket to wait on, without waiting for the fsync.
    /// Records are written in the order `submit` returns, so a caller can queue under a lock
    /// and wait outside it. Blocks while the queue is full.
    pub fn submit(&self, payload: Vec<u8>) -> Result<WalTicket> {
        let (request, reply) = self.request(payload)?;
        self.sender()?.send(request).map_err(|_| self.stopped())?;
        Ok(WalTicket { reply, shared: self.shared.clone() })
    }

    /// Like [`Wal::append`], but fails with [`Error::ResourceExhausted`] at once if the queue
    /// is full. (Once queued, it still waits for its fsync.)
    pub fn try_append(&self, payload: Vec<u8>) -> Result<u64> {
        let (request, reply) = self.request(payload)?;
        match self.sender()?.try_send(request) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                return Err(Error::ResourceExhausted {
                    what: "wal append queue",
                    limit: format!("{} requests", self.queue_capacity),
                });
            }
            Err(TrySendError::Disconnected(_)) => return Err(self.stopped()),
        }
        WalTicket { reply, shared: self.shared.clone() }.wait()
    }

    /// Seals the active segment once everything appended before this call is durable, so that
    /// later appends go to a new segment; returns the sealed seq. Rotating a segment that never
    /// received a record still consumes its seq (no file exists for it).
    pub fn rotate(&self) -> Result<u64> {
        self.shared.check_poisoned()?;
        let (reply, rx) = channel::bounded(1);
        self.sender()?.send(Request::Rotate { reply }).map_err(|_| self.stopped())?;
        rx.recv().map_err(|_| self.stopped())?
    }

    /// Deletes every segment with seq `<= seq`, never the active one, then syncs the directory.
    /// A segment whose header names another store is kept (it is not this store's to delete:
    /// logged as an error here, refused by the next open).
    pub fn remove_through(&self, seq: u64) -> Result<()> {
        // The active seq only grows, so every segment below the value read here is sealed.
        let active = self.shared.stats().current_segment;
        let mut removed = false;
        for segment in replay::list_segments(self.storage.as_ref(), &self.dir)? {
            if segment.seq > seq || segment.seq >= active {
                break;
            }
            if let Err(e @ Error::WalForeignSegment { .. }) =
                replay::check_skipped(self.storage.as_ref(), &segment, Some(self.store))
            {
                tracing::error!(error = %e, "not deleting a wal segment of another store");
                continue;
            }
            self.storage.remove_file(&segment.path).map_err(|e| Error::io(&segment.path, e))?;
            removed = true;
        }
        if removed {
            self.storage.sync_dir(&self.dir).map_err(|e| Error::io(&self.dir, e))?;
        }
        Ok(())
    }

    /// Whether a failed write or fsync poisoned this WAL (it refuses every append until it is
    /// replaced by a new one).
    pub fn is_poisoned(&self) -> bool {
        self.shared.check_poisoned().is_err()
    }

    /// Deletes every segment with seq `<= seq`, the active one included: only for a poisoned
    /// WAL whose acknowledged records are all in data files (it is replaced right after).
    pub fn remove_through_poisoned(&self, seq: u64) -> Result<()> {
        for segment in replay::list_segments(self.storage.as_ref(), &self.dir)? {
            if segment.seq > seq {
                break;
            }
            self.storage.remove_file(&segment.path).map_err(|e| Error::io(&segment.path, e))?;
        }
        self.storage.sync_dir(&self.dir).map_err(|e| Error::io(&self.dir, e))
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> WalStats {
        self.shared.stats()
    }

    /// Requests waiting in the queue (not counting the batch being written).
    pub fn queue_len(&self) -> usize {
        self.sender.as_ref().map_or(0, Sender::len)
    }

    /// The directory holding the segments.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The store id every segment of this WAL carries.
    pub fn store_id(&self) -> StoreId {
        self.store
    }

    /// Stops the writer thread after it has drained the queue (also done on drop). Returns
    /// [`Error::Unavailable`] if the WAL was poisoned or the writer thread died.
    pub fn close(mut self) -> Result<()> {
        self.shutdown()?;
        self.shared.check_poisoned()
    }

    fn shutdown(&mut self) -> Result<()> {
        drop(self.sender.take());
        match self.thread.take() {
            Some(thread) => {
                thread.join().map_err(|_| Error::Unavailable { reason: "wal writer thread panicked".into() })
            }
            None => Ok(()),
        }
    }

    /// Validates a payload and builds its request and reply channel.
    fn request(&self, payload: Vec<u8>) -> Result<(Request, Receiver<Result<u64>>)> {
        if payload.len() > self.max_record_bytes {
            return Err(Error::WalRecordTooLarge { len: payload.len(), limit: self.max_record_bytes });
        }
        self.shared.check_poisoned()?;
        let (reply, rx) = channel::bounded(1);
        Ok((Request::Append { payload, reply }, rx))
    }

    fn sender(&self) -> Result<&Sender<Request>> {
        self.sender.as_ref().ok_or_else(|| self.stopped())
    }

    fn stopped(&self) -> Error {
        self.shared.stopped_error()
    }
}

/// Replays the records of the segments after `replay_after` without changing anything: a
/// torn tail of the last segment ends the replay (it is not cut), and no writer starts. This is
/// how a read-only store sees the acknowledged writes a live writer has not flushed yet.
/// Segments are checked against `store` as in [`Wal::open`]; `None` is a store without an id
/// (its manifest predates ids), where version-1 segments replay and version-2 ones are foreign.
pub fn replay_read_only(
    storage: &dyn Storage,
    dir: &Path,
    store: Option<StoreId>,
    replay_after: u64,
    on_record: &mut dyn FnMut(RecordRef<'_>) -> Result<()>,
) -> Result<ReplayStats> {
    let (skipped, segments): (Vec<_>, Vec<_>) =
        replay::list_segments(storage, dir)?.into_iter().partition(|s| s.seq <= replay_after);
    for segment in &skipped {
        replay::check_skipped(storage, segment, store)?;
    }
    replay::replay_with(storage, dir, store, &segments, false, on_record)
}

/// An append that has been queued; [`WalTicket::wait`] blocks until it is durable.
#[derive(Debug)]
#[must_use = "an append is acknowledged only once its ticket is waited on"]
pub struct WalTicket {
    reply: Receiver<Result<u64>>,
    shared: Arc<Shared>,
}

impl WalTicket {
    /// Waits until the record is fsynced; returns the seq of its segment, or the error that
    /// kept it from becoming durable ([`Error::Unavailable`] once the WAL is poisoned).
    pub fn wait(self) -> Result<u64> {
        self.reply.recv().map_err(|_| self.shared.stopped_error())?
    }
}

impl Drop for Wal {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

#[cfg(test)]
mod tests;
