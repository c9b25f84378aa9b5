//! `worker_sandbox`: tagged messages between the workers of a domain, in the formats of
//! NVIDIA's `worker_sandbox` sample.
//!
//! A command is `struct urom_worker_sandbox_cmd`: a `u64` type, then a union of the per-type
//! structs ([`CMD_LEN`] = 72 bytes in all, with UCX >= 1.15's 48-byte `ucp_mem_map_params_t`
//! inside the memory-map struct), then the type's trailing bytes; a notification is
//! `struct urom_worker_notify_sandbox` ([`NOTIF_LEN`] = 48 bytes) followed by received data.
//! All fields are `u64` (little-endian) except the UCX status, an `i8` (`ucs_status_t` is a
//! packed enum). Offsets below are from the start of the message.
//!
//! | message | type | fields | trailing |
//! | --- | --- | --- | --- |
//! | [`Cmd::MemMap`] | 0 | context @8, `ucp_mem_map_params_t` @16 (48 bytes), memh length @64 | the exported memh |
//! | [`Cmd::TagSend`] | 1 | context @8, dest @16, buffer @24, count @32, tag @40, memh_id @48 | `count` data bytes when memh_id is 0 (inline) |
//! | [`Cmd::TagRecv`] | 2 | context @8, buffer @16, count @24, tag @32, tag_mask @40, memh_id @48 | — |
//! | [`Notif::MemMap`] | 0 | context @8, memh_id @16 | — |
//! | [`Notif::TagSend`] | 1 | context @8, status `i8` @16 | — |
//! | [`Notif::TagRecv`] | 2 | context @8, buffer @16, count @24, sender_tag @32, status `i8` @40 | `count` data bytes when buffer is not 0 (inline) |
//!
//! Semantics (as UCX tag matching, which NVIDIA's plugin uses): [`Cmd::TagSend`] sends its
//! inline data under `tag` to the sandbox of domain member `dest` (a worker id) and is answered
//! once sent; [`Cmd::TagRecv`] is answered with the oldest message whose tag matches `tag`
//! under `tag_mask` (`(msg_tag ^ tag) & tag_mask == 0`), which may have arrived before it; a
//! message longer than the receive's `count` is truncated to it and answered with UCX's
//! `MESSAGE_TRUNCATED` and `DOCA_ERROR_DRIVER`. The soft provider has no UCX memory
//! registration, so memory maps and sends/receives through a mapped buffer (`memh_id` not 0)
//! are answered `DOCA_ERROR_NOT_SUPPORTED` (with the notification body and UCX's
//! `UNSUPPORTED`). A notification carries the command's `context`.

use super::{DecodeError, Reader, Writer};

mod worker;
pub use worker::Sandbox;

/// The shared object cargo builds for this plugin.
pub const FILE_NAME: &str = "libworker_sandbox.so";
/// The name the service lists it under: the file name without `lib` and `.so` (docs/urom-soft.md).
pub const PLUGIN_NAME: &str = "worker_sandbox";
/// The version `worker_sandbox` reports (NVIDIA's host library checks for 1).
pub const VERSION: u64 = 1;
/// The largest inline data of one message; a larger send is answered `DOCA_ERROR_TOO_BIG`.
/// The host's `max_msg_size` must also hold the notification that carries it.
pub const MAX_DATA: usize = 64 * 1024;
/// Bytes of a command before its trailing data: the type and the largest union member.
pub const CMD_LEN: usize = 72;
/// Bytes of a notification before its inline data.
pub const NOTIF_LEN: usize = 48;
/// `sizeof(ucp_mem_map_params_t)` in UCX >= 1.15 (the version NVIDIA's samples need).
const MAP_PARAMS_LEN: usize = 48;

const MEM_MAP: u64 = 0;
const TAG_SEND: u64 = 1;
const TAG_RECV: u64 = 2;

