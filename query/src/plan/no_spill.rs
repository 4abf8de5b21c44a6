//! Aggregates of whole groups' values (`array_agg`, `string_agg`) run without spilling.
//!
//! A grouped aggregate out of memory sorts its states to a file and later merges the files a
//! batch of rows from each at a time. A row of `array_agg`'s state is a whole group's values: a
//! batch of such rows, and one from every file at once, is many times the statement's limit,
//! allocated before any reservation is asked for (QA pass 23b: `array_agg` of 5.9 GB of text per
//! host took the process past 6 GB under a limit of 256 MiB before failing). Spilling cannot make
//! such a group fit, so those aggregates fail at the limit instead: [`NoSpillExec`] runs its input
//! (the aggregate) with the statement's runtime without spill files, and [`NoSpillExec::restore`]
//! below the aggregate gives its own input (a sort, a repartition) the statement's runtime back.

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::execution::disk_manager::{DiskManagerBuilder, DiskManagerMode};
use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};

/// The statement's runtime, kept in the task's config while a part of the plan runs without it.
#[derive(Debug)]
struct StatementRuntime(Arc<RuntimeEnv>);

/// Runs its input without spill files ([`NoSpillExec::new`]), or with the statement's runtime
/// back ([`NoSpillExec::restore`]).
#[derive(Debug, Clone)]
pub(crate) struct NoSpillExec {
    input: Arc<dyn ExecutionPlan>,
    restore: bool,
}

impl NoSpillExec {
    /// `input` run without spill files.
    pub(crate) fn new(input: Arc<dyn ExecutionPlan>) -> Self {
        NoSpillExec { input, restore: false }
    }

    /// `input` run with the statement's runtime, below a [`NoSpillExec::new`].
    pub(crate) fn restore(input: Arc<dyn ExecutionPlan>) -> Self {
        NoSpillExec { input, restore: true }
    }

    fn context(&self, ctx: Arc<TaskContext>) -> Result<Arc<TaskContext>> {
        let config = ctx.session_config();
        if self.restore {
            return Ok(match config.get_extension::<StatementRuntime>() {
                Some(runtime) => Arc::new(copy(&ctx, config.clone(), Arc::clone(&runtime.0))),
                None => ctx,
            });
        }
        let runtime = ctx.runtime_env();
        let without = RuntimeEnvBuilder {
            disk_manager: None,
            disk_manager_builder: Some(DiskManagerBuilder::default().with_mode(DiskManagerMode::Disabled)),
            ..RuntimeEnvBuilder::from_runtime_env(&runtime)
        }
        .build_arc()?;
        let config = config.clone().with_extension(Arc::new(StatementRuntime(runtime)));
        Ok(Arc::new(copy(&ctx, config, without)))
    }
}

/// `ctx` with `config` and `runtime`.
fn copy(ctx: &TaskContext, config: datafusion::prelude::SessionConfig, runtime: Arc<RuntimeEnv>) -> TaskContext {
    TaskContext::new(
        ctx.task_id(),
        ctx.session_id(),
        config,
        ctx.scalar_functions().clone(),
        ctx.higher_order_functions().clone(),
        ctx.aggregate_functions().clone(),
        ctx.window_functions().clone(),
        runtime,
    )
}

impl DisplayAs for NoSpillExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "{}", if self.restore { "SpillAgainExec" } else { "NoSpillExec" })
    }
}

impl ExecutionPlan for NoSpillExec {
    fn name(&self) -> &str {
        if self.restore { "SpillAgainExec" } else { "NoSpillExec" }
    }
    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
    }
    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }
    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }
    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }
    fn with_new_children(self: Arc<Self>, mut children: Vec<Arc<dyn ExecutionPlan>>) -> Result<Arc<dyn ExecutionPlan>> {
        if children.len() != 1 {
            return Err(datafusion::error::DataFusionError::Internal(format!(
                "{} has one input, got {}",
                self.name(),
                children.len()
            )));
        }
        Ok(Arc::new(NoSpillExec { input: children.swap_remove(0), restore: self.restore }))
    }
    fn execute(&self, partition: usize, ctx: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        self.input.execute(partition, self.context(ctx)?)
    }
}
