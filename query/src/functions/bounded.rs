//! Bounds on the built-in scalar functions whose output can be far larger than their input:
//! `array_repeat(x, n)`, `repeat(s, n)`, `lpad`/`rpad(s, n[, fill])`, `array_resize(a, n[, x])`,
//! the array forms of `range`/`generate_series(start, stop[, step])` on integers, and those
//! that replace each match by something longer: `replace(s, from, to)`, `regexp_replace(s,
//! pattern, replacement[, flags])`, `array_replace_all`/`array_replace_n(a, from, to[, n])`.
//! `concat`/`concat_ws` are bounded too: their result is the sum of their arguments, but a
//! large constant (itself within the limit) meeting a column is copied into every row of a
//! batch; so are `array_concat` (`array_cat`, a list `||` a list) and `make_array`, whose
//! arguments can be one large list given any number of times. Functions whose result is at
//! most a few times their arguments (`upper`, `array_append`, …) are not bounded. The `||` operator is no function to wrap: the optimizer
//! rule [`BroadcastConcat`] refuses a column `||` a text constant over [`MAX_BROADCAST_BYTES`].
//!
//! DataFusion's memory pool sees operators' buffers, not a scalar function's result, so
//! `SELECT array_repeat(1.5, 400000000)` would allocate 3.2 GB behind the statement's memory
//! limit — in `lockstep serve` enough for the kernel to kill the ingestion server, which a
//! read-only SQL user must not be able to do. Each of these functions is wrapped: before the
//! built-in runs, the size of its result is computed from the arguments (summed over the
//! batch's rows), and the memory the call takes at its peak, [`PEAK_COPIES`] times that, is
//! reserved from the statement's pool — so from the statement's memory limit and the budget
//! every statement of a server shares — while it runs (a call under 1/64 of the limit is only
//! checked, not reserved). A call that does not fit fails with an
//! error naming the function and the sizes, instead of allocating. (The result, a quarter of
//! the peak, then goes on unaccounted, as any scalar function's does.)

use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{DataType, FieldRef, Int64Type};
use datafusion::common::ScalarValue;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::FunctionRegistry;
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryLimit, MemoryReservation};
use datafusion::logical_expr::{
    ColumnarValue, Documentation, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
};
use datafusion::prelude::SessionContext;

/// How a function's result grows with its arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Growth {
    /// `array_repeat(element, count)`: `count` copies of the element.
    ArrayRepeat,
    /// `repeat(text, count)`: `count` copies of the text.
    Repeat,
    /// `lpad`/`rpad(text, length, …)` and `array_resize(array, length, …)`: `length` items of
    /// at least a byte (pad) or eight (resize) each.
    Length { item_bytes: u64 },
    /// `range`/`generate_series(start, stop[, step])`: `(stop − start) / step` integers.
    Range,
    /// `replace(text, from, to)`: each `from` in the text becomes `to`.
    Replace,
    /// `regexp_replace(text, pattern, replacement[, flags])`: each match (the first without the
    /// `g` flag) becomes the replacement, its group references expanded.
    RegexpReplace,
    /// `array_replace_all`/`array_replace_n(array, from, to[, n])`: elements become `to`.
    ArrayReplace,
    /// `concat(a, b, …)`, `concat_ws(sep, a, b, …)`: the sum of the arguments per row — which
    /// is large when a large constant meets a column, copied into every row.
    Concat,
    /// `array_concat(a, b, …)`, `make_array(a, b, …)`: the sum of the arguments per row — which
    /// is any number of times a list when it is given again and again (QA pass 24: 140 copies of
    /// a 47 MB `array_agg` took a server with a 256 MiB limit past 7 GB).
    Sum,
}

const WRAPPED: [(&str, Growth); 15] = [
    ("array_repeat", Growth::ArrayRepeat),
    ("repeat", Growth::Repeat),
    ("lpad", Growth::Length { item_bytes: 1 }),
    ("rpad", Growth::Length { item_bytes: 1 }),
    ("array_resize", Growth::Length { item_bytes: 8 }),
    ("range", Growth::Range),
    ("generate_series", Growth::Range),
    ("replace", Growth::Replace),
    ("regexp_replace", Growth::RegexpReplace),
    ("array_replace_all", Growth::ArrayReplace),
    ("array_replace_n", Growth::ArrayReplace),
    ("concat", Growth::Concat),
    ("concat_ws", Growth::Concat),
    ("array_concat", Growth::Sum),
    ("make_array", Growth::Sum),
];

