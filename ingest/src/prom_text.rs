//! Prometheus text exposition format (version 0.0.4) parser producing engine [`WriteBatch`]es.
//!
//! Accepted: `# HELP name text` (escapes `\\` and `\n`), `# TYPE name
//! counter|gauge|histogram|summary|untyped`, other `#` comments (ignored, including
//! OpenMetrics' `# EOF`), blank lines, and samples
//! `name{label="value",...} value [timestamp_ms]` with label-value escapes `\\`, `\"`, `\n`,
//! a trailing comma in the label set, values `NaN`, `+Inf`, `-Inf` and floats, and optional
//! integer timestamps in milliseconds (OpenMetrics, [`ParseOptions::openmetrics`]: seconds with
//! an optional fraction). Histograms and summaries are plain series
//! (`_bucket{le=..}`, `_sum`, `_count`, `{quantile=..}`).
//!
//! The `host` label (required by the engine) comes from the sample when present, otherwise
//! from [`ParseOptions::default_host`] (the scrape target). Samples without a timestamp get
//! [`ParseOptions::default_time_ns`] (the scrape time). Empty label values are absent. A
//! series given twice at the same time is an error, as Prometheus refuses such a scrape.
//! Errors name the 1-based line.

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use lockstep_engine::model::{HOST_LABEL, validate_time};
use lockstep_engine::{ErrorKind, SeriesKey, WriteBatch};

/// Caller-supplied defaults.
#[derive(Debug, Clone, Copy)]
pub struct ParseOptions<'a> {
    /// Host for samples without a `host` label; `None` makes such samples an error.
    pub default_host: Option<&'a str>,
    /// Timestamp (ns since the Unix epoch, host clock) for samples without one.
    pub default_time_ns: i64,
    /// OpenMetrics timestamps: seconds since the epoch with an optional fraction (`1.5`),
    /// instead of the Prometheus text format's integer milliseconds.
    pub openmetrics: bool,
}

/// The declared type of a metric family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FamilyType {
    /// `counter`.
    Counter,
    /// `gauge`.
    Gauge,
    /// `histogram`.
    Histogram,
    /// `summary`.
    Summary,
    /// `untyped`.
    Untyped,
}

/// HELP and TYPE metadata of one family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FamilyMeta {
    /// Family name.
    pub name: String,
    /// Unescaped HELP text.
    pub help: Option<String>,
    /// Declared TYPE.
    pub family_type: Option<FamilyType>,
}

/// A parsed exposition.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Exposition {
    /// The samples, grouped by series in input order.
    pub batch: WriteBatch,
    /// Families with HELP or TYPE lines, in order of first mention.
    pub families: Vec<FamilyMeta>,
}

