//! What a job depends on ([`job_entities`]) and which jobs an entity touches ([`JobIndex`]).
//!
//! A job's entities: the job itself; each node and its GPUs; every NIC port of its nodes
//! that is on one of its routes (node↔node by rail, node↔storage pool) and the switch port
//! it is cabled to; every switch port on the shortest paths between the leaves of those
//! routes; its storage pool, the pool's servers, their NIC ports on the routes and the
//! switch ports only storage traffic crosses. A single-node job without a storage pool has
//! no NIC or switch ports: its GPUs talk over NVLink.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use crate::error::{Error, Result};
use crate::metrics::entity::switch_port_name;
use crate::metrics::{Domain, EntityKind};
use crate::topology::{Job, Node, PathFinder, Topology, rail_pairs};

/// One entity a job depends on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobEntity {
    /// Entity name.
    pub entity: String,
    /// Entity kind.
    pub kind: EntityKind,
    /// The host it belongs to (nodes, GPUs, NIC ports); `None` for switch ports, pools, jobs.
    pub node: Option<String>,
    /// Why the job depends on it: `training` (the job), `compute` (nodes, GPUs), `network`
    /// (NIC and switch ports between its nodes), `storage` (pool, servers, storage-only ports).
    pub domain: Domain,
}

/// Lists every entity `job` depends on (see the module docs), in a stable order: job, nodes
/// with their GPUs, network NIC ports, network switch ports, then storage.
pub fn job_entities(finder: &mut PathFinder<'_>, job: &Job) -> Result<Vec<JobEntity>> {
    let mut nodes: Vec<&Node> = Vec::with_capacity(job.nodes.len());
    let mut seen_nodes = HashSet::new();
    for name in &job.nodes {
        let node = finder.node(name).ok_or_else(|| Error::NotInTopology { what: "node", name: name.clone() })?;
        if seen_nodes.insert(name.as_str()) {
            nodes.push(node);
        }
    }
    let mut out = Entities::default();
    out.push(&job.job, EntityKind::Job, None, Domain::Training);
    for node in &nodes {
        out.push(&node.name, EntityKind::Node, Some(&node.name), Domain::Compute);
        for gpu in node.gpu_entities() {
            out.push(&gpu, EntityKind::Gpu, Some(&node.name), Domain::Compute);
        }
    }

    // Node ↔ node, rail by rail: which NICs talk and which leaf pairs they span.
    let mut used: HashSet<(usize, usize)> = HashSet::new();
    let mut leaf_pairs: BTreeSet<(usize, usize)> = BTreeSet::new();
    let mut rails: HashMap<(usize, usize), Vec<(usize, usize)>> = HashMap::new();
    for a in 0..nodes.len() {
        for b in a + 1..nodes.len() {
            let (na, nb) = (&nodes[a].nics, &nodes[b].nics);
            let pairs = rails.entry((na.len(), nb.len())).or_insert_with(|| rail_pairs(na.len(), nb.len()));
            for &(i, j) in pairs.iter() {
                if let Some((s, t)) = finder.attachments(&na[i], &nb[j]) {
                    used.insert((a, i));
                    used.insert((b, j));
                    if s != t {
                        leaf_pairs.insert((s.min(t), s.max(t)));
                    }
                }
            }
        }
    }

    // Node ↔ storage pool servers, every NIC pair on a shared fabric.
    let pool = match &job.storage_pool {
        Some(name) => Some(
            finder
                .topology()
                .pool(name)
                .ok_or_else(|| Error::NotInTopology { what: "storage pool", name: name.clone() })?,
        ),
        None => None,
    };
    let mut used_server: BTreeSet<(usize, usize)> = BTreeSet::new();
    let mut storage_pairs: BTreeSet<(usize, usize)> = BTreeSet::new();
    if let Some(pool) = pool {
        for (a, node) in nodes.iter().enumerate() {
            for (i, nic) in node.nics.iter().enumerate() {
                for (k, server) in pool.servers.iter().enumerate() {
                    for (j, snic) in server.nics.iter().enumerate() {
                        if let Some((s, t)) = finder.attachments(nic, snic) {
                            used.insert((a, i));
                            used_server.insert((k, j));
                            if s != t {
                                storage_pairs.insert((s.min(t), s.max(t)));
                            }
                        }
                    }
                }
            }
        }
    }

    let mut network_ports: BTreeSet<String> = BTreeSet::new();
    for (a, node) in nodes.iter().enumerate() {
        for (i, nic) in node.nics.iter().enumerate() {
            if used.contains(&(a, i)) {
                out.push(&nic.entity(&node.name), EntityKind::NicPort, Some(&node.name), Domain::Network);
                network_ports.insert(nic.switch_port_entity());
            }
        }
    }
    for &(s, t) in &leaf_pairs {
        finder.for_each_path_port(s, t, |_, switch, port| {
            network_ports.insert(switch_port_name(switch, port));
        });
    }
    for port in &network_ports {
        out.push(port, EntityKind::SwitchPort, None, Domain::Network);
    }

    if let Some(pool) = pool {
        out.push(&pool.name, EntityKind::StoragePool, None, Domain::Storage);
        for server in &pool.servers {
            out.push(&server.name, EntityKind::Node, Some(&server.name), Domain::Storage);
        }
        let mut storage_ports: BTreeSet<String> = BTreeSet::new();
        for &(k, j) in &used_server {
            let server = &pool.servers[k];
            let nic = &server.nics[j];
            out.push(&nic.entity(&server.name), EntityKind::NicPort, Some(&server.name), Domain::Storage);
            storage_ports.insert(nic.switch_port_entity());
        }
        for &(s, t) in &storage_pairs {
            finder.for_each_path_port(s, t, |_, switch, port| {
                storage_ports.insert(switch_port_name(switch, port));
            });
        }
        for port in &storage_ports {
            out.push(port, EntityKind::SwitchPort, None, Domain::Storage);
        }
    }
    Ok(out.list)
}

