//! RFC 3339 timestamps to nanoseconds since the Unix epoch, in integer arithmetic.

use crate::model::{MAX_TIME_NS, MIN_TIME_NS};

/// Parses `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)` (`T` may be `t` or a space, `Z` may be
/// `z`) to ns since the Unix epoch. Fractions beyond 9 digits are truncated. `None` when the
/// text is not RFC 3339 or the instant is outside the accepted time range
/// ([`rfc3339_error`] says which).
pub fn parse_rfc3339(text: &str) -> Option<i64> {
    let (seconds, nanos) = rfc3339_seconds(text)?;
    let ns = seconds.checked_mul(crate::model::SEC)?.checked_add(nanos)?;
    (MIN_TIME_NS..=MAX_TIME_NS).contains(&ns).then_some(ns)
}

/// Why [`parse_rfc3339`] refuses `text` (`None` when it does not): not RFC 3339, or an instant
/// outside the time range stored (1970 to 2262: ns since the epoch in an i64).
pub fn rfc3339_error(text: &str) -> Option<String> {
    if parse_rfc3339(text).is_some() {
        return None;
    }
    Some(match rfc3339_seconds(text) {
        Some(_) => format!(
            "time {text:?} is outside the time range stored (1970-01-01T00:00:00Z to 2262-04-10, ns since the Unix epoch)"
        ),
        None => format!("time {text:?} is not RFC 3339 (YYYY-MM-DDTHH:MM:SS[.fraction] then Z or ±HH:MM)"),
    })
}

/// Seconds since the Unix epoch (any year 0000-9999) and the nanoseconds of an RFC 3339 time.
fn rfc3339_seconds(text: &str) -> Option<(i64, i64)> {
    let b = text.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    if !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let year = digits(&b[0..4])?;
    let month = digits(&b[5..7])?;
    let day = digits(&b[8..10])?;
    let hour = digits(&b[11..13])?;
    let minute = digits(&b[14..16])?;
    let second = digits(&b[17..19])?;
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return None;
    }
    if hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let mut rest = &b[19..];
    let mut nanos: i64 = 0;
    if let Some((&b'.', frac)) = rest.split_first() {
        let len = frac.iter().take_while(|c| c.is_ascii_digit()).count();
        if len == 0 {
            return None;
        }
        for (i, c) in frac[..len].iter().enumerate() {
            if i < 9 {
                nanos = nanos * 10 + i64::from(c - b'0');
            }
        }
        for _ in len..9 {
            nanos *= 10;
        }
        rest = &frac[len..];
    }
    let offset_seconds = match rest {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let h = digits(&[*h1, *h2])?;
            let m = digits(&[*m1, *m2])?;
            if h > 23 || m > 59 {
                return None;
            }
            let off = h * 3600 + m * 60;
            if *sign == b'-' { -off } else { off }
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    Some((days * 86_400 + hour * 3600 + minute * 60 + second - offset_seconds, nanos))
}

fn digits(b: &[u8]) -> Option<i64> {
    b.iter().try_fold(0i64, |acc, c| c.is_ascii_digit().then(|| acc * 10 + i64::from(c - b'0')))
}

fn is_leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn parses_utc_offsets_and_fractions() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_rfc3339("2024-03-01T12:00:00Z"), Some(1_709_294_400_000_000_000));
        assert_eq!(parse_rfc3339("2024-03-01T14:00:00.5+02:00"), Some(1_709_294_400_500_000_000));
        assert_eq!(parse_rfc3339("2024-03-01 07:00:00.123456789123-05:00"), Some(1_709_294_400_123_456_789));
        // Leap day.
        assert_eq!(parse_rfc3339("2024-02-29t00:00:00z"), Some(1_709_164_800_000_000_000));
    }

    #[test]
    fn rejects_malformed_and_out_of_range() {
        for bad in [
            "2024-02-30T00:00:00Z",
            "2023-02-29T00:00:00Z",
            "2024-13-01T00:00:00Z",
            "2024-01-01T24:00:00Z",
            "2024-01-01T00:00:00",
            "2024-01-01T00:00:00.Z",
            "2024-01-01T00:00:00+0100",
            "1969-12-31T23:59:59Z",
            "24-01-01T00:00:00Z",
            "2024-01-01X00:00:00Z",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
            assert!(rfc3339_error(bad).is_some(), "{bad}");
        }
        // Out of range is told from malformed.
        for far in ["1969-12-31T23:59:59Z", "2262-04-12T00:00:00Z", "9999-12-31T23:59:59Z", "0000-01-01T00:00:00Z"] {
            assert!(rfc3339_error(far).unwrap().contains("outside the time range stored"), "{far}");
        }
        assert!(rfc3339_error("2024-02-30T00:00:00Z").unwrap().contains("is not RFC 3339"));
        assert_eq!(rfc3339_error("2024-02-29T00:00:00Z"), None);
    }
}
