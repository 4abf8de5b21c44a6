//! PostgreSQL's array literals in text: `'{a,"b c",NULL}'`.
//!
//! PostgreSQL gives a quoted literal the type its place asks for, so `'{a,b}'::text[]` and
//! `host = ANY('{a,b}')` are arrays of two elements. DataFusion takes the literal as one string:
//! the cast wraps it whole into a list of one element (`['{a,b}']`, so `host =
//! ANY('{node-01,node-02}'::text[])` matched nothing, without an error), and `ANY('{}')` — what
//! psycopg2 sends for an empty Python list — failed in type coercion. [`ArrayLiterals`], an
//! analyzer rule run before type coercion, parses such literals where an array is expected:
//!
//! - a cast of a string literal to a list (`'{…}'::T[]`, `CAST('{…}' AS T[])`, `TRY_CAST`):
//!   elements of `T`;
//! - the array argument of `x = ANY('{…}')` and `x <> ALL('{…}')` (`array_has`), and of the
//!   `array_min`/`array_max` a `<`, `>`, `<=`, `>=` or `<>` `ANY`/`ALL` compares with `x`:
//!   elements of `x`'s type;
//! - the same argument of the remaining functions those forms are planned with
//!   (`cardinality`, `array_position`, an `array_min`/`array_max` tested for NULL): elements
//!   of text, which is all those look at (how many, which are NULL).
//!
//! A string there that is not an array literal is an error saying so, as in PostgreSQL
//! (`malformed array literal`).
//!
//! A cast of any other text to an array — a column, or a parameter a driver declared as text
//! (JDBC's `setString` for `?::text[]`, where DataFusion made a list of one string) — parses
//! each value when the statement runs: `CAST(x AS T[])` becomes `CAST(pg_text_array(x) AS
//! T[])` ([`TextArray`]; a malformed value is an error, and NULL under `TRY_CAST`).
//!
//! [`parse_text`] is the parser, shared with the PostgreSQL listener's array parameters.

use std::sync::Arc;

