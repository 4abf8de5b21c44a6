//! Memory accounting for the built-in aggregates whose result grows with their input:
//! `array_agg` and `string_agg`.
//!
//! DataFusion counts an aggregate's state through its accumulator's `size()`, and nothing of a
//! window's results. Two gaps let one read-only statement take many times its memory limit
//! (QA pass 23b: 9 GB of resident memory under a limit of 256 MiB, and a server aborted under
//! a cgroup cap):
//!
//! - `array_agg` keeps its input arrays and sizes them as if they were compact, which for the
//!   view types (`Utf8View`, what DataFusion's string functions return) counts the 16-byte
//!   views and none of the text they point to: `array_agg(concat(...))` of 1,000-byte strings
//!   was counted at 1/60 of its memory. The wrapper adds the text its input views point to.
//! - As a window (`array_agg(v) OVER (ORDER BY t ROWS UNBOUNDED PRECEDING)`), the aggregate is
//!   evaluated once per row and each result holds every value of its frame: n rows make n²/2
//!   elements, which the window operator collects per batch of rows, outside any reservation.
//!   [`WindowedAggregates`] marks the aggregates used as window functions, whose results the
//!   wrapper then reserves from the statement's pool until the window moves to a new batch of
//!   input (seen as input from another allocation), so the results of one batch count together.
//!   Over a frame to the partition's end, which DataFusion computes a whole partition at a time,
//!   holding every partition's results, the accumulators (one per partition) hold their results
//!   together, and a frame of the whole partition, whose one result is repeated on every row,
//!   counts it that many times (QA pass 24: `array_agg(value) OVER (PARTITION BY series_id)`
//!   took 5 GB under 256 MiB).
//!
//! A statement that goes past its limit then fails with the memory error every other operator
//! gives, naming the aggregate; within the limit nothing changes.

use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use arrow::array::{Array, ArrayData, ArrayRef, AsArray, BooleanArray, ListArray};
use arrow::datatypes::{DataType, FieldRef};
use datafusion::common::ScalarValue;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::FunctionRegistry;
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryLimit, MemoryPool, MemoryReservation};
use datafusion::logical_expr::expr::{AggregateFunction, AggregateFunctionParams, WindowFunctionParams};
use datafusion::logical_expr::function::{AccumulatorArgs, AggregateFunctionSimplification, StateFieldsArgs};
use datafusion::logical_expr::utils::AggregateOrderSensitivity;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Documentation, EmitTo, Expr, GroupsAccumulator, Operator,
    ReversedUDAF, SetMonotonicity, Signature, StatisticsArgs,
};
use datafusion::logical_expr::{LogicalPlan, WindowFunctionDefinition};
use datafusion::prelude::SessionContext;

/// The aggregates wrapped, and whether each keeps its input arrays (`array_agg` does; `string_agg`
/// copies the text into its own string, which its `size()` counts).
const WRAPPED: [(&str, bool); 2] = [("array_agg", true), ("string_agg", false)];

/// How many times a window's result is counted: each row's result, then the array DataFusion
/// gathers a batch of them into. (An aggregate's result is not reserved: it is its state,
/// which `size()` counts, handed on.)
const RESULT_COPIES: usize = 2;

/// Wraps the aggregates above on `ctx` with accounting in its memory pool (nothing when the pool
/// is unbounded, or for an aggregate `ctx` does not have).
pub(crate) fn register(ctx: &SessionContext) {
    let pool = ctx.runtime_env().memory_pool.clone();
    if matches!(pool.memory_limit(), MemoryLimit::Infinite) {
        return;
    }
    for (name, keeps_input) in WRAPPED {
        let Ok(udaf) = ctx.udaf(name) else { continue };
        let wrapped =
            Accounted { inner: udaf.inner().clone(), keeps_input, pool: pool.clone(), window: Use::Aggregate };
        ctx.register_udaf(AggregateUDF::new_from_impl(wrapped));
    }
}

/// The logical rule that marks `array_agg` and `string_agg` used as window functions, whose
/// results are then reserved ([`Use::Window`]); over a frame to the partition's end their
/// accumulators hold their results together and count a result repeated over a whole partition
/// ([`Use::WholePartitions`]; QA pass 24: `array_agg(value) OVER (PARTITION BY series_id)` took
/// 5 GB under 256 MiB).
#[derive(Debug, Default)]
pub(crate) struct WindowedAggregates;

