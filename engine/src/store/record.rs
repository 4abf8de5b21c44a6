//! The payload of a WAL record: new series definitions plus samples by series id.
//!
//! Little-endian layout (`docs/format-storage.md`, "WAL write records"). Written as tag 2:
//! ```text
//! u8 tag = 2
//! u32 n_defs, then per def:  u32 id, str metric, u16 n_labels, (str key, str value)*
//! u32 n_runs, then per run:
//!   zigzag id - previous run's id, varint n,
//!   zigzag t0 - previous run's t0, (n - 1) × zigzag delta-of-delta of the times,
//!   f64 value * n
//! str = u32 len + UTF-8 bytes; varint = unsigned LEB128; zigzag = signed LEB128 of (x<<1)^(x>>63)
//! ```
//! The delta-of-delta of a run's first interval is taken against the previous run's last
//! interval, so series scraped together at a fixed period cost one byte per timestamp.
//! Differences wrap (two's complement), so every `i64` round-trips. Tag 1 (u32 id, u32 n,
//! i64 time * n, f64 value * n per run) is still read.

use crate::model::Rows;
use crate::model::{Labels, SeriesId, SeriesKey};

/// The fixed-width record of the first releases (read only).
const TAG_WRITE_V1: u8 = 1;
/// The delta-coded record written now.
const TAG_WRITE: u8 = 2;

/// A decoded write record.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct WriteRecord {
    /// Series first defined by this write, with their ids.
    pub defs: Vec<(SeriesId, SeriesKey)>,
    /// The samples, in write order.
    pub rows: Rows,
}

/// A decoded write record whose series definitions borrow their names from the record's
/// bytes ([`decode_ref`]): what a WAL replay reads, so that defining a million series allocates
/// no string for a name the catalog already has.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct WriteRecordRef<'a> {
    /// Series first defined by this write.
    pub defs: DefsRef<'a>,
    /// The samples, in write order.
    pub rows: Rows,
}

/// The series definitions of a record, as written: per definition its id, metric and label
/// pairs, in the record's order (a writer writes the pairs sorted by key, each key once; a
/// damaged record may not, see [`DefsRef::iter`]). The pairs of all definitions share one
/// vector.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DefsRef<'a> {
    /// Id, metric and the end of the definition's pairs in `labels`.
    defs: Vec<(SeriesId, &'a str, usize)>,
    labels: Vec<(&'a str, &'a str)>,
}

impl<'a> DefsRef<'a> {
    /// Number of definitions.
    pub fn len(&self) -> usize {
        self.defs.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.defs.is_empty()
    }

