//! Tests of topology validation, paths, job entities and the reverse mapping.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::ErrorKind;
use crate::metrics::{Domain, EntityKind};

/// Two leaves for compute (n1, n2 on leaf-1; n3, n4 on leaf-2), a storage leaf (leaf-3),
/// two spines linked to all three leaves, a spine-3 linked only to leaf-1 (never on a
/// shortest path), and a RoCE node on its own switch.
const TOPOLOGY: &str = r#"{
  "nodes": [
    {"name": "n1", "gpus": 8, "nics": [
      {"device": "mlx5_0", "port": 1, "fabric": "infiniband", "switch": "leaf-1", "switch_port": 1},
      {"device": "mlx5_1", "port": 1, "fabric": "infiniband", "switch": "leaf-1", "switch_port": 2}]},
    {"name": "n2", "gpus": 8, "nics": [
      {"device": "mlx5_0", "port": 1, "fabric": "infiniband", "switch": "leaf-1", "switch_port": 3},
      {"device": "mlx5_1", "port": 1, "fabric": "infiniband", "switch": "leaf-1", "switch_port": 4}]},
    {"name": "n3", "gpus": 8, "nics": [
      {"device": "mlx5_0", "port": "1", "fabric": "infiniband", "switch": "leaf-2", "switch_port": "1"},
      {"device": "mlx5_1", "port": "1", "fabric": "infiniband", "switch": "leaf-2", "switch_port": "2"}]},
    {"name": "n4", "gpus": 8, "nics": [
      {"device": "mlx5_0", "port": 1, "fabric": "infiniband", "switch": "leaf-2", "switch_port": 3},
      {"device": "mlx5_1", "port": 1, "fabric": "infiniband", "switch": "leaf-2", "switch_port": 4}]},
    {"name": "r1", "gpus": 4, "nics": [
      {"device": "mlx5_0", "port": 1, "fabric": "roce", "switch": "tor-r", "switch_port": 1}]}
  ],
  "switches": [
    {"name": "leaf-1", "tier": "leaf", "links": [
      {"port": 31, "peer": "spine-1", "peer_port": 1},
      {"port": 32, "peer": "spine-2", "peer_port": 1},
      {"port": 33, "peer": "spine-3", "peer_port": 1},
      {"port": 1, "peer": "n1", "peer_port": "mlx5_0:1"}]},
    {"name": "leaf-2", "tier": "leaf", "links": [
      {"port": 31, "peer": "spine-1", "peer_port": 2},
      {"port": 32, "peer": "spine-2", "peer_port": 2}]},
    {"name": "leaf-3", "tier": "leaf", "links": [
      {"port": 31, "peer": "spine-1", "peer_port": 3},
      {"port": 32, "peer": "spine-2", "peer_port": 3}]},
    {"name": "spine-1", "tier": "spine", "guid": "0xABC", "links": [
      {"port": 1, "peer": "leaf-1", "peer_port": 31}]},
    {"name": "spine-2", "tier": 2, "links": []},
    {"name": "spine-3", "tier": "spine", "links": []},
    {"name": "tor-r", "tier": "leaf", "links": []}
  ],
  "storage_pools": [
    {"name": "lustre-a", "kind": "lustre", "servers": [
      {"name": "oss-1", "nics": [
        {"device": "mlx5_0", "port": 1, "fabric": "infiniband", "switch": "leaf-3", "switch_port": 1}]}]}
  ]
}"#;

const JOBS: &str = r#"[
  {"job": "llm-70b", "nodes": ["n1", "n2", "n3", "n4"], "start": "2024-03-01T00:00:00Z",
   "end": null, "storage_pool": "lustre-a"},
  {"job": "small", "nodes": ["n1", "n2"], "start": 10, "end": 20},
  {"job": "solo", "nodes": ["n4"], "start": 5}
]"#;

pub(crate) fn fixture() -> (Topology, Vec<Job>) {
    let topology = Topology::from_json(TOPOLOGY).unwrap();
    let jobs = parse_jobs(JOBS).unwrap();
    check_jobs(&topology, &jobs).unwrap();
    (topology, jobs)
}

fn entities_of(index: &JobIndex, job: &str, kind: EntityKind) -> Vec<String> {
    index.entities(job).unwrap().iter().filter(|e| e.kind == kind).map(|e| e.entity.clone()).collect()
}

