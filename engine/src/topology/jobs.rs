//! The `jobs.json` model: which nodes a job ran on, when, and which storage pool it used.

use std::collections::HashSet;

use serde::{Deserialize, Deserializer, Serialize};

use crate::error::{Error, Result};
use crate::topology::{Topology, parse_rfc3339, rfc3339_error};

const JOBS_DOC: &str = "jobs.json";

/// A training job.
/// Unknown fields are refused: a misspelt `storage_pool` would otherwise be dropped silently.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Job {
    /// Name, e.g. `llm-70b` (the `job` label of application series).
    pub job: String,
    /// Compute nodes the job ran on.
    pub nodes: Vec<String>,
    /// Start, ns since the Unix epoch in reference time (JSON: integer ns or RFC 3339).
    #[serde(deserialize_with = "de_time")]
    pub start: i64,
    /// End (exclusive), or `None` while running (JSON: integer ns, RFC 3339, null or absent).
    #[serde(default, deserialize_with = "de_opt_time")]
    pub end: Option<i64>,
    /// Storage pool the job reads data from and writes checkpoints to.
    #[serde(default)]
    pub storage_pool: Option<String>,
    /// The scheduler's id (NCCL Inspector's `slurm_job_id` label), when it differs from `job`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm_job_id: Option<String>,
}

impl Job {
    /// Whether the job ran at any time in `[from, to)`.
    pub fn overlaps(&self, from: i64, to: i64) -> bool {
        self.start < to && self.end.is_none_or(|end| end > from)
    }
}

/// Parses and checks a `jobs.json` document: a JSON array of jobs, or an object with a
/// `jobs` array. Job names must be unique, node lists non-empty and without repeats,
/// `end >= start`; unknown fields are refused.
pub fn parse_jobs(text: &str) -> Result<Vec<Job>> {
    /// The object form.
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Wrapped {
        jobs: Vec<Job>,
    }
    // The form is chosen by the first character, so that errors inside a job keep their line
    // and column in both.
    let parsed = if text.trim_start().starts_with('{') {
        serde_json::from_str::<Wrapped>(text).map(|w| w.jobs)
    } else {
        serde_json::from_str::<Vec<Job>>(text)
    };
    let jobs = parsed.map_err(|e| invalid(e.to_string()))?;
    let mut names = HashSet::new();
    for job in &jobs {
        if job.job.is_empty() {
            return Err(invalid("a job has an empty name".to_owned()));
        }
        // The name is the `job` label of series and a path segment of the jobs API: no control
        // characters (a NUL or a newline breaks both), no padding, a label value's length.
        if job.job.chars().any(char::is_control) || job.job.trim() != job.job {
            return Err(invalid(format!("job name {:?} has a control character or is padded with spaces", job.job)));
        }
        if job.job.len() > crate::model::MAX_LABEL_VALUE_BYTES {
            return Err(invalid(format!(
                "a job name of {} bytes is longer than a label value may be ({} bytes)",
                job.job.len(),
                crate::model::MAX_LABEL_VALUE_BYTES
            )));
        }
        if !names.insert(job.job.as_str()) {
            return Err(invalid(format!("job {} is declared twice", job.job)));
        }
        if job.nodes.is_empty() {
            return Err(invalid(format!("job {} has no nodes", job.job)));
        }
        let mut nodes = HashSet::new();
        if let Some(node) = job.nodes.iter().find(|n| !nodes.insert(n.as_str())) {
            return Err(invalid(format!("job {} lists node {node} twice", job.job)));
        }
        let range = crate::model::MIN_TIME_NS..=crate::model::MAX_TIME_NS;
        for (what, t) in [("start", Some(job.start)), ("end", job.end)] {
            if let Some(t) = t
                && !range.contains(&t)
            {
                return Err(invalid(format!(
                    "job {}: {what} {t} is outside the stored time range (ns since 1970, before 2262)",
                    job.job
                )));
            }
        }
        if let Some(end) = job.end
            && end < job.start
        {
            return Err(invalid(format!("job {} ends before it starts", job.job)));
        }
    }
    Ok(jobs)
}

/// Checks jobs against a topology: every node and storage pool must exist.
pub fn check_jobs(topology: &Topology, jobs: &[Job]) -> Result<()> {
    for job in jobs {
        for node in &job.nodes {
            if topology.node(node).is_none() {
                return Err(invalid(format!("job {} runs on unknown node {node}", job.job)));
            }
        }
        if let Some(pool) = &job.storage_pool
            && topology.pool(pool).is_none()
        {
            return Err(invalid(format!("job {} uses unknown storage pool {pool}", job.job)));
        }
    }
    Ok(())
}

