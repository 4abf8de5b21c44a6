//! `quantile_cont(value, q)` and its fixed-quantile forms `p50`, `p90`, `p95`, `p99`, `p999`:
//! exact continuous quantiles with DuckDB's `quantile_cont` definition.
//!
//! Definition: with the `n` non-NULL values sorted ascending as `x[0..n]` (NaN sorts above
//! `+inf`, as in DuckDB), `RN = (n − 1) q`, `lo = x[floor(RN)]`, `hi = x[ceil(RN)]`,
//! `d = RN − floor(RN)`; the result is `lo` when `floor(RN) = ceil(RN)` and otherwise
//! `fma(lo, 1 − d, hi · d)` — the same expression DuckDB evaluates, so results agree bit for
//! bit with DuckDB on x86-64 (and within 1 ulp wherever a build does not fuse the multiply-add).
//! NULLs are ignored; an empty group gives NULL.
//!
//! This replaces DataFusion's own `quantile_cont` alias of `percentile_cont`, which quantises
//! the interpolation weight to 1e-6 and therefore differs from DuckDB; `percentile_cont` itself
//! is left untouched.
//!
//! Order statistics are found with `select_nth_unstable` (expected O(n) per group). GROUP BY
//! uses a groups accumulator that appends `(group, value)` pairs to two flat vectors and
//! counting-sorts them by group at the end; window frames use an insertion-ordered deque with
//! `retract_batch` support.

mod groups;

use std::collections::VecDeque;
use std::mem::size_of_val;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Float64Array, ListArray};
use arrow::buffer::OffsetBuffer;
use arrow::datatypes::{DataType, Field, FieldRef, Float64Type};
use datafusion::common::{Result, ScalarValue, internal_err};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::format_state_name;
use datafusion::logical_expr::{Accumulator, AggregateUDF, AggregateUDFImpl, GroupsAccumulator, Signature, Volatility};

use super::constant_args::QuantileForm;

/// The exact quantile aggregate in one of its forms (`quantile_cont(value, q)`, `p99(value)`, …).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct QuantileCont {
    form: QuantileForm,
    signature: Signature,
}

impl QuantileCont {
    fn quantile(&self, args: &AccumulatorArgs) -> Result<f64> {
        Ok(self.form.quantile(args)?.0)
    }
}

/// All exact-quantile UDAFs: `quantile_cont`, `p50`, `p90`, `p95`, `p99`, `p999`.
pub fn udafs() -> Vec<AggregateUDF> {
    QuantileForm::family("quantile_cont", |f| f.1)
        .into_iter()
        .map(|form| {
            AggregateUDF::from(QuantileCont { form, signature: Signature::user_defined(Volatility::Immutable) })
        })
        .collect()
}

impl AggregateUDFImpl for QuantileCont {
    fn name(&self) -> &str {
        self.form.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.form.coerce(arg_types, &[])
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Float64)
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        let item = Field::new_list_field(DataType::Float64, true);
        Ok(vec![Arc::new(Field::new(format_state_name(args.name, "values"), DataType::List(Arc::new(item)), true))])
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        Ok(Box::new(QuantileAccumulator { q: self.quantile(&args)?, values: VecDeque::new(), scratch: Vec::new() }))
    }

    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        !args.is_distinct
    }

    fn create_groups_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn GroupsAccumulator>> {
        Ok(Box::new(groups::QuantileGroups::new(self.quantile(&args)?)))
    }
}

/// Position of the `q`-quantile among `n >= 1` sorted values: `(floor, ceil, fraction)`.
#[inline]
pub(crate) fn cont_rank(n: usize, q: f64) -> (usize, usize, f64) {
    let rn = (n - 1) as f64 * q;
    let (lo, hi) = (rn.floor(), rn.ceil());
    (lo as usize, (hi as usize).min(n - 1), rn - lo)
}

/// DuckDB's interpolation between two neighbouring order statistics.
#[inline]
pub(crate) fn interpolate(lo: f64, hi: f64, d: f64) -> f64 {
    lo.mul_add(1.0 - d, hi * d)
}

