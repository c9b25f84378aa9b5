//! The Comch records on the socket: one `SOCK_SEQPACKET` message per record, its first byte
//! the record type. Parsing is total: any byte string decodes to a record or an error, never
//! a panic (the fuzz target `comch_handshake` checks that).
//!
//! ```text
//! HELLO   client -> server  0x10 | magic "COMCH\0\0\1" (8) | version u32 LE | max_msg u32 LE |
//!                            sent-count pid u32 | fd i32 | len u32 (all 0: none)
//! WELCOME server -> client  0x11 | magic (8) | version u32 LE | max_msg u32 LE | sent-count (12)
//! REJECT  server -> client  0x12 | reason u32 LE (a doca_error_t)
//! DATA    both ways         0x01 | payload (0..=max_msg bytes)
//! CONSUMER_NEW  both ways   0x20 | id u32 | queue pid u32 | queue fd i32 | queue len u64 |
//!                                  mmap export blob (the rest)
//! CONSUMER_GONE both ways   0x21 | id u32
//! ```
//!
//! The two CONSUMER records carry the fast path (`fastq.rs`, `consumer.rs`): a consumer's
//! start announces where its receive queue is and how to reach its buffers' memory, its stop
//! withdraws it; the peer reports both through its consumer events.
//!
//! The handshake names where each side counts the records it sends (`sent.rs`), so that the
//! peer reads its socket only when one may be waiting (version 2; version 1 had no count).

/// The magic of HELLO and WELCOME.
pub const MAGIC: [u8; 8] = *b"COMCH\0\0\x01";
/// The protocol version this provider speaks.
pub const VERSION: u32 = 2;

pub const T_DATA: u8 = 0x01;
pub const T_HELLO: u8 = 0x10;
pub const T_WELCOME: u8 = 0x11;
pub const T_REJECT: u8 = 0x12;
pub const T_CONSUMER_NEW: u8 = 0x20;
pub const T_CONSUMER_GONE: u8 = 0x21;

/// The fixed part of CONSUMER_NEW.
const CONSUMER_NEW_FIXED: usize = 1 + 4 + 4 + 4 + 8;

/// Length of HELLO and WELCOME.
pub const HANDSHAKE_LEN: usize = 1 + 8 + 4 + 4 + 12;

/// A decoded control record (DATA is handled without copying, see [`is_data`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    Hello { version: u32, max_msg: u32, sent: CountAt },
    Welcome { version: u32, max_msg: u32, sent: CountAt },
    Reject { reason: i32 },
}

/// Where a side counts the records it sends (`sent.rs`): its pid, the descriptor, the
/// length. All zero: no count (the peer reads its socket at every progress).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CountAt {
    pub pid: u32,
    pub fd: i32,
    pub len: u32,
}

/// Why a record was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireError {
    Empty,
    UnknownType(u8),
    BadLength,
    BadMagic,
}

/// True when `rec` is a DATA record (its payload is `&rec[1..]`).
pub fn is_data(rec: &[u8]) -> bool {
    rec.first() == Some(&T_DATA)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(w)
}

/// Decodes a control record.
pub fn decode(rec: &[u8]) -> Result<Control, WireError> {
    let (&t, _) = rec.split_first().ok_or(WireError::Empty)?;
    match t {
        T_HELLO | T_WELCOME => {
            if rec.len() != HANDSHAKE_LEN {
                return Err(WireError::BadLength);
            }
            if rec[1..9] != MAGIC {
                return Err(WireError::BadMagic);
            }
            let (version, max_msg) = (u32_at(rec, 9), u32_at(rec, 13));
            let sent = CountAt { pid: u32_at(rec, 17), fd: u32_at(rec, 21) as i32, len: u32_at(rec, 25) };
            Ok(if t == T_HELLO {
                Control::Hello { version, max_msg, sent }
            } else {
                Control::Welcome { version, max_msg, sent }
            })
        }
        T_REJECT => {
            if rec.len() != 5 {
                return Err(WireError::BadLength);
            }
            Ok(Control::Reject { reason: u32_at(rec, 1) as i32 })
        }
        other => Err(WireError::UnknownType(other)),
    }
}

/// A decoded fast-path record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Consumer<'a> {
    New { id: u32, pid: u32, fd: i32, len: u64, blob: &'a [u8] },
    Gone { id: u32 },
}

/// True when `rec` is a fast-path record (decoded by [`decode_consumer`]).
pub fn is_consumer(rec: &[u8]) -> bool {
    matches!(rec.first(), Some(&T_CONSUMER_NEW) | Some(&T_CONSUMER_GONE))
}

