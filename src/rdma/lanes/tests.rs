//! The rules of [`Lanes`](super::Lanes): results in submission order with every operation
//! kind (atomics on a shared target), refusals in turn, lanes deeper than the task pool, and the lifecycle the held tasks
//! carry: memory kept until DOCA is done when the lanes are dropped, idle tasks given back
//! when the context stops (so that it can), and tasks allocated again after a restart.

use std::time::Duration;

use super::LaneOp;
use crate::executor::time::timeout;
use crate::rdma::tests::{small_pool_loopback, Loopback};
use crate::{Access, Device, ErrorKind, Result};

/// Long enough for anything these tests wait for; a hang fails instead of blocking CI.
const LIMIT: Duration = Duration::from_secs(20);

#[test]
fn writes_reads_and_messages_through_lanes_land_in_order() {
    crate::testkit::runtime()
        .block_on(async {
            let Loopback { ab, target, remote, local, _b, .. } = small_pool_loopback(64, 512).await?;
            let b = &_b.0;
            // 20 writes through 4 lanes of 8 bytes: write i goes out of lane i % 4.
            let mut lanes = ab.lanes(LaneOp::Write(remote.slice(0..32)), local.slice(0..32), 4)?;
            let (mut results, mut seen) = (0, Vec::new());
            for i in 0..20u64 {
                let (prev, mut lane) = lanes.lane().await;
                if let Some(r) = prev {
                    r?;
                    results += 1;
                }
                assert_eq!(lane.index(), i as usize % 4, "lanes are taken in turn");
                seen.push(lane.index());
                lane.write_u64(0, 100 + i);
                lane.submit();
            }
            while let Some((r, lane)) = lanes.next().await {
                r?;
                results += 1;
                drop(lane);
            }
            assert_eq!(results, 20, "one result per submitted write");
            for k in 0..4 {
                assert_eq!(target.slice(k * 8..k * 8 + 8).read_u64(0), 116 + k as u64);
            }
            drop(lanes);

            // Reads bring the target's words back into the lanes.
            for k in 0..4u64 {
                target.slice(64 + k as usize * 8..72 + k as usize * 8).write_u64(0, 7 * k);
            }
            let mut reads = ab.lanes(LaneOp::Read(remote.slice(64..96)), local.slice(64..96), 4)?;
            for _ in 0..4 {
                let (prev, lane) = reads.lane().await;
                assert!(prev.is_none(), "four idle lanes");
                lane.submit();
            }
            let mut got = Vec::new();
            while let Some((r, lane)) = reads.next().await {
                r?;
                got.push(lane.buf().read_u64(0));
            }
            assert_eq!(got, [0, 7, 14, 21]);

            // Messages with immediates, from send lanes into receive lanes on b.
            let inbox = Device::open_default()?.alloc(4 * 16, Access::LOCAL_READ_WRITE)?;
            let mut posted = b.recv_lanes(inbox.buf(), 4)?;
            for _ in 0..4 {
                posted.lane().await.1.submit();
            }
            let mut sends = ab.lanes(LaneOp::SendImm, local.slice(128..160), 4)?;
            let mut received = Vec::new();
            for i in 0..10u32 {
                let (prev, mut lane) = sends.lane().await;
                if let Some(r) = prev {
                    r?;
                }
                lane.write_u64(0, u64::from(i) * 3);
                lane.submit_imm(i);
                // The oldest message, its bytes, and its lane posted again.
                let (msg, lane) = posted.next().await.expect("four posted");
                let msg = msg?;
                received.push((msg.imm, msg.len, lane.buf().read_u64(0)));
                lane.submit();
            }
            while let Some((r, _)) = sends.next().await {
                r?;
            }
            let want: Vec<_> = (0..10u32).map(|i| (Some(i), 8, u64::from(i) * 3)).collect();
            assert_eq!(received, want, "messages in order, with their immediates and bytes");
            Ok::<_, crate::Error>(())
        })
        .unwrap();
}