/// UCX status codes the sandbox reports (`ucs_status_t`, an `i8`).
pub mod ucs {
    /// `UCS_OK`.
    pub const OK: i8 = 0;
    /// `UCS_ERR_NO_MEMORY`.
    pub const ERR_NO_MEMORY: i8 = -4;
    /// `UCS_ERR_INVALID_PARAM`.
    pub const ERR_INVALID_PARAM: i8 = -5;
    /// `UCS_ERR_UNREACHABLE`: the destination's socket is gone.
    pub const ERR_UNREACHABLE: i8 = -6;
    /// `UCS_ERR_INVALID_ADDR`: no such domain member.
    pub const ERR_INVALID_ADDR: i8 = -7;
    /// `UCS_ERR_MESSAGE_TRUNCATED`.
    pub const ERR_MESSAGE_TRUNCATED: i8 = -9;
    /// `UCS_ERR_UNSUPPORTED`.
    pub const ERR_UNSUPPORTED: i8 = -22;
    /// `UCS_ERR_IO_ERROR`.
    pub const ERR_IO_ERROR: i8 = -3;
}

/// A `worker_sandbox` command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cmd {
    /// Map host memory for sends/receives through it (`ucp_mem_map` of an exported memh).
    MemMap {
        /// Returned in the notification.
        context: u64,
        /// The exported memory handle (the map parameters are sent as zeros by [`Cmd::encode`]
        /// and ignored by [`Cmd::decode`]).
        exported_memh: Vec<u8>,
    },
    /// Send `data` (inline) under `tag` to domain member `dest`.
    TagSend {
        /// Returned in the notification.
        context: u64,
        /// The destination's worker id in the domain.
        dest: u64,
        /// The message tag.
        tag: u64,
        /// The message.
        data: Vec<u8>,
    },
    /// A send from memory mapped with [`Cmd::MemMap`] (`memh_id` not 0).
    TagSendMapped {
        /// Returned in the notification.
        context: u64,
        /// The destination's worker id in the domain.
        dest: u64,
        /// The buffer's address in the host's memory.
        buffer: u64,
        /// Bytes to send.
        count: u64,
        /// The message tag.
        tag: u64,
        /// The mapped memory's id ([`Notif::MemMap`]).
        memh_id: u64,
    },
    /// Receive (inline) the oldest message whose tag matches `tag` under `tag_mask`.
    TagRecv {
        /// Returned in the notification.
        context: u64,
        /// The most bytes to receive; a longer message is truncated.
        count: u64,
        /// The tag to match.
        tag: u64,
        /// The tag bits that must match.
        tag_mask: u64,
    },
    /// A receive into memory mapped with [`Cmd::MemMap`] (`memh_id` not 0).
    TagRecvMapped {
        /// Returned in the notification.
        context: u64,
        /// The buffer's address in the host's memory.
        buffer: u64,
        /// The most bytes to receive.
        count: u64,
        /// The tag to match.
        tag: u64,
        /// The tag bits that must match.
        tag_mask: u64,
        /// The mapped memory's id.
        memh_id: u64,
    },
}

/// A `worker_sandbox` notification body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notif {
    /// The answer to [`Cmd::MemMap`].
    MemMap {
        /// The command's context.
        context: u64,
        /// The id later commands name the mapping by.
        memh_id: u64,
    },
    /// The answer to a send.
    TagSend {
        /// The command's context.
        context: u64,
        /// The UCX status ([`ucs`]).
        status: i8,
    },
    /// The answer to [`Cmd::TagRecv`]: the data inline.
    TagRecv {
        /// The command's context.
        context: u64,
        /// The matched message's tag.
        sender_tag: u64,
        /// The UCX status ([`ucs`]).
        status: i8,
        /// The received bytes.
        data: Vec<u8>,
    },
    /// The answer to [`Cmd::TagRecvMapped`]: the data went to the mapped buffer.
    TagRecvMapped {
        /// The command's context.
        context: u64,
        /// Bytes received.
        count: u64,
        /// The matched message's tag.
        sender_tag: u64,
        /// The UCX status ([`ucs`]).
        status: i8,
    },
}

