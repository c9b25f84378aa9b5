//! Comch in one process: a server and a client on two PEs of one thread, progressed in turn.
//! Handshake and events, messages both ways with counters, disconnection from either side,
//! a client started before its server, configuration rules, and the PE fd waking up.

use core::cell::RefCell;
use core::ffi::CStr;
use core::ptr;
use std::time::{Duration, Instant};

use super::chan::*;
use super::*;
use crate::ctx::{doca_ctx_get_state, doca_ctx_start, doca_ctx_stop};
use crate::dev::{doca_dev, doca_dev_close};
use crate::pe::{doca_pe, doca_pe_connect_ctx, doca_pe_progress, doca_pe_request_notification};
use crate::task::{doca_task_free, doca_task_get_status, doca_task_submit};
use crate::testkit::dev::test_open_default;
use crate::testkit::{destroy_pe, new_pe, pe_fd, readable};
use crate::types::*;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Connect(usize, u8),
    Disconnect(usize),
    Recv(usize, Vec<u8>),
    Sent(doca_error_t),
    /// The receive callback stopped and destroyed its server (`KILL`): the two codes.
    Killed(doca_error_t, doca_error_t),
    /// The peer's consumer of that id was announced (true) or withdrawn (false).
    Consumer(usize, u32, bool),
}

thread_local! {
    static SEEN: RefCell<Vec<Seen>> = const { RefCell::new(Vec::new()) };
    /// A server the next receive callback stops and destroys from inside the callback.
    static KILL: core::cell::Cell<*mut doca_comch_server> = const { core::cell::Cell::new(ptr::null_mut()) };
}

fn take() -> Vec<Seen> {
    SEEN.with(|s| core::mem::take(&mut *s.borrow_mut()))
}

unsafe extern "C" fn on_connect(
    _e: *mut doca_comch_event_connection_status_changed,
    c: *mut doca_comch_connection,
    ok: u8,
) {
    SEEN.with(|s| s.borrow_mut().push(Seen::Connect(c as usize, ok)));
}
unsafe extern "C" fn on_disconnect(
    _e: *mut doca_comch_event_connection_status_changed,
    c: *mut doca_comch_connection,
    _ok: u8,
) {
    SEEN.with(|s| s.borrow_mut().push(Seen::Disconnect(c as usize)));
}
unsafe extern "C" fn on_recv(
    _e: *mut doca_comch_event_msg_recv,
    buf: *mut u8,
    len: u32,
    c: *mut doca_comch_connection,
) {
    // SAFETY: the buffer holds `len` bytes for the duration of the callback.
    let v = unsafe { core::slice::from_raw_parts(buf, len as usize) }.to_vec();
    SEEN.with(|s| s.borrow_mut().push(Seen::Recv(c as usize, v)));
    let server = KILL.with(|k| k.replace(ptr::null_mut()));
    if !server.is_null() {
        // SAFETY: the test's live server, whose callback this is.
        let codes = unsafe { (doca_ctx_stop(doca_comch_server_as_ctx(server)), doca_comch_server_destroy(server)) };
        SEEN.with(|s| s.borrow_mut().push(Seen::Killed(codes.0, codes.1)));
    }
}
unsafe extern "C" fn on_sent(t: *mut doca_comch_task_send, _ud: doca_data, _cud: doca_data) {
    // SAFETY: our task, back inside its callback.
    let st = unsafe { doca_task_get_status(doca_comch_task_send_as_task(t)) };
    SEEN.with(|s| s.borrow_mut().push(Seen::Sent(st)));
    // SAFETY: as above; not used afterwards.
    unsafe { doca_task_free(doca_comch_task_send_as_task(t)) };
}

fn state(ctx: *mut crate::ctx::doca_ctx) -> doca_ctx_states {
    let mut s = 99;
    // SAFETY: live ctx.
    assert_eq!(unsafe { doca_ctx_get_state(ctx, &mut s) }, DOCA_SUCCESS);
    s
}

/// Progresses both PEs until neither has anything to do (bounded).
fn pump(pes: &[*mut doca_pe]) {
    for _ in 0..10_000 {
        let mut did = 0;
        for &pe in pes {
            // SAFETY: live PEs.
            did += unsafe { doca_pe_progress(pe) } as u32;
        }
        if did == 0 {
            return;
        }
    }
    panic!("progress never settled");
}

