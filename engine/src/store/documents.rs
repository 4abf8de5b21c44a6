//! The store's documents (`topology.json`, `jobs.json`, `metrics.toml`), versioned.
//!
//! The current version of each document is the file of that name in the store directory,
//! which every reader opens. Each write also keeps the text as a numbered version,
//! `history/<name>.<version>` (versions 1, 2, … per document), written before the current
//! file is replaced: a result computed with one topology or job list can name the version it
//! used and be reproduced later, as with the clock models. A crash between the two writes
//! leaves a version in the history that never became current; the next write takes the next
//! number.
//!
//! A job list changes by one job at a time (a Slurm prolog registers it, the epilog ends it),
//! so keeping every version whole would grow as the square of the jobs: 3,000 registrations
//! kept 803 MB. Every [`SNAPSHOT_EVERY`]-th version is therefore kept whole and the others as
//! a delta against the version before (`<name>.<version>.delta`: the bytes shared at the
//! start and at the end, and the text between), so a version is read from at most
//! `SNAPSHOT_EVERY - 1` deltas and the history grows with the changes, not with the list.

use std::io::ErrorKind::InvalidData;
use std::path::PathBuf;

use super::{DOCUMENTS, Store, lock_poisoned};
use crate::error::{Error, Result};

/// The directory (under the store directory) holding every version of every document.
pub const HISTORY_DIR: &str = "history";

/// Every this many versions (1, 1 + this, …) a document's version is kept whole; the others
/// are deltas against the version before.
pub const SNAPSHOT_EVERY: u64 = 64;

/// The first line of a delta version: `lockstep-delta 1 <prefix> <suffix>\n`, then the text
/// between the `prefix` bytes shared with the version before at the start and the `suffix`
/// bytes shared at the end.
const DELTA_MAGIC: &str = "lockstep-delta 1";

impl Store {
    /// Reads one of the store's documents (`topology.json`, `jobs.json`, `metrics.toml`)
    /// through the store's storage; `Ok(None)` when the store has none. One rule for every
    /// reader: missing is `None`, unreadable or not UTF-8 is an error naming the file.
    pub fn read_document(&self, name: &str) -> Result<Option<String>> {
        self.read_text(self.document_path(name)?)
    }

    /// Replaces one of the store's documents atomically (writers only; see
    /// [`Store::read_document`]) and returns its new version number.
    pub fn write_document(&self, name: &str, text: &str) -> Result<u64> {
        if self.is_read_only() {
            return Err(self.read_only_error());
        }
        let path = self.document_path(name)?;
        let mut last = self.documents_last.lock().map_err(lock_poisoned)?;
        let (previous, written) = match last.remove(name) {
            Some((v, text)) => (v, Some(text)),
            None => (self.document_versions(name)?.last().copied().unwrap_or(0), None),
        };
        let version = previous + 1;
        let history = self.dir.join(HISTORY_DIR);
        self.storage.create_dir_all(&history).map_err(|e| Error::io(&history, e))?;
        // A history that cannot be read back only costs a whole version here: the reader of
        // that version gets the error.
        let base = match written {
            _ if version % SNAPSHOT_EVERY == 1 => None,
            Some(text) => Some(text),
            None => self.read_document_version(name, previous).ok().flatten(),
        };
        let (kept, bytes) = match base.map(|base| delta(base.as_bytes(), text.as_bytes())) {
            // A delta larger than half the text saves little: keep the version whole.
            Some(d) if d.len() < text.len() / 2 => (history.join(format!("{name}.{version:06}.delta")), d),
            _ => (history.join(format!("{name}.{version:06}")), text.as_bytes().to_vec()),
        };
        crate::storage::write_atomic(self.storage.as_ref(), &kept, &bytes).map_err(|e| Error::io(&kept, e))?;
        crate::storage::write_atomic(self.storage.as_ref(), &path, text.as_bytes()).map_err(|e| Error::io(&path, e))?;
        last.insert(name.to_owned(), (version, text.to_owned()));
        Ok(version)
    }

    /// The stored versions of a document, oldest first (empty when it was never written
    /// through [`Store::write_document`]).
    pub fn document_versions(&self, name: &str) -> Result<Vec<u64>> {
        self.document_path(name)?;
        let history = self.document_dir(name).join(HISTORY_DIR);
        let prefix = format!("{name}.");
        let mut versions: Vec<u64> = self
            .storage
            .list_dir(&history)
            .map_err(|e| Error::io(&history, e))?
            .iter()
            .filter_map(|p| {
                let v = p.file_name()?.to_str()?.strip_prefix(&prefix)?;
                v.strip_suffix(".delta").unwrap_or(v).parse().ok()
            })
            .collect();
        versions.sort_unstable();
        versions.dedup();
        Ok(versions)
    }

