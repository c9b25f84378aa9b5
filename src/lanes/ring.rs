//! The lanes' engine: the order of operations, the idle lanes, submission with back-pressure,
//! and the wait for the oldest result. [`Lanes`](super::Lanes) and [`LaneMut`](super::LaneMut)
//! are thin typed handles over it. It serves every kind of context: what it knows of an
//! operation is its [`LaneKind`] table.
//!
//! **Why it is not generic.** `Lanes<T>` is generic over its result, so everything in its
//! `impl` is compiled into the crate that uses it, where any unrelated change to that crate
//! moves the hot loop's code (and its branches' alignment): `perf`'s message rate through the
//! lanes moved by ~10% with a commit that changed only its command line (`docs/cost.md`). The
//! engine is one non-generic type whose entry points are never inlined, so it is compiled once,
//! here, whatever crate calls it; the typed layer only turns a status into a `Result<T>`.

use std::ffi::c_void;
use std::fmt;
use std::future::Future;
use std::mem::ManuallyDrop;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use super::kind::{Again, At, LaneKind, LaneOperands, Remote};
use crate::error::{Error, ErrorKind, Result};
use crate::executor::completion::{HeldGroup, HeldState, TaskOutput, Ticket};
use crate::executor::context::{CtxRecord, DocaCtx};
use crate::executor::local::Core;
use crate::executor::time::{sleep, Sleep};
use crate::mem::descriptors::{Desc, Inventory};
use crate::mem::{Buf, RemoteSlice};
use crate::sys;

/// `i` (< twice `n`) modulo `n`: a compare, not a division (`%` by a depth known only at run
/// time is a `div`, tens of cycles, twice per operation). The lane index of a ring of `n`
/// (the lanes' order here, an RDMA window's lanes).
#[inline(always)]
pub(crate) fn wrap(i: usize, n: usize) -> usize {
    if i >= n {
        i - n
    } else {
        i
    }
}

/// The context the lanes run on: its executor, its record and inventory, the connection of
/// their operations (null where there is none) and the peer's endpoint (see [`At`]).
pub(super) struct LaneHost<'a> {
    core: &'a Core,
    rec: &'a Rc<CtxRecord>,
    inv: &'a Rc<Inventory>,
    conn: *mut c_void,
    peer: u32,
}

impl<'a> LaneHost<'a> {
    /// The host of lanes on `ctx` (with its inventory `inv`), connection `conn` and peer
    /// endpoint `peer`.
    pub(super) fn new<T>(ctx: &'a DocaCtx<T>, inv: &'a Rc<Inventory>, conn: *mut c_void, peer: u32) -> LaneHost<'a> {
        LaneHost { core: ctx.core(), rec: ctx.record(), inv, conn, peer }
    }
}

/// The memory the lanes' tasks touch, and their descriptors. Moved to the held group when
/// the lanes are dropped with operations in flight; dropped only once no task uses it.
struct LaneMem {
    /// Lane `k`'s descriptors: `[local, remote]` (remote null for sends and receives). Given
    /// back in `Drop`, before the inventory and the memory (fields drop after it).
    descs: Box<[[*mut sys::doca_buf; 2]]>,
    bufs: Box<[Buf]>,
    /// The operands of each lane's next operation. Here rather than in the ring: a kind may
    /// hand DOCA their address (a Comch send's immediate bytes), so they live as long as the
    /// tasks that may read them.
    operands: Box<[LaneOperands]>,
    /// The remote memory of writes and reads (its registration keeps the mmap alive).
    _remote: Option<RemoteSlice>,
    _inv: Rc<Inventory>,
}

impl Drop for LaneMem {
    fn drop(&mut self) {
        for d in self.descs.iter().flatten().filter(|d| !d.is_null()) {
            // SAFETY: a reference taken by `LaneRing::new` from the inventory this struct holds,
            // over memory it holds; no task uses it any more (the lanes drop this only after
            // their tasks were freed: `HeldGroup::abandon`); dropped once.
            unsafe { sys::doca_buf_dec_refcount(*d, std::ptr::null_mut()) };
        }
    }
}

