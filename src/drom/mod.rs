//! DLB-style CPU masks: a node-wide registry of which process owns which CPUs, runtimes that
//! follow it, and the operations of an administrator (the `async-doca taskset` tool).
//!
//! The model is BSC DLB's DROM. Processes register the CPUs they own in a [`Registry`] (a
//! small shared-memory file per user and key, mode 0600). An administrator (or a launcher)
//! reads and changes other processes' masks; a change is written as the target's *pending*
//! mask (the target is *dirty*) and wakes it; the target applies it to its threads when it
//! looks (a [`Runtime`](crate::Runtime) with [`Builder::drom`](crate::Builder::drom) looks at
//! once through a futex wake-up, at every executor park, and on a timer) and says so; a
//! setter that asked for [`Flags::SYNC_QUERY`] waits for that.
//!
//! Who owns what: a CPU is owned by at most one process at any time (the pending mask of a
//! dirty process, else its applied one); CPUs nobody owns are free. Taking CPUs from their
//! owner needs [`Flags::STEAL_CPUS`]: the owner gets a pending change without them and
//! remembers them as *stolen*, to get them back when they are free again
//! ([`Registry::recover_stolen`], [`Flags::RETURN_STOLEN`]). Processes that die (or are
//! killed) are found by the next registry call (their pid is gone, a zombie, or reused with
//! another start time) and their CPUs become free; a process that died while holding the
//! registry lock leaves a mark that makes the next holder repair the table. The layout,
//! locking and recovery are described in `docs/drom.md`.
//!
//! DROM's calls and errors map as follows:
//!
//! | DROM                     | here                                                  |
//! |--------------------------|-------------------------------------------------------|
//! | Attach / Detach          | [`Registry::attach`] (or [`open`](Registry::open)) / [`Registry::detach`] |
//! | GetNumCpus / GetPidList  | [`Registry::num_cpus`] / [`Registry::pids`]           |
//! | Get/SetProcessMask       | [`Registry::get_mask`] / [`Registry::set_mask`]       |
//! | PreInit / PostFinalize   | [`Registry::pre_init`] / [`Registry::post_finalize`]  |
//! | RecoverStolenCpus        | [`Registry::recover_stolen`]                          |
//! | PollDROM (process side)  | [`Membership::poll`] + [`Membership::applied`]        |
//! | NOSHMEM, NOPROC          | [`ErrorKind::NotFound`](crate::ErrorKind::NotFound)   |
//! | PDIRTY, INIT             | [`ErrorKind::BadState`](crate::ErrorKind::BadState)   |
//! | PERM                     | [`ErrorKind::PermissionDenied`](crate::ErrorKind::PermissionDenied) |
//! | TIMEOUT                  | [`ErrorKind::TimedOut`](crate::ErrorKind::TimedOut)   |
//! | NOUPDT                   | `Ok(None)` from [`Membership::poll`]                  |
//!
//! The error's context says which of them it is ("no registry", "no registered process",
//! "pending change (dirty)", "already registered", ...).

pub(crate) mod follow;
mod registry;
mod shm;
#[cfg(feature = "soft")]
mod urom_workers;

use std::time::Duration;

pub use registry::{Membership, ProcessInfo, Registry, Reservation, ReservationRef, DEFAULT_SYNC_TIMEOUT};
#[cfg(feature = "soft")]
pub use urom_workers::UromWorkers;

/// The environment variable through which a launcher passes a reservation to its child
/// (value `KEY:SLOT:TOKEN`, see [`Registry::pre_init`]).
pub const ENV_RESERVATION: &str = "ASYNC_DOCA_DROM";

/// The environment variable naming the default registry key (see [`default_key`]).
pub const ENV_KEY: &str = "ASYNC_DOCA_DROM_KEY";

/// The registry key used when none is given: `$ASYNC_DOCA_DROM_KEY`, else `"default"`.
pub fn default_key() -> String {
    std::env::var(ENV_KEY).ok().filter(|k| !k.is_empty()).unwrap_or_else(|| "default".to_owned())
}