#[test]
fn atomics_through_lanes_update_one_target_and_return_each_old_value() {
    crate::testkit::runtime()
        .block_on(async {
            let Loopback { ab, target, remote, local, _b, .. } = small_pool_loopback(64, 64).await?;
            // 100 fetch-adds of 1 through 4 lanes, all on the target's first 8 bytes.
            let mut adds = ab.lanes(LaneOp::FetchAdd(remote.slice(0..8)), local.slice(0..32), 4)?;
            let mut olds = Vec::new();
            for _ in 0..100 {
                let (prev, lane) = adds.lane().await;
                if let Some(r) = prev {
                    r?;
                    olds.push(lane.buf().read_u64(0));
                }
                lane.submit_fetch_add(1);
            }
            while let Some((r, lane)) = adds.next().await {
                r?;
                olds.push(lane.buf().read_u64(0));
            }
            olds.sort_unstable();
            assert_eq!(olds, (0..100).collect::<Vec<u64>>(), "each add saw the value before it");
            assert_eq!(target.slice(0..8).read_u64(0), 100);

            // A chain of compare-and-swaps through one lane: 100 -> 110.
            let mut cas = ab.lanes(LaneOp::CompareSwap(remote.slice(0..8)), local.slice(32..40), 1)?;
            for v in 100..110u64 {
                cas.lane().await.1.submit_compare_swap(v, v + 1);
                let (r, lane) = cas.next().await.expect("one submitted");
                r?;
                assert_eq!(lane.buf().read_u64(0), v, "the old value");
            }
            // One that does not match changes nothing and returns the value.
            cas.lane().await.1.submit_compare_swap(7, 8);
            let (r, lane) = cas.next().await.expect("one submitted");
            r?;
            assert_eq!((lane.buf().read_u64(0), target.slice(0..8).read_u64(0)), (110, 110));
            Ok::<_, crate::Error>(())
        })
        .unwrap();
}

#[test]
fn a_batch_hands_out_each_ready_lane_once_and_ends() {
    crate::testkit::runtime()
        .block_on(async {
            let Loopback { ab, target, remote, local, _b, .. } = small_pool_loopback(64, 512).await?;
            let mut lanes = ab.lanes(LaneOp::Write(remote.slice(0..32)), local.slice(0..32), 4)?;

            // Fresh lanes: the four idle ones, in order, then the batch ends (what it submitted
            // completes at the next progress, after the batch).
            let mut batch = lanes.batch().await;
            let mut taken = Vec::new();
            while let Some((prev, mut lane)) = batch.lane() {
                assert!(prev.is_none(), "idle lanes carry no result");
                assert!(taken.len() < 4, "each lane at most once: {taken:?}, then {}", lane.index());
                taken.push(lane.index());
                lane.write_u64(0, lane.index() as u64);
                lane.submit();
            }
            assert_eq!(taken, [0, 1, 2, 3]);

            // The next batch waits for the oldest, then gives the done ones with their results,
            // oldest first; lane 1 dropped without submitting is not handed out again in this
            // batch, and the next batch begins with it.
            let mut batch = lanes.batch().await;
            let mut taken = Vec::new();
            while let Some((prev, mut lane)) = batch.lane() {
                prev.expect("every lane had a write")?;
                assert!(taken.len() < 4, "each lane at most once: {taken:?}, then {}", lane.index());
                taken.push(lane.index());
                if lane.index() == 1 {
                    continue;
                }
                lane.write_u64(0, 10 + lane.index() as u64);
                lane.submit();
            }
            assert!(!taken.is_empty() && taken.len() <= 4, "{taken:?}");
            assert_eq!(taken, [0, 1, 2, 3][..taken.len()], "oldest first");
            if taken.contains(&1) {
                let mut batch = lanes.batch().await;
                let (prev, lane) = batch.lane().expect("a batch has a lane");
                assert!(prev.is_none() && lane.index() == 1, "the dropped lane, idle, comes first");
                lane.submit();
            }
            while let Some((r, _)) = lanes.next().await {
                r?;
            }

            // A drain through batches that leaves the idle lanes idle still ends: each batch
            // collects the completions the PE has.
            for _ in 0..2 {
                let (prev, lane) = lanes.lane().await;
                assert!(prev.is_none());
                lane.submit();
            }
            let (mut drained, mut batches) = (0, 0);
            while drained < 2 {
                batches += 1;
                assert!(batches < 100_000, "batches of idle lanes without progress");
                let mut batch = lanes.batch().await;
                while let Some((prev, _lane)) = batch.lane() {
                    if let Some(r) = prev {
                        r?;
                        drained += 1;
                    }
                }
            }

            // 1000 writes through batches: every one lands, results in order.
            let (mut sent, mut results) = (0u64, 0u64);
            while sent < 1000 {
                let mut batch = lanes.batch().await;
                while let Some((prev, mut lane)) = batch.lane() {
                    if let Some(r) = prev {
                        r?;
                        results += 1;
                    }
                    lane.write_u64(0, 1000 + sent);
                    lane.submit();
                    sent += 1;
                    if sent == 1000 {
                        break;
                    }
                }
            }
            while let Some((r, _)) = lanes.next().await {
                r?;
                results += 1;
            }
            assert_eq!(results, 1000, "one result per write");
            // Lanes go round oldest first, so the last four writes went out of four lanes.
            let mut last: Vec<u64> = (0..4).map(|k| target.slice(k * 8..k * 8 + 8).read_u64(0)).collect();
            last.sort_unstable();
            assert_eq!(last, [1996, 1997, 1998, 1999]);
            Ok::<_, crate::Error>(())
        })
        .unwrap();
}

