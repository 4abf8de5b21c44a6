//! The HTML report: one self-contained file (inline SVG, CSS and a few lines of JS; no network
//! access). On top the verdict and its next action; then one chart per lane group and unit over
//! where the job's data is (not the job's start in `jobs.json`), each with a y axis in a
//! readable unit, a legend that names what differs between its lines, hover values, the
//! episodes shaded and the onsets marked with their clock uncertainty; then the suspects (both
//! ends of one link as one), the blast radius, the episodes and the evidence chain.

use std::fmt::Write as _;

use lockstep_engine::model::SEC;
use lockstep_query::diagnose::format::{fmt_duration, fmt_rfc3339, fmt_time};
use lockstep_query::diagnose::{ClockMode, Diagnosis, Lane, UNCERTAINTY_UNKNOWN};

use super::axis::{Scale, base_unit, fmt_value, scale, ticks, time_ticks, to_base};

const WIDTH: f64 = 1120.0;
/// Left margin of a chart (y tick labels and the unit).
const LEFT: f64 = 70.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 10.0;
/// Plot height of one chart.
const PLOT_H: f64 = 120.0;
/// Room for the time axis under a chart.
const BOTTOM: f64 = 22.0;
const COLORS: [&str; 6] = ["#2563eb", "#db2777", "#059669", "#d97706", "#7c3aed", "#0891b2"];
/// Most points drawn per line (and sent to the hover script).
const MAX_POINTS: usize = 1500;

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

/// The time range the charts show: where the lanes have data (with a 2 % margin, at least 5 s),
/// clipped to the analysis window; the window itself without lanes.
pub fn shown_window(d: &Diagnosis) -> (i64, i64) {
    let first = d.lanes.iter().filter_map(|l| l.times.first()).min().copied();
    let last = d.lanes.iter().filter_map(|l| l.times.last()).max().copied();
    match (first, last) {
        (Some(a), Some(b)) if b > a => {
            let margin = ((b - a) / 50).max(5 * SEC);
            ((a - margin).max(d.from), (b + margin).min(d.to))
        }
        _ => (d.from, d.to),
    }
}

/// Renders the report (the diagnosis should carry lanes: `DiagnoseOptions::lanes`).
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
    let verdict_class = if d.bottleneck.is_some() || d.status != "healthy" { "verdict bad" } else { "verdict ok" };
    let _ = writeln!(
        h,
        "<div class=\"{verdict_class}\" id=\"verdict\"><b>Verdict ({}).</b> {}</div>",
        escape(&d.status),
        escape(&d.verdict)
    );
    let _ = writeln!(
        h,
        "<div class=\"action\" id=\"next-action\"><b>Next action.</b> {}</div>",
        code_spans(&d.next_action)
    );
    for m in &d.missing {
        let _ = writeln!(h, "<p class=\"missing\">Missing: {}</p>", escape(m));
    }
    let (from, to) = shown_window(d);
    let _ = writeln!(
        h,
        "<p class=\"meta\" id=\"window\">Shown: {} → {} (where the job's data is; analysis window {} → {}, reference time, UTC). \
         Bottleneck: <b>{}</b>; root-cause domain: <b>{}</b>; confidence {:.2}. Timeline: {} (clock models v{}, {}/{} hosts \
         modelled). {} series, {} samples, {} ms.</p>",
        fmt_rfc3339(from),
        fmt_rfc3339(to),
        fmt_rfc3339(d.from),
        fmt_rfc3339(d.to),
        escape(d.bottleneck.as_deref().unwrap_or("none")),
        escape(d.root_cause_domain.as_deref().unwrap_or("-")),
        d.confidence,
        match d.clock.mode {
            ClockMode::Corrected => "corrected",
            ClockMode::Raw => "raw (uncorrected)",
        },
        d.clock.version,
        d.clock.hosts_with_model,
        d.clock.hosts,
        d.series,
        d.samples,
        d.elapsed_ms
    );
    charts(&mut h, d, (from, to));
    suspects_table(&mut h, d);
    blast_radius(&mut h, d);
    episodes_table(&mut h, d);
    chain_table(&mut h, d);
    let _ = write!(h, "<div id=\"tip\" class=\"tip\"></div>\n<script>{JS}</script>\n</body></html>\n");
    h
}

