//! The physical scan of the `samples` table: [`SamplesExec`].
//!
//! One output partition per list of scan units (see the [module docs](super)); each partition
//! runs on a blocking thread, holds one unit's chunk at a time (counted against the query's
//! memory pool) and stops early once a `LIMIT` is reached. The node can cross process
//! boundaries: [`SamplesExec::to_portable`] describes its units in a form a distributed
//! query's worker turns back into a scan of the same rows ([`SamplesExec::from_portable`],
//! used by [`crate::distributed`]).

use std::fmt;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::memory_pool::MemoryConsumer;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{EquivalenceProperties, Partitioning, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchReceiverStreamBuilder;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use lockstep_engine::Store;
use lockstep_engine::metrics::MetricCatalog;
use lockstep_engine::store::{PortableScan, ScanRequest};

use super::{ClockVersion, ScanJob, ScanPlan, decode_columns, engine_err, run_scan, schema_for};

/// The `samples` scan: output partition `i` reads the units `assignment[i]` of its job's split
/// scan.
#[derive(Debug)]
pub struct SamplesExec {
    job: Arc<ScanJob>,
    assignment: Vec<Vec<usize>>,
    limit: Option<usize>,
    properties: Arc<PlanProperties>,
}

/// What a [`SamplesExec`] needs to be rebuilt in another process over the same store.
#[derive(Debug, Clone, PartialEq)]
pub struct PortableSamples {
    /// Label columns of the schema.
    pub labels: Vec<String>,
    /// Output columns (indices into the full schema).
    pub output: Vec<usize>,
    /// Clock-model version the times are corrected with (resolved when planning).
    pub clock_version: u64,
    /// Row limit per partition.
    pub limit: Option<usize>,
    /// Number of units each output partition reads (units numbered consecutively).
    pub partition_units: Vec<usize>,
    /// Series the planner's catalog knew (a worker's catalog must know as many).
    pub series_count: u64,
    /// The units; `None`: the scan selects nothing.
    pub scan: Option<PortableScan>,
    /// For a dataset of several nodes: each node with its series count when the scan was
    /// planned (the series ids; a worker opens the dataset pinned to it). Empty for one store.
    pub layout: Vec<(String, u32)>,
}

impl SamplesExec {
    pub(super) fn new(schema: SchemaRef, job: Arc<ScanJob>, assignment: Vec<Vec<usize>>, limit: Option<usize>) -> Self {
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(schema),
            Partitioning::UnknownPartitioning(assignment.len().max(1)),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        SamplesExec { job, assignment, limit, properties }
    }

    /// Rows stored in the units of the scan (before filters): its cost.
    pub fn rows(&self) -> u64 {
        let Some(split) = &self.job.split else { return 0 };
        self.assignment.iter().flatten().filter_map(|&u| split.units().get(u)).map(|u| u.rows()).sum()
    }

    /// Number of scan units.
    pub fn unit_count(&self) -> usize {
        self.assignment.iter().map(Vec::len).sum()
    }

    /// The same scan split into `tasks` scans of about equal rows (each unit in exactly one),
    /// each with this scan's partition count.
    pub fn split_tasks(&self, tasks: usize) -> Vec<SamplesExec> {
        let tasks = tasks.max(1);
        let partitions = self.assignment.len().max(1);
        let units: Vec<usize> = self.assignment.iter().flatten().copied().collect();
        let Some(split) = &self.job.split else {
            return (0..tasks).map(|_| self.with_assignment(vec![Vec::new(); partitions])).collect();
        };
        let all = split.units();
        let chosen: Vec<_> = units.iter().filter_map(|&u| all.get(u).cloned()).collect();
        super::assign(&chosen, tasks)
            .into_iter()
            .map(|task| {
                let task_units: Vec<usize> = task.iter().filter_map(|&i| units.get(i).copied()).collect();
                let picked: Vec<_> = task_units.iter().filter_map(|&u| all.get(u).cloned()).collect();
                let mut per_partition: Vec<Vec<usize>> = super::assign(&picked, partitions)
                    .into_iter()
                    .map(|p| p.iter().filter_map(|&i| task_units.get(i).copied()).collect())
                    .collect();
                per_partition.resize(partitions, Vec::new());
                self.with_assignment(per_partition)
            })
            .collect()
    }

    fn with_assignment(&self, assignment: Vec<Vec<usize>>) -> SamplesExec {
        SamplesExec::new(self.schema(), self.job.clone(), assignment, self.limit)
    }

    /// This scan in a form [`Self::from_portable`] rebuilds in another process.
    pub fn to_portable(&self) -> DfResult<PortableSamples> {
        let job = &self.job;
        let scan = match &job.split {
            None => None,
            Some(split) => {
                let units: Vec<usize> = self.assignment.iter().flatten().copied().collect();
                Some(split.portable(&units, &job.root).map_err(engine_err)?)
            }
        };
        Ok(PortableSamples {
            labels: job.labels.clone(),
            output: job.output.clone(),
            clock_version: job.plan.clocks.clocks().version(),
            limit: self.limit,
            partition_units: self.assignment.iter().map(Vec::len).collect(),
            series_count: job.plan.clocks.series_count() as u64,
            scan,
            layout: job.layout.clone(),
        })
    }

    /// Rebuilds a scan described by [`Self::to_portable`] over `store` (the same dataset,
    /// opened by this process) with `catalog` for the `domain` and `entity` columns.
    pub fn from_portable(store: &Store, catalog: &MetricCatalog, p: &PortableSamples) -> DfResult<SamplesExec> {
        let full = schema_for(&p.labels);
        if let Some(&bad) = p.output.iter().find(|&&c| c >= full.fields().len()) {
            return Err(DataFusionError::Plan(format!("samples scan: output column {bad} of {}", full.fields().len())));
        }
        let schema = Arc::new(full.project(&p.output)?);
        let clocks = ClockVersion::Pinned(p.clock_version).resolve(store)?;
        let split = match &p.scan {
            None => None,
            Some(scan) => Some(store.split_scan_portable(scan).map_err(engine_err)?),
        };
        let request = p.scan.as_ref().map(|s| ScanRequest { time: s.time, series: s.series.clone() });
        let plan = ScanPlan::for_request(store, catalog, clocks, &p.labels, request)?;
        let units = split.as_ref().map_or(0, |s| s.units().len());
        if p.partition_units.iter().sum::<usize>() != units {
            return Err(DataFusionError::Plan(format!(
                "samples scan: partitions name {} units, the scan has {units}",
                p.partition_units.iter().sum::<usize>()
            )));
        }
        if (plan.clocks.series_count() as u64) < p.series_count {
            return Err(DataFusionError::Plan(format!(
                "samples scan: this process's series catalog has {} series, the plan was made with {}",
                plan.clocks.series_count(),
                p.series_count
            )));
        }
        let mut assignment = Vec::with_capacity(p.partition_units.len());
        let mut next = 0;
        for &n in &p.partition_units {
            assignment.push((next..next + n).collect());
            next += n;
        }
        let job = Arc::new(ScanJob {
            decode: decode_columns(&p.output),
            output: p.output.clone(),
            plan,
            split,
            labels: p.labels.clone(),
            root: store.dir().to_path_buf(),
            layout: p.layout.clone(),
        });
        Ok(SamplesExec::new(schema, job, assignment, p.limit))
    }
}

impl DisplayAs for SamplesExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "SamplesExec: partitions={}, units={}, rows={}",
            self.assignment.len(),
            self.unit_count(),
            self.rows()
        )?;
        if let Some(limit) = self.limit {
            write!(f, ", limit={limit}")?;
        }
        Ok(())
    }
}

