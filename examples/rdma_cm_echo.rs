//! An echo server and 8 clients that connect by address (RDMA connection management).
//!
//! The parent process is the server: one RDMA context listening on a loopback port. It
//! starts this program again as the child, tells it the port, and the child runs 8 clients,
//! each with its own context, connecting to `127.0.0.1:port` at the same time. The server
//! accepts every request with private data (`"echo-server"`), which each client checks.
//! Each client then sends `ROUNDS` messages naming itself and the round; the server sends
//! each message back upper-cased on the connection it came from (the receive says which),
//! and the client checks every echo. Clients disconnect when done; the server sees each
//! connection close. Exit status 0 only when all 8 × `ROUNDS` echoes were verified on both
//! sides.
//!
//! ```text
//! cargo run --release --example rdma_cm_echo
//! ```

use std::net::SocketAddr;
use std::process::ExitCode;

use async_doca::rdma::{Connection, Listener, Rdma};
use async_doca::{spawn_local, Access, Device, Result};

#[path = "common/mod.rs"]
mod common;
use common::{bounded, mismatch, Peer};

const CLIENTS: usize = 8;
const ROUNDS: usize = 100;
const PRIVATE: &[u8] = b"echo-server";
const MSG: usize = 64;

fn main() -> ExitCode {
    common::main("rdma_cm_echo", parent, child)
}

/// Listens on a free loopback port (asks the kernel for one, then retries on the rare race).
fn listen(rdma: &Rdma) -> Result<Listener> {
    let mut last = None;
    for _ in 0..20 {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| async_doca::Error::os(e, "find a free port"))?
            .port();
        match rdma.listen(port) {
            Ok(l) => return Ok(l),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| mismatch("no free port")))
}

fn message(client: usize, round: usize) -> Vec<u8> {
    format!("client {client} round {round}").into_bytes()
}

async fn parent(mut peer: Peer) -> Result<String> {
    let dev = Device::open_default()?;
    let server = Rdma::builder(&dev).max_connections(CLIENTS as u16).build().await?;
    let listener = listen(&server)?;
    let [_ready] = peer.exchange(&[&listener.port().to_le_bytes()])?;

    // Accept the 8 clients; each accept completes once its connection is established.
    let mut accepting = Vec::new();
    for _ in 0..CLIENTS {
        let req = bounded("a connection request", listener.request()).await??;
        accepting.push(spawn_local(req.accept(PRIVATE)));
    }
    let mut conns: Vec<Connection> = Vec::new();
    for a in accepting {
        conns.push(bounded("an accept", a).await???);
    }

    // Echo every message on the connection it came from.
    let mem = dev.alloc(2 * MSG, Access::LOCAL_READ_WRITE)?;
    let mut inbox = mem.slice(0..MSG);
    for _ in 0..CLIENTS * ROUNDS {
        let (r, buf) = bounded("a client's message", server.recv(inbox)).await?;
        let got = r?;
        let mut text = buf.to_vec()[..got.len].to_vec();
        inbox = buf;
        text.make_ascii_uppercase();
        let conn = conns.iter().find(|c| c.id() == got.conn).ok_or_else(|| mismatch("a message on no connection"))?;
        let mut reply = mem.slice(MSG..MSG + text.len());
        reply.write(0, &text);
        let (r, _) = conn.send(reply).await;
        r?;
    }
    // The clients disconnect when they are done.
    for c in &conns {
        bounded("a client's disconnect", c.closed()).await?;
    }
    Ok(format!("rdma_cm_echo: {CLIENTS} clients connected by address, {} echoes verified", CLIENTS * ROUNDS))
}

async fn client(dev: Device, addr: SocketAddr, id: usize) -> Result<()> {
    let rdma = Rdma::builder(&dev).build().await?;
    let conn = bounded("connect", rdma.connect(addr)).await??;
    if conn.private_data() != PRIVATE {
        return Err(mismatch(format!("client {id}: private data {:?}", conn.private_data())));
    }
    let mem = dev.alloc(2 * MSG, Access::LOCAL_READ_WRITE)?;
    for round in 0..ROUNDS {
        let msg = message(id, round);
        // Post the receive first, then send.
        let echo = spawn_local({
            let (rdma, buf) = (rdma.clone(), mem.slice(0..MSG));
            async move { rdma.recv(buf).await }
        });
        let mut out = mem.slice(MSG..MSG + msg.len());
        out.write(0, &msg);
        let (r, _) = conn.send(out).await;
        r?;
        let (r, buf) = bounded("an echo", echo).await??;
        let n = r?.len;
        let want = msg.to_ascii_uppercase();
        if buf.to_vec()[..n] != want[..] {
            return Err(mismatch(format!("client {id} round {round}: wrong echo")));
        }
    }
    conn.disconnect()
}

async fn child(mut peer: Peer) -> Result<()> {
    let [port] = peer.exchange(&[b"ready"])?;
    let port = u16::from_le_bytes(port.try_into().map_err(|_| mismatch("bad port"))?);
    let dev = Device::open_default()?;
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let clients: Vec<_> = (0..CLIENTS).map(|i| spawn_local(client(dev.clone(), addr, i))).collect();
    for c in clients {
        c.await??;
    }
    Ok(())
}
