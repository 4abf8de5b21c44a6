//! A storage wrapper that simulates a crash after a byte budget (and, optionally, a slow disk).

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use super::{Storage, StorageFile};

/// Wraps a [`Storage`]; once `budget` bytes have been written (over all files), the write
/// that crosses the budget is cut short and every later write, sync, rename or remove fails
/// with an I/O error, as if the machine had lost power at that byte. Reads still work, so a
/// test can then reopen the directory with a fresh [`super::OsStorage`] and check recovery.
#[derive(Debug, Clone)]
pub struct FaultyStorage {
    inner: Arc<dyn Storage>,
    state: Arc<FaultState>,
    /// Creating a file with this extension first sleeps this long (see [`Self::with_slow_create`]).
    slow_create: Option<(&'static str, Duration)>,
}

#[derive(Debug)]
struct FaultState {
    remaining: AtomicU64,
    crashed: AtomicBool,
    /// A full disk: writes, syncs, creates and renames fail with ENOSPC until cleared.
    full: AtomicBool,
    /// A full disk that still has inodes: creating an empty file works, writing to it fails
    /// with ENOSPC (what a filesystem out of blocks does).
    full_blocks: AtomicBool,
    /// Creating a file with this extension fails with EACCES (a read-only directory).
    deny_create: std::sync::Mutex<Option<&'static str>>,
    /// Reads observed since [`FaultyStorage::record_reads`] (`None`: not recording).
    reads: std::sync::Mutex<Option<Vec<ReadRecord>>>,
}

/// One read observed by [`FaultyStorage::record_reads`]: a file and the byte range read
/// (`0..len` for a whole-file read).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadRecord {
    /// The file.
    pub path: PathBuf,
    /// The bytes read.
    pub range: std::ops::Range<u64>,
}

impl FaultState {
    fn check(&self) -> io::Result<()> {
        if self.crashed.load(Ordering::SeqCst) {
            Err(io::Error::other("injected crash"))
        } else if self.full.load(Ordering::SeqCst) {
            Err(io::Error::from_raw_os_error(libc_enospc()))
        } else {
            Ok(())
        }
    }
}

/// ENOSPC on Linux (28), without a libc dependency in the engine.
const fn libc_enospc() -> i32 {
    28
}

impl FaultyStorage {
    /// Wraps `inner`, allowing `budget` more bytes of writes before the simulated crash.
    pub fn new(inner: Arc<dyn Storage>, budget: u64) -> Self {
        FaultyStorage {
            inner,
            state: Arc::new(FaultState {
                remaining: AtomicU64::new(budget),
                crashed: AtomicBool::new(budget == 0),
                full: AtomicBool::new(false),
                full_blocks: AtomicBool::new(false),
                deny_create: std::sync::Mutex::new(None),
                reads: std::sync::Mutex::new(None),
            }),
            slow_create: None,
        }
    }

    /// Makes creating a file whose extension is `extension` sleep `delay` first: a slow disk
    /// for one kind of file (e.g. `parquet`, a flush slower than the writers).
    pub fn with_slow_create(mut self, extension: &'static str, delay: Duration) -> Self {
        self.slow_create = Some((extension, delay));
        self
    }

    /// Whether the simulated crash has happened.
    pub fn crashed(&self) -> bool {
        self.state.crashed.load(Ordering::SeqCst)
    }

    /// Bytes of budget left before the crash.
    pub fn remaining(&self) -> u64 {
        self.state.remaining.load(Ordering::SeqCst)
    }

    /// A full disk while `full`: every write, sync, create and rename fails with ENOSPC (reads
    /// work); clearing it is space coming back.
    pub fn set_full(&self, full: bool) {
        self.state.full.store(full, Ordering::SeqCst);
    }

    /// Out of blocks but not of inodes while `full`: files are created, every write and sync
    /// to a file fails with ENOSPC.
    pub fn set_out_of_blocks(&self, full: bool) {
        self.state.full_blocks.store(full, Ordering::SeqCst);
    }

    /// Makes creating files with extension `ext` fail with "permission denied" (as in a
    /// directory made read-only) until called with `None`.
    pub fn deny_create(&self, ext: Option<&'static str>) {
        *self.state.deny_create.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = ext;
    }

