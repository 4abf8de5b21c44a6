//! Tests of the WAL: round trips, group commit, crash recovery at every byte, corruption.
//! One file (over 600 lines) so that the crash tests share their fault-injection helpers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use proptest::prelude::*;

use super::format::{SEGMENT_HEADER_LEN, segment_file_name};
use super::*;
use crate::error::ErrorKind;
use crate::storage::{FaultyStorage, OsStorage, StorageFile};

type Replayed = Vec<(u64, u64, Vec<u8>)>;

/// The store id of the WALs in these tests.
const ID: StoreId = StoreId([0x5a; 16]);

fn os() -> Arc<dyn Storage> {
    Arc::new(OsStorage)
}

fn config(segment_bytes: u64) -> WalConfig {
    WalConfig { segment_bytes, ..WalConfig::default() }
}

fn seg(dir: &Path, seq: u64) -> PathBuf {
    dir.join(segment_file_name(seq))
}

/// Opens the WAL and collects every replayed record as (segment, offset, payload).
fn open_collect(
    storage: Arc<dyn Storage>,
    dir: &Path,
    config: WalConfig,
    after: u64,
) -> Result<(Wal, ReplayStats, Replayed)> {
    let mut out = Vec::new();
    let (wal, stats) = Wal::open(storage, dir, config, ID, after, &mut |r| {
        out.push((r.segment, r.offset, r.payload.to_vec()));
        Ok(())
    })?;
    Ok((wal, stats, out))
}

fn payloads(replayed: &Replayed) -> Vec<Vec<u8>> {
    replayed.iter().map(|r| r.2.clone()).collect()
}

fn reopen_payloads(dir: &Path) -> Vec<Vec<u8>> {
    let (wal, _, out) = open_collect(os(), dir, WalConfig::default(), 0).unwrap();
    wal.close().unwrap();
    payloads(&out)
}

fn corrupt_err(err: Error) -> (PathBuf, u64) {
    match err {
        Error::WalCorrupt { path, offset, .. } => (path, offset),
        other => panic!("expected WalCorrupt, got {other:?}"),
    }
}

#[test]
fn round_trip_with_empty_payloads_and_new_segment_per_open() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("wal");
    let (wal, stats, out) = open_collect(os(), &dir, WalConfig::default(), 0).unwrap();
    assert_eq!((stats, out.len()), (ReplayStats::default(), 0));
    let records: Vec<Vec<u8>> = vec![b"a".to_vec(), vec![], vec![7; 1000], vec![]];
    for r in &records {
        assert_eq!(wal.append(r.clone()).unwrap(), 1);
    }
    let s = wal.stats();
    assert_eq!((s.records, s.current_segment), (4, 1));
    assert_eq!(s.bytes, records.iter().map(|r| r.len() as u64 + 8).sum::<u64>());
    wal.close().unwrap();

    let (wal, stats, out) = open_collect(os(), &dir, WalConfig::default(), 0).unwrap();
    assert_eq!(payloads(&out), records);
    assert_eq!((stats.segments, stats.records, stats.truncated_tail), (1, 4, None));
    assert_eq!(out[0].1, SEGMENT_HEADER_LEN as u64);
    assert_eq!(wal.append(b"x".to_vec()).unwrap(), 2, "appends never reuse a replayed segment");
    wal.close().unwrap();
    let mut expected = records;
    expected.push(b"x".to_vec());
    assert_eq!(reopen_payloads(&dir), expected);
}