/// Progresses until `f` holds (bounded by iterations, not time).
fn pump_until(pes: &[*mut doca_pe], mut f: impl FnMut() -> bool) {
    for _ in 0..1_000_000 {
        if f() {
            return;
        }
        for &pe in pes {
            // SAFETY: live PEs.
            unsafe { doca_pe_progress(pe) };
        }
    }
    panic!("condition never held");
}

/// Progresses until the events seen include a disconnect, then until quiet; the events.
/// A departure is reported by a later progress, not necessarily the first quiet one: a
/// process spawned by a parallel test can hold a copy of a socket between its fork and exec
/// (CLOEXEC closes it only at exec), which delays the end of file.
fn events_until_disconnect(pes: &[*mut doca_pe]) -> Vec<Seen> {
    let mut seen = Vec::new();
    pump_until(pes, || {
        seen.extend(take());
        seen.iter().any(|e| matches!(e, Seen::Disconnect(_)))
    });
    pump(pes);
    seen.extend(take());
    seen
}

fn unique(tag: &str) -> std::ffi::CString {
    std::ffi::CString::new(format!("t-{tag}-{}", std::process::id())).unwrap()
}

struct Pair {
    dev: *mut doca_dev,
    spe: *mut doca_pe,
    cpe: *mut doca_pe,
    server: *mut doca_comch_server,
    client: *mut doca_comch_client,
}

type ConsumerCb = unsafe extern "C" fn(*mut doca_comch_event_consumer, *mut doca_comch_connection, u32);

unsafe extern "C" fn on_new_consumer(_e: *mut doca_comch_event_consumer, c: *mut doca_comch_connection, id: u32) {
    SEEN.with(|s| s.borrow_mut().push(Seen::Consumer(c as usize, id, true)));
}

unsafe extern "C" fn on_expired_consumer(_e: *mut doca_comch_event_consumer, c: *mut doca_comch_connection, id: u32) {
    SEEN.with(|s| s.borrow_mut().push(Seen::Consumer(c as usize, id, false)));
}

impl Pair {
    fn new(tag: &str, start_server: bool) -> Pair {
        take();
        let dev = test_open_default();
        let (spe, cpe) = (new_pe(), new_pe());
        let name = unique(tag);
        let (mut server, mut client) = (ptr::null_mut(), ptr::null_mut());
        // SAFETY: live objects, valid out-pointers.
        unsafe {
            assert_eq!(doca_comch_server_create(dev, ptr::null_mut(), name.as_ptr(), &mut server), DOCA_SUCCESS);
            assert_eq!(doca_comch_server_task_send_set_conf(server, Some(on_sent), Some(on_sent), 8), DOCA_SUCCESS);
            assert_eq!(doca_comch_server_event_msg_recv_register(server, Some(on_recv)), DOCA_SUCCESS);
            assert_eq!(
                doca_comch_server_event_connection_status_changed_register(
                    server,
                    Some(on_connect),
                    Some(on_disconnect)
                ),
                DOCA_SUCCESS
            );
            let (new, expired) = (Some(on_new_consumer as ConsumerCb), Some(on_expired_consumer as ConsumerCb));
            assert_eq!(doca_comch_server_event_consumer_register(server, new, expired), DOCA_SUCCESS);
            assert_eq!(doca_comch_server_set_max_msg_size(server, 1024), DOCA_SUCCESS);
            assert_eq!(doca_pe_connect_ctx(spe, doca_comch_server_as_ctx(server)), DOCA_SUCCESS);
            assert_eq!(doca_comch_client_create(dev, name.as_ptr(), &mut client), DOCA_SUCCESS);
            assert_eq!(doca_comch_client_task_send_set_conf(client, Some(on_sent), Some(on_sent), 8), DOCA_SUCCESS);
            assert_eq!(doca_comch_client_event_msg_recv_register(client, Some(on_recv)), DOCA_SUCCESS);
            let (new, expired) = (Some(on_new_consumer as ConsumerCb), Some(on_expired_consumer as ConsumerCb));
            assert_eq!(doca_comch_client_event_consumer_register(client, new, expired), DOCA_SUCCESS);
            assert_eq!(doca_comch_client_set_recv_queue_size(client, 8), DOCA_SUCCESS);
            assert_eq!(doca_pe_connect_ctx(cpe, doca_comch_client_as_ctx(client)), DOCA_SUCCESS);
            if start_server {
                assert_eq!(doca_ctx_start(doca_comch_server_as_ctx(server)), DOCA_SUCCESS);
            }
        }
        Pair { dev, spe, cpe, server, client }
    }

    fn sctx(&self) -> *mut crate::ctx::doca_ctx {
        // SAFETY: live server.
        unsafe { doca_comch_server_as_ctx(self.server) }
    }