/// Text with `` `code` `` spans as `<code>`.
fn code_spans(text: &str) -> String {
    let mut o = String::new();
    for (i, part) in text.split('`').enumerate() {
        if i % 2 == 1 {
            let _ = write!(o, "<code>{}</code>", escape(part));
        } else {
            o.push_str(&escape(part));
        }
    }
    o
}

/// One chart: lanes of one group that share a unit.
struct Chart<'a> {
    group: &'a str,
    unit: String,
    lanes: Vec<&'a Lane>,
}

fn group_charts(lanes: &[Lane]) -> Vec<Chart<'_>> {
    let mut out: Vec<Chart<'_>> = Vec::new();
    for l in lanes {
        let unit = base_unit(&l.unit);
        match out.iter_mut().find(|c| c.group == l.group && c.unit == unit) {
            Some(c) => c.lanes.push(l),
            None => out.push(Chart { group: &l.group, unit, lanes: vec![l] }),
        }
    }
    out
}

/// What the labels of one chart share (its subtitle) and what tells each apart (its legend):
/// common leading and trailing words are removed; a label that would be empty stays whole.
pub fn legends(labels: &[&str]) -> (String, Vec<String>) {
    let words: Vec<Vec<&str>> = labels.iter().map(|l| l.split_whitespace().collect()).collect();
    if words.len() < 2 {
        return (String::new(), labels.iter().map(|l| l.to_string()).collect());
    }
    let shortest = words.iter().map(Vec::len).min().unwrap_or(0);
    let w0 = &words[0];
    let mut pre = 0;
    while pre < shortest && words.iter().all(|w| w[pre] == w0[pre]) {
        pre += 1;
    }
    let mut suf = 0;
    while suf < shortest - pre && words.iter().all(|w| w[w.len() - 1 - suf] == w0[w0.len() - 1 - suf]) {
        suf += 1;
    }
    let common = [w0[..pre].join(" "), w0[w0.len() - suf..].join(" ")]
        .into_iter()
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join(" … ");
    let legend = words
        .iter()
        .zip(labels)
        .map(|(w, full)| {
            let mid = w[pre..w.len() - suf].join(" ");
            if mid.is_empty() { full.to_string() } else { mid }
        })
        .collect();
    (common, legend)
}

/// A robust y range (1st to 99th percentile over the chart's lines), from 0 when the values are
/// non-negative and not far from it; never empty.
fn y_range(values: &[Vec<f64>]) -> (f64, f64) {
    let mut v: Vec<f64> = values.iter().flatten().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return (0.0, 1.0);
    }
    v.sort_by(f64::total_cmp);
    let mut lo = v[(v.len() - 1) / 100];
    let p99 = v[((v.len() - 1) * 99).div_ceil(100)];
    // The top outliers are clipped, unless they are within twice the 1–99 % range.
    let mut hi = p99.max(v[v.len() - 1].min(lo + 2.0 * (p99 - lo)));
    if lo >= 0.0 && lo < 0.5 * hi {
        lo = 0.0;
    }
    if hi <= lo {
        let pad = if lo == 0.0 { 1.0 } else { lo.abs() * 0.1 };
        (lo, hi) = (lo - pad, lo + pad);
    }
    let pad = (hi - lo) * 0.05;
    (if lo == 0.0 { 0.0 } else { lo - pad }, hi + pad)
}

