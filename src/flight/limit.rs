//! `--flight-max-connections`: how many Flight SQL connections are open at once.
//!
//! A connection past the limit is not dropped unanswered (a gRPC client would report only
//! "connection reset"): it is served for [`REFUSED_FOR`], and every call on it fails with
//! `RESOURCE_EXHAUSTED` naming the limit, as PostgreSQL answers 53300 past its
//! max_connections. At most [`REFUSED_AT_ONCE`] such connections are kept; beyond them a new
//! connection is closed at once. A connection's slot is freed when it closes.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::{Stream, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::transport::server::Connected;
use tonic::{Request, Status};

/// How long a connection past the limit is kept to answer its calls with the refusal.
pub(super) const REFUSED_FOR: Duration = Duration::from_secs(10);

/// Connections past the limit kept at once to be answered; more are closed unanswered.
pub(super) const REFUSED_AT_ONCE: usize = 64;

/// What every call of a connection learns about its place under the limit (a request
/// extension, with TLS too).
#[derive(Debug, Clone)]
pub(super) struct Admission {
    /// `None`: admitted; `Some(limit)`: refused, the limit being `limit`.
    refused: Option<usize>,
}

/// Fails a call of a connection past the limit with `RESOURCE_EXHAUSTED`.
pub(super) fn check(request: &Request<()>) -> Result<(), Status> {
    match request.extensions().get::<Admission>().and_then(|a| a.refused) {
        Some(limit) => Err(Status::resource_exhausted(format!(
            "too many Flight SQL connections: the server keeps at most {limit} open at once \
             (--flight-max-connections); close idle connections or retry later"
        ))),
        None => Ok(()),
    }
}

/// A connection with its slot (freed when the connection is dropped) or, past the limit, the
/// time it is closed at.
pub(super) struct Limited {
    io: TcpStream,
    admission: Admission,
    _slot: OwnedSemaphorePermit,
    close_at: Option<Pin<Box<tokio::time::Sleep>>>,
}

/// The connections of `incoming` with their admission under `max` open at once.
pub(super) fn limit<S>(incoming: S, max: usize) -> impl Stream<Item = io::Result<Limited>>
where
    S: Stream<Item = io::Result<TcpStream>>,
{
    let (open, refused) = (Arc::new(Semaphore::new(max)), Arc::new(Semaphore::new(REFUSED_AT_ONCE)));
    incoming.filter_map(move |conn| {
        let admitted = |io: TcpStream| {
            if let Ok(slot) = open.clone().try_acquire_owned() {
                return Some(Limited { io, admission: Admission { refused: None }, _slot: slot, close_at: None });
            }
            let slot = refused.clone().try_acquire_owned().ok()?;
            let close_at = Some(Box::pin(tokio::time::sleep(REFUSED_FOR)));
            Some(Limited { io, admission: Admission { refused: Some(max) }, _slot: slot, close_at })
        };
        let out = match conn {
            Ok(io) => admitted(io).map(Ok),
            Err(e) => Some(Err(e)),
        };
        std::future::ready(out)
    })
}

impl Limited {
    /// Past a refused connection's time: the connection ends.
    fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        self.close_at.as_mut().is_some_and(|t| t.as_mut().poll(cx).is_ready())
    }
}

fn closed() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "a connection past --flight-max-connections is closed")
}

impl Connected for Limited {
    type ConnectInfo = Admission;

    fn connect_info(&self) -> Admission {
        self.admission.clone()
    }
}

impl AsyncRead for Limited {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        if self.expired(cx) {
            return Poll::Ready(Err(closed()));
        }
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Limited {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        if self.expired(cx) {
            return Poll::Ready(Err(closed()));
        }
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if self.expired(cx) {
            return Poll::Ready(Err(closed()));
        }
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}