pub(crate) fn invalid(reason: String) -> Error {
    Error::TopologyInvalid { document: JOBS_DOC.to_owned(), reason }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum TimeValue {
    Ns(i64),
    Text(String),
    /// Anything else (a number beyond i64, a float, an object), for the error message.
    Other(serde_json::Value),
}

fn time_value<E: serde::de::Error>(v: TimeValue) -> std::result::Result<i64, E> {
    match v {
        TimeValue::Ns(ns) => Ok(ns),
        TimeValue::Text(s) => parse_rfc3339(&s).ok_or_else(|| E::custom(rfc3339_error(&s).unwrap_or_default())),
        TimeValue::Other(v) => Err(E::custom(format!("time {v} is neither integer ns (i64) nor an RFC 3339 string"))),
    }
}

fn de_time<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<i64, D::Error> {
    time_value(TimeValue::deserialize(d)?)
}

fn de_opt_time<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Option<i64>, D::Error> {
    Option::<TimeValue>::deserialize(d)?.map(time_value).transpose()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_time_forms_and_wrapper() {
        let jobs = parse_jobs(
            r#"[{"job":"llm-70b","nodes":["n1","n2"],"start":"2024-03-01T12:00:00Z",
                 "end":1709298000000000000,"storage_pool":"lustre-a"},
                {"job":"ft","nodes":["n3"],"start":5,"end":null}]"#,
        )
        .unwrap();
        assert_eq!(jobs[0].start, 1_709_294_400_000_000_000);
        assert_eq!(jobs[0].end, Some(1_709_298_000_000_000_000));
        assert_eq!(jobs[0].storage_pool.as_deref(), Some("lustre-a"));
        assert_eq!((jobs[1].end, jobs[1].storage_pool.as_deref()), (None, None));
        assert!(jobs[1].overlaps(100, 200) && !jobs[1].overlaps(0, 5));
        assert!(jobs[0].overlaps(jobs[0].start, jobs[0].start + 1));
        assert!(!jobs[0].overlaps(1_709_298_000_000_000_000, i64::MAX));

        let wrapped = parse_jobs(r#"{"jobs":[{"job":"a","nodes":["n1"],"start":0}]}"#).unwrap();
        assert_eq!(wrapped.len(), 1);
    }

    #[test]
    fn rejects_bad_documents() {
        for bad in [
            r#"[{"job":"a","nodes":["n1"],"start":"yesterday"}]"#,
            r#"[{"job":"a","nodes":[],"start":0}]"#,
            r#"[{"job":"a","nodes":["n"],"start":10,"end":5}]"#,
            r#"[{"job":"a","nodes":["n"],"start":0},{"job":"a","nodes":["n"],"start":0}]"#,
            r#"[{"nodes":["n"],"start":0}]"#,
            r#"{"job":"a"}"#,
        ] {
            let err = parse_jobs(bad).unwrap_err();
            assert!(matches!(err, Error::TopologyInvalid { .. }), "{bad}: {err}");
        }
        let err = parse_jobs(r#"[{"job":"a","nodes":["n"],"start":"x"}]"#).unwrap_err();
        assert!(err.to_string().contains("line 1"), "{err}");
        // A number beyond i64 or a float is named as such, not "did not match any variant".
        for (start, shown) in [("99999999999999999999", "1e+20"), ("1.5", "1.5")] {
            let err = parse_jobs(&format!(r#"[{{"job":"a","nodes":["n"],"start":{start}}}]"#)).unwrap_err().to_string();
            assert!(err.contains(&format!("time {shown} is neither integer ns (i64) nor an RFC 3339 string")), "{err}");
        }
        // Times before 1970 (or past 2262) are not times the store holds.
        let err = parse_jobs(r#"[{"job":"a","nodes":["n"],"start":-5}]"#).unwrap_err().to_string();
        assert!(err.contains("job a: start -5 is outside the stored time range"), "{err}");
        // A misspelt field is an error naming it, in either document form; a node given twice too.
        for doc in [
            r#"[{"job":"a","nodes":["n"],"start":0,"storge_pool":"p"}]"#,
            r#"{"jobs":[{"job":"a","nodes":["n"],"start":0,"storge_pool":"p"}]}"#,
        ] {
            let err = parse_jobs(doc).unwrap_err().to_string();
            assert!(err.contains("unknown field `storge_pool`"), "{doc}: {err}");
        }
        let err = parse_jobs(r#"[{"job":"a","nodes":["n1","n2","n1"],"start":0}]"#).unwrap_err().to_string();
        assert!(err.contains("job a lists node n1 twice"), "{err}");
        // An RFC 3339 time outside 1970-2262 says so, not that it is not RFC 3339.
        let err = parse_jobs(r#"[{"job":"a","nodes":["n"],"start":"1960-01-01T00:00:00Z"}]"#).unwrap_err().to_string();
        assert!(err.contains("\"1960-01-01T00:00:00Z\" is outside the time range stored"), "{err}");
        // Job names with a NUL, a newline or padding, or longer than a label value, are refused.
        let long = "j".repeat(crate::model::MAX_LABEL_VALUE_BYTES + 1);
        for name in ["a\\u0000b", "a\\nb", " a", &long] {
            let err = parse_jobs(&format!(r#"[{{"job":"{name}","nodes":["n"],"start":0}}]"#)).unwrap_err().to_string();
            assert!(err.contains("control character") || err.contains("longer than a label value"), "{name}: {err}");
        }
        assert!(parse_jobs(r#"[{"job":"llm 70b/ä","nodes":["n"],"start":0}]"#).is_ok());
    }
}
