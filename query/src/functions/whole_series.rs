//! The plumbing shared by the whole-series aggregates (`lag_corr`, `change_points`, `onset`):
//! they collect a group's `(time, value…)` points and evaluate once, on the whole series.
//!
//! A function describes itself with [`SeriesFunction`] (name, value columns, argument
//! coercion, result type, constant options, evaluation); [`WholeSeries`] turns that into a
//! DataFusion aggregate with a row accumulator (retractable, mergeable state) and a groups
//! accumulator (`PointGroups`).

use std::fmt::Debug;
use std::hash::{Hash, Hasher};
use std::marker::PhantomData;

use arrow::array::ArrayRef;
use arrow::datatypes::{DataType, FieldRef};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{Accumulator, AggregateUDFImpl, GroupsAccumulator, Signature, Volatility};

use super::constant_args::reject_distinct;
use super::point_state::{self, PointGroups, Points};

/// One whole-series function over `K` value columns.
pub trait SeriesFunction<const K: usize>: Send + Sync + 'static {
    /// Constant options read from the arguments after the series columns.
    type Options: Clone + Debug + Send + Sync + 'static;
    /// The SQL name.
    const NAME: &'static str;
    /// Names of the value columns in the partial state.
    const COLUMNS: [&'static str; K];
    /// Argument coercion (the time column first, then the `K` value columns, then options).
    fn coerce_types(arg_types: &[DataType]) -> Result<Vec<DataType>>;
    /// The result type.
    fn return_type() -> DataType;
    /// Reads the constant options (plan errors for bad ones).
    fn options(args: &AccumulatorArgs) -> Result<Self::Options>;
    /// Evaluates one group's points (unsorted; may hold NaN).
    fn evaluate(times: &[i64], cols: [&[f64]; K], options: &Self::Options) -> Result<ScalarValue>;
}

/// The DataFusion aggregate of a [`SeriesFunction`].
pub struct WholeSeries<F, const K: usize> {
    signature: Signature,
    _f: PhantomData<fn() -> F>,
}

impl<F: SeriesFunction<K>, const K: usize> WholeSeries<F, K> {
    /// Creates the UDAF implementation.
    pub fn new() -> Self {
        Self { signature: Signature::user_defined(Volatility::Immutable), _f: PhantomData }
    }
}

impl<F: SeriesFunction<K>, const K: usize> Default for WholeSeries<F, K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<F: SeriesFunction<K>, const K: usize> Debug for WholeSeries<F, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WholeSeries").field("name", &F::NAME).finish()
    }
}

impl<F, const K: usize> PartialEq for WholeSeries<F, K> {
    fn eq(&self, other: &Self) -> bool {
        self.signature == other.signature
    }
}

impl<F, const K: usize> Eq for WholeSeries<F, K> {}

impl<F, const K: usize> Hash for WholeSeries<F, K> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.signature.hash(state);
    }
}

impl<F: SeriesFunction<K>, const K: usize> AggregateUDFImpl for WholeSeries<F, K> {
    fn name(&self) -> &str {
        F::NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        F::coerce_types(arg_types)
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(F::return_type())
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(point_state::state_fields(&args, &F::COLUMNS))
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        reject_distinct(&args, F::NAME)?;
        let options = F::options(&args)?;
        Ok(Box::new(SeriesAccumulator::<F, K> { points: Points::default(), options }))
    }

    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        !args.is_distinct
    }

    fn create_groups_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn GroupsAccumulator>> {
        let options = F::options(&args)?;
        Ok(Box::new(PointGroups::<K>::new(F::NAME, Box::new(move |t, c| F::evaluate(t, c, &options)))))
    }
}

/// Collects one group's points; evaluates the function on them.
pub(crate) struct SeriesAccumulator<F: SeriesFunction<K>, const K: usize> {
    pub(crate) points: Points<K>,
    pub(crate) options: F::Options,
}

impl<F: SeriesFunction<K>, const K: usize> Debug for SeriesAccumulator<F, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SeriesAccumulator").field("name", &F::NAME).field("options", &self.options).finish()
    }
}

impl<F: SeriesFunction<K>, const K: usize> Accumulator for SeriesAccumulator<F, K> {
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
        let cols: [&[f64]; K] = std::array::from_fn(|i| self.points.col(i));
        F::evaluate(self.points.times(), cols, &self.options)
    }
}