fn charts(h: &mut String, d: &Diagnosis, (from, to): (i64, i64)) {
    let _ = writeln!(
        h,
        "<h2>Timeline <small>(shaded: slowdown episodes; dashed: onsets, red = slowdown; amber bands: clock \
         uncertainty; hover for values)</small></h2>"
    );
    if d.lanes.is_empty() {
        let _ = writeln!(h, "<p>No time series to draw.</p>");
        return;
    }
    let span = (to - from).max(1) as f64;
    let x_of = |t: i64| LEFT + (WIDTH - LEFT - RIGHT) * ((t - from) as f64 / span).clamp(0.0, 1.0);
    let mut data = String::from("[");
    for (ci, chart) in group_charts(&d.lanes).iter().enumerate() {
        let labels: Vec<&str> = chart.lanes.iter().map(|l| l.label.as_str()).collect();
        let (common, legend) = legends(&labels);
        // Every line in the chart's base unit (a ratio and a percentage share one % axis).
        let values: Vec<Vec<f64>> =
            chart.lanes.iter().map(|l| l.values.iter().map(|v| v * to_base(&l.unit)).collect()).collect();
        let (lo, hi) = y_range(&values);
        let sc: Scale = scale(&chart.unit, lo.abs().max(hi.abs()));
        let yt = ticks(lo * sc.mult, hi * sc.mult, 4);
        let step = if yt.len() > 1 { yt[1] - yt[0] } else { 1.0 };
        let y_of = |v: f64| TOP + PLOT_H - PLOT_H * ((v - lo) / (hi - lo)).clamp(0.0, 1.0);
        let height = TOP + PLOT_H + BOTTOM;
        let _ = writeln!(
            h,
            "<figure class=\"chart\"><figcaption><b>{}</b>{} <span class=\"unit\">[{}]</span></figcaption><div class=\"legend\">",
            escape(chart.group),
            if common.is_empty() { String::new() } else { format!(" — {}", escape(&common)) },
            escape(if sc.unit.is_empty() { "value" } else { &sc.unit })
        );
        for (li, (lane, name)) in chart.lanes.iter().zip(&legend).enumerate() {
            let _ = writeln!(
                h,
                "<span class=\"key\" title=\"{}\"><i style=\"background:{}\"></i>{}</span>",
                escape(&lane.label),
                COLORS[li % COLORS.len()],
                escape(name)
            );
        }
        let _ = writeln!(
            h,
            "</div><svg class=\"chart\" data-chart=\"{ci}\" width=\"{WIDTH}\" height=\"{height}\" viewBox=\"0 0 {WIDTH} {height}\" xmlns=\"http://www.w3.org/2000/svg\">"
        );
        let _ = writeln!(h, "<rect x=\"0\" y=\"0\" width=\"{WIDTH}\" height=\"{height}\" fill=\"#ffffff\"/>");
        // Episodes, then onset markers with their uncertainty bands, behind the lines.
        for (i, e) in d.episodes.iter().enumerate() {
            let x0 = x_of(e.start().max(from));
            let x1 = x_of(e.recovery.unwrap_or(d.to).min(to));
            let _ = writeln!(
                h,
                "<rect class=\"episode\" x=\"{x0:.1}\" y=\"{TOP}\" width=\"{:.1}\" height=\"{PLOT_H}\"><title>episode {}: {} → {}</title></rect>",
                (x1 - x0).max(1.0),
                i + 1,
                fmt_time(e.start()),
                e.recovery.map_or("end of window".to_string(), fmt_time)
            );
        }
        for c in d.chain.iter().filter(|c| c.time >= from && c.time <= to) {
            let x = x_of(c.time);
            if c.uncertainty_ns != UNCERTAINTY_UNKNOWN {
                let x0 = x_of(c.time.saturating_sub(c.uncertainty_ns));
                let x1 = x_of(c.time.saturating_add(c.uncertainty_ns));
                let w = (x1 - x0).max(1.0);
                let _ = writeln!(
                    h,
                    "<rect class=\"band\" x=\"{:.1}\" y=\"{TOP}\" width=\"{w:.1}\" height=\"{PLOT_H}\"/>",
                    x - w / 2.0
                );
            }
            let color = if c.domain == "training" { "#dc2626" } else { "#6b7280" };
            let _ = writeln!(
                h,
                "<line class=\"onset\" x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{TOP}\" y2=\"{:.1}\" stroke=\"{color}\" stroke-dasharray=\"4 3\"><title>{} {} {} {} ± {}</title></line>",
                TOP + PLOT_H,
                fmt_time(c.time),
                escape(&c.entity),
                escape(&c.metric),
                escape(&c.change),
                escape(&fmt_duration(c.uncertainty_ns))
            );
        }
        // Y axis: grid lines and tick values in the chart's unit.
        for v in &yt {
            let y = y_of(v / sc.mult);
            let _ = writeln!(
                h,
                "<line class=\"grid\" x1=\"{LEFT}\" x2=\"{:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\"/><text class=\"axis ytick\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
                WIDTH - RIGHT,
                LEFT - 6.0,
                y + 3.5,
                fmt_value(*v, step)
            );
        }
        let _ = writeln!(
            h,
            "<text class=\"axis yunit\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" transform=\"rotate(-90 {:.1} {:.1})\">{}</text>",
            14.0,
            TOP + PLOT_H / 2.0,
            14.0,
            TOP + PLOT_H / 2.0,
            escape(&sc.unit)
        );
        // X axis.
        for t in time_ticks(from, to, 8) {
            let x = x_of(t);
            let anchor = if x > WIDTH - RIGHT - 24.0 { "end" } else { "middle" };
            let _ = writeln!(
                h,
                "<line class=\"grid\" x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{TOP}\" y2=\"{:.1}\"/><text class=\"axis\" x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"{anchor}\">{}</text>",
                TOP + PLOT_H,
                TOP + PLOT_H + 14.0,
                &fmt_time(t)[..8]
            );
        }
        let _ = writeln!(
            h,
            "<rect x=\"{LEFT}\" y=\"{TOP}\" width=\"{:.1}\" height=\"{PLOT_H}\" fill=\"none\" stroke=\"#d1d5db\"/>",
            WIDTH - LEFT - RIGHT
        );
        // The lines, and their points for the hover script (ms since the epoch, display unit).
        let _ = write!(data, "{}{{\"unit\":\"{}\",\"lines\":[", if ci == 0 { "" } else { "," }, json_str(&sc.unit));
        for (li, (lane, name)) in chart.lanes.iter().zip(&legend).enumerate() {
            let color = COLORS[li % COLORS.len()];
            let mut pts = String::new();
            let (mut ts, mut vs) = (String::new(), String::new());
            let every = (lane.times.len() / MAX_POINTS).max(1);
            for (k, (&t, &v)) in lane.times.iter().zip(&values[li]).enumerate() {
                if k % every != 0 || !v.is_finite() || t < from || t > to {
                    continue;
                }
                let _ = write!(pts, "{:.1},{:.1} ", x_of(t), y_of(v));
                let sep = if ts.is_empty() { "" } else { "," };
                let _ = write!(ts, "{sep}{}", t / 1_000_000);
                let _ = write!(vs, "{sep}{}", fmt_value(v * sc.mult, step / 100.0));
            }
            let _ = writeln!(
                h,
                "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"1.3\" points=\"{}\"><title>{}</title></polyline>",
                pts.trim_end(),
                escape(&lane.label)
            );
            let _ = write!(
                data,
                "{}{{\"name\":\"{}\",\"color\":\"{color}\",\"t\":[{ts}],\"v\":[{vs}]}}",
                if li == 0 { "" } else { "," },
                json_str(name)
            );
        }
        data.push_str("]}");
        let _ = writeln!(
            h,
            "<line class=\"cursor\" x1=\"0\" x2=\"0\" y1=\"{TOP}\" y2=\"{:.1}\" visibility=\"hidden\"/>\n</svg></figure>",
            TOP + PLOT_H
        );
    }
    data.push(']');
    let _ = writeln!(
        h,
        "<script type=\"application/json\" id=\"chart-data\">{{\"from\":{},\"to\":{},\"left\":{LEFT},\"width\":{},\"charts\":{}}}</script>",
        from / 1_000_000,
        to / 1_000_000,
        WIDTH - LEFT - RIGHT,
        data.replace("</", "<\\/")
    );
}

