//! Sync events as futures: every operation, back-pressure, cancellation, bad input, and the
//! counter shared between executors and between processes.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use async_doca::sync_event::{Location, SyncEvent};
use async_doca::time::timeout;
use async_doca::{spawn_local, Device, ErrorKind, Result, Runtime};

mod common;

/// Every wait in these tests is bounded: a bug shows up as a failure, never as a hang.
const LIMIT: Duration = Duration::from_secs(20);

fn rt(cpus: &str) -> Runtime {
    Runtime::builder().cpus(cpus.parse().unwrap()).build().unwrap()
}

async fn bounded<T>(f: impl std::future::Future<Output = Result<T>>) -> Result<T> {
    timeout(LIMIT, f).await.map_err(async_doca::Error::from)?
}

#[test]
fn every_operation_on_one_executor() {
    rt("0")
        .block_on(async {
            let dev = Device::open_default()?;
            let ev = SyncEvent::builder(&dev).build().await?;
            assert_eq!(ev.get().await?, 0);
            assert_eq!(ev.add(3).await?, 0);
            assert_eq!(ev.add(4).await?, 3);
            assert_eq!(ev.get().await?, 7);
            ev.set(100).await?;
            assert_eq!(ev.get().await?, 100);
            bounded(ev.wait_eq(100)).await?;
            bounded(ev.wait_neq(5)).await?;
            assert_eq!(bounded(ev.wait_gt(99)).await?, 100);
            // Masked: only the low byte counts.
            ev.set(0x1234_0005).await?;
            bounded(ev.wait_eq_masked(0x05, 0xFF)).await?;
            assert_eq!(bounded(ev.wait_gt_masked(0x04, 0xFF)).await?, 0x1234_0005);
            // Wrapping add.
            ev.set(u64::MAX).await?;
            assert_eq!(ev.add(2).await?, u64::MAX);
            assert_eq!(ev.get().await?, 1);
            Ok::<_, async_doca::Error>(())
        })
        .unwrap();
}

#[test]
fn a_wait_completes_when_another_task_publishes() {
    rt("0")
        .block_on(async {
            let dev = Device::open_default()?;
            let ev = Rc::new(SyncEvent::builder(&dev).build().await?);
            let waiter = {
                let ev = ev.clone();
                spawn_local(async move { bounded(ev.wait_gt(41)).await })
            };
            async_doca::time::sleep(Duration::from_millis(20)).await;
            assert!(!waiter.is_finished(), "the wait finished before anyone published");
            ev.set(42).await?;
            assert_eq!(waiter.await??, 42);
            Ok::<_, async_doca::Error>(())
        })
        .unwrap();
}

#[test]
fn bad_masks_and_bad_blobs_are_errors() {
    rt("0")
        .block_on(async {
            let dev = Device::open_default()?;
            let ev = SyncEvent::builder(&dev).build().await?;
            let e = ev.wait_eq_masked(1, 0x0F).await.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
            let e = ev.wait_gt_masked(1, 0xFF00FF).await.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");

            let blob = ev.export()?;
            for cut in [0, 1, blob.len() / 2, blob.len() - 1] {
                let e = SyncEvent::open(&dev, &blob[..cut]).await.unwrap_err();
                assert_eq!(e.kind(), ErrorKind::InvalidArgument, "cut at {cut}: {e}");
            }
            for i in (0..blob.len()).step_by(3) {
                let mut bad = blob.clone();
                bad[i] ^= 0x5A;
                let e = SyncEvent::open(&dev, &bad).await.unwrap_err();
                assert!(
                    matches!(e.kind(), ErrorKind::InvalidArgument | ErrorKind::PermissionDenied | ErrorKind::NotFound),
                    "byte {i}: {e}"
                );
            }
            let e = SyncEvent::builder(&dev).max_tasks(0).build().await.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidArgument);
            let e = SyncEvent::builder(&dev).subscriber(Location::RemoteNet).build().await.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidArgument);
            // An opened event is not re-exported.
            let peer = SyncEvent::open(&dev, &blob).await?;
            assert_eq!(peer.export().unwrap_err().kind(), ErrorKind::BadState);
            // A network export is not an event to open (DOCA opens it only as a remote-net
            // target of RDMA operations): refused, saying so.
            let net = SyncEvent::builder(&dev).publisher(Location::RemoteNet).build().await?;
            let e = SyncEvent::open(&dev, &net.export()?).await.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::NotSupported, "{e}");
            assert!(e.to_string().contains("remote network"), "{e}");
            Ok::<_, async_doca::Error>(())
        })
        .unwrap();
}

