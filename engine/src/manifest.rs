//! The manifest: the list of live data files and the WAL checkpoint, replaced atomically.
//!
//! A data file exists for readers only once the manifest names it; the manifest is written to
//! a temporary file, synced, renamed over `manifest.json` and the directory synced. A WAL
//! segment may be deleted once a manifest whose `wal_checkpoint` covers it is durable.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::datafile::FileStats;
use crate::error::{Error, Result};
use crate::storage::{Storage, write_atomic};

/// Current manifest format version.
pub const MANIFEST_VERSION: u32 = 1;

/// The identity of a store: 128 random bits created with the store and kept in its manifest
/// (`store_id`, 32 lowercase hex digits). Every WAL segment carries it in its header, so that a
/// segment of another store (a backup restored into the wrong directory, a segment copied and
/// renumbered into place) is refused instead of replayed into this store's series ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StoreId(pub [u8; 16]);

impl StoreId {
    /// A new random id: 16 bytes of `/dev/urandom`, or where that cannot be read, std's randomly
    /// keyed hasher over the time and process id (no cryptographic use; ids only need to differ).
    pub fn random() -> Self {
        let mut out = [0u8; 16];
        let read = std::fs::File::open("/dev/urandom").and_then(|mut f| std::io::Read::read_exact(&mut f, &mut out));
        if read.is_err() || out == [0; 16] {
            use std::hash::BuildHasher;
            let seed = (std::process::id(), std::time::SystemTime::now());
            let hash = |s| std::collections::hash_map::RandomState::new().hash_one(s);
            out[..8].copy_from_slice(&hash(seed).to_le_bytes());
            out[8..].copy_from_slice(&hash(seed).to_le_bytes());
        }
        StoreId(out)
    }
}

impl std::fmt::Display for StoreId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl std::str::FromStr for StoreId {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let bad = || format!("store id {s:?} is not 32 hex digits");
        if s.len() != 32 || !s.is_ascii() {
            return Err(bad());
        }
        let mut out = [0u8; 16];
        for (i, b) in out.iter_mut().enumerate() {
            *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        Ok(StoreId(out))
    }
}

impl Serialize for StoreId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for StoreId {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// One live data file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    /// Unique, increasing file id: a higher id holds newer writes (last-write-wins order).
    pub id: u64,
    /// Time partition index (`floor(local_time / partition_ns)`).
    pub partition: i64,
    /// Path relative to the store directory.
    pub path: String,
    /// Rows, size and key ranges of the file (flattened into the entry's JSON).
    #[serde(flatten)]
    pub stats: FileStats,
    /// 0 for flushed/imported files, n+1 for a compaction of level-n files.
    pub level: u32,
}

impl FileEntry {
    /// The entry of a written file.
    pub fn new(id: u64, partition: i64, path: String, stats: &FileStats, level: u32) -> Self {
        FileEntry { id, partition, path, stats: *stats, level }
    }
}

/// The manifest contents.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Format version.
    pub version: u32,
    /// Width of a time partition in ns (fixed when the store is created).
    pub partition_ns: i64,
    /// The store's identity, written into the header of every WAL segment (format version 2)
    /// and checked when a segment is replayed. Absent in a manifest written before ids existed:
    /// the first writer to open such a store creates one and saves it before it writes a
    /// segment. On object storage the manifest is in the bucket, so every node's local WAL
    /// carries the one id of the store it writes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_id: Option<StoreId>,
    /// Next file id to hand out.
    pub next_file_id: u64,
    /// Every WAL segment with a sequence number ≤ this is fully contained in data files (the
    /// checkpoint of a store whose WAL lives beside it; see `wal_checkpoints`).
    pub wal_checkpoint: u64,
    /// The checkpoint of each WAL owner ([`crate::storage::Storage::wal_owner`]) when
    /// several data directories take turns writing the store (object storage, a node replaced
    /// by another): one node's sequence numbers say nothing about another's segments.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub wal_checkpoints: std::collections::BTreeMap<String, u64>,
    /// Live data files, ordered by id.
    pub files: Vec<FileEntry>,
    /// The id of an import's rest (its documents and clock input, `imports/<id>.json`) whose
    /// samples this manifest publishes and which is not stored yet (`store/pending.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_import: Option<String>,
}

impl Manifest {
    /// An empty manifest of a new store, with a new random [`StoreId`].
    pub fn new(partition_ns: i64) -> Self {
        Manifest {
            version: MANIFEST_VERSION,
            partition_ns,
            store_id: Some(StoreId::random()),
            next_file_id: 1,
            wal_checkpoint: 0,
            wal_checkpoints: Default::default(),
            files: Vec::new(),
            pending_import: None,
        }
    }

