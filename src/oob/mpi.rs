//! [`MpiOob`] (feature `mpi`): the members are the ranks of an MPI communicator, so a job
//! started with `mpirun` bootstraps its domains and communicators the way NVIDIA's UROM
//! samples do: the allgather is MPI's own non-blocking allgather (`MPI_Iallgather`), tested
//! with `MPI_Test`, which also drives MPI's progress.
//!
//! The binding is the `mpi` crate (rsmpi) over the system's MPI library; `scripts/setup.sh
//! --mpi` installs Debian's Open MPI and what the binding's build needs.

use std::marker::PhantomData;
use std::os::raw::{c_int, c_void};

use mpi::ffi;
use mpi::raw::AsRaw;
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::Threading;

use super::{Oob, OobRequest};
use crate::error::{Error, ErrorKind, Result};

/// An [`Oob`] over an MPI communicator: rank and size are the communicator's.
///
/// [`MpiOob::new`] duplicates the communicator (`MPI_Comm_dup`, collective), so the
/// bootstrap's allgathers never match the application's own messages or collectives on it.
///
/// # Threads and lifetime
/// MPI is called from the thread that created the `MpiOob` (it is `!Send`): the executor
/// thread that builds the domain or communicator, normally not the thread that initialized MPI.
/// Initialize MPI with at least [`Threading::Serialized`] then, and make no MPI call on another
/// thread while a domain or communicator is starting or stopping; with `Single` or `Funneled`
/// the constructor accepts only MPI's main thread. Drop every `MpiOob` (the domains and
/// communicators that hold one) before MPI is finalized (the `Universe` is dropped): freeing
/// the duplicated communicator after `MPI_Finalize` is erroneous in MPI.
///
/// ```no_run
/// # #[cfg(feature = "mpi")] {
/// use mpi::traits::*;
/// use async_doca::oob::{MpiOob, Oob};
/// let (universe, _) = mpi::initialize_with_threading(mpi::Threading::Serialized).unwrap();
/// let oob = MpiOob::new(&universe.world())?;
/// println!("rank {} of {}", oob.rank(), oob.size());
/// # }
/// # Ok::<(), async_doca::Error>(())
/// ```
pub struct MpiOob {
    comm: SimpleCommunicator,
    rank: u32,
    size: u32,
    /// MPI is called on the creating thread only (see the type's docs).
    _not_send: PhantomData<*const ()>,
}

impl std::fmt::Debug for MpiOob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MpiOob").field("rank", &self.rank).field("size", &self.size).finish()
    }
}

impl MpiOob {
    /// Duplicates `comm` (collective: every rank of `comm` calls it) and bootstraps over the
    /// copy.
    ///
    /// # Errors
    /// [`ErrorKind::BadState`] when MPI is not initialized, or when its threading level
    /// (`Single`, `Funneled`) forbids MPI calls on this thread.
    pub fn new(comm: &impl Communicator) -> Result<MpiOob> {
        if !mpi::environment::is_initialized() {
            return Err(Error::new(ErrorKind::BadState, "oob: MPI is not initialized"));
        }
        let level = mpi::environment::threading_support();
        if matches!(level, Threading::Single | Threading::Funneled) && !is_thread_main()? {
            return Err(Error::new(
                ErrorKind::BadState,
                format!(
                    "oob: MPI was initialized with {level:?} threading, which allows MPI calls on its main thread \
                     only; initialize it with Threading::Serialized to bootstrap from an executor thread"
                ),
            ));
        }
        let comm = comm.duplicate();
        let (rank, size) = (comm.rank(), comm.size());
        // MPI ranks are non-negative and below the size, which is positive.
        let (rank, size) = (rank as u32, size as u32);
        Ok(MpiOob { comm, rank, size, _not_send: PhantomData })
    }
}

/// Whether this thread is the one that initialized MPI.
fn is_thread_main() -> Result<bool> {
    let mut flag: c_int = 0;
    // SAFETY: MPI is initialized (checked by the caller); `flag` is a valid out-pointer.
    let rc = unsafe { ffi::MPI_Is_thread_main(&mut flag) };
    check(rc, "MPI_Is_thread_main")?;
    Ok(flag != 0)
}

/// MPI's return code as our error (MPI's default handler aborts on errors before we see
/// them; a communicator with `MPI_ERRORS_RETURN` gets here).
fn check(rc: c_int, what: &str) -> Result<()> {
    if rc == ffi::MPI_SUCCESS as c_int {
        Ok(())
    } else {
        Err(Error::new(ErrorKind::Other, format!("oob: {what} failed with MPI error code {rc}")))
    }
}

impl Oob for MpiOob {
    fn rank(&self) -> u32 {
        self.rank
    }

    fn size(&self) -> u32 {
        self.size
    }

