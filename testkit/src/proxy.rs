//! An in-process TCP fault proxy in front of one Redis server.
//!
//! tc netem and iptables are not available on the test machines, so latency, black-holes and
//! resets come from here. The proxy listens on a free 127.0.0.1 port and forwards to the
//! server; its [`Fault`] can be changed at any time and applies to open connections at once.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What the proxy does to traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Forward everything.
    None,
    /// Forward everything, each chunk held back this long (both directions).
    Delay(Duration),
    /// Accept connections, never answer: nothing is read or forwarded while it lasts, and
    /// what was sent flows on, in order, once it heals (a partition, not a byte-dropping box).
    BlackHole,
    /// Reset every connection (RST), open ones at once and new ones on accept.
    Reset,
    /// Forward requests; of each reply send only the first byte, then reset the connection.
    CutReplies,
}

/// A running proxy; dropping it stops it and closes its connections.
#[derive(Debug)]
pub struct Proxy {
    addr: SocketAddr,
    fault: watch::Sender<Fault>,
    accept: JoinHandle<()>,
}

impl Proxy {
    /// Starts a proxy to `127.0.0.1:target_port`. Must run inside a tokio runtime.
    pub async fn start(target_port: u16) -> Self {
        // A port from the crate's cursor, not the kernel's: see `crate::free_port`.
        loop {
            let port = crate::free_port().expect("a free port for the proxy");
            if let Ok(listener) = TcpListener::bind(("127.0.0.1", port)).await {
                return Self::serve_from(listener, target_port);
            }
        }
    }

    /// As [`start`](Self::start), listening on `127.0.0.1:listen_port` instead of a free port:
    /// after a server there was killed, its address now reaches the server at `target_port`
    /// (a name that moved to another server). The listener reuses the address, so the killed
    /// server's closing connections do not block the port.
    pub async fn start_on(listen_port: u16, target_port: u16) -> Self {
        let listener = TcpListener::bind(("127.0.0.1", listen_port))
            .await
            .expect("bind the proxy to the given port");
        Self::serve_from(listener, target_port)
    }

    /// As [`start`](Self::start), with the client-side sockets' receive buffer fixed at
    /// `bytes` (no autotuning): under a black hole the client's writes block after a few KiB
    /// instead of tens of MiB, as behind a hung master whose buffers have filled.
    pub async fn start_with_receive_buffer(target_port: u16, bytes: u32) -> Self {
        let socket = loop {
            let socket = tokio::net::TcpSocket::new_v4().expect("socket");
            socket.set_recv_buffer_size(bytes).expect("SO_RCVBUF");
            let port = crate::free_port().expect("a free port for the proxy");
            if socket.bind(([127, 0, 0, 1], port).into()).is_ok() {
                break socket;
            }
        };
        let listener = socket.listen(1024).expect("listen");
        Self::serve_from(listener, target_port)
    }

    fn serve_from(listener: TcpListener, target_port: u16) -> Self {
        let addr = listener.local_addr().expect("proxy address");
        let (fault, watcher) = watch::channel(Fault::None);
        let target: SocketAddr = ([127, 0, 0, 1], target_port).into();
        let accept = tokio::spawn(async move {
            let mut connections = Vec::new();
            while let Ok((client, _)) = listener.accept().await {
                connections.retain(|c: &JoinHandle<()>| !c.is_finished());
                connections.push(tokio::spawn(serve(client, target, watcher.clone())));
            }
        });
        Self {
            addr,
            fault,
            accept,
        }
    }

    /// The URL clients use to reach the server through the proxy.
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// Applies `fault` from now on, to open connections too.
    pub fn set(&self, fault: Fault) {
        self.fault.send_replace(fault);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn serve(client: TcpStream, target: SocketAddr, mut fault: watch::Receiver<Fault>) {
    if *fault.borrow_and_update() == Fault::Reset {
        let _ = client.set_zero_linger();
        return;
    }
    let Ok(server) = TcpStream::connect(target).await else {
        let _ = client.set_zero_linger();
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    // Any close of the client side is a reset, as a crashing server or a middlebox would do.
    let _ = client.set_zero_linger();
    let (mut client_rx, mut client_tx) = client.into_split();
    let (mut server_rx, mut server_tx) = server.into_split();
    pump(
        &mut client_rx,
        &mut client_tx,
        &mut server_rx,
        &mut server_tx,
        &mut fault,
    )
    .await;
    // Reunited, the client side closes with a reset (zero linger), not an orderly FIN.
    if let Ok(client) = client_rx.reunite(client_tx) {
        drop(client);
    }
}

async fn pump(
    client_rx: &mut tokio::net::tcp::OwnedReadHalf,
    client_tx: &mut tokio::net::tcp::OwnedWriteHalf,
    server_rx: &mut tokio::net::tcp::OwnedReadHalf,
    server_tx: &mut tokio::net::tcp::OwnedWriteHalf,
    fault: &mut watch::Receiver<Fault>,
) {
    let mut requests = [0u8; 16 * 1024];
    let mut replies = [0u8; 16 * 1024];
    loop {
        // A black hole stops reading in both directions: bytes wait in the kernel's buffers,
        // as they would behind a partition, and flow again, in order, once it heals. (Dropping
        // bytes on a live connection is something TCP never does.)
        if *fault.borrow() == Fault::BlackHole {
            if fault.wait_for(|f| *f != Fault::BlackHole).await.is_err() {
                return;
            }
            continue;
        }
        tokio::select! {
            changed = fault.changed() => {
                if changed.is_err() || *fault.borrow() == Fault::Reset {
                    return;
                }
            }
            read = client_rx.read(&mut requests) => {
                let Ok(n @ 1..) = read else { return };
                if !forward(&requests[..n], server_tx, fault, false).await {
                    return;
                }
            }
            read = server_rx.read(&mut replies) => {
                let Ok(n @ 1..) = read else { return };
                if !forward(&replies[..n], client_tx, fault, true).await {
                    return;
                }
            }
        }
    }
}

/// Forwards bytes already read under the current fault; false when the connection must close.
async fn forward(
    bytes: &[u8],
    to: &mut tokio::net::tcp::OwnedWriteHalf,
    fault: &mut watch::Receiver<Fault>,
    is_reply: bool,
) -> bool {
    // Read just before a black hole opened: hold them until it heals, never drop them.
    let Ok(current) = fault.wait_for(|f| *f != Fault::BlackHole).await.map(|f| *f) else {
        return false;
    };
    match current {
        Fault::Reset => false,
        Fault::CutReplies if is_reply => {
            let _ = to.write_all(&bytes[..1]).await;
            false
        }
        Fault::Delay(d) => {
            tokio::time::sleep(d).await;
            to.write_all(bytes).await.is_ok()
        }
        Fault::None | Fault::CutReplies | Fault::BlackHole => to.write_all(bytes).await.is_ok(),
    }
}
