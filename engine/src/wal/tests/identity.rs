//! WAL tests of store identity (segment format version 2): fresh segments carry the store's
//! id, a segment of another store is refused wherever it lies, version-1 segments still replay,
//! and damaged version-2 headers are a torn tail or corruption, never a panic.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;

const OTHER: StoreId = StoreId([0xa5; 16]);

/// Writes `n` records of `store` into segment 1 of a new WAL in `dir` (closed).
fn segment_of(dir: &Path, store: StoreId, n: usize) {
    let (wal, _) = Wal::open(os(), dir, WalConfig::default(), store, 0, &mut |_| Ok(())).unwrap();
    for i in 0..n {
        wal.append(vec![0xf0 | i as u8; 5]).unwrap();
    }
    wal.close().unwrap();
}

/// A version-1 segment (as releases before store ids wrote it) holding `payloads`.
fn write_v1_segment(dir: &Path, seq: u64, payloads: &[&[u8]]) {
    let mut out = super::format::encode_segment_header_v1(seq).to_vec();
    for p in payloads {
        out.extend_from_slice(&super::format::encode_record_header(p));
        out.extend_from_slice(p);
    }
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(seg(dir, seq), out).unwrap();
}

/// Copies segment 1 of `from` to `to` as segment `seq`, its header's seq rewritten (and its
/// CRC recomputed) as a careful operator renumbering it would, or left as it was.
fn renumber_into(from: &Path, to: &Path, seq: u64, rewrite_header: bool) -> PathBuf {
    let mut data = std::fs::read(seg(from, 1)).unwrap();
    if rewrite_header {
        let mut store = [0; 16];
        store.copy_from_slice(&data[16..32]);
        data[..SEGMENT_HEADER_LEN].copy_from_slice(&super::format::encode_segment_header(seq, StoreId(store)));
    }
    let path = seg(to, seq);
    std::fs::write(&path, data).unwrap();
    path
}

fn assert_foreign(err: Error, path: &Path, found: &str, expected: &str) {
    assert_eq!(err.kind(), ErrorKind::DataCorruption);
    let message = err.to_string();
    match err {
        Error::WalForeignSegment { path: p, found: f, expected: e } => {
            assert_eq!((p.as_path(), f.as_str(), e.as_str()), (path, found, expected));
        }
        other => panic!("expected WalForeignSegment, got {other:?}"),
    }
    assert!(message.contains(&path.display().to_string()) && message.contains("Move the file"), "{message}");
}

#[test]
fn fresh_segments_carry_the_store_id() {
    let tmp = tempfile::tempdir().unwrap();
    segment_of(tmp.path(), ID, 2);
    let data = std::fs::read(seg(tmp.path(), 1)).unwrap();
    assert_eq!(&data[..8], b"LSTPWAL2");
    assert_eq!(data[8..16], 1u64.to_le_bytes());
    assert_eq!(data[16..32], ID.0);
    assert_eq!(data[32..36], crc32fast::hash(&data[..32]).to_le_bytes());
    let (wal, _, out) = open_collect(os(), tmp.path(), WalConfig::default(), 0).unwrap();
    assert_eq!(wal.store_id(), ID);
    assert_eq!(out.iter().map(|r| (r.0, r.1)).collect::<Vec<_>>(), vec![(1, 36), (1, 36 + 13)]);
    wal.close().unwrap();
}

