//! The executor ends at a random moment while RDMA traffic is in flight.
//!
//! The chaos harness (`tests/chaos.rs`) kills and freezes whole processes; `tests/outlive.rs`
//! ends an executor at chosen handover points. Here an executor ends inside a living process
//! at random moments, with RDMA writes and fetch-adds in flight, in the two ways an executor
//! ends:
//!
//! * a `block_on` executor whose future returns after a random time or right after its n-th
//!   completion (then some tasks have their results and have not run yet);
//! * a worker shut down from another thread (`Runtime::shutdown`) at such a moment.
//!
//! Either way the executor cancels its tasks and stops its contexts (the same shutdown).
//! The test then holds the target memory's bytes (read after a `block_on` returned it, or
//! copied by a guard that the worker's shutdown drops with its task; no task runs once the
//! shutdown began, so the log is final by then) against the log of what completed:
//!
//! * a completed write's value is in its slot, or, for the slot of the one write its writer
//!   had in flight, that write's value;
//! * the fetch-add counter lies between the completed and the started adds, and the old
//!   values the completed adds returned are distinct and below it;
//! * nothing was reported that no `Result` carries (a resource leaked by the shutdown, a
//!   destructor that panicked): `trace::problems()`, which is this binary's alone;
//! * every round ends (bounded by the shutdown's own budget).
//!
//! The moments come from a seed (`EXECUTOR_ENDS_SEED`, default fixed), printed on failure.

use std::collections::HashSet;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_doca::executor::yield_now;
use async_doca::rdma::Rdma;
use async_doca::time::sleep;
use async_doca::{spawn_local, Access, Device, Memory, Result, Runtime};

mod common;
use common::chaoskit::Rng;

/// Writers, each with its own slots of the target, one write in flight at a time.
const WRITERS: usize = 3;
/// Slots per writer (8 bytes each).
const SLOTS: usize = 16;
/// Fetch-adders on one shared counter, one add in flight at a time each.
const ADDERS: usize = 2;
/// The counter's offset in the target, after every writer's slots.
const COUNTER: usize = WRITERS * SLOTS * 8;
const ROUNDS: u64 = 40;
/// How long a round may take to start or to reach its end before it is declared hung.
const LIMIT: Duration = Duration::from_secs(20);

/// What the tasks did, written before each operation is submitted and when it completed.
#[derive(Default)]
struct Log {
    /// Per writer and slot: the last value whose write completed.
    written: [[u64; SLOTS]; WRITERS],
    /// Per writer: the write it had in flight (slot, value), if any.
    in_flight: [Option<(usize, u64)>; WRITERS],
    /// Writes completed, all writers.
    writes_done: usize,
    adds_started: u64,
    /// The old values the completed adds returned.
    adds_done: Vec<u64>,
}

impl Log {
    /// Operations completed so far.
    fn done(&self) -> usize {
        self.adds_done.len() + self.writes_done
    }
}

/// When a round's executor ends.
#[derive(Clone, Copy, Debug)]
enum End {
    /// After this much traffic.
    After(Duration),
    /// As soon as this many operations completed.
    AfterOps(usize),
}