    /// One stored version of a document; `Ok(None)` when it does not exist.
    pub fn read_document_version(&self, name: &str, version: u64) -> Result<Option<String>> {
        self.document_path(name)?;
        let history = self.document_dir(name).join(HISTORY_DIR);
        // The deltas from `version` back to the nearest whole version, newest first.
        let mut deltas = Vec::new();
        let mut at = version;
        // One read per version (a missing file is `NotFound`): on object storage every probe is
        // a request.
        let read = |path: &PathBuf| match self.storage.read(path) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io(path, e)),
        };
        let whole = loop {
            if let Some(bytes) = read(&history.join(format!("{name}.{at:06}")))? {
                break bytes.to_vec();
            }
            let path = history.join(format!("{name}.{at:06}.delta"));
            let Some(bytes) = read(&path)? else {
                if deltas.is_empty() {
                    return Ok(None);
                }
                return Err(Error::io(&path, std::io::Error::other("missing: a later version is a delta against it")));
            };
            deltas.push((path, bytes));
            at = match at.checked_sub(1) {
                Some(v) if v > 0 => v,
                _ => return Err(Error::io(&deltas[0].0, std::io::Error::other("a delta against no version"))),
            };
        };
        let mut text = whole;
        for (path, bytes) in deltas.iter().rev() {
            text = apply_delta(&text, bytes).map_err(|e| Error::io(path, std::io::Error::new(InvalidData, e)))?;
        }
        String::from_utf8(text).map(Some).map_err(|_| {
            let path = history.join(format!("{name}.{version:06}"));
            Error::io(&path, std::io::Error::new(InvalidData, "not UTF-8"))
        })
    }

    fn read_text(&self, path: PathBuf) -> Result<Option<String>> {
        if !self.storage.exists(&path) {
            return Ok(None);
        }
        let bytes = self.storage.read(&path).map_err(|e| Error::io(&path, e))?;
        String::from_utf8(bytes.to_vec())
            .map(Some)
            .map_err(|_| Error::io(&path, std::io::Error::new(InvalidData, "not UTF-8")))
    }

    pub(super) fn document_path(&self, name: &str) -> Result<PathBuf> {
        if !DOCUMENTS.contains(&name) {
            return Err(Error::Internal { reason: format!("{name:?} is not a store document (one of {DOCUMENTS:?})") });
        }
        Ok(self.document_dir(name).join(name))
    }
}

/// `new` as a delta against `base` (see [`DELTA_MAGIC`]).
fn delta(base: &[u8], new: &[u8]) -> Vec<u8> {
    let prefix = base.iter().zip(new).take_while(|(a, b)| a == b).count();
    let room = base.len().min(new.len()) - prefix;
    let suffix = base.iter().rev().zip(new.iter().rev()).take(room).take_while(|(a, b)| a == b).count();
    let mut out = format!("{DELTA_MAGIC} {prefix} {suffix}\n").into_bytes();
    out.extend_from_slice(&new[prefix..new.len() - suffix]);
    out
}

