//! `urom_cmd_lat`: the round trip of one UROM command, host → worker → host.
//!
//! A private soft UROM service is started for the run (`async-doca urom-service
//! --builtin-samples` on a socket in a fresh directory), one worker is spawned on the second
//! CPU with the `worker_graph` plugin, and each iteration sends one `Loopback` command and
//! waits for its notification, checking the value. The latency is the whole round trip (as
//! `read_lat` reports it): the command crosses two processes and comes back.
//!
//! `raw` drives the DOCA UROM C API as a C program would (allocate the command task, fill its
//! payload, submit, progress until the callback ran); `async` awaits `Worker::command`.

use std::cell::Cell;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::ptr;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use async_doca::sys;
use async_doca::urom::plugin::samples::graph;
use async_doca::urom::{Service, Worker};
use async_doca::{CpuSet, Device, Error, ErrorKind, Result};

use super::cpu::runtime;
use super::cpu::two_cpus;
use super::raw::ok;
use super::stats::{timed, timed_async, Report, Run, Samples};
use super::{Mode, Params, PEER_TIMEOUT};

pub fn run(p: &Params) -> Result<Report> {
    let daemon = PerfDaemon::start()?;
    let (cpu_host, cpu_worker) = two_cpus()?;
    let (samples, elapsed) = match p.mode {
        Mode::Raw => {
            let socket = daemon.socket.clone();
            let p = *p;
            std::thread::spawn(move || {
                CpuSet::from_cpus([cpu_host])?.pin_current_thread()?;
                raw_loop(&p, &socket, cpu_worker)
            })
            .join()
            .unwrap_or_else(|_| Err(Error::new(ErrorKind::Other, "perf thread panicked")))?
        }
        Mode::Async => async_loop(p, &daemon.socket, cpu_host, cpu_worker)?,
        other => return Err(other.unsupported("urom_cmd_lat")),
    };
    let run = Run { test: "urom_cmd_lat", mode: p.mode.name(), size: 8, procs: 2 };
    Ok(run.report(samples, p.iters, elapsed))
}

fn loopback(value: u64) -> Vec<u8> {
    graph::Cmd::Loopback { value }.encode()
}

fn answered(reply: &[u8]) -> Option<u64> {
    match graph::Notif::decode(reply) {
        Ok(graph::Notif::Loopback { value }) => Some(value),
        Err(_) => None,
    }
}

fn async_loop(p: &Params, socket: &std::path::Path, cpu_host: usize, cpu_worker: usize) -> Result<(Samples, Duration)> {
    let rt = runtime(&[cpu_host], p.idle, p.park)?;
    let socket = socket.to_path_buf();
    let (warmup, iters) = (p.warmup, p.iters);
    // On the executor pinned to `cpu_host` (not block_on's calling thread), like the raw loop's
    // pinned thread, so both modes run with the same placement.
    let job = rt.spawn_on(cpu_host, move || async move {
        let dev = Device::open_default()?;
        let svc = Service::builder(&dev).socket_path(&socket).connect().await?;
        let id = svc.plugin(graph::PLUGIN_NAME)?.id;
        let w = Worker::builder(&svc).plugin_ids(id).cpuset(CpuSet::from_cpus([cpu_worker])?).start().await?;
        let w = &w;
        let (samples, elapsed) = timed_async(warmup, iters, 1.0, |i| async move {
            let reply = async_doca::time::timeout(PEER_TIMEOUT, w.command(id, &loopback(i))).await??;
            if answered(&reply) != Some(i) {
                return Err(Error::new(ErrorKind::Other, format!("urom_cmd_lat: wrong answer to command {i}")));
            }
            Ok(())
        })
        .await?;
        w.stop().await?;
        Ok::<_, Error>((samples, elapsed))
    })?;
    rt.block_on(job)?
}

// ---- raw: the DOCA UROM C API, driven like a C program ---------------------------------