#[test]
fn parses_labels_given_as_numbers_or_strings() {
    let (t, _) = fixture();
    let n3 = t.node("n3").unwrap();
    assert_eq!(n3.nics[0].entity("n3"), "n3/mlx5_0:1");
    assert_eq!(t.node("n1").unwrap().nics[1].switch_port_entity(), "leaf-1:2");
    assert_eq!(t.switch("spine-2").unwrap().tier, "2");
    assert_eq!(t.switch_guids().get("0xabc").map(String::as_str), Some("spine-1"));
    assert_eq!(t.node("n1").unwrap().gpu_entities().last().unwrap(), "n1/gpu7");
}

#[test]
fn route_across_leaves_includes_every_shortest_spine() {
    let (t, _) = fixture();
    let mut f = PathFinder::new(&t);
    let routes = f.node_routes("n1", "n3").unwrap();
    assert_eq!(routes.len(), 2, "rail 0 and rail 1");
    let hops: Vec<(u32, &str)> = routes[0].hops.iter().map(|h| (h.level, h.entity.as_str())).collect();
    assert_eq!(
        hops,
        vec![
            (0, "n1/mlx5_0:1"),
            (1, "leaf-1:1"),
            (2, "leaf-1:31"),
            (2, "leaf-1:32"),
            (3, "spine-1:1"),
            (3, "spine-2:1"),
            (4, "spine-1:2"),
            (4, "spine-2:2"),
            (5, "leaf-2:31"),
            (5, "leaf-2:32"),
            (6, "leaf-2:1"),
            (7, "n3/mlx5_0:1"),
        ]
    );
    assert_eq!((routes[1].src.as_str(), routes[1].dst.as_str()), ("n1/mlx5_1:1", "n3/mlx5_1:1"));
}

#[test]
fn route_within_a_leaf_and_unreachable_pairs() {
    let (t, _) = fixture();
    let mut f = PathFinder::new(&t);
    let routes = f.node_routes("n1", "n2").unwrap();
    let hops: Vec<&str> = routes[0].hops.iter().map(|h| h.entity.as_str()).collect();
    assert_eq!(hops, vec!["n1/mlx5_0:1", "leaf-1:1", "leaf-1:3", "n2/mlx5_0:1"]);
    assert!(f.node_routes("n1", "r1").unwrap().is_empty(), "InfiniBand and RoCE do not meet");
    assert!(f.node_routes("n1", "n1").unwrap().is_empty());
    let err = f.node_routes("n1", "nope").unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
}

#[test]
fn route_to_storage_pool() {
    let (t, _) = fixture();
    let mut f = PathFinder::new(&t);
    let routes = f.pool_routes("n3", "lustre-a").unwrap();
    assert_eq!(routes.len(), 2, "both NICs of n3 reach oss-1");
    let last = routes[0].hops.last().unwrap();
    assert_eq!((last.entity.as_str(), last.level), ("oss-1/mlx5_0:1", 7));
    assert!(routes[0].hops.iter().any(|h| h.entity == "leaf-3:31"));
    assert!(f.pool_routes("n3", "nope").is_err());
}

#[test]
fn rail_pairing() {
    assert_eq!(rail_pairs(2, 2), vec![(0, 0), (1, 1)]);
    assert_eq!(rail_pairs(2, 1), vec![(0, 0), (1, 0)]);
    assert_eq!(rail_pairs(3, 2), vec![(0, 0), (1, 1), (2, 0)]);
    assert!(rail_pairs(0, 4).is_empty());
}

