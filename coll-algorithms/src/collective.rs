//! One collective on one member, as a state machine driven by [`Collective::progress`].

use std::mem;
use std::ops::Range;

use smallvec::SmallVec;

use crate::schedule::{self, Action, Rounds};
use crate::transport::{Sent, Tag, Transport};
use crate::types::{reduce_into, DataType, ReduceOp};
use crate::wire::{self, Algorithm, Error, Header, Kind, Signature, HEADER_LEN};

/// Algorithm knobs. Every member of a group must use the same tuning (the algorithm is part of
/// the message header, so members that differ get [`Error::Mismatch`] rather than a hang).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tuning {
    /// Allreduce buffers of at least this many bytes use the ring (reduce-scatter + allgather,
    /// bandwidth-optimal: each member sends about `2 * bytes` in total); smaller ones use
    /// recursive doubling (latency-optimal: `log2(size)` steps, full buffer each). The default,
    /// 64 KiB, is about where UCC's own defaults stop using latency-oriented algorithms for
    /// host memory. `0` forces the ring, `usize::MAX` recursive doubling.
    pub allreduce_ring_threshold_bytes: usize,
    /// Radix of the k-nomial broadcast tree, `2..=255` (2 is binomial). Default 4.
    pub knomial_radix: usize,
    /// Allgathers whose total output is below this many bytes use recursive doubling
    /// (`log2(size)` steps) when the group size is a power of two; the others use the ring
    /// (`size - 1` steps, each member sending `size - 1` blocks either way). Default 64 KiB.
    /// `0` forces the ring.
    pub allgather_rd_threshold_bytes: usize,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning { allreduce_ring_threshold_bytes: 64 * 1024, knomial_radix: 4, allgather_rd_threshold_bytes: 64 * 1024 }
    }
}

impl Tuning {
    /// The allreduce algorithm for a buffer of `bytes` bytes.
    pub fn allreduce_algorithm(&self, bytes: usize) -> Algorithm {
        if bytes >= self.allreduce_ring_threshold_bytes {
            Algorithm::Ring
        } else {
            Algorithm::RecursiveDoubling
        }
    }

    /// The allgather algorithm for a total output of `bytes` bytes over `size` members.
    pub fn allgather_algorithm(&self, bytes: usize, size: usize) -> Algorithm {
        if size.is_power_of_two() && bytes < self.allgather_rd_threshold_bytes {
            Algorithm::RecursiveDoubling
        } else {
            Algorithm::Ring
        }
    }
}

/// Whether a collective has finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Poll {
    /// Waiting for the network: call `progress` again later.
    Pending,
    /// Finished; the output is available from [`Collective::take_output`].
    Ready,
}

#[derive(Clone, Copy, Debug)]
enum Spec {
    Allreduce {
        dtype: DataType,
        op: ReduceOp,
    },
    Allgather,
    Broadcast {
        root: usize,
    },
    Barrier,
    ReduceScatter {
        dtype: DataType,
        op: ReduceOp,
    },
    /// Stands in for a collective whose arguments this member's caller rejected: fails at
    /// once on every member (the input holds the reason).
    Invalid {
        kind: Kind,
    },
}

enum State {
    Init(Vec<u8>),
    Running(Box<Run>),
    Done(Option<Vec<u8>>),
    /// `notify`: peers the abort notice could not be handed to yet (transport busy).
    Failed {
        error: Error,
        notify: Vec<usize>,
    },
}

/// A collective operation on one member of a group.
///
/// Created with the collective's sequence number (the same on every member; see the crate docs)
/// and this member's input; nothing happens until [`Collective::progress`] is called. The
/// constructors never fail: arguments that do not fit the group (only known once the transport
/// is seen) make the first `progress` fail with [`Error::Invalid`], after telling the other
/// members, so they fail too instead of waiting forever.
pub struct Collective {
    seq: u32,
    spec: Spec,
    tuning: Tuning,
    sig: Option<Signature>,
    state: State,
}

