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
//! O(samples in the window) of state, plus the result: about 16 bytes per bucket per group.
//!
//! **Memory.** The state (the samples) is reported through `Accumulator::size` and
//! `GroupsAccumulator::size` like every Lockstep aggregate, but the result is far larger than
//! the state (10 million buckets are 160 MB for any number of samples), so it is reserved in
//! the statement's memory pool before it is built: all the lists of an emission at once under
//! `GROUP BY` (held until the next emission or the end of the aggregate), each evaluation added
//! up in a row accumulator (a window frame evaluates once per row). A result over what the pool
//! has left fails with the memory-limit error naming `gap_fill`, before allocating. The lists
//! are built in place (no per-group lists concatenated afterwards), so nothing else of the
//! result's size is allocated on the way.

use std::cmp::Ordering;
use std::hash::{Hash, Hasher};
use std::mem::{size_of, size_of_val};
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, BooleanBufferBuilder, Float64Array, Int64Array, ListArray, StructArray,
    TimestampNanosecondArray,
};
use arrow::buffer::{NullBuffer, OffsetBuffer};
use arrow::datatypes::{DataType, Field, FieldRef, Fields, Float64Type, Int64Type, TimeUnit, TimestampNanosecondType};
use datafusion::common::{Result, ScalarValue, exec_err, internal_err, plan_err};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryPool, MemoryReservation};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{Accumulator, AggregateUDFImpl, EmitTo, GroupsAccumulator, Signature, Volatility};

use super::constant_args::{
    check_arity, coerce_float, coerce_interval, coerce_time, constant_interval_ns, constant_str, constant_timestamp_ns,
    reject_distinct,
};
use super::counter;

/// Largest grid one group may produce.
pub const MAX_BUCKETS: i64 = 10_000_000;

const NAME: &str = "gap_fill";

/// Bytes of one bucket of the result: its time and value (8 bytes each) and the value's
/// validity bit, rounded up.
const BUCKET_BYTES: usize = 17;

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
#[derive(Debug)]
pub struct GapFill {
    signature: Signature,
    /// The pool its results are reserved in (see the [module docs](self)); `None`: not
    /// accounted.
    pool: Option<Arc<dyn MemoryPool>>,
}

impl GapFill {
    /// Creates the UDAF implementation, its results not accounted in any memory pool.
    pub fn new() -> Self {
        Self { signature: Signature::user_defined(Volatility::Immutable), pool: None }
    }

    /// Creates the UDAF implementation reserving its results in `pool` (the session's).
    pub fn with_pool(pool: Arc<dyn MemoryPool>) -> Self {
        Self { pool: Some(pool), ..Self::new() }
    }
}

impl Default for GapFill {
    fn default() -> Self {
        Self::new()
    }
}

/// Instances are the same when they reserve in the same pool (or none).
impl PartialEq for GapFill {
    fn eq(&self, other: &Self) -> bool {
        let pool = |p: &Option<Arc<dyn MemoryPool>>| p.as_ref().map(|p| Arc::as_ptr(p).cast::<()>());
        self.signature == other.signature && pool(&self.pool) == pool(&other.pool)
    }
}

impl Eq for GapFill {}

