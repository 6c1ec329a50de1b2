//! The limits every HTTP/1 listener of this workspace enforces (the `withdrawals` API, a worker's
//! metrics bind, the provider mock): a cap on open connections, a header-read timeout and an idle
//! keep-alive timeout. This crate owns accepting ([`GuardedListener::accept`] takes a connection
//! only when a slot is free) and the hyper connection builder each connection is served with;
//! what is served, request timeouts and shutdown stay with the caller.
//!
//! **Connection cap.** At most `max_connections` accepted connections are open at once. When all
//! slots are taken the listener stops accepting: further clients wait in the kernel's listen
//! backlog (their connect succeeds, no answer comes) until a connection closes, and no file
//! descriptor is spent on them. A client's own connect or request timeout ends the wait.
//!
//! **Header and idle timeouts.** hyper has a single timer for an HTTP/1 server connection, the
//! header-read timeout, and it runs whenever the connection waits for a request head, whether or
//! not a byte of it has arrived: alone, it would close an idle keep-alive connection after the
//! header timeout too. The timer given to hyper here tells the two cases apart, as nginx and Go's
//! `net/http` do:
//! - a new connection must deliver its first request head within `header_timeout` of being
//!   accepted;
//! - between requests a keep-alive connection may stay silent for `idle_timeout`; once a byte of
//!   the next request arrives, its head must be complete within `header_timeout` of that byte.
//!
//! A connection that misses either is closed without an answer (the client sees EOF). The timers
//! only run while a request head is awaited: a request being handled, or a response being
//! written, is never cut by them.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// What a listener enforces; see the crate documentation for the exact meaning of each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// A request head (request line and headers) must arrive within this.
    pub header_timeout: Duration,
    /// A keep-alive connection waiting for its next request is closed after this.
    pub idle_timeout: Duration,
    /// Open connections at most; more wait to be accepted.
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { header_timeout: Duration::from_secs(10), idle_timeout: Duration::from_secs(60), max_connections: 1024 }
    }
}

/// The I/O type a guarded connection is served over.
pub type Io = TokioIo<Watched<TcpStream>>;

/// A TCP listener that accepts only while a connection slot is free.
pub struct GuardedListener {
    listener: TcpListener,
    limits: Limits,
    slots: Arc<Semaphore>,
    /// Set while the cap is reached, so the warning is logged once per episode.
    saturated: AtomicBool,
}

