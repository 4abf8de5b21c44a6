//! The payload of a WAL record: new series definitions plus samples by series id.
//!
//! Little-endian layout (`docs/format-storage.md`):
//! ```text
//! u8 tag = 1
//! u32 n_defs, then per def:  u32 id, str metric, u16 n_labels, (str key, str value)*
//! u32 n_runs, then per run:  u32 id, u32 n, i64 time * n, f64 value * n
//! str = u32 len + UTF-8 bytes
//! ```

use std::collections::BTreeMap;

use crate::datafile::Rows;
use crate::model::{SeriesId, SeriesKey};

const TAG_WRITE: u8 = 1;

/// A decoded write record.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct WriteRecord {
    /// Series first defined by this write, with their ids.
    pub defs: Vec<(SeriesId, SeriesKey)>,
    /// The samples, in write order.
    pub rows: Rows,
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// Encodes a record. `rows` may interleave series; consecutive rows of one series form a run.
pub fn encode(defs: &[(SeriesId, &SeriesKey)], rows: &Rows) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + rows.len() * 16 + defs.len() * 64);
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
    let mut start = 0;
    while start < rows.len() {
        let id = rows.series[start];
        let mut end = start + 1;
        while end < rows.len() && rows.series[end] == id {
            end += 1;
        }
        out.extend_from_slice(&id.to_le_bytes());
        out.extend_from_slice(&((end - start) as u32).to_le_bytes());
        for t in &rows.time[start..end] {
            out.extend_from_slice(&t.to_le_bytes());
        }
        for v in &rows.value[start..end] {
            out.extend_from_slice(&v.to_bits().to_le_bytes());
        }
        n_runs += 1;
        start = end;
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
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len()).ok_or_else(|| {
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
    fn str(&mut self) -> Result<String, String> {
        let n = self.u32()? as usize;
        let b = self.take(n)?;
        String::from_utf8(b.to_vec()).map_err(|_| "string is not utf-8".to_string())
    }
}

/// Decodes a record; every malformed input is an error, never a panic.
pub fn decode(buf: &[u8]) -> Result<WriteRecord, String> {
    let mut c = Cursor { buf, pos: 0 };
    let tag = c.u8()?;
    if tag != TAG_WRITE {
        return Err(format!("unknown record tag {tag}"));
    }
    let n_defs = c.u32()? as usize;
    let mut defs = Vec::with_capacity(n_defs.min(buf.len() / 8));
    for _ in 0..n_defs {
        let id = c.u32()?;
        let metric = c.str()?;
        let n_labels = c.u16()?;
        let mut labels = BTreeMap::new();
        for _ in 0..n_labels {
            let k = c.str()?;
            let v = c.str()?;
            labels.insert(k, v);
        }
        defs.push((id, SeriesKey { metric, labels }));
    }
    let n_runs = c.u32()? as usize;
    let mut rows = Rows::default();
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
        for _ in 0..n {
            rows.value.push(f64::from_bits(c.u64()?));
        }
    }
    if c.pos != buf.len() {
        return Err(format!("{} trailing bytes", buf.len() - c.pos));
    }
    Ok(WriteRecord { defs, rows })
}

#[cfg(test)]
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

    #[test]
    fn huge_counts_are_rejected_without_allocating() {
        let mut b = vec![TAG_WRITE];
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode(&b).unwrap_err().contains("exceeds"));
    }
}