struct Run {
    sig: Signature,
    header: [u8; HEADER_LEN],
    buf: Vec<u8>,
    out: Range<usize>,
    dtype: Option<DataType>,
    op: Option<ReduceOp>,
    rounds: Rounds,
    round: usize,
    /// Peers this member never receives a step-0 message from (see `poll_foreign`).
    probe: Vec<usize>,
    /// The current round's sends accepted and messages received (inline: see `Round`).
    sent: SmallVec<[bool; 2]>,
    got: SmallVec<[Option<Vec<u8>>; 2]>,
    /// Message buffers kept for the next receives (inline: a round receives one or two).
    pool: SmallVec<[Vec<u8>; 2]>,
}

impl Collective {
    fn new(seq: u32, spec: Spec, input: Vec<u8>, tuning: &Tuning) -> Self {
        Collective { seq, spec, tuning: *tuning, sig: None, state: State::Init(input) }
    }

    /// Allreduce of `input` (packed little-endian `dtype` elements; its length must be a whole
    /// number of elements). Output: the elementwise reduction over all members, same length.
    /// Recursive doubling or ring, per [`Tuning::allreduce_ring_threshold_bytes`].
    pub fn allreduce(seq: u32, dtype: DataType, op: ReduceOp, input: Vec<u8>, tuning: &Tuning) -> Self {
        Self::new(seq, Spec::Allreduce { dtype, op }, input, tuning)
    }

    /// Allgather: every member contributes `input` (the same length everywhere); output: the
    /// contributions of ranks `0..size` concatenated. Ring, or recursive doubling per
    /// [`Tuning::allgather_rd_threshold_bytes`].
    pub fn allgather(seq: u32, input: Vec<u8>, tuning: &Tuning) -> Self {
        Self::new(seq, Spec::Allgather, input, tuning)
    }

    /// Broadcast from `root`: `buf` has the same length on every member; the root's contents are
    /// sent, the others' are ignored. Output: the root's bytes. K-nomial tree.
    pub fn broadcast(seq: u32, root: usize, buf: Vec<u8>, tuning: &Tuning) -> Self {
        Self::new(seq, Spec::Broadcast { root }, buf, tuning)
    }

    /// Barrier: completes once every member has entered it. Output: empty. Dissemination.
    pub fn barrier(seq: u32, tuning: &Tuning) -> Self {
        Self::new(seq, Spec::Barrier, Vec::new(), tuning)
    }

    /// Reduce-scatter: `input` holds `size * n` elements; output: block `rank` (elements
    /// `rank*n..(rank+1)*n`) of the elementwise reduction over all members. Ring.
    pub fn reduce_scatter(seq: u32, dtype: DataType, op: ReduceOp, input: Vec<u8>, tuning: &Tuning) -> Self {
        Self::new(seq, Spec::ReduceScatter { dtype, op }, input, tuning)
    }

    /// A collective of `kind` that fails with [`Error::Invalid`]`(reason)` at its first
    /// `progress`, after telling the other members (who fail it too, with
    /// [`Error::Aborted`]). For a caller that found its own arguments unusable but must keep
    /// the group in step: the collective still takes its sequence number, so the others do
    /// not wait for it forever and later collectives still match.
    pub fn invalid(seq: u32, kind: Kind, reason: String, tuning: &Tuning) -> Self {
        Self::new(seq, Spec::Invalid { kind }, reason.into_bytes(), tuning)
    }

    pub fn seq(&self) -> u32 {
        self.seq
    }

    pub fn kind(&self) -> Kind {
        match self.spec {
            Spec::Allreduce { .. } => Kind::Allreduce,
            Spec::Allgather => Kind::Allgather,
            Spec::Broadcast { .. } => Kind::Broadcast,
            Spec::Barrier => Kind::Barrier,
            Spec::ReduceScatter { .. } => Kind::ReduceScatter,
            Spec::Invalid { kind } => kind,
        }
    }

    /// What this member runs, including the algorithm chosen (known once the first `progress`
    /// has seen the transport and accepted the arguments).
    pub fn signature(&self) -> Option<Signature> {
        self.sig
    }

    /// Done or failed.
    pub fn is_finished(&self) -> bool {
        matches!(self.state, State::Done(_) | State::Failed { .. })
    }

    /// The error, once failed.
    pub fn error(&self) -> Option<&Error> {
        match &self.state {
            State::Failed { error, .. } => Some(error),
            _ => None,
        }
    }

