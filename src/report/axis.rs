//! Axes of the report's charts: readable units for the metric catalog's units (seconds shown as
//! s/ms/µs, bytes as kB…TB, ratios as %), "nice" tick values, and time ticks.

use lockstep_engine::model::SEC;

/// How a catalog unit is displayed: values are multiplied by `mult` and labelled `unit`.
#[derive(Debug, Clone, PartialEq)]
pub struct Scale {
    /// Factor from the raw value to the displayed value.
    pub mult: f64,
    /// Displayed unit (`ms`, `GB/s`, `%`, `W`, `errors/s`, …; may be empty).
    pub unit: String,
}

/// The family of a catalog unit: the base it converts to and how it takes prefixes.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Family {
    /// Seconds: s, ms, µs, ns.
    Time,
    /// Bytes (or bytes per second): B, kB, MB, GB, TB.
    Bytes,
    /// Fixed unit, no prefix (%, °C, MHz).
    Fixed,
    /// Anything else: SI prefixes k, M, G on the number (W, packets/s, errors/s).
    Si,
}

/// The base unit, its factor from the catalog unit, the family and a `/s` suffix.
fn base(unit: &str) -> (f64, String, Family) {
    let (u, per_s) = match unit.strip_suffix("/s") {
        Some(u) => (u, "/s"),
        None => (unit, ""),
    };
    let (mult, name, family) = match u {
        "s" | "seconds" | "second" => (1.0, "s", Family::Time),
        "ms" | "milliseconds" => (1e-3, "s", Family::Time),
        "µs" | "us" | "microseconds" => (1e-6, "s", Family::Time),
        "ns" | "nanoseconds" => (1e-9, "s", Family::Time),
        "bytes" | "B" => (1.0, "B", Family::Bytes),
        "GB" => (1e9, "B", Family::Bytes),
        "MB" => (1e6, "B", Family::Bytes),
        "percent" | "%" => (1.0, "%", Family::Fixed),
        "ratio" => (100.0, "%", Family::Fixed),
        "celsius" => (1.0, "°C", Family::Fixed),
        "MHz" => (1.0, "MHz", Family::Fixed),
        "watts" | "W" => (1.0, "W", Family::Si),
        other => (1.0, other, Family::Si),
    };
    // Time per second (a counter of seconds) is a fraction of the time: keep it as a rate.
    let family = if family == Family::Time && !per_s.is_empty() { Family::Si } else { family };
    (mult, format!("{name}{per_s}"), family)
}

/// The factor from `unit` to its base unit ([`base_unit`]): 1e-6 for microseconds, 100 for a
/// ratio (shown in %).
pub fn to_base(unit: &str) -> f64 {
    base(unit).0
}

/// The unit a chart groups lanes by (lanes in ratio and percent share one `%` axis).
pub fn base_unit(unit: &str) -> String {
    base(unit).1
}

