//! Replay: reads segments in order, hands every record to a callback and applies the torn-tail
//! policy.
//!
//! Policy (see `docs/format-wal.md`): only the last segment may end badly. In it, a short or
//! all-zero header, an incomplete record, or a CRC mismatch that is not followed by a valid
//! record is a torn tail — the file is truncated at the start of the bad record (or removed if
//! the header itself is torn). Anything bad elsewhere, or a CRC mismatch followed by a valid
//! record, is [`Error::WalCorrupt`]. A segment whose header names another store (or a
//! version-1 segment after a version-2 one) is [`Error::WalForeignSegment`], wherever it is.

use std::path::{Path, PathBuf};

use super::format::{self, Frame, HeaderCheck, SEGMENT_HEADER_LEN};
use super::{RecordRef, ReplayStats, TruncatedTail};
use crate::error::{Error, Result};
use crate::manifest::StoreId;
use crate::storage::Storage;

/// A segment file found in the WAL directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SegmentFile {
    /// Sequence number parsed from the file name.
    pub seq: u64,
    /// Full path.
    pub path: PathBuf,
}

/// Lists the segment files in `dir`, sorted by sequence number. Other files are ignored.
pub(crate) fn list_segments(storage: &dyn Storage, dir: &Path) -> Result<Vec<SegmentFile>> {
    let entries = storage.list_dir(dir).map_err(|e| Error::io(dir, e))?;
    let mut out: Vec<SegmentFile> = entries
        .into_iter()
        .filter_map(|path| {
            let seq = format::parse_segment_file_name(path.file_name()?.to_str()?)?;
            Some(SegmentFile { seq, path })
        })
        .collect();
    out.sort_by_key(|s| s.seq);
    Ok(out)
}