#[test]
fn a_batch_with_idle_lanes_yields_to_the_executor_once_its_inline_progress_is_spent() {
    crate::testkit::runtime()
        .block_on(async {
            let Loopback { ab, local, _b, .. } = small_pool_loopback(64, 512).await?;
            let b = &_b.0;
            let inbox = Device::open_default()?.alloc(2 * 16, Access::LOCAL_READ_WRITE)?;
            // One receive posted, one lane left idle.
            let mut posted = b.recv_lanes(inbox.buf(), 2)?;
            posted.lane().await.1.submit();
            // The message comes from another task, which runs only if the loop below lets
            // the executor have its thread: far more batches than a poll's inline progress.
            let sender = crate::spawn_local({
                let (ab, mut msg) = (ab.clone(), local.slice(0..8));
                async move {
                    for _ in 0..1000 {
                        crate::executor::yield_now().await;
                    }
                    msg.write_u64(0, 42);
                    ab.send(msg).await.0
                }
            });
            let mut batches = 0;
            let got = 'drain: loop {
                batches += 1;
                assert!(batches < 10_000_000, "batches of the idle lane while the executor never ran");
                let mut batch = timeout(LIMIT, posted.batch()).await.expect("not stuck");
                while let Some((prev, lane)) = batch.lane() {
                    if let Some(msg) = prev {
                        msg?;
                        break 'drain lane.buf().read_u64(0);
                    }
                }
            };
            assert_eq!(got, 42);
            sender.await??;
            Ok::<_, crate::Error>(())
        })
        .unwrap();
}

#[test]
fn a_drain_through_batches_submits_the_lanes_that_wait_for_room() {
    crate::testkit::runtime()
        .block_on(async {
            let Loopback { ab, target, remote, local, _b, .. } = small_pool_loopback(4, 16 * 8).await?;
            let mut lanes = ab.lanes(LaneOp::Write(remote.slice(..)), local.buf(), 16)?;
            // Eight writes from a pool of four tasks: four in flight, four waiting for room;
            // eight lanes stay idle.
            let mut batch = lanes.batch().await;
            for i in 0..8u64 {
                let (prev, mut lane) = batch.lane().expect("sixteen idle lanes");
                assert!(prev.is_none());
                lane.write_u64(0, 500 + i);
                lane.submit();
            }
            // Drain through batches, leaving the idle lanes idle: the waiting writes must go
            // out once the first ones give their tasks back.
            let (mut drained, mut batches) = (0, 0);
            while drained < 8 {
                batches += 1;
                assert!(batches < 1_000_000, "the writes waiting for room were never submitted");
                let mut batch = timeout(LIMIT, lanes.batch()).await.expect("not stuck");
                while let Some((prev, _lane)) = batch.lane() {
                    if let Some(r) = prev {
                        r?;
                        drained += 1;
                    }
                }
            }
            for k in 0..8 {
                assert_eq!(target.slice(k * 8..k * 8 + 8).read_u64(0), 500 + k as u64);
            }
            Ok::<_, crate::Error>(())
        })
        .unwrap();
}

