//! The real file system.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::{Storage, StorageFile};

/// Files below 64 KiB are read into memory; larger ones are memory-mapped.
const MMAP_THRESHOLD: u64 = 64 * 1024;

/// [`Storage`] on the local file system, with real `fsync`.
#[derive(Debug, Default, Clone, Copy)]
pub struct OsStorage;

struct OsFile {
    file: io::BufWriter<File>,
}

impl Write for OsFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file.write(buf)
    }
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.file.write_all(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

impl StorageFile for OsFile {
    fn sync(&mut self) -> io::Result<()> {
        self.file.flush()?;
        self.file.get_ref().sync_data()
    }
}

/// Owner that keeps a memory map alive inside a `Bytes`.
struct Mapped(memmap2::Mmap);

impl AsRef<[u8]> for Mapped {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl Storage for OsStorage {
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        fs::create_dir_all(path)
    }

    fn create(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        let file = File::create(path)?;
        Ok(Box::new(OsFile { file: io::BufWriter::with_capacity(1 << 20, file) }))
    }

    fn open_append(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Box::new(OsFile { file: io::BufWriter::with_capacity(1 << 20, file) }))
    }

    fn read(&self, path: &Path) -> io::Result<bytes::Bytes> {
        let file = File::open(path)?;
        let len = file.metadata()?.len();
        if len < MMAP_THRESHOLD {
            return Ok(bytes::Bytes::from(fs::read(path)?));
        }
        // SAFETY-free: memmap2's `Mmap::map` is unsafe because another process could
        // truncate the file; Lockstep data files are immutable once published.
        #[allow(unsafe_code)]
        let map = unsafe { memmap2::Mmap::map(&file)? };
        Ok(bytes::Bytes::from_owner(Mapped(map)))
    }

    /// `pread(2)` of just the range: a scan reads the column chunks it decodes, nothing else.
    fn read_range(&self, path: &Path, range: std::ops::Range<u64>) -> io::Result<bytes::Bytes> {
        use std::os::unix::fs::FileExt;
        let file = File::open(path)?;
        let (start, end) = super::checked_range(&range, file.metadata()?.len(), path)?;
        let mut buf = vec![0u8; end - start];
        file.read_exact_at(&mut buf, range.start)?;
        Ok(bytes::Bytes::from(buf))
    }

    fn read_copy(&self, path: &Path) -> io::Result<bytes::Bytes> {
        Ok(bytes::Bytes::from(fs::read(path)?))
    }

    fn len(&self, path: &Path) -> io::Result<u64> {
        Ok(fs::metadata(path)?.len())
    }

    fn truncate(&self, path: &Path, len: u64) -> io::Result<()> {
        let file = OpenOptions::new().write(true).open(path)?;
        file.set_len(len)?;
        file.sync_all()
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        match fs::remove_file(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            other => other,
        }
    }

    fn list_dir(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
        let entries = match fs::read_dir(path) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut out = entries.map(|e| e.map(|e| e.path())).collect::<io::Result<Vec<_>>>()?;
        out.sort();
        Ok(out)
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        File::open(path)?.sync_all()
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }
}
