//! `worker_sandbox`: tagged messages between the workers of a domain.
//!
//! [`Cmd::TagSend`] sends `data` under `tag` to the sandbox plugin of domain member `dest`
//! (a worker id of the domain) and is answered [`Notif::SendDone`] once sent.
//! [`Cmd::TagRecv`] is answered [`Notif::Received`] with the first message that arrives (or
//! arrived earlier: those are queued) under `tag`; receives of one tag match messages in
//! arrival order.
//!
//! | message | tag | fields |
//! | --- | --- | --- |
//! | [`Cmd::TagSend`] | 1 | `dest: u64, tag: u64, data: bytes` |
//! | [`Cmd::TagRecv`] | 2 | `tag: u64` |
//! | [`Notif::SendDone`] | 1 | `tag: u64` |
//! | [`Notif::Received`] | 2 | `tag: u64, data: bytes` |

use super::{DecodeError, Reader, Writer};

mod worker;
pub use worker::Sandbox;

/// The shared object cargo builds for this plugin.
pub const FILE_NAME: &str = "libworker_sandbox.so";
/// The name the service lists it under: the file name without `lib` and `.so` (docs/urom-soft.md).
pub const PLUGIN_NAME: &str = "worker_sandbox";
/// The version `worker_sandbox` reports.
pub const VERSION: u64 = 1;
/// The largest `data` of one message; a larger send is answered `DOCA_ERROR_TOO_BIG`. The
/// host's `max_msg_size` must also hold the [`Notif::Received`] that carries it.
pub const MAX_DATA: usize = 64 * 1024;

/// A `worker_sandbox` command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cmd {
    /// Send `data` under `tag` to domain member `dest`.
    TagSend {
        /// The destination's worker id in the domain.
        dest: u64,
        /// The message tag.
        tag: u64,
        /// The message, at most [`MAX_DATA`] bytes.
        data: Vec<u8>,
    },
    /// Receive the next message sent under `tag`.
    TagRecv {
        /// The message tag.
        tag: u64,
    },
}

/// A `worker_sandbox` notification body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notif {
    /// The message under `tag` has been sent.
    SendDone {
        /// The sent message's tag.
        tag: u64,
    },
    /// A message arrived under `tag`.
    Received {
        /// The message tag.
        tag: u64,
        /// The message.
        data: Vec<u8>,
    },
}

impl Cmd {
    /// The packed command. Panics if `data` exceeds `u32::MAX` bytes (never a valid command).
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Cmd::TagSend { dest, tag, data } => Writer::default().u32(1).u64(*dest).u64(*tag).bytes(data).done(),
            Cmd::TagRecv { tag } => Writer::default().u32(2).u64(*tag).done(),
        }
    }

    /// Parses a packed command.
    pub fn decode(buf: &[u8]) -> Result<Cmd, DecodeError> {
        let mut r = Reader::new(buf, "worker_sandbox command");
        let cmd = match r.u32()? {
            1 => Cmd::TagSend { dest: r.u64()?, tag: r.u64()?, data: r.bytes()?.to_vec() },
            2 => Cmd::TagRecv { tag: r.u64()? },
            _ => return Err(r.unknown_tag()),
        };
        r.finish()?;
        Ok(cmd)
    }
}

impl Notif {
    /// The packed notification body.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Notif::SendDone { tag } => Writer::default().u32(1).u64(*tag).done(),
            Notif::Received { tag, data } => Writer::default().u32(2).u64(*tag).bytes(data).done(),
        }
    }

    /// Parses a notification body.
    pub fn decode(buf: &[u8]) -> Result<Notif, DecodeError> {
        let mut r = Reader::new(buf, "worker_sandbox notification");
        let n = match r.u32()? {
            1 => Notif::SendDone { tag: r.u64()? },
            2 => Notif::Received { tag: r.u64()?, data: r.bytes()?.to_vec() },
            _ => return Err(r.unknown_tag()),
        };
        r.finish()?;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let cmds = [
            Cmd::TagSend { dest: 1 << 63, tag: 7, data: b"hello".to_vec() },
            Cmd::TagSend { dest: 0, tag: u64::MAX, data: vec![] },
            Cmd::TagRecv { tag: 42 },
        ];
        for c in cmds {
            assert_eq!(Cmd::decode(&c.encode()), Ok(c));
        }
        let notifs = [
            Notif::SendDone { tag: 3 },
            Notif::Received { tag: 3, data: vec![0xff; 1000] },
            Notif::Received { tag: 0, data: vec![] },
        ];
        for n in notifs {
            assert_eq!(Notif::decode(&n.encode()), Ok(n));
        }
    }

    #[test]
    fn rejects_every_truncation_and_trailing_bytes() {
        let msgs = [Cmd::TagSend { dest: 2, tag: 9, data: b"abc".to_vec() }.encode(), Cmd::TagRecv { tag: 9 }.encode()];
        for m in &msgs {
            for cut in 0..m.len() {
                assert!(Cmd::decode(&m[..cut]).is_err(), "cut at {cut} of {m:?}");
            }
            let mut long = m.clone();
            long.push(1);
            assert_eq!(Cmd::decode(&long).unwrap_err().why, "trailing bytes");
        }
        let n = Notif::Received { tag: 1, data: b"xy".to_vec() }.encode();
        for cut in 0..n.len() {
            assert!(Notif::decode(&n[..cut]).is_err());
        }
    }

    #[test]
    fn rejects_lengths_beyond_the_message_and_unknown_tags() {
        let mut m = Cmd::TagSend { dest: 2, tag: 9, data: b"abc".to_vec() }.encode();
        // The data length field sits after tag, dest and tag: claim more than is there.
        m[20..24].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(Cmd::decode(&m).unwrap_err().why, "truncated");
        assert_eq!(Cmd::decode(&3u32.to_le_bytes()).unwrap_err().why, "unknown tag");
        assert_eq!(Notif::decode(&0u32.to_le_bytes()).unwrap_err().why, "unknown tag");
    }
}
