//! Formatting of times, durations and changes in the diagnosis' evidence, and the SQL that
//! reproduces each piece of evidence. (Rendering the diagnosis as text or HTML is the
//! binary's job: `src/report/`.)

use std::fmt::Write as _;

use super::UNCERTAINTY_UNKNOWN;
use super::context::SeriesMeta;
use lockstep_engine::model::{MILLI, SEC};

/// `HH:MM:SS.mmm` (UTC) of a reference time.
pub fn fmt_time(ns: i64) -> String {
    let secs = ns.div_euclid(SEC);
    let ms = ns.rem_euclid(SEC) / MILLI;
    let sod = secs.rem_euclid(86_400);
    format!("{:02}:{:02}:{:02}.{ms:03}", sod / 3600, sod % 3600 / 60, sod % 60)
}

/// RFC 3339 UTC with nanoseconds (used in SQL literals).
pub fn fmt_rfc3339(ns: i64) -> String {
    let secs = ns.div_euclid(SEC);
    let nanos = ns.rem_euclid(SEC);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{nanos:09}Z", sod / 3600, sod % 3600 / 60, sod % 60)
}

/// A duration in the most readable unit (`unknown` for [`UNCERTAINTY_UNKNOWN`]).
pub fn fmt_duration(ns: i64) -> String {
    if ns == UNCERTAINTY_UNKNOWN {
        return "unknown".to_string();
    }
    let a = ns.unsigned_abs();
    if a >= SEC.unsigned_abs() {
        format!("{:.2} s", ns as f64 / SEC as f64)
    } else if a >= MILLI.unsigned_abs() {
        format!("{:.1} ms", ns as f64 / MILLI as f64)
    } else if a >= 1_000 {
        format!("{:.0} µs", ns as f64 / 1e3)
    } else {
        format!("{ns} ns")
    }
}

/// A number with about 3 significant digits.
pub fn fmt_num(v: f64) -> String {
    if !v.is_finite() {
        return v.to_string();
    }
    let a = v.abs();
    if a == 0.0 {
        "0".to_string()
    } else if a >= 1e6 {
        format!("{:.3e}", v)
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else if a >= 0.001 {
        format!("{v:.4}")
    } else {
        format!("{v:.2e}")
    }
}

/// `before → after unit`.
pub fn fmt_change(before: f64, after: f64, unit: &str) -> String {
    let sep = if unit.is_empty() || unit.starts_with('/') { "" } else { " " };
    format!("{} → {}{sep}{unit}", fmt_num(before), fmt_num(after))
}

pub(crate) fn quote(s: &str) -> String {
    s.replace('\'', "''")
}

/// SQL showing one series around the window (rates per 5 s for counters, raw values for gauges).
pub(crate) fn sql_series(meta: &SeriesMeta, from: i64, to: i64) -> String {
    let mut cond = format!("metric = '{}' AND entity = '{}'", quote(meta.metric()), quote(&meta.entity));
    for (k, v) in &meta.key.labels {
        if matches!(k.as_str(), "quantile" | "mode" | "job" | "cpu" | "rank" | "collective") {
            let _ = write!(cond, " AND {k} = '{}'", quote(v));
        }
    }
    let _ = write!(cond, " AND time >= '{}' AND time < '{}'", fmt_rfc3339(from), fmt_rfc3339(to));
    if meta.is_counter() {
        format!(
            "SELECT date_bin(INTERVAL '5 seconds', time) AS t, rate(time, value) AS per_second FROM samples WHERE {cond} GROUP BY 1 ORDER BY 1"
        )
    } else {
        format!("SELECT time, host, value FROM samples WHERE {cond} ORDER BY time")
    }
}

/// SQL for the median of a per-rank metric of a job per 5 s.
pub(crate) fn sql_aggregate(metric: &str, label: &str, value: &str, from: i64, to: i64) -> String {
    format!(
        "SELECT date_bin(INTERVAL '5 seconds', time) AS t, median(value) AS median, max(value) AS max FROM samples \
         WHERE metric = '{}' AND {label} = '{}' AND time >= '{}' AND time < '{}' GROUP BY 1 ORDER BY 1",
        quote(metric),
        quote(value),
        fmt_rfc3339(from),
        fmt_rfc3339(to)
    )
}

/// SQL for the median of a GPU metric over the job's GPUs per 5 s.
pub(crate) fn sql_gpu_aggregate(metric: &str, job: &str, from: i64, to: i64) -> String {
    format!(
        "SELECT date_bin(INTERVAL '5 seconds', time) AS t, median(value) AS median FROM samples \
         WHERE metric = '{}' AND entity IN (SELECT entity FROM job_entities('{}') WHERE entity_kind = 'gpu') \
         AND time >= '{}' AND time < '{}' GROUP BY 1 ORDER BY 1",
        quote(metric),
        quote(job),
        fmt_rfc3339(from),
        fmt_rfc3339(to)
    )
}

/// Howard Hinnant's days → civil date.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(fmt_time(1_767_225_600_123_456_789 + 42_130_000_000_000), "11:42:10.123");
        assert_eq!(fmt_rfc3339(1_767_225_600_123_456_789), "2026-01-01T00:00:00.123456789Z");
        assert_eq!(fmt_change(0.0, 340.0, "errors/s"), "0 → 340 errors/s");
        assert_eq!(fmt_duration(1_500), "2 µs");
        assert_eq!(fmt_duration(UNCERTAINTY_UNKNOWN), "unknown");
    }
}
