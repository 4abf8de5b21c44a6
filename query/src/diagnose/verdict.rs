//! From per-series features to the verdict: peer outlierness, the step-time decomposition, the
//! bottleneck, the root-cause entity, suspects and the evidence chain.
//! The steps are files of their own: `score.rs` (changed series, peer outlierness, scores),
//! `decompose.rs` (what the ranks waited on), `causes.rs` (the per-cause rules), `evidence.rs`
//! (chain links and evidence sentences), `blast.rs` (other jobs on the root cause), `action.rs`
//! (the next action), `honest.rs` (missing signals, no-episode verdicts, confidence) and
//! `lanes.rs` (the report's time series).

use std::collections::HashMap;

use lockstep_engine::clock::before;
use lockstep_engine::metrics::{Direction, EntityKind, MetricClass, names};

use super::analyze::{Features, Onset, Windows, features};
use super::context::{JobContext, SeriesMeta};
use super::format::{fmt_change, sql_aggregate, sql_series};
use super::load::{Loaded, STEP_METRIC, across_median};
use super::signal::Signal;
use super::stats::{mad, median};
use super::{ChainLink, Decomposition, DiagnoseOptions, Diagnosis, Episode, Lane, Suspect, UNCERTAINTY_UNKNOWN};

mod action;
mod blast;
pub(crate) mod calibration;
mod causes;
mod decompose;
mod evidence;
mod honest;
mod lanes;
mod score;

use super::assoc;

use causes::{network, storage_or_loading, straggler};
use decompose::*;
use evidence::*;
use lanes::*;
use score::*;

const WAIT_METRIC: &str = names::DATALOADER_WAIT;
const EXEC_METRIC: &str = names::COLLECTIVE_EXEC_TIME;
/// A series counts as changed beyond this robust |z| ...
const Z_CHANGED: f64 = 5.0;
/// ... and this relative change of its median (or a change from zero).
const REL_CHANGED: f64 = 0.2;
/// Input waits explain the slowdown when they rose by at least this share of the step rise.
const INPUT_SHARE: f64 = 0.3;
/// A straggler is one consistent rank when its isolation is at least this.
const ISOLATED: f64 = 0.5;
/// Bursty input waits: the 90th-percentile rank's wait rose by this share of the step rise.
const BURSTY_SHARE: f64 = 0.1;
/// Most suspects reported.
const MAX_SUSPECTS: usize = 10;

/// A rival suspect changed within this long of the root cause ...
const RIVAL_NS: i64 = 180 * lockstep_engine::model::SEC;
/// ... and scores at least this share of its score (the scores as reported: suspects after the
/// first are capped at 0.9 of its rule score before the lowering for missing signals).
const RIVAL_SHARE: f64 = 0.5;

/// The root cause named by the bottleneck rule changed at least this long after the slowdown
/// began, and a rival at least this long before it ...
const LATE_NS: i64 = 25 * lockstep_engine::model::SEC;
/// ... within this long of the slowdown's onset: the rival is what changed first.
const WITH_SLOWDOWN_NS: i64 = 30 * lockstep_engine::model::SEC;

/// The rival (see [`rival`]) that changed with the slowdown while the first suspect — what the
/// job waits on — changed well after it (each beyond the clocks' uncertainty): a second fault
/// that joined the first and outweighs it. The first domain to change is the root cause.
fn changed_first(suspects: &[Suspect], slow_t: i64, slow_unc: i64) -> Option<usize> {
    let top = suspects.first()?;
    let r = rival(suspects)?;
    let late = before(slow_t.saturating_add(LATE_NS), slow_unc, top.onset, top.uncertainty_ns);
    let led = before(r.onset.saturating_add(LATE_NS), r.uncertainty_ns, top.onset, top.uncertainty_ns);
    // (An unknown uncertainty is `i64::MAX`: it never orders, here as in `before`.)
    let known = slow_unc != UNCERTAINTY_UNKNOWN && r.uncertainty_ns != UNCERTAINTY_UNKNOWN;
    let slack = WITH_SLOWDOWN_NS.saturating_add(slow_unc.max(0)).saturating_add(r.uncertainty_ns.max(0));
    let with = known && r.onset.saturating_sub(slow_t).saturating_abs() <= slack;
    (late && led && with).then(|| suspects.iter().position(|s| std::ptr::eq(s, r))).flatten()
}

