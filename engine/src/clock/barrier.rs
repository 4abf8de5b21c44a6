//! Fitting: one host ([`fit_host`]: observations → segmentation (`fit.rs`) → model
//! (`segments.rs`)), and a whole set with refinement from collective barriers ([`fit_set`]).
//!
//! Assumption (documented in `docs/clock.md`): all ranks of one collective instance leave it
//! within `barrier_exit_spread_ns` of reference time of each other (a collective is a barrier:
//! nobody leaves before the last rank entered, and the release reaches every rank within that
//! window). If host `h`'s exit is known to lie in `[lo_h, hi_h]` (corrected time ± uncertainty),
//! every rank's exit lies in `[max_h lo_h − ε, min_h hi_h + ε]`. Where that is narrower than a
//! host's own interval it becomes a direct offset observation for that host at its local end
//! time; a host without any sync data gets a model from such observations alone. Derived
//! observations only tighten pieces that stay feasible; they never move steps or knots, so one
//! straggling rank cannot break a model. An instance whose intervals cannot all lie within `ε`
//! of each other is ignored.

use std::collections::{BTreeMap, BTreeSet};

use super::config::FitConfig;
use super::fit::{Band, HostFit, host_bands, segment};
use super::model::{ClockModel, ClockSet, InputWatermark, clamp_i64};
use super::segments::assemble;
use super::{BarrierEvent, OffsetObservation, SyncExchange, UNCERTAINTY_UNKNOWN, sync_error};
use crate::error::Result;

/// Fits one host's model from its exchanges and direct offset observations.
///
/// Errors ([`crate::Error::ClockSync`]): no data at all; an observation of another host; an
/// invalid observation (see [`SyncExchange::validate`], [`OffsetObservation::validate`]);
/// an invalid config. Exact duplicate observations are counted once. The reference host
/// (`cfg.reference_host`) gets [`ClockModel::identity`] whatever its data.
pub fn fit_host(
    host: &str,
    exchanges: &[SyncExchange],
    direct: &[OffsetObservation],
    cfg: &FitConfig,
) -> Result<ClockModel> {
    cfg.validate()?;
    if cfg.reference_host.as_deref() == Some(host) {
        return Ok(ClockModel::identity(host));
    }
    let bands = host_bands(host, exchanges, direct, cfg)?;
    if bands.is_empty() {
        return Err(sync_error(host, "no clock sync data (no exchanges and no direct offsets)"));
    }
    Ok(assemble(host, &segment(bands, cfg), cfg))
}

/// One rank of an instance: host, local end time, and its exit interval if the host has a model.
type Member<'a> = (&'a str, i64, Option<(i128, i128)>);