impl datafusion::optimizer::OptimizerRule for WindowedAggregates {
    fn name(&self) -> &str {
        "lockstep_windowed_aggregates"
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        _config: &dyn datafusion::optimizer::OptimizerConfig,
    ) -> DfResult<Transformed<LogicalPlan>> {
        plan.transform_up_with_subqueries(|node| {
            if !matches!(node, LogicalPlan::Window(_)) {
                return Ok(Transformed::no(node));
            }
            node.map_expressions(|e| {
                e.transform_up(|e| {
                    let Expr::WindowFunction(w) = &e else { return Ok(Transformed::no(e)) };
                    let WindowFunctionDefinition::AggregateUDF(udf) = &w.fun else { return Ok(Transformed::no(e)) };
                    let inner: &dyn std::any::Any = udf.inner().as_ref();
                    let Some(accounted) =
                        inner.downcast_ref::<Accounted>().filter(|a| matches!(a.window, Use::Aggregate))
                    else {
                        return Ok(Transformed::no(e));
                    };
                    // A frame to the partition's end: DataFusion computes whole partitions (and
                    // holds them all) where other frames stream, each batch's results let go.
                    let window = if w.params.window_frame.end_bound.is_unbounded() {
                        Use::WholePartitions(Arc::default())
                    } else {
                        Use::Window
                    };
                    let windowed = Accounted {
                        inner: accounted.inner.clone(),
                        keeps_input: accounted.keeps_input,
                        pool: accounted.pool.clone(),
                        window,
                    };
                    let mut w = w.clone();
                    w.fun = WindowFunctionDefinition::AggregateUDF(Arc::new(AggregateUDF::new_from_impl(windowed)));
                    Ok(Transformed::yes(Expr::WindowFunction(w)))
                })
            })
        })
    }
}

/// A built-in aggregate whose state and window results are held to the statement's pool.
#[derive(Debug)]
struct Accounted {
    inner: Arc<dyn AggregateUDFImpl>,
    keeps_input: bool,
    pool: Arc<dyn MemoryPool>,
    /// How it is used: as an aggregate or a window function ([`WindowedAggregates`]).
    window: Use,
}

/// How an aggregate is used.
#[derive(Debug, Clone, Default)]
enum Use {
    /// As an aggregate: its result is its state (counted by `size()`), handed on.
    #[default]
    Aggregate,
    /// As a window function over a frame that ends before the partition's end: each accumulator
    /// holds its results until its window moves on to a new batch.
    Window,
    /// Over a frame to the partition's end: the accumulators (one per partition) hold their
    /// results together, as the window operator keeps every partition's results.
    WholePartitions(Arc<Mutex<Option<MemoryReservation>>>),
}

impl Accounted {
    fn wrap(&self, inner: Arc<dyn AggregateUDFImpl>) -> Arc<dyn AggregateUDFImpl> {
        Arc::new(Accounted {
            inner,
            keeps_input: self.keeps_input,
            pool: self.pool.clone(),
            window: self.window.clone(),
        })
    }

    fn accumulator_of(&self, inner: Box<dyn Accumulator>) -> Box<dyn Accumulator> {
        let name = format!("{}(...)", self.inner.name());
        Box::new(AccountedAccumulator {
            inner,
            keeps_input: self.keeps_input,
            pool: self.pool.clone(),
            name,
            windowed: !matches!(self.window, Use::Aggregate),
            whole_partitions: matches!(self.window, Use::WholePartitions(_)),
            results: match &self.window {
                Use::WholePartitions(shared) => shared.clone(),
                _ => Arc::default(),
            },
            input_bytes: 0,
            rows_before_first: 0,
            evaluated: false,
            batch: None,
        })
    }
}

impl PartialEq for Accounted {
    fn eq(&self, other: &Self) -> bool {
        self.inner.name() == other.inner.name() && Arc::ptr_eq(&self.pool, &other.pool)
    }
}

impl Eq for Accounted {}

