//! One `AF_UNIX`/`SOCK_SEQPACKET` connection of the host side: a non-blocking socket, the
//! packets that could not be sent yet, and a receive buffer.
//!
//! Sending never blocks and never drops: a packet the kernel does not take now (`EAGAIN`) waits
//! in `out`, in order, and [`Conn::flush`] retries it from the owner's progress hook. Receiving
//! returns one whole packet at a time (SEQPACKET keeps the framing), with at most one file
//! descriptor passed alongside (`SCM_RIGHTS`, the data connection of `Spawned`). A packet larger
//! than the buffer is a protocol error, reported like a hang-up: the owner drops the connection.
//! The socket calls are the shared helpers of [`crate::urom::proto`].
//!
//! A data connection may also carry a shared-memory [`Channel`] (see `urom::channel`):
//! [`Conn::send`] and [`Conn::recv_if_ready`] then move what fits through it and keep the
//! order of the two paths; the socket stays the connection (setup, big messages, hang-up).

use std::collections::VecDeque;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::pe::{doca_pe, SCAN_FRESH};
use crate::types::*;
use crate::urom::channel::{Channel, SLOTS, SLOT_BYTES};
use crate::urom::proto;

/// What a receive found.
pub(crate) enum Recv {
    /// A packet of this many bytes (in [`Conn::packet`]) and maybe a descriptor.
    Packet(usize, Option<OwnedFd>),
    /// Nothing to read now.
    Empty,
    /// The peer closed (or reset) the connection, or sent a packet we cannot take.
    HangUp,
}

/// How late a busy PE may see a socket that carries only rare traffic needing no microsecond
/// latency: a control connection (the daemon's answers, a worker's start and end), and a data
/// connection whose channel says no packet is on its way (then the socket only has a hang-up
/// to tell). [`Conn::recv_if_ready`] asks the PE with it; a sleeping PE still wakes on the
/// socket at once. With the PE's default ([`SCAN_FRESH`], 20 µs) for every socket, a host
/// whose commands go through memory paid an `epoll_wait` (~0.4 µs here) every other offloaded
/// 8 B allreduce for sockets that had nothing.
pub(crate) const QUIET_SOCKET_FRESH: Duration = Duration::from_millis(1);

/// A host-side connection.
pub(crate) struct Conn {
    fd: OwnedFd,
    out: VecDeque<Vec<u8>>,
    buf: Vec<u8>,
    chan: Option<Channel>,
    /// How late its socket may be seen when nothing says a packet is on its way: the PE's
    /// [`SCAN_FRESH`], or [`QUIET_SOCKET_FRESH`] for a control connection.
    fresh: Duration,
}

fn io_to_doca(e: &std::io::Error) -> doca_error_t {
    use std::io::ErrorKind as K;
    match e.kind() {
        K::InvalidInput => DOCA_ERROR_INVALID_VALUE,
        K::PermissionDenied => DOCA_ERROR_NOT_PERMITTED,
        _ => DOCA_ERROR_NOT_CONNECTED,
    }
}

impl Conn {
    /// Connects to the daemon at `path`. Nobody listening (no file, refused, or a file that is
    /// not a socket) is `DOCA_ERROR_NOT_CONNECTED`; a socket we may not open is
    /// `DOCA_ERROR_NOT_PERMITTED`; a path too long for `sun_path` is `DOCA_ERROR_INVALID_VALUE`.
    pub(crate) fn connect(path: &Path, max_packet: usize) -> Result<Conn, doca_error_t> {
        let fd = proto::connect(path, true).map_err(|e| io_to_doca(&e))?;
        Conn::from_fd(fd, max_packet)
    }

    /// Wraps a connected SEQPACKET socket (e.g. received with `SCM_RIGHTS`), made non-blocking.
    pub(crate) fn from_fd(fd: OwnedFd, max_packet: usize) -> Result<Conn, doca_error_t> {
        proto::set_nonblocking(fd.as_fd(), true).map_err(|_| DOCA_ERROR_OPERATING_SYSTEM)?;
        // Best effort: a packet that still does not fit fails its send with TOO_BIG.
        let _ = proto::fit_packet(fd.as_fd(), max_packet);
        Ok(Conn { fd, out: VecDeque::new(), buf: vec![0; max_packet.max(64)], chan: None, fresh: SCAN_FRESH })
    }

    /// Marks this connection as a control connection: its socket is looked at within
    /// [`QUIET_SOCKET_FRESH`] while the PE progresses busy.
    pub(crate) fn set_control(&mut self) {
        self.fresh = QUIET_SOCKET_FRESH;
    }

