//! Query parameters of the PostgreSQL listener's extended protocol: a bound value as the
//! type DataFusion inferred for `$n` (else the client's declared type, else text), in text or
//! binary format — PostgreSQL's binary `interval`, `uuid`, `numeric` and `date`, and `bytea`
//! in both text formats — refusing a number the statement's type would change.

use arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use pgwire::api::Type;
use pgwire::api::portal::Portal;
use pgwire::error::PgWireResult;

use super::query::{Statement, UTC, error, pg_type};

/// Parameter `i` of `portal` as a value of the type DataFusion inferred for it (else of the
/// type the client declared, else text).
pub(super) fn parameter(
    portal: &Portal<Statement>,
    i: usize,
    declared: Option<Type>,
    inferred: Option<DataType>,
) -> PgWireResult<ScalarValue> {
    let bad = |what: String| error("22P02", format!("parameter ${}: {what}", i + 1));
    let ty = declared.unwrap_or_else(|| inferred.as_ref().map_or(Type::TEXT, pg_type));
    let value = if portal.parameter_format.is_binary(i) {
        let Some(bytes) = portal.parameters.get(i).cloned().flatten() else {
            return Ok(ScalarValue::Null);
        };
        let int = |n: usize| -> PgWireResult<i64> {
            let b: &[u8] = bytes.as_ref();
            match n {
                2 => b.try_into().map(|a| i64::from(i16::from_be_bytes(a))),
                4 => b.try_into().map(|a| i64::from(i32::from_be_bytes(a))),
                _ => b.try_into().map(i64::from_be_bytes),
            }
            .map_err(|_| bad(format!("{} bytes for type {}", b.len(), ty.name())))
        };
        match ty {
            Type::BOOL => ScalarValue::Boolean(bytes.first().map(|b| *b != 0)),
            Type::INT2 => ScalarValue::Int64(Some(int(2)?)),
            Type::INT4 => ScalarValue::Int64(Some(int(4)?)),
            Type::INT8 => ScalarValue::Int64(Some(int(8)?)),
            Type::FLOAT4 => ScalarValue::Float64(Some(f64::from(f32::from_bits(int(4)? as u32)))),
            Type::FLOAT8 => ScalarValue::Float64(Some(f64::from_bits(int(8)? as u64))),
            // Microseconds since 2000-01-01.
            Type::TIMESTAMP | Type::TIMESTAMPTZ => {
                ScalarValue::TimestampMicrosecond(Some(int(8)? + 946_684_800_000_000), Some(UTC.into()))
            }
            Type::BYTEA => ScalarValue::Binary(Some(bytes.to_vec())),
            // Days since 2000-01-01 (day 10,957 of the Unix epoch).
            Type::DATE => ScalarValue::Date32(Some(
                i32::try_from(int(4)? + 10_957).map_err(|_| bad("a date out of range".into()))?,
            )),
            Type::TIME => ScalarValue::Time64Microsecond(Some(int(8)?)),
            Type::INTERVAL => binary_interval(&bytes).map_err(bad)?,
            Type::UUID => binary_uuid(&bytes).map_err(bad)?,
            Type::NUMERIC => ScalarValue::Utf8(Some(binary_numeric(&bytes).map_err(bad)?)),
            _ => ScalarValue::Utf8(Some(String::from_utf8(bytes.to_vec()).map_err(|e| bad(e.to_string()))?)),
        }
    } else {
        match portal.parameters.get(i).cloned().flatten() {
            Some(bytes) if ty == Type::BYTEA => ScalarValue::Binary(Some(bytea_text(&bytes).map_err(bad)?)),
            Some(bytes) => {
                let text = String::from_utf8(bytes.to_vec()).map_err(|e| bad(e.to_string()))?;
                // A number in text format is of the type the client declared (psycopg sends its
                // ints so), where nothing in the statement says more (a function's argument).
                match ty {
                    Type::INT2 | Type::INT4 | Type::INT8 => ScalarValue::Int64(Some(
                        text.trim().parse().map_err(|e| bad(format!("{text:?} is not an integer: {e}")))?,
                    )),
                    Type::FLOAT4 | Type::FLOAT8 => ScalarValue::Float64(Some(
                        text.trim().parse().map_err(|e| bad(format!("{text:?} is not a number: {e}")))?,
                    )),
                    _ => ScalarValue::Utf8(Some(text)),
                }
            }
            None => ScalarValue::Null,
        }
    };
    match inferred {
        Some(target) if value.data_type() != target && !value.is_null() => {
            let cast = value.cast_to(&target).map_err(|e| bad(format!("not a {target}: {e}")))?;
            // A number the statement takes as another numeric type must survive the cast:
            // DataFusion typed `$1` from the statement (`$1 * 1000`: an integer), and the
            // float the client sent (0.0015) would otherwise become 0 without a word.
            let numeric = |t: &DataType| t.is_numeric();
            if numeric(&value.data_type())
                && numeric(&target)
                && cast.cast_to(&value.data_type()).ok() != Some(value.clone())
            {
                return Err(bad(format!(
                    "{value} would change as {target}, the type the statement gives it; \
                     write CAST(${} AS DOUBLE) (or the type meant) in the statement",
                    i + 1
                )));
            }
            Ok(cast)
        }
        Some(target) if value.is_null() => ScalarValue::try_from(&target).map_err(|e| bad(e.to_string())),
        _ => Ok(value),
    }
}