    /// The output, once `progress` returned [`Poll::Ready`] (`None` before, and after it was taken).
    pub fn take_output(&mut self) -> Option<Vec<u8>> {
        match &mut self.state {
            State::Done(out) => out.take(),
            _ => None,
        }
    }

    /// Whether abort notices are still waiting for the transport to accept them (only after a
    /// failure). A caller that drops failed collectives should keep calling `progress` on them
    /// while this is true, or peers that wait for this member may never learn of the failure.
    pub fn has_pending_notices(&self) -> bool {
        matches!(&self.state, State::Failed { notify, .. } if !notify.is_empty())
    }

    /// Advances as far as the network allows without waiting.
    ///
    /// Returns [`Poll::Ready`] when finished (and again on later calls), [`Poll::Pending`] when
    /// waiting for messages or for the transport to accept one. On failure this member sends an
    /// abort notice to every other member (unless the failure is itself a peer's abort), and
    /// every later call returns the same error (retrying notices the transport refused).
    pub fn progress<T: Transport + ?Sized>(&mut self, t: &mut T) -> Result<Poll, Error> {
        match &mut self.state {
            State::Init(input) => {
                let input = mem::take(input);
                match self.start(&*t, input) {
                    Ok(run) => {
                        self.sig = Some(run.sig);
                        self.state = State::Running(Box::new(run));
                    }
                    Err(e) => return Err(self.fail(t, e)),
                }
            }
            State::Done(_) => return Ok(Poll::Ready),
            State::Failed { error, notify } => {
                let error = error.clone();
                flush_notices(t, self.seq, notify, matches!(error, Error::Transport(_)));
                return Err(error);
            }
            State::Running(_) => {}
        }
        let State::Running(run) = &mut self.state else { unreachable!("started above") };
        let outcome = match run.advance(t, self.seq) {
            Ok(true) => Ok(true),
            Ok(false) => run.poll_foreign(t, self.seq).map(|()| false),
            Err(e) => Err(e),
        };
        match outcome {
            Ok(true) => {
                let State::Running(run) = mem::replace(&mut self.state, State::Done(None)) else { unreachable!() };
                let Run { mut buf, out, .. } = *run;
                buf.truncate(out.end);
                buf.drain(..out.start);
                self.state = State::Done(Some(buf));
                Ok(Poll::Ready)
            }
            Ok(false) => Ok(Poll::Pending),
            Err(e) => Err(self.fail(t, e)),
        }
    }

    fn fail<T: Transport + ?Sized>(&mut self, t: &mut T, error: Error) -> Error {
        // A peer's abort went to everyone already; any other failure must be told, or members
        // that wait (directly or transitively) for this one would wait forever.
        let mut notify: Vec<usize> = match error {
            Error::Aborted { .. } => Vec::new(),
            _ => (0..t.size()).filter(|&p| p != t.rank()).collect(),
        };
        flush_notices(t, self.seq, &mut notify, matches!(error, Error::Transport(_)));
        self.state = State::Failed { error: error.clone(), notify };
        error
    }

