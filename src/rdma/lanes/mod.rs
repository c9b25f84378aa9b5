//! [`Lanes`]: operations in flight on fixed memory, each lane with its own task, kept and
//! submitted again as it is. The path for message rate when the memory is known up front,
//! as in perftest (`ib_write_bw`) or an `io_uring` with registered buffers.
//!
//! A [`Window`](super::Window) takes any buffer and any remote slice per operation, so each
//! operation pays for a completion slot, descriptors over its memory and a task
//! re-initialised with DOCA's setters. `Lanes` are made over one local buffer (and, for
//! writes and reads, one remote slice) cut into `depth` equal lanes: lane *k* is bytes
//! `k * len .. (k + 1) * len` of both. Each lane allocates its task once, with its
//! descriptors, and then only submits it again (a destination's data length reset, an
//! immediate set): the completion goes straight into the lane's record. A write costs
//! about what it costs a C program that does the same with DOCA (`docs/cost.md`).
//!
//! | made by | each lane | result |
//! | --- | --- | --- |
//! | [`Connection::lanes`] with [`LaneOp::Write`] / [`LaneOp::WriteImm`] | writes its bytes to its remote slice (with an immediate) | `()` |
//! | [`Connection::lanes`] with [`LaneOp::Read`] | reads its remote slice into its bytes | `()` |
//! | [`Connection::lanes`] with [`LaneOp::Send`] / [`LaneOp::SendImm`] | sends its bytes (with an immediate) | `()` |
//! | [`Rdma::recv_lanes`] | receives a message into its bytes | [`Received`] |
//! | [`Connection::lanes`] with [`LaneOp::FetchAdd`] / [`LaneOp::CompareSwap`] | updates the 8-byte target all lanes share; the old value lands in its first 8 bytes | `()` |
//!
//! * **Taking a lane.** [`lane`](Lanes::lane) gives a [`LaneMut`]: an idle lane at once, or,
//!   when every lane has an operation, the oldest one once it completed, with its result.
//!   Fill it ([`write`](LaneMut::write), [`write_u64`](LaneMut::write_u64)), or read what a
//!   read or receive brought ([`buf`](LaneMut::buf)), and
//!   [`submit`](LaneMut::submit) it. [`next`](Lanes::next) waits for the oldest operation
//!   and gives its result and lane: to drain, or to read what arrived and post again.
//!   Dropping a `LaneMut` without submitting leaves the lane idle.
//! * **Results in submission order**, exactly one per submitted operation. An operation
//!   DOCA refused (a context that does not run, a connection closed) takes its place and
//!   yields the refusal in turn. DOCA completes one connection's operations in order (and a
//!   context's receives in posting order).
//! * **Back-pressure.** A lane that finds the send queue or the task pool full is not
//!   refused: it waits, in order, and the next [`lane`](Lanes::lane) or
//!   [`next`](Lanes::next) submits it once a task of the context completes. Lanes deeper
//!   than the task pool share the tasks they could get: a lane without one takes that of a
//!   lane with no operation in flight.
//! * **Doorbells** are deferred: the submissions of a batch are handed to DOCA together when
//!   the executor (or an inline progress of `lane`/`next`) next progresses the PE. An
//!   operation submitted while no other is in the lanes rings its doorbell at once: there is
//!   nothing to batch it with, and its wait usually comes next (one lane used for latency).
//! * **Tasks.** The lanes take up to `depth` tasks of their kind from the context's pool
//!   ([`RdmaBuilder::max_tasks`](super::RdmaBuilder::max_tasks)) for their whole life, and
//!   `depth` descriptors (two per lane for writes and reads) from its inventory
//!   ([`RdmaBuilder::descriptors`](super::RdmaBuilder::descriptors)). When the
//!   context leaves RUNNING (a [`restart`](Rdma::restart), an error, shutdown), the idle
//!   tasks are given back so that it can stop, and lanes allocate again at their next use.
//! * **Dropping** the `Lanes` with operations in flight discards their results; the memory
//!   and descriptors stay alive until DOCA completes them (or a stop flushes them).
//!
//! **Errors** are those of the matching operation ([`Connection::write`], ...; see the
//! module's [errors and recovery](super#errors-and-recovery)). Making lanes fails with
//! [`ErrorKind::InvalidArgument`] when `depth` is 0, the
//! buffer is empty or not a multiple of `depth` bytes, or the remote slice is shorter than
//! the buffer (for atomics: a target under 8 bytes, or lanes under 8 bytes); with [`ErrorKind::BadState`] on a destroyed
//! context; with DOCA's code when the inventory has no descriptor left.
//!
//! **Threads.** `Lanes` borrow their [`Connection`] (or [`Rdma`]): `!Send`, on the
//! executor that owns the context.
//!
//! ```
//! use async_doca::rdma::{LaneOp, Rdma};
//! use async_doca::{Access, Device, Runtime};
//!
//! Runtime::builder().cpus("0".parse()?).build()?.block_on(async {
//!     let dev = Device::open_default()?;
//!     let a = Rdma::builder(&dev).build().await?;
//!     let b = Rdma::builder(&dev).permissions(Access::RDMA_ALL).build().await?;
//!     let ((blob_a, pa), (blob_b, pb)) = (a.export()?, b.export()?);
//!     let (conn, _peer) = (pa.connect(&blob_b).await?, pb.connect(&blob_a).await?);
//!     let target = dev.alloc(32 * 8, Access::RDMA_ALL)?;
//!     let remote = dev.import(&target.export_rdma()?)?;
//!     let src = dev.alloc(32 * 8, Access::LOCAL_READ_WRITE)?;
//!
//!     // 1000 writes of 8 bytes, 32 lanes: lane k writes to target bytes 8k..8k+8.
//!     let mut lanes = conn.lanes(LaneOp::Write(remote.slice(..)), src.buf(), 32)?;
//!     for i in 0..1000u64 {
//!         let (prev, mut lane) = lanes.lane().await;
//!         if let Some(res) = prev {
//!             res?; // the write this lane carried before
//!         }
//!         lane.write_u64(0, i);
//!         lane.submit();
//!     }
//!     while let Some((res, _lane)) = lanes.next().await {
//!         res?;
//!     }
//!     // Write 999 went out of lane 999 % 32 = 7 (lanes are taken in turn).
//!     assert_eq!(target.buf().read_u64(7 * 8), 999);
//!     Ok::<(), async_doca::Error>(())
//! })?;
//! # Ok::<(), async_doca::Error>(())
//! ```

