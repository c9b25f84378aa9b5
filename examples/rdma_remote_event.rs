//! A peer drives this side's sync event through RDMA (remote-net sync events): the
//! host/peer handshake of NVIDIA's `rdma_sync_event` samples, written with futures.
//!
//! The parent (the responder, owner of the event) creates a sync event that a remote-net
//! publisher may update, listens on a loopback port, and starts this program again as the
//! child (the requester), telling it the port. The child connects by address; as in the
//! samples' connection-management mode, the event's export goes over the connection in one
//! RDMA send. Then:
//!
//! 1. the requester sets the remote event to 1 (`notify_set`);
//! 2. the responder, waiting for 1 (woken, not polling), sets it to 2 itself;
//! 3. the requester reads the remote event (`get`) until it sees 2, then adds 1
//!    (`notify_add`, which returns the previous value, 2);
//! 4. the responder waits for 3, and both sides check every value.
//!
//! Exit status 0 only when both sides saw exactly that sequence.
//!
//! ```text
//! cargo run --release --example rdma_remote_event
//! ```

use std::net::SocketAddr;
use std::process::ExitCode;

use async_doca::rdma::{Rdma, RemoteEvent};
use async_doca::sync_event::{Location, SyncEvent};
use async_doca::{Access, Device, Result};

#[path = "common/mod.rs"]
mod common;
use common::{bounded, mismatch, Peer};

fn main() -> ExitCode {
    common::main("rdma_remote_event", parent, child)
}

async fn parent(mut peer: Peer) -> Result<String> {
    let dev = Device::open_default()?;
    let event = SyncEvent::builder(&dev).publisher(Location::RemoteNet).build().await?;
    let rdma = Rdma::builder(&dev).build().await?;
    let mut listener = None;
    for _ in 0..20 {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| async_doca::Error::os(e, "find a free port"))?
            .port();
        if let Ok(l) = rdma.listen(port) {
            listener = Some(l);
            break;
        }
    }
    let listener = listener.ok_or_else(|| mismatch("no free port"))?;
    let [_ready] = peer.exchange(&[&listener.port().to_le_bytes()])?;
    let conn = bounded("the requester's connection", listener.accept()).await??;

    // The event's export travels over the connection, as in the samples' CM mode.
    let blob = event.export()?;
    let mem = dev.alloc(blob.len(), Access::LOCAL_READ_WRITE)?;
    let mut out = mem.slice(..);
    out.write(0, &blob);
    let (r, _) = conn.send(out).await;
    r?;

    bounded("the requester's notify_set(1)", event.wait_eq(1)).await??;
    event.set(2).await?;
    bounded("the requester's notify_add(1)", event.wait_eq(3)).await??;
    let v = event.get().await?;
    if v != 3 {
        return Err(mismatch(format!("the event ends at {v}, not 3")));
    }
    bounded("the requester's disconnect", conn.closed()).await?;
    Ok("rdma_remote_event: set 1 remotely, 2 locally, remote add -> 3; all values verified".into())
}

async fn child(mut peer: Peer) -> Result<()> {
    let [port] = peer.exchange(&[b"ready"])?;
    let port = u16::from_le_bytes(port.try_into().map_err(|_| mismatch("bad port"))?);
    let dev = Device::open_default()?;
    let rdma = Rdma::builder(&dev).build().await?;
    let mem = dev.alloc(4096, Access::LOCAL_READ_WRITE)?;
    let recv = async_doca::spawn_local({
        let (rdma, buf) = (rdma.clone(), mem.slice(0..4096));
        async move { rdma.recv(buf).await }
    });
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let conn = bounded("connect", rdma.connect(addr)).await??;
    let (r, buf) = bounded("the event's export", recv).await??;
    let blob = buf.to_vec()[..r?.len].to_vec();
    let remote = RemoteEvent::open(&dev, &blob)?;
    let ops = conn.remote_event(&remote);
    let scratch = dev.alloc(8, Access::LOCAL_READ_WRITE)?.buf();

    let (r, scratch) = ops.set(1, scratch).await;
    r?;
    // Read until the responder answered with 2 (the samples poll with get as well).
    let (seen, scratch) = bounded("the responder's 2", async {
        let mut scratch = scratch;
        loop {
            let (v, s) = ops.get(scratch).await;
            scratch = s;
            match v {
                Ok(2) => return Ok((2, scratch)),
                Ok(1) => async_doca::time::sleep(std::time::Duration::from_micros(100)).await,
                Ok(other) => return Err(mismatch(format!("unexpected value {other}"))),
                Err(e) => return Err(e),
            }
        }
    })
    .await??;
    let (old, _) = ops.add(1, scratch).await;
    let old = old?;
    if (seen, old) != (2, 2) {
        return Err(mismatch(format!("saw {seen}, add returned {old}")));
    }
    conn.disconnect()
}
