//! Reading constant arguments (a quantile, a relative accuracy, a gap-fill grid) of the
//! Lockstep aggregate functions, and the argument type rules they share.
//!
//! Aggregate arguments such as `q` in `quantile_cont(value, q)` must be constant for the
//! whole query: they are evaluated once against an empty batch when the accumulator is
//! created, so a column reference fails with a plan error naming the function and argument.

use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, Schema, TimeUnit};
use datafusion::common::{Result, ScalarValue, plan_datafusion_err, plan_err};
use datafusion::logical_expr::ColumnarValue;
use datafusion::physical_expr::PhysicalExpr;

/// Evaluates `expr` as a constant, failing with a plan error if it refers to a column.
pub(crate) fn constant(expr: &Arc<dyn PhysicalExpr>, function: &str, argument: &str) -> Result<ScalarValue> {
    let batch = RecordBatch::new_empty(Arc::new(Schema::empty()));
    match expr.evaluate(&batch) {
        Ok(ColumnarValue::Scalar(value)) => Ok(value),
        _ => plan_err!("{function}: argument {argument} must be a constant"),
    }
}

/// Reads a constant float argument; `None` when it is NULL.
pub(crate) fn constant_f64(expr: &Arc<dyn PhysicalExpr>, function: &str, argument: &str) -> Result<Option<f64>> {
    let value = constant(expr, function, argument)?;
    if value.is_null() {
        return Ok(None);
    }
    match value.cast_to(&DataType::Float64)? {
        ScalarValue::Float64(v) => Ok(v),
        other => plan_err!("{function}: argument {argument} must be a number, got {other}"),
    }
}

/// Reads a constant quantile in `[0, 1]`; NULL or out-of-range values are plan errors.
pub(crate) fn constant_quantile(expr: &Arc<dyn PhysicalExpr>, function: &str) -> Result<f64> {
    match constant_f64(expr, function, "q")? {
        Some(q) if (0.0..=1.0).contains(&q) => Ok(q),
        Some(q) => plan_err!("{function}: quantile q must be between 0 and 1, got {q}"),
        None => plan_err!("{function}: quantile q must not be null"),
    }
}

/// Reads a constant integer argument; `None` when it is NULL.
pub(crate) fn constant_i64(expr: &Arc<dyn PhysicalExpr>, function: &str, argument: &str) -> Result<Option<i64>> {
    let value = constant(expr, function, argument)?;
    if value.is_null() {
        return Ok(None);
    }
    match value.cast_to(&DataType::Int64) {
        Ok(ScalarValue::Int64(v)) => Ok(v),
        _ => plan_err!("{function}: argument {argument} must be an integer, got {value}"),
    }
}

/// Reads a constant string argument; `None` when it is NULL.
pub(crate) fn constant_str(expr: &Arc<dyn PhysicalExpr>, function: &str, argument: &str) -> Result<Option<String>> {
    match constant(expr, function, argument)? {
        ScalarValue::Utf8(v) | ScalarValue::LargeUtf8(v) | ScalarValue::Utf8View(v) => Ok(v),
        other if other.is_null() => Ok(None),
        other => plan_err!("{function}: argument {argument} must be a string, got {other}"),
    }
}

/// Reads a constant timestamp (any unit) as nanoseconds since the epoch.
pub(crate) fn constant_timestamp_ns(expr: &Arc<dyn PhysicalExpr>, function: &str, argument: &str) -> Result<i64> {
    let value = constant(expr, function, argument)?;
    let nanos = match &value {
        ScalarValue::TimestampNanosecond(v, _) => *v,
        ScalarValue::TimestampMicrosecond(v, _) => v.and_then(|v| v.checked_mul(1_000)),
        ScalarValue::TimestampMillisecond(v, _) => v.and_then(|v| v.checked_mul(1_000_000)),
        ScalarValue::TimestampSecond(v, _) => v.and_then(|v| v.checked_mul(lockstep_engine::model::SEC)),
        ScalarValue::Int64(v) => *v,
        other => {
            return plan_err!("{function}: argument {argument} must be a timestamp, got {other}");
        }
    };
    nanos.ok_or_else(|| plan_datafusion_err!("{function}: argument {argument} must not be null"))
}

