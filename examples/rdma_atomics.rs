//! RDMA atomics between two processes: fetch-add on one shared counter from both sides, and
//! a compare-and-swap spin lock protecting a read-modify-write done by both.
//!
//! The parent starts this same program again as the child; they exchange blobs over the
//! child's stdin/stdout. The shared words live in the parent's memory:
//!
//! | offset | word | used with |
//! | --- | --- | --- |
//! | 0 | counter | `fetch_add` |
//! | 8 | lock (0: free, else the holder's id) | `compare_swap` |
//! | 16 | plain counter | `read`, then `write` of the value + 1, under the lock |
//! | 24 | arrivals | `fetch_add` and `read`: a start barrier |
//!
//! Both processes use RDMA on these words — the child through its connection to the parent,
//! the parent through a loopback connection between two contexts of its own (RDMA atomics
//! are atomic with respect to other RDMA atomics, not to the CPU). So that the two sides
//! really run at the same time, each first arrives at a barrier (adds 1 to the arrivals and
//! reads them until both arrived). Each side then does `ADDS` fetch-adds of 1 (its old
//! values must increase), waits until the counter shows both sides' adds (a second
//! barrier), then `ROUNDS` times: takes the lock (compare-and-swap 0 → its id until that
//! succeeds), reads the plain counter, writes it back incremented, releases the lock
//! (compare-and-swap its id → 0). Without the lock, the two read-modify-writes would lose
//! updates. The child then sends "done" with the number of times it found the lock taken;
//! the parent checks the counter (2 × `ADDS`), the plain counter (2 × `ROUNDS`) and the
//! lock (free), and exits 0 only if all match and the child exited 0.
//!
//! ```text
//! cargo run --release --example rdma_atomics
//! ```

use std::ops::Range;
use std::process::ExitCode;

use async_doca::rdma::{Connection, Rdma};
use async_doca::{spawn_local, Access, Buf, Device, Memory, RemoteMemory, Result};

#[path = "common/mod.rs"]
mod common;
use common::{bounded, mismatch, Peer};

const ADDS: u64 = 1000;
const ROUNDS: u64 = 1000;
const COUNTER: Range<usize> = 0..8;
const LOCK: Range<usize> = 8..16;
const PLAIN: Range<usize> = 16..24;
const ARRIVALS: Range<usize> = 24..32;
const PARENT_ID: u64 = 1;
const CHILD_ID: u64 = 2;

fn main() -> ExitCode {
    common::main("rdma_atomics", parent, child)
}

async fn parent(mut peer: Peer) -> Result<String> {
    let dev = Device::open_default()?;
    // The shared words; the child's context may read, write and use atomics on them.
    let words = dev.alloc(64, Access::RDMA_ALL)?;
    let rdma = Rdma::builder(&dev).permissions(Access::RDMA_ALL).build().await?;
    let (blob, pending) = rdma.export()?;
    let [conn_blob] = peer.exchange(&[&blob, &words.export_rdma()?])?;
    let _to_child = pending.connect(&conn_blob).await?;

    let done = spawn_local({
        let (rdma, buf) = (rdma.clone(), dev.alloc(64, Access::LOCAL_READ_WRITE)?.buf());
        async move { rdma.recv(buf).await }
    });

    // The parent reaches its own memory through a loopback connection, like the child does.
    let (lo, lo_peer) =
        (Rdma::builder(&dev).build().await?, Rdma::builder(&dev).permissions(Access::RDMA_ALL).build().await?);
    let ((lo_blob, lo_pending), (peer_blob, peer_pending)) = (lo.export()?, lo_peer.export()?);
    let loopback = lo_pending.connect(&peer_blob).await?;
    let _loopback_back = peer_pending.connect(&lo_blob).await?;
    let shared = dev.import(&words.export_rdma()?)?;

    let contended = work(&loopback, &shared, &dev.alloc(16, Access::LOCAL_READ_WRITE)?, PARENT_ID).await?;

    let (msg, buf) = bounded("the child's done message", done).await??;
    let msg = msg?;
    if msg.len != 12 || buf.to_vec()[..4] != *b"done" {
        return Err(mismatch(format!("unexpected message: {msg:?}")));
    }
    let child_contended = u64::from_ne_bytes(buf.to_vec()[4..12].try_into().expect("8 bytes"));
    // Both sides' operations completed before "done" and our own ones: read the results.
    let all = words.buf();
    let (counter, lock, plain) = (all.read_u64(COUNTER.start), all.read_u64(LOCK.start), all.read_u64(PLAIN.start));
    if (counter, lock, plain) != (2 * ADDS, 0, 2 * ROUNDS) {
        return Err(mismatch(format!(
            "counter {counter} (expected {}), lock {lock} (expected 0), plain counter {plain} (expected {})",
            2 * ADDS,
            2 * ROUNDS
        )));
    }
    Ok(format!(
        "rdma_atomics: counter {counter} after 2 x {ADDS} fetch_adds; plain counter {plain} after 2 x {ROUNDS} \
         locked increments; the lock was found taken {contended} + {child_contended} times"
    ))
}

