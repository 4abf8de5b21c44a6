//! Topology and jobs: which GPUs, NIC ports, switch ports and storage pools exist, how they
//! are cabled, and which jobs run on them.
//!
//! A bundle's `topology.json` is a [`Topology`] and its `jobs.json` a list of [`Job`]s
//! (schemas in `docs/topology.md`). [`PathFinder`] computes the fabric path between two
//! nodes or between a node and a storage pool; [`job_entities`] lists every entity a job
//! depends on and [`JobIndex`] answers the reverse question: which jobs an entity's alert
//! touches.

mod index;
mod jobs;
mod paths;
mod time;

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Deserializer, Serialize};

use crate::error::{Error, Result};
use crate::metrics::entity::{gpu_name, nic_port_name, normalize_guid, switch_port_name};

pub use index::{EntityJob, JobEntity, JobIndex, job_entities};
pub use jobs::{Job, check_jobs, parse_jobs};
pub use paths::{Hop, PathFinder, Route, rail_pairs};
pub use time::{parse_rfc3339, rfc3339_error};

/// The document name used in topology errors.
const TOPOLOGY_DOC: &str = "topology.json";

/// The link layer of a NIC port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Fabric {
    /// InfiniBand.
    Infiniband,
    /// RDMA over Converged Ethernet.
    Roce,
}

impl Fabric {
    /// The name used in JSON and SQL.
    pub fn as_str(self) -> &'static str {
        match self {
            Fabric::Infiniband => "infiniband",
            Fabric::Roce => "roce",
        }
    }
}

/// The whole cluster: compute nodes, switches and storage pools. Unknown fields are refused
/// here and in every part: a misspelt `nics` or `storage_pools` would otherwise leave ports or
/// pools unmapped without a word.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    /// Compute nodes.
    #[serde(default)]
    pub nodes: Vec<Node>,
    /// Switches and the links between them.
    #[serde(default)]
    pub switches: Vec<Switch>,
    /// Storage pools and their servers.
    #[serde(default)]
    pub storage_pools: Vec<StoragePool>,
}

/// A compute node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Node {
    /// Host name, e.g. `node-03` (the `host` label of its series).
    pub name: String,
    /// Number of GPUs; their indices are `0..gpus`.
    #[serde(default)]
    pub gpus: u32,
    /// NIC ports, in rail order.
    #[serde(default)]
    pub nics: Vec<Nic>,
}

/// A host NIC port and the switch port it is cabled to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Nic {
    /// RDMA device, e.g. `mlx5_2`.
    pub device: String,
    /// Port number on the device (JSON string or number), e.g. `1`.
    #[serde(deserialize_with = "de_label")]
    pub port: String,
    /// InfiniBand or RoCE.
    pub fabric: Fabric,
    /// The switch it is cabled to.
    pub switch: String,
    /// The switch port (JSON string or number).
    #[serde(deserialize_with = "de_label")]
    pub switch_port: String,
}

impl Nic {
    /// The NIC port entity `{host}/{device}:{port}`.
    pub fn entity(&self, host: &str) -> String {
        nic_port_name(host, &self.device, &self.port)
    }

    /// The entity of the switch port it is cabled to, `{switch}:{switch_port}`.
    pub fn switch_port_entity(&self) -> String {
        switch_port_name(&self.switch, &self.switch_port)
    }
}

/// A switch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Switch {
    /// Name, e.g. `leaf-2` (the `switch` label of its series).
    pub name: String,
    /// Tier, e.g. `leaf`, `spine` or `core` (JSON string or number); informational.
    #[serde(default, deserialize_with = "de_label")]
    pub tier: String,
    /// Node GUID (e.g. `0x7cfe9003009ce5b0`), used to name ports of series labelled only by
    /// `guid` (infiniband_exporter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guid: Option<String>,
    /// Links from this switch's ports to other switches (declaring a link on one end is
    /// enough; both ends must agree when both declare it).
    #[serde(default)]
    pub links: Vec<Link>,
}