/// The non-zero `buffer` an inline receive's notification carries: in NVIDIA's plugin it is
/// the worker-side address of the data that follows; the host only tests it against NULL.
const INLINE_MARK: u64 = 1;

impl Cmd {
    /// An inline send of `data` under `tag` to member `dest`.
    pub fn send(context: u64, dest: u64, tag: u64, data: Vec<u8>) -> Cmd {
        Cmd::TagSend { context, dest, tag, data }
    }

    /// An inline receive of the next message of exactly `tag`, up to [`MAX_DATA`] bytes.
    pub fn recv(context: u64, tag: u64) -> Cmd {
        Cmd::TagRecv { context, count: MAX_DATA as u64, tag, tag_mask: u64::MAX }
    }

    /// The packed command.
    pub fn encode(&self) -> Vec<u8> {
        let w = Writer::default();
        let w = match self {
            Cmd::MemMap { context, exported_memh } => w
                .u64(MEM_MAP)
                .u64(*context)
                .pad_to(16 + MAP_PARAMS_LEN)
                .u64(exported_memh.len() as u64)
                .pad_to(CMD_LEN)
                .raw(exported_memh),
            Cmd::TagSend { context, dest, tag, data } => w
                .u64(TAG_SEND)
                .u64(*context)
                .u64(*dest)
                .u64(0)
                .u64(data.len() as u64)
                .u64(*tag)
                .u64(0)
                .pad_to(CMD_LEN)
                .raw(data),
            Cmd::TagSendMapped { context, dest, buffer, count, tag, memh_id } => w
                .u64(TAG_SEND)
                .u64(*context)
                .u64(*dest)
                .u64(*buffer)
                .u64(*count)
                .u64(*tag)
                .u64(*memh_id)
                .pad_to(CMD_LEN),
            Cmd::TagRecv { context, count, tag, tag_mask } => {
                w.u64(TAG_RECV).u64(*context).u64(0).u64(*count).u64(*tag).u64(*tag_mask).u64(0).pad_to(CMD_LEN)
            }
            Cmd::TagRecvMapped { context, buffer, count, tag, tag_mask, memh_id } => w
                .u64(TAG_RECV)
                .u64(*context)
                .u64(*buffer)
                .u64(*count)
                .u64(*tag)
                .u64(*tag_mask)
                .u64(*memh_id)
                .pad_to(CMD_LEN),
        };
        w.done()
    }

    /// Parses a packed command: exactly [`CMD_LEN`] bytes plus the type's trailing bytes, as
    /// NVIDIA's plugin checks.
    pub fn decode(buf: &[u8]) -> Result<Cmd, DecodeError> {
        let mut r = Reader::new(buf, "worker_sandbox command");
        let ty = r.u64()?;
        let cmd = match ty {
            MEM_MAP => {
                let context = r.u64()?;
                r.skip(MAP_PARAMS_LEN)?;
                let len = r.u64()?;
                let n = usize::try_from(len).map_err(|_| r.invalid("memh length"))?;
                if r.remaining() != n {
                    return Err(r.invalid("memh length disagrees with the message"));
                }
                Cmd::MemMap { context, exported_memh: r.raw(n)?.to_vec() }
            }
            TAG_SEND => {
                let (context, dest, buffer, count, tag, memh_id) =
                    (r.u64()?, r.u64()?, r.u64()?, r.u64()?, r.u64()?, r.u64()?);
                r.skip(CMD_LEN - 56)?;
                if memh_id == 0 {
                    let n = usize::try_from(count).map_err(|_| r.invalid("count"))?;
                    if r.remaining() != n {
                        return Err(r.invalid("count disagrees with the inline data"));
                    }
                    Cmd::TagSend { context, dest, tag, data: r.raw(n)?.to_vec() }
                } else {
                    Cmd::TagSendMapped { context, dest, buffer, count, tag, memh_id }
                }
            }
            TAG_RECV => {
                let (context, buffer, count, tag, tag_mask, memh_id) =
                    (r.u64()?, r.u64()?, r.u64()?, r.u64()?, r.u64()?, r.u64()?);
                r.skip(CMD_LEN - 56)?;
                if memh_id == 0 {
                    Cmd::TagRecv { context, count, tag, tag_mask }
                } else {
                    Cmd::TagRecvMapped { context, buffer, count, tag, tag_mask, memh_id }
                }
            }
            _ => return Err(r.unknown_tag()),
        };
        r.finish()?;
        Ok(cmd)
    }

