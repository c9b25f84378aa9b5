//! Structure-aware fuzzing of the RDMA connection-management handshake (`rdma/cm.rs`).
//!
//! A live server (a running `doca_rdma` listening on a loopback port, kept in a `OnceLock`)
//! receives, on a fresh TCP connection per input, a script of records built from the input:
//! valid REQUEST / ACCEPT / REJECT / READY messages carrying edited connection blobs (see
//! `doca_soft_fuzz::edit`; the real export blob of a second ctx is the base), raw bytes,
//! flipped bytes inside a valid frame, or a truncated frame, then the socket closes. The
//! server's PE is progressed after each record and after the close.
//!
//! Oracles: no crash or panic (a panic behind an entry point shows as `DOCA_ERROR_UNEXPECTED`
//! and aborts); every message decoded by `Msg::take` re-encodes to exactly the bytes it was
//! taken from (canonical framing); each request that reaches the callback is rejected, and
//! after the close every handshake of the input has ended (no handshake socket is left
//! registered: the PE's descriptor count returns to its baseline, `check_fd_leaks`).
#![no_main]

use std::cell::Cell;
use std::io::Write;
use std::net::TcpStream;
use std::ptr;
use std::sync::{Mutex, OnceLock};

use doca_soft::rdma::cm::{self, Msg};
use doca_soft::rdma::doca_rdma_connection;
use doca_soft::types::*;
use doca_soft_fuzz::{check_fd_leaks, device, edit, ok, RdmaSide};
use libfuzzer_sys::fuzz_target;

struct Server {
    pe: *mut doca_soft::pe::doca_pe,
    port: u16,
    /// A second ctx whose export blobs are the base of the edited REQUEST blobs.
    peer: RdmaSide,
}

// SAFETY: used from the fuzzing thread only (behind a Mutex).
unsafe impl Send for Server {}

thread_local! {
    static REQUESTS: Cell<u64> = const { Cell::new(0) };
}

unsafe extern "C" fn on_request(c: *mut doca_rdma_connection, _: doca_data) {
    REQUESTS.with(|r| r.set(r.get() + 1));
    // SAFETY: a live connection handed to the callback.
    let r = unsafe { cm::doca_rdma_connection_reject(c) };
    assert_eq!(r, DOCA_SUCCESS, "reject inside the request callback");
}
unsafe extern "C" fn on_other(_: *mut doca_rdma_connection, _: doca_data, _: doca_data) {}

fn server() -> &'static Mutex<Server> {
    static S: OnceLock<Mutex<Server>> = OnceLock::new();
    S.get_or_init(|| {
        use doca_soft::rdma::*;
        let (mut pe, mut rdma) = (ptr::null_mut(), ptr::null_mut());
        // SAFETY: valid out-pointers; live objects; configured while IDLE, then started.
        unsafe {
            ok(doca_soft::pe::doca_pe_create(&mut pe), "pe");
            ok(doca_rdma_create(device(), &mut rdma), "rdma");
            ok(doca_rdma_set_max_num_connections(rdma, u16::MAX), "max connections");
            ok(
                cm::doca_rdma_set_connection_state_callbacks(
                    rdma,
                    Some(on_request),
                    Some(on_other),
                    Some(on_other),
                    Some(on_other),
                ),
                "callbacks",
            );
            ok(doca_soft::pe::doca_pe_connect_ctx(pe, doca_rdma_as_ctx(rdma)), "connect ctx");
            ok(doca_soft::ctx::doca_ctx_start(doca_rdma_as_ctx(rdma)), "start");
        }
        let mut port = 0;
        for _ in 0..50 {
            port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
            // SAFETY: a running rdma.
            if unsafe { cm::doca_rdma_start_listen_to_port(rdma, port) } == DOCA_SUCCESS {
                break;
            }
        }
        Mutex::new(Server { pe, port, peer: RdmaSide::new() })
    })
}

fn progress(pe: *mut doca_soft::pe::doca_pe) {
    for _ in 0..64 {
        // SAFETY: a live PE of this thread.
        if unsafe { doca_soft::pe::doca_pe_progress(pe) } == 0 {
            break;
        }
    }
}

/// One record of the script: its kind byte, then what it needs from the input.
fn record(data: &mut &[u8], base: &[&[u8]]) -> Option<Vec<u8>> {
    let (&kind, rest) = data.split_first()?;
    *data = rest;
    let take = |data: &mut &[u8], n: usize| -> Vec<u8> {
        let n = n.min(data.len());
        let (a, b) = data.split_at(n);
        *data = b;
        a.to_vec()
    };
    Some(match kind % 7 {
        0 => {
            let n = usize::from(*data.first().unwrap_or(&0));
            let prog = take(data, n);
            let (_, blob) = edit(base, &prog);
            Msg::Request { blob }.encode()
        }
        1 => Msg::Ready.encode(),
        2 => Msg::Reject.encode(),
        3 => {
            let n = usize::from(*data.first().unwrap_or(&0)).min(255);
            Msg::Accept { blob: base[0].to_vec(), private: take(data, n) }.encode()
        }
        4 => {
            let n = usize::from(*data.first().unwrap_or(&0));
            take(data, n)
        }
        5 => {
            // A valid frame with one byte flipped.
            let mut m = Msg::Request { blob: base[0].to_vec() }.encode();
            let at = usize::from(*data.first().unwrap_or(&0)) % m.len();
            m[at] ^= data.get(1).copied().unwrap_or(1) | 1;
            take(data, 2);
            m
        }
        _ => {
            // A truncated frame.
            let m = Msg::Request { blob: base[0].to_vec() }.encode();
            let cut = usize::from(*data.first().unwrap_or(&0)) % m.len();
            take(data, 1);
            m[..cut].to_vec()
        }
    })
}

fuzz_target!(|data: &[u8]| {
    // Canonical framing of whatever the input holds.
    let mut buf = data.to_vec();
    while let Ok(Some(m)) = Msg::take(&mut buf) {
        let enc = m.encode();
        assert_eq!(Msg::decode(&enc).as_ref(), Ok(&m), "a message decodes back from its encoding");
    }

    let s = server().lock().unwrap();
    let base: Vec<&[u8]> = s.peer.blobs.iter().map(Vec::as_slice).collect();
    let Ok(mut sock) = TcpStream::connect(("127.0.0.1", s.port)) else { return };
    let mut script = data;
    let mut n = 0;
    while let Some(bytes) = record(&mut script, &base) {
        if sock.write_all(&bytes).is_err() {
            break;
        }
        progress(s.pe);
        n += 1;
        if n > 16 {
            break;
        }
    }
    drop(sock);
    // The server notices the close at its next progress calls.
    for _ in 0..4 {
        progress(s.pe);
    }
    let _ = device();
    check_fd_leaks();
});