/// A JSON string body (quotes, backslashes and control characters escaped).
fn json_str(s: &str) -> String {
    let quoted = serde_json::to_string(s).unwrap_or_default();
    quoted.trim_matches('"').to_string()
}

fn suspects_table(h: &mut String, d: &Diagnosis) {
    let _ = writeln!(h, "<h2>Suspects <small>(best first)</small></h2>");
    if d.suspects.is_empty() {
        let _ = writeln!(h, "<p>No suspects.</p>");
        return;
    }
    let rows = d
        .suspects
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let ev: String = s.evidence.iter().map(|e| format!("<li>{}</li>", escape(e))).collect();
            let name = match &s.link {
                Some(peer) => format!(
                    "<b>{}</b> ↔ <b>{}</b><div class=\"link\">one link: inspect that link</div>",
                    escape(&s.entity),
                    escape(peer)
                ),
                None => format!("<b>{}</b>", escape(&s.entity)),
            };
            let cells = vec![
                (i + 1).to_string(),
                name,
                escape(&s.domain),
                format!("{:.2}", s.score),
                fmt_time(s.onset),
                format!("<ul>{ev}</ul>"),
            ];
            ("", cells)
        })
        .collect();
    table(h, "suspects", &["#", "entity", "domain", "score", "onset", "evidence"], rows);
}

