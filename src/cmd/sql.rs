//! `lockstep sql`: run read-only SQL — one statement or a script of several, from the command
//! line, a file or standard input, or typed in an interactive shell with history — under a
//! memory limit per statement, streaming each result. With `--server URL` the statements run
//! on a running `lockstep serve --pg-listen` instead of a store directory.

use std::io::{IsTerminal, Read};
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use datafusion::execution::memory_pool::MemoryConsumer;
use futures::StreamExt;
use lockstep_engine::Store;
use lockstep_query::script::{is_incomplete, split_statements};
use lockstep_query::{ClockVersion, QueryEngine, QueryError, QueryLimits};
use tokio::runtime::Runtime;

use crate::output::{Format, PipeWriter, Printer};

/// Arguments of `lockstep sql`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    store: super::StoreArgs,
    /// SQL to run: one statement, or several separated by `;`; `-` reads them from standard
    /// input. Without it (and without --file) standard input is read, or, on a terminal, an
    /// interactive shell starts.
    query: Option<String>,
    /// Run the statements in this file.
    #[arg(short = 'f', long, conflicts_with = "query", value_name = "FILE")]
    file: Option<PathBuf>,
    /// Output format. csv and json print rows as they are produced; table holds the whole
    /// result (within the memory limit) to align its columns. json writes every column of a
    /// row (a NULL as null), and (with csv's nested columns, which are JSON text) a float that
    /// is not finite as "NaN", "Infinity" or "-Infinity".
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// Correct `samples.time` with this clock-model version instead of the newest (see the
    /// `clock_models` table; 0 = uncorrected), to reproduce an earlier result.
    #[arg(long)]
    clock_version: Option<u64>,
    /// Memory limit of each statement in MiB (0 = unbounded). Sorts and aggregates spill to
    /// the temporary directory before they reach it; a statement that still needs more fails.
    /// Default: a quarter of the machine's memory, at least 256 MiB.
    #[arg(long, env = "LOCKSTEP_QUERY_MEMORY_LIMIT_MB", value_name = "MIB")]
    memory_limit_mb: Option<u64>,
    /// Query a running server instead of --data-dir: the PostgreSQL listener of `lockstep
    /// serve --pg-listen`, as `postgres://[user[:token]@]host:port` (the server's limits
    /// apply, not --memory-limit-mb; the newest clock models).
    #[arg(long, env = "LOCKSTEP_SERVER", value_name = "URL", conflicts_with = "clock_version")]
    server: Option<String>,
    /// Run the statements distributed on these `lockstep worker` processes (comma-separated
    /// `host:port`), this process planning them: each worker reads its share of the data
    /// files. Workers must serve the same --data-url (or --data-dir). See docs/distributed.md.
    #[arg(long, env = "LOCKSTEP_WORKERS", value_name = "HOST:PORT,...", conflicts_with = "server")]
    workers: Option<String>,
    /// With --workers: rows of stored samples per task of a scan (a scan of n rows runs on
    /// ceil(n / rows) workers, at most all of them; a statement whose stages all have one task,
    /// as with a single worker, runs in this process).
    #[arg(long, default_value_t = lockstep_query::distributed::DEFAULT_ROWS_PER_TASK, value_name = "ROWS",
        value_parser = clap::value_parser!(u64).range(1..))]
    rows_per_task: u64,
}

/// Where statements run.
enum Backend {
    /// A read-only snapshot of the store directory.
    Store(Arc<Store>),
    /// A running server.
    Server(crate::pg::client::Remote),
}

impl Backend {
    fn open(args: &Args, runtime: &Runtime) -> anyhow::Result<Backend> {
        Ok(match &args.server {
            Some(url) => Backend::Server(runtime.block_on(crate::pg::client::Remote::connect(url))?),
            None => Backend::Store(Arc::new(args.store.open_read_only()?)),
        })
    }

    /// Runs one statement and prints its result as it arrives.
    fn run(&self, args: &Args, runtime: &Runtime, sql: &str) -> anyhow::Result<Printed> {
        match self {
            Backend::Store(store) => runtime.block_on(run_statement(args, store.clone(), sql)),
            Backend::Server(remote) => runtime.block_on(run_remote(args, remote, sql)),
        }
    }
}

