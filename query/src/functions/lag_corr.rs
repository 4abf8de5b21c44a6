//! `lag_corr(time, x, y [, max_lag])`: the lag at which `y` best follows `x`, the correlation
//! at that lag and its significance, as `struct{lag_ns, coef, p_value, n}`.
//!
//! Rows are placed on a regular grid (step inferred from the spacing of the group's
//! timestamps; rows sharing a slot are averaged; empty slots are gaps), both series are
//! normalised, and the
//! biased cross-correlation `Σ zy[i + k] · zx[i] / n` is searched over `|k| <= max_lag`
//! (default: a quarter of the grid). **Positive `lag_ns` means x leads y.** `p_value` tests
//! the max-over-lags statistic against circularly shifted or phase-randomised surrogates of
//! `x` (deterministic). The numerics live in `lockstep_engine::analysis::lag_corr`.
//! NULL rows and rows where `x` or `y` is NaN or ±inf are ignored. O(N log N) time for a grid
//! of N slots (direct summation for tiny inputs), O(rows) memory per group.

use std::cell::RefCell;
use std::sync::Arc;

use arrow::array::{ArrayRef, Float64Array, Int64Array, StructArray};
use arrow::datatypes::{DataType, Field, Fields};
use datafusion::common::{Result, ScalarValue, exec_err};
use datafusion::logical_expr::function::AccumulatorArgs;
use lockstep_engine::analysis::grid::snap_pairs;
use lockstep_engine::analysis::lag_corr::{LagCorrConfig, LagCorrelator};

use super::constant_args::{check_arity, coerce_float, coerce_interval, coerce_time, constant_interval_ns};
use super::whole_series::{SeriesFunction, WholeSeries};

const NAME: &str = "lag_corr";

thread_local! {
    /// FFT plans are cached per thread, so groups of equal length plan once.
    static CORRELATOR: RefCell<LagCorrelator> = RefCell::new(LagCorrelator::new());
}

/// The `lag_corr` aggregate.
pub type LagCorr = WholeSeries<LagCorrFn, 2>;

/// `lag_corr` as a [`SeriesFunction`] over `(x, y)`; the option is `max_lag` in ns.
#[derive(Debug)]
pub struct LagCorrFn;

/// The result fields: `lag_ns`, `coef`, `p_value`, `n`.
pub fn result_fields() -> Fields {
    Fields::from(vec![
        Field::new("lag_ns", DataType::Int64, true),
        Field::new("coef", DataType::Float64, true),
        Field::new("p_value", DataType::Float64, true),
        Field::new("n", DataType::Int64, true),
    ])
}

impl SeriesFunction<2> for LagCorrFn {
    type Options = Option<i64>;
    const NAME: &'static str = NAME;
    const COLUMNS: [&'static str; 2] = ["x", "y"];

    fn coerce_types(arg_types: &[DataType]) -> Result<Vec<DataType>> {
        check_arity(NAME, arg_types, 3, 4, "3 or 4 arguments (time, x, y [, max_lag])")?;
        let mut out = vec![
            coerce_time(NAME, "time", &arg_types[0])?,
            coerce_float(NAME, "x", &arg_types[1])?,
            coerce_float(NAME, "y", &arg_types[2])?,
        ];
        if let Some(t) = arg_types.get(3) {
            out.push(coerce_interval(NAME, "max_lag", t)?);
        }
        Ok(out)
    }

    fn return_type() -> DataType {
        DataType::Struct(result_fields())
    }

    fn options(args: &AccumulatorArgs) -> Result<Option<i64>> {
        match args.exprs.get(3) {
            Some(e) => Ok(Some(constant_interval_ns(e, NAME, "max_lag")?)),
            None => Ok(None),
        }
    }

    fn evaluate(times: &[i64], cols: [&[f64]; 2], max_lag_ns: &Option<i64>) -> Result<ScalarValue> {
        evaluate(times, cols, *max_lag_ns)
    }
}

/// `lag_corr` of one group's points.
fn evaluate(times: &[i64], cols: [&[f64]; 2], max_lag_ns: Option<i64>) -> Result<ScalarValue> {
    let snapped = match snap_pairs(times, cols[0], cols[1]) {
        Ok(s) => s,
        Err(e) => return exec_err!("{NAME}: {e}"),
    };
    let Some((grid, x, y)) = snapped else {
        return ScalarValue::try_from(DataType::Struct(result_fields()));
    };
    let present = x.iter().zip(&y).filter(|(a, b)| a.is_finite() && b.is_finite()).count();
    let cfg = LagCorrConfig {
        max_lag: max_lag_ns.map(|ns| usize::try_from(ns / grid.step).unwrap_or(usize::MAX)),
        ..LagCorrConfig::default()
    };
    let result = CORRELATOR.with(|c| c.borrow_mut().compute(&x, &y, &cfg));
    let (lag_ns, coef, p_value) = match result {
        Some(r) => (r.lag.checked_mul(grid.step), Some(r.coef), r.p_value),
        None => (None, None, None),
    };
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(vec![lag_ns])),
        Arc::new(Float64Array::from(vec![coef])),
        Arc::new(Float64Array::from(vec![p_value])),
        Arc::new(Int64Array::from(vec![Some(present as i64)])),
    ];
    Ok(ScalarValue::Struct(Arc::new(StructArray::try_new(result_fields(), columns, None)?)))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::functions::point_state::Points;
    use crate::functions::whole_series::SeriesAccumulator;
    use arrow::array::TimestampNanosecondArray;
    use datafusion::logical_expr::Accumulator;

    type LagCorrAccumulator = SeriesAccumulator<LagCorrFn, 2>;

    fn rows(range: std::ops::Range<i64>) -> Vec<ArrayRef> {
        let t: Vec<i64> = range.clone().map(|i| i * 10).collect();
        let x: Vec<f64> = range.clone().map(|i| ((i * i * 7 + i * 31) % 97) as f64).collect();
        let y: Vec<f64> = range.map(|i| (((i - 2) * (i - 2) * 7 + (i - 2) * 31).rem_euclid(97)) as f64).collect();
        vec![
            Arc::new(TimestampNanosecondArray::from(t)),
            Arc::new(Float64Array::from(x)),
            Arc::new(Float64Array::from(y)),
        ]
    }

    fn partial(range: std::ops::Range<i64>) -> Vec<ArrayRef> {
        let mut acc = LagCorrAccumulator { points: Points::default(), options: Some(100), stop: Default::default() };
        acc.update_batch(&rows(range)).unwrap();
        acc.state().unwrap().iter().map(|s| s.to_array().unwrap()).collect()
    }

    #[test]
    fn merge_order_does_not_change_the_result() {
        let parts = [partial(0..70), partial(70..150), partial(150..300)];
        let mut results = Vec::new();
        for order in [[0, 1, 2], [2, 0, 1], [1, 2, 0]] {
            let mut acc =
                LagCorrAccumulator { points: Points::default(), options: Some(100), stop: Default::default() };
            for i in order {
                acc.merge_batch(&parts[i]).unwrap();
            }
            results.push(acc.evaluate().unwrap());
        }
        let mut whole = LagCorrAccumulator { points: Points::default(), options: Some(100), stop: Default::default() };
        whole.update_batch(&rows(0..300)).unwrap();
        let expected = whole.evaluate().unwrap();
        assert!(results.iter().all(|r| *r == expected), "{results:?} vs {expected}");
        let ScalarValue::Struct(s) = expected else { panic!("not a struct") };
        assert_eq!(s.column(0).as_any().downcast_ref::<Int64Array>().unwrap().value(0), 20);
    }
}
