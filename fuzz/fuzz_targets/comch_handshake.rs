//! Structure-aware fuzzing of the Comch handshake (`doca_soft::comch::wire` and the server's
//! handshake state machine). The input is a script: each step picks a record *shape* (a
//! HELLO, WELCOME or REJECT with fuzzed fields, one with a corrupted magic byte, a truncated
//! or extended one, DATA, or raw bytes) and its fields from the following bytes.
//!
//! * Every record goes through `wire::decode`: a decoded record re-encodes to the same bytes
//!   (canonical), and a record built from a valid shape decodes to exactly its fields.
//! * The same records are then sent, in order, by a raw client socket to a live soft server
//!   (one per process, on its own PE), whose progress runs between records: nothing may panic
//!   (a panic aborts the fuzzer), and the server must survive to accept the next input's
//!   connection.
#![no_main]

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr;
use std::sync::OnceLock;

use doca_soft::comch::wire::{self, Control};
use doca_soft::types::*;
use doca_soft_fuzz::Cursor;
use libfuzzer_sys::fuzz_target;

/// One record of the script, and the control it must decode to (None: no promise).
fn next_record(c: &mut Cursor<'_>) -> Option<(Vec<u8>, Option<Control>)> {
    let shape = c.u8()? % 10;
    Some(match shape {
        0 => {
            // The sent count it names is this process's (the server opens it): a fuzzed
            // descriptor and length.
            let sent = wire::CountAt { pid: std::process::id(), fd: c.u8()? as i32, len: u32::from(c.u8()? % 16) };
            let h = Control::Hello { version: c.u32()? % 4, max_msg: c.u32()?, sent };
            (wire::encode(h), Some(h))
        }
        1 => {
            let sent = wire::CountAt { pid: c.u32()?, fd: c.u32()? as i32, len: c.u32()? };
            let w = Control::Welcome { version: c.u32()? % 4, max_msg: c.u32()?, sent };
            (wire::encode(w), Some(w))
        }
        2 => {
            let r = Control::Reject { reason: c.u32()? as i32 };
            (wire::encode(r), Some(r))
        }
        3 => {
            // A handshake record with one byte of its magic changed.
            let sent = wire::CountAt::default();
            let mut h = wire::encode(Control::Hello { version: wire::VERSION, max_msg: c.u32()?, sent });
            let at = 1 + (c.u8()? as usize % 8);
            h[at] ^= c.u8()? | 1;
            (h, None)
        }
        4 => {
            // Truncated or extended.
            let sent = wire::CountAt::default();
            let mut h = wire::encode(Control::Hello { version: wire::VERSION, max_msg: 4096, sent });
            let n = c.u8()? as usize % (2 * h.len());
            h.resize(n, 0xAB);
            (h, None)
        }
        5 => {
            let n = c.u8()? as usize;
            let mut d = vec![wire::T_DATA];
            for _ in 0..n {
                d.push(c.u8().unwrap_or(0));
            }
            (d, None)
        }
        6 | 7 => {
            // A fast-path record (wire::Consumer) with fuzzed fields: it decodes to exactly
            // them, and the server (which opens the announced queue) must survive it. The pid
            // is this process's: the server never opens descriptors of other processes here.
            let blob: Vec<u8> = (0..c.u8()? % 48).map(|_| c.u8().unwrap_or(0)).collect();
            let rec = if shape == 6 {
                wire::Consumer::New {
                    id: c.u32()?,
                    pid: std::process::id(),
                    fd: c.u8()? as i32,
                    len: c.u32()? as u64,
                    blob: &blob,
                }
            } else {
                wire::Consumer::Gone { id: c.u32()? }
            };
            let bytes = wire::encode_consumer(&rec);
            match wire::decode_consumer(&bytes) {
                Ok(got) => assert_eq!(got, rec, "a consumer record decodes to its fields"),
                // A CONSUMER_NEW without a blob is refused (BadLength).
                Err(e) => assert!(blob.is_empty() && shape == 6, "{rec:?} was refused: {e:?}"),
            }
            (bytes, None)
        }
        _ => {
            let n = c.u8()? as usize % 64;
            let mut d = Vec::with_capacity(n);
            for _ in 0..n {
                d.push(c.u8()?);
            }
            (d, None)
        }
    })
}