/// The display scale of `unit` for values up to `max_abs` (raw, in the catalog unit).
pub fn scale(unit: &str, max_abs: f64) -> Scale {
    let (mult, name, family) = base(unit);
    let m = (max_abs * mult).abs();
    let pick = |steps: &[(f64, &str)]| -> (f64, String) {
        for &(f, p) in steps {
            if m >= f {
                return (1.0 / f, p.to_string());
            }
        }
        let (f, p) = steps[steps.len() - 1];
        (1.0 / f, p.to_string())
    };
    match family {
        Family::Time => {
            let (f, p) = pick(&[(1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns")]);
            Scale { mult: mult * f, unit: p }
        }
        Family::Bytes => {
            let (f, p) = pick(&[(1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB"), (1.0, "B")]);
            Scale { mult: mult * f, unit: format!("{p}{}", name.trim_start_matches('B')) }
        }
        Family::Fixed => Scale { mult, unit: name },
        Family::Si => {
            let (f, p) = pick(&[(1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, "")]);
            let sep = if p.is_empty() || name.is_empty() { "" } else { " " };
            let unit = if name.is_empty() { p } else { format!("{p}{sep}{name}").trim().to_string() };
            // `kW`, `MW` read better without a space; `k packets/s` with one.
            let unit = if name.len() <= 2 { unit.replace(' ', "") } else { unit };
            Scale { mult: mult * f, unit }
        }
    }
}

/// About `n` round tick values (1, 2 or 5 × 10^k apart) covering `[lo, hi]`.
pub fn ticks(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    if !(lo.is_finite() && hi.is_finite()) || hi <= lo || n == 0 {
        return vec![lo];
    }
    let raw = (hi - lo) / n as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0].into_iter().map(|k| k * mag).find(|s| *s >= raw).unwrap_or(10.0 * mag);
    let first = (lo / step).ceil() as i64;
    let last = (hi / step).floor() as i64;
    (first..=last).map(|k| k as f64 * step).collect()
}

/// A tick or hover value with as many decimals as the tick step needs (at most 3 significant).
pub fn fmt_value(v: f64, step: f64) -> String {
    let decimals = if step > 0.0 && step < 1.0 { (-step.log10().floor()) as usize } else { 0 };
    let s = format!("{:.*}", decimals.min(6), v);
    if s.starts_with("-0") && s.trim_start_matches(['-', '0', '.']).is_empty() { s[1..].to_string() } else { s }
}

/// Time ticks (reference ns) on round seconds/minutes/hours, about `n` of them in `[from, to]`.
pub fn time_ticks(from: i64, to: i64, n: i64) -> Vec<i64> {
    const STEPS: [i64; 14] = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200];
    let span = (to - from).max(1);
    let step = STEPS.iter().map(|s| s * SEC).find(|s| span / s <= n).unwrap_or(span / n.max(1)).max(1);
    let first = from.div_euclid(step) * step + if from.rem_euclid(step) == 0 { 0 } else { step };
    (0..).map(|k| first + k * step).take_while(|t| *t <= to).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scales_pick_readable_units() {
        assert_eq!(scale("seconds", 0.004), Scale { mult: 1e3, unit: "ms".into() });
        assert_eq!(scale("s", 2.5).unit, "s");
        let us = scale("microseconds", 850.0);
        assert_eq!(us.unit, "µs");
        assert!((us.mult - 1.0).abs() < 1e-9);
        assert_eq!(scale("microseconds", 85_000.0).unit, "ms");
        assert_eq!(scale("bytes/s", 2.4e10).unit, "GB/s");
        assert_eq!(scale("ratio", 0.9), Scale { mult: 100.0, unit: "%".into() });
        assert_eq!(scale("percent", 95.0).unit, "%");
        assert_eq!(scale("watts", 700.0).unit, "W");
        assert_eq!(scale("watts", 7_000.0).unit, "kW");
        assert_eq!(scale("errors/s", 12_000.0).unit, "k errors/s");
        assert_eq!(scale("", 5.0).unit, "");
        assert_eq!(base_unit("ratio"), base_unit("percent"));
        assert_eq!((to_base("ratio"), to_base("percent")), (100.0, 1.0));
        // A chart in its base unit: microseconds become seconds, then a readable scale again.
        assert_eq!(base_unit("microseconds"), "s");
        assert_eq!(scale("s", 850.0 * to_base("microseconds")).unit, "µs");
    }

    #[test]
    fn ticks_are_round() {
        let shown = |lo: f64, hi: f64, n: usize| -> Vec<String> {
            let t = ticks(lo, hi, n);
            let step = t[1] - t[0];
            t.iter().map(|v| fmt_value(*v, step)).collect()
        };
        assert_eq!(shown(0.0, 1.0, 5), ["0.0", "0.2", "0.4", "0.6", "0.8", "1.0"]);
        assert_eq!(shown(3.0, 47.0, 5), ["10", "20", "30", "40"]);
        assert_eq!(fmt_value(0.25, 0.05), "0.25");
        assert_eq!(fmt_value(40.0, 10.0), "40");
        let t = time_ticks(10 * SEC + 300_000_000, 10 * SEC + 600 * SEC, 6);
        assert_eq!(t.first(), Some(&(120 * SEC)));
        assert!(t.iter().all(|t| t % (120 * SEC) == 0), "{t:?}");
    }
}
