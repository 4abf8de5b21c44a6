//! Turning DataFusion filters into an engine scan request: time bounds and a series filter.
//!
//! Only conjuncts of these shapes are used, all others are left to DataFusion (pushdown is
//! `Inexact`, so DataFusion re-checks every filter; extraction only needs to be
//! conservative):
//! - `time <op> literal` (`<`, `<=`, `>`, `>=`, `=`) and `time BETWEEN a AND b`, and the same
//!   on `local_time`;
//! - `col = 'literal'` and `col IN ('a', 'b')` on `metric`, `host` and label columns;
//! - `value <op> number` and `value BETWEEN a AND b`: a value range the scan prunes series
//!   runs and row groups by, through the value statistics data files record per series run
//!   (`engine/src/datafile/valuestats.rs`).
//!
//! Any other filter that reads only columns constant within a series (`metric`, `series_id`,
//! `domain`, `entity` and the labels) and is deterministic — `metric LIKE 'DCGM%'`,
//! `host IN (…) OR gpu = '0'`, `regexp_like(pod, …)` — is [`series_level`]: the scan evaluates
//! it once per series over the per-series strings (`series_set`) instead of once per row,
//! and DataFusion does not re-check it (pushdown `Exact`): its value is the same for every row
//! of a series.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BooleanArray, RecordBatch, UInt32Array};
use arrow::datatypes::{Field, Schema};
use datafusion::catalog::Session;
use datafusion::common::tree_node::TreeNode;
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::expr_rewriter::unnormalize_col;
use datafusion::logical_expr::{Between, BinaryExpr, Expr, Operator, expr::InList};
use lockstep_engine::datafile::ValueRange;
use lockstep_engine::series::SeriesFilter;
use roaring::RoaringBitmap;

/// Fixed columns whose value is the same in every row of a series (besides the labels).
const SERIES_COLUMNS: [&str; 4] = ["metric", "series_id", "domain", "entity"];

/// What the filters say about the scan.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Pushdown {
    /// `[lo, hi)` on the `time` column (ns).
    pub time: Option<(i64, i64)>,
    /// `[lo, hi)` on the `local_time` column (ns): goes to the engine as it is.
    pub local: Option<(i64, i64)>,
    /// Metric and label constraints.
    pub series: SeriesFilter,
    /// The values wanted (inclusive bounds; a strict comparison's bound is the next value past
    /// its number; a zero bound covers both zeros, see `ValueRange`).
    pub value: Option<ValueRange>,
}

impl Pushdown {
    /// Whether the filters restrict series at all.
    pub fn has_series_filter(&self) -> bool {
        self.series.metrics.is_some() || !self.series.labels.is_empty()
    }
}

fn column_name(e: &Expr) -> Option<&str> {
    match e {
        Expr::Column(c) => Some(c.name.as_str()),
        Expr::Cast(c) => column_name(&c.expr),
        _ => None,
    }
}

fn scalar_string(v: &ScalarValue) -> Option<String> {
    match v {
        ScalarValue::Utf8(Some(s)) | ScalarValue::LargeUtf8(Some(s)) | ScalarValue::Utf8View(Some(s)) => {
            Some(s.clone())
        }
        ScalarValue::Dictionary(_, inner) => scalar_string(inner),
        _ => None,
    }
}

fn literal_string(e: &Expr) -> Option<String> {
    match e {
        Expr::Literal(v, _) => scalar_string(v),
        Expr::Cast(c) => literal_string(&c.expr),
        _ => None,
    }
}

fn literal_time(e: &Expr) -> Option<i64> {
    match e {
        Expr::Literal(ScalarValue::TimestampNanosecond(Some(v), _), _) => Some(*v),
        Expr::Literal(ScalarValue::TimestampMicrosecond(Some(v), _), _) => v.checked_mul(1_000),
        Expr::Literal(ScalarValue::TimestampMillisecond(Some(v), _), _) => v.checked_mul(1_000_000),
        Expr::Literal(ScalarValue::TimestampSecond(Some(v), _), _) => v.checked_mul(lockstep_engine::model::SEC),
        Expr::Literal(ScalarValue::Int64(Some(v)), _) => Some(*v),
        _ => None,
    }
}

/// A finite or infinite number literal, exactly as `f64` (never NaN): what a comparison with
/// the `value` column (Float64) compares against once DataFusion has coerced it.
fn literal_value(e: &Expr) -> Option<f64> {
    const EXACT: i64 = 1 << 53;
    let x = match e {
        Expr::Literal(ScalarValue::Float64(Some(x)), _) => *x,
        Expr::Literal(ScalarValue::Float32(Some(x)), _) => f64::from(*x),
        Expr::Literal(ScalarValue::Int64(Some(x)), _) if (-EXACT..=EXACT).contains(x) => *x as f64,
        Expr::Literal(ScalarValue::Int32(Some(x)), _) => f64::from(*x),
        _ => return None,
    };
    (!x.is_nan()).then_some(x)
}

