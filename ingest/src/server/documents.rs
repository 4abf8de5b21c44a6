//! Jobs and topology over HTTP, so that the systems that know them (a Slurm prolog/epilog, a
//! Kubernetes controller, an inventory export) can keep a running server up to date:
//!
//! | request | role | effect |
//! |---|---|---|
//! | `GET /api/v1/topology[?version=N]` | read | the current (or a stored) `topology.json` |
//! | `PUT /api/v1/topology` | write | replaces the topology (checked, and checked against the jobs) |
//! | `GET /api/v1/jobs[?version=N]` | read | the current (or a stored) `jobs.json` |
//! | `PUT /api/v1/jobs` | write | replaces the whole job list |
//! | `POST /api/v1/jobs` | write | registers one job (`start` defaults to now); same name replaces it |
//! | `POST /api/v1/jobs/{job}/end` | write | ends a job (`{"end": …}` or now) |
//! | `DELETE /api/v1/jobs/{job}` | write | removes a job from the list |
//!
//! With a retention (`--retention`), registering, ending or removing a job also drops the jobs
//! that ended more than the retention and one time partition ago ([`expire_jobs`]): their
//! samples are gone, and a list of every job ever registered would be rewritten whole at each
//! change. A `PUT` stores the list exactly as given.
//!
//! Every change writes a new version of the document ([`lockstep_engine::Store::write_document`])
//! and answers `{"version": N}`; reads carry the version in the `Lockstep-Document-Version`
//! header. Times are integer ns or RFC 3339 strings, as in the files. Documents are checked
//! exactly as `lockstep import` checks them: a bad one changes nothing and is answered 400
//! with the reason.

use hyper::body::{Bytes, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use lockstep_engine::Store;
use lockstep_engine::topology::{Job, Topology, check_jobs, parse_jobs};
use tonic::Status;

use super::auth::Role;
use super::http::{Body, Encodings, HttpApi, http_status, read_body, text};

/// The topology document's path.
pub const TOPOLOGY_PATH: &str = "/api/v1/topology";
/// The job list's path (and prefix of `/api/v1/jobs/{job}/end`).
pub const JOBS_PATH: &str = "/api/v1/jobs";
/// The response header naming a document's version.
pub const VERSION_HEADER: &str = "lockstep-document-version";

const TOPOLOGY_DOC: &str = "topology.json";
const JOBS_DOC: &str = "jobs.json";
/// Largest document accepted (a 10,000-node topology is a few MB).
const MAX_DOCUMENT_BYTES: usize = 64 << 20;

/// Serialises read-modify-write changes of the job list.
#[derive(Default)]
pub(crate) struct Documents {
    lock: tokio::sync::Mutex<()>,
}

/// Whether `path` is one of this module's routes.
pub(crate) fn handles(path: &str) -> bool {
    path == TOPOLOGY_PATH || path == JOBS_PATH || path.starts_with("/api/v1/jobs/")
}

/// Handles a document request; never fails (errors are responses).
pub(crate) async fn handle(api: &HttpApi, request: Request<Incoming>) -> Response<Body> {
    let retry = api.shared.limits.retry_after_ms;
    match route(api, request).await {
        Ok(r) => r,
        // Here a missing job or version is the resource of the URL: 404 (the write path maps
        // NOT_FOUND to 400 because there it means an unknown series id in the body).
        Err(status) if status.code() == tonic::Code::NotFound => text(StatusCode::NOT_FOUND, status.message()),
        Err(status) => http_status(&status, retry),
    }
}

async fn route(api: &HttpApi, request: Request<Incoming>) -> Result<Response<Body>, Status> {
    let (parts, body) = request.into_parts();
    let path = parts.uri.path().to_string();
    let read = parts.method == Method::GET || parts.method == Method::HEAD;
    let role = if read { Role::Read } else { Role::Write };
    api.authorize(&parts.headers, role, &format!("{} {path}", parts.method))?;
    let store = api.shared.store.clone();
    let doc = if path == TOPOLOGY_PATH { TOPOLOGY_DOC } else { JOBS_DOC };
    if read {
        if path != TOPOLOGY_PATH && path != JOBS_PATH {
            return Err(Status::not_found(format!("GET {path}: read {JOBS_PATH} or {TOPOLOGY_PATH}")));
        }
        let version = query_version(parts.uri.query())?;
        return blocking(move || get(&store, doc, version)).await;
    }
    let (bytes, _held) =
        read_body(&parts.headers, body, MAX_DOCUMENT_BYTES, Encodings::IdentityOrGzip, api.bodies.as_ref()).await?;
    let body = String::from_utf8(bytes.to_vec()).map_err(|_| Status::invalid_argument("body is not UTF-8"))?;
    let _guard = api.documents.lock.lock().await;
    let job_name = |suffix: &str| {
        path.strip_prefix("/api/v1/jobs/")
            .and_then(|rest| rest.strip_suffix(suffix))
            .filter(|job| !job.is_empty() && !job.contains('/'))
    };
    let change = match (parts.method.clone(), path.as_str()) {
        (Method::PUT, TOPOLOGY_PATH) => Change::Topology(body),
        (Method::PUT, JOBS_PATH) => Change::Jobs(body),
        (Method::POST, JOBS_PATH) => Change::Register(body),
        (Method::POST, p) => match job_name("/end") {
            Some(job) => Change::End(percent_decode(job)?, body),
            None => return Err(Status::not_found(format!("POST {p}: use POST {JOBS_PATH}/{{job}}/end"))),
        },
        (Method::DELETE, p) if p.starts_with("/api/v1/jobs/") => match job_name("") {
            Some(job) => Change::Delete(percent_decode(job)?),
            None => return Err(Status::not_found(format!("DELETE {p}: use DELETE {JOBS_PATH}/{{job}}"))),
        },
        (m, p) => {
            return Ok(text(
                StatusCode::METHOD_NOT_ALLOWED,
                format!(
                    "{m} {p} is not supported: GET or PUT {TOPOLOGY_PATH}; GET, PUT or POST {JOBS_PATH}; \
                     POST {JOBS_PATH}/{{job}}/end; DELETE {JOBS_PATH}/{{job}}"
                ),
            ));
        }
    };
    blocking(move || apply(&store, change)).await
}

/// Runs store I/O off the async workers.
async fn blocking(
    f: impl FnOnce() -> Result<Response<Body>, Status> + Send + 'static,
) -> Result<Response<Body>, Status> {
    tokio::task::spawn_blocking(f).await.map_err(|e| Status::internal(format!("document task failed: {e}")))?
}

fn query_version(query: Option<&str>) -> Result<Option<u64>, Status> {
    let Some(query) = query else { return Ok(None) };
    for pair in query.split('&') {
        if let Some(v) = pair.strip_prefix("version=") {
            return v.parse().map(Some).map_err(|_| Status::invalid_argument(format!("version={v} is not a number")));
        }
    }
    Ok(None)
}

/// Decodes `%XX` escapes in a job name taken from the path.
fn percent_decode(s: &str) -> Result<String, Status> {
    let bad = || Status::invalid_argument(format!("job name {s:?} has a malformed %-escape"));
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3).ok_or_else(bad)?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| bad())?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| bad())
}