/// Reads a constant fixed-length interval (days, hours, .. nanoseconds) as nanoseconds.
/// Month intervals have no fixed length and are rejected; so are zero and negative ones. An
/// integer is nanoseconds; text is either (`'60000000000'`, `'1 minute'`), as an untyped
/// parameter of a PostgreSQL client arrives.
pub(crate) fn constant_interval_ns(expr: &Arc<dyn PhysicalExpr>, function: &str, argument: &str) -> Result<i64> {
    const DAY_NS: i64 = 86_400_000_000_000;
    let mut value = constant(expr, function, argument)?;
    if let ScalarValue::Utf8(Some(text)) | ScalarValue::LargeUtf8(Some(text)) | ScalarValue::Utf8View(Some(text)) =
        &value
    {
        let text = text.trim();
        value = match text.parse::<i64>() {
            Ok(ns) => ScalarValue::Int64(Some(ns)),
            Err(_) => match arrow::compute::kernels::cast_utils::parse_interval_month_day_nano(text) {
                Ok(v) => ScalarValue::IntervalMonthDayNano(Some(v)),
                Err(_) => {
                    return plan_err!(
                        "{function}: argument {argument} {text:?} is neither an interval ('1 minute') nor integer nanoseconds"
                    );
                }
            },
        };
    }
    let nanos = match &value {
        ScalarValue::IntervalMonthDayNano(Some(v)) if v.months == 0 => {
            i64::from(v.days).checked_mul(DAY_NS).and_then(|d| d.checked_add(v.nanoseconds))
        }
        ScalarValue::IntervalDayTime(Some(v)) => {
            i64::from(v.days).checked_mul(DAY_NS).and_then(|d| d.checked_add(i64::from(v.milliseconds) * 1_000_000))
        }
        ScalarValue::IntervalYearMonth(_) | ScalarValue::IntervalMonthDayNano(Some(_)) => {
            return plan_err!("{function}: argument {argument} must be a fixed-length interval (no months)");
        }
        ScalarValue::Int64(v) => *v,
        other if other.is_null() => {
            return plan_err!("{function}: argument {argument} must not be null");
        }
        other => {
            return plan_err!("{function}: argument {argument} must be an interval, got {other}");
        }
    };
    match nanos {
        Some(n) if n > 0 => Ok(n),
        _ => plan_err!("{function}: argument {argument} must be a positive interval"),
    }
}

/// Coerces an interval argument read by [`constant_interval_ns`]: an interval as it is, an
/// integer (nanoseconds) to Int64, text to Utf8 (read as either), and NULL (an untyped
/// parameter while a statement is prepared) to Int64.
pub(crate) fn coerce_interval(function: &str, argument: &str, dt: &DataType) -> Result<DataType> {
    match dt {
        DataType::Interval(_) => Ok(dt.clone()),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => Ok(DataType::Utf8),
        t if t.is_integer() || t.is_null() => Ok(DataType::Int64),
        other => plan_err!("{function}: argument {argument} must be an interval or integer nanoseconds, got {other}"),
    }
}

/// Checks the number of arguments for a user-defined signature.
pub(crate) fn check_arity(function: &str, args: &[DataType], min: usize, max: usize, usage: &str) -> Result<()> {
    if args.len() < min || args.len() > max {
        return plan_err!(
            "{function} expects {usage}, got {} argument{}",
            args.len(),
            if args.len() == 1 { "" } else { "s" }
        );
    }
    Ok(())
}

/// Coerces a value argument: any numeric type (or NULL) becomes Float64.
pub(crate) fn coerce_float(function: &str, argument: &str, dt: &DataType) -> Result<DataType> {
    if dt.is_numeric() || dt.is_null() {
        Ok(DataType::Float64)
    } else {
        plan_err!("{function}: argument {argument} must be numeric, got {dt}")
    }
}

