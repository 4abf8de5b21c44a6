//! Evidence: chain links from single series and job-wide aggregates, series labels, units and
//! the evidence sentences of suspects.

use super::*;

/// A chain link from one series.
pub(super) fn link(s: &Scored<'_>, w: Windows) -> ChainLink {
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

pub(super) fn root_domain_or_metric(meta: &SeriesMeta) -> String {
    if is_port(meta) {
        return "network".to_string();
    }
    meta.domain.as_str().to_string()
}

/// The metric with its distinguishing non-entity labels.
pub(super) fn series_label(meta: &SeriesMeta) -> String {
    let extra: Vec<String> = meta
        .key
        .labels
        .iter()
        .filter(|(k, _)| matches!(k.as_str(), "quantile" | "mode" | "job" | "cpu" | "rank"))
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    if extra.is_empty() { meta.metric().to_string() } else { format!("{}{{{}}}", meta.metric(), extra.join(",")) }
}

pub(super) fn unit(meta: &SeriesMeta) -> String {
    let u = meta.info.as_ref().map_or("", |i| i.unit.as_str());
    if meta.is_counter() { format!("{u}/s") } else { u.to_string() }
}

pub(super) fn describe(s: &Scored<'_>) -> String {
    let mut text =
        format!("{} {} {}", s.meta.entity, series_label(s.meta), fmt_change(s.feat.m0, s.feat.m1, &unit(s.meta)));
    if s.feat.z.abs() >= super::super::analyze::Z_CAP {
        text.push_str(" (from a flat baseline)");
    } else {
        text.push_str(&format!(" ({:+.1} robust sd)", s.feat.z));
    }
    if let Some(p) = s.peer {
        text.push_str(&format!(", {p:+.1} against its peers"));
    }
    if let Some(o) = s.feat.onset {
        text.push_str(&format!(", onset {}", super::super::format::fmt_time(o.t)));
        if o.uncertainty == UNCERTAINTY_UNKNOWN {
            text.push_str(" (clock uncertainty unknown)");
        } else {
            text.push_str(&format!(" ± {}", super::super::format::fmt_duration(o.uncertainty)));
        }
    }
    text
}

/// Job-wide evidence links (aggregates over ranks or GPUs) and single-series links.
pub(super) struct Evidence<'a> {
    pub(super) ctx: &'a JobContext,
    pub(super) data: &'a Loaded,
    pub(super) w: Windows,
    /// Clock uncertainty of the episode's onset (aggregates mix all job hosts).
    pub(super) uncertainty: i64,
    pub(super) links: Vec<ChainLink>,
}

impl<'a> Evidence<'a> {
    pub(super) fn new(ctx: &'a JobContext, data: &'a Loaded, w: Windows, uncertainty: i64) -> Self {
        Evidence { ctx, data, w, uncertainty, links: Vec::new() }
    }

    pub(super) fn take(&mut self) -> Vec<ChainLink> {
        std::mem::take(&mut self.links)
    }

    pub(super) fn series_link(&mut self, s: &Scored<'_>) {
        self.links.push(link(s, self.w));
    }

    /// A link for the median of `metric` over the job's series, if it changed.
    pub(super) fn aggregate(&mut self, domain: &str, metric: &str, how: &str) {
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
            super::super::format::sql_gpu_aggregate(metric, &self.ctx.job.job, self.w.from, self.w.to)
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
    pub(super) fn data_timeline_free(&self) -> super::super::load::Timeline<'static> {
        super::super::load::Timeline::raw()
    }
}
