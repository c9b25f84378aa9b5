//! [`TcpOob`]: the members are processes anywhere on the network, meeting at rank 0's TCP
//! address. For jobs started without MPI: a launcher (or a shell loop) only has to tell every
//! process rank 0's address, its rank and the size.

use std::io::ErrorKind as IoKind;
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use super::star::{self, Star};
use super::{check_rank, env_var, rank_size_from_env, Oob, OobRequest};
use crate::error::{Error, ErrorKind, Result};

/// Environment variable holding rank 0's address (`host:port`) for [`TcpOob::from_env`].
pub const OOB_ADDR_ENV: &str = "ASYNC_DOCA_OOB_ADDR";

/// An [`Oob`] whose members meet at rank 0's TCP address.
///
/// Rank 0 listens at the address and the others connect (retrying until the timeout, so
/// start order does not matter); rank 0 closes its listener once everybody is in. Allgathers
/// are star-shaped through rank 0 (see the [module docs](super)), with Nagle's delay off:
/// the exchanges are small and every one waits on a round trip.
///
/// The rendezvous is not authenticated (neither are MPI launchers' own): a hello with a magic,
/// the rank and the size keeps out strangers and mistakes, not attackers. Use it on the job's
/// own network, as the bytes exchanged (RDMA connection blobs, buffer descriptors with their
/// keys) grant access to registered memory.
///
/// When rank 0 should pick a free port itself (tests, or a launcher that reads it back),
/// bind with [`TcpRendezvous::bind`] on port 0, hand [`TcpRendezvous::local_addr`] to the
/// others, then [`TcpRendezvous::accept`].
///
/// ```no_run
/// use std::time::Duration;
/// use async_doca::oob::{Oob, TcpOob};
/// // Every process: rank 0 listens at 10.0.0.1:7000, ranks 1..4 connect to it.
/// let rank: u32 = std::env::args().nth(1).unwrap().parse().unwrap();
/// let oob = TcpOob::connect("10.0.0.1:7000", rank, 4, Duration::from_secs(30))?;
/// assert_eq!(oob.size(), 4);
/// # Ok::<(), async_doca::Error>(())
/// ```
#[derive(Debug)]
pub struct TcpOob {
    star: Star<TcpStream>,
}

/// Rank 0's listener, bound but not yet accepting: lets rank 0 learn its port (bound to port
/// 0) before the others are told where to connect.
#[derive(Debug)]
pub struct TcpRendezvous {
    listener: TcpListener,
}

impl TcpRendezvous {
    /// Binds rank 0's listener at `addr` (port 0: a free port the system picks).
    ///
    /// # Errors
    /// [`ErrorKind::Os`] when the address cannot be bound.
    pub fn bind(addr: impl ToSocketAddrs) -> Result<TcpRendezvous> {
        let listener = TcpListener::bind(addr).map_err(|e| Error::os(e, "oob: bind the rendezvous address"))?;
        listener.set_nonblocking(true).map_err(|e| Error::os(e, "oob: set non-blocking"))?;
        Ok(TcpRendezvous { listener })
    }

    /// The address the others connect to.
    ///
    /// # Errors
    /// [`ErrorKind::Os`] when the socket cannot say (it always can once bound).
    pub fn local_addr(&self) -> Result<SocketAddr> {
        self.listener.local_addr().map_err(|e| Error::os(e, "oob: the rendezvous address"))
    }

    /// Waits at most `timeout` for ranks `1..size` to connect; this process is rank 0. The
    /// listener is closed when this returns, whatever the outcome.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidArgument`] for `size == 0`, for a connection that is not a member
    /// of our protocol, or for a member that disagrees on the size; [`ErrorKind::TimedOut`]
    /// when not everybody arrived; [`ErrorKind::ConnectionLost`] when a member's connection
    /// ended (end of file, reset, broken pipe); [`ErrorKind::Os`] for other socket failures.
    pub fn accept(self, size: u32, timeout: Duration) -> Result<TcpOob> {
        check_rank(0, size)?;
        let deadline = Instant::now() + timeout;
        let peers = star::accept_all(size, deadline, || star::accepted(self.listener.accept()))?;
        TcpOob::joined(0, size, peers)
    }
}

