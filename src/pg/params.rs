//! Query parameters of the PostgreSQL listener's extended protocol: a bound value as the
//! type DataFusion inferred for `$n` (else the client's declared type, else text), in text or
//! binary format — PostgreSQL's binary `interval`, `uuid`, `numeric` and `date`, and `bytea`
//! in both text formats — refusing a number the statement's type would change.

use std::collections::HashMap;

use arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::logical_expr::{Cast, Expr, ExprSchemable, LogicalPlan, TryCast};
use lockstep_query::pg_array::{parse_text, within_bound};
use pgwire::api::Type;
use pgwire::api::portal::Portal;
use pgwire::error::PgWireResult;
use postgres_types::Kind;

use super::query::{Statement, UTC, error, pg_type};

/// Parameter `i` of `portal` as a value of the type DataFusion inferred for it (else of the
/// type the client declared, else text). An array (`text[]`, `int8[]`, `float8[]`, … as
/// psycopg sends a list for `host = ANY(%s)`) is a list of its elements, in text or binary
/// format; one dimension only.
pub(super) fn parameter(
    portal: &Portal<Statement>,
    i: usize,
    declared: Option<Type>,
    inferred: Option<DataType>,
) -> PgWireResult<ScalarValue> {
    let bad = |what: String| error("22P02", format!("parameter ${}: {what}", i + 1));
    let declared = declared.filter(|t| *t != Type::UNKNOWN);
    let ty = declared.unwrap_or_else(|| inferred.as_ref().map_or(Type::TEXT, pg_type));
    let binary = portal.parameter_format.is_binary(i);
    let value = match (ty.kind(), portal.parameters.get(i).cloned().flatten()) {
        (_, None) => ScalarValue::Null,
        (Kind::Array(element), Some(bytes)) => {
            let elements = if binary { binary_array(&bytes, element) } else { text_array(&bytes) }.map_err(&bad)?;
            let values = elements
                .iter()
                .map(|e| e.as_deref().map_or(Ok(ScalarValue::Null), |e| scalar(element, e, binary)))
                .collect::<Result<Vec<_>, _>>()
                .map_err(&bad)?;
            let data_type = values.iter().find(|v| !v.is_null()).map_or(DataType::Utf8, ScalarValue::data_type);
            let values = values
                .into_iter()
                .map(|v| if v.is_null() { ScalarValue::try_from(&data_type) } else { Ok(v) })
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| bad(e.to_string()))?;
            ScalarValue::List(ScalarValue::new_list_nullable(&values, &data_type))
        }
        (_, Some(bytes)) => scalar(&ty, &bytes, binary).map_err(&bad)?,
    };
    // Text where the statement takes an array (`?::text[]` with JDBC's setString, which
    // declares it varchar) is an array literal, as in PostgreSQL (the cast below made a list
    // of one string).
    if let (Some(DataType::List(element)), ScalarValue::Utf8(Some(text))) = (&inferred, &value) {
        return lockstep_query::pg_array::text_to_list(text, element.data_type()).map_err(bad);
    }
    // A date or a time with a zone (PgJDBC's setDate sends `2026-03-02 +00`, setTime
    // `12:34:56+00`): PostgreSQL ignores the zone for these types (QA pass 23b: refused).
    let value = match (&inferred, value) {
        (
            Some(DataType::Date32 | DataType::Date64 | DataType::Time32(_) | DataType::Time64(_)),
            ScalarValue::Utf8(Some(t)),
        ) => ScalarValue::Utf8(Some(without_zone(&t).to_string())),
        (Some(DataType::Timestamp(..)), ScalarValue::Utf8(Some(t))) => {
            ScalarValue::Utf8(Some(date_with_zone_as_timestamp(&t).unwrap_or(t)))
        }
        (_, value) => value,
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

/// `text` without a trailing zone offset (` +00`, `+05:30`, `-0800`).
fn without_zone(text: &str) -> &str {
    split_zone(text).0
}

/// `text` split into what comes before a trailing zone offset and the offset as `±HH:MM`
/// (None without one). A zone follows a space (a date's) or a time's last digit, so
/// `2026-03-02` keeps its day.
fn split_zone(text: &str) -> (&str, Option<String>) {
    let t = text.trim_end();
    let bytes = t.as_bytes();
    for digits in [4usize, 2] {
        let colon = usize::from(digits == 4 && t.len() > 5 && bytes[t.len() - 3] == b':');
        let len = digits + colon + 1;
        if t.len() > len && t.is_char_boundary(t.len() - len) {
            let (head, zone) = t.split_at(t.len() - len);
            let Some(rest) = zone.strip_prefix(['+', '-']) else { continue };
            let zone_digits: String = rest.chars().filter(|c| *c != ':').collect();
            if zone_digits.len() == digits
                && zone_digits.bytes().all(|b| b.is_ascii_digit())
                && (head.ends_with(' ')
                    || head.contains(':') && head.bytes().last().is_some_and(|b| b.is_ascii_digit()))
            {
                let minutes = zone_digits.get(2..).filter(|m| !m.is_empty()).unwrap_or("00");
                let hours = zone_digits.get(..2).unwrap_or("00");
                return (head.trim_end(), Some(format!("{}{hours}:{minutes}", &zone[..1])));
            }
        }
    }
    (t, None)
}

/// A date with a zone (`2026-03-02 +00`: PgJDBC's setDate where the statement takes a
/// timestamp) as that zone's midnight in RFC 3339, which the timestamp cast reads.
fn date_with_zone_as_timestamp(text: &str) -> Option<String> {
    let (head, zone) = split_zone(text);
    let is_date = head.len() == 10
        && head.bytes().enumerate().all(|(i, b)| if i == 4 || i == 7 { b == b'-' } else { b.is_ascii_digit() });
    (is_date && zone.is_some()).then(|| format!("{head}T00:00:00{}", zone.unwrap_or_default()))
}

/// The list types of the parameters DataFusion leaves untyped where the statement says they
/// are lists: `CAST($1 AS TEXT[])` (`$1::text[]`), and `x = ANY($1)` (a list of `x`'s type).
/// psycopg sends a list of strings as an array of unknown type, so that the server infers it.
pub(super) fn list_parameters(plan: &LogicalPlan) -> HashMap<String, DataType> {
    let mut lists = HashMap::new();
    let _ = plan.apply_with_subqueries(|node| {
        let schema = node.inputs().first().map_or_else(|| node.schema().clone(), |input| input.schema().clone());
        node.apply_expressions(|e| {
            e.apply(|e| {
                let is_list = |t: &DataType| matches!(t, DataType::List(_) | DataType::LargeList(_));
                match e {
                    Expr::Cast(Cast { expr, field }) | Expr::TryCast(TryCast { expr, field })
                        if is_list(field.data_type()) =>
                    {
                        if let Expr::Placeholder(p) = expr.as_ref() {
                            lists.entry(p.id.clone()).or_insert_with(|| field.data_type().clone());
                        }
                    }
                    Expr::ScalarFunction(f) if f.name() == "array_has" => {
                        if let [Expr::Placeholder(p), element] = f.args.as_slice() {
                            let element = element.get_type(&schema).unwrap_or(DataType::Utf8);
                            lists.entry(p.id.clone()).or_insert_with(|| DataType::new_list(element, true));
                        }
                    }
                    _ => {}
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })
    });
    lists
}

/// One value of type `ty` (a parameter, or an element of an array parameter) in binary or
/// text format.
fn scalar(ty: &Type, bytes: &[u8], binary: bool) -> Result<ScalarValue, String> {
    if !binary {
        if *ty == Type::BYTEA {
            return Ok(ScalarValue::Binary(Some(bytea_text(bytes)?)));
        }
        let text = String::from_utf8(bytes.to_vec()).map_err(|e| e.to_string())?;
        // A number in text format is of the type the client declared (psycopg sends its ints
        // so), where nothing in the statement says more (a function's argument).
        return Ok(match *ty {
            Type::INT2 | Type::INT4 | Type::INT8 => {
                ScalarValue::Int64(Some(text.trim().parse().map_err(|e| format!("{text:?} is not an integer: {e}"))?))
            }
            Type::FLOAT4 | Type::FLOAT8 => {
                ScalarValue::Float64(Some(text.trim().parse().map_err(|e| format!("{text:?} is not a number: {e}"))?))
            }
            _ => ScalarValue::Utf8(Some(text)),
        });
    }
    let int = |n: usize| -> Result<i64, String> {
        match n {
            2 => bytes.try_into().map(|a| i64::from(i16::from_be_bytes(a))),
            4 => bytes.try_into().map(|a| i64::from(i32::from_be_bytes(a))),
            _ => bytes.try_into().map(i64::from_be_bytes),
        }
        .map_err(|_| format!("{} bytes for type {}", bytes.len(), ty.name()))
    };
    Ok(match *ty {
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
        Type::DATE => {
            ScalarValue::Date32(Some(i32::try_from(int(4)? + 10_957).map_err(|_| "a date out of range".to_string())?))
        }
        Type::TIME => ScalarValue::Time64Microsecond(Some(int(8)?)),
        Type::INTERVAL => binary_interval(bytes)?,
        Type::UUID => binary_uuid(bytes)?,
        Type::NUMERIC => ScalarValue::Utf8(Some(binary_numeric(bytes)?)),
        _ => ScalarValue::Utf8(Some(String::from_utf8(bytes.to_vec()).map_err(|e| e.to_string())?)),
    })
}

/// The elements of a one-dimensional array in PostgreSQL's binary format: dimensions (i32),
/// a has-nulls flag (i32), the element type's oid (u32), per dimension its length and lower
/// bound (i32 each), then each element as a length (i32, -1 for NULL) and its bytes.
fn binary_array(b: &[u8], element: &Type) -> Result<Vec<Option<Vec<u8>>>, String> {
    let malformed = || format!("a malformed {}[] ({} bytes)", element.name(), b.len());
    let word = |at: usize| b.get(at..at + 4).map(|w| i32::from_be_bytes([w[0], w[1], w[2], w[3]]));
    let dims = word(0).ok_or_else(malformed)?;
    match dims {
        0 => return Ok(Vec::new()),
        1 => {}
        n => return Err(format!("a {n}-dimensional array: only one dimension is taken (a list)")),
    }
    let len = word(12).and_then(|n| usize::try_from(n).ok()).ok_or_else(malformed)?;
    within_bound(len)?;
    let mut at = 20;
    let mut out = Vec::with_capacity(len.min(b.len() / 4));
    for _ in 0..len {
        let n = word(at).ok_or_else(malformed)?;
        at += 4;
        if n < 0 {
            out.push(None);
            continue;
        }
        let n = usize::try_from(n).map_err(|_| malformed())?;
        let bytes = b.get(at..at.checked_add(n).ok_or_else(malformed)?).ok_or_else(malformed)?;
        out.push(Some(bytes.to_vec()));
        at += n;
    }
    if at != b.len() {
        return Err(malformed());
    }
    Ok(out)
}

/// The elements of a one-dimensional array in PostgreSQL's text format
/// ([`lockstep_query::pg_array::parse_text`]).
fn text_array(b: &[u8]) -> Result<Vec<Option<Vec<u8>>>, String> {
    let text = std::str::from_utf8(b).map_err(|e| e.to_string())?;
    Ok(parse_text(text)?.into_iter().map(|e| e.map(String::into_bytes)).collect())
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

    /// Array parameters (psycopg's list for `host = ANY(%s)`) in PostgreSQL's text and binary
    /// formats: their elements, NULLs, quoting; more than one dimension and malformed input
    /// are errors (QA pass 20: the array was taken as one string, and the query found nothing).
    #[test]
    fn array_parameters_decode_in_both_formats() {
        // The text format's parser is lockstep_query::pg_array::parse_text (tested there).
        assert_eq!(text_array(b"{a,NULL}").unwrap(), vec![Some(b"a".to_vec()), None]);
        assert!(text_array(b"{\xff}").is_err(), "not UTF-8");

        let binary = |dims: i32, elements: &[Option<&[u8]>]| {
            let mut b: Vec<u8> = [dims, 0, 25].iter().flat_map(|w| w.to_be_bytes()).collect();
            if dims > 0 {
                b.extend([elements.len() as i32, 1].iter().flat_map(|w| w.to_be_bytes()));
            }
            for e in elements {
                match e {
                    Some(e) => {
                        b.extend((e.len() as i32).to_be_bytes());
                        b.extend(*e);
                    }
                    None => b.extend((-1i32).to_be_bytes()),
                }
            }
            b
        };
        let b = binary(1, &[Some(b"x"), None, Some(b"")]);
        assert_eq!(binary_array(&b, &Type::TEXT).unwrap(), vec![Some(b"x".to_vec()), None, Some(Vec::new())]);
        assert_eq!(binary_array(&binary(0, &[]), &Type::TEXT).unwrap(), Vec::<Option<Vec<u8>>>::new());
        assert!(binary_array(&b[..b.len() - 1], &Type::TEXT).is_err());
        assert!(binary_array(&[b.as_slice(), &[0]].concat(), &Type::TEXT).is_err());
        assert!(binary_array(&b[..10], &Type::TEXT).is_err());
        assert!(binary_array(&binary(2, &[]), &Type::TEXT).unwrap_err().contains("2-dimensional"));
        let mut huge = binary(1, &[Some(b"x")]);
        huge[12..16].copy_from_slice(&i32::MAX.to_be_bytes());
        assert!(binary_array(&huge, &Type::TEXT).unwrap_err().contains("more than 1000000"), "not an allocation");
        let mut long = binary(1, &[Some(b"x")]);
        long[20..24].copy_from_slice(&i32::MAX.to_be_bytes());
        assert!(binary_array(&long, &Type::TEXT).is_err());
        // The elements as values of the element type.
        assert_eq!(scalar(&Type::INT8, b"42", false).unwrap(), ScalarValue::Int64(Some(42)));
        assert_eq!(scalar(&Type::INT4, &7i32.to_be_bytes(), true).unwrap(), ScalarValue::Int64(Some(7)));
        assert!(scalar(&Type::INT4, b"x", false).unwrap_err().contains("not an integer"));
    }

    /// A date or a time with a zone, as PgJDBC's setDate and setTime send them (QA pass 23b).
    #[test]
    fn dates_and_times_with_a_zone_drop_it() {
        assert_eq!(without_zone("2026-03-02 +00"), "2026-03-02");
        assert_eq!(without_zone("12:34:56+00"), "12:34:56");
        assert_eq!(without_zone("12:34:56.5-05:30"), "12:34:56.5");
        assert_eq!(without_zone("12:34:56 -0800"), "12:34:56");
        assert_eq!(without_zone("2026-03-02"), "2026-03-02");
        assert_eq!(without_zone("12:34:56"), "12:34:56");
        assert_eq!(without_zone("12:34"), "12:34");
        assert_eq!(without_zone("-05"), "-05");
        assert_eq!(date_with_zone_as_timestamp("2026-03-02 +00").as_deref(), Some("2026-03-02T00:00:00+00:00"));
        assert_eq!(date_with_zone_as_timestamp("2026-03-02 -0530").as_deref(), Some("2026-03-02T00:00:00-05:30"));
        assert_eq!(date_with_zone_as_timestamp("2026-03-02 09:00:00+00"), None);
        assert_eq!(date_with_zone_as_timestamp("2026-03-02"), None);
        // Not ASCII where a zone would start: kept whole, no split inside a character.
        assert_eq!(without_zone("12:3é+0"), "12:3é+0");
        assert_eq!(without_zone("ééé"), "ééé");
        assert_eq!(without_zone("1é+00"), "1é+00");
        assert_eq!(without_zone("12:00é0000"), "12:00é0000");
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
