//! The data path: executing send-side operations in connection order, consuming receive
//! rings, the progress and has-work hooks, and peer liveness.
//!
//! # Send side
//! Every operation arrives decoded and validated (`submit.rs` turns the task into an
//! [`Op`] once); the engine runs the `Op` and never reads the task's fields again.
//! `execute` dispatches to one function per operation family (send, write, read, atomics,
//! remote-net sync events). `enqueue` runs an operation at once when its connection's queue is empty (the fast
//! path); otherwise it waits behind the others. `pump_tx` (from progress) runs queued
//! operations from the head, in order, until one blocks on a full ring. A send streams its
//! record into the peer's ring as space allows (`progress` counts the record bytes written);
//! a write-with-immediate does its write once, then waits for room for its 16-byte
//! notification. One-sided operations never block. The tail is published once per call, and
//! the peer's doorbell rung if it announced it may sleep.
//!
//! # Completed means delivered
//! A send completes once its whole record is published in the peer's ring, without the peer's
//! CPU (a NIC acknowledges without the receiver's CPU too). That completion is a promise: the
//! message reaches a posted receive even if the sender stops, is destroyed or exits right
//! after. So when a peer is found gone, its connection is not broken at once: its send side
//! fails (those tasks never completed) and it starts **draining**; its ring keeps feeding
//! posted receives. The ctx enters the error state (which breaks every connection and fails
//! what is left) only once no connection's ring holds a complete record that a receive could
//! still take; a record only partly published (a sender that died mid-message) never
//! completed, and is dropped. While records wait for receives nothing else is held up: the
//! error is reported when the last of them is delivered, or at the first progress with
//! nothing left to deliver.
//!
//! # Receive side
//! `pump_rx` (from progress) looks at the ring's head: a record header with a posted receive
//! available pops the oldest receive and checks its buffer (too small: the receive fails
//! with TOO_BIG and the ctx enters the error state); then payload bytes are copied straight
//! from the ring into the buffer's free space as they arrive, and the receive completes when
//! the whole record is consumed. Without a posted receive, records wait in the ring.
//!
//! # Sleeping and waking
//! Doorbells are rung only for a PE that is armed (between `doca_pe_request_notification`
//! and `doca_pe_clear_notification`); a polling PE sees the rings by itself, so the data
//! path costs it no system call.
//! * `consumer_sleeping` is kept equal to "armed, and the next record could complete
//!   something (a receive is posted or half-filled)" by `sync_sleep_flags`, called from
//!   `has_work` (at arm: set, then re-check the rings — Dekker, see `ring.rs`), from every
//!   progress (clears it after `doca_pe_clear_notification`), and when the first receive is
//!   posted (a receive posted while armed sets it; a record already waiting then makes the
//!   armed handle readable at once).
//! * `space_wanted` is set by a producer blocked on a full ring only while armed (at arm by
//!   `has_work`, or when it blocks while armed), then it re-checks the free space.

use std::time::Instant;

use core::cell::Cell;

use super::conn::{doca_rdma_connection, ConnState, Incoming, Peer, ReceiveTarget};
use super::op::{Op, Queued};
use super::ring::{record_len, Record, RecordKind, RxRing, TxRing, RECORD_HEADER};
use super::tasks::{doca_rdma_task_receive, event_of, live_buf, receive_target, reset_receive};
use super::{doca_rdma, rdma_of, LIVENESS_INTERVAL, MAX_MESSAGE_BYTES};
use crate::ctx::doca_ctx;
use crate::ffi::refused;
use crate::mmap::RemoteRegion;
use crate::task::doca_task;
use crate::types::*;

/// The result of running (part of) an operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Exec {
    /// Finished with this status (success or the task's error).
    Done(doca_error_t),
    /// Needs at least this many free ring bytes to go on.
    Blocked(u64),
    /// The peer broke the protocol (corrupt ring) or is gone: break the connection.
    PeerFault(doca_error_t),
}

/// Why a pump stopped early.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    /// The connection is broken with this code (then the ctx enters the error state).
    Peer(doca_error_t),
    /// A task failed (already completed): the ctx enters the error state.
    Task,
}

fn apply(r: &doca_rdma, c: &doca_rdma_connection, f: Fault) {
    match f {
        Fault::Peer(code) => r.peer_lost(c, code),
        Fault::Task => r.enter_error(DOCA_ERROR_BAD_STATE),
    }
}

/// Whether the ctx's PE is armed (only then does anyone need to ring it).
fn armed(r: &doca_rdma) -> bool {
    r.ctx().pe().is_some_and(|pe| pe.is_armed())
}

/// Sets `consumer_sleeping` exactly on the receive rings whose next record could complete
/// something (a receive is posted, or one is half-filled) while the PE is armed, and clears
/// it everywhere else (see the module docs).
#[inline]
pub(super) fn sync_sleep_flags(r: &doca_rdma) {
    let on = armed(r);
    if !on && !r.sleep_flags_set.get() {
        // Every flag is clear already and none is to be set: the walk would change nothing,
        // and this is every progress of a polling PE. Only this test is inlined.
        return;
    }
    sync_sleep_flags_walk(r, on);
}

/// [`sync_sleep_flags`]' walk over the connections.
#[inline(never)]
fn sync_sleep_flags_walk(r: &doca_rdma, on: bool) {
    let recv_posted = !r.recvs.borrow().is_empty();
    let mut i = 0;
    while let Some(c) = r.current(i) {
        i += 1;
        if c.state() != ConnState::Connected {
            continue;
        }
        if let Some(rx) = c.rx.borrow().as_ref() {
            set_sleeping(r, rx, on && (recv_posted || c.incoming.borrow().is_some()));
        }
    }
    if !on {
        // Cleared on every connected ring; a ring that is not connected is never looked at
        // again (its connection cannot become connected), so its flag no longer matters.
        r.sleep_flags_set.set(false);
    }
}

/// Sets a receive ring's `consumer_sleeping`, remembering that one may be set. Every write of
/// the flag to true goes through here, so `sleep_flags_set` false proves them all clear.
fn set_sleeping(r: &doca_rdma, rx: &RxRing, on: bool) {
    if on {
        r.sleep_flags_set.set(true);
    }
    rx.set_sleeping(on);
}