/// The label and value that select the job's pace series in SQL: `job` for the step time, the
/// Slurm job id (else the job) for the collective time.
fn pace_selector<'a>(ctx: &'a JobContext, metric: &str) -> (&'static str, &'a str) {
    if metric == STEP_METRIC {
        ("job", ctx.job.job.as_str())
    } else {
        ("slurm_job_id", ctx.job.slurm_job_id.as_deref().unwrap_or(ctx.job.job.as_str()))
    }
}

/// The changed series of `entity`, strongest first.
fn strongest<'s, 'a>(scored: &'s [Scored<'a>], entity: &str) -> Vec<&'s Scored<'a>> {
    let mut own: Vec<&Scored<'a>> = scored.iter().filter(|s| s.meta.entity == entity && s.changed()).collect();
    own.sort_by(|a, b| b.score.total_cmp(&a.score));
    own
}

/// Best first: no suspect's score above the one before it.
fn best_first(suspects: &mut [Suspect]) {
    for i in 1..suspects.len() {
        suspects[i].score = suspects[i].score.min(suspects[i - 1].score);
    }
}

/// The best suspect of another domain than the first, when it contests the first: close in time
/// and score (two faults close together, whose order the evidence may get wrong).
fn rival(suspects: &[Suspect]) -> Option<&Suspect> {
    let top = suspects.first()?;
    let other = suspects[1..].iter().find(|s| s.domain != top.domain)?;
    (other.score >= RIVAL_SHARE * top.score && other.onset.saturating_sub(top.onset).saturating_abs() <= RIVAL_NS)
        .then_some(other)
}