/// Starts the writers and the fetch-adders as local tasks of the current executor (detached:
/// the executor's end cancels them wherever they are) and returns the memory they target.
async fn traffic(log: Arc<Mutex<Log>>, write_size_mix: u64) -> Result<Memory> {
    let dev = Device::open_default()?;
    let a = Rdma::builder(&dev).permissions(Access::RDMA_ALL).build().await?;
    let b = Rdma::builder(&dev).permissions(Access::RDMA_ALL).build().await?;
    let ((blob_a, pa), (blob_b, pb)) = (a.export()?, b.export()?);
    let ab = Rc::new(pa.connect(&blob_b).await?);
    let ba = pb.connect(&blob_a).await?;
    let target = dev.alloc(COUNTER + 8, Access::RDMA_ALL)?;
    let remote = dev.import(&target.export_rdma()?)?;
    for w in 0..WRITERS {
        let (ab, remote, log) = (ab.clone(), remote.clone(), log.clone());
        let src = dev.alloc(8, Access::LOCAL_READ_WRITE)?;
        drop(spawn_local(async move {
            for seq in 1u64.. {
                let slot = ((seq ^ write_size_mix) as usize) % SLOTS;
                let value = ((w as u64 + 1) << 48) | seq;
                let mut buf = src.slice(0..8);
                buf.write_u64(0, value);
                let at = (w * SLOTS + slot) * 8;
                lock(&log).in_flight[w] = Some((slot, value));
                let (r, _) = ab.write(buf, remote.slice(at..at + 8)).await;
                if r.is_err() {
                    return;
                }
                let mut l = lock(&log);
                l.written[w][slot] = value;
                l.in_flight[w] = None;
                l.writes_done += 1;
            }
        }));
    }
    for _ in 0..ADDERS {
        let (ab, remote, log) = (ab.clone(), remote.clone(), log.clone());
        let result = dev.alloc(8, Access::LOCAL_READ_WRITE)?;
        drop(spawn_local(async move {
            loop {
                lock(&log).adds_started += 1;
                let (r, _) = ab.fetch_add(remote.slice(COUNTER..COUNTER + 8), 1, result.slice(0..8)).await;
                match r {
                    Ok(old) => lock(&log).adds_done.push(old),
                    Err(_) => return,
                }
            }
        }));
    }
    // The contexts stay open as long as the executor: the tasks use `ab`, and its peer is
    // kept by the last of them (a connection's peer context must not go first).
    drop(spawn_local(async move {
        let _keep = (a, b, ba);
        std::future::pending::<()>().await
    }));
    Ok(target)
}

fn lock(log: &Mutex<Log>) -> std::sync::MutexGuard<'_, Log> {
    log.lock().unwrap_or_else(|p| p.into_inner())
}

fn runtime() -> Runtime {
    Runtime::builder().cpus("0".parse().unwrap()).build().unwrap()
}

/// A round on a `block_on` executor, which ends when its future returns: traffic until
/// `end`, then the target's bytes and the log, read after the executor is gone.
fn block_on_round(end: End, write_size_mix: u64) -> (Vec<u8>, Log) {
    let log = Arc::new(Mutex::new(Log::default()));
    let l = log.clone();
    let target = runtime()
        .block_on(async move {
            let target = traffic(l.clone(), write_size_mix).await?;
            match end {
                // While every task waits for its operation.
                End::After(d) => sleep(d).await,
                // Right after the n-th completion, in the middle of a turn's tasks: some have
                // their results and have not run yet.
                End::AfterOps(n) => {
                    while lock(&l).done() < n {
                        yield_now().await;
                    }
                }
            }
            // The executor ends here, with every task above somewhere in its loop.
            Ok::<_, async_doca::Error>(target)
        })
        .unwrap();
    let log = std::mem::take(&mut *lock(&log));
    (target.slice(..).to_vec(), log)
}

/// A round on a worker executor, shut down from this thread (`Runtime::shutdown`) at `end`.
/// The worker's handles go with its tasks, so a guard among them copies the target when
/// the shutdown drops it: no task runs once the shutdown began (the log is final), and a
/// write that lands after the copy is one in flight, which the check allows either way.
fn worker_round(end: End, write_size_mix: u64) -> (Vec<u8>, Log) {
    struct Snapshot(Memory, Arc<Mutex<Vec<u8>>>);
    impl Drop for Snapshot {
        fn drop(&mut self) {
            *self.1.lock().unwrap_or_else(|p| p.into_inner()) = self.0.slice(..).to_vec();
        }
    }
    let log = Arc::new(Mutex::new(Log::default()));
    let bytes = Arc::new(Mutex::new(Vec::new()));
    let rt = runtime();
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let (l, b) = (log.clone(), bytes.clone());
    let setup = rt
        .spawn_on(0, move || async move {
            let target = traffic(l, write_size_mix).await?;
            let _snapshot = Snapshot(target, b);
            let _ = started_tx.send(());
            std::future::pending::<()>().await;
            Ok::<_, async_doca::Error>(())
        })
        .unwrap();
    if started_rx.recv_timeout(LIMIT).is_err() {
        // The setup failed (its error is in its handle) or hung.
        let err = rt.block_on(async_doca::time::timeout(LIMIT, setup));
        panic!("the worker's traffic did not start: {err:?}");
    }
    let deadline = std::time::Instant::now() + LIMIT;
    match end {
        End::After(d) => std::thread::sleep(d),
        End::AfterOps(n) => {
            while lock(&log).done() < n {
                assert!(std::time::Instant::now() < deadline, "the traffic stalled before {n} operations");
                std::thread::yield_now();
            }
        }
    }
    rt.shutdown();
    let log = std::mem::take(&mut *lock(&log));
    let bytes = std::mem::take(&mut *bytes.lock().unwrap_or_else(|p| p.into_inner()));
    (bytes, log)
}