/// The memory a call takes at its peak, in multiples of its result's size: measured with
/// `repeat('x', 1e9)` in `lockstep serve` (QA pass 20), 3.7 GB of resident memory for a
/// 954 MiB result — the built-in builds each value, then copies it into the result array,
/// which the next operator copies again.
pub(crate) const PEAK_COPIES: u128 = 4;

/// A call whose peak is under this part of the statement's limit is not reserved (see
/// [`Bounded::invoke_with_args`]).
const SMALL_PART: u64 = 64;

/// Wraps the functions above on `ctx` with the bound of its memory pool (nothing when the
/// pool is unbounded, or for a function `ctx` does not have).
pub(crate) fn register(ctx: &SessionContext) {
    let pool = ctx.runtime_env().memory_pool.clone();
    let MemoryLimit::Finite(limit) = pool.memory_limit() else { return };
    for (name, growth) in WRAPPED {
        let Ok(udf) = ctx.udf(name) else { continue };
        let held = Mutex::new(MemoryConsumer::new(format!("{name}(...)")).register(&pool));
        let bounded = Bounded { inner: udf.inner().clone(), growth, max_bytes: limit as u64, held };
        ctx.register_udf(ScalarUDF::new_from_impl(bounded));
    }
}

/// A built-in function with a bound on its result's size.
#[derive(Debug)]
struct Bounded {
    inner: Arc<dyn ScalarUDFImpl>,
    growth: Growth,
    max_bytes: u64,
    /// The memory of a call at its peak, held from the statement's pool while it runs.
    held: Mutex<MemoryReservation>,
}

impl PartialEq for Bounded {
    fn eq(&self, other: &Self) -> bool {
        self.inner.name() == other.inner.name() && self.growth == other.growth && self.max_bytes == other.max_bytes
    }
}

impl Eq for Bounded {}

impl Hash for Bounded {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.inner.name().hash(state);
        self.growth.hash(state);
        self.max_bytes.hash(state);
    }
}

impl ScalarUDFImpl for Bounded {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }
    fn signature(&self) -> &Signature {
        self.inner.signature()
    }
    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        self.inner.return_type(arg_types)
    }
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> DfResult<FieldRef> {
        self.inner.return_field_from_args(args)
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }
    fn documentation(&self) -> Option<&Documentation> {
        self.inner.documentation()
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        // A result whose upper bound would be refused is measured where it can be.
        let count_above = u128::from(self.max_bytes) / PEAK_COPIES;
        let bytes = result_bytes(self.growth, &args.args, args.number_rows, count_above)?;
        let peak = bytes.saturating_mul(PEAK_COPIES);
        let too_large = |why: String| {
            DataFusionError::ResourcesExhausted(format!(
                "{}(...) would build a result of {} MiB, taking {} MiB at its peak: {why}",
                self.inner.name(),
                bytes >> 20,
                peak >> 20,
            ))
        };
        if peak > u128::from(self.max_bytes) {
            return Err(too_large(format!("more than the statement's memory limit of {} MiB", self.max_bytes >> 20)));
        }
        // A call of a few rows' padding is what these functions mostly do: it takes nothing
        // from the pool, where an unspillable reservation, however brief, could fail a sort
        // or an aggregate that had grown to its share instead of letting it spill.
        if peak < u128::from(self.max_bytes / SMALL_PART) {
            return self.inner.invoke_with_args(args);
        }
        // One reservation for the calls of every partition: they take turns. `peak` fits: it is
        // at most `max_bytes`, a usize.
        let held = self.held.lock().map_err(|_| DataFusionError::Internal("a poisoned reservation".into()))?;
        held.try_resize(peak as usize).map_err(|e| {
            too_large(match e.find_root() {
                DataFusionError::ResourcesExhausted(why) => why.clone(),
                other => other.to_string(),
            })
        })?;
        let result = self.inner.invoke_with_args(args);
        held.free();
        result
    }
}

