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
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, GroupsAccumulator, Signature, Volatility,
};

use super::constant_args::{check_arity, coerce_float, constant_quantile, reject_distinct};
use super::ddsketch::{
    SketchAccumulator, SketchInput, SketchOutput, groups_accumulator, mapping_arg, output_type,
    sketch_state_fields,
};

/// The approximate quantile aggregate; `fixed_permille` is set for `approx_pNN(value)`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct ApproxQuantile {
    name: &'static str,
    fixed_permille: Option<u16>,
    signature: Signature,
}

impl ApproxQuantile {
    /// `approx_quantile(value, q [, alpha])`.
    pub fn new() -> Self {
        Self {
            name: "approx_quantile",
            fixed_permille: None,
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }

    /// A fixed-quantile form such as `approx_p99(value [, alpha])`.
    pub fn fixed(name: &'static str, permille: u16) -> Self {
        Self {
            name,
            fixed_permille: Some(permille),
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }

    fn parts(&self, args: &AccumulatorArgs) -> Result<(SketchInput, SketchOutput)> {
        reject_distinct(args, self.name)?;
        let (q, alpha_pos) = match self.fixed_permille {
            Some(p) => (f64::from(p) / 1000.0, 1),
            None => (constant_quantile(&args.exprs[1], self.name)?, 2),
        };
        Ok((
            SketchInput::Values(mapping_arg(args, alpha_pos, self.name)?),
            SketchOutput::Quantile(q),
        ))
    }
}

impl Default for ApproxQuantile {
    fn default() -> Self {
        Self::new()
    }
}

/// All approximate-quantile UDAFs.
pub fn udafs() -> Vec<AggregateUDF> {
    let mut v = vec![AggregateUDF::from(ApproxQuantile::new())];
    for (name, permille) in [
        ("approx_p50", 500),
        ("approx_p90", 900),
        ("approx_p95", 950),
        ("approx_p99", 990),
        ("approx_p999", 999),
    ] {
        v.push(AggregateUDF::from(ApproxQuantile::fixed(name, permille)));
    }
    v
}

impl AggregateUDFImpl for ApproxQuantile {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        let names: &[&str] = if self.fixed_permille.is_some() {
            check_arity(
                self.name,
                arg_types,
                1,
                2,
                "1 or 2 arguments (value [, alpha])",
            )?;
            &["value", "alpha"]
        } else {
            check_arity(
                self.name,
                arg_types,
                2,
                3,
                "2 or 3 arguments (value, q [, alpha])",
            )?;
            &["value", "q", "alpha"]
        };
        arg_types
            .iter()
            .zip(names)
            .map(|(t, n)| coerce_float(self.name, n, t))
            .collect()
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(output_type(SketchOutput::Quantile(0.5)))
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(sketch_state_fields(&args))
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let (input, output) = self.parts(&args)?;
        Ok(Box::new(SketchAccumulator::new(self.name, input, output)))
    }

    fn groups_accumulator_supported(&self, _args: AccumulatorArgs) -> bool {
        true
    }

    fn create_groups_accumulator(
        &self,
        args: AccumulatorArgs,
    ) -> Result<Box<dyn GroupsAccumulator>> {
        let (input, output) = self.parts(&args)?;
        Ok(groups_accumulator(self.name, input, output))
    }
}
