//! The header every message carries, and the errors of the engine.
//!
//! Layout (24 bytes, little-endian), followed by the payload:
//!
//! | bytes  | field                                                      |
//! |--------|------------------------------------------------------------|
//! | 0      | magic `0xC7`                                               |
//! | 1      | kind (0 allreduce, 1 allgather, 2 broadcast, 3 barrier, 4 reduce-scatter, `0xAB` abort) |
//! | 2      | dtype code (`0xFF`: none)                                  |
//! | 3      | op code (`0xFF`: none)                                     |
//! | 4      | algorithm (0 recursive doubling, 1 ring, 2 k-nomial, 3 dissemination) |
//! | 5      | k-nomial radix (0 otherwise)                               |
//! | 6..8   | zero                                                       |
//! | 8..12  | broadcast root (0 otherwise)                               |
//! | 12..16 | group size                                                 |
//! | 16..24 | count: elements (allreduce), bytes per rank (allgather), bytes (broadcast), elements per rank (reduce-scatter), 0 (barrier) |
//!
//! The receiver compares the header with its own [`Signature`] before touching the payload, so
//! members that disagree about the collective get [`Error::Mismatch`] instead of garbage.

use std::fmt;

use crate::transport::TransportError;
use crate::types::{DataType, ReduceOp};

pub(crate) const HEADER_LEN: usize = 24;
const MAGIC: u8 = 0xC7;
const ABORT_KIND: u8 = 0xAB;
const NONE: u8 = 0xFF;

/// Which collective.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    Allreduce,
    Allgather,
    Broadcast,
    Barrier,
    ReduceScatter,
}

impl Kind {
    pub const fn name(self) -> &'static str {
        match self {
            Kind::Allreduce => "allreduce",
            Kind::Allgather => "allgather",
            Kind::Broadcast => "broadcast",
            Kind::Barrier => "barrier",
            Kind::ReduceScatter => "reduce_scatter",
        }
    }

    fn from_code(c: u8) -> Option<Self> {
        [Kind::Allreduce, Kind::Allgather, Kind::Broadcast, Kind::Barrier, Kind::ReduceScatter].get(c as usize).copied()
    }
}

/// The algorithm a member runs (part of the signature: members with different [`crate::Tuning`]
/// would otherwise wait for messages that never come).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algorithm {
    RecursiveDoubling,
    Ring,
    Knomial { radix: u8 },
    Dissemination,
}

/// Everything the members of a collective must agree on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Signature {
    pub kind: Kind,
    pub dtype: Option<DataType>,
    pub op: Option<ReduceOp>,
    pub algorithm: Algorithm,
    /// Broadcast root, 0 for the others.
    pub root: u32,
    pub group_size: u32,
    /// See the module docs for what it counts per kind.
    pub count: u64,
}

impl fmt::Display for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.kind.name())?;
        if let Some(d) = self.dtype {
            write!(f, " {d}")?;
        }
        if let Some(o) = self.op {
            write!(f, " {o}")?;
        }
        if self.kind == Kind::Broadcast {
            write!(f, " root {}", self.root)?;
        }
        write!(f, " count {} ({:?}, {} members)", self.count, self.algorithm, self.group_size)
    }
}

pub(crate) fn encode(sig: &Signature) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[0] = MAGIC;
    h[1] = sig.kind as u8;
    h[2] = sig.dtype.map_or(NONE, DataType::code);
    h[3] = sig.op.map_or(NONE, ReduceOp::code);
    let (algo, radix) = match sig.algorithm {
        Algorithm::RecursiveDoubling => (0, 0),
        Algorithm::Ring => (1, 0),
        Algorithm::Knomial { radix } => (2, radix),
        Algorithm::Dissemination => (3, 0),
    };
    h[4] = algo;
    h[5] = radix;
    h[8..12].copy_from_slice(&sig.root.to_le_bytes());
    h[12..16].copy_from_slice(&sig.group_size.to_le_bytes());
    h[16..24].copy_from_slice(&sig.count.to_le_bytes());
    h
}

/// The abort notice carries no signature: it is sent on the collective's own abort tag, and a
/// member whose arguments were invalid has no signature to send. Byte 2 says why the sender
/// failed: `1` when it lost a member (its transport failed), `0` for anything else (bad or
/// mismatched arguments, a malformed message), so that every member reports the same kind
/// of failure whichever of them noticed it first.
pub(crate) fn encode_abort(peer_lost: bool) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[0] = MAGIC;
    h[1] = ABORT_KIND;
    h[2] = u8::from(peer_lost);
    h
}