/// A malformed exposition; every variant names the 1-based line.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PromTextError {
    /// A metric name does not match `[a-zA-Z_:][a-zA-Z0-9_:]*`.
    #[error("line {line}: invalid metric name {name:?}")]
    InvalidMetricName {
        /// Line number.
        line: usize,
        /// The offending text.
        name: String,
    },
    /// A label name does not match `[a-zA-Z_][a-zA-Z0-9_]*`.
    #[error("line {line}: invalid label name {name:?}")]
    InvalidLabelName {
        /// Line number.
        line: usize,
        /// The offending text.
        name: String,
    },
    /// A label appears twice in one sample.
    #[error("line {line}: label {name} appears twice")]
    DuplicateLabel {
        /// Line number.
        line: usize,
        /// The label name.
        name: String,
    },
    /// A label value has an escape other than `\\`, `\"`, `\n`.
    #[error("line {line}: invalid escape \\{escape} in a label value")]
    InvalidEscape {
        /// Line number.
        line: usize,
        /// The character after the backslash.
        escape: char,
    },
    /// A series has two samples at the same time (Prometheus refuses such a scrape: which
    /// value is meant?).
    #[error("line {line}: series {series} already has a sample at this time, on line {first}")]
    DuplicateSample {
        /// Line number.
        line: usize,
        /// The line of the first sample.
        first: usize,
        /// The series.
        series: String,
    },
    /// The line's structure is wrong.
    #[error("line {line}: {reason}")]
    Malformed {
        /// Line number.
        line: usize,
        /// What was expected.
        reason: &'static str,
    },
    /// The sample value is not a float, `NaN` or `±Inf`.
    #[error("line {line}: invalid sample value {value:?}")]
    InvalidValue {
        /// Line number.
        line: usize,
        /// The offending text.
        value: String,
    },
    /// The timestamp is not an integer number of ms (OpenMetrics: seconds with an optional
    /// fraction) in the accepted time range.
    #[error(
        "line {line}: invalid timestamp {value:?} (integer ms since the epoch, or seconds in OpenMetrics, expected)"
    )]
    InvalidTimestamp {
        /// Line number.
        line: usize,
        /// The offending text.
        value: String,
    },
    /// A `# TYPE` line names an unknown type.
    #[error("line {line}: unknown metric type {value:?}")]
    InvalidType {
        /// Line number.
        line: usize,
        /// The offending text.
        value: String,
    },
    /// A sample has no `host` label and the caller gave no default host.
    #[error("line {line}: sample of {metric} has no host label and no default host was given")]
    MissingHost {
        /// Line number.
        line: usize,
        /// The metric name.
        metric: String,
    },
    /// The engine rejects the series (e.g. a reserved label name such as `value`).
    #[error("line {line}: {reason}")]
    InvalidSeries {
        /// Line number.
        line: usize,
        /// The engine's reason.
        reason: String,
    },
}

impl PromTextError {
    /// Every parse error is the caller's: invalid argument.
    pub fn kind(&self) -> ErrorKind {
        ErrorKind::InvalidArgument
    }
}

/// Parses a whole exposition.
pub fn parse(text: &str, options: &ParseOptions<'_>) -> Result<Exposition, PromTextError> {
    let mut out = Exposition::default();
    let mut family_index: HashMap<String, usize> = HashMap::new();
    let mut labels: Vec<(String, String)> = Vec::new();
    let mut eof = false;
    // Each series' sample times, with their lines: a series given twice at one time is an error.
    let mut seen: HashMap<(SeriesKey, i64), usize> = HashMap::new();
    for (i, raw) in text.split('\n').enumerate() {
        let line = i + 1;
        let body = raw.strip_suffix('\r').unwrap_or(raw).trim_start_matches([' ', '\t']);
        if body.is_empty() {
            continue;
        }
        // OpenMetrics ends at `# EOF`: anything after it is not part of the exposition (two
        // scrapes concatenated into one file), and importing it would be a guess.
        if eof {
            return Err(PromTextError::Malformed { line, reason: "content after `# EOF`" });
        }
        if body.trim_end() == "# EOF" {
            eof = true;
            continue;
        }
        if let Some(comment) = body.strip_prefix('#') {
            parse_comment(comment, line, &mut out.families, &mut family_index)?;
            continue;
        }
        labels.clear();
        let (key, value, time) = parse_sample(body, line, options, &mut labels)?;
        match seen.entry((key, time)) {
            Entry::Occupied(e) => {
                return Err(PromTextError::DuplicateSample { line, first: *e.get(), series: e.key().0.to_string() });
            }
            Entry::Vacant(e) => {
                out.batch.push(e.key().0.clone(), time, value);
                e.insert(line);
            }
        }
    }
    Ok(out)
}

fn parse_comment(
    comment: &str,
    line: usize,
    families: &mut Vec<FamilyMeta>,
    index: &mut HashMap<String, usize>,
) -> Result<(), PromTextError> {
    let comment = comment.trim_start_matches([' ', '\t']);
    let (keyword, rest) = split_token(comment);
    if keyword != "HELP" && keyword != "TYPE" {
        return Ok(());
    }
    let (name, rest) = split_token(rest.trim_start_matches([' ', '\t']));
    if !is_metric_name(name) {
        return Err(PromTextError::InvalidMetricName { line, name: name.to_owned() });
    }
    let slot = *index.entry(name.to_owned()).or_insert_with(|| {
        families.push(FamilyMeta { name: name.to_owned(), help: None, family_type: None });
        families.len() - 1
    });
    let rest = rest.strip_prefix([' ', '\t']).unwrap_or(rest);
    if keyword == "HELP" {
        families[slot].help = Some(unescape_help(rest));
    } else {
        let value = rest.trim_matches([' ', '\t']);
        let t = match value {
            "counter" => FamilyType::Counter,
            "gauge" => FamilyType::Gauge,
            "histogram" => FamilyType::Histogram,
            "summary" => FamilyType::Summary,
            "untyped" | "unknown" => FamilyType::Untyped,
            _ => {
                return Err(PromTextError::InvalidType { line, value: value.to_owned() });
            }
        };
        families[slot].family_type = Some(t);
    }
    Ok(())
}

