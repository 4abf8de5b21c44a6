//! Counter arithmetic of the counter family (`functions/counters.rs`): samples ordered by
//! time, resets and wrap-around of narrow hardware counters, and the accumulator they share.
//!
//! Samples are kept (not summarised) because partial states merge in any order and a
//! sample arriving later may belong between two earlier ones; they are sorted by
//! `(time, value)` when evaluated, which is linear when they already arrive in order. When
//! samples arrive in time order the increase is maintained incrementally, so cumulative
//! window frames cost O(1) per row; sliding frames retract from the front and recompute.
//!
//! Step between consecutive samples `prev → cur`:
//! - `cur >= prev`: `cur − prev`;
//! - a drop with `wrap_bits = b` (16, 32 or 64) where `prev < 2^b` and the wrapped step
//!   `2^b − prev + cur` is less than `2^(b−1)`: a wrap, that wrapped step;
//! - any other drop: a reset (Prometheus semantics): the counter restarted from zero, so the
//!   step is `max(cur, 0)`.
//!
//! Every step is non-negative, so the increase and the rate never are negative. NULL, NaN and
//! ±inf values and NULL times are ignored.

use std::cmp::Ordering;
use std::collections::VecDeque;
use std::mem::size_of_val;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Float64Array, Int64Array, ListArray};
use arrow::buffer::OffsetBuffer;
use arrow::datatypes::{DataType, Field, FieldRef, Float64Type, Int64Type, TimestampNanosecondType};
use datafusion::common::{Result, ScalarValue, internal_err, plan_err};
use datafusion::logical_expr::Accumulator;
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::format_state_name;

use lockstep_engine::metrics::{MetricCatalog, MetricInfo, MetricKind, SeriesPart};

use super::constant_args::{check_arity, coerce_float, coerce_int, coerce_time, constant_i64, reject_distinct};

/// What the counter accumulator returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum CounterOutput {
    /// Total increase between the first and the last sample.
    Increase,
    /// Increase per second between the first and the last sample.
    Rate,
}

/// The rule that turns two consecutive readings of one counter into a non-negative step: plain
/// resets (with an optional wrap), or the metric catalog's rule of a counter family (its width
/// with wrap or saturation, and its unit scale). The counter functions and the diagnosis
/// (`crate::diagnose`) both read counters through it, so they agree on every wrap, reset and
/// saturation.
#[derive(Debug, Clone)]
pub(crate) enum CounterRule {
    /// Resets (Prometheus semantics), and wraps at this modulus (`2^bits`) when given.
    Reset(Option<f64>),
    /// The catalog's rule of a counter family.
    Catalog(MetricInfo),
}

impl CounterRule {
    /// The catalog's rule for a family `info` that is a counter, plain resets otherwise.
    pub(crate) fn of(info: Option<&MetricInfo>) -> CounterRule {
        match info {
            Some(i) if i.kind == MetricKind::Counter => CounterRule::Catalog(i.clone()),
            _ => CounterRule::Reset(None),
        }
    }

    /// The rule of `metric` in `catalog`: its family's when it is a counter family itself (not
    /// a histogram companion), plain resets otherwise.
    pub(crate) fn for_metric(catalog: &MetricCatalog, metric: &str) -> CounterRule {
        CounterRule::of(catalog.classify_metric(metric).filter(|c| c.part == SeriesPart::Value).map(|c| c.info))
    }

    /// The step from `prev` to `cur`; NaN when the catalog says it is unknown (a saturated
    /// counter that stayed at its maximum).
    #[inline]
    pub(crate) fn step(&self, prev: f64, cur: f64) -> f64 {
        match self {
            CounterRule::Reset(wrap) => step(prev, cur, *wrap),
            CounterRule::Catalog(info) => info.increase(prev, cur),
        }
    }

