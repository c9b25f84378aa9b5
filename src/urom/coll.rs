//! Offloaded collectives: the workers of a [`Domain`](super::Domain) run them, the hosts await the result.
//!
//! This file is the host-side engine (`Offload`: queue, driver task, the worker's RDMA
//! connection). The public methods (`Domain::allreduce` and the others) are part of
//! [`Domain`](super::Domain) and live with it in `urom/domain.rs`, so that this engine never
//! names the domain and the two files do not import each other. Where every collectives
//! layer of the workspace lives: `docs/collectives.md`.
//!
//! This is the "offload collectives to the DPU" use of UROM. Every process of a parallel
//! application owns a worker that loaded the `worker_coll` plugin
//! ([`doca_urom_coll`]); the workers of one domain run allreduce, allgather, broadcast,
//! barrier and reduce-scatter among themselves (the [`coll_algorithms`] engine, the same
//! algorithms as the host-only [`HostComm`](crate::coll::HostComm)), reading each host's
//! source and writing its destination directly with RDMA, while the host processes keep
//! computing and later await the result.
//!
//! # The model
//!
//! * **Setup.** When a domain starts and this member's first worker loaded `worker_coll`,
//!   the host creates one RDMA context of its own (local read/write plus remote read and
//!   write: the worker reads sources and writes destinations one-sidedly) and sends the
//!   worker an `Init` command: its rank, every member's first worker id by rank (from the
//!   domain's member exchange), the host's connection blob and the tuning. The answer carries
//!   the worker's blob, which the host connects. The workers introduce themselves to each
//!   other through the domain (their plugin addresses) and connect a full mesh.
//! * **Buffers.** Sources and destinations are [`TypedBuf`](crate::coll::TypedBuf)s inside memory registered with
//!   the domain ([`DomainBuilder::buffer`](super::DomainBuilder::buffer)) with
//!   [`Access::RDMA_READ`] (sources) and [`Access::RDMA_WRITE`] (destinations): the worker
//!   looks the addresses up among the domain's segments and reaches them with that segment's
//!   key. Arguments are checked on the host first (registration, access, lengths for the
//!   kind, the root). A call that fails there returns the precise error at once, and still
//!   takes the collective's place in the group: a stand-in command makes the workers fail
//!   that collective on every member ([`ErrorKind::InvalidArgument`]), so nobody waits for
//!   this member forever and later collectives still match.
//! * **Ordering.** A collective is submitted *when its method is called*: it is numbered and
//!   queued then, and one driver task per domain hands the queued commands to the worker
//!   strictly in that order (each command's task is submitted before the next is created,
//!   so the back-pressure of the worker's in-flight limit cannot reorder them). The worker
//!   runs them in command order and answers in that order; several may be in flight. Every
//!   member must issue the same collectives in the same order (the MPI rule).
//! * **Memory.** The worker writes a destination while the collective runs. The domain keeps
//!   every registered buffer alive, and each queued or running collective also holds its
//!   source and destination slices until the worker answered, so a future dropped early
//!   frees nothing the worker may still write. Its result is simply not awaited: the
//!   destination's contents are unspecified until a later collective (or
//!   [`Domain::stop`](super::Domain::stop)) has completed.
//! * **Failure.** A member whose process or worker dies breaks its peers' connections; the
//!   workers then fail every pending and later collective (`CONNECTION_ABORTED`), so every
//!   other member's futures fail with [`ErrorKind::ConnectionLost`] instead of hanging.
//!   Members that disagree on kind, count, type or operator get
//!   [`ErrorKind::InvalidArgument`] on every member (the engine's mismatch detection). The
//!   worker's explanation is kept in the error's message.
//! * **Stop.** [`Domain::stop`](super::Domain::stop) waits for this member's collectives,
//!   sends `Fini` (answered once every message of the group left this worker), and then
//!   waits for every member to get there (an out-of-band allgather) before it stops the
//!   domain: a worker torn down earlier would break connections its peers still use.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::fmt;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use doca_urom_coll::proto::{self, Cmd, CollSpec, Notif};

use super::worker::{OwnedCommandOp, Worker};
use crate::coll::{Element, Kind, ReduceOp, Tuning};
use crate::error::{Error, ErrorKind, Result};
use crate::executor::context::CtxRecord;
use crate::executor::local_sync::{ResultCell, WakeFlag};
use crate::executor::{spawn_local, time, JoinHandle};
use crate::mem::{Access, Buf, Memory};
use crate::rdma::{Connection, Rdma};