/// Runs the statements (or the shell) and prints each result as it arrives.
pub fn run(args: Args) -> anyhow::Result<()> {
    let script = match (&args.query, &args.file) {
        (Some(q), _) if q != "-" => Some(q.clone()),
        (_, Some(file)) => Some(std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?),
        (None, None) if std::io::stdin().is_terminal() => None,
        _ => {
            let mut text = String::new();
            std::io::stdin().read_to_string(&mut text).context("reading SQL from standard input")?;
            Some(text)
        }
    };
    let runtime = crate::runtime::build()?;
    let result = match script {
        Some(text) => run_script(&args, &runtime, &text),
        None => shell(&args, &runtime),
    };
    // Every statement has run to completion; the process ends next, so the worker threads are
    // not waited for.
    runtime.shutdown_background();
    result
}

/// Runs every statement of `text` in order against one snapshot of the store; stops at the
/// first error, which names the statement and its line when there are several.
fn run_script(args: &Args, runtime: &Runtime, text: &str) -> anyhow::Result<()> {
    let statements = split_statements(text);
    anyhow::ensure!(!statements.is_empty(), "no SQL statement given");
    let backend = Backend::open(args, runtime)?;
    let several = statements.len() > 1;
    for (n, statement) in statements.iter().enumerate() {
        if several && n > 0 && args.format == Format::Table {
            println!();
        }
        match backend.run(args, runtime, &statement.sql) {
            Ok(Printed::All) => {}
            // The reader went away (`| head`): stop quietly.
            Ok(Printed::ReaderGone) => return Ok(()),
            Err(e) if several => {
                return Err(e.context(format!("statement {} (line {})", n + 1, statement.line)));
            }
            Err(e) => return Err(e),
        }
    }
    // The process ends next: the store's catalog and snapshot (tens of thousands of small
    // allocations for a store of 10 k series) are left to the exit instead of freed one by
    // one. A read-only store has nothing to write back.
    std::mem::forget(backend);
    Ok(())
}

/// The interactive shell: statements end with `;` (a line without one asks for more), each
/// runs on a fresh snapshot (it sees what a running server wrote since), an error is printed
/// and the shell goes on. History in `~/.lockstep_history`. `\q`, `quit`, `exit` or Ctrl-D
/// leave; Ctrl-C drops the statement being typed.
fn shell(args: &Args, runtime: &Runtime) -> anyhow::Result<()> {
    use rustyline::error::ReadlineError;
    // Fail early (not at the first statement) when the store or server is not there. A
    // server connection is kept; a store is opened anew for each statement.
    let server = match Backend::open(args, runtime)? {
        Backend::Server(remote) => Some(Backend::Server(remote)),
        Backend::Store(_) => None,
    };
    let mut editor = rustyline::DefaultEditor::new().context("starting the line editor")?;
    let history = std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".lockstep_history"));
    if let Some(path) = &history {
        // A missing history file is the first session.
        let _ = editor.load_history(path);
    }
    let on = match &args.server {
        Some(url) => url.split_once('@').map_or(url.as_str(), |(_, host)| host).to_string(),
        None => args.store.describe(),
    };
    eprintln!("Lockstep SQL on {on} (read-only). End statements with ';'; \\q quits.");
    let mut pending = String::new();
    loop {
        let prompt = if pending.is_empty() { "lockstep> " } else { "       -> " };
        match editor.readline(prompt) {
            Ok(line) => {
                if pending.is_empty() && matches!(line.trim(), "\\q" | "quit" | "exit") {
                    break;
                }
                pending.push_str(&line);
                pending.push('\n');
                if is_incomplete(&pending) {
                    continue;
                }
                let _ = editor.add_history_entry(pending.trim_end());
                for statement in split_statements(&pending) {
                    let result = match &server {
                        Some(backend) => backend.run(args, runtime, &statement.sql),
                        None => args
                            .store
                            .open_read_only()
                            .and_then(|store| runtime.block_on(run_statement(args, Arc::new(store), &statement.sql))),
                    };
                    if let Err(e) = result {
                        eprintln!("error: {}", crate::error_text(&e));
                    }
                }
                pending.clear();
            }
            Err(ReadlineError::Interrupted) => pending.clear(),
            Err(ReadlineError::Eof) => break,
            Err(e) => return Err(e).context("reading a line"),
        }
    }
    if let Some(path) = &history
        && let Err(e) = editor.save_history(path)
    {
        eprintln!("warning: history not saved to {}: {e}", path.display());
    }
    Ok(())
}

/// How far a result got printed.
enum Printed {
    /// Every row.
    All,
    /// The reader of standard output went away.
    ReaderGone,
}

