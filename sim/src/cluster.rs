//! The simulated cluster: a two-tier fat tree (compute leaves, one storage leaf, two or four
//! spines), compute nodes with eight GPUs and four NICs, a Lustre-like storage pool whose servers
//! hang off the storage leaf (so storage traffic crosses the spines), and two jobs that share the
//! pool.

use super::rng::Rng;

/// GPUs per compute node.
pub(crate) const GPUS_PER_NODE: usize = 8;
/// Fabric NICs per compute node (`mlx5_0` … `mlx5_3`, port 1 each).
pub(crate) const NICS_PER_NODE: usize = 4;
/// Fabric NICs per storage server.
const NICS_PER_SERVER: usize = 2;
/// Compute nodes per leaf switch (4 NICs each: ports 1–32 face hosts).
const NODES_PER_LEAF: usize = 8;
/// Uplinks from every leaf to the spines (ports 33–48), spread evenly over the spines.
pub(crate) const UPLINKS_PER_LEAF: usize = 16;
const FIRST_UPLINK_PORT: u32 = 33;
/// The storage pool shared by both jobs.
pub(crate) const POOL: &str = "lustre-a";
/// The job whose slowdown is diagnosed.
pub(crate) const MAIN_JOB: &str = "llm-70b";
/// The second job on the same storage pool (the checkpoint-storm aggressor).
pub(crate) const OTHER_JOB: &str = "vlm-8b";

/// The fabric technology of every NIC and switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fabric {
    /// InfiniBand (NDR, 400 Gb/s per port).
    Infiniband,
    /// RDMA over Converged Ethernet (400 GbE).
    Roce,
}

impl Fabric {
    /// The fabric name used in `topology.json`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Fabric::Infiniband => "infiniband",
            Fabric::Roce => "roce",
        }
    }
}

/// One NIC port of a node or storage server.
#[derive(Debug, Clone)]
pub(crate) struct Nic {
    /// Device name, e.g. `mlx5_2`.
    pub(crate) device: String,
    /// Entity name, e.g. `node-03/mlx5_2:1`.
    pub(crate) entity: String,
    /// Index of the leaf switch it is cabled to.
    pub(crate) switch: usize,
    /// Index into that switch's `ports`.
    pub(crate) switch_port: usize,
}

/// A compute node.
#[derive(Debug, Clone)]
pub(crate) struct Node {
    /// Host name, e.g. `node-03`.
    pub(crate) name: String,
    /// Index of its leaf switch.
    pub(crate) leaf: usize,
    /// Its fabric NICs.
    pub(crate) nics: Vec<Nic>,
    /// Index of the job running on it.
    pub(crate) job: usize,
    /// Global rank of its GPU 0 within that job.
    pub(crate) first_rank: usize,
}

/// A storage server of the pool.
#[derive(Debug, Clone)]
pub(crate) struct Server {
    /// Host name, e.g. `lustre-a-oss1`.
    pub(crate) name: String,
    /// Its fabric NICs.
    pub(crate) nics: Vec<Nic>,
}

/// What is on the other end of a switch port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Peer {
    /// A compute node NIC.
    Node { node: usize, nic: usize },
    /// A storage server NIC.
    Server { server: usize, nic: usize },
    /// Another switch's port.
    Switch { switch: usize, port: usize },
}

/// One cabled switch port.
#[derive(Debug, Clone)]
pub(crate) struct SwitchPort {
    /// Port number on the switch.
    pub(crate) number: u32,
    /// The port number as a label value.
    pub(crate) label: String,
    /// Entity name, e.g. `leaf-2:17`.
    pub(crate) entity: String,
    /// The other end.
    pub(crate) peer: Peer,
    /// For a leaf uplink: its share of the leaf's up traffic (ECMP imbalance); 0 otherwise.
    pub(crate) weight: f64,
}

/// A leaf or spine switch.
#[derive(Debug, Clone)]
pub(crate) struct Switch {
    /// Switch name, e.g. `leaf-2`.
    pub(crate) name: String,
    /// Node GUID as the exporter labels it.
    pub(crate) guid: String,
    /// True for spines.
    pub(crate) spine: bool,
    /// Cabled ports.
    pub(crate) ports: Vec<SwitchPort>,
    /// Whether its data counters are 32-bit (they wrap on busy ports).
    pub(crate) counters_32bit: bool,
}