#[test]
fn a_segment_of_another_store_is_refused_wherever_it_is() {
    let (id, other) = (ID.to_string(), OTHER.to_string());
    for rewrite_header in [false, true] {
        let tmp = tempfile::tempdir().unwrap();
        let (dir, foreign_dir) = (tmp.path().join("wal"), tmp.path().join("other"));
        segment_of(&foreign_dir, OTHER, 3);
        two_segments(&dir, 2, true);
        // Renumbered as the next segment (the last one), between two of ours, or below the
        // checkpoint (not replayed, still refused: a flush would otherwise delete it).
        for (seq, after) in [(3, 0), (2, 0), (1, 1)] {
            let saved = std::fs::read(seg(&dir, seq)).ok();
            let path = renumber_into(&foreign_dir, &dir, seq, rewrite_header);
            let written = std::fs::read(&path).unwrap();
            let err = open_collect(os(), &dir, WalConfig::default(), after).unwrap_err();
            assert_foreign(err, &path, &other, &id);
            let err = replay_read_only(&OsStorage, &dir, Some(ID), after, &mut |_| Ok(())).unwrap_err();
            assert_foreign(err, &path, &other, &id);
            // Nothing was cut or removed.
            assert_eq!(std::fs::read(&path).unwrap(), written, "the foreign segment is left as it was");
            match saved {
                Some(bytes) => std::fs::write(&path, bytes).unwrap(),
                None => std::fs::remove_file(&path).unwrap(),
            }
        }
        // Moved away, the store's own records replay.
        let (wal, _, out) = open_collect(os(), &dir, WalConfig::default(), 0).unwrap();
        assert_eq!(payloads(&out), vec![vec![0; 10], vec![1; 10], b"second".to_vec()]);
        wal.close().unwrap();
    }
    // A store without an id (read-only view of a manifest that predates ids): every version-2
    // segment is foreign.
    let tmp = tempfile::tempdir().unwrap();
    segment_of(tmp.path(), ID, 1);
    let err = replay_read_only(&OsStorage, tmp.path(), None, 0, &mut |_| Ok(())).unwrap_err();
    assert!(matches!(&err, Error::WalForeignSegment { expected, .. } if expected.contains("without an id")), "{err}");
}

#[test]
fn remove_through_keeps_a_segment_of_another_store() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, foreign_dir) = (tmp.path().join("wal"), tmp.path().join("other"));
    segment_of(&foreign_dir, OTHER, 1);
    let (wal, _, _) = open_collect(os(), &dir, WalConfig::default(), 0).unwrap();
    wal.append(b"a".to_vec()).unwrap();
    wal.rotate().unwrap();
    wal.rotate().unwrap();
    wal.append(b"b".to_vec()).unwrap();
    // Copied in while the WAL runs, into the gap the empty rotation left.
    let path = renumber_into(&foreign_dir, &dir, 2, true);
    wal.remove_through(2).unwrap();
    assert!(!seg(&dir, 1).exists() && path.exists() && seg(&dir, 3).exists());
    wal.close().unwrap();
    let err = open_collect(os(), &dir, WalConfig::default(), 2).unwrap_err();
    assert_foreign(err, &path, &OTHER.to_string(), &ID.to_string());
}

