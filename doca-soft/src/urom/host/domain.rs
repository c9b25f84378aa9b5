//! `doca_urom_domain`: a group of workers of one parallel application.
//!
//! * Configuration only while IDLE (`BAD_STATE` otherwise): `set_oob` copies the user's OOB
//!   collective (callbacks non-NULL, `oob_index < n_oob_indexes`), `set_workers` copies the
//!   domain ids and the pointers of this process's workers (`domain_worker_ids[i]` is the
//!   member id of `workers[i]`), `set_buffers_count` announces how many `add_buffer` calls follow
//!   (it drops buffers added before); `add_buffer` copies the memory handle and key bytes (more
//!   buffers than announced: `INVALID_VALUE`).
//! * Start checks the configuration is complete and every local worker RUNNING (`BAD_STATE`),
//!   describes the local members (worker id, the plugins' addresses, the buffers) and starts the
//!   `OobExchange`: round 1 gathers every process's description length (8 bytes, LE), round 2
//!   the descriptions padded to the longest. It returns `IN_PROGRESS`; progress drives the
//!   exchange with `req_test` (the PE keeps polling meanwhile: an OOB request has no fd), then
//!   sends `DomainCreate` (every member of every process) to each local worker and waits for
//!   their `Notify { plugin: 0 }`. All successful: RUNNING. Any failure (a callback's error, a
//!   malformed description, a worker's refusal or broken connection): the start fails
//!   (STARTING → IDLE), workers that accepted get `DomainDestroy`.
//! * Stop sends `DomainDestroy` to the workers that got `DomainCreate` (without waiting) and is
//!   IDLE at once (a domain has no tasks).
//! * The OOB callbacks are user code: they are called only while no `RefCell` of the domain is
//!   borrowed (the exchange is taken out of the domain around each call), so they may call back
//!   into the API. A request still outstanding when the domain stops is tested once more; if it
//!   has not finished, its buffers are leaked on purpose (the user's collective may still write
//!   them) with a diagnostic.

use core::cell::{Cell, RefCell};
use core::ffi::c_void;
use core::ptr;
use std::rc::Rc;

use super::wire::{self, Member, Seg};
use super::worker::{doca_urom_worker, worker_ref, DomainReply};
use crate::ctx::{self, doca_ctx, CtxOps, StartMode};
use crate::ffi::{guard, guard_err, out};
use crate::types::*;

/// `"UROD"`: marks a live domain.
const DOMAIN_MAGIC: u32 = 0x5552_4f44;

/// Longest description accepted from one process in the exchange.
pub const MAX_DESCRIPTION_BYTES: u64 = 64 << 20;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Round {
    Lengths,
    Descriptions,
    Finished,
}

/// What [`OobExchange::poll`] found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Poll {
    /// The current request is still running.
    Pending,
    /// Every process's description, in OOB index order.
    Done(Vec<Vec<u8>>),
    /// A callback failed (its status) or a length was unusable (`INVALID_VALUE`).
    Failed(doca_error_t),
}

/// The two-round allgather of the processes' descriptions through the user's OOB callbacks.
/// The send and receive buffers are heap allocations that stay put while a request runs.
pub(crate) struct OobExchange {
    oob: doca_urom_domain_oob_coll,
    round: Round,
    local: Vec<u8>,
    sbuf: Box<[u8]>,
    rbuf: Box<[u8]>,
    req: *mut c_void,
    lens: Vec<u64>,
}

impl OobExchange {
    /// Starts round 1 (calls `allgather`).
    pub(crate) fn start(oob: doca_urom_domain_oob_coll, local: Vec<u8>) -> Result<OobExchange, doca_error_t> {
        let n = oob.n_oob_indexes as usize;
        let mut x = OobExchange {
            oob,
            round: Round::Lengths,
            sbuf: (local.len() as u64).to_le_bytes().to_vec().into_boxed_slice(),
            rbuf: vec![0u8; 8 * n].into_boxed_slice(),
            local,
            req: ptr::null_mut(),
            lens: Vec::new(),
        };
        x.gather(8)?;
        Ok(x)
    }

