//! The three root-cause rules of the verdict: a fabric fault, a straggler rank, and an
//! input-bound job (storage, possibly over a faulty fabric, or the data loader itself). Each
//! picks the primary entity among the scored series and writes its evidence.

use super::*;

/// A fabric fault that explains a storage slowdown starts at most this long before the storage
/// side changed.
const FABRIC_LEAD_NS: i64 = 60 * lockstep_engine::model::SEC;

pub(super) fn network<'a>(scored: &'a [Scored<'a>], ev: &mut Evidence<'_>) -> Primary<'a> {
    let candidates: Vec<&Scored<'_>> = scored.iter().filter(|s| is_fabric_fault(s)).collect();
    ev.aggregate("collective", EXEC_METRIC, "median over ranks");
    ev.aggregate("compute", names::SM_ACTIVE, "median over GPUs");
    let loss = scored
        .iter()
        .filter(|s| {
            is_port(s.meta)
                && s.changed()
                && s.meta.info.as_ref().is_some_and(|i| i.class == MetricClass::LossRetransmit)
        })
        .max_by(|a, b| a.score.total_cmp(&b.score));
    let headline = "the collectives slowed because the fabric did: the fastest rank's all-reduce time rose".to_string();
    match best_entity(&candidates) {
        Some((score, entity, list)) => {
            let evidence = vec![format!(
                "{headline}; {entity} is the port whose error and congestion counters changed first and most against its peers"
            )];
            // Both ends of one host link changed: a bad cable or transceiver shows errors at
            // either receiver and backs up the switch end. The link is the culprit; it is named at
            // its host end (the end a job owns) when that end shows errors itself.
            let (entity, list) = match ev.ctx.host_links.get(&entity) {
                Some(nic) => {
                    let nic_list: Vec<&Scored<'_>> =
                        candidates.iter().copied().filter(|s| &s.meta.entity == nic).collect();
                    // (The merge of the two ends into one suspect, with "inspect that link", is
                    // `merge_link_ends`.)
                    if nic_list.iter().any(|s| is_fault_source(s.meta)) {
                        let mut nic_list = nic_list;
                        nic_list.sort_by(|a, b| b.score.total_cmp(&a.score));
                        (nic.clone(), nic_list)
                    } else {
                        (entity, list)
                    }
                }
                None => (entity, list),
            };
            if let Some(l) = loss.filter(|l| l.meta.entity != entity) {
                ev.series_link(l);
            }
            let chain = list.iter().take(2).map(|s| link(s, ev.w)).collect();
            Primary {
                bottleneck: "network",
                domain: "network",
                confidence: (0.5 + 0.5 * score).min(1.0),
                evidence,
                entity,
                headline,
                series: list,
                chain,
            }
        }
        None => Primary {
            bottleneck: "network",
            domain: "network",
            entity: ev.ctx.job.job.clone(),
            confidence: 0.3,
            evidence: vec![format!(
                "{headline}; no fabric counter of the job's paths changed: the fault is outside the monitored ports"
            )],
            headline,
            series: Vec::new(),
            chain: Vec::new(),
        },
    }
}

