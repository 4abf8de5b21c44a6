//! `onset(time, value [, model [, penalty_scale [, min_segment]]])`: the first sustained
//! change of a series, as
//! `struct{time, before, after, ci_lo, ci_hi, kind, kind_before, kind_after, confidence}`
//! (NULL when there is none).
//!
//! Uses the same segmentation and optional arguments as `change_points`. Segments shorter
//! than 10 samples (or `min_segment`) are transients; the first sustained segment is the
//! baseline, and the onset is where the first later sustained segment that differs from the
//! baseline begins (counting a leading transient as part of the change; for a ramp, its
//! start). `before` is the median of the baseline, `after` the median of the new segment,
//! `[ci_lo, ci_hi]` an approximate 95 % confidence interval on `time` (profile likelihood);
//! `kind`, `kind_before`, `kind_after` and `confidence` as in `change_points`. Times are ns.
//! NULL rows and NaN values are ignored; ±inf are the extremes. O(n log n + min(n, 1024)²)
//! time.

use std::sync::Arc;

use arrow::array::{ArrayRef, Float64Array, Int64Array, StringArray, StructArray};
use arrow::datatypes::{DataType, Field, Fields};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::function::AccumulatorArgs;
use lockstep_engine::analysis::change_points::ChangeConfig;

use super::change_points::{DETECTOR, coerce_series_args, series_config};
use super::whole_series::{SeriesFunction, WholeSeries};

const NAME: &str = "onset";

/// The `onset` aggregate.
pub type Onset = WholeSeries<OnsetFn, 1>;

/// `onset` as a [`SeriesFunction`].
#[derive(Debug)]
pub struct OnsetFn;

/// The result fields.
pub fn result_fields() -> Fields {
    Fields::from(vec![
        Field::new("time", DataType::Int64, true),
        Field::new("before", DataType::Float64, true),
        Field::new("after", DataType::Float64, true),
        Field::new("ci_lo", DataType::Int64, true),
        Field::new("ci_hi", DataType::Int64, true),
        Field::new("kind", DataType::Utf8, true),
        Field::new("kind_before", DataType::Float64, true),
        Field::new("kind_after", DataType::Float64, true),
        Field::new("confidence", DataType::Float64, true),
    ])
}

impl SeriesFunction<1> for OnsetFn {
    type Options = ChangeConfig;
    const NAME: &'static str = NAME;
    const COLUMNS: [&'static str; 1] = ["values"];

    fn coerce_types(arg_types: &[DataType]) -> Result<Vec<DataType>> {
        coerce_series_args(NAME, arg_types)
    }

    fn return_type() -> DataType {
        DataType::Struct(result_fields())
    }

    fn options(args: &AccumulatorArgs) -> Result<ChangeConfig> {
        series_config(NAME, args)
    }

    fn evaluate(times: &[i64], cols: [&[f64]; 1], cfg: &ChangeConfig) -> Result<ScalarValue> {
        let onset = DETECTOR.with(|d| d.borrow_mut().onset_timed(times, cols[0], cfg));
        let Some(o) = onset else {
            return ScalarValue::try_from(DataType::Struct(result_fields()));
        };
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(vec![o.time])),
            Arc::new(Float64Array::from(vec![o.before])),
            Arc::new(Float64Array::from(vec![o.after])),
            Arc::new(Int64Array::from(vec![o.ci_lo])),
            Arc::new(Int64Array::from(vec![o.ci_hi])),
            Arc::new(StringArray::from(vec![o.kind.as_str()])),
            Arc::new(Float64Array::from(vec![o.kind_before])),
            Arc::new(Float64Array::from(vec![o.kind_after])),
            Arc::new(Float64Array::from(vec![o.confidence])),
        ];
        Ok(ScalarValue::Struct(Arc::new(StructArray::try_new(result_fields(), columns, None)?)))
    }
}