use std::fmt;
use std::future::poll_fn;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::rc::Rc;
use std::task::{Context, Poll};

use super::ops::Kind;
use super::window::ring::wrap;
use super::window::Outcome;
use super::{
    CmpSwp, Connection, FetchAdd, Rdma, RdmaInner, Read, Received, Recv, Send as SendTask, SendImm, Write, WriteImm,
};
use crate::error::{Error, ErrorKind, Result};
use crate::executor::completion::{HeldGroup, HeldState, Ticket};
use crate::ext::DocaTask;
use crate::mem::descriptors::{Desc, Inventory};
use crate::mem::{Buf, RemoteSlice};
use crate::sys;

/// What the lanes of a [`Connection::lanes`] do, and the remote memory of writes and reads
/// (cut into lanes like the local buffer; it may be longer).
#[derive(Clone, Debug)]
pub enum LaneOp {
    /// Each lane writes its bytes to its slice of the remote memory ([`Connection::write`]).
    Write(RemoteSlice),
    /// As `Write`, with the immediate given to [`LaneMut::submit_imm`]
    /// ([`Connection::write_imm`]).
    WriteImm(RemoteSlice),
    /// Each lane reads its slice of the remote memory into its bytes ([`Connection::read`]).
    Read(RemoteSlice),
    /// Each lane sends its bytes as one message ([`Connection::send`]).
    Send,
    /// As `Send`, with the immediate given to [`LaneMut::submit_imm`]
    /// ([`Connection::send_imm`]).
    SendImm,
    /// Each lane adds the value given to [`LaneMut::submit_fetch_add`] to the 8 bytes at the
    /// start of the remote slice (the same target for every lane), and receives the value
    /// it had in its first 8 bytes ([`Connection::fetch_add`]).
    FetchAdd(RemoteSlice),
    /// As `FetchAdd`, a compare-and-swap given to [`LaneMut::submit_compare_swap`]
    /// ([`Connection::compare_swap`]).
    CompareSwap(RemoteSlice),
}

/// The memory the lanes' tasks touch, and their descriptors. Moved to the held group when
/// the lanes are dropped with operations in flight; dropped only once no task uses it.
struct LaneMem {
    /// Lane `k`'s descriptors: `[local, remote]` (remote null for sends and receives). Given
    /// back in `Drop`, before the inventory and the memory (fields drop after it).
    descs: Box<[[*mut sys::doca_buf; 2]]>,
    bufs: Box<[Buf]>,
    /// The remote memory of writes and reads (its registration keeps the mmap alive).
    _remote: Option<RemoteSlice>,
    _inv: Rc<Inventory>,
}

impl Drop for LaneMem {
    fn drop(&mut self) {
        for d in self.descs.iter().flatten().filter(|d| !d.is_null()) {
            // SAFETY: a reference taken by `Lanes::new` from the inventory this struct holds,
            // over memory it holds; no task uses it any more (the lanes drop this only after
            // their tasks were freed: `HeldGroup::abandon`); dropped once.
            unsafe { sys::doca_buf_dec_refcount(*d, std::ptr::null_mut()) };
        }
    }
}

/// Where a lane's task is made: the context, the connection (null for a receive), the
/// lane's descriptors `[local, remote]` and its operands.
struct At {
    rdma: *mut sys::doca_rdma,
    conn: *mut sys::doca_rdma_connection,
    bufs: [*mut sys::doca_buf; 2],
    operands: [u64; 2],
}

