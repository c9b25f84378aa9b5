//! What the engine needs from the network: tagged, non-blocking, point-to-point messages.

use std::collections::VecDeque;
use std::fmt;

/// A message tag: the collective's sequence number and the step within it.
///
/// The sequence number tells apart collectives in flight at the same time on one group; the
/// step tells apart the messages of one collective. Within one collective, a given
/// (sender, receiver, tag) triple carries at most one message, so a transport never has to
/// keep messages with equal (from, tag) in order (the [`Matcher`] does anyway).
///
/// Step [`Tag::ABORT_STEP`] is reserved for the abort notice a member sends to every other member
/// when its side of a collective fails.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tag(u64);

impl Tag {
    /// The step of abort notices.
    pub const ABORT_STEP: u32 = u32::MAX;

    pub const fn new(seq: u32, step: u32) -> Self {
        Tag(((seq as u64) << 32) | step as u64)
    }

    /// The abort-notice tag of collective `seq`.
    pub const fn abort(seq: u32) -> Self {
        Tag::new(seq, Self::ABORT_STEP)
    }

    pub const fn seq(self) -> u32 {
        (self.0 >> 32) as u32
    }

    pub const fn step(self) -> u32 {
        self.0 as u32
    }

    pub const fn is_abort(self) -> bool {
        self.step() == Self::ABORT_STEP
    }

    /// The 64-bit form, for transports that carry tags on the wire (`seq << 32 | step`).
    pub const fn to_bits(self) -> u64 {
        self.0
    }

    pub const fn from_bits(bits: u64) -> Self {
        Tag(bits)
    }
}

impl fmt::Debug for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_abort() {
            write!(f, "Tag(seq {}, abort)", self.seq())
        } else {
            write!(f, "Tag(seq {}, step {})", self.seq(), self.step())
        }
    }
}

/// What happened to a send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sent {
    /// The transport took the message: it copied the data or is done with it, and will deliver it
    /// unless the receiver fails.
    Accepted,
    /// The transport cannot take the message now (no buffer, window full, ...). Nothing was sent;
    /// the engine offers the same message again on a later `progress` call.
    Busy,
}

/// Why a transport operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransportErrorKind {
    /// The peer is gone (process died, connection closed).
    PeerGone,
    /// Anything else.
    Other,
}

/// A transport failure, carried into [`crate::Error::Transport`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransportError {
    pub kind: TransportErrorKind,
    /// The peer involved, when there is one.
    pub peer: Option<usize>,
    pub message: String,
}

impl TransportError {
    pub fn peer_gone(peer: usize, message: impl Into<String>) -> Self {
        TransportError { kind: TransportErrorKind::PeerGone, peer: Some(peer), message: message.into() }
    }

    pub fn other(peer: Option<usize>, message: impl Into<String>) -> Self {
        TransportError { kind: TransportErrorKind::Other, peer, message: message.into() }
    }
}

impl fmt::Display for TransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.kind, self.peer) {
            (TransportErrorKind::PeerGone, Some(p)) => write!(f, "peer {p} is gone: {}", self.message),
            (TransportErrorKind::PeerGone, None) => write!(f, "peer gone: {}", self.message),
            (TransportErrorKind::Other, Some(p)) => write!(f, "transport error with peer {p}: {}", self.message),
            (TransportErrorKind::Other, None) => write!(f, "transport error: {}", self.message),
        }
    }
}

impl std::error::Error for TransportError {}

/// A group of `size` members, seen from member `rank`, exchanging tagged messages.
///
/// Every call must return promptly (never wait for the network): the engine calls them from a
/// progress function that itself must not block.
///
/// Ordering and matching rules the engine relies on:
/// - a message is delivered whole (the transport fragments and reassembles if it must);
/// - `recv(from, tag)` only returns a message that `from` sent to this member with exactly `tag`;
///   messages that arrive before anyone asks for them must be kept until asked for (a
///   [`Matcher`] does that) — they are normal: a fast peer can be several steps, even several
///   collectives, ahead;
/// - the engine never sends to its own rank;
/// - while waiting, the engine also asks for messages that normally never come (abort notices
///   from every peer, stray step-0 messages): `recv` must be cheap for a (from, tag) that has
///   nothing, and should fail with [`TransportErrorKind::PeerGone`] once `from` is known dead
///   (after handing out what `from` sent before it died): that is how a death anywhere in the
///   group fails every member's pending collective instead of leaving it waiting.
pub trait Transport {
    /// This member's rank, `0..size()`.
    fn rank(&self) -> usize;

    /// The number of members.
    fn size(&self) -> usize;

    /// Offers a message to `to`: the concatenation of `parts` (a small header and a payload, to
    /// spare a copy). On [`Sent::Accepted`] the transport no longer needs `parts`.
    fn send(&mut self, to: usize, tag: Tag, parts: &[&[u8]]) -> Result<Sent, TransportError>;

    /// Takes the message from `from` with `tag` if it has arrived: replaces the contents of `buf`
    /// with it (reusing or swapping the allocation as the transport likes) and returns its
    /// length; `None` if it has not arrived yet. An error means the message will never come
    /// (typically [`TransportErrorKind::PeerGone`]).
    fn recv(&mut self, from: usize, tag: Tag, buf: &mut Vec<u8>) -> Result<Option<usize>, TransportError>;
}

