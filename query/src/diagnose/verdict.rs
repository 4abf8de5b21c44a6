//! From per-series features to the verdict: peer outlierness, the step-time decomposition, the
//! bottleneck, the root-cause entity, suspects and the evidence chain.
//! Over 600 lines: the verdict's steps share the scored series and the evidence builder; the
//! per-cause rules are in `verdict/causes.rs`.

use std::collections::HashMap;

use lockstep_engine::clock::before;
use lockstep_engine::metrics::{Direction, EntityKind, MetricClass, names};

use super::analyze::{Features, Onset, Windows, features};
use super::context::{JobContext, SeriesMeta};
use super::load::{Loaded, STEP_METRIC, across_median};
use super::signal::Signal;
use super::stats::{mad, median};
use super::text::{fmt_change, sql_aggregate, sql_series};
use super::{ChainLink, Decomposition, DiagnoseOptions, Diagnosis, Episode, Lane, Suspect, UNCERTAINTY_UNKNOWN};

mod causes;
mod honest;

use super::assoc;

use causes::{network, storage_or_loading, straggler};

use lockstep_engine::model::SEC;
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

/// One analysed series with its scores.
struct Scored<'a> {
    meta: &'a SeriesMeta,
    feat: Features,
    /// Peer outlierness (robust z of this series' z among its peers); None without peers.
    peer: Option<f64>,
    /// Generic root-cause score in [0, 1].
    score: f64,
}

impl Scored<'_> {
    fn changed(&self) -> bool {
        self.feat.z.abs() >= Z_CHANGED
            && (self.feat.rel().abs() >= REL_CHANGED || self.feat.m0 == 0.0)
            && !self.quantised()
    }

    /// A trickle of counted events (errors, drops) whose rate moved by less than one event per
    /// sample: integer counters alternate between adjacent counts, so such a "change" is the
    /// counter's resolution, not a fault.
    fn quantised(&self) -> bool {
        let counted = self.meta.info.as_ref().is_some_and(|i| {
            matches!(
                i.class,
                MetricClass::PhysicalErrors | MetricClass::LinkFlaps | MetricClass::Drops | MetricClass::LossRetransmit
            )
        });
        counted
            && self.meta.is_counter()
            && self.feat.m0 > 0.0
            && self.feat.dt.is_finite()
            && (self.feat.m1 - self.feat.m0).abs() * self.feat.dt < 1.0
    }
}

