//! File-system access behind a small trait, so tests can inject crashes and short writes.
//!
//! The engine never calls `std::fs` directly for data it must keep: every durable byte goes
//! through a [`Storage`]. [`OsStorage`] is the real implementation; [`FaultyStorage`] wraps
//! another storage and fails (or cuts short) writes after a byte budget, which is how the
//! crash tests simulate power loss at any byte offset.

mod fault;
#[cfg(test)]
pub(crate) mod hooked;
mod os;
mod readonly;

use std::fmt::Debug;
use std::io;
use std::ops::Range;
use std::path::{Path, PathBuf};

pub use fault::{FaultyStorage, ReadRecord};
pub use os::OsStorage;
pub use readonly::ReadOnlyStorage;

/// A file opened for writing. Dropping it without [`StorageFile::sync`] may lose its bytes.
pub trait StorageFile: io::Write + Send {
    /// Flushes file data to stable storage (fdatasync).
    fn sync(&mut self) -> io::Result<()>;
}

/// The file operations the engine needs. All paths are absolute or relative to the process cwd.
pub trait Storage: Send + Sync + Debug {
    /// Creates a directory and its parents.
    fn create_dir_all(&self, path: &Path) -> io::Result<()>;
    /// Creates (truncating) a file for writing.
    fn create(&self, path: &Path) -> io::Result<Box<dyn StorageFile>>;
    /// Opens a file for appending, creating it if missing.
    fn open_append(&self, path: &Path) -> io::Result<Box<dyn StorageFile>>;
    /// Reads a whole file. Large data files are memory-mapped where the storage supports it.
    fn read(&self, path: &Path) -> io::Result<bytes::Bytes>;
    /// Reads a whole file into memory with `read(2)`, never a memory map: for files another
    /// process may truncate while they are read (a WAL segment whose torn tail a new writer
    /// cuts), where touching a mapped page past the new end would kill the reader (SIGBUS).
    fn read_copy(&self, path: &Path) -> io::Result<bytes::Bytes> {
        self.read(path)
    }
    /// Reads bytes `range` of a file (a column chunk or a footer of a data file). The default
    /// slices [`Storage::read`]; storages that can read part of a file do only that.
    fn read_range(&self, path: &Path, range: Range<u64>) -> io::Result<bytes::Bytes> {
        let all = self.read(path)?;
        let (start, end) = checked_range(&range, all.len() as u64, path)?;
        Ok(all.slice(start..end))
    }
    /// The file's length in bytes.
    fn len(&self, path: &Path) -> io::Result<u64>;
    /// Cuts a file to `len` bytes and syncs it.
    fn truncate(&self, path: &Path, len: u64) -> io::Result<()>;
    /// Atomically renames `from` to `to` (same directory or file system).
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes a file; a missing file is not an error.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Lists the entries of a directory (full paths), sorted by name; a missing directory is empty.
    fn list_dir(&self, path: &Path) -> io::Result<Vec<PathBuf>>;
    /// Syncs a directory so that creates, renames and removes in it are durable.
    fn sync_dir(&self, path: &Path) -> io::Result<()>;
    /// Whether the path exists.
    fn exists(&self, path: &Path) -> bool;
    /// Replaces `path` by `bytes` atomically and durably: a reader sees the old or the new
    /// content, never a mix. The default writes a temporary file, syncs it, renames it over
    /// `path` and syncs the directory; a storage with atomic whole-file writes (an object
    /// store's `put`) does one write instead.
    fn write_atomic(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        write_via_rename(self, path, bytes)
    }
    /// What a read-only snapshot keeps of one of its data files so that the file stays
    /// readable after the writer deletes it. The default reads it (memory-mapped where the
    /// storage maps, which outlives an unlink); `Ok(None)` means "checked that it exists, not
    /// kept": a storage whose reads are remote fetches them when a scan needs them.
    fn snapshot_pin(&self, path: &Path) -> io::Result<Option<bytes::Bytes>> {
        self.read(path).map(Some)
    }
    /// Whose WAL the store directory holds when several directories take turns writing one
    /// store (object storage: the node id of the data directory, which a replacement node
    /// does not share); `None` (the default) for a store whose WAL lives beside its manifest.
    /// The manifest keeps a WAL checkpoint per owner ([`crate::manifest::Manifest::checkpoint_for`]).
    fn wal_owner(&self) -> Option<String> {
        None
    }
    /// Drops a local copy of data file `path` (an object store's read cache), so that the
    /// next read fetches the original; `true` when there was one. The default has none.
    fn evict_cached(&self, _path: &Path) -> bool {
        false
    }
    /// Where a person finds `path`: an object store names the objects it keeps for paths under
    /// the store directory by their URL (`s3://bucket/prefix/data/…`), since the local path
    /// names nothing on disk. `None` (the default) when the path is where the file is.
    fn describe(&self, _path: &Path) -> Option<String> {
        None
    }
}