#[test]
fn job_entities_cover_gpus_nics_paths_and_storage() {
    let (t, jobs) = fixture();
    let index = JobIndex::build(&t, &jobs).unwrap();
    let all = index.entities("llm-70b").unwrap();
    assert_eq!(all[0].entity, "llm-70b");
    assert_eq!(all[0].domain, Domain::Training);
    assert_eq!(index.gpus("llm-70b"), Some(32));
    assert_eq!(entities_of(&index, "llm-70b", EntityKind::Gpu).len(), 32);
    assert_eq!(entities_of(&index, "llm-70b", EntityKind::NicPort).len(), 9, "8 + oss-1");
    let ports = entities_of(&index, "llm-70b", EntityKind::SwitchPort);
    for p in ["leaf-1:1", "leaf-1:31", "leaf-1:32", "spine-1:1", "spine-2:2", "leaf-2:4", "leaf-3:1", "spine-1:3"] {
        assert!(ports.contains(&p.to_owned()), "{p} missing from {ports:?}");
    }
    assert!(!ports.iter().any(|p| p.starts_with("spine-3") || p == "leaf-1:33"), "{ports:?}");
    let get = |name: &str| all.iter().find(|e| e.entity == name).unwrap();
    assert_eq!(get("spine-1:1").domain, Domain::Network);
    assert_eq!(get("leaf-3:1").domain, Domain::Storage);
    assert_eq!(get("spine-1:3").domain, Domain::Storage);
    assert_eq!(get("lustre-a").kind, EntityKind::StoragePool);
    assert_eq!((get("oss-1").kind, get("oss-1").domain), (EntityKind::Node, Domain::Storage));
    assert_eq!(get("n2/gpu7").node.as_deref(), Some("n2"));
    assert_eq!(get("leaf-2:1").node, None);

    // Same leaf: host ports only.
    let small = entities_of(&index, "small", EntityKind::SwitchPort);
    assert_eq!(small, vec!["leaf-1:1", "leaf-1:2", "leaf-1:3", "leaf-1:4"]);
    // One node, no pool: no fabric entities at all.
    assert!(entities_of(&index, "solo", EntityKind::NicPort).is_empty());
    assert!(entities_of(&index, "solo", EntityKind::SwitchPort).is_empty());
    assert_eq!(entities_of(&index, "solo", EntityKind::Gpu).len(), 8);
}

#[test]
fn reverse_mapping_from_entity_to_jobs() {
    let (t, jobs) = fixture();
    let index = JobIndex::build(&t, &jobs).unwrap();
    let names = |e: &str| -> Vec<String> { index.jobs_touching(e).iter().map(|j| j.job.job.clone()).collect() };
    assert_eq!(names("spine-2:1"), vec!["llm-70b"]);
    // Ordered by start: small (10) before llm-70b (2024).
    assert_eq!(names("leaf-1:3"), vec!["small", "llm-70b"]);
    assert_eq!(names("n4/gpu3"), vec!["solo", "llm-70b"]);
    assert_eq!(names("leaf-1"), vec!["small", "llm-70b"], "switch name matches its ports");
    assert_eq!(names("lustre-a"), vec!["llm-70b"]);
    assert!(names("spine-3:1").is_empty());
    assert!(names("n4/mlx5_0:1") == vec!["llm-70b"], "solo does not use its NICs");
    let hit = &index.jobs_touching("spine-1:2")[0];
    assert_eq!((hit.gpus, hit.nodes, hit.relation.domain), (32, 4, Domain::Network));
}

/// A rail-optimised fat tree: `leaves` leaves with `per_leaf` nodes of 8 GPUs and `rails`
/// NICs (NIC i of every node on leaf port i + rails × slot), every leaf linked to every spine.
fn fat_tree(leaves: usize, per_leaf: usize, spines: usize, rails: usize) -> Topology {
    let mut t = Topology::default();
    for l in 0..leaves {
        let links = (0..spines)
            .map(|s| Link { port: format!("{}", 100 + s), peer: format!("spine-{s}"), peer_port: format!("{l}") })
            .collect();
        t.switches.push(Switch { name: format!("leaf-{l}"), tier: "leaf".into(), guid: None, links });
        for slot in 0..per_leaf {
            let name = format!("node-{:02}", l * per_leaf + slot);
            let nics = (0..rails)
                .map(|r| Nic {
                    device: format!("mlx5_{r}"),
                    port: "1".into(),
                    fabric: Fabric::Infiniband,
                    switch: format!("leaf-{l}"),
                    switch_port: format!("{}", r + rails * slot),
                })
                .collect();
            t.nodes.push(Node { name, gpus: 8, nics });
        }
    }
    for s in 0..spines {
        t.switches.push(Switch { name: format!("spine-{s}"), tier: "spine".into(), guid: None, links: vec![] });
    }
    t.validate().unwrap();
    t
}