impl Hash for Accounted {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.inner.name().hash(state);
    }
}

// Delegates every method but those making accumulators, and rewraps what returns a function.
impl AggregateUDFImpl for Accounted {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn signature(&self) -> &Signature {
        self.inner.signature()
    }
    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        self.inner.return_type(arg_types)
    }
    fn accumulator(&self, acc_args: AccumulatorArgs) -> DfResult<Box<dyn Accumulator>> {
        Ok(self.accumulator_of(self.inner.accumulator(acc_args)?))
    }
    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }
    fn schema_name(&self, params: &AggregateFunctionParams) -> DfResult<String> {
        self.inner.schema_name(params)
    }
    fn human_display(&self, params: &AggregateFunctionParams) -> DfResult<String> {
        self.inner.human_display(params)
    }
    fn window_function_schema_name(&self, params: &WindowFunctionParams) -> DfResult<String> {
        self.inner.window_function_schema_name(params)
    }
    fn display_name(&self, params: &AggregateFunctionParams) -> DfResult<String> {
        self.inner.display_name(params)
    }
    fn window_function_display_name(&self, params: &WindowFunctionParams) -> DfResult<String> {
        self.inner.window_function_display_name(params)
    }
    fn state_fields(&self, args: StateFieldsArgs) -> DfResult<Vec<FieldRef>> {
        self.inner.state_fields(args)
    }
    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        self.inner.groups_accumulator_supported(args)
    }
    fn create_groups_accumulator(&self, args: AccumulatorArgs) -> DfResult<Box<dyn GroupsAccumulator>> {
        let inner = self.inner.create_groups_accumulator(args)?;
        Ok(Box::new(AccountedGroups { inner, keeps_input: self.keeps_input, group_bytes: Vec::new(), input_bytes: 0 }))
    }
    fn create_sliding_accumulator(&self, args: AccumulatorArgs) -> DfResult<Box<dyn Accumulator>> {
        Ok(self.accumulator_of(self.inner.create_sliding_accumulator(args)?))
    }
    fn with_beneficial_ordering(
        self: Arc<Self>,
        beneficial_ordering: bool,
    ) -> DfResult<Option<Arc<dyn AggregateUDFImpl>>> {
        Ok(Arc::clone(&self.inner).with_beneficial_ordering(beneficial_ordering)?.map(|udf| self.wrap(udf)))
    }
    fn order_sensitivity(&self) -> AggregateOrderSensitivity {
        self.inner.order_sensitivity()
    }
    fn simplify(&self) -> Option<AggregateFunctionSimplification> {
        self.inner.simplify()
    }
    fn simplify_expr_op_literal(
        &self,
        agg_function: &AggregateFunction,
        arg: &Expr,
        op: Operator,
        lit: &Expr,
        arg_is_left: bool,
    ) -> DfResult<Option<Expr>> {
        self.inner.simplify_expr_op_literal(agg_function, arg, op, lit, arg_is_left)
    }
    fn reverse_expr(&self) -> ReversedUDAF {
        match self.inner.reverse_expr() {
            ReversedUDAF::Reversed(udf) if udf.name() == self.inner.name() => {
                ReversedUDAF::Reversed(Arc::new(AggregateUDF::new_from_shared_impl(self.wrap(udf.inner().clone()))))
            }
            other => other,
        }
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }
    fn return_field(&self, arg_fields: &[FieldRef]) -> DfResult<FieldRef> {
        self.inner.return_field(arg_fields)
    }
    fn is_nullable(&self) -> bool {
        self.inner.is_nullable()
    }
    fn is_descending(&self) -> Option<bool> {
        self.inner.is_descending()
    }
    fn value_from_stats(&self, statistics_args: &StatisticsArgs) -> Option<ScalarValue> {
        self.inner.value_from_stats(statistics_args)
    }
    fn default_value(&self, data_type: &DataType) -> DfResult<ScalarValue> {
        self.inner.default_value(data_type)
    }
    fn supports_null_handling_clause(&self) -> bool {
        self.inner.supports_null_handling_clause()
    }
    fn supports_within_group_clause(&self) -> bool {
        self.inner.supports_within_group_clause()
    }
    fn set_monotonicity(&self, data_type: &DataType) -> SetMonotonicity {
        self.inner.set_monotonicity(data_type)
    }
    fn documentation(&self) -> Option<&Documentation> {
        self.inner.documentation()
    }
}