/// Whether `e` is the `value` column itself (not a cast of it: a cast compares other numbers).
fn is_value_column(e: &Expr) -> bool {
    matches!(e, Expr::Column(c) if c.name == "value")
}

fn narrow_value(p: &mut Pushdown, range: ValueRange) -> bool {
    p.value = Some(p.value.unwrap_or(ValueRange::ALL).intersect(range));
    true
}

/// Whether a filter has a shape this module understands (used for `supports_filters_pushdown`).
pub fn is_pushable(e: &Expr, label_columns: &[String]) -> bool {
    let mut p = Pushdown::default();
    apply(e, label_columns, &mut p)
}

/// Folds every understood conjunct of `filters` into a [`Pushdown`].
pub fn analyze(filters: &[Expr], label_columns: &[String]) -> Pushdown {
    let mut p = Pushdown::default();
    for f in filters {
        for conjunct in split_and(f) {
            apply(conjunct, label_columns, &mut p);
        }
    }
    p
}

fn split_and(e: &Expr) -> Vec<&Expr> {
    match e {
        Expr::BinaryExpr(BinaryExpr { left, op: Operator::And, right }) => {
            let mut v = split_and(left);
            v.extend(split_and(right));
            v
        }
        other => vec![other],
    }
}

fn narrow(range: &mut Option<(i64, i64)>, lo: i64, hi: i64) {
    let (cur_lo, cur_hi) = range.unwrap_or((i64::MIN, i64::MAX));
    *range = Some((cur_lo.max(lo), cur_hi.min(hi)));
}

/// The time range a column's bounds go to: `time` (corrected) or `local_time`.
fn time_range<'a>(p: &'a mut Pushdown, column: Option<&str>) -> Option<&'a mut Option<(i64, i64)>> {
    match column {
        Some("time") => Some(&mut p.time),
        Some("local_time") => Some(&mut p.local),
        _ => None,
    }
}

fn add_values(p: &mut Pushdown, column: &str, values: Vec<String>, label_columns: &[String]) -> bool {
    if column == "metric" {
        let merged = match p.series.metrics.take() {
            Some(old) => old.into_iter().filter(|m| values.contains(m)).collect(),
            None => values,
        };
        p.series.metrics = Some(merged);
        true
    } else if label_columns.iter().any(|c| c == column) {
        p.series.labels.push((column.to_string(), values.into_iter().map(Some).collect()));
        true
    } else {
        false
    }
}

fn apply(e: &Expr, label_columns: &[String], p: &mut Pushdown) -> bool {
    match e {
        Expr::BinaryExpr(BinaryExpr { left, op: Operator::And, right }) => {
            let a = apply(left, label_columns, p);
            let b = apply(right, label_columns, p);
            a || b
        }
        Expr::BinaryExpr(BinaryExpr { left, op, right }) if is_value_column(left) || is_value_column(right) => {
            let (lit, op) = match (is_value_column(left), op.swap()) {
                (true, _) => (right.as_ref(), *op),
                (false, Some(swapped)) => (left.as_ref(), swapped),
                (false, None) => return false,
            };
            let Some(x) = literal_value(lit) else { return false };
            let range = match op {
                Operator::Gt => ValueRange::above(x),
                Operator::GtEq => ValueRange::new(x, f64::INFINITY),
                Operator::Lt => ValueRange::below(x),
                Operator::LtEq => ValueRange::new(f64::NEG_INFINITY, x),
                Operator::Eq => ValueRange::new(x, x),
                _ => None,
            };
            range.is_some_and(|r| narrow_value(p, r))
        }
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            let (col, lit, op) = match (column_name(left), column_name(right)) {
                (Some(c), None) => (c, right.as_ref(), *op),
                (None, Some(c)) => match op.swap() {
                    Some(swapped) => (c, left.as_ref(), swapped),
                    None => return false,
                },
                _ => return false,
            };
            if let Some(range) = time_range(p, Some(col)) {
                let Some(t) = literal_time(lit) else { return false };
                match op {
                    Operator::Gt => narrow(range, t.saturating_add(1), i64::MAX),
                    Operator::GtEq => narrow(range, t, i64::MAX),
                    Operator::Lt => narrow(range, i64::MIN, t),
                    Operator::LtEq => narrow(range, i64::MIN, t.saturating_add(1)),
                    Operator::Eq => narrow(range, t, t.saturating_add(1)),
                    _ => return false,
                }
                return true;
            }
            if op != Operator::Eq {
                return false;
            }
            match literal_string(lit) {
                Some(v) => add_values(p, col, vec![v], label_columns),
                None => false,
            }
        }
        Expr::Between(Between { expr, negated: false, low, high }) if is_value_column(expr) => {
            match (literal_value(low), literal_value(high)) {
                (Some(lo), Some(hi)) => ValueRange::new(lo, hi).is_some_and(|r| narrow_value(p, r)),
                _ => false,
            }
        }
        Expr::Between(Between { expr, negated: false, low, high }) => {
            match (time_range(p, column_name(expr)), literal_time(low), literal_time(high)) {
                (Some(range), Some(lo), Some(hi)) => {
                    narrow(range, lo, hi.saturating_add(1));
                    true
                }
                _ => false,
            }
        }
        Expr::InList(InList { expr, list, negated: false }) => {
            let Some(col) = column_name(expr) else { return false };
            let values: Option<Vec<String>> = list.iter().map(literal_string).collect();
            match values {
                Some(v) => add_values(p, col, v, label_columns),
                None => false,
            }
        }
        _ => false,
    }
}