/// What one attempt to submit a lane did.
enum Try {
    Submitted,
    /// The queue or the task pool is full of tasks that will complete: wait, in order.
    Wait,
    /// The peer has no room yet ([`Again::Peer`]): try again later, in order.
    WaitPeer,
    /// DOCA refused it (its code): the lane yields the refusal in its turn.
    Refused(sys::doca_error_t),
}

/// The engine of [`Lanes`](super::Lanes): `depth` lanes over fixed memory, each with its own
/// task, and the order of their operations.
pub(super) struct LaneRing<'a> {
    core: &'a Core,
    /// The connection (null where there is none).
    conn: *mut c_void,
    /// The peer's endpoint (see [`At`]).
    peer: u32,
    /// Whether the kind's AGAIN comes from the peer ([`Again::Peer`]): a flag, not the
    /// kind's enum, for the submit's hot path.
    peer_again: bool,
    pub(super) kind: &'static LaneKind,
    group: Rc<HeldGroup>,
    /// The memory and descriptors; taken out only by `Drop`, which hands it to the group.
    mem: ManuallyDrop<Box<LaneMem>>,
    /// Lanes with an operation, oldest first: `order[head..head + len]` (modulo the depth).
    order: Box<[u32]>,
    head: usize,
    len: usize,
    /// The newest `unsubmitted` of them wait for room (see [`Try::Wait`], [`Try::WaitPeer`]).
    unsubmitted: usize,
    /// Attempts in a row that found the peer without room ([`Again::Peer`]), and the timer
    /// of the next one once yielding is spent.
    peer_tries: u32,
    peer_retry: Option<Sleep>,
    /// Lanes without an operation (the most recently used on top: its memory is warm).
    idle: Vec<u32>,
    /// The place among the context's waiters while lanes wait for room.
    ticket: Ticket,
}

/// A lane handed out by [`LaneRing::poll_lane`] or [`LaneRing::poll_next`]: its index, and
/// the status of the operation it carried, if any (its result area is read with
/// [`LaneRing::output`], only by lanes whose results carry one). Small enough to come back
/// in registers.
pub(super) struct Taken {
    pub(super) index: u32,
    pub(super) status: Option<sys::doca_error_t>,
}

impl<'a> LaneRing<'a> {
    /// `depth` lanes of `kind` on `host` over `local` (and `remote`, for the kinds that have
    /// remote memory), or why not (see the module documentation's errors).
    pub(super) fn new(
        host: LaneHost<'a>,
        kind: &'static LaneKind,
        local: Buf,
        remote: Option<RemoteSlice>,
        depth: usize,
    ) -> Result<Self> {
        let op = kind.name;
        let bad = |what: String| Error::new(ErrorKind::InvalidArgument, format!("{op}: lanes: {what}"));
        if depth == 0 || local.is_empty() || local.len() % depth != 0 {
            return Err(bad(format!("a {}-byte buffer does not make {depth} equal lanes", local.len())));
        }
        if depth > u32::MAX as usize {
            return Err(bad(format!("{depth} lanes")));
        }
        let len = local.len() / depth;
        let atomic = kind.remote == Remote::Target;
        match &remote {
            Some(r) if atomic && (r.len() < 8 || len < 8) => {
                return Err(bad(format!(
                    "an atomic needs an 8-byte target and 8 bytes per lane, not {} and {len}",
                    r.len()
                )));
            }
            Some(r) if !atomic && r.len() < local.len() => {
                return Err(bad(format!("a {}-byte remote slice for a {}-byte buffer", r.len(), local.len())));
            }
            None if kind.remote != Remote::None => return Err(bad("no remote memory".into())),
            _ => {}
        }
        if !host.rec.is_alive() {
            return Err(host.rec.destroyed(op));
        }
        let bufs: Box<[Buf]> = (0..depth)
            .map(|k| local.memory().slice(local.offset() + k * len..local.offset() + (k + 1) * len))
            .collect();
        // Sources carry all their bytes; destinations (an atomic's result too) start empty
        // (results are appended).
        let local_data = if kind.local_source { len } else { 0 };
        let mut mem = Box::new(LaneMem {
            descs: vec![[std::ptr::null_mut(); 2]; depth].into_boxed_slice(),
            bufs,
            operands: (0..depth).map(|_| LaneOperands::new([0; 3])).collect(),
            _remote: remote,
            _inv: host.inv.clone(),
        });
        for k in 0..depth {
            let l = host.inv.buf_over(Desc::local(&mem.bufs[k]), local_data);
            mem.descs[k][0] = l.map_err(|rc| Error::from_doca(rc, format!("{op}: lanes: a descriptor")))?;
            if let Some(r) = &mem._remote {
                // An atomic's lanes share their target; the others cut the remote slice too.
                // A destination starts empty (results are appended); a source and an
                // atomic's target carry their bytes as data (see `rdma::ops::ReadReq` and
                // `rdma::ops::AtomicReq`), which no operation changes.
                let (at, n, remote_data) = match kind.remote {
                    Remote::Target => (0, 8, 8),
                    Remote::Lanes { source } => (k * len, len, if source { len } else { 0 }),
                    Remote::None => unreachable!("checked above"),
                };
                let lane = r.memory().slice(r.offset() + at..r.offset() + at + n);
                mem.descs[k][1] = host
                    .inv
                    .buf_over(Desc::remote(&lane), remote_data)
                    .map_err(|rc| Error::from_doca(rc, format!("{op}: lanes: a descriptor")))?;
            }
        }
        let group = (kind.group)(host.rec, depth);
        Ok(LaneRing {
            core: host.core,
            conn: host.conn,
            peer: host.peer,
            peer_again: matches!(kind.again, Again::Peer { .. }),
            kind,
            group,
            mem: ManuallyDrop::new(mem),
            order: vec![0; depth].into_boxed_slice(),
            head: 0,
            len: 0,
            unsubmitted: 0,
            peer_tries: 0,
            peer_retry: None,
            // Lane 0 on top: lanes are first taken in order.
            idle: (0..depth as u32).rev().collect(),
            ticket: None,
        })
    }

