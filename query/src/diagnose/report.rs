//! The HTML report: one self-contained file (inline SVG, CSS and a few lines of JS; no network
//! access) with the job's timeline in aligned lanes per domain, onset markers with their
//! uncertainty bands, the verdict, the evidence chain and the suspects.

use std::fmt::Write as _;

use super::text::{fmt_duration, fmt_rfc3339, fmt_time};
use super::{Diagnosis, Lane, UNCERTAINTY_UNKNOWN};

const WIDTH: f64 = 1120.0;
const LEFT: f64 = 210.0;
const RIGHT: f64 = 20.0;
const LANE_H: f64 = 86.0;
const COLORS: [&str; 4] = ["#2563eb", "#db2777", "#059669", "#d97706"];

/// Escapes text for HTML.
pub fn escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// Renders the report (the diagnosis should carry lanes: [`super::DiagnoseOptions::lanes`]).
pub fn render(d: &Diagnosis) -> String {
    let mut h = String::new();
    let title = format!("Lockstep diagnosis: {}", d.job);
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title>\n<style>{}</style></head><body>\n",
        escape(&title),
        CSS
    );
    let _ = writeln!(h, "<h1>{}</h1>", escape(&title));
    let verdict_class = if d.bottleneck.is_some() { "verdict bad" } else { "verdict ok" };
    let _ = writeln!(h, "<div class=\"{verdict_class}\" id=\"verdict\"><b>Verdict.</b> {}</div>", escape(&d.verdict));
    let _ = writeln!(
        h,
        "<p class=\"meta\">Window {} → {} (reference time, UTC). Bottleneck: <b>{}</b>; root-cause domain: <b>{}</b>. \
         Timeline: {} (clock models v{}, {}/{} hosts modelled). {} series, {} samples, {} ms.</p>",
        fmt_rfc3339(d.from),
        fmt_rfc3339(d.to),
        escape(d.bottleneck.as_deref().unwrap_or("none (healthy)")),
        escape(d.root_cause_domain.as_deref().unwrap_or("-")),
        match d.clock.mode {
            super::ClockMode::Corrected => "corrected",
            super::ClockMode::Raw => "raw (uncorrected)",
        },
        d.clock.version,
        d.clock.hosts_with_model,
        d.clock.hosts,
        d.series,
        d.samples,
        d.elapsed_ms
    );
    timeline(&mut h, d);
    episodes_table(&mut h, d);
    chain_table(&mut h, d);
    suspects_table(&mut h, d);
    let _ = write!(h, "<script>{JS}</script>\n</body></html>\n");
    h
}

fn x_of(d: &Diagnosis, t: i64) -> f64 {
    let span = (d.to - d.from).max(1) as f64;
    LEFT + (WIDTH - LEFT - RIGHT) * ((t - d.from) as f64 / span).clamp(0.0, 1.0)
}