    fn start<T: Transport + ?Sized>(&self, t: &T, input: Vec<u8>) -> Result<Run, Error> {
        let (rank, size) = (t.rank(), t.size());
        if size == 0 || rank >= size {
            return Err(Error::Invalid(format!("transport reports rank {rank} of {size}")));
        }
        let group_size = u32::try_from(size).map_err(|_| Error::Invalid(format!("group of {size} members")))?;
        let radix = self.tuning.knomial_radix;
        if !(2..=255).contains(&radix) {
            return Err(Error::Invalid(format!("k-nomial radix {radix} is not in 2..=255")));
        }
        let whole = |len: usize, dtype: DataType| {
            if len % dtype.size() == 0 {
                Ok(len / dtype.size())
            } else {
                Err(Error::Invalid(format!("{len} bytes is not a whole number of {dtype} elements")))
            }
        };
        let mut sig = Signature {
            kind: self.kind(),
            dtype: None,
            op: None,
            algorithm: Algorithm::Ring,
            root: 0,
            group_size,
            count: 0,
        };
        let mut buf = input;
        let mut out = 0..buf.len();
        let (mut dtype, mut op) = (None, None);
        let rounds = match self.spec {
            Spec::Invalid { .. } => return Err(Error::Invalid(String::from_utf8_lossy(&buf).into_owned())),
            Spec::Allreduce { dtype: d, op: o } => {
                let count = whole(buf.len(), d)?;
                (sig.dtype, sig.op, sig.count) = (Some(d), Some(o), count as u64);
                (dtype, op) = (Some(d), Some(o));
                sig.algorithm = self.tuning.allreduce_algorithm(buf.len());
                if sig.algorithm == Algorithm::Ring {
                    let mut rounds = Rounds::new();
                    let blocks = |i| schedule::block(i, count, size, d.size());
                    // Reduce-scatter leaves rank r with block r, which is where allgather starts.
                    schedule::ring_reduce_scatter(rank, size, 0, &blocks, &mut rounds);
                    schedule::ring_allgather(rank, size, (size - 1) as u32, &blocks, &mut rounds);
                    rounds
                } else {
                    schedule::recursive_doubling(rank, size, buf.len())
                }
            }
            Spec::Allgather => {
                let per = buf.len();
                let total = per
                    .checked_mul(size)
                    .ok_or_else(|| Error::Invalid(format!("{size} blocks of {per} bytes overflow")))?;
                let mut all = vec![0u8; total];
                all[rank * per..(rank + 1) * per].copy_from_slice(&buf);
                buf = all;
                out = 0..total;
                sig.count = per as u64;
                sig.algorithm = self.tuning.allgather_algorithm(total, size);
                if sig.algorithm == Algorithm::Ring {
                    let mut rounds = Rounds::new();
                    schedule::ring_allgather(rank, size, 0, &|i| i * per..(i + 1) * per, &mut rounds);
                    rounds
                } else {
                    schedule::recursive_doubling_allgather(rank, size, per)
                }
            }
            Spec::Broadcast { root } => {
                if root >= size {
                    return Err(Error::Invalid(format!("broadcast root {root} in a group of {size}")));
                }
                sig.root = root as u32;
                sig.count = buf.len() as u64;
                sig.algorithm = Algorithm::Knomial { radix: radix as u8 };
                schedule::knomial_broadcast(rank, size, root, radix, buf.len())
            }
            Spec::Barrier => {
                sig.algorithm = Algorithm::Dissemination;
                schedule::dissemination(rank, size)
            }
            Spec::ReduceScatter { dtype: d, op: o } => {
                let count = whole(buf.len(), d)?;
                if count % size != 0 {
                    return Err(Error::Invalid(format!(
                        "reduce_scatter input of {count} {d} elements does not split into {size} equal blocks"
                    )));
                }
                let per = count / size;
                (sig.dtype, sig.op, sig.count) = (Some(d), Some(o), per as u64);
                (dtype, op) = (Some(d), Some(o));
                let bytes = per * d.size();
                out = rank * bytes..(rank + 1) * bytes;
                let mut rounds = Rounds::new();
                schedule::ring_reduce_scatter(rank, size, 0, &|i| i * bytes..(i + 1) * bytes, &mut rounds);
                rounds
            }
        };
        let step0_from: SmallVec<[usize; 4]> =
            rounds.iter().filter(|r| r.step == 0).flat_map(|r| r.recvs.iter().map(|v| v.from)).collect();
        let probe = (0..size).filter(|&p| p != rank && !step0_from.contains(&p)).collect();
        Ok(Run {
            header: wire::encode(&sig),
            sig,
            buf,
            out,
            dtype,
            op,
            rounds,
            round: 0,
            probe,
            sent: SmallVec::new(),
            got: SmallVec::new(),
            pool: SmallVec::new(),
        })
    }
}

fn flush_notices<T: Transport + ?Sized>(t: &mut T, seq: u32, notify: &mut Vec<usize>, peer_lost: bool) {
    let notice = wire::encode_abort(peer_lost);
    // Errors are dropped: a peer we cannot reach is gone and needs no notice.
    notify.retain(|&p| matches!(t.send(p, Tag::abort(seq), &[&notice]), Ok(Sent::Busy)));
}