/// Decides the diagnosis from the loaded data: every episode, the main one at the top level.
pub(crate) fn decide(ctx: &JobContext, data: &Loaded, opts: &DiagnoseOptions) -> Diagnosis {
    let missing = honest::missing_signals(ctx, data);
    let first = data.episodes.first().map_or_else(|| honest::no_slowdown(data), |e| e.slowdown.clone());
    let mut d = Diagnosis {
        job: ctx.job.job.clone(),
        from: ctx.from,
        to: ctx.to,
        status: String::new(),
        missing: missing.iter().map(|m| m.to_string()).collect(),
        suggested_from: None,
        main: Episode::new(first),
        episodes: Vec::new(),
        near_miss: data.pace.near_miss,
        clock: data.clock.clone(),
        series: ctx.series.len(),
        samples: data.samples,
        elapsed_ms: 0,
        lanes: Vec::new(),
    };
    if data.episodes.is_empty() {
        honest::without_episode(&mut d, ctx, data, &missing);
        d.main.next_action = action::without_episode(&d, ctx);
        if opts.lanes {
            d.lanes = lanes(ctx, data, None, &[]);
        }
        return d;
    }
    let mut hints = Vec::new();
    for k in 0..data.episodes.len() {
        let (episode, hint) = decide_episode(ctx, data, k, &missing);
        d.episodes.push(episode);
        hints.push(hint);
    }
    let continues: Vec<bool> = data.episodes.iter().map(|e| e.continues).collect();
    let main = honest::main_episode(&d.episodes, &continues, ctx.to);
    d.main = d.episodes[main].clone();
    // An escalation: the main episode is its first stage (what changed first); say what joined.
    if let Some(next) = d.episodes.get(main + 1).filter(|_| continues.get(main + 1).copied().unwrap_or(false)) {
        let what = next.suspects.first().map_or_else(String::new, |s| format!(": {} in {}", s.entity, s.domain));
        d.main.verdict.push_str(&format!(
            " The slowdown then worsened at {}{what} (episode {} of {}).",
            next.slowdown.time.map_or("-".to_string(), super::format::fmt_time),
            main + 2,
            d.episodes.len()
        ));
    }
    d.status = if d.main.from_start { "slow_from_start" } else { "slowdown" }.to_string();
    if d.main.from_start || d.main.slowdown.time.is_some_and(|t| t < ctx.from) {
        let from = honest::earlier_from(ctx, data);
        d.suggested_from = (from < ctx.from).then_some(from);
        let hint = match d.suggested_from {
            Some(t) => format!(" Slow from the start of the window: try --from {}.", super::format::fmt_rfc3339(t)),
            None => " Slow from the start of the job's data: no healthy time before it.".to_string(),
        };
        d.main.verdict.push_str(&hint);
        if let Some(t) = d.suggested_from {
            d.main.next_action = format!(
                "Rerun with `--from {}` to compare with healthy time; meanwhile: {}",
                super::format::fmt_rfc3339(t),
                d.main.next_action
            );
        }
        d.status = "slow_from_start".to_string();
    }
    if d.episodes.len() > 1 {
        let n = d.episodes.len();
        d.main.verdict.push_str(&format!(
            " ({n} slowdown episodes in the window; this is the largest, see episodes[] for the others.)"
        ));
    }
    if opts.lanes {
        let hint = hints.swap_remove(main);
        let fabric: Vec<&SeriesMeta> = ctx.series.iter().filter(|m| hint.fabric.contains(&m.id)).collect();
        d.lanes = lanes(ctx, data, hint.culprit_host.as_deref(), &fabric);
    }
    d
}

