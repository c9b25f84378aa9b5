//! RDMA write between two processes: the requester writes into the responder's memory, the
//! responder verifies it.
//!
//! The parent (the requester) starts this same program again as the child (the responder)
//! and they exchange blobs over the child's stdin/stdout: the responder's connection and
//! the memory it lets peers write, the requester's connection. The requester then writes
//! 1 MiB into the responder's memory as 16 one-sided writes, all in flight at once, and
//! sends a "done" message. The responder receives it, checks every byte and answers
//! "verified". The program exits 0 only if the answer arrived and the child exited 0.
//!
//! ```text
//! cargo run --release --example rdma_write
//! ```

use std::process::ExitCode;

use async_doca::rdma::{Opcode, Rdma};
use async_doca::{spawn_local, Access, Device, Result};

#[path = "common/mod.rs"]
mod common;
use common::{bounded, connect_requester, mismatch, pattern, Peer, Requester};

const LEN: usize = 1 << 20;
const CHUNK: usize = 64 * 1024;
const SEED: u32 = 1;

fn main() -> ExitCode {
    common::main("rdma_write", requester, responder)
}

async fn requester(mut peer: Peer) -> Result<String> {
    // `_rdma` keeps the context alive to the end of the function, while its operations run.
    let Requester { dev, rdma: _rdma, conn, remote, answer } = connect_requester(&mut peer).await?;

    let src = dev.alloc(LEN, Access::LOCAL_READ_WRITE)?;
    src.buf().write(0, &pattern(LEN, SEED));
    let writes: Vec<_> = (0..LEN / CHUNK)
        .map(|i| {
            let range = i * CHUNK..(i + 1) * CHUNK;
            let (conn, s, d) = (conn.clone(), src.slice(range.clone()), remote.slice(range));
            spawn_local(async move { conn.write(s, d).await.0 })
        })
        .collect();
    let n = writes.len();
    for w in writes {
        bounded("rdma.write", w).await???;
    }

    // The writes completed, so they are visible to the responder before this message is.
    let mut done = dev.alloc(8, Access::LOCAL_READ_WRITE)?.buf();
    done.write_u64(0, LEN as u64);
    let (res, _) = bounded("rdma.send", conn.send(done)).await?;
    res?;

    let (msg, buf) = bounded("the responder's answer", answer).await??;
    let msg = msg?;
    if msg.opcode != Opcode::Send || buf.to_vec()[..msg.len] != *b"verified" {
        return Err(mismatch(format!("unexpected answer: {msg:?}")));
    }
    Ok(format!("rdma_write: {LEN} bytes written in {n} writes, verified by the responder"))
}

async fn responder(mut peer: Peer) -> Result<()> {
    let dev = Device::open_default()?;
    // The context and the memory both allow remote writes.
    let rdma = Rdma::builder(&dev).permissions(Access::LOCAL_READ_WRITE | Access::RDMA_WRITE).build().await?;
    let target = dev.alloc(LEN, Access::LOCAL_READ_WRITE | Access::RDMA_WRITE)?;
    let (blob, pending) = rdma.export()?;
    let [conn_blob] = peer.exchange(&[&blob, &target.export_rdma()?])?;
    let conn = pending.connect(&conn_blob).await?;

    let (msg, buf) =
        bounded("the requester's done message", rdma.recv(dev.alloc(64, Access::LOCAL_READ_WRITE)?.buf())).await?;
    let msg = msg?;
    if msg.len != 8 || buf.read_u64(0) != LEN as u64 {
        return Err(mismatch(format!("unexpected done message: {msg:?}")));
    }
    let got = target.buf().to_vec();
    if let Some(at) = got.iter().zip(pattern(LEN, SEED)).position(|(a, b)| *a != b) {
        return Err(mismatch(format!("byte {at} of the written memory is wrong")));
    }

    let mut ok = dev.alloc(8, Access::LOCAL_READ_WRITE)?.buf();
    ok.write(0, b"verified");
    let (res, _) = bounded("rdma.send", conn.send(ok)).await?;
    res
}