    /// The per-second rate between two finite readings `(time ns, value)`: `None` when the
    /// second is not later or the step is unknown (what `rate` returns over those two samples).
    #[inline]
    pub(crate) fn rate(&self, (t0, v0): (i64, f64), (t1, v1): (i64, f64)) -> Option<f64> {
        if t1 <= t0 {
            return None;
        }
        per_second(self.step(v0, v1), i128::from(t1) - i128::from(t0))
    }
}

/// `increase` per second over `span_ns` (an i128: the span between two i64 times may not fit
/// an i64); `None` for an empty span or an unknown increase.
#[inline]
pub(crate) fn per_second(increase: f64, span_ns: i128) -> Option<f64> {
    (span_ns > 0 && !increase.is_nan()).then(|| increase / (span_ns as f64 / lockstep_engine::model::SEC as f64))
}

/// How consecutive samples become steps.
#[derive(Debug, Clone)]
pub(crate) enum Steps {
    /// `increase`/`rate`: resets, and wraps at `2^bits` when given.
    Plain(CounterRule),
    /// `normalized_increase`/`normalized_rate`: the metric catalog's rules for the group's
    /// metric (width, wrap or saturation, unit scale); unknown families fall back to resets.
    Catalog {
        /// The catalog the metric is looked up in.
        catalog: Arc<MetricCatalog>,
        /// The group's metric, once a sample was seen.
        metric: Option<String>,
        /// Its rule.
        rule: CounterRule,
    },
}

impl Steps {
    /// The step from `prev` to `cur`; NaN when the catalog says it is unknown (a saturated
    /// counter that stayed at its maximum).
    #[inline]
    fn step(&self, prev: f64, cur: f64) -> f64 {
        match self {
            Steps::Plain(rule) | Steps::Catalog { rule, .. } => rule.step(prev, cur),
        }
    }

    /// Records the metric of a sample; a group must hold one metric.
    fn set_metric(&mut self, function: &str, m: &str) -> Result<()> {
        let Steps::Catalog { catalog, metric, rule } = self else { return Ok(()) };
        match metric {
            Some(known) if known == m => Ok(()),
            Some(known) => {
                plan_err!("{function}: one group holds two metrics ({known} and {m}); group by series_id or metric")
            }
            None => {
                *rule = CounterRule::for_metric(catalog, m);
                *metric = Some(m.to_string());
                Ok(())
            }
        }
    }
}

/// Argument coercion shared by `increase` and `rate`: `(time, value [, wrap_bits])`.
pub(crate) fn coerce_args(function: &str, arg_types: &[DataType]) -> Result<Vec<DataType>> {
    check_arity(function, arg_types, 2, 3, "2 or 3 arguments (time, value [, wrap_bits])")?;
    let mut out = vec![coerce_time(function, "time", &arg_types[0])?, coerce_float(function, "value", &arg_types[1])?];
    if let Some(t) = arg_types.get(2) {
        out.push(coerce_int(function, "wrap_bits", t)?);
    }
    Ok(out)
}

/// Argument coercion of the normalised variants: `(time, value, metric)`.
pub(crate) fn coerce_normalized_args(function: &str, arg_types: &[DataType]) -> Result<Vec<DataType>> {
    check_arity(function, arg_types, 3, 3, "3 arguments (time, value, metric)")?;
    let metric = match &arg_types[2] {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Null => DataType::Utf8,
        DataType::Dictionary(_, v) if matches!(v.as_ref(), DataType::Utf8 | DataType::LargeUtf8) => DataType::Utf8,
        other => return plan_err!("{function}: metric must be a string, got {other}"),
    };
    Ok(vec![coerce_time(function, "time", &arg_types[0])?, coerce_float(function, "value", &arg_types[1])?, metric])
}

/// State fields shared by `increase` and `rate`: the samples as two lists.
pub(crate) fn state_fields(args: &StateFieldsArgs) -> Vec<FieldRef> {
    let list = |t: DataType| DataType::List(Arc::new(Field::new_list_field(t, true)));
    vec![
        Arc::new(Field::new(format_state_name(args.name, "times"), list(DataType::Int64), true)),
        Arc::new(Field::new(format_state_name(args.name, "values"), list(DataType::Float64), true)),
    ]
}

