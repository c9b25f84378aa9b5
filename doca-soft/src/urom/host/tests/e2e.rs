//! End-to-end tests: the host ctxs against the real daemon ([`crate::urom::daemon`]) running in
//! a child process (this test binary re-executed with only [`e2e_daemon_child`] selected),
//! with a C plugin (`testdata/echo_plugin.c`) built by the system C compiler.
//!
//! Each test gets its own socket and plugin directory (pid + counter), and the [`DaemonChild`]
//! guard terminates the child (SIGTERM, then SIGKILL), reaps it and removes its files, also
//! when the test fails.

use core::ptr;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::*;
use crate::ctx::{doca_ctx_start, doca_ctx_stop};
use crate::pe::doca_pe_connect_ctx;
use crate::task::doca_task_submit;

/// The socket the child daemon listens on.
const SOCKET_ENV: &str = "DOCA_SOFT_UROM_E2E_SOCKET";
/// The child daemon's plugin directory.
const PLUGINS_ENV: &str = "DOCA_SOFT_UROM_E2E_PLUGINS";
/// If set, the only uid the child daemon allows (`--allow-uid`).
const ALLOW_UID_ENV: &str = "DOCA_SOFT_UROM_E2E_ALLOW_UID";

/// Runs the daemon when re-executed by [`DaemonChild::spawn`]; does nothing otherwise.
#[test]
#[ignore = "the child process of the UROM end-to-end tests"]
fn e2e_daemon_child() {
    let (Some(sock), Some(plugins)) = (std::env::var_os(SOCKET_ENV), std::env::var_os(PLUGINS_ENV)) else {
        return;
    };
    let mut cfg = crate::urom::daemon::Config::new(PathBuf::from(sock));
    cfg.plugin_path = vec![PathBuf::from(plugins)];
    if let Some(uid) = std::env::var(ALLOW_UID_ENV).ok().and_then(|u| u.parse().ok()) {
        cfg.allow_uids = vec![uid];
    }
    if let Err(e) = crate::urom::daemon::run(cfg) {
        eprintln!("daemon child: {e}");
        std::process::exit(2);
    }
}

/// A per-test directory with the echo plugin built in it.
struct PluginDir(PathBuf);

impl PluginDir {
    /// None (with a message) when there is no C compiler: the tests then have nothing to run.
    fn build() -> Option<PluginDir> {
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "urom-e2e-plugins-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/urom/host/testdata/echo_plugin.c");
        let me = PluginDir(dir);
        let out = Command::new("cc")
            .args(["-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o"])
            .arg(me.0.join("echo.so"))
            .arg(&src)
            .output();
        match out {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                eprintln!("skipped: no C compiler (cc) to build the UROM test plugin");
                None
            }
            Err(e) => panic!("cc: {e}"),
            Ok(o) => {
                assert!(o.status.success(), "cc failed: {}", String::from_utf8_lossy(&o.stderr));
                Some(me)
            }
        }
    }
}

impl Drop for PluginDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The daemon in a child process; terminated and reaped on drop.
struct DaemonChild {
    child: Child,
    path: PathBuf,
}

impl DaemonChild {
    fn spawn(plugins: &PluginDir) -> DaemonChild {
        Self::spawn_with(plugins, None)
    }

    fn spawn_with(plugins: &PluginDir, allow_uid: Option<u32>) -> DaemonChild {
        let path = unique_path("e2e");
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        if let Some(uid) = allow_uid {
            cmd.env(ALLOW_UID_ENV, uid.to_string());
        }
        let mut child = cmd
            .args([
                "--exact",
                "urom::host::tests::e2e::e2e_daemon_child",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(SOCKET_ENV, &path)
            .env(PLUGINS_ENV, &plugins.0)
            .stdout(Stdio::piped())
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let mut me = DaemonChild { child, path };
        // The daemon prints "listening on <path>" once its socket is bound (after libtest's
        // "test ... " prefix on the same line). A reader thread forwards the lines and keeps
        // draining the pipe afterwards, so the child never blocks on it.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines() {
                let Ok(l) = l else { break };
                let _ = tx.send(l);
            }
        });
        let end = Instant::now() + Duration::from_secs(30);
        loop {
            match rx.recv_timeout(end.saturating_duration_since(Instant::now())) {
                Ok(l) if l.contains("listening on") => return me,
                Ok(_) => continue,
                Err(_) => {
                    me.stop();
                    panic!("the daemon child did not start listening");
                }
            }
        }
    }

    /// SIGTERM, wait (bounded), SIGKILL, reap.
    fn stop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // SAFETY: signalling our own child by pid; it is not reaped yet, so the pid is its.
            unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
            let end = Instant::now() + Duration::from_secs(5);
            while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(5));
            }
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Drop for DaemonChild {
    fn drop(&mut self) {
        self.stop();
    }
}

