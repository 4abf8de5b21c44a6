//! The writer lock: one process writes a store at a time.
//!
//! `<dir>/LOCK` is locked with `flock(LOCK_EX | LOCK_NB)` (std's `File::try_lock`) by every
//! process that opens a store for writing (`serve`, `import`, `demo`, compaction); the lock is
//! released when the process exits, however it exits, so a crashed writer never leaves a stale
//! lock. The file's contents name the holder (pid and command line) for the error a second
//! writer gets. Readers ([`super::Store::open_read_only`]) take no lock.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The lock file's name inside the store directory.
pub const LOCK_FILE: &str = "LOCK";

/// A held writer lock; dropping it releases the lock.
#[derive(Debug)]
pub struct WriterLock {
    _file: File,
    path: PathBuf,
}

impl WriterLock {
    /// Takes the lock of store `dir`, or fails at once with [`Error::StoreLocked`] naming the
    /// holder.
    pub fn acquire(dir: &Path) -> Result<WriterLock> {
        let path = dir.join(LOCK_FILE);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| Error::io(&path, e))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                let holder = holder.trim();
                return Err(Error::StoreLocked {
                    path: dir.to_path_buf(),
                    holder: if holder.is_empty() { "holder unknown".into() } else { holder.to_string() },
                });
            }
            Err(TryLockError::Error(e)) => return Err(Error::io(&path, e)),
        }
        let args: Vec<String> = std::env::args().collect();
        let record = format!("pid {} ({})\n", std::process::id(), args.join(" "));
        // The record is advisory (it only names the holder), so it is not fsynced.
        file.set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| file.write_all(record.as_bytes()))
            .map_err(|e| Error::io(&path, e))?;
        Ok(WriterLock { _file: file, path })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}