    /// Starts recording reads afresh (whole files and byte ranges): an observer for tests of
    /// how much a query reads.
    pub fn record_reads(&self) {
        *self.state.reads.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Vec::new());
    }

    /// The reads recorded since [`Self::record_reads`], in order (empty if not recording).
    pub fn reads(&self) -> Vec<ReadRecord> {
        self.state.reads.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone().unwrap_or_default()
    }

    fn observe(&self, path: &Path, range: std::ops::Range<u64>) {
        if let Some(reads) = self.state.reads.lock().unwrap_or_else(std::sync::PoisonError::into_inner).as_mut() {
            reads.push(ReadRecord { path: path.to_path_buf(), range });
        }
    }

    /// Crashes now, whatever the budget.
    pub fn crash(&self) {
        self.state.crashed.store(true, Ordering::SeqCst);
    }
}

struct FaultyFile {
    inner: Box<dyn StorageFile>,
    state: Arc<FaultState>,
}

impl FaultState {
    fn check_file_write(&self) -> io::Result<()> {
        self.check()?;
        if self.full_blocks.load(Ordering::SeqCst) {
            return Err(io::Error::from_raw_os_error(libc_enospc()));
        }
        Ok(())
    }
}

impl Write for FaultyFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.state.check_file_write()?;
        let remaining = self.state.remaining.load(Ordering::SeqCst);
        let n = (buf.len() as u64).min(remaining) as usize;
        if n < buf.len() {
            // Write the part that "made it", push it down, then die.
            self.inner.write_all(&buf[..n])?;
            self.inner.flush()?;
            self.state.remaining.store(0, Ordering::SeqCst);
            self.state.crashed.store(true, Ordering::SeqCst);
            return Err(io::Error::other("injected crash (short write)"));
        }
        self.state.remaining.fetch_sub(n as u64, Ordering::SeqCst);
        self.inner.write_all(buf)?;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.state.check()?;
        self.inner.flush()
    }
}

impl StorageFile for FaultyFile {
    fn sync(&mut self) -> io::Result<()> {
        self.state.check_file_write()?;
        self.inner.sync()
    }
}

impl Storage for FaultyStorage {
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        self.state.check()?;
        self.inner.create_dir_all(path)
    }
    fn create(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        self.state.check()?;
        let denied = *self.state.deny_create.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if denied.is_some_and(|ext| path.extension().is_some_and(|e| e == ext)) {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("injected: cannot create {}", path.display()),
            ));
        }
        if let Some((ext, delay)) = self.slow_create
            && path.extension().is_some_and(|e| e == ext)
        {
            std::thread::sleep(delay);
        }
        let inner = self.inner.create(path)?;
        Ok(Box::new(FaultyFile { inner, state: self.state.clone() }))
    }
    fn open_append(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        self.state.check()?;
        let inner = self.inner.open_append(path)?;
        Ok(Box::new(FaultyFile { inner, state: self.state.clone() }))
    }
    fn read(&self, path: &Path) -> io::Result<bytes::Bytes> {
        let bytes = self.inner.read(path)?;
        self.observe(path, 0..bytes.len() as u64);
        Ok(bytes)
    }
    fn read_copy(&self, path: &Path) -> io::Result<bytes::Bytes> {
        let bytes = self.inner.read_copy(path)?;
        self.observe(path, 0..bytes.len() as u64);
        Ok(bytes)
    }
    fn read_range(&self, path: &Path, range: std::ops::Range<u64>) -> io::Result<bytes::Bytes> {
        let bytes = self.inner.read_range(path, range.clone())?;
        self.observe(path, range);
        Ok(bytes)
    }
    fn len(&self, path: &Path) -> io::Result<u64> {
        self.inner.len(path)
    }
    fn truncate(&self, path: &Path, len: u64) -> io::Result<()> {
        self.state.check()?;
        self.inner.truncate(path, len)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.state.check()?;
        self.inner.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.state.check()?;
        self.inner.remove_file(path)
    }
    fn list_dir(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
        self.inner.list_dir(path)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        self.state.check()?;
        self.inner.sync_dir(path)
    }
    fn exists(&self, path: &Path) -> bool {
        self.inner.exists(path)
    }
}
