//! The executor ends at a random moment while RDMA traffic is in flight.
//!
//! The chaos harness (`tests/chaos.rs`) kills and freezes whole processes; `tests/outlive.rs`
//! ends an executor at chosen handover points. Here an executor ends inside a living process
//! at random moments, with RDMA writes and fetch-adds (or messages) in flight, in the two ways
//! an executor ends:
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
//! The message rounds end a sender's executor the same two ways, with three senders' messages
//! in flight on one connection, while the receiver's executor (another thread's) runs on and
//! keeps receives posted: every send that completed must be received, and each sender's
//! messages must arrive 1..k exactly once, k between its completed and its started message
//! (a completed send is a promise of delivery, also when its sender's context goes at once;
//! see `docs/soft-provider.md`, "Differences from hardware"). A last round ends the
//! receiver's executor instead: each sender's send in flight must fail with `ConnectionLost`
//! (none may wait forever), and what the receiver got must still be each sender's first
//! messages once each.
//!
//! The remote-event rounds end an executor with remote-net sync event adds in flight (two
//! tasks adding 1 through one connection) while the event's owner runs on: once the adder
//! is gone, the event must count every completed add once (completed ≤ value ≤ started, the
//! previous values distinct and below it).
//!
//! The moments come from a seed (`EXECUTOR_ENDS_SEED`, default fixed), printed on failure.

use std::collections::HashSet;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_doca::executor::yield_now;
use async_doca::rdma::{Rdma, RemoteEvent};
use async_doca::sync_event::{Location, SyncEvent};
use async_doca::time::sleep;
use async_doca::{spawn_local, Access, Device, ErrorKind, JoinHandle, Memory, Result, Runtime};

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
    keep_for_executor((a, b, ba));
    Ok(target)
}

fn lock<T>(log: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    log.lock().unwrap_or_else(|p| p.into_inner())
}

fn runtime() -> Runtime {
    Runtime::builder().cpus("0".parse().unwrap()).build().unwrap()
}

/// Waits, on the executor that is about to end, until `end`: a time, or `done()` reaching
/// the count (checked after each yield, so it ends right after the n-th completion, in the
/// middle of a turn's tasks: some have their results and have not run yet).
async fn until(end: End, done: impl Fn() -> usize) {
    match end {
        // While every task waits for its operation.
        End::After(d) => sleep(d).await,
        End::AfterOps(n) => {
            while done() < n {
                yield_now().await;
            }
        }
    }
}

/// [`until`] from the test thread, for an executor shut down from there.
fn until_on_thread(end: End, done: impl Fn() -> usize) {
    let deadline = std::time::Instant::now() + LIMIT;
    match end {
        End::After(d) => std::thread::sleep(d),
        End::AfterOps(n) => {
            while done() < n {
                assert!(std::time::Instant::now() < deadline, "the traffic stalled before {n} operations");
                std::thread::yield_now();
            }
        }
    }
}

/// Keeps `owned` (contexts, connections) as long as the current executor: a task that
/// never ends, cancelled by the executor's end.
fn keep_for_executor<T: 'static>(owned: T) {
    drop(spawn_local(async move {
        let _keep = owned;
        std::future::pending::<()>().await
    }));
}

/// Runs `setup` as a task of `rt`'s worker, which keeps what it returns until the worker is
/// shut down, and waits until it has returned. The setup's error if it failed; a panic if
/// it hung.
fn start_on_worker<F, Fut, K>(rt: &Runtime, setup: F) -> Result<()>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<K>> + 'static,
    K: 'static,
{
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let task = rt
        .spawn_on(0, move || async move {
            let _kept = setup().await?;
            let _ = started_tx.send(());
            std::future::pending::<()>().await;
            Ok::<_, async_doca::Error>(())
        })
        .unwrap();
    if started_rx.recv_timeout(LIMIT).is_ok() {
        return Ok(());
    }
    match rt.block_on(async_doca::time::timeout(LIMIT, task)) {
        Ok(Ok(Err(e))) => Err(e),
        other => panic!("the worker's traffic did not start: {other:?}"),
    }
}

