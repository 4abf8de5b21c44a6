//! Row fields → series id, without allocating per row.
//!
//! Each string column's values are interned to small codes; a row's code tuple is looked up
//! in a cache of known series (a slice lookup into a `HashMap<Vec<u32>, _>`); only a new
//! combination builds a [`SeriesKey`] and asks the store for its id.

use std::collections::HashMap;
use std::sync::Arc;

use lockstep_engine::model::{RESERVED_LABELS, SeriesKey};
use lockstep_engine::{SeriesId, Store};

/// Resolves rows of (metric, label values…) to series ids.
#[derive(Debug, Default)]
pub struct SeriesResolver {
    labels: Vec<String>,
    interns: Vec<HashMap<Box<str>, u32>>,
    values: Vec<Vec<Box<str>>>,
    cache: HashMap<Vec<u32>, SeriesId>,
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

    /// Resolves `fields` = [metric, label values…] (None or "" = absent).
    pub fn resolve(&mut self, store: &Store, fields: &[Option<&str>]) -> Result<SeriesId, String> {
        if fields.len() != self.labels.len() + 1 {
            return Err(format!("expected {} fields, got {}", self.labels.len() + 1, fields.len()));
        }
        self.scratch.clear();
        for (i, f) in fields.iter().enumerate() {
            let code = match f {
                None | Some("") => 0,
                Some(v) => match self.interns[i].get(*v) {
                    Some(&c) => c,
                    None => {
                        let c = self.values[i].len() as u32 + 1;
                        self.interns[i].insert((*v).into(), c);
                        self.values[i].push((*v).into());
                        c
                    }
                },
            };
            self.scratch.push(code);
        }
        if let Some(&id) = self.cache.get(self.scratch.as_slice()) {
            return Ok(id);
        }
        let value = |i: usize, code: u32| -> Option<&str> {
            (code > 0).then(|| self.values[i][code as usize - 1].as_ref())
        };
        let metric = value(0, self.scratch[0]).ok_or("metric is empty")?.to_string();
        let labels = self
            .labels
            .iter()
            .enumerate()
            .filter_map(|(i, name)| value(i + 1, self.scratch[i + 1]).map(|v| (name.clone(), v.to_string())));
        let key = SeriesKey::new(metric, labels);
        key.validate().map_err(|e| e.to_string())?;
        let id = store.resolve_series(&key).map_err(|e| e.to_string())?;
        self.cache.insert(self.scratch.clone(), id);
        self.keys.insert(id, Arc::new(key));
        Ok(id)
    }
}
