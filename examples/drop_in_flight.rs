//! Futures dropped while their DOCA task is in flight: a check for memory errors and leaks,
//! meant to run under valgrind (`scripts/valgrind-drop.sh`), also fine on its own.
//!
//! In one process (valgrind follows one process), on a one-worker runtime, it starts RDMA
//! operations of every kind between two connected contexts and sync event operations,
//! polls each future once so that its task is submitted, and drops the future — and often
//! the handles of the memory it uses too. The runtime must keep the buffers, registrations
//! and descriptors alive until DOCA completes the task. Then it lets everything complete
//! (posts the receives the dropped sends wait for, satisfies the dropped waits), checks the
//! data that the abandoned operations moved, leaves one receive and one wait in flight for
//! the shutdown to flush, and drops everything. It exits 0 if all checks passed; valgrind
//! adds "no invalid access, nothing definitely lost".
//!
//! ```text
//! cargo run --release --example drop_in_flight
//! scripts/valgrind-drop.sh
//! ```

use std::future::Future;
use std::process::ExitCode;
use std::time::Duration;

use async_doca::rdma::{Opcode, Rdma};
use async_doca::sync_event::SyncEvent;
use async_doca::time::timeout;
use async_doca::{Access, Device, Error, ErrorKind, Result, Runtime};
use futures_lite::future::poll_once;

/// Generous: under valgrind everything is some 50 times slower.
const LIMIT: Duration = Duration::from_secs(60);
/// A send larger than the peer's receive ring (doca-soft's are 1 MiB at most) stays in
/// flight until the peer receives it.
const BIG: usize = (1 << 20) + 64 * 1024;

fn main() -> ExitCode {
    let result = Runtime::builder().cpus("0".parse().expect("a CPU set")).build().and_then(|rt| rt.block_on(run()));
    match result {
        Ok(()) => {
            println!("drop_in_flight: futures dropped in flight; their operations completed and were checked");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("drop_in_flight: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Polls `f` once (submitting its task) and drops it; fails if it was already done.
async fn abandon<F: Future>(what: &str, f: F) -> Result<()> {
    let mut f = Box::pin(f);
    if poll_once(f.as_mut()).await.is_some() {
        return Err(check(format!("{what} finished at its first poll; nothing was dropped in flight")));
    }
    Ok(())
}

async fn bounded<T>(f: impl Future<Output = T>) -> Result<T> {
    timeout(LIMIT, f).await.map_err(Error::from)
}

fn check(msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::Other, msg.into())
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

async fn run() -> Result<()> {
    let dev = Device::open_default()?;
    let a = Rdma::builder(&dev).permissions(Access::RDMA_ALL).build().await?;
    let b = Rdma::builder(&dev).permissions(Access::RDMA_ALL).build().await?;
    let ((blob_a, pa), (blob_b, pb)) = (a.export()?, b.export()?);
    let ab = pa.connect(&blob_b).await?;
    let _ba = pb.connect(&blob_a).await?;
    let target = dev.alloc(4096, Access::RDMA_ALL)?; // b's memory, a's one-sided target
    let remote = dev.import(&target.export_rdma()?)?;

    // Two-sided, dropped: a big send (blocked on b's ring), a send with immediate and a
    // write with immediate behind it (same connection: they wait for it), each with its
    // memory handle dropped too.
    {
        let big = dev.alloc(BIG, Access::LOCAL_READ_WRITE)?;
        big.buf().write(0, &pattern(BIG, 1));
        abandon("send", ab.send(big.buf())).await?;
        let small = dev.alloc(64, Access::LOCAL_READ_WRITE)?;
        small.buf().write(0, &pattern(64, 2));
        abandon("send_imm", ab.send_imm(small.slice(0..64), 7)).await?;
        abandon("write_imm", ab.write_imm(small.slice(0..32), remote.slice(1024..1056), 8)).await?;
    }
    // One-sided, dropped: write, read, fetch_add, compare_swap (queued behind the send too).
    {
        let local = dev.alloc(4096, Access::LOCAL_READ_WRITE)?;
        local.buf().write(0, &pattern(4096, 3));
        abandon("write", ab.write(local.slice(0..100), remote.slice(2000..2100))).await?;
        abandon("read", ab.read(remote.slice(2000..2100), local.slice(200..300))).await?;
        abandon("fetch_add", ab.fetch_add(remote.slice(0..8), 5, local.slice(512..520))).await?;
        abandon("compare_swap", ab.compare_swap(remote.slice(0..8), 5, 9, local.slice(520..528))).await?;
    }
    // A receive posted on b and dropped: it takes the big send.
    abandon("recv", b.recv(dev.alloc(BIG, Access::LOCAL_READ_WRITE)?.buf())).await?;

    // Sync event operations dropped in flight.
    let ev = SyncEvent::builder(&dev).build().await?;
    abandon("wait_eq", ev.wait_eq(3)).await?;
    abandon("wait_gt", ev.wait_gt(1)).await?;

    // Now let everything complete. The dropped receive takes the big send; these two take
    // the send with immediate and the write with immediate, in order.
    let (msg, buf) = bounded(b.recv(dev.alloc(64, Access::LOCAL_READ_WRITE)?.buf())).await?;
    let msg = msg?;
    if (msg.opcode, msg.imm, msg.len) != (Opcode::SendImm, Some(7), 64) || buf.to_vec() != pattern(64, 2) {
        return Err(check(format!("the dropped send_imm arrived as {msg:?}")));
    }
    let (msg, _) = bounded(b.recv(dev.alloc(16, Access::LOCAL_READ_WRITE)?.buf())).await?;
    let msg = msg?;
    if (msg.opcode, msg.imm) != (Opcode::WriteImm, Some(8)) {
        return Err(check(format!("the dropped write_imm arrived as {msg:?}")));
    }
    // Everything submitted on the connection before this write has completed when it does.
    let fence = dev.alloc(8, Access::LOCAL_READ_WRITE)?;
    let (res, _) = bounded(ab.write(fence.buf(), remote.slice(4088..4096))).await?;
    res?;
    if target.slice(1024..1056).to_vec() != pattern(64, 2)[..32]
        || target.slice(2000..2100).to_vec() != pattern(4096, 3)[..100]
    {
        return Err(check("the dropped writes did not land"));
    }
    if target.buf().read_u64(0) != 9 {
        return Err(check("the dropped atomics did not both run"));
    }
    ev.set(3).await?;
    bounded(ev.wait_eq(3)).await??;

    // Left in flight for the shutdown to flush: a receive and a wait.
    abandon("recv at shutdown", b.recv(dev.alloc(64, Access::LOCAL_READ_WRITE)?.buf())).await?;
    abandon("wait at shutdown", ev.wait_eq(1000)).await?;
    // Let the executor run the completions of the dropped operations, then drop everything.
    async_doca::time::sleep(Duration::from_millis(50)).await;
    Ok(())
}