#[test]
fn exhausted_task_pool_makes_operations_wait_not_fail() {
    rt("0")
        .block_on(async {
            let dev = Device::open_default()?;
            // Two wait tasks at most; eight waits are started.
            let ev = Rc::new(SyncEvent::builder(&dev).max_tasks(2).build().await?);
            let waits: Vec<_> = (0..8)
                .map(|_| {
                    let ev = ev.clone();
                    spawn_local(async move { bounded(ev.wait_neq(0)).await })
                })
                .collect();
            async_doca::time::sleep(Duration::from_millis(20)).await;
            assert!(waits.iter().all(|w| !w.is_finished()), "a wait ended before the counter moved");
            ev.set(1).await?;
            for w in waits {
                w.await??;
            }
            Ok::<_, async_doca::Error>(())
        })
        .unwrap();
}

#[test]
fn dropping_an_operation_in_flight_is_harmless() {
    // A get completes as soon as the PE is progressed, and an operation's first poll
    // progresses the PE inline while the poll's budget lasts, which is the task batch. With a
    // batch of 1, the wait below spends that budget, so the get stays in flight as wanted.
    Runtime::builder()
        .cpus("0".parse().unwrap())
        .task_batch(1)
        .build()
        .unwrap()
        .block_on(async {
            let dev = Device::open_default()?;
            let ev = SyncEvent::builder(&dev).max_tasks(1).build().await?;
            {
                // Submit a wait nobody satisfies, poll it once so its task is in flight, drop it.
                let mut wait = Box::pin(ev.wait_eq(99));
                assert!(futures_lite::future::poll_once(wait.as_mut()).await.is_none());
                // A get in flight: DOCA writes its result into the slot after the future is gone.
                let mut get = Box::pin(ev.get());
                assert!(futures_lite::future::poll_once(get.as_mut()).await.is_none());
            }
            assert_eq!(ev.get().await?, 0);
            // The abandoned task still holds the only wait task: satisfying it frees the task,
            // after which a new wait can be allocated and completes.
            ev.set(99).await?;
            bounded(ev.wait_eq(99)).await?;
            assert_eq!(ev.get().await?, 99);
            // And an event dropped with a task in flight is retired cleanly by its executor.
            let mut orphan = Box::pin(ev.wait_eq(12345));
            assert!(futures_lite::future::poll_once(orphan.as_mut()).await.is_none());
            drop(orphan);
            drop(ev);
            Ok::<_, async_doca::Error>(())
        })
        .unwrap();
}

#[test]
fn stopping_an_event_cancels_its_waits() {
    rt("0")
        .block_on(async {
            let dev = Device::open_default()?;
            let ev = Rc::new(SyncEvent::builder(&dev).build().await?);
            let waits: Vec<_> = (0..3)
                .map(|i| {
                    let ev = ev.clone();
                    spawn_local(async move { ev.wait_eq(1000 + i).await })
                })
                .collect();
            async_doca::time::sleep(Duration::from_millis(10)).await;
            bounded(ev.stop()).await?;
            for w in waits {
                let e = w.await?.unwrap_err();
                assert_eq!(e.kind(), ErrorKind::Cancelled, "{e}");
            }
            // A stopped event refuses new work with a clear error instead of hanging.
            assert!(bounded(ev.get()).await.is_err());
            Ok::<_, async_doca::Error>(())
        })
        .unwrap();
}

#[test]
fn ping_pong_between_two_executors() {
    const ROUNDS: u64 = 500;
    let rt = rt("0-1");
    let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
    let a = rt
        .spawn_on(0, move || async move {
            let dev = Device::open_default()?;
            let ev = SyncEvent::builder(&dev).build().await?;
            tx.send(ev.export()?).unwrap();
            for i in 0..ROUNDS {
                assert_eq!(ev.add(1).await?, 2 * i);
                bounded(ev.wait_eq(2 * i + 2)).await?;
            }
            ev.get().await
        })
        .unwrap();
    let b = rt
        .spawn_on(1, move || async move {
            let blob = rx.recv_timeout(LIMIT).expect("side A exported");
            let dev = Device::open_default()?;
            let ev = SyncEvent::open(&dev, &blob).await?;
            for i in 0..ROUNDS {
                bounded(ev.wait_eq(2 * i + 1)).await?;
                assert_eq!(ev.add(1).await?, 2 * i + 1);
            }
            Ok::<_, async_doca::Error>(())
        })
        .unwrap();
    rt.block_on(async {
        b.await.unwrap().unwrap();
        assert_eq!(a.await.unwrap().unwrap(), 2 * ROUNDS);
    });
}

