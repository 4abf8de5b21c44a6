//! `change_points(time, value [, model [, penalty_scale [, min_segment]]])`: every change in
//! a series' level, slope or spread, as
//! `list<struct{time, before, after, kind, kind_before, kind_after, confidence, ci_lo, ci_hi}>`
//! ordered by time.
//!
//! Default model `'trend'`: PELT with a Gaussian cost in which each segment has its own level,
//! spread and (when it pays for it) slope, on median-centred, noise-scaled, winsorised values
//! with a strong seasonal cycle removed; the penalty per parameter is BIC's on the effective
//! sample size, `2 · ln(n / VIF) · VIF`, with `VIF` the variance inflation of the series'
//! robust lag-1 autocorrelation, so trends, random walks and autocorrelated noise are not cut
//! into staircases. `'level'` allows no slopes;
//! `'rank'` is the previous method (normal scores, independent-samples penalty). The method
//! is in `docs/change-points.md`, the numerics in `lockstep_engine::analysis::change_points`.
//!
//! `time` is the first sample of the new segment (ns); `before`/`after` the medians of the two
//! adjacent segments; `kind` is `level`, `slope` or `spread` and `kind_before`/`kind_after`
//! the value of that quantity either side (median; slope per second; robust standard
//! deviation); `confidence` an approximate probability that the change is real; `[ci_lo,
//! ci_hi]` an approximate 95 % interval on `time`. NULL rows and NaN values are ignored; ±inf
//! are the extremes. NULL for a group without rows, an empty list when nothing changes (also
//! for constant series and fewer than `2 · min_segment` samples). About
//! O(n log n + min(n, 1024)²) time, O(n) memory per group.

use std::cell::RefCell;
use std::sync::Arc;

use arrow::array::{ArrayRef, Float64Array, Int64Array, ListArray, StringArray, StructArray};
use arrow::buffer::OffsetBuffer;
use arrow::datatypes::{DataType, Field, FieldRef, Fields};
use datafusion::common::{Result, ScalarValue, plan_err};
use datafusion::logical_expr::function::AccumulatorArgs;
use lockstep_engine::analysis::change_points::{ChangeConfig, ChangeDetector, ChangeModel};

use super::constant_args::{
    check_arity, coerce_float, coerce_int, coerce_time, constant_f64, constant_i64, constant_str,
};
use super::whole_series::{SeriesFunction, WholeSeries};

const NAME: &str = "change_points";
/// Largest accepted `min_segment`.
const MAX_MIN_SEGMENT: i64 = 1_000_000;

thread_local! {
    /// Detection buffers reused across groups on this thread.
    pub(crate) static DETECTOR: RefCell<ChangeDetector> = RefCell::new(ChangeDetector::new());
}

/// The `change_points` aggregate.
pub type ChangePoints = WholeSeries<ChangePointsFn, 1>;

/// `change_points` as a [`SeriesFunction`].
#[derive(Debug)]
pub struct ChangePointsFn;

/// The fields of one list element.
pub fn item_fields() -> Fields {
    Fields::from(vec![
        Field::new("time", DataType::Int64, false),
        Field::new("before", DataType::Float64, false),
        Field::new("after", DataType::Float64, false),
        Field::new("kind", DataType::Utf8, false),
        Field::new("kind_before", DataType::Float64, false),
        Field::new("kind_after", DataType::Float64, false),
        Field::new("confidence", DataType::Float64, false),
        Field::new("ci_lo", DataType::Int64, false),
        Field::new("ci_hi", DataType::Int64, false),
    ])
}

fn item_field() -> FieldRef {
    Arc::new(Field::new_list_field(DataType::Struct(item_fields()), true))
}