/// An accumulator whose `size()` counts the text its input views point to, and whose results
/// are reserved while the window that asks for them stays on one batch of input.
struct AccountedAccumulator {
    inner: Box<dyn Accumulator>,
    keeps_input: bool,
    pool: Arc<dyn MemoryPool>,
    name: String,
    /// Whether this is a window function's accumulator, whose results are reserved.
    windowed: bool,
    /// Over a frame to the partition's end (see [`Use::WholePartitions`]).
    whole_partitions: bool,
    /// The results held: this accumulator's own, or a window function's shared ones.
    results: Arc<Mutex<Option<MemoryReservation>>>,
    /// The text behind the views of the input kept, which the inner `size()` leaves out.
    input_bytes: usize,
    /// The rows given before the first result. A window whose frame is the whole partition
    /// gives them all, asks for one result and repeats it on every row.
    rows_before_first: usize,
    evaluated: bool,
    /// The allocation the last input came from: a window's slices of one batch share it.
    batch: Option<usize>,
}

impl std::fmt::Debug for AccountedAccumulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccountedAccumulator").field("name", &self.name).finish_non_exhaustive()
    }
}

impl AccountedAccumulator {
    /// Notes input from `values`: a new batch of the same partition frees the results so far.
    fn input(&mut self, values: &[ArrayRef]) {
        let Some(first) = values.first() else { return };
        if !self.evaluated {
            self.rows_before_first += first.len();
        }
        // Input from another batch for the same accumulator: the window moved on, and its
        // results so far were handed on. (A new accumulator is a new partition, whose
        // neighbours' results a window operator may still hold.)
        let batch = allocation(first);
        let moved_on = self.batch.is_some() && batch.is_some() && batch != self.batch;
        if batch.is_some() {
            self.batch = batch;
        }
        if moved_on
            && let Ok(mut results) = self.results.lock()
            && let Some(held) = results.as_mut()
        {
            held.free();
        }
    }
}

impl Accumulator for AccountedAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> DfResult<()> {
        self.input(values);
        self.inner.update_batch(values)?;
        if self.keeps_input {
            self.input_bytes += values.first().map_or(0, |v| view_text_bytes(&v.to_data()));
        }
        Ok(())
    }
    fn evaluate(&mut self) -> DfResult<ScalarValue> {
        let result = compact_scalar(self.inner.evaluate()?);
        if !self.windowed {
            return Ok(result);
        }
        // A window's first result after the whole partition may be repeated on all its rows.
        let times = if self.whole_partitions && !self.evaluated { self.rows_before_first.max(1) } else { 1 };
        self.evaluated = true;
        let bytes = scalar_bytes(&result).saturating_mul(RESULT_COPIES).saturating_mul(times);
        let mut results =
            self.results.lock().map_err(|_| DataFusionError::Internal("a poisoned reservation".into()))?;
        let held = results.get_or_insert_with(|| MemoryConsumer::new(self.name.clone()).register(&self.pool));
        held.try_grow(bytes)?;
        Ok(result)
    }
    fn size(&self) -> usize {
        self.inner.size() + self.input_bytes
    }
    fn state(&mut self) -> DfResult<Vec<ScalarValue>> {
        Ok(self.inner.state()?.into_iter().map(compact_scalar).collect())
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> DfResult<()> {
        self.inner.merge_batch(states)?;
        if self.keeps_input {
            self.input_bytes += states.first().map_or(0, |v| view_text_bytes(&v.to_data()));
        }
        Ok(())
    }
    fn retract_batch(&mut self, values: &[ArrayRef]) -> DfResult<()> {
        self.input(values);
        self.inner.retract_batch(values)?;
        if self.keeps_input {
            let gone = values.first().map_or(0, |v| view_text_bytes(&v.to_data()));
            self.input_bytes = self.input_bytes.saturating_sub(gone);
        }
        Ok(())
    }
    fn supports_retract_batch(&self) -> bool {
        self.inner.supports_retract_batch()
    }
}