/// Holds the target against the log (see the module docs); `Err` says what broke.
fn check(bytes: &[u8], log: &Log) -> std::result::Result<(), String> {
    let word = |at: usize| u64::from_ne_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    for w in 0..WRITERS {
        for slot in 0..SLOTS {
            let got = word((w * SLOTS + slot) * 8);
            let done = log.written[w][slot];
            let pending = log.in_flight[w].filter(|&(s, _)| s == slot).map(|(_, v)| v);
            if got != done && Some(got) != pending {
                return Err(format!(
                    "writer {w} slot {slot}: {got:#x} landed, the last completed write was {done:#x}, in flight {pending:?}"
                ));
            }
        }
    }
    let counter = word(COUNTER);
    let done = log.adds_done.len() as u64;
    if counter < done || counter > log.adds_started {
        return Err(format!("counter {counter}: {done} adds completed, {} started", log.adds_started));
    }
    let distinct: HashSet<_> = log.adds_done.iter().collect();
    if distinct.len() != log.adds_done.len() {
        return Err("two completed adds returned the same old value".into());
    }
    if let Some(old) = log.adds_done.iter().find(|&&old| old >= counter) {
        return Err(format!("a completed add returned {old}, the counter is {counter}"));
    }
    Ok(())
}

/// `ROUNDS` rounds of `round`, each ended at a moment drawn from the seed.
fn rounds(round: fn(End, u64) -> (Vec<u8>, Log)) {
    let seed = std::env::var("EXECUTOR_ENDS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5eed_0e4d);
    let mut rng = Rng(seed);
    let problems = async_doca::trace::problems().count;
    let mut cut_in_flight = 0;
    for round_no in 0..ROUNDS {
        // From "ends before the first operation" to ~2 ms, or ~5 000 operations, of traffic.
        let end = if rng.chance(500) {
            End::After(Duration::from_micros(rng.below(2_000)))
        } else {
            End::AfterOps(rng.below(5_000) as usize)
        };
        let mix = rng.next();
        let (bytes, log) = round(end, mix);
        if let Err(e) = check(&bytes, &log) {
            panic!("seed {seed:#x}, round {round_no} (ended {end:?}): {e}");
        }
        let now = async_doca::trace::problems();
        assert_eq!(
            now.count, problems,
            "seed {seed:#x}, round {round_no}: the shutdown reported problems: {:?}",
            now.recent
        );
        if log.adds_started > log.adds_done.len() as u64 || log.in_flight.iter().any(Option::is_some) {
            cut_in_flight += 1;
        }
    }
    // Rounds that ended between operations test nothing: most must end mid-flight.
    assert!(cut_in_flight >= ROUNDS / 2, "only {cut_in_flight} of {ROUNDS} rounds ended with operations in flight");
}

#[test]
fn a_block_on_executor_ending_mid_traffic_loses_no_completed_operation() {
    rounds(block_on_round);
}

#[test]
fn a_worker_shut_down_mid_traffic_loses_no_completed_operation() {
    rounds(worker_round);
}