    /// How many lanes.
    pub(super) fn depth(&self) -> usize {
        self.order.len()
    }

    /// How many bytes each lane has.
    pub(super) fn lane_len(&self) -> usize {
        self.mem.bufs[0].len()
    }

    /// Operations submitted (or waiting for room) whose results were not taken yet.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Whether no lane has an operation.
    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// `i` (< twice the depth) as an index of `order`.
    #[inline(always)]
    fn wrap(&self, i: usize) -> usize {
        wrap(i, self.order.len())
    }

    /// Submits lane `i`'s operation (allocating its task at its first use), or says why not.
    #[inline(always)]
    fn try_submit(&self, i: usize) -> Try {
        let group = &*self.group;
        let ctx = group.ctx();
        if !ctx.is_alive() {
            return Try::Refused(sys::DOCA_ERROR_BAD_STATE);
        }
        let rec = group.record(i);
        let mut task = rec.task();
        if task.is_null() {
            if let Err(t) = self.obtain_task(i) {
                return t;
            }
            task = rec.task();
        }
        // Fresh, moved or kept, the task's destination may hold the data of the lane's
        // earlier operation (the descriptors are the lane's for its whole life).
        let [l, r] = self.mem.descs[i];
        // SAFETY: lane `i`'s own task (of the lanes' kind), not in flight, and its own
        // descriptors, which no task in flight uses; its operands live in the lanes' memory
        // as long as the descriptors do.
        unsafe { (self.kind.prepare)(task, l, r, &self.mem.operands[i]) };
        // The doorbell: rung at once for an operation alone in the lanes (nothing to batch it
        // with, and its wait comes next: the latency case), deferred to the next progress
        // otherwise, so that a batch of submissions shares one. DOCA's flush hands over the
        // context's earlier deferred tasks first, so the order stays the submission order.
        // A kind whose AGAIN comes from the peer rings each one (see `Again::Peer`).
        let peer_again = self.peer_again;
        let doorbell = self.len == 1 || peer_again;
        // SAFETY: lane `i` is idle (taken by a `LaneMut`, or waiting in order) and has a task
        // of the group's kind, ready for its next operation.
        match unsafe { group.submit(self.core, rec, doorbell) } {
            sys::DOCA_SUCCESS => Try::Submitted,
            sys::DOCA_ERROR_AGAIN if peer_again => Try::WaitPeer,
            sys::DOCA_ERROR_AGAIN | sys::DOCA_ERROR_NO_MEMORY if ctx.outstanding() > 0 => Try::Wait,
            // A failed task stopped the context, which restarts (DMA): the restart wakes the
            // waiters.
            sys::DOCA_ERROR_BAD_STATE if ctx.restart_pending() => Try::Wait,
            rc => Try::Refused(rc),
        }
    }

