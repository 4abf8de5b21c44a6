//! `onset(time, value)`: the first sustained change of a series, as
//! `struct{time, before, after, ci_lo, ci_hi}` (NULL when there is none).
//!
//! Uses the same robust segmentation as `change_points` (PELT on normal scores). Segments
//! shorter than 10 samples are transients; the first sustained segment is the baseline, and
//! the onset is where the first later sustained segment that differs from the baseline
//! begins (counting a leading transient as part of the change). `before` is the median of the
//! baseline, `after` the median of the new level, `[ci_lo, ci_hi]` an approximate 95 %
//! confidence interval on `time` (profile likelihood). Times are ns. NULL rows and NaN values
//! are ignored; ±inf are ranked as the extremes. O(n log n + min(n, 1024)²) time.

use std::sync::Arc;

use arrow::array::{ArrayRef, Float64Array, Int64Array, StructArray};
use arrow::datatypes::{DataType, Field, FieldRef, Fields};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{Accumulator, AggregateUDFImpl, GroupsAccumulator, Signature, Volatility};
use lockstep_engine::analysis::change_points::ChangeConfig;

use super::change_points::{DETECTOR, coerce_series_args};
use super::constant_args::reject_distinct;
use super::point_state::{self, PointGroups, Points};

const NAME: &str = "onset";

/// The `onset` aggregate.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Onset {
    signature: Signature,
}

impl Onset {
    /// Creates the UDAF implementation.
    pub fn new() -> Self {
        Self { signature: Signature::user_defined(Volatility::Immutable) }
    }
}

impl Default for Onset {
    fn default() -> Self {
        Self::new()
    }
}

/// The result fields: `time`, `before`, `after`, `ci_lo`, `ci_hi`.
pub fn result_fields() -> Fields {
    Fields::from(vec![
        Field::new("time", DataType::Int64, true),
        Field::new("before", DataType::Float64, true),
        Field::new("after", DataType::Float64, true),
        Field::new("ci_lo", DataType::Int64, true),
        Field::new("ci_hi", DataType::Int64, true),
    ])
}

impl AggregateUDFImpl for Onset {
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
        Ok(DataType::Struct(result_fields()))
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(point_state::state_fields(&args, &["values"]))
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        reject_distinct(&args, NAME)?;
        Ok(Box::new(OnsetAccumulator { points: Points::default() }))
    }

    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        !args.is_distinct
    }

    fn create_groups_accumulator(&self, _args: AccumulatorArgs) -> Result<Box<dyn GroupsAccumulator>> {
        Ok(Box::new(PointGroups::<1>::new(NAME, Box::new(evaluate))))
    }
}

/// Accumulates `(time, value)` points; evaluates with the engine's onset rule.
#[derive(Debug)]
struct OnsetAccumulator {
    points: Points<1>,
}

impl Accumulator for OnsetAccumulator {
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

/// `onset` of one group's points.
fn evaluate(times: &[i64], cols: [&[f64]; 1]) -> Result<ScalarValue> {
    let onset = DETECTOR.with(|d| d.borrow_mut().onset_timed(times, cols[0], &ChangeConfig::default()));
    let Some(o) = onset else {
        return ScalarValue::try_from(DataType::Struct(result_fields()));
    };
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(vec![o.time])),
        Arc::new(Float64Array::from(vec![o.before])),
        Arc::new(Float64Array::from(vec![o.after])),
        Arc::new(Int64Array::from(vec![o.ci_lo])),
        Arc::new(Int64Array::from(vec![o.ci_hi])),
    ];
    Ok(ScalarValue::Struct(Arc::new(StructArray::try_new(result_fields(), columns, None)?)))
}