    fn allgather(&self, data: &[u8]) -> Result<Box<dyn OobRequest>> {
        let too_big = || Error::new(ErrorKind::InvalidArgument, "oob: an MPI allgather counts bytes in a C int");
        let count = c_int::try_from(data.len()).map_err(|_| too_big())?;
        let total = data.len().checked_mul(self.size as usize).filter(|&t| c_int::try_from(t).is_ok());
        let total = total.ok_or_else(too_big)?;
        // Both buffers are at least a byte long, so they are two distinct heap allocations even
        // for an empty exchange: two empty boxes share one dangling address, and MPI rejects a
        // send buffer that is the receive buffer (MPI_ERR_ARG: that is MPI_IN_PLACE's job).
        let mut send = Vec::with_capacity(data.len().max(1));
        send.extend_from_slice(data);
        send.resize(data.len().max(1), 0);
        let mut req = Box::new(MpiRequest {
            // SAFETY: reading an `extern` static the MPI binding initializes at load time.
            raw: unsafe { ffi::RSMPI_REQUEST_NULL },
            send: send.into_boxed_slice(),
            recv: vec![0u8; total.max(1)].into_boxed_slice(),
            total,
            state: State::Running,
        });
        // SAFETY: both buffers are heap allocations owned by the request, which never frees
        // them while MPI may use them (see `Drop`); they hold at least `count` and
        // `count × size` bytes as declared; the communicator is live (owned by `self`); the
        // request handle is a valid out-pointer.
        let rc = unsafe {
            ffi::MPI_Iallgather(
                req.send.as_ptr().cast::<c_void>(),
                count,
                ffi::RSMPI_UINT8_T,
                req.recv.as_mut_ptr().cast::<c_void>(),
                count,
                ffi::RSMPI_UINT8_T,
                self.comm.as_raw(),
                &mut req.raw,
            )
        };
        if let Err(e) = check(rc, "MPI_Iallgather") {
            // Nothing was started: the buffers may be freed.
            req.state = State::Done;
            return Err(e);
        }
        Ok(req)
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    /// MPI owns the buffers until `MPI_Test` says the allgather completed.
    Running,
    /// Completed (or never started): the buffers are ours again.
    Done,
}

struct MpiRequest {
    raw: ffi::MPI_Request,
    send: Box<[u8]>,
    recv: Box<[u8]>,
    /// The result's length (`recv` may be longer by one byte, see `allgather`).
    total: usize,
    state: State,
}

impl OobRequest for MpiRequest {
    fn test(&mut self) -> Result<Option<Vec<u8>>> {
        if self.state == State::Done {
            return Err(Error::new(ErrorKind::BadState, "oob: request already completed"));
        }
        let mut flag: c_int = 0;
        // SAFETY: `raw` is the live request `MPI_Iallgather` returned (MPI sets it to
        // MPI_REQUEST_NULL on completion, and we stop testing then); `flag` is a valid
        // out-pointer; MPI_STATUS_IGNORE is allowed for the status.
        let rc = unsafe { ffi::MPI_Test(&mut self.raw, &mut flag, ffi::RSMPI_STATUS_IGNORE) };
        check(rc, "MPI_Test")?;
        if flag == 0 {
            return Ok(None);
        }
        self.state = State::Done;
        let mut all = std::mem::take(&mut self.recv).into_vec();
        all.truncate(self.total);
        Ok(Some(all))
    }
}

impl Drop for MpiRequest {
    fn drop(&mut self) {
        // One last look: an allgather that completed meanwhile (every rank joined, nobody
        // tested since) gives its buffers back.
        if self.state == State::Running && !matches!(self.test(), Ok(Some(_))) {
            // MPI forbids cancelling or freeing a non-blocking collective's request, and may
            // still read `send` and write `recv` until every rank joined (maybe never: this
            // happens when a bootstrap timed out). Waiting here could block forever, so the
            // buffers are leaked instead: a bounded loss on a path that already failed.
            std::mem::forget(std::mem::take(&mut self.send));
            std::mem::forget(std::mem::take(&mut self.recv));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// MPI can be initialized once per process, so this is the one test that does it: as a
    /// singleton (no `mpirun`: a world of one rank). `scripts/mpi.sh` runs it; the job with
    /// four ranks is `examples/allreduce_mpi`, which the same script runs under `mpirun`.
    #[test]
    #[cfg_attr(miri, ignore = "calls into the MPI library")]
    fn a_singleton_world_gathers_itself_from_an_executor_like_thread() {
        let (universe, level) = mpi::initialize_with_threading(Threading::Serialized).expect("MPI initializes once");
        assert!(!matches!(level, Threading::Single | Threading::Funneled), "Open MPI offers {level:?}");
        // Not MPI's main thread, as an executor thread is not: Serialized allows it, and the
        // main thread makes no MPI call meanwhile (it waits in join).
        std::thread::spawn(|| {
            let oob = MpiOob::new(&SimpleCommunicator::world()).unwrap();
            assert_eq!((oob.rank(), oob.size()), (0, 1));
            for data in [Vec::new(), b"abc".to_vec(), vec![7u8; 300_000]] {
                let mut req = oob.allgather(&data).unwrap();
                let all = loop {
                    if let Some(all) = req.test().unwrap() {
                        break all;
                    }
                };
                assert_eq!(all, data);
                assert_eq!(req.test().unwrap_err().kind(), ErrorKind::BadState, "a request completes once");
            }
            // A request dropped before its test: MPI may still own its buffers; dropping must
            // neither free them under MPI nor block (a singleton's completes at the last look).
            drop(oob.allgather(b"dropped").unwrap());
            // The communicator still works after it.
            let mut req = oob.allgather(b"after").unwrap();
            let all = loop {
                if let Some(all) = req.test().unwrap() {
                    break all;
                }
            };
            assert_eq!(all, b"after");
        })
        .join()
        .unwrap();
        drop(universe);
    }
}
