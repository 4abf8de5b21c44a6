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
                w.write(&csv_ready(b)?)?;
            }
        }
        Format::Json => {
            let mut w = json_writer(out);
            for b in batches {
                w.write(b)?;
            }
            w.finish()?;
        }
    }
    Ok(())
}

/// The `json` format's writer: one object per row with every column (a NULL as `null`, where
/// arrow-json leaves the key out, so that every line has the result's columns), floats that
/// are not finite as strings ([`NonFinite`]).
fn json_writer(
    out: &mut dyn std::io::Write,
) -> arrow::json::Writer<&mut dyn std::io::Write, arrow::json::writer::LineDelimited> {
    arrow::json::WriterBuilder::new()
        .with_explicit_nulls(true)
        .with_encoder_factory(std::sync::Arc::new(NonFinite))
        .build(out)
}

/// Writes a float that is not finite as the string `"NaN"`, `"Infinity"` or `"-Infinity"` (as
/// protobuf's and OTLP's JSON write them), where arrow-json writes `null`, which reads as a
/// missing value: `change_points`' `after = inf` printed as `null`. At every depth (a list's
/// elements, a struct's fields) and in the CSV format's nested columns, which are JSON text.
#[derive(Debug)]
struct NonFinite;

impl arrow::json::writer::EncoderFactory for NonFinite {
    fn make_default_encoder<'a>(
        &self,
        field: &'a arrow::datatypes::FieldRef,
        array: &'a dyn arrow::array::Array,
        _options: &'a arrow::json::writer::EncoderOptions,
    ) -> Result<Option<arrow::json::writer::NullableEncoder<'a>>, arrow::error::ArrowError> {
        use arrow::array::AsArray;
        use arrow::datatypes::{DataType, Float16Type, Float32Type, Float64Type};
        let value: Box<dyn Fn(usize) -> f64 + 'a> = match array.data_type() {
            DataType::Float64 => {
                let values = array.as_primitive::<Float64Type>().values();
                Box::new(move |i| values[i])
            }
            DataType::Float32 => {
                let values = array.as_primitive::<Float32Type>().values();
                Box::new(move |i| f64::from(values[i]))
            }
            DataType::Float16 => {
                let values = array.as_primitive::<Float16Type>().values();
                Box::new(move |i| f64::from(values[i]))
            }
            _ => return Ok(None),
        };
        // Finite values as arrow-json writes them.
        static PLAIN: std::sync::LazyLock<arrow::json::writer::EncoderOptions> =
            std::sync::LazyLock::new(Default::default);
        let plain = arrow::json::writer::make_encoder(field, array, &PLAIN)?;
        let nulls = array.logical_nulls();
        Ok(Some(arrow::json::writer::NullableEncoder::new(Box::new(NonFiniteEncoder { value, plain }), nulls)))
    }
}

struct NonFiniteEncoder<'a> {
    value: Box<dyn Fn(usize) -> f64 + 'a>,
    plain: arrow::json::writer::NullableEncoder<'a>,
}

impl arrow::json::writer::Encoder for NonFiniteEncoder<'_> {
    fn encode(&mut self, idx: usize, out: &mut Vec<u8>) {
        let v = (self.value)(idx);
        match v {
            v if v.is_nan() => out.extend_from_slice(b"\"NaN\""),
            v if v == f64::INFINITY => out.extend_from_slice(b"\"Infinity\""),
            v if v == f64::NEG_INFINITY => out.extend_from_slice(b"\"-Infinity\""),
            _ => self.plain.encode(idx, out),
        }
    }
}

