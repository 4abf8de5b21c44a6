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

/// `DELETE /api/v1/jobs/{job}`, and with a retention the jobs that ended before it leave the list
/// at the next registration, end or removal (a `PUT` stores its list as given).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_are_deleted_and_expire_with_the_retention() {
    let dir = tempfile::tempdir().unwrap();
    let day = 86_400_000_000_000_i64;
    let config = StoreConfig { retention_ns: Some(30 * day), ..StoreConfig::default() };
    let store = Arc::new(Store::open(dir.path(), config).unwrap());
    let (addr, stop, task) = start(store.clone()).await;
    let write = format!("Bearer {TOKEN}");
    let w = [("Authorization", write.as_str()), ("Content-Type", "application/json")];
    let names = |store: &Store| {
        let mut names: Vec<String> = parse_jobs(&store.read_document("jobs.json").unwrap().unwrap())
            .unwrap()
            .into_iter()
            .map(|j| j.job)
            .collect();
        names.sort();
        names
    };
    let now = store.now_ns();
    // Kept by a PUT as given: one ended 40 days ago, one 20 days ago, one running for 90 days.
    let list = serde_json::json!([
        {"job": "ended-40d", "nodes": ["n1"], "start": now - 41 * day, "end": now - 40 * day},
        {"job": "ended-20d", "nodes": ["n1"], "start": now - 21 * day, "end": now - 20 * day},
        {"job": "running", "nodes": ["n2"], "start": now - 90 * day},
    ]);
    let a = request(&addr, "PUT", "/api/v1/jobs", &w, list.to_string().as_bytes()).await;
    assert_eq!(a.code, 200, "{}", String::from_utf8_lossy(&a.body));
    assert_eq!(names(&store), ["ended-20d", "ended-40d", "running"]);

    // The next registration drops the job that ended before the retention (and a partition).
    let a = post(&addr, "/api/v1/jobs", &w, br#"{"job": "new", "nodes": ["n1"]}"#).await;
    assert_eq!(a.code, 200, "{}", String::from_utf8_lossy(&a.body));
    assert_eq!(json(&a.body)["expired"], 1);
    assert_eq!(names(&store), ["ended-20d", "new", "running"]);
    let a = post(&addr, "/api/v1/jobs/new/end", &w, b"").await;
    assert_eq!((a.code, json(&a.body).get("expired").is_none()), (200, true));
    // A job that ends before it starts is refused, also when both times are before the
    // retention (QA pass 20: it was registered and dropped at once as expired, with a 200).
    let versions = store.document_versions("jobs.json").unwrap();
    let old = format!(r#"{{"job": "bad", "nodes": ["n1"], "start": {}, "end": {}}}"#, now - 50 * day, now - 60 * day);
    let a = post(&addr, "/api/v1/jobs", &w, old.as_bytes()).await;
    let body = String::from_utf8_lossy(&a.body);
    assert!(a.code == 400 && body.contains("ends before it starts"), "{} {body}", a.code);
    assert_eq!(store.document_versions("jobs.json").unwrap(), versions, "nothing written");

    // DELETE removes one job (its name %-encoded); an unknown job is 404 and writes nothing.
    let a = post(&addr, "/api/v1/jobs", &w, br#"{"job": "a b", "nodes": ["n2"]}"#).await;
    assert_eq!(a.code, 200);
    let a = request(&addr, "DELETE", "/api/v1/jobs/a%20b", &w, b"").await;
    assert_eq!((a.code, &json(&a.body)["deleted"]), (200, &serde_json::json!(true)));
    assert_eq!(names(&store), ["ended-20d", "new", "running"]);
    let versions = store.document_versions("jobs.json").unwrap();
    assert_eq!(request(&addr, "DELETE", "/api/v1/jobs/a%20b", &w, b"").await.code, 404);
    assert_eq!(request(&addr, "DELETE", "/api/v1/jobs/", &w, b"").await.code, 404);
    assert_eq!(store.document_versions("jobs.json").unwrap(), versions);
    let read = format!("Bearer {READ_TOKEN}");
    assert_eq!(request(&addr, "DELETE", "/api/v1/jobs/new", &[("Authorization", read.as_str())], b"").await.code, 403);
    // The version before the expiry still holds every job.
    let old = store.read_document_version("jobs.json", 1).unwrap().unwrap();
    assert_eq!(parse_jobs(&old).unwrap().len(), 3);

    let _ = stop.send(());
    task.await.unwrap();
}
