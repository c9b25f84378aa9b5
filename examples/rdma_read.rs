//! RDMA read between two processes: the requester reads the responder's memory and checks it.
//!
//! The parent (the requester) starts this same program again as the child (the responder),
//! which fills 1 MiB of memory with a known pattern and lets peers read it. They exchange
//! blobs over the child's stdin/stdout (connections, and the responder's memory). The
//! requester reads the memory as 16 one-sided reads, all in flight at once, checks every
//! byte, and sends "done"; the responder (which stays alive while its memory may be read)
//! answers "bye" and exits. The program exits 0 only if the data matched, the answer
//! arrived and the child exited 0.
//!
//! ```text
//! cargo run --release --example rdma_read
//! ```

use std::process::ExitCode;

use async_doca::rdma::Rdma;
use async_doca::{spawn_local, Access, Device, Result};

#[path = "common/mod.rs"]
mod common;
use common::{bounded, connect_requester, mismatch, pattern, Peer, Requester};

const LEN: usize = 1 << 20;
const CHUNK: usize = 64 * 1024;
const SEED: u32 = 2;

fn main() -> ExitCode {
    common::main("rdma_read", requester, responder)
}

async fn requester(mut peer: Peer) -> Result<String> {
    // `_rdma` keeps the context alive to the end of the function, while its operations run.
    let Requester { dev, rdma: _rdma, conn, remote, answer } = connect_requester(&mut peer).await?;

    // Read destinations need local write access.
    let dst = dev.alloc(LEN, Access::LOCAL_READ_WRITE)?;
    let reads: Vec<_> = (0..LEN / CHUNK)
        .map(|i| {
            let range = i * CHUNK..(i + 1) * CHUNK;
            let (conn, s, d) = (conn.clone(), remote.slice(range.clone()), dst.slice(range));
            spawn_local(async move { conn.read(s, d).await.0 })
        })
        .collect();
    let n = reads.len();
    for r in reads {
        bounded("rdma.read", r).await???;
    }
    let got = dst.buf().to_vec();
    if let Some(at) = got.iter().zip(pattern(LEN, SEED)).position(|(a, b)| *a != b) {
        return Err(mismatch(format!("byte {at} read from the responder is wrong")));
    }

    let mut done = dev.alloc(4, Access::LOCAL_READ_WRITE)?.buf();
    done.write(0, b"done");
    let (res, _) = bounded("rdma.send", conn.send(done)).await?;
    res?;
    let (msg, buf) = bounded("the responder's answer", answer).await??;
    let msg = msg?;
    if buf.to_vec()[..msg.len] != *b"bye" {
        return Err(mismatch(format!("unexpected answer: {msg:?}")));
    }
    Ok(format!("rdma_read: {LEN} bytes read in {n} reads from the responder, verified"))
}

async fn responder(mut peer: Peer) -> Result<()> {
    let dev = Device::open_default()?;
    // The context and the memory both allow remote reads.
    let rdma = Rdma::builder(&dev).permissions(Access::LOCAL_READ_WRITE | Access::RDMA_READ).build().await?;
    let source = dev.alloc(LEN, Access::LOCAL_READ_WRITE | Access::RDMA_READ)?;
    source.buf().write(0, &pattern(LEN, SEED));
    let (blob, pending) = rdma.export()?;
    let [conn_blob] = peer.exchange(&[&blob, &source.export_rdma()?])?;
    let conn = pending.connect(&conn_blob).await?;

    // Reads do not involve this side; wait until the requester is done with the memory.
    let (msg, buf) =
        bounded("the requester's done message", rdma.recv(dev.alloc(64, Access::LOCAL_READ_WRITE)?.buf())).await?;
    let msg = msg?;
    if buf.to_vec()[..msg.len] != *b"done" {
        return Err(mismatch(format!("unexpected message: {msg:?}")));
    }
    let mut bye = buf.memory().slice(0..3);
    bye.write(0, b"bye");
    let (res, _) = bounded("rdma.send", conn.send(bye)).await?;
    res
}