fn plugin_id(h: &Host, name: &str) -> u64 {
    let mut list: *const doca_urom_service_plugin_info = ptr::null();
    let mut n = 0usize;
    // SAFETY: RUNNING service, valid out-pointers; the list is valid while RUNNING.
    unsafe {
        ok(doca_urom_service_get_plugins_list(h.svc, &mut list, &mut n));
        core::slice::from_raw_parts(list, n)
            .iter()
            .find(|p| core::ffi::CStr::from_ptr(p.plugin_name.as_ptr()).to_str() == Ok(name))
            .map(|p| p.id)
            .expect("plugin listed")
    }
}

fn run_cmd(h: &Host, w: *mut doca_urom_worker, plugin: u64, payload: &[u8]) -> (doca_error_t, Vec<u8>) {
    let t = cmd(w, plugin, payload);
    ok(submit(t));
    wait(h.pe, "command answer", || CMDS.with(|c| !c.borrow().is_empty()));
    let (task, st, resp) = take_cmds().pop().unwrap();
    assert_eq!(task, t as usize);
    release(t);
    (st, resp)
}

#[test]
fn e2e_service_worker_commands_gid_and_domain() {
    let Some(plugins) = PluginDir::build() else { return };
    let daemon = DaemonChild::spawn(&plugins);
    let h = Host::new(&daemon.path);
    h.start();
    let echo = plugin_id(&h, "echo");
    let w = h.worker(echo);
    // SAFETY: live worker.
    ok(unsafe { doca_urom_worker_set_gid(w, 77) });
    h.run_worker(w);
    let mut id = 0;
    // SAFETY: live worker, valid out-pointer.
    ok(unsafe { doca_urom_worker_get_id(w, &mut id) });
    assert_eq!(id, crate::urom::proto::WORKER_ID_FIRST);

    assert_eq!(run_cmd(&h, w, echo, b"hello, worker"), (DOCA_SUCCESS, b"hello, worker".to_vec()));
    assert_eq!(run_cmd(&h, w, echo, b"fail please"), (DOCA_ERROR_IO_FAILED, b"fail please".to_vec()));
    // No domain yet: the plugin's lookup fails.
    assert_ne!(run_cmd(&h, w, echo, b"addr:5").0, DOCA_SUCCESS);

    // Many commands in flight at once (the default pool of 32).
    let ts: Vec<_> = (0..32).map(|i| cmd(w, echo, format!("msg {i}").as_bytes())).collect();
    for &t in &ts {
        ok(submit(t));
    }
    wait(h.pe, "32 answers", || CMDS.with(|c| c.borrow().len() == 32));
    let done = take_cmds();
    for (i, &t) in ts.iter().enumerate() {
        let d = done.iter().find(|d| d.0 == t as usize).expect("every task answered");
        assert_eq!((d.1, d.2.clone()), (DOCA_SUCCESS, format!("msg {i}").into_bytes()));
        release(t);
    }

    // The gid query sees the worker.
    let mut g = ptr::null_mut();
    // SAFETY: live service.
    unsafe {
        ok(doca_urom_service_get_workers_by_gid_task_allocate_init(h.svc, 77, Some(gid_cb), &mut g));
        ok(doca_task_submit(doca_urom_service_get_workers_by_gid_task_as_task(g)));
    }
    wait(h.pe, "gid answer", || GIDS.with(|x| !x.borrow().is_empty()));
    assert_eq!(take_gids()[0].2, vec![id]);
    // SAFETY: ours.
    ok(unsafe { doca_urom_service_get_workers_by_gid_task_release(g) });

    // A one-process domain: afterwards the plugin finds its own address under member id 5.
    let mut oob = doca_urom_domain_oob_coll {
        allgather: Some(solo_allgather),
        req_test: Some(solo_test),
        req_free: Some(solo_free),
        coll_info: ptr::null_mut(),
        n_oob_indexes: 1,
        oob_index: 0,
    };
    let mut dom = ptr::null_mut();
    let mut ids = [5u64];
    let mut wp = [w];
    // SAFETY: live objects; arrays of the given lengths.
    let dc = unsafe {
        ok(doca_urom_domain_create(&mut dom));
        let dc = doca_urom_domain_as_ctx(dom);
        ok(doca_pe_connect_ctx(h.pe, dc));
        ok(doca_urom_domain_set_oob(dom, &mut oob));
        ok(doca_urom_domain_set_workers(dom, ids.as_mut_ptr(), wp.as_mut_ptr(), 1));
        ok(doca_urom_domain_set_buffers_count(dom, 0));
        assert_eq!(doca_ctx_start(dc), DOCA_ERROR_IN_PROGRESS);
        dc
    };
    wait(h.pe, "domain RUNNING", || state(dc) != DOCA_CTX_STATE_STARTING);
    assert_eq!(state(dc), DOCA_CTX_STATE_RUNNING);
    let (st, addr) = run_cmd(&h, w, echo, b"addr:5");
    assert_eq!(st, DOCA_SUCCESS);
    assert_eq!(&addr[..2], b"EA", "the address the plugin reported at spawn");
    // SAFETY: live domain.
    ok(unsafe { doca_ctx_stop(dc) });
    // The DomainDestroy (sent before this command on the same connection) removed the table.
    assert_eq!(run_cmd(&h, w, echo, b"addr:5").0, DOCA_ERROR_NOT_FOUND);
    // SAFETY: IDLE domain.
    ok(unsafe { doca_urom_domain_destroy(dom) });
    h.drop_worker(w);
}