    fn gather(&mut self, msglen: usize) -> Result<(), doca_error_t> {
        let f = self.oob.allgather.ok_or(DOCA_ERROR_INVALID_VALUE)?;
        let mut req: *mut c_void = ptr::null_mut();
        // SAFETY: the user's allgather with buffers of `msglen` and `msglen × n` bytes that stay
        // allocated (and unmoved: boxed slices) until the request is tested done or leaked.
        let r = unsafe {
            f(self.sbuf.as_mut_ptr().cast(), self.rbuf.as_mut_ptr().cast(), msglen, self.oob.coll_info, &mut req)
        };
        if r != DOCA_SUCCESS {
            return Err(r);
        }
        self.req = req;
        Ok(())
    }

    /// Tests the running request; moves to the next round when it is done.
    pub(crate) fn poll(&mut self) -> Poll {
        if self.round == Round::Finished {
            return Poll::Failed(DOCA_ERROR_BAD_STATE);
        }
        let (Some(test), Some(free)) = (self.oob.req_test, self.oob.req_free) else {
            return Poll::Failed(DOCA_ERROR_INVALID_VALUE);
        };
        // SAFETY: the user's req_test on the request its allgather returned.
        let r = unsafe { test(self.req) };
        if r == DOCA_ERROR_IN_PROGRESS {
            return Poll::Pending;
        }
        // SAFETY: the request finished (successfully or not); freed once, then forgotten.
        let fr = unsafe { free(self.req) };
        self.req = ptr::null_mut();
        if r != DOCA_SUCCESS || fr != DOCA_SUCCESS {
            self.round = Round::Finished;
            return Poll::Failed(if r != DOCA_SUCCESS { r } else { fr });
        }
        match self.round {
            Round::Lengths => {
                self.lens =
                    self.rbuf.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8]))).collect();
                let max = self.lens.iter().copied().max().unwrap_or(0);
                let me = self.oob.oob_index as usize;
                if max == 0 || max > MAX_DESCRIPTION_BYTES || self.lens.get(me) != Some(&(self.local.len() as u64)) {
                    self.round = Round::Finished;
                    return Poll::Failed(DOCA_ERROR_INVALID_VALUE);
                }
                let max = max as usize;
                let mut s = vec![0u8; max];
                s[..self.local.len()].copy_from_slice(&self.local);
                self.sbuf = s.into_boxed_slice();
                self.rbuf = vec![0u8; max * self.lens.len()].into_boxed_slice();
                self.round = Round::Descriptions;
                match self.gather(max) {
                    Ok(()) => Poll::Pending,
                    Err(e) => {
                        self.round = Round::Finished;
                        Poll::Failed(e)
                    }
                }
            }
            Round::Descriptions => {
                self.round = Round::Finished;
                let max = self.sbuf.len();
                let v = self.rbuf.chunks_exact(max).zip(&self.lens).map(|(c, &l)| c[..l as usize].to_vec()).collect();
                Poll::Done(v)
            }
            Round::Finished => Poll::Failed(DOCA_ERROR_BAD_STATE),
        }
    }

    /// Gives the exchange up (the domain stopped). A request still running is tested once
    /// more; if it is still not finished its buffers are leaked, since the collective may
    /// still write them.
    pub(crate) fn abandon(self) {
        if self.req.is_null() || self.round == Round::Finished {
            return;
        }
        if let (Some(test), Some(free)) = (self.oob.req_test, self.oob.req_free) {
            // SAFETY: the user's callbacks on the request its allgather returned.
            if unsafe { test(self.req) } != DOCA_ERROR_IN_PROGRESS {
                // SAFETY: finished: freed once.
                unsafe { free(self.req) };
                return;
            }
        }
        crate::sdk_log!(WARNING, "urom domain stopped during its OOB exchange; the request's buffers are kept");
        core::mem::forget(self);
    }
}