/// Whether an abort notice says its sender lost a member (see [`encode_abort`]).
pub(crate) fn abort_peer_lost(msg: &[u8]) -> bool {
    msg.get(2) == Some(&1)
}

pub(crate) enum Header {
    Op(Signature),
    Abort,
}

pub(crate) fn decode(msg: &[u8]) -> Result<Header, String> {
    if msg.len() < HEADER_LEN {
        return Err(format!("message of {} bytes is shorter than the {HEADER_LEN}-byte header", msg.len()));
    }
    if msg[0] != MAGIC {
        return Err(format!("bad magic {:#04x}", msg[0]));
    }
    if msg[1] == ABORT_KIND {
        return Ok(Header::Abort);
    }
    let kind = Kind::from_code(msg[1]).ok_or_else(|| format!("unknown collective kind {}", msg[1]))?;
    let dtype = match msg[2] {
        NONE => None,
        c => Some(DataType::from_code(c).ok_or_else(|| format!("unknown dtype code {c}"))?),
    };
    let op = match msg[3] {
        NONE => None,
        c => Some(ReduceOp::from_code(c).ok_or_else(|| format!("unknown op code {c}"))?),
    };
    let algorithm = match msg[4] {
        0 => Algorithm::RecursiveDoubling,
        1 => Algorithm::Ring,
        2 => Algorithm::Knomial { radix: msg[5] },
        3 => Algorithm::Dissemination,
        c => return Err(format!("unknown algorithm code {c}")),
    };
    let u32_at = |i: usize| u32::from_le_bytes(msg[i..i + 4].try_into().expect("4 bytes"));
    Ok(Header::Op(Signature {
        kind,
        dtype,
        op,
        algorithm,
        root: u32_at(8),
        group_size: u32_at(12),
        count: u64::from_le_bytes(msg[16..24].try_into().expect("8 bytes")),
    }))
}

/// Why a collective failed. Once a collective failed, every further `progress` returns the same
/// error.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The caller's arguments do not fit (buffer length, root out of range, tuning, ...).
    Invalid(String),
    /// `peer` runs a different collective, type, op, size or algorithm than this member.
    Mismatch { peer: usize, local: Box<Signature>, remote: Box<Signature> },
    /// `peer` sent something that is not a valid message of this collective.
    Protocol { peer: usize, message: String },
    /// `peer` failed its side of this collective and told the others (its own error is on its
    /// side). `peer_lost`: it failed because it lost a member (a transport failure) rather
    /// than over arguments (a mismatch it saw, invalid arguments, a malformed message).
    Aborted { peer: usize, peer_lost: bool },
    /// The transport failed (a peer is gone).
    Transport(TransportError),
}

impl From<TransportError> for Error {
    fn from(e: TransportError) -> Self {
        Error::Transport(e)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Invalid(m) => write!(f, "invalid collective: {m}"),
            Error::Mismatch { peer, local, remote } => {
                write!(f, "collective mismatch with member {peer}: here {local}, there {remote}")
            }
            Error::Protocol { peer, message } => write!(f, "bad message from member {peer}: {message}"),
            Error::Aborted { peer, peer_lost: true } => {
                write!(f, "member {peer} aborted the collective: it lost a member")
            }
            Error::Aborted { peer, peer_lost: false } => {
                write!(f, "member {peer} aborted the collective over its arguments or a mismatch")
            }
            Error::Transport(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Transport(e) => Some(e),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip() {
        let sig = Signature {
            kind: Kind::Broadcast,
            dtype: None,
            op: None,
            algorithm: Algorithm::Knomial { radix: 3 },
            root: 5,
            group_size: 7,
            count: 1 << 40,
        };
        let h = encode(&sig);
        match decode(&h) {
            Ok(Header::Op(s)) => assert_eq!(s, sig),
            _ => panic!("did not decode"),
        }
        let sig2 = Signature { kind: Kind::Allreduce, dtype: Some(DataType::F32), op: Some(ReduceOp::Max), ..sig };
        match decode(&encode(&sig2)) {
            Ok(Header::Op(s)) => assert_eq!(s, sig2),
            _ => panic!("did not decode"),
        }
        assert!(matches!(decode(&encode_abort(false)), Ok(Header::Abort)));
        assert!(abort_peer_lost(&encode_abort(true)) && !abort_peer_lost(&encode_abort(false)));
        assert!(decode(&h[..10]).is_err());
        let mut bad = h;
        bad[0] = 0;
        assert!(decode(&bad).is_err());
        let mut bad = h;
        bad[1] = 9;
        assert!(decode(&bad).is_err());
        let mut bad = h;
        bad[2] = 7;
        assert!(decode(&bad).is_err());
    }
}
