//! The Tokio runtime of the commands that plan and run SQL (`serve`, `sql`, `worker`, `demo`).
//!
//! Its threads — the workers and the blocking pool — get [`STACK_BYTES`] of stack instead of
//! Tokio's 2 MiB: DataFusion clones, drops and rewrites expression trees one frame per level,
//! and a statement at the nesting bound of `lockstep_query::nesting` (1,000 levels) must fit on
//! any thread that plans or runs it, in debug builds too. The stack is reserved address space;
//! only the pages a thread touches take memory.

/// Stack of every runtime thread.
pub const STACK_BYTES: usize = 16 << 20;

/// A multi-threaded runtime with every driver enabled and [`STACK_BYTES`] stacks.
pub fn build() -> std::io::Result<tokio::runtime::Runtime> {
    builder().build()
}

fn builder() -> tokio::runtime::Builder {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all().thread_stack_size(STACK_BYTES);
    builder
}

/// The runtime of `serve`'s SQL statements, apart from the one that takes writes: a statement
/// that keeps its threads busy without yielding (a whole-series aggregate over millions of
/// rows) holds up only other statements. One worker per core, as the ingestion's runtime.
pub fn build_for_statements() -> std::io::Result<tokio::runtime::Runtime> {
    builder().thread_name("lockstep-sql").build()
}