    /// Each definition: id, metric and its label pairs as written (not sorted or deduplicated:
    /// [`crate::series::SeriesCatalog::get_or_insert_parts`] takes them as they are).
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (SeriesId, &'a str, &[(&'a str, &'a str)])> + '_ {
        let mut start = 0;
        self.defs.iter().map(move |&(id, metric, end)| {
            let labels = self.labels.get(start..end).unwrap_or_default();
            start = end;
            (id, metric, labels)
        })
    }
}

/// The key of a definition as written: labels sorted by key, the last value of a key given
/// twice winning (what [`decode`] gives).
pub fn def_key(metric: &str, labels: &[(&str, &str)]) -> SeriesKey {
    SeriesKey { metric: metric.into(), labels: labels.iter().copied().collect::<Labels>() }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_varint(out: &mut Vec<u8>, mut x: u64) {
    // Built on the stack, appended once: one capacity check per varint, not per byte.
    let mut buf = [0u8; 10];
    let mut i = 0;
    while x >= 0x80 {
        buf[i] = (x as u8) | 0x80;
        x >>= 7;
        i += 1;
    }
    buf[i] = x as u8;
    out.extend_from_slice(&buf[..=i]);
}

fn put_zigzag(out: &mut Vec<u8>, x: i64) {
    put_varint(out, ((x << 1) ^ (x >> 63)) as u64);
}

/// Encodes a record. `rows` may interleave series; consecutive rows of one series form a run.
pub fn encode(defs: &[(SeriesId, &SeriesKey)], rows: &Rows) -> Vec<u8> {
    // Values take 8 bytes, times 1–2 for periodic series and 3–4 with scrape jitter at ns
    // precision; 13 per row covers most records without a reallocation.
    let mut out = Vec::with_capacity(16 + rows.len() * 13 + defs.len() * 64);
    out.push(TAG_WRITE);
    out.extend_from_slice(&(defs.len() as u32).to_le_bytes());
    for (id, key) in defs {
        out.extend_from_slice(&id.to_le_bytes());
        put_str(&mut out, &key.metric);
        out.extend_from_slice(&(key.labels.len() as u16).to_le_bytes());
        for (k, v) in &key.labels {
            put_str(&mut out, k);
            put_str(&mut out, v);
        }
    }
    let runs_at = out.len();
    out.extend_from_slice(&0u32.to_le_bytes());
    let mut n_runs = 0u32;
    let (mut prev_id, mut prev_t0, mut prev_delta) = (0i64, 0i64, 0i64);
    for range in rows.runs() {
        n_runs += 1;
        let id = rows.series[range.start];
        let times = &rows.time[range.clone()];
        put_zigzag(&mut out, i64::from(id).wrapping_sub(prev_id));
        put_varint(&mut out, times.len() as u64);
        prev_id = i64::from(id);
        let mut prev = times[0];
        put_zigzag(&mut out, prev.wrapping_sub(prev_t0));
        prev_t0 = prev;
        for &t in &times[1..] {
            let delta = t.wrapping_sub(prev);
            put_zigzag(&mut out, delta.wrapping_sub(prev_delta));
            prev_delta = delta;
            prev = t;
        }
        // One resize and a loop the compiler turns into a copy (no capacity check per value).
        let at = out.len();
        out.resize(at + times.len() * 8, 0);
        for (dst, v) in out[at..].chunks_exact_mut(8).zip(&rows.value[range]) {
            dst.copy_from_slice(&v.to_bits().to_le_bytes());
        }
    }
    out[runs_at..runs_at + 4].copy_from_slice(&n_runs.to_le_bytes());
    out
}

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end =
            self.pos.checked_add(n).filter(|&e| e <= self.buf.len()).ok_or_else(|| {
                format!("truncated: need {n} bytes at {}, have {}", self.pos, self.buf.len() - self.pos)
            })?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, String> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> Result<u32, String> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self) -> Result<u64, String> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    fn varint(&mut self) -> Result<u64, String> {
        let mut x = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.u8()?;
            let bits = u64::from(b & 0x7f);
            if shift == 63 && bits > 1 {
                return Err(format!("varint overflows 64 bits at {}", self.pos - 1));
            }
            x |= bits << shift;
            if b & 0x80 == 0 {
                return Ok(x);
            }
        }
        Err(format!("varint longer than 10 bytes at {}", self.pos))
    }
    fn zigzag(&mut self) -> Result<i64, String> {
        let u = self.varint()?;
        Ok(((u >> 1) as i64) ^ -((u & 1) as i64))
    }
    fn values(&mut self, n: usize, out: &mut Vec<f64>) -> Result<(), String> {
        let b = self.take(n * 8)?;
        out.extend(b.chunks_exact(8).map(|c| {
            let mut a = [0u8; 8];
            a.copy_from_slice(c);
            f64::from_bits(u64::from_le_bytes(a))
        }));
        Ok(())
    }
    fn str(&mut self) -> Result<&'a str, String> {
        let n = self.u32()? as usize;
        let b = self.take(n)?;
        std::str::from_utf8(b).map_err(|_| "string is not utf-8".to_string())
    }
}

/// Decodes a record; every malformed input is an error, never a panic.
pub fn decode(buf: &[u8]) -> Result<WriteRecord, String> {
    let WriteRecordRef { defs, rows } = decode_ref(buf)?;
    // One sort per key whatever the order (the encoder writes keys sorted; a damaged record
    // must not cost quadratic time).
    let defs = defs.iter().map(|(id, metric, labels)| (id, def_key(metric, labels))).collect();
    Ok(WriteRecord { defs, rows })
}

