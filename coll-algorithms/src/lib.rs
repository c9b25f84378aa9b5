//! Non-blocking collective algorithms over any tagged message transport.
//!
//! This is the engine behind the collectives of async-doca's UROM `coll` plugin (run by the
//! workers) and of the host-only baseline (run by the host processes): the same algorithms,
//! whatever moves the bytes. It knows nothing of DOCA, which is why the crate is called
//! `coll-algorithms` and not `doca-*` like the workspace's DOCA crates (it was `doca-coll`).
//! Where the other collectives layers live: `docs/collectives.md`.
//!
//! # The model
//!
//! - A group has `size` members with ranks `0..size`; each member has a [`Transport`] that sends
//!   a message to a rank under a [`Tag`] and receives the message from a given rank with a given
//!   tag, without ever waiting. A transport keeps messages that arrive before they are asked for
//!   ([`Matcher`] does that bookkeeping).
//! - A collective is a [`Collective`], a state machine: built with its sequence number and this
//!   member's input, then driven by calling [`Collective::progress`] until it returns
//!   [`Poll::Ready`] (then [`Collective::take_output`]) or an [`Error`]. `progress` does as much
//!   as the network allows and returns; whoever owns the transport calls it: a UROM plugin from
//!   its progress callback, a host process from an async task woken by its completion queue, a
//!   test from a loop. Nothing here spawns threads or blocks.
//! - Tags are (sequence number, step). Every member numbers its collectives the same way (same
//!   collectives, same order, as MPI requires), so the messages of collective `n` never match
//!   those of `n + 1` and several can be in flight at once. [`Comm`] hands out the numbers,
//!   progresses everything in flight and reports completions in submission order, even when a
//!   later one (a barrier behind a big allreduce) finishes first.
//! - Every message carries a 24-byte header with the collective's [`Signature`] (kind, type, op,
//!   count, root, algorithm, group size). A member that receives a header that differs from its
//!   own fails with [`Error::Mismatch`] instead of combining garbage.
//! - A member whose collective fails (mismatch, a transport error such as a dead peer, invalid
//!   arguments) sends an abort notice (tag step [`Tag::ABORT_STEP`]) to every other member;
//!   members waiting on that collective check for notices whenever they have to wait, and fail
//!   with [`Error::Aborted`]. So one member's failure fails the collective everywhere rather than
//!   leaving the others waiting forever.
//! - Tags are matched exactly, so a member that runs another algorithm (a different count can
//!   pick the other allreduce algorithm; a different kind has another pattern) might send only
//!   messages nobody asks for. Every algorithm sends its first messages at step 0, and a waiting
//!   member also looks for step-0 messages from the peers its own schedule expects none from:
//!   what it finds there can only come from a member that disagrees, and fails with
//!   [`Error::Mismatch`]. Tested for disagreement in count, type, op, kind and tuning.
//!   Not detectable without extra messages: broadcasts whose members name different roots
//!   (each self-declared root just sends and finishes; members can wait for a parent that never
//!   sends), which needs a timeout above this crate.
//! - Notices and stray messages that arrive after a member finished the collective are never
//!   asked for; a transport may drop them with [`Matcher::retain`] (every tag carries its
//!   sequence number).
//!
//! # Algorithms (as UCC chooses them)
//!
//! | collective | algorithm |
//! |---|---|
//! | allreduce, below [`Tuning::allreduce_ring_threshold_bytes`] (64 KiB) | recursive doubling; for sizes that are not powers of two the extra ranks fold in first and get the result back last |
//! | allreduce, from the threshold up | ring: reduce-scatter then allgather over `size` blocks (uneven blocks when `size` does not divide the count; empty ones when the count is below `size`) |
//! | allgather, power-of-two group, output below [`Tuning::allgather_rd_threshold_bytes`] (64 KiB) | recursive doubling |
//! | allgather, otherwise | ring |
//! | broadcast | k-nomial tree, radix [`Tuning::knomial_radix`] (4) |
//! | barrier | dissemination with empty messages |
//! | reduce-scatter | ring |
//!
//! Broadcast is not segmented or pipelined (UCC switches to scatter-allgather for large
//! broadcasts); a large broadcast costs `log_k(size)` full-buffer hops.
//!
//! Every member ends with bit-identical results, floats included: in recursive doubling both
//! partners combine the same two partial results (all operators are commutative), and in the
//! ring each block is reduced once and then copied. Float min/max are NaN-propagating (see
//! [`reduce_into`]).
//!
//! # Example
//!
//! Four members in one process, over the in-memory transport of [`testing`]:
//!
//! ```
//! use coll_algorithms::testing::LocalNet;
//! use coll_algorithms::{Collective, DataType, ReduceOp, Tuning};
//!
//! let net = LocalNet::new(4);
//! let tuning = Tuning::default();
//! // Member r contributes [r, 10 * r] as i64.
//! let mut colls: Vec<Collective> = (0..4i64)
//!     .map(|r| {
//!         let input: Vec<u8> = [r, 10 * r].iter().flat_map(|x| x.to_le_bytes()).collect();
//!         Collective::allreduce(0, DataType::I64, ReduceOp::Sum, input, &tuning)
//!     })
//!     .collect();
//! // `run` calls `progress` on every member in turn until all are done.
//! for outcome in net.run(&mut colls) {
//!     let out = outcome.unwrap();
//!     let sums: Vec<i64> = out.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect();
//!     assert_eq!(sums, [6, 60]);
//! }
//!
//! // Driving by hand, with two collectives in flight on member 0's queue:
//! use coll_algorithms::Comm;
//! let net = LocalNet::new(2);
//! let mut members: Vec<(Comm, _)> = net.transports().into_iter().map(|t| (Comm::new(tuning), t)).collect();
//! for (rank, (comm, _)) in members.iter_mut().enumerate() {
//!     comm.allgather(vec![rank as u8]);
//!     comm.barrier();
//! }
//! let mut finished = vec![Vec::new(), Vec::new()];
//! for _ in 0..100 {
//!     for (rank, (comm, transport)) in members.iter_mut().enumerate() {
//!         finished[rank].extend(comm.progress(transport));
//!     }
//! }
//! for done in &finished {
//!     assert_eq!(done.len(), 2);
//!     assert_eq!((done[0].seq, done[0].result.as_deref()), (0, Ok(&[0u8, 1][..])));
//!     assert_eq!((done[1].seq, done[1].result.as_deref()), (1, Ok(&[][..])));
//! }
//! ```

mod collective;
mod comm;
mod schedule;
pub mod testing;
mod transport;
mod types;
mod wire;

pub use collective::{Collective, Poll, Tuning};
pub use comm::{Comm, Completion};
pub use transport::{Matcher, Sent, Tag, Transport, TransportError, TransportErrorKind};
pub use types::{reduce_into, DataType, ReduceOp};
pub use wire::{Algorithm, Error, Kind, Signature};
