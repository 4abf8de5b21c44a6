//! Names of the metrics that Lockstep's own logic (the diagnosis, its report) relies on, one
//! definition each; the catalog (`builtin.rs`) describes them with the same constants.

/// Duration of one training step per rank (application metric), seconds.
pub const STEP_TIME: &str = "train_step_duration_seconds";
/// Time a rank waited for its data loader per step, seconds.
pub const DATALOADER_WAIT: &str = "dataloader_wait_seconds";
/// Execution time of one collective on one rank (NCCL Inspector), microseconds.
pub const COLLECTIVE_EXEC_TIME: &str = "nccl_collective_exec_time_microseconds";
/// Storage pool read latency quantiles (`quantile` label), seconds.
pub const STORAGE_READ_LATENCY: &str = "storage_read_latency_seconds";
/// Fraction of time at least one warp was active on an SM (dcgm-exporter).
pub const SM_ACTIVE: &str = "DCGM_FI_PROF_SM_ACTIVE";
/// GPU utilisation in percent (dcgm-exporter).
pub const GPU_UTIL: &str = "DCGM_FI_DEV_GPU_UTIL";
/// Clock throttle reasons bitmask (dcgm-exporter, older name).
pub const THROTTLE_REASONS: &str = "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS";
/// Clock event reasons bitmask (dcgm-exporter, newer name of [`THROTTLE_REASONS`]).
pub const CLOCKS_EVENT_REASONS: &str = "DCGM_FI_DEV_CLOCKS_EVENT_REASONS";
/// Seconds that runnable tasks waited for a CPU (node_exporter pressure), counter.
pub const CPU_PRESSURE_WAITING: &str = "node_pressure_cpu_waiting_seconds_total";