    /// The checkpoint of the WAL of `owner`: its own entry; 0 when other owners have entries
    /// and it has none (its segments were never flushed into this store: replay them all —
    /// a record already in a data file is written again with the same value); the single
    /// `wal_checkpoint` for a store without owners, or whose manifest predates them.
    pub fn checkpoint_for(&self, owner: Option<&str>) -> u64 {
        match owner {
            Some(owner) => match self.wal_checkpoints.get(owner) {
                Some(&seq) => seq,
                None if !self.wal_checkpoints.is_empty() => 0,
                None => self.wal_checkpoint,
            },
            None => self.wal_checkpoint,
        }
    }

    /// Records that `owner`'s WAL segments up to `seq` are in data files.
    pub fn advance_checkpoint(&mut self, owner: Option<&str>, seq: u64) {
        match owner {
            Some(owner) => {
                let entry = self.wal_checkpoints.entry(owner.to_string()).or_insert(0);
                *entry = (*entry).max(seq);
            }
            None => self.wal_checkpoint = self.wal_checkpoint.max(seq),
        }
    }

    /// Loads `path`; `Ok(None)` if it does not exist.
    pub fn load(storage: &dyn Storage, path: &Path) -> Result<Option<Self>> {
        if !storage.exists(path) {
            return Ok(None);
        }
        let bytes = storage.read(path).map_err(|e| Error::io(path, e))?;
        let corrupt = |reason: String| Error::ManifestCorrupt { path: path.to_path_buf(), reason };
        let sealed = crate::seal::check(&bytes).map_err(corrupt)?;
        let m: Manifest = serde_json::from_slice(&bytes).map_err(|e| corrupt(e.to_string()))?;
        // A manifest listing files with footer checksums was written sealed: without its seal
        // (a flip in the sealing field itself) it is not trusted.
        if !sealed && m.files.iter().any(|f| f.stats.footer_crc32.is_some()) {
            return Err(corrupt("checksum missing from a manifest written with checksums".into()));
        }
        if m.version != MANIFEST_VERSION {
            return Err(corrupt(format!("unsupported version {}", m.version)));
        }
        if m.partition_ns <= 0 {
            return Err(corrupt(format!("partition_ns must be positive, found {}", m.partition_ns)));
        }
        for f in &m.files {
            if f.id >= m.next_file_id {
                return Err(corrupt(format!("file id {} not below next_file_id {}", f.id, m.next_file_id)));
            }
            if f.path.contains("..") || f.path.starts_with('/') {
                return Err(corrupt(format!("file path {:?} escapes the store", f.path)));
            }
        }
        Ok(Some(m))
    }

    /// Writes the manifest atomically.
    pub fn save(&self, storage: &dyn Storage, path: &Path) -> Result<()> {
        let bytes = serde_json::to_vec_pretty(self)
            .map_err(|e| Error::ManifestCorrupt { path: path.to_path_buf(), reason: e.to_string() })?;
        write_atomic(storage, path, &crate::seal::seal(bytes)).map_err(|e| Error::io(path, e))
    }

    /// Total bytes of live data files.
    pub fn total_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.stats.bytes).sum()
    }

    /// Total rows of live data files (before cross-file deduplication).
    pub fn total_rows(&self) -> u64 {
        self.files.iter().map(|f| f.stats.rows).sum()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::storage::OsStorage;

    #[test]
    fn round_trip_and_garbage() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("manifest.json");
        assert_eq!(Manifest::load(&OsStorage, &path).unwrap(), None);
        let mut m = Manifest::new(3_600_000_000_000);
        m.files.push(FileEntry {
            id: 1,
            partition: 5,
            path: "data/p5/1.parquet".into(),
            stats: FileStats {
                rows: 10,
                bytes: 100,
                min_time: 0,
                max_time: 9,
                min_series: 0,
                max_series: 3,
                footer_crc32: Some(7),
            },
            level: 0,
        });
        m.next_file_id = 2;
        m.save(&OsStorage, &path).unwrap();
        assert_eq!(Manifest::load(&OsStorage, &path).unwrap(), Some(m));
        // Sealed (`crate::seal`): a digit of a file's time range changed on disk, which still
        // parses, is corruption; so is the seal's removal from a manifest with checksums.
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.trim_end().ends_with("\"}") && text.contains("\"crc32\":\""), "{text}");
        for changed in
            [text.replacen("\"max_time\": 9", "\"max_time\": 8", 1), text.replacen(",\"crc32\":", ",\"crc33\":", 1)]
        {
            assert_ne!(changed, text);
            std::fs::write(&path, changed).unwrap();
            let e = Manifest::load(&OsStorage, &path).unwrap_err();
            assert!(matches!(e, Error::ManifestCorrupt { .. }) && e.to_string().contains("checksum"), "{e}");
        }
        for garbage in [&b""[..], b"{", b"[1,2]", b"{\"version\":9}"] {
            std::fs::write(&path, garbage).unwrap();
            let e = Manifest::load(&OsStorage, &path).unwrap_err();
            assert!(matches!(e, Error::ManifestCorrupt { .. }), "{e}");
        }
    }
}
