//! The local read cache of [`super::ObjectStorage`] and the spool files of its downloads and
//! uploads.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// The process that wrote a download or upload spool file (`<name>.part-<pid>-<n>`).
fn spool_owner(path: &Path) -> Option<u32> {
    let name = path.file_name()?.to_str()?;
    name.rsplit_once(".part-")?.1.split('-').next()?.parse().ok()
}

/// The local read cache of data files: whole files under `dir`, least recently used evicted
/// beyond `capacity` bytes. Files are immutable, so a cached copy is never stale; an evicted
/// file that a reader still maps stays readable (unlink keeps the pages).
#[derive(Debug)]
pub(super) struct ReadCache {
    dir: PathBuf,
    pub(super) capacity: u64,
    state: Mutex<CacheState>,
}

#[derive(Debug, Default)]
struct CacheState {
    /// Cached file (relative path) → (bytes, last use).
    files: HashMap<String, (u64, u64)>,
    total: u64,
    tick: u64,
}

impl ReadCache {
    pub(super) fn new(dir: PathBuf, capacity: u64) -> Self {
        let mut state = CacheState::default();
        // Adopt what a previous run left (oldest first), dropping unfinished downloads.
        let mut found = Vec::new();
        let mut stack = vec![dir.clone()];
        while let Some(d) = stack.pop() {
            for entry in fs::read_dir(&d).into_iter().flatten().flatten() {
                let path = entry.path();
                let Ok(meta) = entry.metadata() else { continue };
                if meta.is_dir() {
                    stack.push(path);
                } else if let Some(owner) = spool_owner(&path) {
                    // Another process sharing the directory (a reader on the writer's
                    // `--data-dir`) may be writing it; only a dead process's file goes.
                    if !Path::new("/proc").join(owner.to_string()).exists() {
                        let _ = fs::remove_file(&path);
                    }
                } else if let Some(rel) = path.strip_prefix(&dir).ok().and_then(|r| r.to_str()) {
                    found.push((meta.modified().ok(), rel.to_string(), meta.len()));
                }
            }
        }
        found.sort();
        for (_, rel, len) in found {
            state.tick += 1;
            state.total += len;
            state.files.insert(rel, (len, state.tick));
        }
        let cache = ReadCache { dir, capacity, state: Mutex::new(state) };
        cache.evict(None);
        cache
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CacheState> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(super) fn total(&self) -> u64 {
        self.lock().total
    }

    /// The cache file of `rel` if cached (marking it used).
    pub(super) fn lookup(&self, rel: &str) -> Option<PathBuf> {
        let path = self.dir.join(rel);
        let mut state = self.lock();
        state.tick += 1;
        let tick = state.tick;
        if let Some(entry) = state.files.get_mut(rel) {
            entry.1 = tick;
            if path.is_file() {
                return Some(path);
            }
            // Removed behind our back (another process sharing the directory evicted it).
            let (len, _) = state.files.remove(rel).unwrap_or_default();
            state.total -= len;
        }
        None
    }

    /// A fresh local file name next to where `rel` is cached, for a download or an upload.
    pub(super) fn spool_path(&self, rel: &str) -> io::Result<PathBuf> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = self.dir.join(format!("{rel}.part-{}-{n}", std::process::id()));
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent)?;
        }
        Ok(path)
    }

    /// Makes the complete file `spool` the cached copy of `rel`, then evicts down to capacity;
    /// `None` (and `spool` removed) when the file alone is larger than the cache.
    pub(super) fn insert(&self, rel: &str, spool: &Path) -> io::Result<Option<PathBuf>> {
        let path = self.dir.join(rel);
        let len = fs::metadata(spool)?.len();
        if len > self.capacity {
            fs::remove_file(spool)?;
            return Ok(None);
        }
        // Durable before it gets its name: a crash must not leave a cached copy cut short
        // (a damaged one is still dropped when read; see `Storage::evict_cached`).
        fs::File::open(spool)?.sync_all()?;
        fs::rename(spool, &path)?;
        {
            let mut state = self.lock();
            state.tick += 1;
            let tick = state.tick;
            if let Some((old, _)) = state.files.insert(rel.to_string(), (len, tick)) {
                state.total -= old;
            }
            state.total += len;
        }
        self.evict(Some(rel));
        Ok(Some(path))
    }

    /// Removes least recently used files until the cache fits (never `keep`).
    pub(super) fn evict(&self, keep: Option<&str>) {
        let mut state = self.lock();
        while state.total > self.capacity {
            let Some(victim) = state
                .files
                .iter()
                .filter(|(k, _)| Some(k.as_str()) != keep)
                .min_by_key(|(_, v)| v.1)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            let (len, _) = state.files.remove(&victim).unwrap_or_default();
            state.total -= len;
            let _ = fs::remove_file(self.dir.join(&victim));
        }
    }

    pub(super) fn remove(&self, rel: &str) {
        let mut state = self.lock();
        if let Some((len, _)) = state.files.remove(rel) {
            state.total -= len;
        }
        let _ = fs::remove_file(self.dir.join(rel));
    }
}
