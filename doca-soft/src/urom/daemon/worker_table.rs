//! The daemon's worker table: every worker process, its state and the client connections
//! attached to it.
//!
//! Kept apart from the client protocol (`mod.rs`) so that another front end (a future `drom`
//! module) can register and look up workers the same way.

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::time::Instant;

use crate::urom::proto::{PluginAddr, WORKER_ID_ANY, WORKER_ID_FIRST};

/// Where a worker is in its life.
#[derive(Debug)]
pub(super) enum WState {
    /// Forked; its plugins are opening. Spawns wait as pending attachments.
    Starting,
    /// Serving; the addresses its plugins reported.
    Ready(Vec<PluginAddr>),
    /// Told to exit (or its control socket hung up): reaped soon, `SIGKILL` at the deadline.
    Exiting { deadline: Instant, killed: bool },
}

/// One client connection attached to a worker: the spawn, or a reconnect.
#[derive(Debug)]
pub(super) struct Attachment {
    pub(super) client: u64,
    /// The worker-side id of the data connection.
    pub(super) conn: u64,
    /// Before the worker is ready: the request to answer and the host's end of the data
    /// connection to pass with `Spawned`.
    pub(super) pending: Option<(u64, OwnedFd)>,
}

/// One worker process.
#[derive(Debug)]
pub struct WorkerEntry {
    pub id: u64,
    pub gid: u32,
    pub pid: libc::pid_t,
    /// The plugin ids it was spawned with.
    pub plugins: u64,
    /// The pid of the host process that spawned it (for the host's `max_workers`).
    pub owner: u32,
    pub(super) ctl: Option<OwnedFd>,
    pub(super) state: WState,
    pub(super) attached: Vec<Attachment>,
    pub(super) next_conn: u64,
}

impl WorkerEntry {
    /// Whether it still serves (not exiting).
    pub fn live(&self) -> bool {
        !matches!(self.state, WState::Exiting { .. })
    }
}

/// The daemon's workers by id.
#[derive(Debug, Default)]
pub struct Workers {
    pub(super) map: BTreeMap<u64, WorkerEntry>,
    pub(super) next_any: u64,
}

impl Workers {
    pub(super) fn new() -> Self {
        Workers { map: BTreeMap::new(), next_any: WORKER_ID_FIRST }
    }

    /// Workers not exiting.
    pub fn live_count(&self) -> usize {
        self.map.values().filter(|w| w.live()).count()
    }

    /// Ids of live workers in group `gid`, ascending.
    pub fn by_gid(&self, gid: u32) -> Vec<u64> {
        self.map.values().filter(|w| w.live() && w.gid == gid).map(|w| w.id).collect()
    }

    /// A free id for `WORKER_ID_ANY`: the next from `1 << 63` not in use (and not ANY).
    pub(super) fn allocate(&mut self) -> u64 {
        loop {
            let id = self.next_any;
            self.next_any = self.next_any.wrapping_add(1).max(WORKER_ID_FIRST);
            if id != WORKER_ID_ANY && !self.map.contains_key(&id) {
                return id;
            }
        }
    }

    pub fn get(&self, id: u64) -> Option<&WorkerEntry> {
        self.map.get(&id)
    }
}
