//! `ddsketch(value [, alpha])`: builds a mergeable DDSketch of the values as a Binary state
//! that can be stored in rollups, merged with `ddsketch_merge` across hosts and time buckets,
//! and queried with `ddsketch_quantile`.
//!
//! The sketch guarantees relative error `alpha` (default 0.01, accepted range
//! `[0.0001, 0.5]`) on every order statistic; see [`sketch`] for the structure and the
//! byte layout. NULLs are ignored; NaN and ±inf are counted and ordered like `quantile_cont`
//! orders them. An all-NULL or empty group gives NULL. Inserting is O(1) per value (one `ln`);
//! the state size is O(bins), at most `ln(max/min) / ln((1+α)/(1−α))` per sign.
//!
//! This file also holds the accumulators shared by `ddsketch`, `ddsketch_merge` and
//! `approx_quantile`, which differ only in their input (values or sketches) and their output
//! (the sketch or a quantile of it).

pub mod sketch;

mod groups;

use std::mem::size_of_val;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{DataType, Field, FieldRef, Float64Type};
use datafusion::common::{Result, ScalarValue, exec_datafusion_err, plan_err};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::format_state_name;
use datafusion::logical_expr::{Accumulator, AggregateUDFImpl, GroupsAccumulator, Signature, Volatility};

use self::sketch::{DEFAULT_ALPHA, DdSketch, Mapping};
use super::constant_args::{check_arity, coerce_float, constant_f64, reject_distinct};

/// What a sketch accumulator consumes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum SketchInput {
    /// Float64 values, inserted with the given mapping.
    Values(Mapping),
    /// Binary sketches, merged; their relative accuracy must agree.
    Sketches,
}

/// What a sketch accumulator produces.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum SketchOutput {
    /// The Binary sketch state.
    Sketch,
    /// One quantile as Float64.
    Quantile(f64),
}

impl SketchOutput {
    fn data_type(self) -> DataType {
        match self {
            Self::Sketch => DataType::Binary,
            Self::Quantile(_) => DataType::Float64,
        }
    }

    fn finish(self, sketch: Option<&DdSketch>) -> ScalarValue {
        let sketch = sketch.filter(|s| s.count() > 0);
        match self {
            Self::Sketch => ScalarValue::Binary(sketch.map(DdSketch::encode)),
            Self::Quantile(q) => ScalarValue::Float64(sketch.and_then(|s| s.quantile(q))),
        }
    }
}

/// Reads the optional relative-accuracy argument at `position` and builds its mapping.
pub(crate) fn mapping_arg(args: &AccumulatorArgs, position: usize, function: &str) -> Result<Mapping> {
    let alpha = match args.exprs.get(position) {
        Some(expr) => constant_f64(expr, function, "alpha")?.unwrap_or(DEFAULT_ALPHA),
        None => DEFAULT_ALPHA,
    };
    Mapping::new(alpha).or_else(|e| plan_err!("{function}: {e}"))
}

/// The Binary state field shared by all sketch aggregates.
pub(crate) fn sketch_state_fields(args: &StateFieldsArgs) -> Vec<FieldRef> {
    vec![Arc::new(Field::new(format_state_name(args.name, "ddsketch"), DataType::Binary, true))]
}

/// Decodes a Binary sketch, naming the function in the error.
pub(crate) fn decode(bytes: &[u8], function: &str) -> Result<DdSketch> {
    DdSketch::decode(bytes).map_err(|e| exec_datafusion_err!("{function}: {e}"))
}

/// Merges `other` into `slot`, creating it if empty.
pub(crate) fn merge_into(slot: &mut Option<DdSketch>, other: DdSketch, function: &str) -> Result<()> {
    match slot {
        Some(s) => s.merge(&other).map_err(|e| exec_datafusion_err!("{function}: {e}")),
        None => {
            *slot = Some(other);
            Ok(())
        }
    }
}

