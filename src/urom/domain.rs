//! UROM domains: the workers of one parallel application, introduced to each other.

use std::ffi::c_void;
use std::fmt;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::rc::Rc;
use std::time::{Duration, Instant};

use doca_urom_coll::proto as coll_proto;

use super::coll::Offload;
use super::worker::Worker;
use crate::coll::{Element, Kind, ReduceOp, Tuning, TypedBuf};
use crate::error::{check, Error, ErrorKind, Result};
use crate::ext::DocaCtx;
use crate::mem::{Buf, Memory};
use crate::oob::{drive_allgather, Oob, OobRequest};
use crate::sys;

/// Configures and starts a [`Domain`].
///
/// ```no_run
/// # async_doca::Runtime::builder().cpus("0".parse()?).build()?.block_on(async {
/// use async_doca::oob::UnixOob;
/// use async_doca::urom::{Domain, Service, Worker};
/// use async_doca::Access;
/// let dev = async_doca::Device::open_default()?;
/// let svc = Service::connect(&dev).await?;
/// let worker = Worker::builder(&svc).plugin("worker_sandbox").start().await?;
/// let mem = dev.alloc(4096, Access::LOCAL_READ_WRITE | Access::RDMA_READ | Access::RDMA_WRITE)?;
/// // Rank, size and rendezvous socket from ASYNC_DOCA_OOB_{RANK,SIZE,PATH}.
/// let oob = UnixOob::from_env(std::time::Duration::from_secs(30))?;
/// let domain = Domain::builder(oob).worker(&worker).buffer(&mem).start().await?;
/// println!("domain of {} members", domain.size());
/// # Ok::<(), async_doca::Error>(()) })?;
/// # Ok::<(), async_doca::Error>(())
/// ```
#[must_use = "a builder does nothing until .start() is awaited"]
pub struct DomainBuilder {
    oob: Box<dyn Oob>,
    workers: Vec<(Worker, u64)>,
    buffers: Vec<Memory>,
    timeout: Duration,
    tuning: Tuning,
}

/// How long [`DomainBuilder::start`] waits for the other members by default.
pub const DEFAULT_DOMAIN_TIMEOUT: Duration = Duration::from_secs(60);

impl DomainBuilder {
    /// Adds this process's worker to the domain, known to the others by its worker id.
    pub fn worker(mut self, w: &Worker) -> Self {
        let id = w.id();
        self.workers.push((w.clone(), id));
        self
    }

    /// Adds several workers (see [`worker`](DomainBuilder::worker)).
    pub fn workers(mut self, ws: &[Worker]) -> Self {
        for w in ws {
            self = self.worker(w);
        }
        self
    }

    /// Adds this process's worker under an explicit domain id instead of its worker id.
    pub fn worker_as(mut self, w: &Worker, domain_id: u64) -> Self {
        self.workers.push((w.clone(), domain_id));
        self
    }

    /// Registers `mem` with the domain: every member's workers may then read and write it
    /// (as far as its access flags allow). The domain keeps the memory alive.
    pub fn buffer(mut self, mem: &Memory) -> Self {
        self.buffers.push(mem.clone());
        self
    }

    /// The algorithm knobs of the offloaded collectives (default [`Tuning::default`]); must
    /// be the same on every member. Only used when the domain runs collectives (see
    /// [`start`](DomainBuilder::start)).
    pub fn tuning(mut self, tuning: Tuning) -> Self {
        self.tuning = tuning;
        self
    }