impl Hash for GapFill {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.signature.hash(state);
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
        out.push(coerce_interval(NAME, "interval", &arg_types[4])?);
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
        Ok(Box::new(GapFillAccumulator {
            grid: Grid::new(&args)?,
            series: Series::default(),
            memory: ResultMemory::new(self.pool.clone()),
        }))
    }

    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        !args.is_distinct
    }

    fn create_groups_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn GroupsAccumulator>> {
        reject_distinct(&args, NAME)?;
        Ok(Box::new(GapFillGroups {
            grid: Grid::new(&args)?,
            series: Vec::new(),
            sample_bytes: 0,
            memory: ResultMemory::new(self.pool.clone()),
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

/// The grid and options of one call, shared by its groups.
#[derive(Debug)]
struct Grid {
    start: i64,
    stop: i64,
    interval: i64,
    buckets: usize,
    fill: Fill,
    agg: Agg,
    item: FieldRef,
}

impl Grid {
    /// Reads the constant arguments.
    fn new(args: &AccumulatorArgs) -> Result<Self> {
        let start = constant_timestamp_ns(&args.exprs[2], NAME, "start")?;
        let stop = constant_timestamp_ns(&args.exprs[3], NAME, "stop")?;
        let interval = constant_interval_ns(&args.exprs[4], NAME, "interval")?;
        let fill = match constant_str(&args.exprs[5], NAME, "fill")?.as_deref() {
            Some("null") => Fill::Null,
            Some("locf") => Fill::Locf,
            Some("linear") => Fill::Linear,
            other => {
                return plan_err!("{NAME}: fill must be 'null', 'locf' or 'linear', got {}", shown(other));
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
                    return plan_err!(
                        "{NAME}: agg must be one of avg, sum, min, max, first, last, got {}",
                        shown(other)
                    );
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
        Ok(Grid { start, stop, interval, buckets: buckets as usize, fill, agg, item: Arc::clone(item) })
    }

    /// The start of bucket `k` (`k < buckets`, so before `stop`: no overflow).
    fn at(&self, k: usize) -> i64 {
        self.start + k as i64 * self.interval
    }

    /// The bucket of time `t` in `[start, stop)`.
    fn bucket(&self, t: i64) -> usize {
        ((i128::from(t) - i128::from(self.start)) / i128::from(self.interval)) as usize
    }

    /// Bytes of a result of `lists` lists (saturating).
    fn result_bytes(&self, lists: usize) -> usize {
        lists.saturating_mul(self.buckets.saturating_mul(BUCKET_BYTES).saturating_add(4)).saturating_add(4)
    }

    /// One list per series, each the full grid filled from the series' samples.
    fn lists(&self, series: &mut [Series]) -> Result<ListArray> {
        let (lists, buckets) = (series.len(), self.buckets);
        let Some(total) = lists.checked_mul(buckets).filter(|&n| n <= i32::MAX as usize) else {
            return exec_err!(
                "{NAME}: {lists} lists of {buckets} buckets are more items than one list column holds ({}); \
                 fill fewer groups in one statement",
                i32::MAX
            );
        };
        let DataType::Struct(fields) = self.item.data_type() else {
            return exec_err!("{NAME}: list item is not a struct");
        };
        let Some(DataType::Timestamp(_, tz)) = fields.first().map(|f| f.data_type()) else {
            return exec_err!("{NAME}: time field is not a timestamp");
        };
        let mut times = Vec::with_capacity(total);
        let mut values = vec![0.0; total];
        let mut valid = BooleanBufferBuilder::new(total);
        valid.append_n(total, false);
        for (i, s) in series.iter_mut().enumerate() {
            times.extend((0..buckets).map(|k| self.at(k)));
            let base = i * buckets;
            s.fill_into(self, &mut values[base..base + buckets], &mut valid, base);
        }
        let nulls = NullBuffer::from(valid.finish());
        let nulls = (nulls.null_count() > 0).then_some(nulls);
        let times = TimestampNanosecondArray::new(times.into(), None).with_timezone_opt(tz.clone());
        let values = Float64Array::new(values.into(), nulls);
        let items = StructArray::try_new(fields.clone(), vec![Arc::new(times), Arc::new(values)], None)?;
        let offsets = OffsetBuffer::from_lengths(std::iter::repeat_n(buckets, lists));
        Ok(ListArray::try_new(Arc::clone(&self.item), offsets, Arc::new(items), None)?)
    }
}

/// The samples of one group.
#[derive(Debug, Default)]
struct Series {
    /// Samples in `[start, stop)`.
    samples: Vec<(i64, f64)>,
    /// Latest sample before `start`.
    seed: Option<(i64, f64)>,
    /// Earliest sample at or after `stop`.
    anchor: Option<(i64, f64)>,
}

impl Series {
    fn push(&mut self, grid: &Grid, s: (i64, f64)) {
        if s.0 < grid.start {
            if self.seed.is_none_or(|x| order(&s, &x) == Ordering::Greater) {
                self.seed = Some(s);
            }
        } else if s.0 >= grid.stop {
            if self.anchor.is_none_or(|x| order(&s, &x) == Ordering::Less) {
                self.anchor = Some(s);
            }
        } else {
            self.samples.push(s);
        }
    }

    fn push_arrays(&mut self, grid: &Grid, times: &[i64], time_valid: impl Fn(usize) -> bool, values: &Float64Array) {
        for (i, &t) in times.iter().enumerate() {
            if time_valid(i) && values.is_valid(i) {
                self.push(grid, (t, values.value(i)));
            }
        }
    }

    /// Samples, seed and anchor: the partial state.
    fn points(&self) -> impl Iterator<Item = (i64, f64)> + '_ {
        self.samples.iter().copied().chain(self.seed).chain(self.anchor)
    }

    fn len(&self) -> usize {
        self.samples.len() + usize::from(self.seed.is_some()) + usize::from(self.anchor.is_some())
    }

    /// Writes the filled grid into `vals` (one slot per bucket, zeroed) and sets the bits
    /// `base..base + buckets` of `valid` (cleared) for the buckets that have a value.
    fn fill_into(&mut self, grid: &Grid, vals: &mut [f64], valid: &mut BooleanBufferBuilder, base: usize) {
        // Each bucket's value: its samples are a run of the sorted samples.
        self.samples.sort_unstable_by(order);
        let mut rest = &self.samples[..];
        while let Some(&(t, first)) = rest.first() {
            let k = grid.bucket(t);
            let len = rest.iter().position(|s| grid.bucket(s.0) != k).unwrap_or(rest.len());
            let (run, tail) = rest.split_at(len);
            rest = tail;
            let mut x = first;
            for &(_, v) in &run[1..] {
                x = match grid.agg {
                    Agg::Avg | Agg::Sum => x + v,
                    Agg::Min => std::cmp::min_by(x, v, |a, b| nan_greatest(*a, *b)),
                    Agg::Max => std::cmp::max_by(x, v, |a, b| nan_greatest(*a, *b)),
                    Agg::First => x,
                    Agg::Last => v,
                };
            }
            if grid.agg == Agg::Avg {
                x /= run.len() as f64;
            }
            if let Some(slot) = vals.get_mut(k) {
                *slot = x;
                valid.set_bit(base + k, true);
            }
        }
        match grid.fill {
            Fill::Null => {}
            Fill::Locf => {
                let mut prev = self.seed.map(|s| s.1);
                for (k, slot) in vals.iter_mut().enumerate() {
                    if valid.get_bit(base + k) {
                        prev = Some(*slot);
                    } else if let Some(p) = prev {
                        *slot = p;
                        valid.set_bit(base + k, true);
                    }
                }
            }
            Fill::Linear => {
                // A run of empty buckets is interpolated when the next non-empty bucket (or,
                // after the last, the anchor) is reached.
                let mut prev: Option<(i64, f64)> = self.seed;
                let mut gap_from: Option<usize> = None;
                for k in 0..=vals.len() {
                    let next = if k == vals.len() {
                        self.anchor
                    } else if valid.get_bit(base + k) {
                        Some((grid.at(k), vals[k]))
                    } else {
                        gap_from.get_or_insert(k);
                        continue;
                    };
                    if let (Some(from), Some((ta, va)), Some((tb, vb))) = (gap_from.take(), prev, next) {
                        for (m, slot) in vals.iter_mut().enumerate().take(k).skip(from) {
                            let w = (i128::from(grid.at(m)) - i128::from(ta)) as f64
                                / (i128::from(tb) - i128::from(ta)) as f64;
                            *slot = va + (vb - va) * w;
                            valid.set_bit(base + m, true);
                        }
                    }
                    prev = next;
                }
            }
        }
    }
}

/// The reservation of `gap_fill`'s results in the session's pool.
#[derive(Debug)]
struct ResultMemory {
    pool: Option<Arc<dyn MemoryPool>>,
    reservation: Option<MemoryReservation>,
}

impl ResultMemory {
    fn new(pool: Option<Arc<dyn MemoryPool>>) -> Self {
        ResultMemory { pool, reservation: None }
    }

    /// Reserves a result of `lists` lists of `grid`, in addition to what is held when `add`,
    /// else instead of it; fails with the pool's memory-limit error when it does not fit.
    fn reserve(&mut self, grid: &Grid, lists: usize, add: bool) -> Result<()> {
        let Some(pool) = &self.pool else { return Ok(()) };
        if !add {
            self.reservation = None;
        }
        let reservation = self.reservation.get_or_insert_with(|| {
            let what = match lists {
                1 => format!("{NAME} (a result list of {} buckets)", grid.buckets),
                n => format!("{NAME} (a result of {n} lists of {} buckets)", grid.buckets),
            };
            MemoryConsumer::new(what).register(pool)
        });
        reservation.try_grow(grid.result_bytes(lists))
    }
}

/// `gap_fill` without `GROUP BY`, and in window frames.
#[derive(Debug)]
struct GapFillAccumulator {
    grid: Grid,
    series: Series,
    memory: ResultMemory,
}

impl Accumulator for GapFillAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let (times, vals) = input_arrays(values)?;
        self.series.push_arrays(&self.grid, times.values(), |i| times.is_valid(i), vals);
        Ok(())
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        // Added up: a window frame evaluates once per row, and keeps every result.
        self.memory.reserve(&self.grid, 1, true)?;
        let list = self.grid.lists(std::slice::from_mut(&mut self.series))?;
        Ok(ScalarValue::List(Arc::new(list)))
    }

    fn size(&self) -> usize {
        size_of_val(self) + self.series.samples.capacity() * 16
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        let all: Vec<(i64, f64)> = self.series.points().collect();
        let times: ArrayRef = Arc::new(Int64Array::from_iter_values(all.iter().map(|s| s.0)));
        let values: ArrayRef = Arc::new(Float64Array::from_iter_values(all.iter().map(|s| s.1)));
        let list = |a: ArrayRef, t: DataType| {
            let offsets = OffsetBuffer::from_lengths([a.len()]);
            ScalarValue::List(Arc::new(ListArray::new(Arc::new(Field::new_list_field(t, true)), offsets, a, None)))
        };
        Ok(vec![list(times, DataType::Int64), list(values, DataType::Float64)])
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        for_each_state(states, |_, t, v| {
            self.series.push_arrays(&self.grid, t.values(), |i| t.is_valid(i), v);
            Ok(())
        })
    }
}

/// The input columns: times and values.
fn input_arrays(values: &[ArrayRef]) -> Result<(&TimestampNanosecondArray, &Float64Array)> {
    let times = values.first().and_then(|a| a.as_primitive_opt::<TimestampNanosecondType>());
    let vals = values.get(1).and_then(|a| a.as_primitive_opt::<Float64Type>());
    match (times, vals) {
        (Some(t), Some(v)) => Ok((t, v)),
        _ => internal_err!("{NAME}: expected a timestamp and a float column"),
    }
}

/// Calls `f(row, times, values)` for each non-NULL row of a partial state (a list of times
/// and a list of values per row).
fn for_each_state(
    states: &[ArrayRef],
    mut f: impl FnMut(usize, &Int64Array, &Float64Array) -> Result<()>,
) -> Result<()> {
    let times = states.first().and_then(|a| a.as_list_opt::<i32>());
    let values = states.get(1).and_then(|a| a.as_list_opt::<i32>());
    let (Some(times), Some(values)) = (times, values) else {
        return internal_err!("{NAME}: state is not two lists");
    };
    for row in 0..times.len().min(values.len()) {
        if times.is_null(row) || values.is_null(row) {
            continue;
        }
        let (t, v) = (times.value(row), values.value(row));
        let (Some(t), Some(v)) = (t.as_primitive_opt::<Int64Type>(), v.as_primitive_opt::<Float64Type>()) else {
            return internal_err!("{NAME}: state lists are not of times and values");
        };
        if t.len() != v.len() {
            return exec_err!("{NAME}: state lists differ in length");
        }
        f(row, t, v)?;
    }
    Ok(())
}

/// `gap_fill` under `GROUP BY`: every group's samples, evaluated into one list column per
/// emission.
#[derive(Debug)]
struct GapFillGroups {
    grid: Grid,
    series: Vec<Series>,
    /// Capacity of the groups' sample vectors, in bytes.
    sample_bytes: usize,
    memory: ResultMemory,
}

impl GapFillGroups {
    fn grow(&mut self, total_num_groups: usize) {
        if total_num_groups > self.series.len() {
            self.series.resize_with(total_num_groups, Series::default);
        }
    }

    /// Takes the groups of `emit_to` out, their samples no longer counted.
    fn take(&mut self, emit_to: EmitTo) -> Vec<Series> {
        let taken = emit_to.take_needed(&mut self.series);
        let bytes: usize = taken.iter().map(|s| s.samples.capacity() * 16).sum();
        self.sample_bytes = self.sample_bytes.saturating_sub(bytes);
        taken
    }

    /// Adds samples to group `g` with `add`, counting what its sample vector grows by.
    fn add_to(&mut self, g: usize, add: impl FnOnce(&mut Series, &Grid)) -> Result<()> {
        let Some(series) = self.series.get_mut(g) else {
            return internal_err!("{NAME}: group {g} out of range");
        };
        let before = series.samples.capacity();
        add(series, &self.grid);
        self.sample_bytes += series.samples.capacity().saturating_sub(before) * 16;
        Ok(())
    }
}

impl GroupsAccumulator for GapFillGroups {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        self.grow(total_num_groups);
        let (times, vals) = input_arrays(values)?;
        for (row, &g) in group_indices.iter().enumerate() {
            let selected = opt_filter.is_none_or(|f| f.is_valid(row) && f.value(row));
            if selected && times.is_valid(row) && vals.is_valid(row) {
                let sample = (times.value(row), vals.value(row));
                self.add_to(g, |s, grid| s.push(grid, sample))?;
            }
        }
        Ok(())
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        let lists = match emit_to {
            EmitTo::All => self.series.len(),
            EmitTo::First(n) => n.min(self.series.len()),
        };
        // Instead of the previous emission's: that one has left this operator (one that keeps
        // it, like a sort, reserves it itself).
        self.memory.reserve(&self.grid, lists, false)?;
        let mut taken = self.take(emit_to);
        Ok(Arc::new(self.grid.lists(&mut taken)?))
    }

    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        let taken = self.take(emit_to);
        let total: usize = taken.iter().map(Series::len).sum();
        if total > i32::MAX as usize {
            return exec_err!("{NAME}: {total} samples are more than one partial state holds ({})", i32::MAX);
        }
        let offsets = OffsetBuffer::from_lengths(taken.iter().map(Series::len));
        let times = Int64Array::from_iter_values(taken.iter().flat_map(|s| s.points().map(|p| p.0)));
        let values = Float64Array::from_iter_values(taken.iter().flat_map(|s| s.points().map(|p| p.1)));
        let list = |a: ArrayRef, t: DataType| -> ArrayRef {
            Arc::new(ListArray::new(Arc::new(Field::new_list_field(t, true)), offsets.clone(), a, None))
        };
        Ok(vec![list(Arc::new(times), DataType::Int64), list(Arc::new(values), DataType::Float64)])
    }

    fn merge_batch(&mut self, values: &[ArrayRef], group_indices: &[usize], total_num_groups: usize) -> Result<()> {
        self.grow(total_num_groups);
        for_each_state(values, |row, t, v| {
            let Some(&g) = group_indices.get(row) else {
                return internal_err!("{NAME}: state row {row} has no group");
            };
            self.add_to(g, |s, grid| s.push_arrays(grid, t.values(), |i| t.is_valid(i), v))
        })
    }

    /// Each input row becomes a one-point state (no points when filtered out or NULL).
    fn convert_to_state(&self, values: &[ArrayRef], opt_filter: Option<&BooleanArray>) -> Result<Vec<ArrayRef>> {
        let (times, vals) = input_arrays(values)?;
        let kept: Vec<bool> = (0..times.len())
            .map(|row| {
                opt_filter.is_none_or(|f| f.is_valid(row) && f.value(row)) && times.is_valid(row) && vals.is_valid(row)
            })
            .collect();
        let offsets = OffsetBuffer::from_lengths(kept.iter().map(|&k| usize::from(k)));
        let rows = || kept.iter().enumerate().filter(|(_, k)| **k).map(|(i, _)| i);
        let list = |a: ArrayRef, t: DataType| -> ArrayRef {
            Arc::new(ListArray::new(Arc::new(Field::new_list_field(t, true)), offsets.clone(), a, None))
        };
        Ok(vec![
            list(Arc::new(Int64Array::from_iter_values(rows().map(|i| times.value(i)))), DataType::Int64),
            list(Arc::new(Float64Array::from_iter_values(rows().map(|i| vals.value(i)))), DataType::Float64),
        ])
    }

    fn size(&self) -> usize {
        size_of_val(self) + self.series.capacity() * size_of::<Series>() + self.sample_bytes
    }
}

/// A constant string argument as an error shows it: quoted, or NULL.
fn shown(value: Option<&str>) -> String {
    value.map_or_else(|| "NULL".to_string(), |v| format!("'{v}'"))
}

#[cfg(test)]
mod tests;