/// What the report lanes of an episode highlight.
#[derive(Default)]
struct LaneHints {
    culprit_host: Option<String>,
    /// Series ids of the suspect fabric counters.
    fabric: Vec<u32>,
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
        clock: data.clock.clone(),
        series: ctx.series.len(),
        samples: data.samples,
        elapsed_ms: 0,
        lanes: Vec::new(),
    };
    if data.episodes.is_empty() {
        honest::without_episode(&mut d, ctx, data, &missing);
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
    let main = honest::main_episode(&d.episodes, ctx.to);
    d.main = d.episodes[main].clone();
    d.status = if d.main.from_start { "slow_from_start" } else { "slowdown" }.to_string();
    if d.main.from_start || d.main.slowdown.time.is_some_and(|t| t < ctx.from) {
        let from = honest::earlier_from(ctx, data);
        d.suggested_from = (from < ctx.from).then_some(from);
        let hint = match d.suggested_from {
            Some(t) => format!(" Slow from the start of the window: try --from {}.", super::text::fmt_rfc3339(t)),
            None => " Slow from the start of the job's data: no healthy time before it.".to_string(),
        };
        d.main.verdict.push_str(&hint);
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
    let shared = matches!(primary.domain, "storage" | "network") && primary.entity != ctx.job.job;
    if shared {
        d.other_jobs = ctx.jobs_sharing(&primary.entity, slow_t, ep.recovery.unwrap_or(ctx.to));
    }

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
    if !d.other_jobs.is_empty() {
        evidence.push(format!(
            "other jobs using {} during this episode (aggressor if its traffic rose, otherwise also affected): {}",
            primary.entity,
            d.other_jobs.join(", ")
        ));
    }
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
    });
    let cap = primary.confidence * 0.9;
    for (score, entity, list) in others.into_iter().take(MAX_SUSPECTS - 1) {
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
        });
    }

    // The chain, in corrected-time order, ordered only as far as the clocks allow.
    let mut chain = primary.chain;
    chain.extend(ev.take());
    let (pace_label, pace_unit) =
        if ep.slowdown.metric == STEP_METRIC { ("job", "s") } else { ("slurm_job_id", "µs") };
    let pace_value = if pace_label == "job" {
        ctx.job.job.clone()
    } else {
        ctx.job.slurm_job_id.clone().unwrap_or_else(|| ctx.job.job.clone())
    };
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
        sql: sql_aggregate(&ep.slowdown.metric, pace_label, &pace_value, w.from, w.to),
    });
    chain.sort_by_key(|c| c.time);
    chain.dedup_by(|a, b| a.entity == b.entity && a.metric == b.metric);
    for i in 1..chain.len() {
        let (p, c) = (&chain[i - 1], &chain[i]);
        chain[i].after_previous = before(p.time, p.uncertainty_ns, c.time, c.uncertainty_ns);
    }
    d.chain = chain;
    d.confidence = honest::confidence(primary.confidence, missing, &d);
    if let Some(top) = d.suspects.first_mut() {
        top.score = d.confidence;
    }
    d.verdict = verdict_text(&ctx.job.job, &d, &primary.headline);
    let hint = LaneHints {
        culprit_host: culprit.as_ref().map(|c| c.host.clone()),
        fabric: if primary.domain == "network" {
            primary.series.iter().take(3).map(|s| s.meta.id).collect()
        } else {
            Vec::new()
        },
    };
    (d, hint)
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

/// The straggler rank: its host and GPU.
#[derive(Debug, Clone)]
struct Culprit {
    rank: String,
    host: String,
    gpu: Option<String>,
}

impl Culprit {
    /// `rank 5`, or `the rank on node-03/gpu5` when no series links its rank.
    fn display(&self) -> String {
        match (&self.rank, &self.gpu) {
            (r, Some(g)) if r == "?" => {
                format!("the rank on {}", lockstep_engine::metrics::entity::gpu_name(&self.host, g))
            }
            (r, None) if r == "?" => format!("a rank on {}", self.host),
            (r, _) => format!("rank {r}"),
        }
    }
}

fn score_all<'a>(ctx: &'a JobContext, data: &Loaded, k: usize, slow_t: i64) -> Vec<Scored<'a>> {
    let mut out: Vec<Scored<'a>> = ctx
        .series
        .iter()
        .zip(&data.series)
        .filter_map(|(meta, s)| {
            s.feat.get(k).copied().flatten().map(|feat| Scored { meta, feat, peer: None, score: 0.0 })
        })
        .collect();
    let mut groups: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, s) in out.iter().enumerate() {
        groups.entry(s.meta.group.as_str()).or_default().push(i);
    }
    let mut scratch = Vec::new();
    for members in groups.values() {
        if members.len() < 3 {
            continue;
        }
        let zs: Vec<f64> = members.iter().map(|&i| out[i].feat.z).collect();
        let med = median(zs.iter().copied(), &mut scratch);
        let spread = mad(zs.iter().copied(), med, &mut scratch);
        for &i in members {
            out[i].peer = Some((out[i].feat.z - med) / (spread + 1.0));
        }
    }
    for s in &mut out {
        s.score = series_score(s, slow_t);
    }
    out
}