    /// The command's `context`, echoed by its notification.
    pub fn context(&self) -> u64 {
        match self {
            Cmd::MemMap { context, .. }
            | Cmd::TagSend { context, .. }
            | Cmd::TagSendMapped { context, .. }
            | Cmd::TagRecv { context, .. }
            | Cmd::TagRecvMapped { context, .. } => *context,
        }
    }
}

impl Notif {
    /// The packed notification body.
    pub fn encode(&self) -> Vec<u8> {
        let w = Writer::default();
        let w = match self {
            Notif::MemMap { context, memh_id } => w.u64(MEM_MAP).u64(*context).u64(*memh_id).pad_to(NOTIF_LEN),
            Notif::TagSend { context, status } => {
                w.u64(TAG_SEND).u64(*context).raw(&status.to_le_bytes()).pad_to(NOTIF_LEN)
            }
            Notif::TagRecv { context, sender_tag, status, data } => w
                .u64(TAG_RECV)
                .u64(*context)
                .u64(INLINE_MARK)
                .u64(data.len() as u64)
                .u64(*sender_tag)
                .raw(&status.to_le_bytes())
                .pad_to(NOTIF_LEN)
                .raw(data),
            Notif::TagRecvMapped { context, count, sender_tag, status } => w
                .u64(TAG_RECV)
                .u64(*context)
                .u64(0)
                .u64(*count)
                .u64(*sender_tag)
                .raw(&status.to_le_bytes())
                .pad_to(NOTIF_LEN),
        };
        w.done()
    }

    /// Parses a notification body.
    pub fn decode(buf: &[u8]) -> Result<Notif, DecodeError> {
        let mut r = Reader::new(buf, "worker_sandbox notification");
        let ty = r.u64()?;
        let context = r.u64()?;
        let n = match ty {
            MEM_MAP => {
                let memh_id = r.u64()?;
                r.skip(NOTIF_LEN - 24)?;
                Notif::MemMap { context, memh_id }
            }
            TAG_SEND => {
                let status = r.raw(1)?[0] as i8;
                r.skip(NOTIF_LEN - 17)?;
                Notif::TagSend { context, status }
            }
            TAG_RECV => {
                let (buffer, count, sender_tag) = (r.u64()?, r.u64()?, r.u64()?);
                let status = r.raw(1)?[0] as i8;
                r.skip(NOTIF_LEN - 41)?;
                if buffer == 0 {
                    Notif::TagRecvMapped { context, count, sender_tag, status }
                } else {
                    let n = usize::try_from(count).map_err(|_| r.invalid("count"))?;
                    if r.remaining() != n {
                        return Err(r.invalid("count disagrees with the inline data"));
                    }
                    Notif::TagRecv { context, sender_tag, status, data: r.raw(n)?.to_vec() }
                }
            }
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
            Cmd::send(5, 1 << 63, 7, b"hello".to_vec()),
            Cmd::send(0, 0, u64::MAX, vec![]),
            Cmd::recv(9, 42),
            Cmd::TagRecv { context: 1, count: 3, tag: 0xF0, tag_mask: 0xF0 },
            Cmd::MemMap { context: 2, exported_memh: vec![1, 2, 3] },
            Cmd::TagSendMapped { context: 3, dest: 4, buffer: 0x1000, count: 64, tag: 5, memh_id: 6 },
            Cmd::TagRecvMapped { context: 3, buffer: 0x1000, count: 64, tag: 5, tag_mask: !0, memh_id: 6 },
        ];
        for c in cmds {
            assert_eq!(Cmd::decode(&c.encode()), Ok(c));
        }
        let notifs = [
            Notif::TagSend { context: 3, status: ucs::OK },
            Notif::TagSend { context: 3, status: ucs::ERR_UNREACHABLE },
            Notif::TagRecv { context: 3, sender_tag: 8, status: ucs::OK, data: vec![0xff; 1000] },
            Notif::TagRecv { context: 0, sender_tag: 0, status: ucs::ERR_MESSAGE_TRUNCATED, data: vec![] },
            Notif::TagRecvMapped { context: 1, count: 10, sender_tag: 2, status: ucs::OK },
            Notif::MemMap { context: 1, memh_id: 77 },
        ];
        for n in notifs {
            assert_eq!(Notif::decode(&n.encode()), Ok(n));
        }
    }