/// [`decode`] with the definitions' names borrowed from `buf`; the same errors for the same
/// input.
pub fn decode_ref(buf: &[u8]) -> Result<WriteRecordRef<'_>, String> {
    let mut c = Cursor { buf, pos: 0 };
    let tag = c.u8()?;
    if tag != TAG_WRITE && tag != TAG_WRITE_V1 {
        return Err(format!("unknown record tag {tag}"));
    }
    let n_defs = c.u32()? as usize;
    // A definition takes at least 10 bytes and a pair at least 8: no more room is reserved
    // than the record can hold, whatever its counts say.
    let mut defs = DefsRef {
        defs: Vec::with_capacity(n_defs.min(buf.len() / 8)),
        labels: Vec::with_capacity(n_defs.saturating_mul(4).min(buf.len() / 8)),
    };
    for _ in 0..n_defs {
        let id = c.u32()?;
        let metric = c.str()?;
        let n_labels = c.u16()?;
        for _ in 0..n_labels {
            let k = c.str()?;
            let v = c.str()?;
            defs.labels.push((k, v));
        }
        defs.defs.push((id, metric, defs.labels.len()));
    }
    let n_runs = c.u32()? as usize;
    let mut rows = Rows::default();
    if tag == TAG_WRITE_V1 {
        for _ in 0..n_runs {
            let id = c.u32()?;
            let n = c.u32()? as usize;
            if n.checked_mul(16).is_none_or(|need| need > buf.len() - c.pos) {
                return Err(format!("run of {n} samples exceeds the record"));
            }
            let start = rows.len();
            rows.series.resize(start + n, id);
            for _ in 0..n {
                rows.time.push(c.u64()? as i64);
            }
            c.values(n, &mut rows.value)?;
        }
    } else {
        let (mut prev_id, mut prev_t0, mut prev_delta) = (0i64, 0i64, 0i64);
        for _ in 0..n_runs {
            let id = prev_id.wrapping_add(c.zigzag()?);
            let id = SeriesId::try_from(id).map_err(|_| format!("series id {id} out of range at {}", c.pos))?;
            prev_id = i64::from(id);
            let n = c.varint()?;
            if n == 0 {
                return Err(format!("empty run at {}", c.pos));
            }
            // Every sample takes at least one time byte and eight value bytes.
            if n.checked_mul(9).is_none_or(|need| need > (buf.len() - c.pos) as u64) {
                return Err(format!("run of {n} samples does not fit the record"));
            }
            let n = n as usize;
            let start = rows.len();
            rows.series.resize(start + n, id);
            let mut t = prev_t0.wrapping_add(c.zigzag()?);
            prev_t0 = t;
            rows.time.push(t);
            for _ in 1..n {
                prev_delta = prev_delta.wrapping_add(c.zigzag()?);
                t = t.wrapping_add(prev_delta);
                rows.time.push(t);
            }
            c.values(n, &mut rows.value)?;
        }
    }
    if c.pos != buf.len() {
        return Err(format!("{} trailing bytes", buf.len() - c.pos));
    }
    Ok(WriteRecordRef { defs, rows })
}