/// Argument `i` as `rows` integers (NULL and negative counts are 0), or `None` when it is
/// missing or not an integer.
fn integers(args: &[ColumnarValue], i: usize, rows: usize) -> DfResult<Option<Vec<i64>>> {
    let Some(arg) = args.get(i) else { return Ok(None) };
    if !arg.data_type().is_integer() {
        return Ok(None);
    }
    let array = arg.to_array(rows)?;
    let array = arrow::compute::cast(&array, &DataType::Int64)?;
    Ok(Some(array.as_primitive::<Int64Type>().iter().map(|v| v.unwrap_or(0)).collect()))
}

/// The byte length of each row of argument `i` when it is text (`None` otherwise).
fn text_lengths(args: &[ColumnarValue], i: usize, rows: usize) -> DfResult<Option<Vec<u64>>> {
    let Some(arg) = args.get(i) else { return Ok(None) };
    let array: ArrayRef = match arg {
        ColumnarValue::Scalar(ScalarValue::Utf8(s) | ScalarValue::LargeUtf8(s) | ScalarValue::Utf8View(s)) => {
            return Ok(Some(vec![s.as_ref().map_or(0, |s| s.len() as u64); rows]));
        }
        ColumnarValue::Scalar(_) => return Ok(None),
        ColumnarValue::Array(a) => a.clone(),
    };
    let lengths = match array.data_type() {
        DataType::Utf8 => array.as_string::<i32>().iter().map(|s| s.map_or(0, str::len)).collect(),
        DataType::LargeUtf8 => array.as_string::<i64>().iter().map(|s| s.map_or(0, str::len)).collect(),
        DataType::Utf8View => array.as_string_view().iter().map(|s| s.map_or(0, str::len)).collect::<Vec<_>>(),
        _ => return Ok(None),
    };
    Ok(Some(lengths.into_iter().map(|l| l as u64).collect()))
}

/// The bytes of each row of argument `i` as a value (text: its bytes and an offset; a list:
/// its elements' and an offset; a struct: its fields'; others: the type's width, at least 1,
/// 8 when it has none), or `None` when the argument is missing.
fn value_bytes(args: &[ColumnarValue], i: usize, rows: usize) -> DfResult<Option<Vec<u64>>> {
    Ok(match args.get(i) {
        None => None,
        Some(ColumnarValue::Array(a)) => Some(row_bytes(a.as_ref())),
        Some(ColumnarValue::Scalar(s)) => Some(vec![row_bytes(s.to_array_of_size(1)?.as_ref())[0]; rows]),
    })
}

/// [`value_bytes`] of each row of `array`.
fn row_bytes(array: &dyn Array) -> Vec<u64> {
    // The rows of a list from its elements' sizes and its offsets.
    fn lists(offsets: impl Iterator<Item = (usize, usize)>, values: &dyn Array) -> Vec<u64> {
        let mut sums = vec![0u64];
        for b in row_bytes(values) {
            sums.push(sums[sums.len() - 1] + b);
        }
        offsets.map(|(a, b)| sums.get(b).zip(sums.get(a)).map_or(0, |(hi, lo)| hi - lo) + 4).collect()
    }
    let texts = |lengths: &mut dyn Iterator<Item = usize>| lengths.map(|l| l as u64 + 4).collect::<Vec<_>>();
    match array.data_type() {
        DataType::Utf8 => texts(&mut array.as_string::<i32>().iter().map(|s| s.map_or(0, str::len))),
        DataType::LargeUtf8 => texts(&mut array.as_string::<i64>().iter().map(|s| s.map_or(0, str::len))),
        DataType::Utf8View => texts(&mut array.as_string_view().iter().map(|s| s.map_or(0, str::len))),
        DataType::Binary => texts(&mut array.as_binary::<i32>().iter().map(|s| s.map_or(0, <[u8]>::len))),
        DataType::LargeBinary => texts(&mut array.as_binary::<i64>().iter().map(|s| s.map_or(0, <[u8]>::len))),
        DataType::BinaryView => texts(&mut array.as_binary_view().iter().map(|s| s.map_or(0, <[u8]>::len))),
        DataType::List(_) => {
            let l = array.as_list::<i32>();
            lists(l.offsets().windows(2).map(|w| (w[0] as usize, w[1] as usize)), l.values().as_ref())
        }
        DataType::LargeList(_) => {
            let l = array.as_list::<i64>();
            lists(l.offsets().windows(2).map(|w| (w[0] as usize, w[1] as usize)), l.values().as_ref())
        }
        DataType::FixedSizeList(_, n) => {
            let l = array.as_fixed_size_list();
            let n = (*n).max(0) as usize;
            let first = l.offset() * n;
            lists((0..l.len()).map(|r| (first + r * n, first + (r + 1) * n)), l.values().as_ref())
        }
        DataType::Struct(_) => {
            let mut sums = vec![0u64; array.len()];
            for field in array.as_struct().columns() {
                sums.iter_mut().zip(row_bytes(field.as_ref())).for_each(|(s, b)| *s += b);
            }
            sums
        }
        t => vec![t.primitive_width().unwrap_or(8).max(1) as u64; array.len()],
    }
}

