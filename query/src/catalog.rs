//! The metric catalog of a store: the built-in families, extended by the store's
//! `metrics.toml` (imported from a bundle), naming switches by GUID from its topology.

use lockstep_engine::Store;
use lockstep_engine::metrics::{CATALOG_FILE, MetricCatalog};
use lockstep_engine::topology::Topology;

/// The catalog that SQL and the diagnosis use for the store in `dir`. A missing
/// `metrics.toml` means the built-in catalog; an unreadable or invalid one is an error (it was
/// validated at import, so it changed on disk since).
pub fn store_catalog(store: &Store) -> lockstep_engine::Result<MetricCatalog> {
    let mut catalog = MetricCatalog::builtin();
    if let Some(text) = store.read_document(CATALOG_FILE)? {
        catalog.extend_from_toml(&text)?;
    }
    if let Some(text) = store.read_document("topology.json")?
        && let Ok(topology) = Topology::from_json(&text)
    {
        catalog.set_switch_guids(topology.switch_guids());
    }
    Ok(catalog)
}