    fn cctx(&self) -> *mut crate::ctx::doca_ctx {
        // SAFETY: live client.
        unsafe { doca_comch_client_as_ctx(self.client) }
    }

    fn client_conn(&self) -> *mut doca_comch_connection {
        let mut c = ptr::null_mut();
        // SAFETY: live client, valid out-pointer.
        assert_eq!(unsafe { doca_comch_client_get_connection(self.client, &mut c) }, DOCA_SUCCESS);
        c
    }

    fn finish(self) {
        // SAFETY: live objects, torn down in order.
        unsafe {
            for c in [self.cctx(), self.sctx()] {
                let r = doca_ctx_stop(c);
                assert!(r == DOCA_SUCCESS || r == DOCA_ERROR_IN_PROGRESS, "{r:?}");
            }
            pump(&[self.spe, self.cpe]);
            assert_eq!(doca_comch_client_destroy(self.client), DOCA_SUCCESS);
            assert_eq!(doca_comch_server_destroy(self.server), DOCA_SUCCESS);
        }
        destroy_pe(self.spe);
        destroy_pe(self.cpe);
        // SAFETY: nothing uses the device any more.
        assert_eq!(unsafe { doca_dev_close(self.dev) }, DOCA_SUCCESS);
    }
}

/// Sends `msg` from `ctx_kind` (true: server) on `conn`.
fn send(p: &Pair, server: bool, conn: *mut doca_comch_connection, msg: &[u8]) -> doca_error_t {
    let mut t = ptr::null_mut();
    // SAFETY: live objects; `msg` outlives the completion in every test (it is pumped before
    // the slice goes away).
    unsafe {
        let rc = if server {
            doca_comch_server_task_send_alloc_init(p.server, conn, msg.as_ptr().cast(), msg.len() as u32, &mut t)
        } else {
            doca_comch_client_task_send_alloc_init(p.client, conn, msg.as_ptr().cast(), msg.len() as u32, &mut t)
        };
        if rc != DOCA_SUCCESS {
            return rc;
        }
        let rc = doca_task_submit(doca_comch_task_send_as_task(t));
        if rc != DOCA_SUCCESS {
            doca_task_free(doca_comch_task_send_as_task(t));
        }
        rc
    }
}

#[test]
fn handshake_messages_both_ways_and_counters() {
    let p = Pair::new("hs", true);
    // SAFETY: live client ctx.
    assert_eq!(unsafe { doca_ctx_start(p.cctx()) }, DOCA_ERROR_IN_PROGRESS);
    assert_eq!(state(p.cctx()), DOCA_CTX_STATE_STARTING);
    let mut c = ptr::null_mut();
    // SAFETY: live client.
    assert_eq!(unsafe { doca_comch_client_get_connection(p.client, &mut c) }, DOCA_ERROR_BAD_STATE);
    pump_until(&[p.spe, p.cpe], || state(p.cctx()) == DOCA_CTX_STATE_RUNNING);
    pump(&[p.spe, p.cpe]);
    let seen = take();
    let Some(Seen::Connect(sconn, 1)) = seen.first().cloned() else { panic!("{seen:?}") };
    let sconn = sconn as *mut doca_comch_connection;
    let cconn = p.client_conn();
    // SAFETY: live connections.
    unsafe {
        assert_eq!(doca_comch_server_get_server_ctx(sconn), p.server);
        assert!(doca_comch_client_get_server_ctx_is_null(sconn));
        assert_eq!(doca_comch_client_get_client_ctx(cconn), p.client);
        assert_eq!(doca_comch_connection_set_user_data(cconn, doca_data::from_u64(77)), DOCA_SUCCESS);
        assert_eq!(doca_comch_connection_get_user_data(cconn).as_u64(), 77);
    }

    assert_eq!(send(&p, false, cconn, b"ping"), DOCA_SUCCESS);
    pump(&[p.spe, p.cpe]);
    let seen = take();
    // Two PEs: the order between them depends on which one is progressed first.
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(seen.contains(&Seen::Sent(DOCA_SUCCESS)) && seen.contains(&Seen::Recv(sconn as usize, b"ping".to_vec())));
    assert_eq!(send(&p, true, sconn, b"pong!"), DOCA_SUCCESS);
    assert_eq!(send(&p, true, sconn, b""), DOCA_SUCCESS, "empty messages are messages");
    pump(&[p.spe, p.cpe]);
    let seen = take();
    assert!(seen.contains(&Seen::Recv(cconn as usize, b"pong!".to_vec())), "{seen:?}");
    assert!(seen.contains(&Seen::Recv(cconn as usize, vec![])), "{seen:?}");

    // Too large for the negotiated limit (the server set 1024).
    let big = vec![0u8; 1025];
    assert_eq!(send(&p, false, cconn, &big), DOCA_ERROR_INVALID_VALUE);
    let mut v = 0u64;
    // SAFETY: live connections, valid out-pointers.
    unsafe {
        assert_eq!(doca_comch_connection_update_info(cconn), DOCA_SUCCESS);
        assert_eq!(doca_comch_connection_get_counter(cconn, DOCA_COMCH_COUNTER_SENT_BYTES, &mut v), DOCA_SUCCESS);
        assert_eq!(v, 4);
        assert_eq!(doca_comch_connection_get_counter(cconn, DOCA_COMCH_COUNTER_RECV_MESSAGES, &mut v), DOCA_SUCCESS);
        assert_eq!(v, 2);
        assert_eq!(doca_comch_connection_get_counter(cconn, 99, &mut v), DOCA_ERROR_INVALID_VALUE);
        // Configuration is IDLE-only.
        assert_eq!(doca_comch_server_set_max_msg_size(p.server, 10), DOCA_ERROR_BAD_STATE);
        assert_eq!(doca_comch_client_set_recv_queue_size(p.client, 10), DOCA_ERROR_BAD_STATE);
    }
    p.finish();
}

