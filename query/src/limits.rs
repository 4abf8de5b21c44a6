//! Memory limits for SQL: every [`QueryEngine`](crate::QueryEngine) runs its queries under a
//! bounded memory pool, and operators that can spill do so to a temporary directory.
//!
//! **The pool.** DataFusion's [`FairSpillPool`] (operators that can spill share what the
//! others leave, so one sort cannot starve another) wrapped in a [`TrackConsumersPool`] (so an
//! error can name the largest consumers) and in [`LimitPool`], which rewrites the
//! "resources exhausted" error into one sentence: which limit, which operator asked for how
//! much, and the largest consumers. [`QueryError`] turns that error into
//! [`QueryError::MemoryLimit`].
//!
//! **Accounted.** DataFusion's sorts, hash aggregates, hash/cross/nested-loop/sort-merge joins,
//! repartitions, top-k and sort-preserving merges reserve their buffers in the pool. The
//! Lockstep aggregates (`quantile_cont`/`p50`…, `lag_corr`, `onset`, `change_points`,
//! `gap_fill`, `increase`/`rate`, `ddsketch`, …) report their state size through
//! `Accumulator::size`/`GroupsAccumulator::size`, which the aggregate operator reserves, so
//! whole-series aggregates count in full. `gap_fill`, whose result (the whole grid, about 17
//! bytes a bucket per group) is far larger than its state, also reserves its result lists in
//! the pool before building them (all the groups of an emission at once; held until its next
//! emission or the end of the aggregate) and fails with the limit error naming it when they
//! do not fit; the other aggregates' results are no larger than about their state (a scalar,
//! a struct, a sketch; `change_points` at most one item per two samples). The results of the
//! scalar functions that can grow far beyond their arguments are bounded by the limit too
//! (`functions/bounded.rs`). The `samples` scan reserves the decoded rows of the
//! time partition it is converting (without ever failing on it: it cannot spill, and a scan
//! that fails because a sort holds its share would be worse than a sort that spills earlier).
//! `array_agg` and `string_agg` are wrapped (`functions/bounded_agg.rs`): the text behind their
//! input views counts, and so do their results as windows. **Not accounted:** other window
//! functions (`OVER (...)`; `gap_fill`'s lists excepted), the
//! batches in flight between operators (each `samples` scan partition keeps at most four in
//! its channel, a coalesce or repartition a few per partition; the scan's batches are of the
//! session's `batch_size`, 8192 rows, so this is about 20 MB per partition for a wide
//! `SELECT *`), and small in-memory tables (topology, jobs, `diagnose()`, `clock_models`).
//!
//! **Spilling.** Sorts, hash aggregates in their final phase (including the single-phase
//! whole-series aggregates, whose state is then spilled as lists; not a grouped `array_agg` or
//! `string_agg`, which fails instead: `plan/no_spill.rs`), sort-merge and nested-loop
//! joins and repartitions spill to files in the OS temporary directory (`TMPDIR`) before they
//! fail. Hash joins and cross joins keep their build side in memory: they fail with the error
//! instead.
//!
//! **Default limit.** A quarter of the machine's memory (the smaller of `MemTotal` and the
//! cgroup limit, so a container's limit counts), at least 256 MiB; 1 GiB where that cannot be
//! read. A quarter because the pool does not see everything (see above: rendering, in-flight
//! batches, the allocator's own slack; the PostgreSQL listener refuses a row whose text would
//! pass the statement's limit, `src/pg/size.rs`) and because the ingestion server may share the machine;
//! a fixed 1 GiB would either starve a large workstation or still be OOM-killed in a small
//! container. `LOCKSTEP_QUERY_MEMORY_LIMIT_MB` overrides it for every engine built with
//! [`QueryLimits::from_env`] (which [`QueryEngine::new`](crate::QueryEngine::new) uses); `0`
//! means unbounded.
//!
//! **Several statements.** Each engine has its own pool, so N statements at once may use N
//! limits. A server's SQL listeners therefore also give every statement's pool one
//! [`SharedBudget`] ([`QueryLimits::shared`]; `lockstep serve --query-memory-total-mb`, by
//! default [`default_shared_bytes`]): each byte a statement reserves is taken from its own limit
//! and from the budget, and a statement that finds the budget used up by the others spills or
//! fails with the limit error naming the budget, instead of the server growing until the
//! kernel kills it, ingestion included.

use std::cmp::Reverse;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::DiskManager;
use datafusion::execution::config::SessionConfig;
use datafusion::execution::disk_manager::DiskManagerMode;
use datafusion::execution::memory_pool::{
    FairSpillPool, MemoryConsumer, MemoryLimit, MemoryPool, MemoryReservation, TrackConsumersPool, UnboundedMemoryPool,
};
use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};