    /// How long [`start`](DomainBuilder::start) waits for the other members' out-of-band
    /// contributions (default [`DEFAULT_DOMAIN_TIMEOUT`]); also the bound of
    /// [`Domain::stop`]'s wait for the other members.
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
    }

    /// Starts the domain: runs the out-of-band allgather of every member's worker addresses
    /// and buffer descriptors, hands the result to the local workers, and waits until they
    /// have it. Every member must call this.
    ///
    /// When this member's first worker loaded the `worker_coll` plugin, the domain also runs
    /// collectives ([`Domain::allreduce`] and the others; see [`crate::urom::coll`]): start
    /// then joins that worker to the group of every member's first worker, which must load
    /// it too.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidArgument`] without workers, or with workers of different services;
    /// errors of the out-of-band allgather; [`ErrorKind::BadState`] when the domain did not
    /// come up (a worker refused or died).
    pub async fn start(self) -> Result<Domain> {
        let Some((first, _)) = self.workers.first() else {
            return Err(Error::new(ErrorKind::InvalidArgument, "urom.domain: no workers"));
        };
        let service = first.service().clone();
        let mut ids: Vec<u64> = self.workers.iter().map(|(_, id)| *id).collect();
        let mut raw_workers: Vec<*mut sys::doca_urom_worker> =
            self.workers.iter().map(|(w, _)| w.raw()).collect::<Result<_>>()?;
        // Memory descriptors: the export blob serves as both handle and key on every provider
        // this crate supports (the soft provider imports it; on hardware it carries the mkey).
        let descs: Vec<(Memory, Vec<u8>)> =
            self.buffers.iter().map(|m| Ok((m.clone(), m.export_rdma()?))).collect::<Result<_>>()?;
        let size = self.oob.size();
        let rank = self.oob.rank();
        // Who is who: every member's domain ids, by rank. DOCA's domain exchanges them too but
        // keeps them to itself; the host needs them to address other members' workers (a
        // plugin command naming a destination, a collective's rank order).
        let deadline = Instant::now() + self.timeout;
        let members = exchange_members(&*self.oob, &ids, deadline).await?;
        let oob: Rc<dyn Oob> = Rc::from(self.oob);
        let oob_state = Box::new(OobState { oob: oob.clone() });
        let coll_info = &*oob_state as *const OobState as *mut c_void;

        let mut d = std::ptr::null_mut();
        // SAFETY: valid out-pointer; ownership passes to `DocaCtx` below.
        check(unsafe { sys::doca_urom_domain_create(&mut d) }, "urom.domain: create")?;
        // What the domain object points at (the OOB state, the workers, the memory) must stay
        // alive until it is destroyed, which the executor may do after `Domain` is dropped.
        let keep = (oob_state, self.workers.clone(), descs.clone(), service.clone());
        // SAFETY: `d` is a live, unstarted domain created on this thread that only the DocaCtx
        // destroys; its ctx is IDLE and unconnected.
        let ctx = unsafe {
            DocaCtx::new("urom.domain", d, sys::doca_urom_domain_as_ctx(d), move |d| {
                let rc = sys::doca_urom_domain_destroy(d);
                drop(keep);
                rc
            })
        }?;
        let mut coll = sys::doca_urom_domain_oob_coll {
            allgather: Some(oob_allgather),
            req_test: Some(oob_req_test),
            req_free: Some(oob_req_free),
            coll_info,
            n_oob_indexes: size,
            oob_index: rank,
        };
        // SAFETY: live, IDLE domain of this thread. `coll` is copied by the call; `coll_info`
        // points into the OobState kept alive with the domain. The worker pointers are live
        // workers kept alive with the domain; ids and blobs are copied by the calls; memory
        // stays registered while the domain lives (kept above).
        unsafe {
            check(sys::doca_urom_domain_set_oob(d, &mut coll), "urom.domain: set oob")?;
            check(
                sys::doca_urom_domain_set_workers(d, ids.as_mut_ptr(), raw_workers.as_mut_ptr(), ids.len()),
                "urom.domain: set workers",
            )?;
            check(sys::doca_urom_domain_set_buffers_count(d, descs.len()), "urom.domain: buffers count")?;
            for (mem, blob) in &descs {
                check(
                    sys::doca_urom_domain_add_buffer(
                        d,
                        mem.as_ptr().cast(),
                        mem.len(),
                        blob.as_ptr().cast_mut().cast(),
                        blob.len(),
                        blob.as_ptr().cast_mut().cast(),
                        blob.len(),
                    ),
                    "urom.domain: add buffer",
                )?;
            }
        }
        ctx.start().await.map_err(|e| e.context_prefix("urom.domain: start"))?;
        let coll = match service.plugin(coll_proto::PLUGIN_NAME) {
            Ok(p) if first.plugins() & p.id != 0 => {
                let firsts = members.iter().map(|ids| ids.first().copied().unwrap_or(u64::MAX)).collect();
                let started = Offload::start(first, p.id, rank, firsts, self.buffers.clone(), self.tuning, deadline);
                Some(started.await.map_err(|e| e.context_prefix("urom.domain: start collectives"))?)
            }
            _ => None,
        };
        Ok(Domain {
            ctx,
            workers: self.workers,
            buffers: self.buffers,
            rank,
            size,
            members,
            oob,
            timeout: self.timeout,
            coll,
        })
    }
}

