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
use datafusion::common::{Result, ScalarValue, exec_err};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{Accumulator, AggregateUDFImpl, GroupsAccumulator, Signature, Volatility};

use lockstep_engine::analysis::{Stop, interrupt};

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
    /// The statement's flag: a group evaluated after it is set (the statement was cancelled
    /// or passed its time limit) is an error, and one being evaluated ends early.
    stop: Stop,
    _f: PhantomData<fn() -> F>,
}

impl<F: SeriesFunction<K>, const K: usize> WholeSeries<F, K> {
    /// Creates the UDAF implementation.
    pub fn new() -> Self {
        Self::with_stop(Stop::new())
    }

    /// The UDAF of a statement that `stop` ends ([`lockstep_engine::analysis::interrupt`]).
    pub fn with_stop(stop: Stop) -> Self {
        Self { signature: Signature::user_defined(Volatility::Immutable), stop, _f: PhantomData }
    }
}

/// Evaluates one group under `stop`; an error if the statement was stopped before or during.
fn evaluate_under<F: SeriesFunction<K>, const K: usize>(
    stop: &Stop,
    times: &[i64],
    cols: [&[f64]; K],
    options: &F::Options,
) -> Result<ScalarValue> {
    let stopped = || exec_err!("{}: the statement was stopped (cancelled or past its time limit)", F::NAME);
    if stop.is_set() {
        return stopped();
    }
    let value = interrupt::run_with(stop, || F::evaluate(times, cols, options))?;
    if stop.is_set() { stopped() } else { Ok(value) }
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
        Ok(Box::new(SeriesAccumulator::<F, K> { points: Points::default(), options, stop: self.stop.clone() }))
    }

    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        !args.is_distinct
    }

    fn create_groups_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn GroupsAccumulator>> {
        let options = F::options(&args)?;
        let stop = self.stop.clone();
        Ok(Box::new(PointGroups::<K>::new(
            F::NAME,
            Box::new(move |t, c| evaluate_under::<F, K>(&stop, t, c, &options)),
        )))
    }
}

/// Collects one group's points; evaluates the function on them.
pub(crate) struct SeriesAccumulator<F: SeriesFunction<K>, const K: usize> {
    pub(crate) points: Points<K>,
    pub(crate) options: F::Options,
    pub(crate) stop: Stop,
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
        evaluate_under::<F, K>(&self.stop, self.points.times(), cols, &self.options)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Arc;

    use lockstep_engine::store::StoreConfig;

    use crate::{ClockVersion, QueryEngine, QueryLimits};

    /// The session's stop flag reaches the whole-series aggregates: a statement whose flag is
    /// set (cancelled, or past its time limit) fails with a clear error instead of computing
    /// its series to the end; another session's statement is not affected.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_set_stop_flag_ends_the_sessions_series_functions() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(lockstep_engine::Store::open(dir.path(), StoreConfig::default()).unwrap());
        let session =
            || QueryEngine::with_limits(store.clone(), ClockVersion::Newest, QueryLimits::unbounded()).unwrap();
        let sql = "SELECT g % 3 AS k, lag_corr(g * 1000000000, CAST(g % 7 AS DOUBLE), CAST(g % 5 AS DOUBLE)) AS l, \
                   change_points(g * 1000000000, CAST(g % 7 AS DOUBLE)) AS c \
                   FROM generate_series(1, 3000) t(g) GROUP BY g % 3";
        let (stopped, other) = (session(), session());
        stopped.stop().set();
        let error = stopped.collect(sql).await.unwrap_err().to_string();
        assert!(error.contains("the statement was stopped (cancelled or past its time limit)"), "{error}");
        let rows: usize = other.collect(sql).await.unwrap().iter().map(|b| b.num_rows()).sum();
        assert_eq!(rows, 3);
    }
}
