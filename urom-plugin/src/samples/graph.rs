//! `worker_graph`: a loopback. The command carries a value; the notification echoes it.
//!
//! The formats are those of NVIDIA's `worker_graph` sample (its host library and DPU plugin),
//! so NVIDIA's host code drives this plugin and this crate's host code drives NVIDIA's: a
//! command is a `u64` type (`0` = loopback) and the `u64` data, 16 bytes; the notification
//! is a `u64` type (`0` = loopback) and the echoed `u64` data, 16 bytes. NVIDIA's structs are
//! in native byte order; every platform DOCA runs on (x86-64, Arm64) is little-endian, which
//! is what is written here. A message of any other length is refused, as NVIDIA's unpack
//! checks the exact size.
//!
//! | message | type (`u64`) | fields |
//! | --- | --- | --- |
//! | [`Cmd::Loopback`] | 0 | `value: u64` |
//! | [`Notif::Loopback`] | 0 | `value: u64` |

use super::{DecodeError, Reader, Writer};
use crate::{Arm, Command, Notifications, Plugin, Status, WorkerCtx};

/// The shared object cargo builds for this plugin.
pub const FILE_NAME: &str = "libworker_graph.so";
/// The name the service lists it under: the file name without `lib` and `.so` (docs/urom-soft.md).
pub const PLUGIN_NAME: &str = "worker_graph";
/// The version `worker_graph` reports (NVIDIA's host library checks for 1).
pub const VERSION: u64 = 1;
/// The type of the loopback command and of its notification.
const LOOPBACK: u64 = 0;

/// A `worker_graph` command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmd {
    /// Answer with the same value.
    Loopback {
        /// Any value.
        value: u64,
    },
}

/// A `worker_graph` notification body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notif {
    /// The answer to [`Cmd::Loopback`].
    Loopback {
        /// The command's value.
        value: u64,
    },
}

impl Cmd {
    /// The packed command.
    pub fn encode(&self) -> Vec<u8> {
        match *self {
            Cmd::Loopback { value } => Writer::default().u64(LOOPBACK).u64(value).done(),
        }
    }

    /// Parses a packed command.
    pub fn decode(buf: &[u8]) -> Result<Cmd, DecodeError> {
        let mut r = Reader::new(buf, "worker_graph command");
        let cmd = match r.u64()? {
            LOOPBACK => Cmd::Loopback { value: r.u64()? },
            _ => return Err(r.unknown_tag()),
        };
        r.finish()?;
        Ok(cmd)
    }
}

impl Notif {
    /// The packed notification body.
    pub fn encode(&self) -> Vec<u8> {
        match *self {
            Notif::Loopback { value } => Writer::default().u64(LOOPBACK).u64(value).done(),
        }
    }

    /// Parses a notification body.
    pub fn decode(buf: &[u8]) -> Result<Notif, DecodeError> {
        let mut r = Reader::new(buf, "worker_graph notification");
        let n = match r.u64()? {
            LOOPBACK => Notif::Loopback { value: r.u64()? },
            _ => return Err(r.unknown_tag()),
        };
        r.finish()?;
        Ok(n)
    }
}

// ---- the worker side ----

/// The loopback plugin; it keeps no state.
pub struct Graph;

impl Plugin for Graph {
    const VERSION: u64 = VERSION;

    fn open(_: &WorkerCtx) -> Result<Self, Status> {
        Ok(Graph)
    }

    fn command(&mut self, _: &WorkerCtx, cmd: Command<'_>, out: &mut Notifications) -> Result<(), Status> {
        match Cmd::decode(cmd.payload)? {
            Cmd::Loopback { value } => out.push(cmd.reply_to().ok(Notif::Loopback { value }.encode())),
        }
        Ok(())
    }

    fn arm(&mut self, _: &WorkerCtx) -> Arm {
        // Every answer is made in `command`: no work of its own.
        Arm::Idle
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        for value in [0, 1, u64::MAX, 0x0123_4567_89ab_cdef] {
            let c = Cmd::Loopback { value };
            assert_eq!(Cmd::decode(&c.encode()), Ok(c));
            let n = Notif::Loopback { value };
            assert_eq!(Notif::decode(&n.encode()), Ok(n));
        }
        // NVIDIA's struct urom_worker_graph_cmd { u64 type = 0; u64 data; } on a little-endian machine.
        assert_eq!(Cmd::Loopback { value: 5 }.encode(), [0, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(Notif::Loopback { value: 5 }.encode().len(), 16);
    }

    #[test]
    fn rejects_malformed() {
        let good = Cmd::Loopback { value: 9 }.encode();
        for cut in 0..good.len() {
            assert_eq!(Cmd::decode(&good[..cut]).unwrap_err().why, "truncated", "cut at {cut}");
            assert!(Notif::decode(&good[..cut]).is_err());
        }
        let mut long = good.clone();
        long.push(0);
        assert_eq!(Cmd::decode(&long).unwrap_err().why, "trailing bytes");
        let mut bad_tag = good;
        bad_tag[0] = 1;
        assert_eq!(Cmd::decode(&bad_tag).unwrap_err().why, "unknown tag");
        assert_eq!(crate::Status::from(Cmd::decode(&[]).unwrap_err()), crate::Status::INVALID_VALUE);
    }
}