/// A cable from a switch port to a peer's port.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Link {
    /// Port on this switch.
    #[serde(deserialize_with = "de_label")]
    pub port: String,
    /// The peer: another switch, or a host (then the host's NIC entry is authoritative).
    pub peer: String,
    /// Port on the peer.
    #[serde(deserialize_with = "de_label")]
    pub peer_port: String,
}

/// A storage pool (file system, object store) and its servers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoragePool {
    /// Name, e.g. `lustre-a` (the `pool` label of storage series).
    pub name: String,
    /// Kind, e.g. `lustre`, `weka`, `nfs`, `s3`; informational.
    #[serde(default)]
    pub kind: String,
    /// Servers and their NIC ports.
    #[serde(default)]
    pub servers: Vec<StorageServer>,
}

/// A server of a storage pool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StorageServer {
    /// Host name.
    pub name: String,
    /// NIC ports (same schema as compute nodes).
    #[serde(default)]
    pub nics: Vec<Nic>,
}

impl Node {
    /// GPU entity names `{name}/gpu{i}` for `i` in `0..gpus`.
    pub fn gpu_entities(&self) -> impl Iterator<Item = String> + '_ {
        (0..self.gpus).map(|i| gpu_name(&self.name, &i.to_string()))
    }
}

impl Topology {
    /// Parses and validates a `topology.json` document.
    pub fn from_json(text: &str) -> Result<Topology> {
        let topology: Topology = serde_json::from_str(text).map_err(|e| invalid(e.to_string()))?;
        topology.validate()?;
        Ok(topology)
    }

    /// A compute node by name.
    pub fn node(&self, name: &str) -> Option<&Node> {
        self.nodes.iter().find(|n| n.name == name)
    }

    /// A switch by name.
    pub fn switch(&self, name: &str) -> Option<&Switch> {
        self.switches.iter().find(|s| s.name == name)
    }

    /// A storage pool by name.
    pub fn pool(&self, name: &str) -> Option<&StoragePool> {
        self.storage_pools.iter().find(|p| p.name == name)
    }

    /// Every host (compute nodes, then storage servers) with its NICs.
    pub fn hosts(&self) -> impl Iterator<Item = (&str, &[Nic])> {
        let nodes = self.nodes.iter().map(|n| (n.name.as_str(), n.nics.as_slice()));
        let servers =
            self.storage_pools.iter().flat_map(|p| p.servers.iter().map(|s| (s.name.as_str(), s.nics.as_slice())));
        nodes.chain(servers)
    }

    /// Normalised switch GUID → switch name, for naming ports of GUID-labelled series.
    pub fn switch_guids(&self) -> HashMap<String, String> {
        self.switches.iter().filter_map(|s| Some((normalize_guid(s.guid.as_deref()?), s.name.clone()))).collect()
    }

