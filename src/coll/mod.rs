//! Collectives (allreduce, allgather, broadcast, barrier, reduce-scatter) as futures.
//!
//! The algorithms are those of the [`coll_algorithms`] engine (recursive doubling, ring, k-nomial,
//! dissemination; see its docs for when each is chosen). This module gives them typed buffers
//! of registered memory ([`TypedBuf`], [`Element`]) and two ways to run them with the same
//! method shapes:
//!
//! - **offloaded**: the UROM workers of a [`Domain`](crate::urom::Domain) run them with the
//!   `worker_coll` plugin, reading and writing the hosts' registered buffers directly while
//!   the hosts compute ([`Domain::allreduce`](crate::urom::Domain::allreduce) and the others;
//!   the model is in [`crate::urom::coll`]);
//! - **host-only**, the baseline: [`HostComm`], where the host processes run the collective
//!   themselves over the soft provider's RDMA (documented below).
//!
//! `docs/collectives.md` describes the model in more detail, and lists the five homes of the
//! collectives in this workspace (the engine crate, this module, the UROM offload, the worker
//! plugin library and its shared object) and why each exists.
//!
//! # The model
//!
//! - **Communicator.** [`HostComm::builder`]`(&dev, oob).build().await` is collective: every
//!   member creates one RDMA context on its current executor and exports one connection per
//!   peer; the blobs travel through the [`Oob`](crate::oob::Oob) allgather (driven without
//!   blocking, bounded by a timeout), and each member connects its connection for peer `j`
//!   with `j`'s blob for it: a full mesh of reliable connections. A `HostComm` and its
//!   futures are `!Send` and belong to that executor.
//! - **Transport.** Engine messages (a 24-byte signature header and a payload) are split into
//!   chunks of at most [`HostCommBuilder::chunk_bytes`] (64 KiB) behind a 32-byte chunk header
//!   (sender rank, tag, message length, chunk offset) and sent with
//!   [`Connection::send`](crate::rdma::Connection::send) from a pool of registered send
//!   slots, at most [`HostCommBuilder::send_window`] in flight. A bounded outbox sits in front
//!   of them: when it is full the engine is told `Busy` and retries later. A pool of
//!   [`HostCommBuilder::recv_buffers`] receives is kept posted on the context (each reposted
//!   by its own task as soon as its chunk is filed); chunks are reassembled per
//!   (sender, tag) and filed in the engine's `Matcher`.
//! - **Driver.** One task per communicator (`spawn_local`) runs the engine's progress
//!   whenever something changed (a chunk arrived, a send finished, a collective was
//!   submitted) and completes the collectives' futures in submission order.
//! - **Ordering.** A collective is *submitted when its method is called*, not when its
//!   future is first polled, so `let a = comm.allreduce(..); let b = comm.barrier();` are
//!   numbered in that order whatever order they are awaited in. Every member must submit the
//!   same collectives in the same order (the MPI rule). Several may be in flight at once
//!   (joined, or issued from several tasks sharing an `Rc<HostComm>`); each completes after
//!   all those submitted before it.
//! - **Failure.** All connections share one RDMA context, and DOCA moves a context to the
//!   error state when any task fails: so a member that dies or closes fails every pending
//!   and later collective of every other member with [`ErrorKind::ConnectionLost`](crate::ErrorKind::ConnectionLost) (nothing
//!   hangs; the soft provider notices a dead process through a pidfd within milliseconds).
//!   Local argument problems (a destination of the wrong length, a reduce-scatter source that
//!   does not split into `size` blocks, a root out of range) and disagreements between
//!   members (different counts, types, ops or kinds: the engine's `Mismatch`) are
//!   [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) with the detail. A communicator stays usable after such
//!   an argument error. A communicator kept after its executor ended (its context and its
//!   driver task went with it) fails its pending and later collectives with
//!   [`ErrorKind::BadState`](crate::ErrorKind::BadState).
//! - **Close.** [`HostComm::close`] is collective: it waits for this member's collectives and
//!   sends, then for every member to get there (an out-of-band allgather), then drops the
//!   context. Dropping a `HostComm` without it is abrupt for the peers (their collectives
//!   fail); the driver still sends what the engine had handed over (for at most 2 s) and then
//!   drops the context.
//!
//! ```
//! use async_doca::coll::{HostComm, ReduceOp, TypedBuf};
//! use async_doca::oob::InProcessOob;
//! use async_doca::{Access, Device, Runtime};
//!
//! // Two members, each on its own thread and executor; normally two processes (UnixOob, TcpOob, MpiOob).
//! let threads: Vec<_> = InProcessOob::group(2)
//!     .into_iter()
//!     .map(|oob| {
//!         std::thread::spawn(move || {
//!             Runtime::builder().cpus("0".parse()?).build()?.block_on(async move {
//!                 let dev = Device::open_default()?;
//!                 let comm = HostComm::builder(&dev, oob).build().await?;
//!                 let r = comm.rank() as i64;
//!                 let mut src = TypedBuf::<i64>::alloc(&dev, 2, Access::LOCAL_READ_WRITE)?;
//!                 src.write_from(&[r, 10 * r])?;
//!                 let mut dst = TypedBuf::<i64>::alloc(&dev, 2, Access::LOCAL_READ_WRITE)?;
//!                 comm.allreduce(&src, &mut dst, ReduceOp::Sum).await?;
//!                 comm.close().await?;
//!                 Ok::<_, async_doca::Error>(dst.read_vec())
//!             })
//!         })
//!     })
//!     .collect();
//! for t in threads {
//!     assert_eq!(t.join().unwrap()?, [1, 10]);
//! }
//! # Ok::<(), async_doca::Error>(())
//! ```