#[test]
fn rotate_replay_after_and_remove_through() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (wal, _, _) = open_collect(os(), dir, WalConfig::default(), 0).unwrap();
    wal.append(b"one".to_vec()).unwrap();
    assert_eq!(wal.rotate().unwrap(), 1);
    assert_eq!(wal.append(b"two".to_vec()).unwrap(), 2);
    assert_eq!(wal.rotate().unwrap(), 2);
    assert_eq!(wal.rotate().unwrap(), 3, "an empty segment still consumes its seq");
    assert_eq!(wal.append(b"four".to_vec()).unwrap(), 4);
    wal.close().unwrap();
    assert!(!seg(dir, 3).exists());

    let (wal, stats, out) = open_collect(os(), dir, WalConfig::default(), 1).unwrap();
    assert_eq!(payloads(&out), vec![b"two".to_vec(), b"four".to_vec()]);
    assert_eq!(stats.segments, 2);
    assert_eq!(wal.stats().current_segment, 5);
    wal.remove_through(1).unwrap();
    assert!(!seg(dir, 1).exists() && seg(dir, 2).exists());
    wal.append(b"five".to_vec()).unwrap();
    wal.remove_through(u64::MAX).unwrap();
    assert!(!seg(dir, 4).exists());
    assert!(seg(dir, 5).exists(), "the active segment is never removed");
    wal.close().unwrap();

    // With everything flushed and removed, new segments still come after `replay_after`.
    let (wal, _, out) = open_collect(os(), dir, WalConfig::default(), 100).unwrap();
    assert!(out.is_empty());
    assert_eq!(wal.append(b"late".to_vec()).unwrap(), 101);
    wal.close().unwrap();
}

#[test]
fn oversized_record_is_rejected_before_writing() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = WalConfig { max_record_bytes: 10, ..WalConfig::default() };
    let (wal, _, _) = open_collect(os(), tmp.path(), cfg, 0).unwrap();
    let err = wal.append(vec![0; 11]).unwrap_err();
    assert!(matches!(err, Error::WalRecordTooLarge { len: 11, limit: 10 }), "{err:?}");
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(tmp.path().read_dir().unwrap().next().is_none(), "nothing was written");
    assert_eq!(wal.append(vec![0; 10]).unwrap(), 1);
    wal.close().unwrap();
}

#[test]
fn on_record_error_fails_open() {
    let tmp = tempfile::tempdir().unwrap();
    let (wal, _, _) = open_collect(os(), tmp.path(), WalConfig::default(), 0).unwrap();
    wal.append(b"x".to_vec()).unwrap();
    wal.close().unwrap();
    let res = Wal::open(os(), tmp.path(), WalConfig::default(), ID, 0, &mut |r| {
        Err(Error::WalRecordInvalid { path: PathBuf::new(), offset: r.offset, reason: "nope".into() })
    });
    assert!(matches!(res, Err(Error::WalRecordInvalid { offset: 36, .. })));
}

// ---------------------------------------------------------------------------------------------
// Group commit, with a storage whose syncs block until a gate opens (no timing involved).

#[derive(Debug, Default)]
struct Gate {
    open: Mutex<bool>,
    cv: Condvar,
    waiting: AtomicUsize,
}

impl Gate {
    fn pass(&self) {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let mut open = self.open.lock().unwrap();
        while !*open {
            open = self.cv.wait(open).unwrap();
        }
        self.waiting.fetch_sub(1, Ordering::SeqCst);
    }
    fn release(&self) {
        *self.open.lock().unwrap() = true;
        self.cv.notify_all();
    }
}

#[derive(Debug)]
struct GatedStorage {
    inner: OsStorage,
    gate: Arc<Gate>,
}

struct GatedFile {
    inner: Box<dyn StorageFile>,
    gate: Arc<Gate>,
}

impl Write for GatedFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.inner.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

impl StorageFile for GatedFile {
    fn sync(&mut self) -> io::Result<()> {
        self.gate.pass();
        self.inner.sync()
    }
}

impl Storage for GatedStorage {
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        self.inner.create_dir_all(path)
    }
    fn create(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        Ok(Box::new(GatedFile { inner: self.inner.create(path)?, gate: self.gate.clone() }))
    }
    fn open_append(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        Ok(Box::new(GatedFile { inner: self.inner.open_append(path)?, gate: self.gate.clone() }))
    }
    fn read(&self, path: &Path) -> io::Result<bytes::Bytes> {
        self.inner.read(path)
    }
    fn len(&self, path: &Path) -> io::Result<u64> {
        self.inner.len(path)
    }
    fn truncate(&self, path: &Path, len: u64) -> io::Result<()> {
        self.inner.truncate(path, len)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.inner.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.inner.remove_file(path)
    }
    fn list_dir(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
        self.inner.list_dir(path)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        self.inner.sync_dir(path)
    }
    fn exists(&self, path: &Path) -> bool {
        self.inner.exists(path)
    }
}