/// Diagnoses episode `k` against the healthy time around it.
fn decide_episode(ctx: &JobContext, data: &Loaded, k: usize, missing: &[honest::Missing]) -> (Episode, LaneHints) {
    let ep = &data.episodes[k];
    let w = ep.windows;
    let slow_t = ep.slowdown.time.unwrap_or(w.slowdown);
    let mut d = Episode::new(ep.slowdown.clone());
    d.from_start = ep.from_start;
    d.recovery = ep.recovery;
    let scored = score_all(ctx, data, k, slow_t);
    let pace_rise = |s: &super::Slowdown| {
        let rise = s.degraded - s.baseline;
        if s.metric == STEP_METRIC { rise } else { rise / 1e6 }
    };
    let dec = decompose(&scored, pace_rise(&ep.slowdown), fastest_transfer_rise(ctx, data, w), &assoc::Assoc::new(ctx));
    d.decomposition = dec.0.clone();
    let culprit = dec.1;
    let mut ev = Evidence::new(ctx, data, w, ep.slowdown.uncertainty_ns.unwrap_or(0));

    // The bottleneck and the root cause inside it.
    let step_rise = dec.0.step.max(1e-9);
    // Input-bound: most ranks wait for data, or waits are broad but bursty (a different rank is
    // late every step, so no single straggler stands out).
    let input_bound = dec.0.input_wait >= INPUT_SHARE * step_rise
        || dec.0.input_wait_p90 >= 2.0 * INPUT_SHARE * step_rise
        || (dec.0.straggler > dec.0.transfer
            && dec.0.straggler_isolation < ISOLATED
            && dec.0.input_wait_p90 >= BURSTY_SHARE * step_rise);
    let primary: Primary = if input_bound {
        storage_or_loading(&scored, &mut ev, ctx)
    } else if dec.0.transfer >= dec.0.straggler {
        network(&scored, &mut ev)
    } else {
        match straggler(&scored, &mut ev, culprit.as_ref(), &dec.0) {
            Some(p) => p,
            None => storage_or_loading(&scored, &mut ev, ctx),
        }
    };
    d.bottleneck = Some(primary.bottleneck.to_string());
    d.root_cause_domain = Some(primary.domain.to_string());

    // Suspects: the primary first, then every other entity by its generic score.
    let mut by_entity: HashMap<&str, Vec<&Scored<'_>>> = HashMap::new();
    for s in scored.iter().filter(|s| s.changed()) {
        by_entity.entry(s.meta.entity.as_str()).or_default().push(s);
    }
    let mut others: Vec<(f64, &str, Vec<&Scored<'_>>)> = by_entity
        .into_iter()
        .filter(|(e, _)| *e != primary.entity && *e != ctx.job.job)
        .map(|(e, mut list)| {
            list.sort_by(|a, b| b.score.total_cmp(&a.score));
            (entity_score(&list), e, list)
        })
        .collect();
    others.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(b.1)));
    let first_onset = primary
        .series
        .iter()
        .filter_map(|s| s.feat.onset.map(|o| (o.t, o.uncertainty)))
        .min_by_key(|o| o.0)
        .unwrap_or((slow_t, ep.slowdown.uncertainty_ns.unwrap_or(0)));
    let mut evidence = primary.evidence.clone();
    let mut sql = Vec::new();
    for s in primary.series.iter().take(4) {
        evidence.push(describe(s));
        sql.push(sql_series(s.meta, w.from, w.to));
    }
    d.suspects.push(Suspect {
        domain: primary.domain.to_string(),
        entity: primary.entity.clone(),
        onset: first_onset.0,
        uncertainty_ns: first_onset.1,
        score: primary.confidence,
        evidence,
        sql,
        link: None,
    });
    let cap = primary.confidence * 0.9;
    for (score, entity, list) in &others {
        let Some(top) = list.first() else { continue };
        let onset = list.iter().filter_map(|s| s.feat.onset).min_by_key(|o| o.t);
        d.suspects.push(Suspect {
            domain: root_domain(top.meta).to_string(),
            entity: entity.to_string(),
            onset: onset.map_or(slow_t, |o| o.t),
            uncertainty_ns: onset.map_or(0, |o| o.uncertainty),
            score: (score * cap).min(cap),
            evidence: list.iter().take(3).map(|s| describe(s)).collect(),
            sql: list.iter().take(3).map(|s| sql_series(s.meta, w.from, w.to)).collect(),
            link: None,
        });
    }
    // Which entities show a fabric fault (errors, drops, congestion) and which its source
    // (errors, flaps): only such link ends are one fault, not two ends that merely carry traffic.
    let mut fabric: HashMap<&str, bool> = HashMap::new();
    for s in scored.iter().filter(|s| is_fabric_fault(s)) {
        *fabric.entry(s.meta.entity.as_str()).or_default() |= is_fault_source(s.meta);
    }
    merge_link_ends(&mut d.suspects, ctx, &fabric);
    // Other jobs on the root-cause pool or link: the aggressor (a suspect of its own) and the
    // blast radius.
    let shared = matches!(primary.domain, "storage" | "network") && primary.entity != ctx.job.job;
    if shared {
        let top = d.suspects[0].clone();
        let aggressors = aggressors(&scored, ctx, &top);
        d.blast_radius = blast::other_jobs(ctx, &top, &aggressors, slow_t, ep.recovery.unwrap_or(ctx.to));
        d.other_jobs = d.blast_radius.iter().map(|o| o.job.clone()).collect();
        if !d.other_jobs.is_empty() {
            d.suspects[0].evidence.insert(1, blast::summary(&top.entity, &d.blast_radius));
        }
        for (k, (job, s)) in aggressors.iter().enumerate() {
            d.suspects.insert(1 + k, blast::aggressor_suspect(job, s, primary.confidence, w));
        }
    }
    d.suspects.truncate(MAX_SUSPECTS);

    // The chain, in corrected-time order, ordered only as far as the clocks allow.
    let mut chain = primary.chain;
    chain.extend(ev.take());
    let (pace_label, pace_value) = pace_selector(ctx, &ep.slowdown.metric);
    let pace_unit = if ep.slowdown.metric == STEP_METRIC { "s" } else { "µs" };
    chain.push(ChainLink {
        time: slow_t,
        uncertainty_ns: ep.slowdown.uncertainty_ns.unwrap_or(0),
        domain: "training".to_string(),
        entity: ctx.job.job.clone(),
        metric: format!("{} (median over ranks)", ep.slowdown.metric),
        change: fmt_change(ep.slowdown.baseline, ep.slowdown.degraded, pace_unit),
        before: ep.slowdown.baseline,
        after: ep.slowdown.degraded,
        after_previous: false,
        sql: sql_aggregate(&ep.slowdown.metric, pace_label, pace_value, w.from, w.to),
    });
    chain.sort_by_key(|c| c.time);
    chain.dedup_by(|a, b| a.entity == b.entity && a.metric == b.metric);
    for i in 1..chain.len() {
        let (p, c) = (&chain[i - 1], &chain[i]);
        chain[i].after_previous = before(p.time, p.uncertainty_ns, c.time, c.uncertainty_ns);
    }
    d.chain = chain;
    d.rule_confidence = honest::confidence(primary.confidence, missing, &d);
    if let Some(top) = d.suspects.first_mut() {
        top.score = d.rule_confidence;
    }
    best_first(&mut d.suspects);
    // A second fault that joined the first and now dominates the waits: the one that changed with
    // the slowdown leads; the bottleneck stays what the job waits on.
    let mut headline = primary.headline.clone();
    let mut promoted = false;
    if let Some(i) = changed_first(&d.suspects, slow_t, ep.slowdown.uncertainty_ns.unwrap_or(0)) {
        let mut first = d.suspects.remove(i);
        let later = &d.suspects[0];
        let gap = later.onset.saturating_sub(first.onset) as f64 / 1e9;
        headline = format!(
            "it changed first, with the slowdown; {} in {} changed {gap:.0} s later and is what the ranks wait \
             on now ({})",
            later.entity, later.domain, primary.headline
        );
        first.evidence.insert(
            0,
            format!(
                "changed first: at {}, with the slowdown; {} ({}) followed {gap:.0} s later",
                super::format::fmt_time(first.onset),
                later.entity,
                later.domain
            ),
        );
        first.score = d.rule_confidence;
        d.root_cause_domain = Some(first.domain.clone());
        promoted = true;
        d.suspects.insert(0, first);
        best_first(&mut d.suspects);
    }
    d.contested_by = rival(&d.suspects).map(|s| s.entity.clone());
    let kind = calibration::VerdictKind::Episode { contested: d.contested_by.is_some() };
    d.confidence = calibration::calibrated(kind, d.rule_confidence);
    d.verdict = verdict_text(&ctx.job.job, &d, &headline);
    d.next_action = action::next_action(ctx, &d);
    let mut fabric: Vec<u32> = Vec::new();
    let mut culprit_host = culprit.as_ref().map(|c| c.host.clone());
    // What changed first leads the report too: its host's lanes and its own fabric series come
    // first (the bottleneck's fabric series follow).
    if let Some(first) = d.suspects.first().filter(|_| promoted) {
        let own = strongest(&scored, &first.entity);
        let domain = first.domain.as_str();
        if matches!(domain, "network" | "compute" | "data_loading")
            && let Some(s) = own.first().filter(|s| !s.meta.host.is_empty())
        {
            culprit_host = Some(s.meta.host.clone());
        }
        if domain == "network" {
            fabric.extend(own.iter().take(3).map(|s| s.meta.id));
        }
    }
    if primary.domain == "network" {
        fabric.extend(primary.series.iter().take(3).map(|s| s.meta.id));
        // The other end of a merged link: its strongest series, so the report shows both ends.
        if let Some(peer) = d.suspects.first().and_then(|s| s.link.as_deref()) {
            fabric.extend(strongest(&scored, peer).iter().take(2).map(|s| s.meta.id));
        }
    }
    let mut seen = std::collections::HashSet::new();
    fabric.retain(|id| seen.insert(*id));
    let hint = LaneHints { culprit_host, fabric };
    (d, hint)
}