use crate::error::{QueryError, Result};

/// The environment variable that sets the memory limit in MiB (`0` = unbounded).
pub const MEMORY_LIMIT_ENV: &str = "LOCKSTEP_QUERY_MEMORY_LIMIT_MB";

const MIB: usize = 1024 * 1024;
/// The smallest default limit.
const MIN_DEFAULT: usize = 256 * MIB;
/// The default limit where the machine's memory cannot be read.
const FALLBACK_DEFAULT: usize = 1024 * MIB;
/// How every memory-limit error of [`LimitPool`] starts (recognised by
/// [`QueryError`](crate::QueryError)).
pub(crate) const EXCEEDED: &str = "query exceeded the memory limit of ";
/// Consumers named in a memory-limit error.
const TOP_CONSUMERS: usize = 3;

/// Resource limits of a [`QueryEngine`](crate::QueryEngine): one pool shared by every query the
/// engine runs at a time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryLimits {
    /// The memory pool's size in bytes; `None` = unbounded (nothing spills, nothing fails).
    pub memory_bytes: Option<usize>,
    /// Whether operators that can spill may write temporary files (default `true`). Without
    /// spilling, a sort or aggregate that exceeds its share fails with the limit error.
    pub spill: bool,
    /// Memory shared with the other engines of a server (its statements over the network
    /// listeners): this engine's pool also takes every byte from it, so that all of them
    /// together stay within its limit. `None`: this engine's limit only.
    pub shared: Option<Arc<SharedBudget>>,
}

impl Default for QueryLimits {
    /// [`default_memory_bytes`] with spilling.
    fn default() -> Self {
        QueryLimits { memory_bytes: Some(default_memory_bytes()), spill: true, shared: None }
    }
}

impl QueryLimits {
    /// No memory limit (DataFusion's own default).
    pub fn unbounded() -> Self {
        QueryLimits { memory_bytes: None, spill: true, shared: None }
    }

    /// A limit of `mb` MiB, `0` meaning unbounded; spilling on.
    pub fn memory_mb(mb: u64) -> Self {
        let bytes = usize::try_from(mb).ok().and_then(|mb| mb.checked_mul(MIB)).unwrap_or(usize::MAX);
        QueryLimits { memory_bytes: (mb > 0).then_some(bytes), spill: true, shared: None }
    }

    /// The default, with the limit taken from `LOCKSTEP_QUERY_MEMORY_LIMIT_MB` when it is set.
    pub fn from_env() -> Result<Self> {
        match std::env::var(MEMORY_LIMIT_ENV) {
            Err(std::env::VarError::NotPresent) => Ok(Self::default()),
            Ok(text) if !text.trim().is_empty() => match text.trim().parse::<u64>() {
                Ok(mb) => Ok(Self::memory_mb(mb)),
                Err(_) => Err(invalid_env(&text)),
            },
            Ok(text) => Err(invalid_env(&text)),
            Err(std::env::VarError::NotUnicode(text)) => Err(invalid_env(&text.to_string_lossy())),
        }
    }

    /// `config` fitted to the limit. Each sort partition that may spill sets
    /// `sort_spill_reservation_bytes` (DataFusion's default: 10 MiB) aside to merge its sorted
    /// runs; with a small limit and many partitions those alone would exceed it, so they are
    /// capped at an eighth of the limit shared by the partitions (at least 256 KiB).
    pub fn fit(&self, mut config: SessionConfig) -> SessionConfig {
        if let Some(limit) = self.memory_bytes {
            let partitions = config.target_partitions().max(1);
            let cap = (limit / 8 / partitions).max(256 * 1024);
            let execution = &mut config.options_mut().execution;
            execution.sort_spill_reservation_bytes = execution.sort_spill_reservation_bytes.min(cap);
        }
        config
    }

    /// The DataFusion runtime: the bounded pool described in the [module docs](self) and a
    /// disk manager for spill files (or none when spilling is off).
    pub fn runtime_env(&self) -> DfResult<Arc<RuntimeEnv>> {
        let mode = if self.spill { DiskManagerMode::OsTmpDirectory } else { DiskManagerMode::Disabled };
        let builder = RuntimeEnvBuilder::new().with_disk_manager_builder(DiskManager::builder().with_mode(mode));
        let builder = match (self.memory_bytes, &self.shared) {
            (Some(limit), shared) => {
                builder.with_memory_pool(Arc::new(LimitPool::new(limit).with_shared(shared.clone())))
            }
            // No limit of its own: the shared one is the most it can have.
            (None, Some(shared)) => {
                builder.with_memory_pool(Arc::new(LimitPool::new(shared.limit).with_shared(Some(shared.clone()))))
            }
            (None, None) => builder.with_memory_pool(Arc::new(UnboundedMemoryPool::default())),
        };
        builder.build_arc()
    }
}