/// How strongly a metric class points at a root cause (effects such as throughput score 0).
fn class_weight(meta: &SeriesMeta) -> f64 {
    let Some(info) = &meta.info else { return 0.2 };
    match info.class {
        MetricClass::PhysicalErrors => 1.0,
        MetricClass::LinkFlaps => 0.9,
        MetricClass::HostPcie => 0.9,
        MetricClass::Drops => 0.8,
        MetricClass::Throttle | MetricClass::Temperature | MetricClass::DeviceErrors => 0.8,
        MetricClass::CpuPressure => 0.8,
        MetricClass::Congestion => match info.direction {
            Some(Direction::NotificationPoint) => 0.75,
            Some(Direction::ReactionPoint) => 0.4,
            _ => 0.5,
        },
        MetricClass::LossRetransmit => 0.6,
        MetricClass::Latency | MetricClass::QueueDepth => 0.6,
        MetricClass::Clock => 0.6,
        MetricClass::Wait | MetricClass::Utilization | MetricClass::Power => 0.3,
        MetricClass::LinkState => 0.7,
        MetricClass::Throughput | MetricClass::StepTime => 0.0,
    }
}

fn series_score(s: &Scored<'_>, slow_t: i64) -> f64 {
    if !s.changed() {
        return 0.0;
    }
    let mag = 1.0 - (-s.feat.z.abs() / 20.0).exp();
    let peer = match s.peer {
        Some(p) => 1.0 - (-p.abs() / 5.0).exp(),
        None => 0.5,
    };
    let prec = match s.feat.onset {
        Some(o) if o.t <= slow_t || !before(slow_t, 0, o.prev, o.uncertainty) => 1.0,
        Some(_) => 0.5,
        None => 0.7,
    };
    class_weight(s.meta) * (0.4 * mag + 0.6 * peer) * prec
}

/// An entity's score from its changed series (best first): the best plus a little of the rest.
fn entity_score(list: &[&Scored<'_>]) -> f64 {
    let best = list.first().map_or(0.0, |s| s.score);
    let rest: f64 = list.iter().skip(1).map(|s| s.score).sum();
    (best + 0.1 * rest).min(1.0)
}

/// The domain a suspect entity's root cause would be in.
fn root_domain(meta: &SeriesMeta) -> &'static str {
    match meta.kind {
        EntityKind::Gpu => "compute",
        EntityKind::NicPort | EntityKind::SwitchPort => "network",
        EntityKind::StoragePool => "storage",
        EntityKind::Node if meta.relation == lockstep_engine::metrics::Domain::Storage => "storage",
        EntityKind::Node => "data_loading",
        EntityKind::Job => "compute",
    }
}

/// Splits the step-time rise into input wait, transfer and straggler wait.
/// The rise (s) of the pure transfer time: per grid slot the fastest rank's all-reduce time
/// (the rank that entered last waits for nobody, so its time is the transfer), then the median
/// after the slowdown minus the median of the baseline. Per slot, not per rank: when a
/// different rank is late every step (bursty input waits), every rank's own median includes
/// waiting, but the fastest rank of each step does not. None with fewer than 2 ranks.
fn fastest_transfer_rise(ctx: &JobContext, data: &Loaded, w: Windows) -> Option<f64> {
    let execs: Vec<&[f32]> = ctx
        .series
        .iter()
        .zip(&data.series)
        .filter(|(m, _)| m.metric() == EXEC_METRIC)
        .map(|(_, s)| s.grid.as_slice())
        .collect();
    if execs.len() < 2 {
        return None;
    }
    let quorum = (execs.len() / 2).max(2);
    let (mut before, mut after) = (Vec::new(), Vec::new());
    for k in 0..data.grid.slots {
        let t = data.grid.start + k as i64 * data.grid.step;
        let bucket = if t >= w.from && t < w.base_end {
            &mut before
        } else if t >= w.slowdown && t < w.to {
            &mut after
        } else {
            continue;
        };
        let present = execs.iter().filter_map(|g| g.get(k).copied()).filter(|v| v.is_finite());
        let (n, min) = present.fold((0usize, f64::INFINITY), |(n, m), v| (n + 1, m.min(f64::from(v))));
        if n >= quorum {
            bucket.push(min);
        }
    }
    let mut scratch = Vec::new();
    let rise = (median(after, &mut scratch) - median(before, &mut scratch)) / 1e6;
    rise.is_finite().then_some(rise)
}