    #[test]
    fn layouts_are_nvidias_structs() {
        let send = Cmd::send(0x11, 0x22, 0x33, b"ab".to_vec()).encode();
        assert_eq!(send.len(), CMD_LEN + 2);
        let at = |b: &[u8], o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
        assert_eq!((at(&send, 0), at(&send, 8), at(&send, 16)), (TAG_SEND, 0x11, 0x22));
        assert_eq!((at(&send, 24), at(&send, 32), at(&send, 40), at(&send, 48)), (0, 2, 0x33, 0));
        assert_eq!(&send[CMD_LEN..], b"ab");
        let recv = Cmd::recv(1, 2).encode();
        assert_eq!(recv.len(), CMD_LEN);
        assert_eq!((at(&recv, 24), at(&recv, 32), at(&recv, 40)), (MAX_DATA as u64, 2, u64::MAX));
        let n = Notif::TagRecv { context: 4, sender_tag: 5, status: -9, data: b"xyz".to_vec() }.encode();
        assert_eq!(n.len(), NOTIF_LEN + 3);
        assert_eq!((at(&n, 0), at(&n, 8), at(&n, 24), at(&n, 32), n[40] as i8), (TAG_RECV, 4, 3, 5, -9));
        assert_ne!(at(&n, 16), 0, "an inline receive's buffer is not NULL");
        assert_eq!(Notif::TagSend { context: 1, status: 0 }.encode().len(), NOTIF_LEN);
    }

    #[test]
    fn padding_is_ignored_and_lengths_are_checked() {
        // NVIDIA's plugin leaves struct padding uninitialised: decoding must not care.
        let mut n = Notif::TagSend { context: 1, status: 0 }.encode();
        n[17..NOTIF_LEN].fill(0xAA);
        assert_eq!(Notif::decode(&n), Ok(Notif::TagSend { context: 1, status: 0 }));
        let mut c = Cmd::recv(1, 2).encode();
        c[56..CMD_LEN].fill(0xAA);
        assert_eq!(Cmd::decode(&c), Ok(Cmd::recv(1, 2)));
        // Inline data must be exactly `count` bytes.
        let mut s = Cmd::send(1, 2, 3, b"abc".to_vec()).encode();
        s.push(0);
        assert!(Cmd::decode(&s).is_err());
        s.truncate(CMD_LEN + 2);
        assert!(Cmd::decode(&s).is_err());
        for cut in 0..CMD_LEN {
            assert!(Cmd::decode(&Cmd::recv(1, 2).encode()[..cut]).is_err(), "cut at {cut}");
        }
        let mut long = Cmd::recv(1, 2).encode();
        long.push(1);
        assert_eq!(Cmd::decode(&long).unwrap_err().why, "trailing bytes");
        let mut bad = Cmd::recv(1, 2).encode();
        bad[0] = 3;
        assert_eq!(Cmd::decode(&bad).unwrap_err().why, "unknown tag");
    }
}