impl fmt::Debug for DomainBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DomainBuilder")
            .field("rank", &self.oob.rank())
            .field("size", &self.oob.size())
            .field("workers", &self.workers)
            .field("buffers", &self.buffers.len())
            .finish()
    }
}

/// A started UROM domain: this process's workers, introduced to the workers of every other
/// member, with every member's registered buffers.
///
/// Plugins on the workers use the domain through their lookup interface (addresses of the
/// other members' workers, their memory segments). Dropping the domain stops it; the workers
/// forget it.
pub struct Domain {
    ctx: DocaCtx<sys::doca_urom_domain>,
    workers: Vec<(Worker, u64)>,
    buffers: Vec<Memory>,
    rank: u32,
    size: u32,
    members: Vec<Vec<u64>>,
    /// Kept for the closing agreement of [`Domain::stop`].
    oob: Rc<dyn Oob>,
    timeout: Duration,
    /// The offloaded collectives, when the first worker loaded `worker_coll`.
    coll: Option<Offload>,
}

impl Domain {
    /// A builder for a domain whose members meet through `oob`.
    pub fn builder(oob: impl Oob) -> DomainBuilder {
        DomainBuilder {
            oob: Box::new(oob),
            workers: Vec::new(),
            buffers: Vec::new(),
            timeout: DEFAULT_DOMAIN_TIMEOUT,
            tuning: Tuning::default(),
        }
    }

    /// This member's index in the out-of-band communicator.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// The number of members.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// This member's workers and their ids in the domain.
    pub fn workers(&self) -> impl Iterator<Item = (&Worker, u64)> {
        self.workers.iter().map(|(w, id)| (w, *id))
    }

    /// Every member's workers, by rank: the domain ids each member gave its workers (its
    /// worker ids unless set with [`DomainBuilder::worker_as`]). `members()[r][0]` is the
    /// first worker of rank `r`, the usual destination of a command addressed to that rank.
    pub fn members(&self) -> &[Vec<u64>] {
        &self.members
    }

    /// The buffers this member registered.
    pub fn buffers(&self) -> &[Memory] {
        &self.buffers
    }

    /// Whether the domain runs collectives (its first worker loaded `worker_coll`).
    pub fn runs_collectives(&self) -> bool {
        self.coll.is_some()
    }

    pub(crate) fn coll(&self) -> Option<&Offload> {
        self.coll.as_ref()
    }

    /// Stops the domain and waits until it is idle.
    ///
    /// A domain that runs collectives first finishes them: it waits until this member's
    /// collectives were answered, leaves the group on its worker (once every message of the
    /// worker has left) and then waits for every other member to get there too (an
    /// out-of-band allgather, bounded by the builder's timeout). Every member must then call
    /// it. Without that agreement a member could stop its worker while another member still
    /// needed a message from it.
    ///
    /// # Errors
    /// The collectives' failure ([`ErrorKind::ConnectionLost`] after a member died: the
    /// domain is stopped all the same), [`ErrorKind::TimedOut`] when the other members did not
    /// stop in time.
    pub async fn stop(&self) -> Result<()> {
        let mut result = Ok(());
        if let Some(coll) = &self.coll {
            let deadline = Instant::now() + self.timeout;
            result = coll.finish(deadline).await;
            if result.is_ok() {
                result = drive_allgather(&*self.oob, &[1], deadline, "urom.domain: stop").await.map(drop);
            }
        }
        let stopped = self.ctx.stop().await;
        result.and(stopped)
    }
}

impl fmt::Debug for Domain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Domain")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("workers", &self.workers)
            .field("buffers", &self.buffers.len())
            .field("ctx", &self.ctx)
            .finish()
    }
}

/// The most workers a member may announce in [`exchange_members`].
const MAX_WORKERS: usize = 1 << 16;