/// The host side of one member's offloaded collectives (held by its [`Domain`](super::Domain)).
pub(crate) struct Offload {
    shared: Rc<Shared>,
    /// Detached on drop: the driver finishes what was submitted, then ends.
    _driver: JoinHandle<()>,
}

struct Shared {
    worker: Worker,
    /// The `worker_coll` plugin's id.
    plugin: u64,
    rank: usize,
    size: usize,
    /// The memory registered with the domain: every source and destination lies in one.
    buffers: Vec<Memory>,
    /// The host's RDMA context and its connection to the worker, through which the worker
    /// reads sources and writes destinations. Kept until the driver ends, after the last
    /// command was answered.
    _host: (Rdma, Connection),
    state: RefCell<State>,
    /// Something was queued, or the domain is going away.
    wake: WakeFlag,
    /// The last collective in flight was answered (nothing queued or running): wakes
    /// [`Offload::finish`], the one waiter.
    drained: WakeFlag,
}

#[derive(Default)]
struct State {
    /// Numbered collectives not handed to the worker yet, in call order (there is room for
    /// them once the worker's in-flight limit allows; the driver submits them).
    queue: VecDeque<Request>,
    /// Commands handed to the worker (or being handed: only the newest may still wait for
    /// room), oldest first. The driver polls them for their answers.
    running: VecDeque<(Request, OwnedCommandOp)>,
    next_seq: u32,
    /// The domain dropped its `Offload`: the driver ends once everything was answered.
    closed: bool,
    /// The first collective that failed because the group lost a member: the group is
    /// broken for good, and stopping skips the agreement with the (partly dead) others.
    lost: Option<Error>,
}

struct Request {
    op: &'static str,
    payload: Vec<u8>,
    cell: Rc<ResultCell<()>>,
    /// The memory of the source and destination, kept alive until the worker answered.
    _keep: Vec<Memory>,
}