#[test]
fn a_port_error_on_a_spine_is_on_the_path_of_a_256_gpu_job() {
    let t = fat_tree(4, 8, 2, 8);
    let big = Job {
        job: "llm-70b".into(),
        nodes: t.nodes.iter().map(|n| n.name.clone()).collect(),
        start: 0,
        end: None,
        storage_pool: None,
        slurm_job_id: None,
    };
    let leaf_only =
        Job { job: "leaf0".into(), nodes: vec!["node-00".into(), "node-01".into()], start: 1, ..big.clone() };
    let index = JobIndex::build(&t, &[big, leaf_only]).unwrap();
    assert_eq!(index.gpus("llm-70b"), Some(256));
    let ports = entities_of(&index, "llm-70b", EntityKind::SwitchPort);
    // 32 nodes × 8 rails host ports + 4 leaves × 2 spines × 2 ends.
    assert_eq!(ports.len(), 256 + 16);
    let hits = index.jobs_touching("spine-1:3");
    assert_eq!(hits.len(), 1);
    assert_eq!((hits[0].job.job.as_str(), hits[0].gpus), ("llm-70b", 256));
    let hits = index.jobs_touching("leaf-0:9");
    assert_eq!(hits.iter().map(|h| h.gpus).collect::<Vec<_>>(), vec![256, 16]);
}

#[test]
fn validation_names_the_problem() {
    let cases = [
        (
            r#"{"nodes":[{"name":"a","nics":[{"device":"d","port":1,"fabric":"infiniband","switch":"x","switch_port":1}]}]}"#,
            "unknown switch x",
        ),
        (r#"{"nodes":[{"name":"a"},{"name":"a"}]}"#, "host a is declared twice"),
        (
            r#"{"switches":[{"name":"s","links":[{"port":1,"peer":"t","peer_port":1}]},{"name":"t","links":[{"port":1,"peer":"u","peer_port":2}]},{"name":"u"}]}"#,
            "t:1 is cabled to both",
        ),
        (r#"{"switches":[{"name":"s","links":[{"port":1,"peer":"s","peer_port":2}]}]}"#, "links to itself"),
        (r#"{"switches":[{"name":"s","links":[{"port":1,"peer":"zz","peer_port":2}]}]}"#, "unknown peer zz"),
        (
            r#"{"nodes":[{"name":"a"}],"switches":[{"name":"s","links":[{"port":1,"peer":"a","peer_port":1}]}]}"#,
            "no NIC of a is cabled there",
        ),
        (r#"{"nodes":[{"name":"a/b"}]}"#, "contains '/'"),
        (
            r#"{"nodes":[{"name":"a","nics":[{"device":"d","port":1,"fabric":"ethernet","switch":"s","switch_port":1}]}]}"#,
            "line 1",
        ),
        ("{\n\"nodes\": 3}", "line 2"),
        // A misspelt field anywhere is named, not dropped (a node would lose its NICs, the
        // cluster its pools).
        (r#"{"nodes":[{"name":"a","nic":[]}]}"#, "unknown field `nic`"),
        (r#"{"storage_pool":[{"name":"p"}]}"#, "unknown field `storage_pool`"),
        (
            r#"{"nodes":[{"name":"a","nics":[{"device":"d","port":1,"fabric":"roce","switch":"s","switchport":1}]}]}"#,
            "unknown field `switchport`",
        ),
        (r#"{"switches":[{"name":"s","link":[]}]}"#, "unknown field `link`"),
        (r#"{"storage_pools":[{"name":"p","servers":[{"name":"x","nic":[]}]}]}"#, "unknown field `nic`"),
    ];
    for (json, needle) in cases {
        let err = Topology::from_json(json).unwrap_err();
        assert!(matches!(err, Error::TopologyInvalid { .. }), "{json}: {err}");
        assert!(err.to_string().contains(needle), "{err} lacks {needle:?}");
    }
    let (t, _) = fixture();
    let bad = parse_jobs(r#"[{"job":"j","nodes":["n1","ghost"],"start":0}]"#).unwrap();
    assert!(check_jobs(&t, &bad).unwrap_err().to_string().contains("unknown node ghost"));
    assert_eq!(JobIndex::build(&t, &bad).unwrap_err().kind(), ErrorKind::NotFound);
}
