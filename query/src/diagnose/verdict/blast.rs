//! The blast radius of a pool or fabric root cause: the other jobs that share the pool or the
//! link during the episode, as aggressors (their own traffic on it rose with the slowdown) or
//! victims (they use it, so they are affected too).

use super::super::OtherJob;
use super::*;

/// The other jobs on `top` (the root-cause suspect, with the other end of its link) during
/// `[from, to)`: the aggressors first (strongest first), then the victims by start time.
pub(super) fn other_jobs(
    ctx: &JobContext,
    top: &Suspect,
    aggressors: &[(String, &Scored<'_>)],
    from: i64,
    to: i64,
) -> Vec<OtherJob> {
    let mut out: Vec<OtherJob> = aggressors
        .iter()
        .map(|(job, s)| OtherJob {
            job: job.clone(),
            role: "aggressor".to_string(),
            via: s.meta.entity.clone(),
            evidence: format!("its own traffic on {} rose with the slowdown: {}", s.meta.entity, describe(s)),
        })
        .collect();
    let ends = std::iter::once(top.entity.as_str()).chain(top.link.as_deref());
    for via in ends {
        for job in ctx.jobs_sharing(via, from, to) {
            if out.iter().any(|o| o.job == job) {
                continue;
            }
            let what = if ctx.index.entities(&job).is_some_and(|es| es.iter().any(|e| e.entity == via)) {
                match top.domain.as_str() {
                    "storage" => "reads and writes the same pool",
                    _ => "its traffic crosses the same port",
                }
            } else {
                "shares it"
            };
            out.push(OtherJob {
                job: job.clone(),
                role: "victim".to_string(),
                via: via.to_string(),
                evidence: format!("{what} during the episode ({via}): affected by the same fault"),
            });
        }
    }
    out
}

/// The evidence line of the root-cause suspect that names the other jobs.
pub(super) fn summary(entity: &str, others: &[OtherJob]) -> String {
    let list: Vec<String> = others.iter().map(|o| format!("{} ({})", o.job, o.role)).collect();
    format!(
        "other jobs on {entity} during this episode: {} (aggressor: its own traffic on it rose with the slowdown; \
         victim: it uses it and is affected too)",
        list.join(", ")
    )
}

/// The aggressor job as a suspect of its own, right after the root-cause entity it floods.
pub(super) fn aggressor_suspect(job: &str, s: &Scored<'_>, confidence: f64, w: Windows) -> Suspect {
    let onset = s.feat.onset;
    Suspect {
        domain: root_domain(s.meta).to_string(),
        entity: job.to_string(),
        onset: onset.map_or(w.slowdown, |o| o.t),
        uncertainty_ns: onset.map_or(0, |o| o.uncertainty),
        score: confidence * 0.9,
        evidence: vec![
            format!("job {job} is the aggressor: its traffic on {} rose with the slowdown", s.meta.entity),
            describe(s),
        ],
        sql: vec![sql_series(s.meta, w.from, w.to)],
        link: None,
    }
}
