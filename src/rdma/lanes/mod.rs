//! The RDMA operations of [`Lanes`]: [`LaneOp`], what
//! [`Connection::lanes`] and [`Rdma::recv_lanes`] make, and each operation's table for the
//! lanes' engine (`kinds.rs`). How lanes behave is told once, in [`crate::lanes`].

mod kinds;

pub use crate::lanes::{Batch, BatchFuture, LaneFuture, LaneMut, Lanes, NextFuture};

use super::ops::Kind;
use super::{Connection, Rdma, Received};
use crate::error::Result;
use crate::mem::{Buf, RemoteSlice};

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

impl LaneOp {
    /// The operation's kind and its remote memory.
    fn split(self) -> (Kind, Option<RemoteSlice>) {
        match self {
            LaneOp::Write(r) => (Kind::Write, Some(r)),
            LaneOp::WriteImm(r) => (Kind::WriteImm, Some(r)),
            LaneOp::Read(r) => (Kind::Read, Some(r)),
            LaneOp::Send => (Kind::Send, None),
            LaneOp::SendImm => (Kind::SendImm, None),
            LaneOp::FetchAdd(r) => (Kind::FetchAdd, Some(r)),
            LaneOp::CompareSwap(r) => (Kind::CmpSwp, Some(r)),
        }
    }
}

/// Lanes of `op` on `conn` over `local`, cut into `depth` lanes.
pub(in crate::rdma) fn on_conn(conn: &Connection, op: LaneOp, local: Buf, depth: usize) -> Result<Lanes<'_>> {
    let (kind, remote) = op.split();
    let rdma = &conn.inner.rdma;
    // SAFETY: an RDMA table on the connection's own RDMA context and that connection.
    unsafe { Lanes::with(&rdma.ctx, &rdma.inv, conn.inner.conn.cast(), kinds::table(kind), local, remote, depth) }
}

/// Receive lanes on `rdma` over `local`, cut into `depth` lanes.
pub(in crate::rdma) fn on_rdma(rdma: &Rdma, local: Buf, depth: usize) -> Result<Lanes<'_, Received>> {
    let inner = &rdma.inner;
    // SAFETY: the RDMA receive table on the Rdma's own RDMA context (receives take no connection).
    unsafe { Lanes::with(&inner.ctx, &inner.inv, std::ptr::null_mut(), kinds::table(Kind::Recv), local, None, depth) }
}

// Not under Miri: RDMA over the provider (see `rdma::tests`).
#[cfg(all(test, not(miri)))]
mod tests;