/// Unforced liveness polls read the clock only once per this many calls: a clock read
/// (`clock_gettime`, ~25 ns even through the vDSO) on every submit and every progress was a
/// fifth of the provider's own cost per operation, and a busy loop calls progress millions
/// of times per second, so the interval is still kept to within microseconds. A loop that
/// calls progress rarely (a PE that sleeps) is covered by the look at every arm
/// ([`Liveness::ArmingLook`]).
const LIVENESS_CLOCK_EVERY: u32 = 64;

/// Counts an unforced liveness poll; true for the one in LIVENESS_CLOCK_EVERY that looks.
#[inline]
fn liveness_due(r: &doca_rdma) -> bool {
    let n = r.liveness_calls.get().wrapping_add(1);
    r.liveness_calls.set(n);
    n % LIVENESS_CLOCK_EVERY == 0
}

/// How a liveness poll learns whether a peer process lives.
#[derive(Clone, Copy)]
enum Liveness<'a> {
    /// At most every LIVENESS_INTERVAL, a poll of each peer's pidfd.
    Interval,
    /// Now, from the look the PE's arming sweep has just taken at its set, where every
    /// peer's pidfd is registered: only a pidfd it saw ready (or any, without a PE) costs a
    /// system call.
    ArmingLook(Option<&'a crate::pe::doca_pe>),
}

/// Polls the liveness of every connected remote peer, at most every LIVENESS_INTERVAL.
/// Not inlined, so the submit path keeps its shape; progress inlines the counter instead
/// (see `progress_hook`).
#[inline(never)]
fn poll_liveness(r: &doca_rdma) {
    if !liveness_due(r) {
        return;
    }
    poll_liveness_now(r, Liveness::Interval);
}

/// [`poll_liveness`] past its call counter.
#[inline(never)]
fn poll_liveness_now(r: &doca_rdma, how: Liveness<'_>) {
    let mut i = 0;
    let mut any_remote = false;
    while let Some(c) = r.current(i) {
        any_remote |= c.state() == ConnState::Connected && c.peer().is_some_and(|p| p.remote);
        i += 1;
    }
    if !any_remote {
        return; // in-process peers cannot die separately
    }
    let now = Instant::now();
    if matches!(how, Liveness::Interval) && now.duration_since(r.last_liveness.get()) < LIVENESS_INTERVAL {
        return;
    }
    r.last_liveness.set(now);
    let mut i = 0;
    while let Some(c) = r.current(i) {
        if c.state() == ConnState::Connected {
            match how {
                Liveness::ArmingLook(Some(pe)) => c.alive_in_last_look(pe),
                _ => c.poll_alive(),
            };
        }
        i += 1;
    }
}

/// Submit-time connection checks. First the peer: a peer already known to be gone (closed
/// rings, or a dead process, polled at most every LIVENESS_INTERVAL) refuses the submit with
/// its code; the next progress breaks the connection after draining what the peer had sent.
/// Then the connection's state for the data path ([`doca_rdma::conn_usable`]).
#[inline]
pub(super) fn check_conn_on_submit(r: &doca_rdma, c: &doca_rdma_connection) -> Result<(), doca_error_t> {
    // Read once: the liveness poll and the look at the rings change only `death_seen`.
    let state = c.state();
    if state != ConnState::Connected {
        // The peer is looked at only on a connected connection; conn_usable refuses this one.
        return r.conn_usable(c, state);
    }
    if c.peer().is_some_and(|p| p.remote) {
        poll_liveness(r);
    }
    if let Some(code) = c.peer_gone() {
        return Err(refused(code));
    }
    r.conn_usable(c, state)
}

/// Publishes the producer tail of `c` and rings the peer if it may sleep.
fn publish_tx(c: &doca_rdma_connection) {
    let ring = c.tx.borrow().as_ref().is_some_and(|t| t.publish());
    if ring {
        c.ring_peer();
    }
}

/// Hands a submitted send-side task (decoded and validated by `submit.rs`) to its
/// connection, counting it in flight while it is queued (see the module docs).
///
/// The operation is borrowed, and copied into the queue only when it has to wait there: the
/// fast path (an empty queue, an operation that finishes at once) copies it nowhere, and does
/// not count it in flight either: it would be counted in and out again with nothing reading
/// the count in between.
// Always inlined, with `execute` and the one-sided families, into `submit_op::<T>` (one
// instance per task type): the decoded `Op` is of one known variant there, so each
// instance keeps only its own arm.
#[inline(always)]
pub(super) fn enqueue(r: &doca_rdma, c: &doca_rdma_connection, t: &doca_task, op: &Op) {
    if c.ops_queued() {
        queue(r, c, t, *op);
        return;
    }
    // Fresh: `submit_op` validated the operation just now (see `execute`).
    match execute(c, op, true) {
        Exec::Done(status) => {
            // `finish_send` without its count: this one was never counted (see above).
            crate::task::complete_inlined(t, status);
            // Every pump publishes what it pushed, so with an empty queue there is nothing
            // to publish unless this operation pushed something.
            if op.uses_ring() {
                publish_tx(c);
            }
            if status != DOCA_SUCCESS {
                r.enter_error(DOCA_ERROR_BAD_STATE);
            }
        }
        Exec::Blocked(need) => {
            queue(r, c, t, *op);
            if armed(r) {
                if let Some(tx) = c.tx.borrow().as_ref() {
                    tx.want_space();
                    // Re-check after asking, as `pump_tx` does: the consumer may have made
                    // room between `execute`'s look and the request, seen no request and
                    // rung nobody. Then the armed PE must wake by itself to push the queue
                    // (a submit while armed: a foreign reactor's task, or a C program that
                    // submits between arm and wait), or it sleeps on a send that fits.
                    if tx.free().map_or(true, |free| free >= need) {
                        if let Some(pe) = r.ctx().pe() {
                            pe.notify_work();
                        }
                    }
                }
            }
            publish_tx(c);
        }
        Exec::PeerFault(code) => {
            queue(r, c, t, *op);
            r.peer_lost(c, code);
        }
    }
}

/// Queues a submitted operation behind the others, counted in flight until it completes.
// Out of line, with the operation by value: `enqueue` is inlined into every submit, where
// the decoded operation must not have its address taken (it would live in memory).
#[inline(never)]
fn queue(r: &doca_rdma, c: &doca_rdma_connection, t: &doca_task, op: Op) {
    r.sq_inflight.set(r.sq_inflight.get() + 1);
    c.ops.borrow_mut().push_back(Queued { task: t, op });
}

