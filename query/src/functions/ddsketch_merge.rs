//! `ddsketch_merge(sketch)`: merges Binary sketches made by `ddsketch` (for example per-host or
//! per-bucket rollups) into one sketch, so that coarser quantiles come from stored states
//! without the raw values.
//!
//! Merging adds bin counts, so it is associative and commutative and the merged sketch equals
//! the sketch of all the underlying values. NULL sketches are ignored; sketches with different
//! relative accuracies cannot be merged (execution error); an all-NULL group gives NULL.
//! Cost: O(bins) per input sketch.

use arrow::datatypes::DataType;
use arrow::datatypes::FieldRef;
use datafusion::common::{Result, plan_err};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{Accumulator, AggregateUDFImpl, GroupsAccumulator, Signature, Volatility};

use super::constant_args::{check_arity, reject_distinct};
use super::ddsketch::{SketchAccumulator, SketchInput, SketchOutput, groups_accumulator, sketch_state_fields};

/// The `ddsketch_merge(sketch)` aggregate.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct DdSketchMerge {
    signature: Signature,
}

impl DdSketchMerge {
    /// Creates the UDAF implementation.
    pub fn new() -> Self {
        Self { signature: Signature::user_defined(Volatility::Immutable) }
    }
}

impl Default for DdSketchMerge {
    fn default() -> Self {
        Self::new()
    }
}

impl AggregateUDFImpl for DdSketchMerge {
    fn name(&self) -> &str {
        "ddsketch_merge"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        check_arity("ddsketch_merge", arg_types, 1, 1, "1 argument (sketch)")?;
        match &arg_types[0] {
            DataType::Binary | DataType::LargeBinary | DataType::BinaryView | DataType::Null => {
                Ok(vec![DataType::Binary])
            }
            other => {
                plan_err!("ddsketch_merge: argument sketch must be a binary ddsketch, got {other}")
            }
        }
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Binary)
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(sketch_state_fields(&args))
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        reject_distinct(&args, "ddsketch_merge")?;
        Ok(Box::new(SketchAccumulator::new("ddsketch_merge", SketchInput::Sketches, SketchOutput::Sketch)))
    }

    fn groups_accumulator_supported(&self, _args: AccumulatorArgs) -> bool {
        true
    }

    fn create_groups_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn GroupsAccumulator>> {
        reject_distinct(&args, "ddsketch_merge")?;
        Ok(groups_accumulator("ddsketch_merge", SketchInput::Sketches, SketchOutput::Sketch))
    }
}
