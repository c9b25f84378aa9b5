//! What the lanes' engine knows of an operation kind: a [`LaneKind`], one `static` per kind,
//! made by the module that owns the kind (`rdma::lanes` for the eight RDMA operations,
//! `dma::lanes` for the two directions of a copy, `comch::fast` for a Comch send and a
//! posted receive) from a [`LaneTask`] implementation. The
//! engine itself names no kind: it calls through the table, so one engine serves every
//! kind of context without depending on the modules that define them.

use std::cell::Cell;
use std::ffi::c_void;
use std::rc::Rc;

use crate::executor::completion::HeldGroup;
use crate::executor::context::CtxRecord;
use crate::ext::DocaTask;
use crate::sys;

/// Where a lane's task is made: the context's DOCA object (a `doca_rdma`, a `doca_dma`, a
/// `doca_comch_producer`), the connection (null where there is none), the peer's endpoint (a
/// Comch consumer id; 0 where there is none), the lane's descriptors `[local, remote]`
/// (remote null for none) and its operands.
pub(crate) struct At {
    pub(crate) ctx: *mut c_void,
    pub(crate) conn: *mut c_void,
    pub(crate) peer: u32,
    pub(crate) bufs: [*mut sys::doca_buf; 2],
    pub(crate) operands: [u64; 3],
}

/// A lane's operands: the immediate, the addend, the compare and swap values, or a Comch
/// send's immediate bytes (two words) and their count (the third). A `Cell` in the lanes'
/// memory, which stays alive until DOCA is done with every task: a kind may hand DOCA its
/// address (a Comch send's immediate bytes are given by pointer) while the lanes write
/// another lane's operands.
pub(crate) type LaneOperands = Cell<[u64; 3]>;

/// What the lanes' operations take besides their memory, given with the submit
/// (`LaneMut::submit_imm` and the others).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Operands {
    None,
    /// An immediate (`LaneMut::submit_imm`).
    Imm,
    /// An addend (`LaneMut::submit_fetch_add`).
    FetchAdd,
    /// A compare and a swap value (`LaneMut::submit_compare_swap`).
    CompareSwap,
    /// Up to 16 immediate bytes (`LaneMut::submit_imm_bytes`), or none (`LaneMut::submit`).
    ImmBytes,
}

/// What DOCA's `AGAIN` at a submit means for the kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Again {
    /// The send queue is full of tasks that will complete: the lane waits for a task of the
    /// context to complete (RDMA, DMA).
    Room,
    /// The peer has no room posted yet (a Comch send to a consumer with no buffer posted),
    /// which no completion of this context announces: the lane tries again after a yield,
    /// `yields` times, then every `every` (`Producer::send`'s policy). Each submit rings
    /// its doorbell: a deferred one would meet the `AGAIN` at the flush, as a failed
    /// completion after later lanes may have gone out (their order lost).
    Peer { yields: u32, every: std::time::Duration },
}

/// How the lanes' remote memory is cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Remote {
    /// No remote memory (sends, receives).
    None,
    /// Cut into lanes like the local buffer; `source`: the operation reads it (its
    /// descriptor carries the lane's bytes as data), otherwise it is written (a destination
    /// starts empty: results are appended).
    Lanes { source: bool },
    /// One 8-byte target that every lane acts on (the atomics), carried as data.
    Target,
}

/// One operation kind, as the engine drives it (see the module documentation).
pub(crate) struct LaneKind {
    /// The operation's name in errors and traces (`rdma.write`, `dma.memcpy`).
    pub(crate) name: &'static str,
    pub(crate) operands: Operands,
    pub(crate) again: Again,
    /// Whether the operation reads the lane's local bytes (its descriptor carries them as
    /// data) rather than writes them (a destination starts empty).
    pub(crate) local_source: bool,
    pub(crate) remote: Remote,
    /// The task type's [`DocaTask::POSTED_AHEAD`] (a receive): its wait spins in the poll
    /// only as the executor's spins for such waits taught it.
    pub(crate) posted_ahead: bool,
    /// `HeldGroup::new` for the kind's DOCA task type.
    pub(crate) group: fn(&Rc<CtxRecord>, usize) -> Rc<HeldGroup>,
    /// [`LaneTask::alloc`], returning the task and its `doca_task`.
    pub(crate) alloc: unsafe fn(&At, sys::doca_data, &mut *mut c_void, &mut *mut sys::doca_task) -> sys::doca_error_t,
    /// [`LaneTask::repoint`].
    pub(crate) repoint: unsafe fn(*mut c_void, *mut sys::doca_buf, *mut sys::doca_buf),
    /// [`LaneTask::prepare`].
    pub(crate) prepare: unsafe fn(*mut c_void, *mut sys::doca_buf, *mut sys::doca_buf, &LaneOperands),
}

impl LaneKind {
    /// The table of `L`'s operation, named `name`.
    pub(crate) const fn of<L: LaneTask>(
        name: &'static str,
        operands: Operands,
        local_source: bool,
        remote: Remote,
    ) -> LaneKind {
        LaneKind {
            name,
            operands,
            again: Again::Room,
            local_source,
            remote,
            posted_ahead: <L::Kind as DocaTask>::POSTED_AHEAD,
            group: HeldGroup::new::<L::Kind>,
            alloc: alloc_erased::<L>,
            repoint: repoint_erased::<L>,
            prepare: prepare_erased::<L>,
        }
    }

    /// The same table for a kind whose `AGAIN` means the peer has no room yet
    /// ([`Again::Peer`]), tried again as that says.
    pub(crate) const fn again_from_peer(self, yields: u32, every: std::time::Duration) -> LaneKind {
        LaneKind { again: Again::Peer { yields, every }, ..self }
    }
}

