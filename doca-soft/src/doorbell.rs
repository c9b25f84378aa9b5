//! Doorbells: a way for other threads and other processes to wake a progress engine.
//!
//! # Model
//!
//! A [`Doorbell`] is an `AF_UNIX` / `SOCK_DGRAM` socket bound to a name in the Linux
//! *abstract* socket namespace (`\0doca-soft.<pid>.<nonce>`), non-blocking and close-on-exec.
//! Each PE owns one and registers it in its epoll set, so a datagram arriving on it makes the
//! PE's notification handle readable. Abstract names live only as long as the socket: nothing
//! is created in the file system and nothing needs cleaning up, even after a crash.
//!
//! The doorbell is identified by a [`DoorbellAddr`]: 16 bytes of plain integers (pid and a
//! random nonce) that can be stored in shared memory, e.g. in a sync event's waiter table or
//! (later) in an RDMA connection's ring header. Anyone who knows the address calls [`ring`]:
//! one non-blocking `sendto` of a single byte. The byte carries no information; a doorbell
//! only says "look again". The owner [`Doorbell::drain`]s it when clearing the notification,
//! then re-checks the real state (counters, rings) in shared memory, so a drained ring is never
//! a lost wake-up.
//!
//! # Ring results
//! * delivered, or the receiver's queue is full (`EAGAIN`: it has been rung and not drained
//!   yet, which is just as good) → `Ok(())`;
//! * nobody is bound to that name any more (`ECONNREFUSED` / `ENOENT`): the owner is gone →
//!   `Err(DOCA_ERROR_NOT_FOUND)`, so callers can drop stale registrations;
//! * anything else → `Err(DOCA_ERROR_OPERATING_SYSTEM)`.
//!
//! # Threads
//! [`ring`] is thread-safe and may be called from any thread or process. A [`Doorbell`] itself
//! is owned by one PE and drained on that PE's thread.
//!
//! Rings are sent from one process-wide unbound socket. Because a unix datagram stays charged
//! to the *sender's* buffer until the receiver reads it, a full sender buffer (many receivers
//! that never drain) would also report `EAGAIN`; that case is told apart from "already rung"
//! by retrying once from a fresh socket, so a busy sender can never swallow a wake-up.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::OnceLock;

use crate::shm::random_nonzero_u64;
use crate::types::*;

/// Size in bytes of a [`DoorbellAddr`] (what a shared-memory slot must hold).
pub const DOORBELL_ADDR_LEN: usize = 16;

/// The address of a doorbell: small, fixed-size, plain data (safe to put in shared memory).
/// `pid == 0` never names a doorbell and can mark an empty slot.
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct DoorbellAddr {
    /// The owning process.
    pub pid: u64,
    /// A random value that makes the name unique (and hard to guess).
    pub nonce: u64,
}

const _: () = assert!(core::mem::size_of::<DoorbellAddr>() == DOORBELL_ADDR_LEN);

impl DoorbellAddr {
    /// The address as two words (for storage in atomics).
    pub fn to_words(self) -> [u64; 2] {
        [self.pid, self.nonce]
    }

    /// The address from two words written by [`DoorbellAddr::to_words`].
    pub fn from_words(w: [u64; 2]) -> DoorbellAddr {
        DoorbellAddr { pid: w[0], nonce: w[1] }
    }

