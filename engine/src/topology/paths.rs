//! Fabric paths: host port → leaf → (spines …) → leaf → host port.
//!
//! Rules (also in `docs/topology.md`):
//! - Two NIC ports can talk when they share a fabric (InfiniBand or RoCE) and their switches
//!   are connected in the switch graph.
//! - Between two compute nodes, NICs are paired by rail: NIC `i` of one node with NIC
//!   `i mod n` of the other (both ways), as NCCL does on rail-optimised fabrics.
//! - Between a node and a storage pool, every NIC of the node is paired with every NIC of
//!   every server of the pool on the same fabric.
//! - ECMP and adaptive routing are not knowable from counters, so a route includes **every**
//!   shortest path between the two leaves: all spines (and higher tiers) on some shortest
//!   path, and both ends of every link used. A port error anywhere on these is "on the path".

use std::collections::{BTreeSet, HashMap, VecDeque};

use crate::error::{Error, Result};
use crate::metrics::EntityKind;
use crate::metrics::entity::switch_port_name;
use crate::topology::{Nic, Node, Topology};

const UNREACHABLE: u32 = u32::MAX;

/// One route between two NIC ports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// Source NIC port entity.
    pub src: String,
    /// Destination NIC port entity.
    pub dst: String,
    /// Hops ordered by level: 0 source NIC, 1 its leaf port, …, last the destination NIC.
    pub hops: Vec<Hop>,
}

/// One entity on a route.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Hop {
    /// Distance from the source in ports (entities of equal level are parallel ECMP choices).
    pub level: u32,
    /// Entity name (`node-03/mlx5_0:1` or `leaf-2:17`).
    pub entity: String,
    /// [`EntityKind::NicPort`] or [`EntityKind::SwitchPort`].
    pub kind: EntityKind,
}

/// A link endpoint seen from one switch.
#[derive(Debug, Clone, Copy)]
struct Edge<'t> {
    to: usize,
    port: &'t str,
    peer_port: &'t str,
}

/// Path computation over a topology, caching breadth-first distances per switch.
#[derive(Debug)]
pub struct PathFinder<'t> {
    topology: &'t Topology,
    switch_index: HashMap<&'t str, usize>,
    names: Vec<&'t str>,
    adjacency: Vec<Vec<Edge<'t>>>,
    hosts: HashMap<&'t str, &'t [Nic]>,
    nodes: HashMap<&'t str, &'t Node>,
    distances: Vec<Option<Vec<u32>>>,
}

/// Rail pairing of NIC indices between hosts with `a` and `b` NICs: `(i, i mod b)` and
/// `(j mod a, j)`, sorted and deduplicated.
pub fn rail_pairs(a: usize, b: usize) -> Vec<(usize, usize)> {
    if a == 0 || b == 0 {
        return Vec::new();
    }
    let pairs: BTreeSet<(usize, usize)> = (0..a).map(|i| (i, i % b)).chain((0..b).map(|j| (j % a, j))).collect();
    pairs.into_iter().collect()
}

impl<'t> PathFinder<'t> {
    /// Indexes a validated topology (see [`Topology::validate`]).
    pub fn new(topology: &'t Topology) -> Self {
        let names: Vec<&str> = topology.switches.iter().map(|s| s.name.as_str()).collect();
        let switch_index: HashMap<&str, usize> = names.iter().enumerate().map(|(i, n)| (*n, i)).collect();
        let mut adjacency: Vec<Vec<Edge<'t>>> = vec![Vec::new(); names.len()];
        let mut seen = BTreeSet::new();
        for (i, s) in topology.switches.iter().enumerate() {
            for link in &s.links {
                let Some(&j) = switch_index.get(link.peer.as_str()) else {
                    continue;
                };
                let a = (i, link.port.as_str());
                let b = (j, link.peer_port.as_str());
                if !seen.insert(if a <= b { (a, b) } else { (b, a) }) {
                    continue;
                }
                adjacency[i].push(Edge { to: j, port: &link.port, peer_port: &link.peer_port });
                adjacency[j].push(Edge { to: i, port: &link.peer_port, peer_port: &link.port });
            }
        }
        let distances = vec![None; names.len()];
        let hosts = topology.hosts().collect();
        let nodes = topology.nodes.iter().map(|n| (n.name.as_str(), n)).collect();
        PathFinder { topology, switch_index, names, adjacency, hosts, nodes, distances }
    }