/// Runs `read` on data file `path`; when it fails as a damaged file would (I/O, Parquet, the
/// file's own checks) and the storage held a local copy of it, that copy is dropped and `read`
/// runs once more against the original. A cached copy cut short by a crash or damaged on the
/// local disk is so fetched again instead of failing every query that reads it.
pub(crate) fn refetching<T>(
    storage: &dyn Storage,
    path: &Path,
    mut read: impl FnMut() -> crate::error::Result<T>,
) -> crate::error::Result<T> {
    use crate::error::Error;
    match read() {
        Err(e @ (Error::Io { .. } | Error::Parquet { .. } | Error::DataFileInvalid { .. } | Error::Arrow(_)))
            if storage.evict_cached(path) =>
        {
            let name = storage.describe(path).unwrap_or_else(|| path.display().to_string());
            let error = describe_error(storage, &e);
            tracing::warn!(
                file = %name,
                %error,
                "a read through the local cache failed its checks: dropped the cached copy and reading the original \
                 (if that fails too, the original is damaged)"
            );
            read()
        }
        other => other,
    }
}

/// `e` naming its file as `storage` names it to a person ([`Storage::describe`]): for
/// messages only, see [`crate::Store::locate_error`].
pub fn locate_error(storage: &dyn Storage, mut e: crate::error::Error) -> crate::error::Error {
    if let Some(path) = e.path_mut()
        && let Some(name) = storage.describe(path)
    {
        *path = name.into();
    }
    e
}

/// The message of `e` with its file named as `storage` names it to a person (for logs, where
/// the error itself is still needed; see [`locate_error`]).
pub fn describe_error(storage: &dyn Storage, e: &crate::error::Error) -> String {
    let message = e.to_string();
    match e.path().and_then(|path| Some((path.display().to_string(), storage.describe(path)?))) {
        Some((local, name)) => message.replace(&local, &name),
        None => message,
    }
}

/// Writes `bytes` to `path` atomically through the storage's [`Storage::write_atomic`].
pub fn write_atomic(storage: &dyn Storage, path: &Path, bytes: &[u8]) -> io::Result<()> {
    storage.write_atomic(path, bytes)
}

/// The default [`Storage::write_atomic`]: write a temporary file, sync it, rename it over
/// `path`, then sync the directory.
pub fn write_via_rename<S: Storage + ?Sized>(storage: &S, path: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = path.with_extension("tmp");
    {
        let mut file = storage.create(&tmp)?;
        file.write_all(bytes)?;
        file.sync()?;
    }
    storage.rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        storage.sync_dir(dir)?;
    }
    Ok(())
}

/// `range` as slice bounds of a file of `len` bytes; an error (not a panic) if it lies outside.
pub(crate) fn checked_range(range: &Range<u64>, len: u64, path: &Path) -> io::Result<(usize, usize)> {
    if range.start > range.end || range.end > len {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("{}: bytes {}..{} are outside the file ({len} bytes)", path.display(), range.start, range.end),
        ));
    }
    let start = usize::try_from(range.start).map_err(io::Error::other)?;
    let end = usize::try_from(range.end).map_err(io::Error::other)?;
    Ok((start, end))
}