/// The number of elements of each row of argument `i` when it is a list (`None` otherwise).
fn list_lengths(args: &[ColumnarValue], i: usize, rows: usize) -> DfResult<Option<Vec<u64>>> {
    let Some(arg) = args.get(i) else { return Ok(None) };
    // A constant is measured once and repeated, not copied to every row (review: a list of a
    // million elements over a batch of 8192 rows was 64 GB before the check could refuse it).
    let (array, constant) = match arg {
        ColumnarValue::Scalar(s) => (s.to_array_of_size(1)?, true),
        ColumnarValue::Array(a) => (a.clone(), false),
    };
    let lengths: Vec<u64> = match array.data_type() {
        DataType::List(_) => array.as_list::<i32>().offsets().windows(2).map(|w| (w[1] - w[0]) as u64).collect(),
        DataType::LargeList(_) => array.as_list::<i64>().offsets().windows(2).map(|w| (w[1] - w[0]) as u64).collect(),
        DataType::FixedSizeList(_, n) => vec![(*n).max(0) as u64; array.len()],
        _ => return Ok(None),
    };
    Ok(Some(if constant { vec![lengths.first().copied().unwrap_or(0); rows] } else { lengths }))
}

/// The text of argument `i` when it is a constant (a scalar string), else `None`.
fn constant_text(args: &[ColumnarValue], i: usize) -> Option<&str> {
    match args.get(i)? {
        ColumnarValue::Scalar(ScalarValue::Utf8(s) | ScalarValue::LargeUtf8(s) | ScalarValue::Utf8View(s)) => {
            s.as_deref()
        }
        _ => None,
    }
}

/// `regexp_replace`'s result size for a constant pattern, replacement and flags, by finding the
/// matches (`None` when the arguments are not constants, or the pattern is DataFusion's error
/// to give): per row, the text with each match replaced by the replacement, whose group
/// references (`\1`, `$1`) expand to at most the match.
fn regexp_replace_bytes(args: &[ColumnarValue], rows: usize) -> DfResult<Option<u128>> {
    let (Some(pattern), Some(replacement)) = (constant_text(args, 1), constant_text(args, 2)) else {
        return Ok(None);
    };
    let flags = match args.get(3) {
        None => "",
        Some(_) => match constant_text(args, 3) {
            Some(flags) => flags,
            None => return Ok(None),
        },
    };
    // As DataFusion reads the flags: `g` replaces every match, the rest are the regex's.
    let global = flags.contains('g');
    let inline = flags.replace('g', "");
    let pattern = if inline.is_empty() { pattern.to_string() } else { format!("(?{inline}){pattern}") };
    let Ok(regex) = regex::Regex::new(&pattern) else { return Ok(None) };
    let references = replacement.chars().filter(|c| matches!(c, '\\' | '$')).count() as u128;
    let Some(texts) = args.first() else { return Ok(None) };
    let array = texts.to_array(if matches!(texts, ColumnarValue::Scalar(_)) { 1 } else { rows })?;
    let each = |text: &str| {
        let (mut count, mut matched) = (0u128, 0u128);
        for m in regex.find_iter(text).take(if global { usize::MAX } else { 1 }) {
            count += 1;
            matched += m.len() as u128;
        }
        text.len() as u128 - matched + count * replacement.len() as u128 + references * matched
    };
    let total: u128 = match array.data_type() {
        DataType::Utf8 => array.as_string::<i32>().iter().flatten().map(each).sum(),
        DataType::LargeUtf8 => array.as_string::<i64>().iter().flatten().map(each).sum(),
        DataType::Utf8View => array.as_string_view().iter().flatten().map(each).sum(),
        _ => return Ok(None),
    };
    Ok(Some(if matches!(texts, ColumnarValue::Scalar(_)) { total * rows as u128 } else { total }))
}

