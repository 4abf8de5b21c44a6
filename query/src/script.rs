//! Splitting SQL text into statements: what `lockstep sql` runs from a file, standard input or
//! its interactive shell.
//!
//! Statements end at `;` outside string literals (`'it''s'`), quoted identifiers (`"a;b"`),
//! line comments (`-- …`) and block comments (`/* … */`). Statements holding nothing but
//! whitespace and comments are dropped; the last statement needs no `;`.

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
    Ident,
    LineComment,
    BlockComment,
}

/// Splits `text` into statements (see the module documentation).
pub fn split_statements(text: &str) -> Vec<Statement> {
    let scan = scan(text);
    let mut out = scan.statements;
    push(&mut out, &text[scan.tail..], scan.tail_line);
    out
}

/// Whether `text` ends inside a statement that is not finished yet: in an open string, quoted
/// identifier or block comment, or with code after the last `;` (the interactive shell then
/// asks for another line).
pub fn is_incomplete(text: &str) -> bool {
    let scan = scan(text);
    scan.tail_line.is_some() || matches!(scan.state, State::Str | State::Ident | State::BlockComment)
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
    while i < bytes.len() {
        let (c, next) = (bytes[i], bytes.get(i + 1).copied());
        let was = state;
        match state {
            State::Code => match c {
                b';' => {
                    push(&mut statements, &text[start..i], first_line.take());
                    start = i + 1;
                }
                b'\'' => state = State::Str,
                b'"' => state = State::Ident,
                b'-' if next == Some(b'-') => state = State::LineComment,
                b'/' if next == Some(b'*') => state = State::BlockComment,
                _ => {}
            },
            State::Str if c == b'\'' => state = State::Code,
            State::Ident if c == b'"' => state = State::Code,
            State::LineComment if c == b'\n' => state = State::Code,
            State::BlockComment if c == b'*' && next == Some(b'/') => {
                state = State::Code;
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
