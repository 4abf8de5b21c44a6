//! One next action per verdict: what an operator should inspect or run next, named concretely
//! (the link's two ports, the pool and its aggressor, the node's loader, the GPU).

use super::super::{Diagnosis, Episode};
use super::JobContext;

/// `node-06/mlx5_1:1` → (`node-06`, `mlx5_1`, `1`).
fn nic_parts(entity: &str) -> Option<(&str, &str, &str)> {
    let (host, rest) = entity.split_once('/')?;
    let (dev, port) = rest.rsplit_once(':')?;
    Some((host, dev, port))
}

/// How to look at one port: `mlxlink` on a host NIC, the switch's port counters otherwise.
fn inspect_port(entity: &str) -> String {
    match nic_parts(entity) {
        Some((host, dev, port)) => format!("`mlxlink -d {dev} -p {port} -c -e` on {host} (BER, errors, cable)"),
        None => match entity.rsplit_once(':') {
            Some((switch, port)) => format!("port {port} of switch {switch} (its error counters and transceiver)"),
            None => entity.to_string(),
        },
    }
}

/// The next action for an episode's verdict.
pub(super) fn next_action(ctx: &JobContext, e: &Episode) -> String {
    let Some(top) = e.suspects.first() else {
        return "No suspect: rerun with a wider window (--from/--to) around the slowdown.".to_string();
    };
    let entity = top.entity.as_str();
    let sql = top.sql.first().map(|q| format!(" Evidence: `lockstep sql \"{q}\"`.")).unwrap_or_default();
    let job = ctx.job.job.as_str();
    if entity == job {
        return match e.root_cause_domain.as_deref() {
            Some("network") => format!(
                "No monitored port of {job}'s paths changed: export the switch and NIC port counters of its paths \
                 (infiniband_exporter / switch telemetry) and topology.json, then rerun `lockstep diagnose --job {job}`."
            ),
            Some("data_loading") => format!(
                "Profile {job}'s data loaders (worker count, prefetch, decode cost) and what else runs on its nodes' \
                 CPUs; per-node CPU pressure is missing or unchanged."
            ),
            _ => format!("Export per-rank collective times and GPU metrics of {job}, then rerun the diagnosis."),
        };
    }
    let aggressor = e.blast_radius.iter().find(|o| o.role == "aggressor");
    match (e.root_cause_domain.as_deref(), top.link.as_deref()) {
        (Some("network"), Some(peer)) => {
            format!(
                "Inspect the link {entity} ↔ {peer} (one fault at both ends): check the cable and both transceivers \
                 with {} and {}; reseat or replace the cable, then confirm the errors stop.{sql}",
                inspect_port(entity),
                inspect_port(peer)
            )
        }
        (Some("network"), None) => {
            let peer = ctx.links.get(entity).map(|p| format!(" and the cable to {p}")).unwrap_or_default();
            format!(
                "Inspect {}{peer}; drain it from the job's routes if the errors persist.{sql}",
                inspect_port(entity)
            )
        }
        (Some("storage"), _) => match aggressor {
            Some(a) => format!(
                "Throttle or reschedule job {}'s checkpoint writes to {entity} (or move one job to another pool): \
                 its traffic on the pool rose with the slowdown.{sql}",
                a.job
            ),
            None => format!(
                "Check storage pool {entity}: its servers' latency, disks and load during the episode (the degraded \
                 server is in the evidence), and who else writes to it.{sql}"
            ),
        },
        (Some("data_loading"), _) => format!(
            "Look at the data loader on {entity}: what else uses its CPUs (`top`/`pidstat` on {entity}, its CPU \
             pressure), the loader's worker count and prefetch.{sql}"
        ),
        (Some("compute"), _) => match entity.split_once("/gpu") {
            Some((host, gpu)) => format!(
                "Check GPU {gpu} on {host}: `nvidia-smi -q -i {gpu} -d PERFORMANCE,TEMPERATURE,CLOCK` (throttle \
                 reasons, temperature, clocks); drain {host} if it persists.{sql}"
            ),
            None => format!("Check {entity} for a slow or throttled GPU (`nvidia-smi -q -d PERFORMANCE`).{sql}"),
        },
        _ => format!("Inspect {entity}.{sql}"),
    }
}

/// The next action without a slowdown episode (healthy, slow from the start, insufficient data).
pub(super) fn without_episode(d: &Diagnosis, ctx: &JobContext) -> String {
    match d.status.as_str() {
        "insufficient_data" => format!(
            "Export the missing signals ({}), then rerun `lockstep diagnose --job {}`.",
            if d.missing.is_empty() {
                "step time, collective times".to_string()
            } else {
                d.missing.iter().filter_map(|m| m.split(" (").next()).collect::<Vec<_>>().join(", ")
            },
            d.job
        ),
        "slow_from_start" => match d.suggested_from {
            Some(t) => format!(
                "Rerun with `--from {}` so the window holds healthy time to compare with.",
                super::super::format::fmt_rfc3339(t)
            ),
            None => {
                "Compare with a healthy run of the same job: `lockstep diagnose --baseline-from .. --baseline-to .. \
                     --from .. --to ..`."
                    .to_string()
            }
        },
        _ => match super::honest::named_near_miss(d) {
            // The near miss is what makes this `healthy` uncertain: a fault near the detection
            // limit looks like it. Look at it per rank or host (one node behind it, or all).
            Some(m) => {
                let metric = d.main.slowdown.metric.as_str();
                let (label, value) = super::pace_selector(ctx, metric);
                let q = super::super::format::quote;
                let fmt = super::super::format::fmt_rfc3339;
                format!(
                    "Look at the {:+.0} % rise from {}: which ranks or hosts slowed (`lockstep sql \"SELECT entity, \
                     avg(value) FROM samples WHERE metric = '{}' AND {label} = '{}' AND time >= '{}' AND time < '{}' \
                     GROUP BY entity ORDER BY 2 DESC\"`), and whether the fabric, the pool or a node's loader \
                     changed with it.",
                    m.rise * 100.0,
                    super::super::format::fmt_time(m.start),
                    q(metric),
                    q(value),
                    fmt(m.start),
                    fmt(m.end.max(m.start + 1))
                )
            }
            None => format!(
                "Nothing to fix in this window; if {} felt slow at another time, rerun with --from/--to around it.",
                d.job
            ),
        },
    }
}