    /// Checks names, references and cabling: unique host, switch and pool names; every NIC
    /// on a known switch; no switch port used twice; links to known peers that agree at both
    /// ends; host links matching the host's NIC entry.
    pub fn validate(&self) -> Result<()> {
        let mut hosts: HashSet<&str> = HashSet::new();
        for (name, _) in self.hosts() {
            check_name("host", name)?;
            if !hosts.insert(name) {
                return Err(invalid(format!("host {name} is declared twice")));
            }
        }
        let mut switches: HashSet<&str> = HashSet::new();
        for s in &self.switches {
            check_name("switch", &s.name)?;
            if hosts.contains(s.name.as_str()) {
                return Err(invalid(format!("switch {} has the name of a host", s.name)));
            }
            if !switches.insert(&s.name) {
                return Err(invalid(format!("switch {} is declared twice", s.name)));
            }
        }
        let mut pools: HashSet<&str> = HashSet::new();
        for p in &self.storage_pools {
            check_name("storage pool", &p.name)?;
            if !pools.insert(&p.name) {
                return Err(invalid(format!("storage pool {} is declared twice", p.name)));
            }
        }
        // (switch, port) → what is cabled there.
        let mut cabled: HashMap<(&str, &str), Far<'_>> = HashMap::new();
        for (host, nics) in self.hosts() {
            let mut seen: HashSet<(&str, &str)> = HashSet::new();
            for nic in nics {
                if nic.device.is_empty() || nic.port.is_empty() || nic.switch_port.is_empty() {
                    return Err(invalid(format!("a NIC of {host} has an empty device or port")));
                }
                if !seen.insert((&nic.device, &nic.port)) {
                    return Err(invalid(format!("NIC {} is declared twice", nic.entity(host))));
                }
                if !switches.contains(nic.switch.as_str()) {
                    return Err(invalid(format!(
                        "NIC {} is cabled to unknown switch {}",
                        nic.entity(host),
                        nic.switch
                    )));
                }
                let here = (nic.switch.as_str(), nic.switch_port.as_str());
                if let Some(other) = cabled.insert(here, Far::Host(host)) {
                    return Err(port_reused(here, other, Far::Host(host)));
                }
            }
        }
        for s in &self.switches {
            for link in &s.links {
                let here = (s.name.as_str(), link.port.as_str());
                if link.port.is_empty() || link.peer_port.is_empty() {
                    return Err(invalid(format!("a link of switch {} has an empty port", s.name)));
                }
                if link.peer == s.name {
                    return Err(invalid(format!("switch {} port {} links to itself", s.name, link.port)));
                }
                if hosts.contains(link.peer.as_str()) {
                    if cabled.get(&here) != Some(&Far::Host(&link.peer)) {
                        return Err(invalid(format!(
                            "switch {} port {} links to {} but no NIC of {} is cabled there",
                            s.name, link.port, link.peer, link.peer
                        )));
                    }
                    continue;
                }
                if !switches.contains(link.peer.as_str()) {
                    return Err(invalid(format!(
                        "switch {} port {} links to unknown peer {}",
                        s.name, link.port, link.peer
                    )));
                }
                let there = (link.peer.as_str(), link.peer_port.as_str());
                for (a, b) in [(here, there), (there, here)] {
                    match cabled.get(&a) {
                        None => {
                            cabled.insert(a, Far::Port(b.0, b.1));
                        }
                        Some(Far::Port(x, y)) if (*x, *y) == b => {}
                        Some(other) => return Err(port_reused(a, *other, Far::Port(b.0, b.1))),
                    }
                }
            }
        }
        Ok(())
    }
}

/// What a switch port is cabled to (validation only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Far<'a> {
    Host(&'a str),
    Port(&'a str, &'a str),
}

impl std::fmt::Display for Far<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Far::Host(h) => write!(f, "host {h}"),
            Far::Port(s, p) => write!(f, "{}", switch_port_name(s, p)),
        }
    }
}

fn port_reused(port: (&str, &str), first: Far<'_>, second: Far<'_>) -> Error {
    invalid(format!("switch port {} is cabled to both {first} and {second}", switch_port_name(port.0, port.1)))
}

fn check_name(what: &str, name: &str) -> Result<()> {
    if name.is_empty() || name.contains(['/', ':']) || name.trim() != name {
        return Err(invalid(format!(
            "{what} name {name:?} is empty, padded or contains '/' or ':' (entity separators)"
        )));
    }
    Ok(())
}

fn invalid(reason: String) -> Error {
    Error::TopologyInvalid { document: TOPOLOGY_DOC.to_owned(), reason }
}

/// Deserialises a label-like value given as a JSON string or integer.
fn de_label<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<String, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Label {
        Text(String),
        Unsigned(u64),
        Signed(i64),
    }
    Ok(match Label::deserialize(d)? {
        Label::Text(s) => s,
        Label::Unsigned(n) => n.to_string(),
        Label::Signed(n) => n.to_string(),
    })
}

#[cfg(test)]
mod tests;
