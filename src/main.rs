//! The `lockstep` command-line binary: the edges (files, flags, terminal) around the engine,
//! the query layer and ingestion.

mod cmd;
mod flight;
mod netsql;
mod output;
mod pg;
mod runtime;

use clap::{Parser, Subcommand};

/// Lockstep: one synchronised timeline of compute, network and storage telemetry for
/// diagnosing slow distributed training.
#[derive(Debug, Parser)]
#[command(name = "lockstep", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Import a bundle directory (samples.parquet or samples.csv) into a store.
    Import(cmd::import::Args),
    /// Run a read-only SQL query against a store.
    Sql(cmd::sql::Args),
    /// Read every data file of a store end to end (checksums, decoding, the manifest's facts)
    /// and report every problem; read-only, safe beside a running server.
    Check(cmd::check::Args),
    /// Write a simulated cluster bundle with an injected fault.
    Simulate(cmd::simulate::Args),
    /// Diagnose a job's slowdown: the bottleneck, the root cause, the evidence chain, a report.
    Diagnose(cmd::diagnose::Args),
    /// The main job: simulate a 256-GPU job with a fault, import it, show the evidence.
    Demo(cmd::demo::Args),
    /// Run the gRPC ingestion server (native writes, clock sync, OTLP) until SIGTERM.
    Serve(Box<cmd::serve::Args>),
    /// Run a distributed-SQL worker over a store until SIGTERM (`lockstep sql --workers`).
    Worker(cmd::worker::Args),
}

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("LOCKSTEP_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    // A decoder panic on a corrupt file is caught and reported as that file's error; the
    // default hook would print it, with a backtrace, before the error line.
    lockstep_engine::datafile::quiet_caught_panics();
    let cli = Cli::parse();
    if !matches!(cli.command, Command::Serve(_)) {
        // Scans allocate and free megabyte column buffers per row group; with glibc's default
        // thresholds each one is a fresh `mmap` the kernel zeroes again (a `sum(value)` over
        // 17 M rows spent as much time in the kernel as in user space). `serve` sets these
        // itself, from its memory limit.
        lockstep_ingest::server::memory::tune_allocator(None);
    }
    let result = match cli.command {
        Command::Import(args) => cmd::import::run(args),
        Command::Sql(args) => cmd::sql::run(args),
        Command::Check(args) => cmd::check::run(args),
        Command::Simulate(args) => cmd::simulate::run(args),
        Command::Demo(args) => cmd::demo::run(args),
        Command::Diagnose(args) => cmd::diagnose::run(args),
        Command::Serve(args) => cmd::serve::run(*args),
        Command::Worker(args) => cmd::worker::run(args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", error_text(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

/// The error and its causes joined by ": ", like `{:#}`, but each text once: a cause whose
/// text (or its text after a "kind error: " prefix) an outer message already contains is left
/// out, and a cause that starts with the message just before it (`X: ...` after `X`) replaces it. Many
/// errors (DataFusion's, the engine's i/o errors, tonic's) embed their source in their own
/// message or start with it, which `{:#}` would then print two to four times.
fn error_text(e: &anyhow::Error) -> String {
    join_chain(e.chain().map(ToString::to_string))
}

fn join_chain(messages: impl IntoIterator<Item = String>) -> String {
    let mut parts: Vec<String> = Vec::new();
    for msg in messages {
        let msg = msg.trim().to_string();
        let tail = msg.split_once(": ").map_or(msg.as_str(), |(_, tail)| tail);
        let text = parts.join(": ");
        if msg.is_empty() || text.contains(&msg) || (tail.len() >= 16 && text.contains(tail)) {
            continue;
        }
        match parts.last_mut() {
            Some(last) if msg.strip_prefix(last.as_str()).is_some_and(|rest| rest.starts_with(": ")) => *last = msg,
            _ => parts.push(msg),
        }
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::join_chain;

    fn join(parts: &[&str]) -> String {
        join_chain(parts.iter().map(|s| s.to_string()))
    }

    #[test]
    fn each_message_once() {
        assert_eq!(
            join(&[
                "opening store db",
                "i/o error on db/x: Permission denied (os error 13)",
                "Permission denied (os error 13)"
            ]),
            "opening store db: i/o error on db/x: Permission denied (os error 13)"
        );
        assert_eq!(
            join(&["Arrow error: Cast error: bad", "Arrow error: Cast error: bad", "Cast error: bad"]),
            "Arrow error: Cast error: bad"
        );
        assert_eq!(
            join(&["SQL error: x at Line: 1, Column: 1", "sql parser error: x at Line: 1, Column: 1"]),
            "SQL error: x at Line: 1, Column: 1"
        );
        assert_eq!(join(&["TLS", "transport error", "transport error: no keys"]), "TLS: transport error: no keys");
        assert_eq!(join(&["a", "b", "a"]), "a: b");
        assert_eq!(join(&["x", "index out of range"]), "x: index out of range");
        assert_eq!(join(&["reading config c.toml", "", "TOML parse error"]), "reading config c.toml: TOML parse error");
    }
}