/// Merges the two ends of one link into the earlier (better) suspect: a bad cable or
/// transceiver shows at both receivers and backs up the transmit queue of the other end; it is
/// one fault, whose next step is to inspect that link.
/// `fabric`: the entities with a changed fabric-fault series, true when one is a fault source.
fn merge_link_ends(suspects: &mut Vec<Suspect>, ctx: &JobContext, fabric: &HashMap<&str, bool>) {
    let mut i = 0;
    while i < suspects.len() {
        let me = suspects[i].entity.as_str();
        let peer = ctx.links.get(me).filter(|p| match (fabric.get(me), fabric.get(p.as_str())) {
            (Some(a), Some(b)) => *a || *b,
            _ => false,
        });
        let peer = peer.cloned();
        let at = peer.as_ref().and_then(|p| suspects.iter().skip(i + 1).position(|s| &s.entity == p));
        if let (Some(peer), Some(j)) = (peer, at) {
            let other = suspects.remove(i + 1 + j);
            let s = &mut suspects[i];
            let kind = if s.entity.contains('/') || peer.contains('/') { "host link" } else { "switch link" };
            s.evidence.insert(
                1.min(s.evidence.len()),
                format!(
                    "{} and {peer} are the two ends of one {kind} and both changed: one fault, inspect that link \
                     (cable, transceivers)",
                    s.entity
                ),
            );
            s.evidence.extend(other.evidence.into_iter().take(2));
            s.sql.extend(other.sql.into_iter().take(2));
            s.link = Some(peer);
        }
        i += 1;
    }
}

