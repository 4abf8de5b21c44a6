//! The WAL byte format: segment file names, the segment header and record framing.
//!
//! Everything here is pure (bytes in, bytes or verdicts out) so it can be property-tested
//! without touching storage. The format is documented byte by byte in `docs/format-wal.md`.
//!
//! ```text
//! segment file  {seq:020}.wal
//! header v2     [8 bytes magic "LSTPWAL2"][u64 LE seq][16 bytes store id][u32 LE crc32(bytes 0..32)]
//! header v1     [8 bytes magic "LSTPWAL1"][u64 LE seq]            (read, never written)
//! record        [u32 LE payload_len][u32 LE crc32(payload_len bytes ++ payload)][payload]
//! ```

use crate::manifest::StoreId;

/// The first eight bytes of a segment written now; the trailing `2` is the format version.
pub(crate) const SEGMENT_MAGIC: [u8; 8] = *b"LSTPWAL2";
/// The magic of a version-1 segment (no store id), still read.
pub(crate) const SEGMENT_MAGIC_V1: [u8; 8] = *b"LSTPWAL1";
/// Length of the segment header written now (version 2): magic, seq, store id, header CRC.
pub(crate) const SEGMENT_HEADER_LEN: usize = 36;
/// Length of a version-1 segment header: magic plus the little-endian `u64` sequence number.
pub(crate) const SEGMENT_HEADER_LEN_V1: usize = 16;
/// Length of a record header: `u32` payload length plus `u32` CRC.
pub(crate) const RECORD_HEADER_LEN: usize = 8;
/// File-name suffix of segment files.
const SEGMENT_SUFFIX: &str = ".wal";
/// Number of decimal digits in a segment file name.
const SEGMENT_DIGITS: usize = 20;

/// The file name of segment `seq`: twenty zero-padded digits plus `.wal`, so that name order is
/// sequence order.
pub(crate) fn segment_file_name(seq: u64) -> String {
    format!("{seq:020}{SEGMENT_SUFFIX}")
}

/// Parses a segment file name; anything that is not exactly twenty digits plus `.wal` (or
/// overflows `u64`) is not a segment.
pub(crate) fn parse_segment_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(SEGMENT_SUFFIX)?;
    if digits.len() != SEGMENT_DIGITS || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The 36-byte (version 2) header of segment `seq` of store `store`.
pub(crate) fn encode_segment_header(seq: u64, store: StoreId) -> [u8; SEGMENT_HEADER_LEN] {
    let mut out = [0u8; SEGMENT_HEADER_LEN];
    out[..8].copy_from_slice(&SEGMENT_MAGIC);
    out[8..16].copy_from_slice(&seq.to_le_bytes());
    out[16..32].copy_from_slice(&store.0);
    let crc = crc32fast::hash(&out[..32]);
    out[32..].copy_from_slice(&crc.to_le_bytes());
    out
}

/// The version-1 header of segment `seq` (what releases before store ids wrote; tests only).
#[cfg(test)]
pub(crate) fn encode_segment_header_v1(seq: u64) -> [u8; SEGMENT_HEADER_LEN_V1] {
    let mut out = [0u8; SEGMENT_HEADER_LEN_V1];
    out[..8].copy_from_slice(&SEGMENT_MAGIC_V1);
    out[8..].copy_from_slice(&seq.to_le_bytes());
    out
}

/// What the first bytes of a segment file say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HeaderCheck {
    /// Magic, header CRC (version 2) and sequence number are right; records start at
    /// `records_at`. `store` is the id the header names (`None`: a version-1 segment).
    Valid {
        /// The store id of a version-2 header.
        store: Option<StoreId>,
        /// Offset of the first record (the header length of the segment's version).
        records_at: usize,
    },
    /// The file is shorter than its header (a crash while the segment was being created).
    Short,
    /// The first 16 header bytes are all zero (blocks allocated but never written before a
    /// crash).
    Zeroed,
    /// The magic is wrong: not a Lockstep WAL segment.
    BadMagic,
    /// The magic is a Lockstep WAL segment's of an unknown format version (the last byte).
    UnknownVersion(u8),
    /// A version-2 header whose CRC does not match its first 32 bytes.
    BadCrc,
    /// A version-2 header naming another store than the expected one (checked before the seq,
    /// so that a segment of another store renamed into place is named as such).
    Foreign(StoreId),
    /// The header names a different sequence number than the file name.
    WrongSeq(u64),
}

