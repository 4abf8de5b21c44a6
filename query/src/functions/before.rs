//! `before(t_a, u_a, t_b, u_b)`: whether event `a` happened before event `b` *beyond doubt*,
//! given corrected times `t` and their clock uncertainties `u` (ns), as in
//! `samples.time` / `samples.time_uncertainty`.
//!
//! True iff `t_a + u_a < t_b − u_b` (the two uncertainty intervals do not overlap and `a` is
//! earlier), computed exactly in i128. `t` may be a timestamp (any unit, converted to ns) or
//! an integer number of ns; `u` is an integer number of ns, negative counts as 0. A NULL
//! uncertainty means "unknown" (a host without a clock model) and never orders: the result is
//! `false`. A NULL time gives NULL. Cost: O(1) per row.

use std::sync::Arc;

use arrow::array::{Array, AsArray, BooleanArray};
use arrow::datatypes::{DataType, Int64Type, TimeUnit};
use datafusion::common::{Result, ScalarValue, plan_err};
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility};
use lockstep_engine::clock::{UNCERTAINTY_UNKNOWN, before};

use super::constant_args::check_arity;

/// The `before(t_a, u_a, t_b, u_b)` scalar function.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Before {
    signature: Signature,
}

impl Before {
    /// Creates the UDF implementation.
    pub fn new() -> Self {
        Self { signature: Signature::user_defined(Volatility::Immutable) }
    }
}

impl Default for Before {
    fn default() -> Self {
        Self::new()
    }
}

fn is_integer(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Null
            | DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
    )
}

fn coerce_time(arg: &str, t: &DataType) -> Result<DataType> {
    match t {
        DataType::Timestamp(_, _) => Ok(DataType::Timestamp(TimeUnit::Nanosecond, None)),
        t if is_integer(t) => Ok(DataType::Int64),
        other => plan_err!("before: argument {arg} must be a timestamp or integer ns, got {other}"),
    }
}

fn coerce_ns(arg: &str, t: &DataType) -> Result<DataType> {
    if is_integer(t) {
        Ok(DataType::Int64)
    } else {
        plan_err!("before: argument {arg} must be an integer number of ns, got {t}")
    }
}

impl ScalarUDFImpl for Before {
    fn name(&self) -> &str {
        "before"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        check_arity("before", arg_types, 4, 4, "4 arguments (t_a, u_a, t_b, u_b)")?;
        Ok(vec![
            coerce_time("t_a", &arg_types[0])?,
            coerce_ns("u_a", &arg_types[1])?,
            coerce_time("t_b", &arg_types[2])?,
            coerce_ns("u_b", &arg_types[3])?,
        ])
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Boolean)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let all_scalar = args.args.iter().all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        // Timestamps share Int64's physical layout; reinterpret them as plain i64 ns.
        let as_i64 = |a: &Arc<dyn Array>| -> Result<Arc<dyn Array>> { Ok(arrow::compute::cast(a, &DataType::Int64)?) };
        let (ta, ua, tb, ub) = (as_i64(&arrays[0])?, as_i64(&arrays[1])?, as_i64(&arrays[2])?, as_i64(&arrays[3])?);
        let (ta, ua, tb, ub) = (
            ta.as_primitive::<Int64Type>(),
            ua.as_primitive::<Int64Type>(),
            tb.as_primitive::<Int64Type>(),
            ub.as_primitive::<Int64Type>(),
        );
        let unc = |a: &arrow::array::Int64Array, i: usize| {
            if a.is_null(i) { UNCERTAINTY_UNKNOWN } else { a.value(i) }
        };
        let out: BooleanArray = (0..ta.len())
            .map(|i| {
                if ta.is_null(i) || tb.is_null(i) {
                    return None;
                }
                Some(before(ta.value(i), unc(ua, i), tb.value(i), unc(ub, i)))
            })
            .collect();
        if all_scalar {
            return Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?));
        }
        Ok(ColumnarValue::Array(Arc::new(out)))
    }
}
