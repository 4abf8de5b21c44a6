//! gRPC request messages under the bodies' share of the memory limit ([`BodyBudget`]).
//!
//! tonic buffers a whole message (up to `max_message_bytes`) before a call sees it, so the RSS
//! check that refuses writes cannot see it coming: 10 OTLP exports of 50 MB at once took a
//! server with `--memory-limit-mb 256` to 1 GB (QA pass 23a). [`Budgeted`] wraps each service:
//! the bytes of a call's request body take their room in the budget frame by frame as they
//! arrive, without waiting, and give it back once the message they belong to was handed on
//! (when the next frame is asked for, or the call ends). A frame that finds no room fails the
//! call with `RESOURCE_EXHAUSTED` and the retry hint, one that can never fit with `OUT_OF_RANGE`.

use std::pin::Pin;
use std::task::{Context, Poll};

use hyper::body::Frame;
use hyper::body::{Buf, Bytes};
use tokio::sync::OwnedSemaphorePermit;
use tonic::Status;
use tonic::body::Body;
use tonic::codegen::http::Request;

use super::http::BodyBudget;

/// A service whose request bodies take their bytes from a [`BodyBudget`] (none: unchanged).
#[derive(Debug, Clone)]
pub(crate) struct Budgeted<S> {
    pub(crate) inner: S,
    pub(crate) budget: Option<BodyBudget>,
}

impl<S: tonic::server::NamedService> tonic::server::NamedService for Budgeted<S> {
    const NAME: &'static str = S::NAME;
}

impl<S> tonic::codegen::Service<Request<Body>> for Budgeted<S>
where
    S: tonic::codegen::Service<Request<Body>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        match &self.budget {
            None => self.inner.call(request),
            Some(budget) => {
                let budget = budget.clone();
                self.inner.call(request.map(|body| Body::new(Counted::new(body, budget))))
            }
        }
    }
}

/// A request body whose bytes hold their room in the budget until their message was handed on.
struct Counted {
    inner: Body,
    budget: BodyBudget,
    /// The room of the message being received.
    receiving: Option<OwnedSemaphorePermit>,
    /// The room of messages received whole, given back at the next frame.
    received: Option<OwnedSemaphorePermit>,
    /// Where the gRPC framing stands: the 5-byte prefix read so far, then the payload left.
    prefix: Vec<u8>,
    payload_left: usize,
    /// The length of a message larger than the whole budget, once its prefix was read.
    oversized: Option<usize>,
}

impl Counted {
    fn new(inner: Body, budget: BodyBudget) -> Self {
        Counted {
            inner,
            budget,
            receiving: None,
            received: None,
            prefix: Vec::with_capacity(5),
            payload_left: 0,
            oversized: None,
        }
    }

    /// Follows the framing over `data`; whether a message ended in it.
    fn ends_a_message(&mut self, data: &Bytes) -> bool {
        let mut data = data.clone();
        let mut ended = false;
        while data.has_remaining() {
            if self.payload_left > 0 {
                let n = self.payload_left.min(data.remaining());
                data.advance(n);
                self.payload_left -= n;
                ended |= self.payload_left == 0;
                continue;
            }
            let n = (5 - self.prefix.len()).min(data.remaining());
            self.prefix.extend_from_slice(&data[..n]);
            data.advance(n);
            if self.prefix.len() == 5 {
                let length = u32::from_be_bytes([self.prefix[1], self.prefix[2], self.prefix[3], self.prefix[4]]);
                self.payload_left = length as usize;
                self.prefix.clear();
                if self.payload_left > self.budget.bytes() {
                    self.oversized = Some(self.payload_left);
                }
                ended |= self.payload_left == 0;
            }
        }
        ended
    }
}

impl hyper::body::Body for Counted {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        // Messages received whole were decoded and handed on before the next frame is asked for.
        self.received = None;
        let frame = match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => frame,
            Poll::Ready(None) => {
                self.receiving = None;
                return Poll::Ready(None);
            }
            other => return other,
        };
        if let Some(data) = frame.data_ref() {
            let data = data.clone();
            let ended = self.ends_a_message(&data);
            if let Some(length) = self.oversized {
                return Poll::Ready(Some(Err(self.budget.too_large(length))));
            }
            let permit = match self.budget.take_now(data.len()) {
                Ok(permit) => permit,
                Err(status) => return Poll::Ready(Some(Err(status))),
            };
            match &mut self.receiving {
                Some(p) => p.merge(permit),
                None => self.receiving = Some(permit),
            }
            if ended {
                self.received = self.receiving.take();
            }
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::server::config::Limits;

    #[test]
    fn messages_are_followed_across_frames() {
        let limits = Limits { memory_limit_bytes: Some(64 << 20), ..Limits::default() };
        let mut counted = Counted::new(Body::empty(), BodyBudget::for_limits(&limits).unwrap());
        // A message longer than the budget (16 MiB) is known from its prefix.
        counted.ends_a_message(&Bytes::from_static(&[0, 1, 0, 0, 1]));
        assert_eq!(counted.oversized, Some((16 << 20) + 1));
        let mut counted = Counted::new(Body::empty(), BodyBudget::for_limits(&limits).unwrap());
        // A 3-byte message split inside its prefix, then one of 0 bytes and the start of another.
        assert!(!counted.ends_a_message(&Bytes::from_static(&[0, 0, 0])));
        assert!(counted.ends_a_message(&Bytes::from_static(&[0, 3, 1, 2, 3])));
        assert!(counted.ends_a_message(&Bytes::from_static(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 9])));
        assert_eq!(counted.payload_left, 1);
        assert!(counted.ends_a_message(&Bytes::from_static(&[9])));
    }
}