    /// Gives lane `i` a task (its first use, or its task was given back): a fresh one, an
    /// idle lane's, or one the context had kept idle. Off the fast path.
    #[cold]
    #[inline(never)]
    fn obtain_task(&self, i: usize) -> std::result::Result<(), Try> {
        let group = &*self.group;
        let ctx = group.ctx();
        match self.alloc(i) {
            sys::DOCA_SUCCESS => {}
            // The pool is spent: take the task of a lane that has no operation in flight
            // (lanes deeper than the pool share its tasks); else have the context give
            // back the tasks it keeps idle (for reuse, or held by other lanes) and
            // allocate again; else wait for a task to complete.
            sys::DOCA_ERROR_NO_MEMORY => match group.idle_task(i, &self.idle) {
                Some(from) => {
                    group.move_task(from, i);
                    let [l, r] = self.mem.descs[i];
                    // SAFETY: a task of the lanes' kind that DOCA does not own (it moved
                    // between idle lanes) and is lane `i`'s now; lane `i`'s descriptors.
                    unsafe { (self.kind.repoint)(group.task(i), l, r) };
                }
                None if ctx.reclaim_idle() => match self.alloc(i) {
                    sys::DOCA_SUCCESS => {}
                    sys::DOCA_ERROR_NO_MEMORY if ctx.outstanding() > 0 => return Err(Try::Wait),
                    rc => return Err(Try::Refused(rc)),
                },
                None if ctx.outstanding() > 0 => return Err(Try::Wait),
                None => return Err(Try::Refused(sys::DOCA_ERROR_NO_MEMORY)),
            },
            sys::DOCA_ERROR_BAD_STATE if ctx.restart_pending() => return Err(Try::Wait),
            rc => return Err(Try::Refused(rc)),
        }
        Ok(())
    }

    /// Allocates lane `i`'s task of the lanes' kind over its descriptors, with its record's
    /// user data, and gives it to the lane's record.
    fn alloc(&self, i: usize) -> sys::doca_error_t {
        let Some(ctx) = self.group.ctx().obj() else { return sys::DOCA_ERROR_BAD_STATE };
        let at =
            At { ctx, conn: self.conn, peer: self.peer, bufs: self.mem.descs[i], operands: self.mem.operands[i].get() };
        let (mut task, mut base) = (std::ptr::null_mut(), std::ptr::null_mut());
        // SAFETY: a live context (checked above) of the kind's type, and connection (borrowed
        // by the lanes); the descriptors describe memory the lanes keep until no task uses it.
        let rc = unsafe { (self.kind.alloc)(&at, self.group.user_data(i), &mut task, &mut base) };
        if rc == sys::DOCA_SUCCESS {
            // SAFETY: a fresh task of the group's kind with its `doca_task`, nobody else's;
            // the lane had none.
            unsafe { self.group.set_task(i, task, base) };
        }
        rc
    }

    /// Puts lane `i` after the newest operation and submits it, unless earlier lanes wait
    /// for room (then it waits behind them).
    #[inline(never)]
    pub(super) fn submit_lane(&mut self, i: u32) {
        let pos = self.wrap(self.head + self.len);
        self.order[pos] = i;
        self.len += 1;
        if self.unsubmitted > 0 {
            self.unsubmitted += 1;
            return;
        }
        match self.try_submit(i as usize) {
            Try::Submitted => {}
            // Tried again by the next poll of the lanes (`retry_waiting`).
            Try::Wait | Try::WaitPeer => self.unsubmitted = 1,
            Try::Refused(rc) => self.group.refuse(i as usize, rc),
        }
    }