/// Every member's domain ids, by rank: an allgather of the counts, then of the ids padded to
/// the largest count.
async fn exchange_members(oob: &dyn Oob, ids: &[u64], deadline: Instant) -> Result<Vec<Vec<u64>>> {
    let size = oob.size() as usize;
    let counts = drive_allgather(oob, &(ids.len() as u64).to_le_bytes(), deadline, "urom.domain").await?;
    let counts: Vec<usize> =
        counts.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()) as usize).collect();
    if counts.len() != size {
        return Err(Error::new(ErrorKind::Other, "urom.domain: the out-of-band allgather returned a wrong length"));
    }
    let max = counts.iter().copied().max().unwrap_or(0);
    // Every member allocates `size × max` ids: a member announcing nonsense must not make the
    // others allocate (or overflow computing) that much.
    if max > MAX_WORKERS {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            format!("urom.domain: a member announced {max} workers (at most {MAX_WORKERS})"),
        ));
    }
    let mut mine = vec![0u8; max * 8];
    for (i, id) in ids.iter().enumerate() {
        mine[i * 8..i * 8 + 8].copy_from_slice(&id.to_le_bytes());
    }
    let all = drive_allgather(oob, &mine, deadline, "urom.domain").await?;
    if all.len() != size * max * 8 {
        return Err(Error::new(ErrorKind::Other, "urom.domain: the out-of-band allgather returned a wrong length"));
    }
    Ok(counts
        .iter()
        .enumerate()
        .map(|(r, &n)| {
            let base = r * max * 8;
            (0..n)
                .map(|i| u64::from_le_bytes(all[base + i * 8..base + i * 8 + 8].try_into().unwrap_or_default()))
                .collect()
        })
        .collect())
}

// ---------------------------------------------------------------------------------------
// The OOB as DOCA's three C callbacks.

struct OobState {
    oob: Rc<dyn Oob>,
}

struct ReqState {
    req: Box<dyn OobRequest>,
    rbuf: *mut u8,
    total: usize,
}

fn code_of(e: &Error) -> sys::doca_error_t {
    e.code().map(|c| c.0).unwrap_or(sys::DOCA_ERROR_IO_FAILED)
}

/// `doca_urom_domain_allgather_cb_t`.
unsafe extern "C" fn oob_allgather(
    sbuf: *mut c_void,
    rbuf: *mut c_void,
    msglen: usize,
    coll_info: *mut c_void,
    req: *mut *mut c_void,
) -> sys::doca_error_t {
    catch_unwind(AssertUnwindSafe(|| {
        if coll_info.is_null() || req.is_null() || rbuf.is_null() || (sbuf.is_null() && msglen > 0) {
            return sys::DOCA_ERROR_INVALID_VALUE;
        }
        // SAFETY: `coll_info` is the OobState this module gave the domain, alive as long as
        // the domain; DOCA calls back on the domain's thread only.
        let state = unsafe { &*(coll_info as *const OobState) };
        let data = if msglen == 0 {
            &[][..]
        } else {
            // SAFETY: DOCA passes `msglen` readable bytes at `sbuf` for the call.
            unsafe { std::slice::from_raw_parts(sbuf.cast::<u8>(), msglen) }
        };
        match state.oob.allgather(data) {
            Ok(r) => {
                let total = msglen * state.oob.size() as usize;
                let boxed = Box::new(ReqState { req: r, rbuf: rbuf.cast(), total });
                // SAFETY: valid out-pointer (checked non-null); freed by `oob_req_free`.
                unsafe { *req = Box::into_raw(boxed).cast() };
                sys::DOCA_SUCCESS
            }
            Err(e) => code_of(&e),
        }
    }))
    .unwrap_or(sys::DOCA_ERROR_UNEXPECTED)
}