/// The size of the result of a call over `rows` rows, in bytes (an upper estimate where the
/// exact size is not known from the arguments; 0 when the arguments are not of a shape whose
/// size is computed here).
fn result_bytes(growth: Growth, args: &[ColumnarValue], rows: usize, count_above: u128) -> DfResult<u128> {
    let count = |n: i64| n.max(0) as u128;
    Ok(match growth {
        Growth::ArrayRepeat => {
            let (Some(counts), Some(each)) = (integers(args, 1, rows)?, value_bytes(args, 0, rows)?) else {
                return Ok(0);
            };
            counts.iter().zip(&each).map(|(&n, &b)| count(n) * u128::from(b)).sum()
        }
        Growth::Repeat => {
            let (Some(lengths), Some(counts)) = (text_lengths(args, 0, rows)?, integers(args, 1, rows)?) else {
                return Ok(0);
            };
            lengths.iter().zip(&counts).map(|(&l, &n)| u128::from(l) * count(n)).sum()
        }
        Growth::Length { item_bytes } => {
            let Some(lengths) = integers(args, 1, rows)? else { return Ok(0) };
            let each: Vec<u64> = match (item_bytes, args.get(2)) {
                // A pad of characters of up to 4 bytes (UTF-8) each: the fill's widest, or 4
                // when the fill is not a constant.
                (1, Some(_)) => {
                    let widest = constant_text(args, 2).map_or(4, |f| f.chars().map(char::len_utf8).max().unwrap_or(1));
                    vec![widest as u64; rows]
                }
                // `array_resize`'s new elements are copies of its fill value (review: a fill of
                // 1000 bytes was counted as 8).
                (_, Some(_)) => {
                    value_bytes(args, 2, rows)?.unwrap_or_default().iter().map(|&b| b.max(item_bytes)).collect()
                }
                (_, None) => vec![item_bytes; rows],
            };
            lengths
                .iter()
                .zip(each.iter().chain(std::iter::repeat(&item_bytes)))
                .map(|(&n, &b)| count(n) * u128::from(b))
                .sum()
        }
        Growth::Range => {
            // One argument is `range(stop)` from 0; a step defaults to 1.
            let one = args.len() == 1;
            let (start, stop) = if one {
                (Some(vec![0; rows]), integers(args, 0, rows)?)
            } else {
                (integers(args, 0, rows)?, integers(args, 1, rows)?)
            };
            let (Some(start), Some(stop)) = (start, stop) else { return Ok(0) };
            let step = match args.get(2) {
                Some(_) => match integers(args, 2, rows)? {
                    Some(step) => step,
                    None => return Ok(0),
                },
                None => vec![1; rows],
            };
            // Integers of 8 bytes, (stop − start) / step of them (+ 1: `generate_series`
            // includes its stop); a zero step is DataFusion's error, not a size.
            let elements = |a: i64, b: i64, s: i64| match s.unsigned_abs() {
                0 => 0,
                s => (i128::from(b) - i128::from(a)).unsigned_abs() / u128::from(s) + 1,
            };
            start.iter().zip(&stop).zip(&step).map(|((&a, &b), &s)| elements(a, b, s) * 8).sum()
        }
        Growth::Replace => {
            let (Some(text), Some(from), Some(to)) =
                (text_lengths(args, 0, rows)?, text_lengths(args, 1, rows)?, text_lengths(args, 2, rows)?)
            else {
                return Ok(0);
            };
            // At most `len / from` matches, each `to - from` bytes longer (an empty `from`
            // leaves the text as it is, as in PostgreSQL).
            let each = |l: u64, f: u64, t: u64| match (f, t > f) {
                (0, _) | (_, false) => u128::from(l),
                (f, true) => u128::from(l) + u128::from(l / f) * u128::from(t - f),
            };
            text.iter().zip(&from).zip(&to).map(|((&l, &f), &t)| each(l, f, t)).sum()
        }
        Growth::RegexpReplace => {
            let (Some(text), Some(replacement)) = (text_lengths(args, 0, rows)?, text_lengths(args, 2, rows)?) else {
                return Ok(0);
            };
            // Without finding the matches: up to one per byte and one at the end, each the
            // replacement (its references expand to at most the match); found only when that
            // bound would be refused (review: counting above a small call's size ran the regex
            // twice on ordinary batches).
            let bound: u128 = text
                .iter()
                .zip(&replacement)
                .map(|(&l, &r)| u128::from(l) * 2 + u128::from(l + 1) * u128::from(r))
                .sum();
            if bound <= count_above { bound } else { regexp_replace_bytes(args, rows)?.unwrap_or(bound) }
        }
        Growth::Concat => {
            let mut total = 0u128;
            for i in 0..args.len() {
                let bytes = value_bytes(args, i, rows)?.unwrap_or_default();
                // concat_ws repeats its separator between the arguments.
                let times = if i == 0 && args.len() > 2 { (args.len() - 2) as u128 } else { 1 };
                total += bytes.iter().map(|&b| u128::from(b)).sum::<u128>() * times;
            }
            total
        }
        Growth::Sum => {
            let mut total = 0u128;
            for i in 0..args.len() {
                total += value_bytes(args, i, rows)?.unwrap_or_default().iter().map(|&b| u128::from(b)).sum::<u128>();
            }
            total
        }
        Growth::ArrayReplace => {
            let (Some(arrays), Some(elements), Some(to)) =
                (value_bytes(args, 0, rows)?, list_lengths(args, 0, rows)?, value_bytes(args, 2, rows)?)
            else {
                return Ok(0);
            };
            // Every element replaced, at worst.
            arrays
                .iter()
                .zip(&elements)
                .zip(&to)
                .map(|((&a, &n), &t)| u128::from(a) + u128::from(n) * u128::from(t))
                .sum()
        }
    })
}