/// Where the domain is between start and stop.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    Idle,
    Exchanging,
    Creating,
    Running,
}

/// `struct doca_urom_domain`.
pub struct doca_urom_domain {
    ctx: doca_ctx,
    magic: u32,
    oob: Cell<Option<doca_urom_domain_oob_coll>>,
    ids: RefCell<Vec<u64>>,
    workers: RefCell<Vec<*mut doca_urom_worker>>,
    buffers_count: Cell<usize>,
    buffers: RefCell<Vec<Seg>>,
    phase: Cell<Phase>,
    exchange: RefCell<Option<OobExchange>>,
    /// `DomainCreate` answers awaited: (worker, key, reply).
    replies: RefCell<Vec<(*mut doca_urom_worker, u64, Rc<DomainReply>)>>,
    /// Workers that accepted (or may still install) the domain, with the key of their
    /// `DomainCreate`: the worker names its copy by that key, so `DomainDestroy` repeats it.
    created: RefCell<Vec<(*mut doca_urom_worker, u64)>>,
    start_error: Cell<doca_error_t>,
}

static DOMAIN_OPS: CtxOps = CtxOps {
    name: "urom_domain",
    can_connect: None,
    start: domain_start,
    stop: domain_stop,
    stopped: None,
    progress: Some(domain_progress),
    has_work: Some(domain_has_work),
    stop_via_progress: false,
};

/// The domain embedding `ctx`.
///
/// # Safety
/// `ctx` must be the ctx of a `doca_urom_domain`.
unsafe fn domain_of(ctx: &doca_ctx) -> &doca_urom_domain {
    // SAFETY: domains bind themselves as the owner of their ctx in create.
    unsafe { ctx.owner::<doca_urom_domain>() }
}

/// The worker behind a pointer stored by `set_workers`.
///
/// # Safety
/// The worker must still be alive (DOCA's contract: a domain's workers outlive it).
unsafe fn worker<'a>(p: *mut doca_urom_worker) -> Result<&'a doca_urom_worker, doca_error_t> {
    // SAFETY: per the contract; the magic check catches most violations.
    unsafe { worker_ref(p) }.map_err(|_| DOCA_ERROR_BAD_STATE)
}

impl doca_urom_domain {
    /// Withdraws pending replies and sends `DomainDestroy` to workers that accepted.
    fn undo(&self) {
        let replies: Vec<_> = self.replies.borrow_mut().drain(..).collect();
        let mut created: Vec<_> = self.created.borrow_mut().drain(..).collect();
        for (w, key, r) in replies {
            r.detach();
            // SAFETY: set_workers' pointers (workers outlive the domain).
            if let Ok(wk) = unsafe { worker(w) } {
                wk.withdraw_domain(key);
            }
            // Not answered yet (or accepted): the worker handles messages in order, so a
            // `DomainDestroy` after the `DomainCreate` removes what it may still install.
            if matches!(r.status(), None | Some(DOCA_SUCCESS)) {
                created.push((w, key));
            }
        }
        for (w, key) in created {
            // SAFETY: as above.
            if let Ok(w) = unsafe { worker(w) } {
                // Best effort, unanswered: a worker whose connection broke has lost the domain
                // anyway.
                let _ = w.send_domain_destroy(key);
            }
        }
    }

    fn fail(&self, e: doca_error_t) {
        self.start_error.set(e);
        if let Some(x) = self.exchange.borrow_mut().take() {
            x.abandon();
        }
        self.undo();
        self.phase.set(Phase::Idle);
        ctx::mark_start_failed(&self.ctx);
    }