// ---------------------------------------------------------------------------------------
// The inline completion fast path: an operation whose completion is ready right after its
// submit returns on its first poll; a task doing that in a loop still yields regularly.

#[test]
fn an_operation_that_completes_at_submit_is_ready_on_its_first_poll() {
    rt("0")
        .block_on(async {
            let dev = Device::open_default()?;
            let ev = SyncEvent::builder(&dev).build().await?;
            ev.set(7).await?;
            let got = futures_lite::future::poll_once(Box::pin(ev.get())).await;
            assert_eq!(got.expect("completed inline").unwrap(), 7);
            // A wait that cannot complete yet is still pending (and completes later).
            let mut wait = Box::pin(ev.wait_eq(8));
            assert!(futures_lite::future::poll_once(wait.as_mut()).await.is_none());
            assert_eq!(ev.add(1).await?, 7);
            bounded(wait).await?;
            Ok::<_, async_doca::Error>(())
        })
        .unwrap();
}

/// Runs `spin` (a loop of operations that complete inline, stopping at `N` or when told to)
/// beside a task that needs the executor: the loop must stop early, because the other task
/// ran meanwhile; a loop that never yielded would reach `N` first.
const SPIN_LIMIT: u64 = 200_000;

async fn spin_until(ev: &SyncEvent, stop: &Cell<bool>) -> Result<u64> {
    for i in 0..SPIN_LIMIT {
        ev.add(1).await?;
        if stop.get() {
            return Ok(i);
        }
    }
    Ok(SPIN_LIMIT)
}

#[test]
fn a_task_whose_operations_complete_inline_does_not_starve_other_tasks() {
    spinning_task_leaves_room(true);
}

/// Without inline progress each of the spinner's operations parks, and the executor runs
/// the tasks its drains wake within the same turn (`Core::work`): the turn must still end
/// with the batch, for the other tasks, the main future and the timers.
#[test]
fn a_task_whose_operations_park_does_not_starve_other_tasks_nor_timers() {
    spinning_task_leaves_room(false);
}

fn spinning_task_leaves_room(inline_progress: bool) {
    for batch in [1, 4, 64] {
        Runtime::builder()
            .cpus("0".parse().unwrap())
            .task_batch(batch)
            .inline_progress(inline_progress)
            .build()
            .unwrap()
            .block_on(async {
                let dev = Device::open_default()?;
                let ev = Rc::new(SyncEvent::builder(&dev).build().await?);
                let stop = Rc::new(Cell::new(false));
                let spinner = {
                    let (ev, stop) = (ev.clone(), stop.clone());
                    spawn_local(async move { spin_until(&ev, &stop).await })
                };
                // A task that only yields, and one whose wait completes through the PE
                // (the loop's drain): both finish while the spinner spins.
                let yielder = spawn_local(async {
                    for _ in 0..100 {
                        async_doca::executor::yield_now().await;
                    }
                });
                let waiter = {
                    let ev = ev.clone();
                    spawn_local(async move { bounded(ev.wait_gt(1000)).await })
                };
                yielder.await?;
                assert!(waiter.await?? > 1000);
                // The main future's timer fires while the spinner spins.
                async_doca::time::sleep(Duration::from_millis(2)).await;
                stop.set(true);
                let spun = bounded(spinner).await??;
                assert!(spun < SPIN_LIMIT, "batch {batch}: the spinning task starved the others");
                Ok::<_, async_doca::Error>(())
            })
            .unwrap();
    }
}