fn invalid_env(text: &str) -> QueryError {
    QueryError::DataFusion(DataFusionError::Configuration(format!(
        "{MEMORY_LIMIT_ENV}={text:?} is not a whole number of MiB (0 = unbounded)"
    )))
}

/// Memory shared by several engines' pools ([`QueryLimits::shared`]): the statements of a
/// server's SQL listeners, each with its own limit, together within this one. A statement
/// that asks for more than is left spills what it can and otherwise fails with the limit error,
/// naming this limit; the server's ingestion is not starved by its queries.
#[derive(Debug)]
pub struct SharedBudget {
    limit: usize,
    used: AtomicUsize,
    /// How the limit is set, for the error (`--query-memory-total-mb`).
    setting: &'static str,
}

impl SharedBudget {
    /// A budget of `limit` bytes, set by `setting` (named in errors).
    pub fn new(limit: usize, setting: &'static str) -> Arc<Self> {
        Arc::new(SharedBudget { limit, used: AtomicUsize::new(0), setting })
    }

    /// Bytes taken by every pool now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// The limit in bytes.
    pub fn limit(&self) -> usize {
        self.limit
    }

    fn try_take(&self, bytes: usize) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| u.checked_add(bytes).filter(|&t| t <= self.limit))
            .is_ok()
    }

    fn take(&self, bytes: usize) {
        self.used.fetch_add(bytes, Ordering::AcqRel);
    }

    fn give(&self, bytes: usize) {
        let _ = self.used.fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| Some(u.saturating_sub(bytes)));
    }
}

/// Budgets are the same only as one object (their counters are shared, not their values).
impl PartialEq for SharedBudget {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}

impl Eq for SharedBudget {}

/// The default [`SharedBudget`] of a server's statements: half the machine's (or the cgroup's)
/// memory, at least 512 MiB; 2 GiB when neither can be read. Half, so that two statements at
/// the default limit run side by side and the ingestion keeps the other half.
pub fn default_shared_bytes() -> usize {
    match system_memory_bytes() {
        Some(total) => (total / 2).max(2 * MIN_DEFAULT),
        None => 2 * FALLBACK_DEFAULT,
    }
}

/// The default memory limit: a quarter of the machine's (or the cgroup's) memory, at least
/// 256 MiB; 1 GiB when neither can be read. See the [module docs](self) for why.
pub fn default_memory_bytes() -> usize {
    match system_memory_bytes() {
        Some(total) => (total / 4).max(MIN_DEFAULT),
        None => FALLBACK_DEFAULT,
    }
}

/// `MemTotal` from `/proc/meminfo`, lowered to the cgroup (v2 or v1) memory limit if smaller.
fn system_memory_bytes() -> Option<usize> {
    let total = std::fs::read_to_string("/proc/meminfo").ok().and_then(|text| {
        let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
        let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
        kib.checked_mul(1024)
    })?;
    let cgroup = ["/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"]
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok()?.trim().parse::<usize>().ok())
        .min();
    Some(cgroup.map_or(total, |c| c.min(total)))
}

/// A size in binary units: "1024 MiB" for whole MiB, else "1.5 MiB", "640.0 KiB", "12 B".
pub(crate) fn format_size(bytes: usize) -> String {
    const KIB: usize = 1024;
    const GIB: usize = 1024 * MIB;
    match bytes {
        b if b >= MIB && b.is_multiple_of(MIB) => format!("{} MiB", b / MIB),
        b if b >= GIB => format!("{:.1} GiB", b as f64 / GIB as f64),
        b if b >= MIB => format!("{:.1} MiB", b as f64 / MIB as f64),
        b if b >= KIB => format!("{:.1} KiB", b as f64 / KIB as f64),
        b => format!("{b} B"),
    }
}

/// The bounded pool: [`FairSpillPool`] with consumer tracking, whose "resources exhausted"
/// error says which limit was hit, by whom, and who holds the memory.
#[derive(Debug)]
pub struct LimitPool {
    inner: TrackConsumersPool<FairSpillPool>,
    limit: usize,
    /// Also takes every byte from this budget (see [`QueryLimits::shared`]).
    shared: Option<Arc<SharedBudget>>,
}