/// The largest text constant `||` may copy into every row: 16 KiB is 128 MiB in a batch of
/// 8192 rows, built outside the memory pool.
pub(crate) const MAX_BROADCAST_BYTES: usize = 16 << 10;

/// An optimizer rule, run after constants are folded, that refuses `column || constant` (and
/// `constant || column`) with a text constant over [`MAX_BROADCAST_BYTES`]: the operator is no
/// function the wrapper above can bound, and it copies the constant into every row —
/// `CAST(value AS TEXT) || repeat('x', 100000000)` would build 100 MB per row of a batch
/// (review of QA pass 21's F3). `concat`, which is bounded by the memory limit, does the same.
#[derive(Debug, Default)]
pub(crate) struct BroadcastConcat;

impl datafusion::optimizer::OptimizerRule for BroadcastConcat {
    fn name(&self) -> &str {
        "lockstep_broadcast_concat"
    }

    fn rewrite(
        &self,
        plan: datafusion::logical_expr::LogicalPlan,
        _config: &dyn datafusion::optimizer::OptimizerConfig,
    ) -> DfResult<datafusion::common::tree_node::Transformed<datafusion::logical_expr::LogicalPlan>> {
        use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
        use datafusion::logical_expr::{BinaryExpr, Expr, Operator};
        let text_len = |e: &Expr| match e {
            Expr::Literal(ScalarValue::Utf8(s) | ScalarValue::LargeUtf8(s) | ScalarValue::Utf8View(s), _) => {
                Some(s.as_ref().map_or(0, String::len))
            }
            _ => None,
        };
        let mut refused = None;
        plan.apply_with_subqueries(|node| {
            node.apply_expressions(|e| {
                e.apply(|e| {
                    if let Expr::BinaryExpr(BinaryExpr { left, op: Operator::StringConcat, right }) = e {
                        let big = match (text_len(left), text_len(right)) {
                            (Some(n), None) | (None, Some(n)) if n > MAX_BROADCAST_BYTES => Some(n),
                            _ => None,
                        };
                        if let Some(n) = big {
                            refused = Some(n);
                            return Ok(TreeNodeRecursion::Stop);
                        }
                    }
                    Ok(TreeNodeRecursion::Continue)
                })
            })
        })?;
        match refused {
            // A plan error: no memory limit would let it run, so the limit error's "raise it" hint
            // does not belong here.
            Some(n) => Err(DataFusionError::Plan(format!(
                "|| would copy a text constant of {} KiB into every row ({} MiB for a batch of 8192 rows, outside the \
                 memory limit): use concat(...), which the memory limit bounds, or a constant of at most {} KiB",
                n >> 10,
                (n as u128 * 8192) >> 20,
                MAX_BROADCAST_BYTES >> 10
            ))),
            None => Ok(Transformed::no(plan)),
        }
    }
}
