//! The metric catalog of a store: the built-in families, extended by the store's
//! `metrics.toml` (imported from a bundle), naming switches by GUID from its topology.

use std::path::Path;

use lockstep_engine::metrics::{CATALOG_FILE, MetricCatalog};
use lockstep_engine::topology::Topology;


/// The catalog that SQL and the diagnosis use for the store in `dir`. A missing
/// `metrics.toml` means the built-in catalog; an unreadable or invalid one is an error (it was
/// validated at import, so it changed on disk since).
pub fn store_catalog(dir: &Path) -> lockstep_engine::Result<MetricCatalog> {
    let mut catalog = MetricCatalog::builtin();
    let path = dir.join(CATALOG_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            catalog.extend_from_toml(&text)?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(lockstep_engine::Error::io(&path, e)),
    }
    if let Ok(text) = std::fs::read_to_string(dir.join("topology.json"))
        && let Ok(topology) = Topology::from_json(&text)
    {
        catalog.set_switch_guids(topology.switch_guids());
    }
    Ok(catalog)
}
