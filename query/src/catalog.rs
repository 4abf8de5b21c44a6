//! The metric catalog of a store: the built-in families, extended by the store's
//! `metrics.toml` (imported from a bundle), naming switches by GUID from its topology.
//!
//! `store_documents` also builds the domain tables from `topology.json` and `jobs.json`, and
//! keeps both per open store: a session (one per statement in `lockstep sql` and the servers)
//! reads the three documents and rebuilds only when one of them changed.

use std::sync::{Arc, Mutex};

use lockstep_engine::Store;
use lockstep_engine::metrics::{CATALOG_FILE, MetricCatalog};
use lockstep_engine::topology::{Topology, parse_jobs};

use crate::domain::Domain;

/// The catalog that SQL and the diagnosis use for the store in `dir`. A missing
/// `metrics.toml` means the built-in catalog; an unreadable or invalid one is an error (it was
/// validated at import, so it changed on disk since).
pub fn store_catalog(store: &Store) -> lockstep_engine::Result<MetricCatalog> {
    let topology = store.read_document("topology.json")?.map(|text| Topology::from_json(&text));
    catalog_from(store.read_document(CATALOG_FILE)?.as_deref(), topology.as_ref().and_then(|t| t.as_ref().ok()))
}

fn catalog_from(metrics: Option<&str>, topology: Option<&Topology>) -> lockstep_engine::Result<MetricCatalog> {
    let mut catalog = MetricCatalog::builtin();
    if let Some(text) = metrics {
        catalog.extend_from_toml(text)?;
    }
    if let Some(topology) = topology {
        catalog.set_switch_guids(topology.switch_guids());
    }
    Ok(catalog)
}

/// The store's metric catalog ([`store_catalog`]) and its domain tables (`None` without a
/// `topology.json`), reused from the last call over the same open store while `metrics.toml`,
/// `topology.json` and `jobs.json` read the same. Fails as building them fails: an invalid
/// catalog, topology or job list, or a job naming a node or pool the topology lacks.
pub(crate) fn store_documents(store: &Arc<Store>) -> crate::Result<(Arc<MetricCatalog>, Option<Arc<Domain>>)> {
    let mut texts: [Option<String>; 3] = Default::default();
    for (text, name) in texts.iter_mut().zip([CATALOG_FILE, "topology.json", "jobs.json"]) {
        *text = store.read_document(name)?;
    }
    let cache = crate::per_store::shared::<Documents>(store);
    let mut last = cache.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(built) = last.as_ref().filter(|b| b.texts == texts) {
        return Ok((built.catalog.clone(), built.domain.clone()));
    }
    let [metrics, topology_text, jobs_text] = &texts;
    let topology = topology_text.as_deref().map(Topology::from_json);
    let catalog = Arc::new(catalog_from(metrics.as_deref(), topology.as_ref().and_then(|t| t.as_ref().ok()))?);
    let domain = match topology {
        None => None,
        Some(topology) => {
            let jobs = match jobs_text {
                Some(text) => parse_jobs(text)?,
                None => Vec::new(),
            };
            Some(Arc::new(Domain::build(Arc::new(topology?), Arc::new(jobs), &catalog)?))
        }
    };
    *last = Some(Built { texts, catalog: catalog.clone(), domain: domain.clone() });
    Ok((catalog, domain))
}

/// The documents of one store as last read, and what was built from them.
#[derive(Default)]
struct Documents(Mutex<Option<Built>>);

struct Built {
    /// `metrics.toml`, `topology.json`, `jobs.json`.
    texts: [Option<String>; 3],
    catalog: Arc<MetricCatalog>,
    domain: Option<Arc<Domain>>,
}
