//! Send with immediate data between two processes: the receiver checks every payload and
//! every immediate.
//!
//! The parent (the sender) starts this same program again as the child (the receiver); they
//! exchange connection blobs over the child's stdin/stdout. The sender sends 64 messages of
//! different lengths, all in flight at once, each with the message's number in its 32-bit
//! immediate. The receiver receives them one at a time, checks the opcode, that the length
//! and payload match the number in the immediate, and that every number arrives once, then
//! answers with a send with immediate of its own (the count). The program exits 0 only if
//! the answer is right and the child exited 0.
//!
//! ```text
//! cargo run --release --example rdma_send_imm
//! ```

use std::process::ExitCode;

use async_doca::rdma::{Opcode, Rdma};
use async_doca::{spawn_local, Access, Device, Result};

#[path = "common/mod.rs"]
mod common;
use common::{bounded, mismatch, pattern, Peer};

const MESSAGES: u32 = 64;
const MAX_LEN: usize = 4096;
/// The immediate of message `i` is `TAG | i`.
const TAG: u32 = 0x5E0D_0000;

/// The length of message `i` (1 to `MAX_LEN` bytes).
fn len_of(i: u32) -> usize {
    1 + (i as usize * 997) % MAX_LEN
}

fn main() -> ExitCode {
    common::main("rdma_send_imm", sender, receiver)
}

async fn sender(mut peer: Peer) -> Result<String> {
    let dev = Device::open_default()?;
    let rdma = Rdma::builder(&dev).build().await?;
    let (blob, pending) = rdma.export()?;
    let [conn_blob] = peer.exchange(&[&blob])?;
    let conn = pending.connect(&conn_blob).await?;

    let answer = spawn_local({
        let (rdma, buf) = (rdma.clone(), dev.alloc(64, Access::LOCAL_READ_WRITE)?.buf());
        async move { rdma.recv(buf).await }
    });

    let src = dev.alloc(MESSAGES as usize * MAX_LEN, Access::LOCAL_READ_WRITE)?;
    let sends: Vec<_> = (0..MESSAGES)
        .map(|i| {
            let at = i as usize * MAX_LEN;
            let mut buf = src.slice(at..at + len_of(i));
            buf.write(0, &pattern(len_of(i), i));
            let conn = conn.clone();
            spawn_local(async move { conn.send_imm(buf, TAG | i).await.0 })
        })
        .collect();
    for s in sends {
        bounded("rdma.send_imm", s).await???;
    }

    let (msg, buf) = bounded("the receiver's answer", answer).await??;
    let msg = msg?;
    if msg.opcode != Opcode::SendImm || msg.imm != Some(MESSAGES) || buf.to_vec()[..msg.len] != *b"all received" {
        return Err(mismatch(format!("unexpected answer: {msg:?}")));
    }
    Ok(format!("rdma_send_imm: {MESSAGES} messages with immediates sent, payloads and immediates verified"))
}

async fn receiver(mut peer: Peer) -> Result<()> {
    let dev = Device::open_default()?;
    let rdma = Rdma::builder(&dev).build().await?;
    let (blob, pending) = rdma.export()?;
    let [conn_blob] = peer.exchange(&[&blob])?;
    let conn = pending.connect(&conn_blob).await?;

    let mem = dev.alloc(MAX_LEN, Access::LOCAL_READ_WRITE)?;
    let mut buf = mem.buf();
    let mut seen = vec![false; MESSAGES as usize];
    for _ in 0..MESSAGES {
        let (msg, b) = bounded("a message", rdma.recv(buf)).await?;
        buf = b;
        let msg = msg?;
        let i = match msg.imm {
            Some(imm) if msg.opcode == Opcode::SendImm && imm & 0xFFFF_0000 == TAG && (imm & 0xFFFF) < MESSAGES => {
                imm & 0xFFFF
            }
            _ => return Err(mismatch(format!("unexpected message: {msg:?}"))),
        };
        if std::mem::replace(&mut seen[i as usize], true) {
            return Err(mismatch(format!("message {i} arrived twice")));
        }
        if msg.len != len_of(i) || buf.to_vec()[..msg.len] != pattern(len_of(i), i) {
            return Err(mismatch(format!("message {i}: wrong length or payload ({} bytes)", msg.len)));
        }
    }

    let mut ok = mem.slice(0..12);
    ok.write(0, b"all received");
    let (res, _) = bounded("rdma.send_imm", conn.send_imm(ok, MESSAGES)).await?;
    res
}