/// `doca_comch_client_get_client_ctx` of a server connection is NULL.
unsafe fn doca_comch_client_get_server_ctx_is_null(c: *mut doca_comch_connection) -> bool {
    // SAFETY: forwarded.
    unsafe { doca_comch_client_get_client_ctx(c) }.is_null()
}

#[test]
fn client_stop_is_a_disconnect_and_server_disconnect_breaks_the_client() {
    let p = Pair::new("disc", true);
    // SAFETY: live ctx.
    unsafe { doca_ctx_start(p.cctx()) };
    pump_until(&[p.spe, p.cpe], || state(p.cctx()) == DOCA_CTX_STATE_RUNNING);
    pump(&[p.spe, p.cpe]);
    let Some(Seen::Connect(sconn, 1)) = take().first().cloned() else { panic!() };
    let sconn = sconn as *mut doca_comch_connection;
    let cconn = p.client_conn();
    // The server drops the client: the client's sends fail, its info says aborted.
    // SAFETY: live objects.
    unsafe {
        assert_eq!(doca_comch_server_disconnect(p.server, sconn), DOCA_SUCCESS);
        assert_eq!(doca_comch_server_disconnect(p.server, sconn), DOCA_ERROR_NOT_CONNECTED);
    }
    pump_until(&[p.spe, p.cpe], || {
        send(&p, false, cconn, b"x") != DOCA_SUCCESS || {
            pump(&[p.spe, p.cpe]);
            false
        }
    });
    pump(&[p.spe, p.cpe]);
    // SAFETY: live connection.
    assert_eq!(unsafe { doca_comch_connection_update_info(cconn) }, DOCA_ERROR_CONNECTION_ABORTED);
    take();

    // A client that restarts connects again; then its stop is a disconnect on the server.
    // SAFETY: live ctx.
    unsafe {
        assert_eq!(doca_ctx_stop(p.cctx()), DOCA_SUCCESS);
        assert_eq!(doca_ctx_start(p.cctx()), DOCA_ERROR_IN_PROGRESS);
    }
    pump_until(&[p.spe, p.cpe], || state(p.cctx()) == DOCA_CTX_STATE_RUNNING);
    pump(&[p.spe, p.cpe]);
    let Some(Seen::Connect(second, 1)) = take().first().cloned() else { panic!() };
    // SAFETY: live ctx.
    assert_eq!(unsafe { doca_ctx_stop(p.cctx()) }, DOCA_SUCCESS);
    assert_eq!(events_until_disconnect(&[p.spe, p.cpe]), vec![Seen::Disconnect(second)]);
    p.finish();
}

