//! The diagnosis as a human reads it in a terminal: status, episodes, the decomposition, the
//! chain, the verdict with its next action, the suspects (both ends of one link as one), the
//! blast radius and the SQL that reproduces each piece of evidence.

use std::fmt::Write as _;

use lockstep_query::diagnose::format::{fmt_duration, fmt_num, fmt_rfc3339, fmt_time};
use lockstep_query::diagnose::{ClockMode, Comparison, Diagnosis, Episode};

/// The text report: the chain, the verdict, the suspects and the SQL for each piece of evidence.
pub fn render(d: &Diagnosis) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "job {}  window {} .. {}", d.job, fmt_rfc3339(d.from), fmt_rfc3339(d.to));
    let _ = writeln!(
        o,
        "timeline: {} (clock models v{}, {}/{} hosts modelled)",
        match d.clock.mode {
            ClockMode::Corrected => "corrected reference time",
            ClockMode::Raw => "RAW collector timestamps (uncorrected)",
        },
        d.clock.version,
        d.clock.hosts_with_model,
        d.clock.hosts
    );
    let _ = writeln!(o, "status: {} (confidence {:.2})", d.status, d.confidence);
    for m in &d.missing {
        let _ = writeln!(o, "missing: {m}");
    }
    if let Some(t) = d.suggested_from {
        let _ = writeln!(o, "the window starts inside the slowdown: try --from {}", fmt_rfc3339(t));
    }
    if d.slowdown.time.is_none() {
        let _ = writeln!(o, "\nverdict: {}", d.verdict);
        let _ = writeln!(o, "next action: {}", d.next_action);
        return o;
    }
    let _ = writeln!(o, "\nslowdown episodes ({}):", d.episodes.len());
    for (i, e) in d.episodes.iter().enumerate() {
        let main = if e.start() == d.main.start() { "*" } else { " " };
        let end = e.recovery.map_or("(not recovered)".to_string(), fmt_time);
        let pct =
            if e.slowdown.baseline > 0.0 { (e.slowdown.degraded / e.slowdown.baseline - 1.0) * 100.0 } else { 0.0 };
        let top = e.suspects.first().map_or("-", |s| s.entity.as_str());
        let _ = writeln!(
            o,
            "{main}{:>2}. {} → {:<15} {:+5.0} %  {:<12} {:<26} confidence {:.2}",
            i + 1,
            fmt_time(e.start()),
            end,
            pct,
            e.root_cause_domain.as_deref().unwrap_or("-"),
            top,
            e.confidence
        );
        if d.episodes.len() > 1 {
            let _ = writeln!(o, "      {}", e.verdict);
            let _ = writeln!(o, "      next action: {}", e.next_action);
        }
    }
    let _ = writeln!(o, "  (*: the main episode, detailed below)\n");
    let dec = &d.decomposition;
    let _ = writeln!(
        o,
        "step-time rise {:+.3} s per step = input wait {:+.3} s | transfer {:+.3} s | straggler wait {:+.3} s",
        dec.step, dec.input_wait, dec.transfer, dec.straggler
    );
    let _ = writeln!(o, "\nevidence chain (corrected time, ± clock uncertainty):");
    for (i, c) in d.chain.iter().enumerate() {
        let order = if i == 0 || c.after_previous { " " } else { "≈" };
        let _ = writeln!(
            o,
            "{order}{} ±{:<9} {:<12} {:<22} {} {}",
            fmt_time(c.time),
            fmt_duration(c.uncertainty_ns),
            c.domain,
            c.entity,
            c.metric,
            c.change
        );
    }
    let _ = writeln!(o, "  (≈: not ordered after the previous line beyond the clock uncertainty)");
    let _ = writeln!(o, "\nverdict: {}", d.verdict);
    let _ = writeln!(o, "next action: {}", d.next_action);
    let _ = writeln!(o, "\nsuspects:");
    for (i, s) in d.suspects.iter().enumerate() {
        let _ = writeln!(
            o,
            "{:>2}. {:<24} {:<12} score {:.2}  onset {}",
            i + 1,
            suspect_name(s),
            s.domain,
            s.score,
            fmt_time(s.onset)
        );
        for e in &s.evidence {
            let _ = writeln!(o, "      - {e}");
        }
        if i >= 4 {
            break;
        }
    }
    blast_radius(&mut o, &d.main);
    let _ = writeln!(o, "\nreproduce the evidence:");
    for c in &d.chain {
        let _ = writeln!(o, "-- {} {} {}\n{};", c.entity, c.metric, c.change, c.sql);
    }
    if let Some(top) = d.suspects.first() {
        for q in &top.sql {
            let _ = writeln!(o, "-- suspect {}\n{q};", top.entity);
        }
    }
    o
}

/// A suspect's name: both ends of a merged link as one (`a ↔ b: inspect that link`).
pub fn suspect_name(s: &lockstep_query::diagnose::Suspect) -> String {
    match &s.link {
        Some(peer) => format!("{} ↔ {peer} (one link: inspect that link)", s.entity),
        None => s.entity.clone(),
    }
}

/// The other jobs on the root-cause pool or link: aggressors and victims.
fn blast_radius(o: &mut String, e: &Episode) {
    let Some(top) = e.suspects.first() else { return };
    if !matches!(e.root_cause_domain.as_deref(), Some("storage" | "network")) {
        return;
    }
    let _ = writeln!(o, "\nblast radius (other jobs on {} during the episode):", top.entity);
    if e.blast_radius.is_empty() {
        let _ = writeln!(o, "  none: no other job of jobs.json uses it during the episode");
    }
    for j in &e.blast_radius {
        let _ = writeln!(o, "  {:<16} {:<9} via {:<22} {}", j.job, j.role, j.via, j.evidence);
    }
}

/// The before/after comparison (`lockstep diagnose --baseline-from/--baseline-to`) as a text
/// table of what changed.
pub fn render_comparison(c: &Comparison) -> String {
    let t = fmt_rfc3339;
    let mut o = format!(
        "job {}: before [{} .. {}) vs after [{} .. {})\n",
        c.job,
        t(c.before.0),
        t(c.before.1),
        t(c.after.0),
        t(c.after.1)
    );
    let _ = writeln!(
        o,
        "{:<58} {:>11} {:>11} {:>11} {:>11} {:>9}",
        "quantity", "before p50", "before p99", "after p50", "after p99", "change"
    );
    for m in &c.metrics {
        let n = fmt_num;
        let change = if m.change_pct.is_finite() { format!("{:+.1} %", m.change_pct) } else { "-".to_string() };
        let _ = writeln!(
            o,
            "{:<58} {:>11} {:>11} {:>11} {:>11} {:>9}",
            format!("{} [{}]", m.metric, m.unit),
            n(m.before_p50),
            n(m.before_p99),
            n(m.after_p50),
            n(m.after_p99),
            change
        );
    }
    o
}