/// Fits every host that has data, then refines with barriers (`cfg.barrier_passes` rounds).
///
/// The result has version 0 and the input counts as its watermark (the registry renumbers it).
/// Errors: any invalid observation or config ([`crate::Error::ClockSync`]); the same host and
/// instance with two different end times.
pub fn fit_set(
    exchanges: &[SyncExchange],
    offsets: &[OffsetObservation],
    barriers: &[BarrierEvent],
    cfg: &FitConfig,
) -> Result<ClockSet> {
    cfg.validate()?;
    let reference = cfg.reference_host.as_deref();
    let mut by_host: BTreeMap<&str, (Vec<SyncExchange>, Vec<OffsetObservation>)> = BTreeMap::new();
    for e in exchanges {
        by_host.entry(e.host.as_str()).or_default().0.push(e.clone());
    }
    for o in offsets {
        by_host.entry(o.host.as_str()).or_default().1.push(o.clone());
    }
    let mut fits: BTreeMap<String, HostFit> = BTreeMap::new();
    for (host, (ex, off)) in &by_host {
        let bands = host_bands(host, ex, off, cfg)?;
        if Some(*host) != reference && !bands.is_empty() {
            fits.insert(host.to_string(), segment(bands, cfg));
        }
    }
    let mut models: BTreeMap<String, ClockModel> = fits.iter().map(|(h, f)| (h.clone(), assemble(h, f, cfg))).collect();
    let watermark = InputWatermark {
        exchanges: exchanges.len() as u64,
        offsets: offsets.len() as u64,
        barriers: barriers.len() as u64,
    };
    // Hosts known only through barriers: their derived bands, re-segmented every round.
    let mut barrier_only: BTreeMap<String, Vec<Band>> = BTreeMap::new();
    for _ in 0..cfg.barrier_passes {
        if barriers.is_empty() {
            break;
        }
        let set = ClockSet::new(0, cfg.clone(), watermark, models.clone());
        let derived = barrier_observations(&set, barriers, cfg)?;
        let mut touched: BTreeSet<String> = BTreeSet::new();
        for o in &derived {
            if Some(o.host.as_str()) == reference {
                continue;
            }
            let band = Band::direct(o.local_time, o.offset_ns, o.uncertainty_ns);
            if let Some(fit) = fits.get_mut(&o.host) {
                if fit.add_soft(&band) {
                    touched.insert(o.host.clone());
                }
            } else {
                barrier_only.entry(o.host.clone()).or_default().push(band);
                touched.insert(o.host.clone());
            }
        }
        if touched.is_empty() {
            break;
        }
        for host in touched {
            let model = match (fits.get(&host), barrier_only.get(&host)) {
                (Some(fit), _) => assemble(&host, fit, cfg),
                (None, Some(bands)) => assemble(&host, &segment(bands.clone(), cfg), cfg),
                (None, None) => continue,
            };
            models.insert(host, model);
        }
    }
    Ok(ClockSet::new(0, cfg.clone(), watermark, models))
}

/// Derives direct offset observations from barrier events under the current models (see the
/// module doc). Only observations that narrow a host's interval are returned.
///
/// Errors: an invalid event; the same host and instance with two different end times.
pub fn barrier_observations(
    set: &ClockSet,
    events: &[BarrierEvent],
    cfg: &FitConfig,
) -> Result<Vec<OffsetObservation>> {
    let mut instances: BTreeMap<u64, BTreeMap<&str, i64>> = BTreeMap::new();
    for e in events {
        e.validate()?;
        let members = instances.entry(e.instance).or_default();
        if let Some(&prev) = members.get(e.host.as_str())
            && prev != e.local_end
        {
            return Err(sync_error(
                &e.host,
                format!("collective instance {} has two end times: {prev} and {}", e.instance, e.local_end),
            ));
        }
        members.insert(e.host.as_str(), e.local_end);
    }
    let eps = i128::from(cfg.barrier_exit_spread_ns);
    let mut out = Vec::new();
    for members in instances.values() {
        if members.len() < 2 {
            continue;
        }
        let intervals: Vec<Member<'_>> = members
            .iter()
            .map(|(&host, &local)| {
                let (t, u) = set.correct(host, local);
                let known =
                    (u != UNCERTAINTY_UNKNOWN).then(|| (i128::from(t) - i128::from(u), i128::from(t) + i128::from(u)));
                (host, local, known)
            })
            .collect();
        let known = intervals.iter().filter_map(|(_, _, k)| *k);
        let (Some(max_lo), Some(min_hi)) = (known.clone().map(|k| k.0).max(), known.map(|k| k.1).min()) else {
            continue;
        };
        if max_lo - min_hi > eps {
            continue; // no window of width ε meets every interval: the assumption failed here
        }
        let (window_lo, window_hi) = (max_lo - eps, min_hi + eps);
        for (host, local, own) in intervals {
            let (lo, hi) = match own {
                Some((lo, hi)) => (lo.max(window_lo), hi.min(window_hi)),
                None => (window_lo, window_hi),
            };
            if own == Some((lo, hi)) || lo > hi {
                continue;
            }
            // θ = local − T with T ∈ [lo, hi].
            let (theta_lo, theta_hi) = (i128::from(local) - hi, i128::from(local) - lo);
            let offset = (theta_lo + theta_hi).div_euclid(2);
            let half = (theta_hi - offset).max(offset - theta_lo);
            out.push(OffsetObservation {
                host: host.to_string(),
                local_time: local,
                offset_ns: clamp_i64(offset),
                uncertainty_ns: clamp_i64(half),
            });
        }
    }
    Ok(out)
}