/// Where the command callback reports (see `raw::Done` for why the fields are cells).
#[derive(Default)]
struct CmdDone {
    finished: Cell<bool>,
    status: Cell<i32>,
    value: Cell<Option<u64>>,
}

unsafe extern "C" fn cmd_done(task: *mut sys::doca_urom_worker_cmd_task, ud: sys::doca_data, _ctx: sys::doca_data) {
    // SAFETY: the task is ours again inside its callback; the user data points at the
    // `CmdDone` of the loop that submitted it, which waits for `finished` before it goes away.
    unsafe {
        let done = &*(ud.ptr as *const CmdDone);
        let status = sys::doca_task_get_status(sys::doca_urom_worker_cmd_task_as_task(task));
        done.status.set(status.0);
        if status == sys::DOCA_SUCCESS {
            let buf = sys::doca_urom_worker_cmd_task_get_response(task);
            let mut data = ptr::null_mut();
            let mut len = 0usize;
            if !buf.is_null()
                && sys::doca_buf_get_data(buf, &mut data) == sys::DOCA_SUCCESS
                && sys::doca_buf_get_data_len(buf, &mut len) == sys::DOCA_SUCCESS
                && !data.is_null()
            {
                done.value.set(answered(std::slice::from_raw_parts(data.cast::<u8>(), len)));
            }
        }
        done.finished.set(true);
        sys::doca_urom_worker_cmd_task_release(task);
    }
}

/// The raw objects, destroyed in order on drop (stop, progress until idle, destroy).
struct RawUrom {
    pe: *mut sys::doca_pe,
    svc: *mut sys::doca_urom_service,
    worker: *mut sys::doca_urom_worker,
    _dev: Device,
}

impl RawUrom {
    fn progress_until(&self, ctx: *mut sys::doca_ctx, want: sys::doca_ctx_states, what: &'static str) -> Result<()> {
        let deadline = Instant::now() + PEER_TIMEOUT;
        let mut state = sys::DOCA_CTX_STATE_IDLE;
        loop {
            // SAFETY: live ctx and PE of this thread; valid out-pointer.
            unsafe {
                ok(sys::doca_ctx_get_state(ctx, &mut state), "ctx_get_state")?;
                if state == want {
                    return Ok(());
                }
                sys::doca_pe_progress(self.pe);
            }
            if want == sys::DOCA_CTX_STATE_RUNNING && state == sys::DOCA_CTX_STATE_IDLE {
                return Err(Error::new(ErrorKind::BadState, what));
            }
            if Instant::now() > deadline {
                return Err(Error::new(ErrorKind::TimedOut, what));
            }
        }
    }
}

impl Drop for RawUrom {
    fn drop(&mut self) {
        // SAFETY: objects created by `raw_loop` on this thread; each ctx is stopped and
        // progressed to IDLE before its object is destroyed; the PE goes last.
        unsafe {
            for ctx in [
                (!self.worker.is_null()).then(|| sys::doca_urom_worker_as_ctx(self.worker)),
                (!self.svc.is_null()).then(|| sys::doca_urom_service_as_ctx(self.svc)),
            ]
            .into_iter()
            .flatten()
            {
                sys::doca_ctx_stop(ctx);
                let _ = self.progress_until(ctx, sys::DOCA_CTX_STATE_IDLE, "stop");
            }
            if !self.worker.is_null() {
                sys::doca_urom_worker_destroy(self.worker);
            }
            if !self.svc.is_null() {
                sys::doca_urom_service_destroy(self.svc);
            }
            if !self.pe.is_null() {
                sys::doca_pe_destroy(self.pe);
            }
        }
    }
}

