//! An in-memory transport for tests: every member of a group in one process.
//!
//! A [`LocalNet`] is the network; [`LocalNet::transport`] gives member `rank`'s end. Messages are
//! copied on send. With [`LocalNet::new`] they land in the receiver's [`Matcher`] at once; with
//! [`LocalNet::shuffled`] they wait in flight until [`LocalNet::deliver`] moves a random subset of
//! them, in random order, which shakes out code that assumes arrival order. Sends can also be
//! refused at random ([`LocalNet::set_busy_percent`]) and members killed ([`LocalNet::kill`]),
//! after which talking to them fails with [`TransportErrorKind::PeerGone`].
//!
//! [`LocalNet::run`] drives one collective per member to the end and tells apart completion,
//! failure and a stall (nothing can move any more), so tests never hang.
//!
//! Public (not a `#[cfg(test)]` testkit) because users need it: whoever writes a
//! [`Transport`] or drives the engine (the UROM `coll` plugin, the host-only
//! communicator, this crate's integration tests) checks it against this reference network.
//!
//! The net is behind a mutex, so transports may also be moved to threads.
//!
//! [`TransportErrorKind::PeerGone`]: crate::TransportErrorKind::PeerGone

use std::sync::{Arc, Mutex, MutexGuard};

use crate::collective::{Collective, Poll};
use crate::transport::{Matcher, Sent, Tag, Transport, TransportError};
use crate::wire::Error;

/// A small deterministic PRNG (SplitMix64), so tests need no dependency and replay from a seed.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`; the modulo bias is irrelevant for tests).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

struct InFlight {
    from: usize,
    to: usize,
    tag: Tag,
    data: Vec<u8>,
}

struct Net {
    size: usize,
    shuffle: bool,
    busy_percent: u32,
    rng: SplitMix64,
    dead: Vec<bool>,
    in_flight: Vec<InFlight>,
    boxes: Vec<Matcher>,
    /// Bumped on every accepted send, matched receive and delivery: `run` uses it to see stalls.
    activity: u64,
    sent_messages: u64,
}

/// The in-memory network. Cloning gives another handle to the same network.
#[derive(Clone)]
pub struct LocalNet {
    net: Arc<Mutex<Net>>,
}

/// Member `rank`'s end of a [`LocalNet`].
#[derive(Clone)]
pub struct LocalTransport {
    rank: usize,
    size: usize,
    net: Arc<Mutex<Net>>,
}

/// How one member's collective ended in [`LocalNet::run`].
#[derive(Debug, PartialEq)]
pub enum Outcome {
    Done(Vec<u8>),
    Failed(Error),
    /// Not finished when nothing could move any more (a hang, in a real network).
    Stalled,
    /// The member was killed before it finished.
    Dead,
}

impl Outcome {
    /// The output; panics with the outcome otherwise.
    pub fn unwrap(self) -> Vec<u8> {
        match self {
            Outcome::Done(v) => v,
            other => panic!("collective did not complete: {other:?}"),
        }
    }
}

impl LocalNet {
    /// A network of `size` members delivering every message at once.
    pub fn new(size: usize) -> Self {
        Self::build(size, false, 0)
    }

    /// A network of `size` members that delivers messages only on [`LocalNet::deliver`], a random
    /// subset in random order each time.
    pub fn shuffled(size: usize, seed: u64) -> Self {
        Self::build(size, true, seed)
    }