/// `batch` with every nested column (struct, list, map: what `onset`, `change_points`,
/// `lag_corr` and `gap_fill` return) as its JSON text, which CSV can hold; other columns as
/// they are. A null stays an empty field.
fn csv_ready(batch: &RecordBatch) -> anyhow::Result<RecordBatch> {
    use std::sync::Arc;
    if !batch.schema().fields().iter().any(|f| f.data_type().is_nested()) {
        return Ok(batch.clone());
    }
    let mut fields = Vec::with_capacity(batch.num_columns());
    let mut columns: Vec<arrow::array::ArrayRef> = Vec::with_capacity(batch.num_columns());
    for (field, column) in batch.schema().fields().iter().zip(batch.columns()) {
        if !field.data_type().is_nested() {
            fields.push(field.as_ref().clone());
            columns.push(column.clone());
            continue;
        }
        // Each value through arrow-json's encoder, the one the `json` format writes rows with.
        let options = arrow::json::writer::EncoderOptions::default().with_encoder_factory(Arc::new(NonFinite));
        let mut encoder = arrow::json::writer::make_encoder(field, column.as_ref(), &options)?;
        let mut texts = arrow::array::StringBuilder::new();
        let mut text = Vec::new();
        for row in 0..column.len() {
            if encoder.is_null(row) {
                texts.append_null();
                continue;
            }
            text.clear();
            encoder.encode(row, &mut text);
            texts.append_value(std::str::from_utf8(&text)?);
        }
        fields.push(arrow::datatypes::Field::new(field.name(), arrow::datatypes::DataType::Utf8, true));
        columns.push(Arc::new(texts.finish()));
    }
    Ok(RecordBatch::try_new(Arc::new(arrow::datatypes::Schema::new(fields)), columns)?)
}

/// Writes a result batch by batch: csv and json rows go out as each batch arrives; the table
/// format needs every batch to size its columns, so it keeps them until [`Printer::finish`].
pub enum Printer<'a> {
    /// Batches held for the aligned table.
    Table {
        /// Where the table goes.
        out: &'a mut dyn std::io::Write,
        /// The batches so far.
        batches: Vec<RecordBatch>,
    },
    /// CSV with a header (before the first batch); boxed, the writer's state is large.
    Csv(Box<arrow::csv::Writer<&'a mut dyn std::io::Write>>),
    /// JSON Lines.
    Json(arrow::json::LineDelimitedWriter<&'a mut dyn std::io::Write>),
}

impl<'a> Printer<'a> {
    /// A printer of `format` to `out`.
    pub fn new(format: Format, out: &'a mut dyn std::io::Write) -> Self {
        match format {
            Format::Table => Printer::Table { out, batches: Vec::new() },
            Format::Csv => Printer::Csv(Box::new(arrow::csv::WriterBuilder::new().with_header(true).build(out))),
            Format::Json => Printer::Json(json_writer(out)),
        }
    }

    /// Writes (csv, json) or keeps (table) one batch.
    pub fn write(&mut self, batch: RecordBatch) -> anyhow::Result<()> {
        match self {
            Printer::Table { batches, .. } => batches.push(batch),
            Printer::Csv(w) => w.write(&csv_ready(&batch)?)?,
            Printer::Json(w) => w.write(&batch)?,
        }
        Ok(())
    }

    /// Writes the table (or the rest of the buffered output) and flushes.
    pub fn finish(self) -> anyhow::Result<()> {
        match self {
            Printer::Table { out, batches } => {
                writeln!(out, "{}", arrow::util::pretty::pretty_format_batches(&batches)?)?;
                out.flush()?;
            }
            Printer::Csv(w) => (*w).into_inner().flush()?,
            Printer::Json(mut w) => {
                w.finish()?;
                w.into_inner().flush()?;
            }
        }
        Ok(())
    }
}

/// A writer that remembers whether the reader went away (`EPIPE`, e.g. `| head`), so the
/// caller can stop quietly instead of reporting an error.
pub struct PipeWriter<W> {
    inner: W,
    closed: bool,
}

impl<W: std::io::Write> PipeWriter<W> {
    /// Wraps `inner`.
    pub fn new(inner: W) -> Self {
        PipeWriter { inner, closed: false }
    }

    /// Whether a write failed because the reader closed the pipe.
    pub fn closed(&self) -> bool {
        self.closed
    }

    fn note<T>(&mut self, r: std::io::Result<T>) -> std::io::Result<T> {
        if let Err(e) = &r {
            self.closed |= e.kind() == std::io::ErrorKind::BrokenPipe;
        }
        r
    }
}

impl<W: std::io::Write> std::io::Write for PipeWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let r = self.inner.write(buf);
        self.note(r)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let r = self.inner.flush();
        self.note(r)
    }
}