/// `doca_urom_domain_req_test_cb_t`.
unsafe extern "C" fn oob_req_test(req: *mut c_void) -> sys::doca_error_t {
    catch_unwind(AssertUnwindSafe(|| {
        if req.is_null() {
            return sys::DOCA_ERROR_INVALID_VALUE;
        }
        // SAFETY: `req` came from `oob_allgather` and is not freed before `oob_req_free`.
        let state = unsafe { &mut *(req as *mut ReqState) };
        match state.req.test() {
            Ok(None) => sys::DOCA_ERROR_IN_PROGRESS,
            Ok(Some(all)) if all.len() == state.total => {
                // SAFETY: DOCA gave `rbuf` with room for `msglen × size` bytes, valid until
                // the request completes.
                unsafe { std::ptr::copy_nonoverlapping(all.as_ptr(), state.rbuf, all.len()) };
                sys::DOCA_SUCCESS
            }
            Ok(Some(_)) => sys::DOCA_ERROR_INVALID_VALUE,
            Err(e) => code_of(&e),
        }
    }))
    .unwrap_or(sys::DOCA_ERROR_UNEXPECTED)
}

/// `doca_urom_domain_req_free_cb_t`.
unsafe extern "C" fn oob_req_free(req: *mut c_void) -> sys::doca_error_t {
    catch_unwind(AssertUnwindSafe(|| {
        if req.is_null() {
            return sys::DOCA_ERROR_INVALID_VALUE;
        }
        // SAFETY: `req` came from `Box::into_raw` in `oob_allgather`; DOCA frees it once.
        drop(unsafe { Box::from_raw(req as *mut ReqState) });
        sys::DOCA_SUCCESS
    }))
    .unwrap_or(sys::DOCA_ERROR_UNEXPECTED)
}

// -------------------------------------------------------------------------------------------
// The collectives on `Domain` (the engine behind them is `Offload`, in urom/coll.rs).

impl Domain {
    fn offload(&self, op: &str) -> Result<&Offload> {
        self.coll().ok_or_else(|| {
            Error::new(
                ErrorKind::BadState,
                format!(
                    "domain.{op}: this member's first worker did not load the {} plugin, so the domain runs no collectives",
                    coll_proto::PLUGIN_NAME
                ),
            )
        })
    }

