//! The connection-management harness of the RDMA tests (`rdma/cm/tests.rs`,
//! `rdma/remote/tests.rs`): recording connection-state callbacks with a chosen answer to
//! requests, listening on a free port, addresses, connecting by address.

use core::cell::RefCell;
use core::ptr;
use std::ffi::CString;

use super::*;
use crate::rdma::addr::*;
use crate::rdma::cm::*;

/// How the recording request callback answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Policy {
    /// Accept with this private data ("hello"), setting the connection user data to 77.
    Accept,
    Reject,
    /// Do nothing (the test answers later).
    Hold,
}

/// A recorded connection-management callback.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Ev {
    pub kind: &'static str,
    pub conn: usize,
    pub ud: u64,
    pub side: u64,
}

thread_local! {
    /// The recorded callbacks, oldest first.
    pub(crate) static EVS: RefCell<Vec<Ev>> = const { RefCell::new(Vec::new()) };
    /// How `cb_request` answers (tests change it, `setup` resets it to `Accept`).
    pub(crate) static POLICY: core::cell::Cell<Policy> = const { core::cell::Cell::new(Policy::Accept) };
}

pub(crate) fn take_evs() -> Vec<Ev> {
    EVS.with(|e| core::mem::take(&mut *e.borrow_mut()))
}

pub(crate) fn count(kind: &str) -> usize {
    EVS.with(|e| e.borrow().iter().filter(|x| x.kind == kind).count())
}

fn push(kind: &'static str, c: *mut doca_rdma_connection, ud: doca_data, side: doca_data) {
    EVS.with(|e| e.borrow_mut().push(Ev { kind, conn: c as usize, ud: ud.as_u64(), side: side.as_u64() }));
}

/// The private data `cb_request` accepts with.
pub(crate) const PRIVATE: &[u8] = b"hello";

pub(crate) unsafe extern "C" fn cb_request(c: *mut doca_rdma_connection, side: doca_data) {
    push("request", c, doca_data::from_u64(0), side);
    // SAFETY: a live connection handed to the callback.
    unsafe {
        match POLICY.with(|p| p.get()) {
            Policy::Accept => {
                ok(doca_rdma_connection_set_user_data(c, doca_data::from_u64(77)));
                ok(doca_rdma_connection_accept(c, PRIVATE.as_ptr() as *mut _, PRIVATE.len() as u8));
            }
            Policy::Reject => ok(doca_rdma_connection_reject(c)),
            Policy::Hold => {}
        }
    }
}
pub(crate) unsafe extern "C" fn cb_established(c: *mut doca_rdma_connection, ud: doca_data, side: doca_data) {
    push("established", c, ud, side);
}
pub(crate) unsafe extern "C" fn cb_failure(c: *mut doca_rdma_connection, ud: doca_data, side: doca_data) {
    push("failure", c, ud, side);
}
pub(crate) unsafe extern "C" fn cb_disconnect(c: *mut doca_rdma_connection, ud: doca_data, side: doca_data) {
    push("disconnect", c, ud, side);
}

pub(crate) fn cm_cfg() -> Cfg {
    Cfg { cm: true, cm_timeout_ms: 2000, ..Cfg::default() }
}

pub(crate) fn addr(ty: doca_rdma_addr_type, text: &str, port: u16) -> *mut doca_rdma_addr {
    let mut a = ptr::null_mut();
    let t = CString::new(text).unwrap();
    // SAFETY: valid string and out-pointer.
    ok(unsafe { doca_rdma_addr_create(ty, t.as_ptr(), port, &mut a) });
    a
}

pub(crate) fn connect(s: &Side, a: *mut doca_rdma_addr, ud: u64) -> Result<(), doca_error_t> {
    // SAFETY: live objects.
    res(unsafe { doca_rdma_connect_to_addr(s.rdma, a, doca_data::from_u64(ud)) })
}

pub(crate) fn setup() {
    take_evs();
    take_recs();
    POLICY.with(|p| p.set(Policy::Accept));
}
