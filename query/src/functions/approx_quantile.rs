//! `approx_quantile(value, q [, alpha])` and the fixed forms `approx_p50`, `approx_p90`,
//! `approx_p95`, `approx_p99`, `approx_p999` (`approx_p99(value [, alpha])`): the quantile of a
//! DDSketch of the values, in one step.
//!
//! Same definition as `quantile_cont` (position `(n − 1) q`, linear interpolation) applied to
//! the sketch's estimates of the two neighbouring order statistics, so the result is within
//! relative error `alpha` (default 0.01) of the exact `quantile_cont` whenever those two order
//! statistics have the same sign (always for non-negative data); in general the error is at
//! most `alpha` times the interpolation of their magnitudes. NULLs ignored; NaN and ±inf
//! ordered as in `quantile_cont`. O(1) per value, O(bins) per group to finish.

use arrow::datatypes::{DataType, FieldRef};
use datafusion::common::Result;
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{Accumulator, AggregateUDF, AggregateUDFImpl, GroupsAccumulator, Signature, Volatility};

use super::constant_args::QuantileForm;
use super::ddsketch::{
    SketchAccumulator, SketchInput, SketchOutput, groups_accumulator, mapping_arg, output_type, sketch_state_fields,
};

/// The approximate quantile aggregate in one of its forms (`approx_quantile(value, q [, alpha])`,
/// `approx_p99(value [, alpha])`, …).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct ApproxQuantile {
    form: QuantileForm,
    signature: Signature,
}

impl ApproxQuantile {
    fn parts(&self, args: &AccumulatorArgs) -> Result<(SketchInput, SketchOutput)> {
        let (q, alpha_pos) = self.form.quantile(args)?;
        Ok((SketchInput::Values(mapping_arg(args, alpha_pos, self.form.name)?), SketchOutput::Quantile(q)))
    }
}

/// All approximate-quantile UDAFs: `approx_quantile`, `approx_p50`, … `approx_p999`.
pub fn udafs() -> Vec<AggregateUDF> {
    QuantileForm::family("approx_quantile", |f| f.2)
        .into_iter()
        .map(|form| {
            AggregateUDF::from(ApproxQuantile { form, signature: Signature::user_defined(Volatility::Immutable) })
        })
        .collect()
}

impl AggregateUDFImpl for ApproxQuantile {
    fn name(&self) -> &str {
        self.form.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.form.coerce(arg_types, &["alpha"])
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(output_type(SketchOutput::Quantile(0.5)))
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(sketch_state_fields(&args))
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let (input, output) = self.parts(&args)?;
        Ok(Box::new(SketchAccumulator::new(self.form.name, input, output)))
    }

    fn groups_accumulator_supported(&self, _args: AccumulatorArgs) -> bool {
        true
    }

    fn create_groups_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn GroupsAccumulator>> {
        let (input, output) = self.parts(&args)?;
        Ok(groups_accumulator(self.form.name, input, output))
    }
}