fn timeline(h: &mut String, d: &Diagnosis) {
    let mut groups: Vec<(&str, Vec<&Lane>)> = Vec::new();
    for l in &d.lanes {
        match groups.iter_mut().find(|g| g.0 == l.group) {
            Some(g) => g.1.push(l),
            None => groups.push((l.group.as_str(), vec![l])),
        }
    }
    let height = 30.0 + LANE_H * groups.len().max(1) as f64 + 24.0;
    let _ = writeln!(
        h,
        "<h2>Timeline</h2><svg id=\"timeline\" width=\"{WIDTH}\" height=\"{height}\" viewBox=\"0 0 {WIDTH} {height}\" xmlns=\"http://www.w3.org/2000/svg\">"
    );
    let _ = writeln!(h, "<rect x=\"0\" y=\"0\" width=\"{WIDTH}\" height=\"{height}\" fill=\"#ffffff\"/>");
    // Episodes shaded, then onset markers with uncertainty bands, behind the lanes.
    let bottom = 30.0 + LANE_H * groups.len().max(1) as f64;
    for (i, e) in d.episodes.iter().enumerate() {
        let x0 = x_of(d, e.start());
        let x1 = x_of(d, e.recovery.unwrap_or(d.to));
        let _ = writeln!(
            h,
            "<rect class=\"episode\" x=\"{x0:.2}\" y=\"24\" width=\"{:.2}\" height=\"{:.1}\"><title>episode {}: {}</title></rect>",
            (x1 - x0).max(1.0),
            bottom - 24.0,
            i + 1,
            escape(&e.verdict)
        );
    }
    for c in &d.chain {
        let x = x_of(d, c.time);
        if c.uncertainty_ns != UNCERTAINTY_UNKNOWN {
            let x0 = x_of(d, c.time.saturating_sub(c.uncertainty_ns));
            let x1 = x_of(d, c.time.saturating_add(c.uncertainty_ns));
            let w = (x1 - x0).max(1.0);
            let _ = writeln!(
                h,
                "<rect class=\"band\" x=\"{:.2}\" y=\"24\" width=\"{w:.2}\" height=\"{:.1}\"><title>± {}</title></rect>",
                x - w / 2.0,
                bottom - 24.0,
                escape(&fmt_duration(c.uncertainty_ns))
            );
        }
        let color = if c.domain == "training" { "#dc2626" } else { "#6b7280" };
        let _ = writeln!(
            h,
            "<line class=\"onset\" x1=\"{x:.2}\" x2=\"{x:.2}\" y1=\"24\" y2=\"{bottom:.1}\" stroke=\"{color}\" stroke-dasharray=\"4 3\"><title>{} {} {} {} ± {}</title></line>",
            fmt_time(c.time),
            escape(&c.entity),
            escape(&c.metric),
            escape(&c.change),
            escape(&fmt_duration(c.uncertainty_ns))
        );
    }
    for (gi, (name, lanes)) in groups.iter().enumerate() {
        let top = 30.0 + LANE_H * gi as f64;
        let _ = writeln!(
            h,
            "<rect x=\"{LEFT}\" y=\"{top:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"none\" stroke=\"#e5e7eb\"/>",
            WIDTH - LEFT - RIGHT,
            LANE_H - 8.0
        );
        let _ = writeln!(h, "<text class=\"lane\" x=\"8\" y=\"{:.1}\">{}</text>", top + 16.0, escape(name));
        for (li, lane) in lanes.iter().enumerate() {
            let color = COLORS[li % COLORS.len()];
            let (lo, hi) = range(&lane.values);
            let _ = writeln!(
                h,
                "<text class=\"legend\" x=\"8\" y=\"{:.1}\" fill=\"{color}\">{}</text>",
                top + 32.0 + 13.0 * li as f64,
                escape(&shorten(&format!("{} [{}]", lane.label, lane.unit), 34))
            );
            let mut pts = String::new();
            let step = (lane.times.len() / 1500).max(1);
            for (k, (&t, &v)) in lane.times.iter().zip(&lane.values).enumerate() {
                if k % step != 0 || !v.is_finite() {
                    continue;
                }
                let y = top + (LANE_H - 12.0) - (LANE_H - 16.0) * ((v - lo) / (hi - lo)).clamp(0.0, 1.0);
                let _ = write!(pts, "{:.1},{:.1} ", x_of(d, t), y);
            }
            let _ = writeln!(
                h,
                "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"1.2\" points=\"{}\"><title>{}</title></polyline>",
                pts.trim_end(),
                escape(&lane.label)
            );
        }
    }
    // Time axis.
    let span = d.to - d.from;
    for k in 0..=6 {
        let t = d.from + span / 6 * k;
        let x = x_of(d, t);
        let _ = writeln!(
            h,
            "<text class=\"axis\" x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            bottom + 14.0,
            fmt_time(t)
        );
    }
    let _ = writeln!(
        h,
        "<text class=\"axis\" x=\"8\" y=\"16\">dashed lines: onsets (red: slowdown); grey bands: clock uncertainty; pink: slowdown episodes</text>"
    );
    let _ = writeln!(h, "</svg>");
}

fn shorten(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut o: String = s.chars().take(n - 1).collect();
        o.push('…');
        o
    }
}

/// A robust y range (1st to 99th percentile), never empty.
fn range(values: &[f64]) -> (f64, f64) {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return (0.0, 1.0);
    }
    v.sort_by(f64::total_cmp);
    let lo = v[(v.len() - 1) / 100];
    let hi = v[(v.len() - 1) * 99 / 100];
    if hi > lo { (lo, hi) } else { (lo - 0.5, lo + 0.5) }
}