/// A groups accumulator whose `size()` counts the text its input views point to, group by group
/// (a streaming aggregate emits its first groups as they complete, and their text goes with them).
struct AccountedGroups {
    inner: Box<dyn GroupsAccumulator>,
    keeps_input: bool,
    /// The text behind the views kept for each group.
    group_bytes: Vec<usize>,
    /// Their sum.
    input_bytes: usize,
}

impl AccountedGroups {
    fn kept(&mut self, values: &[ArrayRef], group_indices: &[usize], filter: Option<&BooleanArray>) {
        let Some(values) = values.first().filter(|_| self.keeps_input) else { return };
        let rows = row_view_text_bytes(values);
        if rows.is_empty() {
            return;
        }
        for (row, (&group, bytes)) in group_indices.iter().zip(rows).enumerate() {
            if bytes == 0 || filter.is_some_and(|f| !f.is_valid(row) || !f.value(row)) {
                continue;
            }
            if self.group_bytes.len() <= group {
                self.group_bytes.resize(group + 1, 0);
            }
            self.group_bytes[group] += bytes;
            self.input_bytes += bytes;
        }
    }
    fn emitted(&mut self, emit_to: EmitTo) {
        match emit_to {
            EmitTo::All => {
                self.group_bytes = Vec::new();
                self.input_bytes = 0;
            }
            EmitTo::First(n) => {
                let gone: usize = self.group_bytes.drain(..n.min(self.group_bytes.len())).sum();
                self.input_bytes -= gone;
            }
        }
    }
}

impl GroupsAccumulator for AccountedGroups {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> DfResult<()> {
        self.inner.update_batch(values, group_indices, opt_filter, total_num_groups)?;
        self.kept(values, group_indices, opt_filter);
        Ok(())
    }
    fn evaluate(&mut self, emit_to: EmitTo) -> DfResult<ArrayRef> {
        let result = compact(self.inner.evaluate(emit_to)?);
        self.emitted(emit_to);
        Ok(result)
    }
    fn state(&mut self, emit_to: EmitTo) -> DfResult<Vec<ArrayRef>> {
        let result: Vec<ArrayRef> = self.inner.state(emit_to)?.into_iter().map(compact).collect();
        self.emitted(emit_to);
        Ok(result)
    }
    fn merge_batch(&mut self, values: &[ArrayRef], group_indices: &[usize], total_num_groups: usize) -> DfResult<()> {
        self.inner.merge_batch(values, group_indices, total_num_groups)?;
        self.kept(values, group_indices, None);
        Ok(())
    }
    fn convert_to_state(&self, values: &[ArrayRef], opt_filter: Option<&BooleanArray>) -> DfResult<Vec<ArrayRef>> {
        self.inner.convert_to_state(values, opt_filter)
    }
    fn size(&self) -> usize {
        self.inner.size() + self.input_bytes + self.group_bytes.capacity() * size_of::<usize>()
    }
}

/// The allocation `array`'s first buffer (or first child's) lives in: slices of one array share it.
fn allocation(array: &ArrayRef) -> Option<usize> {
    fn of(data: &ArrayData) -> Option<usize> {
        match data.buffers().first() {
            Some(b) => Some(b.data_ptr().as_ptr() as usize),
            None => data.child_data().first().and_then(of),
        }
    }
    of(&array.to_data())
}

/// The text the views in `data` (and its children) point to, beyond the 12 bytes a view holds
/// inline: what `ArrayData::get_slice_memory_size` leaves out.
fn view_text_bytes(data: &ArrayData) -> usize {
    let own = match data.data_type() {
        DataType::Utf8View | DataType::BinaryView => data
            .buffer::<u128>(0)
            .get(..data.len())
            .unwrap_or_default()
            .iter()
            .map(|view| *view as u32 as usize)
            .filter(|&len| len > 12)
            .sum(),
        _ => 0,
    };
    own + data.child_data().iter().map(view_text_bytes).sum::<usize>()
}