/// Whether `e` reads only columns constant within a series (or none: a constant such as the
/// `NULL` that `host IN (NULL)` folds to after it was pushed down) and is deterministic and
/// self-contained (no subquery, placeholder or outer reference): then its value per series is
/// its value on every row of that series.
pub fn series_level(e: &Expr, label_columns: &[String]) -> bool {
    let columns = e.column_refs();
    let foreign = e
        .exists(|n| {
            Ok(matches!(
                n,
                Expr::ScalarSubquery(_)
                    | Expr::Exists(_)
                    | Expr::InSubquery(_)
                    | Expr::OuterReferenceColumn(..)
                    | Expr::Placeholder(_)
                    | Expr::AggregateFunction(_)
                    | Expr::WindowFunction(_)
            ))
        })
        .unwrap_or(true);
    !foreign
        && !e.is_volatile()
        && columns.iter().all(|c| SERIES_COLUMNS.contains(&c.name.as_str()) || label_columns.contains(&c.name))
}

/// The series (ids) among `within` (`None`: all) for which every filter in `filters` (each
/// [`series_level`]) is true, evaluated over the per-series strings: `strings` holds, per
/// series id, the metric, the domain, the entity, then each of `label_columns` (see the samples
/// table's scan plan); a filter gets the columns it names (and `series_id`), built on first
/// use. Each filter is evaluated only on the series the ones before it kept, so
/// `metric = 'm' AND CAST(gpu AS INT) = 3` casts the labels of `m`'s series only. `None` when
/// `filters` is empty.
pub(crate) fn series_set(
    state: &dyn Session,
    filters: &[&Expr],
    within: Option<&RoaringBitmap>,
    strings: &super::SeriesStrings,
    label_columns: &[String],
) -> DfResult<Option<RoaringBitmap>> {
    if filters.is_empty() {
        return Ok(None);
    }
    let n = strings.len();
    let all = u32::try_from(n).map_err(|_| DataFusionError::Internal(format!("{n} series")))?;
    let mut keep: RoaringBitmap = match within {
        Some(set) => set.iter().filter(|&id| id < all).collect(),
        None => (0..all).collect(),
    };
    let names: Vec<&str> =
        ["metric", "domain", "entity"].into_iter().chain(label_columns.iter().map(String::as_str)).collect();
    for f in filters {
        if keep.is_empty() {
            break;
        }
        let named: std::collections::HashSet<&str> = f.column_refs().into_iter().map(|c| c.name.as_str()).collect();
        let used: Vec<(usize, &str)> =
            names.iter().enumerate().filter(|(_, name)| named.contains(*name)).map(|(i, name)| (i, *name)).collect();
        // One row per series still kept: the strings it names, gathered by series id.
        let ids = UInt32Array::from_iter_values(keep.iter());
        let mut fields: Vec<Field> = Vec::with_capacity(used.len() + 1);
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(used.len() + 1);
        for &(i, name) in &used {
            let values = strings.column(i)?;
            fields.push(Field::new(name, values.data_type().clone(), true));
            columns.push(arrow::compute::take(values.as_ref(), &ids, None)?);
        }
        fields.push(Field::new("series_id", arrow::datatypes::DataType::UInt32, false));
        columns.push(Arc::new(ids.clone()));
        let schema = Arc::new(Schema::new(fields));
        let df_schema = DFSchema::try_from(schema.as_ref().clone())?;
        let batch = RecordBatch::try_new(schema, columns)?;
        let expr = state.create_physical_expr(unnormalize_col((*f).clone()), &df_schema)?;
        let result = expr
            .evaluate(&batch)
            .and_then(|v| v.into_array(ids.len()))
            .map_err(|e| e.context(format!("evaluating the filter {f} on the series' columns")))?;
        let result = result.as_any().downcast_ref::<BooleanArray>().ok_or_else(|| {
            DataFusionError::Internal(format!("series filter {f} is {}, not boolean", result.data_type()))
        })?;
        // Null is not true: the row is filtered out, as a WHERE clause does.
        keep = ids
            .values()
            .iter()
            .enumerate()
            .filter(|&(i, _)| result.is_valid(i) && result.value(i))
            .map(|(_, &id)| id)
            .collect();
    }
    Ok(Some(keep))
}