impl ExecutionPlan for SamplesExec {
    fn name(&self) -> &str {
        "SamplesExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(self: Arc<Self>, children: Vec<Arc<dyn ExecutionPlan>>) -> DfResult<Arc<dyn ExecutionPlan>> {
        if children.is_empty() {
            Ok(self)
        } else {
            Err(DataFusionError::Internal("SamplesExec has no children".into()))
        }
    }

    fn execute(&self, partition: usize, ctx: Arc<TaskContext>) -> DfResult<SendableRecordBatchStream> {
        let schema = self.schema();
        let units = match self.assignment.get(partition) {
            Some(units) => units.clone(),
            None if partition == 0 && self.assignment.is_empty() => Vec::new(),
            None => {
                return Err(DataFusionError::Internal(format!(
                    "SamplesExec partition {partition} of {}",
                    self.assignment.len()
                )));
            }
        };
        let mut builder = RecordBatchReceiverStreamBuilder::new(schema.clone(), 4);
        let tx = builder.tx();
        let job = self.job.clone();
        let mut left = self.limit.unwrap_or(usize::MAX);
        let wanted = left > 0;
        let reservation = MemoryConsumer::new(format!("SamplesScan[{partition}]")).register(ctx.memory_pool());
        builder.spawn_blocking(move || {
            let emit = |batch: RecordBatch| {
                let batch = if batch.num_rows() > left { batch.slice(0, left) } else { batch };
                left -= batch.num_rows();
                tx.blocking_send(Ok(batch)).is_ok() && left > 0
            };
            if wanted && let Err(e) = run_scan(&schema, &job, &units, &reservation, emit) {
                let _ = tx.blocking_send(Err(e));
            }
            Ok(())
        });
        Ok(builder.build())
    }
}