pub(super) fn straggler<'a>(
    scored: &'a [Scored<'a>],
    ev: &mut Evidence<'_>,
    culprit: Option<&Culprit>,
    dec: &Decomposition,
) -> Option<Primary<'a>> {
    ev.aggregate("collective", EXEC_METRIC, "median over ranks");
    let Some(c) = culprit else {
        return Some(Primary {
            bottleneck: "compute",
            domain: "compute",
            entity: ev.ctx.job.job.clone(),
            confidence: 0.3,
            headline: "ranks wait for a straggler in the collective, but no per-rank collective times identify it"
                .into(),
            evidence: Vec::new(),
            series: Vec::new(),
            chain: Vec::new(),
        });
    };
    // The straggler's data loader, linked across label conventions (rank, GPU, or its node).
    let who = assoc::Worker { host: c.host.clone(), rank: (c.rank != "?").then(|| c.rank.clone()), gpu: c.gpu.clone() };
    let waits: Vec<&Scored<'_>> = scored.iter().filter(|s| s.meta.metric() == WAIT_METRIC).collect();
    let rise = |s: &Scored<'_>| s.feat.mean1 - s.feat.mean0;
    let linked = assoc::Assoc::new(ev.ctx).serving(&who, &waits, |s| s.meta, |a, b| rise(a).total_cmp(&rise(b)));
    let wait = linked.map(|(s, _)| *s);
    let wait_rise = wait.map_or(0.0, rise);
    let name = c.display();
    let lowest = format!(
        "{name} on {} has the LOWEST collective time (+{:.3} s while the median rank's rose {:.3} s): \
         every other rank waits for it in the all-reduce",
        c.host,
        dec.transfer,
        dec.transfer + dec.straggler
    );
    if wait_rise >= 0.3 * dec.straggler {
        // The straggler waits for its data loader: the host's CPU is the cause.
        let mut list: Vec<&Scored<'_>> = scored
            .iter()
            .filter(|s| {
                s.meta.entity == c.host
                    && s.meta.kind == EntityKind::Node
                    && s.changed()
                    && s.meta.metric() != WAIT_METRIC
            })
            .collect();
        list.sort_by(|a, b| b.score.total_cmp(&a.score));
        // Its loader is short of CPU (node-local) — or of data, when the host shows no CPU
        // contention against its peers: then the storage branch decides.
        let cpu_bound = list.iter().any(|s| {
            s.meta.info.as_ref().is_some_and(|i| i.class == MetricClass::CpuPressure)
                && s.feat.m1 > s.feat.m0
                && s.peer.is_none_or(|p| p > 3.0)
        });
        if !cpu_bound {
            return None;
        }
        if let Some(w) = wait {
            ev.series_link(w);
        }
        let chain = list.iter().take(2).map(|s| link(s, ev.w)).collect();
        let how = match linked.map(|l| l.1) {
            Some("node") | Some("host") => format!(" (loader series linked through the host {})", c.host),
            _ => String::new(),
        };
        let headline =
            format!("{name}'s data loader on {} fell behind (its wait rose {:.3} s per step){how}", c.host, wait_rise);
        return Some(Primary {
            bottleneck: "data_loading",
            domain: "data_loading",
            entity: c.host.clone(),
            confidence: (0.6 + 0.4 * entity_score(&list)).min(1.0),
            evidence: vec![headline.clone(), lowest],
            headline,
            series: list,
            chain,
        });
    }
    let gpu = c.gpu.as_deref().map(|g| lockstep_engine::metrics::entity::gpu_name(&c.host, g));
    let entity = gpu.unwrap_or_else(|| c.host.clone());
    let mut list: Vec<&Scored<'_>> = scored.iter().filter(|s| s.meta.entity == entity && s.changed()).collect();
    list.sort_by(|a, b| b.score.total_cmp(&a.score));
    let chain = list.iter().take(3).map(|s| link(s, ev.w)).collect();
    let headline = format!("{entity} computes slower than its peers");
    Some(Primary {
        bottleneck: "compute",
        domain: "compute",
        confidence: (0.6 + 0.4 * entity_score(&list)).min(1.0),
        evidence: vec![headline.clone(), lowest],
        entity,
        headline,
        series: list,
        chain,
    })
}

