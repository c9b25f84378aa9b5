//! DMA as futures: local and imported (PCI-exported) memory in one process, the host/DPU
//! pattern across two processes, error kinds, a copy future dropped mid-flight, pipelining
//! and back-pressure, and an exporter killed between copies.

use std::time::Duration;

use async_doca::dma::{Dma, LaneOp, MemcpyFuture};
use async_doca::time::timeout;
use async_doca::{spawn_local, Access, Device, Error, ErrorKind, Result, Runtime};

mod common;

/// Every wait in these tests is bounded: a bug shows up as a failure, never as a hang.
const LIMIT: Duration = Duration::from_secs(30);

fn rt() -> Runtime {
    Runtime::builder().cpus("0".parse().unwrap()).build().unwrap()
}

async fn bounded<T>(f: impl std::future::Future<Output = T>) -> Result<T> {
    timeout(LIMIT, f).await.map_err(Error::from)
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

const HOST: Access = Access::from_bits(Access::LOCAL_READ_WRITE.bits() | Access::PCI_READ_WRITE.bits());

#[test]
fn every_direction_in_one_process() {
    rt().block_on(async {
        let dev = Device::open_default()?;
        let dma = Dma::builder(&dev).build().await?;
        let host = dev.alloc(8192, HOST)?;
        host.slice(0..4096).write(0, &pattern(4096, 3));
        let remote = dev.import(&host.export_pci()?)?;
        let local = dev.alloc(8192, Access::LOCAL_READ_WRITE)?;

        // remote -> local
        let (r, _, dst) = bounded(dma.memcpy(remote.slice(0..4096), local.slice(0..4096))).await?;
        r?;
        assert_eq!(dst.to_vec(), pattern(4096, 3));
        // local -> local
        let (r, _, dst) = bounded(dma.memcpy(dst, local.slice(4096..8192))).await?;
        r?;
        assert_eq!(dst.to_vec(), pattern(4096, 3));
        // local -> remote
        let (r, _, _) = bounded(dma.memcpy(dst, remote.slice(4096..8192))).await?;
        r?;
        assert_eq!(host.slice(4096..8192).to_vec(), pattern(4096, 3));
        // remote -> remote, into a longer destination (only the source length is written)
        host.slice(0..10).write(0, b"0123456789");
        let (r, _, _) = bounded(dma.memcpy(remote.slice(0..10), remote.slice(100..200))).await?;
        r?;
        assert_eq!(host.slice(110..111).to_vec(), [pattern(4096, 3)[110]], "nothing past the source length");
        assert_eq!(host.slice(100..110).to_vec(), b"0123456789");
        // An empty copy completes at once.
        let (r, _, _) = dma.memcpy(local.slice(0..0), local.slice(0..0)).await;
        r?;
        Ok::<_, Error>(())
    })
    .unwrap();
}

#[test]
fn error_kinds() {
    rt().block_on(async {
        let dev = Device::open_default()?;
        let dma = Dma::builder(&dev).build().await?;
        let local = dev.alloc(4096, Access::LOCAL_READ_WRITE)?;

        // Destination too short: refused before anything is submitted.
        let (r, src, _) = dma.memcpy(local.slice(0..100), local.slice(200..250)).await;
        assert_eq!(r.unwrap_err().kind(), ErrorKind::InvalidArgument);
        assert_eq!(src.len(), 100, "the buffers come back on failure");

        // A read-only local destination.
        let ro = dev.alloc(4096, Access::LOCAL_READ_ONLY)?;
        let (r, _, _) = bounded(dma.memcpy(local.slice(0..8), ro.slice(0..8))).await?;
        assert_eq!(r.unwrap_err().kind(), ErrorKind::PermissionDenied);

        // Memory exported read-only over PCI: readable, not writable.
        let host =
            dev.alloc(4096, Access::from_bits(Access::LOCAL_READ_WRITE.bits() | Access::PCI_READ_ONLY.bits()))?;
        let remote = dev.import(&host.export_pci()?)?;
        let (r, _, _) = bounded(dma.memcpy(local.slice(0..8), remote.slice(0..8))).await?;
        assert_eq!(r.unwrap_err().kind(), ErrorKind::PermissionDenied);
        let (r, _, _) = bounded(dma.memcpy(remote.slice(0..8), local.slice(0..8))).await?;
        r?;

        // An RDMA export is not reachable by DMA.
        let rdma_mem = dev.alloc(4096, Access::RDMA_ALL)?;
        let rdma_remote = dev.import(&rdma_mem.export_rdma()?)?;
        let (r, _, _) = bounded(dma.memcpy(rdma_remote.slice(0..8), local.slice(0..8))).await?;
        assert_eq!(r.unwrap_err().kind(), ErrorKind::PermissionDenied);

        // The context keeps working after failures.
        let (r, _, _) = bounded(dma.memcpy(local.slice(0..8), local.slice(8..16))).await?;
        r?;
        Ok::<_, Error>(())
    })
    .unwrap();
}

/// A copy that fails in DOCA stops the DMA context (as DOCA's does): the copies submitted in
/// the same batch after it are flushed (`Cancelled`), the ones before it stand, and the `Dma`
/// restarts its context, so the next copies, single or through lanes, run normally; several
/// failures in a row each cost only themselves. Without inline progress, so that the three
/// copies polled together go to DOCA in one batch (with it, the third one is submitted after
/// the failure was reported and waits for the restart instead).
#[test]
fn a_failed_copy_stops_the_context_which_restarts_for_the_next_copies() {
    let rt = Runtime::builder().cpus("0".parse().unwrap()).inline_progress(false).build().unwrap();
    rt.block_on(async {
        let dev = Device::open_default()?;
        let dma = Dma::builder(&dev).build().await?;
        let local = dev.alloc(4096, Access::LOCAL_READ_WRITE)?;
        local.slice(0..24).write(0, &pattern(24, 3));
        let ro = dev.alloc(4096, Access::LOCAL_READ_ONLY)?;
        let a = dma.memcpy(local.slice(0..8), local.slice(100..108));
        let b = dma.memcpy(local.slice(8..16), ro.slice(0..8));
        let c = dma.memcpy(local.slice(16..24), local.slice(200..208));
        let ((ra, _, da), ((rb, _, _), (rc, _, _))) =
            bounded(futures_lite::future::zip(a, futures_lite::future::zip(b, c))).await?;
        ra?;
        assert_eq!(da.to_vec(), pattern(24, 3)[0..8]);
        assert_eq!(rb.unwrap_err().kind(), ErrorKind::PermissionDenied);
        assert_eq!(rc.unwrap_err().kind(), ErrorKind::Cancelled, "flushed with the failed copy");
        assert_eq!(local.slice(200..208).to_vec(), vec![0u8; 8], "a flushed copy writes nothing");

        for round in 0..3u8 {
            // The next copy waits for the restart and runs.
            let (r, _, d) = bounded(dma.memcpy(local.slice(16..24), local.slice(300..308))).await?;
            r?;
            assert_eq!(d.to_vec(), pattern(24, 3)[16..24], "round {round}");
            // Another failure costs only itself.
            let (r, _, _) = bounded(dma.memcpy(local.slice(0..8), ro.slice(8..16))).await?;
            assert_eq!(r.unwrap_err().kind(), ErrorKind::PermissionDenied);
        }
        // Lanes after a failure: every copy runs.
        let host = dev.alloc(1024, HOST)?;
        let remote = dev.import(&host.export_pci()?)?;
        let mut lanes = dma.lanes(LaneOp::CopyOut(remote.slice(0..1024)), local.slice(0..1024), 4)?;
        for _ in 0..8 {
            let (prev, lane) = bounded(lanes.lane()).await?;
            if let Some(r) = prev {
                r?;
            }
            lane.submit();
        }
        while let Some((r, _)) = bounded(lanes.next()).await? {
            r?;
        }
        assert_eq!(host.slice(0..24).to_vec(), pattern(24, 3));
        Ok::<_, Error>(())
    })
    .unwrap();
}

// The copy future is a named type that is `Unpin` and `Debug` (fails to compile otherwise).
const _: fn() = || {
    fn named<T: std::future::Future + Unpin + std::fmt::Debug>() {}
    named::<MemcpyFuture<'static, async_doca::Buf, async_doca::RemoteSlice>>();
    named::<MemcpyFuture<'static, async_doca::RemoteSlice, async_doca::Buf>>();
};

/// A check that fails before submission (or an empty copy) resolves at the first poll, with
/// both regions; a future dropped unpolled copies nothing.
#[test]
fn copies_decided_before_submission_resolve_at_the_first_poll() {
    use std::pin::Pin;
    use std::task::{Context, Poll, Waker};
    fn poll_once<F: std::future::Future + Unpin>(f: &mut F) -> Poll<F::Output> {
        Pin::new(f).poll(&mut Context::from_waker(Waker::noop()))
    }
    rt().block_on(async {
        let dev = Device::open_default()?;
        let dma = Dma::builder(&dev).build().await?;
        let mem = dev.alloc(64, Access::LOCAL_READ_WRITE)?;
        mem.slice(0..8).write_u64(0, 7);

        let mut f = dma.memcpy(mem.slice(0..16), mem.slice(16..24));
        match poll_once(&mut f) {
            Poll::Ready((Err(e), s, d)) => {
                assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
                assert_eq!((s.len(), d.len()), (16, 8), "both regions come back");
            }
            other => panic!("expected an error at once, got {:?}", other.map(|(r, _, _)| r)),
        }
        let mut f = dma.memcpy(mem.slice(0..0), mem.slice(8..16));
        assert!(matches!(poll_once(&mut f), Poll::Ready((Ok(()), _, _))), "an empty copy is done at once");

        // Dropped unpolled: nothing copied; a later copy works.
        drop(dma.memcpy(mem.slice(0..8), mem.slice(32..40)));
        let (r, _, _) = bounded(dma.memcpy(mem.slice(0..8), mem.slice(48..56))).await?;
        r?;
        assert_eq!(mem.slice(32..40).read_u64(0), 0, "the dropped copy ran");
        assert_eq!(mem.slice(48..56).read_u64(0), 7);
        Ok::<_, Error>(())
    })
    .unwrap();
}

#[test]
fn many_copies_in_flight_with_a_small_pool_and_a_dropped_future() {
    rt().block_on(async {
        let dev = Device::open_default()?;
        // Two tasks and four descriptors: most copies wait for a free task.
        let dma = Dma::builder(&dev).max_tasks(2).descriptors(4).build().await?;
        const N: usize = 64;
        const CHUNK: usize = 1024;
        let src = dev.alloc(N * CHUNK, Access::LOCAL_READ_WRITE)?;
        src.buf().write(0, &pattern(N * CHUNK, 9));
        let dst = dev.alloc(N * CHUNK, Access::LOCAL_READ_WRITE)?;
        let mut joins = Vec::new();
        for i in 0..N {
            let (dma, s, d) =
                (dma.clone(), src.slice(i * CHUNK..(i + 1) * CHUNK), dst.slice(i * CHUNK..(i + 1) * CHUNK));
            joins.push(spawn_local(async move { dma.memcpy(s, d).await.0 }));
        }
        // A future polled once and dropped: the copy is not cancelled and nothing leaks.
        {
            let fut = dma.memcpy(src.slice(0..8), dst.slice(0..8));
            let mut fut = Box::pin(fut);
            let _ = poll_once(fut.as_mut()).await;
        }
        for j in joins {
            bounded(j).await???;
        }
        assert_eq!(dst.buf().to_vec(), pattern(N * CHUNK, 9));
        Ok::<_, Error>(())
    })
    .unwrap();
}

/// Polls a future once (dropping it afterwards is the caller's business).
/// Completed memcpy tasks are kept and re-initialised for the next copy (source,
/// destination, user data), and descriptors are lent again by the memory: whatever one copy
/// left must not leak into the next. Sizes, offsets, directions and contexts alternate; a
/// failed copy in between is not kept.
#[test]
fn reused_copies_carry_nothing_stale() {
    rt().block_on(async {
        let dev = Device::open_default()?;
        let dmas = [Dma::builder(&dev).build().await?, Dma::builder(&dev).build().await?];
        let host = dev.alloc(1 << 16, HOST)?;
        let remote = dev.import(&host.export_pci()?)?;
        let local = dev.alloc(1 << 16, Access::LOCAL_READ_WRITE)?;
        for i in 0..40usize {
            let dma = &dmas[i % 2];
            let len = [8, 1000, 1, 4096, 300][i % 5];
            let (from, to) = ([0, 64, 8][i % 3], 8192 + [0, 4096, 512][i % 3]);
            let seed = i as u8;
            // A destination longer than the copy, filled with a marker: only `len` bytes change.
            if i % 2 == 0 {
                host.slice(from..from + len).write(0, &pattern(len, seed));
                local.slice(to..to + len + 16).fill(0xee);
                let (r, _, dst) =
                    bounded(dma.memcpy(remote.slice(from..from + len), local.slice(to..to + len + 16))).await?;
                r?;
                assert_eq!(dst.to_vec()[..len], pattern(len, seed)[..], "copy {i}");
                assert_eq!(dst.to_vec()[len..], [0xee; 16], "copy {i}: past the source");
            } else {
                local.slice(from..from + len).write(0, &pattern(len, seed));
                host.slice(to..to + len + 16).fill(0xee);
                let (r, _, _) =
                    bounded(dma.memcpy(local.slice(from..from + len), remote.slice(to..to + len + 16))).await?;
                r?;
                assert_eq!(host.slice(to..to + len).to_vec(), pattern(len, seed), "copy {i}");
                assert_eq!(host.slice(to + len..to + len + 16).to_vec(), [0xee; 16], "copy {i}: past the source");
            }
            if i % 7 == 3 {
                // A copy into memory without LOCAL_READ_WRITE fails, and its task is not kept.
                let ro = dev.alloc(64, Access::PCI_READ_ONLY)?;
                let (r, _, _) = bounded(dma.memcpy(local.slice(0..8), ro.slice(0..8))).await?;
                assert!(r.is_err(), "copy {i}: a read-only destination");
            }
        }
        Ok::<_, Error>(())
    })
    .unwrap();
}

async fn poll_once<F: std::future::Future + Unpin>(mut f: F) -> Option<F::Output> {
    std::future::poll_fn(move |cx| match std::pin::Pin::new(&mut f).poll(cx) {
        std::task::Poll::Ready(v) => std::task::Poll::Ready(Some(v)),
        std::task::Poll::Pending => std::task::Poll::Ready(None),
    })
    .await
}

/// Copies through `dma::Lanes`, in and out, more copies than lanes (each lane submitted
/// again and again), a batch at a time and one at a time: every copy lands where its lane
/// says, results come in submission order, and reused lanes carry nothing stale.
#[test]
fn copies_in_and_out_through_lanes() {
    rt().block_on(async {
        const LANES: usize = 8;
        const LEN: usize = 64;
        let dev = Device::open_default()?;
        let dma = Dma::builder(&dev).build().await?;
        let host = dev.alloc(2 * LANES * LEN, HOST)?;
        let remote = dev.import(&host.export_pci()?)?;
        let local = dev.alloc(2 * LANES * LEN, Access::LOCAL_READ_WRITE)?;
        let (inbound, outbound) = (0..LANES * LEN, LANES * LEN..2 * LANES * LEN);

        // Out: 5 rounds over 8 lanes, lane k writing round r's stamp into host record k.
        let mut out =
            dma.lanes(LaneOp::CopyOut(remote.slice(outbound.clone())), local.slice(outbound.clone()), LANES)?;
        let mut order = Vec::new();
        for round in 0..5u64 {
            for _ in 0..LANES {
                let (prev, mut lane) = bounded(out.lane()).await?;
                if let Some(r) = prev {
                    r?;
                }
                order.push(lane.index());
                lane.fill(round as u8);
                lane.write_u64(0, round * 100 + lane.index() as u64);
                lane.submit();
            }
        }
        while let Some((r, _)) = bounded(out.next()).await? {
            r?;
        }
        assert_eq!(order, (0..5 * LANES).map(|i| i % LANES).collect::<Vec<_>>(), "lanes are taken in turn");
        for k in 0..LANES {
            let record = host.slice(outbound.start + k * LEN..outbound.start + (k + 1) * LEN);
            assert_eq!(record.read_u64(0), 400 + k as u64, "record {k} holds the last round");
            assert!(record.to_vec()[8..].iter().all(|&b| b == 4), "record {k} is the last round's, whole");
        }

        // In: the host changes its records between rounds; each round's copies bring that
        // round's bytes, a batch at a time.
        let mut inn = dma.lanes(LaneOp::CopyIn(remote.slice(inbound.clone())), local.slice(inbound.clone()), LANES)?;
        for round in 0..4u8 {
            host.slice(inbound.clone()).write(0, &pattern(LANES * LEN, round));
            let mut batch = bounded(inn.batch()).await?;
            let mut submitted = Vec::new();
            while let Some((prev, lane)) = batch.lane() {
                assert!(prev.is_none(), "every lane is idle between rounds");
                submitted.push(lane.index());
                lane.submit();
            }
            assert_eq!(submitted.len(), LANES);
            let mut taken = Vec::new();
            while let Some((r, lane)) = bounded(inn.next()).await? {
                r?;
                let k = lane.index();
                taken.push(k);
                let want = &pattern(LANES * LEN, round)[k * LEN..(k + 1) * LEN];
                assert_eq!(lane.buf().to_vec(), want, "round {round}, lane {k}");
            }
            assert_eq!(taken, submitted, "results in submission order");
        }
        Ok::<_, Error>(())
    })
    .unwrap();
}

/// Lanes deeper than the context's task pool share the tasks they can get; lanes dropped with
/// copies in flight keep their memory until DOCA is done; bad shapes are refused.
#[test]
fn lanes_deeper_than_the_pool_dropped_in_flight_and_refused_shapes() {
    rt().block_on(async {
        let dev = Device::open_default()?;
        // Two descriptors per lane: the inventory is sized for the lanes, the pool is not.
        let dma = Dma::builder(&dev).max_tasks(4).descriptors(2 * 32 + 8).build().await?;
        let host = dev.alloc(32 * 16, HOST)?;
        host.buf().write(0, &pattern(32 * 16, 9));
        let remote = dev.import(&host.export_pci()?)?;
        let local = dev.alloc(32 * 16, Access::LOCAL_READ_WRITE)?;

        let mut lanes = dma.lanes(LaneOp::CopyIn(remote.slice(..)), local.buf(), 32)?;
        for _ in 0..3 {
            let mut batch = bounded(lanes.batch()).await?;
            while let Some((prev, lane)) = batch.lane() {
                if let Some(r) = prev {
                    r?;
                }
                lane.submit();
            }
        }
        let mut seen = 0;
        while let Some((r, lane)) = bounded(lanes.next()).await? {
            r?;
            let k = lane.index();
            assert_eq!(lane.buf().to_vec(), pattern(32 * 16, 9)[k * 16..(k + 1) * 16]);
            seen += 1;
        }
        assert_eq!(seen, 32, "every lane has a copy in flight after the batches");
        drop(lanes);

        // Dropped with copies in flight: nothing is freed under DOCA, and the copies still
        // land (a copy into the host's memory, from a fresh local pattern): the batch's
        // deferred copies run at the next progress, which the copy below forces, with the
        // lanes' memory and descriptors kept alive by the abandoned group.
        local.buf().write(0, &pattern(32 * 16, 21));
        let mut lanes = dma.lanes(LaneOp::CopyOut(remote.slice(..)), local.buf(), 32)?;
        let mut batch = bounded(lanes.batch()).await?;
        while let Some((_, lane)) = batch.lane() {
            lane.submit();
        }
        drop(lanes);
        let scratch = dev.alloc(16, Access::LOCAL_READ_WRITE)?;
        let (r, _, back) = bounded(dma.memcpy(remote.slice(0..16), scratch.buf())).await?;
        r?;
        assert_eq!(back.to_vec(), pattern(32 * 16, 21)[..16], "copied after the abandoned ones");
        // The pool has 4 tasks: lanes 0-3 were submitted; the others waited for room and
        // were discarded with the lanes.
        assert_eq!(host.slice(0..64).to_vec(), pattern(32 * 16, 21)[..64], "the abandoned lanes' copies landed");

        let kind = |r: Result<async_doca::dma::Lanes<'_>>| r.map(drop).map_err(|e| e.kind());
        let short = dma.lanes(LaneOp::CopyOut(remote.slice(0..16)), local.slice(0..32), 2);
        assert_eq!(kind(short), Err(ErrorKind::InvalidArgument), "an imported slice shorter than the buffer");
        assert_eq!(
            kind(dma.lanes(LaneOp::CopyIn(remote.slice(..)), local.slice(0..30), 4)),
            Err(ErrorKind::InvalidArgument)
        );
        assert_eq!(kind(dma.lanes(LaneOp::CopyIn(remote.slice(..)), local.buf(), 0)), Err(ErrorKind::InvalidArgument));
        Ok::<_, Error>(())
    })
    .unwrap();
}

mod cross_process {
    use super::*;
    use crate::common::{hex, unhex, Reap};
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};

    const BLOB_ENV: &str = "ASYNC_DOCA_TEST_DMA_HOST_BLOB";
    const LEN: usize = 1 << 20;

    fn child(name: &str) -> Command {
        let mut c = Command::new(std::env::current_exe().unwrap());
        c.args(["--exact", name, "--ignored", "--nocapture", "--test-threads=1"]);
        c
    }

    /// The parent is the host: it exports 1 MiB over PCI and starts the "DPU" process, which
    /// copies it in, transforms it, and copies the result back to the second half.
    #[test]
    fn host_and_dpu_processes() {
        rt().block_on(async {
            let dev = Device::open_default()?;
            let host = dev.alloc(2 * LEN, HOST)?;
            host.slice(0..LEN).write(0, &pattern(LEN, 5));
            let mut c = child("cross_process::dpu_side")
                .env(BLOB_ENV, hex(&host.export_pci()?))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .spawn()
                .unwrap();
            // The DPU side needs nothing from this process's executor (DMA is one-sided):
            // a blocking wait is fine. The child bounds its own waits.
            let status = c.wait().unwrap();
            assert!(status.success(), "dpu side failed: {status}");
            let expect: Vec<u8> = pattern(LEN, 5).iter().map(|b| b ^ 0xA5).collect();
            assert!(host.slice(LEN..2 * LEN).to_vec() == expect, "the DPU's result landed");
            Ok::<_, Error>(())
        })
        .unwrap();
    }

    #[test]
    #[ignore = "started by host_and_dpu_processes as its peer process"]
    fn dpu_side() {
        let blob = unhex(&std::env::var(BLOB_ENV).expect("started by the parent test"));
        rt().block_on(async {
            let dev = Device::open_default()?;
            let host = dev.import(&blob)?;
            let dma = Dma::builder(&dev).build().await?;
            let local = dev.alloc(LEN, Access::LOCAL_READ_WRITE)?;
            let (r, _, mut buf) = bounded(dma.memcpy(host.slice(0..LEN), local.buf())).await?;
            r?;
            let mut data = buf.to_vec();
            assert!(data == pattern(LEN, 5));
            for b in &mut data {
                *b ^= 0xA5;
            }
            buf.write(0, &data);
            let (r, _, _) = bounded(dma.memcpy(buf, host.slice(LEN..2 * LEN))).await?;
            r?;
            Ok::<_, Error>(())
        })
        .unwrap();
    }

    /// The parent is the DPU: the host process exports memory, prints the blob and waits;
    /// the parent copies from it, kills it, and the next copies fail fast with
    /// `ConnectionLost` while local copies on the same context keep working.
    #[test]
    fn host_killed_between_copies() {
        let mut host = Reap(None);
        rt().block_on(async {
            let mut c =
                child("cross_process::host_side_waits").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
            let mut out = BufReader::new(c.stdout.take().unwrap());
            host.0 = Some(c);
            let mut line = String::new();
            let blob = loop {
                line.clear();
                assert!(out.read_line(&mut line).unwrap() > 0, "the host side exited before its blob");
                if let Some(at) = line.find("DMA-HOST ") {
                    break unhex(line[at + "DMA-HOST ".len()..].trim());
                }
            };
            let dev = Device::open_default()?;
            let remote = dev.import(&blob)?;
            let dma = Dma::builder(&dev).build().await?;
            let local = dev.alloc(LEN, Access::LOCAL_READ_WRITE)?;
            let (r, _, buf) = bounded(dma.memcpy(remote.slice(0..LEN), local.buf())).await?;
            r?;
            assert!(buf.to_vec() == pattern(LEN, 7));

            let mut c = host.0.take().unwrap();
            c.kill().unwrap();
            c.wait().unwrap();
            // The provider asks the kernel whether the exporter lives at most every
            // millisecond or so (plus a tick of the coarse clock, at most 10 ms); past that,
            // every copy fails.
            std::thread::sleep(Duration::from_millis(25));
            for _ in 0..3 {
                let (r, _, _) = bounded(dma.memcpy(remote.slice(0..LEN), local.buf())).await?;
                assert_eq!(r.unwrap_err().kind(), ErrorKind::ConnectionLost);
                let (r, _, _) = bounded(dma.memcpy(local.slice(0..64), remote.slice(0..64))).await?;
                assert_eq!(r.unwrap_err().kind(), ErrorKind::ConnectionLost);
            }
            // Through lanes too, in order: the first copy of the batch meets the loss, which
            // stops the context (as DOCA's DMA does); the others, in flight beside it, are
            // flushed.
            let mut lanes = dma.lanes(LaneOp::CopyIn(remote.slice(0..LEN)), local.buf(), 4)?;
            let mut batch = bounded(lanes.batch()).await?;
            while let Some((_, lane)) = batch.lane() {
                lane.submit();
            }
            let mut kinds = Vec::new();
            while let Some((r, _)) = bounded(lanes.next()).await? {
                kinds.push(r.unwrap_err().kind());
            }
            let mut expect = vec![ErrorKind::Cancelled; 4];
            expect[0] = ErrorKind::ConnectionLost;
            assert_eq!(kinds, expect);
            drop(lanes);
            let (r, _, _) = bounded(dma.memcpy(local.slice(0..64), local.slice(64..128))).await?;
            r?;
            Ok::<_, Error>(())
        })
        .unwrap();
    }

    #[test]
    #[ignore = "started by host_killed_between_copies as its peer process"]
    fn host_side_waits() {
        rt().block_on(async {
            let dev = Device::open_default()?;
            let mem = dev.alloc(LEN, HOST)?;
            mem.buf().write(0, &pattern(LEN, 7));
            println!("DMA-HOST {}", hex(&mem.export_pci()?));
            // Wait to be killed, keeping the memory exported (DMA needs nothing from this
            // executor, so blocking it is fine); a parent that dies first closes stdin and
            // ends this process.
            let mut s = String::new();
            let _ = std::io::stdin().read_line(&mut s);
            drop(mem);
            Ok::<_, Error>(())
        })
        .unwrap();
    }
}
