//! A TCP proxy in front of one provider mock: how the two-provider chaos run makes that provider
//! refuse connections for a while (SPEC §16's outage, its first phase).
//!
//! The service is configured with the proxy's address; the proxy copies bytes both ways to the
//! mock. [`Proxy::refuse`] closes the listening socket and cuts every open connection, so a
//! connect gets `ECONNREFUSED` (what a provider whose load balancer lost its backends, or a
//! restarting host, looks like) and a request in flight loses its connection (an unknown outcome
//! for the service, which the mock's record settles). [`Proxy::accept`] listens on the same port
//! again.
//!
//! Why a proxy rather than stopping the mock: the mock's memory is the run's ground truth (every
//! executed transfer, every request); a mock restarted on the same port would have forgotten
//! what it paid. The chaos run's own admin calls go to the mock directly, never through here.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// How long [`Proxy::accept`] keeps trying to bind its port again.
const REBIND_WITHIN: Duration = Duration::from_secs(5);

pub struct Proxy {
    addr: SocketAddr,
    upstream: SocketAddr,
    serving: Option<Serving>,
    /// Connections cut by [`Proxy::refuse`] while they were open.
    cut: Arc<AtomicU64>,
    /// Connections proxied.
    accepted: Arc<AtomicU64>,
}

/// One listening period: the token that ends it, and its accept loop and connections.
struct Serving {
    stop: CancellationToken,
    tasks: TaskTracker,
}

impl Proxy {
    /// Listens on a free local port and forwards to `upstream`.
    pub async fn start(upstream: SocketAddr) -> anyhow::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await.context("bind the proxy")?;
        let addr = listener.local_addr()?;
        let mut proxy = Proxy {
            addr,
            upstream,
            serving: None,
            cut: Arc::new(AtomicU64::new(0)),
            accepted: Arc::new(AtomicU64::new(0)),
        };
        proxy.serve(listener);
        Ok(proxy)
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn connections_cut(&self) -> u64 {
        self.cut.load(Ordering::Relaxed)
    }

    pub fn connections_accepted(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }

    /// Closes the port and cuts every open connection; returns once the listener and every
    /// connection are closed (true when a connect was then seen refused).
    pub async fn refuse(&mut self) -> bool {
        if let Some(serving) = self.serving.take() {
            serving.stop.cancel();
            serving.tasks.close();
            serving.tasks.wait().await;
        }
        matches!(TcpStream::connect(self.addr).await, Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused)
    }

    /// Listens on the same port again (retrying for a few seconds: the port is ours, but the
    /// kernel may still hold it briefly).
    pub async fn accept(&mut self) -> anyhow::Result<()> {
        if self.serving.is_some() {
            return Ok(());
        }
        let deadline = Instant::now() + REBIND_WITHIN;
        let listener = loop {
            match TcpListener::bind(self.addr).await {
                Ok(listener) => break listener,
                Err(e) if Instant::now() < deadline => {
                    tracing::debug!(error = %e, "proxy port not free yet");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => bail!("the proxy could not listen on {} again: {e}", self.addr),
            }
        };
        self.serve(listener);
        Ok(())
    }

    fn serve(&mut self, listener: TcpListener) {
        let stop = CancellationToken::new();
        let (upstream, cut, accepted) = (self.upstream, self.cut.clone(), self.accepted.clone());
        let (token, tasks) = (stop.clone(), TaskTracker::new());
        let connections = tasks.clone();
        tasks.spawn(async move {
            loop {
                let inbound = tokio::select! {
                    () = token.cancelled() => return,
                    accepted = listener.accept() => match accepted {
                        Ok((inbound, _)) => inbound,
                        Err(_) => continue,
                    },
                };
                accepted.fetch_add(1, Ordering::Relaxed);
                connections.spawn(forward(inbound, upstream, token.clone(), cut.clone()));
            }
        });
        self.serving = Some(Serving { stop, tasks });
    }
}

/// Copies both ways until either side closes, or drops both sockets when `stop` fires.
async fn forward(mut inbound: TcpStream, upstream: SocketAddr, stop: CancellationToken, cut: Arc<AtomicU64>) {
    let Ok(mut outbound) = TcpStream::connect(upstream).await else { return };
    let _ = inbound.set_nodelay(true);
    let _ = outbound.set_nodelay(true);
    tokio::select! {
        () = stop.cancelled() => {
            cut.fetch_add(1, Ordering::Relaxed);
        }
        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn echo() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 64];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }

    async fn round_trip(addr: SocketAddr) -> std::io::Result<Vec<u8>> {
        let mut s = TcpStream::connect(addr).await?;
        s.write_all(b"ping").await?;
        let mut buf = [0u8; 4];
        s.read_exact(&mut buf).await?;
        Ok(buf.to_vec())
    }

    #[tokio::test]
    async fn the_proxy_refuses_connections_while_down_cuts_open_ones_and_comes_back_on_its_port() {
        let mut proxy = Proxy::start(echo().await).await.unwrap();
        assert_eq!(round_trip(proxy.addr).await.unwrap(), b"ping");
        let mut open = TcpStream::connect(proxy.addr).await.unwrap();
        open.write_all(b"ping").await.unwrap();
        let mut buf = [0u8; 4];
        open.read_exact(&mut buf).await.unwrap();

        assert!(proxy.refuse().await, "a connect is refused while the proxy is down");
        let err = round_trip(proxy.addr).await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused, "{err}");
        let n = tokio::time::timeout(Duration::from_secs(5), open.read(&mut buf)).await.unwrap().unwrap_or(0);
        assert_eq!(n, 0, "the open connection was cut");
        assert_eq!(proxy.connections_cut(), 1);

        proxy.accept().await.unwrap();
        assert_eq!(round_trip(proxy.addr).await.unwrap(), b"ping", "the same port again");
        assert_eq!(proxy.connections_accepted(), 3);
    }
}