#[test]
fn client_started_first_waits_for_its_server_and_the_pe_fd_wakes() {
    let p = Pair::new("late", false);
    // SAFETY: live ctx.
    assert_eq!(unsafe { doca_ctx_start(p.cctx()) }, DOCA_ERROR_IN_PROGRESS);
    pump(&[p.cpe]);
    assert_eq!(state(p.cctx()), DOCA_CTX_STATE_STARTING);
    // SAFETY: live ctx.
    assert_eq!(unsafe { doca_ctx_start(p.sctx()) }, DOCA_SUCCESS);
    pump_until(&[p.spe, p.cpe], || state(p.cctx()) == DOCA_CTX_STATE_RUNNING);
    pump(&[p.spe, p.cpe]);
    take();
    // The server's PE, armed and idle, wakes when the client sends.
    let fd = pe_fd(p.spe);
    // SAFETY: live PE.
    assert_eq!(unsafe { doca_pe_request_notification(p.spe) }, DOCA_SUCCESS);
    assert!(!readable(fd, 0));
    let msg = *b"wake";
    assert_eq!(send(&p, false, p.client_conn(), &msg), DOCA_SUCCESS);
    assert!(readable(fd, 5_000), "a message makes the server's notification handle readable");
    pump(&[p.spe, p.cpe]);
    assert!(take().iter().any(|s| matches!(s, Seen::Recv(_, m) if m == b"wake")));
    p.finish();
}

/// A client whose server never comes gives up after its connect window: 60 s by default (the
/// samples wait 30 s for a late server), `DOCA_SOFT_COMCH_CONNECT_TIMEOUT_MS` when set. Runs
/// in a child process with the variable set (this process's environment is left alone).
#[test]
fn a_client_without_a_server_gives_up_after_its_connect_window() {
    const CHILD: &str = "DOCA_SOFT_TEST_COMCH_WINDOW_CHILD";
    assert!(CONNECT_TIMEOUT > Duration::from_secs(30), "NVIDIA's samples wait 30 s for a server");
    if std::env::var_os(CHILD).is_some() {
        let p = Pair::new("window", false);
        let t0 = Instant::now();
        // SAFETY: live ctx.
        assert_eq!(unsafe { doca_ctx_start(p.cctx()) }, DOCA_ERROR_IN_PROGRESS);
        while state(p.cctx()) != DOCA_CTX_STATE_IDLE && t0.elapsed() < Duration::from_secs(20) {
            // SAFETY: a live PE.
            unsafe { doca_pe_progress(p.cpe) };
        }
        let waited = t0.elapsed();
        assert_eq!(state(p.cctx()), DOCA_CTX_STATE_IDLE, "still trying after {waited:?}");
        assert!(waited >= Duration::from_millis(300), "gave up after {waited:?}, before its window");
        println!("gave up after {} ms", waited.as_millis());
        p.finish();
        return;
    }
    let name = format!(
        "{}::a_client_without_a_server_gives_up_after_its_connect_window",
        module_path!().split_once("::").map_or("", |x| x.1)
    );
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", &name, "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .env(CONNECT_TIMEOUT_ENV, "300")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("gave up after"), "{text}{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn creation_rules_and_capabilities() {
    let dev = test_open_default();
    let long = std::ffi::CString::new("x".repeat(MAX_NAME_LEN as usize)).unwrap();
    let ok: &CStr = c"fine";
    let (mut s, mut s2) = (ptr::null_mut(), ptr::null_mut());
    let pe = new_pe();
    // SAFETY: live device, valid out-pointers.
    unsafe {
        assert_eq!(doca_comch_server_create(dev, ptr::null_mut(), long.as_ptr(), &mut s), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_comch_server_create(dev, ptr::null_mut(), ptr::null(), &mut s), DOCA_ERROR_INVALID_VALUE);
        // A representor must be one doca_dev_rep_open returned (or NULL).
        assert_eq!(doca_comch_server_create(dev, 0x1000 as *mut _, ok.as_ptr(), &mut s), DOCA_ERROR_INVALID_VALUE);
        let name = unique("dup");
        assert_eq!(doca_comch_server_create(dev, ptr::null_mut(), name.as_ptr(), &mut s), DOCA_SUCCESS);
        assert_eq!(doca_comch_server_create(dev, ptr::null_mut(), name.as_ptr(), &mut s2), DOCA_SUCCESS);
        // Start needs the send configuration.
        assert_eq!(doca_pe_connect_ctx(pe, doca_comch_server_as_ctx(s)), DOCA_SUCCESS);
        assert_eq!(doca_ctx_start(doca_comch_server_as_ctx(s)), DOCA_ERROR_BAD_STATE);
        assert_eq!(doca_comch_server_task_send_set_conf(s, Some(on_sent), Some(on_sent), 4), DOCA_SUCCESS);
        assert_eq!(doca_comch_server_task_send_set_conf(s2, Some(on_sent), Some(on_sent), 4), DOCA_SUCCESS);
        assert_eq!(doca_ctx_start(doca_comch_server_as_ctx(s)), DOCA_SUCCESS);
        // A second server of the same name cannot start.
        assert_eq!(doca_pe_connect_ctx(pe, doca_comch_server_as_ctx(s2)), DOCA_SUCCESS);
        assert_eq!(doca_ctx_start(doca_comch_server_as_ctx(s2)), DOCA_ERROR_IN_USE);
        assert_eq!(doca_comch_server_destroy(s), DOCA_ERROR_IN_USE);
        assert_eq!(doca_ctx_stop(doca_comch_server_as_ctx(s)), DOCA_SUCCESS);
        assert_eq!(doca_comch_server_destroy(s), DOCA_SUCCESS);
        assert_eq!(doca_comch_server_destroy(s2), DOCA_SUCCESS);
        let mut c = ptr::null_mut();
        assert_eq!(doca_comch_client_create(dev, ok.as_ptr(), &mut c), DOCA_SUCCESS);
        assert_eq!(doca_comch_server_destroy(c), DOCA_ERROR_INVALID_VALUE, "a client is not a server");
        assert_eq!(doca_comch_client_destroy(c), DOCA_SUCCESS);
        let info = crate::dev::doca_dev_as_devinfo(dev);
        let mut v = 0u32;
        assert_eq!(doca_comch_cap_get_max_name_len(info, &mut v), DOCA_SUCCESS);
        assert_eq!(v, MAX_NAME_LEN);
        assert_eq!(doca_comch_cap_get_max_msg_size(info, &mut v), DOCA_SUCCESS);
        assert_eq!(v, MAX_MSG_SIZE);
        assert_eq!(doca_comch_cap_server_is_supported(info), DOCA_SUCCESS);
        assert_eq!(doca_comch_cap_client_is_supported(ptr::null()), DOCA_ERROR_INVALID_VALUE);
    }
    destroy_pe(pe);
    // SAFETY: nothing uses the device any more.
    assert_eq!(unsafe { doca_dev_close(dev) }, DOCA_SUCCESS);
}

