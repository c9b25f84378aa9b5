//! The decoded form of a send-side operation: what the engine executes.
//!
//! A send-side task is decoded and validated once, at submit (`submit.rs`, with the
//! decoders of `tasks.rs` and `remote.rs`). The resulting [`Op`] travels with the task
//! through its connection's queue ([`Queued`]) to `engine.rs`, which never reads the task's
//! fields again. DOCA's contract forbids changing a task while it is in flight, so the
//! values copied here are the task's for its whole flight.
//!
//! This module is a leaf: tasks, remote-net tasks, connections and the engine all name
//! these types, and it names none of them.

use core::cell::Cell;

use crate::buf::doca_buf;
use crate::sync_event::doca_sync_event_remote_net;
use crate::task::doca_task;
use crate::types::doca_be32_t;

/// A send-side operation, decoded from its task.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Op {
    /// send / send_imm: stream a record (header + payload) into the peer's ring.
    Send {
        src: *const doca_buf,
        imm: Option<doca_be32_t>,
        /// The record bytes written so far, kept in the task (see [`Queued`] for why it is
        /// valid while the operation is queued).
        progress: *const Cell<u64>,
    },
    /// write / write_imm: one-sided write, then (imm) a notification record. `progress`:
    /// 0 before the write, 1 once written and waiting for room for the notification, 2 done.
    Write {
        src: *const doca_buf,
        dst: *mut doca_buf,
        imm: Option<doca_be32_t>,
        progress: *const Cell<u64>,
    },
    Read {
        src: *const doca_buf,
        dst: *mut doca_buf,
    },
    CmpSwp {
        dst: *mut doca_buf,
        result: *mut doca_buf,
        cmp: u64,
        swap: u64,
    },
    FetchAdd {
        dst: *mut doca_buf,
        result: *mut doca_buf,
        add: u64,
    },
    /// Remote-net sync event tasks (`remote.rs`).
    RemoteGet {
        event: *const doca_sync_event_remote_net,
        dst: *mut doca_buf,
    },
    RemoteSet {
        event: *const doca_sync_event_remote_net,
        src: *const doca_buf,
    },
    RemoteAdd {
        event: *const doca_sync_event_remote_net,
        result: *mut doca_buf,
        add: u64,
    },
}

impl Op {
    /// Whether running it may push bytes into the peer's ring (a send's record, a write with
    /// immediate's notification); the other operations only touch memory.
    pub(crate) fn uses_ring(&self) -> bool {
        matches!(self, Op::Send { .. } | Op::Write { imm: Some(_), .. })
    }
}

/// A submitted send-side task in its connection's queue, with its decoded operation.
///
/// `task` (and the `progress` cell an [`Op`] points into) stay valid while the entry is
/// queued: a submitted task is only freed after it completed, and the engine completes a
/// task only after taking it out of the queue (or, when the ctx stops, the queue is
/// cleared before the framework flushes the tasks).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Queued {
    pub task: *const doca_task,
    pub op: Op,
}