impl Offload {
    /// Joins this member's worker to the group (see the module docs): `members` are every
    /// member's first worker id by rank. Bounded by `deadline`.
    pub(crate) async fn start(
        worker: &Worker,
        plugin: u64,
        rank: u32,
        members: Vec<u64>,
        buffers: Vec<Memory>,
        tuning: Tuning,
        deadline: Instant,
    ) -> Result<Offload> {
        let size = members.len();
        if size > proto::MAX_MEMBERS {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("urom.coll: {size} members, at most {} supported", proto::MAX_MEMBERS),
            ));
        }
        let dev = worker.service().device().clone();
        let rdma = Rdma::builder(&dev)
            .permissions(Access::LOCAL_READ_WRITE | Access::RDMA_READ | Access::RDMA_WRITE)
            .max_connections(1)
            .build()
            .await
            .map_err(|e| e.context_prefix("urom.coll: host RDMA context"))?;
        let (host_blob, pending) = rdma.export()?;
        let init = Cmd::Init { rank, members, host_blob, tuning: tuning.into() }.encode();
        let answer = bounded(deadline, "urom.coll: Init", worker.command(plugin, &init)).await??;
        let worker_blob = match Notif::decode(&answer) {
            Ok(Notif::InitDone { worker_blob }) => worker_blob,
            other => {
                return Err(Error::new(
                    ErrorKind::Other,
                    format!("urom.coll: Init answered with {other:?} instead of InitDone"),
                ))
            }
        };
        let conn = bounded(deadline, "urom.coll: connect to the worker", pending.connect(&worker_blob)).await??;
        let shared = Rc::new(Shared {
            worker: worker.clone(),
            plugin,
            rank: rank as usize,
            size,
            buffers,
            _host: (rdma, conn),
            state: RefCell::new(State::default()),
            wake: WakeFlag::default(),
            drained: WakeFlag::default(),
        });
        let driver = spawn_local(drive(shared.clone()));
        Ok(Offload { shared, _driver: driver })
    }

    /// The answer of a collective `issue` numbered: its cell's result, or `BadState` once the
    /// worker is gone with the executor (whose driver task would have answered it).
    pub(crate) fn answer(
        &self,
        op: &'static str,
        cell: Rc<ResultCell<()>>,
    ) -> impl Future<Output = Result<()>> + 'static {
        cell.wait_on(self.shared.worker.ctx_record(), move |ctx| destroyed(ctx, op))
    }

    /// Collectives issued and not answered yet (queued, or with the worker).
    pub(crate) fn outstanding(&self) -> usize {
        let st = self.shared.state.borrow();
        st.queue.len() + st.running.len()
    }

    /// Waits until every collective this member issued was answered, sends `Fini` and waits
    /// for its answer (every message of this worker's group has left), bounded by `deadline`.
    /// A group that lost a member is not finished ([`ErrorKind::ConnectionLost`]).
    pub(crate) async fn finish(&self, deadline: Instant) -> Result<()> {
        // Woken by the answer that empties the queue (no polling); a notification left from
        // an earlier drain only costs one more look.
        while self.outstanding() > 0 {
            bounded(deadline, "urom.coll: collectives still in flight at stop", self.shared.drained.wait()).await?;
        }
        if let Some(e) = &self.shared.state.borrow().lost {
            return Err(Error::with_source(
                ErrorKind::ConnectionLost,
                format!("urom.coll: the group is broken ({e})"),
                e.clone(),
            ));
        }
        let s = &self.shared;
        let answer = bounded(deadline, "urom.coll: Fini", s.worker.command(s.plugin, &Cmd::Fini.encode())).await??;
        match Notif::decode(&answer) {
            Ok(Notif::FiniDone) => Ok(()),
            other => Err(Error::new(ErrorKind::Other, format!("urom.coll: Fini answered with {other:?}"))),
        }
    }

    /// Numbers one command (`make` gets the sequence number) and submits it at once when
    /// nothing is ahead of it (a host that computes right after the call would otherwise
    /// hold the command until its executor next ran the driver), else queues it for the
    /// driver. The returned cell receives its answer.
    fn submit(&self, op: &'static str, make: impl FnOnce(u32) -> Cmd, keep: Vec<Memory>) -> Rc<ResultCell<()>> {
        let cell = Rc::new(ResultCell::default());
        let sh = &self.shared;
        let mut st = sh.state.borrow_mut();
        let seq = st.next_seq;
        st.next_seq = st.next_seq.wrapping_add(1);
        let mut req = Request { op, payload: make(seq).encode(), cell: cell.clone(), _keep: keep };
        let clear_ahead = st.queue.is_empty() && st.running.back().is_none_or(|(_, c)| c.submitted());
        if clear_ahead {
            match sh.worker.command_op_owned(sh.plugin, std::mem::take(&mut req.payload)) {
                Ok(mut cmd) => {
                    // Allocates and submits now. The no-op waker is replaced by the driver's
                    // when it polls the command (notified below); until then a completion is
                    // recorded in the command's slot and found at that poll.
                    let mut cx = Context::from_waker(Waker::noop());
                    match Pin::new(&mut cmd).poll(&mut cx) {
                        Poll::Ready((status, notif)) => {
                            drop(st);
                            finish(sh, &req, answer_to_result(op, status, &notif));
                            return cell;
                        }
                        Poll::Pending => st.running.push_back((req, cmd)),
                    }
                }
                Err(e) => {
                    drop(st);
                    finish(sh, &req, Err(e.context_prefix(&format!("domain.{op}"))));
                    return cell;
                }
            }
        } else {
            st.queue.push_back(req);
        }
        drop(st);
        sh.wake.notify();
        cell
    }

    /// The registered memory `buf` lies in, if it is inside one with `access`.
    fn check_buf(&self, op: &str, what: &str, buf: &Buf, access: Access) -> Result<()> {
        if buf.is_empty() {
            return Ok(());
        }
        let (start, end) = (buf.as_ptr() as usize, buf.as_ptr() as usize + buf.len());
        let seg = self.shared.buffers.iter().find(|m| {
            let base = m.as_ptr() as usize;
            base <= start && end <= base + m.len()
        });
        match seg {
            None => Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("domain.{op}: the {what} is not inside memory registered with the domain"),
            )),
            Some(m) if !m.access().contains(access) => Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("domain.{op}: the {what}'s memory lacks {access:?} access (it has {:?})", m.access()),
            )),
            Some(_) => Ok(()),
        }
    }

    /// Checks and submits one collective; `src`/`dst` as the worker will see them.
    ///
    /// Arguments this member cannot use still take the collective's place in the group: a
    /// stand-in ([`Cmd::Invalid`]) is queued, which the workers fail on every member (the
    /// others get [`ErrorKind::InvalidArgument`] instead of waiting forever), and this
    /// member's caller gets the precise local error at once.
    pub(super) fn issue<T: Element>(
        &self,
        op: &'static str,
        kind: Kind,
        red: ReduceOp,
        root: usize,
        src: Option<&Buf>,
        dst: Option<&Buf>,
    ) -> Result<Rc<ResultCell<()>>> {
        self.checked::<T>(op, kind, red, root, src, dst)
            .map(|(spec, keep)| self.submit(op, |seq| Cmd::Coll(CollSpec { seq, ..spec }), keep))
            .inspect_err(|_| {
                self.submit(op, |seq| Cmd::Invalid { seq, kind }, Vec::new());
            })
    }

    /// The command for a collective, and the memory to keep while it runs, if this member's
    /// arguments are usable.
    fn checked<T: Element>(
        &self,
        op: &'static str,
        kind: Kind,
        red: ReduceOp,
        root: usize,
        src: Option<&Buf>,
        dst: Option<&Buf>,
    ) -> Result<(CollSpec, Vec<Memory>)> {
        let (size, rank) = (self.shared.size, self.shared.rank);
        let len = |b: Option<&Buf>| b.map_or(0, Buf::len);
        // The count the plugin expects for the kind; `CollSpec::check` (the plugin's own
        // rule) then says whether the lengths fit, so a local mistake is reported at once.
        let count = match kind {
            Kind::Allreduce | Kind::Allgather => len(src),
            Kind::Broadcast | Kind::ReduceScatter => len(dst),
            Kind::Barrier => 0,
        } / T::SIZE;
        let va = |b: Option<&Buf>| b.filter(|b| !b.is_empty()).map_or(0, |b| b.as_ptr() as u64);
        let spec = CollSpec {
            seq: 0,
            kind,
            dtype: T::DATA_TYPE,
            op: red,
            root: u32::try_from(root).unwrap_or(u32::MAX),
            count: count as u64,
            src_va: va(src),
            src_len: len(src) as u64,
            dst_va: va(dst),
            dst_len: len(dst) as u64,
        };
        spec.check(size, rank).map_err(|why| invalid(op, why))?;
        let mut keep = Vec::new();
        if let Some(s) = src {
            self.check_buf(op, "source", s, Access::RDMA_READ)?;
            keep.push(s.memory().clone());
        }
        if let Some(d) = dst {
            self.check_buf(op, "destination", d, Access::RDMA_WRITE)?;
            keep.push(d.memory().clone());
        }
        Ok((spec, keep))
    }
}