impl TcpOob {
    /// Joins the rendezvous at `addr` as `rank` of `size`: rank 0 listens there, the others
    /// connect to it. Waits at most `timeout` for the others (or for rank 0 to listen).
    ///
    /// # Errors
    /// [`ErrorKind::InvalidArgument`] for `rank >= size`, an address that does not resolve,
    /// or a member that disagrees on the size; [`ErrorKind::TimedOut`] when the members did
    /// not all arrive; [`ErrorKind::ConnectionLost`] when the connection ended (end of file,
    /// reset, broken pipe); [`ErrorKind::Os`] for other socket failures.
    pub fn connect(addr: impl ToSocketAddrs, rank: u32, size: u32, timeout: Duration) -> Result<TcpOob> {
        check_rank(rank, size)?;
        if rank == 0 {
            return TcpRendezvous::bind(addr)?.accept(size, timeout);
        }
        let addrs: Vec<SocketAddr> = addr
            .to_socket_addrs()
            .map_err(|e| Error::new(ErrorKind::InvalidArgument, format!("oob: rank 0's address: {e}")))?
            .collect();
        if addrs.is_empty() {
            return Err(Error::new(ErrorKind::InvalidArgument, "oob: rank 0's address resolves to nothing"));
        }
        let deadline = Instant::now() + timeout;
        // Each attempt tries every address the name resolved to; only "nobody listens yet"
        // (refused, or an attempt that ran out of time) is retried.
        let attempt = |left: Duration| {
            let mut last = None;
            for a in &addrs {
                match TcpStream::connect_timeout(a, left) {
                    Ok(s) => return Ok(s),
                    Err(e) => last = Some(e),
                }
            }
            Err(last.unwrap_or_else(|| IoKind::AddrNotAvailable.into()))
        };
        let not_yet = |e: &std::io::Error| matches!(e.kind(), IoKind::ConnectionRefused | IoKind::TimedOut);
        let stream = star::dial(rank, size, deadline, attempt, not_yet)?;
        Self::joined(rank, size, vec![stream])
    }

    /// [`connect`](TcpOob::connect) with rank 0's address, the rank and the size from
    /// [`OOB_ADDR_ENV`], [`OOB_RANK_ENV`](super::OOB_RANK_ENV) and
    /// [`OOB_SIZE_ENV`](super::OOB_SIZE_ENV).
    pub fn from_env(timeout: Duration) -> Result<TcpOob> {
        let addr = env_var(OOB_ADDR_ENV)?;
        let (rank, size) = rank_size_from_env()?;
        Self::connect(addr.as_str(), rank, size, timeout)
    }

    fn joined(rank: u32, size: u32, peers: Vec<TcpStream>) -> Result<TcpOob> {
        for p in &peers {
            p.set_nodelay(true).map_err(|e| Error::os(e, "oob: set TCP_NODELAY"))?;
        }
        Ok(TcpOob { star: Star::new(rank, size, peers)? })
    }
}