    /// Offers the peer (a worker) a shared-memory channel: creates it, sends it as this
    /// connection's next packet and uses it from now on. Must come before anything else is
    /// sent. An error leaves the connection as it was (socket only).
    pub(crate) fn open_channel(&mut self) -> Result<(), doca_error_t> {
        debug_assert!(self.chan.is_none() && self.out.is_empty());
        let ch = Channel::create()?;
        let msg = proto::HostToWorker::Channel { slots: SLOTS as u32, slot_bytes: SLOT_BYTES as u32 }.encode();
        proto::send_msg_fds(self.fd.as_fd(), &msg, &ch.fds_to_pass()).map_err(|_| DOCA_ERROR_CONNECTION_ABORTED)?;
        self.chan = Some(ch);
        Ok(())
    }

    /// The channel's wake-up descriptor, if there is a channel (for PE registration).
    pub(crate) fn wake_fd(&self) -> Option<RawFd> {
        self.chan.as_ref().map(|c| c.wake_fd())
    }

    /// Called when the PE arms (the owner's `has_work` hook): tells the peer to wake us, or
    /// says a message is already waiting. `true`: there is work now.
    pub(crate) fn ready_to_sleep_or_work(&self) -> bool {
        self.chan.as_ref().is_some_and(|c| !c.prepare_sleep())
    }

    /// The socket (for PE registration).
    pub(crate) fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// The bytes of the last packet [`Conn::recv`] returned.
    pub(crate) fn packet(&self, len: usize) -> &[u8] {
        &self.buf[..len]
    }

    /// Whether packets wait for room in the socket.
    pub(crate) fn has_backlog(&self) -> bool {
        !self.out.is_empty()
    }