/// What a lane does with a task of one kind: make it, point it at another lane's
/// descriptors, and ready it for its next operation. One implementation per kind, so that
/// the submission path, once dispatched on the kind, has no other branch on it.
///
/// # Safety
/// Each function is called on a task of this kind that DOCA does not own, with descriptors
/// that outlive every task using them.
unsafe trait LaneTask: DocaTask {
    /// `*_allocate_init` over `at` with user data `ud`.
    ///
    /// # Safety
    /// `at` names a live context and connection and the lane's live descriptors.
    unsafe fn alloc(at: &At, ud: sys::doca_data, task: &mut *mut Self::Task) -> sys::doca_error_t;

    /// Points `task` at descriptors `l` (local) and `r` (remote, null for none).
    ///
    /// # Safety
    /// `task` is a live task of this kind that DOCA does not own.
    unsafe fn repoint(task: *mut Self::Task, l: *mut sys::doca_buf, r: *mut sys::doca_buf);

    /// Readies `task` for its next operation: every parameter stays, but results are
    /// appended after a destination's data, so each destination is emptied; the operands
    /// are set.
    ///
    /// # Safety
    /// As for [`repoint`](LaneTask::repoint); `l` and `r` are the task's own descriptors.
    unsafe fn prepare(task: *mut Self::Task, l: *mut sys::doca_buf, r: *mut sys::doca_buf, operands: [u64; 2]);
}

/// Implements [`LaneTask`] for one kind: its allocation, its setters, its reset.
macro_rules! lane_task {
    // Three closures in order: allocate, repoint, prepare (closure syntax, so that rustfmt
    // formats the invocations).
    ($kind:ty, |$at:ident, $ud:ident, $t:ident| $alloc:expr,
     |$rt:ident, $rl:ident, $rr:ident| $repoint:block,
     |$pt:ident, $pl:ident, $pr:ident, $ops:ident| $prepare:block $(,)?) => {
        // SAFETY: the calls are the kind's own `allocate_init` and setters, made on a task of
        // this kind as the trait's contract requires.
        unsafe impl LaneTask for $kind {
            #[inline(always)]
            unsafe fn alloc($at: &At, $ud: sys::doca_data, $t: &mut *mut Self::Task) -> sys::doca_error_t {
                // SAFETY: forwarded (the caller's contract).
                unsafe { $alloc }
            }
            #[inline(always)]
            unsafe fn repoint($rt: *mut Self::Task, $rl: *mut sys::doca_buf, $rr: *mut sys::doca_buf) {
                // SAFETY: forwarded (the caller's contract).
                unsafe { $repoint }
            }
            #[inline(always)]
            unsafe fn prepare($pt: *mut Self::Task, $pl: *mut sys::doca_buf, $pr: *mut sys::doca_buf, $ops: [u64; 2]) {
                // SAFETY: forwarded (the caller's contract). (A send has nothing to ready.)
                #[allow(unused_unsafe)]
                unsafe {
                    $prepare
                }
            }
        }
    };
}

/// The immediate among a lane's operands, as DOCA takes it (big-endian).
fn imm(ops: [u64; 2]) -> u32 {
    (ops[0] as u32).to_be()
}