impl GuardedListener {
    pub fn new(listener: TcpListener, limits: Limits) -> Self {
        let slots = limits.max_connections.clamp(1, Semaphore::MAX_PERMITS);
        GuardedListener { listener, limits, slots: Arc::new(Semaphore::new(slots)), saturated: AtomicBool::new(false) }
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Connections accepted and not yet closed.
    pub fn open_connections(&self) -> usize {
        self.limits.max_connections.clamp(1, Semaphore::MAX_PERMITS) - self.slots.available_permits()
    }

    /// Waits for a free slot, then for a connection (with `TCP_NODELAY` set: an answer leaves at
    /// once instead of waiting on Nagle's algorithm). Failed accepts are logged and retried, with
    /// a short pause when the process is out of file descriptors, so this never returns an error.
    ///
    /// Cancel-safe: dropping the future loses no connection and gives its slot back.
    pub async fn accept(&self) -> Accepted {
        let slot = match self.slots.clone().try_acquire_owned() {
            Ok(slot) => {
                self.saturated.store(false, Ordering::Relaxed);
                slot
            }
            Err(_) => {
                if !self.saturated.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        max_connections = self.limits.max_connections,
                        "connection cap reached; new connections wait until one closes"
                    );
                }
                self.slots.clone().acquire_owned().await.expect("the slot semaphore is never closed")
            }
        };
        loop {
            match self.listener.accept().await {
                Ok((stream, remote)) => {
                    if let Err(err) = stream.set_nodelay(true) {
                        tracing::debug!(error = %err, "could not set TCP_NODELAY on an accepted connection");
                    }
                    return Accepted { stream, remote, limits: self.limits, slot: Slot(slot) };
                }
                Err(err) if is_connection_error(&err) => {
                    tracing::debug!(error = %err, "a connection failed before it was accepted");
                }
                Err(err) => {
                    // Usually EMFILE/ENFILE: back off instead of spinning.
                    tracing::warn!(error = %err, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }
}

fn is_connection_error(err: &io::Error) -> bool {
    matches!(
        err.kind(),
        io::ErrorKind::ConnectionRefused | io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset
    )
}

/// A connection slot: the connection counts against the cap until this is dropped.
#[derive(Debug)]
pub struct Slot(#[allow(dead_code)] OwnedSemaphorePermit);

/// An accepted connection, not yet served.
pub struct Accepted {
    stream: TcpStream,
    remote: SocketAddr,
    limits: Limits,
    slot: Slot,
}

impl Accepted {
    pub fn remote_addr(&self) -> SocketAddr {
        self.remote
    }

    /// Serves the connection with HTTP/1 and the header and idle timeouts. The caller drives the
    /// returned connection to completion and keeps the [`Slot`] until then.
    pub fn serve<S, B>(self, service: S) -> (http1::Connection<Io, S>, Slot)
    where
        S: hyper::service::HttpService<hyper::body::Incoming, ResBody = B>,
        S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
        B: hyper::body::Body + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let reads = Arc::new(ReadCount::default());
        let io = TokioIo::new(Watched { inner: self.stream, reads: reads.clone() });
        let timer = HeadTimer { reads, header: self.limits.header_timeout, idle: self.limits.idle_timeout };
        let conn = http1::Builder::new()
            .timer(timer)
            .header_read_timeout(self.limits.header_timeout)
            .keep_alive(true)
            .serve_connection(io, service);
        (conn, self.slot)
    }
}

/// How many reads brought bytes, and how many request heads were awaited, on one connection.
#[derive(Debug, Default)]
struct ReadCount {
    reads: AtomicU64,
    head_waits: AtomicU64,
}

/// A stream that counts the reads that brought bytes, so the head timer can tell an idle
/// connection from one whose next request has started to arrive.
#[derive(Debug)]
pub struct Watched<T> {
    inner: T,
    reads: Arc<ReadCount>,
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let result = Pin::new(&mut this.inner).poll_read(cx, buf);
        if matches!(result, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.reads.reads.fetch_add(1, Ordering::Relaxed);
        }
        result
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Watched<T> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// The timer hyper's HTTP/1 server uses for its header-read timeout (its only use of a timer):
/// each time hyper starts waiting for a request head it asks for a sleep, and gets a [`HeadWait`].
#[derive(Clone)]
struct HeadTimer {
    reads: Arc<ReadCount>,
    header: Duration,
    idle: Duration,
}

impl hyper::rt::Timer for HeadTimer {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn hyper::rt::Sleep>> {
        TokioTimer::new().sleep(duration)
    }

    /// hyper's deadline is "now + header timeout"; the wait decides its own (see [`HeadWait`]).
    fn sleep_until(&self, _deadline: std::time::Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        let first_request = self.reads.head_waits.fetch_add(1, Ordering::Relaxed) == 0;
        let started = Instant::now();
        let deadline = started + if first_request { self.header } else { self.idle };
        Box::pin(HeadWait {
            counts: self.reads.clone(),
            reads_at_start: self.reads.reads.load(Ordering::Relaxed),
            first_request,
            started,
            first_byte_at: None,
            header: self.header,
            idle: self.idle,
            deadline,
            sleep: Box::pin(tokio::time::sleep_until(deadline)),
        })
    }
}

/// One wait for a request head. Its deadline is the header timeout from acceptance (the first
/// request), the idle timeout from the end of the previous response while nothing has arrived,
/// or the header timeout from the first byte of the next request. hyper polls it each time the
/// connection has read something and the head is still incomplete, so a first byte is noticed
/// as it arrives.
struct HeadWait {
    counts: Arc<ReadCount>,
    reads_at_start: u64,
    first_request: bool,
    started: Instant,
    first_byte_at: Option<Instant>,
    header: Duration,
    idle: Duration,
    deadline: Instant,
    sleep: Pin<Box<tokio::time::Sleep>>,
}

impl Future for HeadWait {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if this.first_byte_at.is_none() && this.counts.reads.load(Ordering::Relaxed) != this.reads_at_start {
            this.first_byte_at = Some(Instant::now());
        }
        let deadline = match (this.first_request, this.first_byte_at) {
            (true, _) => this.started + this.header,
            (false, Some(first_byte)) => first_byte + this.header,
            (false, None) => this.started + this.idle,
        };
        if deadline != this.deadline {
            this.deadline = deadline;
            this.sleep.as_mut().reset(deadline);
        }
        this.sleep.as_mut().poll(cx)
    }
}

impl hyper::rt::Sleep for HeadWait {}