impl Drop for Offload {
    fn drop(&mut self) {
        self.shared.state.borrow_mut().closed = true;
        self.shared.wake.notify();
    }
}

impl fmt::Debug for Offload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Offload")
            .field("worker", &format_args!("{:#x}", self.shared.worker.id()))
            .field("rank", &self.shared.rank)
            .field("size", &self.shared.size)
            .field("outstanding", &self.outstanding())
            .finish()
    }
}

fn invalid(op: &str, what: String) -> Error {
    Error::new(ErrorKind::InvalidArgument, format!("domain.{op}: {what}"))
}

/// Awaits `f` until `deadline`, then fails with [`ErrorKind::TimedOut`] naming `what`.
async fn bounded<F: Future>(deadline: Instant, what: &str, f: F) -> Result<F::Output> {
    let left = deadline.saturating_duration_since(Instant::now());
    time::timeout(left, f).await.map_err(|_| Error::new(ErrorKind::TimedOut, format!("{what}: no answer in time")))
}

/// The answer to one collective command as the caller's error: the worker's status (its
/// DOCA code and kind) with the reason its `Failed` notification gave.
fn answer_to_result(op: &str, status: Result<()>, notification: &[u8]) -> Result<()> {
    let e = match status {
        Ok(()) => {
            return match Notif::decode(notification) {
                Ok(Notif::CollDone { .. }) => Ok(()),
                other => Err(Error::new(ErrorKind::Other, format!("domain.{op}: unexpected answer {other:?}"))),
            }
        }
        Err(e) => e,
    };
    let why = match Notif::decode(notification) {
        Ok(Notif::Failed { reason, .. }) => reason,
        _ => String::from("the worker refused the command"),
    };
    Err(match e.code() {
        Some(code) => Error::from_doca(code.0, format!("domain.{op}: {why}")),
        None => e.context_prefix(&format!("domain.{op}: {why}")),
    })
}