/// Replays `segments` (already filtered to those after the flushed point, in order): calls
/// `on_record` for every valid record and repairs a torn tail of the last one.
pub(crate) fn replay(
    storage: &dyn Storage,
    dir: &Path,
    store: Option<StoreId>,
    segments: &[SegmentFile],
    on_record: &mut dyn FnMut(RecordRef<'_>) -> Result<()>,
) -> Result<ReplayStats> {
    replay_with(storage, dir, store, segments, true, on_record)
}

/// [`replay`], cutting a torn tail only when `repair` (a read-only replay stops before it).
pub(crate) fn replay_with(
    storage: &dyn Storage,
    dir: &Path,
    store: Option<StoreId>,
    segments: &[SegmentFile],
    repair: bool,
    on_record: &mut dyn FnMut(RecordRef<'_>) -> Result<()>,
) -> Result<ReplayStats> {
    let mut stats = ReplayStats::default();
    // Whether a version-2 segment (one with the store's id) came before: a writer never goes
    // back to version 1, so a version-1 segment after it was put there from elsewhere.
    let mut after_v2 = false;
    for (i, segment) in segments.iter().enumerate() {
        let is_last = i + 1 == segments.len();
        let expect = Expect { store, after_v2 };
        let (file_len, cut, v2) = replay_segment(storage, segment, is_last, expect, on_record, &mut stats)?;
        after_v2 |= v2;
        stats.segments += 1;
        if let Some(offset) = cut {
            if repair {
                repair_tail(storage, dir, &segment.path, offset, file_len)?;
            }
            stats.truncated_tail = Some(TruncatedTail {
                path: segment.path.clone(),
                offset,
                dropped_bytes: file_len.saturating_sub(offset),
            });
        }
    }
    Ok(stats)
}

/// What a segment's header must say besides its seq.
#[derive(Debug, Clone, Copy)]
struct Expect {
    /// The store's id (`None`: a store without one, where every version-2 segment is foreign).
    store: Option<StoreId>,
    /// A version-2 segment came before this one in the replay.
    after_v2: bool,
}

/// How an id appears in [`Error::WalForeignSegment`].
fn describe_store(id: Option<StoreId>, whose: &str) -> String {
    match id {
        Some(id) => id.to_string(),
        None if whose == "segment" => {
            "none (a version-1 segment, written before store ids, yet numbered after a segment of this store \
             with its id: a writer never goes back to version 1)"
                .into()
        }
        None => "without an id (its manifest has no store_id: no writer has opened it since store ids exist)".into(),
    }
}

/// The error for a segment of another store.
pub(crate) fn foreign(path: &Path, found: Option<StoreId>, expected: Option<StoreId>) -> Error {
    Error::WalForeignSegment {
        path: path.to_path_buf(),
        found: describe_store(found, "segment"),
        expected: describe_store(expected, "store"),
    }
}

/// Fails with [`Error::WalForeignSegment`] if segment `segment`, which replay skips (covered
/// by the checkpoint), belongs to another store; everything else about it is ignored (it is
/// not read, and is deleted by the next flush). A segment deleted meanwhile (by a writer, seen
/// from a reader) is fine.
/// Only the header is read.
pub(crate) fn check_skipped(storage: &dyn Storage, segment: &SegmentFile, store: Option<StoreId>) -> Result<()> {
    let path = &segment.path;
    let header = storage.len(path).and_then(|len| storage.read_range(path, 0..len.min(SEGMENT_HEADER_LEN as u64)));
    match header {
        Ok(data) => match format::check_segment_header(&data, segment.seq, store) {
            HeaderCheck::Foreign(found) => Err(foreign(path, Some(found), store)),
            _ => Ok(()),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(path, e)),
    }
}

/// Scans one segment. Returns the file length, for a torn last segment the offset to cut it at
/// (0 = remove the file), and whether its header is version 2. The file's bytes are dropped
/// before returning, so a memory map is never alive while the file is truncated.
fn replay_segment(
    storage: &dyn Storage,
    segment: &SegmentFile,
    is_last: bool,
    expect: Expect,
    on_record: &mut dyn FnMut(RecordRef<'_>) -> Result<()>,
    stats: &mut ReplayStats,
) -> Result<(u64, Option<u64>, bool)> {
    let path = &segment.path;
    let data = storage.read(path).map_err(|e| Error::io(path, e))?;
    let file_len = data.len() as u64;
    let corrupt =
        |offset: usize, reason: String| Error::WalCorrupt { path: path.clone(), offset: offset as u64, reason };
    let (start, v2) = match format::check_segment_header(&data, segment.seq, expect.store) {
        HeaderCheck::Valid { store: None, .. } if expect.after_v2 => return Err(foreign(path, None, expect.store)),
        HeaderCheck::Valid { store, records_at } => (records_at, store.is_some()),
        HeaderCheck::Short | HeaderCheck::Zeroed if is_last => return Ok((file_len, Some(0), false)),
        HeaderCheck::Short => {
            return Err(corrupt(0, format!("segment header truncated to {file_len} bytes")));
        }
        HeaderCheck::Zeroed => return Err(corrupt(0, "segment header is all zero".into())),
        HeaderCheck::BadMagic => return Err(corrupt(0, "bad segment magic".into())),
        HeaderCheck::UnknownVersion(v) => {
            return Err(corrupt(
                0,
                format!("unknown segment format version {:?} (written by a newer release?)", char::from(v)),
            ));
        }
        // Torn like a record: the header is synced with the first record, so a header that
        // fails its CRC with no valid record after it was never acknowledged.
        HeaderCheck::BadCrc
            if is_last && !matches!(format::decode_record(&data, SEGMENT_HEADER_LEN), Frame::Record { .. }) =>
        {
            return Ok((file_len, Some(0), false));
        }
        HeaderCheck::BadCrc => return Err(corrupt(0, "segment header crc mismatch".into())),
        HeaderCheck::Foreign(found) => return Err(foreign(path, Some(found), expect.store)),
        HeaderCheck::WrongSeq(found) => {
            return Err(corrupt(0, format!("segment header names seq {found}, file name says {}", segment.seq)));
        }
    };
    let mut pos = start;
    loop {
        match format::decode_record(&data, pos) {
            Frame::Record { payload, next } => {
                on_record(RecordRef { segment: segment.seq, offset: pos as u64, payload })?;
                stats.records += 1;
                stats.bytes += (next - pos) as u64;
                pos = next;
            }
            Frame::End => return Ok((file_len, None, v2)),
            Frame::Incomplete { .. } if is_last => return Ok((file_len, Some(pos as u64), v2)),
            Frame::Incomplete { reason } => {
                return Err(corrupt(pos, format!("incomplete record in a sealed segment: {reason}")));
            }
            Frame::BadCrc { next } => {
                if !is_last {
                    return Err(corrupt(pos, "record crc mismatch".into()));
                }
                if let Frame::Record { .. } = format::decode_record(&data, next) {
                    return Err(corrupt(pos, "record crc mismatch followed by a valid record".into()));
                }
                return Ok((file_len, Some(pos as u64), v2));
            }
        }
    }
}

/// Cuts a torn last segment at `offset`, or removes it when not even its header survived.
fn repair_tail(storage: &dyn Storage, dir: &Path, path: &Path, offset: u64, file_len: u64) -> Result<()> {
    tracing::warn!(
        path = %path.display(),
        offset,
        dropped_bytes = file_len.saturating_sub(offset),
        "wal segment has a torn tail; truncating"
    );
    if offset == 0 {
        storage.remove_file(path).map_err(|e| Error::io(path, e))?;
        storage.sync_dir(dir).map_err(|e| Error::io(dir, e))
    } else {
        storage.truncate(path, offset).map_err(|e| Error::io(path, e))
    }
}