/// `println!` for the commands' output: through [`print_stdout`], so a closed pipe ends the
/// output quietly; other write errors return from the enclosing function (`?`).
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::output::print_stdout(&format!("{}\n", format_args!($($arg)*)))?
    };
}
pub(crate) use outln;

/// Writes `text` to stdout. A reader that went away (`| head`) ends the output quietly, not
/// with a panic as `print!` would; other write errors are returned.
pub fn print_stdout(text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut out = PipeWriter::new(std::io::stdout().lock());
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(_) if out.closed() => Ok(()),
        r => r,
    }
}

/// Formats ns since the epoch as RFC 3339 UTC with nanoseconds (the diagnosis text's
/// formatter, shared so every output of the binary prints time the same way).
pub use lockstep_query::diagnose::format::fmt_rfc3339 as format_ns;

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    /// Floats that are not finite keep their value in the json and csv formats, in lists and
    /// structs too (QA pass 18, F10: `change_points`' `after = inf` printed as `null`); a null
    /// stays `null` (a NULL column is written, not left out: QA pass 19), and finite values are
    /// written as before. A top-level csv column prints as arrow-csv does (`-inf`).
    #[test]
    fn non_finite_floats_are_written_as_strings_not_null() {
        use std::sync::Arc;

        use arrow::array::{ArrayRef, Float32Array, Float64Array, ListArray, RecordBatch, StructArray};
        use arrow::datatypes::{DataType, Field, Float64Type};
        let list = ListArray::from_iter_primitive::<Float64Type, _, _>([Some(vec![
            Some(f64::INFINITY),
            Some(f64::NAN),
            Some(1.0),
            None,
            Some(-2.5e300),
        ])]);
        let field = Arc::new(Field::new("a", DataType::Float32, true));
        let s = StructArray::from(vec![(field, Arc::new(Float32Array::from(vec![f32::NEG_INFINITY])) as ArrayRef)]);
        let batch = RecordBatch::try_from_iter([
            ("l", Arc::new(list) as ArrayRef),
            ("x", Arc::new(Float64Array::from(vec![f64::NEG_INFINITY])) as ArrayRef),
            ("s", Arc::new(s) as ArrayRef),
            ("n", Arc::new(Float64Array::from(vec![None])) as ArrayRef),
        ])
        .unwrap();
        let print = |format| {
            let mut out = Vec::new();
            super::print_batches(std::slice::from_ref(&batch), format, &mut out).unwrap();
            String::from_utf8(out).unwrap()
        };
        assert_eq!(
            print(super::Format::Json),
            "{\"l\":[\"Infinity\",\"NaN\",1.0,null,-2.5e300],\"x\":\"-Infinity\",\"s\":{\"a\":\"-Infinity\"},\"n\":null}\n"
        );
        assert_eq!(
            print(super::Format::Csv),
            "l,x,s,n\n\"[\"\"Infinity\"\",\"\"NaN\"\",1.0,null,-2.5e300]\",-inf,\"{\"\"a\"\":\"\"-Infinity\"\"}\",\n"
        );
    }

    #[test]
    fn formats_epoch_ns() {
        assert_eq!(super::format_ns(0), "1970-01-01T00:00:00.000000000Z");
        assert_eq!(super::format_ns(1_767_225_600_123_456_789), "2026-01-01T00:00:00.123456789Z");
    }
}