/// Other jobs whose own series on the root-cause entity (or the other end of its link) rose
/// with the slowdown: per-job pool traffic (`job` label on a pool series). Strongest first.
fn aggressors<'a>(scored: &'a [Scored<'a>], ctx: &JobContext, top: &Suspect) -> Vec<(String, &'a Scored<'a>)> {
    let mut out: Vec<(String, &Scored<'_>)> = Vec::new();
    let mut list: Vec<&Scored<'_>> = scored
        .iter()
        .filter(|s| s.meta.entity == top.entity || top.link.as_deref() == Some(s.meta.entity.as_str()))
        .filter(|s| s.changed() && s.feat.m1 > s.feat.m0)
        .filter(|s| s.meta.info.as_ref().is_some_and(|i| i.class == MetricClass::Throughput))
        .collect();
    list.sort_by(|a, b| b.feat.z.total_cmp(&a.feat.z));
    for s in list {
        let Some(job) = s.meta.label("job").filter(|j| *j != ctx.job.job && ctx.index.job(j).is_some()) else {
            continue;
        };
        if !out.iter().any(|(j, _)| j == job) {
            out.push((job.to_string(), s));
        }
    }
    out
}

/// The chosen root cause.
struct Primary<'a> {
    bottleneck: &'static str,
    domain: &'static str,
    entity: String,
    confidence: f64,
    headline: String,
    evidence: Vec<String>,
    /// The entity's changed series, best first.
    series: Vec<&'a Scored<'a>>,
    /// Root-cause links of the chain.
    chain: Vec<ChainLink>,
}

