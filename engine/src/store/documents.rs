//! The store's documents (`topology.json`, `jobs.json`, `metrics.toml`), versioned.
//!
//! The current version of each document is the file of that name in the store directory,
//! which every reader opens. Each write also keeps the text as a numbered version,
//! `history/<name>.<version>` (versions 1, 2, … per document), written before the current
//! file is replaced: a result computed with one topology or job list can name the version it
//! used and be reproduced later, as with the clock models. A crash between the two writes
//! leaves a version in the history that never became current; the next write takes the next
//! number.

use std::path::PathBuf;

use super::{DOCUMENTS, Store, lock_poisoned};
use crate::error::{Error, Result};

/// The directory (under the store directory) holding every version of every document.
pub const HISTORY_DIR: &str = "history";

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
        let _guard = self.documents_lock.lock().map_err(lock_poisoned)?;
        let version = self.document_versions(name)?.last().copied().unwrap_or(0) + 1;
        let history = self.dir.join(HISTORY_DIR);
        self.storage.create_dir_all(&history).map_err(|e| Error::io(&history, e))?;
        let kept = history.join(format!("{name}.{version:06}"));
        crate::storage::write_atomic(self.storage.as_ref(), &kept, text.as_bytes()).map_err(|e| Error::io(&kept, e))?;
        crate::storage::write_atomic(self.storage.as_ref(), &path, text.as_bytes()).map_err(|e| Error::io(&path, e))?;
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
            .filter_map(|p| p.file_name()?.to_str()?.strip_prefix(&prefix)?.parse().ok())
            .collect();
        versions.sort_unstable();
        Ok(versions)
    }

    /// One stored version of a document; `Ok(None)` when it does not exist.
    pub fn read_document_version(&self, name: &str, version: u64) -> Result<Option<String>> {
        self.document_path(name)?;
        self.read_text(self.document_dir(name).join(HISTORY_DIR).join(format!("{name}.{version:06}")))
    }

    fn read_text(&self, path: PathBuf) -> Result<Option<String>> {
        if !self.storage.exists(&path) {
            return Ok(None);
        }
        let bytes = self.storage.read(&path).map_err(|e| Error::io(&path, e))?;
        String::from_utf8(bytes.to_vec())
            .map(Some)
            .map_err(|_| Error::io(&path, std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8")))
    }

    pub(super) fn document_path(&self, name: &str) -> Result<PathBuf> {
        if !DOCUMENTS.contains(&name) {
            return Err(Error::Internal { reason: format!("{name:?} is not a store document (one of {DOCUMENTS:?})") });
        }
        Ok(self.document_dir(name).join(name))
    }
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
}
