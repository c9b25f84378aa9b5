//! Remote-net sync event tests: a peer sets, adds to and reads our event through RDMA tasks;
//! a blocked waiter on our side is woken by the remote notify (futex, no polling); the
//! tasks keep their connection's order; bad arguments, the wrong export flavour and an event
//! of another process than the peer are refused.

use core::ptr;
use std::time::Duration;

use super::*;
use crate::sync_event::*;
use crate::testkit::rdma::cm;
use crate::testkit::rdma::*;

const T: Duration = Duration::from_secs(20);

/// A started standalone event on `s` with a remote-net publisher, and its network export.
fn exported_event(s: &Side) -> (*mut doca_sync_event, Vec<u8>) {
    let mut ev = ptr::null_mut();
    let (mut p, mut n) = (ptr::null(), 0usize);
    // SAFETY: valid out-pointers; live device; the blob is copied at once.
    unsafe {
        ok(doca_sync_event_create(&mut ev));
        ok(doca_sync_event_add_publisher_location_remote_net(ev));
        ok(doca_sync_event_add_subscriber_location_cpu(ev, s.dev));
        ok(doca_sync_event_start(ev));
        ok(doca_sync_event_export_to_remote_net(ev, &mut p, &mut n));
        (ev, core::slice::from_raw_parts(p, n).to_vec())
    }
}

fn open_remote(s: &Side, blob: &[u8]) -> Result<*mut doca_sync_event_remote_net, doca_error_t> {
    let mut h = ptr::null_mut();
    // SAFETY: live device, readable blob, valid out-pointer.
    res(unsafe { doca_sync_event_remote_net_create_from_export(s.dev, blob.as_ptr(), blob.len(), &mut h) })?;
    Ok(h)
}

fn value(ev: *mut doca_sync_event) -> u64 {
    let mut v = 0;
    // SAFETY: live started event.
    ok(unsafe { doca_sync_event_get(ev, &mut v) });
    v
}

#[test]
fn remote_set_add_get_wake_a_local_waiter_in_order() {
    take_recs();
    let a = Side::new(1, Cfg::default());
    let b = Side::new(2, Cfg::default());
    let (_ca, cb) = connect_pair(&a, &b);
    let (ev, blob) = exported_event(&a);
    let h = open_remote(&b, &blob).unwrap();
    // A thread blocks on a's event until it exceeds 4: only the remote notifies can wake it
    // (it may first look after the add, so it waits for "> 4", not "== 5").
    let evp = ev as usize;
    let waiter = std::thread::spawn(move || {
        // SAFETY: the event outlives the thread (joined before destroy); the synchronous
        // data path may be used from several threads.
        unsafe { doca_sync_event_wait_gt(evp as *mut doca_sync_event, 4, u64::MAX) }
    });
    b.mem()[0..8].copy_from_slice(&5u64.to_ne_bytes());
    // set, then add, then get on one connection: completed in that order, each seeing the
    // previous one's effect.
    b.rn_set(cb, h, b.buf(0, 8, 8), 1).unwrap();
    b.rn_add(cb, h, b.buf(64, 8, 0), 10, 2).unwrap();
    b.rn_get(cb, h, b.buf(128, 8, 0), 3).unwrap();
    assert!(run_until(&[b.pe], T, || rec_count() >= 3));
    let recs = take_recs();
    assert_eq!(
        recs.iter().map(|r| (r.kind, r.status)).collect::<Vec<_>>(),
        [("rn_set", DOCA_SUCCESS), ("rn_add", DOCA_SUCCESS), ("rn_get", DOCA_SUCCESS)]
    );
    assert_eq!(waiter.join().unwrap(), DOCA_SUCCESS, "the waiter was woken");
    assert_eq!(u64::from_ne_bytes(b.mem()[64..72].try_into().unwrap()), 5, "add fetched the old value");
    assert_eq!(u64::from_ne_bytes(b.mem()[128..136].try_into().unwrap()), 15, "get read set + add");
    assert_eq!(value(ev), 15);
    // Submit-time checks: a source shorter than 8 bytes, a result without room, NULL event.
    assert_eq!(b.rn_set(cb, h, b.buf(0, 8, 4), 4), Err(DOCA_ERROR_INVALID_VALUE));
    assert_eq!(b.rn_add(cb, h, b.buf(256, 8, 8), 1, 5), Err(DOCA_ERROR_INVALID_VALUE));
    assert_eq!(b.rn_get(cb, ptr::null_mut(), b.buf(300, 8, 0), 6), Err(DOCA_ERROR_INVALID_VALUE));
    // A PCI export is not a remote-net one, and the reverse.
    let mut pci = ptr::null_mut();
    let (mut p, mut n) = (ptr::null(), 0usize);
    // SAFETY: live objects and valid out-pointers.
    unsafe {
        ok(doca_sync_event_create(&mut pci));
        ok(doca_sync_event_add_publisher_location_remote_pci(pci));
        ok(doca_sync_event_start(pci));
        ok(doca_sync_event_export_to_remote_pci(pci, a.dev, &mut p, &mut n));
        let pblob = core::slice::from_raw_parts(p, n).to_vec();
        assert_eq!(open_remote(&b, &pblob), Err(DOCA_ERROR_NOT_SUPPORTED));
        assert_eq!(open_remote(&b, &blob[..blob.len() - 1]), Err(DOCA_ERROR_INVALID_VALUE));
        ok(doca_sync_event_stop(pci));
        ok(doca_sync_event_destroy(pci));
        ok(doca_sync_event_remote_net_destroy(h));
        assert_eq!(doca_sync_event_remote_net_destroy(ptr::null_mut()), DOCA_ERROR_INVALID_VALUE);
        ok(doca_sync_event_stop(ev));
        ok(doca_sync_event_destroy(ev));
    }
    b.destroy();
    a.destroy();
}