/// Checks the header of a segment file expected to hold segment `seq` of store `store` (`None`:
/// a store without an id, for which every version-2 segment is foreign). A version-1 header
/// has no id and is not compared. Never panics, whatever the bytes.
pub(crate) fn check_segment_header(data: &[u8], seq: u64, store: Option<StoreId>) -> HeaderCheck {
    let Some(first) = data.get(..SEGMENT_HEADER_LEN_V1) else {
        return HeaderCheck::Short;
    };
    if first.iter().all(|&b| b == 0) {
        return HeaderCheck::Zeroed;
    }
    let found_seq = u64::from_le_bytes(le_array(&first[8..]));
    let (found_store, records_at) = if first[..8] == SEGMENT_MAGIC_V1 {
        (None, SEGMENT_HEADER_LEN_V1)
    } else if first[..8] == SEGMENT_MAGIC {
        let Some(header) = data.get(..SEGMENT_HEADER_LEN) else {
            return HeaderCheck::Short;
        };
        if crc32fast::hash(&header[..32]) != u32::from_le_bytes(le_array(&header[32..])) {
            return HeaderCheck::BadCrc;
        }
        let found = StoreId(le_array(&header[16..32]));
        if Some(found) != store {
            return HeaderCheck::Foreign(found);
        }
        (Some(found), SEGMENT_HEADER_LEN)
    } else if first[..7] == SEGMENT_MAGIC[..7] {
        return HeaderCheck::UnknownVersion(first[7]);
    } else {
        return HeaderCheck::BadMagic;
    };
    if found_seq != seq {
        return HeaderCheck::WrongSeq(found_seq);
    }
    HeaderCheck::Valid { store: found_store, records_at }
}

/// The CRC stored in a record: crc32 (IEEE) over the four length bytes followed by the payload.
pub(crate) fn record_crc(len_bytes: [u8; 4], payload: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&len_bytes);
    hasher.update(payload);
    hasher.finalize()
}

/// The 8-byte header framing `payload`. The caller guarantees `payload.len() <= u32::MAX`
/// (enforced by the append size limit).
pub(crate) fn encode_record_header(payload: &[u8]) -> [u8; RECORD_HEADER_LEN] {
    let len = u32::try_from(payload.len()).unwrap_or(u32::MAX).to_le_bytes();
    let crc = record_crc(len, payload).to_le_bytes();
    let mut out = [0u8; RECORD_HEADER_LEN];
    out[..4].copy_from_slice(&len);
    out[4..].copy_from_slice(&crc);
    out
}

/// The verdict on the bytes at one record position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Frame<'a> {
    /// A complete record whose CRC matches; the next record starts at `next`.
    Record {
        /// The payload bytes.
        payload: &'a [u8],
        /// Offset just past this record.
        next: usize,
    },
    /// The position is exactly the end of the data.
    End,
    /// The record header or payload runs past the end of the data.
    Incomplete {
        /// What is missing.
        reason: String,
    },
    /// The record is complete but its CRC does not match; its length claims it ends at `next`.
    BadCrc {
        /// Offset just past the bad record, as claimed by its (unverified) length.
        next: usize,
    },
}

/// Decodes the record at `pos`. Never panics and never allocates for payload bytes: a length
/// field is checked against the bytes actually present before it is used.
pub(crate) fn decode_record(data: &[u8], pos: usize) -> Frame<'_> {
    let rest = data.get(pos..).unwrap_or_default();
    if rest.is_empty() {
        return Frame::End;
    }
    let Some(header) = rest.get(..RECORD_HEADER_LEN) else {
        return Frame::Incomplete {
            reason: format!("record header needs {RECORD_HEADER_LEN} bytes, {} left", rest.len()),
        };
    };
    let len_bytes = le_array::<4>(&header[..4]);
    let stored_crc = u32::from_le_bytes(le_array(&header[4..]));
    let len = u32::from_le_bytes(len_bytes);
    let available = rest.len() - RECORD_HEADER_LEN;
    let payload = match usize::try_from(len).ok().and_then(|l| rest.get(RECORD_HEADER_LEN..)?.get(..l)) {
        Some(payload) => payload,
        None => {
            return Frame::Incomplete { reason: format!("payload length {len} exceeds the {available} bytes left") };
        }
    };
    let next = pos + RECORD_HEADER_LEN + payload.len();
    if record_crc(len_bytes, payload) == stored_crc { Frame::Record { payload, next } } else { Frame::BadCrc { next } }
}