/// Exact `q`-quantile of `values` (reordered in place); `None` when empty.
pub(crate) fn quantile_of(values: &mut [f64], q: f64) -> Option<f64> {
    let n = values.len();
    if n == 0 {
        return None;
    }
    // NaN sorts above +inf: move NaNs to the end, select among the rest with total_cmp.
    let mut ordered = n;
    let mut i = 0;
    while i < ordered {
        if values[i].is_nan() {
            ordered -= 1;
            values.swap(i, ordered);
        } else {
            i += 1;
        }
    }
    let (lo_i, hi_i, d) = cont_rank(n, q);
    if lo_i >= ordered {
        return Some(f64::NAN);
    }
    let (_, lo, rest) = values[..ordered].select_nth_unstable_by(lo_i, f64::total_cmp);
    let lo = *lo;
    if hi_i == lo_i {
        return Some(lo);
    }
    let hi = if hi_i >= ordered { f64::NAN } else { rest.iter().copied().fold(f64::INFINITY, f64::min) };
    Some(interpolate(lo, hi, d))
}

/// Single-group accumulator (no GROUP BY, and window frames).
#[derive(Debug)]
struct QuantileAccumulator {
    q: f64,
    /// Values in insertion order, so sliding windows can retract from the front.
    values: VecDeque<f64>,
    scratch: Vec<f64>,
}

impl QuantileAccumulator {
    fn extend(&mut self, array: &ArrayRef) {
        let array = array.as_primitive::<Float64Type>();
        if array.null_count() == 0 {
            self.values.extend(array.values().iter().copied());
        } else {
            self.values.extend(array.iter().flatten());
        }
    }
}

impl Accumulator for QuantileAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.extend(&values[0]);
        Ok(())
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        for v in values[0].as_primitive::<Float64Type>().iter().flatten() {
            if self.values.front().is_some_and(|f| f.to_bits() == v.to_bits()) {
                self.values.pop_front();
            } else if let Some(pos) = self.values.iter().position(|f| f.to_bits() == v.to_bits()) {
                self.values.remove(pos);
            } else {
                return internal_err!("quantile_cont: retracted value {v} is not in the window");
            }
        }
        Ok(())
    }

    fn supports_retract_batch(&self) -> bool {
        true
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        self.scratch.clear();
        self.scratch.extend(self.values.iter().copied());
        Ok(ScalarValue::Float64(quantile_of(&mut self.scratch, self.q)))
    }

    fn size(&self) -> usize {
        size_of_val(self) + (self.values.capacity() + self.scratch.capacity()) * 8
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        let values = Float64Array::from_iter_values(self.values.iter().copied());
        let list = ListArray::new(
            Arc::new(Field::new_list_field(DataType::Float64, true)),
            OffsetBuffer::from_lengths([values.len()]),
            Arc::new(values),
            None,
        );
        Ok(vec![ScalarValue::List(Arc::new(list))])
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let lists = states[0].as_list::<i32>();
        for i in 0..lists.len() {
            if lists.is_valid(i) {
                self.extend(&lists.value(i));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn quantile_matches_definition() {
        let mut v = vec![10.0, 1.0, 3.0, 2.0];
        // RN = 3 * 0.3 = 0.9: 1 * 0.1 + 2 * 0.9
        assert_eq!(quantile_of(&mut v, 0.3), Some(1.0f64.mul_add(1.0 - 0.9f64, 2.0 * 0.9f64)));
        assert_eq!(quantile_of(&mut v, 0.0), Some(1.0));
        assert_eq!(quantile_of(&mut v, 1.0), Some(10.0));
        assert_eq!(quantile_of(&mut [], 0.5), None);
    }

    #[test]
    fn nan_sorts_greatest_and_infinities_interpolate_like_duckdb() {
        assert!(quantile_of(&mut [f64::NAN, 1.0, f64::INFINITY], 0.9).unwrap().is_nan());
        assert_eq!(quantile_of(&mut [f64::NAN, 1.0, f64::INFINITY], 0.5), Some(f64::INFINITY));
        assert!(quantile_of(&mut [f64::NEG_INFINITY, f64::INFINITY], 0.9).unwrap().is_nan());
        assert_eq!(quantile_of(&mut [-1e308, 1e308], 0.3), Some((-1e308f64).mul_add(0.7, 1e308 * 0.3)));
    }

    #[test]
    fn retract_removes_values_in_any_order() {
        let mut acc = QuantileAccumulator { q: 0.5, values: VecDeque::new(), scratch: Vec::new() };
        let batch: ArrayRef = Arc::new(Float64Array::from(vec![Some(1.0), None, Some(5.0), Some(3.0)]));
        acc.update_batch(&[batch]).unwrap();
        acc.retract_batch(&[Arc::new(Float64Array::from(vec![5.0]))]).unwrap();
        assert_eq!(acc.evaluate().unwrap(), ScalarValue::Float64(Some(2.0)));
        assert!(acc.retract_batch(&[Arc::new(Float64Array::from(vec![7.0]))]).is_err());
    }
}