lane_task!(
    Write,
    |a, ud, t| sys::doca_rdma_task_write_allocate_init(a.rdma, a.conn, a.bufs[0], a.bufs[1], ud, t),
    |t, l, r| {
        sys::doca_rdma_task_write_set_src_buf(t, l);
        sys::doca_rdma_task_write_set_dst_buf(t, r);
    },
    |_t, _l, r, _o| {
        sys::doca_buf_reset_data_len(r);
    }
);
lane_task!(
    WriteImm,
    |a, ud, t| sys::doca_rdma_task_write_imm_allocate_init(
        a.rdma,
        a.conn,
        a.bufs[0],
        a.bufs[1],
        imm(a.operands),
        ud,
        t
    ),
    |t, l, r| {
        sys::doca_rdma_task_write_imm_set_src_buf(t, l);
        sys::doca_rdma_task_write_imm_set_dst_buf(t, r);
    },
    |t, _l, r, o| {
        sys::doca_buf_reset_data_len(r);
        sys::doca_rdma_task_write_imm_set_immediate_data(t, imm(o));
    }
);
lane_task!(
    Read,
    |a, ud, t| sys::doca_rdma_task_read_allocate_init(a.rdma, a.conn, a.bufs[1], a.bufs[0], ud, t),
    |t, l, r| {
        sys::doca_rdma_task_read_set_src_buf(t, r);
        sys::doca_rdma_task_read_set_dst_buf(t, l);
    },
    |_t, l, _r, _o| {
        sys::doca_buf_reset_data_len(l);
    }
);
lane_task!(
    SendTask,
    |a, ud, t| sys::doca_rdma_task_send_allocate_init(a.rdma, a.conn, a.bufs[0], ud, t),
    |t, l, _r| {
        sys::doca_rdma_task_send_set_src_buf(t, l);
    },
    |_t, _l, _r, _o| {}
);
lane_task!(
    SendImm,
    |a, ud, t| sys::doca_rdma_task_send_imm_allocate_init(a.rdma, a.conn, a.bufs[0], imm(a.operands), ud, t),
    |t, l, _r| {
        sys::doca_rdma_task_send_imm_set_src_buf(t, l);
    },
    |t, _l, _r, o| {
        sys::doca_rdma_task_send_imm_set_immediate_data(t, imm(o));
    }
);
lane_task!(
    Recv,
    |a, ud, t| sys::doca_rdma_task_receive_allocate_init(a.rdma, a.bufs[0], ud, t),
    |t, l, _r| {
        sys::doca_rdma_task_receive_set_dst_buf(t, l);
    },
    |_t, l, _r, _o| {
        sys::doca_buf_reset_data_len(l);
    }
);
lane_task!(
    FetchAdd,
    |a, ud, t| sys::doca_rdma_task_atomic_fetch_add_allocate_init(
        a.rdma,
        a.conn,
        a.bufs[1],
        a.bufs[0],
        a.operands[0],
        ud,
        t
    ),
    |t, l, r| {
        sys::doca_rdma_task_atomic_fetch_add_set_dst_buf(t, r);
        sys::doca_rdma_task_atomic_fetch_add_set_result_buf(t, l);
    },
    |t, l, r, o| {
        sys::doca_buf_reset_data_len(l);
        sys::doca_buf_reset_data_len(r);
        sys::doca_rdma_task_atomic_fetch_add_set_add_data(t, o[0]);
    }
);
lane_task!(
    CmpSwp,
    |a, ud, t| sys::doca_rdma_task_atomic_cmp_swp_allocate_init(
        a.rdma,
        a.conn,
        a.bufs[1],
        a.bufs[0],
        a.operands[0],
        a.operands[1],
        ud,
        t
    ),
    |t, l, r| {
        sys::doca_rdma_task_atomic_cmp_swp_set_dst_buf(t, r);
        sys::doca_rdma_task_atomic_cmp_swp_set_result_buf(t, l);
    },
    |t, l, r, o| {
        sys::doca_buf_reset_data_len(l);
        sys::doca_buf_reset_data_len(r);
        sys::doca_rdma_task_atomic_cmp_swp_set_cmp_data(t, o[0]);
        sys::doca_rdma_task_atomic_cmp_swp_set_swap_data(t, o[1]);
    }
);

/// What one attempt to submit a lane did.
enum Try {
    Submitted,
    /// The queue or the task pool is full of tasks that will complete: wait, in order.
    Wait,
    /// DOCA refused it (its code): the lane yields the refusal in its turn.
    Refused(sys::doca_error_t),
}

/// `depth` operations in flight on fixed memory, one task per lane submitted again and
/// again, results in submission order. `T` is what an operation yields: `()`, or
/// [`Received`] for receive lanes. See the [module documentation](self).
pub struct Lanes<'a, T = ()> {
    inner: &'a RdmaInner,
    /// The connection (null for receives).
    conn: *mut sys::doca_rdma_connection,
    kind: Kind,
    group: Rc<HeldGroup>,
    /// The memory and descriptors; taken out only by `Drop`, which hands it to the group.
    mem: ManuallyDrop<Box<LaneMem>>,
    /// Lanes with an operation, oldest first: `order[head..head + len]` (modulo the depth).
    order: Box<[u32]>,
    head: usize,
    len: usize,
    /// The newest `unsubmitted` of them wait for room (see [`Try::Wait`]).
    unsubmitted: usize,
    /// Lanes without an operation (the most recently used on top: its memory is warm).
    idle: Vec<u32>,
    /// The operands of each lane's next operation: the immediate, the addend, or the compare
    /// and swap values.
    operands: Box<[[u64; 2]]>,
    /// The place among the context's waiters while lanes wait for room.
    ticket: Ticket,
    _out: PhantomData<fn() -> T>,
}