fn json_response(code: StatusCode, body: String, version: Option<u64>) -> Response<Body> {
    let mut r = Response::new(Body::new(Bytes::from(body)));
    *r.status_mut() = code;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Some(v) = version {
        r.headers_mut().insert(VERSION_HEADER, HeaderValue::from(v));
    }
    r
}

fn engine(e: lockstep_engine::Error) -> Status {
    super::status::engine_status(&e, 1000)
}

fn get(store: &Store, doc: &'static str, version: Option<u64>) -> Result<Response<Body>, Status> {
    let (text, version) = match version {
        Some(v) => (store.read_document_version(doc, v).map_err(engine)?, Some(v)),
        None => {
            (store.read_document(doc).map_err(engine)?, store.document_versions(doc).map_err(engine)?.last().copied())
        }
    };
    match text {
        Some(text) => Ok(json_response(StatusCode::OK, text, version)),
        None => Err(Status::not_found(match version {
            Some(v) => format!("{doc} has no version {v}"),
            None => format!("the store has no {doc} yet"),
        })),
    }
}

/// A change to a document, checked before anything is written.
enum Change {
    Topology(String),
    Jobs(String),
    Register(String),
    End(String, String),
    Delete(String),
}

fn invalid(e: impl std::fmt::Display) -> Status {
    Status::invalid_argument(e.to_string())
}

fn current_jobs(store: &Store) -> Result<Vec<Job>, Status> {
    match store.read_document(JOBS_DOC).map_err(engine)? {
        Some(text) => parse_jobs(&text).map_err(|e| Status::internal(format!("stored jobs.json is invalid: {e}"))),
        None => Ok(Vec::new()),
    }
}

fn current_topology(store: &Store) -> Result<Option<Topology>, Status> {
    store
        .read_document(TOPOLOGY_DOC)
        .map_err(engine)?
        .map(|t| Topology::from_json(&t).map_err(|e| Status::internal(format!("stored topology.json is invalid: {e}"))))
        .transpose()
}

/// Parses a job object, filling `default_time` in for a missing (or null) `field`.
fn job_with_default(value: &mut serde_json::Value, field: &str, default_time: i64) -> Result<(), Status> {
    let object = value.as_object_mut().ok_or_else(|| invalid("body must be a JSON object"))?;
    if object.get(field).is_none_or(serde_json::Value::is_null) {
        object.insert(field.to_string(), serde_json::Value::from(default_time));
    }
    Ok(())
}

