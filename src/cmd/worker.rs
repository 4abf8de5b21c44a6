//! `lockstep worker`: a distributed-SQL worker (datafusion-distributed's gRPC worker service)
//! over one store, for `lockstep sql --workers`. It opens the store read-only when the first
//! plan arrives and again whenever a plan was made on newer series or clock models; it accepts
//! only plans for the dataset it serves. It has no authentication: bind it to a private
//! network (see docs/distributed.md).

use std::net::SocketAddr;

use anyhow::Context;
use lockstep_query::QueryLimits;
use lockstep_query::distributed::{DatasetSource, worker};

/// Arguments of `lockstep worker`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    store: super::StoreArgs,
    /// Address to listen on (port 0: any free port; the bound address is printed).
    #[arg(long, default_value = "127.0.0.1:7700")]
    listen: SocketAddr,
    /// Memory limit of the worker's queries in MiB (0 = unbounded); default: a quarter of the
    /// machine's memory, at least 256 MiB.
    #[arg(long, env = "LOCKSTEP_QUERY_MEMORY_LIMIT_MB", value_name = "MIB")]
    memory_limit_mb: Option<u64>,
}

/// Serves until SIGTERM or SIGINT.
pub fn run(args: Args) -> anyhow::Result<()> {
    let limits = args.memory_limit_mb.map_or_else(QueryLimits::default, QueryLimits::memory_mb);
    let dataset = args.store.dataset_name();
    let (url, dir, cache) = (args.store.data_url.clone(), args.store.data_dir.clone(), args.store.cache_bytes());
    let source = DatasetSource::reopening(dataset.clone(), move |layout| {
        lockstep_query::dataset::open_dataset_read_only_pinned(url.as_deref(), &dir, cache, layout)
            .map_err(|e| e.to_string())
    });
    // Fail at start, not at the first query, when the store is not there.
    args.store.open_read_only()?;
    let runtime = crate::runtime::build()?;
    runtime.block_on(async move {
        let shutdown = super::serve::shutdown_signal()?;
        let listener =
            tokio::net::TcpListener::bind(args.listen).await.with_context(|| format!("binding {}", args.listen))?;
        let local = listener.local_addr()?;
        let service = worker(source, &limits)?.into_worker_server();
        {
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            writeln!(out, "worker for {dataset} listening on {local}")?;
            out.flush()?;
        }
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming_shutdown(
                tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
                shutdown,
            )
            .await
            .context("worker server")?;
        Ok(())
    })
}
