//! The Comch records on the socket: one `SOCK_SEQPACKET` message per record, its first byte
//! the record type. Parsing is total: any byte string decodes to a record or an error, never
//! a panic (the fuzz target `comch_handshake` checks that).
//!
//! ```text
//! HELLO   client -> server  0x10 | magic "COMCH\0\0\1" (8) | version u32 LE | max_msg u32 LE
//! WELCOME server -> client  0x11 | magic (8) | version u32 LE | max_msg u32 LE
//! REJECT  server -> client  0x12 | reason u32 LE (a doca_error_t)
//! DATA    both ways         0x01 | payload (0..=max_msg bytes)
//! ```

/// The magic of HELLO and WELCOME.
pub const MAGIC: [u8; 8] = *b"COMCH\0\0\x01";
/// The protocol version this provider speaks.
pub const VERSION: u32 = 1;

pub const T_DATA: u8 = 0x01;
pub const T_HELLO: u8 = 0x10;
pub const T_WELCOME: u8 = 0x11;
pub const T_REJECT: u8 = 0x12;

/// Length of HELLO and WELCOME.
pub const HANDSHAKE_LEN: usize = 1 + 8 + 4 + 4;

/// A decoded control record (DATA is handled without copying, see [`is_data`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    Hello { version: u32, max_msg: u32 },
    Welcome { version: u32, max_msg: u32 },
    Reject { reason: i32 },
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
            Ok(if t == T_HELLO { Control::Hello { version, max_msg } } else { Control::Welcome { version, max_msg } })
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

/// Encodes a control record.
pub fn encode(c: Control) -> Vec<u8> {
    match c {
        Control::Hello { version, max_msg } | Control::Welcome { version, max_msg } => {
            let t = if matches!(c, Control::Hello { .. }) { T_HELLO } else { T_WELCOME };
            let mut v = Vec::with_capacity(HANDSHAKE_LEN);
            v.push(t);
            v.extend_from_slice(&MAGIC);
            v.extend_from_slice(&version.to_le_bytes());
            v.extend_from_slice(&max_msg.to_le_bytes());
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
            Control::Hello { version: 1, max_msg: 4096 },
            Control::Welcome { version: 7, max_msg: 1 },
            Control::Reject { reason: -3 },
        ] {
            assert_eq!(decode(&encode(c)), Ok(c));
        }
        assert_eq!(decode(&[]), Err(WireError::Empty));
        assert_eq!(decode(&[0x55]), Err(WireError::UnknownType(0x55)));
        let mut h = encode(Control::Hello { version: 1, max_msg: 2 });
        h[3] ^= 1;
        assert_eq!(decode(&h), Err(WireError::BadMagic));
        assert_eq!(decode(&h[..10]), Err(WireError::BadLength));
        assert!(is_data(&[T_DATA, 1, 2]) && !is_data(&[]));
    }
}
