//! RDMA write with immediate between two processes: each write's immediate tells the
//! responder which part of its memory just arrived, and the responder checks it at once.
//!
//! The parent (the requester) starts this same program again as the child (the responder);
//! they exchange blobs over the child's stdin/stdout (connections, and the memory the
//! responder lets peers write). The requester writes 64 chunks of 4 KiB, all in flight at
//! once, each with its chunk number as the immediate. The responder's receives complete
//! with the immediates (opcode write-with-immediate, nothing placed in the receive buffer);
//! for each it checks the chunk's bytes in its memory, then answers "verified". The program
//! exits 0 only if the answer arrived and the child exited 0.
//!
//! ```text
//! cargo run --release --example rdma_write_imm
//! ```

use std::process::ExitCode;

use async_doca::rdma::{Opcode, Rdma};
use async_doca::{spawn_local, Access, Device, Result};

#[path = "common/mod.rs"]
mod common;
use common::{bounded, connect_requester, mismatch, pattern, Peer, Requester};

const CHUNKS: u32 = 64;
const CHUNK: usize = 4096;
const LEN: usize = CHUNKS as usize * CHUNK;

fn main() -> ExitCode {
    common::main("rdma_write_imm", requester, responder)
}

async fn requester(mut peer: Peer) -> Result<String> {
    // `_rdma` keeps the context alive to the end of the function, while its operations run.
    let Requester { dev, rdma: _rdma, conn, remote, answer } = connect_requester(&mut peer).await?;

    let src = dev.alloc(LEN, Access::LOCAL_READ_WRITE)?;
    let writes: Vec<_> = (0..CHUNKS)
        .map(|i| {
            let range = i as usize * CHUNK..(i as usize + 1) * CHUNK;
            let mut s = src.slice(range.clone());
            s.write(0, &pattern(CHUNK, i));
            let (conn, d) = (conn.clone(), remote.slice(range));
            spawn_local(async move { conn.write_imm(s, d, i).await.0 })
        })
        .collect();
    for w in writes {
        bounded("rdma.write_imm", w).await???;
    }

    let (msg, buf) = bounded("the responder's answer", answer).await??;
    let msg = msg?;
    if msg.opcode != Opcode::Send || buf.to_vec()[..msg.len] != *b"verified" {
        return Err(mismatch(format!("unexpected answer: {msg:?}")));
    }
    Ok(format!("rdma_write_imm: {CHUNKS} writes with immediates of {CHUNK} bytes, each verified by the responder"))
}

async fn responder(mut peer: Peer) -> Result<()> {
    let dev = Device::open_default()?;
    let rdma = Rdma::builder(&dev).permissions(Access::LOCAL_READ_WRITE | Access::RDMA_WRITE).build().await?;
    let target = dev.alloc(LEN, Access::LOCAL_READ_WRITE | Access::RDMA_WRITE)?;
    let (blob, pending) = rdma.export()?;
    let [conn_blob] = peer.exchange(&[&blob, &target.export_rdma()?])?;
    let conn = pending.connect(&conn_blob).await?;

    // A write with immediate consumes a receive but places nothing in its buffer.
    let mut buf = dev.alloc(16, Access::LOCAL_READ_WRITE)?.buf();
    let mut seen = vec![false; CHUNKS as usize];
    for _ in 0..CHUNKS {
        let (msg, b) = bounded("a write with immediate", rdma.recv(buf)).await?;
        buf = b;
        let msg = msg?;
        let i = match msg.imm {
            Some(i) if msg.opcode == Opcode::WriteImm && i < CHUNKS && msg.len == CHUNK => i,
            _ => return Err(mismatch(format!("unexpected completion: {msg:?}"))),
        };
        if std::mem::replace(&mut seen[i as usize], true) {
            return Err(mismatch(format!("immediate {i} arrived twice")));
        }
        // The data of a write with immediate is in place when its receive completes.
        let at = i as usize * CHUNK;
        if target.slice(at..at + CHUNK).to_vec() != pattern(CHUNK, i) {
            return Err(mismatch(format!("chunk {i} is wrong")));
        }
    }

    let mut ok = dev.alloc(8, Access::LOCAL_READ_WRITE)?.buf();
    ok.write(0, b"verified");
    let (res, _) = bounded("rdma.send", conn.send(ok)).await?;
    res
}
