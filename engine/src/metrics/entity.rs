//! Entity names and the resolution of a series to the entity it describes.
//!
//! Names (the contract used by SQL and the diagnosis): GPU `node-03/gpu5`, host NIC port
//! `node-03/mlx5_2:1`, switch port `leaf-2:17`, node `node-03`, storage pool `lustre-a`,
//! job `llm-70b`.
//!
//! Resolution of a series: the catalog says which [`EntityKind`] the family describes; for
//! families it does not know, the kind is inferred from the labels (`gpu` → GPU; `device` and
//! `port` → NIC port; `switch` or `guid` with `port` → switch port; `pool` → storage pool;
//! otherwise the node; the `job` label is never used for unknown families because Prometheus
//! sets it to the scrape job). The labels each kind needs:
//!
//! | kind | labels | name |
//! |---|---|---|
//! | gpu | `host`, `gpu` (or `gpu_device_id`; `5`, `GPU5` and `gpu5` all mean 5) | `{host}/gpu{n}` |
//! | nic_port | `host`, `device`, `port` | `{host}/{device}:{port}` |
//! | switch_port | `switch` (or `guid` mapped through the topology), `port` | `{switch}:{port}` |
//! | node | `host` | `{host}` |
//! | storage_pool | `pool` | `{pool}` |
//! | job | `job` | `{job}` |
//!
//! When a label the kind needs is missing the series falls back to its node, so every series
//! with a `host` label resolves to some entity.

use std::collections::HashMap;
use std::fmt;

use crate::metrics::EntityKind;
use crate::model::{Name, SeriesKey};

/// A resolved entity: its kind and its name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Entity {
    /// What kind of thing it is.
    pub kind: EntityKind,
    /// Its name, e.g. `node-03/mlx5_2:1`.
    pub name: String,
}

impl fmt::Display for Entity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

/// The GPU entity name `{host}/gpu{index}`; `index` may be `5`, `GPU5` or `gpu5`.
pub fn gpu_name(host: &str, index: &str) -> String {
    format!("{host}/gpu{}", gpu_index(index))
}

/// The host NIC port entity name `{host}/{device}:{port}`.
pub fn nic_port_name(host: &str, device: &str, port: &str) -> String {
    format!("{host}/{device}:{port}")
}

/// The switch port entity name `{switch}:{port}`.
pub fn switch_port_name(switch: &str, port: &str) -> String {
    format!("{switch}:{port}")
}

/// A GUID in the form used as map key: lowercase with a `0x` prefix.
pub fn normalize_guid(guid: &str) -> String {
    let g = guid.trim().to_ascii_lowercase();
    if g.starts_with("0x") { g } else { format!("0x{g}") }
}

/// The numeric part of a GPU label: `GPU5`/`gpu5` → `5`; other values unchanged.
fn gpu_index(label: &str) -> &str {
    let digits = label
        .strip_prefix("GPU")
        .or_else(|| label.strip_prefix("gpu"))
        .filter(|rest| !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit()));
    digits.unwrap_or(label)
}

/// Resolves a series to its entity. `kind` is the catalog's entity kind for the family
/// (`None` for unknown families: inferred from labels). `switch_guids` maps normalised GUIDs
/// (see [`normalize_guid`]) to switch names. `None` only when the series has no `host`.
pub fn resolve(
    key: &SeriesKey,
    kind: Option<EntityKind>,
    switch_guids: Option<&HashMap<String, String>>,
) -> Option<Entity> {
    let host = key.host()?;
    let label = |name: &str| key.labels.get(name).map(Name::as_str);
    let kind = kind.unwrap_or_else(|| infer_kind(key));
    let named = |kind: EntityKind, name: String| Some(Entity { kind, name });
    let resolved = match kind {
        EntityKind::Gpu => {
            label("gpu").or_else(|| label("gpu_device_id")).and_then(|gpu| named(kind, gpu_name(host, gpu)))
        }
        EntityKind::NicPort => match (label("device"), label("port")) {
            (Some(device), Some(port)) => named(kind, nic_port_name(host, device, port)),
            _ => None,
        },
        EntityKind::SwitchPort => label("port").and_then(|port| {
            let switch = label("switch").map(str::to_owned).or_else(|| {
                let guid = normalize_guid(label("guid")?);
                Some(switch_guids.and_then(|m| m.get(&guid).cloned()).unwrap_or(guid))
            })?;
            named(kind, switch_port_name(&switch, port))
        }),
        EntityKind::StoragePool => label("pool").and_then(|p| named(kind, p.to_owned())),
        EntityKind::Job => label("job").and_then(|j| named(kind, j.to_owned())),
        EntityKind::Node => None,
    };
    resolved.or_else(|| named(EntityKind::Node, host.to_owned()))
}