fn decompose(
    scored: &[Scored<'_>],
    pace_rise: f64,
    fastest: Option<f64>,
    assoc: &assoc::Assoc,
) -> (Decomposition, Option<Culprit>) {
    let mut scratch = Vec::new();
    let waits: Vec<&Scored<'_>> = scored.iter().filter(|s| s.meta.metric() == WAIT_METRIC).collect();
    let execs: Vec<&Scored<'_>> = scored.iter().filter(|s| s.meta.metric() == EXEC_METRIC).collect();
    let input_wait = median(waits.iter().map(|s| s.feat.mean1 - s.feat.mean0), &mut scratch);
    let rises: Vec<f64> = execs.iter().map(|s| (s.feat.m1 - s.feat.m0) / 1e6).collect();
    let min_rise = rises.iter().copied().fold(f64::INFINITY, f64::min);
    let med_rise = median(rises.iter().copied(), &mut scratch);
    let culprit = execs.iter().zip(&rises).min_by(|a, b| a.1.total_cmp(b.1)).map(|(s, _)| {
        let who = assoc.worker(s.meta);
        Culprit { rank: who.rank.unwrap_or_else(|| "?".to_string()), host: who.host, gpu: who.gpu }
    });
    // Transfer: the per-step fastest rank's rise (falls back to the smallest per-rank rise);
    // straggler wait: what the typical rank waits beyond that.
    let transfer = fastest.map_or(min_rise, |f| f.min(med_rise));
    let (transfer, straggler) =
        if transfer.is_finite() { (transfer, (med_rise - transfer).max(0.0)) } else { (0.0, 0.0) };
    let mut sorted = rises.clone();
    sorted.sort_by(f64::total_cmp);
    let isolation = match sorted.as_slice() {
        [a, b, ..] if med_rise - a > 1e-9 => ((b - a) / (med_rise - a)).clamp(0.0, 1.0),
        _ => 0.0,
    };
    let wait_p90 = super::stats::quantile(waits.iter().map(|s| s.feat.mean1 - s.feat.mean0), 0.9, &mut scratch);
    let dec = Decomposition {
        step: pace_rise,
        input_wait: if input_wait.is_finite() { input_wait } else { 0.0 },
        transfer,
        straggler: if straggler.is_finite() { straggler } else { 0.0 },
        straggler_rank: culprit.as_ref().map(|c| if c.rank == "?" { c.display() } else { c.rank.clone() }),
        straggler_isolation: isolation,
        input_wait_p90: if wait_p90.is_finite() { wait_p90 } else { 0.0 },
    };
    (dec, culprit)
}

fn is_port(meta: &SeriesMeta) -> bool {
    matches!(meta.kind, EntityKind::NicPort | EntityKind::SwitchPort)
}

/// Classes that start a fabric fault (drops, retransmits and congestion follow from them).
fn is_fault_source(meta: &SeriesMeta) -> bool {
    meta.info.as_ref().is_some_and(|i| {
        matches!(i.class, MetricClass::PhysicalErrors | MetricClass::LinkFlaps | MetricClass::HostPcie)
    })
}

fn is_fabric_fault(s: &Scored<'_>) -> bool {
    is_port(s.meta)
        && s.changed()
        && s.feat.m1 > s.feat.m0
        && s.meta.info.as_ref().is_some_and(|i| {
            matches!(
                i.class,
                MetricClass::PhysicalErrors
                    | MetricClass::LinkFlaps
                    | MetricClass::Drops
                    | MetricClass::HostPcie
                    | MetricClass::LossRetransmit
                    | MetricClass::Congestion
            )
        })
}

/// Ranks entities among `candidates` by [`entity_score`] (ties: earlier onset, then name).
fn best_entity<'a>(candidates: &[&'a Scored<'a>]) -> Option<(f64, String, Vec<&'a Scored<'a>>)> {
    let mut by: HashMap<&str, Vec<&'a Scored<'a>>> = HashMap::new();
    for s in candidates {
        by.entry(s.meta.entity.as_str()).or_default().push(s);
    }
    let mut ranked: Vec<(f64, i64, String, Vec<&'a Scored<'a>>)> = by
        .into_iter()
        .map(|(e, mut list)| {
            list.sort_by(|a, b| b.score.total_cmp(&a.score));
            let onset = list.iter().filter_map(|s| s.feat.onset.map(|o| o.t)).min().unwrap_or(i64::MAX);
            // Tie-break between the two ends of one bad cable: the stronger absolute signal.
            let strength: f64 = list
                .iter()
                .filter(|s| class_weight(s.meta) >= 0.9)
                .map(|s| (s.feat.m1 - s.feat.m0).abs().ln_1p())
                .sum::<f64>()
                * 0.05;
            (entity_score(&list) + strength, onset, e.to_string(), list)
        })
        .collect();
    ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    ranked.into_iter().next().map(|(s, _, e, l)| (s.min(1.0), e, l))
}