impl Oob for TcpOob {
    fn rank(&self) -> u32 {
        self.star.rank()
    }
    fn size(&self) -> u32 {
        self.star.size()
    }
    fn allgather(&self, data: &[u8]) -> Result<Box<dyn OobRequest>> {
        self.star.allgather(data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::drive_all;
    use std::io::Write;

    const LIMIT: Duration = Duration::from_secs(20);

    /// `n` members on threads of this process, rank 0 on a port the system picked.
    fn group(n: u32) -> Vec<TcpOob> {
        let rv = TcpRendezvous::bind("127.0.0.1:0").unwrap();
        let addr = rv.local_addr().unwrap();
        // Ranks dial in reverse order: rank 0 sorts them.
        let threads: Vec<_> =
            (1..n).rev().map(|rank| std::thread::spawn(move || TcpOob::connect(addr, rank, n, LIMIT))).collect();
        let mut members = vec![rv.accept(n, LIMIT).unwrap()];
        let mut others: Vec<TcpOob> = threads.into_iter().map(|t| t.join().unwrap().unwrap()).collect();
        others.reverse();
        members.extend(others);
        members
    }

    #[test]
    #[cfg_attr(miri, ignore = "makes system calls Miri cannot run")]
    fn gathers_in_rank_order_and_rounds_stay_apart() {
        let members = group(5);
        for (i, m) in members.iter().enumerate() {
            assert_eq!((m.rank(), m.size()), (i as u32, 5));
        }
        // Empty, small, and larger than a socket buffer (the root's reply is 5 × that).
        for len in [0usize, 3, 200_000] {
            let reqs = members.iter().map(|m| m.allgather(&vec![m.rank() as u8 + 1; len]).unwrap()).collect();
            let want: Vec<u8> = (1..=5u8).flat_map(|r| std::iter::repeat_n(r, len)).collect();
            for all in drive_all(reqs) {
                assert_eq!(all, want);
            }
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "makes system calls Miri cannot run")]
    fn a_single_member_gathers_itself() {
        let m = TcpOob::connect("127.0.0.1:0", 0, 1, LIMIT).unwrap();
        assert_eq!(drive_all(vec![m.allgather(b"solo").unwrap()]), vec![b"solo".to_vec()]);
    }

    #[test]
    #[cfg_attr(miri, ignore = "makes system calls Miri cannot run")]
    fn bad_arguments_and_absent_peers_fail() {
        let e = TcpOob::connect("127.0.0.1:0", 3, 3, LIMIT).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        // Rank 0 alone times out naming who is missing.
        let rv = TcpRendezvous::bind("127.0.0.1:0").unwrap();
        let addr = rv.local_addr().unwrap();
        let e = rv.accept(3, Duration::from_millis(50)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::TimedOut);
        assert!(e.to_string().contains("1, 2"), "{e}");
        // Nobody listens there any more: a member times out instead of failing at once.
        let e = TcpOob::connect(addr, 1, 2, Duration::from_millis(50)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::TimedOut);
    }

    #[test]
    #[cfg_attr(miri, ignore = "makes system calls Miri cannot run")]
    fn strangers_and_size_disagreements_are_rejected() {
        // Something that is not a member (an HTTP client, say).
        let rv = TcpRendezvous::bind("127.0.0.1:0").unwrap();
        let addr = rv.local_addr().unwrap();
        let stranger = std::thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
            s
        });
        let e = rv.accept(2, LIMIT).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert!(e.to_string().contains("stranger"), "{e}");
        drop(stranger.join().unwrap());
        // A member told another size.
        let rv = TcpRendezvous::bind("127.0.0.1:0").unwrap();
        let addr = rv.local_addr().unwrap();
        let member = std::thread::spawn(move || TcpOob::connect(addr, 1, 4, LIMIT));
        let e = rv.accept(2, LIMIT).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert!(e.to_string().contains("4 members"), "{e}");
        // The member joined (its hello was sent) before rank 0 said no; it learns it at the
        // first exchange.
        let member = member.join().unwrap().unwrap();
        let mut req = member.allgather(b"x").unwrap();
        let e = loop {
            match req.test() {
                Ok(None) => std::thread::yield_now(),
                Ok(Some(_)) => panic!("an exchange with a rank 0 that refused us"),
                Err(e) => break e,
            }
        };
        assert!(matches!(e.kind(), ErrorKind::ConnectionLost | ErrorKind::Os), "{e}");
    }

    #[test]
    #[cfg_attr(miri, ignore = "makes system calls Miri cannot run")]
    fn a_member_that_leaves_fails_the_exchange() {
        let mut members = group(3);
        drop(members.pop());
        let reqs: Vec<_> = members.iter().map(|m| m.allgather(b"ab").unwrap()).collect();
        let mut root = reqs.into_iter().next().unwrap();
        let e = loop {
            match root.test() {
                Ok(None) => std::thread::yield_now(),
                Ok(Some(_)) => panic!("an allgather without rank 2"),
                Err(e) => break e,
            }
        };
        assert_eq!(e.kind(), ErrorKind::ConnectionLost, "{e}");
    }
}