fn parse_sample(
    body: &str,
    line: usize,
    options: &ParseOptions<'_>,
    labels: &mut Vec<(String, String)>,
) -> Result<(SeriesKey, f64, i64), PromTextError> {
    let name_len = body.find(['{', ' ', '\t']).unwrap_or(body.len());
    let name = &body[..name_len];
    if !is_metric_name(name) {
        return Err(PromTextError::InvalidMetricName { line, name: name.to_owned() });
    }
    let mut rest = &body[name_len..];
    if let Some(after_brace) = rest.trim_start_matches([' ', '\t']).strip_prefix('{') {
        rest = parse_labels(after_brace, line, labels)?;
    }
    if !rest.starts_with([' ', '\t']) && !rest.is_empty() {
        return Err(PromTextError::Malformed { line, reason: "expected a blank before the value" });
    }
    let rest = rest.trim_start_matches([' ', '\t']);
    let (value_text, rest) = split_token(rest);
    if value_text.is_empty() {
        return Err(PromTextError::Malformed { line, reason: "missing sample value" });
    }
    let value: f64 =
        value_text.parse().map_err(|_| PromTextError::InvalidValue { line, value: value_text.to_owned() })?;
    let rest = rest.trim_start_matches([' ', '\t']);
    let (ts_text, rest) = if rest.starts_with('#') { ("", rest) } else { split_token(rest) };
    let rest = rest.trim_matches([' ', '\t']);
    match rest.strip_prefix('#') {
        _ if rest.is_empty() => {}
        // An OpenMetrics exemplar (`# {trace_id="…"} 1.5 [time]`): checked, not stored.
        Some(exemplar) if options.openmetrics => check_exemplar(exemplar, line)?,
        _ if ts_text.is_empty() => {
            return Err(PromTextError::Malformed { line, reason: "unexpected text after the value" });
        }
        _ => return Err(PromTextError::Malformed { line, reason: "unexpected text after the timestamp" }),
    }
    let bad_ts = || PromTextError::InvalidTimestamp { line, value: ts_text.to_owned() };
    let time = if ts_text.is_empty() {
        options.default_time_ns
    } else if options.openmetrics {
        seconds_to_ns(ts_text).ok_or_else(bad_ts)?
    } else {
        let ms: i64 = ts_text.parse().map_err(|_| bad_ts())?;
        ms.checked_mul(1_000_000).ok_or_else(bad_ts)?
    };
    if !labels.iter().any(|(k, v)| k == HOST_LABEL && !v.is_empty()) {
        let host = options.default_host.ok_or_else(|| PromTextError::MissingHost { line, metric: name.to_owned() })?;
        labels.retain(|(k, _)| k != HOST_LABEL);
        labels.push((HOST_LABEL.to_owned(), host.to_owned()));
    }
    let key = SeriesKey::new(name, labels.drain(..));
    key.validate().map_err(|e| PromTextError::InvalidSeries { line, reason: e.to_string() })?;
    if !ts_text.is_empty() {
        validate_time(&key, time).map_err(|_| bad_ts())?;
    }
    Ok((key, value, time))
}