use arrow::array::{Array, ListBuilder, StringBuilder};
use arrow::datatypes::{DataType, Field};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, Result, ScalarValue, exec_err, plan_datafusion_err};
use datafusion::logical_expr::expr::{Cast, ScalarFunction, TryCast};
use datafusion::logical_expr::{
    BinaryExpr, ColumnarValue, Expr, ExprSchemable, LogicalPlan, Operator, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;

/// The most elements an array may have: an `IN` list, not a data set (a literal or a bound
/// parameter of up to a GiB of tiny elements would take tens of GB as values, outside any
/// memory limit).
pub const MAX_ARRAY_ELEMENTS: usize = 1_000_000;

/// The elements of a one-dimensional array in PostgreSQL's text format: `{a,"b c",NULL}`, an
/// element in double quotes with `\` escaping the next character, an unquoted one trimmed and
/// `NULL` (any case) a null. At most [`MAX_ARRAY_ELEMENTS`].
pub fn parse_text(text: &str) -> std::result::Result<Vec<Option<String>>, String> {
    let text = text.trim();
    let malformed = || format!("{} is not an array literal such as {{a,b}}", quoted(text));
    let inner = text.strip_prefix('{').and_then(|t| t.strip_suffix('}')).ok_or_else(malformed)?;
    if inner.trim().is_empty() {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    let mut chars = inner.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let element = if chars.next_if_eq(&'"').is_some() {
            let mut value = String::new();
            loop {
                match chars.next().ok_or_else(malformed)? {
                    '"' => break,
                    '\\' => value.push(chars.next().ok_or_else(malformed)?),
                    c => value.push(c),
                }
            }
            while chars.next_if(|c| c.is_whitespace()).is_some() {}
            Some(value)
        } else {
            let mut value = String::new();
            while let Some(c) = chars.next_if(|c| *c != ',') {
                match c {
                    '{' => {
                        return Err(format!(
                            "{}: a multi-dimensional array; only one dimension is taken (a list)",
                            quoted(text)
                        ));
                    }
                    '"' | '}' => return Err(malformed()),
                    '\\' => value.push(chars.next().ok_or_else(malformed)?),
                    c => value.push(c),
                }
            }
            let value = value.trim_end();
            match value {
                "" => return Err(malformed()),
                v if v.eq_ignore_ascii_case("null") => None,
                v => Some(v.to_string()),
            }
        };
        out.push(element);
        within_bound(out.len())?;
        match chars.next() {
            None => return Ok(out),
            Some(',') => {}
            Some(_) => return Err(malformed()),
        }
    }
}

/// `text` quoted for an error message, its middle left out past 80 characters (a literal
/// can be megabytes).
fn quoted(text: &str) -> String {
    let chars = text.chars().count();
    if chars <= 80 {
        return format!("{text:?}");
    }
    let head: String = text.chars().take(40).collect();
    let tail: String = text.chars().skip(chars - 30).collect();
    format!("{:?}", format!("{head}…{tail}")).replace('…', &format!("… ({chars} characters) …"))
}

/// An error when an array of `n` elements is more than [`MAX_ARRAY_ELEMENTS`].
pub fn within_bound(n: usize) -> std::result::Result<(), String> {
    if n > MAX_ARRAY_ELEMENTS {
        return Err(format!(
            "an array of {n} elements, more than {MAX_ARRAY_ELEMENTS}: filter with a join or a subquery instead"
        ));
    }
    Ok(())
}

/// The analyzer rule of the [module docs](self).
#[derive(Debug, Default)]
pub struct ArrayLiterals;

impl AnalyzerRule for ArrayLiterals {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(|node| {
            // The columns an expression of `node` reads: its inputs' (a scan's own).
            let schema = match node.inputs().as_slice() {
                [] => node.schema().as_ref().clone(),
                [one] => one.schema().as_ref().clone(),
                [first, rest @ ..] => {
                    let mut merged = first.schema().as_ref().clone();
                    for input in rest {
                        merged.merge(input.schema());
                    }
                    merged
                }
            };
            node.map_expressions(|e| e.transform_down(|e| rewrite(e, &schema)))
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "array literals"
    }
}

/// The functions `ANY`/`ALL` are planned with, whose first argument is the array.
const ARRAY_FIRST: [&str; 5] = ["array_has", "array_min", "array_max", "cardinality", "array_position"];

/// Those of [`ARRAY_FIRST`] whose result is an element, compared with the `ANY`/`ALL`'s value.
const BOUNDS: &[&str] = &["array_min", "array_max"];

fn rewrite(e: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    let element_of = |x: &Expr| x.get_type(schema).unwrap_or(DataType::Utf8);
    Ok(match e {
        Expr::Cast(Cast { expr, field }) => match (string_literal(&expr), list_element(field.data_type())) {
            (Some(text), Some(element)) => {
                Transformed::yes(Expr::Cast(Cast { expr: Box::new(list_literal(text, &element)?), field }))
            }
            (None, Some(_)) if is_text(&expr, schema) => {
                Transformed::yes(Expr::Cast(Cast { expr: Box::new(parsed(*expr, false)), field }))
            }
            _ => Transformed::no(Expr::Cast(Cast { expr, field })),
        },
        // TRY_CAST of what is no array literal (or has an element not of the type) is NULL.
        Expr::TryCast(TryCast { expr, field }) => match (string_literal(&expr), list_element(field.data_type())) {
            (Some(text), Some(element)) => {
                let list = list_literal(text, &element)
                    .or_else(|_| ScalarValue::try_from(field.data_type()).map(|null| Expr::Literal(null, None)))?;
                Transformed::yes(Expr::TryCast(TryCast { expr: Box::new(list), field }))
            }
            (None, Some(_)) if is_text(&expr, schema) => {
                Transformed::yes(Expr::TryCast(TryCast { expr: Box::new(parsed(*expr, true)), field }))
            }
            _ => Transformed::no(Expr::TryCast(TryCast { expr, field })),
        },
        // `x < ANY(a)` is planned as `array_max(a) > x`, and so on: `a`'s elements are of `x`'s type.
        Expr::BinaryExpr(BinaryExpr { left, op, right })
            if matches!(
                op,
                Operator::Eq | Operator::NotEq | Operator::Lt | Operator::LtEq | Operator::Gt | Operator::GtEq
            ) =>
        {
            let (mut left, mut right) = (left, right);
            if let Some(typed) = with_array_of(&left, BOUNDS, &element_of(&right))? {
                *left = typed;
            } else if let Some(typed) = with_array_of(&right, BOUNDS, &element_of(&left))? {
                *right = typed;
            } else {
                return Ok(Transformed::no(Expr::BinaryExpr(BinaryExpr { left, op, right })));
            }
            Transformed::yes(Expr::BinaryExpr(BinaryExpr { left, op, right }))
        }
        Expr::ScalarFunction(f) if ARRAY_FIRST.contains(&f.name()) => {
            let element = match f.args.as_slice() {
                [_, needle] if f.name() == "array_has" => element_of(needle),
                _ => DataType::Utf8,
            };
            match with_array_of(&Expr::ScalarFunction(f.clone()), &ARRAY_FIRST, &element)? {
                Some(typed) => Transformed::yes(typed),
                None => Transformed::no(Expr::ScalarFunction(f)),
            }
        }
        e => Transformed::no(e),
    })
}

/// `f(literal, …)`, `f` one of `functions`, with its string literal parsed as an array of
/// `element` (`None` when `e` is not such a call).
fn with_array_of(e: &Expr, functions: &[&str], element: &DataType) -> Result<Option<Expr>> {
    let Expr::ScalarFunction(f) = e else { return Ok(None) };
    if !functions.contains(&f.name()) {
        return Ok(None);
    }
    // A string is never an array to these functions: parsed, or the literal's error.
    let Some(text) = f.args.first().and_then(string_literal) else { return Ok(None) };
    let mut args = f.args.clone();
    args[0] = list_literal(text, element)?;
    Ok(Some(Expr::ScalarFunction(ScalarFunction::new_udf(f.func.clone(), args))))
}

/// A string literal, also under casts to text (`'{a}'::varchar`, a parameter bound as text).
fn string_literal(e: &Expr) -> Option<&str> {
    match e {
        Expr::Literal(
            ScalarValue::Utf8(Some(s)) | ScalarValue::LargeUtf8(Some(s)) | ScalarValue::Utf8View(Some(s)),
            _,
        ) => Some(s),
        Expr::Cast(Cast { expr, field }) | Expr::TryCast(TryCast { expr, field })
            if is_text_type(field.data_type()) =>
        {
            string_literal(expr)
        }
        _ => None,
    }
}

fn is_text_type(t: &DataType) -> bool {
    matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
}

/// Whether `e` is text (a column, a parameter, an expression) under `schema`.
fn is_text(e: &Expr, schema: &DFSchema) -> bool {
    e.get_type(schema).is_ok_and(|t| is_text_type(&t))
}

/// `pg_text_array(e)` ([`TextArray`]), lenient for `TRY_CAST`.
fn parsed(e: Expr, lenient: bool) -> Expr {
    Expr::ScalarFunction(ScalarFunction::new_udf(Arc::new(ScalarUDF::new_from_impl(TextArray::new(lenient))), vec![e]))
}

/// `pg_text_array(text)` (and `pg_try_text_array`): each value parsed as a PostgreSQL array
/// literal into a list of text ([`parse_text`]); what [`ArrayLiterals`] puts under a cast of
/// text to an array. A malformed value is an error, or NULL for the lenient form.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct TextArray {
    lenient: bool,
    signature: Signature,
}

impl TextArray {
    /// The strict (`lenient` false) or lenient form.
    pub fn new(lenient: bool) -> Self {
        TextArray { lenient, signature: Signature::string(1, Volatility::Immutable) }
    }
}

impl ScalarUDFImpl for TextArray {
    fn name(&self) -> &str {
        if self.lenient { "pg_try_text_array" } else { "pg_text_array" }
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::List(Arc::new(Field::new_list_field(DataType::Utf8, true))))
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [arg] = args.args.as_slice() else {
            return exec_err!("{} takes one text argument", self.name());
        };
        let scalar = matches!(arg, ColumnarValue::Scalar(_));
        let text = arrow::compute::cast(&arg.to_array(if scalar { 1 } else { args.number_rows })?, &DataType::Utf8)?;
        let text = text
            .as_any()
            .downcast_ref::<arrow::array::StringArray>()
            .map_or_else(|| exec_err!("{}: expected text, got {}", self.name(), text.data_type()), Ok)?;
        let mut out = ListBuilder::new(StringBuilder::new());
        for value in text.iter() {
            match value.map(parse_text) {
                None => out.append_null(),
                Some(Ok(elements)) => {
                    out.values().extend(elements);
                    out.append(true);
                }
                Some(Err(_)) if self.lenient => out.append_null(),
                Some(Err(e)) => return exec_err!("malformed array literal: {e}"),
            }
        }
        let list = Arc::new(out.finish()) as arrow::array::ArrayRef;
        Ok(if scalar {
            ColumnarValue::Scalar(ScalarValue::try_from_array(&list, 0)?)
        } else {
            ColumnarValue::Array(list)
        })
    }
}

