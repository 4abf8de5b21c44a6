//! Splitting SQL text into statements: what `lockstep sql` runs from a file, standard input or
//! its interactive shell.
//!
//! Statements end at `;` outside string literals (`'it''s'`, escape strings `E'it\'s'`,
//! dollar-quoted strings `$$a;b$$` and `$tag$…$tag$`), quoted identifiers (`"a;b"`), line
//! comments (`-- …`) and block comments (`/* … */`, nested as PostgreSQL nests them).
//! Statements holding nothing but whitespace and comments are dropped; the last statement
//! needs no `;`.

/// One statement of a script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statement {
    /// 1-based line of the statement's first character that is not whitespace or a comment.
    pub line: usize,
    /// The statement's text (with any comments before it), without the terminating `;`.
    pub sql: String,
}

/// Where the scanner is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Code,
    Str,
    /// An escape string (`E'…'`): a backslash escapes the next character.
    EscStr,
    Ident,
    LineComment,
    BlockComment,
}

/// The tag of a dollar quote opening at `text[i..]` (`$$` or `$tag$`, the tag not starting
/// with a digit: `$1` is a parameter), as the whole delimiter.
fn dollar_quote(text: &str, i: usize) -> Option<&str> {
    let rest = text.get(i + 1..)?;
    let end = rest.find('$')?;
    let tag = &rest[..end];
    let ok = tag.chars().next().is_none_or(|c| c.is_alphabetic() || c == '_')
        && tag.chars().all(|c| c.is_alphanumeric() || c == '_');
    ok.then(|| &text[i..i + end + 2])
}

/// Splits `text` into statements (see the module documentation).
pub fn split_statements(text: &str) -> Vec<Statement> {
    let scan = scan(text);
    let mut out = scan.statements;
    push(&mut out, &text[scan.tail..], scan.tail_line);
    out
}

/// `sql` from its first character that is not white space or in a comment (`-- …` to the end
/// of the line, nested `/* … */`, as [`split_statements`] reads them): where its first word is.
pub fn code_start(sql: &str) -> &str {
    let mut rest = sql;
    loop {
        let trimmed = rest.trim_start();
        if let Some(line) = trimmed.strip_prefix("--") {
            rest = line.find('\n').map_or("", |i| &line[i + 1..]);
        } else if trimmed.starts_with("/*") {
            let mut depth = 0usize;
            let mut end = trimmed.len();
            let bytes = trimmed.as_bytes();
            let mut i = 0;
            while i + 1 < bytes.len() {
                match (bytes[i], bytes[i + 1]) {
                    (b'/', b'*') => (depth, i) = (depth + 1, i + 2),
                    (b'*', b'/') => {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            end = i;
                            break;
                        }
                    }
                    _ => i += 1,
                }
            }
            rest = trimmed.get(end..).unwrap_or("");
        } else {
            return trimmed;
        }
    }
}

/// Whether `text` ends inside a statement that is not finished yet: in an open string, quoted
/// identifier or block comment, or with code after the last `;` (the interactive shell then
/// asks for another line).
pub fn is_incomplete(text: &str) -> bool {
    let scan = scan(text);
    scan.tail_line.is_some() || matches!(scan.state, State::Str | State::EscStr | State::Ident | State::BlockComment)
}

/// The result of scanning a text.
struct Scan {
    /// Statements terminated by `;`.
    statements: Vec<Statement>,
    /// Byte offset of the text after the last terminator.
    tail: usize,
    /// First line of code after the last terminator, if there is code.
    tail_line: Option<usize>,
    /// The state at the end of the text.
    state: State,
}