/// Waits (without timing assumptions) until `cond` holds.
fn wait_until(cond: impl Fn() -> bool) {
    while !cond() {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

fn gated_wal(dir: &Path, cfg: WalConfig) -> (Arc<Wal>, Arc<Gate>) {
    let gate = Arc::new(Gate::default());
    let storage = Arc::new(GatedStorage { inner: OsStorage, gate: gate.clone() });
    let (wal, _, _) = open_collect(storage, dir, cfg, 0).unwrap();
    (Arc::new(wal), gate)
}

#[test]
fn group_commit_covers_all_queued_records_with_one_fsync() {
    let tmp = tempfile::tempdir().unwrap();
    let (wal, gate) = gated_wal(tmp.path(), WalConfig::default());
    let n = 8;
    let first = {
        let wal = wal.clone();
        std::thread::spawn(move || wal.append(b"first".to_vec()))
    };
    wait_until(|| gate.waiting.load(Ordering::SeqCst) == 1);
    let others: Vec<_> = (1..n)
        .map(|i| {
            let wal = wal.clone();
            std::thread::spawn(move || wal.append(vec![i as u8; i]))
        })
        .collect();
    wait_until(|| wal.queue_len() == n - 1);
    gate.release();
    assert_eq!(first.join().unwrap().unwrap(), 1);
    for t in others {
        assert_eq!(t.join().unwrap().unwrap(), 1);
    }
    let stats = wal.stats();
    assert_eq!(stats.records, n as u64);
    assert_eq!(stats.fsyncs, 2, "one fsync for the first record, one for the other seven");
    assert!(stats.fsyncs < stats.records);
    Arc::into_inner(wal).unwrap().close().unwrap();
    assert_eq!(reopen_payloads(tmp.path()).len(), n);
}

#[test]
fn try_append_fails_fast_when_the_queue_is_full() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = WalConfig { queue_capacity: 1, ..WalConfig::default() };
    let (wal, gate) = gated_wal(tmp.path(), cfg);
    let spawn = |p: &'static [u8]| {
        let wal = wal.clone();
        std::thread::spawn(move || wal.append(p.to_vec()))
    };
    let a = spawn(b"a");
    wait_until(|| gate.waiting.load(Ordering::SeqCst) == 1);
    let b = spawn(b"b");
    wait_until(|| wal.queue_len() == 1);
    let err = wal.try_append(b"c".to_vec()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ResourceExhausted, "{err:?}");
    gate.release();
    a.join().unwrap().unwrap();
    b.join().unwrap().unwrap();
    assert_eq!(wal.try_append(b"d".to_vec()).unwrap(), 1);
    Arc::into_inner(wal).unwrap().close().unwrap();
    assert_eq!(reopen_payloads(tmp.path()).len(), 3);
}