fn list_element(t: &DataType) -> Option<DataType> {
    match t {
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => Some(f.data_type().clone()),
        _ => None,
    }
}

/// `text` parsed as an array of `element` (a list literal): an error when it is not an array
/// literal, or an element is not a value of `element` (`'{1,x}'` as integers).
fn list_literal(text: &str, element: &DataType) -> Result<Expr> {
    let list = text_to_list(text, element).map_err(|e| plan_datafusion_err!("{e}"))?;
    Ok(Expr::Literal(list, None))
}

/// `text`, an array in PostgreSQL's text format, as a list value of `element`s; the error
/// says what is wrong (`malformed array literal: …`, or which element is not of the type).
pub fn text_to_list(text: &str, element: &DataType) -> std::result::Result<ScalarValue, String> {
    let element = match element {
        // An element of an unknown or null type (`NULL = ANY('{a}')`) is text, as PostgreSQL's
        // unknown literal is.
        DataType::Null => DataType::Utf8,
        other => other.clone(),
    };
    let parsed = parse_text(text).map_err(|e| format!("malformed array literal: {e}"))?;
    let values = parsed
        .into_iter()
        .map(|v| match v {
            None => ScalarValue::try_from(&element).map_err(|e| e.to_string()),
            Some(s) => ScalarValue::Utf8(Some(s.clone())).cast_to(&element).map_err(|_| {
                format!("invalid input syntax for type {element}: {s:?} (an element of the array {})", quoted(text))
            }),
        })
        .collect::<std::result::Result<Vec<_>, _>>()?;
    Ok(ScalarValue::List(ScalarValue::new_list(&values, &element, true)))
}