impl<'a, T> Lanes<'a, T> {
    fn new(
        inner: &'a RdmaInner,
        conn: *mut sys::doca_rdma_connection,
        kind: Kind,
        local: Buf,
        remote: Option<RemoteSlice>,
        depth: usize,
    ) -> Result<Self> {
        let op = kind.name();
        let bad = |what: String| Error::new(ErrorKind::InvalidArgument, format!("{op}: lanes: {what}"));
        if depth == 0 || local.is_empty() || local.len() % depth != 0 {
            return Err(bad(format!("a {}-byte buffer does not make {depth} equal lanes", local.len())));
        }
        if depth > u32::MAX as usize {
            return Err(bad(format!("{depth} lanes")));
        }
        let len = local.len() / depth;
        match &remote {
            Some(r) if kind.is_atomic() && (r.len() < 8 || len < 8) => {
                return Err(bad(format!(
                    "an atomic needs an 8-byte target and 8 bytes per lane, not {} and {len}",
                    r.len()
                )));
            }
            Some(r) if !kind.is_atomic() && r.len() < local.len() => {
                return Err(bad(format!("a {}-byte remote slice for a {}-byte buffer", r.len(), local.len())));
            }
            _ => {}
        }
        inner.ctx.as_ptr().map_err(|e| e.context_prefix(op))?;
        let bufs: Box<[Buf]> = (0..depth)
            .map(|k| local.memory().slice(local.offset() + k * len..local.offset() + (k + 1) * len))
            .collect();
        // Sources carry all their bytes; destinations (an atomic's result too) start empty
        // (results are appended).
        let local_data = if matches!(kind, Kind::Read | Kind::Recv) || kind.is_atomic() { 0 } else { len };
        let mut mem = Box::new(LaneMem {
            descs: vec![[std::ptr::null_mut(); 2]; depth].into_boxed_slice(),
            bufs,
            _remote: remote,
            _inv: inner.inv.clone(),
        });
        for k in 0..depth {
            let l = inner.inv.buf_over(Desc::local(&mem.bufs[k]), local_data);
            mem.descs[k][0] = l.map_err(|rc| Error::from_doca(rc, format!("{op}: lanes: a descriptor")))?;
            if let Some(r) = &mem._remote {
                // An atomic's lanes share their target; the others cut the remote slice too.
                let (at, n) = if kind.is_atomic() { (0, 8) } else { (k * len, len) };
                let lane = r.memory().slice(r.offset() + at..r.offset() + at + n);
                mem.descs[k][1] = inner
                    .inv
                    .buf_over(Desc::remote(&lane), 0)
                    .map_err(|rc| Error::from_doca(rc, format!("{op}: lanes: a descriptor")))?;
            }
        }
        let rec = inner.ctx.record();
        let group = match kind {
            Kind::Write => HeldGroup::new::<Write>(rec, depth),
            Kind::WriteImm => HeldGroup::new::<WriteImm>(rec, depth),
            Kind::Read => HeldGroup::new::<Read>(rec, depth),
            Kind::Send => HeldGroup::new::<SendTask>(rec, depth),
            Kind::SendImm => HeldGroup::new::<SendImm>(rec, depth),
            Kind::Recv => HeldGroup::new::<Recv>(rec, depth),
            Kind::FetchAdd => HeldGroup::new::<FetchAdd>(rec, depth),
            Kind::CmpSwp => HeldGroup::new::<CmpSwp>(rec, depth),
        };
        Ok(Lanes {
            inner,
            conn,
            kind,
            group,
            mem: ManuallyDrop::new(mem),
            order: vec![0; depth].into_boxed_slice(),
            head: 0,
            len: 0,
            unsubmitted: 0,
            // Lane 0 on top: lanes are first taken in order.
            idle: (0..depth as u32).rev().collect(),
            operands: vec![[0; 2]; depth].into_boxed_slice(),
            ticket: None,
            _out: PhantomData,
        })
    }

    /// How many lanes.
    pub fn depth(&self) -> usize {
        self.order.len()
    }

    /// How many bytes each lane has.
    pub fn lane_len(&self) -> usize {
        self.mem.bufs[0].len()
    }

    /// Operations submitted (or waiting for room) whose results were not taken yet.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no lane has an operation.
    pub fn is_empty(&self) -> bool {
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
        match self.kind {
            Kind::Write => self.try_submit_kind::<Write>(i),
            Kind::WriteImm => self.try_submit_kind::<WriteImm>(i),
            Kind::Read => self.try_submit_kind::<Read>(i),
            Kind::Send => self.try_submit_kind::<SendTask>(i),
            Kind::SendImm => self.try_submit_kind::<SendImm>(i),
            Kind::Recv => self.try_submit_kind::<Recv>(i),
            Kind::FetchAdd => self.try_submit_kind::<FetchAdd>(i),
            Kind::CmpSwp => self.try_submit_kind::<CmpSwp>(i),
        }
    }

    #[inline(always)]
    fn try_submit_kind<K: LaneTask>(&self, i: usize) -> Try {
        let group = &*self.group;
        let ctx = group.ctx();
        if !ctx.is_alive() {
            return Try::Refused(sys::DOCA_ERROR_BAD_STATE);
        }
        let mut task = group.task::<K>(i);
        if task.is_null() {
            if let Err(t) = self.obtain_task::<K>(i) {
                return t;
            }
            task = group.task::<K>(i);
        }
        // Fresh, moved or kept, the task's destination may hold the data of the lane's
        // earlier operation (the descriptors are the lane's for its whole life).
        let [l, r] = self.mem.descs[i];
        // SAFETY: lane `i`'s own task, not in flight, and its own descriptors, which no task
        // in flight uses.
        unsafe { K::prepare(task, l, r, self.operands[i]) };
        // The doorbell: rung at once for an operation alone in the lanes (nothing to batch it
        // with, and its wait comes next: the latency case), deferred to the next progress
        // otherwise, so that a batch of submissions shares one. DOCA's flush hands over the
        // context's earlier deferred tasks first, so the order stays the submission order.
        let doorbell = self.len == 1;
        // SAFETY: lane `i` is idle (taken by a `LaneMut`, or waiting in order) and has a task
        // of kind K (the group's), ready for its next operation.
        match unsafe { group.submit::<K>(self.inner.ctx.core(), i, doorbell) } {
            sys::DOCA_SUCCESS => Try::Submitted,
            sys::DOCA_ERROR_AGAIN | sys::DOCA_ERROR_NO_MEMORY if ctx.outstanding() > 0 => Try::Wait,
            rc => Try::Refused(rc),
        }
    }

