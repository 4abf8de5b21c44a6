//! The job's context: its entities (from the topology and jobs files in the store directory),
//! the window, and which series of the store belong to it.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use lockstep_engine::metrics::{Domain, EntityKind, MetricInfo};
use lockstep_engine::topology::{Job, JobIndex, Topology, parse_jobs};
use lockstep_engine::{SeriesKey, Store};

use super::{DiagnoseError, DiagnoseOptions};

/// Metrics never analysed (markers, not measurements).
const SKIPPED_METRICS: [&str; 1] = ["collective_end"];

/// Labels that name the entity or the replica of a series (including the identity labels of
/// dcgm-exporter, Kubernetes and launchers); every other label (mode, quantile, job,
/// collective, ...) makes a different peer group.
const ENTITY_LABELS: [&str; 20] = [
    "host",
    "gpu",
    "device",
    "port",
    "switch",
    "guid",
    "rank",
    "cpu",
    "local_rank",
    "UUID",
    "gpu_uuid",
    "uuid",
    "gpu_device_id",
    "pci_bus_id",
    "Hostname",
    "instance",
    "pod",
    "container",
    "namespace",
    "modelName",
];

/// One series tied to the job.
#[derive(Debug, Clone)]
pub(crate) struct SeriesMeta {
    /// Series id in the store.
    pub id: u32,
    /// Its key.
    pub key: Arc<SeriesKey>,
    /// The host whose clock stamped it.
    pub host: String,
    /// Entity name.
    pub entity: String,
    /// Entity kind.
    pub kind: EntityKind,
    /// The metric's domain (catalog).
    pub domain: Domain,
    /// How the entity relates to the job (job_entities domain), e.g. storage for a switch port
    /// only storage traffic crosses.
    pub relation: Domain,
    /// Catalog description (None: unknown metric, analysed as a gauge).
    pub info: Option<MetricInfo>,
    /// Peer group: the same metric (and non-entity labels) on other entities.
    pub group: String,
}

impl SeriesMeta {
    /// The metric name.
    pub fn metric(&self) -> &str {
        &self.key.metric
    }

    /// A label value.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.key.labels.get(name).map(lockstep_engine::model::Name::as_str)
    }

    /// Whether the series is a counter.
    pub fn is_counter(&self) -> bool {
        self.info.as_ref().is_some_and(|i| i.kind == lockstep_engine::metrics::MetricKind::Counter)
    }

    /// Whether the series counts discrete events (errors, flaps, drops, retransmits): a counter
    /// whose rate is a count of events per interval, so its noise is a count's.
    pub fn counts_events(&self) -> bool {
        use lockstep_engine::metrics::MetricClass;
        self.is_counter()
            && self.info.as_ref().is_some_and(|i| {
                matches!(
                    i.class,
                    MetricClass::PhysicalErrors
                        | MetricClass::LinkFlaps
                        | MetricClass::Drops
                        | MetricClass::LossRetransmit
                )
            })
    }
}

/// Everything about the job the analysis needs.
#[derive(Debug)]
pub(crate) struct JobContext {
    /// The job.
    pub job: Job,
    /// Window start (reference ns).
    pub from: i64,
    /// Window end (reference ns, exclusive).
    pub to: i64,
    /// The job's series.
    pub series: Vec<SeriesMeta>,
    /// The job's storage pool.
    pub pool: Option<String>,
    /// Switch port entity → the host NIC port cabled to it (`leaf-1:22` → `node-06/mlx5_1:1`),
    /// from the topology: the two ends of one host link.
    pub host_links: HashMap<String, String>,
    /// Both ends of every link, in both directions: host links (NIC port ↔ switch port) and
    /// switch-to-switch links (`leaf-1:31` ↔ `spine-1:4`).
    pub links: HashMap<String, String>,
    /// Entities of every job (for the other jobs sharing a pool or a link).
    pub index: JobIndex,
    /// The store has no `topology.json`: nodes and GPUs come from jobs.json and the GPU labels,
    /// the fabric is unknown.
    pub no_topology: bool,
}

