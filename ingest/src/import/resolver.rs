//! Row fields → series id, without allocating per row.
//!
//! Each string column's values are interned to small codes; a row's code tuple is looked up
//! in a cache of known series (a slice lookup into a `HashMap<Vec<u32>, _>`); only a new
//! combination builds a [`SeriesKey`] and asks the store for its id.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::Arc;

use lockstep_engine::model::{RESERVED_LABELS, SeriesKey};
use lockstep_engine::{SeriesId, Store};

/// Resolves rows of (metric, label values…) to series ids.
#[derive(Debug, Default)]
pub struct SeriesResolver {
    labels: Vec<String>,
    interns: Vec<HashMap<Box<str>, u32>>,
    values: Vec<Vec<Box<str>>>,
    cache: HashMap<Vec<u32>, SeriesId, BuildHasherDefault<CodeHasher>>,
    keys: HashMap<SeriesId, Arc<SeriesKey>>,
    scratch: Vec<u32>,
}

impl SeriesResolver {
    /// Sets the label column names (host must be among them).
    pub fn set_columns(&mut self, labels: Vec<String>) -> Result<(), String> {
        if !labels.iter().any(|l| l == "host") {
            return Err("missing required column host".into());
        }
        for l in &labels {
            if RESERVED_LABELS.contains(&l.as_str()) {
                return Err(format!("column {l:?} cannot be a label (reserved name)"));
            }
        }
        self.interns = vec![HashMap::new(); labels.len() + 1];
        self.values = vec![Vec::new(); labels.len() + 1];
        self.labels = labels;
        Ok(())
    }

    /// The key of a resolved id.
    pub fn key(&self, id: SeriesId) -> Option<&SeriesKey> {
        self.keys.get(&id).map(Arc::as_ref)
    }

    /// The code of value `v` of field `field` (0 = metric, then the labels in `set_columns`
    /// order); 0 means absent (None or ""). Codes are small dense integers per field.
    pub fn intern(&mut self, field: usize, v: Option<&str>) -> u32 {
        match v {
            None | Some("") => 0,
            Some(v) => match self.interns[field].get(v) {
                Some(&c) => c,
                None => {
                    let c = self.values[field].len() as u32 + 1;
                    self.interns[field].insert(v.into(), c);
                    self.values[field].push(v.into());
                    c
                }
            },
        }
    }

    /// Number of fields a row has (metric plus labels).
    pub fn fields(&self) -> usize {
        self.labels.len() + 1
    }

    /// Resolves `fields` = [metric, label values…] (None or "" = absent).
    pub fn resolve(&mut self, store: &Store, fields: &[Option<&str>]) -> Result<SeriesId, String> {
        if fields.len() != self.labels.len() + 1 {
            return Err(format!("expected {} fields, got {}", self.labels.len() + 1, fields.len()));
        }
        let mut codes = std::mem::take(&mut self.scratch);
        codes.clear();
        for (i, f) in fields.iter().enumerate() {
            codes.push(self.intern(i, *f));
        }
        let id = self.resolve_codes(store, &codes);
        self.scratch = codes;
        id
    }

    /// Resolves a row given as interned codes (one per field, from [`Self::intern`]).
    pub fn resolve_codes(&mut self, store: &Store, codes: &[u32]) -> Result<SeriesId, String> {
        if let Some(&id) = self.cache.get(codes) {
            return Ok(id);
        }
        if codes.len() != self.labels.len() + 1 {
            return Err(format!("expected {} fields, got {}", self.labels.len() + 1, codes.len()));
        }
        let value = |i: usize, code: u32| -> Option<&str> {
            (code > 0).then(|| self.values[i].get(code as usize - 1).map(AsRef::as_ref)).flatten()
        };
        let metric = value(0, codes[0]).ok_or("metric is empty")?.to_string();
        let labels = self
            .labels
            .iter()
            .enumerate()
            .filter_map(|(i, name)| value(i + 1, codes[i + 1]).map(|v| (name.clone(), v.to_string())));
        let key = SeriesKey::new(metric, labels);
        key.validate().map_err(|e| e.to_string())?;
        let id = store.resolve_series(&key).map_err(|e| e.to_string())?;
        self.cache.insert(codes.to_vec(), id);
        self.keys.insert(id, Arc::new(key));
        Ok(id)
    }
}

/// FxHash-style hasher for the code-tuple cache: the keys are a few small integers made by
/// this process (not attacker-chosen strings), so SipHash's DoS resistance buys nothing and
/// costs a third of the lookup.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct CodeHasher(u64);

impl std::hash::Hasher for CodeHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // `[u32]` hashes as one `write` of its bytes: eight at a time.
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(c);
            self.write_u64(u64::from_le_bytes(word));
        }
        for &b in chunks.remainder() {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u32(&mut self, v: u32) {
        self.write_u64(u64::from(v));
    }
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}