/// PostgreSQL's binary `interval`: microseconds (i64), days (i32), months (i32).
fn binary_interval(b: &[u8]) -> Result<ScalarValue, String> {
    let b: &[u8; 16] = b.try_into().map_err(|_| format!("{} bytes for an interval (16)", b.len()))?;
    let micros = i64::from_be_bytes(b[..8].try_into().unwrap_or_default());
    let days = i32::from_be_bytes(b[8..12].try_into().unwrap_or_default());
    let months = i32::from_be_bytes(b[12..].try_into().unwrap_or_default());
    let nanos = micros.checked_mul(1000).ok_or("an interval out of range")?;
    Ok(ScalarValue::IntervalMonthDayNano(Some(arrow::datatypes::IntervalMonthDayNano::new(months, days, nanos))))
}

/// PostgreSQL's binary `uuid` (16 bytes) as its text form.
fn binary_uuid(b: &[u8]) -> Result<ScalarValue, String> {
    let b: &[u8; 16] = b.try_into().map_err(|_| format!("{} bytes for a uuid (16)", b.len()))?;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    let text = format!("{}-{}-{}-{}-{}", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..]);
    Ok(ScalarValue::Utf8(Some(text)))
}

/// PostgreSQL's binary `numeric` as decimal text: digit count, weight (of the first base-10,000
/// digit), sign and display scale (i16 each), then the base-10,000 digits.
fn binary_numeric(b: &[u8]) -> Result<String, String> {
    let word = |i: usize| b.get(2 * i..2 * i + 2).map(|w| i16::from_be_bytes([w[0], w[1]]));
    let bad = || format!("a malformed numeric ({} bytes)", b.len());
    let (ndigits, weight, sign, scale) = (word(0), word(1), word(2), word(3));
    let (Some(ndigits), Some(weight), Some(sign), Some(scale)) = (ndigits, weight, sign, scale) else {
        return Err(bad());
    };
    let ndigits = usize::try_from(ndigits).map_err(|_| bad())?;
    if b.len() != 8 + 2 * ndigits || scale < 0 {
        return Err(bad());
    }
    match sign as u16 {
        0xC000 => return Ok("NaN".into()),
        0xD000 => return Ok("Infinity".into()),
        0xF000 => return Ok("-Infinity".into()),
        0x0000 | 0x4000 => {}
        _ => return Err(bad()),
    }
    let digit = |k: i32| -> Result<u16, String> {
        match usize::try_from(k) {
            Ok(k) if k < ndigits => {
                let d = word(4 + k).ok_or_else(bad)?;
                u16::try_from(d).ok().filter(|d| *d < 10_000).ok_or_else(bad)
            }
            _ => Ok(0),
        }
    };
    let weight = i32::from(weight);
    let mut text = String::new();
    if sign as u16 == 0x4000 {
        text.push('-');
    }
    if weight < 0 {
        text.push('0');
    }
    for k in 0..=weight {
        let d = digit(k)?;
        if k == 0 { text.push_str(&d.to_string()) } else { text.push_str(&format!("{d:04}")) }
    }
    if scale > 0 {
        let mut fraction = String::new();
        let mut k = weight + 1;
        while fraction.len() < scale as usize {
            fraction.push_str(&format!("{:04}", digit(k)?));
            k += 1;
        }
        fraction.truncate(scale as usize);
        text.push('.');
        text.push_str(&fraction);
    }
    Ok(text)
}