/// Registers [`ArrayLiterals`] before DataFusion's analyzer rules (it must run before type
/// coercion, which refuses a string where an array is expected).
pub fn analyzer_rules() -> Vec<Arc<dyn AnalyzerRule + Send + Sync>> {
    let mut rules = datafusion::optimizer::Analyzer::new().rules;
    rules.insert(0, Arc::new(ArrayLiterals));
    rules
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn some(v: &[&str]) -> Vec<Option<String>> {
        v.iter().map(|s| Some(s.to_string())).collect()
    }

    /// The text format as PostgreSQL writes it (quoting, escapes, NULL), and what is refused.
    #[test]
    fn text_arrays_parse() {
        assert_eq!(parse_text("{node-01,node-02}").unwrap(), some(&["node-01", "node-02"]));
        assert_eq!(parse_text(" { a , \"b, c\" ,\"q\\\"d\\\\\"} ").unwrap(), some(&["a", "b, c", "q\"d\\"]));
        assert_eq!(parse_text("{NULL,\"NULL\",null}").unwrap(), vec![None, Some("NULL".into()), None]);
        assert_eq!(parse_text("{}").unwrap(), Vec::<Option<String>>::new());
        for bad in ["", "a,b", "{a,b", "{a,,b}", "{\"a}", "{a\"b}", "{a}}"] {
            assert!(parse_text(bad).is_err(), "{bad}");
        }
        assert!(parse_text("{{1,2},{3,4}}").unwrap_err().contains("multi-dimensional"));
        // A long literal is shortened in the message (review: megabytes of SQL in an error).
        let e = parse_text(&"x".repeat(1_000_000)).unwrap_err();
        assert!(e.len() < 200 && e.contains("(1000000 characters)"), "{e}");
        let many = format!("{{{}}}", vec!["1"; MAX_ARRAY_ELEMENTS + 1].join(","));
        assert!(parse_text(&many).unwrap_err().contains("more than 1000000"));
        let enough = format!("{{{}}}", vec!["1"; MAX_ARRAY_ELEMENTS].join(","));
        assert_eq!(parse_text(&enough).map(|a| a.len()), Ok(MAX_ARRAY_ELEMENTS));
    }
}
