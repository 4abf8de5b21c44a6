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

/// Formats ns since the epoch as RFC 3339 UTC with nanoseconds (the diagnosis text's
/// formatter, shared so every output of the binary prints time the same way).
pub use lockstep_query::diagnose::text::fmt_rfc3339 as format_ns;

#[cfg(test)]
mod tests {
    #[test]
    fn formats_epoch_ns() {
        assert_eq!(super::format_ns(0), "1970-01-01T00:00:00.000000000Z");
        assert_eq!(super::format_ns(1_767_225_600_123_456_789), "2026-01-01T00:00:00.123456789Z");
    }
}