/// Creates the accumulator, reading the optional constant `wrap_bits`.
pub(crate) fn accumulator(
    function: &'static str,
    output: CounterOutput,
    args: &AccumulatorArgs,
) -> Result<Box<dyn Accumulator>> {
    reject_distinct(args, function)?;
    let wrap = match args.exprs.get(2) {
        None => None,
        Some(expr) => match constant_i64(expr, function, "wrap_bits")? {
            None => None,
            Some(bits @ (16 | 32 | 64)) => Some(2f64.powi(bits as i32)),
            Some(bits) => {
                return plan_err!("{function}: wrap_bits must be 16, 32 or 64, got {bits}");
            }
        },
    };
    Ok(Box::new(CounterAccumulator::new(function, output, Steps::Plain(CounterRule::Reset(wrap)))))
}

/// Creates the accumulator of a normalised variant.
pub(crate) fn normalized_accumulator(
    function: &'static str,
    output: CounterOutput,
    args: &AccumulatorArgs,
    catalog: Arc<MetricCatalog>,
) -> Result<Box<dyn Accumulator>> {
    reject_distinct(args, function)?;
    Ok(Box::new(CounterAccumulator::new(
        function,
        output,
        Steps::Catalog { catalog, metric: None, rule: CounterRule::Reset(None) },
    )))
}

/// State fields of the normalised variants: the samples and the group's metric.
pub(crate) fn normalized_state_fields(args: &StateFieldsArgs) -> Vec<FieldRef> {
    let mut fields = state_fields(args);
    fields.push(Arc::new(Field::new(format_state_name(args.name, "metric"), DataType::Utf8, true)));
    fields
}

impl CounterAccumulator {
    fn new(function: &'static str, output: CounterOutput, steps: Steps) -> Self {
        CounterAccumulator {
            function,
            output,
            steps,
            samples: VecDeque::new(),
            sorted: true,
            cached: Some(0.0),
            scratch: Vec::new(),
        }
    }
}

/// Non-negative step from `prev` to `cur` (see the module documentation).
#[inline]
pub(crate) fn step(prev: f64, cur: f64, wrap: Option<f64>) -> f64 {
    if cur >= prev {
        return cur - prev;
    }
    if let Some(m) = wrap {
        let wrapped = m - prev + cur;
        if prev < m && cur >= 0.0 && wrapped < m / 2.0 {
            return wrapped;
        }
    }
    cur.max(0.0)
}

fn order(a: &(i64, f64), b: &(i64, f64)) -> Ordering {
    a.0.cmp(&b.0).then(a.1.total_cmp(&b.1))
}

/// Increase over samples already in order (NaN if a step is unknown).
fn increase_of(samples: impl Iterator<Item = (i64, f64)>, steps: &Steps) -> f64 {
    let mut total = 0.0;
    let mut prev: Option<f64> = None;
    for (_, v) in samples {
        if let Some(p) = prev {
            total += steps.step(p, v);
        }
        prev = Some(v);
    }
    total
}

/// Samples of one group or window frame.
#[derive(Debug)]
struct CounterAccumulator {
    function: &'static str,
    output: CounterOutput,
    steps: Steps,
    /// Samples in arrival order.
    samples: VecDeque<(i64, f64)>,
    /// Whether arrival order is `(time, value)` order.
    sorted: bool,
    /// The increase over `samples`, when known without recomputation.
    cached: Option<f64>,
    scratch: Vec<(i64, f64)>,
}

impl CounterAccumulator {
    fn push(&mut self, sample: (i64, f64)) {
        if let Some(last) = self.samples.back() {
            if order(last, &sample) == Ordering::Greater {
                self.sorted = false;
                self.cached = None;
            } else if let Some(c) = self.cached.as_mut() {
                *c += self.steps.step(last.1, sample.1);
            }
        }
        self.samples.push_back(sample);
    }