/// Parses `name="value",...}` (after the `{`), returning the text after the `}`.
fn parse_labels<'a>(mut s: &'a str, line: usize, labels: &mut Vec<(String, String)>) -> Result<&'a str, PromTextError> {
    loop {
        s = s.trim_start_matches([' ', '\t']);
        if let Some(after) = s.strip_prefix('}') {
            return Ok(after);
        }
        let name_len = s.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(s.len());
        let name = &s[..name_len];
        if !is_label_name(name) {
            let shown = s.split(['=', ',', '}']).next().unwrap_or(s);
            return Err(PromTextError::InvalidLabelName { line, name: shown.to_owned() });
        }
        s = s[name_len..].trim_start_matches([' ', '\t']);
        s = s
            .strip_prefix('=')
            .ok_or(PromTextError::Malformed { line, reason: "expected '=' after a label name" })?
            .trim_start_matches([' ', '\t']);
        s = s
            .strip_prefix('"')
            .ok_or(PromTextError::Malformed { line, reason: "expected '\"' to open a label value" })?;
        let (value, after) = read_label_value(s, line)?;
        if labels.iter().any(|(k, _)| k == name) {
            return Err(PromTextError::DuplicateLabel { line, name: name.to_owned() });
        }
        labels.push((name.to_owned(), value));
        s = after.trim_start_matches([' ', '\t']);
        if let Some(after_comma) = s.strip_prefix(',') {
            s = after_comma;
        } else if !s.starts_with('}') {
            return Err(PromTextError::Malformed { line, reason: "expected ',' or '}' after a label value" });
        }
    }
}

/// Reads an escaped label value up to its closing quote; returns it and the text after.
fn read_label_value(s: &str, line: usize) -> Result<(String, &str), PromTextError> {
    let mut value = String::new();
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Ok((value, &s[i + 1..])),
            '\\' => match chars.next() {
                Some((_, '\\')) => value.push('\\'),
                Some((_, '"')) => value.push('"'),
                Some((_, 'n')) => value.push('\n'),
                Some((_, other)) => {
                    return Err(PromTextError::InvalidEscape { line, escape: other });
                }
                None => break,
            },
            c => value.push(c),
        }
    }
    Err(PromTextError::Malformed { line, reason: "unterminated label value" })
}

fn unescape_help(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('\\') => out.push('\\'),
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    out
}

/// Splits at the first blank: (token, rest starting at the blank).
/// An OpenMetrics exemplar after the `#`: `{labels} value [timestamp]`, well formed.
fn check_exemplar(text: &str, line: usize) -> Result<(), PromTextError> {
    let malformed = PromTextError::Malformed { line, reason: "malformed exemplar (`# {labels} value [timestamp]`)" };
    let Some(after_brace) = text.trim_start_matches([' ', '\t']).strip_prefix('{') else { return Err(malformed) };
    let rest = parse_labels(after_brace, line, &mut Vec::new())?;
    let (value, rest) = split_token(rest.trim_start_matches([' ', '\t']));
    let (time, rest) = split_token(rest.trim_start_matches([' ', '\t']));
    let number = |t: &str| t.parse::<f64>().is_ok();
    if !number(value) || !(time.is_empty() || number(time)) || !rest.trim_matches([' ', '\t']).is_empty() {
        return Err(malformed);
    }
    Ok(())
}

fn split_token(s: &str) -> (&str, &str) {
    let end = s.find([' ', '\t']).unwrap_or(s.len());
    (&s[..end], &s[end..])
}

fn is_metric_name(name: &str) -> bool {
    let mut b = name.bytes();
    matches!(b.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_' || c == b':')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b':')
}

fn is_label_name(name: &str) -> bool {
    let mut b = name.bytes();
    matches!(b.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

#[cfg(test)]
mod tests;

/// `123`, `123.5` or `123.000000001` seconds → ns, exactly (digits past ns truncated).
fn seconds_to_ns(text: &str) -> Option<i64> {
    let (whole, frac) = text.split_once('.').unwrap_or((text, ""));
    if whole.is_empty() || !whole.bytes().all(|b| b.is_ascii_digit()) || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let secs: i64 = whole.parse().ok()?;
    let mut nanos = 0i64;
    for (i, b) in frac.bytes().take(9).enumerate() {
        nanos += i64::from(b - b'0') * 10i64.pow(8 - i as u32);
    }
    secs.checked_mul(lockstep_engine::model::SEC)?.checked_add(nanos)
}