/// Runs queued operations of `c` in order until one blocks.
fn pump_tx(r: &doca_rdma, c: &doca_rdma_connection) -> Result<bool, Fault> {
    let mut did = false;
    let result = loop {
        let Some(q) = c.ops.borrow().front().copied() else {
            break Ok(did);
        };
        // SAFETY: queued tasks are submitted tasks of this ctx.
        let task = unsafe { &*q.task };
        match execute(c, &q.op, false) {
            Exec::Done(status) => {
                c.ops.borrow_mut().pop_front();
                r.finish_send(task, status);
                did = true;
                if status != DOCA_SUCCESS {
                    break Err(Fault::Task);
                }
            }
            Exec::Blocked(need) => {
                let txb = c.tx.borrow();
                let Some(tx) = txb.as_ref() else {
                    break Err(Fault::Peer(DOCA_ERROR_NOT_CONNECTED));
                };
                if !armed(r) {
                    // A polling PE sees the space by itself; only a sleeping one is rung.
                    break Ok(did);
                }
                tx.want_space();
                match tx.free() {
                    Ok(free) if free >= need => continue,
                    Ok(_) => break Ok(did),
                    Err(_) => break Err(Fault::Peer(DOCA_ERROR_CONNECTION_RESET)),
                }
            }
            Exec::PeerFault(code) => break Err(Fault::Peer(code)),
        }
    };
    publish_tx(c);
    result
}

/// Runs `op` (the head of `c`'s queue) as far as it can go now: one function per operation
/// family below. Only connection-level failures (no peer, no ring) are decided here.
///
/// `fresh`: `tasks::validate` accepted the operation in this very submit and nothing has run
/// since, so its buffers are known to be live, on their side of the wire, writable where
/// written and, for a result, with room for its value: the families skip those checks. A
/// queued operation (`fresh` false) checks them again, as the user may have released or
/// re-used a buffer meanwhile.
#[inline(always)]
fn execute(c: &doca_rdma_connection, op: &Op, fresh: bool) -> Exec {
    let Some(peer) = c.peer() else {
        return Exec::PeerFault(DOCA_ERROR_NOT_CONNECTED);
    };
    // SAFETY: the families below push to the ring and read its cursors; none of them
    // replaces or releases a connection's rings.
    let Some(tx) = (unsafe { c.tx_unguarded() }) else {
        return Exec::PeerFault(DOCA_ERROR_NOT_CONNECTED);
    };
    match *op {
        // SAFETY: `progress` points into the queued task, valid while it is queued (see
        // `op::Queued`); only this thread touches it.
        Op::Send { src, imm, progress } => execute_send(tx, src, imm, unsafe { &*progress }),
        Op::Write { src, dst, imm, progress } => {
            // SAFETY: as for a send.
            execute_write(tx, &peer, src, dst, imm, unsafe { &*progress }, fresh)
        }
        Op::Read { src, dst } => execute_read(&peer, src, dst),
        // By value: a family that is not inlined must not take the operation's address, or
        // the decoded operation of every submit lives in memory instead of in registers.
        Op::CmpSwp { .. } | Op::FetchAdd { .. } => execute_atomic(&peer, *op, fresh),
        Op::RemoteGet { .. } | Op::RemoteSet { .. } | Op::RemoteAdd { .. } => execute_remote_event(&peer, *op),
    }
}

/// A buffer of the operation `execute` runs: checked live, or taken as it is when `fresh`
/// (see `execute`).
#[inline(always)]
fn op_buf<'a>(p: *const crate::buf::doca_buf, fresh: bool) -> Result<&'a crate::buf::doca_buf, doca_error_t> {
    if fresh {
        // SAFETY: `validate` resolved this pointer with `buf_ref` in this very submit (not
        // NULL, a live buffer of this provider), and nothing that could release it has run
        // since.
        Ok(unsafe { &*p })
    } else {
        live_buf(p)
    }
}

/// The value of a `Result`, or the operation is done with its error.
macro_rules! tri {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) => return Exec::Done(e),
        }
    };
}

/// The free bytes of the peer's ring, or the peer is gone (its ring is closed).
macro_rules! free {
    ($tx:expr) => {
        match $tx.free() {
            Ok(f) => f,
            Err(_) => return Exec::PeerFault(DOCA_ERROR_CONNECTION_RESET),
        }
    };
}

/// The imported region behind a remote buffer, checked against the connection: the peer's
/// ctx must allow `perm`, and the memory must belong to the connected peer.
fn remote_of<'b>(b: &'b crate::buf::doca_buf, peer: &Peer, perm: u32) -> Result<&'b RemoteRegion, doca_error_t> {
    if peer.perms & perm == 0 {
        return Err(refused(DOCA_ERROR_NOT_PERMITTED));
    }
    // Borrowed, not cloned: no lock and no reference count per operation.
    let Ok(region) = b.mmap().remote_region_ref() else {
        return Err(refused(DOCA_ERROR_INVALID_VALUE));
    };
    if region.owner_pid() != peer.pid {
        return Err(refused(DOCA_ERROR_NOT_PERMITTED));
    }
    Ok(region)
}

/// send / send_imm: streams the record (header, payload, padding) into the peer's ring as
/// space allows; `progress` counts the record bytes written.
fn execute_send(tx: &TxRing, src: *const crate::buf::doca_buf, imm: Option<doca_be32_t>, progress: &Cell<u64>) -> Exec {
    // A source list is gathered element by element (`push_gathered`); a single buffer is one
    // slice. The buffer is resolved once.
    let buf = if src.is_null() { None } else { Some(tri!(live_buf(src))) };
    let list = buf.filter(|b| !b.is_single());
    let payload: &[u8] = match buf {
        // SAFETY: the payload is registered local memory the caller keeps untouched
        // while the task is in flight (DOCA contract); the slice is dropped before
        // this function returns.
        Some(b) if list.is_none() => tri!(unsafe { b.payload_slice() }),
        _ => &[],
    };
    let n = list.map_or(payload.len(), |l| l.payload_len()) as u64;
    let total = record_len(n);
    let mut w = progress.get();
    let mut free = free!(tx);
    if w == 0 {
        if free < RECORD_HEADER as u64 {
            return Exec::Blocked(RECORD_HEADER as u64);
        }
        let rec = Record {
            kind: if imm.is_some() { RecordKind::SendImm } else { RecordKind::Send },
            payload_len: n as u32,
            report_len: n as u32,
            imm: imm.unwrap_or(0),
        };
        tx.push(&rec.encode());
        w = RECORD_HEADER as u64;
        free -= RECORD_HEADER as u64;
    }
    while w < total {
        if free == 0 {
            progress.set(w);
            return Exec::Blocked(1);
        }
        let off = w - RECORD_HEADER as u64;
        let k = if off < n {
            let k = free.min(n - off);
            match list {
                None => tx.push(&payload[off as usize..(off + k) as usize]),
                Some(l) => tri!(push_gathered(tx, l, off as usize, k as usize)),
            }
            k
        } else {
            let k = free.min(total - w);
            tx.skip(k);
            k
        };
        w += k;
        free -= k;
    }
    progress.set(w);
    Exec::Done(DOCA_SUCCESS)
}