/// Whether onset `a` is after onset `b` beyond the clock uncertainty and the sampling
/// resolution (a's previous sample is after b).
fn after_beyond_doubt(a: Onset, b: Onset) -> bool {
    a.uncertainty != UNCERTAINTY_UNKNOWN
        && b.uncertainty != UNCERTAINTY_UNKNOWN
        && before(b.t, b.uncertainty, a.prev, a.uncertainty)
}

/// A chain link from one series.
fn link(s: &Scored<'_>, w: Windows) -> ChainLink {
    let o = s.feat.onset;
    ChainLink {
        time: o.map_or(w.slowdown, |o| o.t),
        uncertainty_ns: o.map_or(0, |o| o.uncertainty),
        domain: root_domain_or_metric(s.meta),
        entity: s.meta.entity.clone(),
        metric: series_label(s.meta),
        change: fmt_change(s.feat.m0, s.feat.m1, &unit(s.meta)),
        before: s.feat.m0,
        after: s.feat.m1,
        after_previous: false,
        sql: sql_series(s.meta, w.from, w.to),
    }
}

fn root_domain_or_metric(meta: &SeriesMeta) -> String {
    if is_port(meta) {
        return "network".to_string();
    }
    meta.domain.as_str().to_string()
}

/// The metric with its distinguishing non-entity labels.
pub(crate) fn series_label(meta: &SeriesMeta) -> String {
    let extra: Vec<String> = meta
        .key
        .labels
        .iter()
        .filter(|(k, _)| matches!(k.as_str(), "quantile" | "mode" | "job" | "cpu" | "rank"))
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    if extra.is_empty() { meta.metric().to_string() } else { format!("{}{{{}}}", meta.metric(), extra.join(",")) }
}

fn unit(meta: &SeriesMeta) -> String {
    let u = meta.info.as_ref().map_or("", |i| i.unit.as_str());
    if meta.is_counter() { format!("{u}/s") } else { u.to_string() }
}

fn describe(s: &Scored<'_>) -> String {
    let mut text =
        format!("{} {} {}", s.meta.entity, series_label(s.meta), fmt_change(s.feat.m0, s.feat.m1, &unit(s.meta)));
    if s.feat.z.abs() >= super::analyze::Z_CAP {
        text.push_str(" (from a flat baseline)");
    } else {
        text.push_str(&format!(" ({:+.1} robust sd)", s.feat.z));
    }
    if let Some(p) = s.peer {
        text.push_str(&format!(", {p:+.1} against its peers"));
    }
    if let Some(o) = s.feat.onset {
        text.push_str(&format!(", onset {}", super::text::fmt_time(o.t)));
        if o.uncertainty == UNCERTAINTY_UNKNOWN {
            text.push_str(" (clock uncertainty unknown)");
        } else {
            text.push_str(&format!(" ± {}", super::text::fmt_duration(o.uncertainty)));
        }
    }
    text
}

/// Job-wide evidence links (aggregates over ranks or GPUs) and single-series links.
struct Evidence<'a> {
    ctx: &'a JobContext,
    data: &'a Loaded,
    w: Windows,
    /// Clock uncertainty of the episode's onset (aggregates mix all job hosts).
    uncertainty: i64,
    links: Vec<ChainLink>,
}

