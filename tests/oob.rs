//! The out-of-band bootstraps across real processes: `TcpOob` with four processes meeting at
//! rank 0's address on 127.0.0.1 (the members are re-executions of this test binary; rank 0
//! is the test itself, on a port the system picked), first exchanging bytes directly, then
//! bootstrapping a host-only communicator (`HostComm`) whose allreduce every member checks.
//! `UnixOob` is covered the same way by `tests/coll_host.rs`, `tests/urom.rs` and
//! `tests/urom_coll.rs`.

use std::future::Future;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use async_doca::coll::{HostComm, ReduceOp, TypedBuf};
use async_doca::oob::{Oob, OobRequest, TcpOob, TcpRendezvous, OOB_ADDR_ENV, OOB_RANK_ENV, OOB_SIZE_ENV};
use async_doca::time::timeout;
use async_doca::{Access, Device, Error, IdleMode, Result, Runtime};

mod common;

/// Every wait is bounded: a bug shows up as a failure, never as a hang.
const LIMIT: Duration = Duration::from_secs(60);
/// Which exchange the children run: "bytes" or "hostcomm".
const MODE_ENV: &str = "ASYNC_DOCA_TEST_OOB_MODE";
const MEMBERS: u32 = 4;

/// Member `rank`'s contribution to round `round` (lengths differ per round, not per member).
fn part(rank: u32, round: usize) -> Vec<u8> {
    let len = [0usize, 1, 8, 4096, 300_000][round];
    (0..len).map(|i| (i as u32 * 31 + rank * 7 + round as u32) as u8).collect()
}

/// Tests one request until it completes (bounded).
fn finish(mut req: Box<dyn OobRequest>) -> Vec<u8> {
    let deadline = Instant::now() + LIMIT;
    loop {
        if let Some(all) = req.test().unwrap() {
            return all;
        }
        assert!(Instant::now() < deadline, "an allgather did not finish in time");
        std::thread::sleep(Duration::from_micros(100));
    }
}

/// The allgather rounds of "bytes" mode, checked on whoever runs them.
fn exchange_bytes(oob: &impl Oob) {
    for round in 0..5 {
        let all = finish(oob.allgather(&part(oob.rank(), round)).unwrap());
        let want: Vec<u8> = (0..oob.size()).flat_map(|r| part(r, round)).collect();
        assert_eq!(all, want, "rank {}: round {round}", oob.rank());
    }
}

async fn bounded<T>(f: impl Future<Output = T>) -> Result<T> {
    timeout(LIMIT, f).await.map_err(Error::from)
}

/// "hostcomm" mode: a communicator bootstrapped over `oob`, one checked allreduce, closed.
fn allreduce_over(oob: TcpOob) -> Result<()> {
    // Five processes share two cores: spin only briefly before sleeping.
    let rt = Runtime::builder().cpus("0".parse()?).idle(IdleMode::Adaptive(Duration::from_micros(50))).build()?;
    rt.block_on(async move {
        let (rank, size) = (oob.rank(), oob.size());
        let dev = Device::open_default()?;
        let comm = bounded(HostComm::builder(&dev, oob).build()).await??;
        let n = 1000;
        let rw = Access::LOCAL_READ_WRITE | Access::RDMA_READ | Access::RDMA_WRITE;
        let mut src = TypedBuf::<i64>::alloc(&dev, n, rw)?;
        src.write_from(&(0..n).map(|i| i as i64 * (i64::from(rank) + 1)).collect::<Vec<_>>())?;
        let mut dst = TypedBuf::<i64>::alloc(&dev, n, rw)?;
        bounded(comm.allreduce(&src, &mut dst, ReduceOp::Sum)).await??;
        // Σ over ranks of i × (rank + 1) = i × size(size + 1)/2.
        let factor = i64::from(size) * (i64::from(size) + 1) / 2;
        let want: Vec<i64> = (0..n).map(|i| i as i64 * factor).collect();
        assert_eq!(dst.read_vec(), want, "rank {rank}: allreduce result");
        bounded(comm.close()).await?
    })
}

/// Starts ranks 1..MEMBERS as child processes told to meet at `addr`.
fn spawn_children(addr: std::net::SocketAddr, mode: &str) -> Vec<common::Reap> {
    (1..MEMBERS)
        .map(|rank| {
            let child = Command::new(std::env::current_exe().unwrap())
                .args(["--exact", "child_member", "--ignored", "--nocapture", "--test-threads=1"])
                .env(OOB_ADDR_ENV, addr.to_string())
                .env(OOB_RANK_ENV, rank.to_string())
                .env(OOB_SIZE_ENV, MEMBERS.to_string())
                .env(MODE_ENV, mode)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            common::Reap(Some(child))
        })
        .collect()
}

/// Waits (bounded) for every child; each must succeed and say so.
fn expect_children_ok(children: &mut [common::Reap]) {
    let deadline = Instant::now() + LIMIT;
    for (i, c) in children.iter_mut().enumerate() {
        let child = c.0.as_mut().unwrap();
        while child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "rank {} did not finish in time", i + 1);
            std::thread::sleep(Duration::from_millis(10));
        }
        let out = c.0.take().unwrap().wait_with_output().unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success() && text.contains("OOB-MEMBER-OK"), "rank {}:\n{text}", i + 1);
    }
}

#[test]
fn tcp_rendezvous_across_four_processes() {
    let rv = TcpRendezvous::bind("127.0.0.1:0").unwrap();
    let mut children = spawn_children(rv.local_addr().unwrap(), "bytes");
    let oob = rv.accept(MEMBERS, LIMIT).unwrap();
    assert_eq!((oob.rank(), oob.size()), (0, MEMBERS));
    exchange_bytes(&oob);
    expect_children_ok(&mut children);
}

#[test]
fn tcp_rendezvous_bootstraps_a_host_communicator_across_four_processes() {
    let rv = TcpRendezvous::bind("127.0.0.1:0").unwrap();
    let mut children = spawn_children(rv.local_addr().unwrap(), "hostcomm");
    let oob = rv.accept(MEMBERS, LIMIT).unwrap();
    allreduce_over(oob).unwrap();
    expect_children_ok(&mut children);
}

/// One member of the cross-process tests (ranks 1..); run only by them.
#[test]
#[ignore = "started by the cross-process tests as one of their members"]
fn child_member() {
    let mode = std::env::var(MODE_ENV).expect("started by a cross-process test");
    let oob = TcpOob::from_env(LIMIT).unwrap();
    match mode.as_str() {
        "bytes" => exchange_bytes(&oob),
        "hostcomm" => allreduce_over(oob).unwrap(),
        other => panic!("unknown mode {other}"),
    }
    println!("OOB-MEMBER-OK");
}