/// Pushes bytes `[skip, skip + n)` of a source list's payloads into the ring.
fn push_gathered(tx: &TxRing, list: &crate::buf::doca_buf, skip: usize, n: usize) -> Result<(), doca_error_t> {
    let (mut skip, mut left) = (skip, n);
    for (b, _, len) in list.payload_spans() {
        if left == 0 {
            break;
        }
        if skip >= len {
            skip -= len;
            continue;
        }
        let take = (len - skip).min(left);
        // SAFETY: as for the payload in `execute_send`; the element was checked local at
        // submit and is checked again here.
        let payload = unsafe { b.payload_slice() }?;
        tx.push(&payload[skip..skip + take]);
        skip = 0;
        left -= take;
    }
    Ok(())
}

/// A write's source list: its payloads one after the other into the one remote range
/// (from `off`), whose room the caller checked.
#[cold]
#[inline(never)]
fn write_gathered(region: &RemoteRegion, off: usize, list: &crate::buf::doca_buf) -> Result<(), doca_error_t> {
    let mut done = 0;
    for (b, _, _) in list.payload_spans() {
        // SAFETY: as for the payload in `execute_send`.
        let payload = unsafe { b.payload_slice() }?;
        region.write(off + done, payload)?;
        done += payload.len();
    }
    Ok(())
}

/// write / write_imm: the one-sided write (once), then for write_imm its notification record
/// when the peer's ring has room (`progress`: 0 before the write, 1 written, 2 notified).
#[inline(always)]
fn execute_write(
    tx: &TxRing,
    peer: &Peer,
    src: *const crate::buf::doca_buf,
    dst: *mut crate::buf::doca_buf,
    imm: Option<doca_be32_t>,
    progress: &Cell<u64>,
    fresh: bool,
) -> Exec {
    // A NULL source writes no data (DOCA); a write with immediate still sends its immediate.
    let s = if src.is_null() { None } else { Some(tri!(op_buf(src, fresh))) };
    let n = s.map_or(0, crate::buf::doca_buf::payload_len);
    if progress.get() == 0 {
        if let Some(s) = s {
            let d = tri!(op_buf(dst, fresh));
            let region = tri!(remote_of(d, peer, DOCA_ACCESS_FLAG_RDMA_WRITE));
            let (taddr, room) = d.tail_space();
            if n > room {
                return Exec::Done(refused(DOCA_ERROR_INVALID_VALUE));
            }
            let off = tri!(region.offset_of(taddr as u64, n));
            if s.is_single() {
                let payload = if fresh {
                    // SAFETY: as for the payload in `execute_send`; `validate` found the
                    // source over local memory in this submit (see `execute`).
                    unsafe { s.local_payload() }
                } else {
                    // SAFETY: as for the payload in `execute_send`.
                    tri!(unsafe { s.payload_slice() })
                };
                tri!(region.write(off, payload));
            } else {
                tri!(write_gathered(region, off, s));
            }
            // `n` fits the room checked above, which writing the peer's memory did not change.
            d.appended(n);
        }
        if imm.is_none() {
            return Exec::Done(DOCA_SUCCESS);
        }
        progress.set(1);
    }
    if free!(tx) < RECORD_HEADER as u64 {
        return Exec::Blocked(RECORD_HEADER as u64);
    }
    let rec = Record { kind: RecordKind::WriteImm, payload_len: 0, report_len: n as u32, imm: imm.unwrap_or(0) };
    tx.push(&rec.encode());
    progress.set(2);
    Exec::Done(DOCA_SUCCESS)
}

/// read: appends the remote source's data (its data section) to the local destination.
#[inline(always)]
fn execute_read(peer: &Peer, src: *const crate::buf::doca_buf, dst: *mut crate::buf::doca_buf) -> Exec {
    if src.is_null() {
        // Reads no data (DOCA).
        return Exec::Done(DOCA_SUCCESS);
    }
    let s = tri!(live_buf(src));
    let region = tri!(remote_of(s, peer, DOCA_ACCESS_FLAG_RDMA_READ));
    let d = tri!(live_buf(dst));
    // The source's data, appended after the destination's (DOCA's read; `validate` checked
    // the room at submit, `append_with` checks it again for a task queued since).
    let (at, n) = s.data();
    let off = tri!(region.offset_of(at as u64, n));
    if d.is_single() {
        // SAFETY: the destination is registered local memory the caller does not touch
        // while the task is in flight (DOCA contract), so the &mut is exclusive.
        tri!(unsafe { d.append_with(n, |buf| region.read(off, buf)) });
        return Exec::Done(DOCA_SUCCESS);
    }
    Exec::Done(match read_scattered(region, off, n, d) {
        Ok(()) => DOCA_SUCCESS,
        Err(e) => e,
    })
}