#[test]
fn e2e_worker_death_and_daemon_death() {
    let Some(plugins) = PluginDir::build() else { return };
    let mut daemon = DaemonChild::spawn(&plugins);
    let h = Host::new(&daemon.path);
    h.start();
    let echo = plugin_id(&h, "echo");

    // A worker process that dies fails its in-flight commands; later submits: NOT_CONNECTED.
    let w = h.worker(echo);
    h.run_worker(w);
    let die = cmd(w, echo, b"die");
    ok(submit(die));
    wait(h.pe, "abort", || CMDS.with(|c| !c.borrow().is_empty()));
    assert_eq!(take_cmds()[0].1, DOCA_ERROR_CONNECTION_ABORTED);
    assert_eq!(submit(die), DOCA_ERROR_NOT_CONNECTED);
    release(die);
    h.drop_worker(w);

    // The daemon keeps serving: a new worker runs.
    let w = h.worker(echo);
    h.run_worker(w);
    assert_eq!(run_cmd(&h, w, echo, b"still here").0, DOCA_SUCCESS);

    // The daemon dies: the worker process follows (its control socket hangs up), the data
    // connection breaks, and the worker enters its error state; stop still reaches IDLE.
    daemon.stop();
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let t = cmd(w, echo, b"probe");
        let r = submit(t);
        if r == DOCA_ERROR_NOT_CONNECTED {
            release(t);
            break;
        }
        // Sent before the break was seen: answered (the worker had not exited yet) or aborted.
        ok(r);
        wait(h.pe, "probe answer", || CMDS.with(|c| !c.borrow().is_empty()));
        let st = take_cmds()[0].1;
        assert!(st == DOCA_SUCCESS || st == DOCA_ERROR_CONNECTION_ABORTED, "{st:?}");
        release(t);
        assert!(Instant::now() < end, "the worker never noticed the daemon's death");
        std::thread::sleep(Duration::from_millis(1));
    }
    h.drop_worker(w);
    let mut gt = ptr::null_mut();
    // SAFETY: live service: its connection is gone too.
    unsafe {
        ok(doca_urom_service_get_workers_by_gid_task_allocate_init(h.svc, 1, Some(gid_cb), &mut gt));
        let gtask = doca_urom_service_get_workers_by_gid_task_as_task(gt);
        wait(h.pe, "service hang-up", || {
            let r = doca_task_submit(gtask);
            assert_ne!(r, DOCA_SUCCESS, "submitted to a dead daemon");
            r == DOCA_ERROR_NOT_CONNECTED
        });
        ok(doca_urom_service_get_workers_by_gid_task_release(gt));
    }
}

#[test]
fn e2e_refused_uid_is_authentication() {
    let Some(plugins) = PluginDir::build() else { return };
    // SAFETY: getuid has no preconditions.
    let me = unsafe { libc::getuid() };
    let daemon = DaemonChild::spawn_with(&plugins, Some(me.wrapping_add(1)));
    let h = Host::new(&daemon.path);
    // SAFETY: live ctx.
    assert_eq!(unsafe { doca_ctx_start(h.sctx()) }, DOCA_ERROR_AUTHENTICATION);
    assert_eq!(state(h.sctx()), DOCA_CTX_STATE_IDLE);
}
