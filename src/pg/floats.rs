//! Floating-point values in PostgreSQL's text format. pgwire writes `inf`, `-inf`, `0` for
//! `-0`, `1e20` and `1.0`; PostgreSQL writes `Infinity`, `-Infinity`, `-0`, `1e+20` and `1`.
//! Clients parse the server's spelling: JDBC's `getDouble` fails on `inf` ("Bad value for type
//! double"), and `-0` is a different value. The shortest text that reads back to the same value
//! (PostgreSQL's output since version 12 with the default `extra_float_digits`), laid out as
//! PostgreSQL lays it out: fixed notation for decimal exponents from −4 up to the type's digits
//! (15 for float8, 6 for float4), else `d.ddde±XX`.

use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, RecordBatch, RecordBatchOptions, StringArray};
use arrow::datatypes::{DataType, Field, Float32Type, Float64Type, Schema};
use pgwire::api::results::{FieldFormat, FieldInfo};

/// A float8 as PostgreSQL writes it in text.
pub(super) fn float8_text(v: f64) -> String {
    special(v).map_or_else(|| layout(&format!("{v:e}"), 15), str::to_owned)
}

/// A float4 as PostgreSQL writes it in text (its own shortest digits, not a float8's).
pub(super) fn float4_text(v: f32) -> String {
    special(f64::from(v)).map_or_else(|| layout(&format!("{v:e}"), 6), str::to_owned)
}

fn special(v: f64) -> Option<&'static str> {
    if v.is_nan() {
        Some("NaN")
    } else if v == f64::INFINITY {
        Some("Infinity")
    } else if v == f64::NEG_INFINITY {
        Some("-Infinity")
    } else {
        None
    }
}

/// `sci` (Rust's shortest `{:e}`: `-1.25e-7`) laid out as PostgreSQL does: fixed for exponents
/// in `[-4, fixed_below)`, scientific with a signed exponent of at least two digits otherwise.
fn layout(sci: &str, fixed_below: i32) -> String {
    let (mantissa, exponent) = sci.split_once('e').unwrap_or((sci, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let (sign, mantissa) = mantissa.strip_prefix('-').map_or(("", mantissa), |m| ("-", m));
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let mut out = String::with_capacity(digits.len() + 8);
    out.push_str(sign);
    if (-4..fixed_below).contains(&exponent) {
        if exponent < 0 {
            out.push_str("0.");
            out.extend(std::iter::repeat_n('0', (-exponent - 1) as usize));
            out.push_str(&digits);
        } else {
            let whole = exponent as usize + 1;
            if digits.len() <= whole {
                out.push_str(&digits);
                out.extend(std::iter::repeat_n('0', whole - digits.len()));
            } else {
                out.push_str(&digits[..whole]);
                out.push('.');
                out.push_str(&digits[whole..]);
            }
        }
    } else {
        let (first, rest) = digits.split_at(digits.len().min(1));
        out.push_str(if first.is_empty() { "0" } else { first });
        if !rest.is_empty() {
            out.push('.');
            out.push_str(rest);
        }
        out.push_str(&format!("e{}{:02}", if exponent < 0 { '-' } else { '+' }, exponent.unsigned_abs()));
    }
    out
}

/// `batch` with its float columns sent in text format (per `fields`) turned into their
/// PostgreSQL text; the row description keeps their float types.
pub(super) fn floats_as_text(
    batch: RecordBatch,
    fields: &[FieldInfo],
) -> Result<RecordBatch, arrow::error::ArrowError> {
    let text = |i: usize, t: &DataType| {
        matches!(t, DataType::Float64 | DataType::Float32)
            && fields.get(i).is_some_and(|f| f.format() == FieldFormat::Text)
    };
    let schema = batch.schema();
    if !schema.fields().iter().enumerate().any(|(i, f)| text(i, f.data_type())) {
        return Ok(batch);
    }
    let mut columns = Vec::with_capacity(batch.num_columns());
    let mut new_fields = Vec::with_capacity(batch.num_columns());
    for (i, (column, field)) in batch.columns().iter().zip(schema.fields()).enumerate() {
        if !text(i, field.data_type()) {
            columns.push(column.clone());
            new_fields.push(field.as_ref().clone());
            continue;
        }
        let strings: StringArray = match field.data_type() {
            DataType::Float64 => column.as_primitive::<Float64Type>().iter().map(|v| v.map(float8_text)).collect(),
            _ => column.as_primitive::<Float32Type>().iter().map(|v| v.map(float4_text)).collect(),
        };
        columns.push(Arc::new(strings) as ArrayRef);
        new_fields.push(Field::new(field.name(), DataType::Utf8, field.is_nullable()));
    }
    let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    RecordBatch::try_new_with_options(Arc::new(Schema::new(new_fields)), columns, &options)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// PostgreSQL 16's text output (`SELECT x::float8`, default `extra_float_digits`).
    #[test]
    fn float8_is_written_as_postgres_writes_it() {
        let cases: [(f64, &str); 16] = [
            (-0.0, "-0"),
            (0.0, "0"),
            (1.0, "1"),
            (-2.5, "-2.5"),
            (0.1, "0.1"),
            (1e20, "1e+20"),
            (1e-7, "1e-07"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1e14, "100000000000000"),
            (1e15, "1e+15"),
            (123456789012345678.0, "1.2345678901234568e+17"),
            (1.5e300, "1.5e+300"),
            (f64::MIN_POSITIVE, "2.2250738585072014e-308"),
            (f64::INFINITY, "Infinity"),
            (f64::NEG_INFINITY, "-Infinity"),
        ];
        for (v, want) in cases {
            assert_eq!(float8_text(v), want, "{v:?}");
            if v.is_finite() {
                assert_eq!(want.parse::<f64>().map(f64::to_bits), Ok(v.to_bits()), "{want} reads back");
            }
        }
        assert_eq!(float8_text(f64::NAN), "NaN");
    }

    /// PostgreSQL 16's text output of `x::float4`.
    #[test]
    fn float4_is_written_as_postgres_writes_it() {
        let cases: [(f32, &str); 7] = [
            (-0.0, "-0"),
            (0.1, "0.1"),
            (123456.0, "123456"),
            (1234567.0, "1.234567e+06"),
            (1e6, "1e+06"),
            (3.4028235e38, "3.4028235e+38"),
            (f32::NEG_INFINITY, "-Infinity"),
        ];
        for (v, want) in cases {
            assert_eq!(float4_text(v), want, "{v:?}");
        }
    }
}