    /// The exchange finished: send `DomainCreate` to every local worker.
    fn create_on_workers(&self, descs: Vec<Vec<u8>>) -> Result<(), doca_error_t> {
        let mut members: Vec<Member> = Vec::new();
        for d in &descs {
            members.extend(wire::decode_members(d).ok_or(DOCA_ERROR_INVALID_VALUE)?);
        }
        let pe = self.ctx.pe().map_or(ptr::null(), |p| p as *const _);
        let workers = self.workers.borrow().clone();
        for w in workers {
            // SAFETY: set_workers' pointers (workers outlive the domain).
            let wk = unsafe { worker(w) }?;
            let reply = DomainReply::new(pe);
            let key = wk.send_domain(|key| wire::domain_create(key, &members), Some(reply.clone()))?;
            self.replies.borrow_mut().push((w, key, reply));
        }
        Ok(())
    }

    /// Checks the `DomainCreate` answers: Some(Ok) when all succeeded, Some(Err) on the first
    /// failure, None while some are missing.
    fn check_replies(&self) -> Option<Result<(), doca_error_t>> {
        let mut replies = self.replies.borrow_mut();
        let mut missing = false;
        let mut i = 0;
        while i < replies.len() {
            match replies[i].2.status() {
                None => {
                    missing = true;
                    i += 1;
                }
                Some(DOCA_SUCCESS) => {
                    let (w, key, _) = replies.remove(i);
                    self.created.borrow_mut().push((w, key));
                }
                Some(e) => return Some(Err(e)),
            }
        }
        if missing {
            None
        } else {
            Some(Ok(()))
        }
    }
}

unsafe fn domain_start(ctx: &doca_ctx) -> Result<StartMode, doca_error_t> {
    // SAFETY: ops contract.
    let d = unsafe { domain_of(ctx) };
    let oob = d.oob.get().ok_or(DOCA_ERROR_BAD_STATE)?;
    let workers = d.workers.borrow().clone();
    if workers.is_empty() || d.buffers.borrow().len() != d.buffers_count.get() {
        return Err(DOCA_ERROR_BAD_STATE);
    }
    let ids = d.ids.borrow().clone();
    let segs = d.buffers.borrow().clone();
    let mut members = Vec::with_capacity(workers.len());
    for (&w, &id) in workers.iter().zip(&ids) {
        // SAFETY: set_workers' pointers (workers outlive the domain).
        let (_, addrs) = unsafe { worker(w) }?.domain_info()?;
        members.push(Member { worker_id: id, addrs, segs: segs.clone() });
    }
    d.start_error.set(DOCA_SUCCESS);
    d.replies.borrow_mut().clear();
    d.created.borrow_mut().clear();
    // User code runs here (allgather): no borrow of the domain is held.
    let x = OobExchange::start(oob, wire::encode_members(&members))?;
    *d.exchange.borrow_mut() = Some(x);
    d.phase.set(Phase::Exchanging);
    Ok(StartMode::Async)
}

unsafe fn domain_stop(ctx: &doca_ctx) {
    // SAFETY: ops contract.
    let d = unsafe { domain_of(ctx) };
    if let Some(x) = d.exchange.borrow_mut().take() {
        x.abandon();
    }
    d.undo();
    d.phase.set(Phase::Idle);
}

unsafe fn domain_progress(ctx: &doca_ctx) -> bool {
    // SAFETY: ops contract.
    let d = unsafe { domain_of(ctx) };
    match d.phase.get() {
        Phase::Exchanging => {
            let Some(mut x) = d.exchange.borrow_mut().take() else { return false };
            // User code runs here (req_test, req_free, allgather): no borrow is held.
            let p = x.poll();
            if ctx.state() != DOCA_CTX_STATE_STARTING || d.phase.get() != Phase::Exchanging {
                // A callback stopped the domain meanwhile.
                x.abandon();
                return true;
            }
            match p {
                Poll::Pending => {
                    *d.exchange.borrow_mut() = Some(x);
                    false
                }
                Poll::Failed(e) => {
                    d.fail(e);
                    true
                }
                Poll::Done(descs) => {
                    d.phase.set(Phase::Creating);
                    if let Err(e) = d.create_on_workers(descs) {
                        d.fail(e);
                    }
                    true
                }
            }
        }
        Phase::Creating => match d.check_replies() {
            None => false,
            Some(Ok(())) => {
                d.phase.set(Phase::Running);
                ctx::mark_started(ctx);
                true
            }
            Some(Err(e)) => {
                d.fail(e);
                true
            }
        },
        Phase::Idle | Phase::Running => false,
    }
}