#[test]
fn tiny_message_limit_still_handshakes() {
    let p = Pair::new("tiny", false);
    // SAFETY: live, IDLE objects.
    unsafe {
        assert_eq!(doca_comch_server_set_max_msg_size(p.server, 8), DOCA_SUCCESS);
        assert_eq!(doca_comch_client_set_max_msg_size(p.client, 8), DOCA_SUCCESS);
        assert_eq!(doca_ctx_start(p.sctx()), DOCA_SUCCESS);
        assert_eq!(doca_ctx_start(p.cctx()), DOCA_ERROR_IN_PROGRESS);
    }
    pump_until(&[p.spe, p.cpe], || state(p.cctx()) == DOCA_CTX_STATE_RUNNING);
    pump(&[p.spe, p.cpe]);
    take();
    assert_eq!(send(&p, false, p.client_conn(), b"12345678"), DOCA_SUCCESS);
    pump(&[p.spe, p.cpe]);
    assert!(take().iter().any(|s| matches!(s, Seen::Recv(_, m) if m == b"12345678")));
    assert_eq!(send(&p, false, p.client_conn(), b"123456789"), DOCA_ERROR_INVALID_VALUE);
    p.finish();
}

/// The number of connection objects `ep` has now.
fn objects(ep: *const Endpoint) -> usize {
    // SAFETY: a live server or client of the test.
    unsafe { &*ep }.connection_objects()
}

