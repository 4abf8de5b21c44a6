//! Renders the cluster as `topology.json` and `jobs.json` (schemas in `docs/simulator.md`).
//! Switch `links` list only switch-to-switch cables; host cables are described once, on the host
//! side, by each NIC's `switch` and `switch_port`.

use serde_json::{Value, json};

use super::cluster::{Cluster, GPUS_PER_NODE, Nic, POOL, Peer};

impl Cluster {
    /// The `topology.json` document.
    pub(crate) fn topology_json(&self) -> Value {
        let fabric = self.fabric.name();
        let nic_json = |nic: &Nic| {
            json!({
                "device": nic.device, "port": 1, "fabric": fabric,
                "switch": self.switches[nic.switch].name,
                "switch_port": self.switches[nic.switch].ports[nic.switch_port].number,
            })
        };
        let nodes: Vec<Value> = self
            .nodes
            .iter()
            .map(|n| json!({"name": n.name, "gpus": GPUS_PER_NODE, "nics": n.nics.iter().map(nic_json).collect::<Vec<_>>()}))
            .collect();
        let switches: Vec<Value> = self
            .switches
            .iter()
            .map(|s| {
                let links: Vec<Value> = s
                    .ports
                    .iter()
                    .filter_map(|p| match p.peer {
                        Peer::Switch { switch, port } => Some(json!({
                            "port": p.number,
                            "peer": self.switches[switch].name,
                            "peer_port": self.switches[switch].ports[port].number,
                        })),
                        _ => None,
                    })
                    .collect();
                json!({"name": s.name, "tier": if s.spine { "spine" } else { "leaf" }, "guid": s.guid, "links": links})
            })
            .collect();
        let servers: Vec<Value> = self
            .servers
            .iter()
            .map(|s| json!({"name": s.name, "nics": s.nics.iter().map(nic_json).collect::<Vec<_>>()}))
            .collect();
        json!({
            "nodes": nodes,
            "switches": switches,
            "storage_pools": [{"name": POOL, "kind": "lustre", "servers": servers}],
        })
    }

    /// The `jobs.json` document.
    pub(crate) fn jobs_json(&self) -> Value {
        let jobs: Vec<Value> = self
            .jobs
            .iter()
            .map(|j| {
                let nodes: Vec<&str> = j.nodes.iter().map(|&n| self.nodes[n].name.as_str()).collect();
                json!({"job": j.name, "nodes": nodes, "start": j.start, "end": j.end, "storage_pool": POOL})
            })
            .collect();
        Value::Array(jobs)
    }
}