fn infer_kind(key: &SeriesKey) -> EntityKind {
    let has = |name: &str| key.labels.contains_key(name);
    if has("gpu") {
        EntityKind::Gpu
    } else if has("port") && (has("switch") || has("guid")) {
        EntityKind::SwitchPort
    } else if has("device") && has("port") {
        EntityKind::NicPort
    } else if has("pool") {
        EntityKind::StoragePool
    } else {
        EntityKind::Node
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn key(metric: &str, labels: &[(&str, &str)]) -> SeriesKey {
        SeriesKey::new(metric, labels.iter().copied())
    }

    #[test]
    fn names_follow_the_contract() {
        assert_eq!(gpu_name("node-03", "5"), "node-03/gpu5");
        assert_eq!(gpu_name("node-03", "GPU5"), "node-03/gpu5");
        assert_eq!(gpu_name("node-03", "GPUx"), "node-03/gpuGPUx");
        assert_eq!(nic_port_name("node-03", "mlx5_2", "1"), "node-03/mlx5_2:1");
        assert_eq!(switch_port_name("leaf-2", "17"), "leaf-2:17");
        assert_eq!(normalize_guid("7CFE9003009CE5B0"), "0x7cfe9003009ce5b0");
    }

    #[test]
    fn resolves_by_declared_kind_with_node_fallback() {
        let k = key("m", &[("host", "node-03"), ("gpu", "5"), ("device", "nvidia5")]);
        assert_eq!(resolve(&k, Some(EntityKind::Gpu), None).unwrap().name, "node-03/gpu5");
        // Disk metrics carry `device` too; declared as node they stay the node.
        let k = key("node_disk_reads_completed_total", &[("host", "node-03"), ("device", "nvme0n1")]);
        let e = resolve(&k, Some(EntityKind::Node), None).unwrap();
        assert_eq!((e.kind, e.name.as_str()), (EntityKind::Node, "node-03"));
        // A NIC family without a port label falls back to the node.
        let k = key("m", &[("host", "node-03"), ("device", "mlx5_0")]);
        assert_eq!(resolve(&k, Some(EntityKind::NicPort), None).unwrap().kind, EntityKind::Node);
        assert!(resolve(&key("m", &[("gpu", "1")]), None, None).is_none());
    }

    #[test]
    fn switch_port_from_name_or_guid() {
        let k = key("m", &[("host", "mgmt"), ("switch", "leaf-2"), ("port", "17")]);
        assert_eq!(resolve(&k, Some(EntityKind::SwitchPort), None).unwrap().name, "leaf-2:17");
        let k = key("m", &[("host", "mgmt"), ("guid", "0x7CFE9003009CE5B0"), ("port", "3")]);
        assert_eq!(resolve(&k, Some(EntityKind::SwitchPort), None).unwrap().name, "0x7cfe9003009ce5b0:3");
        let map = HashMap::from([("0x7cfe9003009ce5b0".to_owned(), "spine-1".to_owned())]);
        assert_eq!(resolve(&k, Some(EntityKind::SwitchPort), Some(&map)).unwrap().name, "spine-1:3");
    }

    #[test]
    fn infers_kind_for_unknown_families_but_ignores_scrape_job() {
        let k = key("x", &[("host", "n1"), ("device", "mlx5_1"), ("port", "1")]);
        assert_eq!(resolve(&k, None, None).unwrap().name, "n1/mlx5_1:1");
        let k = key("x", &[("host", "n1"), ("pool", "lustre-a")]);
        assert_eq!(resolve(&k, None, None).unwrap().name, "lustre-a");
        let k = key("x", &[("host", "n1"), ("job", "node-exporter")]);
        assert_eq!(resolve(&k, None, None).unwrap().name, "n1");
        let k = key("x", &[("host", "n1"), ("job", "llm-70b")]);
        assert_eq!(resolve(&k, Some(EntityKind::Job), None).unwrap().name, "llm-70b");
    }
}