impl<'a> Evidence<'a> {
    fn new(ctx: &'a JobContext, data: &'a Loaded, w: Windows, uncertainty: i64) -> Self {
        Evidence { ctx, data, w, uncertainty, links: Vec::new() }
    }

    fn take(&mut self) -> Vec<ChainLink> {
        std::mem::take(&mut self.links)
    }

    fn series_link(&mut self, s: &Scored<'_>) {
        self.links.push(link(s, self.w));
    }

    /// A link for the median of `metric` over the job's series, if it changed.
    fn aggregate(&mut self, domain: &str, metric: &str, how: &str) {
        let idx: Vec<usize> = (0..self.ctx.series.len()).filter(|&i| self.ctx.series[i].metric() == metric).collect();
        if idx.is_empty() {
            return;
        }
        let grids: Vec<Vec<f32>> = idx.iter().map(|&i| self.data.series[i].grid.clone()).collect();
        let points = across_median(&grids, &self.data.grid);
        let signal = Signal { t: points.iter().map(|p| p.0).collect(), v: points.iter().map(|p| p.1).collect() };
        let meta = &self.ctx.series[idx[0]];
        let Some(f) = features(&signal, &self.w, meta, self.data_timeline_free()) else { return };
        let changed = f.z.abs() >= Z_CHANGED && f.rel().abs() >= 0.05;
        let (Some(o), true) = (f.onset, changed) else { return };
        let hosts: Vec<&str> = idx.iter().map(|&i| self.ctx.series[i].host.as_str()).collect();
        let _ = hosts;
        let (label, value) = if metric == EXEC_METRIC {
            ("slurm_job_id", self.ctx.job.slurm_job_id.clone().unwrap_or_else(|| self.ctx.job.job.clone()))
        } else if metric.starts_with("DCGM") {
            ("", String::new())
        } else {
            ("job", self.ctx.job.job.clone())
        };
        let sql = if label.is_empty() {
            super::text::sql_gpu_aggregate(metric, &self.ctx.job.job, self.w.from, self.w.to)
        } else {
            sql_aggregate(metric, label, &value, self.w.from, self.w.to)
        };
        let u = meta.info.as_ref().map_or("", |i| i.unit.as_str()).to_string();
        self.links.push(ChainLink {
            time: o.t,
            uncertainty_ns: self.uncertainty,
            domain: domain.to_string(),
            entity: self.ctx.job.job.clone(),
            metric: format!("{metric} ({how})"),
            change: fmt_change(f.m0, f.m1, &u),
            before: f.m0,
            after: f.m1,
            after_previous: false,
            sql,
        });
    }

    /// Aggregates mix hosts: their uncertainty is taken from the slowdown's (all job hosts).
    fn data_timeline_free(&self) -> super::load::Timeline<'static> {
        super::load::Timeline::raw()
    }
}

fn verdict_text(job: &str, d: &Episode, headline: &str) -> String {
    let s = &d.slowdown;
    let top = d.suspects.first();
    let pct = if s.baseline > 0.0 { (s.degraded / s.baseline - 1.0) * 100.0 } else { 0.0 };
    let unit = if s.metric == STEP_METRIC { "s" } else { "µs" };
    let what = if s.metric == STEP_METRIC { "step time" } else { "collective time (no step time recorded)" };
    let when = match (d.from_start, d.recovery) {
        (true, Some(r)) => {
            format!("was already slow at the start of the analysed data and recovered at {}", super::text::fmt_time(r))
        }
        (true, None) => "was slow from the start of the analysed data".to_string(),
        (false, Some(r)) => format!(
            "slowed down at {} and recovered at {}",
            s.time.map_or("-".to_string(), super::text::fmt_time),
            super::text::fmt_time(r)
        ),
        (false, None) => format!("slowed down at {}", s.time.map_or("-".to_string(), super::text::fmt_time)),
    };
    let num = |v: f64| if unit == "s" { format!("{v:.3}") } else { super::text::fmt_num(v) };
    format!(
        "{job} {when} ({what} {} {unit} → {} {unit}, {:+.0} %). Bottleneck: {}. Root cause: {} in {} — {} (confidence {:.2}).",
        num(s.baseline),
        num(s.degraded),
        pct,
        d.bottleneck.as_deref().unwrap_or("none"),
        top.map_or("-", |t| t.entity.as_str()),
        d.root_cause_domain.as_deref().unwrap_or("-"),
        headline,
        d.confidence
    )
}

