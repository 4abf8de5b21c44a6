//! [`ReadOnlyStorage`]: the storage of a store opened read-only. It reads through another
//! storage, serves the data files of its snapshot from pinned (memory-mapped) bytes, and fails
//! every operation that would change the directory, so a reader cannot modify a store even by
//! mistake.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use super::{Storage, StorageFile};

/// Reads through `inner`; refuses writes. See the module docs.
#[derive(Debug)]
pub struct ReadOnlyStorage {
    inner: Arc<dyn Storage>,
    /// Files read once and kept: a data file's bytes stay readable after the writer deletes it
    /// (a memory map outlives the unlink), so a snapshot never sees a file vanish.
    pinned: RwLock<HashMap<PathBuf, bytes::Bytes>>,
}

fn refused(path: &Path) -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, format!("{} is in a store opened read-only", path.display()))
}

impl ReadOnlyStorage {
    /// A read-only view of `inner`.
    pub fn new(inner: Arc<dyn Storage>) -> Self {
        ReadOnlyStorage { inner, pinned: RwLock::new(HashMap::new()) }
    }

    /// Reads `path` now and serves later reads of it from these bytes (memory-mapped where the
    /// inner storage maps: data files are never truncated, only unlinked, which a map survives).
    pub fn pin(&self, path: &Path) -> io::Result<()> {
        if let Some(bytes) = self.inner.snapshot_pin(path)? {
            self.pinned.write().unwrap_or_else(std::sync::PoisonError::into_inner).insert(path.to_path_buf(), bytes);
        }
        Ok(())
    }

    /// Forgets every pinned file (a retried snapshot starts over).
    pub fn unpin_all(&self) {
        self.pinned.write().unwrap_or_else(std::sync::PoisonError::into_inner).clear();
    }
}

impl Storage for ReadOnlyStorage {
    fn wal_owner(&self) -> Option<String> {
        self.inner.wal_owner()
    }

    /// Creates nothing: succeeds, so that opening code paths run unchanged.
    fn create_dir_all(&self, _path: &Path) -> io::Result<()> {
        Ok(())
    }
    fn create(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        Err(refused(path))
    }
    fn open_append(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        Err(refused(path))
    }
    fn read(&self, path: &Path) -> io::Result<bytes::Bytes> {
        if let Some(b) = self.pinned.read().unwrap_or_else(std::sync::PoisonError::into_inner).get(path) {
            return Ok(b.clone());
        }
        // Not a pinned data file: a WAL segment, log or manifest that the writer may cut or
        // replace meanwhile, so read it into memory instead of mapping it.
        self.inner.read_copy(path)
    }
    fn read_range(&self, path: &Path, range: std::ops::Range<u64>) -> io::Result<bytes::Bytes> {
        if let Some(b) = self.pinned.read().unwrap_or_else(std::sync::PoisonError::into_inner).get(path) {
            let (start, end) = super::checked_range(&range, b.len() as u64, path)?;
            return Ok(b.slice(start..end));
        }
        self.inner.read_range(path, range)
    }
    fn len(&self, path: &Path) -> io::Result<u64> {
        if let Some(b) = self.pinned.read().unwrap_or_else(std::sync::PoisonError::into_inner).get(path) {
            return Ok(b.len() as u64);
        }
        self.inner.len(path)
    }
    /// Cuts nothing: a reader ignores a torn tail in memory and leaves the file to the writer.
    fn truncate(&self, _path: &Path, _len: u64) -> io::Result<()> {
        Ok(())
    }
    fn rename(&self, from: &Path, _to: &Path) -> io::Result<()> {
        Err(refused(from))
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        Err(refused(path))
    }
    fn list_dir(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
        self.inner.list_dir(path)
    }
    fn sync_dir(&self, _path: &Path) -> io::Result<()> {
        Ok(())
    }
    fn exists(&self, path: &Path) -> bool {
        self.inner.exists(path)
    }
    /// Drops the inner storage's copy and this snapshot's pin of it, then pins the original.
    fn evict_cached(&self, path: &Path) -> bool {
        if !self.inner.evict_cached(path) {
            return false;
        }
        self.pinned.write().unwrap_or_else(std::sync::PoisonError::into_inner).remove(path);
        // Not pinned again (gone from the bucket meanwhile): the retry reports that.
        let _ = self.pin(path);
        true
    }

    fn describe(&self, path: &Path) -> Option<String> {
        self.inner.describe(path)
    }
}