fn blast_radius(h: &mut String, d: &Diagnosis) {
    let _ =
        writeln!(h, "<section id=\"blast-radius\"><h2>Blast radius <small>(other jobs on the root cause)</small></h2>");
    let shared = matches!(d.root_cause_domain.as_deref(), Some("storage" | "network"));
    match d.suspects.first() {
        Some(top) if shared && d.blast_radius.is_empty() => {
            let _ = writeln!(h, "<p>No other job of jobs.json uses {} during the episode.</p>", escape(&top.entity));
        }
        Some(top) if shared => {
            let _ = writeln!(
                h,
                "<p>Other jobs on {} during the episode: aggressors (their own traffic on it rose with the slowdown) \
                 and victims (they use it and are affected too).</p>",
                escape(&top.entity)
            );
            let rows = d
                .blast_radius
                .iter()
                .map(|j| {
                    let cells = vec![
                        format!("<b>{}</b>", escape(&j.job)),
                        escape(&j.role),
                        escape(&j.via),
                        escape(&j.evidence),
                    ];
                    (j.role.as_str(), cells)
                })
                .collect();
            table(h, "other-jobs", &["job", "role", "via", "evidence"], rows);
        }
        Some(top) => {
            let _ = writeln!(
                h,
                "<p>The root cause ({}, {}) is not a shared pool or link: no other job is affected through it.</p>",
                escape(&top.entity),
                escape(d.root_cause_domain.as_deref().unwrap_or("-"))
            );
        }
        None => {
            let _ = writeln!(h, "<p>No root cause, no blast radius.</p>");
        }
    }
    let _ = writeln!(h, "</section>");
}

/// A table: its id, header cells and rows (a class and cells, already HTML).
fn table(h: &mut String, id: &str, head: &[&str], rows: Vec<(&str, Vec<String>)>) {
    let _ = write!(h, "<table id=\"{id}\"><tr>");
    for c in head {
        let _ = write!(h, "<th>{c}</th>");
    }
    h.push_str("</tr>\n");
    for (class, cells) in rows {
        let _ = write!(h, "<tr class=\"{class}\">");
        for c in cells {
            let _ = write!(h, "<td>{c}</td>");
        }
        h.push_str("</tr>\n");
    }
    h.push_str("</table>\n");
}