#[test]
fn concurrent_appends_all_replay_in_per_thread_order() {
    let tmp = tempfile::tempdir().unwrap();
    let (wal, _, _) = open_collect(os(), tmp.path(), config(600), 0).unwrap();
    let wal = Arc::new(wal);
    let threads: Vec<_> = (0u8..4)
        .map(|t| {
            let wal = wal.clone();
            std::thread::spawn(move || {
                for i in 0u8..25 {
                    wal.append(vec![t, i]).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let stats = wal.stats();
    assert_eq!(stats.records, 100);
    assert!(stats.fsyncs <= stats.records);
    Arc::into_inner(wal).unwrap().close().unwrap();
    let got = reopen_payloads(tmp.path());
    assert_eq!(got.len(), 100);
    for t in 0u8..4 {
        let seq: Vec<u8> = got.iter().filter(|p| p[0] == t).map(|p| p[1]).collect();
        assert_eq!(seq, (0u8..25).collect::<Vec<_>>());
    }
}

// ---------------------------------------------------------------------------------------------
// Crashes.

/// Record sizes used by the crash tests: empty, tiny and a few bytes, so every kind of cut
/// (segment header, record header, payload) is hit.
const CRASH_RECORDS: [usize; 6] = [3, 0, 17, 1, 9, 5];

fn crash_payload(i: usize) -> Vec<u8> {
    vec![i as u8 + 1; CRASH_RECORDS[i]]
}

#[test]
fn cut_at_every_byte_offset_recovers_exactly_the_complete_records() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    let (wal, _, _) = open_collect(os(), &src, WalConfig::default(), 0).unwrap();
    let mut ends = Vec::new();
    let mut end = SEGMENT_HEADER_LEN;
    for (i, len) in CRASH_RECORDS.iter().enumerate() {
        wal.append(crash_payload(i)).unwrap();
        end += 8 + len;
        ends.push(end);
    }
    wal.close().unwrap();
    let bytes = std::fs::read(seg(&src, 1)).unwrap();
    assert_eq!(bytes.len(), end);

    for cut in 0..=bytes.len() {
        let dir = tmp.path().join(format!("cut{cut}"));
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(seg(&dir, 1), &bytes[..cut]).unwrap();
        let (wal, stats, out) = open_collect(os(), &dir, WalConfig::default(), 0).unwrap();
        let complete = ends.iter().filter(|&&e| e <= cut).count();
        let expected: Vec<_> = (0..complete).map(crash_payload).collect();
        assert_eq!(payloads(&out), expected, "cut at {cut}");
        if cut < SEGMENT_HEADER_LEN {
            assert!(!seg(&dir, 1).exists(), "a header-less segment is removed (cut {cut})");
            let tail = stats.truncated_tail.unwrap();
            assert_eq!((tail.offset, tail.dropped_bytes), (0, cut as u64));
        } else {
            let boundary = if complete == 0 { SEGMENT_HEADER_LEN } else { ends[complete - 1] };
            assert_eq!(std::fs::metadata(seg(&dir, 1)).unwrap().len(), boundary as u64);
            match stats.truncated_tail {
                None => assert_eq!(cut, boundary),
                Some(t) => {
                    assert_eq!(t.path, seg(&dir, 1));
                    assert_eq!((t.offset, t.dropped_bytes), (boundary as u64, (cut - boundary) as u64));
                }
            }
        }
        assert_eq!(wal.append(b"after".to_vec()).unwrap(), 2);
        wal.close().unwrap();
        let mut expected = expected;
        expected.push(b"after".to_vec());
        let (wal, stats, out) = open_collect(os(), &dir, WalConfig::default(), 0).unwrap();
        assert_eq!(payloads(&out), expected, "reopen after cut at {cut}");
        assert_eq!(stats.truncated_tail, None);
        wal.close().unwrap();
    }
}

fn assert_unavailable(res: Result<u64>) {
    match res {
        Err(e) => assert_eq!(e.kind(), ErrorKind::Unavailable, "{e:?}"),
        Ok(seq) => panic!("append after a crash succeeded (seq {seq})"),
    }
}

#[test]
fn faulty_storage_crash_at_every_byte_budget() {
    let tmp = tempfile::tempdir().unwrap();
    let total = SEGMENT_HEADER_LEN + CRASH_RECORDS.iter().map(|n| n + 8).sum::<usize>();
    for budget in 1..total as u64 {
        let dir = tmp.path().join(format!("b{budget}"));
        let faulty = FaultyStorage::new(os(), budget);
        let (wal, _, _) = open_collect(Arc::new(faulty.clone()), &dir, config(40), 0).unwrap();
        let mut acked = Vec::new();
        let mut failed = false;
        for i in 0..CRASH_RECORDS.len() {
            match wal.append(crash_payload(i)) {
                Ok(_) => acked.push(crash_payload(i)),
                Err(e) => {
                    assert_eq!(e.kind(), ErrorKind::Unavailable, "budget {budget}: {e:?}");
                    failed = true;
                    break;
                }
            }
        }
        assert!(failed && faulty.crashed(), "budget {budget} must crash");
        assert_unavailable(wal.append(b"later".to_vec()));
        assert_unavailable(wal.try_append(b"later".to_vec()));
        assert_eq!(wal.rotate().unwrap_err().kind(), ErrorKind::Unavailable);
        assert_eq!(wal.close().unwrap_err().kind(), ErrorKind::Unavailable);

        let (wal, _, out) = open_collect(os(), &dir, config(40), 0).unwrap();
        assert_eq!(payloads(&out), acked, "budget {budget}");
        wal.append(b"after".to_vec()).unwrap();
        wal.close().unwrap();
        acked.push(b"after".to_vec());
        assert_eq!(reopen_payloads(&dir), acked, "budget {budget} after reopen");
    }
}

#[test]
fn crash_under_concurrent_appends_fails_everyone_without_hanging() {
    let tmp = tempfile::tempdir().unwrap();
    let faulty = FaultyStorage::new(os(), 300);
    let (wal, _, _) = open_collect(Arc::new(faulty), tmp.path(), WalConfig::default(), 0).unwrap();
    let wal = Arc::new(wal);
    let threads: Vec<_> = (0u8..4)
        .map(|t| {
            let wal = wal.clone();
            std::thread::spawn(move || {
                let mut acked = Vec::new();
                for i in 0u8..100 {
                    match wal.append(vec![t, i, 0, 0, 0, 0, 0, 0]) {
                        Ok(_) => acked.push(vec![t, i, 0, 0, 0, 0, 0, 0]),
                        Err(e) => return (acked, e.kind()),
                    }
                }
                panic!("thread {t} never saw the crash");
            })
        })
        .collect();
    let mut acked = Vec::new();
    for t in threads {
        let (a, kind) = t.join().unwrap();
        assert_eq!(kind, ErrorKind::Unavailable);
        acked.extend(a);
    }
    assert_unavailable(wal.append(b"later".to_vec()));
    drop(wal);
    let got = reopen_payloads(tmp.path());
    for a in &acked {
        assert!(got.contains(a), "acked record {a:?} lost");
    }
    assert!(got.iter().all(|p| p.len() == 8), "no partial record comes back");
}

// ---------------------------------------------------------------------------------------------
// Corruption.

/// Writes records 0..n into segment 1 and, if `second`, one more into segment 2; returns the
/// replayed (segment, offset, payload) list.
fn two_segments(dir: &Path, n: usize, second: bool) -> Replayed {
    let (wal, _, _) = open_collect(os(), dir, WalConfig::default(), 0).unwrap();
    for i in 0..n {
        wal.append(vec![i as u8; 10]).unwrap();
    }
    if second {
        wal.rotate().unwrap();
        wal.append(b"second".to_vec()).unwrap();
    }
    wal.close().unwrap();
    let (wal, _, out) = open_collect(os(), dir, WalConfig::default(), 0).unwrap();
    wal.close().unwrap();
    out
}

fn patch(path: &Path, offset: u64, bytes: &[u8]) {
    let mut data = std::fs::read(path).unwrap();
    data[offset as usize..offset as usize + bytes.len()].copy_from_slice(bytes);
    std::fs::write(path, data).unwrap();
}

fn flip(path: &Path, offset: u64) {
    let data = std::fs::read(path).unwrap();
    patch(path, offset, &[data[offset as usize] ^ 0x40]);
}

#[test]
fn flipped_byte_in_a_sealed_segment_is_corruption() {
    let tmp = tempfile::tempdir().unwrap();
    let out = two_segments(tmp.path(), 3, true);
    let target = out[1].1;
    flip(&seg(tmp.path(), 1), target + 8 + 4);
    let err = open_collect(os(), tmp.path(), WalConfig::default(), 0).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::DataCorruption);
    assert_eq!(corrupt_err(err), (seg(tmp.path(), 1), target));
    // Skipped segments are not read at all.
    let (wal, _, out) = open_collect(os(), tmp.path(), WalConfig::default(), 1).unwrap();
    assert_eq!(payloads(&out), vec![b"second".to_vec()]);
    wal.close().unwrap();
}

#[test]
fn flipped_byte_followed_by_valid_records_in_the_last_segment_is_corruption() {
    let tmp = tempfile::tempdir().unwrap();
    let out = two_segments(tmp.path(), 4, false);
    flip(&seg(tmp.path(), 1), out[1].1 + 8);
    let err = open_collect(os(), tmp.path(), WalConfig::default(), 0).unwrap_err();
    assert_eq!(corrupt_err(err), (seg(tmp.path(), 1), out[1].1));
}

#[test]
fn flipped_byte_in_the_final_record_is_a_torn_tail() {
    let tmp = tempfile::tempdir().unwrap();
    let out = two_segments(tmp.path(), 4, false);
    let last = out[3].1;
    flip(&seg(tmp.path(), 1), last + 12);
    let (wal, stats, got) = open_collect(os(), tmp.path(), WalConfig::default(), 0).unwrap();
    wal.close().unwrap();
    assert_eq!(got.len(), 3);
    assert_eq!(stats.truncated_tail.unwrap().offset, last);
    assert_eq!(std::fs::metadata(seg(tmp.path(), 1)).unwrap().len(), last);
}

#[test]
fn four_gib_length_field_neither_allocates_nor_panics() {
    let tmp = tempfile::tempdir().unwrap();
    let out = two_segments(tmp.path(), 3, true);
    patch(&seg(tmp.path(), 1), out[1].1, &u32::MAX.to_le_bytes());
    let err = open_collect(os(), tmp.path(), WalConfig::default(), 0).unwrap_err();
    assert_eq!(corrupt_err(err), (seg(tmp.path(), 1), out[1].1));

    // In the final record of the last segment the same damage is a torn tail.
    let tmp = tempfile::tempdir().unwrap();
    let out = two_segments(tmp.path(), 3, false);
    patch(&seg(tmp.path(), 1), out[2].1, &u32::MAX.to_le_bytes());
    let (wal, stats, got) = open_collect(os(), tmp.path(), WalConfig::default(), 0).unwrap();
    wal.close().unwrap();
    assert_eq!((got.len(), stats.truncated_tail.unwrap().offset), (2, out[2].1));
}

#[test]
fn garbage_and_empty_segment_files() {
    // Empty last segment: removed, reported, and its seq is not reused.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    two_segments(dir, 2, false);
    std::fs::write(seg(dir, 5), b"").unwrap();
    std::fs::write(dir.join("notes.txt"), b"ignored").unwrap();
    std::fs::write(dir.join("1.wal"), b"ignored").unwrap();
    let (wal, stats, got) = open_collect(os(), dir, WalConfig::default(), 0).unwrap();
    assert_eq!(got.len(), 2);
    let tail = stats.truncated_tail.unwrap();
    assert_eq!((tail.path, tail.offset, tail.dropped_bytes), (seg(dir, 5), 0, 0));
    assert!(!seg(dir, 5).exists());
    assert_eq!(wal.append(b"x".to_vec()).unwrap(), 6);
    wal.close().unwrap();

    // Empty or garbage segment before another one: corruption at offset 0.
    for content in [&b""[..], &[0xA5; 100][..], &[0; 40][..], b"LSTPWAL1\x09\0\0\0\0\0\0\0"] {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(seg(tmp.path(), 1), content).unwrap();
        two_segments(&tmp.path().join("x"), 1, false);
        std::fs::rename(seg(&tmp.path().join("x"), 1), seg(tmp.path(), 2)).unwrap();
        // seg 2 now has a header naming seq 1; check seg 1 first, which fails at offset 0.
        let err = open_collect(os(), tmp.path(), WalConfig::default(), 0).unwrap_err();
        assert_eq!(corrupt_err(err), (seg(tmp.path(), 1), 0));
    }

    // Garbage with a full header as the last segment: not a torn write, so corruption.
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(seg(tmp.path(), 1), [0xA5; 100]).unwrap();
    let err = open_collect(os(), tmp.path(), WalConfig::default(), 0).unwrap_err();
    assert_eq!(corrupt_err(err), (seg(tmp.path(), 1), 0));

    // A header naming another seq is corruption even in the last segment.
    let tmp = tempfile::tempdir().unwrap();
    two_segments(&tmp.path().join("x"), 1, false);
    std::fs::rename(seg(&tmp.path().join("x"), 1), seg(tmp.path(), 3)).unwrap();
    let err = open_collect(os(), tmp.path(), WalConfig::default(), 0).unwrap_err();
    assert_eq!(corrupt_err(err), (seg(tmp.path(), 3), 0));

    // Short or zeroed header in the last segment: torn, removed.
    for content in [&b"LSTP"[..], &[0; 64][..]] {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(seg(tmp.path(), 1), content).unwrap();
        let (wal, stats, got) = open_collect(os(), tmp.path(), WalConfig::default(), 0).unwrap();
        assert!(got.is_empty());
        assert_eq!(stats.truncated_tail.unwrap().dropped_bytes, content.len() as u64);
        assert!(!seg(tmp.path(), 1).exists());
        assert_eq!(wal.append(vec![]).unwrap(), 2);
        wal.close().unwrap();
    }
}

// Store identity (format version 2): in `tests/identity.rs`.
mod identity;

// ---------------------------------------------------------------------------------------------
// Property tests.

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Random payload sequences (empty ones included) come back equal, across tiny segments.
    #[test]
    fn round_trip_across_small_segments(
        records in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..48), 0..30),
        segment_bytes in prop_oneof![Just(1u64), 16u64..200, Just(64u64 << 20)],
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let (wal, _, _) = open_collect(os(), tmp.path(), config(segment_bytes), 0).unwrap();
        let mut seqs = Vec::new();
        for r in &records {
            seqs.push(wal.append(r.clone()).unwrap());
        }
        wal.close().unwrap();
        let (wal, stats, out) = open_collect(os(), tmp.path(), config(segment_bytes), 0).unwrap();
        wal.close().unwrap();
        prop_assert_eq!(payloads(&out), records.clone());
        prop_assert_eq!(out.iter().map(|r| r.0).collect::<Vec<_>>(), seqs);
        prop_assert_eq!(stats.truncated_tail, None);
        if segment_bytes == 1 {
            prop_assert_eq!(stats.segments, records.len());
        }
    }

    /// Model test: random appends, rotations, clean reopens and crashes against a list of
    /// acknowledged records.
    #[test]
    fn model_append_rotate_reopen_crash(
        ops in prop::collection::vec(prop_oneof![
            6 => prop::collection::vec(any::<u8>(), 0..24).prop_map(Op::Append),
            1 => Just(Op::Rotate),
            1 => Just(Op::Reopen),
            1 => (1u64..200).prop_map(Op::CrashAfter),
        ], 1..30),
        segment_bytes in 16u64..120,
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let cfg = config(segment_bytes);
        let mut model: Vec<(u64, Vec<u8>)> = Vec::new();
        let mut poisoned = false;
        let (mut wal, _, _) = open_collect(os(), dir, cfg.clone(), 0).unwrap();
        let reopen = |wal: Wal, storage: Arc<dyn Storage>, model: &[(u64, Vec<u8>)]| {
            drop(wal);
            let (wal, _, out) = open_collect(storage, dir, cfg.clone(), 0).unwrap();
            let got: Vec<(u64, Vec<u8>)> = out.into_iter().map(|r| (r.0, r.2)).collect();
            assert_eq!(got, model);
            wal
        };
        for op in ops {
            match op {
                Op::Append(p) => match wal.append(p.clone()) {
                    Ok(seq) => {
                        prop_assert!(!poisoned);
                        prop_assert!(model.last().is_none_or(|(s, _)| *s <= seq));
                        model.push((seq, p));
                    }
                    Err(e) => {
                        prop_assert_eq!(e.kind(), ErrorKind::Unavailable);
                        poisoned = true;
                    }
                },
                Op::Rotate => match wal.rotate() {
                    Ok(sealed) => prop_assert!(model.last().is_none_or(|(s, _)| *s <= sealed)),
                    Err(e) => prop_assert!(poisoned && e.kind() == ErrorKind::Unavailable),
                },
                Op::Reopen => {
                    wal = reopen(wal, os(), &model);
                    poisoned = false;
                }
                Op::CrashAfter(budget) => {
                    wal = reopen(wal, Arc::new(FaultyStorage::new(os(), budget)), &model);
                    poisoned = false;
                }
            }
        }
        let _ = reopen(wal, os(), &model);
    }
}

#[derive(Debug, Clone)]
enum Op {
    Append(Vec<u8>),
    Rotate,
    Reopen,
    /// Reopen on a storage that crashes after this many more bytes.
    CrashAfter(u64),
}