/// Connections are freed when they end and the user can no longer name them: a server
/// that sees many clients come and go keeps none of them; a send task still allocated on a
/// departed connection keeps that one alive (and fails cleanly) until it is freed; a
/// connection the server dropped itself goes too; a client keeps only its current one.
#[test]
fn ended_connections_are_freed_not_kept_until_destroy() {
    let p = Pair::new("free", true);
    for _ in 0..40 {
        // SAFETY: live ctx.
        assert_eq!(unsafe { doca_ctx_start(p.cctx()) }, DOCA_ERROR_IN_PROGRESS);
        pump_until(&[p.spe, p.cpe], || state(p.cctx()) == DOCA_CTX_STATE_RUNNING);
        pump(&[p.spe, p.cpe]);
        assert_eq!(send(&p, false, p.client_conn(), b"hi"), DOCA_SUCCESS);
        pump(&[p.spe, p.cpe]);
        // SAFETY: live ctx.
        assert_eq!(unsafe { doca_ctx_stop(p.cctx()) }, DOCA_SUCCESS);
        // The server learns of the departure from a later progress (DOCA promises no
        // particular one; under load it can take more than one quiet round).
        let mut seen = Vec::new();
        pump_until(&[p.spe, p.cpe], || {
            seen.extend(take());
            matches!(seen.last(), Some(Seen::Disconnect(_)))
        });
        pump(&[p.spe, p.cpe]);
        assert!(objects(p.server) == 0 && objects(p.client) == 0, "nothing kept after a client left");
    }

    // A send task allocated before the client left holds its connection.
    // SAFETY: live ctx.
    unsafe { doca_ctx_start(p.cctx()) };
    pump_until(&[p.spe, p.cpe], || state(p.cctx()) == DOCA_CTX_STATE_RUNNING);
    pump(&[p.spe, p.cpe]);
    let Some(Seen::Connect(sconn, 1)) = take().first().cloned() else { panic!() };
    let sconn = sconn as *mut doca_comch_connection;
    let msg = *b"late";
    let mut t = ptr::null_mut();
    // SAFETY: live server and connection; `msg` outlives the task.
    let rc = unsafe { doca_comch_server_task_send_alloc_init(p.server, sconn, msg.as_ptr().cast(), 4, &mut t) };
    assert_eq!(rc, DOCA_SUCCESS);
    // SAFETY: live ctx.
    assert_eq!(unsafe { doca_ctx_stop(p.cctx()) }, DOCA_SUCCESS);
    // (CI failed here once when this waited for one quiet round only.)
    assert_eq!(events_until_disconnect(&[p.spe, p.cpe]), vec![Seen::Disconnect(sconn as usize)]);
    assert_eq!(objects(p.server), 1, "held by the allocated task");
    // SAFETY: our allocated task; its connection is still a valid object.
    unsafe {
        assert_eq!(doca_comch_connection_update_info(sconn), DOCA_ERROR_CONNECTION_ABORTED);
        assert_eq!(doca_task_submit(doca_comch_task_send_as_task(t)), DOCA_ERROR_CONNECTION_RESET);
        doca_task_free(doca_comch_task_send_as_task(t));
    }
    pump(&[p.spe, p.cpe]);
    assert_eq!(objects(p.server), 0, "freed with its last task");

    // A connection the server dropped itself goes at the next progress.
    // SAFETY: live ctx.
    unsafe { doca_ctx_start(p.cctx()) };
    pump_until(&[p.spe, p.cpe], || state(p.cctx()) == DOCA_CTX_STATE_RUNNING);
    pump(&[p.spe, p.cpe]);
    let Some(Seen::Connect(sconn, 1)) = take().first().cloned() else { panic!() };
    // SAFETY: live server and connection.
    assert_eq!(unsafe { doca_comch_server_disconnect(p.server, sconn as *mut _) }, DOCA_SUCCESS);
    pump(&[p.spe, p.cpe]);
    assert_eq!(objects(p.server), 0);
    // The client learns of it from a later progress, not necessarily the first quiet one
    // (see `events_until_disconnect`; CI failed here once when this pumped a single time).
    // SAFETY: the client's connection stays valid while it runs.
    pump_until(&[p.spe, p.cpe], || unsafe { doca_comch_connection_update_info(p.client_conn()) } != DOCA_SUCCESS);
    // SAFETY: as above.
    assert_eq!(unsafe { doca_comch_connection_update_info(p.client_conn()) }, DOCA_ERROR_CONNECTION_ABORTED);
    assert_eq!(objects(p.client), 1, "a running client keeps its connection, closed or not");
    p.finish();
}

/// Connects a fresh client of `p` and returns the server's side of the connection.
fn connect_again(p: &Pair) -> *mut doca_comch_connection {
    // SAFETY: live ctx.
    assert_eq!(unsafe { doca_ctx_start(p.cctx()) }, DOCA_ERROR_IN_PROGRESS);
    pump_until(&[p.spe, p.cpe], || state(p.cctx()) == DOCA_CTX_STATE_RUNNING);
    pump(&[p.spe, p.cpe]);
    let seen = take();
    let Some(Seen::Connect(sconn, 1)) = seen.first().cloned() else { panic!("{seen:?}") };
    sconn as *mut doca_comch_connection
}