    /// One non-blocking send. Ok(false): the socket is full now.
    fn send_now(&self, msg: &[u8]) -> Result<bool, doca_error_t> {
        match proto::send_msg(self.fd.as_fd(), msg, None) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(false),
            Err(e) => Err(match e.raw_os_error() {
                Some(libc::EMSGSIZE) => DOCA_ERROR_TOO_BIG,
                Some(libc::ENOBUFS) | Some(libc::ENOMEM) => DOCA_ERROR_NO_MEMORY,
                _ => DOCA_ERROR_CONNECTION_ABORTED,
            }),
        }
    }

    /// Sends `msg`, or queues it behind earlier packets if the socket is full.
    /// Errors: `TOO_BIG` (larger than the socket takes; nothing queued) or
    /// `CONNECTION_ABORTED` (the peer is gone).
    pub(crate) fn send(&mut self, msg: Vec<u8>) -> Result<(), doca_error_t> {
        if self.chan.as_mut().is_some_and(|ch| ch.try_send(&msg)) {
            return Ok(());
        }
        self.send_on_socket(msg)
    }

    /// [`Conn::send`] of the message that is `parts` one after the other: copied straight
    /// into a channel slot when it goes that way, joined into one packet only for the socket.
    pub(crate) fn send_parts(&mut self, parts: &[&[u8]]) -> Result<(), doca_error_t> {
        if self.chan.as_mut().is_some_and(|ch| ch.try_send_parts(parts)) {
            return Ok(());
        }
        self.send_on_socket(parts.concat())
    }

    fn send_on_socket(&mut self, msg: Vec<u8>) -> Result<(), doca_error_t> {
        if !self.out.is_empty() {
            self.out.push_back(msg);
            self.flush()?;
        } else if !self.send_now(&msg)? {
            self.out.push_back(msg);
        }
        // Sent or queued (not refused): counted for the channel's order rule.
        if let Some(ch) = &mut self.chan {
            ch.sent_on_socket();
        }
        Ok(())
    }

    /// Sends what waits in the queue while the socket takes it. Ok(true) if anything went out.
    pub(crate) fn flush(&mut self) -> Result<bool, doca_error_t> {
        let mut did = false;
        while let Some(m) = self.out.front() {
            if !self.send_now(m)? {
                break;
            }
            self.out.pop_front();
            did = true;
        }
        Ok(did)
    }

    /// [`recv`](Conn::recv), unless `pe` (the PE the socket is registered with, in level
    /// mode) says it is quiet: the one look per progress that `doca_pe::fd_ready` takes for
    /// all of a PE's sockets, instead of a `recvmsg` on each.
    ///
    /// With a channel, its messages and the socket's packets come in the order they were
    /// sent (see `urom::channel`).
    pub(crate) fn recv_if_ready(&mut self, pe: Option<&doca_pe>) -> Recv {
        if let Some(ch) = &mut self.chan {
            // DOCA's idle protocol progresses once more between the arm (which asked the
            // worker to wake us) and the wait: only a PE that is not armed is awake.
            if !pe.is_some_and(|pe| pe.is_armed()) {
                ch.awake();
            }
            match ch.next(&mut self.buf) {
                Ok(Some(n)) => return Recv::Packet(n, None),
                Ok(None) => {}
                Err(_) => return Recv::HangUp,
            }
        }
        // Once the worker attached, its socket packets are counted in the channel: the
        // socket needs the short look only while one is on its way.
        let quiet = self.chan.as_mut().is_some_and(|ch| ch.peer_attached() && !ch.socket_pending());
        let fresh = if quiet { QUIET_SOCKET_FRESH } else { self.fresh };
        if !pe.is_none_or(|pe| pe.fd_ready_within(self.fd(), fresh)) {
            return Recv::Empty;
        }
        let r = self.recv();
        if let (Recv::Empty, Some(pe)) = (&r, pe) {
            pe.fd_empty(self.fd());
        }
        if let (Recv::Packet(n, _), Some(ch)) = (&r, &mut self.chan) {
            if ch.on_socket_packet(&self.buf[..*n]) {
                // Ring messages sent before this packet come first.
                return match ch.next(&mut self.buf) {
                    Ok(Some(n)) => Recv::Packet(n, None),
                    _ => Recv::HangUp,
                };
            }
        }
        r
    }

    /// Receives one packet without blocking.
    pub(crate) fn recv(&mut self) -> Recv {
        match proto::recv_msg(self.fd.as_fd(), &mut self.buf) {
            // Our packets are never empty: 0 bytes is the peer's hang-up.
            Ok((0, _)) => Recv::HangUp,
            Ok((n, fd)) => Recv::Packet(n, fd),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Recv::Empty,
            // The peer closed with our packets unread. Linux reports that reset on the first
            // read even when packets the peer sent before closing are still queued (a refusal,
            // a last notification): those are real answers, so read them before giving up.
            Err(e) if e.raw_os_error() == Some(libc::ECONNRESET) => {
                match proto::recv_msg(self.fd.as_fd(), &mut self.buf) {
                    Ok((n, fd)) if n > 0 => Recv::Packet(n, fd),
                    _ => Recv::HangUp,
                }
            }
            // A packet we cannot take whole: drop the connection.
            Err(_) => Recv::HangUp,
        }
    }

    /// Receives one packet, waiting until `deadline` at most (the synchronous service start).
    /// `None` on timeout.
    pub(crate) fn recv_until(&mut self, deadline: Instant) -> Option<Recv> {
        loop {
            match self.recv() {
                Recv::Empty => {}
                r => return Some(r),
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            let ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
            let mut p = libc::pollfd { fd: self.fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
            // SAFETY: one valid pollfd for the duration of the call.
            unsafe { libc::poll(&mut p, 1, ms) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (Conn, Conn) {
        let (a, b) = proto::seqpacket_pair(false).unwrap();
        (Conn::from_fd(a, 256).unwrap(), Conn::from_fd(b, 256).unwrap())
    }

    #[test]
    fn full_socket_queues_in_order_and_never_drops() {
        let (mut a, mut b) = pair();
        let mut sent = 0u32;
        while !a.has_backlog() {
            a.send(sent.to_le_bytes().repeat(16)).unwrap();
            sent += 1;
            assert!(sent < 1_000_000);
        }
        for _ in 0..10 {
            a.send(sent.to_le_bytes().repeat(16)).unwrap();
            sent += 1;
        }
        let mut next = 0u32;
        for _ in 0..10_000_000 {
            a.flush().unwrap();
            match b.recv() {
                Recv::Packet(n, fd) => {
                    assert!(fd.is_none());
                    assert_eq!(b.packet(n), &next.to_le_bytes().repeat(16)[..]);
                    next += 1;
                    if next == sent {
                        break;
                    }
                }
                Recv::Empty => {}
                Recv::HangUp => panic!("hang-up"),
            }
        }
        assert_eq!(next, sent);
        assert!(!a.has_backlog());
        assert!(matches!(b.recv(), Recv::Empty));
    }

    #[test]
    fn hang_up_and_oversized_packets() {
        let (a, mut b) = pair();
        // A packet larger than the receive buffer is refused like a hang-up.
        assert!(a.send_now(&[7u8; 300]).unwrap());
        assert!(matches!(b.recv(), Recv::HangUp));
        drop(a);
        assert!(matches!(b.recv(), Recv::HangUp));
        // A peer that closes with our packet unread: what it sent before is still delivered.
        let (c, mut d) = pair();
        d.send(vec![1; 8]).unwrap();
        c.send_now(&[5; 16]).unwrap();
        drop(c);
        match d.recv() {
            Recv::Packet(n, _) => assert_eq!(d.packet(n), &[5; 16]),
            _ => panic!("the packet sent before the reset is lost"),
        }
        assert!(matches!(d.recv(), Recv::HangUp));
        assert_eq!(b.send(vec![1, 2, 3]), Err(DOCA_ERROR_CONNECTION_ABORTED));
    }

    #[test]
    fn connect_to_nothing_is_not_connected() {
        let p = std::env::temp_dir().join(format!("urom-conn-none-{}.sock", std::process::id()));
        assert_eq!(Conn::connect(&p, 64).err(), Some(DOCA_ERROR_NOT_CONNECTED));
        let long = "/tmp/".to_string() + &"x".repeat(200);
        assert_eq!(Conn::connect(Path::new(&long), 64).err(), Some(DOCA_ERROR_INVALID_VALUE));
    }
}