pub(super) fn storage_or_loading<'a>(scored: &'a [Scored<'a>], ev: &mut Evidence<'_>, ctx: &JobContext) -> Primary<'a> {
    ev.aggregate("data_loading", WAIT_METRIC, "median over ranks");
    ev.aggregate("compute", names::GPU_UTIL, "median over GPUs");
    let pool_latency = scored
        .iter()
        .filter(|s| {
            s.meta.kind == EntityKind::StoragePool
                && s.changed()
                && s.feat.m1 > s.feat.m0
                && s.meta.info.as_ref().is_some_and(|i| i.class == MetricClass::Latency)
        })
        // The strongest change (an early wobble of a weak series is not the onset).
        .max_by(|a, b| a.feat.z.total_cmp(&b.feat.z));
    let Some(lat) = pool_latency else {
        // Input-bound without a storage change: the loaders themselves (CPU) are short.
        let cpu: Vec<&Scored<'_>> = scored
            .iter()
            .filter(|s| {
                s.meta.kind == EntityKind::Node
                    && s.changed()
                    && s.meta.info.as_ref().is_some_and(|i| i.class == MetricClass::CpuPressure)
            })
            .collect();
        let best = best_entity(&cpu);
        let headline = "every rank waits for its data loader while storage latency is unchanged".to_string();
        return match best {
            Some((score, entity, list)) => Primary {
                bottleneck: "data_loading",
                domain: "data_loading",
                entity,
                confidence: (0.4 + 0.5 * score).min(1.0),
                evidence: vec![headline.clone()],
                headline,
                chain: list.iter().take(2).map(|s| link(s, ev.w)).collect(),
                series: list,
            },
            None => Primary {
                bottleneck: "data_loading",
                domain: "data_loading",
                entity: ctx.job.job.clone(),
                confidence: 0.3,
                evidence: vec![headline.clone()],
                headline,
                series: Vec::new(),
                chain: Vec::new(),
            },
        };
    };
    // The storage side's first change: the pool's latency, or a storage server degraded
    // against its peers before it (a server's own disks slowing first means the storage is
    // the origin, whatever fabric errors follow).
    let storage_onset = scored
        .iter()
        .filter(|s| is_degraded_server(s))
        .filter_map(|s| s.feat.onset)
        .chain(lat.feat.onset)
        .min_by_key(|o| o.t);
    // A fabric fault on the storage path that does not start after the storage side changed,
    // nor long before it (errors on the path slow storage I/O at once: a trickle that began
    // minutes before the latency moved did not cause it).
    let fabric: Vec<&Scored<'_>> = scored
        .iter()
        .filter(|s| is_fabric_fault(s) && is_fault_source(s.meta))
        .filter(|s| match (s.feat.onset, storage_onset) {
            (Some(f), Some(l)) => {
                !after_beyond_doubt(f, l)
                    && !before(f.t.saturating_add(FABRIC_LEAD_NS), f.uncertainty, l.t, l.uncertainty)
            }
            (None, _) => false,
            (Some(_), None) => true,
        })
        .collect();
    let pool = ctx.pool.clone().unwrap_or_else(|| lat.meta.entity.clone());
    if let Some((score, entity, list)) = best_entity(&fabric) {
        ev.series_link(lat);
        let chain = list.iter().take(2).map(|s| link(s, ev.w)).collect();
        let headline = format!(
            "the storage problem is a network problem: {pool} latency rose after fabric errors on its path at {entity}"
        );
        return Primary {
            bottleneck: "storage",
            domain: "network",
            confidence: (0.5 + 0.5 * score).min(1.0),
            evidence: vec![
                headline.clone(),
                format!("the job waits on storage ({}), whose path crosses {entity}", describe(lat)),
            ],
            entity,
            headline,
            series: list,
            chain,
        };
    }
    // Storage itself: the pool, with the degraded server or the aggressor job as evidence.
    let mut list: Vec<&Scored<'_>> = scored
        .iter()
        .filter(|s| {
            s.changed()
                && (s.meta.kind == EntityKind::StoragePool
                    || (s.meta.kind == EntityKind::Node
                        && s.meta.relation == lockstep_engine::metrics::Domain::Storage))
        })
        .collect();
    list.sort_by(|a, b| b.score.total_cmp(&a.score));
    let mut evidence = Vec::new();
    let server = list.iter().filter(|s| is_degraded_server(s)).max_by(|a, b| a.score.total_cmp(&b.score));
    if let Some(sv) = server {
        evidence.push(format!("storage server {} degraded: {}", sv.meta.entity, describe(sv)));
        ev.series_link(sv);
    }
    let aggressor = scored
        .iter()
        .filter(|s| {
            s.meta.kind == EntityKind::StoragePool
                && s.meta.label("job").is_some_and(|j| j != ctx.job.job)
                && s.changed()
                && s.feat.m1 > s.feat.m0
        })
        .max_by(|a, b| a.feat.z.total_cmp(&b.feat.z));
    if let Some(a) = aggressor {
        evidence.push(format!("job {} saturates the pool: {}", a.meta.label("job").unwrap_or("?"), describe(a)));
        ev.series_link(a);
    }
    let headline = format!("every rank waits for data because {pool} got slow ({})", describe(lat));
    evidence.insert(0, headline.clone());
    let chain = vec![link(lat, ev.w)];
    Primary {
        bottleneck: "storage",
        domain: "storage",
        entity: pool,
        confidence: (0.6 + 0.4 * lat.score).min(1.0),
        evidence,
        headline,
        series: list,
        chain,
    }
}

/// A storage server's series that changed and stands out against its peers (the degraded
/// server of a pool).
fn is_degraded_server(s: &Scored<'_>) -> bool {
    s.changed()
        && s.meta.kind == EntityKind::Node
        && s.meta.relation == lockstep_engine::metrics::Domain::Storage
        && s.peer.is_some_and(|p| p > 3.0)
}
