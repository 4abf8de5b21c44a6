//! `gap_fill(time, value, start, stop, interval, fill [, agg])`: buckets a series onto the fixed
//! grid `start, start + interval, ..` (up to, not including, `stop`) and fills empty buckets,
//! so series of different hosts and sampling rates meet on one grid.
//!
//! Returns one `List<Struct<time, value>>` per group, one element per grid bucket, for callers
//! to `unnest`. Each bucket's value aggregates its samples with `agg`: `'avg'` (default),
//! `'sum'`, `'min'`, `'max'`, `'first'` or `'last'` (by time). Empty buckets are filled by
//! `fill`:
//! - `'null'`: NULL;
//! - `'locf'`: the previous bucket's value (last observation carried forward), seeded by the
//!   latest sample before `start` when the input has one;
//! - `'linear'`: linear interpolation in time between the neighbouring non-empty buckets
//!   (each stamped at its bucket start), using the latest sample before `start` and the
//!   earliest sample at or after `stop` as outer anchors; NULL where a side is missing.
//!
//! `start`, `stop`, `interval`, `fill` and `agg` must be constants; `interval` must be a
//! positive fixed-length interval (no months) and the grid at most 10,000,000 buckets. NULL
//! times and NULL values are ignored; NaN values are data (they propagate through `avg` and
//! `sum`; `min`/`max` order NaN above `+inf`). Samples are ordered internally, so input order
//! and partial-state merge order never matter. Cost: O(n log n + buckets) per group; memory
//! O(samples in the window).

use std::cmp::Ordering;
use std::mem::size_of_val;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, Float64Array, Int64Array, ListArray, StructArray, TimestampNanosecondArray,
};
use arrow::buffer::OffsetBuffer;
use arrow::datatypes::{DataType, Field, FieldRef, Fields, Float64Type, Int64Type, TimeUnit, TimestampNanosecondType};
use datafusion::common::{Result, ScalarValue, exec_err, plan_err};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{Accumulator, AggregateUDFImpl, Signature, Volatility};

use super::constant_args::{
    check_arity, coerce_float, coerce_time, constant_interval_ns, constant_str, constant_timestamp_ns, reject_distinct,
};
use super::counter;

/// Largest grid one group may produce.
pub const MAX_BUCKETS: i64 = 10_000_000;

const NAME: &str = "gap_fill";

/// How empty buckets are filled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fill {
    Null,
    Locf,
    Linear,
}

/// How the samples of one bucket are combined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Agg {
    Avg,
    Sum,
    Min,
    Max,
    First,
    Last,
}

/// The `gap_fill` aggregate.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct GapFill {
    signature: Signature,
}

impl GapFill {
    /// Creates the UDAF implementation.
    pub fn new() -> Self {
        Self { signature: Signature::user_defined(Volatility::Immutable) }
    }
}

impl Default for GapFill {
    fn default() -> Self {
        Self::new()
    }
}

fn item_fields(time_type: &DataType) -> Fields {
    Fields::from(vec![Field::new("time", time_type.clone(), false), Field::new("value", DataType::Float64, true)])
}