/// Held by the driver's future: when the task is dropped before its end (its executor
/// ended, with a domain kept past it), the collectives queued or with the worker fail
/// instead of waiting for answers nobody will collect. (`Offload::answer` makes them fail
/// at their next poll anyway; this also wakes them.)
struct DriverGone(Rc<Shared>);

impl Drop for DriverGone {
    fn drop(&mut self) {
        let Ok(mut guard) = self.0.state.try_borrow_mut() else { return };
        let st = &mut *guard;
        let (queued, running) = (std::mem::take(&mut st.queue), std::mem::take(&mut st.running));
        drop(guard);
        // A command with the worker is dropped as an abandoned operation: its slot keeps
        // what DOCA may touch until the (already flushed) task is over.
        let left = queued.into_iter().chain(running.into_iter().map(|(req, _)| req));
        for req in left {
            finish(&self.0, &req, Err(destroyed(&self.0.worker.ctx_record(), req.op)));
        }
    }
}

/// Collective `op`'s refusal once the worker's context is gone with its executor.
fn destroyed(ctx: &CtxRecord, op: &str) -> Error {
    ctx.destroyed(&format!("domain.{op}"))
}

/// The driver: hands queued commands to the worker in order and completes the futures of
/// every command it answers.
async fn drive(shared: Rc<Shared>) {
    let _gone = DriverGone(shared.clone());
    poll_fn(|cx| {
        // Everything queued so far is handled below; a later notification wakes us again.
        shared.wake.clear();
        let mut done = Vec::new();
        {
            let mut guard = shared.state.borrow_mut();
            let st = &mut *guard;
            loop {
                // Start the next queued command only once the newest one is submitted: the
                // order of submission is the order the worker sees.
                if st.running.back().is_some_and(|(_, c)| !c.submitted()) {
                    break;
                }
                let Some(mut req) = st.queue.pop_front() else { break };
                match shared.worker.command_op_owned(shared.plugin, std::mem::take(&mut req.payload)) {
                    Ok(cmd) => st.running.push_back((req, cmd)),
                    Err(e) => {
                        let e = e.context_prefix(&format!("domain.{}", req.op));
                        done.push((req, Err(e)));
                        continue;
                    }
                }
                // Poll it now: that allocates and submits it (or registers for room).
                let (req, cmd) = st.running.back_mut().expect("just pushed");
                if let Poll::Ready((status, notif)) = Pin::new(cmd).poll(cx) {
                    let r = answer_to_result(req.op, status, &notif);
                    let (req, _) = st.running.pop_back().expect("just polled");
                    done.push((req, r));
                }
            }
            // Every command is polled with this task's waker, which also replaces the no-op
            // waker of commands submitted directly by `Offload::submit`.
            let mut i = 0;
            while i < st.running.len() {
                let (req, cmd) = &mut st.running[i];
                match Pin::new(cmd).poll(cx) {
                    Poll::Ready((status, notif)) => {
                        let r = answer_to_result(req.op, status, &notif);
                        let (req, _) = st.running.remove(i).expect("index in range");
                        done.push((req, r));
                    }
                    Poll::Pending => i += 1,
                }
            }
        }
        // Completed outside the borrow: waking a future may run code that issues more.
        for (req, r) in done {
            finish(&shared, &req, r);
        }
        let st = shared.state.borrow();
        if st.closed && st.queue.is_empty() && st.running.is_empty() {
            return Poll::Ready(());
        }
        drop(st);
        // Woken by a completion (the commands registered `cx`) or by a new request.
        if shared.wake.poll_wait(cx).is_ready() {
            cx.waker().wake_by_ref();
        }
        Poll::Pending
    })
    .await
}

fn finish(shared: &Shared, req: &Request, r: Result<()>) {
    if let Err(e) = &r {
        let mut st = shared.state.borrow_mut();
        if e.kind() == ErrorKind::ConnectionLost && st.lost.is_none() {
            st.lost = Some(e.clone());
        }
    }
    req.cell.complete(r);
    let st = shared.state.borrow();
    if st.queue.is_empty() && st.running.is_empty() {
        drop(st);
        shared.drained.notify();
    }
}