/// Copies a slice of known length into an array (callers slice exactly `N` bytes).
fn le_array<const N: usize>(bytes: &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(&bytes[..N]);
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn frame(payload: &[u8]) -> Vec<u8> {
        let mut out = encode_record_header(payload).to_vec();
        out.extend_from_slice(payload);
        out
    }

    #[test]
    fn file_names_round_trip_and_sort() {
        assert_eq!(segment_file_name(7), "00000000000000000007.wal");
        assert_eq!(parse_segment_file_name(&segment_file_name(u64::MAX)), Some(u64::MAX));
        assert_eq!(parse_segment_file_name("99999999999999999999.wal"), None);
        assert_eq!(parse_segment_file_name("0000000000000000007.wal"), None);
        assert_eq!(parse_segment_file_name("00000000000000000007.tmp"), None);
        assert_eq!(parse_segment_file_name("0000000000000000000x.wal"), None);
        assert!(segment_file_name(9) < segment_file_name(10));
    }

    const ID: StoreId = StoreId([7; 16]);
    const OTHER: StoreId = StoreId([9; 16]);

    #[test]
    fn header_checks() {
        let h = encode_segment_header(5, ID);
        let valid = HeaderCheck::Valid { store: Some(ID), records_at: SEGMENT_HEADER_LEN };
        assert_eq!(check_segment_header(&h, 5, Some(ID)), valid);
        assert_eq!(check_segment_header(&h, 6, Some(ID)), HeaderCheck::WrongSeq(5));
        // The store is compared before the seq: a foreign segment renamed into place is foreign.
        assert_eq!(check_segment_header(&h, 6, Some(OTHER)), HeaderCheck::Foreign(ID));
        assert_eq!(check_segment_header(&h, 5, None), HeaderCheck::Foreign(ID));
        assert_eq!(check_segment_header(&h[..15], 5, Some(ID)), HeaderCheck::Short);
        assert_eq!(check_segment_header(&h[..35], 5, Some(ID)), HeaderCheck::Short);
        assert_eq!(check_segment_header(&[0; 36], 5, Some(ID)), HeaderCheck::Zeroed);
        assert_eq!(check_segment_header(b"XXXXXXXX\x05\0\0\0\0\0\0\0", 5, Some(ID)), HeaderCheck::BadMagic);
        assert_eq!(check_segment_header(b"LSTPWAL3\x05\0\0\0\0\0\0\0", 5, Some(ID)), HeaderCheck::UnknownVersion(b'3'));
        // A flipped bit anywhere in the id, seq or CRC fails the header CRC, not the id check.
        for byte in 8..SEGMENT_HEADER_LEN {
            let mut bad = h;
            bad[byte] ^= 0x10;
            assert_eq!(check_segment_header(&bad, 5, Some(ID)), HeaderCheck::BadCrc, "byte {byte}");
        }
        // Version 1: no id, accepted whatever the store's id is.
        let v1 = encode_segment_header_v1(5);
        let valid_v1 = HeaderCheck::Valid { store: None, records_at: SEGMENT_HEADER_LEN_V1 };
        assert_eq!(check_segment_header(&v1, 5, Some(ID)), valid_v1);
        assert_eq!(check_segment_header(&v1, 5, None), valid_v1);
        assert_eq!(check_segment_header(&v1, 4, None), HeaderCheck::WrongSeq(5));
    }

    #[test]
    fn huge_length_field_is_incomplete_not_an_allocation() {
        let mut data = vec![0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0];
        data.extend_from_slice(&[1, 2, 3]);
        assert!(matches!(decode_record(&data, 0), Frame::Incomplete { .. }));
    }

    #[test]
    fn zero_bytes_never_decode_as_a_record() {
        assert!(matches!(decode_record(&[0; 64], 0), Frame::BadCrc { next: 8 }));
    }

    #[test]
    fn bad_crc_is_detected() {
        let mut data = frame(b"hello");
        data[9] ^= 1;
        assert_eq!(decode_record(&data, 0), Frame::BadCrc { next: 13 });
    }

    proptest! {
        #[test]
        fn frames_round_trip(payloads in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..64), 0..20)) {
            let mut data = Vec::new();
            for p in &payloads {
                data.extend_from_slice(&frame(p));
            }
            let mut pos = 0;
            let mut out = Vec::new();
            loop {
                match decode_record(&data, pos) {
                    Frame::Record { payload, next } => { out.push(payload.to_vec()); pos = next; }
                    Frame::End => break,
                    other => prop_assert!(false, "unexpected {:?}", other),
                }
            }
            prop_assert_eq!(out, payloads);
        }

        #[test]
        fn arbitrary_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..256), pos in 0usize..300) {
            let _ = decode_record(&data, pos);
            let _ = check_segment_header(&data, 1, Some(ID));
            let _ = check_segment_header(&data, 1, None);
        }

        #[test]
        fn damaged_v2_headers_never_panic(flips in prop::collection::vec((0usize..SEGMENT_HEADER_LEN, 1u8..=255), 0..4), cut in 0usize..48) {
            let mut data = encode_segment_header(3, ID).to_vec();
            data.extend_from_slice(&encode_record_header(b"abc"));
            data.extend_from_slice(b"abc");
            for &(at, mask) in &flips {
                data[at] ^= mask;
            }
            data.truncate(cut);
            let verdict = check_segment_header(&data, 3, Some(ID));
            if let HeaderCheck::Valid { records_at, .. } = verdict {
                prop_assert!(records_at <= data.len());
            }
        }

        #[test]
        fn every_prefix_of_a_record_is_incomplete(payload in prop::collection::vec(any::<u8>(), 0..64)) {
            let data = frame(&payload);
            for cut in 1..data.len() {
                let is_incomplete = matches!(decode_record(&data[..cut], 0), Frame::Incomplete { .. });
                prop_assert!(is_incomplete);
            }
        }
    }
}