impl<T: Transport + ?Sized> Transport for &mut T {
    fn rank(&self) -> usize {
        (**self).rank()
    }
    fn size(&self) -> usize {
        (**self).size()
    }
    fn send(&mut self, to: usize, tag: Tag, parts: &[&[u8]]) -> Result<Sent, TransportError> {
        (**self).send(to, tag, parts)
    }
    fn recv(&mut self, from: usize, tag: Tag, buf: &mut Vec<u8>) -> Result<Option<usize>, TransportError> {
        (**self).recv(from, tag, buf)
    }
}

/// A mailbox of arrived messages keyed by (sender, tag), for transports that receive whatever
/// comes off the wire and must hand it out by exact match.
///
/// Messages with the same key come out in arrival order. Messages are moved, not copied:
/// [`Matcher::recv_into`] hands the stored allocation to the caller.
///
/// The mailbox is one list in arrival order, searched from the oldest, as MPI libraries keep
/// their unexpected-message queues: what waits here is the few messages that arrived before
/// their step asked for them (one or two per peer in flight), and a scan of a short list costs
/// less than hashing the key. It was a map of per-key queues with the standard library's
/// SipHash, which hashed a message's key three times (to file it, to find it, to drop its
/// emptied queue) and allocated a queue for each key; with the UROM worker's own maps, SipHash
/// cost an offloaded 8 B allreduce ~1 900 instructions per member. A long list only builds up
/// when messages are never asked for, which [`Matcher::retain`] is there to prune.
#[derive(Default, Debug)]
pub struct Matcher {
    waiting: VecDeque<(usize, Tag, Vec<u8>)>,
    bytes: usize,
}

impl Matcher {
    pub fn new() -> Self {
        Self::default()
    }

    /// Files a message that arrived from `from`.
    pub fn push(&mut self, from: usize, tag: Tag, msg: Vec<u8>) {
        self.bytes += msg.len();
        self.waiting.push_back((from, tag, msg));
    }

    /// Where the oldest message from `from` with `tag` waits.
    fn position(&self, from: usize, tag: Tag) -> Option<usize> {
        self.waiting.iter().position(|&(f, t, _)| f == from && t == tag)
    }

    /// Takes the oldest message from `from` with `tag`.
    pub fn take(&mut self, from: usize, tag: Tag) -> Option<Vec<u8>> {
        let i = self.position(from, tag)?;
        let (_, _, msg) = self.waiting.remove(i).expect("position is in range");
        self.bytes -= msg.len();
        Some(msg)
    }

    /// [`Transport::recv`] on top of the mailbox: moves the message into `buf`.
    pub fn recv_into(&mut self, from: usize, tag: Tag, buf: &mut Vec<u8>) -> Option<usize> {
        let msg = self.take(from, tag)?;
        *buf = msg;
        Some(buf.len())
    }

    /// Whether a message from `from` with `tag` is waiting.
    pub fn contains(&self, from: usize, tag: Tag) -> bool {
        self.position(from, tag).is_some()
    }

    /// Number of waiting messages.
    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// Total payload bytes waiting.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Drops the messages for which `keep(from, tag)` is false, e.g. abort notices of
    /// collectives this member already finished (they are never asked for).
    pub fn retain(&mut self, mut keep: impl FnMut(usize, Tag) -> bool) {
        let bytes = &mut self.bytes;
        self.waiting.retain(|(from, tag, msg)| {
            let k = keep(*from, *tag);
            if !k {
                *bytes -= msg.len();
            }
            k
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_fields() {
        let t = Tag::new(0xdead_beef, 7);
        assert_eq!((t.seq(), t.step()), (0xdead_beef, 7));
        assert_eq!(Tag::from_bits(t.to_bits()), t);
        assert!(!t.is_abort());
        assert!(Tag::abort(3).is_abort());
        assert_eq!(Tag::abort(3).seq(), 3);
        assert_eq!(format!("{:?}", Tag::new(1, 2)), "Tag(seq 1, step 2)");
    }

    #[test]
    fn matcher_matches_exactly_and_in_order() {
        let mut m = Matcher::new();
        m.push(1, Tag::new(0, 0), vec![1]);
        m.push(1, Tag::new(0, 0), vec![2, 2]);
        m.push(2, Tag::new(0, 0), vec![3]);
        m.push(1, Tag::new(1, 0), vec![4]);
        assert_eq!((m.len(), m.bytes()), (4, 5));
        let mut buf = Vec::new();
        assert_eq!(m.recv_into(1, Tag::new(0, 1), &mut buf), None);
        assert_eq!(m.recv_into(1, Tag::new(0, 0), &mut buf), Some(1));
        assert_eq!(buf, [1]);
        assert_eq!(m.recv_into(1, Tag::new(0, 0), &mut buf), Some(2));
        assert_eq!(buf, [2, 2]);
        assert_eq!(m.recv_into(1, Tag::new(0, 0), &mut buf), None);
        assert!(m.contains(2, Tag::new(0, 0)));
        m.retain(|_, tag| tag.seq() != 0);
        assert_eq!((m.len(), m.bytes()), (1, 1));
        assert_eq!(m.take(1, Tag::new(1, 0)), Some(vec![4]));
        assert!(m.is_empty());
    }
}