#[test]
fn lanes_check_their_memory_when_made() {
    crate::testkit::runtime()
        .block_on(async {
            let Loopback { ab, remote, local, _b, .. } = small_pool_loopback(16, 64).await?;
            let kind = |r: Result<super::Lanes<'_>>| r.map(drop).map_err(|e| e.kind());
            let invalid = Err(ErrorKind::InvalidArgument);
            assert_eq!(kind(ab.lanes(LaneOp::Send, local.slice(0..24), 0)), invalid, "no lanes");
            assert_eq!(kind(ab.lanes(LaneOp::Send, local.slice(0..24), 5)), invalid, "24 bytes, 5 lanes");
            assert_eq!(kind(ab.lanes(LaneOp::Send, local.slice(0..0), 1)), invalid, "empty lanes");
            let short = LaneOp::Write(remote.slice(0..16));
            assert_eq!(kind(ab.lanes(short, local.slice(0..32), 4)), invalid, "a remote slice shorter than the buffer");
            let longer = LaneOp::Read(remote.slice(0..64));
            assert_eq!(kind(ab.lanes(longer, local.slice(0..32), 4)), Ok(()), "a longer one is fine");
            let small = LaneOp::FetchAdd(remote.slice(0..4));
            assert_eq!(kind(ab.lanes(small, local.slice(0..32), 4)), invalid, "an atomic's target is 8 bytes");
            let narrow = LaneOp::CompareSwap(remote.slice(0..8));
            assert_eq!(kind(ab.lanes(narrow, local.slice(0..16), 4)), invalid, "an atomic's lane is 8 bytes");
            let shared = LaneOp::FetchAdd(remote.slice(0..8));
            assert_eq!(kind(ab.lanes(shared, local.slice(0..32), 4)), Ok(()), "every lane on one target");
            Ok::<_, crate::Error>(())
        })
        .unwrap();
}

#[test]
#[should_panic(expected = "submitted with submit_imm, not submit")]
fn lanes_with_an_immediate_refuse_a_plain_submit() {
    crate::testkit::runtime()
        .block_on(async {
            let Loopback { ab, local, _b, .. } = small_pool_loopback(16, 64).await?;
            let mut lanes = ab.lanes(LaneOp::SendImm, local.slice(0..8), 1)?;
            lanes.lane().await.1.submit();
            Ok::<_, crate::Error>(())
        })
        .unwrap();
}

#[test]
fn lanes_deeper_than_the_task_pool_share_its_tasks_instead_of_failing() {
    crate::testkit::runtime()
        .block_on(async {
            let Loopback { a, ab, target, remote, local, _b } = small_pool_loopback(4, 16 * 8).await?;
            let mut lanes = ab.lanes(LaneOp::Write(remote.slice(..)), local.buf(), 16)?;
            let mut done = 0;
            for i in 0..300u64 {
                let (prev, mut lane) = lanes.lane().await;
                if let Some(r) = prev {
                    r?;
                    done += 1;
                }
                lane.write_u64(0, i);
                lane.submit();
                assert!(a.inner.ctx.outstanding_tasks() <= 4, "never more tasks than the pool");
            }
            while let Some((r, _)) = lanes.next().await {
                r?;
                done += 1;
            }
            assert_eq!(done, 300);
            for k in 0..16u64 {
                let last = 299 - (299 - k) % 16;
                assert_eq!(target.slice(k as usize * 8..k as usize * 8 + 8).read_u64(0), last);
            }
            Ok::<_, crate::Error>(())
        })
        .unwrap();
}

