//! The rest of an import, committed with its samples.
//!
//! An import bundle is more than samples: its `topology.json`, `jobs.json` and `metrics.toml`
//! and its clock input (sync exchanges, direct offsets) belong with them. Those are stored by
//! other means than data files (documents with a version history, the clock registry's
//! logs), so they cannot be published in the same manifest update as the samples. Instead,
//! before the samples are committed, the importer writes the rest whole, validated, to
//! `imports/<id>.json` ([`Store::stage_import_rest`]); the manifest update that publishes the
//! samples names that id ([`super::BulkImport::commit_with_rest`]); the importer then stores
//! the rest and a second manifest update clears the name ([`Store::finish_import_rest`]).
//!
//! The one manifest update is the commit point of the whole bundle. A crash before it leaves
//! nothing (the file is an orphan the next writer removes); a crash after it leaves the rest
//! named in the manifest, where the next writer finds it ([`Store::pending_import`]) and
//! stores it, without the bundle, which may be gone by then. Storing the rest twice does no
//! harm: repeated clock input is skipped, and a document stored since the rest was staged (its
//! own, or a newer one) is not written again.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use super::{Store, lock_poisoned};
use crate::clock::{OffsetObservation, SyncExchange};
use crate::error::{Error, Result};

/// The directory (under the store directory) holding staged import rests.
pub const IMPORTS_DIR: &str = "imports";

static REST_COUNTER: AtomicU64 = AtomicU64::new(0);

/// What an import stores after its samples (see the module docs).
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImportRest {
    /// The bundle imported (for messages).
    pub bundle: String,
    /// The bundle's documents, validated: (name, text), in the order to store them.
    pub documents: Vec<(String, String)>,
    /// Each document's newest version when the rest was staged (0: none): a version stored
    /// after it (this rest's own, or a newer document's) is not overwritten when the rest is
    /// stored again after a crash.
    #[serde(default)]
    pub versions: Vec<u64>,
    /// Its clock-sync exchanges.
    pub exchanges: Vec<SyncExchange>,
    /// Its direct clock offsets.
    pub offsets: Vec<OffsetObservation>,
}

impl ImportRest {
    /// Whether there is nothing to store after the samples.
    pub fn is_empty(&self) -> bool {
        self.documents.is_empty() && self.exchanges.is_empty() && self.offsets.is_empty()
    }
}

impl Store {
    /// Writes `rest` durably to `imports/<id>.json` and returns the id, for
    /// [`super::BulkImport::commit_with_rest`] or [`Store::name_import_rest`]. Until a manifest
    /// names it, the file is an orphan, which the next writer's open removes.
    pub fn stage_import_rest(&self, rest: &ImportRest) -> Result<String> {
        if self.is_read_only() {
            return Err(self.read_only_error());
        }
        let n = REST_COUNTER.fetch_add(1, Ordering::Relaxed);
        let id = format!("import-{}-{n}", std::process::id());
        let path = self.import_rest_path(&id);
        let bytes = serde_json::to_vec(rest).map_err(|e| Error::Internal { reason: e.to_string() })?;
        let dir = self.dir.join(IMPORTS_DIR);
        self.storage.create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        self.storage.write_atomic(&path, &bytes).map_err(|e| Error::io(&path, e))?;
        Ok(id)
    }

    /// Names the staged rest `id` in a manifest update of its own: the commit point of a
    /// bundle without samples (documents and clock input only), which is then stored as after
    /// a sample commit. Refused while the manifest names another rest.
    pub fn name_import_rest(&self, id: &str) -> Result<()> {
        if self.is_read_only() {
            return Err(self.read_only_error());
        }
        let _guard = self.manifest_lock.lock().map_err(lock_poisoned)?;
        self.check_no_other_rest(id)?;
        self.commit_edit(Vec::new(), &[], None, |m| m.pending_import = Some(id.to_owned()))
    }

    /// Refuses to name rest `id` while the manifest names another (under the manifest lock:
    /// the manifest names one rest at a time).
    pub(super) fn check_no_other_rest(&self, id: &str) -> Result<()> {
        let named = self.state.read().map_err(lock_poisoned)?.manifest.pending_import.clone();
        match named.filter(|other| other != id) {
            Some(other) => Err(Error::Internal {
                reason: format!("the rest of an earlier import ({other}) is not stored yet; store it first"),
            }),
            None => Ok(()),
        }
    }

    /// Removes the file of staged rest `id` (gone already is fine).
    pub(crate) fn discard_import_rest(&self, id: &str) -> Result<()> {
        let path = self.import_rest_path(id);
        match self.storage.remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io(&path, e)),
            _ => Ok(()),
        }
    }

    /// The id of the rest of an import whose samples are committed and whose rest is not
    /// stored yet, as the manifest names it.
    pub fn pending_import(&self) -> Result<Option<String>> {
        Ok(self.state.read().map_err(lock_poisoned)?.manifest.pending_import.clone())
    }

    /// Reads the staged rest `id` (an error naming the file when it does not read).
    pub fn read_import_rest(&self, id: &str) -> Result<ImportRest> {
        let path = self.import_rest_path(id);
        let bytes = self.storage.read(&path).map_err(|e| Error::io(&path, e))?;
        serde_json::from_slice(&bytes)
            .map_err(|e| Error::io(&path, std::io::Error::new(std::io::ErrorKind::InvalidData, e)))
    }

    /// Records that the rest `id` is stored: the manifest no longer names it, and its file
    /// goes. A no-op when the manifest names another rest or none.
    pub fn finish_import_rest(&self, id: &str) -> Result<()> {
        if self.is_read_only() {
            return Err(self.read_only_error());
        }
        let guard = self.manifest_lock.lock().map_err(lock_poisoned)?;
        let named = self.state.read().map_err(lock_poisoned)?.manifest.pending_import.as_deref() == Some(id);
        if named {
            self.commit_edit(Vec::new(), &[], None, |m| m.pending_import = None)?;
        }
        drop(guard);
        self.discard_import_rest(id)
    }

    pub(super) fn import_rest_path(&self, id: &str) -> PathBuf {
        self.dir.join(IMPORTS_DIR).join(format!("{id}.json"))
    }

    /// Removes staged rests no manifest names (a writer's open, under the writer lock).
    pub(super) fn remove_orphan_rests(&self) -> Result<()> {
        let named = self.state.read().map_err(lock_poisoned)?.manifest.pending_import.clone();
        let keep = named.map(|id| self.import_rest_path(&id));
        let dir = self.dir.join(IMPORTS_DIR);
        for file in self.storage.list_dir(&dir).map_err(|e| Error::io(&dir, e))? {
            if Some(&file) != keep.as_ref()
                && let Err(e) = self.storage.remove_file(&file)
            {
                // Not a reason to keep the writer from opening (a directory someone put there).
                tracing::warn!(path = %file.display(), error = %e, "cannot remove a leftover of an import");
            }
        }
        Ok(())
    }
}