/// What a lane does with a task of one kind: make it, point it at another lane's
/// descriptors, and ready it for its next operation. One implementation per operation kind
/// (a marker type where one DOCA task type serves several, as a DMA copy in and out).
///
/// # Safety
/// Each function is called on a task of kind [`Kind`](LaneTask::Kind) that DOCA does not
/// own, with descriptors that outlive every task using them.
pub(crate) unsafe trait LaneTask {
    /// The DOCA task type (its callbacks, its `free`).
    type Kind: DocaTask;

    /// `*_allocate_init` over `at` with user data `ud`.
    ///
    /// # Safety
    /// `at` names a live context (and connection) and the lane's live descriptors.
    unsafe fn alloc(at: &At, ud: sys::doca_data, task: &mut *mut <Self::Kind as DocaTask>::Task) -> sys::doca_error_t;

    /// Points `task` at descriptors `l` (local) and `r` (remote, null for none).
    ///
    /// # Safety
    /// `task` is a live task of this kind that DOCA does not own.
    unsafe fn repoint(task: *mut <Self::Kind as DocaTask>::Task, l: *mut sys::doca_buf, r: *mut sys::doca_buf);

    /// Readies `task` for its next operation: every parameter stays, but results are
    /// appended after a buffer's data, so each buffer a result lands in (a write's remote
    /// destination, a read's or a receive's local one, an atomic's result) is emptied; the
    /// operands are set. A source keeps its data.
    ///
    /// # Safety
    /// As for [`repoint`](LaneTask::repoint); `l` and `r` are the task's own descriptors;
    /// `operands` lives as long as they do (DOCA may be given its address).
    unsafe fn prepare(
        task: *mut <Self::Kind as DocaTask>::Task,
        l: *mut sys::doca_buf,
        r: *mut sys::doca_buf,
        operands: &LaneOperands,
    );
}

/// # Safety
/// [`LaneTask::alloc`]'s contract.
unsafe fn alloc_erased<L: LaneTask>(
    at: &At,
    ud: sys::doca_data,
    task: &mut *mut c_void,
    base: &mut *mut sys::doca_task,
) -> sys::doca_error_t {
    let mut t = std::ptr::null_mut();
    // SAFETY: forwarded (the caller's contract).
    let rc = unsafe { L::alloc(at, ud, &mut t) };
    if rc == sys::DOCA_SUCCESS {
        *task = t.cast();
        // SAFETY: a task of the kind, just allocated.
        *base = unsafe { L::Kind::as_task(t) };
    }
    rc
}

/// # Safety
/// [`LaneTask::repoint`]'s contract; `task` is a `*mut <L::Kind as DocaTask>::Task`.
unsafe fn repoint_erased<L: LaneTask>(task: *mut c_void, l: *mut sys::doca_buf, r: *mut sys::doca_buf) {
    // SAFETY: forwarded (the caller's contract).
    unsafe { L::repoint(task.cast(), l, r) }
}

/// # Safety
/// [`LaneTask::prepare`]'s contract; `task` is a `*mut <L::Kind as DocaTask>::Task`.
unsafe fn prepare_erased<L: LaneTask>(
    task: *mut c_void,
    l: *mut sys::doca_buf,
    r: *mut sys::doca_buf,
    operands: &LaneOperands,
) {
    // SAFETY: forwarded (the caller's contract).
    unsafe { L::prepare(task.cast(), l, r, operands) }
}

/// Implements [`LaneTask`] for one operation kind: its allocation, its setters, its reset.
/// `$marker => $kind`: the implementing type and its DOCA task type (the same type for a
/// kind of its own).
macro_rules! lane_task {
    // Three closures in order: allocate, repoint, prepare (closure syntax, so that rustfmt
    // formats the invocations).
    ($marker:ty => $kind:ty, |$at:ident, $ud:ident, $t:ident| $alloc:expr,
     |$rt:ident, $rl:ident, $rr:ident| $repoint:block,
     |$pt:ident, $pl:ident, $pr:ident, $ops:ident| $prepare:block $(,)?) => {
        // SAFETY: the calls are the kind's own `allocate_init` and setters, made on a task of
        // this kind as the trait's contract requires.
        unsafe impl $crate::lanes::kind::LaneTask for $marker {
            type Kind = $kind;
            #[inline(always)]
            unsafe fn alloc(
                $at: &$crate::lanes::kind::At,
                $ud: $crate::sys::doca_data,
                $t: &mut *mut <$kind as $crate::ext::DocaTask>::Task,
            ) -> $crate::sys::doca_error_t {
                // SAFETY: forwarded (the caller's contract).
                unsafe { $alloc }
            }
            #[inline(always)]
            unsafe fn repoint(
                $rt: *mut <$kind as $crate::ext::DocaTask>::Task,
                $rl: *mut $crate::sys::doca_buf,
                $rr: *mut $crate::sys::doca_buf,
            ) {
                // SAFETY: forwarded (the caller's contract).
                unsafe { $repoint }
            }
            #[inline(always)]
            unsafe fn prepare(
                $pt: *mut <$kind as $crate::ext::DocaTask>::Task,
                $pl: *mut $crate::sys::doca_buf,
                $pr: *mut $crate::sys::doca_buf,
                $ops: &$crate::lanes::kind::LaneOperands,
            ) {
                // SAFETY: forwarded (the caller's contract). (A send has nothing to ready.)
                #[allow(unused_unsafe)]
                unsafe {
                    $prepare
                }
            }
        }
    };
}
pub(crate) use lane_task;