impl Run {
    /// Runs rounds until one must wait; `Ok(true)` once the last round is done.
    fn advance<T: Transport + ?Sized>(&mut self, t: &mut T, seq: u32) -> Result<bool, Error> {
        loop {
            let Some(round) = self.rounds.get(self.round) else { return Ok(true) };
            let tag = Tag::new(seq, round.step);
            self.sent.resize(round.sends.len(), false);
            self.got.resize_with(round.recvs.len(), || None);
            let mut complete = true;
            for (s, sent) in round.sends.iter().zip(self.sent.iter_mut()) {
                if !*sent {
                    *sent = t.send(s.to, tag, &[&self.header, &self.buf[s.range.clone()]])? == Sent::Accepted;
                    complete &= *sent;
                }
            }
            for (r, got) in round.recvs.iter().zip(self.got.iter_mut()) {
                if got.is_some() {
                    continue;
                }
                let mut msg = self.pool.pop().unwrap_or_default();
                if t.recv(r.from, tag, &mut msg)?.is_some() {
                    check(&self.sig, r.from, &msg, r.range.len())?;
                    *got = Some(msg);
                } else {
                    self.pool.push(msg);
                    complete = false;
                }
            }
            if !complete {
                return Ok(false);
            }
            // Applied in schedule order, after every send of the round was accepted: the sends
            // read the buffer as it was when the round began.
            for (r, got) in round.recvs.iter().zip(self.got.iter_mut()) {
                let msg = got.take().expect("all received");
                let data = &msg[HEADER_LEN..];
                let dst = &mut self.buf[r.range.clone()];
                match r.action {
                    Action::Copy => dst.copy_from_slice(data),
                    Action::Reduce => reduce_into(
                        dst,
                        data,
                        self.dtype.expect("reducing collectives have a dtype"),
                        self.op.expect("reducing collectives have an op"),
                    ),
                }
                self.pool.push(msg);
            }
            self.sent.clear();
            self.got.clear();
            self.round += 1;
        }
    }

    /// Looks for messages this member's schedule never asks for, which only members that
    /// disagree with it send: abort notices from every peer, and step-0 messages from the peers
    /// it expects none from. Every algorithm sends its first messages at step 0, so a member that
    /// runs a different collective, algorithm or root usually sends one where this member would
    /// otherwise never look, and the exact matching of tags would turn the disagreement into a
    /// silent hang. Only done when the collective has to wait anyway; each probe is a lookup.
    fn poll_foreign<T: Transport + ?Sized>(&mut self, t: &mut T, seq: u32) -> Result<(), Error> {
        let mut scratch = self.pool.pop().unwrap_or_default();
        let me = t.rank();
        let result = (|| {
            for peer in (0..t.size()).filter(|&p| p != me) {
                if t.recv(peer, Tag::abort(seq), &mut scratch)?.is_some() {
                    return Err(Error::Aborted { peer, peer_lost: wire::abort_peer_lost(&scratch) });
                }
            }
            for &peer in &self.probe {
                if t.recv(peer, Tag::new(seq, 0), &mut scratch)?.is_some() {
                    let len = scratch.len().saturating_sub(HEADER_LEN);
                    check(&self.sig, peer, &scratch, len)?;
                    return Err(Error::Protocol { peer, message: "unexpected message at step 0".into() });
                }
            }
            Ok(())
        })();
        self.pool.push(scratch);
        result
    }
}

fn check(sig: &Signature, peer: usize, msg: &[u8], expect_len: usize) -> Result<(), Error> {
    match wire::decode(msg) {
        Err(message) => Err(Error::Protocol { peer, message }),
        Ok(Header::Abort) => Err(Error::Protocol { peer, message: "abort notice on a data tag".into() }),
        Ok(Header::Op(remote)) if remote != *sig => {
            Err(Error::Mismatch { peer, local: Box::new(*sig), remote: Box::new(remote) })
        }
        Ok(Header::Op(_)) if msg.len() - HEADER_LEN != expect_len => Err(Error::Protocol {
            peer,
            message: format!("payload of {} bytes where {expect_len} were expected", msg.len() - HEADER_LEN),
        }),
        Ok(Header::Op(_)) => Ok(()),
    }
}
