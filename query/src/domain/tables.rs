//! The in-memory domain tables and their schemas.
//!
//! | table | one row per | columns |
//! |---|---|---|
//! | `topology_nodes` | compute node or storage server | node, role (`compute`/`storage`), pool, gpus, nics |
//! | `topology_nics` | host NIC port | node, device, port, entity, fabric, switch, switch_port, switch_port_entity |
//! | `topology_switches` | switch | switch, tier, guid |
//! | `topology_links` | cable (switch–switch deduplicated, and switch–host) | link_kind, a_switch, a_port, a_entity, b_peer, b_port, b_entity |
//! | `storage_pools` | storage server (or pool without servers) | pool, kind, server, nics |
//! | `jobs` | job | job, nodes (list), node_count, gpus, start, end, storage_pool, slurm_job_id |
//! | `metric_catalog` | metric family | family, source, domain, kind, unit, class, meaning, entity_kind, scale, counter_bits, overflow, direction, compare, facts |

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use arrow::array::{
    ArrayRef, Float64Builder, ListBuilder, RecordBatch, StringBuilder, TimestampNanosecondBuilder, UInt8Builder,
    UInt32Builder,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::error::Result;
use lockstep_engine::metrics::MetricCatalog;
use lockstep_engine::metrics::entity::switch_port_name;
use lockstep_engine::topology::{JobIndex, Topology};

fn utf8(name: &str, nullable: bool) -> Field {
    Field::new(name, DataType::Utf8, nullable)
}

fn u32f(name: &str) -> Field {
    Field::new(name, DataType::UInt32, false)
}

/// The timestamp type of job start/end, matching `samples.time`.
pub fn time_type() -> DataType {
    DataType::Timestamp(TimeUnit::Nanosecond, None)
}

fn batch(fields: Vec<Field>, columns: Vec<ArrayRef>) -> Result<RecordBatch> {
    let schema: SchemaRef = Arc::new(Schema::new(fields));
    Ok(RecordBatch::try_new(schema, columns)?)
}

/// `topology_nodes`: compute nodes, then storage servers.
pub fn topology_nodes(t: &Topology) -> Result<RecordBatch> {
    let (mut node, mut role, mut pool) = (StringBuilder::new(), StringBuilder::new(), StringBuilder::new());
    let (mut gpus, mut nics) = (UInt32Builder::new(), UInt32Builder::new());
    for n in &t.nodes {
        node.append_value(&n.name);
        role.append_value("compute");
        pool.append_null();
        gpus.append_value(n.gpus);
        nics.append_value(n.nics.len() as u32);
    }
    for p in &t.storage_pools {
        for s in &p.servers {
            node.append_value(&s.name);
            role.append_value("storage");
            pool.append_value(&p.name);
            gpus.append_value(0);
            nics.append_value(s.nics.len() as u32);
        }
    }
    batch(
        vec![utf8("node", false), utf8("role", false), utf8("pool", true), u32f("gpus"), u32f("nics")],
        vec![
            Arc::new(node.finish()),
            Arc::new(role.finish()),
            Arc::new(pool.finish()),
            Arc::new(gpus.finish()),
            Arc::new(nics.finish()),
        ],
    )
}

/// `topology_nics`: every host NIC port and the switch port it is cabled to.
pub fn topology_nics(t: &Topology) -> Result<RecordBatch> {
    let names = ["node", "device", "port", "entity", "fabric", "switch", "switch_port", "switch_port_entity"];
    let mut cols: Vec<StringBuilder> = names.iter().map(|_| StringBuilder::new()).collect();
    for (host, nics) in t.hosts() {
        for nic in nics {
            let values = [
                host,
                &nic.device,
                &nic.port,
                &nic.entity(host),
                nic.fabric.as_str(),
                &nic.switch,
                &nic.switch_port,
                &nic.switch_port_entity(),
            ];
            for (b, v) in cols.iter_mut().zip(values) {
                b.append_value(v);
            }
        }
    }
    batch(
        names.iter().map(|n| utf8(n, false)).collect(),
        cols.iter_mut().map(|b| Arc::new(b.finish()) as ArrayRef).collect(),
    )
}

/// `topology_switches`.
pub fn topology_switches(t: &Topology) -> Result<RecordBatch> {
    let (mut name, mut tier, mut guid) = (StringBuilder::new(), StringBuilder::new(), StringBuilder::new());
    for s in &t.switches {
        name.append_value(&s.name);
        tier.append_value(&s.tier);
        guid.append_option(s.guid.as_deref());
    }
    batch(
        vec![utf8("switch", false), utf8("tier", false), utf8("guid", true)],
        vec![Arc::new(name.finish()), Arc::new(tier.finish()), Arc::new(guid.finish())],
    )
}

/// `topology_links`: switch–switch cables once each (`link_kind = 'switch'`), then host
/// cables from the NIC entries (`link_kind = 'host'`, `b_*` is the host NIC).
pub fn topology_links(t: &Topology) -> Result<RecordBatch> {
    let names = ["link_kind", "a_switch", "a_port", "a_entity", "b_peer", "b_port", "b_entity"];
    let mut cols: Vec<StringBuilder> = names.iter().map(|_| StringBuilder::new()).collect();
    let switches: HashSet<&str> = t.switches.iter().map(|s| s.name.as_str()).collect();
    let mut seen = BTreeSet::new();
    for s in &t.switches {
        for l in &s.links {
            if !switches.contains(l.peer.as_str()) {
                continue;
            }
            let (a, b) = ((s.name.as_str(), l.port.as_str()), (l.peer.as_str(), l.peer_port.as_str()));
            if !seen.insert(if a <= b { (a, b) } else { (b, a) }) {
                continue;
            }
            let values = ["switch", a.0, a.1, &switch_port_name(a.0, a.1), b.0, b.1, &switch_port_name(b.0, b.1)];
            for (col, v) in cols.iter_mut().zip(values) {
                col.append_value(v);
            }
        }
    }
    for (host, nics) in t.hosts() {
        for nic in nics {
            let port = format!("{}:{}", nic.device, nic.port);
            let values =
                ["host", &nic.switch, &nic.switch_port, &nic.switch_port_entity(), host, &port, &nic.entity(host)];
            for (col, v) in cols.iter_mut().zip(values) {
                col.append_value(v);
            }
        }
    }
    batch(
        names.iter().map(|n| utf8(n, false)).collect(),
        cols.iter_mut().map(|b| Arc::new(b.finish()) as ArrayRef).collect(),
    )
}

/// `storage_pools`: one row per server (a pool without servers has one row, server NULL).
pub fn storage_pools(t: &Topology) -> Result<RecordBatch> {
    let (mut pool, mut kind, mut server) = (StringBuilder::new(), StringBuilder::new(), StringBuilder::new());
    let mut nics = UInt32Builder::new();
    for p in &t.storage_pools {
        if p.servers.is_empty() {
            pool.append_value(&p.name);
            kind.append_value(&p.kind);
            server.append_null();
            nics.append_value(0);
        }
        for s in &p.servers {
            pool.append_value(&p.name);
            kind.append_value(&p.kind);
            server.append_value(&s.name);
            nics.append_value(s.nics.len() as u32);
        }
    }
    batch(
        vec![utf8("pool", false), utf8("kind", false), utf8("server", true), u32f("nics")],
        vec![Arc::new(pool.finish()), Arc::new(kind.finish()), Arc::new(server.finish()), Arc::new(nics.finish())],
    )
}

/// `jobs`, with the GPU count from the topology.
pub fn jobs(index: &JobIndex) -> Result<RecordBatch> {
    let (mut job, mut pool, mut slurm) = (StringBuilder::new(), StringBuilder::new(), StringBuilder::new());
    let mut nodes = ListBuilder::new(StringBuilder::new()).with_field(Arc::new(utf8("item", false)));
    let (mut node_count, mut gpus) = (UInt32Builder::new(), UInt32Builder::new());
    let (mut start, mut end) = (TimestampNanosecondBuilder::new(), TimestampNanosecondBuilder::new());
    for j in index.jobs() {
        job.append_value(&j.job);
        let mut distinct = HashSet::new();
        for n in &j.nodes {
            nodes.values().append_value(n);
            distinct.insert(n.as_str());
        }
        nodes.append(true);
        node_count.append_value(distinct.len() as u32);
        gpus.append_value(index.gpus(&j.job).unwrap_or(0));
        start.append_value(j.start);
        end.append_option(j.end);
        pool.append_option(j.storage_pool.as_deref());
        slurm.append_option(j.slurm_job_id.as_deref());
    }
    let list_type = DataType::List(Arc::new(utf8("item", false)));
    batch(
        vec![
            utf8("job", false),
            Field::new("nodes", list_type, false),
            u32f("node_count"),
            u32f("gpus"),
            Field::new("start", time_type(), false),
            Field::new("end", time_type(), true),
            utf8("storage_pool", true),
            utf8("slurm_job_id", true),
        ],
        vec![
            Arc::new(job.finish()),
            Arc::new(nodes.finish()),
            Arc::new(node_count.finish()),
            Arc::new(gpus.finish()),
            Arc::new(start.finish()),
            Arc::new(end.finish()),
            Arc::new(pool.finish()),
            Arc::new(slurm.finish()),
        ],
    )
}

/// `metric_catalog`: one row per family, in name order.
pub fn metric_catalog(c: &MetricCatalog) -> Result<RecordBatch> {
    let text = ["family", "source", "domain", "kind", "unit", "class", "meaning", "entity_kind"];
    let mut cols: Vec<StringBuilder> = text.iter().map(|_| StringBuilder::new()).collect();
    let mut scale = Float64Builder::new();
    let mut bits = UInt8Builder::new();
    let (mut overflow, mut direction) = (StringBuilder::new(), StringBuilder::new());
    let (mut compare, mut facts) = (StringBuilder::new(), StringBuilder::new());
    for i in c.iter() {
        let values = [
            i.family.as_str(),
            &i.source,
            i.domain.as_str(),
            i.kind.as_str(),
            &i.unit,
            i.class.as_str(),
            &i.meaning,
            i.entity_kind.as_str(),
        ];
        for (col, v) in cols.iter_mut().zip(values) {
            col.append_value(v);
        }
        scale.append_value(i.scale);
        bits.append_option(i.counter_bits());
        overflow.append_option(i.counter_width.map(|w| w.overflow.as_str()));
        direction.append_option(i.direction.map(|d| d.as_str()));
        compare.append_value(i.compare.as_str());
        if i.facts.is_empty() {
            facts.append_null();
        } else {
            facts.append_value(&i.facts);
        }
    }
    let mut fields: Vec<Field> = text.iter().map(|n| utf8(n, false)).collect();
    fields.extend([
        Field::new("scale", DataType::Float64, false),
        Field::new("counter_bits", DataType::UInt8, true),
        utf8("overflow", true),
        utf8("direction", true),
        utf8("compare", false),
        utf8("facts", true),
    ]);
    let mut columns: Vec<ArrayRef> = cols.iter_mut().map(|b| Arc::new(b.finish()) as ArrayRef).collect();
    columns.extend([
        Arc::new(scale.finish()) as ArrayRef,
        Arc::new(bits.finish()),
        Arc::new(overflow.finish()),
        Arc::new(direction.finish()),
        Arc::new(compare.finish()),
        Arc::new(facts.finish()),
    ]);
    batch(fields, columns)
}