/// The tag-1 layout, as the first releases wrote it (the encoder of the first release, kept
/// only to test that tag 1 is still read and to generate the compatibility fixtures).
#[cfg(test)]
pub(crate) fn encode_v1(defs: &[(SeriesId, &SeriesKey)], rows: &Rows) -> Vec<u8> {
    let mut out = vec![TAG_WRITE_V1];
    out.extend_from_slice(&(defs.len() as u32).to_le_bytes());
    for (id, key) in defs {
        out.extend_from_slice(&id.to_le_bytes());
        put_str(&mut out, &key.metric);
        out.extend_from_slice(&(key.labels.len() as u16).to_le_bytes());
        for (k, v) in &key.labels {
            put_str(&mut out, k);
            put_str(&mut out, v);
        }
    }
    let runs: Vec<_> = rows.runs().collect();
    out.extend_from_slice(&(runs.len() as u32).to_le_bytes());
    for r in runs {
        out.extend_from_slice(&rows.series[r.start].to_le_bytes());
        out.extend_from_slice(&(r.len() as u32).to_le_bytes());
        for t in &rows.time[r.clone()] {
            out.extend_from_slice(&t.to_le_bytes());
        }
        for v in &rows.value[r] {
            out.extend_from_slice(&v.to_bits().to_le_bytes());
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trip(samples in proptest::collection::vec((0u32..5, any::<i64>(), any::<f64>()), 0..100),
                      metric in "[a-z_]{1,12}", host in "[a-z0-9-]{1,8}") {
            let key = SeriesKey::new(metric, [("host", host)]);
            let mut rows = Rows::default();
            for (s, t, v) in &samples { rows.push(*s, *t, *v); }
            let bytes = encode(&[(7, &key)], &rows);
            let rec = decode(&bytes).unwrap();
            prop_assert_eq!(&rec.defs, &vec![(7, key)]);
            prop_assert_eq!(&rec.rows.series, &rows.series);
            prop_assert_eq!(&rec.rows.time, &rows.time);
            prop_assert!(rec.rows.value.iter().zip(&rows.value).all(|(a, b)| a.to_bits() == b.to_bits()));
        }

        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode(&bytes);
        }
    }

    proptest! {
        #[test]
        fn tag_1_records_are_still_read(samples in proptest::collection::vec((0u32..5, any::<i64>(), any::<f64>()), 0..60)) {
            let mut rows = Rows::default();
            for (s, t, v) in &samples { rows.push(*s, *t, *v); }
            let rec = decode(&encode_v1(&[], &rows)).unwrap();
            prop_assert_eq!(&rec.rows.series, &rows.series);
            prop_assert_eq!(&rec.rows.time, &rows.time);
            prop_assert!(rec.rows.value.iter().zip(&rows.value).all(|(a, b)| a.to_bits() == b.to_bits()));
        }

        #[test]
        fn extreme_ids_and_times_round_trip(ids in proptest::collection::vec(prop_oneof![Just(0u32), Just(u32::MAX), any::<u32>()], 1..20),
                                            times in proptest::collection::vec(prop_oneof![Just(i64::MIN), Just(i64::MAX), Just(0i64), any::<i64>()], 1..20)) {
            let mut rows = Rows::default();
            for (i, id) in ids.iter().enumerate() {
                for (j, t) in times.iter().enumerate() {
                    if (i + j) % 3 != 0 { rows.push(*id, *t, j as f64); }
                }
            }
            let rec = decode(&encode(&[], &rows)).unwrap();
            prop_assert_eq!(&rec.rows.series, &rows.series);
            prop_assert_eq!(&rec.rows.time, &rows.time);
        }
    }

    #[test]
    fn periodic_series_cost_about_one_byte_per_timestamp() {
        // 1,000 series scraped together every second, 5 scrapes per record.
        let mut rows = Rows::default();
        for s in 0..1000u32 {
            for p in 0..5i64 {
                rows.push(s, 1_767_225_600_000_000_000 + p * 1_000_000_000, p as f64);
            }
        }
        let bytes = encode(&[], &rows);
        let per_row = bytes.len() as f64 / rows.len() as f64;
        assert!(per_row < 9.6, "{per_row:.2} bytes per row");
        assert!(encode_v1(&[], &rows).len() as f64 / rows.len() as f64 > 16.0);
        let rec = decode(&bytes).unwrap();
        assert_eq!(rec.rows.time, rows.time);
    }

    #[test]
    fn huge_counts_are_rejected_without_allocating() {
        let mut b = vec![TAG_WRITE_V1];
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode(&b).unwrap_err().contains("exceeds"));

        let mut b = vec![TAG_WRITE];
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&1u32.to_le_bytes());
        b.push(0); // id delta 0
        b.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]); // n = u64::MAX
        assert!(decode(&b).unwrap_err().contains("does not fit"));
    }

    #[test]
    fn malformed_tag_2_fields_are_named() {
        let head = |extra: &[u8]| {
            let mut b = vec![TAG_WRITE];
            b.extend_from_slice(&0u32.to_le_bytes());
            b.extend_from_slice(&1u32.to_le_bytes());
            b.extend_from_slice(extra);
            b
        };
        // id delta -1 from 0
        assert!(decode(&head(&[0x01, 0x01])).unwrap_err().contains("out of range"));
        // empty run
        assert!(decode(&head(&[0x00, 0x00])).unwrap_err().contains("empty run"));
        // an 11-byte varint
        assert!(decode(&head(&[0x80; 11])).unwrap_err().contains("varint"));
    }
}