/// Runs one statement and prints its result as it arrives.
async fn run_statement(args: &Args, store: Arc<Store>, sql: &str) -> anyhow::Result<Printed> {
    let limits = args.memory_limit_mb.map_or_else(QueryLimits::default, QueryLimits::memory_mb);
    let clock = args.clock_version.map_or(ClockVersion::Newest, ClockVersion::Pinned);
    let engine = match &args.workers {
        None => QueryEngine::with_limits(store, clock, limits)?,
        Some(list) => {
            let cluster = lockstep_query::distributed::ClusterConfig {
                workers: lockstep_query::distributed::ClusterConfig::parse_workers(list)
                    .map_err(|e| anyhow::anyhow!("--workers: {e}"))?,
                rows_per_task: args.rows_per_task,
                dataset: args.store.dataset_name(),
            };
            QueryEngine::distributed(store, clock, limits, &cluster)?
        }
    };
    // The transport's errors do not say which worker: name the ones given. (A connection that
    // broke mid-stream — a worker killed — is an h2 error; an address that answers HTTP but is
    // no worker lacks the gRPC status.)
    const TRANSPORT: [&str; 4] =
        ["transport error", "h2 protocol error", "error reading a body", "grpc-status header missing"];
    let worker_error = |e: anyhow::Error| match &args.workers {
        Some(list) if TRANSPORT.iter().any(|t| format!("{e:#}").contains(t)) => {
            e.context(format!("a worker of --workers {list} failed or stopped answering"))
        }
        _ => e,
    };
    let (mut stream, distributed) = engine.stream_planned(sql).await.map_err(|e| worker_error(e.into()))?;
    let mut words = sql.split_whitespace().map(str::to_ascii_lowercase);
    let explain = words.next().as_deref() == Some("explain") && words.next().as_deref() != Some("analyze");
    if args.workers.is_some() && explain {
        eprintln!(
            "note: EXPLAIN shows the plan before it is cut into stages for --workers; EXPLAIN ANALYZE shows the stages"
        );
    } else if let Some(list) = args.workers.as_deref().filter(|_| !distributed) {
        // The planner keeps a plan whose every stage has one task on the coordinator.
        let why = if list.split(',').filter(|w| !w.trim().is_empty()).count() == 1 {
            "with one worker every stage has one task".to_string()
        } else {
            format!(
                "each of its stages has one task (its scans read at most --rows-per-task {} rows)",
                args.rows_per_task
            )
        };
        eprintln!("note: this statement runs in this process, not on --workers: {why}");
    }
    // The table's batches are held until the end: they count against the statement's limit.
    let held = MemoryConsumer::new("the table output (--format csv or json streams instead)")
        .register(&engine.context().runtime_env().memory_pool);
    let mut out = PipeWriter::new(std::io::stdout().lock());
    let mut printer = Printer::new(args.format, &mut out);
    let mut result = Ok(());
    let mut printed = false;
    while let Some(batch) = stream.next().await {
        let batch = batch.map_err(|e| worker_error(e.into()))?;
        if args.format == Format::Table {
            held.try_grow(batch.get_array_memory_size()).map_err(QueryError::from)?;
        }
        printed = true;
        result = printer.write(batch);
        if result.is_err() {
            break;
        }
    }
    // No rows: the columns still print (the CSV header, the table's head), as for any result.
    if result.is_ok() && !printed {
        result = printer.write(arrow::array::RecordBatch::new_empty(stream.schema()));
    }
    if result.is_ok() {
        result = printer.finish();
    } else {
        drop(printer);
    }
    if out.closed() { Ok(Printed::ReaderGone) } else { result.map(|()| Printed::All) }
}

/// Runs one statement on a server and prints its rows as they arrive.
async fn run_remote(args: &Args, remote: &crate::pg::client::Remote, sql: &str) -> anyhow::Result<Printed> {
    let mut out = PipeWriter::new(std::io::stdout().lock());
    let mut printer = Printer::new(args.format, &mut out);
    let mut failed = None;
    let result = remote
        .run(sql, |batch| match printer.write(batch) {
            Ok(()) => Ok(true),
            Err(e) => {
                failed = Some(e);
                Ok(false)
            }
        })
        .await;
    let result = match (result, failed) {
        (Err(e), _) | (Ok(()), Some(e)) => {
            drop(printer);
            Err(e)
        }
        (Ok(()), None) => printer.finish(),
    };
    if out.closed() { Ok(Printed::ReaderGone) } else { result.map(|()| Printed::All) }
}