impl JobContext {
    /// Loads the topology and jobs from the store directory and selects the job's series.
    pub fn load(store: &Store, job: &str, opts: &DiagnoseOptions) -> Result<JobContext, DiagnoseError> {
        let dir = store.dir();
        let read = |file: &'static str| match store.read_document(file)? {
            Some(text) => Ok(text),
            None => Err(DiagnoseError::NoDomainModel { dir: dir.display().to_string(), file }),
        };
        let jobs = parse_jobs(&read("jobs.json")?)?;
        // Without a topology the job's nodes, GPUs and pools are still known (from jobs.json
        // and the GPU labels); the fabric paths are not (reported as missing).
        let (topology, no_topology) = match store.read_document("topology.json")? {
            Some(text) => (Topology::from_json(&text)?, false),
            None => (bare_topology(store, &jobs)?, true),
        };
        let Some(found) = jobs.iter().find(|j| j.job == job).cloned() else {
            return Err(DiagnoseError::UnknownJob {
                job: job.to_string(),
                known: jobs.iter().map(|j| j.job.as_str()).collect::<Vec<_>>().join(", "),
            });
        };
        let index = JobIndex::build(&topology, &jobs)?;
        let from = opts.from.unwrap_or(found.start);
        let to = opts.to.or(found.end).unwrap_or_else(|| store.now_ns());
        if to <= from {
            return Err(DiagnoseError::EmptyWindow { from, to });
        }
        let mut relation: HashMap<&str, (EntityKind, Domain)> = HashMap::new();
        for e in index.entities(job).unwrap_or(&[]) {
            relation.insert(e.entity.as_str(), (e.kind, e.domain));
        }
        let nodes: HashSet<&str> = found.nodes.iter().map(String::as_str).collect();
        // A `job` or `slurm_job_id` label names another job only when it is one of the known
        // jobs: Prometheus sets `job` to the scrape job (`dcgm-exporter`, `node`), and
        // jobs.json may not know the scheduler's id.
        let mut others: HashSet<&str> = HashSet::new();
        for j in jobs.iter().filter(|j| j.job != found.job) {
            others.insert(j.job.as_str());
            if let Some(id) = &j.slurm_job_id {
                others.insert(id.as_str());
            }
        }
        let ours = |v: &str| v == found.job || found.slurm_job_id.as_deref() == Some(v);
        let mut catalog = crate::catalog::store_catalog(store)?;
        catalog.set_switch_guids(topology.switch_guids());
        let slurm = found.slurm_job_id.clone().unwrap_or_else(|| found.job.clone());
        let series = store.with_catalog(|c| {
            let mut out = Vec::new();
            for (id, key) in c.live() {
                if SKIPPED_METRICS.contains(&key.metric.as_str()) {
                    continue;
                }
                let Some(host) = key.host() else { continue };
                let info = catalog.classify(key).map(|c| c.info.clone());
                let Some(entity) = catalog.entity(key) else { continue };
                // Per-rank application and NCCL series of another job on shared nodes are not ours.
                let other_job =
                    key.labels.get("slurm_job_id").is_some_and(|j| *j != slurm && others.contains(j.as_str()))
                        || (entity.kind != EntityKind::StoragePool
                            && key
                                .labels
                                .get("job")
                                .is_some_and(|j| !ours(j) && others.contains(j.as_str()) && nodes.contains(host)));
                if other_job {
                    continue;
                }
                let Some(&(_, rel)) = relation.get(entity.name.as_str()) else { continue };
                let domain = info.as_ref().map_or(rel, |i| i.domain);
                let group = group_key(key, rel);
                out.push(SeriesMeta {
                    id,
                    host: host.to_string(),
                    entity: entity.name,
                    kind: entity.kind,
                    domain,
                    relation: rel,
                    info,
                    group,
                    key: Arc::clone(key),
                });
            }
            out
        })?;
        let host_links = topology
            .hosts()
            .flat_map(|(host, nics)| {
                nics.iter().map(move |n| {
                    (format!("{}:{}", n.switch, n.switch_port), format!("{host}/{}:{}", n.device, n.port))
                })
            })
            .collect();
        let links = link_ends(&topology);
        Ok(JobContext {
            pool: found.storage_pool.clone(),
            job: found,
            from,
            to,
            series,
            host_links,
            links,
            index,
            no_topology,
        })
    }
}