/// A training job.
#[derive(Debug, Clone)]
pub(crate) struct JobDef {
    /// Job name, e.g. `llm-70b`.
    pub(crate) name: String,
    /// Node indices, in rank order.
    pub(crate) nodes: Vec<usize>,
    /// Start time (reference clock).
    pub(crate) start: i64,
    /// End time (reference clock).
    pub(crate) end: i64,
}

/// The whole simulated cluster.
#[derive(Debug, Clone)]
pub(crate) struct Cluster {
    /// Fabric of every NIC and switch.
    pub(crate) fabric: Fabric,
    /// Compute nodes; host id = index.
    pub(crate) nodes: Vec<Node>,
    /// Storage servers; host id = nodes.len() + index.
    pub(crate) servers: Vec<Server>,
    /// Leaves (compute leaves, then the storage leaf) then spines; host id follows the servers.
    pub(crate) switches: Vec<Switch>,
    /// Jobs: index 0 is the main job, index 1 the other job on the pool.
    pub(crate) jobs: Vec<JobDef>,
    /// Index of the storage leaf in `switches`.
    pub(crate) storage_leaf: usize,
}

impl Cluster {
    /// Builds the cluster: `main_nodes` compute nodes (at least 2) for the main job plus
    /// `max(1, main_nodes / 8)` more for the other job.
    pub(crate) fn build(main_nodes: usize, fabric: Fabric, start: i64, end: i64, rng: &mut Rng) -> Self {
        let n_other = (main_nodes / 8).max(1);
        let n_nodes = main_nodes + n_other;
        let width = n_nodes.to_string().len().max(2);
        let n_leaves = n_nodes.div_ceil(NODES_PER_LEAF);
        let n_servers = (n_nodes / 8).clamp(2, 8);
        let n_spines = if n_leaves < 4 { 2 } else { 4 };
        let mut switches: Vec<Switch> = (0..n_leaves + 1 + n_spines)
            .map(|i| {
                let spine = i > n_leaves;
                let name = if spine { format!("spine-{}", i - n_leaves) } else { format!("leaf-{}", i + 1) };
                let guid = format!("0x98039b0300{:06x}", (rng.next_u64() & 0xff_ffff) as u32);
                Switch { name, guid, spine, ports: Vec::new(), counters_32bit: i == n_leaves }
            })
            .collect();
        let mut nodes = Vec::with_capacity(n_nodes);
        for i in 0..n_nodes {
            let name = format!("node-{:0width$}", i + 1);
            let leaf = i / NODES_PER_LEAF;
            let local = i % NODES_PER_LEAF;
            let nics = (0..NICS_PER_NODE)
                .map(|k| {
                    let number = (local * NICS_PER_NODE + k + 1) as u32;
                    cable(&mut switches[leaf], leaf, number, Peer::Node { node: i, nic: k }, &name, k)
                })
                .collect();
            nodes.push(Node { name, leaf, nics, job: 0, first_rank: 0 });
        }
        let storage_leaf = n_leaves;
        let servers = (0..n_servers)
            .map(|s| {
                let name = format!("{POOL}-oss{}", s + 1);
                let nics = (0..NICS_PER_SERVER)
                    .map(|k| {
                        let number = (s * NICS_PER_SERVER + k + 1) as u32;
                        let peer = Peer::Server { server: s, nic: k };
                        cable(&mut switches[storage_leaf], storage_leaf, number, peer, &name, k)
                    })
                    .collect();
                Server { name, nics }
            })
            .collect();
        for leaf in 0..=n_leaves {
            let weights = ecmp_weights(rng);
            for (u, weight) in weights.into_iter().enumerate() {
                let spine = n_leaves + 1 + u % n_spines;
                let leaf_port = switches[leaf].ports.len();
                let spine_port = switches[spine].ports.len();
                let number = FIRST_UPLINK_PORT + u as u32;
                let spine_number = spine_port as u32 + 1;
                let leaf_entity = format!("{}:{number}", switches[leaf].name);
                let spine_entity = format!("{}:{spine_number}", switches[spine].name);
                switches[leaf].ports.push(SwitchPort {
                    number,
                    label: number.to_string(),
                    entity: leaf_entity,
                    peer: Peer::Switch { switch: spine, port: spine_port },
                    weight,
                });
                switches[spine].ports.push(SwitchPort {
                    number: spine_number,
                    label: spine_number.to_string(),
                    entity: spine_entity,
                    peer: Peer::Switch { switch: leaf, port: leaf_port },
                    weight: 0.0,
                });
            }
        }
        let main: Vec<usize> = (0..n_nodes - n_other).collect();
        let other: Vec<usize> = (n_nodes - n_other..n_nodes).collect();
        for (job, members) in [&main, &other].into_iter().enumerate() {
            for (pos, &n) in members.iter().enumerate() {
                nodes[n].job = job;
                nodes[n].first_rank = pos * GPUS_PER_NODE;
            }
        }
        let job_start = start - 3_600_000_000_000;
        let jobs = vec![
            JobDef { name: MAIN_JOB.to_string(), nodes: main, start: job_start, end },
            JobDef { name: OTHER_JOB.to_string(), nodes: other, start: job_start + 1_200_000_000_000, end },
        ];
        Self { fabric, nodes, servers, switches, jobs, storage_leaf }
    }