fn raw_loop(p: &Params, socket: &std::path::Path, cpu_worker: usize) -> Result<(Samples, Duration)> {
    let dev = Device::open_default()?;
    let mut u = RawUrom { pe: ptr::null_mut(), svc: ptr::null_mut(), worker: ptr::null_mut(), _dev: dev.clone() };
    let path = std::ffi::CString::new(socket.as_os_str().as_encoded_bytes())
        .map_err(|_| Error::new(ErrorKind::InvalidArgument, "socket path contains NUL"))?;
    // SAFETY: plain DOCA setup on objects `u` owns (and destroys in order on drop); every
    // pointer is fresh from DOCA or an out-pointer to a local.
    let graph_id = unsafe {
        ok(sys::doca_pe_create(&mut u.pe), "pe_create")?;
        ok(sys::doca_urom_service_create(&mut u.svc), "urom_service_create")?;
        ok(sys::doca_urom_service_set_dev(u.svc, dev.as_ptr()), "urom_service_set_dev")?;
        ok(sys::doca_soft_urom_service_set_socket_path(u.svc, path.as_ptr()), "set_socket_path")?;
        let sctx = sys::doca_urom_service_as_ctx(u.svc);
        ok(sys::doca_pe_connect_ctx(u.pe, sctx), "pe_connect_ctx(service)")?;
        ok(sys::doca_ctx_start(sctx), "ctx_start(service)")?;
        u.progress_until(sctx, sys::DOCA_CTX_STATE_RUNNING, "urom service did not start")?;
        let mut list = ptr::null();
        let mut n = 0usize;
        ok(sys::doca_urom_service_get_plugins_list(u.svc, &mut list, &mut n), "get_plugins_list")?;
        let plugins = if n == 0 { &[][..] } else { std::slice::from_raw_parts(list, n) };
        let name_of = |p: &sys::doca_urom_service_plugin_info| {
            std::ffi::CStr::from_ptr(p.plugin_name.as_ptr()).to_string_lossy().into_owned()
        };
        let id = plugins
            .iter()
            .find(|p| name_of(p) == graph::PLUGIN_NAME)
            .map(|p| p.id)
            .ok_or_else(|| Error::new(ErrorKind::NotFound, "the service has no worker_graph"))?;

        ok(sys::doca_urom_worker_create(&mut u.worker), "urom_worker_create")?;
        ok(sys::doca_urom_worker_set_service(u.worker, u.svc), "worker_set_service")?;
        ok(sys::doca_urom_worker_set_plugins(u.worker, id), "worker_set_plugins")?;
        let mut cpus = sys::doca_cpu_set_t::empty();
        cpus.set(cpu_worker);
        ok(sys::doca_urom_worker_set_cpuset(u.worker, cpus), "worker_set_cpuset")?;
        ok(sys::doca_urom_worker_set_max_inflight_tasks(u.worker, 4), "worker_set_max_inflight")?;
        let wctx = sys::doca_urom_worker_as_ctx(u.worker);
        ok(sys::doca_pe_connect_ctx(u.pe, wctx), "pe_connect_ctx(worker)")?;
        let rc = sys::doca_ctx_start(wctx);
        if rc != sys::DOCA_ERROR_IN_PROGRESS {
            ok(rc, "ctx_start(worker)")?;
        }
        u.progress_until(wctx, sys::DOCA_CTX_STATE_RUNNING, "urom worker did not start")?;
        id
    };

    timed(p.warmup, p.iters, 1.0, |i| {
        let done = CmdDone::default();
        let payload = loopback(i);
        // SAFETY: the worker is RUNNING on this thread's PE; the task is ours until submitted;
        // its payload buffer belongs to it. `done` outlives the task: the loop below waits for
        // the callback, and on timeout stopping the worker flushes the task through it.
        unsafe {
            let mut task = ptr::null_mut();
            ok(sys::doca_urom_worker_cmd_task_allocate_init(u.worker, graph_id, &mut task), "cmd_task_allocate")?;
            let buf = sys::doca_urom_worker_cmd_task_get_payload(task);
            let mut head = ptr::null_mut();
            ok(sys::doca_buf_get_head(buf, &mut head), "buf_get_head")?;
            ptr::copy_nonoverlapping(payload.as_ptr(), head.cast::<u8>(), payload.len());
            ok(sys::doca_buf_set_data(buf, head, payload.len()), "buf_set_data")?;
            sys::doca_urom_worker_cmd_task_set_cb(task, Some(cmd_done));
            let t = sys::doca_urom_worker_cmd_task_as_task(task);
            sys::doca_task_set_user_data(t, sys::doca_data { ptr: (&done as *const CmdDone).cast_mut().cast() });
            ok(sys::doca_task_submit(t), "task_submit")?;
        }
        let deadline = Instant::now() + PEER_TIMEOUT;
        let mut spins = 0u32;
        while !done.finished.get() {
            // SAFETY: our PE, this thread.
            unsafe { sys::doca_pe_progress(u.pe) };
            spins = spins.wrapping_add(1);
            if spins % 4096 == 0 && Instant::now() > deadline {
                // Stopping the worker flushes the task through `cmd_done`; `done` stays valid
                // until that has run.
                // SAFETY: live worker ctx of this thread.
                unsafe { sys::doca_ctx_stop(sys::doca_urom_worker_as_ctx(u.worker)) };
                while !done.finished.get() {
                    // SAFETY: as above.
                    unsafe { sys::doca_pe_progress(u.pe) };
                }
                return Err(Error::new(ErrorKind::TimedOut, "urom_cmd_lat: the worker did not answer"));
            }
        }
        ok(sys::doca_error_t(done.status.get()), "urom command")?;
        if done.value.get() != Some(i) {
            return Err(Error::new(ErrorKind::Other, format!("urom_cmd_lat: wrong answer to command {i}")));
        }
        Ok(())
    })
}

