//! A bound on how deep a statement's expressions nest, checked on its tokens before it is
//! parsed into a plan.
//!
//! DataFusion's expressions are trees whose `Clone`, `Drop`, `Hash` and many rewrites recurse
//! once per level, and a chain of binary operators — `a OR b OR c …`, `1 + 1 + …`, `x::int::int`,
//! `SELECT … UNION ALL SELECT …` — nests one level per operator (the SQL parser builds such
//! chains in a loop, so its own recursion limit does not see them). A few thousand levels
//! overflow a thread's stack, which aborts the whole process: for `lockstep serve`, every
//! listener and the ingestion with it. So a statement is refused, with an error that says why,
//! when its estimated nesting exceeds [`MAX_NESTING`].
//!
//! The estimate walks the tokens once, without recursion: per parenthesis level it counts the
//! operators of the current operand chain (reset at a comma and at the keywords that start an
//! independent expression: `SELECT`, `WHEN`, `THEN`, …) and, apart, the set operations; a
//! closed parenthesis adds the deepest chain inside it, plus one, to the enclosing chain. It
//! over-estimates (every operator counts as a level) and never under-estimates a chain.

use datafusion::error::DataFusionError;
use datafusion::sql::sqlparser::dialect::Dialect;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};

/// The deepest nesting accepted: far beyond hand-written SQL, and well within the stacks of
/// the threads that plan and run statements (see `src/runtime.rs`).
pub const MAX_NESTING: usize = 1000;

/// Refuses `sql` when its expressions may nest deeper than [`MAX_NESTING`]. A statement the
/// tokenizer rejects passes: the parser reports that error better.
pub fn check(sql: &str, dialect: &dyn Dialect) -> Result<(), DataFusionError> {
    let Ok(tokens) = Tokenizer::new(dialect, sql).tokenize() else { return Ok(()) };
    let depth = estimate(&tokens);
    if depth > MAX_NESTING {
        return Err(DataFusionError::Plan(format!(
            "the statement nests expressions about {depth} deep (a chain of as many operators such as OR, AND, \
             + or UNION); at most {MAX_NESTING}: write a long list of alternatives as `column IN (…)`, or split the \
             statement"
        )));
    }
    Ok(())
}

/// Operators of one precedence: a chain of them nests one level per operator, and a chain of
/// lower precedence holds chains of higher precedence as its operands.
#[derive(Clone, Copy)]
enum Class {
    Or,
    And,
    Not,
    Compare,
    Add,
    Multiply,
    Other,
}

const CLASSES: usize = 7;

/// One parenthesis level of the estimate.
#[derive(Default)]
struct Level {
    /// Operators of the current operand chain, per precedence.
    chain: [usize; CLASSES],
    /// The deepest parenthesised operand of the current chain.
    operand: usize,
    /// Set operations (`UNION`, `EXCEPT`, `INTERSECT`) at this level.
    sets: usize,
    /// The deepest chain so far at this level.
    deepest: usize,
}

impl Level {
    /// The current chain: its longest run of one precedence, a level per precedence it mixes,
    /// and its deepest parenthesised operand.
    fn current(&self) -> usize {
        let longest = self.chain.iter().max().copied().unwrap_or(0);
        longest + self.chain.iter().filter(|&&n| n > 0).count() + self.operand + self.sets
    }

    fn deepest(&self) -> usize {
        self.deepest.max(self.current())
    }

    fn end_chain(&mut self) {
        self.deepest = self.deepest();
        self.chain = [0; CLASSES];
        self.operand = 0;
    }
}

/// The precedence of an operator keyword, `None` for other words.
fn keyword_class(keyword: Keyword) -> Option<Class> {
    Some(match keyword {
        Keyword::OR | Keyword::XOR => Class::Or,
        Keyword::AND => Class::And,
        Keyword::NOT => Class::Not,
        Keyword::IS
        | Keyword::IN
        | Keyword::LIKE
        | Keyword::ILIKE
        | Keyword::SIMILAR
        | Keyword::BETWEEN
        | Keyword::OVERLAPS => Class::Compare,
        Keyword::DIV => Class::Multiply,
        Keyword::COLLATE | Keyword::AT => Class::Other,
        _ => return None,
    })
}

/// The precedence of an operator token (every token that is not a word, literal, separator or
/// bracket).
fn token_class(token: &Token) -> Class {
    match token {
        Token::Eq | Token::DoubleEq | Token::Neq | Token::Lt | Token::Gt | Token::LtEq | Token::GtEq => Class::Compare,
        Token::Spaceship | Token::Tilde | Token::TildeAsterisk | Token::ExclamationMarkTilde => Class::Compare,
        Token::Plus | Token::Minus | Token::StringConcat => Class::Add,
        Token::Mul | Token::Div | Token::Mod => Class::Multiply,
        _ => Class::Other,
    }
}

