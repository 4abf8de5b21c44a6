//! Streaming CSV reader for the long format.

use std::fs::File;
use std::path::Path;

use super::{ImportError, Progress, RowSink};

fn parse(record: &csv::ByteRecord, i: usize) -> Option<&str> {
    record.get(i).and_then(|b| std::str::from_utf8(b).ok())
}

/// Field `i` as text: `Ok(None)` when the record has no such field, an error naming the
/// column and the offending byte when it is not UTF-8 (a Latin-1 label value is refused, not
/// read as missing: that merged series and hid their rows).
fn text<'a>(record: &'a csv::ByteRecord, i: usize, name: &str) -> Result<Option<&'a str>, String> {
    match record.get(i) {
        None => Ok(None),
        Some(bytes) => std::str::from_utf8(bytes).map(Some).map_err(|e| {
            let at = e.valid_up_to();
            format!("column {name} is not valid UTF-8 (byte 0x{:02x} at offset {at})", bytes[at])
        }),
    }
}

/// Reads `path` into `sink`.
pub(super) fn read(path: &Path, sink: &mut RowSink<'_>, progress: Progress<'_>) -> Result<(), ImportError> {
    let bad_file = |reason: String| ImportError::BadFile { file: path.to_path_buf(), reason };
    let file = File::open(path).map_err(|e| bad_file(e.to_string()))?;
    let total_bytes = file.metadata().map(|m| m.len()).ok();
    let mut reader =
        csv::ReaderBuilder::new().has_headers(true).flexible(false).buffer_capacity(1 << 20).from_reader(file);
    let headers = reader.byte_headers().map_err(|e| bad_file(format!("cannot read header: {e}")))?.clone();
    let mut names: Vec<String> = Vec::with_capacity(headers.len());
    for (i, h) in headers.iter().enumerate() {
        let name = std::str::from_utf8(h)
            .map_err(|_| {
                bad_file(format!("header column {} ({:?}) is not valid UTF-8", i + 1, String::from_utf8_lossy(h)))
            })?
            .trim();
        if names.iter().any(|n| n == name) {
            return Err(bad_file(format!("column {name:?} appears twice in the header")));
        }
        names.push(name.to_string());
    }
    let find = |name: &str| {
        names.iter().position(|n| n == name).ok_or_else(|| bad_file(format!("missing required column {name}")))
    };
    let (time_i, metric_i, value_i) = (find("time")?, find("metric")?, find("value")?);
    find("host")?;
    // Labels: host first, then the other columns in file order.
    let mut label_idx: Vec<usize> = vec![names.iter().position(|n| n == "host").unwrap_or(0)];
    label_idx.extend((0..names.len()).filter(|&i| !["time", "metric", "value", "host"].contains(&names[i].as_str())));
    sink.set_columns(label_idx.iter().map(|&i| names[i].clone()).collect())?;
    let mut record = csv::ByteRecord::new();
    let mut row = 0u64;
    loop {
        match reader.read_byte_record(&mut record) {
            Ok(false) => break,
            Ok(true) => {}
            Err(e) => {
                row += 1;
                let reason = match e.kind() {
                    csv::ErrorKind::UnequalLengths { expected_len, len, .. } => {
                        format!("has {len} fields, the header has {expected_len}")
                    }
                    _ => e.to_string(),
                };
                // A structural error may leave the reader unable to continue.
                sink.bad_row(row, reason)?;
                if matches!(e.kind(), csv::ErrorKind::Io(_)) {
                    return Err(bad_file(e.to_string()));
                }
                continue;
            }
        }
        row += 1;
        if row.is_multiple_of(65_536) {
            progress(reader.position().byte(), total_bytes);
        }
        let time = match parse(&record, time_i).map(str::trim).map(str::parse::<i64>) {
            Some(Ok(t)) => t,
            Some(Err(e)) => {
                sink.bad_row(
                    row,
                    format!("time {:?} is not an integer of ns: {e}", parse(&record, time_i).unwrap_or("")),
                )?;
                continue;
            }
            None => {
                sink.bad_row(row, "time is not utf-8".into())?;
                continue;
            }
        };
        let value = match parse(&record, value_i).map(str::trim).map(|t| (t, t.parse::<f64>())) {
            Some((t, Ok(v))) => {
                // An integer of more than 15 digits may be beyond what a f64 holds exactly.
                if t.len() > 15
                    && let Some(exact) = t.parse::<i128>().ok().and_then(|i| super::inexact_integer(i, v))
                {
                    sink.rounded(row, exact, v);
                }
                v
            }
            _ => {
                sink.bad_row(
                    row,
                    format!("value {:?} is not a number", parse(&record, value_i).unwrap_or("<not utf-8>")),
                )?;
                continue;
            }
        };
        let mut fields: Vec<Option<&str>> = Vec::with_capacity(label_idx.len() + 1);
        let mut bad = None;
        for i in std::iter::once(metric_i).chain(label_idx.iter().copied()) {
            match text(&record, i, &names[i]) {
                Ok(field) => fields.push(field),
                Err(reason) => {
                    bad = Some(reason);
                    break;
                }
            }
        }
        if let Some(reason) = bad {
            sink.bad_row(row, reason)?;
            continue;
        }
        sink.push(row, time, value, &fields)?;
    }
    progress(total_bytes.unwrap_or(0), total_bytes);
    Ok(())
}