mod host;
mod typed;

use std::future::Future;

use crate::error::Result;

pub use coll_algorithms::{Algorithm, DataType, Kind, ReduceOp, Tuning};
pub use host::{
    HostComm, HostCommBuilder, DEFAULT_CHUNK_BYTES, DEFAULT_RECV_BUFFERS, DEFAULT_SEND_WINDOW, DEFAULT_SETUP_TIMEOUT,
};
pub use typed::{Element, TypedBuf};

/// The collectives, whoever runs them: the UROM workers of a [`Domain`](crate::urom::Domain)
/// (offloaded) or the host processes of a [`HostComm`] (host-only). Code written against this
/// trait runs either way, which is how the offload is compared with its baseline (the
/// `allreduce` example, `perf`'s collective tests).
///
/// Every method submits its collective when called (in call order, which must be the same on
/// every member) and returns the future of its completion. The types' own methods document
/// the details, in particular which buffers the offloaded version needs (memory registered
/// with the domain).
///
/// ```no_run
/// use async_doca::coll::{Collectives, ReduceOp, TypedBuf};
///
/// /// A global sum of one number, whoever runs the collective.
/// async fn global_sum(c: &impl Collectives, src: &TypedBuf<f64>, dst: &mut TypedBuf<f64>) -> async_doca::Result<f64> {
///     c.allreduce(src, dst, ReduceOp::Sum).await?;
///     Ok(dst.read_vec()[0])
/// }
/// ```
pub trait Collectives {
    /// See [`HostComm::allreduce`] and [`Domain::allreduce`](crate::urom::Domain::allreduce).
    fn allreduce<'a, T: Element>(
        &'a self,
        src: &TypedBuf<T>,
        dst: &'a mut TypedBuf<T>,
        op: ReduceOp,
    ) -> impl Future<Output = Result<()>> + 'a;

    /// See [`HostComm::allgather`] and [`Domain::allgather`](crate::urom::Domain::allgather).
    fn allgather<'a, T: Element>(
        &'a self,
        src: &TypedBuf<T>,
        dst: &'a mut TypedBuf<T>,
    ) -> impl Future<Output = Result<()>> + 'a;

    /// See [`HostComm::broadcast`] and [`Domain::broadcast`](crate::urom::Domain::broadcast).
    fn broadcast<'a, T: Element>(
        &'a self,
        root: usize,
        buf: &'a mut TypedBuf<T>,
    ) -> impl Future<Output = Result<()>> + 'a;

    /// See [`HostComm::barrier`] and [`Domain::barrier`](crate::urom::Domain::barrier).
    fn barrier(&self) -> impl Future<Output = Result<()>> + '_;

    /// See [`HostComm::reduce_scatter`] and
    /// [`Domain::reduce_scatter`](crate::urom::Domain::reduce_scatter).
    fn reduce_scatter<'a, T: Element>(
        &'a self,
        src: &TypedBuf<T>,
        dst: &'a mut TypedBuf<T>,
        op: ReduceOp,
    ) -> impl Future<Output = Result<()>> + 'a;
}

/// Implements [`Collectives`] by forwarding to the type's own methods of the same names.
macro_rules! forward_collectives {
    ($t:ty) => {
        impl $crate::coll::Collectives for $t {
            fn allreduce<'a, T: $crate::coll::Element>(
                &'a self,
                src: &$crate::coll::TypedBuf<T>,
                dst: &'a mut $crate::coll::TypedBuf<T>,
                op: $crate::coll::ReduceOp,
            ) -> impl std::future::Future<Output = $crate::Result<()>> + 'a {
                <$t>::allreduce(self, src, dst, op)
            }
            fn allgather<'a, T: $crate::coll::Element>(
                &'a self,
                src: &$crate::coll::TypedBuf<T>,
                dst: &'a mut $crate::coll::TypedBuf<T>,
            ) -> impl std::future::Future<Output = $crate::Result<()>> + 'a {
                <$t>::allgather(self, src, dst)
            }
            fn broadcast<'a, T: $crate::coll::Element>(
                &'a self,
                root: usize,
                buf: &'a mut $crate::coll::TypedBuf<T>,
            ) -> impl std::future::Future<Output = $crate::Result<()>> + 'a {
                <$t>::broadcast(self, root, buf)
            }
            fn barrier(&self) -> impl std::future::Future<Output = $crate::Result<()>> + '_ {
                <$t>::barrier(self)
            }
            fn reduce_scatter<'a, T: $crate::coll::Element>(
                &'a self,
                src: &$crate::coll::TypedBuf<T>,
                dst: &'a mut $crate::coll::TypedBuf<T>,
                op: $crate::coll::ReduceOp,
            ) -> impl std::future::Future<Output = $crate::Result<()>> + 'a {
                <$t>::reduce_scatter(self, src, dst, op)
            }
        }
    };
}

// Each implementation sits with its type: the offloaded one in `urom/domain.rs`, so this module
// imports nothing from `urom` (which builds on it).
pub(crate) use forward_collectives;
forward_collectives!(HostComm);