    /// Gives lane `i` a task (its first use, or its task was given back): a fresh one, an
    /// idle lane's, or one the context had kept idle. Off the fast path.
    #[cold]
    #[inline(never)]
    fn obtain_task<K: LaneTask>(&self, i: usize) -> std::result::Result<(), Try> {
        let group = &*self.group;
        let ctx = group.ctx();
        match self.alloc::<K>(i) {
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
                    unsafe { K::repoint(group.task::<K>(i), l, r) };
                }
                None if ctx.reclaim_idle() => match self.alloc::<K>(i) {
                    sys::DOCA_SUCCESS => {}
                    sys::DOCA_ERROR_NO_MEMORY if ctx.outstanding() > 0 => return Err(Try::Wait),
                    rc => return Err(Try::Refused(rc)),
                },
                None if ctx.outstanding() > 0 => return Err(Try::Wait),
                None => return Err(Try::Refused(sys::DOCA_ERROR_NO_MEMORY)),
            },
            rc => return Err(Try::Refused(rc)),
        }
        Ok(())
    }

    /// Allocates lane `i`'s task of kind `K` over its descriptors, with its record's user
    /// data, and gives it to the lane's record.
    fn alloc<K: LaneTask>(&self, i: usize) -> sys::doca_error_t {
        let Ok(rdma) = self.inner.ctx.as_ptr() else { return sys::DOCA_ERROR_BAD_STATE };
        let at = At { rdma, conn: self.conn, bufs: self.mem.descs[i], operands: self.operands[i] };
        let mut task = std::ptr::null_mut();
        // SAFETY: a live context (checked above) and connection (borrowed by the lanes); the
        // descriptors describe memory the lanes keep until no task uses it.
        let rc = unsafe { K::alloc(&at, self.group.user_data(i), &mut task) };
        if rc == sys::DOCA_SUCCESS {
            // SAFETY: a fresh task of the group's kind, nobody else's; the lane had none.
            unsafe { self.group.set_task::<K>(i, task) };
        }
        rc
    }

    /// Puts lane `i` after the newest operation and submits it, unless earlier lanes wait
    /// for room (then it waits behind them).
    #[inline(always)]
    fn submit_lane(&mut self, i: u32) {
        let pos = self.wrap(self.head + self.len);
        self.order[pos] = i;
        self.len += 1;
        if self.unsubmitted > 0 {
            self.unsubmitted += 1;
            return;
        }
        match self.try_submit(i as usize) {
            Try::Submitted => {}
            Try::Wait => self.unsubmitted = 1,
            Try::Refused(rc) => self.group.refuse(i as usize, rc),
        }
    }

    /// Submits the lanes that wait for room, in order; `Pending` (registered among the
    /// context's waiters) while the first of them still cannot go.
    fn poll_unsubmitted(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        while self.unsubmitted > 0 {
            let i = self.order[self.wrap(self.head + self.len - self.unsubmitted)] as usize;
            match self.try_submit(i) {
                Try::Submitted => {}
                Try::Refused(rc) => self.group.refuse(i, rc),
                Try::Wait => {
                    self.group.ctx().task_waiters.register(&mut self.ticket, cx.waker());
                    return Poll::Pending;
                }
            }
            self.unsubmitted -= 1;
        }
        Poll::Ready(())
    }

    /// Ready once the oldest operation is done (there is one). When this poll may progress
    /// the PE, it first collects the batch's completions inline
    /// (`Core::progress_batch_inline`).
    #[inline]
    fn poll_oldest(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.unsubmitted > 0 {
            // Registered as a waiter when it stays pending; the oldest may be done anyway.
            let _ = self.poll_unsubmitted(cx);
        }
        let i = self.order[self.head] as usize;
        match self.group.state(i) {
            HeldState::Done => return Poll::Ready(()),
            // Waiting for room: the context's waiters wake this task.
            HeldState::Idle => return Poll::Pending,
            HeldState::InFlight => {}
        }
        if self.inner.ctx.core().progress_batch_inline(self.len) && self.group.state(i) == HeldState::Done {
            return Poll::Ready(());
        }
        self.group.poll_done(i, cx)
    }

    /// Takes the oldest operation out of the order (it is done).
    #[inline(always)]
    fn pop(&mut self) -> (Result<T>, u32)
    where
        T: Outcome,
    {
        let i = self.order[self.head];
        self.head = self.wrap(self.head + 1);
        self.len -= 1;
        let (status, out) = self.group.take(i as usize);
        let r = if status == sys::DOCA_SUCCESS {
            Ok(T::from_output(out))
        } else {
            Err(Error::from_doca(status, self.kind.name()))
        };
        (r, i)
    }

    /// A lane to fill and submit: an idle one at once (`None`), or, when every lane has an
    /// operation, the oldest once it completed, with that operation's result.
    pub async fn lane(&mut self) -> (Option<Result<T>>, LaneMut<'_, 'a, T>)
    where
        T: Outcome,
    {
        // Wait in a closure that returns nothing, then take the lane: a `LaneMut` (a borrow of
        // `self`) cannot come out of a closure that borrows `self` at every call.
        poll_fn(|cx| self.poll_ready(cx)).await;
        if let Some(i) = self.idle.pop() {
            return (None, LaneMut { lanes: self, index: i, submitted: false });
        }
        let (r, i) = self.pop();
        (Some(r), LaneMut { lanes: self, index: i, submitted: false })
    }

    /// Ready once a lane is idle or the oldest operation is done. Those two checks inline
    /// (the steady state of a full set of lanes finds the oldest done), the wait out of line.
    #[inline(always)]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        // With no idle lane every lane is in the order, so `head` names one.
        if !self.idle.is_empty() || self.group.state(self.order[self.head] as usize) == HeldState::Done {
            return Poll::Ready(());
        }
        self.poll_oldest(cx)
    }

    /// Waits for the oldest operation and gives its result with its lane (submit it again,
    /// or drop it to leave the lane idle); `None` when no lane has an operation.
    pub async fn next(&mut self) -> Option<(Result<T>, LaneMut<'_, 'a, T>)>
    where
        T: Outcome,
    {
        if self.len == 0 {
            return None;
        }
        poll_fn(|cx| self.poll_oldest(cx)).await;
        let (r, i) = self.pop();
        Some((r, LaneMut { lanes: self, index: i, submitted: false }))
    }
}