/// `array` with the text of a list of views copied out of the buffers it shares with other
/// arrays, when those are larger than what it points to. An emitted state of `array_agg` points
/// into every input batch of its groups: spilled or sent between partitions as it is, each batch
/// of it carries those whole buffers (QA pass 23b: 4 GB of memory for 1.2 GB of text under a
/// 256 MiB limit).
fn compact(array: ArrayRef) -> ArrayRef {
    let DataType::List(field) = array.data_type() else { return array };
    let list = array.as_list::<i32>();
    let values = list.values();
    let buffered: usize = match values.data_type() {
        DataType::Utf8View => values.as_string_view().data_buffers().iter().map(|b| b.len()).sum(),
        DataType::BinaryView => values.as_binary_view().data_buffers().iter().map(|b| b.len()).sum(),
        _ => return array,
    };
    if buffered <= 2 * view_text_bytes(&values.to_data()) + (1 << 16) {
        return array;
    }
    let values: ArrayRef = match values.data_type() {
        DataType::Utf8View => Arc::new(values.as_string_view().gc()),
        _ => Arc::new(values.as_binary_view().gc()),
    };
    Arc::new(ListArray::new(field.clone(), list.offsets().clone(), values, list.nulls().cloned()))
}

/// [`compact`] for a list scalar.
fn compact_scalar(value: ScalarValue) -> ScalarValue {
    match value {
        ScalarValue::List(list) => {
            let array = compact(list.clone());
            array
                .as_any()
                .downcast_ref::<ListArray>()
                .map_or(ScalarValue::List(list), |l| ScalarValue::List(Arc::new(l.clone())))
        }
        other => other,
    }
}

/// [`view_text_bytes`] row by row, for text views and lists of them (a state being merged);
/// empty for other types, whose kept size the accumulator's own `size()` has.
fn row_view_text_bytes(array: &ArrayRef) -> Vec<usize> {
    fn views(data: &ArrayData) -> Vec<usize> {
        let views = data.buffer::<u128>(0).get(..data.len()).unwrap_or_default();
        views.iter().map(|view| *view as u32 as usize).map(|len| if len > 12 { len } else { 0 }).collect()
    }
    match array.data_type() {
        DataType::Utf8View | DataType::BinaryView => views(&array.to_data()),
        DataType::List(item) if matches!(item.data_type(), DataType::Utf8View | DataType::BinaryView) => {
            let list = array.as_list::<i32>();
            let mut sums = vec![0usize];
            for bytes in views(&list.values().to_data()) {
                sums.push(sums[sums.len() - 1] + bytes);
            }
            let at = |i: i32| sums.get(i.max(0) as usize).copied().unwrap_or(0);
            list.offsets().windows(2).map(|w| at(w[1]).saturating_sub(at(w[0]))).collect()
        }
        _ => Vec::new(),
    }
}

/// The memory a result takes: a list's elements as if they were its own (they are copied into
/// it), text and other values as DataFusion sizes them.
fn scalar_bytes(value: &ScalarValue) -> usize {
    let array: Option<ArrayRef> = match value {
        ScalarValue::List(a) => Some(a.clone()),
        ScalarValue::LargeList(a) => Some(a.clone()),
        ScalarValue::FixedSizeList(a) => Some(a.clone()),
        _ => None,
    };
    match array {
        Some(a) => {
            let data = a.to_data();
            data.get_slice_memory_size().unwrap_or_else(|_| a.get_array_memory_size()) + view_text_bytes(&data)
        }
        None => value.size(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use arrow::array::StringViewArray;

    #[test]
    fn view_text_counts_only_what_is_not_inline() {
        let a = StringViewArray::from(vec![Some("short"), None, Some(&*"x".repeat(100)), Some(&*"y".repeat(13))]);
        assert_eq!(view_text_bytes(&a.to_data()), 113);
        // A slice counts its own views only.
        assert_eq!(view_text_bytes(&a.slice(3, 1).to_data()), 13);
        // Slices of one array come from one allocation; another array does not.
        let a: ArrayRef = Arc::new(a);
        let b: ArrayRef = Arc::new(StringViewArray::from(vec!["short"]));
        assert_eq!(allocation(&a.slice(0, 2)), allocation(&a.slice(2, 2)));
        assert_ne!(allocation(&a), allocation(&b));
    }
}
