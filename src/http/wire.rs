//! The connections the server accepts, with one addition to what hyper does on them: the answers
//! hyper writes on its own, to a request head it cannot parse, carry the error envelope.
//!
//! hyper refuses a request line over 64 KiB (414), a head over its buffer (431) and a head that
//! is not HTTP/1.1 (a control character in a header line, a bad method or version: 400) before
//! any service sees the request, and answers with a bare status line, `content-length: 0` and a
//! date. It has no hook for that answer's body (`Server::on_error` in `proto/h1/role.rs`), so
//! this module recognises those heads on the way out and writes, in their place, the same status
//! with the envelope every other error has. Written by hand because no library does this: the
//! alternatives are parsing every request head twice, or a fork of hyper.
//!
//! The recognition is strict: a single write that is a whole head (ends in a blank line), starts
//! with `HTTP/1.1 400 `, `HTTP/1.1 414 ` or `HTTP/1.1 431 `, and says `content-length: 0`. The
//! application's own 400, 414 and 431 answers always have a body, so they never match.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use axum::extract::connect_info::Connected;
use axum::serve::IncomingStream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

/// The server's listener: TCP connections whose hyper-made error answers carry the envelope.
pub struct Listener(TcpListener);

impl Listener {
    pub fn new(listener: TcpListener) -> Self {
        Self(listener)
    }
}

impl axum::serve::Listener for Listener {
    type Io = Enveloped<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (stream, addr) = axum::serve::Listener::accept(&mut self.0).await;
        // Each write goes out at once: a streamed answer's first event (the MCP gateway's, the
        // audit stream's) otherwise waits for the acknowledgement of the head before it
        // (Nagle's algorithm against the peer's delayed ACK: 40 ms on Linux).
        if let Err(err) = stream.set_nodelay(true) {
            tracing::debug!(error = %err, "TCP_NODELAY not set on a connection");
        }
        (Enveloped::new(stream), addr)
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.0.local_addr()
    }
}

/// The peer's address, for handlers (`ConnectInfo<Peer>`).
#[derive(Clone, Copy, Debug)]
pub struct Peer(pub SocketAddr);

impl Connected<IncomingStream<'_, Listener>> for Peer {
    fn connect_info(stream: IncomingStream<'_, Listener>) -> Self {
        Peer(*stream.remote_addr())
    }
}

/// A connection whose hyper-made error heads are replaced by enveloped answers.
pub struct Enveloped<S> {
    inner: S,
    /// A replacement answer not yet fully written, and how much of it was.
    pending: Option<(Vec<u8>, usize)>,
}

impl<S> Enveloped<S> {
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            pending: None,
        }
    }
}

impl<S: AsyncWrite + Unpin> Enveloped<S> {
    /// Writes what is left of a replacement answer.
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some((bytes, written)) = &mut self.pending {
            if *written == bytes.len() {
                self.pending = None;
                break;
            }
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &bytes[*written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            *written += n;
        }
        Poll::Ready(Ok(()))
    }

    /// Takes `buf` in place of a hyper-made error head: the whole of `buf` counts as written once
    /// the replacement is queued.
    fn replace(
        &mut self,
        cx: &mut Context<'_>,
        answer: Vec<u8>,
        len: usize,
    ) -> Poll<io::Result<usize>> {
        self.pending = Some((answer, 0));
        match self.poll_pending(cx) {
            Poll::Ready(Err(err)) => Poll::Ready(Err(err)),
            // What is left is written by the next write, flush or shutdown.
            _ => Poll::Ready(Ok(len)),
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Enveloped<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Enveloped<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_pending(cx))?;
        if let Some(answer) = enveloped_answer(buf) {
            return this.replace(cx, answer, buf.len());
        }
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_pending(cx))?;
        let mut filled = bufs.iter().filter(|b| !b.is_empty());
        if let (Some(only), None) = (filled.next(), filled.next()) {
            if let Some(answer) = enveloped_answer(only) {
                return this.replace(cx, answer, only.len());
            }
        }
        Pin::new(&mut this.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_pending(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_pending(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

const URI_TOO_LONG: &str = "the path and query are limited to 8192 bytes";
const _: () = assert!(super::MAX_URI_BYTES == 8192);

/// The longest head hyper writes for a parse error (a status line, `content-length` and `date`).
const MAX_ERROR_HEAD: usize = 256;

/// The enveloped answer to write in place of `head`, when `head` is one hyper wrote for a request
/// it could not parse.
fn enveloped_answer(head: &[u8]) -> Option<Vec<u8>> {
    if head.len() > MAX_ERROR_HEAD || !head.ends_with(b"\r\n\r\n") {
        return None;
    }
    let (status, code, message) = match head.get(..13)? {
        b"HTTP/1.1 400 " => (
            "400 Bad Request",
            "malformed_request",
            "the request line or a header line is not valid HTTP/1.1 (a control character, a bad \
             method or version)",
        ),
        b"HTTP/1.1 414 " => ("414 URI Too Long", "uri_too_long", URI_TOO_LONG),
        b"HTTP/1.1 431 " => (
            "431 Request Header Fields Too Large",
            "headers_too_large",
            "the request's headers are too large",
        ),
        _ => return None,
    };
    if !contains(head, b"\r\ncontent-length: 0\r\n") {
        return None;
    }
    let body = serde_json::json!({ "error": code, "message": message }).to_string();
    let date = head
        .split(|b| *b == b'\n')
        .find(|line| line.starts_with(b"date: "))
        .map(|line| String::from_utf8_lossy(line.trim_ascii_end()).into_owned());
    let mut answer = format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
        body.len()
    );
    if let Some(date) = date {
        answer.push_str(&date);
        answer.push_str("\r\n");
    }
    answer.push_str("\r\n");
    answer.push_str(&body);
    Some(answer.into_bytes())
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hyper_error_heads_get_the_envelope() {
        let head = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\ndate: Mon, 23 Nov 2026 19:00:00 GMT\r\n\r\n";
        let answer = String::from_utf8(enveloped_answer(head).unwrap()).unwrap();
        let (head, body) = answer.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"));
        assert!(head.contains("\r\ndate: Mon, 23 Nov 2026 19:00:00 GMT"));
        assert!(head.contains(&format!("\r\ncontent-length: {}", body.len())));
        let body: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(body["error"], "headers_too_large");
    }

    #[test]
    fn the_applications_own_answers_pass_unchanged() {
        // The application's error answers have a body; success heads are never touched.
        for head in [
            &b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 57\r\n\r\n"[..],
            b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n",
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n",
        ] {
            assert_eq!(enveloped_answer(head), None);
        }
    }
}
