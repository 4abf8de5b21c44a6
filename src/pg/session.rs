//! Session statements of the PostgreSQL listener: `SET`, `RESET`, `DISCARD ALL` and `SHOW`
//! of run-time parameters.
//!
//! `statement_timeout` is honoured (within the server's `--query-timeout-secs`, which it can
//! shorten but not lengthen; `SET LOCAL` until the transaction block ends), and
//! `client_min_messages` decides whether notices and warnings are sent. The parameters drivers
//! set on connecting whose one meaning is what Lockstep does already (`extra_float_digits`,
//! `application_name`, `DateStyle` ISO, `TimeZone` UTC, …) are accepted without a word. Any
//! other parameter is accepted with a NOTICE that it has no effect (tools set many), except
//! where accepting would mislead: DataFusion's settings are the server's (SQLSTATE 55P02), and
//! a client encoding other than UTF8 cannot be served (0A000).

use std::sync::Mutex;

use lockstep_query::script::code_start;
use std::time::Duration;

/// What a session statement does (parsed from its text by [`parse`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Session {
    /// `SET [LOCAL] statement_timeout`: the limit (`None` for `DEFAULT`).
    Timeout { local: bool, limit: Option<Duration> },
    /// `SET client_min_messages`: the least severity sent (0 notice, 1 warning, 2 error).
    Messages(u8),
    /// `RESET name` (`None`: `RESET ALL`, `DISCARD ALL`), with the tag to answer.
    Reset(Option<String>, &'static str),
    /// Accepted: Lockstep already does what the value asks, or it means nothing here.
    Quiet,
    /// Accepted without effect, and the client is told why.
    Notice(String),
    /// Refused with SQLSTATE `code`.
    Refused(&'static str, String),
    /// `SHOW statement_timeout` or `SHOW client_min_messages`.
    Show(&'static str),
}

/// A session's settings (a pgwire session extension).
#[derive(Debug, Default)]
pub(super) struct Settings(Mutex<State>);

#[derive(Debug, Default, Clone, Copy)]
struct State {
    /// `SET statement_timeout` (zero: none of the session's own).
    timeout: Option<Duration>,
    /// `SET LOCAL statement_timeout`, until the transaction block ends.
    local: Option<Duration>,
    in_block: bool,
    /// The block is a multi-statement query string's ([`Settings::begin_implicit`]).
    implicit: bool,
    /// `client_min_messages`: 0 notice (PostgreSQL's default), 1 warning, 2 error.
    min_messages: u8,
}

/// A message to send before the statement's result: severity (`NOTICE`, `WARNING`), SQLSTATE
/// and text.
pub(super) type Notice = (&'static str, &'static str, String);

impl Settings {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `BEGIN`.
    pub(super) fn begin(&self) {
        let mut state = self.state();
        state.in_block = true;
        state.implicit = false;
    }

    /// `COMMIT` or `ROLLBACK`: `SET LOCAL` values end.
    pub(super) fn end(&self) {
        let mut state = self.state();
        state.in_block = false;
        state.implicit = false;
        state.local = None;
    }

    /// A query string of several statements starts, which PostgreSQL runs as one implicit
    /// block (`SET LOCAL statement_timeout = 100; SELECT …` limits that `SELECT`); `false`
    /// if a block was open already.
    pub(super) fn begin_implicit(&self) -> bool {
        let mut state = self.state();
        if state.in_block {
            return false;
        }
        (state.in_block, state.implicit) = (true, true);
        true
    }

    /// The query string of [`Settings::begin_implicit`] ended: its block ends unless a `BEGIN`
    /// in it made the block explicit.
    pub(super) fn end_implicit(&self) {
        if self.state().implicit {
            self.end();
        }
    }

    /// The time limit of the next statement: the server's `limit`, or the session's where it
    /// is shorter, and whether it is the session's.
    pub(super) fn time_limit(&self, limit: Duration) -> (Duration, bool) {
        let state = self.state();
        match state.local.or(state.timeout) {
            Some(own) if !own.is_zero() && own < limit => (own, true),
            _ => (limit, false),
        }
    }

    /// Applies `session`; the tag to answer, and a notice or warning to send first (unless
    /// `client_min_messages` is above its severity).
    pub(super) fn apply(&self, session: &Session) -> Result<(&'static str, Option<Notice>), (&'static str, String)> {
        let mut state = self.state();
        let mut notice = None;
        let tag = match session {
            Session::Timeout { local: true, .. } if !state.in_block => {
                let text = "SET LOCAL can only be used in transaction blocks".to_string();
                notice = Some(("WARNING", "25P01", text));
                "SET"
            }
            Session::Timeout { local: true, limit } => {
                state.local = Some(limit.unwrap_or(Duration::ZERO));
                "SET"
            }
            Session::Timeout { local: false, limit } => {
                state.timeout = *limit;
                state.local = None;
                "SET"
            }
            Session::Messages(level) => {
                state.min_messages = *level;
                "SET"
            }
            Session::Reset(name, tag) => {
                match name.as_deref() {
                    None => *state = State { in_block: state.in_block, ..State::default() },
                    Some("statement_timeout") => (state.timeout, state.local) = (None, None),
                    Some("client_min_messages") => state.min_messages = 0,
                    Some(_) => {}
                }
                *tag
            }
            Session::Quiet => "SET",
            Session::Notice(text) => {
                notice = Some(("NOTICE", "00000", text.clone()));
                "SET"
            }
            Session::Refused(code, text) => return Err((*code, text.clone())),
            Session::Show(_) => "SHOW",
        };
        let severity = |s: &str| u8::from(s == "WARNING");
        Ok((tag, notice.filter(|(s, ..)| severity(s) >= state.min_messages)))
    }

    /// The value `SHOW name` answers: the time limit in effect (the server's where the session
    /// set none), in PostgreSQL's units.
    pub(super) fn show(&self, name: &str, server_limit: Duration) -> String {
        match name {
            "client_min_messages" => {
                ["notice", "warning", "error"][usize::from(self.state().min_messages.min(2))].into()
            }
            _ => show_duration(self.time_limit(server_limit).0),
        }
    }
}

/// A time limit as PostgreSQL shows one: in the largest unit that divides it.
fn show_duration(limit: Duration) -> String {
    let ms = limit.as_millis();
    if ms == 0 {
        return "0".into();
    }
    let units = [(86_400_000, "d"), (3_600_000, "h"), (60_000, "min"), (1000, "s")];
    match units.iter().find(|(n, _)| ms.is_multiple_of(*n)) {
        Some((n, unit)) => format!("{}{unit}", ms / n),
        None => format!("{ms}ms"),
    }
}

/// A token of a session statement: a word (lower-cased), a quoted identifier (as written), a
/// quoted string, a number (with any unit written after it) or punctuation.
#[derive(Debug, Clone, PartialEq)]
enum Token {
    Word(String),
    Quoted(String),
    Text(String),
    Number(String),
    Punct(char),
}

/// A quoted string's text after its opening quote `q`: a doubled quote is one; with
/// `escapes` (an `E'…'` string) a backslash escapes the next character (`\n`, `\t`, `\r` as
/// control characters). `None` if it does not end.
fn quoted(chars: &mut std::iter::Peekable<std::str::Chars<'_>>, q: char, escapes: bool) -> Option<String> {
    let mut text = String::new();
    loop {
        match chars.next()? {
            '\\' if escapes => text.push(match chars.next()? {
                'n' => '\n',
                't' => '\t',
                'r' => '\r',
                other => other,
            }),
            c if c == q && chars.peek() == Some(&q) => {
                chars.next();
                text.push(q);
            }
            c if c == q => return Some(text),
            other => text.push(other),
        }
    }
}

/// The tokens of `sql`; `None` where a string or comment does not end.
fn tokens(sql: &str) -> Option<Vec<Token>> {
    let mut out = Vec::new();
    let mut chars = sql.chars().peekable();
    while let Some(&c) = chars.peek() {
        let mut ahead = chars.clone();
        ahead.next();
        let next = ahead.peek().copied();
        if c.is_whitespace() || c == ';' {
            chars.next();
        } else if c == '-' && next == Some('-') || c == '/' && next == Some('*') {
            let rest: String = chars.clone().collect();
            let skip = rest.chars().count() - code_start(&rest).chars().count();
            for _ in 0..skip {
                chars.next();
            }
        } else if c == '\'' || c == '"' {
            chars.next();
            let text = quoted(&mut chars, c, false)?;
            out.push(if c == '"' { Token::Quoted(text) } else { Token::Text(text) });
        } else if (c == 'e' || c == 'E') && next == Some('\'') {
            chars.next();
            chars.next();
            out.push(Token::Text(quoted(&mut chars, '\'', true)?));
        } else if c == '$' {
            // A dollar-quoted string: `$tag$ … $tag$`.
            chars.next();
            let mut tag = String::from("$");
            loop {
                let d = chars.next()?;
                tag.push(d);
                if d == '$' {
                    break;
                }
                if !(d.is_alphanumeric() || d == '_') {
                    return None;
                }
            }
            let rest: String = chars.clone().collect();
            let end = rest.find(&tag)?;
            out.push(Token::Text(rest[..end].to_string()));
            for _ in 0..rest[..end + tag.len()].chars().count() {
                chars.next();
            }
        } else if c.is_ascii_digit() || c == '.' && out.last() != Some(&Token::Punct('.')) && !ends_in_word(&out) {
            let mut text = String::new();
            while let Some(&d) = chars.peek().filter(|d| d.is_ascii_alphanumeric() || **d == '.') {
                text.push(d);
                chars.next();
                // An exponent's sign: `1e-3`.
                if matches!(d, 'e' | 'E')
                    && text.starts_with(|c: char| c.is_ascii_digit() || c == '.')
                    && let Some(&sign) = chars.peek().filter(|s| **s == '-' || **s == '+')
                {
                    text.push(sign);
                    chars.next();
                }
            }
            out.push(Token::Number(text));
        } else if c.is_alphabetic() || c == '_' {
            let mut text = String::new();
            while let Some(&d) = chars.peek().filter(|d| d.is_alphanumeric() || **d == '_' || **d == '$') {
                text.push(d);
                chars.next();
            }
            out.push(Token::Word(text.to_lowercase()));
        } else {
            out.push(Token::Punct(c));
            chars.next();
        }
    }
    Some(out)
}

fn ends_in_word(tokens: &[Token]) -> bool {
    matches!(tokens.last(), Some(Token::Word(_) | Token::Quoted(_)))
}

/// The session statement `sql` is (`SET`, `RESET`, `DISCARD`, `SHOW` of a setting the session
/// holds), or `None` for any other statement.
pub(super) fn parse(sql: &str) -> Option<Session> {
    let syntax = || Session::Refused("42601", format!("syntax error in session statement {:?}", sql.trim()));
    let Some(tokens) = tokens(sql) else { return Some(syntax()) };
    let word = |i: usize| match tokens.get(i) {
        Some(Token::Word(w)) => Some(w.as_str()),
        _ => None,
    };
    match word(0)? {
        "set" => Some(set(&tokens[1..]).unwrap_or_else(|| not_understood(&tokens[1..], sql))),
        "reset" => Some(match (&tokens[1..], word(1)) {
            ([_], Some("all")) => Session::Reset(None, "RESET"),
            (rest, _) => match name(rest) {
                Some((n, [])) => Session::Reset(Some(n), "RESET"),
                _ => syntax(),
            },
        }),
        "discard" if word(1) == Some("all") && tokens.len() == 2 => Some(Session::Reset(None, "DISCARD ALL")),
        "show" if tokens.len() == 2 => match name(&tokens[1..])?.0.as_str() {
            "statement_timeout" => Some(Session::Show("statement_timeout")),
            "client_min_messages" => Some(Session::Show("client_min_messages")),
            _ => None,
        },
        _ => None,
    }
}

/// A `SET` that [`set`] could not read: an error where the parameter is one Lockstep applies
/// or refuses (a typo there must not pass as done), else accepted with a notice (a form of
/// PostgreSQL's grammar Lockstep does not read, such as `U&'…'` strings).
fn not_understood(tokens: &[Token], sql: &str) -> Session {
    let rest = match tokens.first() {
        Some(Token::Word(w)) if w == "local" || w == "session" => &tokens[1..],
        _ => tokens,
    };
    let name = name(rest).map(|(n, _)| n).unwrap_or_default();
    let applied = ["statement_timeout", "client_min_messages", "client_encoding", "names"];
    if name.is_empty() || applied.contains(&name.as_str()) || name.starts_with("datafusion.") {
        Session::Refused("42601", format!("syntax error in session statement {:?}", sql.trim()))
    } else {
        Session::Notice(format!("{:?} is accepted and has no effect in Lockstep (it was not read)", sql.trim()))
    }
}

/// A parameter name (`a`, `"A"` or `a.b.c`, lower-cased) at the start of `tokens`, and the
/// tokens after it.
fn name(tokens: &[Token]) -> Option<(String, &[Token])> {
    let part = |t: &Token| match t {
        Token::Word(w) => Some(w.clone()),
        Token::Quoted(q) => Some(q.to_lowercase()),
        _ => None,
    };
    let mut name = part(tokens.first()?)?;
    let mut rest = &tokens[1..];
    while let [Token::Punct('.'), next, tail @ ..] = rest {
        let Some(next) = part(next) else { break };
        name = format!("{name}.{next}");
        rest = tail;
    }
    Some((name, rest))
}

/// The values of a `SET` (after `=` or `TO`), as written; `None` for `DEFAULT`.
fn values(tokens: &[Token]) -> Option<Option<Vec<String>>> {
    if let [Token::Word(w)] = tokens
        && w == "default"
    {
        return Some(None);
    }
    let mut out = Vec::new();
    let mut rest = tokens;
    loop {
        let (value, tail) = match rest {
            [Token::Punct(sign @ ('-' | '+')), Token::Number(n), tail @ ..] => (format!("{sign}{n}"), tail),
            [Token::Text(t) | Token::Number(t) | Token::Word(t) | Token::Quoted(t), tail @ ..] => (t.clone(), tail),
            _ => return None,
        };
        out.push(value);
        match tail {
            [] => return Some(Some(out)),
            [Token::Punct(','), more @ ..] => rest = more,
            _ => return None,
        }
    }
}

/// The statement after `SET`.
fn set(tokens: &[Token]) -> Option<Session> {
    let word = |i: usize| match tokens.get(i) {
        Some(Token::Word(w)) => Some(w.as_str()),
        _ => None,
    };
    let (local, rest) = match word(0) {
        Some("local") => (true, &tokens[1..]),
        Some("session") if !matches!(word(1), Some("characteristics" | "authorization") | None) => {
            (false, &tokens[1..])
        }
        _ => (false, tokens),
    };
    let first = match rest.first() {
        Some(Token::Word(w)) => w.as_str(),
        // A quoted name: never a keyword.
        Some(Token::Quoted(_)) => "",
        _ => return None,
    };
    let (name, value) = match first {
        // Every statement sees the store as it is when it starts, read-only: what any
        // isolation level or read-only mode asks.
        "session" if !matches!(rest.get(1), Some(Token::Word(w)) if w == "authorization") => {
            return Some(Session::Quiet);
        }
        "transaction" | "constraints" => return Some(Session::Quiet),
        "role" | "session" => {
            return Some(Session::Notice(
                "SET ROLE and SET SESSION AUTHORIZATION have no effect in Lockstep: the token the \
                 connection gave decides what it may do"
                    .into(),
            ));
        }
        "time" if matches!(rest.get(1), Some(Token::Word(w)) if w == "zone") => {
            let value = match &rest[2..] {
                [Token::Word(w)] if w == "local" || w == "default" => None,
                [Token::Word(w), ..] if w == "interval" => {
                    return Some(Session::Notice(
                        "SET TIME ZONE INTERVAL has no effect in Lockstep: times are sent in UTC, with their \
                         offset (+00)"
                            .into(),
                    ));
                }
                other => values(other)?,
            };
            ("timezone".to_string(), value)
        }
        "names" if rest.len() == 1 => ("client_encoding".to_string(), None),
        "names" => ("client_encoding".to_string(), values(&rest[1..])?),
        "schema" => ("search_path".to_string(), values(&rest[1..])?),
        _ => {
            let (name, after) = name(rest)?;
            let after = match after {
                [Token::Punct('='), v @ ..] => v,
                [Token::Word(to), v @ ..] if to == "to" => v,
                _ => return None,
            };
            (name, values(after)?)
        }
    };
    Some(setting(&name, local, value))
}

/// What `SET name = value` does (`value` `None`: `DEFAULT`).
fn setting(name: &str, local: bool, value: Option<Vec<String>>) -> Session {
    let text = value.as_ref().map(|v| v.join(", ")).unwrap_or_default();
    let lower = text.to_ascii_lowercase();
    let no_effect = |why: &str| Session::Notice(format!("{name} = {text:?} has no effect in Lockstep: {why}"));
    let invalid =
        |hint: &str| Session::Refused("22023", format!("invalid value for parameter \"{name}\": {text:?}{hint}"));
    match name {
        "statement_timeout" => match value.as_deref() {
            None => Session::Timeout { local, limit: None },
            Some([one]) => match duration(one) {
                Some(limit) => Session::Timeout { local, limit: Some(limit) },
                None => invalid(
                    " (a time of 0 to 2147483647 ms; valid units are \"us\", \"ms\", \"s\", \"min\", \"h\" and \"d\")",
                ),
            },
            Some(_) => invalid(""),
        },
        "client_min_messages" => match lower.as_str() {
            "" | "notice" | "log" | "debug" | "debug1" | "debug2" | "debug3" | "debug4" | "debug5" => {
                Session::Messages(0)
            }
            "warning" => Session::Messages(1),
            "error" => Session::Messages(2),
            _ => invalid(" (debug5 to debug1, log, notice, warning or error)"),
        },
        "client_encoding" => match lower.as_str() {
            "" | "utf8" | "utf-8" | "unicode" => Session::Quiet,
            _ => Session::Refused(
                "0A000",
                format!("client_encoding {text:?} is not supported: Lockstep sends and reads UTF8 only"),
            ),
        },
        "timezone" => match lower.as_str() {
            "" | "utc" | "etc/utc" | "gmt" | "etc/gmt" | "z" | "zulu" | "universal" | "0" | "+00:00" | "+00" => {
                Session::Quiet
            }
            _ => no_effect("times are sent in UTC, with their offset (+00)"),
        },
        "datestyle" if value.is_none() || lower.contains("iso") => Session::Quiet,
        "datestyle" => no_effect("dates are written in the ISO style"),
        "intervalstyle" if value.is_none() || lower == "postgres" => Session::Quiet,
        "intervalstyle" => no_effect("intervals are written in the postgres style"),
        "standard_conforming_strings" if value.is_none() || matches!(lower.as_str(), "on" | "true" | "1") => {
            Session::Quiet
        }
        "standard_conforming_strings" => no_effect("a backslash in a string literal is an ordinary character"),
        "bytea_output" if value.is_none() || lower == "hex" => Session::Quiet,
        "bytea_output" => no_effect("bytea is written in hex"),
        "default_transaction_read_only" | "transaction_read_only"
            if value.is_none() || matches!(lower.as_str(), "on" | "true" | "1") =>
        {
            Session::Quiet
        }
        "default_transaction_read_only" | "transaction_read_only" => no_effect("the session is read-only"),
        // What these change (float digits — Lockstep's are the shortest exact ones —, the name in
        // logs, schemas, isolation, locks) means nothing different here.
        "extra_float_digits"
        | "application_name"
        | "search_path"
        | "transaction_isolation"
        | "default_transaction_isolation"
        | "lock_timeout"
        | "idle_in_transaction_session_timeout"
        | "row_security"
        | "jit" => Session::Quiet,
        _ if name.starts_with("datafusion.") => Session::Refused(
            "55P02",
            format!(
                "parameter \"{name}\" cannot be changed by a session: DataFusion's settings are the server's \
                 (the memory and time limits are `lockstep serve --query-memory-limit-mb` and --query-timeout-secs)"
            ),
        ),
        _ => Session::Notice(format!("parameter \"{name}\" is accepted and has no effect in Lockstep")),
    }
}

/// A `statement_timeout` value: milliseconds, or a number with a unit (`us`, `ms`, `s`,
/// `min`, `h`, `d`), rounded to milliseconds; at most 2,147,483,647 ms, as in PostgreSQL.
fn duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    // A number alone (`1e3`) is milliseconds.
    let split = match text.parse::<f64>() {
        Ok(_) => text.len(),
        Err(_) => text.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-')).unwrap_or(text.len()),
    };
    let number: f64 = text[..split].parse().ok()?;
    let per_ms = match text[split..].trim() {
        "" | "ms" => 1.0,
        "us" => 0.001,
        "s" => 1000.0,
        "min" => 60_000.0,
        "h" => 3_600_000.0,
        "d" => 86_400_000.0,
        _ => return None,
    };
    let ms = (number * per_ms).round();
    (ms.is_finite() && (0.0..=f64::from(i32::MAX)).contains(&ms)).then(|| Duration::from_millis(ms as u64))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn timeout(sql: &str) -> Option<Duration> {
        match parse(sql) {
            Some(Session::Timeout { limit, .. }) => limit,
            other => panic!("{sql}: {other:?}"),
        }
    }

    #[test]
    fn statement_timeouts_parse_as_postgresql_writes_them() {
        assert_eq!(timeout("SET statement_timeout = 1000"), Some(Duration::from_secs(1)));
        assert_eq!(timeout("set statement_timeout to '1.5s';"), Some(Duration::from_millis(1500)));
        assert_eq!(timeout("SET SESSION statement_timeout = '2 min'"), Some(Duration::from_secs(120)));
        assert_eq!(timeout("SET statement_timeout = 0"), Some(Duration::ZERO));
        assert_eq!(timeout("SET statement_timeout TO DEFAULT"), None);
        assert_eq!(timeout("SET \"statement_timeout\" = '2500us'"), Some(Duration::from_millis(3)));
        assert_eq!(
            parse("SET LOCAL statement_timeout = '5s'"),
            Some(Session::Timeout { local: true, limit: Some(Duration::from_secs(5)) })
        );
        for bad in
            ["SET statement_timeout = -5", "SET statement_timeout = '5 fortnights'", "SET statement_timeout = 1e20"]
        {
            assert!(
                matches!(parse(bad), Some(Session::Refused("22023", ref m)) if m.contains("statement_timeout")),
                "{bad}"
            );
        }
        assert!(matches!(parse("SET statement_timeout"), Some(Session::Refused("42601", _))));
        assert!(matches!(parse("SET statement_timeout = 'unterminated"), Some(Session::Refused("42601", _))));
    }

    /// What the first version refused or misread (review of 27731e0): comments, `E'…'` and
    /// dollar-quoted strings, `SET SCHEMA`, `SET NAMES` alone, an exponent, quoted names and
    /// values, PostgreSQL forms Lockstep does not read (a notice, not an error), and trailing
    /// words after `RESET`.
    #[test]
    fn comments_strings_and_other_forms_of_postgresqls_grammar() {
        assert_eq!(timeout("SET statement_timeout = 1000 -- a comment"), Some(Duration::from_secs(1)));
        assert_eq!(timeout("SET /* a /* nested */ comment */ statement_timeout = 1000"), Some(Duration::from_secs(1)));
        assert_eq!(timeout("SET statement_timeout = 1e3"), Some(Duration::from_secs(1)));
        assert_eq!(timeout("SET statement_timeout = $$2s$$"), Some(Duration::from_secs(2)));
        assert_eq!(timeout("SET \"Statement_Timeout\" TO E'3s'"), Some(Duration::from_secs(3)));
        assert_eq!(parse("RESET /* c */ ALL -- c"), Some(Session::Reset(None, "RESET")));
        assert_eq!(parse("SET application_name = E'a\\\\b\\'c'"), Some(Session::Quiet));
        assert_eq!(parse("SET SCHEMA 'public'"), Some(Session::Quiet));
        assert_eq!(parse("SET NAMES"), Some(Session::Quiet));
        assert_eq!(parse("SET time zone 'UTC' -- c"), Some(Session::Quiet));
        assert!(matches!(parse("SET TIME ZONE INTERVAL '+00:00' HOUR TO MINUTE"), Some(Session::Notice(_))));
        assert!(
            matches!(parse("SET application_name = U&'d\\0061t'"), Some(Session::Notice(m)) if m.contains("not read"))
        );
        // A quoted value is a value: "DEFAULT" is not the keyword.
        assert!(matches!(parse("SET statement_timeout = \"DEFAULT\""), Some(Session::Refused("22023", _))));
        for bad in ["RESET statement_timeout garbage", "RESET ALL x", "SET statement_timeout = U&'1'"] {
            assert!(matches!(parse(bad), Some(Session::Refused("42601", _))), "{bad}");
        }
    }

    #[test]
    fn drivers_settings_are_quiet_and_others_say_what_they_do() {
        for quiet in [
            "SET extra_float_digits = 3",
            "SET application_name = 'PostgreSQL JDBC Driver'",
            "SET DateStyle = 'ISO, MDY'",
            "SET TIME ZONE 'UTC'",
            "SET TimeZone TO 'Etc/UTC'",
            "SET NAMES 'UTF8'",
            "SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY",
            "SET SESSION TIME ZONE 'utc'",
            "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ",
            "SET search_path = public, \"$user\"",
        ] {
            assert_eq!(parse(quiet), Some(Session::Quiet), "{quiet}");
        }
        assert!(matches!(parse("SET TIME ZONE 'Europe/Berlin'"), Some(Session::Notice(m)) if m.contains("UTC")));
        assert!(matches!(parse("SET SESSION AUTHORIZATION 'x'"), Some(Session::Notice(m)) if m.contains("token")));
        assert!(matches!(parse("SET work_mem = '64MB'"), Some(Session::Notice(m)) if m.contains("work_mem")));
        assert!(matches!(parse("SET myapp.tenant = 'x'"), Some(Session::Notice(m)) if m.contains("myapp.tenant")));
        assert!(matches!(
            parse("SET datafusion.runtime.memory_limit = '100G'"),
            Some(Session::Refused("55P02", m)) if m.contains("--query-memory-limit-mb")
        ));
        assert!(matches!(parse("SET client_encoding = 'LATIN1'"), Some(Session::Refused("0A000", _))));
        assert_eq!(parse("RESET ALL"), Some(Session::Reset(None, "RESET")));
        assert_eq!(parse("discard all;"), Some(Session::Reset(None, "DISCARD ALL")));
        assert_eq!(parse("RESET statement_timeout"), Some(Session::Reset(Some("statement_timeout".into()), "RESET")));
        assert_eq!(parse("SHOW statement_timeout"), Some(Session::Show("statement_timeout")));
        assert_eq!(parse("SHOW TimeZone"), None);
        assert_eq!(parse("SELECT 1"), None);
        assert_eq!(parse("settings"), None);
    }

    #[test]
    fn settings_shorten_the_servers_limit_and_local_ones_end_with_the_block() {
        let server = Duration::from_secs(60);
        let settings = Settings::default();
        let apply = |sql: &str| settings.apply(&parse(sql).unwrap());
        assert_eq!(settings.time_limit(server), (server, false));
        assert_eq!(settings.show("statement_timeout", server), "1min");
        assert_eq!(apply("SET statement_timeout = '1500ms'"), Ok(("SET", None)));
        assert_eq!(settings.time_limit(server), (Duration::from_millis(1500), true));
        assert_eq!(settings.show("statement_timeout", server), "1500ms");
        // Longer than the server's, or 0: the server's.
        apply("SET statement_timeout = '2h'").unwrap();
        assert_eq!(settings.time_limit(server), (server, false));
        apply("SET statement_timeout = 0").unwrap();
        assert_eq!(settings.time_limit(server), (server, false));
        // SET LOCAL outside a block: a warning, no effect.
        let (_, warning) = apply("SET LOCAL statement_timeout = 1000").unwrap();
        assert_eq!(warning.map(|w| w.1), Some("25P01"));
        assert_eq!(settings.time_limit(server), (server, false));
        settings.begin();
        apply("SET LOCAL statement_timeout = 1000").unwrap();
        assert_eq!(settings.time_limit(server), (Duration::from_secs(1), true));
        settings.end();
        assert_eq!(settings.time_limit(server), (server, false));
        // A string of several statements is an implicit block; a BEGIN in it makes it explicit.
        assert!(settings.begin_implicit());
        apply("SET LOCAL statement_timeout = 1000").unwrap();
        assert_eq!(settings.time_limit(server), (Duration::from_secs(1), true));
        settings.end_implicit();
        assert_eq!(settings.time_limit(server), (server, false));
        assert!(settings.begin_implicit());
        settings.begin();
        settings.end_implicit();
        assert!(!settings.begin_implicit(), "the explicit block is still open");
        settings.end();
        apply("SET statement_timeout = 2000").unwrap();
        apply("RESET statement_timeout").unwrap();
        assert_eq!(settings.time_limit(server), (server, false));
        // client_min_messages = warning: notices are not sent, warnings are.
        let (_, notice) = apply("SET work_mem = '1GB'").unwrap();
        assert_eq!(notice.map(|n| n.0), Some("NOTICE"));
        apply("SET client_min_messages = warning").unwrap();
        assert_eq!(settings.show("client_min_messages", server), "warning");
        assert_eq!(apply("SET work_mem = '1GB'"), Ok(("SET", None)));
        apply("DISCARD ALL").unwrap();
        assert_eq!(settings.show("client_min_messages", server), "notice");
        assert_eq!(apply("SET datafusion.execution.batch_size = 1").unwrap_err().0, "55P02");
    }
}