    fn push_arrays(&mut self, times: &[i64], time_valid: impl Fn(usize) -> bool, values: &Float64Array) {
        for (i, &t) in times.iter().enumerate() {
            if time_valid(i) && values.is_valid(i) && values.value(i).is_finite() {
                self.push((t, values.value(i)));
            }
        }
    }

    fn increase(&mut self) -> f64 {
        if let Some(c) = self.cached {
            return c;
        }
        if self.sorted
            || self.samples.iter().zip(self.samples.iter().skip(1)).all(|(a, b)| order(a, b) != Ordering::Greater)
        {
            self.sorted = true;
            let inc = increase_of(self.samples.iter().copied(), &self.steps);
            self.cached = Some(inc);
            return inc;
        }
        self.scratch.clear();
        self.scratch.extend(self.samples.iter().copied());
        self.scratch.sort_unstable_by(order);
        increase_of(self.scratch.iter().copied(), &self.steps)
    }

    /// Records the metric of every counted row (normalised variants).
    fn note_metrics(&mut self, metrics: &ArrayRef, counted: impl Fn(usize) -> bool) -> Result<()> {
        let metrics = metrics.as_string::<i32>();
        let mut last: Option<&str> = None;
        for i in 0..metrics.len() {
            if metrics.is_null(i) || !counted(i) {
                continue;
            }
            let m = metrics.value(i);
            if last != Some(m) {
                self.steps.set_metric(self.function, m)?;
                last = Some(m);
            }
        }
        Ok(())
    }

    fn span_ns(&self) -> Option<i128> {
        let min = self.samples.iter().map(|s| s.0).min()?;
        let max = self.samples.iter().map(|s| s.0).max()?;
        Some(i128::from(max) - i128::from(min))
    }
}