    fn build(size: usize, shuffle: bool, seed: u64) -> Self {
        LocalNet {
            net: Arc::new(Mutex::new(Net {
                size,
                shuffle,
                busy_percent: 0,
                rng: SplitMix64::new(seed),
                dead: vec![false; size],
                in_flight: Vec::new(),
                boxes: (0..size).map(|_| Matcher::new()).collect(),
                activity: 0,
                sent_messages: 0,
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Net> {
        // A test that panicked while holding the lock already failed; the data is still usable.
        self.net.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Refuse this percentage of sends with [`Sent::Busy`] (0..=100; 100 stalls everything).
    pub fn set_busy_percent(&self, percent: u32) {
        self.lock().busy_percent = percent.min(100);
    }

    pub fn size(&self) -> usize {
        self.lock().size
    }

    pub fn transport(&self, rank: usize) -> LocalTransport {
        let size = self.size();
        assert!(rank < size, "rank {rank} of {size}");
        LocalTransport { rank, size, net: self.net.clone() }
    }

    /// One transport per member, in rank order.
    pub fn transports(&self) -> Vec<LocalTransport> {
        (0..self.size()).map(|r| self.transport(r)).collect()
    }

    /// Kills member `rank`: its messages still in flight are lost, and any send or receive
    /// involving it fails from now on (messages it sent that already arrived stay receivable).
    pub fn kill(&self, rank: usize) {
        let mut n = self.lock();
        n.dead[rank] = true;
        n.in_flight.retain(|m| m.from != rank && m.to != rank);
        n.activity += 1;
    }

    pub fn is_dead(&self, rank: usize) -> bool {
        self.lock().dead[rank]
    }

    /// Messages sent and not delivered yet (shuffled mode).
    pub fn in_flight(&self) -> usize {
        self.lock().in_flight.len()
    }

    /// Messages delivered and not received yet, summed over members.
    pub fn unreceived(&self) -> usize {
        self.lock().boxes.iter().map(Matcher::len).sum()
    }

    /// Messages accepted so far.
    pub fn sent_messages(&self) -> u64 {
        self.lock().sent_messages
    }

    /// Delivers a random non-empty subset of the messages in flight, in random order; returns
    /// how many.
    pub fn deliver(&self) -> usize {
        let mut guard = self.lock();
        let n = &mut *guard;
        if n.in_flight.is_empty() {
            return 0;
        }
        let take = 1 + n.rng.below(n.in_flight.len());
        for _ in 0..take {
            let i = n.rng.below(n.in_flight.len());
            let m = n.in_flight.swap_remove(i);
            n.boxes[m.to].push(m.from, m.tag, m.data);
        }
        n.activity += 1;
        take
    }

    /// Delivers everything in flight.
    pub fn deliver_all(&self) {
        let mut guard = self.lock();
        let n = &mut *guard;
        for m in n.in_flight.drain(..) {
            n.boxes[m.to].push(m.from, m.tag, m.data);
        }
        n.activity += 1;
    }

    fn activity(&self) -> u64 {
        self.lock().activity
    }

    /// Runs `colls[rank]` on member `rank` (one per member) until every live member finished or
    /// nothing can move any more (or a million sweeps went by). Members are progressed in a random order each sweep when the
    /// net is shuffled. `before_sweep(sweep, net)` runs first in every sweep (to kill a member
    /// mid-way, say).
    pub fn run_with(&self, colls: &mut [Collective], mut before_sweep: impl FnMut(usize, &LocalNet)) -> Vec<Outcome> {
        let size = self.size();
        assert_eq!(colls.len(), size, "one collective per member");
        let mut transports = self.transports();
        let mut outcomes: Vec<Option<Outcome>> = (0..size).map(|_| None).collect();
        let mut order: Vec<usize> = (0..size).collect();
        let mut idle_sweeps = 0;
        let mut sweep = 0;
        // A bound on top of stall detection, so that even a livelock (messages moving forever
        // without anything finishing) ends the test.
        const MAX_SWEEPS: usize = 1_000_000;
        while sweep < MAX_SWEEPS {
            before_sweep(sweep, self);
            sweep += 1;
            let before = self.activity();
            let shuffle = self.lock().shuffle;
            if shuffle {
                let mut g = self.lock();
                for i in (1..size).rev() {
                    let j = g.rng.below(i + 1);
                    order.swap(i, j);
                }
            }
            for &r in &order {
                if outcomes[r].is_some() {
                    continue;
                }
                if self.is_dead(r) {
                    outcomes[r] = Some(Outcome::Dead);
                    continue;
                }
                match colls[r].progress(&mut transports[r]) {
                    Ok(Poll::Ready) => outcomes[r] = Some(Outcome::Done(colls[r].take_output().unwrap_or_default())),
                    Ok(Poll::Pending) => {}
                    Err(e) => outcomes[r] = Some(Outcome::Failed(e)),
                }
            }
            // Failed members keep offering their abort notices the transport refused.
            for (r, c) in colls.iter_mut().enumerate() {
                if c.has_pending_notices() && !self.is_dead(r) {
                    let _ = c.progress(&mut transports[r]);
                }
            }
            let pending_notices = colls.iter().any(Collective::has_pending_notices);
            if outcomes.iter().all(Option::is_some) && !pending_notices {
                break;
            }
            self.deliver();
            let busy = self.lock().busy_percent > 0;
            if self.activity() == before && self.in_flight() == 0 {
                // With random refusals, an idle sweep can be bad luck; give it a few more.
                idle_sweeps += 1;
                if !busy || idle_sweeps > 200 {
                    break;
                }
            } else {
                idle_sweeps = 0;
            }
        }
        outcomes.into_iter().map(|o| o.unwrap_or(Outcome::Stalled)).collect()
    }

    /// [`LocalNet::run_with`] with nothing done between sweeps.
    pub fn run(&self, colls: &mut [Collective]) -> Vec<Outcome> {
        self.run_with(colls, |_, _| {})
    }
}

impl Transport for LocalTransport {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn send(&mut self, to: usize, tag: Tag, parts: &[&[u8]]) -> Result<Sent, TransportError> {
        let mut guard = self.net.lock().unwrap_or_else(|e| e.into_inner());
        let n = &mut *guard;
        if to >= n.size {
            return Err(TransportError::other(Some(to), format!("no member {to} in a group of {}", n.size)));
        }
        if n.dead[self.rank] {
            return Err(TransportError::other(None, "this member was killed"));
        }
        if n.dead[to] {
            return Err(TransportError::peer_gone(to, "killed"));
        }
        if n.busy_percent > 0 && (n.rng.below(100) as u32) < n.busy_percent {
            return Ok(Sent::Busy);
        }
        let data = parts.concat();
        if n.shuffle {
            n.in_flight.push(InFlight { from: self.rank, to, tag, data });
        } else {
            n.boxes[to].push(self.rank, tag, data);
        }
        n.activity += 1;
        n.sent_messages += 1;
        Ok(Sent::Accepted)
    }

    fn recv(&mut self, from: usize, tag: Tag, buf: &mut Vec<u8>) -> Result<Option<usize>, TransportError> {
        let mut guard = self.net.lock().unwrap_or_else(|e| e.into_inner());
        let n = &mut *guard;
        if from >= n.size {
            return Err(TransportError::other(Some(from), format!("no member {from} in a group of {}", n.size)));
        }
        if n.dead[self.rank] {
            return Err(TransportError::other(None, "this member was killed"));
        }
        match n.boxes[self.rank].recv_into(from, tag, buf) {
            Some(len) => {
                n.activity += 1;
                Ok(Some(len))
            }
            None if n.dead[from] => Err(TransportError::peer_gone(from, "killed")),
            None => Ok(None),
        }
    }
}
