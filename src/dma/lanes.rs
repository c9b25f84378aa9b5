//! The copies of [`Lanes`] on a DMA context: [`LaneOp`], and each
//! direction's table for the lanes' engine. How lanes behave is told once, in
//! [`crate::lanes`]; [`Dma::lanes`](super::Dma::lanes) makes them.

use super::{Dma, Memcpy};
use crate::error::Result;
use crate::lanes::kind::{lane_task, At, LaneKind, Operands, Remote};
use crate::lanes::Lanes;
use crate::mem::{Buf, RemoteSlice};
use crate::sys;

/// What the lanes of a [`Dma::lanes`](super::Dma::lanes) copy, and the imported memory
/// they copy from or into (cut into lanes like the local buffer; it may be longer).
#[derive(Clone, Debug)]
pub enum LaneOp {
    /// Each lane copies its slice of the imported memory into its bytes (the DPU reads host
    /// memory in): read them from the lane its result comes with.
    CopyIn(RemoteSlice),
    /// Each lane copies its bytes into its slice of the imported memory (a result back to
    /// the host): fill them before [`submit`](crate::lanes::LaneMut::submit).
    CopyOut(RemoteSlice),
}

/// A copy in: imported memory into the lane.
struct CopyIn;
/// A copy out: the lane into imported memory.
struct CopyOut;

/// The context of `at`: the lanes of a copy are made on a `doca_dma`.
fn dma(at: &At) -> *mut sys::doca_dma {
    at.ctx.cast()
}

lane_task!(
    CopyIn => Memcpy,
    |a, ud, t| sys::doca_dma_task_memcpy_alloc_init(dma(a), a.bufs[1], a.bufs[0], ud, t),
    |t, l, r| {
        sys::doca_dma_task_memcpy_set_src(t, r);
        sys::doca_dma_task_memcpy_set_dst(t, l);
    },
    |_t, l, _r, _o| {
        sys::doca_buf_reset_data_len(l);
    }
);
lane_task!(
    CopyOut => Memcpy,
    |a, ud, t| sys::doca_dma_task_memcpy_alloc_init(dma(a), a.bufs[0], a.bufs[1], ud, t),
    |t, l, r| {
        sys::doca_dma_task_memcpy_set_src(t, l);
        sys::doca_dma_task_memcpy_set_dst(t, r);
    },
    |_t, _l, r, _o| {
        sys::doca_buf_reset_data_len(r);
    }
);

/// The name of a copy, in its errors (as [`Dma::memcpy`](super::Dma::memcpy)'s).
const OP: &str = "dma.memcpy";

// A copy in writes the lane and reads the imported memory; a copy out the other way.
static COPY_IN: LaneKind = LaneKind::of::<CopyIn>(OP, Operands::None, false, Remote::Lanes { source: true });
static COPY_OUT: LaneKind = LaneKind::of::<CopyOut>(OP, Operands::None, true, Remote::Lanes { source: false });

/// Lanes of `op` on `dma` over `local`, cut into `depth` lanes.
pub(super) fn on_dma(dma: &Dma, op: LaneOp, local: Buf, depth: usize) -> Result<Lanes<'_>> {
    let (kind, remote) = match op {
        LaneOp::CopyIn(r) => (&COPY_IN, r),
        LaneOp::CopyOut(r) => (&COPY_OUT, r),
    };
    let inner = &dma.inner;
    // SAFETY: a DMA table (`COPY_IN`/`COPY_OUT`) on the Dma's own DMA context, no connection.
    unsafe { Lanes::with(&inner.ctx, &inner.inv, std::ptr::null_mut(), kind, local, Some(remote), depth) }
}
