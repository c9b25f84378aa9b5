//! Several collectives in flight on one group, completed in order.

use std::collections::VecDeque;

use crate::collective::{Collective, Poll, Tuning};
use crate::transport::Transport;
use crate::types::{DataType, ReduceOp};
use crate::wire::{Error, Kind};

/// A finished collective.
#[derive(Debug)]
pub struct Completion {
    pub seq: u32,
    pub result: Result<Vec<u8>, Error>,
}

/// One member's queue of collectives on a group: hands out sequence numbers, progresses every
/// collective in flight on each call, and reports completions strictly in submission order.
///
/// Every member must submit the same collectives in the same order (the MPI rule): that is what
/// gives them the same sequence numbers. Collectives in flight run concurrently (their messages
/// never match each other's, the tags differ), so a barrier submitted after a large allreduce may
/// finish first; it is still reported after it.
#[derive(Default)]
pub struct Comm {
    tuning: Tuning,
    next_seq: u32,
    queue: VecDeque<Collective>,
    /// Failed and reported collectives whose abort notices the transport has not taken yet.
    draining: Vec<Collective>,
}

impl Comm {
    pub fn new(tuning: Tuning) -> Self {
        Comm { tuning, ..Default::default() }
    }

    /// Starts numbering at `seq` (e.g. to continue a group's numbering elsewhere).
    pub fn with_first_seq(tuning: Tuning, seq: u32) -> Self {
        Comm { tuning, next_seq: seq, ..Default::default() }
    }

    pub fn tuning(&self) -> &Tuning {
        &self.tuning
    }

    /// The sequence number the next submitted collective gets.
    pub fn next_seq(&self) -> u32 {
        self.next_seq
    }

    /// Collectives submitted and not yet reported.
    pub fn in_flight(&self) -> usize {
        self.queue.len()
    }

    fn push(&mut self, make: impl FnOnce(u32, &Tuning) -> Collective) -> u32 {
        let seq = self.next_seq;
        self.next_seq = seq.wrapping_add(1);
        self.queue.push_back(make(seq, &self.tuning));
        seq
    }

    /// See [`Collective::allreduce`]. Returns the sequence number.
    pub fn allreduce(&mut self, dtype: DataType, op: ReduceOp, input: Vec<u8>) -> u32 {
        self.push(|seq, t| Collective::allreduce(seq, dtype, op, input, t))
    }

    /// See [`Collective::allgather`].
    pub fn allgather(&mut self, input: Vec<u8>) -> u32 {
        self.push(|seq, t| Collective::allgather(seq, input, t))
    }

    /// See [`Collective::broadcast`].
    pub fn broadcast(&mut self, root: usize, buf: Vec<u8>) -> u32 {
        self.push(|seq, t| Collective::broadcast(seq, root, buf, t))
    }

    /// See [`Collective::barrier`].
    pub fn barrier(&mut self) -> u32 {
        self.push(Collective::barrier)
    }

    /// See [`Collective::reduce_scatter`].
    pub fn reduce_scatter(&mut self, dtype: DataType, op: ReduceOp, input: Vec<u8>) -> u32 {
        self.push(|seq, t| Collective::reduce_scatter(seq, dtype, op, input, t))
    }

    /// See [`Collective::invalid`]: takes the place of a collective of `kind` whose
    /// arguments the caller rejected, and fails it on every member.
    pub fn invalid(&mut self, kind: Kind, reason: String) -> u32 {
        self.push(|seq, t| Collective::invalid(seq, kind, reason, t))
    }

    /// Progresses everything in flight once and returns the collectives that can now be
    /// reported, oldest first (possibly none). Never waits.
    pub fn progress<T: Transport + ?Sized>(&mut self, t: &mut T) -> Vec<Completion> {
        for c in self.queue.iter_mut() {
            if !c.is_finished() {
                // The result stays in the collective; it is read below, in order.
                let _ = c.progress(t);
            }
        }
        self.draining.retain_mut(|c| {
            let _ = c.progress(t);
            c.has_pending_notices()
        });
        let mut done = Vec::new();
        while self.queue.front().is_some_and(Collective::is_finished) {
            let mut c = self.queue.pop_front().expect("front exists");
            let seq = c.seq();
            let result = match c.progress(t) {
                Ok(Poll::Ready) => Ok(c.take_output().expect("output of a finished collective is taken once")),
                Ok(Poll::Pending) => unreachable!("a finished collective does not go back to pending"),
                Err(e) => Err(e),
            };
            if c.has_pending_notices() {
                self.draining.push(c);
            }
            done.push(Completion { seq, result });
        }
        done
    }
}