fn rn_child() {
    cm::setup();
    let b = Side::new(2, cm::cm_cfg());
    let (ev, blob) = exported_event(&b);
    let port = listen(&b);
    tell_parent(&format!("{port} {}", hex(&blob)));
    assert!(run_until(&[b.pe], T, || cm::count("established") == 1));
    // Block (no progress, no polling) until the parent's remote add makes the value 42.
    // SAFETY: live started event.
    ok(unsafe { doca_sync_event_wait_eq(ev, 42, u64::MAX) });
    tell_parent("woken");
    let _ = from_parent();
    // SAFETY: live event.
    unsafe {
        ok(doca_sync_event_stop(ev));
        ok(doca_sync_event_destroy(ev));
    }
    b.destroy();
}

/// Across processes, connected by address: the parent opens the child's event from its
/// blob and wakes the child's blocked waiter with a remote notify_add. The same handle used
/// on a connection whose peer is not the exporter fails with NOT_PERMITTED.
#[test]
fn cross_process_remote_add_wakes_the_exporter() {
    match role().as_deref() {
        Some("rn-child") => return rn_child(),
        Some(_) => return,
        None => {}
    }
    cm::setup();
    let a = Side::new(1, cm::cm_cfg());
    let a2 = Side::new(3, Cfg::default());
    let (ca, _c2) = connect_pair(&a, &a2);
    let mut child = Peer::spawn("rdma::remote::tests::cross_process_remote_add_wakes_the_exporter", "rn-child");
    let line = child.recv();
    let (port, hexblob) = line.split_once(' ').unwrap();
    let h = open_remote(&a, &unhex(hexblob)).unwrap();
    // The peer of `ca` is this process, not the exporter: refused like a wrong key.
    a.rn_add(ca, h, a.buf(0, 8, 0), 42, 1).unwrap();
    assert!(run_until(&[a.pe], T, || rec_count() >= 1));
    assert_eq!(take_recs()[0].status, DOCA_ERROR_NOT_PERMITTED);
    // The error state is per ctx: a fresh ctx connects to the child by address.
    let a3 = Side::new(4, cm::cm_cfg());
    let addr = cm::addr(DOCA_RDMA_ADDR_TYPE_IPv4, "127.0.0.1", port.parse().unwrap());
    cm::connect(&a3, addr, 0).unwrap();
    assert!(run_until(&[a3.pe], T, || cm::count("established") == 1));
    let c = cm::take_evs().iter().find(|e| e.kind == "established").unwrap().conn as *mut doca_rdma_connection;
    a3.rn_add(c, h, a3.buf(0, 8, 0), 42, 2).unwrap();
    assert!(run_until(&[a3.pe], T, || rec_count() >= 1));
    assert_eq!(take_recs()[0].status, DOCA_SUCCESS);
    assert_eq!(u64::from_ne_bytes(a3.mem()[0..8].try_into().unwrap()), 0);
    assert_eq!(child.recv(), "woken");
    child.send("bye");
    child.wait_success();
    // SAFETY: live handle and address (its connection ended with the child).
    unsafe {
        ok(doca_sync_event_remote_net_destroy(h));
    }
    a3.destroy();
    // SAFETY: no connection uses it after the ctx stopped.
    ok(unsafe { crate::rdma::addr::doca_rdma_addr_destroy(addr) });
    a2.destroy();
    a.destroy();
}