/// The version a delta stands for, from the version before it.
fn apply_delta(base: &[u8], delta: &[u8]) -> std::result::Result<Vec<u8>, String> {
    let end = delta.iter().position(|&b| b == b'\n').ok_or("a delta without its header line")?;
    let header = std::str::from_utf8(&delta[..end]).map_err(|_| "a delta header that is not UTF-8")?;
    let counts = header.strip_prefix(DELTA_MAGIC).ok_or_else(|| format!("not a delta: {header:?}"))?;
    let counts: Vec<usize> = counts
        .split_whitespace()
        .map(str::parse)
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| format!("a delta header with bad counts: {header:?}"))?;
    let &[prefix, suffix] = counts.as_slice() else {
        return Err(format!("a delta header with bad counts: {header:?}"));
    };
    if prefix.checked_add(suffix).is_none_or(|shared| shared > base.len()) {
        return Err(format!("a delta sharing {prefix} + {suffix} bytes with a version of {} bytes", base.len()));
    }
    let mut out = Vec::with_capacity(prefix + (delta.len() - end - 1) + suffix);
    out.extend_from_slice(&base[..prefix]);
    out.extend_from_slice(&delta[end + 1..]);
    out.extend_from_slice(&base[base.len() - suffix..]);
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use crate::store::{Store, StoreConfig};

    #[test]
    fn documents_are_versioned_and_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
        assert_eq!(store.read_document("jobs.json").unwrap(), None);
        assert!(store.document_versions("jobs.json").unwrap().is_empty());
        assert_eq!(store.write_document("jobs.json", "[1]").unwrap(), 1);
        assert_eq!(store.write_document("jobs.json", "[2]").unwrap(), 2);
        assert_eq!(store.write_document("topology.json", "{}").unwrap(), 1);
        assert_eq!(store.read_document("jobs.json").unwrap().as_deref(), Some("[2]"));
        assert_eq!(store.read_document_version("jobs.json", 1).unwrap().as_deref(), Some("[1]"));
        assert_eq!(store.read_document_version("jobs.json", 3).unwrap(), None);
        assert!(store.write_document("secrets.txt", "x").is_err());
        store.close().unwrap();
        let reader = Store::open_read_only(dir.path()).unwrap();
        assert_eq!(reader.document_versions("jobs.json").unwrap(), vec![1, 2]);
        assert_eq!(reader.read_document("jobs.json").unwrap().as_deref(), Some("[2]"));
        assert!(reader.write_document("jobs.json", "[3]").is_err());
        drop(reader);
        let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
        assert_eq!(store.write_document("jobs.json", "[3]").unwrap(), 3);
    }

    #[test]
    fn a_growing_job_list_keeps_every_version_in_little_room() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
        // A job list growing by one job, with every third change ending an earlier job in the
        // middle of the text, and a multi-byte name, so deltas cut inside the list and at
        // bytes of one character.
        let mut jobs: Vec<String> = Vec::new();
        let mut texts = Vec::new();
        for i in 0..150 {
            if i % 3 == 2 {
                let j = i / 2;
                jobs[j] = jobs[j].replace("\"end\":null", &format!("\"end\":{}", 1000 + i));
            } else {
                jobs.push(format!("{{\"job\":\"jöb-{i}\",\"nodes\":[\"n{i}\"],\"start\":{i},\"end\":null}}"));
            }
            let text = format!("[\n{}\n]\n", jobs.join(",\n"));
            assert_eq!(store.write_document("jobs.json", &text).unwrap(), i as u64 + 1);
            texts.push(text);
        }
        let history = dir.path().join(super::HISTORY_DIR);
        let files: Vec<_> = std::fs::read_dir(&history).unwrap().map(|e| e.unwrap()).collect();
        let whole = files.iter().filter(|f| !f.file_name().to_string_lossy().ends_with(".delta")).count();
        // Versions 1, 65 and 129, and the first few, whose deltas would not be half their size.
        assert!((3..=6).contains(&whole), "{whole} whole versions");
        let kept: u64 = files.iter().map(|f| f.metadata().unwrap().len()).sum();
        let copies: usize = texts.iter().map(String::len).sum();
        assert!((kept as usize) * 10 < copies, "history {kept} bytes, whole copies {copies}");
        store.close().unwrap();
        let reader = Store::open_read_only(dir.path()).unwrap();
        assert_eq!(reader.document_versions("jobs.json").unwrap(), (1..=150).collect::<Vec<u64>>());
        for (i, text) in texts.iter().enumerate() {
            assert_eq!(
                reader.read_document_version("jobs.json", i as u64 + 1).unwrap().as_deref(),
                Some(text.as_str())
            );
        }
        assert_eq!(reader.read_document_version("jobs.json", 151).unwrap(), None);
        drop(reader);
        // A writer opened again builds its first delta on the version read back from history.
        let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
        let next = texts[149].replacen("]\n", ",\n{\"job\":\"last\"}\n]\n", 1);
        assert_eq!(store.write_document("jobs.json", &next).unwrap(), 151);
        assert!(history.join("jobs.json.000151.delta").is_file());
        assert_eq!(store.read_document_version("jobs.json", 151).unwrap().as_deref(), Some(next.as_str()));
        store.close().unwrap();

        // A damaged delta, or a lost version under one, is an error naming the file, not a
        // panic or a wrong text; the versions before it still read.
        let damaged = history.join("jobs.json.000100.delta");
        std::fs::write(&damaged, "lockstep-delta 1 999999 5\nx").unwrap();
        let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
        let e = store.read_document_version("jobs.json", 101).unwrap_err().to_string();
        assert!(e.contains("jobs.json.000100.delta") && e.contains("sharing"), "{e}");
        std::fs::write(&damaged, "garbage").unwrap();
        let e = store.read_document_version("jobs.json", 100).unwrap_err().to_string();
        assert!(e.contains("header line"), "{e}");
        std::fs::remove_file(&damaged).unwrap();
        let e = store.read_document_version("jobs.json", 110).unwrap_err().to_string();
        assert!(e.contains("jobs.json.000100.delta") && e.contains("missing"), "{e}");
        assert_eq!(store.read_document_version("jobs.json", 99).unwrap().as_deref(), Some(texts[98].as_str()));
        // Writing goes on: the new version is kept whole when the one before cannot be read.
        assert_eq!(store.write_document("jobs.json", "[]").unwrap(), 152);
        assert_eq!(store.read_document_version("jobs.json", 152).unwrap().as_deref(), Some("[]"));
    }
}
