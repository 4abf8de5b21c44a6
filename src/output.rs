//! Printing query results and timestamps.

use arrow::array::RecordBatch;

/// Output formats of `lockstep sql`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// An aligned text table.
    Table,
    /// CSV with a header.
    Csv,
    /// One JSON object per row (JSON Lines).
    Json,
}

/// Writes batches in the chosen format.
pub fn print_batches(batches: &[RecordBatch], format: Format, out: &mut dyn std::io::Write) -> anyhow::Result<()> {
    match format {
        Format::Table => writeln!(out, "{}", arrow::util::pretty::pretty_format_batches(batches)?)?,
        Format::Csv => {
            let mut w = arrow::csv::WriterBuilder::new().with_header(true).build(out);
            for b in batches {
                w.write(b)?;
            }
        }
        Format::Json => {
            let mut w = arrow::json::LineDelimitedWriter::new(out);
            for b in batches {
                w.write(b)?;
            }
            w.finish()?;
        }
    }
    Ok(())
}

/// Formats ns since the epoch as RFC 3339 UTC with nanoseconds.
pub fn format_ns(ns: i64) -> String {
    let secs = ns.div_euclid(1_000_000_000);
    let nanos = ns.rem_euclid(1_000_000_000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{nanos:09}Z", sod / 3600, sod % 3600 / 60, sod % 60)
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
    #[test]
    fn formats_epoch_ns() {
        assert_eq!(super::format_ns(0), "1970-01-01T00:00:00.000000000Z");
        assert_eq!(super::format_ns(1_767_225_600_123_456_789), "2026-01-01T00:00:00.123456789Z");
    }
}