impl JobContext {
    /// The other jobs whose entities include `entity` (a pool, a port, a node) and that ran
    /// during `[from, to)`, by start time.
    pub fn jobs_sharing(&self, entity: &str, from: i64, to: i64) -> Vec<String> {
        let mut out: Vec<String> = self
            .index
            .jobs_touching(entity)
            .into_iter()
            .filter(|j| j.job.job != self.job.job && j.job.overlaps(from, to))
            .map(|j| j.job.job.clone())
            .collect();
        out.dedup();
        out
    }
}

/// Both ends of every link of the topology, in both directions.
fn link_ends(topology: &Topology) -> HashMap<String, String> {
    use lockstep_engine::metrics::entity::switch_port_name;
    let mut out = HashMap::new();
    for (host, nics) in topology.hosts() {
        for n in nics {
            let (a, b) = (n.entity(host), n.switch_port_entity());
            out.insert(b.clone(), a.clone());
            out.insert(a, b);
        }
    }
    let switches: HashSet<&str> = topology.switches.iter().map(|s| s.name.as_str()).collect();
    for s in &topology.switches {
        for l in s.links.iter().filter(|l| switches.contains(l.peer.as_str())) {
            let (a, b) = (switch_port_name(&s.name, &l.port), switch_port_name(&l.peer, &l.peer_port));
            out.insert(b.clone(), a.clone());
            out.insert(a, b);
        }
    }
    out
}

/// The peer-group key: metric, the relation domain and every non-entity label.
fn group_key(key: &SeriesKey, relation: Domain) -> String {
    let mut g = format!("{}|{}", key.metric, relation.as_str());
    for (k, v) in &key.labels {
        if !ENTITY_LABELS.contains(&k.as_str()) {
            g.push('|');
            g.push_str(k);
            g.push('=');
            g.push_str(v);
        }
    }
    g
}

/// A topology without fabric: the jobs' nodes (GPU count from the highest `gpu` label of each
/// host) and their storage pools.
fn bare_topology(store: &Store, jobs: &[Job]) -> Result<Topology, DiagnoseError> {
    use lockstep_engine::topology::{Node, StoragePool};
    let hosts: HashSet<&str> = jobs.iter().flat_map(|j| j.nodes.iter().map(String::as_str)).collect();
    let gpus: HashMap<String, u32> = store.with_catalog(|c| {
        let mut out: HashMap<String, u32> = HashMap::new();
        for (_, key) in c.live() {
            let (Some(host), Some(g)) = (key.host(), key.labels.get("gpu")) else { continue };
            let digits = g.trim_start_matches("GPU").trim_start_matches("gpu");
            if let (true, Ok(i)) = (hosts.contains(host), digits.parse::<u32>()) {
                let n = out.entry(host.to_string()).or_insert(0);
                *n = (*n).max(i + 1);
            }
        }
        out
    })?;
    let mut nodes: Vec<Node> = hosts
        .iter()
        .map(|h| Node { name: h.to_string(), gpus: gpus.get(*h).copied().unwrap_or(0), nics: Vec::new() })
        .collect();
    nodes.sort_by(|a, b| a.name.cmp(&b.name));
    let mut pools: Vec<String> = jobs.iter().filter_map(|j| j.storage_pool.clone()).collect();
    pools.sort();
    pools.dedup();
    let storage_pools =
        pools.into_iter().map(|name| StoragePool { name, kind: String::new(), servers: Vec::new() }).collect();
    Ok(Topology { nodes, switches: Vec::new(), storage_pools })
}
