//! Checks of the extended-query messages a client sends, before `pgwire` decodes them: its
//! decoders (0.41) read counts and lengths without bounds checks, so a Parse with a negative
//! parameter count, a Bind whose value length runs past the message or an Execute with a
//! negative row limit made the connection's task panic. A malformed message now ends the
//! connection with FATAL 08P01 (protocol_violation), as PostgreSQL answers one; an Execute's
//! negative row limit means "no limit", as in PostgreSQL.
//!
//! Outside the extended protocol: a password message after authentication ends the connection
//! as PostgreSQL ends it (FATAL 08P01 "invalid frontend message type"), where pgwire ignored it
//! and the client waited for an answer; and a first packet whose length PostgreSQL refuses
//! (under 8 or over 10,000 bytes) closes the connection at once, where pgwire waited for more
//! bytes until the 60 s start-up limit.

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio_util::codec::Framed;

/// The messages checked, with the most bytes `pgwire` reads of each (past that it refuses the
/// message by its length, before reading it whole).
fn checked(kind: u8) -> Option<usize> {
    const LARGE: usize = 0x3fff_ffff - 1;
    const SMALL: usize = 30_000;
    match kind {
        b'P' | b'B' => Some(LARGE),
        b'E' | b'D' | b'C' => Some(SMALL),
        _ => None,
    }
}

/// Reads until the first message in `socket`'s buffer is whole, if it is one [`checked`]
/// checks; `false` at the end of the stream with nothing buffered.
pub(super) async fn fill<S: AsyncRead + Unpin, C>(socket: &mut Framed<S, C>) -> std::io::Result<bool> {
    loop {
        let buf = socket.read_buffer();
        if let Some(header) = buf.get(..5) {
            let len = i32::from_be_bytes([header[1], header[2], header[3], header[4]]);
            let whole = match (checked(header[0]), usize::try_from(len)) {
                (Some(max), Ok(len)) if len >= 4 && len <= max => buf.len() > len,
                // Unchecked, or a length pgwire refuses by itself.
                _ => true,
            };
            if whole {
                return Ok(true);
            }
        }
        // Read into the codec's own buffer (taken out and put back: no copy).
        let mut buf = std::mem::take(socket.read_buffer_mut());
        buf.reserve(8 << 10);
        let read = socket.get_mut().read_buf(&mut buf).await;
        let empty = buf.is_empty();
        *socket.read_buffer_mut() = buf;
        if read? == 0 {
            return Ok(!empty);
        }
    }
}

/// The most bytes PostgreSQL reads of a startup packet (`MAX_STARTUP_PACKET_LENGTH`).
const MAX_STARTUP: i32 = 10_000;

/// Before TLS is negotiated: looks at the first bytes of `socket` (without reading them);
/// `false` when they are the length of a packet PostgreSQL refuses, or the stream ends first.
/// A TLS handshake (direct TLS, its first byte 0x16) passes, and so do fewer than 4 bytes
/// (pgwire waits for the rest, or sees the stream end).
pub(super) async fn first_length(socket: &tokio::net::TcpStream) -> std::io::Result<bool> {
    let mut b = [0u8; 4];
    match socket.peek(&mut b).await? {
        0 => Ok(false),
        4 if b[0] != 0x16 => Ok((8..=MAX_STARTUP).contains(&i32::from_be_bytes(b))),
        _ => Ok(true),
    }
}

/// Reads what the client sent (up to 64 KiB) before the connection is dropped unanswered, so
/// that the close is an orderly one: unread bytes make the kernel reset it.
pub(super) fn drain(socket: &tokio::net::TcpStream) {
    let mut buf = [0u8; 4096];
    for _ in 0..16 {
        match socket.try_read(&mut buf) {
            Ok(n) if n > 0 => {}
            _ => return,
        }
    }
}

/// Checks the first message of `buf` (whole, after [`fill`]) if it is a Parse, Bind, Execute,
/// Describe or Close; sets an Execute's negative row limit to 0 (no limit). A password message
/// (after authentication, where this is called) is refused.
pub(super) fn check(buf: &mut BytesMut) -> Result<(), String> {
    let Some(&kind) = buf.first() else { return Ok(()) };
    if kind == b'p' {
        return Err("invalid frontend message type 112 (a password message after authentication)".into());
    }
    let Some(max) = checked(kind) else { return Ok(()) };
    let Some(len) = buf.get(1..5).map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]])) else { return Ok(()) };
    let Some(len) = usize::try_from(len).ok().filter(|l| (4..=max).contains(l)) else { return Ok(()) };
    let Some(body) = buf.get(5..1 + len) else { return Ok(()) };
    let name = match kind {
        b'P' => "Parse",
        b'B' => "Bind",
        b'E' => "Execute",
        b'D' => "Describe",
        _ => "Close",
    };
    let mut r = Reader(body);
    let bad = |what: &str| format!("malformed {name} message: {what}");
    match kind {
        b'P' => {
            r.cstring().ok_or_else(|| bad("no statement name"))?;
            r.cstring().ok_or_else(|| bad("no query"))?;
            let n = r.count().ok_or_else(|| bad("no or a negative parameter type count"))?;
            r.skip(4 * n).ok_or_else(|| bad("fewer parameter types than its count"))?;
        }
        b'B' => {
            r.cstring().ok_or_else(|| bad("no portal name"))?;
            r.cstring().ok_or_else(|| bad("no statement name"))?;
            let formats = r.count().ok_or_else(|| bad("no or a negative parameter format count"))?;
            r.skip(2 * formats).ok_or_else(|| bad("fewer parameter formats than its count"))?;
            let values = r.count().ok_or_else(|| bad("no or a negative parameter count"))?;
            for i in 1..=values {
                let len = r.i32().ok_or_else(|| bad(&format!("parameter ${i} has no length")))?;
                match usize::try_from(len) {
                    Ok(len) => r.skip(len).ok_or_else(|| bad(&format!("parameter ${i} runs past the message")))?,
                    Err(_) if len == -1 => {}
                    Err(_) => return Err(bad(&format!("parameter ${i} has length {len}"))),
                }
            }
            let results = r.count().ok_or_else(|| bad("no or a negative result format count"))?;
            r.skip(2 * results).ok_or_else(|| bad("fewer result formats than its count"))?;
        }
        b'E' => {
            r.cstring().ok_or_else(|| bad("no portal name"))?;
            let max_rows = r.i32().ok_or_else(|| bad("no row limit"))?;
            if max_rows < 0 {
                let at = 1 + len - 4;
                buf[at..at + 4].copy_from_slice(&0i32.to_be_bytes());
            }
        }
        _ => {
            r.skip(1).ok_or_else(|| bad("no target kind"))?;
            r.cstring().ok_or_else(|| bad("no name"))?;
        }
    }
    Ok(())
}

/// Reads a message body front to back; `None` past its end.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn cstring(&mut self) -> Option<()> {
        let end = self.0.iter().position(|&b| b == 0)?;
        self.0 = &self.0[end + 1..];
        Some(())
    }

    fn skip(&mut self, n: usize) -> Option<()> {
        self.0 = self.0.get(n..)?;
        Some(())
    }

    /// A non-negative int16 count.
    fn count(&mut self) -> Option<usize> {
        let mut b = self.0.get(..2)?;
        let n = b.get_i16();
        self.0 = &self.0[2..];
        usize::try_from(n).ok()
    }

    fn i32(&mut self) -> Option<i32> {
        let mut b = self.0.get(..4)?;
        let n = b.get_i32();
        self.0 = &self.0[4..];
        Some(n)
    }
}