/// Report lanes: step time, GPU activity, collective time, fabric counters of the suspect path,
/// storage latency, data-loader wait.
fn lanes(ctx: &JobContext, data: &Loaded, culprit_host: Option<&str>, fabric: &[&SeriesMeta]) -> Vec<Lane> {
    let mut out = vec![Lane {
        group: "step time".into(),
        label: format!("{STEP_METRIC} (median over ranks)"),
        unit: "s".into(),
        times: data.step_points.iter().map(|p| p.0).collect(),
        values: data.step_points.iter().map(|p| p.1).collect(),
    }];
    let agg = |group: &str, metric: &str, filter: &dyn Fn(&SeriesMeta) -> bool, label: String| -> Option<Lane> {
        let grids: Vec<Vec<f32>> = ctx
            .series
            .iter()
            .zip(&data.series)
            .filter(|(m, _)| m.metric() == metric && filter(m))
            .map(|(_, s)| s.grid.clone())
            .collect();
        if grids.is_empty() {
            return None;
        }
        let pts = across_median(&grids, &data.grid);
        let unit = ctx
            .series
            .iter()
            .find(|m| m.metric() == metric)
            .and_then(|m| m.info.as_ref())
            .map_or(String::new(), |i| i.unit.clone());
        Some(Lane {
            group: group.into(),
            label,
            unit,
            times: pts.iter().map(|p| p.0).collect(),
            values: pts.iter().map(|p| p.1).collect(),
        })
    };
    let all = |_: &SeriesMeta| true;
    out.extend(agg("GPU activity", names::SM_ACTIVE, &all, "SM active (median over GPUs)".into()));
    out.extend(agg("GPU activity", names::GPU_UTIL, &all, "GPU util % (median over GPUs)".into()));
    out.extend(agg("collective time", EXEC_METRIC, &all, "all-reduce exec time (median over ranks)".into()));
    if let Some(h) = culprit_host {
        let on = |m: &SeriesMeta| m.host == h;
        out.extend(agg("collective time", EXEC_METRIC, &on, format!("all-reduce exec time ({h})")));
    }
    for meta in fabric {
        if let Some(i) = ctx.series.iter().position(|m| m.id == meta.id) {
            let pts: Vec<(i64, f64)> = data.series[i]
                .grid
                .iter()
                .enumerate()
                .filter(|(_, v)| v.is_finite())
                .map(|(k, v)| (data.grid.time(k), f64::from(*v)))
                .collect();
            out.push(Lane {
                group: "fabric (suspect path)".into(),
                label: format!("{} {}", meta.entity, series_label(meta)),
                unit: unit(meta),
                times: pts.iter().map(|p| p.0).collect(),
                values: pts.iter().map(|p| p.1).collect(),
            });
        }
    }
    for q in ["0.5", "0.99"] {
        let f = move |m: &SeriesMeta| m.label("quantile") == Some(q);
        out.extend(agg(
            "storage latency",
            names::STORAGE_READ_LATENCY,
            &f,
            format!("pool read latency p{}", if q == "0.5" { "50" } else { "99" }),
        ));
    }
    out.extend(agg("data-loader wait", WAIT_METRIC, &all, "data-loader wait (median over ranks)".into()));
    if let Some(h) = culprit_host {
        let on = |m: &SeriesMeta| m.host == h;
        out.extend(agg("data-loader wait", WAIT_METRIC, &on, format!("data-loader wait ({h})")));
    }
    out.retain(|l| !l.times.is_empty());
    let _ = SEC;
    out
}