    fn collective<T: Element>(
        &self,
        op: &'static str,
        kind: Kind,
        red: ReduceOp,
        root: usize,
        src: Option<&Buf>,
        dst: Option<&Buf>,
    ) -> impl Future<Output = Result<()>> + 'static {
        let answer = self.offload(op).and_then(|o| Ok(o.answer(op, o.issue::<T>(op, kind, red, root, src, dst)?)));
        async move { answer?.await }
    }

    /// Elementwise reduction of every member's `src` into every member's `dst` (the same
    /// length as `src`, and the same on every member), run by the workers.
    ///
    /// Submitted at once (see the [ordering rule](crate::urom::coll)); the future completes
    /// when the result is in `dst`. `src` must lie in domain memory with
    /// [`Access::RDMA_READ`](crate::Access::RDMA_READ), `dst` in domain memory with [`Access::RDMA_WRITE`](crate::Access::RDMA_WRITE).
    ///
    /// # Errors
    /// [`ErrorKind::InvalidArgument`] for buffers outside the domain's memory, without the
    /// access, or of lengths that do not fit (reported at once; the other members' same
    /// collective fails with it), and for members that disagree on the count, type or
    /// operator (on every member);
    /// [`ErrorKind::ConnectionLost`] when a member or its worker died;
    /// [`ErrorKind::BadState`] when the domain runs no collectives, or
    /// its executor ended (a domain kept past it).
    ///
    /// ```no_run
    /// # async_doca::Runtime::builder().cpus("0".parse()?).build()?.block_on(async {
    /// use async_doca::coll::{ReduceOp, TypedBuf};
    /// use async_doca::oob::UnixOob;
    /// use async_doca::urom::{Domain, Service, Worker};
    /// use async_doca::Access;
    /// let dev = async_doca::Device::open_default()?;
    /// let svc = Service::connect(&dev).await?;
    /// let worker = Worker::builder(&svc).plugin("worker_coll").start().await?;
    /// // The workers read sources and write destinations: register the memory with the domain.
    /// let mem = dev.alloc(2 * 1024 * 8, Access::LOCAL_READ_WRITE | Access::RDMA_READ | Access::RDMA_WRITE)?;
    /// let oob = UnixOob::from_env(std::time::Duration::from_secs(30))?;
    /// let domain = Domain::builder(oob).worker(&worker).buffer(&mem).start().await?;
    /// let mut src = TypedBuf::<f64>::new(&mem, 0..1024)?;
    /// let mut dst = TypedBuf::<f64>::new(&mem, 1024..2048)?;
    /// src.write_from(&vec![domain.rank() as f64; 1024])?;
    /// let sum = domain.allreduce(&src, &mut dst, ReduceOp::Sum); // the workers start now
    /// // ... compute here while the DPU reduces ...
    /// sum.await?;
    /// domain.stop().await?;
    /// # Ok::<(), async_doca::Error>(()) })?;
    /// # Ok::<(), async_doca::Error>(())
    /// ```
    pub fn allreduce<'a, T: Element>(
        &'a self,
        src: &TypedBuf<T>,
        dst: &'a mut TypedBuf<T>,
        op: ReduceOp,
    ) -> impl Future<Output = Result<()>> + 'a {
        self.collective::<T>("allreduce", Kind::Allreduce, op, 0, Some(src.buf()), Some(dst.buf()))
    }

    /// Every member's `src` (the same length everywhere), concatenated in rank order into
    /// every member's `dst` (`size × src.len()` elements). Buffers and errors as for
    /// [`allreduce`](Domain::allreduce).
    pub fn allgather<'a, T: Element>(
        &'a self,
        src: &TypedBuf<T>,
        dst: &'a mut TypedBuf<T>,
    ) -> impl Future<Output = Result<()>> + 'a {
        self.collective::<T>("allgather", Kind::Allgather, ReduceOp::Sum, 0, Some(src.buf()), Some(dst.buf()))
    }

    /// `root`'s `buf` copied into every member's `buf` (the same length everywhere). The
    /// buffer needs [`Access::RDMA_READ`](crate::Access::RDMA_READ) on the root and [`Access::RDMA_WRITE`](crate::Access::RDMA_WRITE) everywhere
    /// else (give it both). Errors as for [`allreduce`](Domain::allreduce), and
    /// [`ErrorKind::InvalidArgument`] for a root that is not a member.
    pub fn broadcast<'a, T: Element>(
        &'a self,
        root: usize,
        buf: &'a mut TypedBuf<T>,
    ) -> impl Future<Output = Result<()>> + 'a {
        // The root's worker reads the buffer, and every worker writes the result into its own.
        let src = (root == self.rank() as usize).then(|| buf.buf());
        self.collective::<T>("broadcast", Kind::Broadcast, ReduceOp::Sum, root, src, Some(buf.buf()))
    }

    /// Completes once every member has entered it (run by the workers).
    pub fn barrier(&self) -> impl Future<Output = Result<()>> + '_ {
        self.collective::<i32>("barrier", Kind::Barrier, ReduceOp::Sum, 0, None, None)
    }

    /// Block `rank` of the elementwise reduction of every member's `src`
    /// (`size × dst.len()` elements) into `dst`. Buffers and errors as for
    /// [`allreduce`](Domain::allreduce).
    pub fn reduce_scatter<'a, T: Element>(
        &'a self,
        src: &TypedBuf<T>,
        dst: &'a mut TypedBuf<T>,
        op: ReduceOp,
    ) -> impl Future<Output = Result<()>> + 'a {
        self.collective::<T>("reduce_scatter", Kind::ReduceScatter, op, 0, Some(src.buf()), Some(dst.buf()))
    }

    /// Collectives issued on this domain and not answered yet.
    pub fn collectives_in_flight(&self) -> usize {
        self.coll().map_or(0, Offload::outstanding)
    }
}

// `Domain` is one of the two implementations of `coll::Collectives` (with `HostComm`).
crate::coll::forward_collectives!(Domain);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::LyingPeer;

    #[test]
    #[cfg_attr(miri, ignore = "makes system calls Miri cannot run")]
    fn an_announced_worker_count_is_bounded() {
        let rt = crate::testkit::runtime();
        let deadline = Instant::now() + Duration::from_secs(10);
        // The peer announces u64::MAX workers.
        let oob = LyingPeer { peer: u64::MAX.to_le_bytes().to_vec() };
        let e = rt.block_on(exchange_members(&oob, &[7], deadline)).expect_err("u64::MAX workers");
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    }
}