#[test]
fn version_1_segments_replay_and_new_ones_are_version_2() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write_v1_segment(dir, 1, &[b"one", b""]);
    write_v1_segment(dir, 2, &[b"two"]);
    let (wal, stats, out) = open_collect(os(), dir, WalConfig::default(), 0).unwrap();
    assert_eq!(out, vec![(1, 16, b"one".to_vec()), (1, 27, vec![]), (2, 16, b"two".to_vec())]);
    assert_eq!(stats.truncated_tail, None);
    assert_eq!(wal.append(b"three".to_vec()).unwrap(), 3);
    wal.close().unwrap();
    assert_eq!(&std::fs::read(seg(dir, 3)).unwrap()[..8], b"LSTPWAL2");
    // Read by a store with or without an id alike... until a version-2 segment follows.
    assert_eq!(reopen_payloads(dir), vec![b"one".to_vec(), vec![], b"two".to_vec(), b"three".to_vec()]);
    let mut n = 0;
    replay_read_only(&OsStorage, dir, Some(OTHER), 2, &mut |_| Ok(())).unwrap_err();
    replay_read_only(&OsStorage, dir, Some(ID), 0, &mut |_| {
        n += 1;
        Ok(())
    })
    .unwrap();
    assert_eq!(n, 4);

    // A torn version-1 tail is cut at its record boundary as before.
    let tmp = tempfile::tempdir().unwrap();
    write_v1_segment(tmp.path(), 1, &[b"kept", b"torn"]);
    let len = std::fs::metadata(seg(tmp.path(), 1)).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(seg(tmp.path(), 1)).unwrap().set_len(len - 2).unwrap();
    let (wal, stats, out) = open_collect(os(), tmp.path(), WalConfig::default(), 0).unwrap();
    wal.close().unwrap();
    assert_eq!(payloads(&out), vec![b"kept".to_vec()]);
    assert_eq!(stats.truncated_tail.unwrap().offset, 16 + 12);

    // A version-1 segment numbered after a version-2 one was not written by this store's
    // writer, which never goes back: refused as foreign.
    let tmp = tempfile::tempdir().unwrap();
    segment_of(tmp.path(), ID, 1);
    write_v1_segment(tmp.path(), 2, &[b"old"]);
    let err = open_collect(os(), tmp.path(), WalConfig::default(), 0).unwrap_err();
    assert!(
        matches!(&err, Error::WalForeignSegment { path, found, .. } if *path == seg(tmp.path(), 2) && found.contains("version-1")),
        "{err}"
    );
}

#[test]
fn damaged_version_2_headers_are_torn_or_corrupt_never_a_panic() {
    for last in [true, false] {
        for byte in 0..SEGMENT_HEADER_LEN {
            for mask in [0x01, 0x80, 0xff] {
                let tmp = tempfile::tempdir().unwrap();
                let dir = tmp.path();
                two_segments(dir, 2, !last);
                let path = seg(dir, 1);
                let data = std::fs::read(&path).unwrap();
                patch(&path, byte as u64, &[data[byte] ^ mask]);
                let err = open_collect(os(), dir, WalConfig::default(), 0).unwrap_err();
                // A valid record follows the header: never taken for a torn tail.
                assert_eq!(err.kind(), ErrorKind::DataCorruption, "byte {byte} mask {mask:#x}: {err}");
                assert_eq!(corrupt_err(err), (path.clone(), 0));
                let err = replay_read_only(&OsStorage, dir, Some(ID), 0, &mut |_| Ok(())).unwrap_err();
                assert_eq!(err.kind(), ErrorKind::DataCorruption);
                assert_eq!(std::fs::read(&path).unwrap().len(), data.len(), "nothing cut");
            }
        }
    }
    // Without a complete first record behind it, a damaged header in the last segment is a
    // torn creation: removed. Cut short in a segment followed by another: corruption.
    for cut in 0..SEGMENT_HEADER_LEN + 8 {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        segment_of(dir, ID, 1);
        let path = seg(dir, 1);
        let mut data = std::fs::read(&path).unwrap();
        data.truncate(cut);
        if let Some(b) = data.get_mut(20) {
            *b ^= 1;
        }
        std::fs::write(&path, &data).unwrap();
        replay_read_only(&OsStorage, dir, Some(ID), 0, &mut |_| panic!("no record")).unwrap();
        let (wal, stats, out) = open_collect(os(), dir, WalConfig::default(), 0).unwrap();
        assert!(out.is_empty() && !path.exists(), "cut {cut}");
        assert_eq!(stats.truncated_tail.unwrap().offset, 0);
        wal.close().unwrap();

        let tmp = tempfile::tempdir().unwrap();
        segment_of(&tmp.path().join("x"), ID, 1);
        std::fs::write(seg(tmp.path(), 1), &data).unwrap();
        renumber_into(&tmp.path().join("x"), tmp.path(), 2, true);
        let err = open_collect(os(), tmp.path(), WalConfig::default(), 0).unwrap_err();
        assert_eq!(corrupt_err(err), (seg(tmp.path(), 1), 0), "cut {cut}");
    }
}