impl<'a> Lanes<'a> {
    /// Lanes of `op` on `conn` over `local`, cut into `depth` lanes.
    pub(in crate::rdma) fn on_conn(conn: &'a Connection, op: LaneOp, local: Buf, depth: usize) -> Result<Lanes<'a>> {
        let (kind, remote) = match op {
            LaneOp::Write(r) => (Kind::Write, Some(r)),
            LaneOp::WriteImm(r) => (Kind::WriteImm, Some(r)),
            LaneOp::Read(r) => (Kind::Read, Some(r)),
            LaneOp::Send => (Kind::Send, None),
            LaneOp::SendImm => (Kind::SendImm, None),
            LaneOp::FetchAdd(r) => (Kind::FetchAdd, Some(r)),
            LaneOp::CompareSwap(r) => (Kind::CmpSwp, Some(r)),
        };
        Lanes::new(&conn.inner.rdma, conn.inner.conn, kind, local, remote, depth)
    }
}

impl<'a> Lanes<'a, Received> {
    /// Receive lanes on `rdma` over `local`, cut into `depth` lanes.
    pub(in crate::rdma) fn on_rdma(rdma: &'a Rdma, local: Buf, depth: usize) -> Result<Lanes<'a, Received>> {
        Lanes::new(&rdma.inner, std::ptr::null_mut(), Kind::Recv, local, None, depth)
    }
}

impl<T> Drop for Lanes<'_, T> {
    fn drop(&mut self) {
        // SAFETY: taken once, here; `self.mem` is not used again (the lanes are going).
        let mem = unsafe { ManuallyDrop::take(&mut self.mem) };
        // Idle tasks (and those waiting for room) are freed now; those in flight leave the
        // memory to their completions.
        self.group.clone().abandon(mem);
    }
}

impl<T> fmt::Debug for Lanes<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lanes")
            .field("op", &self.kind.name())
            .field("depth", &self.depth())
            .field("lane_len", &self.lane_len())
            .field("len", &self.len)
            .field("in_flight", &self.group.in_flight())
            .field("waiting_for_room", &self.unsubmitted)
            .finish()
    }
}

/// One lane of [`Lanes`], not in flight: fill it (or read what arrived) and
/// [`submit`](LaneMut::submit) it. Dropped without submitting, the lane stays idle.
#[must_use = "a lane does nothing unless submitted"]
pub struct LaneMut<'l, 'a, T = ()> {
    lanes: &'l mut Lanes<'a, T>,
    index: u32,
    /// Set by a submit: the lane is in the order, not idle.
    submitted: bool,
}

impl<T> LaneMut<'_, '_, T> {
    /// The lane's number, `0..depth`: its bytes are `index * lane_len ..` of the buffer (and
    /// of the remote slice).
    pub fn index(&self) -> usize {
        self.index as usize
    }

