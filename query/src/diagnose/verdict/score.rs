//! Scoring the analysed series: what counts as changed, peer outlierness, the class weight of
//! a metric (causes over effects), precedence on the corrected timeline, and the best entity
//! among candidates.

use super::*;

/// One analysed series with its scores.
pub(super) struct Scored<'a> {
    pub(super) meta: &'a SeriesMeta,
    pub(super) feat: Features,
    /// Peer outlierness (robust z of this series' z among its peers); None without peers.
    pub(super) peer: Option<f64>,
    /// Generic root-cause score in [0, 1].
    pub(super) score: f64,
}

impl Scored<'_> {
    pub(super) fn changed(&self) -> bool {
        self.feat.z.abs() >= Z_CHANGED
            && (self.feat.rel().abs() >= REL_CHANGED || self.feat.m0 == 0.0)
            && !self.quantised()
    }

    /// A trickle of counted events (errors, drops) whose rate moved by less than one event per
    /// sample: integer counters alternate between adjacent counts, so such a "change" is the
    /// counter's resolution, not a fault.
    pub(super) fn quantised(&self) -> bool {
        self.meta.counts_events()
            && self.feat.m0 > 0.0
            && self.feat.dt.is_finite()
            && (self.feat.m1 - self.feat.m0).abs() * self.feat.dt < 1.0
    }
}

pub(super) fn score_all<'a>(ctx: &'a JobContext, data: &Loaded, k: usize, slow_t: i64) -> Vec<Scored<'a>> {
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
pub(super) fn class_weight(meta: &SeriesMeta) -> f64 {
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

pub(super) fn series_score(s: &Scored<'_>, slow_t: i64) -> f64 {
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
pub(super) fn entity_score(list: &[&Scored<'_>]) -> f64 {
    let best = list.first().map_or(0.0, |s| s.score);
    let rest: f64 = list.iter().skip(1).map(|s| s.score).sum();
    (best + 0.1 * rest).min(1.0)
}

/// The domain a suspect entity's root cause would be in.
pub(super) fn root_domain(meta: &SeriesMeta) -> &'static str {
    match meta.kind {
        EntityKind::Gpu => "compute",
        EntityKind::NicPort | EntityKind::SwitchPort => "network",
        EntityKind::StoragePool => "storage",
        EntityKind::Node if meta.relation == lockstep_engine::metrics::Domain::Storage => "storage",
        EntityKind::Node => "data_loading",
        EntityKind::Job => "compute",
    }
}

pub(super) fn is_port(meta: &SeriesMeta) -> bool {
    matches!(meta.kind, EntityKind::NicPort | EntityKind::SwitchPort)
}

/// Classes that start a fabric fault (drops, retransmits and congestion follow from them).
pub(super) fn is_fault_source(meta: &SeriesMeta) -> bool {
    meta.info.as_ref().is_some_and(|i| {
        matches!(i.class, MetricClass::PhysicalErrors | MetricClass::LinkFlaps | MetricClass::HostPcie)
    })
}

pub(super) fn is_fabric_fault(s: &Scored<'_>) -> bool {
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
pub(super) fn best_entity<'a>(candidates: &[&'a Scored<'a>]) -> Option<(f64, String, Vec<&'a Scored<'a>>)> {
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
pub(super) fn after_beyond_doubt(a: Onset, b: Onset) -> bool {
    a.uncertainty != UNCERTAINTY_UNKNOWN
        && b.uncertainty != UNCERTAINTY_UNKNOWN
        && before(b.t, b.uncertainty, a.prev, a.uncertainty)
}