impl AggregateUDFImpl for GapFill {
    fn name(&self) -> &str {
        NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        check_arity(NAME, arg_types, 6, 7, "6 or 7 arguments (time, value, start, stop, interval, fill [, agg])")?;
        let mut out = vec![
            coerce_time(NAME, "time", &arg_types[0])?,
            coerce_float(NAME, "value", &arg_types[1])?,
            coerce_time(NAME, "start", &arg_types[2])?,
            coerce_time(NAME, "stop", &arg_types[3])?,
        ];
        out.push(match &arg_types[4] {
            t @ DataType::Interval(_) => t.clone(),
            t if t.is_integer() => DataType::Int64,
            other => {
                return plan_err!("{NAME}: argument interval must be an interval, got {other}");
            }
        });
        for (t, name) in arg_types[5..].iter().zip(["fill", "agg"]) {
            match t {
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Null => out.push(DataType::Utf8),
                other => return plan_err!("{NAME}: argument {name} must be a string, got {other}"),
            }
        }
        Ok(out)
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        let time_type = match &arg_types[0] {
            DataType::Timestamp(_, tz) => DataType::Timestamp(TimeUnit::Nanosecond, tz.clone()),
            _ => DataType::Timestamp(TimeUnit::Nanosecond, None),
        };
        let item = Field::new_list_field(DataType::Struct(item_fields(&time_type)), true);
        Ok(DataType::List(Arc::new(item)))
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(counter::state_fields(&args))
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        reject_distinct(&args, NAME)?;
        let start = constant_timestamp_ns(&args.exprs[2], NAME, "start")?;
        let stop = constant_timestamp_ns(&args.exprs[3], NAME, "stop")?;
        let interval = constant_interval_ns(&args.exprs[4], NAME, "interval")?;
        let fill = match constant_str(&args.exprs[5], NAME, "fill")?.as_deref() {
            Some("null") => Fill::Null,
            Some("locf") => Fill::Locf,
            Some("linear") => Fill::Linear,
            other => {
                return plan_err!("{NAME}: fill must be 'null', 'locf' or 'linear', got {other:?}");
            }
        };
        let agg = match args.exprs.get(6) {
            None => Agg::Avg,
            Some(e) => match constant_str(e, NAME, "agg")?.as_deref() {
                Some("avg") => Agg::Avg,
                Some("sum") => Agg::Sum,
                Some("min") => Agg::Min,
                Some("max") => Agg::Max,
                Some("first") => Agg::First,
                Some("last") => Agg::Last,
                other => {
                    return plan_err!("{NAME}: agg must be one of avg, sum, min, max, first, last, got {other:?}");
                }
            },
        };
        if stop < start {
            return plan_err!("{NAME}: stop must not be before start");
        }
        let buckets = ((stop as i128 - start as i128 + interval as i128 - 1) / interval as i128) as i64;
        if buckets > MAX_BUCKETS {
            return plan_err!("{NAME}: grid of {buckets} buckets exceeds the limit of {MAX_BUCKETS}");
        }
        let DataType::List(item) = args.return_type() else {
            return plan_err!("{NAME}: unexpected return type {}", args.return_type());
        };
        Ok(Box::new(GapFillAccumulator {
            start,
            stop,
            interval,
            buckets: buckets as usize,
            fill,
            agg,
            item: Arc::clone(item),
            samples: Vec::new(),
            seed: None,
            anchor: None,
        }))
    }
}

fn order(a: &(i64, f64), b: &(i64, f64)) -> Ordering {
    a.0.cmp(&b.0).then(a.1.total_cmp(&b.1))
}

/// Orders NaN above everything (like `quantile_cont`).
fn nan_greatest(a: f64, b: f64) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (false, false) => a.total_cmp(&b),
        (x, y) => x.cmp(&y),
    }
}

#[derive(Debug)]
struct GapFillAccumulator {
    start: i64,
    stop: i64,
    interval: i64,
    buckets: usize,
    fill: Fill,
    agg: Agg,
    item: FieldRef,
    /// Samples in `[start, stop)`.
    samples: Vec<(i64, f64)>,
    /// Latest sample before `start`.
    seed: Option<(i64, f64)>,
    /// Earliest sample at or after `stop`.
    anchor: Option<(i64, f64)>,
}

impl GapFillAccumulator {
    fn push(&mut self, s: (i64, f64)) {
        if s.0 < self.start {
            if self.seed.is_none_or(|x| order(&s, &x) == Ordering::Greater) {
                self.seed = Some(s);
            }
        } else if s.0 >= self.stop {
            if self.anchor.is_none_or(|x| order(&s, &x) == Ordering::Less) {
                self.anchor = Some(s);
            }
        } else {
            self.samples.push(s);
        }
    }

    fn push_arrays(&mut self, times: &[i64], time_valid: impl Fn(usize) -> bool, values: &Float64Array) {
        for (i, &t) in times.iter().enumerate() {
            if time_valid(i) && values.is_valid(i) {
                self.push((t, values.value(i)));
            }
        }
    }

    /// Aggregated value of each non-empty bucket.
    fn bucket_values(&mut self) -> Vec<Option<f64>> {
        self.samples.sort_unstable_by(order);
        let mut vals: Vec<Option<f64>> = vec![None; self.buckets];
        let mut counts = vec![0u32; if self.agg == Agg::Avg { self.buckets } else { 0 }];
        for &(t, v) in &self.samples {
            let b = ((i128::from(t) - i128::from(self.start)) / i128::from(self.interval)) as usize;
            let slot = &mut vals[b];
            *slot = Some(match (*slot, self.agg) {
                (None, _) => v,
                (Some(a), Agg::Avg | Agg::Sum) => a + v,
                (Some(a), Agg::Min) => std::cmp::min_by(a, v, |x, y| nan_greatest(*x, *y)),
                (Some(a), Agg::Max) => std::cmp::max_by(a, v, |x, y| nan_greatest(*x, *y)),
                (Some(a), Agg::First) => a,
                (Some(_), Agg::Last) => v,
            });
            if let Some(c) = counts.get_mut(b) {
                *c += 1;
            }
        }
        for (v, c) in vals.iter_mut().zip(&counts) {
            if let Some(x) = v {
                *x /= f64::from(*c);
            }
        }
        vals
    }