#[test]
fn tasks_held_idle_by_lanes_go_back_to_whoever_needs_them() {
    crate::testkit::runtime()
        .block_on(async {
            let Loopback { ab, target, remote, local, _b, .. } = small_pool_loopback(4, 64).await?;
            // Four lanes take the whole pool of four write tasks, and keep them idle.
            let mut first = ab.lanes(LaneOp::Write(remote.slice(0..32)), local.slice(0..32), 4)?;
            for _ in 0..4 {
                first.lane().await.1.submit();
            }
            while let Some((r, _)) = first.next().await {
                r?;
            }
            // An operation future, and other lanes, get tasks all the same: the idle ones are
            // given back to the pool instead of the allocation failing.
            let mut src = local.slice(32..40);
            src.write_u64(0, 77);
            let (r, _) = timeout(LIMIT, ab.write(src, remote.slice(32..40))).await.expect("not stuck");
            r?;
            assert_eq!(target.slice(32..40).read_u64(0), 77);
            let mut second = ab.lanes(LaneOp::Write(remote.slice(40..64)), local.slice(40..64), 3)?;
            for _ in 0..9 {
                let (prev, lane) = timeout(LIMIT, second.lane()).await.expect("not stuck");
                if let Some(r) = prev {
                    r?;
                }
                lane.submit();
            }
            while let Some((r, _)) = second.next().await {
                r?;
            }
            // And the first lanes allocate again.
            first.lane().await.1.submit();
            first.next().await.expect("one submitted").0?;
            Ok::<_, crate::Error>(())
        })
        .unwrap();
}

#[test]
fn dropped_lanes_keep_their_memory_until_doca_is_done_and_let_the_context_stop() {
    crate::testkit::runtime()
        .block_on(async {
            let Loopback { a, ab, target, remote, local, _b } = small_pool_loopback(16, 64).await?;
            let handles = local.handles();
            let mut lanes = ab.lanes(LaneOp::Write(remote.slice(0..32)), local.slice(0..32), 4)?;
            let in_lanes = local.handles();
            for k in 0..2u64 {
                let (_, mut lane) = lanes.lane().await;
                lane.write_u64(0, 0xab0 + k);
                lane.submit();
            }
            // Dropped with both writes submitted (their doorbell not yet rung): the memory
            // stays until the completions.
            drop(lanes);
            assert_eq!(local.handles(), in_lanes, "in-flight memory is kept");
            for _ in 0..100 {
                if local.handles() == handles {
                    break;
                }
                crate::executor::yield_now().await;
            }
            assert_eq!(local.handles(), handles, "released once DOCA was done");
            assert_eq!(a.inner.ctx.outstanding_tasks(), 0);
            assert_eq!(target.slice(0..8).read_u64(0), 0xab0);
            assert_eq!(target.slice(8..16).read_u64(0), 0xab1);
            // No task of theirs is left allocated: the context can stop.
            timeout(LIMIT, a.restart()).await.expect("the context stopped and started")?;
            Ok::<_, crate::Error>(())
        })
        .unwrap();
}

