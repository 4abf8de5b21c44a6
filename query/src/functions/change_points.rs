//! `change_points(time, value)`: every change in a series' level or spread, as
//! `list<struct{time, before, after}>` ordered by time.
//!
//! PELT with a Gaussian mean-and-variance cost on the normal scores (rank Gaussianisation) of
//! the values, penalty `3.5 · ln n`: robust to heavy tails and outliers, no per-series
//! tuning (numerics in `lockstep_engine::analysis::change_points`). `time` is the first
//! sample of the new segment (ns); `before`/`after` are the medians of the two adjacent
//! segments. NULL rows and NaN values are ignored; ±inf are ranked as the extremes. NULL for a
//! group without rows, an empty list when nothing changes (also for constant series and
//! fewer than 10 samples). About O(n log n + min(n, 1024)²) time, O(n) memory per group.

use std::cell::RefCell;
use std::sync::Arc;

use arrow::array::{ArrayRef, Float64Array, Int64Array, ListArray, StructArray};
use arrow::buffer::OffsetBuffer;
use arrow::datatypes::{DataType, Field, FieldRef, Fields};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{Accumulator, AggregateUDFImpl, GroupsAccumulator, Signature, Volatility};
use lockstep_engine::analysis::change_points::{ChangeConfig, ChangeDetector};

use super::constant_args::{check_arity, coerce_float, coerce_time, reject_distinct};
use super::point_state::{self, PointGroups, Points};

const NAME: &str = "change_points";

thread_local! {
    /// Detection buffers reused across groups on this thread.
    pub(crate) static DETECTOR: RefCell<ChangeDetector> = RefCell::new(ChangeDetector::new());
}

/// The `change_points` aggregate.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct ChangePoints {
    signature: Signature,
}

impl ChangePoints {
    /// Creates the UDAF implementation.
    pub fn new() -> Self {
        Self { signature: Signature::user_defined(Volatility::Immutable) }
    }
}

impl Default for ChangePoints {
    fn default() -> Self {
        Self::new()
    }
}

/// The fields of one list element: `time`, `before`, `after`.
pub fn item_fields() -> Fields {
    Fields::from(vec![
        Field::new("time", DataType::Int64, false),
        Field::new("before", DataType::Float64, false),
        Field::new("after", DataType::Float64, false),
    ])
}

fn item_field() -> FieldRef {
    Arc::new(Field::new_list_field(DataType::Struct(item_fields()), true))
}

/// Argument coercion shared with `onset`: `(time, value)`.
pub(crate) fn coerce_series_args(function: &str, arg_types: &[DataType]) -> Result<Vec<DataType>> {
    check_arity(function, arg_types, 2, 2, "2 arguments (time, value)")?;
    Ok(vec![coerce_time(function, "time", &arg_types[0])?, coerce_float(function, "value", &arg_types[1])?])
}

impl AggregateUDFImpl for ChangePoints {
    fn name(&self) -> &str {
        NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        coerce_series_args(NAME, arg_types)
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::List(item_field()))
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(point_state::state_fields(&args, &["values"]))
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        reject_distinct(&args, NAME)?;
        Ok(Box::new(ChangePointsAccumulator { points: Points::default() }))
    }

    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        !args.is_distinct
    }

    fn create_groups_accumulator(&self, _args: AccumulatorArgs) -> Result<Box<dyn GroupsAccumulator>> {
        Ok(Box::new(PointGroups::<1>::new(NAME, Box::new(evaluate))))
    }
}

/// Accumulates `(time, value)` points; evaluates with the engine's detector.
#[derive(Debug)]
struct ChangePointsAccumulator {
    points: Points<1>,
}

impl Accumulator for ChangePointsAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.points.update(values)
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.points.retract(values)
    }

    fn supports_retract_batch(&self) -> bool {
        true
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        self.points.merge(states)
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(self.points.state())
    }

    fn size(&self) -> usize {
        self.points.size()
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        evaluate(self.points.times(), [self.points.col(0)])
    }
}

/// `change_points` of one group's points.
fn evaluate(times: &[i64], cols: [&[f64]; 1]) -> Result<ScalarValue> {
    if times.is_empty() {
        return ScalarValue::try_from(DataType::List(item_field()));
    }
    let cps = DETECTOR.with(|d| d.borrow_mut().detect_timed(times, cols[0], &ChangeConfig::default()));
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values(cps.iter().map(|c| c.time))),
        Arc::new(Float64Array::from_iter_values(cps.iter().map(|c| c.before))),
        Arc::new(Float64Array::from_iter_values(cps.iter().map(|c| c.after))),
    ];
    let items = StructArray::try_new(item_fields(), columns, None)?;
    let offsets = OffsetBuffer::from_lengths([cps.len()]);
    let list = ListArray::try_new(item_field(), offsets, Arc::new(items), None)?;
    Ok(ScalarValue::List(Arc::new(list)))
}
