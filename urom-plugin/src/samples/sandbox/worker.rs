//! The worker side of `worker_sandbox`: tagged send/receive between the workers of a UROM
//! domain (formats in the parent module).
//!
//! # Model
//! * **Transport.** Each plugin instance (one per worker process) owns a non-blocking
//!   `AF_UNIX` datagram socket bound in `open` to an abstract name unique per instance
//!   (`async-doca-urom-sandbox-<pid>-<n>-<random>`); that name is the plugin's address, which
//!   the domain exchange spreads to the other members. A datagram is `tag: u64` (LE) followed
//!   by the data; datagram boundaries are the message boundaries. The socket closes when the
//!   worker closes the plugin.
//! * **Send.** `TagSend` looks up the destination member's address (`WorkerCtx::addr`) and
//!   sends at once; if the receiver's queue is full (`EAGAIN`) the message waits in a FIFO that
//!   `progress` retries, and later sends queue behind it so one sender's messages keep their
//!   order. The send is answered once the kernel took the datagram. An unknown member is
//!   `NOT_FOUND` (UCX `INVALID_ADDR`), a member whose socket is gone `NOT_CONNECTED` (UCX
//!   `UNREACHABLE`), more than `MAX_DATA` bytes `TOO_BIG`; each error answer still carries the
//!   notification body with the command's context, as NVIDIA's plugin does.
//! * **Receive.** `progress` drains the socket (bounded per call) and gives each message to
//!   the oldest pending `TagRecv` whose tag matches under its mask; a message nobody waits for
//!   is queued and answers the next matching `TagRecv` at once (UCX's unexpected queue).
//! * **Mapped memory** (`MemMap`, `memh_id` not 0) needs UCX memory registration, which the
//!   soft provider does not have: `NOT_SUPPORTED`.
//! * **Trust.** Abstract socket names carry no permissions: any process in the same network
//!   namespace that learns the name (they are listed in `/proc/net/unix`) can send to it.
//!   This is a sample: it accepts such messages like any other and queues them without bound.
use std::collections::VecDeque;
use std::io::ErrorKind;
use std::os::fd::AsRawFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

use super::{ucs, Cmd, Notif, MAX_DATA, VERSION};
use crate::wire::bind_unique_datagram;
use crate::{Arm, Command, Notifications, Plugin, ReplyTo, Status, WorkerCtx};

/// Datagram header: the tag.
const TAG_LEN: usize = 8;
/// Datagrams handled per `progress` call, so one call never runs unbounded.
const DRAIN_PER_PROGRESS: usize = 256;

/// A message waiting for room in its receiver's queue.
struct PendingSend {
    reply: ReplyTo,
    context: u64,
    to: SocketAddr,
    datagram: Vec<u8>,
}

/// A posted receive.
struct PendingRecv {
    reply: ReplyTo,
    context: u64,
    tag: u64,
    tag_mask: u64,
    count: u64,
}

impl PendingRecv {
    fn matches(&self, tag: u64) -> bool {
        (tag ^ self.tag) & self.tag_mask == 0
    }

    /// The answer carrying message `data` sent under `tag`, truncated to the receive's size.
    fn answer(self, tag: u64, mut data: Vec<u8>) -> crate::Notification {
        let room = usize::try_from(self.count).unwrap_or(usize::MAX);
        let (doca, status) = if data.len() > room {
            data.truncate(room);
            (Status::DRIVER, ucs::ERR_MESSAGE_TRUNCATED)
        } else {
            (Status::SUCCESS, ucs::OK)
        };
        self.reply.with(doca, Notif::TagRecv { context: self.context, sender_tag: tag, status, data }.encode())
    }
}

/// The UCX status reported beside a DOCA error.
fn ucs_of(s: Status) -> i8 {
    match s {
        Status::NOT_FOUND => ucs::ERR_INVALID_ADDR,
        Status::NOT_CONNECTED | Status::CONNECTION_ABORTED | Status::CONNECTION_RESET => ucs::ERR_UNREACHABLE,
        Status::INVALID_VALUE | Status::TOO_BIG => ucs::ERR_INVALID_PARAM,
        Status::NO_MEMORY => ucs::ERR_NO_MEMORY,
        Status::NOT_SUPPORTED => ucs::ERR_UNSUPPORTED,
        _ => ucs::ERR_IO_ERROR,
    }
}

/// One sandbox instance: its socket and the queues described in the module docs.
pub struct Sandbox {
    sock: UnixDatagram,
    name: Vec<u8>,
    sends: VecDeque<PendingSend>,
    recvs: VecDeque<PendingRecv>,
    unexpected: VecDeque<(u64, Vec<u8>)>,
    buf: Vec<u8>,
}

