//! Conformance: connection management by address and remote-net sync events.
//!
//! Both sides run in this process, each on its own PE. On the soft provider the address is
//! 127.0.0.1; on a BlueField host set `DOCA_CONFORMANCE_CM_ADDR` to an IPv4 address of the
//! RDMA device (RDMA CM resolves through it). What is asserted is the 3.0 state flow: the
//! server's request callback, established on both sides, failure on the client for a port
//! nobody listens on and for a rejection, the peer's disconnection callback, and the three
//! remote-net tasks (set, add returning the old value, get) with their effect on the
//! exporter's event.

use std::cell::RefCell;
use std::ffi::CString;
use std::ptr;
use std::time::Duration;

use super::kit::*;

const T: Duration = Duration::from_secs(20);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ev {
    pub kind: &'static str,
    pub conn: usize,
    pub side: u64,
}

thread_local! {
    static EVS: RefCell<Vec<Ev>> = const { RefCell::new(Vec::new()) };
    static REJECT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn push(kind: &'static str, c: *mut doca_rdma_connection, side: doca_data) {
    EVS.with(|e| e.borrow_mut().push(Ev { kind, conn: c as usize, side: side.as_u64() }));
}

fn count(kind: &str) -> usize {
    EVS.with(|e| e.borrow().iter().filter(|x| x.kind == kind).count())
}

fn take() -> Vec<Ev> {
    EVS.with(|e| std::mem::take(&mut *e.borrow_mut()))
}

unsafe extern "C" fn on_request(c: *mut doca_rdma_connection, side: doca_data) {
    push("request", c, side);
    // SAFETY: a live connection handed to the callback (the samples answer here).
    unsafe {
        if REJECT.with(|r| r.get()) {
            ok(doca_rdma_connection_reject(c));
        } else {
            ok(doca_rdma_connection_accept(c, ptr::null_mut(), 0));
        }
    }
}
unsafe extern "C" fn on_established(c: *mut doca_rdma_connection, _: doca_data, side: doca_data) {
    push("established", c, side);
}
unsafe extern "C" fn on_failure(c: *mut doca_rdma_connection, _: doca_data, side: doca_data) {
    push("failure", c, side);
}
unsafe extern "C" fn on_disconnect(c: *mut doca_rdma_connection, _: doca_data, side: doca_data) {
    push("disconnect", c, side);
}

/// Registers the callbacks and the remote-net task pools on an IDLE rdma (from `Side::new`).
pub fn configure(rdma: *mut doca_rdma, n: u32) {
    // SAFETY: a live IDLE rdma; the callbacks have the exact C signatures.
    unsafe {
        ok(doca_rdma_set_connection_state_callbacks(
            rdma,
            Some(on_request),
            Some(on_established),
            Some(on_failure),
            Some(on_disconnect),
        ));
        ok(doca_rdma_task_remote_net_sync_event_get_set_conf(rdma, Some(cb_rn_get), Some(cb_rn_get), n));
        ok(doca_rdma_task_remote_net_sync_event_notify_set_set_conf(rdma, Some(cb_rn_set), Some(cb_rn_set), n));
        ok(doca_rdma_task_remote_net_sync_event_notify_add_set_conf(rdma, Some(cb_rn_add), Some(cb_rn_add), n));
    }
}

fn cm_side(id: u64) -> Side {
    Side::new(id, Cfg { cm: true, max_conns: 4, ..Cfg::default() })
}

fn host() -> String {
    std::env::var("DOCA_CONFORMANCE_CM_ADDR").unwrap_or_else(|_| "127.0.0.1".into())
}

fn addr(port: u16) -> *mut doca_rdma_addr {
    let text = CString::new(host()).unwrap();
    let mut a = ptr::null_mut();
    // SAFETY: NUL-terminated string, valid out-pointer.
    ok(unsafe { doca_rdma_addr_create(DOCA_RDMA_ADDR_TYPE_IPv4, text.as_ptr(), port, &mut a) });
    a
}

#[test]
fn rdma_cm_connect_accept_send_disconnect_and_failures() {
    take();
    take_recs();
    REJECT.with(|r| r.set(false));
    let srv = cm_side(1);
    let cli = cm_side(2);
    let port = listen(&srv);
    let a = addr(port);
    // SAFETY: live objects.
    ok(unsafe { doca_rdma_connect_to_addr(cli.rdma, a, doca_data::from_u64(9)) });
    assert!(run_until(&[srv.pe, cli.pe], T, || count("established") == 2), "{:?}", take());
    let evs = take();
    assert_eq!(evs[0].kind, "request");
    let sc = evs.iter().find(|e| e.kind == "established" && e.side == 1).unwrap().conn as *mut _;
    let cc = evs.iter().find(|e| e.kind == "established" && e.side == 2).unwrap().conn as *mut _;
    let mut ud = doca_data::from_u64(0);
    // SAFETY: live connection, valid out-pointer.
    ok(unsafe { doca_rdma_connection_get_user_data(cc, &mut ud) });
    assert_eq!(ud.as_u64(), 9, "the client's connection carries connect_to_addr's user data");
    // A message over the new connection.
    srv.recv(srv.buf(0, 64, 0), 1).unwrap();
    srv.mem()[100..105].copy_from_slice(b"hello");
    cli.mem()[100..105].copy_from_slice(b"hello");
    cli.send(cc, cli.buf(100, 5, 5), 2).unwrap();
    assert!(run_until(&[srv.pe, cli.pe], T, || rec_count() >= 2));
    assert!(take_recs().iter().all(|r| r.status == DOCA_SUCCESS));
    assert_eq!(&srv.mem()[0..5], b"hello");
    // Disconnect: the server is told.
    // SAFETY: live connection.
    ok(unsafe { doca_rdma_connection_disconnect(cc) });
    assert!(run_until(&[srv.pe, cli.pe], T, || count("disconnect") == 1));
    assert_eq!(take()[0].conn, sc as usize);
    // SAFETY: the samples answer a disconnection by disconnecting too.
    ok_or_print("disconnect after the peer's", unsafe { doca_rdma_connection_disconnect(sc) });
    // A rejection ends in the client's failure callback.
    REJECT.with(|r| r.set(true));
    // SAFETY: live objects.
    ok(unsafe { doca_rdma_connect_to_addr(cli.rdma, a, doca_data::from_u64(10)) });
    assert!(run_until(&[srv.pe, cli.pe], T, || count("failure") == 1));
    // Nobody listening: failure too.
    let b = addr(free_port());
    // SAFETY: live objects.
    ok(unsafe { doca_rdma_connect_to_addr(cli.rdma, b, doca_data::from_u64(11)) });
    assert!(run_until(&[cli.pe], T, || count("failure") == 2));
    cli.destroy();
    srv.destroy();
    // SAFETY: their connections ended with the contexts.
    unsafe {
        ok(doca_rdma_addr_destroy(a));
        ok(doca_rdma_addr_destroy(b));
    }
}

fn ok_or_print(what: &str, e: doca_error_t) {
    if e != DOCA_SUCCESS {
        println!("{what}: {}", name(e));
    }
}

#[test]
fn remote_net_sync_event_set_add_get() {
    take_recs();
    let a = cm_side(1);
    let b = cm_side(2);
    let (_ca, cb) = connect_pair(&a, &b);
    let mut ev = ptr::null_mut();
    let (mut p, mut n) = (ptr::null(), 0usize);
    let mut h = ptr::null_mut();
    // SAFETY: valid out-pointers and live objects; the blob is read before anything else.
    unsafe {
        ok(doca_sync_event_create(&mut ev));
        ok(doca_sync_event_add_publisher_location_remote_net(ev));
        ok(doca_sync_event_add_subscriber_location_cpu(ev, a.dev));
        ok(doca_sync_event_start(ev));
        ok(doca_sync_event_export_to_remote_net(ev, &mut p, &mut n));
        ok(doca_sync_event_remote_net_create_from_export(b.dev, p, n, &mut h));
    }
    b.mem()[0..8].copy_from_slice(&7u64.to_ne_bytes());
    // SAFETY: live objects; valid out-pointers; each task is submitted once.
    unsafe {
        let mut t = ptr::null_mut();
        ok(doca_rdma_task_remote_net_sync_event_notify_set_allocate_init(
            b.rdma,
            cb,
            h,
            b.buf(0, 8, 8),
            doca_data::from_u64(1),
            &mut t,
        ));
        b.submit(doca_rdma_task_remote_net_sync_event_notify_set_as_task(t)).unwrap();
        let mut t = ptr::null_mut();
        ok(doca_rdma_task_remote_net_sync_event_notify_add_allocate_init(
            b.rdma,
            cb,
            h,
            b.buf(64, 8, 0),
            3,
            doca_data::from_u64(2),
            &mut t,
        ));
        b.submit(doca_rdma_task_remote_net_sync_event_notify_add_as_task(t)).unwrap();
        let mut t = ptr::null_mut();
        ok(doca_rdma_task_remote_net_sync_event_get_allocate_init(
            b.rdma,
            cb,
            h,
            b.buf(128, 8, 0),
            doca_data::from_u64(3),
            &mut t,
        ));
        b.submit(doca_rdma_task_remote_net_sync_event_get_as_task(t)).unwrap();
    }
    assert!(run_until(&[a.pe, b.pe], T, || rec_count() >= 3));
    let recs = take_recs();
    assert!(recs.iter().all(|r| r.status == DOCA_SUCCESS), "{recs:?}");
    assert_eq!(b.u64_at(64), 7, "notify_add returns the previous value");
    assert_eq!(b.u64_at(128), 10, "get reads set + add");
    let mut v = 0;
    // SAFETY: live objects.
    unsafe {
        ok(doca_sync_event_get(ev, &mut v));
        assert_eq!(v, 10);
        ok(doca_sync_event_remote_net_destroy(h));
        ok(doca_sync_event_stop(ev));
        ok(doca_sync_event_destroy(ev));
    }
    b.destroy();
    a.destroy();
}