#[test]
fn a_block_on_future_whose_operations_complete_inline_does_not_starve_tasks() {
    rt("0")
        .block_on(async {
            let dev = Device::open_default()?;
            let ev = SyncEvent::builder(&dev).build().await?;
            let stop = Rc::new(Cell::new(false));
            let s = stop.clone();
            let _other = spawn_local(async move {
                for _ in 0..100 {
                    async_doca::executor::yield_now().await;
                }
                s.set(true);
            });
            assert!(spin_until(&ev, &stop).await? < SPIN_LIMIT, "the block_on future starved a task");
            Ok::<_, async_doca::Error>(())
        })
        .unwrap();
}

#[test]
fn concurrent_operations_each_get_their_own_result() {
    // Tasks interleave operations that complete inline and operations that take the loop's
    // path (small batches exhaust the inline budget often): every add must see a distinct
    // previous value, increasing within each task, and gets must see the total.
    const TASKS: u64 = 8;
    const ADDS: u64 = 500;
    for batch in [1, 3, 64] {
        Runtime::builder()
            .cpus("0".parse().unwrap())
            .task_batch(batch)
            .build()
            .unwrap()
            .block_on(async {
                let dev = Device::open_default()?;
                let ev = Rc::new(SyncEvent::builder(&dev).max_tasks(4).build().await?);
                let hs: Vec<_> = (0..TASKS)
                    .map(|_| {
                        let ev = ev.clone();
                        spawn_local(async move {
                            let mut seen = Vec::with_capacity(ADDS as usize);
                            for _ in 0..ADDS {
                                seen.push(ev.add(1).await?);
                                if seen.len() % 50 == 0 {
                                    assert!(ev.get().await? >= seen.len() as u64);
                                }
                            }
                            Ok::<_, async_doca::Error>(seen)
                        })
                    })
                    .collect();
                let mut all = Vec::new();
                for h in hs {
                    let seen = bounded(async { h.await? }).await?;
                    assert!(seen.windows(2).all(|w| w[0] < w[1]), "batch {batch}: out of order: {seen:?}");
                    all.extend(seen);
                }
                all.sort_unstable();
                assert_eq!(all, (0..TASKS * ADDS).collect::<Vec<u64>>(), "batch {batch}");
                assert_eq!(ev.get().await?, TASKS * ADDS);
                Ok::<_, async_doca::Error>(())
            })
            .unwrap();
    }
}

mod cross_process {
    use super::*;
    use crate::common::{hex, unhex, Reap};
    use std::process::{Command, Stdio};

    const ROUNDS: u64 = 200;
    const BLOB_ENV: &str = "ASYNC_DOCA_TEST_SYNC_EVENT_BLOB";

    #[test]
    fn sync_event_across_two_processes() {
        let rt = rt("0");
        let mut child = Reap(None);
        rt.block_on(async {
            let dev = Device::open_default()?;
            let ev = SyncEvent::builder(&dev).publisher(Location::RemotePci).build().await?;
            let blob_hex = hex(&ev.export()?);
            child.0 = Some(
                Command::new(std::env::current_exe().unwrap())
                    .args(["--exact", "cross_process::child_side", "--ignored", "--nocapture", "--test-threads=1"])
                    .env(BLOB_ENV, blob_hex)
                    .stdin(Stdio::null())
                    // The child's own test summary stays out of this test's output.
                    .stdout(Stdio::piped())
                    .spawn()
                    .unwrap(),
            );
            for i in 0..ROUNDS {
                ev.add(1).await?;
                bounded(ev.wait_eq(2 * i + 2)).await?;
            }
            Ok::<_, async_doca::Error>(())
        })
        .unwrap();
        let out = child.0.take().unwrap().wait_with_output().unwrap();
        assert!(out.status.success(), "child failed: {}\n{}", out.status, String::from_utf8_lossy(&out.stdout));
    }

    /// The other process of `sync_event_across_two_processes`; run only by that test.
    #[test]
    #[ignore = "started by sync_event_across_two_processes as its peer process"]
    fn child_side() {
        let blob = unhex(&std::env::var(BLOB_ENV).expect("started by the parent test"));
        rt("0")
            .block_on(async {
                let dev = Device::open_default()?;
                let ev = SyncEvent::open(&dev, &blob).await?;
                for i in 0..ROUNDS {
                    bounded(ev.wait_eq(2 * i + 1)).await?;
                    assert_eq!(ev.add(1).await?, 2 * i + 1, "round {i} arrived out of order");
                }
                Ok::<_, async_doca::Error>(())
            })
            .unwrap();
    }
}