/// Counts that must hold after the executor ended with adds in flight (fetch-adds on a
/// counter, or remote-net event adds): every completed add counted once, so completed ≤
/// `value` ≤ `started`, and the previous values the completed adds returned are distinct and
/// below `value`.
fn counted_once(value: u64, olds: &[u64], started: u64) -> std::result::Result<(), String> {
    let done = olds.len() as u64;
    if value < done || value > started {
        return Err(format!("{value} counted: {done} adds completed, {started} started"));
    }
    let distinct: HashSet<_> = olds.iter().collect();
    if distinct.len() != olds.len() {
        return Err("two completed adds returned the same previous value".into());
    }
    if let Some(old) = olds.iter().find(|&&old| old >= value) {
        return Err(format!("a completed add returned {old}, {value} counted"));
    }
    Ok(())
}

/// A round on a `block_on` executor, which ends when its future returns: traffic until
/// `end`, then the target's bytes and the log, read after the executor is gone.
fn block_on_round(end: End, write_size_mix: u64) -> (Vec<u8>, Log) {
    let log = Arc::new(Mutex::new(Log::default()));
    let l = log.clone();
    let target = runtime()
        .block_on(async move {
            let target = traffic(l.clone(), write_size_mix).await?;
            until(end, || lock(&l).done()).await;
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
    let (l, b) = (log.clone(), bytes.clone());
    start_on_worker(&rt, move || async move { Ok(Snapshot(traffic(l, write_size_mix).await?, b)) })
        .expect("the worker's traffic did not start");
    until_on_thread(end, || lock(&log).done());
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
    counted_once(word(COUNTER), &log.adds_done, log.adds_started).map_err(|e| format!("the counter: {e}"))
}

/// What a round left, held against its log.
trait Outcome {
    /// `Err` says what broke.
    fn check(&self) -> std::result::Result<(), String>;
    /// Whether the executor ended with operations in flight (a round that ended between
    /// operations tests nothing).
    fn cut_mid_flight(&self) -> bool;
}

/// The one-sided rounds' outcome: the target's bytes and the log.
struct Landed(Vec<u8>, Log);

impl Outcome for Landed {
    fn check(&self) -> std::result::Result<(), String> {
        check(&self.0, &self.1)
    }

    fn cut_mid_flight(&self) -> bool {
        let log = &self.1;
        log.adds_started > log.adds_done.len() as u64 || log.in_flight.iter().any(Option::is_some)
    }
}

/// `ROUNDS` rounds of `round`, each ended at a moment drawn from the seed.
fn rounds<O: Outcome>(round: impl Fn(End, u64) -> O) {
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
        let outcome = round(end, mix);
        if let Err(e) = outcome.check() {
            panic!("seed {seed:#x}, round {round_no} (ended {end:?}): {e}");
        }
        let now = async_doca::trace::problems();
        assert_eq!(
            now.count, problems,
            "seed {seed:#x}, round {round_no}: the shutdown reported problems: {:?}",
            now.recent
        );
        if outcome.cut_mid_flight() {
            cut_in_flight += 1;
        }
    }
    // Rounds that ended between operations test nothing: most must end mid-flight.
    assert!(cut_in_flight >= ROUNDS / 2, "only {cut_in_flight} of {ROUNDS} rounds ended with operations in flight");
}

#[test]
fn a_block_on_executor_ending_mid_traffic_loses_no_completed_operation() {
    rounds(|end, mix| {
        let (bytes, log) = block_on_round(end, mix);
        Landed(bytes, log)
    });
}

#[test]
fn a_worker_shut_down_mid_traffic_loses_no_completed_operation() {
    rounds(|end, mix| {
        let (bytes, log) = worker_round(end, mix);
        Landed(bytes, log)
    });
}

// ---------------------------------------------------------------------------------------
// Messages: the sender's executor ends, the receiver's runs on

/// Sender tasks on one connection, each numbering its own messages, one send in flight each.
const SENDERS: usize = 3;
/// A message: the sender's number, then its sequence number.
const MSG: usize = 16;
/// Receives the receiver keeps posted.
const POSTED: usize = 8;
/// How long the receiver, once the sender is gone, waits for one more message before it
/// stops: a message the sender's provider had placed is already in the receiver's queue.
const QUIET: Duration = Duration::from_millis(50);

/// The sender's side of a round: per sender, the last message whose send completed and the
/// last one it submitted (the same, or the one in flight).
#[derive(Default)]
struct Sent {
    completed: [u64; SENDERS],
    started: [u64; SENDERS],
    /// Sends completed, all senders.
    done: usize,
}

/// A messages round's outcome: what was sent, and what the receiver got (sender, sequence),
/// or why it stopped early.
struct Delivered {
    sent: Sent,
    received: std::result::Result<Vec<(u64, u64)>, String>,
}

impl Outcome for Delivered {
    /// Every send that completed was received; what was received is, per sender, its messages
    /// 1..=k exactly once (k between its completed and its started message).
    fn check(&self) -> std::result::Result<(), String> {
        let received = self.received.as_ref().map_err(|e| format!("the receiver: {e}"))?;
        once_each(received, &self.sent.completed, &self.sent.started)
    }

    fn cut_mid_flight(&self) -> bool {
        self.sent.started != self.sent.completed
    }
}

/// Whether `received` holds, per sender `t`, its messages 1..=k exactly once, with
/// `at_least[t]` ≤ k ≤ `at_most[t]`, and nothing else.
fn once_each(
    received: &[(u64, u64)],
    at_least: &[u64; SENDERS],
    at_most: &[u64; SENDERS],
) -> std::result::Result<(), String> {
    if let Some(&(from, _)) = received.iter().find(|&&(from, _)| from >= SENDERS as u64) {
        return Err(format!("a message from sender {from}, who does not exist"));
    }
    for t in 0..SENDERS {
        let mut seqs: Vec<u64> = received.iter().filter(|&&(from, _)| from == t as u64).map(|&(_, q)| q).collect();
        seqs.sort_unstable();
        let k = seqs.len() as u64;
        if seqs.iter().enumerate().any(|(i, &q)| q != i as u64 + 1) {
            return Err(format!("sender {t}: received {k} messages, not its first {k} once each"));
        }
        if k < at_least[t] || k > at_most[t] {
            return Err(format!(
                "sender {t}: {k} messages received, {} sends completed, {} started",
                at_least[t], at_most[t]
            ));
        }
    }
    Ok(())
}

/// Channels that carry the connection blobs (and the receiver's "connected") between the
/// sender's and the receiver's threads.
type BlobTx = std::sync::mpsc::Sender<Vec<u8>>;
type BlobRx = std::sync::mpsc::Receiver<Vec<u8>>;

/// How the sender's executor ends in a messages round.
#[derive(Clone, Copy)]
enum SenderEnds {
    /// Its `block_on` future returns.
    BlockOn,
    /// Its worker is shut down from the test thread.
    Shutdown,
}

/// A round of messages between two executors on two threads: the sender's, which ends at
/// `end` (see [`SenderEnds`]), and the receiver's, which keeps receives posted until the
/// sender's executor is gone and its queue is quiet.
fn messages_round(how: SenderEnds, end: End) -> Delivered {
    let sent = Arc::new(Mutex::new(Sent::default()));
    let gone = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (to_receiver, from_sender) = std::sync::mpsc::channel();
    let (to_sender, from_receiver) = std::sync::mpsc::channel();
    let g = gone.clone();
    let receiver = std::thread::spawn(move || {
        runtime().block_on(receive(to_sender, from_sender, Stop::SenderGone(g))).map_err(|e| e.to_string())
    });
    let s = sent.clone();
    let sender = match how {
        SenderEnds::BlockOn => runtime().block_on(async move {
            // Detached: the executor's end cancels them wherever they are.
            drop(send_traffic(s.clone(), to_receiver, from_receiver).await?);
            until(end, || lock(&s).done).await;
            // The sender's executor ends here, with every sender somewhere in its loop.
            Ok(())
        }),
        SenderEnds::Shutdown => {
            let rt = runtime();
            let started = start_on_worker(&rt, move || send_traffic(s, to_receiver, from_receiver));
            if started.is_ok() {
                until_on_thread(end, || lock(&sent).done);
                rt.shutdown();
            }
            started
        }
    };
    // The sender's executor is gone by now, with its contexts and tasks.
    let received = after_the_end(sender, "sender", &gone, receiver);
    let sent = std::mem::take(&mut *lock(&sent));
    Delivered { sent, received }
}

/// Once the ending side's executor (`ended`, its setup's outcome) is gone: tells the side
/// that runs on (`gone`), joins its thread, and gives what it saw, or first why the ending
/// side failed to start.
fn after_the_end<T>(
    ended: Result<()>,
    who: &str,
    gone: &std::sync::atomic::AtomicBool,
    other: std::thread::JoinHandle<std::result::Result<T, String>>,
) -> std::result::Result<T, String> {
    gone.store(true, std::sync::atomic::Ordering::Release);
    let seen = other.join().expect("the side that runs on panicked");
    ended.map_err(|e| format!("the {who} failed to start: {e}"))?;
    seen
}

/// One side of a messages round: a context of its own, connected to the `other` side's
/// through the blob channels, once both are connected (a side that ended before the other
/// connected would leave it nothing to connect to).
async fn connect_across(
    to: &BlobTx,
    from: &BlobRx,
    other: &str,
) -> Result<(Device, Rdma, async_doca::rdma::Connection)> {
    let timed_out = |what: String| async_doca::Error::new(ErrorKind::TimedOut, what);
    let dev = Device::open_default()?;
    let rdma = Rdma::builder(&dev).build().await?;
    let (blob, pending) = rdma.export()?;
    let _ = to.send(blob);
    let peer = from.recv_timeout(LIMIT).map_err(|_| timed_out(format!("no blob from the {other}")))?;
    let conn = pending.connect(&peer).await?;
    let _ = to.send(Vec::new());
    from.recv_timeout(LIMIT).map_err(|_| timed_out(format!("the {other} did not connect")))?;
    Ok((dev, rdma, conn))
}

/// The sender's side: connects, waits until the receiver is connected too, and starts the
/// sender tasks (detached: the executor's end cancels them wherever they are).
async fn send_traffic(
    sent: Arc<Mutex<Sent>>,
    to_receiver: BlobTx,
    from_receiver: BlobRx,
) -> Result<Vec<JoinHandle<async_doca::Error>>> {
    let (dev, rdma, conn) = connect_across(&to_receiver, &from_receiver, "receiver").await?;
    let conn = Rc::new(conn);
    let mut senders = Vec::new();
    for t in 0..SENDERS {
        let (conn, sent) = (conn.clone(), sent.clone());
        let src = dev.alloc(MSG, Access::LOCAL_READ_WRITE)?;
        senders.push(spawn_local(async move {
            let mut seq = 0;
            loop {
                seq += 1;
                let mut buf = src.slice(0..MSG);
                buf.write_u64(0, t as u64);
                buf.write_u64(8, seq);
                lock(&sent).started[t] = seq;
                if let Err(e) = conn.send(buf).await.0 {
                    return e;
                }
                let mut l = lock(&sent);
                l.completed[t] = seq;
                l.done += 1;
            }
        }));
    }
    // The context lasts as long as the executor (the senders hold the connection).
    keep_for_executor(rdma);
    Ok(senders)
}

/// The receiver: connects, keeps `POSTED` receives posted, and logs each message until its
/// receives fail with `ConnectionLost` (the sender's context went) or the sender is `gone`
/// and nothing more arrived for [`QUIET`].
async fn receive(to_sender: BlobTx, from_sender: BlobRx, stop: Stop) -> Result<Vec<(u64, u64)>> {
    let (dev, rdma, _conn) = connect_across(&to_sender, &from_sender, "sender").await?;
    let mem = dev.alloc(POSTED * MSG, Access::LOCAL_READ_WRITE)?;
    let mut lanes = rdma.recv_lanes(mem.buf(), POSTED)?;
    let mut got = Vec::new();
    // Set once a receive failed: the sender's context is gone and every message it had
    // delivered was taken (they come first); the lanes are then drained, not posted again.
    let mut broken = false;
    let start = std::time::Instant::now();
    loop {
        let wait = match &stop {
            Stop::SenderGone(gone) if gone.load(std::sync::atomic::Ordering::Acquire) => QUIET,
            Stop::SenderGone(_) => {
                assert!(start.elapsed() < LIMIT, "the sender never went");
                Duration::from_millis(5)
            }
            // The receiver's own executor ends here, with receives posted.
            Stop::At(End::AfterOps(n)) if got.len() >= *n => return Ok(got),
            Stop::At(End::After(d)) if start.elapsed() >= *d => return Ok(got),
            Stop::At(_) => Duration::from_millis(1),
        };
        if broken && lanes.is_empty() {
            return Ok(got);
        }
        let Ok(mut batch) = async_doca::time::timeout(wait, lanes.batch()).await else {
            if wait == QUIET {
                return Ok(got);
            }
            continue;
        };
        while let Some((done, lane)) = batch.lane() {
            match done {
                Some(Ok(m)) => {
                    assert_eq!(m.len, MSG, "a message of {} bytes", m.len);
                    got.push((lane.buf().read_u64(0), lane.buf().read_u64(8)));
                }
                // The sender's context went: the documented way a receive learns it.
                Some(Err(e)) if e.kind() == ErrorKind::ConnectionLost => broken = true,
                Some(Err(e)) => return Err(e),
                None => {}
            }
            if !broken {
                lane.submit();
            }
        }
    }
}

/// When the receiver stops.
enum Stop {
    /// Once the sender is gone (the flag) and nothing more arrived for [`QUIET`], or its
    /// receives fail.
    SenderGone(Arc<std::sync::atomic::AtomicBool>),
    /// At this moment: its executor then ends with receives posted.
    At(End),
}

/// A round in which the receiver's executor (a `block_on`) ends at `end` while the sender's
/// runs on: the senders' sends then fail (`ConnectionLost`), none hangs, and what the receiver
/// got is, per sender, its messages 1..k exactly once.
fn receiver_ends_round(end: End) -> Refused {
    let sent = Arc::new(Mutex::new(Sent::default()));
    let (to_receiver, from_sender) = std::sync::mpsc::channel();
    let (to_sender, from_receiver) = std::sync::mpsc::channel();
    let s = sent.clone();
    let sender = std::thread::spawn(move || {
        runtime().block_on(async move {
            let senders = send_traffic(s, to_receiver, from_receiver).await?;
            let mut ends = Vec::new();
            for h in senders {
                match async_doca::time::timeout(LIMIT, h).await {
                    Ok(Ok(e)) => ends.push(e.kind()),
                    Ok(Err(e)) => return Err(e),
                    Err(_) => panic!("a send still waits {LIMIT:?} after the receiver went"),
                }
            }
            Ok::<_, async_doca::Error>(ends)
        })
    });
    let received = runtime().block_on(receive(to_sender, from_sender, Stop::At(end))).map_err(|e| e.to_string());
    let ends = sender.join().expect("the sender panicked").map_err(|e| e.to_string());
    let sent = std::mem::take(&mut *lock(&sent));
    Refused { sent, received, ends }
}

/// A receiver-ends round's outcome: what was sent, what the receiver got, how each sender
/// ended.
struct Refused {
    sent: Sent,
    received: std::result::Result<Vec<(u64, u64)>, String>,
    ends: std::result::Result<Vec<ErrorKind>, String>,
}

impl Outcome for Refused {
    fn check(&self) -> std::result::Result<(), String> {
        let received = self.received.as_ref().map_err(|e| format!("the receiver: {e}"))?;
        let ends = self.ends.as_ref().map_err(|e| format!("the sender: {e}"))?;
        if let Some(kind) = ends.iter().find(|&&k| k != ErrorKind::ConnectionLost) {
            return Err(format!("a send failed with {kind:?} after the receiver went, not ConnectionLost"));
        }
        // No lower bound: a completed send is in the receiver's queue, which no receive took
        // before its executor ended (`docs/soft-provider.md`: lost with the receiving context).
        once_each(received, &[0; SENDERS], &self.sent.started)
    }

    fn cut_mid_flight(&self) -> bool {
        let got = self.received.as_ref().map_or(0, Vec::len) as u64;
        got < self.sent.started.iter().sum::<u64>()
    }
}

#[test]
fn a_block_on_sender_ending_mid_traffic_loses_no_completed_send() {
    rounds(|end, _| messages_round(SenderEnds::BlockOn, end));
}

#[test]
fn a_sender_shut_down_mid_traffic_loses_no_completed_send() {
    rounds(|end, _| messages_round(SenderEnds::Shutdown, end));
}

#[test]
fn a_receiver_ending_mid_traffic_fails_its_senders_without_a_hang() {
    rounds(|end, _| receiver_ends_round(end));
}

// ---------------------------------------------------------------------------------------
// Remote events: the adder's executor ends, the event's owner runs on

/// Tasks adding 1 to the peer's event through one connection, one add in flight each.
const EVENT_ADDERS: usize = 2;

/// The adder's side of a round.
#[derive(Default)]
struct Added {
    started: u64,
    /// The previous values the completed adds returned.
    olds: Vec<u64>,
}

/// A remote-event round's outcome: the adds, and the event's value once the adder is gone.
struct Counted {
    added: Added,
    value: std::result::Result<u64, String>,
}

impl Outcome for Counted {
    /// Every completed add counted once: completed ≤ value ≤ started, the previous values
    /// distinct and below the value.
    fn check(&self) -> std::result::Result<(), String> {
        let value = *self.value.as_ref().map_err(|e| format!("the event's owner: {e}"))?;
        counted_once(value, &self.added.olds, self.added.started).map_err(|e| format!("the event: {e}"))
    }

    fn cut_mid_flight(&self) -> bool {
        self.added.started > self.added.olds.len() as u64
    }
}

/// A round of remote-event adds: the adder's executor (a `block_on`) ends at `end` while
/// the event's owner (another thread's executor) runs on and reads the event once the adder
/// is gone.
fn remote_event_round(end: End) -> Counted {
    let added = Arc::new(Mutex::new(Added::default()));
    let gone = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (to_adder, from_owner) = std::sync::mpsc::channel();
    let (to_owner, from_adder) = std::sync::mpsc::channel();
    let g = gone.clone();
    let owner =
        std::thread::spawn(move || runtime().block_on(own_event(to_adder, from_adder, g)).map_err(|e| e.to_string()));
    let a = added.clone();
    let adder = runtime().block_on(async move {
        let (dev, rdma, conn) = connect_across(&to_owner, &from_owner, "owner").await?;
        let blob = from_owner
            .recv_timeout(LIMIT)
            .map_err(|_| async_doca::Error::new(ErrorKind::TimedOut, "no event blob from the owner"))?;
        let (conn, ev) = (Rc::new(conn), RemoteEvent::open(&dev, &blob)?);
        for _ in 0..EVENT_ADDERS {
            let (conn, ev, a) = (conn.clone(), ev.clone(), a.clone());
            let scratch = dev.alloc(8, Access::LOCAL_READ_WRITE)?;
            drop(spawn_local(async move {
                loop {
                    lock(&a).started += 1;
                    let (r, _) = conn.remote_event(&ev).add(1, scratch.slice(0..8)).await;
                    match r {
                        Ok(old) => lock(&a).olds.push(old),
                        Err(_) => return,
                    }
                }
            }));
        }
        // The context lasts as long as the executor (the adders hold the connection).
        keep_for_executor(rdma);
        until(end, || lock(&a).olds.len()).await;
        // The adder's executor ends here, with every adder somewhere in its loop.
        Ok::<_, async_doca::Error>(())
    });
    // The adder's executor, its contexts and tasks are gone: nothing more can land.
    let value = after_the_end(adder, "adder", &gone, owner);
    let added = std::mem::take(&mut *lock(&added));
    Counted { added, value }
}

/// The event's owner: connects, exports a remote-net event to the adder, and reads it once
/// the adder is `gone`.
async fn own_event(to_adder: BlobTx, from_adder: BlobRx, gone: Arc<std::sync::atomic::AtomicBool>) -> Result<u64> {
    let (dev, _rdma, _conn) = connect_across(&to_adder, &from_adder, "adder").await?;
    let ev = SyncEvent::builder(&dev).publisher(Location::RemoteNet).build().await?;
    let _ = to_adder.send(ev.export()?);
    let start = std::time::Instant::now();
    while !gone.load(std::sync::atomic::Ordering::Acquire) {
        assert!(start.elapsed() < LIMIT, "the adder never went");
        sleep(Duration::from_millis(1)).await;
    }
    ev.get().await
}

#[test]
fn an_adder_ending_mid_traffic_loses_no_completed_remote_add() {
    rounds(|end, _| remote_event_round(end));
}