    /// Submits the lanes that wait for room, in order, as far as there is room now; registered
    /// among the context's waiters while the first of them cannot go. Done before any wait
    /// for the oldest and before an idle lane is handed out, so that waiting lanes go out
    /// even while the caller takes only idle ones (a steady state that finds its oldest
    /// done does not pay the check).
    #[inline(always)]
    fn retry_waiting(&mut self, cx: &mut Context<'_>) {
        if self.unsubmitted > 0 {
            self.submit_waiting(cx);
        }
    }

    fn submit_waiting(&mut self, cx: &mut Context<'_>) {
        if let Some(timer) = &mut self.peer_retry {
            // Not before its time: the timer wakes this task.
            if Pin::new(timer).poll(cx).is_pending() {
                return;
            }
            self.peer_retry = None;
        }
        while self.unsubmitted > 0 {
            let i = self.order[self.wrap(self.head + self.len - self.unsubmitted)] as usize;
            match self.try_submit(i) {
                Try::Submitted => self.peer_tries = 0,
                Try::Refused(rc) => {
                    self.peer_tries = 0;
                    self.group.refuse(i, rc);
                }
                Try::Wait => {
                    self.group.ctx().task_waiters.register(&mut self.ticket, cx.waker());
                    return;
                }
                Try::WaitPeer => {
                    self.wait_for_peer(cx);
                    return;
                }
            }
            self.unsubmitted -= 1;
        }
    }

    /// The first waiting lane found the peer without room: wakes this task for the next
    /// attempt, at once (a yield: the executor's turn between them progresses the PEs, the
    /// peer's included when it is on this executor) for the first attempts, then after the
    /// kind's period, so that a peer that posts nothing for long does not keep the executor
    /// busy. `Producer::send`'s policy.
    #[cold]
    fn wait_for_peer(&mut self, cx: &mut Context<'_>) {
        let Again::Peer { yields, every } = self.kind.again else { unreachable!("only for Again::Peer kinds") };
        self.peer_tries = self.peer_tries.saturating_add(1);
        if self.peer_tries <= yields {
            cx.waker().wake_by_ref();
            return;
        }
        let mut timer = sleep(every);
        if Pin::new(&mut timer).poll(cx).is_ready() {
            cx.waker().wake_by_ref();
        } else {
            self.peer_retry = Some(timer);
        }
    }

    /// Whether there is an oldest operation and it is done.
    #[inline(always)]
    fn oldest_done(&self) -> bool {
        self.len > 0 && self.group.state(self.order[self.head] as usize) == HeldState::Done
    }

    /// Ready once the oldest operation is done (there is one). It waits from this poll first
    /// (`Core::wait_batch_inline`: the batch's completions collected inline, then the inline
    /// spin) and registers the waker only if the oldest is still in flight.
    #[inline(always)]
    fn poll_oldest(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.retry_waiting(cx);
        let i = self.order[self.head] as usize;
        let rec = self.group.record(i);
        match rec.state() {
            HeldState::Done => return Poll::Ready(()),
            // Waiting for room: the context's waiters wake this task.
            HeldState::Idle => return Poll::Pending,
            HeldState::InFlight => {}
        }
        if self.core.wait_batch_inline(self.len, self.kind.posted_ahead, || rec.state() == HeldState::Done) {
            return Poll::Ready(());
        }
        self.group.poll_done(self.core, rec, cx)
    }

    /// Sets the operands of lane `i`'s next operation (the immediate, the addend, or the
    /// compare and swap values).
    #[inline]
    pub(super) fn set_operands(&mut self, i: u32, operands: [u64; 3]) {
        self.mem.operands[i as usize].set(operands);
    }

    /// Lane `i`, handed out and not submitted, is idle again.
    #[inline]
    pub(super) fn release(&mut self, i: u32) {
        self.idle.push(i);
    }

    /// The result area of lane `i`'s last operation (a receive's length and immediate), once
    /// taken.
    pub(super) fn output(&self, i: u32) -> TaskOutput {
        self.group.output(i as usize)
    }

    /// The data length of lane `i`'s remote descriptor (the tests' view of what DOCA is
    /// handed); `None` for lanes without remote memory.
    #[cfg(test)]
    pub(super) fn remote_data_len(&self, i: u32) -> Option<usize> {
        let b = self.mem.descs[i as usize][1];
        (!b.is_null()).then(|| crate::mem::descriptors::data_of(b).1)
    }