fn episodes_table(h: &mut String, d: &Diagnosis) {
    if d.episodes.len() < 2 {
        return;
    }
    let _ = writeln!(h, "<h2>Slowdown episodes</h2><table><tr><th>#</th><th>from</th><th>to</th><th>verdict</th></tr>");
    for (i, e) in d.episodes.iter().enumerate() {
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            i + 1,
            fmt_time(e.start()),
            e.recovery.map_or("-".to_string(), fmt_time),
            escape(&e.verdict)
        );
    }
    let _ = writeln!(h, "</table>");
}

fn chain_table(h: &mut String, d: &Diagnosis) {
    let _ = writeln!(
        h,
        "<h2>Evidence chain <small>(corrected-time order; ≈ = not ordered beyond the clock uncertainty)</small></h2>"
    );
    if d.chain.is_empty() {
        let _ = writeln!(h, "<p>No evidence chain: the job is healthy.</p>");
        return;
    }
    let _ = writeln!(
        h,
        "<table id=\"chain\"><tr><th></th><th>time</th><th>±</th><th>domain</th><th>entity</th><th>metric</th><th>change</th><th>SQL</th></tr>"
    );
    for (i, c) in d.chain.iter().enumerate() {
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td><details><summary>SQL</summary><code>{}</code></details></td></tr>",
            if i == 0 || c.after_previous { "" } else { "≈" },
            fmt_time(c.time),
            escape(&fmt_duration(c.uncertainty_ns)),
            escape(&c.domain),
            escape(&c.entity),
            escape(&c.metric),
            escape(&c.change),
            escape(&c.sql)
        );
    }
    let _ = writeln!(h, "</table>");
}

fn suspects_table(h: &mut String, d: &Diagnosis) {
    let _ = writeln!(h, "<h2>Suspects <small>(best first)</small></h2>");
    if d.suspects.is_empty() {
        let _ = writeln!(h, "<p>No suspects.</p>");
        return;
    }
    let _ = writeln!(
        h,
        "<table id=\"suspects\"><tr><th>#</th><th>entity</th><th>domain</th><th>score</th><th>onset</th><th>evidence</th></tr>"
    );
    for (i, s) in d.suspects.iter().enumerate() {
        let ev: String = s.evidence.iter().map(|e| format!("<li>{}</li>", escape(e))).collect();
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td><b>{}</b></td><td>{}</td><td>{:.2}</td><td>{}</td><td><ul>{ev}</ul></td></tr>",
            i + 1,
            escape(&s.entity),
            escape(&s.domain),
            s.score,
            fmt_time(s.onset)
        );
    }
    let _ = writeln!(h, "</table>");
}

const CSS: &str = "body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;color:#111827;background:#f9fafb}\
h1{font-size:22px}h2{font-size:17px;margin-top:28px}small{color:#6b7280;font-weight:normal}\
.verdict{padding:12px 16px;border-radius:6px;max-width:1080px}.bad{background:#fee2e2;border:1px solid #fca5a5}.ok{background:#dcfce7;border:1px solid #86efac}\
.meta{color:#374151;font-size:13px;max-width:1080px}svg{background:#fff;border:1px solid #e5e7eb}\
.lane{font-size:12px;font-weight:600;fill:#111827}.legend{font-size:10px}.axis{font-size:10px;fill:#6b7280}\
.band{fill:#f59e0b;fill-opacity:0.25}.episode{fill:#fecdd3;fill-opacity:0.5}table{border-collapse:collapse;font-size:12px;max-width:1120px;background:#fff}\
td,th{border:1px solid #e5e7eb;padding:4px 6px;vertical-align:top;text-align:left}code{font-size:11px;white-space:pre-wrap}\
ul{margin:0;padding-left:16px}tr.hl{background:#fef3c7}";

const JS: &str = "document.querySelectorAll('#chain tr').forEach(function(r){r.addEventListener('mouseenter',function(){r.classList.add('hl')});r.addEventListener('mouseleave',function(){r.classList.remove('hl')});});";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_and_ranges() {
        assert_eq!(escape("<a href='x'>&</a>"), "&lt;a href=&#39;x&#39;&gt;&amp;&lt;/a&gt;");
        assert_eq!(range(&[1.0, 1.0]), (0.5, 1.5));
        assert_eq!(shorten("abcdef", 4), "abc…");
    }
}