    /// The abstract socket address (`sun_path[0] == 0`) and its length: `doca-soft.`, the pid
    /// in decimal, `.`, the nonce in 16 hex digits. Formatted into a stack buffer, not a
    /// `String`: a ring computes it every time, and a ring is on the path of every
    /// cross-process wake-up.
    fn sockaddr(self) -> (libc::sockaddr_un, libc::socklen_t) {
        use std::io::Write;
        // SAFETY: sockaddr_un is a plain C struct; all-zero is a valid value.
        let mut sa: libc::sockaddr_un = unsafe { core::mem::zeroed() };
        sa.sun_family = libc::AF_UNIX as libc::sa_family_t;
        // sun_path[0] stays 0: abstract namespace. The name is at most 10+20+1+16 bytes,
        // well below the 107 available.
        const ROOM: usize = 10 + 20 + 1 + 16;
        let mut name = [0u8; ROOM];
        let mut w = &mut name[..];
        write!(w, "doca-soft.{}.{:016x}", self.pid, self.nonce).expect("ROOM holds the longest name");
        let n = ROOM - w.len();
        for (dst, &src) in sa.sun_path[1..].iter_mut().zip(&name[..n]) {
            *dst = src as libc::c_char;
        }
        let len = core::mem::size_of::<libc::sa_family_t>() + 1 + n;
        (sa, len as libc::socklen_t)
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn dgram_socket() -> Result<OwnedFd, doca_error_t> {
    // SAFETY: socket(2) with constant arguments; no memory is passed.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(crate::shm::errno_to_doca(errno()));
    }
    // SAFETY: `fd` was just returned by socket(2) and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A bound doorbell socket. Dropping it closes the socket, which frees the name: later rings
/// of its address report `DOCA_ERROR_NOT_FOUND`.
#[derive(Debug)]
pub struct Doorbell {
    sock: OwnedFd,
    addr: DoorbellAddr,
}

impl Doorbell {
    /// Creates and binds a new doorbell with a fresh random name.
    pub fn new() -> Result<Doorbell, doca_error_t> {
        let sock = dgram_socket()?;
        // A collision of 64-bit random nonces is practically impossible; retry a few times
        // anyway rather than fail on EADDRINUSE.
        for _ in 0..8 {
            let addr = DoorbellAddr { pid: u64::from(std::process::id()), nonce: random_nonzero_u64() };
            let (sa, len) = addr.sockaddr();
            // SAFETY: `sa` is a valid sockaddr_un of `len` bytes for the duration of the call.
            let r = unsafe { libc::bind(sock.as_raw_fd(), (&sa as *const libc::sockaddr_un).cast(), len) };
            if r == 0 {
                return Ok(Doorbell { sock, addr });
            }
            let e = errno();
            if e != libc::EADDRINUSE {
                return Err(crate::shm::errno_to_doca(e));
            }
        }
        Err(DOCA_ERROR_ALREADY_EXIST)
    }

    /// The address others pass to [`ring`].
    pub fn address(&self) -> DoorbellAddr {
        self.addr
    }

    /// The socket descriptor (readable while a ring is pending), for epoll registration.
    pub fn fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }

    /// Consumes every pending ring; returns how many there were.
    pub fn drain(&self) -> usize {
        drain_fd(self.sock.as_raw_fd())
    }
}

/// Reads a non-blocking descriptor until it would block (or fails); returns the number of
/// successful reads. Works for datagram sockets (one datagram per read), eventfds (the
/// counter is reset by one read) and pipes.
pub(crate) fn drain_fd(fd: RawFd) -> usize {
    let mut buf = [0u8; 64];
    let mut n = 0;
    // Bounded: a peer ringing in a tight loop must not keep us here forever.
    for _ in 0..4096 {
        // SAFETY: `buf` is valid and writable for its full length during the call.
        let r = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if r < 0 {
            if errno() == libc::EINTR {
                continue;
            }
            break;
        }
        n += 1;
        if r == 0 {
            break;
        }
    }
    n
}

/// The process-wide socket rings are sent from (created on first use; a failure to create
/// it is reported to that caller and retried by the next one, never cached).
fn sender() -> Result<RawFd, doca_error_t> {
    static SENDER: OnceLock<OwnedFd> = OnceLock::new();
    if let Some(fd) = SENDER.get() {
        return Ok(fd.as_raw_fd());
    }
    let fd = dgram_socket()?;
    // If another thread won the race, our socket is dropped (closed) here.
    Ok(SENDER.get_or_init(|| fd).as_raw_fd())
}

fn send_one(fd: RawFd, addr: DoorbellAddr) -> i32 {
    let (sa, len) = addr.sockaddr();
    let byte = 1u8;
    loop {
        // SAFETY: `byte` and `sa` are valid for reads of the given lengths during the call.
        let r = unsafe {
            libc::sendto(
                fd,
                (&byte as *const u8).cast(),
                1,
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
                (&sa as *const libc::sockaddr_un).cast(),
                len,
            )
        };
        if r >= 0 {
            return 0;
        }
        let e = errno();
        if e != libc::EINTR {
            return e;
        }
    }
}

fn classify(e: i32) -> Result<(), doca_error_t> {
    match e {
        0 | libc::EAGAIN => Ok(()),
        libc::ECONNREFUSED | libc::ENOENT => Err(DOCA_ERROR_NOT_FOUND),
        _ => Err(DOCA_ERROR_OPERATING_SYSTEM),
    }
}

/// Rings the doorbell at `addr`: never blocks. See the module docs for the results.
pub fn ring(addr: DoorbellAddr) -> Result<(), doca_error_t> {
    if addr.pid == 0 {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    let e = send_one(sender()?, addr);
    if e == libc::EAGAIN {
        // Either the receiver has a full queue (already rung: fine) or our shared sender's
        // buffer is full of undrained datagrams to other receivers. A fresh socket has an
        // empty buffer, so its answer is about the receiver alone.
        let fresh = dgram_socket()?;
        return classify(send_one(fresh.as_raw_fd(), addr));
    }
    classify(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn readable(fd: RawFd) -> bool {
        let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd, zero timeout.
        let r = unsafe { libc::poll(&mut p, 1, 0) };
        r == 1 && p.revents & libc::POLLIN != 0
    }

    #[test]
    fn ring_and_drain() {
        let d = Doorbell::new().unwrap();
        assert!(!readable(d.fd()));
        ring(d.address()).unwrap();
        assert!(readable(d.fd()));
        // Many rings: the queue fills, later rings are "already rung" and still succeed.
        for _ in 0..1000 {
            ring(d.address()).unwrap();
        }
        assert!(d.drain() >= 1);
        assert!(!readable(d.fd()));
    }

    #[test]
    fn ring_from_another_thread() {
        let d = Doorbell::new().unwrap();
        let a = d.address();
        std::thread::spawn(move || ring(a).unwrap()).join().unwrap();
        assert!(readable(d.fd()));
    }

    #[test]
    fn gone_receiver_is_reported() {
        let d = Doorbell::new().unwrap();
        let a = d.address();
        drop(d);
        assert_eq!(ring(a), Err(DOCA_ERROR_NOT_FOUND));
        assert_eq!(ring(DoorbellAddr { pid: 0, nonce: 1 }), Err(DOCA_ERROR_INVALID_VALUE));
    }

    #[test]
    fn the_socket_name_is_doca_soft_pid_nonce() {
        for (pid, nonce) in [(1, 0), (4_294_967_295, 0x0123_4567_89ab_cdef), (u64::MAX, u64::MAX)] {
            let (sa, len) = DoorbellAddr { pid, nonce }.sockaddr();
            let want = format!("doca-soft.{pid}.{nonce:016x}");
            let got: Vec<u8> = sa.sun_path[1..len as usize - core::mem::size_of::<libc::sa_family_t>()]
                .iter()
                .map(|&c| c as u8)
                .collect();
            assert_eq!(sa.sun_path[0], 0, "abstract");
            assert_eq!(String::from_utf8(got).unwrap(), want);
        }
    }

    #[test]
    fn addresses_are_unique_and_roundtrip() {
        let a = Doorbell::new().unwrap();
        let b = Doorbell::new().unwrap();
        assert_ne!(a.address(), b.address());
        assert_eq!(DoorbellAddr::from_words(a.address().to_words()), a.address());
    }
}
