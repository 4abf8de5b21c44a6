//! The WAL byte format: segment file names, the segment header and record framing.
//!
//! Everything here is pure (bytes in, bytes or verdicts out) so it can be property-tested
//! without touching storage. The format is documented byte by byte in `docs/format-wal.md`.
//!
//! ```text
//! segment file  {seq:020}.wal
//! header        [8 bytes magic "LSTPWAL1"][u64 LE seq]
//! record        [u32 LE payload_len][u32 LE crc32(payload_len bytes ++ payload)][payload]
//! ```

/// The first eight bytes of every segment; the trailing `1` is the format version.
pub(crate) const SEGMENT_MAGIC: [u8; 8] = *b"LSTPWAL1";
/// Length of the segment header: magic plus the little-endian `u64` sequence number.
pub(crate) const SEGMENT_HEADER_LEN: usize = 16;
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

/// The 16-byte header of segment `seq`.
pub(crate) fn encode_segment_header(seq: u64) -> [u8; SEGMENT_HEADER_LEN] {
    let mut out = [0u8; SEGMENT_HEADER_LEN];
    out[..8].copy_from_slice(&SEGMENT_MAGIC);
    out[8..].copy_from_slice(&seq.to_le_bytes());
    out
}

/// What the first bytes of a segment file say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HeaderCheck {
    /// Magic and sequence number are right.
    Valid,
    /// The file is shorter than a header (a crash while the segment was being created).
    Short,
    /// The header bytes are all zero (blocks allocated but never written before a crash).
    Zeroed,
    /// The magic is wrong: not a Lockstep WAL segment or an unknown format version.
    BadMagic,
    /// The header names a different sequence number than the file name.
    WrongSeq(u64),
}

/// Checks the header of a segment file expected to hold segment `seq`.
pub(crate) fn check_segment_header(data: &[u8], seq: u64) -> HeaderCheck {
    let Some(header) = data.get(..SEGMENT_HEADER_LEN) else {
        return HeaderCheck::Short;
    };
    if header.iter().all(|&b| b == 0) {
        return HeaderCheck::Zeroed;
    }
    if header[..8] != SEGMENT_MAGIC {
        return HeaderCheck::BadMagic;
    }
    let found = u64::from_le_bytes(le_array(&header[8..]));
    if found == seq { HeaderCheck::Valid } else { HeaderCheck::WrongSeq(found) }
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

    #[test]
    fn header_checks() {
        let h = encode_segment_header(5);
        assert_eq!(check_segment_header(&h, 5), HeaderCheck::Valid);
        assert_eq!(check_segment_header(&h, 6), HeaderCheck::WrongSeq(5));
        assert_eq!(check_segment_header(&h[..15], 5), HeaderCheck::Short);
        assert_eq!(check_segment_header(&[0; 16], 5), HeaderCheck::Zeroed);
        assert_eq!(check_segment_header(b"XXXXXXXX\x05\0\0\0\0\0\0\0", 5), HeaderCheck::BadMagic);
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
            let _ = check_segment_header(&data, 1);
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