fn scan(text: &str) -> Scan {
    let mut statements = Vec::new();
    let mut state = State::Code;
    let (mut start, mut line, mut first_line) = (0usize, 1usize, None::<usize>);
    let bytes = text.as_bytes();
    let mut i = 0;
    // Open block comments (they nest); the byte after a backslash in an escape string.
    let (mut depth, mut escaped) = (0usize, false);
    while i < bytes.len() {
        let (c, next) = (bytes[i], bytes.get(i + 1).copied());
        let was = state;
        match state {
            State::Code => match c {
                b';' => {
                    push(&mut statements, &text[start..i], first_line.take());
                    start = i + 1;
                }
                b'\'' => {
                    // `E'…'`: the E not the end of a longer word.
                    let e = i >= 1 && matches!(bytes[i - 1], b'E' | b'e');
                    let word = i >= 2 && (bytes[i - 2].is_ascii_alphanumeric() || bytes[i - 2] == b'_');
                    state = if e && !word { State::EscStr } else { State::Str };
                }
                b'"' => state = State::Ident,
                b'-' if next == Some(b'-') => state = State::LineComment,
                b'/' if next == Some(b'*') => {
                    state = State::BlockComment;
                    depth = 1;
                    i += 1;
                }
                b'$' if i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_') => {
                    if let Some(quote) = dollar_quote(text, i) {
                        // Skip to after the closing delimiter (or to the end: unfinished).
                        let body = i + quote.len();
                        let close = text[body..].find(quote).map_or(text.len(), |at| body + at + quote.len());
                        if first_line.is_none() {
                            first_line = Some(line);
                        }
                        line += text[i..close].matches('\n').count();
                        if close == text.len() && !text[body..].contains(quote) {
                            // An open dollar quote holds the rest: the statement is unfinished.
                            return Scan { statements, tail: start, tail_line: first_line, state: State::Str };
                        }
                        i = close;
                        continue;
                    }
                }
                _ => {}
            },
            State::Str if c == b'\'' => state = State::Code,
            State::EscStr if escaped => escaped = false,
            State::EscStr if c == b'\\' => escaped = true,
            State::EscStr if c == b'\'' => state = State::Code,
            State::Ident if c == b'"' => state = State::Code,
            State::LineComment if c == b'\n' => state = State::Code,
            State::BlockComment if c == b'/' && next == Some(b'*') => {
                depth += 1;
                i += 1;
            }
            State::BlockComment if c == b'*' && next == Some(b'/') => {
                depth -= 1;
                if depth == 0 {
                    state = State::Code;
                }
                i += 1;
            }
            _ => {}
        }
        let in_comment = matches!(state, State::LineComment | State::BlockComment) || was == State::BlockComment;
        if first_line.is_none() && !in_comment && !c.is_ascii_whitespace() && c != b';' {
            first_line = Some(line);
        }
        if c == b'\n' {
            line += 1;
        }
        i += 1;
    }
    Scan { statements, tail: start, tail_line: first_line, state }
}

fn push(out: &mut Vec<Statement>, sql: &str, first_line: Option<usize>) {
    if let Some(line) = first_line {
        out.push(Statement { line, sql: sql.trim().to_string() });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sqls(text: &str) -> Vec<(usize, String)> {
        split_statements(text).into_iter().map(|s| (s.line, s.sql)).collect()
    }

    #[test]
    fn splits_outside_strings_identifiers_and_comments() {
        let text = "SELECT 'a;b', \"c;d\" FROM t; -- x; y\n\n/* one;\n two */ SELECT 2\n;SELECT 'it''s;';";
        assert_eq!(
            sqls(text),
            vec![
                (1, "SELECT 'a;b', \"c;d\" FROM t".to_string()),
                // Comments before a statement stay in its text; its line is that of its code.
                (4, "-- x; y\n\n/* one;\n two */ SELECT 2".to_string()),
                (5, "SELECT 'it''s;'".to_string()),
            ]
        );
    }

    /// PostgreSQL's other quotes: escape strings, dollar quotes, nested block comments (`;`
    /// inside them cut the statement before); `$1` is a parameter, not a quote.
    #[test]
    fn escape_strings_dollar_quotes_and_nested_comments_hold_semicolons() {
        let text = "SELECT E'it\\'s; fine', e'\\\\'; SELECT $$a;b$$, $x$c;$$;d$x$;\n/* x; /* y; */ z; */ SELECT $1;SELECT a$b; SELECT 3";
        assert_eq!(
            sqls(text),
            vec![
                (1, "SELECT E'it\\'s; fine', e'\\\\'".to_string()),
                (1, "SELECT $$a;b$$, $x$c;$$;d$x$".to_string()),
                (2, "/* x; /* y; */ z; */ SELECT $1".to_string()),
                (2, "SELECT a$b".to_string()),
                (2, "SELECT 3".to_string()),
            ]
        );
        assert!(is_incomplete("SELECT $$a;"));
        assert!(is_incomplete("SELECT E'a\\';"));
        assert!(is_incomplete("/* a /* b */ ;"));
        assert!(!is_incomplete("SELECT $$a;$$;"));
    }

    #[test]
    fn code_starts_after_white_space_and_comments() {
        assert_eq!(code_start("  -- one\n/* two /* nested */ */ SET x = 1"), "SET x = 1");
        assert_eq!(code_start("SELECT 1 -- c"), "SELECT 1 -- c");
        assert_eq!(code_start("-- only a comment"), "");
        assert_eq!(code_start("/* open"), "");
    }

    #[test]
    fn empty_statements_and_comment_only_text_are_dropped() {
        assert!(sqls("  ;; -- nothing\n/* at all */ ;").is_empty());
        assert_eq!(sqls("SELECT 1"), vec![(1, "SELECT 1".to_string())]);
    }

    #[test]
    fn incomplete_input_is_recognised() {
        assert!(is_incomplete("SELECT 1"));
        assert!(is_incomplete("SELECT 'a;"));
        assert!(is_incomplete("SELECT 1; SELECT 2"));
        assert!(!is_incomplete("SELECT 1;"));
        assert!(!is_incomplete("SELECT 1; -- done"));
        assert!(!is_incomplete("  "));
        assert!(is_incomplete("SELECT /* ; */"));
    }
}
