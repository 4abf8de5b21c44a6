//! `throttle_reasons(value [, class])`: decodes the GPU clock throttle reasons bitmask of
//! `DCGM_FI_DEV_CLOCK_THROTTLE_REASONS` / `DCGM_FI_DEV_CLOCKS_EVENT_REASONS`.
//!
//! With one argument: the names of the set bits, comma-separated in bit order (`none` for 0;
//! unknown bits as `bit<N>`), e.g. `sw_thermal_slowdown,hw_thermal_slowdown`. With a class:
//! whether the mask contains it (Boolean). Classes: `thermal` (0x20 | 0x40), `power`
//! (0x4 | 0x80), `hw_slowdown` (0x8 | 0x40 | 0x80), `performance_limiting` (any of those), or
//! any single bit name (`gpu_idle`, `sw_power_cap`, `hw_slowdown`, `sync_boost`,
//! `sw_thermal_slowdown`, `hw_thermal_slowdown`, `hw_power_brake_slowdown`, ...). The bit table
//! is in `engine/src/metrics/throttle.rs` and `docs/metrics.md`.
//!
//! A NULL value gives NULL; a value that is not a non-negative integer below 2^53 (NaN, ±inf,
//! 3.5, −1) gives NULL too (it is not a mask). An unknown class is a plan error listing the
//! known ones; the class must be a constant. Cost: O(1) per row.

use std::sync::Arc;

use arrow::array::{Array, AsArray, BooleanArray, StringArray};
use arrow::datatypes::{DataType, Float64Type};
use datafusion::common::{Result, ScalarValue, exec_err, plan_err};
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility};
use lockstep_engine::metrics::throttle::{REASON_NAMES, ThrottleReasons};

use super::constant_args::{check_arity, coerce_float};

/// The `throttle_reasons(value [, class])` scalar function.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct ThrottleReasonsFn {
    signature: Signature,
}

impl ThrottleReasonsFn {
    /// Creates the UDF implementation.
    pub fn new() -> Self {
        Self { signature: Signature::user_defined(Volatility::Immutable) }
    }
}

impl Default for ThrottleReasonsFn {
    fn default() -> Self {
        Self::new()
    }
}

const CLASSES: [&str; 4] = ["thermal", "power", "hw_slowdown", "performance_limiting"];

/// Tests a decoded mask for a class or a single bit name; `None` for an unknown class.
fn has(mask: ThrottleReasons, class: &str) -> Option<bool> {
    Some(match class {
        "thermal" => mask.thermal(),
        "power" => mask.power(),
        "hw_slowdown" => mask.hw_slowdown(),
        "performance_limiting" => mask.performance_limiting(),
        other => {
            let (bit, _) = REASON_NAMES.iter().find(|(_, name)| *name == other)?;
            mask.0 & bit != 0
        }
    })
}

fn known_classes() -> String {
    // `hw_slowdown` is a class and a bit name: listed once.
    let mut names: Vec<&str> = CLASSES.to_vec();
    names.extend(REASON_NAMES.iter().map(|(_, n)| *n).filter(|n| !CLASSES.contains(n)));
    names.join(", ")
}

impl ScalarUDFImpl for ThrottleReasonsFn {
    fn name(&self) -> &str {
        "throttle_reasons"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        check_arity("throttle_reasons", arg_types, 1, 2, "1 or 2 arguments (value [, class])")?;
        let mut out = vec![coerce_float("throttle_reasons", "value", &arg_types[0])?];
        if let Some(t) = arg_types.get(1) {
            match t {
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Null => out.push(DataType::Utf8),
                other => return plan_err!("throttle_reasons: argument class must be a string, got {other}"),
            }
        }
        Ok(out)
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        Ok(if arg_types.len() == 2 { DataType::Boolean } else { DataType::Utf8 })
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let all_scalar = args.args.iter().all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let class = match args.args.get(1) {
            None => None,
            Some(ColumnarValue::Scalar(ScalarValue::Utf8(Some(c)))) => {
                if has(ThrottleReasons(0), c).is_none() {
                    return plan_err!("throttle_reasons: unknown class {c:?}; known: {}", known_classes());
                }
                Some(Some(c.clone()))
            }
            Some(ColumnarValue::Scalar(_)) => Some(None),
            Some(ColumnarValue::Array(_)) => {
                return exec_err!("throttle_reasons: argument class must be a constant");
            }
        };
        let arrays = ColumnarValue::values_to_arrays(&args.args[..1])?;
        let values = arrays[0].as_primitive::<Float64Type>();
        let decode = |i: usize| {
            if values.is_null(i) { None } else { ThrottleReasons::from_value(values.value(i)) }
        };
        let out: Arc<dyn Array> = match class {
            None => Arc::new((0..values.len()).map(|i| decode(i).map(|m| m.to_string())).collect::<StringArray>()),
            Some(None) => Arc::new(BooleanArray::new_null(values.len())),
            Some(Some(c)) => {
                Arc::new((0..values.len()).map(|i| decode(i).and_then(|m| has(m, &c))).collect::<BooleanArray>())
            }
        };
        if all_scalar {
            return Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?));
        }
        Ok(ColumnarValue::Array(out))
    }
}