struct Server {
    pe: usize,
    addr: (libc::sockaddr_un, libc::socklen_t),
}

fn server() -> &'static Server {
    static S: OnceLock<Server> = OnceLock::new();
    S.get_or_init(|| {
        let name = format!("fuzz-{}", std::process::id());
        let cname = std::ffi::CString::new(name.clone()).unwrap();
        let (mut list, mut n, mut dev, mut pe, mut s) =
            (ptr::null_mut(), 0u32, ptr::null_mut(), ptr::null_mut(), ptr::null_mut());
        unsafe extern "C" fn sent(_: *mut doca_comch_task_send, _: doca_data, _: doca_data) {}
        // SAFETY: the C sequence of a server on this thread; the objects live for the
        // process (the fuzzer's lifetime). Out-pointers are valid.
        unsafe {
            assert_eq!(doca_soft::dev::doca_devinfo_create_list(&mut list, &mut n), DOCA_SUCCESS);
            assert_eq!(doca_soft::dev::doca_dev_open(*list, &mut dev), DOCA_SUCCESS);
            assert_eq!(doca_soft::pe::doca_pe_create(&mut pe), DOCA_SUCCESS);
            use doca_soft::comch::chan::*;
            assert_eq!(doca_comch_server_create(dev, ptr::null_mut(), cname.as_ptr(), &mut s), DOCA_SUCCESS);
            assert_eq!(doca_comch_server_task_send_set_conf(s, Some(sent), Some(sent), 4), DOCA_SUCCESS);
            assert_eq!(doca_soft::pe::doca_pe_connect_ctx(pe, doca_comch_server_as_ctx(s)), DOCA_SUCCESS);
            assert_eq!(doca_soft::ctx::doca_ctx_start(doca_comch_server_as_ctx(s)), DOCA_SUCCESS);
        }
        // The server's address, spelled as `comch` documents it.
        // SAFETY: plain old data; getuid cannot fail.
        let mut a: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        a.sun_family = libc::AF_UNIX as libc::sa_family_t;
        let path = format!("async-doca-comch.{}.{name}", unsafe { libc::getuid() });
        for (i, b) in path.bytes().enumerate() {
            a.sun_path[i + 1] = b as libc::c_char;
        }
        let len = (std::mem::size_of::<libc::sa_family_t>() + 1 + path.len()) as libc::socklen_t;
        Server { pe: pe as usize, addr: (a, len) }
    })
}

fn progress(pe: usize) {
    for _ in 0..8 {
        // SAFETY: the live PE of `server()`, used from the fuzzer's one thread.
        unsafe { doca_soft::pe::doca_pe_progress(pe as *mut _) };
    }
}

fuzz_target!(|data: &[u8]| {
    let mut c = Cursor(data);
    let mut script = Vec::new();
    while let Some((rec, want)) = next_record(&mut c) {
        match wire::decode(&rec) {
            Ok(got) => {
                assert_eq!(wire::encode(got), rec, "decoding is canonical");
                if let Some(w) = want {
                    assert_eq!(got, w);
                }
            }
            Err(e) => assert!(want.is_none(), "a valid {want:?} was refused: {e:?}"),
        }
        script.push(rec);
        if script.len() == 16 {
            break;
        }
    }
    let s = server();
    // SAFETY: socket creation and connect with a valid address; the fd is owned below.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) };
    assert!(fd >= 0);
    // SAFETY: a fresh descriptor we own.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: valid address of the given length.
    let r = unsafe { libc::connect(sock.as_raw_fd(), (&s.addr.0 as *const libc::sockaddr_un).cast(), s.addr.1) };
    assert_eq!(r, 0, "the server survives every input");
    for rec in &script {
        // SAFETY: the record is readable for its length.
        unsafe {
            libc::send(sock.as_raw_fd(), rec.as_ptr().cast(), rec.len(), libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT)
        };
        progress(s.pe);
    }
    drop(sock);
    progress(s.pe);
});