unsafe fn domain_has_work(ctx: &doca_ctx) -> bool {
    // SAFETY: ops contract.
    let d = unsafe { domain_of(ctx) };
    match d.phase.get() {
        // An OOB request has no descriptor to wait on: keep polling it.
        Phase::Exchanging => true,
        Phase::Creating => d.replies.borrow().iter().any(|(_, _, r)| r.status().is_some()),
        Phase::Idle | Phase::Running => false,
    }
}

/// Validates a domain pointer from C.
///
/// # Safety
/// A non-NULL `p` must point to a domain created by this provider and not destroyed.
unsafe fn domain_ref<'a>(p: *const doca_urom_domain) -> Result<&'a doca_urom_domain, doca_error_t> {
    // SAFETY: per the contract.
    let d = unsafe { crate::ffi::obj(p) }?;
    if d.magic != DOMAIN_MAGIC {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    Ok(d)
}

/// Runs `f` on an IDLE domain; BAD_STATE otherwise.
///
/// # Safety
/// As [`domain_ref`].
unsafe fn configure(
    p: *mut doca_urom_domain,
    f: impl FnOnce(&doca_urom_domain) -> Result<(), doca_error_t>,
) -> Result<(), doca_error_t> {
    // SAFETY: forwarded contract.
    let d = unsafe { domain_ref(p) }?;
    if d.ctx.state() != DOCA_CTX_STATE_IDLE {
        return Err(DOCA_ERROR_BAD_STATE);
    }
    f(d)
}

/// Copies `len` bytes at `p` (NULL allowed only for 0 bytes).
///
/// # Safety
/// A non-NULL `p` must be readable for `len` bytes.
unsafe fn copy_bytes(p: *const c_void, len: usize) -> Result<Vec<u8>, doca_error_t> {
    if len == 0 {
        return Ok(Vec::new());
    }
    if p.is_null() {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-NULL, readable for `len` bytes (contract).
    Ok(unsafe { core::slice::from_raw_parts(p.cast::<u8>(), len) }.to_vec())
}

// ---- entry points ----

#[no_mangle]
pub unsafe extern "C" fn doca_urom_domain_create(domain: *mut *mut doca_urom_domain) -> doca_error_t {
    guard_err(|| {
        if domain.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let raw = Box::into_raw(Box::new(doca_urom_domain {
            ctx: doca_ctx::new(&DOMAIN_OPS),
            magic: DOMAIN_MAGIC,
            oob: Cell::new(None),
            ids: RefCell::new(Vec::new()),
            workers: RefCell::new(Vec::new()),
            buffers_count: Cell::new(0),
            buffers: RefCell::new(Vec::new()),
            phase: Cell::new(Phase::Idle),
            exchange: RefCell::new(None),
            replies: RefCell::new(Vec::new()),
            created: RefCell::new(Vec::new()),
            start_error: Cell::new(DOCA_SUCCESS),
        }));
        // SAFETY: `raw` was just created from a Box; only shared access follows.
        unsafe { (*raw).ctx.bind_owner(raw) };
        // SAFETY: non-NULL out-pointer, writable by the caller's contract.
        unsafe { out(domain, raw) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_urom_domain_destroy(domain: *mut doca_urom_domain) -> doca_error_t {
    guard_err(|| {
        // SAFETY: non-NULL domain pointers come from doca_urom_domain_create (contract).
        let d = unsafe { domain_ref(domain) }?;
        d.ctx.teardown()?;
        // SAFETY: created by Box::into_raw in create; IDLE (no exchange, no reply held) and
        // disconnected from its PE: nothing references the object any more.
        let mut b = unsafe { Box::from_raw(domain) };
        b.magic = 0;
        drop(b);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_urom_domain_as_ctx(domain: *mut doca_urom_domain) -> *mut doca_ctx {
    guard(ptr::null_mut(), || {
        // SAFETY: as in doca_urom_domain_destroy.
        match unsafe { domain_ref(domain) } {
            // SAFETY: `domain` is live; the field address stays valid for its life.
            Ok(_) => unsafe { ptr::addr_of_mut!((*domain).ctx) },
            Err(_) => ptr::null_mut(),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_urom_domain_set_oob(
    domain: *mut doca_urom_domain,
    oob: *mut doca_urom_domain_oob_coll,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: forwarded contract.
        unsafe { domain_ref(domain) }?;
        // SAFETY: a non-NULL `oob` points to the caller's struct (contract); copied here.
        let o = unsafe { oob.as_ref() }.copied().ok_or(DOCA_ERROR_INVALID_VALUE)?;
        if o.allgather.is_none() || o.req_test.is_none() || o.req_free.is_none() || o.oob_index >= o.n_oob_indexes {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        // SAFETY: forwarded contract.
        unsafe {
            configure(domain, |d| {
                d.oob.set(Some(o));
                Ok(())
            })
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_urom_domain_set_workers(
    domain: *mut doca_urom_domain,
    domain_worker_ids: *mut u64,
    workers: *mut *mut doca_urom_worker,
    workers_cnt: usize,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: forwarded contract.
        unsafe { domain_ref(domain) }?;
        if domain_worker_ids.is_null() || workers.is_null() || workers_cnt == 0 {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        // SAFETY: both arrays have `workers_cnt` readable entries (the caller's contract).
        let (ids, ws) = unsafe {
            (
                core::slice::from_raw_parts(domain_worker_ids, workers_cnt).to_vec(),
                core::slice::from_raw_parts(workers, workers_cnt).to_vec(),
            )
        };
        for &w in &ws {
            // SAFETY: non-NULL entries must be workers of this provider (contract).
            unsafe { worker_ref(w) }?;
        }
        // SAFETY: forwarded contract.
        unsafe {
            configure(domain, |d| {
                *d.ids.borrow_mut() = ids;
                *d.workers.borrow_mut() = ws;
                Ok(())
            })
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_urom_domain_set_buffers_count(
    domain: *mut doca_urom_domain,
    buffers_cnt: usize,
) -> doca_error_t {
    // SAFETY: forwarded contract.
    guard_err(|| unsafe {
        configure(domain, |d| {
            d.buffers_count.set(buffers_cnt);
            d.buffers.borrow_mut().clear();
            Ok(())
        })
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_urom_domain_add_buffer(
    domain: *mut doca_urom_domain,
    buffer: *mut c_void,
    buf_len: usize,
    memh: *mut c_void,
    memh_len: usize,
    mkey: *mut c_void,
    mkey_len: usize,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: forwarded contract.
        unsafe { domain_ref(domain) }?;
        if buffer.is_null() || buf_len == 0 {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        // SAFETY: readable for the given lengths (the caller's contract).
        let (memh, mkey) = unsafe { (copy_bytes(memh, memh_len)?, copy_bytes(mkey, mkey_len)?) };
        // SAFETY: forwarded contract.
        unsafe {
            configure(domain, |d| {
                let mut b = d.buffers.borrow_mut();
                if b.len() >= d.buffers_count.get() {
                    return Err(DOCA_ERROR_INVALID_VALUE);
                }
                b.push(Seg { va: buffer as u64, len: buf_len as u64, memh, mkey });
                Ok(())
            })
        }
    })
}

#[cfg(test)]
mod tests;