/// A client's last message, sent (completed) right before it left, reaches the server even
/// when (a) the client left with a message of the server unread, so the kernel reports a
/// reset ahead of the client's records, or (b) the server's own send noticed the departure
/// before its reads did. Found by `tests/chaos_links.rs` (comch rounds with freezes).
#[test]
fn the_last_messages_of_a_departed_client_still_arrive() {
    let p = Pair::new("last", true);
    for unread_echo in [true, false] {
        let sconn = connect_again(&p);
        if unread_echo {
            // Into the client's socket; the client's PE is not progressed, so it stays unread.
            assert_eq!(send(&p, true, sconn, b"unread"), DOCA_SUCCESS);
            pump(&[p.spe]);
        }
        let last = *b"last words";
        assert_eq!(send(&p, false, p.client_conn(), &last), DOCA_SUCCESS);
        pump(&[p.cpe]);
        take();
        // SAFETY: live ctx.
        assert_eq!(unsafe { doca_ctx_stop(p.cctx()) }, DOCA_SUCCESS);
        pump(&[p.cpe]);
        if !unread_echo {
            // The server's send sees the client gone before any read did. (While a process
            // a parallel test spawns holds a copy of the client's socket between its fork
            // and exec, the kernel still takes the message: bounded retries.)
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            loop {
                let rc = send(&p, true, sconn, b"too late");
                if rc == DOCA_ERROR_CONNECTION_RESET {
                    break;
                }
                assert_eq!(rc, DOCA_SUCCESS, "a send to a departed client: {rc:?}");
                assert!(std::time::Instant::now() < deadline, "the send never saw the client gone");
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
        let mut seen = events_until_disconnect(&[p.spe]);
        // The completions of "too late" sends the kernel took while a forked process held
        // the client's socket (above) are not what this test is about.
        seen.retain(|e| !matches!(e, Seen::Sent(_)));
        assert_eq!(
            seen,
            vec![Seen::Recv(sconn as usize, last.to_vec()), Seen::Disconnect(sconn as usize)],
            "unread echo: {unread_echo}"
        );
    }
    p.finish();
}

/// A receive callback may stop and destroy its own server: the event being delivered still
/// names its connection after the callback returns, so destroy must not free that
/// connection under it (a use after free that a sanitizer or Miri run reports).
#[test]
fn a_server_stopped_and_destroyed_from_its_own_callback() {
    let p = Pair::new("cb-destroy", true);
    // SAFETY: live ctx.
    unsafe { doca_ctx_start(p.cctx()) };
    pump_until(&[p.spe, p.cpe], || state(p.cctx()) == DOCA_CTX_STATE_RUNNING);
    pump(&[p.spe, p.cpe]);
    take();
    KILL.with(|k| k.set(p.server));
    assert_eq!(send(&p, false, p.client_conn(), b"bye"), DOCA_SUCCESS);
    pump_until(&[p.spe, p.cpe], || SEEN.with(|s| s.borrow().iter().any(|x| matches!(x, Seen::Killed(..)))));
    let seen = take();
    assert!(seen.contains(&Seen::Killed(DOCA_SUCCESS, DOCA_SUCCESS)), "{seen:?}");
    // The server is gone: tear the rest down by hand.
    // SAFETY: live client, PEs and device.
    unsafe {
        let r = doca_ctx_stop(p.cctx());
        assert!(r == DOCA_SUCCESS || r == DOCA_ERROR_IN_PROGRESS, "{r:?}");
        pump(&[p.cpe]);
        assert_eq!(doca_comch_client_destroy(p.client), DOCA_SUCCESS);
    }
    destroy_pe(p.spe);
    destroy_pe(p.cpe);
    // SAFETY: nothing uses the device any more.
    assert_eq!(unsafe { doca_dev_close(p.dev) }, DOCA_SUCCESS);
}

/// The consumer-event registrations (the fast path's, which NVIDIA's ctrl-path samples make):
/// accepted while IDLE with both callbacks, INVALID_VALUE without one, BAD_STATE once started
/// (every `Pair` of these tests registers them; `tests/fast.rs` sees them run).
#[test]
fn consumer_event_registration_rules() {
    let p = Pair::new("consumer", true);
    let cb = Some(on_new_consumer as ConsumerCb);
    // SAFETY: live server (RUNNING) and client (IDLE).
    unsafe {
        assert_eq!(doca_comch_server_event_consumer_register(p.server, cb, cb), DOCA_ERROR_BAD_STATE);
        assert_eq!(doca_comch_client_event_consumer_register(p.client, None, cb), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_comch_client_event_consumer_register(p.client, cb, None), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_comch_client_event_consumer_register(p.client, cb, cb), DOCA_SUCCESS);
        assert_eq!(doca_comch_client_event_consumer_register(ptr::null_mut(), cb, cb), DOCA_ERROR_INVALID_VALUE);
    }
    p.finish();
}

mod fast;