    /// The topology this finder indexes.
    pub fn topology(&self) -> &'t Topology {
        self.topology
    }

    /// A compute node by name.
    pub fn node(&self, name: &str) -> Option<&'t Node> {
        self.nodes.get(name).copied()
    }

    /// NICs of a compute node or storage server.
    pub fn host_nics(&self, host: &str) -> Option<&'t [Nic]> {
        self.hosts.get(host).copied()
    }

    /// Routes between two compute nodes (rail-paired NICs; unreachable pairs are skipped,
    /// a node with itself has none).
    pub fn node_routes(&mut self, a: &str, b: &str) -> Result<Vec<Route>> {
        let nics_a = self.known_node(a)?;
        let nics_b = self.known_node(b)?;
        if a == b {
            return Ok(Vec::new());
        }
        let pairs = rail_pairs(nics_a.len(), nics_b.len());
        Ok(pairs.into_iter().filter_map(|(i, j)| self.route(a, &nics_a[i], b, &nics_b[j])).collect())
    }

    /// Routes between a compute node and every server of a storage pool.
    pub fn pool_routes(&mut self, node: &str, pool: &str) -> Result<Vec<Route>> {
        let nics = self.known_node(node)?;
        let topology = self.topology;
        let pool =
            topology.pool(pool).ok_or_else(|| Error::NotInTopology { what: "storage pool", name: pool.to_owned() })?;
        let mut routes = Vec::new();
        for server in &pool.servers {
            for a in nics {
                for b in &server.nics {
                    routes.extend(self.route(node, a, &server.name, b));
                }
            }
        }
        Ok(routes)
    }

    /// The route between two NIC ports, or `None` when they are on different fabrics or
    /// their switches are not connected.
    pub fn route(&mut self, host_a: &str, a: &Nic, host_b: &str, b: &Nic) -> Option<Route> {
        let (s, t) = self.attachments(a, b)?;
        let mut hops = vec![
            Hop { level: 0, entity: a.entity(host_a), kind: EntityKind::NicPort },
            Hop { level: 1, entity: a.switch_port_entity(), kind: EntityKind::SwitchPort },
        ];
        let depth = self.distance(s, t)?;
        self.for_each_path_port(s, t, |level, switch, port| {
            hops.push(Hop { level: 2 + level, entity: switch_port_name(switch, port), kind: EntityKind::SwitchPort });
        });
        hops.push(Hop { level: 2 + 2 * depth, entity: b.switch_port_entity(), kind: EntityKind::SwitchPort });
        hops.push(Hop { level: 3 + 2 * depth, entity: b.entity(host_b), kind: EntityKind::NicPort });
        hops.sort();
        hops.dedup();
        Some(Route { src: a.entity(host_a), dst: b.entity(host_b), hops })
    }

    /// The switches two NICs hang off, when the NICs can talk (same fabric, connected).
    pub(crate) fn attachments(&mut self, a: &Nic, b: &Nic) -> Option<(usize, usize)> {
        if a.fabric != b.fabric {
            return None;
        }
        let s = *self.switch_index.get(a.switch.as_str())?;
        let t = *self.switch_index.get(b.switch.as_str())?;
        self.distance(s, t).map(|_| (s, t))
    }

    /// Hop count between two switches, `None` if not connected.
    pub(crate) fn distance(&mut self, s: usize, t: usize) -> Option<u32> {
        let d = self.bfs(s).get(t).copied()?;
        (d != UNREACHABLE).then_some(d)
    }

    /// Calls `f(level, switch, port)` for both ends of every link on some shortest path from
    /// switch `s` to switch `t`; `level` counts ports from the first uplink (0, 1, 2, …).
    pub(crate) fn for_each_path_port(&mut self, s: usize, t: usize, mut f: impl FnMut(u32, &'t str, &'t str)) {
        self.bfs(s);
        self.bfs(t);
        let (Some(Some(ds)), Some(Some(dt))) = (self.distances.get(s), self.distances.get(t)) else {
            return;
        };
        let Some(&depth) = ds.get(t) else { return };
        if depth == UNREACHABLE {
            return;
        }
        for (u, edges) in self.adjacency.iter().enumerate() {
            let (du, tu) = (ds[u], dt[u]);
            if du == UNREACHABLE || tu == UNREACHABLE || du + tu != depth {
                continue;
            }
            for e in edges {
                if ds[e.to] == du + 1 && dt[e.to] + 1 == tu {
                    f(2 * du, self.names[u], e.port);
                    f(2 * du + 1, self.names[e.to], e.peer_port);
                }
            }
        }
    }

    fn bfs(&mut self, s: usize) -> &[u32] {
        if s >= self.distances.len() {
            return &[];
        }
        if self.distances[s].is_none() {
            let mut dist = vec![UNREACHABLE; self.names.len()];
            let mut queue = VecDeque::from([s]);
            dist[s] = 0;
            while let Some(u) = queue.pop_front() {
                for e in &self.adjacency[u] {
                    if dist[e.to] == UNREACHABLE {
                        dist[e.to] = dist[u] + 1;
                        queue.push_back(e.to);
                    }
                }
            }
            self.distances[s] = Some(dist);
        }
        self.distances[s].as_deref().unwrap_or(&[])
    }

    fn known_node(&self, name: &str) -> Result<&'t [Nic]> {
        self.node(name)
            .map(|n| n.nics.as_slice())
            .ok_or_else(|| Error::NotInTopology { what: "node", name: name.to_owned() })
    }
}
