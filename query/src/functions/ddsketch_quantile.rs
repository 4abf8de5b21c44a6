//! `ddsketch_quantile(sketch, q)`: the `q`-quantile of a Binary sketch made by `ddsketch` or
//! `ddsketch_merge`.
//!
//! Uses the `quantile_cont` definition (position `(n − 1) q`, linear interpolation between the
//! estimates of the neighbouring order statistics); see `approx_quantile` for the error bound.
//! A NULL sketch or NULL `q` gives NULL; `q` outside `[0, 1]` or a corrupt sketch is an
//! execution error. `q` may vary per row. Cost: decoding the sketch, O(bins) per row.

use std::sync::Arc;

use arrow::array::{Array, AsArray, Float64Array};
use arrow::datatypes::{DataType, Float64Type};
use datafusion::common::{Result, ScalarValue, exec_err, plan_err};
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility};

use super::constant_args::{check_arity, coerce_float};
use super::ddsketch::decode;

/// The `ddsketch_quantile(sketch, q)` scalar function.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct DdSketchQuantile {
    signature: Signature,
}

impl DdSketchQuantile {
    /// Creates the UDF implementation.
    pub fn new() -> Self {
        Self { signature: Signature::user_defined(Volatility::Immutable) }
    }
}

impl Default for DdSketchQuantile {
    fn default() -> Self {
        Self::new()
    }
}

impl ScalarUDFImpl for DdSketchQuantile {
    fn name(&self) -> &str {
        "ddsketch_quantile"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        check_arity("ddsketch_quantile", arg_types, 2, 2, "2 arguments (sketch, q)")?;
        let sketch = match &arg_types[0] {
            DataType::Binary | DataType::LargeBinary | DataType::BinaryView | DataType::Null => DataType::Binary,
            other => {
                return plan_err!("ddsketch_quantile: argument sketch must be a binary ddsketch, got {other}");
            }
        };
        Ok(vec![sketch, coerce_float("ddsketch_quantile", "q", &arg_types[1])?])
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Float64)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let all_scalar = args.args.iter().all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let sketches = arrays[0].as_binary::<i32>();
        let qs = arrays[1].as_primitive::<Float64Type>();
        let mut out = Vec::with_capacity(sketches.len());
        for i in 0..sketches.len() {
            if sketches.is_null(i) || qs.is_null(i) {
                out.push(None);
                continue;
            }
            let q = qs.value(i);
            if !(0.0..=1.0).contains(&q) {
                return exec_err!("ddsketch_quantile: quantile q must be between 0 and 1, got {q}");
            }
            out.push(decode(sketches.value(i), "ddsketch_quantile")?.quantile(q));
        }
        let result = Float64Array::from(out);
        if all_scalar {
            return Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(&result, 0)?));
        }
        Ok(ColumnarValue::Array(Arc::new(result)))
    }
}
