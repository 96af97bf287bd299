//! A fault-injecting TCP proxy for the tests, on 127.0.0.1 only: it sits between clients (node
//! processes, or the test's own connections) and a real server, and can, for every connection
//! at once:
//!
//! - [`Fault::Pass`]: forward bytes as they come;
//! - [`Fault::Latency`]: forward each chunk that long after it arrived, each way, in order (the
//!   delay does not add up: a chunk waits from its own arrival);
//! - [`Fault::Blackhole`]: forward nothing, either way, and close nothing: both ends see a
//!   half-open socket (what a peer gone without a FIN or an RST looks like). What arrives is kept
//!   and delivered in order once the proxy passes again, as TCP's retransmissions would deliver
//!   it after a short cut; an end that closes meanwhile is closed on the other side only then;
//! - [`Fault::Refuse`]: reset each new connection at once (a closed port, as a client sees it);
//!
//! and [`FaultProxy::reset_all`] resets (RST, by a zero linger) every open connection, both sides;
//! [`FaultProxy::drop_open`] blackholes every open connection for good (new ones pass): a
//! connection that a load balancer or a NAT dropped silently while it was idle.
//!
//! It is a thread with a Tokio runtime of its own, so that it keeps working when the test's
//! runtime is busy or blocked; dropping the proxy stops it and closes everything.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// What the proxy does to the traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    Pass,
    Latency(Duration),
    Blackhole,
    Refuse,
}

/// A running proxy (see the module docs).
pub struct FaultProxy {
    addr: SocketAddr,
    fault: watch::Sender<Fault>,
    /// Bumped by `reset_all`: every connection open then resets.
    resets: watch::Sender<u64>,
    /// Bumped by `drop_open`: every connection open then is blackholed for good.
    drops: watch::Sender<u64>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    accepted: Arc<AtomicU64>,
    open: Arc<Mutex<u64>>,
}