impl Accumulator for CounterAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let times = values[0].as_primitive::<TimestampNanosecondType>();
        let vals = values[1].as_primitive::<Float64Type>();
        if matches!(self.steps, Steps::Catalog { .. }) {
            self.note_metrics(&values[2], |i| times.is_valid(i) && vals.is_valid(i) && vals.value(i).is_finite())?;
        }
        self.push_arrays(times.values(), |i| times.is_valid(i), vals);
        Ok(())
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let times = values[0].as_primitive::<TimestampNanosecondType>();
        let vals = values[1].as_primitive::<Float64Type>();
        for i in 0..times.len() {
            if times.is_null(i) || vals.is_null(i) || !vals.value(i).is_finite() {
                continue;
            }
            let s = (times.value(i), vals.value(i));
            let same = |x: &(i64, f64)| x.0 == s.0 && x.1.to_bits() == s.1.to_bits();
            if self.samples.front().is_some_and(same) {
                self.samples.pop_front();
            } else if let Some(pos) = self.samples.iter().position(same) {
                self.samples.remove(pos);
            } else {
                return internal_err!("{}: retracted sample is not in the window", self.function);
            }
            self.cached = None;
        }
        if self.samples.is_empty() {
            self.sorted = true;
            self.cached = Some(0.0);
        }
        Ok(())
    }

    fn supports_retract_batch(&self) -> bool {
        true
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        if self.samples.len() < 2 {
            return Ok(ScalarValue::Float64(None));
        }
        let inc = self.increase();
        if inc.is_nan() {
            return Ok(ScalarValue::Float64(None));
        }
        Ok(ScalarValue::Float64(match self.output {
            CounterOutput::Increase => Some(inc),
            CounterOutput::Rate => self.span_ns().and_then(|span| per_second(inc, span)),
        }))
    }

    fn size(&self) -> usize {
        size_of_val(self) + (self.samples.capacity() + self.scratch.capacity()) * 16
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        let times = Int64Array::from_iter_values(self.samples.iter().map(|s| s.0));
        let values = Float64Array::from_iter_values(self.samples.iter().map(|s| s.1));
        let list = |a: ArrayRef, t: DataType| {
            let offsets = OffsetBuffer::from_lengths([a.len()]);
            ScalarValue::List(Arc::new(ListArray::new(Arc::new(Field::new_list_field(t, true)), offsets, a, None)))
        };
        let mut state = vec![list(Arc::new(times), DataType::Int64), list(Arc::new(values), DataType::Float64)];
        if let Steps::Catalog { metric, .. } = &self.steps {
            state.push(ScalarValue::Utf8(metric.clone()));
        }
        Ok(state)
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let times = states[0].as_list::<i32>();
        let values = states[1].as_list::<i32>();
        if matches!(self.steps, Steps::Catalog { .. })
            && let Some(metrics) = states.get(2)
        {
            self.note_metrics(metrics, |_| true)?;
        }
        for row in 0..times.len() {
            if times.is_null(row) || values.is_null(row) {
                continue;
            }
            let t = times.value(row);
            let t = t.as_primitive::<Int64Type>();
            let v = values.value(row);
            let v = v.as_primitive::<Float64Type>();
            if t.len() != v.len() {
                return internal_err!("{}: state lists differ in length", self.function);
            }
            self.push_arrays(t.values(), |i| t.is_valid(i), v);
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn run(samples: &[(i64, f64)], wrap: Option<f64>, output: CounterOutput) -> Option<f64> {
        let mut acc = CounterAccumulator::new("t", output, Steps::Plain(CounterRule::Reset(wrap)));
        samples.iter().for_each(|s| acc.push(*s));
        match acc.evaluate().unwrap() {
            ScalarValue::Float64(v) => v,
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn steps_handle_reset_and_wrap() {
        assert_eq!(step(5.0, 8.0, None), 3.0);
        assert_eq!(step(100.0, 7.0, None), 7.0);
        assert_eq!(step(65_000.0, 100.0, Some(65_536.0)), 636.0);
        assert_eq!(step(1_000.0, 10.0, Some(65_536.0)), 10.0);
        assert_eq!(step(5.0, -3.0, None), 0.0);
    }

    #[test]
    fn order_of_arrival_does_not_matter() {
        let sorted = [(0, 1.0), (1, 5.0), (2, 2.0), (3, 4.0)];
        let shuffled = [(2, 2.0), (0, 1.0), (3, 4.0), (1, 5.0)];
        // 1 -> 5 (+4), 5 -> 2 reset (+2), 2 -> 4 (+2)
        assert_eq!(run(&sorted, None, CounterOutput::Increase), Some(8.0));
        assert_eq!(run(&shuffled, None, CounterOutput::Increase), Some(8.0));
        assert_eq!(run(&shuffled, None, CounterOutput::Rate), Some(8.0 / 3e-9));
    }

    #[test]
    fn fewer_than_two_samples_or_zero_span_is_null() {
        assert_eq!(run(&[(0, 1.0)], None, CounterOutput::Increase), None);
        assert_eq!(run(&[(5, 1.0), (5, 3.0)], None, CounterOutput::Rate), None);
        assert_eq!(run(&[(5, 1.0), (5, 3.0)], None, CounterOutput::Increase), Some(2.0));
    }

    /// A span wider than an i64 of ns (first and last sample about 584 years apart) is a rate,
    /// not a wrapped negative span (NULL in release builds) or an overflow panic.
    #[test]
    fn a_span_past_i64_is_a_rate() {
        let rate = run(&[(-i64::MAX, 0.0), (i64::MAX, 1e300)], None, CounterOutput::Rate).unwrap();
        let want = 1e300 / (2.0 * i64::MAX as f64 / 1e9);
        assert!((rate - want).abs() <= 1e-12 * want, "{rate} vs {want}");
        assert!(CounterRule::Reset(None).rate((-i64::MAX, 0.0), (i64::MAX, 1.0)).is_some_and(|r| r > 0.0));
    }
}