impl Sandbox {
    /// Tries to send `p` now: `Ok(true)` sent, `Ok(false)` the receiver's queue is full.
    fn try_send(&self, p: &PendingSend) -> Result<bool, Status> {
        match self.sock.send_to_addr(&p.datagram, &p.to) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == ErrorKind::WouldBlock => Ok(false),
            Err(e) => Err(Status::from_io(&e)),
        }
    }

    /// Sends queued messages in order until one finds its receiver full.
    fn flush_sends(&mut self, out: &mut Notifications) {
        while let Some(p) = self.sends.front() {
            let outcome = self.try_send(p);
            match outcome {
                Ok(false) => break,
                Ok(true) => out.push(p.reply.ok(Notif::TagSend { context: p.context, status: ucs::OK }.encode())),
                Err(s) => out.push(send_error(p.reply, p.context, s)),
            }
            self.sends.pop_front();
        }
    }

    fn deliver(&mut self, tag: u64, data: Vec<u8>, out: &mut Notifications) {
        match self.recvs.iter().position(|r| r.matches(tag)) {
            Some(i) => {
                let r = self.recvs.remove(i).expect("found above");
                out.push(r.answer(tag, data));
            }
            None => self.unexpected.push_back((tag, data)),
        }
    }

    fn drain_socket(&mut self, out: &mut Notifications) {
        for _ in 0..DRAIN_PER_PROGRESS {
            let n = match self.sock.recv(&mut self.buf) {
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    crate::ffi::log(format_args!("worker_sandbox: receive failed: {e}"));
                    return;
                }
            };
            // The buffer is one byte larger than the largest valid datagram, so a full buffer
            // means a truncated, foreign message; shorter than a tag is foreign too.
            if n < TAG_LEN || n == self.buf.len() {
                crate::ffi::log(format_args!("worker_sandbox: dropped a malformed datagram of {n} bytes"));
                continue;
            }
            let mut tag = [0u8; TAG_LEN];
            tag.copy_from_slice(&self.buf[..TAG_LEN]);
            let data = self.buf[TAG_LEN..n].to_vec();
            self.deliver(u64::from_le_bytes(tag), data, out);
        }
    }

    /// An inline send: at once, or queued behind earlier sends that wait for room.
    fn send(
        &mut self,
        ctx: &WorkerCtx,
        reply: ReplyTo,
        msg: (u64, u64, u64, &[u8]),
        out: &mut Notifications,
    ) -> Result<(), Status> {
        let (context, dest, tag, data) = msg;
        if data.len() > MAX_DATA {
            return Err(Status::TOO_BIG);
        }
        let to = SocketAddr::from_abstract_name(ctx.addr(dest)?).map_err(|_| Status::INVALID_VALUE)?;
        let mut datagram = Vec::with_capacity(TAG_LEN + data.len());
        datagram.extend_from_slice(&tag.to_le_bytes());
        datagram.extend_from_slice(data);
        let p = PendingSend { reply, context, to, datagram };
        // Behind earlier queued sends, so messages leave in command order.
        if self.sends.is_empty() && self.try_send(&p)? {
            out.push(p.reply.ok(Notif::TagSend { context, status: ucs::OK }.encode()));
        } else {
            self.sends.push_back(p);
        }
        Ok(())
    }
}

/// A failed send's answer: the DOCA status and the body with the matching UCX status.
fn send_error(reply: ReplyTo, context: u64, s: Status) -> crate::Notification {
    reply.with(s, Notif::TagSend { context, status: ucs_of(s) }.encode())
}

impl Plugin for Sandbox {
    const VERSION: u64 = VERSION;

    fn open(_: &WorkerCtx) -> Result<Self, Status> {
        let (sock, name) = bind_unique_datagram("async-doca-urom-sandbox")?;
        Ok(Sandbox {
            sock,
            name,
            sends: VecDeque::new(),
            recvs: VecDeque::new(),
            unexpected: VecDeque::new(),
            buf: vec![0; TAG_LEN + MAX_DATA + 1],
        })
    }

    fn address(&self) -> &[u8] {
        &self.name
    }

    fn command(&mut self, ctx: &WorkerCtx, cmd: Command<'_>, out: &mut Notifications) -> Result<(), Status> {
        let reply = cmd.reply_to();
        match Cmd::decode(cmd.payload)? {
            Cmd::TagSend { context, dest, tag, data } => {
                if let Err(s) = self.send(ctx, reply, (context, dest, tag, &data), out) {
                    out.push(send_error(reply, context, s));
                }
            }
            Cmd::TagRecv { context, count, tag, tag_mask } => {
                let r = PendingRecv { reply, context, tag, tag_mask, count };
                match self.unexpected.iter().position(|(t, _)| r.matches(*t)) {
                    Some(i) => {
                        let (t, data) = self.unexpected.remove(i).expect("found above");
                        out.push(r.answer(t, data));
                    }
                    None => self.recvs.push_back(r),
                }
            }
            // No UCX memory registration on the soft provider.
            Cmd::MemMap { context, .. } => {
                out.push(reply.with(Status::NOT_SUPPORTED, Notif::MemMap { context, memh_id: 0 }.encode()))
            }
            Cmd::TagSendMapped { context, .. } => out.push(send_error(reply, context, Status::NOT_SUPPORTED)),
            Cmd::TagRecvMapped { context, tag, .. } => out.push(reply.with(
                Status::NOT_SUPPORTED,
                Notif::TagRecvMapped { context, count: 0, sender_tag: tag, status: ucs::ERR_UNSUPPORTED }.encode(),
            )),
        }
        Ok(())
    }

    fn progress(&mut self, _: &WorkerCtx, out: &mut Notifications) {
        self.flush_sends(out);
        self.drain_socket(out);
    }

    fn arm(&mut self, _: &WorkerCtx) -> Arm {
        // Sends waiting for room are work now; messages from peer workers arrive on the socket.
        if self.sends.is_empty() {
            Arm::Sleep(self.sock.as_raw_fd())
        } else {
            Arm::Busy
        }
    }
}
