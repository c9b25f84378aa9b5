//! Out-of-band bootstrap: how the processes of one parallel job find each other.
//!
//! Two things in this crate need the members of a job to exchange a few bytes before they can
//! talk over RDMA: a UROM [`Domain`](crate::urom::Domain) (every member's worker addresses and
//! buffer descriptors) and a host-only [`HostComm`](crate::coll::HostComm) (every member's
//! RDMA connection blobs). Both ask for the same primitive, an **allgather** that runs outside
//! DOCA, over whatever the application already has: MPI, a launcher, a socket. DOCA states it
//! as three C callbacks (`doca_urom_domain_oob_coll`); this module states it as the [`Oob`]
//! trait, and is its one home, below both users.
//!
//! | type | members are | rank and size from |
//! | --- | --- | --- |
//! | [`InProcessOob`] | threads (or executors) of one process | [`InProcessOob::group`] |
//! | [`UnixOob`] | processes of one host, meeting at a Unix socket | arguments, or [`OOB_PATH_ENV`], [`OOB_RANK_ENV`], [`OOB_SIZE_ENV`] |
//! | [`TcpOob`] | processes anywhere, meeting at rank 0's TCP address | arguments, or [`OOB_ADDR_ENV`], [`OOB_RANK_ENV`], [`OOB_SIZE_ENV`] |
//! | `MpiOob` (feature `mpi`) | the ranks of an MPI communicator (`mpirun`) | the communicator |
//!
//! # The contract
//! An allgather is started with [`Oob::allgather`] and driven with [`OobRequest::test`], which
//! must never block: DOCA calls it from inside the progress engine, on the executor thread
//! that also runs every other operation of the process. Every member contributes the same
//! number of bytes; every member starts its allgathers in the same order, one at a time, and
//! each completes with all contributions concatenated in rank order. A barrier is an
//! allgather of one byte (the users here do exactly that at stop and close).
//!
//! The socket-based members ([`UnixOob`], [`TcpOob`]) are star-shaped through rank 0: joining
//! is blocking setup (bounded by a timeout, start order does not matter), the exchanges after
//! it are non-blocking reads and writes of length-prefixed frames (`star`).
//!
//! ```
//! use async_doca::oob::{InProcessOob, Oob, OobRequest};
//! let members = InProcessOob::group(2);
//! let mut reqs: Vec<_> = members.iter().map(|m| m.allgather(&[m.rank() as u8]).unwrap()).collect();
//! assert_eq!(reqs[0].test().unwrap(), Some(vec![0, 1]));
//! assert_eq!(reqs[1].test().unwrap(), Some(vec![0, 1]));
//! ```

use std::time::{Duration, Instant};

use crate::error::{Error, ErrorKind, Result};

#[doc(hidden)]
pub mod fuzzing;
mod inproc;
#[cfg(feature = "mpi")]
mod mpi;
mod star;
mod tcp;
mod unix;

pub use inproc::InProcessOob;
#[cfg(feature = "mpi")]
pub use mpi::MpiOob;
pub use tcp::{TcpOob, TcpRendezvous, OOB_ADDR_ENV};
pub use unix::{UnixOob, OOB_PATH_ENV};

/// Environment variable holding this process's rank for the `from_env` constructors.
pub const OOB_RANK_ENV: &str = "ASYNC_DOCA_OOB_RANK";
/// Environment variable holding the number of processes for the `from_env` constructors.
pub const OOB_SIZE_ENV: &str = "ASYNC_DOCA_OOB_SIZE";

/// An out-of-band communicator of `size` members, of which this is `rank`.
pub trait Oob: 'static {
    /// This member's index, `0..size`.
    fn rank(&self) -> u32;
    /// The number of members.
    fn size(&self) -> u32;
    /// Starts an allgather: every member contributes `data` (the same length on every member)
    /// and the request completes with all contributions concatenated in rank order. Members
    /// start their allgathers in the same order; one request at a time per member.
    fn allgather(&self, data: &[u8]) -> Result<Box<dyn OobRequest>>;
}

/// An allgather in progress.
pub trait OobRequest {
    /// Makes progress without blocking: `Ok(None)` while in progress, `Ok(Some(all))` once
    /// done (`size × len` bytes, rank order).
    fn test(&mut self) -> Result<Option<Vec<u8>>>;
}

/// Runs one allgather of `data` to completion from async code, without blocking the
/// executor: the request is tested after a few yields (members usually arrive together),
/// then every millisecond, until `deadline`. Errors are prefixed with `what`.
pub(crate) async fn drive_allgather(oob: &dyn Oob, data: &[u8], deadline: Instant, what: &str) -> Result<Vec<u8>> {
    let mut req = oob.allgather(data).map_err(|e| e.context_prefix(what))?;
    let mut spins = 0u32;
    loop {
        if let Some(all) = req.test().map_err(|e| e.context_prefix(what))? {
            return Ok(all);
        }
        if Instant::now() >= deadline {
            return Err(Error::new(
                ErrorKind::TimedOut,
                format!("{what}: the members did not all join the out-of-band exchange in time"),
            ));
        }
        if spins < 64 {
            spins += 1;
            crate::executor::yield_now().await;
        } else {
            crate::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

/// Checks `rank < size` (and so `size > 0`), the first thing every constructor does.
fn check_rank(rank: u32, size: u32) -> Result<()> {
    if size == 0 || rank >= size {
        return Err(Error::new(ErrorKind::InvalidArgument, format!("oob: rank {rank} is not below size {size}")));
    }
    Ok(())
}

/// The value of environment variable `name`, or why there is none.
fn env_var(name: &str) -> Result<String> {
    std::env::var(name).map_err(|_| Error::new(ErrorKind::InvalidArgument, format!("oob: {name} is not set")))
}

/// Rank and size from [`OOB_RANK_ENV`] and [`OOB_SIZE_ENV`].
fn rank_size_from_env() -> Result<(u32, u32)> {
    let num = |name: &str| -> Result<u32> {
        env_var(name)?
            .parse()
            .map_err(|_| Error::new(ErrorKind::InvalidArgument, format!("oob: {name} is not a number")))
    };
    Ok((num(OOB_RANK_ENV)?, num(OOB_SIZE_ENV)?))
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}