    /// Lane `i`'s bytes.
    pub(super) fn buf(&self, i: u32) -> &Buf {
        &self.mem.bufs[i as usize]
    }

    /// Lane `i`'s bytes, to fill (never handed out of the lanes: see `LaneMut`).
    pub(super) fn buf_mut(&mut self, i: u32) -> &mut Buf {
        &mut self.mem.bufs[i as usize]
    }

    /// Takes the oldest operation out of the order (it is done).
    #[inline(always)]
    fn pop(&mut self) -> Taken {
        let i = self.order[self.head];
        self.head = self.wrap(self.head + 1);
        self.len -= 1;
        Taken { index: i, status: Some(self.group.take(i as usize)) }
    }

    /// Ready with a lane to fill: an idle one, or, when every lane has an operation, the
    /// oldest once it is done (with its result). The steady state of a full set of lanes
    /// finds the oldest done at once.
    #[inline(never)]
    pub(super) fn poll_lane(&mut self, cx: &mut Context<'_>) -> Poll<Taken> {
        if let Some(i) = self.idle.pop() {
            self.retry_waiting(cx);
            return Poll::Ready(Taken { index: i, status: None });
        }
        // With no idle lane every lane is in the order, so `head` names one.
        if !self.oldest_done() && self.poll_oldest(cx).is_pending() {
            return Poll::Pending;
        }
        Poll::Ready(self.pop())
    }

    /// Ready once a lane can be taken without waiting ([`take_ready`](Self::take_ready) has
    /// one): an idle lane, or the oldest operation done.
    ///
    /// With idle lanes it is ready at once, but when the oldest operation is not done yet it
    /// still collects the completions the PE has, or, once this poll's inline progress is
    /// spent, yields to the executor (whose turn progresses the PE) as an operation does: a
    /// loop that leaves the idle lanes idle (draining, or posting fewer than it could) then
    /// still sees its operations go out and complete, instead of batches of the same idle
    /// lanes forever.
    #[inline(never)]
    pub(super) fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.retry_waiting(cx);
        if self.len == 0 || self.oldest_done() {
            return Poll::Ready(());
        }
        if self.idle.is_empty() {
            return self.poll_oldest(cx);
        }
        if !self.core.progress_batch_inline(self.len) {
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        Poll::Ready(())
    }

    /// How many lanes have no operation.
    pub(super) fn idle_len(&self) -> usize {
        self.idle.len()
    }

    /// A lane to fill, taken without waiting and without progress: an idle one (if `idle`),
    /// or the oldest operation's if it is done (if `oldest`), with its result; `None` when
    /// neither. What a batch hands out, within the counts it began with (see `Batch`): an
    /// operation submitted from the batch may be refused at once, and so be done at once.
    #[inline(never)]
    pub(super) fn take_ready(&mut self, idle: bool, oldest: bool) -> Option<Taken> {
        if idle {
            if let Some(i) = self.idle.pop() {
                return Some(Taken { index: i, status: None });
            }
        }
        (oldest && self.oldest_done()).then(|| self.pop())
    }

    /// Ready with the oldest operation's lane and result once it is done; the order must not
    /// be empty.
    #[inline(never)]
    pub(super) fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Taken> {
        debug_assert!(self.len > 0);
        if self.poll_oldest(cx).is_pending() {
            return Poll::Pending;
        }
        Poll::Ready(self.pop())
    }
}

impl Drop for LaneRing<'_> {
    fn drop(&mut self) {
        // SAFETY: taken once, here; `self.mem` is not used again (the lanes are going).
        let mem = unsafe { ManuallyDrop::take(&mut self.mem) };
        // Idle tasks (and those waiting for room) are freed now; those in flight leave the
        // memory to their completions.
        self.group.clone().abandon(mem);
    }
}

impl fmt::Debug for LaneRing<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lanes")
            .field("op", &self.kind.name)
            .field("depth", &self.depth())
            .field("lane_len", &self.lane_len())
            .field("len", &self.len)
            .field("in_flight", &self.group.in_flight())
            .field("waiting_for_room", &self.unsubmitted)
            .field("peer_tries", &self.peer_tries)
            .finish()
    }
}
