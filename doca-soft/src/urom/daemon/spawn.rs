//! Forking a worker: the child closes the daemon's descriptors, pins itself, applies the
//! requested environment, runs the worker loop and `_exit`s; it never returns into the daemon.
//!
//! No `exec`: the worker runs the plugins the daemon already loaded. This is sound because
//! the daemon is single-threaded (its poll loop is the only thread), so no lock can be held by
//! a thread that does not exist in the child. (glibc also makes `malloc` safe after `fork` in
//! a multi-threaded parent, which is what lets the tests run the daemon in a test-harness
//! process.)

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use super::log::{log_at, Log};
use super::plugins::Plugin;
use super::worker::{self, WorkerSetup};
use crate::urom::proto::CpuSet;

/// What a new worker needs, prepared by the daemon before the fork.
pub(crate) struct SpawnArgs<'a> {
    pub id: u64,
    pub plugins: Vec<&'a Plugin>,
    /// Never empty: the daemon substitutes its own set for an empty request.
    pub cpuset: CpuSet,
    /// `KEY=VALUE` entries, validated by the daemon.
    pub env: Vec<String>,
    pub ctl: OwnedFd,
    pub data: OwnedFd,
    pub max_msg_size: usize,
    pub recv_packet: usize,
    pub max_inflight: u32,
    pub log: Log,
}

/// A `cpu_set_t` for a wire cpuset.
pub(crate) fn to_cpu_set(set: &CpuSet) -> libc::cpu_set_t {
    // SAFETY: cpu_set_t is plain old data; all-zero is the empty set.
    let mut c: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let max = 8 * std::mem::size_of::<libc::cpu_set_t>();
    for cpu in 0..(16 * 64).min(max) {
        if set[cpu / 64] & (1 << (cpu % 64)) != 0 {
            // SAFETY: `cpu` is below the set's bit count (bounded by `max`).
            unsafe { libc::CPU_SET(cpu, &mut c) };
        }
    }
    c
}

/// The calling thread's CPU affinity as a wire cpuset.
pub fn current_affinity() -> io::Result<CpuSet> {
    // SAFETY: as in to_cpu_set.
    let mut c: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid cpu_set_t of the size given.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut c) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut set = [0u64; 16];
    let max = 8 * std::mem::size_of::<libc::cpu_set_t>();
    for cpu in 0..(16 * 64).min(max) {
        // SAFETY: `cpu` is below the set's bit count (bounded by `max`).
        if unsafe { libc::CPU_ISSET(cpu, &c) } {
            set[cpu / 64] |= 1 << (cpu % 64);
        }
    }
    Ok(set)
}

/// Closes every descriptor of this process except `keep` (and stdin/out/err): the worker must
/// not hold the daemon's listening socket or other hosts' connections.
fn close_all_but(keep: &[RawFd]) {
    let mut keep: Vec<RawFd> = keep.iter().copied().filter(|fd| *fd > 2).collect();
    keep.sort_unstable();
    let mut from: libc::c_uint = 3;
    let mut ok = true;
    for k in keep.iter().copied().chain(std::iter::once(-1)) {
        // The ranges between kept fds; the last one runs to the end of the table.
        let to = if k < 0 { libc::c_uint::MAX } else { k as libc::c_uint - 1 };
        if k < 0 || k as libc::c_uint > from {
            // SAFETY: close_range takes integers only; the child owns its whole table and
            // never touches the closed fds again.
            ok &= unsafe { libc::syscall(libc::SYS_close_range, from, to, 0) } == 0;
        }
        if k >= 0 {
            from = k as libc::c_uint + 1;
        }
    }
    if ok {
        return;
    }
    // Kernels before 5.9: list the table instead.
    let fds: Vec<RawFd> = match std::fs::read_dir("/proc/self/fd") {
        Ok(dir) => dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect(),
        Err(_) => (3..4096).collect(),
    };
    for fd in fds {
        if fd > 2 && !keep.contains(&fd) {
            // SAFETY: as above; fds already closed (like the directory's own) fail with EBADF.
            unsafe { libc::close(fd) };
        }
    }
}

/// Resets what the daemon changed in its own process that a worker must not inherit.
fn reset_signals() {
    // SAFETY: signal() and sigprocmask() with valid constants and an initialized empty set.
    unsafe {
        libc::signal(libc::SIGTERM, libc::SIG_DFL);
        libc::signal(libc::SIGCHLD, libc::SIG_DFL);
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        // Ctrl-C in the daemon's terminal reaches the whole process group; the daemon then
        // tells its workers to exit, so they close their plugins instead of dying mid-call.
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
    }
}

/// Forks a worker. In the parent: the child's pid (the child's socket ends are closed here by
/// dropping `args`). The child never returns from this function.
pub(crate) fn fork_worker(args: SpawnArgs<'_>, daemon_pid: libc::pid_t) -> io::Result<libc::pid_t> {
    // SAFETY: fork() in a process whose only other threads (in tests) hold no lock the child
    // needs; see the module doc. The child only runs code below and then _exits.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid > 0 {
        return Ok(pid);
    }
    // The child.
    let log = Log { worker: Some(args.id), ..args.log };
    reset_signals();
    // SAFETY: prctl with integer arguments. If the daemon dies without cleaning up, the kernel
    // kills the worker instead of leaving an orphan; the getppid check closes the race where
    // the daemon died before the prctl.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0);
        if libc::getppid() != daemon_pid {
            libc::_exit(1);
        }
        libc::prctl(libc::PR_SET_NAME, c"urom-worker".as_ptr() as libc::c_ulong, 0, 0, 0);
    }
    close_all_but(&[args.ctl.as_raw_fd(), args.data.as_raw_fd()]);
    let set = to_cpu_set(&args.cpuset);
    // SAFETY: `set` is a valid cpu_set_t of the size given.
    if unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) } != 0 {
        log_at!(log, Error, "sched_setaffinity: {}", io::Error::last_os_error());
        // SAFETY: ending the child without running the daemon's destructors or atexit hooks.
        unsafe { libc::_exit(1) };
    }
    for kv in &args.env {
        if let Some((k, v)) = kv.split_once('=') {
            std::env::set_var(k, v);
        }
    }
    log_at!(log, Debug, "started (pid {})", std::process::id());
    let code = worker::run(WorkerSetup {
        id: args.id,
        plugins: args.plugins,
        ctl: args.ctl,
        data: Some(args.data),
        max_msg_size: args.max_msg_size,
        recv_packet: args.recv_packet,
        max_inflight: args.max_inflight,
        log,
    });
    // SAFETY: as above: the worker must never return into the daemon's code.
    unsafe { libc::_exit(code) }
}