fn verdict_text(job: &str, d: &Episode, headline: &str) -> String {
    let s = &d.slowdown;
    let top = d.suspects.first();
    let pct = if s.baseline > 0.0 { (s.degraded / s.baseline - 1.0) * 100.0 } else { 0.0 };
    let unit = if s.metric == STEP_METRIC { "s" } else { "µs" };
    let what = if s.metric == STEP_METRIC { "step time" } else { "collective time (no step time recorded)" };
    let when = match (d.from_start, d.recovery) {
        (true, Some(r)) => {
            format!(
                "was already slow at the start of the analysed data and recovered at {}",
                super::format::fmt_time(r)
            )
        }
        (true, None) => "was slow from the start of the analysed data".to_string(),
        (false, Some(r)) => format!(
            "slowed down at {} and recovered at {}",
            s.time.map_or("-".to_string(), super::format::fmt_time),
            super::format::fmt_time(r)
        ),
        (false, None) => format!("slowed down at {}", s.time.map_or("-".to_string(), super::format::fmt_time)),
    };
    let num = |v: f64| if unit == "s" { format!("{v:.3}") } else { super::format::fmt_num(v) };
    let mut text = format!(
        "{job} {when} ({what} {} {unit} → {} {unit}, {:+.0} %). Bottleneck: {}. Root cause: {} in {} — {} (confidence {:.2}).",
        num(s.baseline),
        num(s.degraded),
        pct,
        d.bottleneck.as_deref().unwrap_or("none"),
        top.map_or("-", |t| t.entity.as_str()),
        d.root_cause_domain.as_deref().unwrap_or("-"),
        headline,
        d.confidence
    );
    if let (Some(top), Some(r)) = (top, rival(&d.suspects)) {
        text.push_str(&format!(
            " Contested: {} in {} changed {:.0} s {} it with a comparable score — a second fault or a \
             symptom of this one; check which came first.",
            r.entity,
            r.domain,
            r.onset.saturating_sub(top.onset).unsigned_abs() as f64 / 1e9,
            if r.onset < top.onset { "before" } else { "after" }
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockstep_engine::model::SEC;

    fn suspect(domain: &str, onset: i64, uncertainty_ns: i64, score: f64) -> Suspect {
        Suspect {
            domain: domain.to_string(),
            entity: format!("{domain}-entity"),
            onset,
            uncertainty_ns,
            score,
            evidence: Vec::new(),
            sql: Vec::new(),
            link: None,
        }
    }

    /// The rival leads only when it changed with the slowdown and the first suspect well after
    /// it, each beyond the clocks; unknown uncertainties never order, and extreme onsets (from a
    /// file's timestamps) do not overflow.
    #[test]
    fn what_changed_first_leads_only_beyond_the_clocks() {
        let t = 1_000_000 * SEC;
        let later = suspect("storage", t + 100 * SEC, SEC, 0.9);
        let with = suspect("compute", t + 2 * SEC, SEC, 0.8);
        assert_eq!(changed_first(&[later.clone(), with.clone()], t, SEC), Some(1));
        let soon = suspect("storage", t + 20 * SEC, SEC, 0.9);
        assert_eq!(changed_first(&[soon, with.clone()], t, SEC), None, "not late enough");
        let weak = suspect("compute", t + 2 * SEC, SEC, 0.3);
        assert_eq!(changed_first(&[later.clone(), weak], t, SEC), None, "not a rival");
        let unknown = suspect("compute", t + 2 * SEC, UNCERTAINTY_UNKNOWN, 0.8);
        assert_eq!(changed_first(&[later.clone(), unknown], t, SEC), None);
        assert_eq!(changed_first(&[later, with], t, UNCERTAINTY_UNKNOWN), None);
        for (a, b, s) in [(i64::MAX, i64::MIN, i64::MAX - 1), (i64::MIN, i64::MAX, i64::MIN), (i64::MAX, i64::MAX, 0)] {
            let pair = [suspect("storage", a, 0, 0.9), suspect("compute", b, 0, 0.8)];
            let _ = changed_first(&pair, s, 0);
            let _ = rival(&pair);
        }
    }
}