    fn filled(&mut self) -> Vec<Option<f64>> {
        let mut vals = self.bucket_values();
        let at = |k: usize| self.start + k as i64 * self.interval;
        match self.fill {
            Fill::Null => {}
            Fill::Locf => {
                let mut prev = self.seed.map(|s| s.1);
                for v in vals.iter_mut() {
                    match v {
                        Some(x) => prev = Some(*x),
                        None => *v = prev,
                    }
                }
            }
            Fill::Linear => {
                let known: Vec<(usize, f64)> = vals.iter().enumerate().filter_map(|(k, v)| v.map(|x| (k, x))).collect();
                let mut next_known = 0;
                let mut prev: Option<(i64, f64)> = self.seed;
                for (k, slot) in vals.iter_mut().enumerate() {
                    if let Some(x) = *slot {
                        prev = Some((at(k), x));
                        next_known += 1;
                        continue;
                    }
                    let next = known.get(next_known).map(|&(j, x)| (at(j), x)).or(self.anchor);
                    if let (Some((ta, va)), Some((tb, vb))) = (prev, next) {
                        let w = (at(k) - ta) as f64 / (tb - ta) as f64;
                        *slot = Some(va + (vb - va) * w);
                    }
                }
            }
        }
        vals
    }
}

impl Accumulator for GapFillAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let times = values[0].as_primitive::<TimestampNanosecondType>();
        let vals = values[1].as_primitive::<Float64Type>();
        self.push_arrays(times.values(), |i| times.is_valid(i), vals);
        Ok(())
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        let vals = self.filled();
        let DataType::Struct(fields) = self.item.data_type() else {
            return exec_err!("{NAME}: list item is not a struct");
        };
        let DataType::Timestamp(_, tz) = fields[0].data_type() else {
            return exec_err!("{NAME}: time field is not a timestamp");
        };
        let times = TimestampNanosecondArray::from_iter_values(
            (0..self.buckets).map(|k| self.start + k as i64 * self.interval),
        )
        .with_timezone_opt(tz.clone());
        let values = Float64Array::from(vals);
        let items = StructArray::try_new(fields.clone(), vec![Arc::new(times), Arc::new(values)], None)?;
        let list = ListArray::try_new(
            Arc::clone(&self.item),
            OffsetBuffer::from_lengths([items.len()]),
            Arc::new(items),
            None,
        )?;
        Ok(ScalarValue::List(Arc::new(list)))
    }

    fn size(&self) -> usize {
        size_of_val(self) + self.samples.capacity() * 16
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        let all: Vec<(i64, f64)> = self.samples.iter().copied().chain(self.seed).chain(self.anchor).collect();
        let times: ArrayRef = Arc::new(Int64Array::from_iter_values(all.iter().map(|s| s.0)));
        let values: ArrayRef = Arc::new(Float64Array::from_iter_values(all.iter().map(|s| s.1)));
        let list = |a: ArrayRef, t: DataType| {
            let offsets = OffsetBuffer::from_lengths([a.len()]);
            ScalarValue::List(Arc::new(ListArray::new(Arc::new(Field::new_list_field(t, true)), offsets, a, None)))
        };
        Ok(vec![list(times, DataType::Int64), list(values, DataType::Float64)])
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let times = states[0].as_list::<i32>();
        let values = states[1].as_list::<i32>();
        for row in 0..times.len() {
            if times.is_null(row) || values.is_null(row) {
                continue;
            }
            let t = times.value(row);
            let t = t.as_primitive::<Int64Type>();
            let v = values.value(row);
            let v = v.as_primitive::<Float64Type>();
            if t.len() != v.len() {
                return exec_err!("{NAME}: state lists differ in length");
            }
            self.push_arrays(t.values(), |i| t.is_valid(i), v);
        }
        Ok(())
    }
}