fn apply(store: &Store, change: Change) -> Result<Response<Body>, Status> {
    let now = store.now_ns();
    let (doc, text, summary) = match change {
        Change::Topology(text) => {
            let topology = Topology::from_json(&text).map_err(invalid)?;
            check_jobs(&topology, &current_jobs(store)?).map_err(|e| {
                Status::invalid_argument(format!("{e} (the new topology must still hold every job's nodes)"))
            })?;
            (TOPOLOGY_DOC, text, serde_json::json!({ "nodes": topology.nodes.len() }))
        }
        Change::Jobs(text) => {
            let jobs = parse_jobs(&text).map_err(invalid)?;
            check_against_topology(store, &jobs)?;
            (JOBS_DOC, text, serde_json::json!({ "jobs": jobs.len() }))
        }
        Change::Register(text) => {
            let mut value: serde_json::Value = serde_json::from_str(&text).map_err(|e| invalid(format!("job: {e}")))?;
            job_with_default(&mut value, "start", now)?;
            let job: Job = serde_json::from_value(value).map_err(|e| invalid(format!("job: {e}")))?;
            let mut jobs = current_jobs(store)?;
            jobs.retain(|j| j.job != job.job);
            let summary = serde_json::json!({ "job": job.job, "start": job.start });
            checked_jobs(store, std::slice::from_ref(&job))?;
            jobs.push(job);
            let summary = with_expired(summary, store, &mut jobs, now);
            (JOBS_DOC, checked_jobs(store, &jobs)?, summary)
        }
        Change::End(name, text) => {
            let mut value: serde_json::Value = if text.trim().is_empty() {
                serde_json::json!({})
            } else {
                serde_json::from_str(&text).map_err(|e| invalid(format!("end: {e}")))?
            };
            job_with_default(&mut value, "end", now)?;
            let mut jobs = current_jobs(store)?;
            let Some(job) = jobs.iter_mut().find(|j| j.job == name) else {
                return Err(Status::not_found(format!("job {name:?} is not registered")));
            };
            // The end parses with the same rules as in jobs.json: put it on the stored job.
            let mut stored = serde_json::to_value(&*job).map_err(|e| Status::internal(e.to_string()))?;
            if let (Some(o), Some(end)) = (stored.as_object_mut(), value.get("end")) {
                o.insert("end".to_string(), end.clone());
            }
            *job = serde_json::from_value(stored).map_err(|e| invalid(format!("end: {e}")))?;
            let summary = serde_json::json!({ "job": name, "end": job.end });
            checked_jobs(store, std::slice::from_ref(job))?;
            let summary = with_expired(summary, store, &mut jobs, now);
            (JOBS_DOC, checked_jobs(store, &jobs)?, summary)
        }
        Change::Delete(name) => {
            let mut jobs = current_jobs(store)?;
            let before = jobs.len();
            jobs.retain(|j| j.job != name);
            if jobs.len() == before {
                return Err(Status::not_found(format!("job {name:?} is not registered")));
            }
            let summary = with_expired(serde_json::json!({ "job": name, "deleted": true }), store, &mut jobs, now);
            (JOBS_DOC, checked_jobs(store, &jobs)?, summary)
        }
    };
    let version = store.write_document(doc, &text).map_err(engine)?;
    let mut body = summary;
    if let Some(o) = body.as_object_mut() {
        o.insert("document".to_string(), doc.into());
        o.insert("version".to_string(), version.into());
    }
    Ok(json_response(StatusCode::OK, body.to_string(), Some(version)))
}

/// Drops from `jobs` those that ended more than the store's retention and one time partition
/// before `now` (every partition holding their samples has been dropped by then, whatever the
/// clock offsets of a few seconds), returning how many. Nothing without a retention; running
/// jobs are kept however old.
pub fn expire_jobs(store: &Store, jobs: &mut Vec<Job>, now: i64) -> usize {
    let Some(retention) = store.config().retention_ns else { return 0 };
    let cutoff = now.saturating_sub(retention).saturating_sub(store.partition_ns());
    let before = jobs.len();
    jobs.retain(|j| j.end.is_none_or(|end| end > cutoff));
    before - jobs.len()
}

/// [`expire_jobs`], adding `"expired": n` to a change's summary when it dropped any.
fn with_expired(mut summary: serde_json::Value, store: &Store, jobs: &mut Vec<Job>, now: i64) -> serde_json::Value {
    let expired = expire_jobs(store, jobs, now);
    if expired > 0 {
        tracing::info!(expired, "dropped jobs that ended before the retention");
        if let Some(o) = summary.as_object_mut() {
            o.insert("expired".to_string(), expired.into());
        }
    }
    summary
}

fn check_against_topology(store: &Store, jobs: &[Job]) -> Result<(), Status> {
    match current_topology(store)? {
        Some(topology) => check_jobs(&topology, jobs).map_err(invalid),
        None => Ok(()),
    }
}

/// Checks a job list as `jobs.json` would be checked and renders it.
fn checked_jobs(store: &Store, jobs: &[Job]) -> Result<String, Status> {
    let text = serde_json::to_string_pretty(jobs).map_err(|e| Status::internal(e.to_string()))?;
    parse_jobs(&text).map_err(invalid)?;
    check_against_topology(store, jobs)?;
    Ok(text)
}

#[cfg(test)]
mod tests;