/// Pins every thread of process `pid` (ours, or one we may change) to `mask`; threads that
/// exit meanwhile are skipped. What a supervisor does to apply a mask to a process that does
/// not follow the registry itself (a launched program, a UROM worker).
pub fn pin_process(pid: i32, mask: &crate::CpuSet) -> crate::Result<()> {
    let dir = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map_err(|e| crate::Error::os(e, &format!("drom: threads of process {pid}")))?;
    let mut first_error = None;
    for entry in dir.flatten() {
        let Some(tid) = entry.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        if let Err(e) = mask.pin_thread(tid) {
            // ESRCH: the thread exited since the listing.
            if std::path::Path::new(&format!("/proc/{pid}/task/{tid}")).exists() {
                first_error.get_or_insert(e);
            }
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// Options of DROM calls (combine with `|`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Flags(u32);

impl Flags {
    /// No option.
    pub const NONE: Flags = Flags(0);
    /// Wait until the target (and the processes CPUs were stolen from) applied the change,
    /// up to the registry's [sync timeout](Registry::sync_timeout).
    pub const SYNC_QUERY: Flags = Flags(1);
    /// Apply at once: only for the calling process, which then follows the mask itself.
    pub const SYNC_NOW: Flags = Flags(2);
    /// Take CPUs from the processes that own them.
    pub const STEAL_CPUS: Flags = Flags(4);
    /// With [`Registry::post_finalize`]: give free stolen CPUs back to their owners.
    pub const RETURN_STOLEN: Flags = Flags(8);

    /// Whether every option of `other` is set.
    pub fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for Flags {
    type Output = Flags;
    fn bitor(self, rhs: Flags) -> Flags {
        Flags(self.0 | rhs.0)
    }
}

impl std::fmt::Debug for Flags {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names = [
            (Flags::SYNC_QUERY, "SYNC_QUERY"),
            (Flags::SYNC_NOW, "SYNC_NOW"),
            (Flags::STEAL_CPUS, "STEAL_CPUS"),
            (Flags::RETURN_STOLEN, "RETURN_STOLEN"),
        ];
        let set: Vec<&str> = names.iter().filter(|(fl, _)| self.contains(*fl) && fl.0 != 0).map(|(_, n)| *n).collect();
        if set.is_empty() {
            f.write_str("NONE")
        } else {
            f.write_str(&set.join(" | "))
        }
    }
}

/// How a [`Runtime`](crate::Runtime) takes part in a registry (see
/// [`Builder::drom`](crate::Builder::drom)).
///
/// ```
/// use std::time::Duration;
/// use async_doca::drom::{Options, Registry};
/// use async_doca::Runtime;
///
/// let key = format!("doc-options-{}", std::process::id());
/// let rt = Runtime::builder()
///     .cpus("0".parse()?)
///     .drom(Options::new(&key).check_interval(Duration::from_millis(20)))
///     .build()?;
/// let reg = Registry::attach(&key)?;
/// assert_eq!(reg.pids()?, [std::process::id() as i32]);
/// rt.shutdown();                                   // unregisters
/// assert!(reg.pids()?.is_empty());
/// Registry::remove(&key)?;
/// # Ok::<(), async_doca::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Options {
    pub(crate) key: String,
    pub(crate) check_interval: Duration,
    pub(crate) steal: bool,
    pub(crate) adopt: bool,
}

/// The default of [`Options::check_interval`].
pub const DEFAULT_CHECK_INTERVAL: Duration = Duration::from_millis(50);

impl Options {
    /// Registers in the registry of `key` (created if missing).
    pub fn new(key: &str) -> Options {
        Options { key: key.to_owned(), check_interval: DEFAULT_CHECK_INTERVAL, steal: false, adopt: true }
    }

    /// The registry of [`default_key`].
    pub fn default_key() -> Options {
        Options::new(&default_key())
    }

    /// The longest time a change can go unnoticed if its wake-up was missed (the timer of
    /// the follower thread; default [`DEFAULT_CHECK_INTERVAL`]).
    #[must_use]
    pub fn check_interval(mut self, d: Duration) -> Options {
        self.check_interval = d.max(Duration::from_millis(1));
        self
    }

    /// Register even when the CPUs belong to other processes, stealing them.
    #[must_use]
    pub fn steal(mut self, yes: bool) -> Options {
        self.steal = yes;
        self
    }

    /// Adopt a reservation passed through [`ENV_RESERVATION`] for this key (default true):
    /// the runtime's CPUs are then the reserved ones, whatever
    /// [`Builder::cpus`](crate::Builder::cpus) said.
    #[must_use]
    pub fn adopt_reservation(mut self, yes: bool) -> Options {
        self.adopt = yes;
        self
    }

    /// The registry key.
    pub fn key(&self) -> &str {
        &self.key
    }
}

#[cfg(test)]
mod tests;