fn episodes_table(h: &mut String, d: &Diagnosis) {
    if d.episodes.is_empty() {
        return;
    }
    let _ = writeln!(h, "<h2>Slowdown episodes</h2>");
    let rows = d
        .episodes
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let cells = vec![
                (i + 1).to_string(),
                fmt_time(e.start()),
                e.recovery.map_or("-".to_string(), fmt_time),
                escape(&e.verdict),
                code_spans(&e.next_action),
            ];
            ("", cells)
        })
        .collect();
    table(h, "episodes", &["#", "from", "to", "verdict", "next action"], rows);
}

fn chain_table(h: &mut String, d: &Diagnosis) {
    let _ = writeln!(
        h,
        "<h2>Evidence chain <small>(corrected-time order; ≈ = not ordered beyond the clock uncertainty)</small></h2>"
    );
    if d.chain.is_empty() {
        let _ = writeln!(h, "<p>No evidence chain: no slowdown episode.</p>");
        return;
    }
    let rows = d
        .chain
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let cells = vec![
                if i == 0 || c.after_previous { "" } else { "≈" }.to_string(),
                fmt_time(c.time),
                escape(&fmt_duration(c.uncertainty_ns)),
                escape(&c.domain),
                escape(&c.entity),
                escape(&c.metric),
                escape(&c.change),
                format!("<details><summary>SQL</summary><code>{}</code></details>", escape(&c.sql)),
            ];
            ("", cells)
        })
        .collect();
    table(h, "chain", &["", "time", "±", "domain", "entity", "metric", "change", "SQL"], rows);
}

const CSS: &str = "body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;color:#111827;background:#f9fafb}\
h1{font-size:22px}h2{font-size:17px;margin-top:28px}small{color:#6b7280;font-weight:normal}\
.verdict,.action{padding:12px 16px;border-radius:6px;max-width:1088px;margin:8px 0}.bad{background:#fee2e2;border:1px solid #fca5a5}\
.ok{background:#dcfce7;border:1px solid #86efac}.action{background:#e0f2fe;border:1px solid #7dd3fc}\
.meta,.missing{color:#374151;font-size:13px;max-width:1088px}figure.chart{margin:14px 0 0 0}\
figcaption{font-size:13px}.unit{color:#6b7280}.legend{font-size:12px;margin:2px 0 2px 70px}\
.key{margin-right:14px;white-space:nowrap}.key i{display:inline-block;width:14px;height:3px;margin:0 5px 3px 0;vertical-align:middle}\
svg.chart{background:#fff;border:1px solid #e5e7eb;display:block}.axis{font-size:10px;fill:#6b7280}.grid{stroke:#f3f4f6}\
.cursor{stroke:#111827;stroke-width:0.7}.band{fill:#f59e0b;fill-opacity:0.25}.episode{fill:#fecdd3;fill-opacity:0.6}\
table{border-collapse:collapse;font-size:12px;max-width:1120px;background:#fff}\
td,th{border:1px solid #e5e7eb;padding:4px 6px;vertical-align:top;text-align:left}code{font-size:11px;white-space:pre-wrap}\
ul{margin:0;padding-left:16px}tr.hl{background:#fef3c7}tr.aggressor{background:#fee2e2}.link{color:#b91c1c;font-size:11px}\
.tip{position:absolute;display:none;background:#111827;color:#f9fafb;font-size:11px;padding:5px 7px;border-radius:4px;pointer-events:none;white-space:nowrap}";