/// Argument coercion shared with `onset`: `(time, value [, model [, penalty_scale [, min_segment]]])`.
pub(crate) fn coerce_series_args(function: &str, arg_types: &[DataType]) -> Result<Vec<DataType>> {
    check_arity(
        function,
        arg_types,
        2,
        5,
        "2 to 5 arguments (time, value [, model [, penalty_scale [, min_segment]]])",
    )?;
    let mut out = vec![coerce_time(function, "time", &arg_types[0])?, coerce_float(function, "value", &arg_types[1])?];
    if let Some(t) = arg_types.get(2) {
        out.push(match t {
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Null => DataType::Utf8,
            other => {
                return plan_err!("{function}: argument model must be a string ({}), got {other}", ChangeModel::NAMES);
            }
        });
    }
    if let Some(t) = arg_types.get(3) {
        out.push(coerce_float(function, "penalty_scale", t)?);
    }
    if let Some(t) = arg_types.get(4) {
        out.push(coerce_int(function, "min_segment", t)?);
    }
    Ok(out)
}

/// Reads the optional arguments shared with `onset` into a configuration.
pub(crate) fn series_config(function: &str, args: &AccumulatorArgs) -> Result<ChangeConfig> {
    let mut cfg = ChangeConfig::default();
    if let Some(e) = args.exprs.get(2)
        && let Some(name) = constant_str(e, function, "model")?
    {
        match ChangeModel::parse(&name) {
            Some(m) => cfg.model = m,
            None => return plan_err!("{function}: model must be {}, got '{name}'", ChangeModel::NAMES),
        }
    }
    if let Some(e) = args.exprs.get(3)
        && let Some(scale) = constant_f64(e, function, "penalty_scale")?
    {
        if !(scale.is_finite() && scale > 0.0) {
            return plan_err!("{function}: penalty_scale must be a positive finite number, got {scale}");
        }
        cfg.penalty_scale = scale;
    }
    if let Some(e) = args.exprs.get(4)
        && let Some(m) = constant_i64(e, function, "min_segment")?
    {
        if !(2..=MAX_MIN_SEGMENT).contains(&m) {
            return plan_err!("{function}: min_segment must be between 2 and {MAX_MIN_SEGMENT} samples, got {m}");
        }
        let m = usize::try_from(m).unwrap_or(2);
        cfg.min_size = m;
        cfg.sustain = cfg.sustain.max(m);
    }
    Ok(cfg)
}

impl SeriesFunction<1> for ChangePointsFn {
    type Options = ChangeConfig;
    const NAME: &'static str = NAME;
    const COLUMNS: [&'static str; 1] = ["values"];

    fn coerce_types(arg_types: &[DataType]) -> Result<Vec<DataType>> {
        coerce_series_args(NAME, arg_types)
    }

    fn return_type() -> DataType {
        DataType::List(item_field())
    }

    fn options(args: &AccumulatorArgs) -> Result<ChangeConfig> {
        series_config(NAME, args)
    }

    fn evaluate(times: &[i64], cols: [&[f64]; 1], cfg: &ChangeConfig) -> Result<ScalarValue> {
        if times.is_empty() {
            return ScalarValue::try_from(DataType::List(item_field()));
        }
        let cps = DETECTOR.with(|d| d.borrow_mut().detect_timed(times, cols[0], cfg));
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from_iter_values(cps.iter().map(|c| c.time))),
            Arc::new(Float64Array::from_iter_values(cps.iter().map(|c| c.before))),
            Arc::new(Float64Array::from_iter_values(cps.iter().map(|c| c.after))),
            Arc::new(StringArray::from_iter_values(cps.iter().map(|c| c.kind.as_str()))),
            Arc::new(Float64Array::from_iter_values(cps.iter().map(|c| c.kind_before))),
            Arc::new(Float64Array::from_iter_values(cps.iter().map(|c| c.kind_after))),
            Arc::new(Float64Array::from_iter_values(cps.iter().map(|c| c.confidence))),
            Arc::new(Int64Array::from_iter_values(cps.iter().map(|c| c.ci_lo))),
            Arc::new(Int64Array::from_iter_values(cps.iter().map(|c| c.ci_hi))),
        ];
        let items = StructArray::try_new(item_fields(), columns, None)?;
        let offsets = OffsetBuffer::from_lengths([cps.len()]);
        let list = ListArray::try_new(item_field(), offsets, Arc::new(items), None)?;
        Ok(ScalarValue::List(Arc::new(list)))
    }
}