/// Single-group sketch accumulator (no GROUP BY, and window frames).
#[derive(Debug)]
pub(crate) struct SketchAccumulator {
    function: &'static str,
    input: SketchInput,
    output: SketchOutput,
    sketch: Option<DdSketch>,
}

impl SketchAccumulator {
    pub(crate) fn new(function: &'static str, input: SketchInput, output: SketchOutput) -> Self {
        let sketch = match input {
            SketchInput::Values(m) => Some(DdSketch::new(m)),
            SketchInput::Sketches => None,
        };
        Self { function, input, output, sketch }
    }

    fn merge_binary(&mut self, array: &ArrayRef) -> Result<()> {
        for bytes in array.as_binary::<i32>().iter().flatten() {
            merge_into(&mut self.sketch, decode(bytes, self.function)?, self.function)?;
        }
        Ok(())
    }
}

impl Accumulator for SketchAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        match (&mut self.sketch, self.input) {
            (Some(sketch), SketchInput::Values(_)) => {
                let array = values[0].as_primitive::<Float64Type>();
                if array.null_count() == 0 {
                    array.values().iter().for_each(|v| sketch.insert(*v));
                } else {
                    array.iter().flatten().for_each(|v| sketch.insert(v));
                }
                Ok(())
            }
            _ => self.merge_binary(&values[0]),
        }
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        if let (Some(sketch), SketchInput::Values(_)) = (&mut self.sketch, self.input) {
            values[0].as_primitive::<Float64Type>().iter().flatten().for_each(|v| sketch.remove(v));
            return Ok(());
        }
        plan_err!("{}: sliding window frames are not supported over sketches", self.function)
    }

    fn supports_retract_batch(&self) -> bool {
        matches!(self.input, SketchInput::Values(_))
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        Ok(self.output.finish(self.sketch.as_ref()))
    }

    fn size(&self) -> usize {
        size_of_val(self) + self.sketch.as_ref().map_or(0, DdSketch::heap_size)
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![ScalarValue::Binary(self.sketch.as_ref().map(DdSketch::encode))])
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        self.merge_binary(&states[0])
    }
}

/// The `ddsketch(value [, alpha])` aggregate.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct DdSketchAgg {
    signature: Signature,
}

impl DdSketchAgg {
    /// Creates the UDAF implementation.
    pub fn new() -> Self {
        Self { signature: Signature::user_defined(Volatility::Immutable) }
    }
}

impl Default for DdSketchAgg {
    fn default() -> Self {
        Self::new()
    }
}

impl AggregateUDFImpl for DdSketchAgg {
    fn name(&self) -> &str {
        "ddsketch"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        check_arity("ddsketch", arg_types, 1, 2, "1 or 2 arguments (value [, alpha])")?;
        arg_types.iter().zip(["value", "alpha"]).map(|(t, name)| coerce_float("ddsketch", name, t)).collect()
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(SketchOutput::Sketch.data_type())
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(sketch_state_fields(&args))
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        reject_distinct(&args, "ddsketch")?;
        let input = SketchInput::Values(mapping_arg(&args, 1, "ddsketch")?);
        Ok(Box::new(SketchAccumulator::new("ddsketch", input, SketchOutput::Sketch)))
    }

    fn groups_accumulator_supported(&self, _args: AccumulatorArgs) -> bool {
        true
    }

    fn create_groups_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn GroupsAccumulator>> {
        reject_distinct(&args, "ddsketch")?;
        let input = SketchInput::Values(mapping_arg(&args, 1, "ddsketch")?);
        Ok(Box::new(groups::SketchGroups::new("ddsketch", input, SketchOutput::Sketch)))
    }
}

/// Creates the sketch groups accumulator for the other sketch aggregates.
pub(crate) fn groups_accumulator(
    function: &'static str,
    input: SketchInput,
    output: SketchOutput,
) -> Box<dyn GroupsAccumulator> {
    Box::new(groups::SketchGroups::new(function, input, output))
}

/// The return type of a sketch aggregate with this output.
pub(crate) fn output_type(output: SketchOutput) -> DataType {
    output.data_type()
}
