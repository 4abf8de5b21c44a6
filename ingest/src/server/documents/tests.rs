//! The job and topology routes through a real server: register, end, replace, versions,
//! checks against the topology, roles.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use lockstep_engine::topology::parse_jobs;
use lockstep_engine::{Store, StoreConfig};

use crate::server::http::testing::{READ_TOKEN, TOKEN, post, request, start};

const TOPOLOGY: &str = r#"{"nodes": [{"name": "n1", "gpus": 8}, {"name": "n2", "gpus": 8}],
    "storage_pools": [{"name": "lustre-a"}]}"#;

fn json(body: &[u8]) -> serde_json::Value {
    serde_json::from_slice(body).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(body)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_and_topology_are_registered_versioned_and_checked() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), StoreConfig::default()).unwrap());
    let (addr, stop, task) = start(store.clone()).await;
    let write = format!("Bearer {TOKEN}");
    let read = format!("Bearer {READ_TOKEN}");
    let w = [("Authorization", write.as_str()), ("Content-Type", "application/json")];
    let r = [("Authorization", read.as_str())];

    // Nothing yet.
    assert_eq!(request(&addr, "GET", "/api/v1/jobs", &r, b"").await.code, 404);
    // Role checks: no token 401, a read token may not change anything (403).
    assert_eq!(request(&addr, "PUT", "/api/v1/topology", &[], TOPOLOGY.as_bytes()).await.code, 401);
    assert_eq!(request(&addr, "PUT", "/api/v1/topology", &r, TOPOLOGY.as_bytes()).await.code, 403);

    let a = request(&addr, "PUT", "/api/v1/topology", &w, TOPOLOGY.as_bytes()).await;
    assert_eq!(a.code, 200, "{}", String::from_utf8_lossy(&a.body));
    assert_eq!(json(&a.body)["version"], 1);
    let a = request(&addr, "GET", "/api/v1/topology", &r, b"").await;
    assert_eq!((a.code, a.body.as_slice()), (200, TOPOLOGY.as_bytes()));
    assert!(a.head.contains("lockstep-document-version: 1"), "{}", a.head);

    // A Slurm prolog: start defaults to now; an RFC 3339 start is taken as given.
    let before = store.now_ns();
    let a =
        post(&addr, "/api/v1/jobs", &w, br#"{"job": "4242", "nodes": ["n1", "n2"], "storage_pool": "lustre-a"}"#).await;
    assert_eq!(a.code, 200, "{}", String::from_utf8_lossy(&a.body));
    let start_ns = json(&a.body)["start"].as_i64().unwrap();
    assert!(start_ns >= before && start_ns <= store.now_ns());
    let a = post(&addr, "/api/v1/jobs", &w, br#"{"job": "old run", "nodes": ["n2"], "start": "2026-01-01T00:00:00Z"}"#)
        .await;
    assert_eq!(a.code, 200);
    // Unknown node or pool: refused with the reason, nothing written.
    let a = post(&addr, "/api/v1/jobs", &w, br#"{"job": "x", "nodes": ["n9"]}"#).await;
    assert_eq!(a.code, 400);
    assert!(String::from_utf8_lossy(&a.body).contains("unknown node n9"));
    let a = post(&addr, "/api/v1/jobs", &w, br#"{"job": "x", "nodes": []}"#).await;
    assert_eq!(a.code, 400);
    assert!(String::from_utf8_lossy(&a.body).contains("has no nodes"));
    let a = post(&addr, "/api/v1/jobs", &w, br#"{"job": "x", "nodes": ["n1"], "start": "yesterday"}"#).await;
    assert_eq!(a.code, 400);
    assert!(String::from_utf8_lossy(&a.body).contains("RFC 3339"), "{}", String::from_utf8_lossy(&a.body));

    // The epilog: end now; a job name with a space travels %-encoded.
    let a = post(&addr, "/api/v1/jobs/4242/end", &w, b"").await;
    assert_eq!(a.code, 200, "{}", String::from_utf8_lossy(&a.body));
    let a = post(&addr, "/api/v1/jobs/old%20run/end", &w, br#"{"end": "2026-01-01T01:00:00Z"}"#).await;
    assert_eq!(a.code, 200, "{}", String::from_utf8_lossy(&a.body));
    assert_eq!(post(&addr, "/api/v1/jobs/nope/end", &w, b"").await.code, 404);
    let a = post(&addr, "/api/v1/jobs/4242/end", &w, br#"{"end": "2020-01-01T00:00:00Z"}"#).await;
    assert_eq!(a.code, 400, "an end before the start is refused");

    let a = request(&addr, "GET", "/api/v1/jobs", &r, b"").await;
    assert_eq!(a.code, 200);
    assert!(a.head.contains("lockstep-document-version: 4"), "{}", a.head);
    let jobs = parse_jobs(std::str::from_utf8(&a.body).unwrap()).unwrap();
    assert_eq!(jobs.len(), 2);
    let j = jobs.iter().find(|j| j.job == "4242").unwrap();
    assert_eq!((j.start, j.storage_pool.as_deref()), (start_ns, Some("lustre-a")));
    assert!(j.end.is_some_and(|e| e >= start_ns));
    let old = jobs.iter().find(|j| j.job == "old run").unwrap();
    assert_eq!(old.end.unwrap() - old.start, 3_600_000_000_000);
    // Older versions stay readable.
    let a = request(&addr, "GET", "/api/v1/jobs?version=1", &r, b"").await;
    assert_eq!(parse_jobs(std::str::from_utf8(&a.body).unwrap()).unwrap().len(), 1);
    assert_eq!(request(&addr, "GET", "/api/v1/jobs?version=99", &r, b"").await.code, 404);

    // A topology that drops a job's node is refused; the stored one stays.
    let a = request(&addr, "PUT", "/api/v1/topology", &w, br#"{"nodes": [{"name": "n1"}]}"#).await;
    assert_eq!(a.code, 400);
    assert!(String::from_utf8_lossy(&a.body).contains("n2"), "{}", String::from_utf8_lossy(&a.body));
    assert_eq!(store.read_document("topology.json").unwrap().as_deref(), Some(TOPOLOGY));
    assert_eq!(request(&addr, "DELETE", "/api/v1/jobs", &w, b"").await.code, 405);

    let _ = stop.send(());
    task.await.unwrap();
}
