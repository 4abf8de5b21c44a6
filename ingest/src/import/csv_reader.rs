//! Streaming CSV reader for the long format.

use std::fs::File;
use std::path::Path;

use super::{ImportError, Progress, RowSink};

fn parse(record: &csv::ByteRecord, i: usize) -> Option<&str> {
    record.get(i).and_then(|b| std::str::from_utf8(b).ok())
}

/// Reads `path` into `sink`.
pub(super) fn read(path: &Path, sink: &mut RowSink<'_>, progress: Progress<'_>) -> Result<(), ImportError> {
    let bad_file = |reason: String| ImportError::BadFile { file: path.to_path_buf(), reason };
    let file = File::open(path).map_err(|e| bad_file(e.to_string()))?;
    let total_bytes = file.metadata().map(|m| m.len()).ok();
    let mut reader =
        csv::ReaderBuilder::new().has_headers(true).flexible(false).buffer_capacity(1 << 20).from_reader(file);
    let headers = reader.byte_headers().map_err(|e| bad_file(format!("cannot read header: {e}")))?.clone();
    let names: Vec<String> = headers.iter().map(|h| String::from_utf8_lossy(h).trim().to_string()).collect();
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
        let value = match parse(&record, value_i).map(str::trim).map(str::parse::<f64>) {
            Some(Ok(v)) => v,
            _ => {
                sink.bad_row(
                    row,
                    format!("value {:?} is not a number", parse(&record, value_i).unwrap_or("<not utf-8>")),
                )?;
                continue;
            }
        };
        let mut fields: Vec<Option<&str>> = Vec::with_capacity(label_idx.len() + 1);
        fields.push(parse(&record, metric_i));
        fields.extend(label_idx.iter().map(|&i| parse(&record, i)));
        sink.push(row, time, value, &fields)?;
    }
    progress(total_bytes.unwrap_or(0), total_bytes);
    Ok(())
}