impl FaultProxy {
    /// A proxy on a free port of 127.0.0.1 in front of `upstream` (a 127.0.0.1 address), passing.
    pub fn start(upstream: SocketAddr) -> FaultProxy {
        assert!(upstream.ip().is_loopback(), "the proxy only ever targets 127.0.0.1, not {upstream}");
        let (fault, fault_rx) = watch::channel(Fault::Pass);
        let (resets, resets_rx) = watch::channel(0u64);
        let (drops, drops_rx) = watch::channel(0u64);
        let (stop, stop_rx) = tokio::sync::oneshot::channel();
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let accepted = Arc::new(AtomicU64::new(0));
        let open = Arc::new(Mutex::new(0u64));
        let (counted, opened) = (accepted.clone(), open.clone());
        let thread = std::thread::Builder::new()
            .name("fault-proxy".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
                rt.block_on(async move {
                    let listener = TcpListener::bind("127.0.0.1:0").await.expect("proxy: bind");
                    addr_tx.send(listener.local_addr().unwrap()).unwrap();
                    let accept = async {
                        loop {
                            let Ok((client, _)) = listener.accept().await else { continue };
                            counted.fetch_add(1, Ordering::Relaxed);
                            if *fault_rx.borrow() == Fault::Refuse {
                                reset(client);
                                continue;
                            }
                            let (fault, resets, open) = (fault_rx.clone(), resets_rx.clone(), opened.clone());
                            let drops = drops_rx.clone();
                            tokio::spawn(async move {
                                *open.lock().unwrap() += 1;
                                serve(client, upstream, fault, resets, drops).await;
                                *open.lock().unwrap() -= 1;
                            });
                        }
                    };
                    tokio::select! {
                        () = accept => {}
                        _ = stop_rx => {}
                    }
                });
                rt.shutdown_timeout(Duration::from_millis(100));
            })
            .expect("proxy: a thread");
        let addr = addr_rx.recv().expect("proxy: its address");
        FaultProxy { addr, fault, resets, drops, stop: Some(stop), thread: Some(thread), accepted, open }
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// `redis://127.0.0.1:<port>/`, through the proxy.
    pub fn redis_url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.addr.port())
    }

    pub fn set(&self, fault: Fault) {
        self.fault.send_replace(fault);
    }

    /// Resets (RST) every connection open now, both sides.
    pub fn reset_all(&self) {
        self.resets.send_modify(|n| *n += 1);
    }

    /// Blackholes every connection open now, for good (until it is reset): new ones pass.
    pub fn drop_open(&self) {
        self.drops.send_modify(|n| *n += 1);
    }

    /// Connections accepted so far (refused ones included).
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }

    /// Connections open now.
    pub fn open(&self) -> u64 {
        *self.open.lock().unwrap()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Closes `stream` with an RST: a zero linger, then drop.
fn reset(stream: TcpStream) {
    zero_linger(&stream);
    drop(stream);
}

/// A zero linger: closing the socket sends an RST at once. (Tokio deprecates `set_linger`
/// because a linger above zero blocks the thread that drops the socket; zero does not wait.)
#[allow(deprecated)]
fn zero_linger(stream: &TcpStream) {
    let _ = stream.set_linger(Some(Duration::ZERO));
}

/// One connection: dialled upstream, then pumped both ways until either end closes or a reset.
async fn serve(
    client: TcpStream,
    upstream: SocketAddr,
    fault: watch::Receiver<Fault>,
    mut resets: watch::Receiver<u64>,
    mut drops: watch::Receiver<u64>,
) {
    resets.mark_unchanged();
    drops.mark_unchanged();
    let Ok(socket) = TcpSocket::new_v4() else { return reset(client) };
    let Ok(server) = socket.connect(upstream).await else { return reset(client) };
    let _ = (client.set_nodelay(true), server.set_nodelay(true));
    // A zero linger on both sockets: a connection dropped by a reset ends with an RST, not a FIN.
    zero_linger(&client);
    zero_linger(&server);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    // Dropped (`drop_open`): from then on, as if blackholed for good.
    let (dropped_tx, dropped) = watch::channel(false);
    tokio::spawn(async move {
        if drops.changed().await.is_ok() {
            let _ = dropped_tx.send(true);
        }
    });
    let up = pump(client_read, server_write, fault.clone(), dropped.clone());
    let down = pump(server_read, client_write, fault, dropped);
    let (up, down) = (tokio::spawn(up), tokio::spawn(down));
    let (up_abort, down_abort) = (up.abort_handle(), down.abort_handle());
    tokio::select! {
        _ = async { let _ = tokio::join!(up, down); } => {}
        _ = resets.changed() => {
            up_abort.abort();
            down_abort.abort();
        }
    }
}

/// One direction: reads chunks and hands each, stamped with when it may go, to a writer, which
/// sends them in order once due and while the proxy does not blackhole, until either side closes.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    fault: watch::Receiver<Fault>,
    mut dropped: watch::Receiver<bool>,
) {
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Option<Vec<u8>>)>();
    let reader_fault = fault.clone();
    let reader = async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = from.read(&mut buf).await.unwrap_or(0);
            let delay = match *reader_fault.borrow() {
                Fault::Latency(d) => d,
                _ => Duration::ZERO,
            };
            let at = Instant::now() + delay;
            if n == 0 {
                let _ = tx.send((at, None));
                break;
            }
            if tx.send((at, Some(buf[..n].to_vec()))).is_err() {
                break;
            }
        }
    };
    let writer = async {
        let mut fault = fault;
        while let Some((at, chunk)) = rx.recv().await {
            tokio::time::sleep_until(at).await;
            // Held while blackholed: delivered in order once it passes again. A dropped
            // connection never passes again.
            while *fault.borrow_and_update() == Fault::Blackhole || *dropped.borrow_and_update() {
                tokio::select! {
                    r = fault.changed() => if r.is_err() { return },
                    r = dropped.changed() => if r.is_err() { std::future::pending::<()>().await },
                }
            }
            match chunk {
                Some(bytes) => {
                    if to.write_all(&bytes).await.is_err() {
                        return;
                    }
                }
                None => {
                    let _ = to.shutdown().await;
                    return;
                }
            }
        }
    };
    tokio::join!(reader, writer);
}