    /// Host names in host-id order: nodes, storage servers, switches.
    pub(crate) fn host_names(&self) -> Vec<String> {
        let nodes = self.nodes.iter().map(|n| n.name.clone());
        let servers = self.servers.iter().map(|s| s.name.clone());
        nodes.chain(servers).chain(self.switches.iter().map(|s| s.name.clone())).collect()
    }

    /// Host id of a storage server.
    pub(crate) fn server_host(&self, server: usize) -> usize {
        self.nodes.len() + server
    }

    /// Host id of a switch (its exporter stamps samples with the switch's own clock).
    pub(crate) fn switch_host(&self, switch: usize) -> usize {
        self.nodes.len() + self.servers.len() + switch
    }

    /// Whether switch ports are scraped: only InfiniBand switches have `infiniband_exporter`.
    pub(crate) fn has_switch_metrics(&self) -> bool {
        self.fabric == Fabric::Infiniband
    }
}

/// Cables NIC `k` of `host` to the next port of `switch` and returns the NIC.
fn cable(switch: &mut Switch, switch_idx: usize, number: u32, peer: Peer, host: &str, k: usize) -> Nic {
    let device = format!("mlx5_{k}");
    let entity = format!("{host}/{device}:1");
    switch.ports.push(SwitchPort {
        number,
        label: number.to_string(),
        entity: format!("{}:{number}", switch.name),
        peer,
        weight: 0.0,
    });
    Nic { device, entity, switch: switch_idx, switch_port: switch.ports.len() - 1 }
}

/// Per-uplink shares of a leaf's up traffic: ECMP hashing is never perfectly even.
fn ecmp_weights(rng: &mut Rng) -> Vec<f64> {
    let raw: Vec<f64> = (0..UPLINKS_PER_LEAF).map(|_| (1.0 + 0.15 * rng.normal()).max(0.3)).collect();
    let sum: f64 = raw.iter().sum();
    raw.into_iter().map(|w| w / sum).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fat_tree_is_consistent() {
        let mut rng = Rng::new(1);
        let c = Cluster::build(32, Fabric::Infiniband, 0, 1, &mut rng);
        assert_eq!(c.nodes.len(), 36, "32 nodes of the main job and 4 of the other");
        assert_eq!(c.switches.iter().filter(|s| s.spine).count(), 4);
        assert_eq!(c.storage_leaf, 5);
        assert_eq!(c.jobs[0].nodes.len(), 32);
        assert_eq!(c.jobs[1].nodes.len(), 4);
        for (si, s) in c.switches.iter().enumerate() {
            for (pi, p) in s.ports.iter().enumerate() {
                match p.peer {
                    Peer::Switch { switch, port } => {
                        assert_eq!(c.switches[switch].ports[port].peer, Peer::Switch { switch: si, port: pi });
                    }
                    Peer::Node { node, nic } => assert_eq!(c.nodes[node].nics[nic].switch_port, pi),
                    Peer::Server { server, nic } => {
                        assert_eq!(c.servers[server].nics[nic].switch_port, pi)
                    }
                }
            }
        }
        let uplinks: f64 = c.switches[0].ports.iter().map(|p| p.weight).sum();
        assert!((uplinks - 1.0).abs() < 1e-9);
        assert_eq!(c.nodes[2].nics[2].entity, "node-03/mlx5_2:1");
        let topo = c.topology_json();
        assert_eq!(topo["nodes"][2]["nics"][2]["switch_port"], 11);
        assert_eq!(topo["storage_pools"][0]["servers"].as_array().map(Vec::len), Some(4));
    }
}