impl LimitPool {
    /// A pool of `limit` bytes.
    pub fn new(limit: usize) -> Self {
        let top = NonZeroUsize::new(TOP_CONSUMERS).unwrap_or(NonZeroUsize::MIN);
        LimitPool { inner: TrackConsumersPool::new(FairSpillPool::new(limit), top), limit, shared: None }
    }

    /// The pool taking its bytes from `shared` too.
    pub fn with_shared(mut self, shared: Option<Arc<SharedBudget>>) -> Self {
        self.shared = shared;
        self
    }

    /// The error for `reservation` failing to grow by `additional` bytes because `shared` is
    /// used up by every statement together.
    fn shared_exceeded(&self, shared: &SharedBudget, reservation: &MemoryReservation, additional: usize) -> String {
        format!(
            "{EXCEEDED}{} shared by every statement of the server ({}; {} in use, {} of it by this statement): \
             {} needed {} more",
            format_size(shared.limit),
            shared.setting,
            format_size(shared.used()),
            format_size(self.inner.reserved()),
            reservation.consumer().name(),
            format_size(additional),
        )
    }

    /// The error for `reservation` failing to grow by `additional` bytes.
    fn exceeded(&self, reservation: &MemoryReservation, additional: usize) -> String {
        let name = reservation.consumer().name();
        let mut consumers = self.inner.metrics();
        consumers.retain(|c| c.reserved > 0 && c.name != name);
        consumers.sort_by_key(|c| Reverse(c.reserved));
        let largest = consumers
            .iter()
            .take(TOP_CONSUMERS)
            .map(|c| format!("{} {}", c.name, format_size(c.reserved)))
            .collect::<Vec<_>>()
            .join(", ");
        let held = match reservation.size() {
            0 => String::new(),
            n => format!(" on top of its {}", format_size(n)),
        };
        let others = if largest.is_empty() { String::new() } else { format!("; largest others: {largest}") };
        format!(
            "{EXCEEDED}{}: {name} needed {} more{held} ({} in use{others})",
            format_size(self.limit),
            format_size(additional),
            format_size(self.inner.reserved()),
        )
    }
}

impl std::fmt::Display for LimitPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}(limit: {}, {})", self.name(), format_size(self.limit), self.inner)
    }
}

impl MemoryPool for LimitPool {
    fn name(&self) -> &str {
        "lockstep_limit"
    }

    fn register(&self, consumer: &MemoryConsumer) {
        self.inner.register(consumer);
    }

    fn unregister(&self, consumer: &MemoryConsumer) {
        self.inner.unregister(consumer);
    }

    fn grow(&self, reservation: &MemoryReservation, additional: usize) {
        self.inner.grow(reservation, additional);
        if let Some(shared) = &self.shared {
            shared.take(additional);
        }
    }

    fn shrink(&self, reservation: &MemoryReservation, shrink: usize) {
        self.inner.shrink(reservation, shrink);
        if let Some(shared) = &self.shared {
            shared.give(shrink);
        }
    }

    fn try_grow(&self, reservation: &MemoryReservation, additional: usize) -> DfResult<()> {
        // More than the statement's own limit could ever give: that limit is the one to name,
        // whatever the shared budget says (QA pass 23b: a gap_fill of 19.8 GiB under a 512 MiB
        // statement limit was refused naming --query-memory-total-mb, which would not help).
        let own_is_tighter = self.shared.as_ref().is_none_or(|shared| self.limit < shared.limit);
        if own_is_tighter && self.inner.reserved().saturating_add(additional) > self.limit {
            return Err(DataFusionError::ResourcesExhausted(self.exceeded(reservation, additional)));
        }
        if let Some(shared) = &self.shared
            && !shared.try_take(additional)
        {
            return Err(DataFusionError::ResourcesExhausted(self.shared_exceeded(shared, reservation, additional)));
        }
        self.inner.try_grow(reservation, additional).map_err(|e| {
            if let Some(shared) = &self.shared {
                shared.give(additional);
            }
            match e.find_root() {
                DataFusionError::ResourcesExhausted(_) => {
                    DataFusionError::ResourcesExhausted(self.exceeded(reservation, additional))
                }
                _ => e,
            }
        })
    }

    fn reserved(&self) -> usize {
        self.inner.reserved()
    }

    fn memory_limit(&self) -> MemoryLimit {
        MemoryLimit::Finite(self.limit)
    }
}

/// What a pool still holds when it goes (nothing, when every reservation was freed) goes back
/// to the shared budget.
impl Drop for LimitPool {
    fn drop(&mut self) {
        if let Some(shared) = &self.shared {
            shared.give(self.inner.reserved());
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