/// A read into a destination list: `n` bytes of the remote range from `off` into the room
/// after each element's payload, in order; each element's data_len grows by its share.
#[cold]
#[inline(never)]
fn read_scattered(
    region: &RemoteRegion,
    off: usize,
    n: usize,
    list: &crate::buf::doca_buf,
) -> Result<(), doca_error_t> {
    if list.room_len() < n {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    let mut done = 0;
    for (b, at, len) in list.room_spans(0, n) {
        b.check_local(true)?;
        // SAFETY: room of a local element with LOCAL_READ_WRITE (checked just above) inside
        // its buffer, which the caller does not touch while the task is in flight.
        region.read(off + done, unsafe { std::slice::from_raw_parts_mut(at as *mut u8, len) })?;
        done += len;
    }
    list.appended_to_list(n);
    Ok(())
}

/// The two atomics on the peer's memory; the previous value goes to the result buffer.
#[inline(always)]
fn execute_atomic(peer: &Peer, op: Op, fresh: bool) -> Exec {
    let (Op::CmpSwp { dst, result, .. } | Op::FetchAdd { dst, result, .. }) = op else {
        return Exec::Done(DOCA_ERROR_UNEXPECTED);
    };
    let d = tri!(op_buf(dst, fresh));
    let region = tri!(remote_of(d, peer, DOCA_ACCESS_FLAG_RDMA_ATOMIC));
    let off = tri!(region.offset_of(d.data().0 as u64, 8));
    let res = tri!(op_buf(result, fresh));
    // A fresh operation's result buffer has the room: `validate` checked it.
    if !fresh && res.tail_space().1 < 8 {
        return Exec::Done(DOCA_ERROR_INVALID_VALUE);
    }
    let old = tri!(match op {
        Op::CmpSwp { cmp, swap, .. } => region.atomic_cas(off, cmp, swap),
        Op::FetchAdd { add, .. } => region.atomic_fetch_add(off, add),
        _ => Err(DOCA_ERROR_UNEXPECTED),
    });
    // The local-memory checks of the result come after the atomic, as they always did (a
    // queued operation whose result buffer was re-used over other memory fails here); a
    // fresh one passed them in `validate`.
    if !fresh {
        tri!(res.check_local(true));
    }
    // SAFETY: local memory with LOCAL_READ_WRITE (checked just above, or by `validate` in
    // this submit) and room for 8 bytes (checked above, or by `validate`), which the atomic
    // on the peer's memory did not change.
    unsafe { res.append_u64_checked(old) };
    Exec::Done(DOCA_SUCCESS)
}

/// The three remote-net sync event operations (`remote.rs`).
fn execute_remote_event(peer: &Peer, op: Op) -> Exec {
    let (Op::RemoteGet { event, .. } | Op::RemoteSet { event, .. } | Op::RemoteAdd { event, .. }) = op else {
        return Exec::Done(DOCA_ERROR_UNEXPECTED);
    };
    let ev = tri!(event_of(event));
    // The event must be the connected peer's (an RDMA NIC would hold no key for any
    // other); in-process peers share our pid.
    if ev.owner_pid() != peer.pid {
        return Exec::Done(DOCA_ERROR_NOT_PERMITTED);
    }
    match op {
        Op::RemoteGet { dst, .. } => {
            let d = tri!(live_buf(dst));
            tri!(d.append_u64(ev.get()));
        }
        Op::RemoteSet { src, .. } => {
            let s = tri!(live_buf(src));
            // SAFETY: as for the payload in `execute_send`.
            let bytes = tri!(unsafe { s.payload_slice() });
            let Some(v) = bytes.get(..8).and_then(|b| <[u8; 8]>::try_from(b).ok()) else {
                return Exec::Done(DOCA_ERROR_INVALID_VALUE);
            };
            ev.set(u64::from_ne_bytes(v));
        }
        Op::RemoteAdd { result, add, .. } => {
            let res = tri!(live_buf(result));
            if res.tail_space().1 < 8 {
                return Exec::Done(DOCA_ERROR_INVALID_VALUE);
            }
            let old = ev.add(add);
            tri!(res.append_u64(old));
        }
        _ => return Exec::Done(DOCA_ERROR_UNEXPECTED),
    }
    Exec::Done(DOCA_SUCCESS)
}

/// The peer of `c` is gone: fail its send side, keep its ring for draining.
fn start_draining(r: &doca_rdma, c: &doca_rdma_connection, code: doca_error_t) {
    c.start_draining(code);
    let ops: Vec<_> = c.ops.borrow_mut().drain(..).collect();
    for q in ops {
        // SAFETY: queued tasks are submitted tasks of this ctx.
        r.finish(unsafe { &*q.task }, code);
    }
}

/// Whether `c`'s ring holds a complete record (one whose sender completed it) that a receive
/// could still take, or complete the receive it is filling.
fn holds_complete_record(c: &doca_rdma_connection) -> bool {
    let rxb = c.rx.borrow();
    let Some(rx) = rxb.as_ref() else {
        return false;
    };
    let Ok(avail) = rx.available() else {
        return false;
    };
    if let Some(inc) = *c.incoming.borrow() {
        let rest = inc.record.ring_len() - RECORD_HEADER as u64 - u64::from(inc.copied);
        return avail >= rest;
    }
    if avail < RECORD_HEADER as u64 {
        return false;
    }
    Record::decode(&rx.peek_header(), MAX_MESSAGE_BYTES as u32).is_ok_and(|rec| avail >= rec.ring_len())
}

/// The first draining connection whose loss can be reported now (nothing deliverable is left
/// in any ring; see "Completed means delivered"), with its code. Without a draining
/// connection (the normal case) this costs one look at each connection's flag.
fn loss_to_report(r: &doca_rdma) -> Option<(&doca_rdma_connection, doca_error_t)> {
    let mut ctx_wide = None;
    let mut i = 0;
    while let Some(c) = r.current(i) {
        i += 1;
        if c.state() != ConnState::Connected {
            continue;
        }
        let Some(code) = c.draining.get() else { continue };
        if c.cm.managed() {
            // A connection made by address ends alone (the ctx goes on): only its own ring counts.
            if !holds_complete_record(c) {
                return Some((c, code));
            }
        } else if ctx_wide.is_none() {
            ctx_wide = Some((c, code));
        }
    }
    ctx_wide?;
    // The error state breaks every connection: report it only once no ring holds a complete
    // record a receive could still take.
    let mut i = 0;
    while let Some(c) = r.current(i) {
        i += 1;
        if c.state() == ConnState::Connected && holds_complete_record(c) {
            return None;
        }
    }
    ctx_wide
}

/// Consumes `c`'s receive ring into posted receives, in order.
fn pump_rx(r: &doca_rdma, c: &doca_rdma_connection) -> Result<bool, Fault> {
    let rxb = c.rx.borrow();
    let Some(rx) = rxb.as_ref() else {
        return Ok(false);
    };
    let mut did = false;
    let result = loop {
        let avail = match rx.available() {
            Ok(a) => a,
            Err(_) => break Err(Fault::Peer(DOCA_ERROR_CONNECTION_RESET)),
        };
        let cur = *c.incoming.borrow();
        let Some(mut inc) = cur else {
            if avail < RECORD_HEADER as u64 || r.recvs.borrow().is_empty() {
                break Ok(did);
            }
            let rec = match Record::decode(&rx.peek_header(), MAX_MESSAGE_BYTES as u32) {
                Ok(rec) => rec,
                Err(_) => break Err(Fault::Peer(DOCA_ERROR_CONNECTION_RESET)),
            };
            let Some(t) = r.recvs.borrow_mut().pop_front() else {
                break Ok(did);
            };
            // SAFETY: posted receives are submitted receive tasks of this ctx.
            let task = unsafe { &*t };
            // SAFETY: only receive tasks are posted.
            let recv = unsafe { task.downcast::<doca_rdma_task_receive>() };
            match receive_target(recv.dst.get(), rec.payload_len) {
                Ok(dst) => {
                    rx.skip(RECORD_HEADER as u64);
                    *c.incoming.borrow_mut() = Some(Incoming { task: t, record: rec, dst, copied: 0 });
                    did = true;
                    continue;
                }
                Err(e) => {
                    r.finish(task, e);
                    break Err(Fault::Task);
                }
            }
        };
        let want = inc.record.payload_len - inc.copied;
        if want > 0 {
            let k = avail.min(u64::from(want)) as u32;
            if k == 0 {
                break Ok(did);
            }
            match inc.dst {
                // SAFETY: `[dst, dst + payload_len)` is the free space of the receive's
                // buffer, checked at match time: registered local memory with
                // LOCAL_READ_WRITE, which the user does not touch while the receive is in
                // flight (DOCA contract); the ring is a different mapping. `k <= available`.
                ReceiveTarget::Single(dst) => unsafe {
                    rx.take_into((dst + inc.copied as usize) as *mut u8, k as usize)
                },
                ReceiveTarget::List(list) => {
                    // SAFETY: the receive's destination list, live while the receive is in
                    // flight (DOCA contract); its room was checked at match time.
                    let list = unsafe { &*list };
                    for (_, at, n) in list.room_spans(inc.copied as usize, k as usize) {
                        // SAFETY: as for a single destination: each span is room of an
                        // element checked at submit (local, LOCAL_READ_WRITE); the spans
                        // together are `k <= available` bytes.
                        unsafe { rx.take_into(at as *mut u8, n) };
                    }
                }
            }
            inc.copied += k;
            *c.incoming.borrow_mut() = Some(inc);
            did = true;
            if inc.copied < inc.record.payload_len {
                break Ok(did);
            }
            continue;
        }
        let pad = inc.record.ring_len() - RECORD_HEADER as u64 - u64::from(inc.record.payload_len);
        if avail < pad {
            break Ok(did);
        }
        rx.skip(pad);
        c.incoming.borrow_mut().take();
        did = true;
        if let Err(e) = complete_receive(r, c, &inc) {
            // SAFETY: the incoming receive is a submitted task of this ctx.
            r.finish(unsafe { &*inc.task }, e);
            break Err(Fault::Task);
        }
    };
    if rx.publish() {
        c.ring_peer();
    }
    result
}

/// Fills the results of a fully received message and completes its receive.
fn complete_receive(r: &doca_rdma, c: &doca_rdma_connection, inc: &Incoming) -> Result<(), doca_error_t> {
    // SAFETY: the incoming receive is a submitted receive task of this ctx.
    let task = unsafe { &*inc.task };
    // SAFETY: only receive tasks are matched.
    let recv = unsafe { task.downcast::<doca_rdma_task_receive>() };
    if inc.record.payload_len > 0 {
        let n = inc.record.payload_len as usize;
        match inc.dst {
            ReceiveTarget::Single(_) => live_buf(recv.dst.get())?.grow_data_len(n)?,
            ReceiveTarget::List(_) => live_buf(recv.dst.get())?.appended_to_list(n),
        }
    }
    let (opcode, imm) = match inc.record.kind {
        RecordKind::Send => (DOCA_RDMA_OPCODE_RECV_SEND, 0),
        RecordKind::SendImm => (DOCA_RDMA_OPCODE_RECV_SEND_WITH_IMM, inc.record.imm),
        RecordKind::WriteImm => (DOCA_RDMA_OPCODE_RECV_WRITE_WITH_IMM, inc.record.imm),
    };
    recv.res_opcode.set(opcode);
    recv.res_len.set(inc.record.report_len);
    recv.res_imm.set(imm);
    recv.res_conn.set(c);
    r.finish(task, DOCA_SUCCESS);
    Ok(())
}

/// The ctx progress hook.
///
/// # Safety
/// Called only through `RDMA_CTX_OPS`, with the ctx of a live `doca_rdma`.
pub(super) unsafe fn progress_hook(ctx: &doca_ctx) -> bool {
    // SAFETY: ops contract (called with an RDMA ctx).
    let r = unsafe { rdma_of(ctx) };
    if ctx.state() != DOCA_CTX_STATE_RUNNING || r.error.get().is_some() {
        return false; // neither part has anything to do
    }
    if super::cm::busy(r) {
        return progress_with_cm(ctx, r);
    }
    // `cm::progress` would do nothing: the data path alone, as `data_progress` runs it. The
    // liveness counter inline (it is all that most progress calls pay for liveness), and
    // the walk, whose idle part calls nothing, so that the idle hook needs almost no frame.
    if liveness_due(r) {
        return polled_data_walk(r);
    }
    data_walk(r)
}

/// The progress hook with connection management to do.
#[inline(never)]
fn progress_with_cm(ctx: &doca_ctx, r: &doca_rdma) -> bool {
    // Connection management first, so that a connection's established event is queued
    // before the completions of data received on it (the PE delivers both in queue order).
    // Neither part runs user code: CM callbacks travel as event tasks (`cm.rs`).
    let cm = super::cm::progress(r);
    data_progress(ctx, r) | cm
}

/// The data path part of the progress hook: a liveness poll when one is due, then
/// [`data_walk`].
#[inline]
fn data_progress(ctx: &doca_ctx, r: &doca_rdma) -> bool {
    if ctx.state() != DOCA_CTX_STATE_RUNNING || r.error.get().is_some() {
        return false;
    }
    if liveness_due(r) {
        return polled_data_walk(r);
    }
    data_walk(r)
}

/// [`data_walk`] after a liveness poll (its counter said one is due).
#[inline(never)]
fn polled_data_walk(r: &doca_rdma) -> bool {
    poll_liveness_now(r, Liveness::Interval);
    data_walk(r)
}

/// One walk over the connections, in which a connection with nothing to do costs one look
/// at its flags and cursors (`conn_quiet`) instead of its pumps (`conn_progress`). The walk
/// up to the first connection with something to do (all of it, in an idle progress) is
/// `first_busy`, which calls nothing; the rest is `data_progress_from`, out of line.
#[inline(always)]
fn data_walk(r: &doca_rdma) -> bool {
    match first_busy(r) {
        Some(i) => data_progress_from(r, i),
        None => {
            sync_sleep_flags(r);
            false
        }
    }
}

/// The index (as for [`doca_rdma::current`]) of the first connected connection that is not
/// quiet (`conn_quiet`), if any: the idle part of [`data_walk`], reading the list once and
/// changing nothing. Always inlined, as `conn_quiet`: the idle progress then makes no call
/// of its own.
#[inline(always)]
fn first_busy(r: &doca_rdma) -> Option<usize> {
    let min = rx_quiet_min(r);
    // The list is read without a borrow guard, as the rings in `conn_quiet`: it only grows
    // under `borrow_mut` (a connection made), and nothing here can get there. A list
    // borrowed mutably now (it never is while progress runs) is left to
    // `data_progress_from`, whose borrow reports it.
    // SAFETY: the reference lives until this function returns, and it takes no
    // `borrow_mut` of the list meanwhile (it calls nothing that could).
    let Ok(conns) = (unsafe { r.conns.try_borrow_unguarded() }) else {
        return Some(0);
    };
    // The current connections, as `doca_rdma::current` indexes them, in a plain loop
    // (`Iterator::position` was left out of line).
    let first = r.first_current.get();
    let mut i = first;
    while let Some(c) = conns.get(i) {
        if c.state() == ConnState::Connected && !conn_quiet(c, min) {
            return Some(i - first);
        }
        i += 1;
    }
    None
}

/// [`data_walk`] from connection `i` on (the first that is not quiet), then the
/// report of a loss and the sleep flags.
#[inline(never)]
fn data_progress_from(r: &doca_rdma, mut i: usize) -> bool {
    let mut did = false;
    let mut draining = false;
    // Read once for the quiet connections, which change no receive; again after a
    // connection's turn, which may have taken or given back receives.
    let mut min = rx_quiet_min(r);
    while let Some(c) = r.current(i) {
        i += 1;
        if c.state() != ConnState::Connected || conn_quiet(c, min) {
            continue;
        }
        match conn_progress(r, c) {
            Some(turn) => {
                did |= turn.did;
                draining |= turn.draining;
            }
            None => return true,
        }
        min = rx_quiet_min(r);
    }
    // Only a draining connection has a loss to report.
    if draining {
        if let Some((c, code)) = loss_to_report(r) {
            r.peer_lost(c, code);
            return true;
        }
    }
    sync_sleep_flags(r);
    did
}

/// What a connection's turn in [`data_walk`] did.
struct ConnTurn {
    /// Anything (a receive matched or filled, an operation run, the draining started).
    did: bool,
    /// The connection is draining (its loss may be reported after the walk).
    draining: bool,
}

/// Whether `conn_progress(r, c)` would do nothing now, `c` being connected: its peer is not
/// seen gone and it is not draining, and both pumps would do nothing (`rx_quiet`,
/// `tx_quiet`). `min` is `rx_quiet_min(r)`. Shared memory is read as `conn_progress` reads
/// it: the peer's closed flags (`peer_gone`) before the receive ring's tail. A ring that is
/// missing is left to `conn_progress`. Always inlined: in `first_busy`, the idle walk, it
/// keeps that walk free of calls.
#[inline(always)]
fn conn_quiet(c: &doca_rdma_connection, min: u64) -> bool {
    if c.draining.get().is_some() || c.death_seen.get() || !c.ops.borrow().is_empty() {
        return false;
    }
    // The rings are read without a borrow guard (which costs a store and a decrement each):
    // a ring is only replaced or released under `borrow_mut` (connect, break, release), and
    // nothing here can get there: this function only reads. A ring borrowed mutably now (it
    // never is while progress runs) is left to `conn_progress`.
    // SAFETY: the references live until this function returns, and it takes no `borrow_mut`
    // of either ring meanwhile (it calls nothing that could).
    let (Ok(Some(rx)), Ok(Some(tx))) = (unsafe { c.rx.try_borrow_unguarded() }, unsafe { c.tx.try_borrow_unguarded() })
    else {
        return false;
    };
    let min = if c.incoming.borrow().is_some() { 1 } else { min };
    !tx.unpublished() && !rx.producer_closed() && !tx.consumer_closed() && rx.quiet(min)
}

/// A connected connection's turn in [`data_walk`]: the peer's liveness, the receive
/// pump, the draining, the send pump. `None` when the connection broke or a task failed
/// (the fault is applied: the progress did something, and the walk ends).
#[inline(never)]
fn conn_progress(r: &doca_rdma, c: &doca_rdma_connection) -> Option<ConnTurn> {
    let mut did = false;
    // Observed before the ring is read, so everything the peer published before it
    // closed is seen.
    let gone = if c.draining.get().is_some() { None } else { c.peer_gone() };
    if !rx_quiet(r, c) {
        match pump_rx(r, c) {
            Ok(d) => did |= d,
            Err(f) => {
                apply(r, c, f);
                return None;
            }
        }
    }
    if let Some(code) = gone {
        start_draining(r, c, code);
        did = true;
    }
    if c.draining.get().is_some() {
        // After this connection's pump: what is left of a partial record never comes.
        did |= drop_partial_record(r, c);
        return Some(ConnTurn { did, draining: true });
    }
    if !tx_quiet(c) {
        match pump_tx(r, c) {
            Ok(d) => did |= d,
            Err(f) => {
                apply(r, c, f);
                return None;
            }
        }
    }
    Some(ConnTurn { did, draining: false })
}

/// The fewest bytes waiting in a receive ring that `pump_rx` could take when no receive is
/// half-filled from it: a record header with a receive posted, and otherwise none
/// (`u64::MAX`, which `RxRing::quiet` takes as its capacity + 1: no cursor is that far
/// ahead, though a corrupt one is still caught).
#[inline]
fn rx_quiet_min(r: &doca_rdma) -> u64 {
    if r.recvs.borrow().is_empty() {
        u64::MAX
    } else {
        RECORD_HEADER as u64
    }
}

/// Whether `pump_rx(r, c)` would do nothing now: no receive ring; or nothing to publish and
/// fewer bytes waiting than could be taken (one for a half-filled receive, and otherwise
/// `rx_quiet_min`). The same cursor and the same thresholds as `pump_rx`, read once.
#[inline]
fn rx_quiet(r: &doca_rdma, c: &doca_rdma_connection) -> bool {
    let rxb = c.rx.borrow();
    let Some(rx) = rxb.as_ref() else {
        return true;
    };
    let min = if c.incoming.borrow().is_some() { 1 } else { rx_quiet_min(r) };
    rx.quiet(min)
}

/// Whether `pump_tx(c)` would do nothing now: no queued operation and no unpublished tail.
#[inline]
fn tx_quiet(c: &doca_rdma_connection) -> bool {
    c.ops.borrow().is_empty() && !c.tx.borrow().as_ref().is_some_and(|t| t.unpublished())
}

/// A draining connection's peer is gone, so a record it had only partly published when it
/// went never completes (it never completed on the sender's side either): the receive that
/// was filling it goes back to the head of the posted receives (it was the oldest), and the
/// published part of the record is skipped (nothing follows it: the peer writes no more).
/// Without this, that receive waited forever, and so did every complete record of the other
/// connections once no other receive was posted, and the loss was never reported (a hang
/// found by `tests/chaos.rs`: a peer killed mid-message, one receive posted). Returns whether
/// it did anything.
fn drop_partial_record(r: &doca_rdma, c: &doca_rdma_connection) -> bool {
    if c.draining.get().is_none() {
        return false;
    }
    let rxb = c.rx.borrow();
    let Some(rx) = rxb.as_ref() else {
        return false;
    };
    let Some(inc) = *c.incoming.borrow() else {
        return false;
    };
    let Ok(avail) = rx.available() else {
        return false;
    };
    let rest = inc.record.ring_len() - RECORD_HEADER as u64 - u64::from(inc.copied);
    if avail >= rest {
        return false; // complete: pump_rx delivers it
    }
    c.incoming.borrow_mut().take();
    rx.skip(avail);
    // SAFETY: the incoming receive is a submitted receive task of this ctx, not completed.
    repost_receive(r, unsafe { &*inc.task });
    true
}

/// The ctx has-work hook (asked when the PE is armed): announces sleep on every receive
/// ring, then answers from the real state.
///
/// # Safety
/// As [`progress_hook`].
pub(super) unsafe fn has_work_hook(ctx: &doca_ctx) -> bool {
    // SAFETY: ops contract (called with an RDMA ctx).
    let r = unsafe { rdma_of(ctx) };
    if ctx.state() != DOCA_CTX_STATE_RUNNING || r.error.get().is_some() {
        return false;
    }
    // Before the PE sleeps, every remote peer must be known alive: a dead one rings no
    // doorbell.
    poll_liveness_now(r, Liveness::ArmingLook(ctx.pe()));
    let recv_posted = !r.recvs.borrow().is_empty();
    // A loss waiting only for deliveries that are done now is reported by the next progress.
    let mut work = loss_to_report(r).is_some() || super::cm::has_work(r);
    let mut i = 0;
    while let Some(c) = r.current(i) {
        i += 1;
        if c.state() != ConnState::Connected {
            continue;
        }
        if c.draining.get().is_none() && c.peer_gone().is_some() {
            work = true;
            continue;
        }
        if let Some(rx) = c.rx.borrow().as_ref() {
            // Only a record that a posted (or half-filled) receive can take is worth a
            // wake-up; without one, new records just wait in the ring.
            let busy = c.incoming.borrow().is_some();
            set_sleeping(r, rx, armed(r) && (busy || recv_posted));
            match rx.available() {
                Ok(avail) => {
                    if (busy && avail > 0) || (!busy && recv_posted && avail >= RECORD_HEADER as u64) {
                        work = true;
                    }
                }
                Err(_) => work = true,
            }
        }
        if c.draining.get().is_some() {
            continue; // the send side is failed; only the ring's records matter
        }
        if let Some(&head) = c.ops.borrow().front() {
            if let Some(tx) = c.tx.borrow().as_ref() {
                tx.want_space();
                let need = blocked_need(head.op);
                match tx.free() {
                    Ok(free) if free >= need => work = true,
                    Ok(_) => {}
                    Err(_) => work = true,
                }
            }
        }
    }
    work
}

/// Posts a submitted receive (validated by `submit.rs`) behind the others.
pub(super) fn post_receive(r: &doca_rdma, t: &doca_task) {
    let was_empty = r.recvs.borrow().is_empty();
    r.recvs.borrow_mut().push_back(t);
    if was_empty {
        receive_posted(r);
    }
}

/// The first receive was posted: if a record was already waiting (its producer did not ring
/// us: no receive could take it), tell an armed PE that progress has work now.
fn receive_posted(r: &doca_rdma) {
    sync_sleep_flags(r);
    let mut i = 0;
    while let Some(c) = r.current(i) {
        i += 1;
        if c.state() != ConnState::Connected || c.incoming.borrow().is_some() {
            continue;
        }
        let waiting = c.rx.borrow().as_ref().and_then(|rx| rx.available().ok()).unwrap_or(0);
        if waiting >= RECORD_HEADER as u64 {
            if let Some(pe) = r.ctx().pe() {
                pe.notify_work();
            }
            return;
        }
    }
}

/// How many free ring bytes the (blocked) head operation needs to go on.
fn blocked_need(op: Op) -> u64 {
    match op {
        // SAFETY: `progress` points into the queued head task (see `op::Queued`).
        Op::Send { progress, .. } if unsafe { &*progress }.get() > 0 => 1,
        _ => RECORD_HEADER as u64,
    }
}

/// Puts back a receive that had been matched with a record that will never complete, at the
/// head of the posted receives (see [`drop_partial_record`]).
fn repost_receive(r: &doca_rdma, t: &doca_task) {
    // SAFETY: only receive tasks are matched with records.
    reset_receive(unsafe { t.downcast::<doca_rdma_task_receive>() });
    r.recvs.borrow_mut().push_front(t);
}
