//! The report lanes of a diagnosis: the time series the HTML report draws (the rendering itself
//! is the binary's).

use super::*;

/// What the report lanes of an episode highlight.
#[derive(Default)]
pub(super) struct LaneHints {
    pub(super) culprit_host: Option<String>,
    /// Series ids of the suspect fabric counters.
    pub(super) fabric: Vec<u32>,
}

/// Report lanes: step time, GPU activity, collective time, fabric counters of the suspect path,
/// storage latency, data-loader wait.
pub(super) fn lanes(ctx: &JobContext, data: &Loaded, culprit_host: Option<&str>, fabric: &[&SeriesMeta]) -> Vec<Lane> {
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
    out
}