/// Highlights chain rows; the hover tooltip reads `#chart-data` (values already in the chart's
/// display unit) and shows, at the pointer's time, the nearest value of every line of a chart.
const JS: &str = r#"document.querySelectorAll('#chain tr').forEach(function(r){r.addEventListener('mouseenter',function(){r.classList.add('hl')});r.addEventListener('mouseleave',function(){r.classList.remove('hl')});});
(function(){var el=document.getElementById('chart-data');if(!el)return;var D=JSON.parse(el.textContent);var tip=document.getElementById('tip');
function near(a,t){var lo=0,hi=a.length-1;if(hi<0)return -1;while(lo<hi){var m=(lo+hi)>>1;if(a[m]<t)lo=m+1;else hi=m;}if(lo>0&&t-a[lo-1]<a[lo]-t)lo--;return lo;}
function hms(ms){var d=new Date(ms);return d.toISOString().substr(11,12);}
document.querySelectorAll('svg.chart').forEach(function(svg){var C=D.charts[+svg.getAttribute('data-chart')];var cur=svg.querySelector('.cursor');
svg.addEventListener('mousemove',function(ev){var r=svg.getBoundingClientRect();var x=(ev.clientX-r.left)*(svg.viewBox.baseVal.width/r.width);
if(x<D.left||x>D.left+D.width){tip.style.display='none';cur.setAttribute('visibility','hidden');return;}
var t=D.from+(x-D.left)/D.width*(D.to-D.from);var rows=['<b>'+hms(t)+'</b>'];
C.lines.forEach(function(l){var i=near(l.t,t);if(i>=0)rows.push('<span style="color:'+l.color+'">&#9632;</span> '+l.name.replace(/</g,'&lt;')+': '+l.v[i]+' '+C.unit);});
cur.setAttribute('x1',x);cur.setAttribute('x2',x);cur.setAttribute('visibility','visible');
tip.innerHTML=rows.join('<br>');tip.style.display='block';tip.style.left=(ev.pageX+14)+'px';tip.style.top=(ev.pageY+10)+'px';});
svg.addEventListener('mouseleave',function(){tip.style.display='none';cur.setAttribute('visibility','hidden');});});})();"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes() {
        assert_eq!(escape("<a href='x'>&</a>"), "&lt;a href=&#39;x&#39;&gt;&amp;&lt;/a&gt;");
        assert_eq!(code_spans("run `a<b` now"), "run <code>a&lt;b</code> now");
    }

    #[test]
    fn legends_name_what_differs() {
        let (common, l) = legends(&["pool read latency p50", "pool read latency p99"]);
        assert_eq!((common.as_str(), l), ("pool read latency", vec!["p50".to_string(), "p99".to_string()]));
        let (common, l) = legends(&["all-reduce exec time (median over ranks)", "all-reduce exec time (node-03)"]);
        assert_eq!(common, "all-reduce exec time");
        assert_eq!(l, vec!["(median over ranks)", "(node-03)"]);
        // Three fabric series that share a long prefix stay distinguishable.
        let labels = [
            "leaf-1:22 infiniband_switch_port_rcv_errors_total",
            "leaf-1:22 infiniband_switch_port_xmit_discards_total",
            "node-06/mlx5_1:1 node_infiniband_symbol_error_total",
        ];
        let (_, l) = legends(&labels);
        assert_eq!(l, labels.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        let (common, l) = legends(&["SM active (median over GPUs)", "GPU util % (median over GPUs)"]);
        assert_eq!(
            (common.as_str(), l),
            ("(median over GPUs)", vec!["SM active".to_string(), "GPU util %".to_string()])
        );
        assert_eq!(legends(&["x", "x"]).1, vec!["x", "x"]);
    }

    #[test]
    fn y_range_starts_at_zero_for_rates() {
        let (lo, hi) = y_range(&[vec![1.0, 4.0]]);
        assert_eq!(lo, 0.0);
        assert!(hi >= 4.0);
        // An outlier far above the rest is clipped, not the scale of the chart.
        let mut v = vec![10.0; 200];
        v.push(1e6);
        assert!(y_range(&[v]).1 < 20.0);
    }
}