// ---- the private service ---------------------------------------------------------------

/// The private directory of a perf run is this followed by its process id.
const DIR_PREFIX: &str = "async-doca-perf-urom-";

/// Removes the private directories of perf runs whose process is gone (one killed by a
/// signal cannot remove its own: its service dies with it, but the directory and the
/// rendezvous socket in it stay). A directory whose process id is alive is left alone, even
/// if the id was reused by another program.
fn remove_stale_dirs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else { return };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix(DIR_PREFIX)).and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        // SAFETY: kill with signal 0 sends nothing; it only checks that the process exists.
        let gone = pid > 0
            && unsafe { libc::kill(pid, 0) } != 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if gone {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// `async-doca urom-service` in a directory of its own, stopped with SIGTERM on drop.
pub(super) struct PerfDaemon {
    child: Option<Child>,
    socket: PathBuf,
    dir: PathBuf,
}

impl PerfDaemon {
    pub(super) fn socket(&self) -> &std::path::Path {
        &self.socket
    }

    /// A directory of this run's own (removed at the end), for rendezvous sockets.
    pub(super) fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    pub(super) fn start() -> Result<PerfDaemon> {
        remove_stale_dirs();
        let dir = std::env::temp_dir().join(format!("{DIR_PREFIX}{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| Error::os(e, "perf: create the service directory"))?;
        let socket = dir.join("urom.sock");
        let exe = std::env::current_exe().map_err(|e| Error::os(e, "perf: find own executable"))?;
        let mut cmd = Command::new(exe);
        super::peer::dies_with_this_thread(&mut cmd);
        let mut child = cmd
            .args(["urom-service", "--builtin-samples", "--log-level", "warn", "--socket"])
            .arg(&socket)
            .env_remove("UROM_PLUGIN_PATH")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| Error::os(e, "perf: start the UROM service"))?;
        let out = child.stdout.take();
        let mut me = PerfDaemon { child: Some(child), socket, dir };
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let Some(out) = out else { return };
            for line in BufReader::new(out).lines().map_while(|l| l.ok()) {
                if line.starts_with("listening on") {
                    let _ = tx.send(());
                }
            }
        });
        if rx.recv_timeout(Duration::from_secs(10)).is_err() {
            me.stop();
            return Err(Error::new(ErrorKind::TimedOut, "perf: the UROM service did not start"));
        }
        Ok(me)
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: kill(2) on our own child.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(5);
            while matches!(c.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Drop for PerfDaemon {
    fn drop(&mut self) {
        self.stop();
    }
}