/// The estimated nesting of `tokens` (see the module docs).
fn estimate(tokens: &[Token]) -> usize {
    let mut levels = vec![Level::default()];
    let mut deepest = 0;
    for token in tokens {
        let Some(level) = levels.last_mut() else { break };
        match token {
            Token::LParen | Token::LBracket => levels.push(Level::default()),
            Token::RParen | Token::RBracket => {
                if levels.len() > 1 {
                    let inner = levels.pop().map_or(0, |l| l.deepest());
                    if let Some(outer) = levels.last_mut() {
                        outer.operand = outer.operand.max(inner + 1);
                    }
                }
            }
            Token::Comma | Token::SemiColon => level.end_chain(),
            Token::Word(w) => match w.keyword {
                Keyword::UNION | Keyword::EXCEPT | Keyword::INTERSECT | Keyword::MINUS => level.sets += 1,
                Keyword::SELECT
                | Keyword::FROM
                | Keyword::WHERE
                | Keyword::GROUP
                | Keyword::HAVING
                | Keyword::ORDER
                | Keyword::LIMIT
                | Keyword::OFFSET
                | Keyword::ON
                | Keyword::CASE
                | Keyword::WHEN
                | Keyword::THEN
                | Keyword::ELSE
                | Keyword::END => level.end_chain(),
                keyword => {
                    if let Some(class) = keyword_class(keyword) {
                        level.chain[class as usize] += 1;
                    }
                }
            },
            Token::Whitespace(_)
            | Token::Number(..)
            | Token::Char(_)
            | Token::SingleQuotedString(_)
            | Token::DoubleQuotedString(_)
            | Token::NationalStringLiteral(_)
            | Token::EscapedStringLiteral(_)
            | Token::HexStringLiteral(_)
            | Token::DollarQuotedString(_)
            | Token::Placeholder(_)
            | Token::Period
            | Token::Colon
            | Token::EOF => {}
            // Every other token is an operator: arithmetic, comparison, `||`, `::`, `->`, …
            other => level.chain[token_class(other) as usize] += 1,
        }
        // The open chains, one inside the other, each parenthesis a level of its own.
        let open = levels.iter().map(Level::current).sum::<usize>() + levels.len() - 1;
        deepest = deepest.max(open);
    }
    deepest
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use datafusion::sql::sqlparser::dialect::GenericDialect;

    use super::*;

    fn depth(sql: &str) -> usize {
        estimate(&Tokenizer::new(&GenericDialect {}, sql).tokenize().unwrap())
    }

    #[test]
    fn chains_count_their_operators_and_lists_do_not() {
        let or = |n: usize| (0..n).map(|i| format!("host = 'h{i}'")).collect::<Vec<_>>().join(" OR ");
        assert!((1000..1010).contains(&depth(&format!("SELECT 1 FROM t WHERE {}", or(1000)))));
        assert!((600..610).contains(&depth(&format!("SELECT 1 FROM t WHERE {}", or(600)))));
        // Operators of one precedence add up: `a + b - c + …` is one chain.
        let mixed = (0..1200).map(|i| if i % 2 == 0 { "+ 1" } else { "- 1" }).collect::<String>();
        assert!(depth(&format!("SELECT 0 {mixed}")) >= 1200);
        assert!(depth(&format!("SELECT 1 FROM t WHERE {}", or(10))) < 30);
        let plus = format!("SELECT {}", vec!["1"; 3000].join(" + "));
        assert!(depth(&plus) >= 2999);
        // A long IN list, many select items, many CASE branches: shallow.
        let list = (0..5000).map(|i| format!("'h{i}'")).collect::<Vec<_>>().join(", ");
        assert!(depth(&format!("SELECT 1 FROM t WHERE host IN ({list})")) < 10);
        let items = (0..3000).map(|i| format!("a + {i} AS c{i}")).collect::<Vec<_>>().join(", ");
        assert!(depth(&format!("SELECT {items} FROM t")) < 10);
        let cases = (0..2000).map(|i| format!("WHEN host = 'h{i}' AND gpu = '0' THEN {i}")).collect::<Vec<_>>();
        assert!(depth(&format!("SELECT CASE {} END FROM t", cases.join(" "))) < 10);
        // Set operations nest by their count; parentheses add what is inside them.
        let unions = vec!["SELECT 1"; 1500].join(" UNION ALL ");
        assert!(depth(&unions) >= 1499);
        assert!(depth(&format!("SELECT ({}) * 2", plus.trim_start_matches("SELECT "))) >= 3000);
        let casts = format!("SELECT x{}", "::int".repeat(1200));
        assert!(depth(&casts) >= 1200);
    }

    #[test]
    fn the_check_refuses_deep_statements_with_a_reason() {
        let deep = format!("SELECT {}", vec!["1"; 5000].join(" + "));
        let e = check(&deep, &GenericDialect {}).unwrap_err().to_string();
        assert!(e.contains("at most 1000") && e.contains("IN ("), "{e}");
        check(&format!("SELECT {}", vec!["1"; 400].join(" + ")), &GenericDialect {}).unwrap();
        // Not tokenizable: left to the parser's error.
        check("SELECT 'unterminated", &GenericDialect {}).unwrap();
    }
}
