//! [`UnixOob`]: the members are processes of one host, meeting at a Unix socket.

use std::io::ErrorKind as IoKind;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::star::{self, Star};
use super::{check_rank, env_var, rank_size_from_env, Oob, OobRequest};
use crate::error::{Error, Result};

/// Environment variable naming the rendezvous socket of [`UnixOob::from_env`].
pub const OOB_PATH_ENV: &str = "ASYNC_DOCA_OOB_PATH";

/// An [`Oob`] whose members are processes on this host meeting at a Unix socket.
///
/// Rank 0 listens at the path and the others connect (retrying until the timeout, so start
/// order does not matter); once all are connected rank 0 removes the socket file. Allgathers
/// are star-shaped through rank 0 (see the [module docs](super)).
#[derive(Debug)]
pub struct UnixOob {
    star: Star<UnixStream>,
}

impl UnixOob {
    /// Joins the rendezvous at `path` as `rank` of `size`, waiting at most `timeout` for the
    /// others (or for rank 0 to listen).
    ///
    /// # Errors
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for `rank >= size` or
    /// a member that disagrees on the size, [`ErrorKind::TimedOut`](crate::ErrorKind::TimedOut)
    /// when the members did not all arrive,
    /// [`ErrorKind::ConnectionLost`](crate::ErrorKind::ConnectionLost) when a connection ended
    /// (end of file, reset, broken pipe), [`ErrorKind::Os`](crate::ErrorKind::Os) for other
    /// socket failures.
    pub fn connect(path: impl AsRef<Path>, rank: u32, size: u32, timeout: Duration) -> Result<UnixOob> {
        let path = path.as_ref();
        check_rank(rank, size)?;
        let deadline = Instant::now() + timeout;
        let peers = if rank == 0 {
            accept_all(path, size, deadline)?
        } else {
            let not_yet = |e: &std::io::Error| matches!(e.kind(), IoKind::NotFound | IoKind::ConnectionRefused);
            vec![star::dial(rank, size, deadline, |_| UnixStream::connect(path), not_yet)?]
        };
        Ok(UnixOob { star: Star::new(rank, size, peers)? })
    }

    /// [`connect`](UnixOob::connect) with the path, rank and size from
    /// [`OOB_PATH_ENV`], [`OOB_RANK_ENV`](super::OOB_RANK_ENV) and
    /// [`OOB_SIZE_ENV`](super::OOB_SIZE_ENV).
    pub fn from_env(timeout: Duration) -> Result<UnixOob> {
        let path = PathBuf::from(env_var(OOB_PATH_ENV)?);
        let (rank, size) = rank_size_from_env()?;
        Self::connect(path, rank, size, timeout)
    }
}

/// Rank 0: listens at `path` until every other rank is in, then removes the socket file.
fn accept_all(path: &Path, size: u32, deadline: Instant) -> Result<Vec<UnixStream>> {
    // A file left by an earlier run that died would make bind fail.
    let _ = std::fs::remove_file(path);
    let listener = UnixListener::bind(path).map_err(|e| Error::os(e, "oob: bind the rendezvous socket"))?;
    listener.set_nonblocking(true).map_err(|e| Error::os(e, "oob: set non-blocking"))?;
    let result = star::accept_all(size, deadline, || star::accepted(listener.accept()));
    // Everybody is in (or we give up): the socket file is not needed any more.
    let _ = std::fs::remove_file(path);
    result
}

impl Oob for UnixOob {
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
    use crate::error::ErrorKind;
    use crate::testkit::drive_all;

    #[test]
    #[cfg_attr(miri, ignore = "crosses FFI into the DOCA provider or makes system calls Miri cannot run")]
    fn socket_rendezvous_gathers_in_rank_order() {
        let path = std::env::temp_dir().join(format!("async-doca-oob-test-{}.sock", std::process::id()));
        let threads: Vec<_> = (1..4u32)
            .map(|rank| {
                let path = path.clone();
                std::thread::spawn(move || UnixOob::connect(&path, rank, 4, Duration::from_secs(10)).unwrap())
            })
            .collect();
        let root = UnixOob::connect(&path, 0, 4, Duration::from_secs(10)).unwrap();
        assert!(!path.exists(), "rank 0 removes the socket file once everybody is in");
        let mut members = vec![root];
        members.extend(threads.into_iter().map(|t| t.join().unwrap()));
        for len in [0usize, 5, 70_000] {
            let reqs = members.iter().map(|m| m.allgather(&vec![m.rank() as u8; len]).unwrap()).collect();
            let want: Vec<u8> = (0..4u8).flat_map(|r| std::iter::repeat_n(r, len)).collect();
            for all in drive_all(reqs) {
                assert_eq!(all, want);
            }
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "crosses FFI into the DOCA provider or makes system calls Miri cannot run")]
    fn socket_rendezvous_times_out_without_peers() {
        let path = std::env::temp_dir().join(format!("async-doca-oob-timeout-{}.sock", std::process::id()));
        let e = UnixOob::connect(&path, 0, 2, Duration::from_millis(50)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::TimedOut);
        assert!(!path.exists());
        let e = UnixOob::connect(&path, 1, 2, Duration::from_millis(50)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::TimedOut);
    }
}