async fn child(mut peer: Peer) -> Result<()> {
    let dev = Device::open_default()?;
    let rdma = Rdma::builder(&dev).build().await?;
    let (blob, pending) = rdma.export()?;
    let [conn_blob, words_blob] = peer.exchange(&[&blob])?;
    let conn = pending.connect(&conn_blob).await?;
    let shared = dev.import(&words_blob)?;

    let scratch = dev.alloc(16, Access::LOCAL_READ_WRITE)?;
    let contended = work(&conn, &shared, &scratch, CHILD_ID).await?;

    let mut done = dev.alloc(12, Access::LOCAL_READ_WRITE)?.buf();
    done.write(0, b"done");
    done.write(4, &contended.to_ne_bytes());
    let (res, _) = bounded("rdma.send", conn.send(done)).await?;
    res
}

/// One side's share: the fetch-adds, then the locked increments. `scratch` (16 bytes,
/// local read/write) holds atomic results and the plain counter's copy. Returns how many
/// lock attempts found the lock taken.
async fn work(conn: &Connection, shared: &RemoteMemory, scratch: &Memory, me: u64) -> Result<u64> {
    let other = if me == PARENT_ID { CHILD_ID } else { PARENT_ID };
    let mut result = scratch.slice(0..8);

    let (old, r) = bounded("rdma.fetch_add", conn.fetch_add(shared.slice(ARRIVALS), 1, result)).await?;
    result = r;
    old?;
    result = barrier(conn, shared, ARRIVALS, 2, result).await?;

    let mut last = None;
    for _ in 0..ADDS {
        let (old, r) = bounded("rdma.fetch_add", conn.fetch_add(shared.slice(COUNTER), 1, result)).await?;
        result = r;
        let old = old?;
        if old >= 2 * ADDS || last.is_some_and(|last| old <= last) {
            return Err(mismatch(format!("fetch_add returned {old} after {last:?}")));
        }
        last = Some(old);
    }

    result = barrier(conn, shared, COUNTER, 2 * ADDS, result).await?;

    let mut contended = 0;
    for _ in 0..ROUNDS {
        // Acquire: swap 0 for our id; the old value says who holds it.
        loop {
            let (old, r) = bounded("rdma.compare_swap", conn.compare_swap(shared.slice(LOCK), 0, me, result)).await?;
            result = r;
            match old? {
                0 => break,
                o if o == other => contended += 1,
                o => return Err(mismatch(format!("the lock holds {o}, neither side's id"))),
            }
        }
        // The critical section: a read-modify-write that is not atomic by itself.
        let (res, mut value) = bounded("rdma.read", conn.read(shared.slice(PLAIN), scratch.slice(8..16))).await?;
        res?;
        value.write_u64(0, value.read_u64(0) + 1);
        let (res, _) = bounded("rdma.write", conn.write(value, shared.slice(PLAIN))).await?;
        res?;
        // Release: only the holder may.
        let (old, r) = bounded("rdma.compare_swap", conn.compare_swap(shared.slice(LOCK), me, 0, result)).await?;
        result = r;
        if old? != me {
            return Err(mismatch("the lock was not ours at release"));
        }
    }
    Ok(contended)
}

/// Reads the word at `word` until it reaches `value` (bounded).
async fn barrier(
    conn: &Connection,
    shared: &RemoteMemory,
    word: Range<usize>,
    value: u64,
    mut buf: Buf,
) -> Result<Buf> {
    let wait = async move {
        loop {
            let (res, b) = conn.read(shared.slice(word.clone()), buf).await;
            buf = b;
            res?;
            if buf.read_u64(0) >= value {
                return Ok(buf);
            }
        }
    };
    bounded("waiting for the other side", wait).await?
}
