//! Append-only, CRC-checked JSON-lines logs of raw clock-sync input.
//!
//! Each `add_*` call is one line: the CRC-32 of the JSON text as 8 lowercase hex digits, one
//! space, the JSON array of the call's records, `\n`. An append writes the line and fsyncs
//! before returning, so an acknowledged input is durable, and a batch is all or nothing. On open, an incomplete last line (no `\n`) or a bad
//! last line is a torn tail from a crash and is truncated away (it was never acknowledged);
//! a bad line followed by good ones is corruption and fails the open.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};
use crate::storage::Storage;

/// One raw-input log file and its acknowledged length.
#[derive(Debug)]
pub(crate) struct RawLog {
    path: PathBuf,
    len: u64,
}

fn corrupt(path: &Path, reason: String) -> Error {
    Error::ClockStateCorrupt { path: path.to_path_buf(), reason }
}

fn decode_line<T: DeserializeOwned>(line: &[u8]) -> std::result::Result<Vec<T>, String> {
    let text = std::str::from_utf8(line).map_err(|e| format!("not utf-8: {e}"))?;
    let (crc, json) = text.split_once(' ').ok_or_else(|| "missing crc field".to_string())?;
    let expected = u32::from_str_radix(crc, 16).map_err(|e| format!("bad crc field: {e}"))?;
    let actual = crc32fast::hash(json.as_bytes());
    if crc.len() != 8 || expected != actual {
        return Err(format!("crc mismatch (stored {crc}, computed {actual:08x})"));
    }
    serde_json::from_str(json).map_err(|e| format!("bad record: {e}"))
}

impl RawLog {
    /// Opens (or starts) a log, returning its records; repairs a torn tail.
    pub(crate) fn open<T: DeserializeOwned>(storage: &dyn Storage, path: PathBuf) -> Result<(RawLog, Vec<T>)> {
        if !storage.exists(&path) {
            return Ok((RawLog { path, len: 0 }, Vec::new()));
        }
        let bytes = storage.read(&path).map_err(|e| Error::io(&path, e))?;
        let mut records = Vec::new();
        let mut pos = 0usize;
        while pos < bytes.len() {
            let Some(nl) = bytes[pos..].iter().position(|&b| b == b'\n') else {
                break; // torn tail: no newline
            };
            let line = &bytes[pos..pos + nl];
            match decode_line(line) {
                Ok(batch) => records.extend(batch),
                Err(_) if pos + nl + 1 == bytes.len() => break, // bad last line: torn tail
                Err(reason) => {
                    return Err(corrupt(&path, format!("record at byte {pos}: {reason}")));
                }
            }
            pos += nl + 1;
        }
        if pos < bytes.len() {
            tracing::warn!(path = %path.display(), at = pos, dropped = bytes.len() - pos, "truncating torn tail of clock sync log");
            storage.truncate(&path, pos as u64).map_err(|e| Error::io(&path, e))?;
        }
        Ok((RawLog { path, len: pos as u64 }, records))
    }

    /// Appends records and fsyncs; on error nothing is acknowledged and the next append first
    /// cuts the file back to the last acknowledged length.
    pub(crate) fn append<T: Serialize>(&mut self, storage: &dyn Storage, records: &[T]) -> Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        let json =
            serde_json::to_string(records).map_err(|e| corrupt(&self.path, format!("cannot encode records: {e}")))?;
        let mut buf = Vec::with_capacity(json.len() + 10);
        writeln!(buf, "{:08x} {json}", crc32fast::hash(json.as_bytes())).map_err(|e| Error::io(&self.path, e))?;
        let existed = storage.exists(&self.path);
        if existed && storage.len(&self.path).map_err(|e| Error::io(&self.path, e))? != self.len {
            storage.truncate(&self.path, self.len).map_err(|e| Error::io(&self.path, e))?;
        }
        let mut file = storage.open_append(&self.path).map_err(|e| Error::io(&self.path, e))?;
        file.write_all(&buf).map_err(|e| Error::io(&self.path, e))?;
        file.sync().map_err(|e| Error::io(&self.path, e))?;
        if !existed && let Some(dir) = self.path.parent() {
            storage.sync_dir(dir).map_err(|e| Error::io(dir, e))?;
        }
        self.len += buf.len() as u64;
        Ok(())
    }
}