/// Decodes a fast-path record.
pub fn decode_consumer(rec: &[u8]) -> Result<Consumer<'_>, WireError> {
    let (&t, _) = rec.split_first().ok_or(WireError::Empty)?;
    match t {
        T_CONSUMER_NEW => {
            if rec.len() <= CONSUMER_NEW_FIXED {
                return Err(WireError::BadLength);
            }
            let mut len = [0u8; 8];
            len.copy_from_slice(&rec[13..21]);
            Ok(Consumer::New {
                id: u32_at(rec, 1),
                pid: u32_at(rec, 5),
                fd: u32_at(rec, 9) as i32,
                len: u64::from_le_bytes(len),
                blob: &rec[CONSUMER_NEW_FIXED..],
            })
        }
        T_CONSUMER_GONE => {
            if rec.len() != 5 {
                return Err(WireError::BadLength);
            }
            Ok(Consumer::Gone { id: u32_at(rec, 1) })
        }
        other => Err(WireError::UnknownType(other)),
    }
}

/// Encodes a fast-path record.
pub fn encode_consumer(c: &Consumer<'_>) -> Vec<u8> {
    match *c {
        Consumer::New { id, pid, fd, len, blob } => {
            let mut v = Vec::with_capacity(CONSUMER_NEW_FIXED + blob.len());
            v.push(T_CONSUMER_NEW);
            v.extend_from_slice(&id.to_le_bytes());
            v.extend_from_slice(&pid.to_le_bytes());
            v.extend_from_slice(&(fd as u32).to_le_bytes());
            v.extend_from_slice(&len.to_le_bytes());
            v.extend_from_slice(blob);
            v
        }
        Consumer::Gone { id } => {
            let mut v = vec![T_CONSUMER_GONE];
            v.extend_from_slice(&id.to_le_bytes());
            v
        }
    }
}

/// Encodes a control record.
pub fn encode(c: Control) -> Vec<u8> {
    match c {
        Control::Hello { version, max_msg, sent } | Control::Welcome { version, max_msg, sent } => {
            let t = if matches!(c, Control::Hello { .. }) { T_HELLO } else { T_WELCOME };
            let mut v = Vec::with_capacity(HANDSHAKE_LEN);
            v.push(t);
            v.extend_from_slice(&MAGIC);
            v.extend_from_slice(&version.to_le_bytes());
            v.extend_from_slice(&max_msg.to_le_bytes());
            v.extend_from_slice(&sent.pid.to_le_bytes());
            v.extend_from_slice(&(sent.fd as u32).to_le_bytes());
            v.extend_from_slice(&sent.len.to_le_bytes());
            v
        }
        Control::Reject { reason } => {
            let mut v = vec![T_REJECT];
            v.extend_from_slice(&(reason as u32).to_le_bytes());
            v
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_rejects() {
        for c in [
            Control::Hello { version: 1, max_msg: 4096, sent: CountAt::default() },
            Control::Welcome { version: 7, max_msg: 1, sent: CountAt { pid: 9, fd: -1, len: 8 } },
            Control::Reject { reason: -3 },
        ] {
            assert_eq!(decode(&encode(c)), Ok(c));
        }
        assert_eq!(decode(&[]), Err(WireError::Empty));
        assert_eq!(decode(&[0x55]), Err(WireError::UnknownType(0x55)));
        let mut h = encode(Control::Hello { version: 1, max_msg: 2, sent: CountAt::default() });
        h[3] ^= 1;
        assert_eq!(decode(&h), Err(WireError::BadMagic));
        assert_eq!(decode(&h[..10]), Err(WireError::BadLength));
        assert!(is_data(&[T_DATA, 1, 2]) && !is_data(&[]));
    }

    #[test]
    fn consumer_records_round_trip_and_reject_bad_lengths() {
        for c in [Consumer::New { id: 3, pid: 77, fd: 9, len: 4096, blob: b"blob" }, Consumer::Gone { id: 3 }] {
            let rec = encode_consumer(&c);
            assert!(is_consumer(&rec) && !is_data(&rec));
            assert_eq!(decode_consumer(&rec), Ok(c));
        }
        let new = encode_consumer(&Consumer::New { id: 1, pid: 2, fd: 3, len: 4, blob: b"x" });
        assert_eq!(decode_consumer(&new[..21]), Err(WireError::BadLength), "no blob");
        assert_eq!(decode_consumer(&[T_CONSUMER_GONE, 1]), Err(WireError::BadLength));
        assert_eq!(decode_consumer(&[T_DATA]), Err(WireError::UnknownType(T_DATA)));
    }
}