#[test]
fn a_restart_under_lanes_flushes_them_and_refuses_later_operations_in_turn() {
    crate::testkit::runtime()
        .block_on(async {
            // `target` is kept: b's memory gone, a write would be refused for that.
            let Loopback { a, ab, remote, local, _b, target } = small_pool_loopback(16, 64).await?;
            let mut lanes = ab.lanes(LaneOp::Write(remote.slice(0..32)), local.slice(0..32), 4)?;
            // Four writes; the first one's result taken (its lane idle, its task held), the
            // others in flight or completed, their results not taken: every task allocated.
            for _ in 0..4 {
                lanes.lane().await.1.submit();
            }
            lanes.next().await.expect("four submitted").0?;
            // The stop must reach IDLE although the lanes hold tasks: it takes the idle ones
            // back and flushes the others.
            timeout(LIMIT, a.restart()).await.expect("the context stopped and started")?;
            for k in 0..3 {
                let (r, _) = lanes.next().await.expect("three submitted");
                let flushed = r.as_ref().err().map(|e| e.kind());
                assert!(
                    matches!(flushed, None | Some(ErrorKind::Cancelled | ErrorKind::ConnectionLost)),
                    "write {k}: {r:?}"
                );
            }
            assert_eq!(a.inner.ctx.outstanding_tasks(), 0);
            // The connection did not survive the restart: the next write allocates a task
            // again and is refused, in its turn.
            lanes.lane().await.1.submit();
            let (r, _) = lanes.next().await.expect("one submitted");
            let kind = r.expect_err("a closed connection").kind();
            assert!(
                matches!(kind, ErrorKind::ConnectionLost | ErrorKind::BadState | ErrorKind::InvalidArgument),
                "{kind:?}"
            );
            assert!(lanes.is_empty());
            // A batch that submits every lane it gets, refused at once, still ends: it hands
            // out the lanes idle when it began and the operations in flight then, each once.
            let mut batch = lanes.batch().await;
            let mut handed = 0;
            while let Some((_, lane)) = batch.lane() {
                handed += 1;
                assert!(handed <= 4, "a refused lane handed out again by the same batch");
                lane.submit();
            }
            assert_eq!(handed, 4);
            while let Some((r, _)) = lanes.next().await {
                assert!(r.is_err(), "refused: the connection is gone");
            }
            drop((lanes, target));
            Ok::<_, crate::Error>(())
        })
        .unwrap();
}

/// The remote descriptor a lane hands DOCA: a read's source and an atomic's target carry
/// their bytes as data (DOCA reads "the data" of a read's source and acts on "the first 8
/// bytes of data" of an atomic's target), before and after operations; a write's
/// destination starts empty (results are appended to it). The futures' descriptors, lent by
/// the remote memory's cache, the same.
#[test]
#[cfg_attr(miri, ignore = "crosses FFI into the DOCA provider or makes system calls Miri cannot run")]
fn remote_descriptors_of_reads_and_atomics_carry_their_bytes() {
    crate::testkit::runtime()
        .block_on(async {
            // The peer (its context and connection, `_b`) and its registered memory (`_target`)
            // stay for the whole test.
            let Loopback { ab, remote, local, target: _target, _b, .. } = small_pool_loopback(64, 512).await?;
            let mut reads = ab.lanes(LaneOp::Read(remote.slice(0..32)), local.slice(0..32), 4)?;
            let mut adds = ab.lanes(LaneOp::FetchAdd(remote.slice(64..72)), local.slice(64..96), 4)?;
            let writes = ab.lanes(LaneOp::Write(remote.slice(128..160)), local.slice(128..160), 4)?;
            for round in 0..2 {
                for k in 0..4 {
                    assert_eq!(reads.remote_data_len(k), Some(8), "read lane {k}, round {round}");
                    assert_eq!(adds.remote_data_len(k), Some(8), "fetch-add lane {k}, round {round}");
                    assert_eq!(writes.remote_data_len(k), Some(0), "write lane {k}, round {round}");
                }
                for _ in 0..4 {
                    reads.lane().await.1.submit();
                    adds.lane().await.1.submit_fetch_add(1);
                }
                while let Some((r, _)) = reads.next().await {
                    r?;
                }
                while let Some((r, _)) = adds.next().await {
                    r?;
                }
            }

            // The futures: a read of 16 bytes from a longer slice, an atomic on a longer slice.
            let (r, _) = ab.read(remote.slice(256..320), local.slice(256..272)).await;
            r?;
            let at = remote.slice(256..272).raw_addr();
            assert_eq!(remote.slice(..).desc_cache().data_over(at, 16), Some((at, 16)), "the bytes read");
            let (old, _) = ab.fetch_add(remote.slice(320..384), 1, local.slice(320..328)).await;
            old?;
            let at = remote.slice(320..328).raw_addr();
            assert_eq!(remote.slice(..).desc_cache().data_over(at, 8), Some((at, 8)), "the atomic's 8 bytes");
            Ok::<_, crate::Error>(())
        })
        .unwrap();
}
