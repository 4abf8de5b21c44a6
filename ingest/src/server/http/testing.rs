//! Test helpers for the HTTP routes: a real server on 127.0.0.1:0 and hand-made HTTP/1.1
//! requests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use lockstep_engine::Store;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::server::{ServeOptions, Server, TokenSet};

/// The write token the test server accepts.
pub(crate) const TOKEN: &str = "write-token-0123456789abcdef";
/// The read token the test server accepts.
pub(crate) const READ_TOKEN: &str = "read-token-0123456789abcdef";

/// A response: status code, headers (lower case) and body.
pub(crate) struct Answer {
    pub(crate) code: u16,
    pub(crate) head: String,
    pub(crate) body: Vec<u8>,
}

/// Sends one request (`method` `path`) and reads the whole answer.
pub(crate) async fn request(addr: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Answer {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut head =
        format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: close\r\n", body.len());
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body).await.unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.unwrap();
    let split = response.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&response[..split]).to_ascii_lowercase();
    let code = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    Answer { code, head, body: response[split + 4..].to_vec() }
}

/// Starts a server with tokens (write and read) on 127.0.0.1:0, with both listeners;
/// returns the HTTP address, the stop sender and the server task.
pub(crate) async fn start(
    store: Arc<Store>,
) -> (String, tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<()>) {
    start_with(store, |_| {}).await
}

/// [`start`] with options changed by `adjust` first.
pub(crate) async fn start_with(
    store: Arc<Store>,
    adjust: impl FnOnce(&mut ServeOptions),
) -> (String, tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<()>) {
    let grpc = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let http = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = http.local_addr().unwrap().to_string();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let mut options = ServeOptions::default();
    options.config.drain_timeout = std::time::Duration::from_millis(200);
    options.tokens = Some(TokenSet::parse(&format!("write {TOKEN}\nread {READ_TOKEN}\n")).unwrap());
    adjust(&mut options);
    let server = Server::new(store, options);
    let task = tokio::spawn(async move {
        let _ = server
            .run_with_http(grpc, Some(http), async move {
                let _ = stopped.await;
            })
            .await;
    });
    (addr, stop, task)
}

/// `POST`s `body` to `path`.
pub(crate) async fn post(addr: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Answer {
    request(addr, "POST", path, headers, body).await
}