/// Coerces a time argument: any timestamp becomes Timestamp(ns) keeping its time zone;
/// Int64 (nanoseconds since the epoch) and NULL are accepted as Timestamp(ns).
pub(crate) fn coerce_time(function: &str, argument: &str, dt: &DataType) -> Result<DataType> {
    match dt {
        DataType::Timestamp(_, tz) => Ok(DataType::Timestamp(TimeUnit::Nanosecond, tz.clone())),
        DataType::Int64 | DataType::Null => Ok(DataType::Timestamp(TimeUnit::Nanosecond, None)),
        other => plan_err!("{function}: argument {argument} must be a timestamp, got {other}"),
    }
}

/// Coerces an integer argument to Int64.
pub(crate) fn coerce_int(function: &str, argument: &str, dt: &DataType) -> Result<DataType> {
    if dt.is_integer() || dt.is_null() {
        Ok(DataType::Int64)
    } else {
        plan_err!("{function}: argument {argument} must be an integer, got {dt}")
    }
}

/// Fails for `f(DISTINCT ..)`: none of the Lockstep aggregates define a DISTINCT form.
pub(crate) fn reject_distinct(
    args: &datafusion::logical_expr::function::AccumulatorArgs,
    function: &str,
) -> Result<()> {
    if args.is_distinct {
        return plan_err!("{function} does not support DISTINCT");
    }
    Ok(())
}

/// The fixed-quantile forms shared by the exact and the approximate quantile families:
/// thousandths, exact name (`p99`), approximate name (`approx_p99`).
pub(crate) const FIXED_QUANTILES: [(u16, &str, &str); 5] = [
    (500, "p50", "approx_p50"),
    (900, "p90", "approx_p90"),
    (950, "p95", "approx_p95"),
    (990, "p99", "approx_p99"),
    (999, "p999", "approx_p999"),
];

/// A quantile function's name and form: general (`quantile_cont(value, q, …)`) or with a fixed
/// quantile (`p99(value, …)`); the arguments after `value` and `q` are the family's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct QuantileForm {
    /// SQL name.
    pub name: &'static str,
    /// Fixed quantile in thousandths (`p99` = 990), `None` for the general form.
    pub fixed_permille: Option<u16>,
}

impl QuantileForm {
    /// The general form `general` followed by every fixed form, named by `fixed_name`.
    pub(crate) fn family(
        general: &'static str,
        fixed_name: impl Fn(&(u16, &'static str, &'static str)) -> &'static str,
    ) -> Vec<QuantileForm> {
        std::iter::once(QuantileForm { name: general, fixed_permille: None })
            .chain(FIXED_QUANTILES.iter().map(|f| QuantileForm { name: fixed_name(f), fixed_permille: Some(f.0) }))
            .collect()
    }

    /// Checks the arity (`value`, `q` unless fixed, then up to `optional.len()` optional
    /// arguments) and coerces every argument to Float64.
    pub(crate) fn coerce(&self, args: &[DataType], optional: &[&str]) -> Result<Vec<DataType>> {
        let required: &[&str] = if self.fixed_permille.is_some() { &["value"] } else { &["value", "q"] };
        let (min, max) = (required.len(), required.len() + optional.len());
        let usage = if min == max {
            format!("{min} argument{} ({})", if min == 1 { "" } else { "s" }, required.join(", "))
        } else {
            format!("{min} or {max} arguments ({} [, {}])", required.join(", "), optional.join(", "))
        };
        check_arity(self.name, args, min, max, &usage)?;
        args.iter().zip(required.iter().chain(optional)).map(|(t, n)| coerce_float(self.name, n, t)).collect()
    }

    /// The quantile (the fixed one, or the constant `q` argument) and the position of the first
    /// optional argument. DISTINCT is refused.
    pub(crate) fn quantile(&self, args: &datafusion::logical_expr::function::AccumulatorArgs) -> Result<(f64, usize)> {
        reject_distinct(args, self.name)?;
        match self.fixed_permille {
            Some(p) => Ok((f64::from(p) / 1000.0, 1)),
            None => Ok((constant_quantile(&args.exprs[1], self.name)?, 2)),
        }
    }
}