/// An ordered, duplicate-free entity list (first domain wins).
#[derive(Default)]
struct Entities {
    list: Vec<JobEntity>,
    seen: HashSet<String>,
}

impl Entities {
    fn push(&mut self, entity: &str, kind: EntityKind, node: Option<&str>, domain: Domain) {
        if self.seen.insert(entity.to_owned()) {
            self.list.push(JobEntity { entity: entity.to_owned(), kind, node: node.map(str::to_owned), domain });
        }
    }
}

/// A job an entity belongs to, with the job's size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EntityJob<'a> {
    /// The job.
    pub job: &'a Job,
    /// GPUs of the job (sum over its distinct nodes).
    pub gpus: u32,
    /// Nodes of the job (distinct).
    pub nodes: usize,
    /// How the entity relates to the job (for a switch name: its first port on the job's paths).
    pub relation: &'a JobEntity,
}

/// Entities of every job and the reverse mapping from entity to jobs.
#[derive(Debug, Clone)]
pub struct JobIndex {
    jobs: Vec<Job>,
    gpus: Vec<u32>,
    node_counts: Vec<usize>,
    entities: Vec<Vec<JobEntity>>,
    by_job: HashMap<String, usize>,
    by_entity: BTreeMap<String, Vec<(u32, u32)>>,
}

impl JobIndex {
    /// Computes the entities of every job. Fails on a job naming an unknown node or pool.
    pub fn build(topology: &Topology, jobs: &[Job]) -> Result<JobIndex> {
        let mut finder = PathFinder::new(topology);
        let mut index = JobIndex {
            jobs: jobs.to_vec(),
            gpus: Vec::with_capacity(jobs.len()),
            node_counts: Vec::with_capacity(jobs.len()),
            entities: Vec::with_capacity(jobs.len()),
            by_job: HashMap::with_capacity(jobs.len()),
            by_entity: BTreeMap::new(),
        };
        for (j, job) in jobs.iter().enumerate() {
            let entities = job_entities(&mut finder, job)?;
            let nodes: Vec<&JobEntity> =
                entities.iter().filter(|e| e.kind == EntityKind::Node && e.domain == Domain::Compute).collect();
            let gpus = nodes.iter().filter_map(|e| finder.node(&e.entity)).map(|n| n.gpus).sum();
            index.node_counts.push(nodes.len());
            index.gpus.push(gpus);
            for (k, e) in entities.iter().enumerate() {
                index.by_entity.entry(e.entity.clone()).or_default().push((j as u32, k as u32));
            }
            index.entities.push(entities);
            index.by_job.insert(job.job.clone(), j);
        }
        Ok(index)
    }

    /// All jobs, in input order.
    pub fn jobs(&self) -> &[Job] {
        &self.jobs
    }

    /// A job by name.
    pub fn job(&self, name: &str) -> Option<&Job> {
        self.by_job.get(name).map(|&j| &self.jobs[j])
    }

    /// GPU count of a job.
    pub fn gpus(&self, name: &str) -> Option<u32> {
        self.by_job.get(name).map(|&j| self.gpus[j])
    }

    /// The entities a job depends on (see [`job_entities`]).
    pub fn entities(&self, name: &str) -> Option<&[JobEntity]> {
        self.by_job.get(name).map(|&j| self.entities[j].as_slice())
    }

    /// The jobs whose entities include `entity`, ordered by start time then name. A switch
    /// name (no port) matches all of its ports; each job appears once.
    pub fn jobs_touching(&self, entity: &str) -> Vec<EntityJob<'_>> {
        let mut refs: Vec<(u32, u32)> = match self.by_entity.get(entity) {
            Some(refs) => refs.clone(),
            None => {
                let prefix = format!("{entity}:");
                self.by_entity
                    .range(prefix.clone()..)
                    .take_while(|(k, _)| k.starts_with(&prefix))
                    .flat_map(|(_, refs)| refs.iter().copied())
                    .collect()
            }
        };
        let mut seen = HashSet::new();
        refs.retain(|(j, _)| seen.insert(*j));
        let mut out: Vec<EntityJob<'_>> = refs
            .into_iter()
            .map(|(j, k)| {
                let (j, k) = (j as usize, k as usize);
                EntityJob {
                    job: &self.jobs[j],
                    gpus: self.gpus[j],
                    nodes: self.node_counts[j],
                    relation: &self.entities[j][k],
                }
            })
            .collect();
        out.sort_by(|a, b| (a.job.start, &a.job.job).cmp(&(b.job.start, &b.job.job)));
        out
    }
}
