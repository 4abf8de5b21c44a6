//! `value_at(time, value, t)`: the value of the latest sample at or before `t` — the building
//! block of ASOF ("last value at or before") alignment between two series.
//!
//! Among the rows with non-NULL `time`, `value` and `t` and `time <= t` (each row compared
//! with its own `t`), returns the `value` of the row with the greatest `time`; rows at the same
//! time are ordered by value (NaN greatest) so the result does not depend on input or merge
//! order. No qualifying row gives NULL. NaN and ±inf values are returned as they are.
//! O(1) per row and O(1) state, so it works in GROUP BY (any merge order) and in cumulative
//! window frames (`OVER (PARTITION BY .. ORDER BY time)`); sliding frames are not supported.
//!
//! Two ASOF patterns (see docs/sql-functions.md): a window over the UNION ALL of both series,
//! `value_at(time, y, time) OVER (PARTITION BY host ORDER BY time)`, O(n log n); or a range
//! join grouped by the left row, `value_at(b.time, b.value, a.time)`.

use std::cmp::Ordering;
use std::mem::size_of_val;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{DataType, Field, FieldRef, Float64Type, Int64Type, TimestampNanosecondType};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::format_state_name;
use datafusion::logical_expr::{Accumulator, AggregateUDFImpl, Signature, Volatility};

use super::constant_args::{check_arity, coerce_float, coerce_time, reject_distinct};

const NAME: &str = "value_at";

/// The `value_at(time, value, t)` aggregate.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct ValueAt {
    signature: Signature,
}

impl ValueAt {
    /// Creates the UDAF implementation.
    pub fn new() -> Self {
        Self { signature: Signature::user_defined(Volatility::Immutable) }
    }
}

impl Default for ValueAt {
    fn default() -> Self {
        Self::new()
    }
}

impl AggregateUDFImpl for ValueAt {
    fn name(&self) -> &str {
        NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        check_arity(NAME, arg_types, 3, 3, "3 arguments (time, value, t)")?;
        Ok(vec![
            coerce_time(NAME, "time", &arg_types[0])?,
            coerce_float(NAME, "value", &arg_types[1])?,
            coerce_time(NAME, "t", &arg_types[2])?,
        ])
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Float64)
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(vec![
            Arc::new(Field::new(format_state_name(args.name, "time"), DataType::Int64, true)),
            Arc::new(Field::new(format_state_name(args.name, "value"), DataType::Float64, true)),
        ])
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        reject_distinct(&args, NAME)?;
        Ok(Box::new(ValueAtAccumulator { best: None }))
    }
}

fn later(a: (i64, f64), b: (i64, f64)) -> bool {
    let by_value = match (a.1.is_nan(), b.1.is_nan()) {
        (false, false) => a.1.total_cmp(&b.1),
        (x, y) => x.cmp(&y),
    };
    a.0.cmp(&b.0).then(by_value) == Ordering::Greater
}

#[derive(Debug)]
struct ValueAtAccumulator {
    best: Option<(i64, f64)>,
}

impl ValueAtAccumulator {
    fn offer(&mut self, candidate: (i64, f64)) {
        if self.best.is_none_or(|b| later(candidate, b)) {
            self.best = Some(candidate);
        }
    }
}

impl Accumulator for ValueAtAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let times = values[0].as_primitive::<TimestampNanosecondType>();
        let vals = values[1].as_primitive::<Float64Type>();
        let ts = values[2].as_primitive::<TimestampNanosecondType>();
        for i in 0..times.len() {
            if times.is_valid(i) && vals.is_valid(i) && ts.is_valid(i) && times.value(i) <= ts.value(i) {
                self.offer((times.value(i), vals.value(i)));
            }
        }
        Ok(())
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        Ok(ScalarValue::Float64(self.best.map(|b| b.1)))
    }

    fn size(&self) -> usize {
        size_of_val(self)
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![ScalarValue::Int64(self.best.map(|b| b.0)), ScalarValue::Float64(self.best.map(|b| b.1))])
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let times = states[0].as_primitive::<Int64Type>();
        let vals = states[1].as_primitive::<Float64Type>();
        for i in 0..times.len() {
            if times.is_valid(i) && vals.is_valid(i) {
                self.offer((times.value(i), vals.value(i)));
            }
        }
        Ok(())
    }
}