/// The bytes of a `bytea` value in PostgreSQL's text format: hex (`\x` then two hex digits a
/// byte) or the older escape format (`\\` a backslash, `\ooo` an octal byte, other bytes as
/// they are).
fn bytea_text(text: &[u8]) -> Result<Vec<u8>, String> {
    if let Some(hex) = text.strip_prefix(b"\\x") {
        let digit = |c: u8| char::from(c).to_digit(16).map(|d| d as u8);
        let digits: Vec<u8> = hex.iter().copied().filter(|c| !c.is_ascii_whitespace()).collect();
        if !digits.len().is_multiple_of(2) {
            return Err(format!("bytea hex value has an odd number of digits ({})", digits.len()));
        }
        return digits
            .chunks(2)
            .map(|p| match (digit(p[0]), digit(p[1])) {
                (Some(hi), Some(lo)) => Ok(hi << 4 | lo),
                _ => Err(format!("bytea hex value has a non-hex digit in {:?}", String::from_utf8_lossy(p))),
            })
            .collect();
    }
    let mut out = Vec::with_capacity(text.len());
    let mut rest = text;
    while let Some((&c, tail)) = rest.split_first() {
        if c != b'\\' {
            out.push(c);
            rest = tail;
            continue;
        }
        match tail {
            [b'\\', tail @ ..] => {
                out.push(b'\\');
                rest = tail;
            }
            [a @ b'0'..=b'3', b @ b'0'..=b'7', c @ b'0'..=b'7', tail @ ..] => {
                out.push((a - b'0') << 6 | (b - b'0') << 3 | (c - b'0'));
                rest = tail;
            }
            _ => return Err("bytea escape value has a backslash not followed by \\\\ or three octal digits".into()),
        }
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// Binary `numeric`, `uuid` and `interval` parameters decode as PostgreSQL wrote them;
    /// malformed ones are errors, not panics.
    #[test]
    fn binary_numeric_uuid_and_interval_parameters_decode() {
        let numeric = |ndigits: i16, weight: i16, sign: u16, scale: i16, digits: &[u16]| {
            let mut b: Vec<u8> = [ndigits, weight, sign as i16, scale].iter().flat_map(|w| w.to_be_bytes()).collect();
            b.extend(digits.iter().flat_map(|d| d.to_be_bytes()));
            binary_numeric(&b)
        };
        assert_eq!(numeric(2, 0, 0x4000, 4, &[1234, 5678]).unwrap(), "-1234.5678");
        assert_eq!(numeric(2, 1, 0, 0, &[12, 3]).unwrap(), "120003");
        assert_eq!(numeric(1, -2, 0, 8, &[42]).unwrap(), "0.00000042");
        assert_eq!(numeric(1, -1, 0, 4, &[42]).unwrap(), "0.0042");
        assert_eq!(numeric(0, 0, 0, 2, &[]).unwrap(), "0.00");
        assert_eq!(numeric(0, 0, 0xC000, 0, &[]).unwrap(), "NaN");
        assert!(numeric(2, 0, 0, 0, &[1]).is_err() && numeric(1, 0, 0, 0, &[10_000]).is_err());
        assert!(binary_numeric(&[0, 1]).is_err() && numeric(0, 0, 0x1234, 0, &[]).is_err());
        let uuid: Vec<u8> = (0x10..0x20).collect();
        assert_eq!(binary_uuid(&uuid).unwrap(), ScalarValue::Utf8(Some("10111213-1415-1617-1819-1a1b1c1d1e1f".into())));
        assert!(binary_uuid(&uuid[1..]).is_err());
        let interval: Vec<u8> =
            [90_000_005i64.to_be_bytes().to_vec(), 2i32.to_be_bytes().to_vec(), 1i32.to_be_bytes().to_vec()].concat();
        let want = arrow::datatypes::IntervalMonthDayNano::new(1, 2, 90_000_005_000);
        assert_eq!(binary_interval(&interval).unwrap(), ScalarValue::IntervalMonthDayNano(Some(want)));
        assert!(binary_interval(&interval[..15]).is_err());
        let nul = error("22P02", "parameter $1: \0\0x".into());
        assert!(!format!("{nul:?}").contains("\\u{0}"), "{nul:?}");
    }

    /// `bytea` parameters in text format, as PostgreSQL writes them (QA finding 8).
    #[test]
    fn bytea_text_parameters_decode() {
        assert_eq!(bytea_text(b"\\x00ff10").unwrap(), [0, 255, 16]);
        assert_eq!(bytea_text(b"\\xDEAD beef").unwrap(), [0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(bytea_text(b"\\x").unwrap(), [0u8; 0]);
        assert_eq!(bytea_text(b"a\\\\b\\001\\377").unwrap(), [b'a', b'\\', b'b', 1, 255]);
        assert!(bytea_text(b"\\x0").unwrap_err().contains("odd number"));
        assert!(bytea_text(b"\\xzz").unwrap_err().contains("non-hex"));
        assert!(bytea_text(b"\\9").unwrap_err().contains("octal"));
    }
}