    /// The lane's bytes, to read: what a read or receive brought, an atomic's old value, or
    /// what a write or send carries.
    pub fn buf(&self) -> &Buf {
        &self.lanes.mem.bufs[self.index as usize]
    }

    /// The lane's bytes to fill before [`submit`](LaneMut::submit), through its writers
    /// ([`write`](LaneMut::write), [`write_u64`](LaneMut::write_u64),
    /// [`fill`](LaneMut::fill)): the lane hands out no `&mut Buf`, which could be swapped
    /// for other memory while the lane's task and descriptors stay on this one.
    fn bytes(&mut self) -> &mut Buf {
        let i = self.index as usize;
        &mut self.lanes.mem.bufs[i]
    }

    /// Copies `data` into the lane's bytes at `at`, as [`Buf::write`] (panics when out of
    /// bounds).
    pub fn write(&mut self, at: usize, data: &[u8]) {
        self.bytes().write(at, data);
    }

    /// Writes `v` at `at` (native byte order), as [`Buf::write_u64`].
    pub fn write_u64(&mut self, at: usize, v: u64) {
        self.bytes().write_u64(at, v);
    }

    /// Sets every byte of the lane to `byte`, as [`Buf::fill`].
    pub fn fill(&mut self, byte: u8) {
        self.bytes().fill(byte);
    }

    /// Submits the lane's operation (its doorbell deferred to the next progress). It yields
    /// its result from a later [`lane`](Lanes::lane) or [`next`](Lanes::next), in order.
    ///
    /// # Panics
    /// On lanes whose operation takes an operand ([`LaneOp::WriteImm`], [`LaneOp::SendImm`],
    /// [`LaneOp::FetchAdd`], [`LaneOp::CompareSwap`]): use the method that gives it.
    #[inline]
    pub fn submit(self) {
        self.expect(!self.lanes.kind.has_imm() && !self.lanes.kind.is_atomic(), "submit");
        self.go();
    }

    /// Submits the lane's operation with immediate data `imm`; otherwise as
    /// [`submit`](LaneMut::submit).
    ///
    /// # Panics
    /// Unless the lanes are of [`LaneOp::WriteImm`] or [`LaneOp::SendImm`].
    #[inline]
    pub fn submit_imm(self, imm: u32) {
        self.expect(self.lanes.kind.has_imm(), "submit_imm");
        self.lanes.operands[self.index as usize] = [u64::from(imm), 0];
        self.go();
    }

    /// Submits the lane's fetch-and-add of `add`; the target's old value lands in the lane's
    /// first 8 bytes (read them from the lane its result comes with). Otherwise as
    /// [`submit`](LaneMut::submit).
    ///
    /// # Panics
    /// Unless the lanes are of [`LaneOp::FetchAdd`].
    #[inline]
    pub fn submit_fetch_add(self, add: u64) {
        self.expect(self.lanes.kind == Kind::FetchAdd, "submit_fetch_add");
        self.lanes.operands[self.index as usize] = [add, 0];
        self.go();
    }

    /// Submits the lane's compare-and-swap: `swap` replaces the target if it equals
    /// `compare`; its old value lands in the lane's first 8 bytes. Otherwise as
    /// [`submit`](LaneMut::submit).
    ///
    /// # Panics
    /// Unless the lanes are of [`LaneOp::CompareSwap`].
    #[inline]
    pub fn submit_compare_swap(self, compare: u64, swap: u64) {
        self.expect(self.lanes.kind == Kind::CmpSwp, "submit_compare_swap");
        self.lanes.operands[self.index as usize] = [compare, swap];
        self.go();
    }

    /// Panics with the method that submits these lanes unless `ok`.
    #[inline(always)]
    fn expect(&self, ok: bool, called: &str) {
        if !ok {
            self.wrong_submit(called);
        }
    }

    #[cold]
    #[inline(never)]
    fn wrong_submit(&self, called: &str) -> ! {
        let kind = self.lanes.kind;
        let right = match kind {
            Kind::WriteImm | Kind::SendImm => "submit_imm",
            Kind::FetchAdd => "submit_fetch_add",
            Kind::CmpSwp => "submit_compare_swap",
            _ => "submit",
        };
        panic!("{}: these lanes are submitted with {right}, not {called}", kind.name());
    }

    #[inline(always)]
    fn go(mut self) {
        self.submitted = true;
        self.lanes.submit_lane(self.index);
    }
}

impl<T> Drop for LaneMut<'_, '_, T> {
    #[inline]
    fn drop(&mut self) {
        if !self.submitted {
            self.lanes.idle.push(self.index);
        }
    }
}

impl<T> fmt::Debug for LaneMut<'_, '_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LaneMut").field("op", &self.lanes.kind.name()).field("index", &self.index).finish()
    }
}

// Not under Miri: RDMA over the provider (see `rdma::tests`).
#[cfg(all(test, not(miri)))]
mod tests;
