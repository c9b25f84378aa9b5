//! Each RDMA operation's table for the lanes' engine ([`LaneKind`]): how a lane allocates
//! its task over its descriptors, points it at another lane's, and readies it for its next
//! operation, and how its memory is laid out. The engine calls through the table and names
//! no RDMA type.

use super::super::ops::Kind;
use super::super::{CmpSwp, FetchAdd, Read, Recv, Send as SendTask, SendImm, Write, WriteImm};
use crate::lanes::kind::{lane_task, At, LaneKind, Operands, Remote};
use crate::sys;

/// The table of `kind`'s lanes.
pub(super) fn table(kind: Kind) -> &'static LaneKind {
    match kind {
        Kind::Write => &WRITE,
        Kind::WriteImm => &WRITE_IMM,
        Kind::Read => &READ,
        Kind::Send => &SEND,
        Kind::SendImm => &SEND_IMM,
        Kind::Recv => &RECV,
        Kind::FetchAdd => &FETCH_ADD,
        Kind::CmpSwp => &CMP_SWP,
    }
}

// A write reads its lane and writes the remote one; a read the other way; a send reads its
// lane, a receive writes it; an atomic acts on the one target all lanes share, and its old
// value lands in the lane.
static WRITE: LaneKind =
    LaneKind::of::<Write>(Kind::Write.name(), Operands::None, true, Remote::Lanes { source: false });
static WRITE_IMM: LaneKind =
    LaneKind::of::<WriteImm>(Kind::WriteImm.name(), Operands::Imm, true, Remote::Lanes { source: false });
static READ: LaneKind = LaneKind::of::<Read>(Kind::Read.name(), Operands::None, false, Remote::Lanes { source: true });
static SEND: LaneKind = LaneKind::of::<SendTask>(Kind::Send.name(), Operands::None, true, Remote::None);
static SEND_IMM: LaneKind = LaneKind::of::<SendImm>(Kind::SendImm.name(), Operands::Imm, true, Remote::None);
static RECV: LaneKind = LaneKind::of::<Recv>(Kind::Recv.name(), Operands::None, false, Remote::None);
static FETCH_ADD: LaneKind = LaneKind::of::<FetchAdd>(Kind::FetchAdd.name(), Operands::FetchAdd, false, Remote::Target);
static CMP_SWP: LaneKind = LaneKind::of::<CmpSwp>(Kind::CmpSwp.name(), Operands::CompareSwap, false, Remote::Target);

/// The context of `at`: the lanes of an RDMA kind are made on a `doca_rdma`.
fn rdma(at: &At) -> *mut sys::doca_rdma {
    at.ctx.cast()
}

/// The connection of `at` (null for a receive).
fn conn(at: &At) -> *mut sys::doca_rdma_connection {
    at.conn.cast()
}

/// The immediate among a lane's operands, as DOCA takes it (big-endian).
fn imm(ops: [u64; 3]) -> u32 {
    (ops[0] as u32).to_be()
}

lane_task!(
    Write => Write,
    |a, ud, t| sys::doca_rdma_task_write_allocate_init(rdma(a), conn(a), a.bufs[0], a.bufs[1], ud, t),
    |t, l, r| {
        sys::doca_rdma_task_write_set_src_buf(t, l);
        sys::doca_rdma_task_write_set_dst_buf(t, r);
    },
    |_t, _l, r, _o| {
        sys::doca_buf_reset_data_len(r);
    }
);
lane_task!(
    WriteImm => WriteImm,
    |a, ud, t| sys::doca_rdma_task_write_imm_allocate_init(
        rdma(a),
        conn(a),
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
        sys::doca_rdma_task_write_imm_set_immediate_data(t, imm(o.get()));
    }
);
lane_task!(
    Read => Read,
    |a, ud, t| sys::doca_rdma_task_read_allocate_init(rdma(a), conn(a), a.bufs[1], a.bufs[0], ud, t),
    |t, l, r| {
        sys::doca_rdma_task_read_set_src_buf(t, r);
        sys::doca_rdma_task_read_set_dst_buf(t, l);
    },
    |_t, l, _r, _o| {
        sys::doca_buf_reset_data_len(l);
    }
);
lane_task!(
    SendTask => SendTask,
    |a, ud, t| sys::doca_rdma_task_send_allocate_init(rdma(a), conn(a), a.bufs[0], ud, t),
    |t, l, _r| {
        sys::doca_rdma_task_send_set_src_buf(t, l);
    },
    |_t, _l, _r, _o| {}
);
lane_task!(
    SendImm => SendImm,
    |a, ud, t| sys::doca_rdma_task_send_imm_allocate_init(rdma(a), conn(a), a.bufs[0], imm(a.operands), ud, t),
    |t, l, _r| {
        sys::doca_rdma_task_send_imm_set_src_buf(t, l);
    },
    |t, _l, _r, o| {
        sys::doca_rdma_task_send_imm_set_immediate_data(t, imm(o.get()));
    }
);
lane_task!(
    Recv => Recv,
    |a, ud, t| sys::doca_rdma_task_receive_allocate_init(rdma(a), a.bufs[0], ud, t),
    |t, l, _r| {
        sys::doca_rdma_task_receive_set_dst_buf(t, l);
    },
    |_t, l, _r, _o| {
        sys::doca_buf_reset_data_len(l);
    }
);
lane_task!(
    FetchAdd => FetchAdd,
    |a, ud, t| sys::doca_rdma_task_atomic_fetch_add_allocate_init(
        rdma(a),
        conn(a),
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
    |t, l, _r, o| {
        sys::doca_buf_reset_data_len(l);
        sys::doca_rdma_task_atomic_fetch_add_set_add_data(t, o.get()[0]);
    }
);
lane_task!(
    CmpSwp => CmpSwp,
    |a, ud, t| sys::doca_rdma_task_atomic_cmp_swp_allocate_init(
        rdma(a),
        conn(a),
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
    |t, l, _r, o| {
        sys::doca_buf_reset_data_len(l);
        let [compare, swap, _] = o.get();
        sys::doca_rdma_task_atomic_cmp_swp_set_cmp_data(t, compare);
        sys::doca_rdma_task_atomic_cmp_swp_set_swap_data(t, swap);
    }
);
