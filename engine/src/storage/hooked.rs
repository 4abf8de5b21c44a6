//! A storage for tests that calls back around whole-file reads and directory listings: another
//! process (a writer) acting between the steps of a reader.

use std::io;
use std::path::{Path, PathBuf};

use super::{OsStorage, Storage, StorageFile};

/// When [`Hooked`] calls back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Event {
    /// Before a whole-file read (`read`, `read_copy`).
    BeforeRead,
    /// After a whole-file read, before its bytes are returned.
    AfterRead,
    /// After a directory was listed, before the listing is returned.
    AfterList,
}

/// What [`Hooked`] calls.
type Callback = Box<dyn Fn(Event, &Path) + Send + Sync>;

/// [`OsStorage`] that calls `on(event, path)` around whole-file reads and listings (ranges are
/// read without a call).
pub(crate) struct Hooked {
    on: Callback,
}

impl Hooked {
    pub(crate) fn new(on: impl Fn(Event, &Path) + Send + Sync + 'static) -> Self {
        Hooked { on: Box::new(on) }
    }
}

impl std::fmt::Debug for Hooked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hooked")
    }
}

impl Storage for Hooked {
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        OsStorage.create_dir_all(path)
    }
    fn create(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        OsStorage.create(path)
    }
    fn open_append(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        OsStorage.open_append(path)
    }
    fn read(&self, path: &Path) -> io::Result<bytes::Bytes> {
        (self.on)(Event::BeforeRead, path);
        let bytes = OsStorage.read_copy(path)?;
        (self.on)(Event::AfterRead, path);
        Ok(bytes)
    }
    fn read_range(&self, path: &Path, range: std::ops::Range<u64>) -> io::Result<bytes::Bytes> {
        OsStorage.read_range(path, range)
    }
    fn len(&self, path: &Path) -> io::Result<u64> {
        OsStorage.len(path)
    }
    fn truncate(&self, path: &Path, len: u64) -> io::Result<()> {
        OsStorage.truncate(path, len)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        OsStorage.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        OsStorage.remove_file(path)
    }
    fn list_dir(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
        let listed = OsStorage.list_dir(path)?;
        (self.on)(Event::AfterList, path);
        Ok(listed)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        OsStorage.sync_dir(path)
    }
    fn exists(&self, path: &Path) -> bool {
        OsStorage.exists(path)
    }
}

/// A callback that runs `f` the first time it is called, and then never again.
pub(crate) fn once(f: impl FnOnce() + Send + 'static) -> impl Fn() + Send + Sync {
    let slot = std::sync::Mutex::new(Some(Box::new(f) as Box<dyn FnOnce() + Send>));
    move || {
        let taken = slot.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        if let Some(f) = taken {
            f();
        }
    }
}
