//! Connection management tests: addresses, listen/connect/accept with private data, data
//! over a managed connection, disconnect both ways, and every failure path (refused port,
//! reject, timeout, garbage on the port, a client gone mid-handshake, a second listener on
//! the same port, max connections, another host), in-process and across processes.

use core::ptr;
use std::ffi::{CStr, CString};
use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use super::*;
use crate::pe::*;
use crate::rdma::addr::*;
use crate::testkit::rdma::cm::*;
use crate::testkit::rdma::*;

const T: Duration = Duration::from_secs(20);

#[test]
fn addresses_parse_report_and_refuse_bad_input() {
    let a = addr(DOCA_RDMA_ADDR_TYPE_IPv4, "127.0.0.1", 13579);
    let (mut ty, mut p, mut port) = (9, ptr::null(), 0u16);
    // SAFETY: live addr, valid out-pointers; the string belongs to the addr.
    unsafe {
        ok(doca_rdma_addr_get_params(a, &mut ty, &mut p, &mut port));
        assert_eq!((ty, CStr::from_ptr(p).to_str().unwrap(), port), (DOCA_RDMA_ADDR_TYPE_IPv4, "127.0.0.1", 13579));
        ok(doca_rdma_addr_destroy(a));
    }
    for (ty, s) in [
        (DOCA_RDMA_ADDR_TYPE_IPv6, "::1"),
        (DOCA_RDMA_ADDR_TYPE_GID, "fe80::1"),
        (DOCA_RDMA_ADDR_TYPE_GID, "::ffff:127.0.0.1"),
    ] {
        let a = addr(ty, s, 1);
        // SAFETY: live addr.
        ok(unsafe { doca_rdma_addr_destroy(a) });
    }
    let mut a = ptr::null_mut();
    for (ty, s) in [
        (DOCA_RDMA_ADDR_TYPE_IPv4, "::1"),
        (DOCA_RDMA_ADDR_TYPE_IPv6, "1.2.3.4"),
        (DOCA_RDMA_ADDR_TYPE_IPv4, "x"),
        (7, "1.2.3.4"),
    ] {
        let t = CString::new(s).unwrap();
        // SAFETY: valid string and out-pointer.
        assert_eq!(unsafe { doca_rdma_addr_create(ty, t.as_ptr(), 1, &mut a) }, DOCA_ERROR_INVALID_VALUE, "{s}");
    }
    // SAFETY: NULLs are refused, never dereferenced.
    unsafe {
        assert_eq!(doca_rdma_addr_create(0, ptr::null(), 1, &mut a), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_rdma_addr_destroy(ptr::null_mut()), DOCA_ERROR_INVALID_VALUE);
    }
}

/// The whole flow in one thread: listen, connect, accept with private data, both established
/// callbacks with the right user data, ids and addresses, messages both ways, then a client
/// disconnect reported to the server, which goes on serving a second client.
#[test]
fn listen_connect_accept_exchange_disconnect() {
    setup();
    let srv = Side::new(1, cm_cfg());
    let cli = Side::new(2, cm_cfg());
    let port = listen(&srv);
    let a = addr(DOCA_RDMA_ADDR_TYPE_IPv4, "127.0.0.1", port);
    connect(&cli, a, 5).unwrap();
    assert!(run_until(&[srv.pe, cli.pe], T, || count("established") == 2));
    let evs = take_evs();
    assert_eq!(evs.iter().map(|e| e.kind).collect::<Vec<_>>(), ["request", "established", "established"]);
    let sc = evs.iter().find(|e| e.side == 1 && e.kind == "established").unwrap();
    let cc = evs.iter().find(|e| e.side == 2).unwrap();
    assert_eq!((sc.ud, cc.ud), (77, 5), "server set 77 in request_cb; the client's from connect_to_addr");
    let (sconn, cconn) = (sc.conn as *mut doca_rdma_connection, cc.conn as *mut doca_rdma_connection);
    // SAFETY: live connections and out-pointers.
    unsafe {
        let mut buf = [0u8; 255];
        let mut n = 0u8;
        ok(doca_soft_rdma_connection_get_private_data(cconn, buf.as_mut_ptr(), &mut n));
        assert_eq!(&buf[..usize::from(n)], PRIVATE);
        let mut got = ptr::null_mut();
        ok(doca_rdma_connection_get_addr(cconn, &mut got));
        assert_eq!(got, a);
        assert_eq!(doca_rdma_addr_destroy(a), DOCA_ERROR_BAD_STATE, "in use by the connection");
        // Answered already: a misuse, not a CM failure.
        assert_eq!(doca_rdma_connection_accept(sconn, ptr::null_mut(), 0), DOCA_ERROR_BAD_STATE);
        assert_eq!(doca_rdma_connection_reject(sconn), DOCA_ERROR_BAD_STATE);
        ok(doca_rdma_connection_get_addr(sconn, &mut got));
        let (mut ty, mut p, mut pport) = (9, ptr::null(), 0u16);
        ok(doca_rdma_addr_get_params(got, &mut ty, &mut p, &mut pport));
        assert_eq!(CStr::from_ptr(p).to_str().unwrap(), "127.0.0.1");
        assert_ne!(pport, port, "the client's own (ephemeral) port");
        let mut id = 99;
        ok(doca_rdma_connection_get_id(sconn, &mut id));
        assert_eq!(id, 0);
    }
    // Messages both ways.
    srv.recv(srv.buf(0, 64, 0), 1).unwrap();
    cli.recv(cli.buf(0, 64, 0), 2).unwrap();
    cli.mem()[100..104].copy_from_slice(b"ping");
    cli.send(cconn, cli.buf(100, 4, 4), 3).unwrap();
    assert!(run_until(&[srv.pe, cli.pe], T, || rec_count() >= 2));
    srv.mem()[100..104].copy_from_slice(b"pong");
    srv.send(sconn, srv.buf(100, 4, 4), 4).unwrap();
    assert!(run_until(&[srv.pe, cli.pe], T, || rec_count() >= 4));
    assert!(take_recs().iter().all(|r| r.status == DOCA_SUCCESS));
    assert_eq!(&srv.mem()[0..4], b"ping");
    assert_eq!(&cli.mem()[0..4], b"pong");
    // The client disconnects: the server is told, with the connection's user data.
    srv.recv(srv.buf(200, 64, 0), 5).unwrap();
    // SAFETY: live connection.
    ok(unsafe { doca_rdma_connection_disconnect(cconn) });
    assert!(run_until(&[srv.pe, cli.pe], T, || count("disconnect") == 1));
    let evs = take_evs();
    assert_eq!(evs, [Ev { kind: "disconnect", conn: sconn as usize, ud: 77, side: 1 }]);
    // SAFETY: live connection; answering a disconnection is a no-op.
    ok(unsafe { doca_rdma_connection_disconnect(sconn) });
    // The addr is free again; the server ctx is not in the error state: a second client.
    // SAFETY: live addr, not used any more.
    ok(unsafe { doca_rdma_addr_destroy(a) });
    assert_eq!(srv.state(), DOCA_CTX_STATE_RUNNING);
    let cli2 = Side::new(3, cm_cfg());
    let a6 = addr(DOCA_RDMA_ADDR_TYPE_IPv6, "::1", port);
    connect(&cli2, a6, 6).unwrap();
    assert!(run_until(&[srv.pe, cli2.pe], T, || count("established") == 2));
    let c2 = take_evs().iter().find(|e| e.side == 3).unwrap().conn as *mut doca_rdma_connection;
    cli2.mem()[100..103].copy_from_slice(b"two");
    cli2.send(c2, cli2.buf(100, 3, 3), 6).unwrap();
    assert!(run_until(&[srv.pe, cli2.pe], T, || rec_count() >= 2));
    assert!(take_recs().iter().all(|r| r.status == DOCA_SUCCESS));
    assert_eq!(&srv.mem()[200..203], b"two");
    cli2.destroy();
    // SAFETY: its connection ended with the client's ctx.
    ok(unsafe { doca_rdma_addr_destroy(a6) });
    cli.destroy();
    srv.destroy();
}

/// Every GID of the soft device's table names this host: a client that connects to the
/// server by any of them (address type GID, as NVIDIA's CM samples with `-sat GID`) reaches it.
#[test]
fn every_gid_of_the_soft_table_reaches_a_listener() {
    setup();
    let srv = Side::new(1, cm_cfg());
    let port = listen(&srv);
    // SAFETY: a live device.
    let info = unsafe { crate::dev::doca_dev_as_devinfo(srv.dev) };
    let mut n = 0u32;
    // SAFETY: a live devinfo and out-pointers of the sizes given.
    ok(unsafe { crate::rdma::props::doca_rdma_cap_get_gid_table_size(info, &mut n) });
    let mut gids = vec![doca_rdma_gid::default(); n as usize];
    // SAFETY: as above.
    ok(unsafe { crate::rdma::props::doca_rdma_cap_get_gid(info, 0, n, gids.as_mut_ptr()) });
    let mut seen = Vec::new();
    for (i, g) in gids.iter().enumerate() {
        let text = std::net::Ipv6Addr::from(g.raw).to_string();
        if seen.contains(&text) {
            continue;
        }
        seen.push(text.clone());
        let cli = Side::new(10 + i as u64, cm_cfg());
        let a = addr(DOCA_RDMA_ADDR_TYPE_GID, &text, port);
        connect(&cli, a, 5).unwrap_or_else(|e| panic!("GID {i} ({text}): {e:?}"));
        assert!(run_until(&[srv.pe, cli.pe], T, || count("established") == 2), "GID {i} ({text})");
        take_evs();
        cli.destroy();
        // SAFETY: its connection ended with the client's ctx.
        ok(unsafe { doca_rdma_addr_destroy(a) });
    }
    assert_eq!(seen, ["fe80::1", "::ffff:127.0.0.1"]);
    srv.destroy();
}

/// A non-loopback IPv4 address of this host, if it has one (the source address of a route;
/// a UDP connect sends nothing).
fn own_non_loopback_v4() -> Option<std::net::IpAddr> {
    let s = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    s.connect("192.0.2.1:9").or_else(|_| s.connect("10.255.255.254:9")).ok()?;
    let ip = s.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}

/// NVIDIA's samples give the client the server's own address (`-sa <ip>`): a local address
/// other than loopback reaches the server, whose listeners are on loopback only.
#[test]
fn a_client_given_this_hosts_own_address_connects() {
    let Some(ip) = own_non_loopback_v4() else {
        eprintln!("skipped: this host has no non-loopback IPv4 address");
        return;
    };
    setup();
    let srv = Side::new(1, cm_cfg());
    let cli = Side::new(2, cm_cfg());
    let port = listen(&srv);
    let a = addr(DOCA_RDMA_ADDR_TYPE_IPv4, &ip.to_string(), port);
    connect(&cli, a, 5).unwrap();
    assert!(run_until(&[srv.pe, cli.pe], T, || count("established") == 2), "{:?}", take_evs());
    let evs = take_evs();
    let cc = evs.iter().find(|e| e.side == 2).unwrap().conn as *mut doca_rdma_connection;
    // The connection keeps the address the client gave.
    let (mut got, mut ty, mut p, mut pport) = (ptr::null_mut(), 9, ptr::null(), 0u16);
    // SAFETY: live connection and addr, valid out-pointers; the string belongs to the addr.
    unsafe {
        ok(doca_rdma_connection_get_addr(cc, &mut got));
        ok(doca_rdma_addr_get_params(got, &mut ty, &mut p, &mut pport));
        assert_eq!((CStr::from_ptr(p).to_str().unwrap(), pport), (ip.to_string().as_str(), port));
    }
    srv.recv(srv.buf(0, 64, 0), 1).unwrap();
    cli.mem()[100..104].copy_from_slice(b"host");
    cli.send(cc, cli.buf(100, 4, 4), 2).unwrap();
    assert!(run_until(&[srv.pe, cli.pe], T, || rec_count() >= 2));
    assert!(take_recs().iter().all(|r| r.status == DOCA_SUCCESS));
    assert_eq!(&srv.mem()[0..4], b"host");
    cli.destroy();
    // SAFETY: its connection ended with the client's ctx.
    ok(unsafe { doca_rdma_addr_destroy(a) });
    srv.destroy();
}

#[test]
fn refused_rejected_and_full_end_in_failure() {
    setup();
    let srv = Side::new(1, Cfg { max_conns: 1, ..cm_cfg() });
    let cli = Side::new(2, cm_cfg());
    // Nobody listens on this port.
    let a = addr(DOCA_RDMA_ADDR_TYPE_IPv4, "127.0.0.1", free_port());
    connect(&cli, a, 1).unwrap();
    assert!(run_until(&[cli.pe], T, || count("failure") == 1));
    assert_eq!(take_evs()[0].ud, 1);
    // SAFETY: the failed connection let go of it.
    ok(unsafe { doca_rdma_addr_destroy(a) });
    // Rejected by the server.
    let port = listen(&srv);
    let a = addr(DOCA_RDMA_ADDR_TYPE_IPv4, "127.0.0.1", port);
    POLICY.with(|p| p.set(Policy::Reject));
    connect(&cli, a, 2).unwrap();
    assert!(run_until(&[srv.pe, cli.pe], T, || count("failure") == 1));
    let evs = take_evs();
    assert_eq!(evs.iter().map(|e| (e.kind, e.side)).collect::<Vec<_>>(), [("request", 1), ("failure", 2)]);
    // A rejected connection holds no slot (the limit is on connections at a time): the
    // next client gets the server's only one.
    POLICY.with(|p| p.set(Policy::Accept));
    connect(&cli, a, 3).unwrap();
    assert!(run_until(&[srv.pe, cli.pe], T, || count("established") == 2));
    take_evs();
    // With it taken, the next request is refused for max_num_connections without reaching
    // the callback.
    connect(&cli, a, 4).unwrap();
    assert!(run_until(&[srv.pe, cli.pe], T, || count("failure") == 1));
    assert_eq!(take_evs().iter().map(|e| (e.kind, e.side)).collect::<Vec<_>>(), [("failure", 2)]);
    cli.destroy();
    srv.destroy();
    // SAFETY: no connection uses it any more.
    ok(unsafe { doca_rdma_addr_destroy(a) });
}

/// A server that never answers: the client fails after its request timeout, woken by the
/// timer while its PE sleeps (run_until arms and waits on the notification handle).
#[test]
fn a_silent_server_times_out() {
    setup();
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let cli = Side::new(2, Cfg { cm_timeout_ms: 100, ..cm_cfg() });
    let a = addr(DOCA_RDMA_ADDR_TYPE_IPv4, "127.0.0.1", port);
    connect(&cli, a, 9).unwrap();
    assert!(run_until(&[cli.pe], T, || count("failure") == 1));
    assert_eq!(take_evs()[0].ud, 9);
    cli.destroy();
    // SAFETY: released.
    ok(unsafe { doca_rdma_addr_destroy(a) });
}

/// Garbage on the port is dropped without a callback; a client that goes away after its
/// request (before the answer) ends in the server's failure callback; a second listener on
/// the same port is refused; the listening socket wakes an armed PE.
#[test]
fn garbage_vanishing_client_second_listener_and_wakeup() {
    setup();
    let srv = Side::new(1, cm_cfg());
    let port = listen(&srv);
    let other = Side::new(3, cm_cfg());
    // SAFETY: live rdma.
    assert_eq!(unsafe { doca_rdma_start_listen_to_port(other.rdma, port) }, DOCA_ERROR_CONNECTION_ABORTED);
    // SAFETY: live rdma.
    assert_eq!(unsafe { doca_rdma_start_listen_to_port(srv.rdma, port) }, DOCA_ERROR_ALREADY_EXIST);
    // Wake-up by a connection on the listening socket.
    assert!(arm(srv.pe));
    let mut junk = TcpStream::connect(("127.0.0.1", port)).unwrap();
    assert!(fd_readable(srv.pe, 5000), "a connection request wakes the armed PE");
    // SAFETY: live PE.
    ok(unsafe { doca_pe_clear_notification(srv.pe, 0) });
    junk.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    let mut huge = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut hdr = crate::blob::BLOB_MAGIC.to_vec();
    hdr.extend_from_slice(&[1, 0, 4, 0, 0xff, 0xff, 0xff, 0x7f]);
    huge.write_all(&hdr).unwrap();
    drain(&[srv.pe]);
    assert!(run_until(&[srv.pe], Duration::from_millis(200), || false) || take_evs().is_empty());
    assert!(take_evs().is_empty(), "garbage reaches no callback");
    // A raw client sends a valid request, then vanishes before the answer.
    POLICY.with(|p| p.set(Policy::Hold));
    let (blob, _c) = other.export().unwrap();
    let mut raw = TcpStream::connect(("127.0.0.1", port)).unwrap();
    raw.write_all(&Msg::Request { blob }.encode()).unwrap();
    assert!(run_until(&[srv.pe], T, || count("request") == 1));
    let req = take_evs()[0].conn as *mut doca_rdma_connection;
    drop(raw);
    assert!(run_until(&[srv.pe], T, || count("failure") == 1));
    assert_eq!(take_evs()[0].conn, req as usize);
    // Answering it now is a CM failure (the server may answer from elsewhere than the request
    // callback, and meets this race in normal operation), not a misuse.
    // SAFETY: live connection; its handshake is over.
    unsafe {
        assert_eq!(doca_rdma_connection_accept(req, ptr::null_mut(), 0), DOCA_ERROR_CONNECTION_ABORTED);
        assert_eq!(doca_rdma_connection_reject(req), DOCA_ERROR_CONNECTION_ABORTED);
    }
    // stop_listen: new requests are refused by the kernel.
    // SAFETY: live rdma.
    unsafe {
        ok(doca_rdma_stop_listen_to_port(srv.rdma, port));
        assert_eq!(doca_rdma_stop_listen_to_port(srv.rdma, port), DOCA_ERROR_NOT_FOUND);
    }
    // Not always at once: a process that another test forks at this moment holds a copy of
    // the listening socket until it execs (CLOEXEC closes it then), and the kernel completes
    // connections into its queue meanwhile.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while TcpStream::connect(("127.0.0.1", port)).is_ok() {
        assert!(std::time::Instant::now() < deadline, "the port still accepts after stop_listen");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    drop((junk, huge));
    other.destroy();
    srv.destroy();
}

#[test]
fn another_host_and_bad_states_are_refused() {
    setup();
    let cli = Side::new(2, cm_cfg());
    // TEST-NET-1 (RFC 5737): never an address of this host.
    let far = addr(DOCA_RDMA_ADDR_TYPE_IPv4, "192.0.2.1", 13579);
    assert_eq!(connect(&cli, far, 0), Err(DOCA_ERROR_NOT_SUPPORTED));
    // SAFETY: live objects; IDLE ctx refuses connection management.
    unsafe {
        ok(doca_rdma_addr_destroy(far));
        cli.stop();
        assert_eq!(doca_rdma_start_listen_to_port(cli.rdma, 1), DOCA_ERROR_BAD_STATE);
        assert_eq!(
            doca_rdma_set_connection_state_callbacks(cli.rdma, None, None, None, None),
            DOCA_ERROR_INVALID_VALUE
        );
    }
    cli.destroy();
}

// ---- across processes ----

fn cm_child() {
    setup();
    let port: u16 = from_parent().unwrap().parse().unwrap();
    let cli = Side::new(2, cm_cfg());
    let a = addr(DOCA_RDMA_ADDR_TYPE_IPv4, "127.0.0.1", port);
    connect(&cli, a, 1).unwrap();
    assert!(run_until(&[cli.pe], T, || count("established") == 1));
    let c = take_evs()[0].conn as *mut doca_rdma_connection;
    cli.recv(cli.buf(0, 64, 0), 1).unwrap();
    cli.mem()[100..105].copy_from_slice(b"child");
    cli.send(c, cli.buf(100, 5, 5), 2).unwrap();
    assert!(run_until(&[cli.pe], T, || rec_count() >= 2));
    assert!(take_recs().iter().all(|r| r.status == DOCA_SUCCESS));
    assert_eq!(&cli.mem()[0..5], b"CHILD");
    tell_parent("echoed");
    // Wait to be killed.
    let _ = from_parent();
    cli.destroy();
}

/// A client process connects by address and exchanges messages; when it is killed the
/// server gets the disconnection callback, a pending receive is not failed (it belongs to
/// the ctx, which stays RUNNING) and a send on the lost connection fails.
#[test]
fn cross_process_connect_by_address_and_peer_death() {
    match role().as_deref() {
        Some("cm-child") => return cm_child(),
        Some(_) => return,
        None => {}
    }
    setup();
    let srv = Side::new(1, cm_cfg());
    let port = listen(&srv);
    let mut child = Peer::spawn("rdma::cm::tests::cross_process_connect_by_address_and_peer_death", "cm-child");
    child.send(&port.to_string());
    assert!(run_until(&[srv.pe], T, || count("established") == 1));
    let sc = take_evs().iter().find(|e| e.kind == "established").unwrap().conn as *mut doca_rdma_connection;
    srv.recv(srv.buf(0, 64, 0), 1).unwrap();
    assert!(run_until(&[srv.pe], T, || rec_count() >= 1));
    assert_eq!(&srv.mem()[0..5], b"child");
    srv.mem()[100..105].copy_from_slice(b"CHILD");
    srv.send(sc, srv.buf(100, 5, 5), 2).unwrap();
    assert_eq!(child.recv(), "echoed");
    assert!(run_until(&[srv.pe], T, || rec_count() >= 2));
    take_recs();
    srv.recv(srv.buf(200, 64, 0), 3).unwrap();
    child.kill();
    assert!(run_until(&[srv.pe], T, || count("disconnect") == 1));
    assert_eq!(take_evs()[0].conn, sc as usize);
    assert_eq!(srv.state(), DOCA_CTX_STATE_RUNNING);
    assert_eq!(srv.send(sc, srv.buf(100, 5, 5), 4), Err(DOCA_ERROR_CONNECTION_ABORTED));
    assert_eq!(rec_count(), 0, "the posted receive stays posted");
    srv.destroy();
}

/// Twenty clients in turn on a server of `max_num_connections` 4, each leaving right after
/// it completed its side and sent one message: every one is accepted (the limit is on
/// connections at a time; ended ones used to keep their slot, so the fifth was rejected),
/// its message arrives, and the server sees it established then disconnected — never a
/// failed handshake, even when the data path noticed the departure before the handshake
/// read the client's READY (that interleaving is timing-dependent here; `tests/chaos_links.rs`
/// found it across processes, where the server's accept failed for connections clients had
/// used).
#[test]
fn clients_coming_and_going_never_exhaust_max_connections() {
    setup();
    let srv = Side::new(1, cm_cfg());
    let port = listen(&srv);
    for round in 0..20u64 {
        let cli = Side::new(2, cm_cfg());
        let a = addr(DOCA_RDMA_ADDR_TYPE_IPv4, "127.0.0.1", port);
        connect(&cli, a, 5).unwrap();
        // Until the client is established (the server may or may not be yet)...
        assert!(
            run_until(&[cli.pe, srv.pe], T, || EVS
                .with(|e| e.borrow().iter().any(|x| x.kind == "established" && x.side == 2))),
            "round {round}: {:?}",
            take_evs()
        );
        let cconn = EVS.with(|e| e.borrow().iter().find(|x| x.kind == "established" && x.side == 2).unwrap().conn)
            as *mut doca_rdma_connection;
        // ...then a message and it leaves at once.
        srv.recv(srv.buf(0, 64, 0), 1).unwrap();
        cli.mem()[100..104].copy_from_slice(&(round as u32).to_ne_bytes());
        cli.send(cconn, cli.buf(100, 4, 4), 2).unwrap();
        assert!(run_until(&[cli.pe], T, || rec_count() >= 1));
        // SAFETY: live connection.
        ok(unsafe { doca_rdma_connection_disconnect(cconn) });
        assert!(run_until(&[srv.pe, cli.pe], T, || count("disconnect") + count("failure") >= 1 && rec_count() >= 2));
        let kinds: Vec<&str> = take_evs().iter().filter(|e| e.side == 1).map(|e| e.kind).collect();
        assert_eq!(kinds, ["request", "established", "disconnect"], "round {round}");
        assert!(take_recs().iter().all(|r| r.status == DOCA_SUCCESS));
        assert_eq!(srv.mem()[0..4], (round as u32).to_ne_bytes());
        cli.destroy();
        // SAFETY: its connection ended with the client's ctx.
        ok(unsafe { doca_rdma_addr_destroy(a) });
    }
    srv.destroy();
}

use crate::ctx::{doca_ctx_start, doca_ctx_stop};
use crate::rdma::{doca_rdma_as_ctx, doca_rdma_create, doca_rdma_destroy};
use crate::testkit::dev::test_open_default;

/// The rdma the callbacks tear down, what its stop (from the failure callback) and its destroy
/// (from the IDLE report) returned, and how many times the failure callback ran.
type Doomed = (*mut doca_rdma, Option<doca_error_t>, Option<doca_error_t>, u32);

thread_local! {
    static DOOMED: core::cell::Cell<Doomed> = const { core::cell::Cell::new((ptr::null_mut(), None, None, 0)) };
}

/// A failure callback that stops its own rdma, as a C program tearing down on the first
/// failure does (NVIDIA's rdma_common.c).
unsafe extern "C" fn cb_failure_stops(_c: *mut doca_rdma_connection, _ud: doca_data, _side: doca_data) {
    let (rdma, stop, destroy, calls) = DOOMED.with(|d| d.get());
    // SAFETY: the rdma this test created, live until the IDLE report destroys it.
    let stop = stop.or_else(|| Some(unsafe { doca_ctx_stop(doca_rdma_as_ctx(rdma)) }));
    DOOMED.with(|d| d.set((rdma, stop, destroy, calls + 1)));
}

/// The state callback that destroys the rdma once it is IDLE.
unsafe extern "C" fn destroy_when_idle(
    _ud: doca_data,
    _ctx: *mut doca_ctx,
    _prev: doca_ctx_states,
    next: doca_ctx_states,
) {
    if next != DOCA_CTX_STATE_IDLE {
        return;
    }
    let (rdma, stop, _, calls) = DOOMED.with(|d| d.get());
    // SAFETY: the rdma this test created, IDLE now; nothing uses it after this call.
    let destroyed = unsafe { doca_rdma_destroy(rdma) };
    DOOMED.with(|d| d.set((rdma, stop, Some(destroyed), calls)));
}

/// A connection callback may stop its own `doca_rdma`, and the IDLE report that follows may
/// destroy it: callbacks are delivered as event tasks from the PE's completion queue, and
/// nothing of the provider touches the rdma after the callback returns (before, a callback
/// ran inside the rdma's progress hook, whose loop went on reading a destroyed rdma: a use
/// after free). An RDMA stop always goes through STOPPING (IN_PROGRESS), as NVIDIA's samples
/// expect of a stop inside a callback.
#[test]
fn a_callback_may_stop_its_rdma_and_the_idle_report_destroy_it() {
    let dev = test_open_default();
    let (mut pe, mut rdma) = (ptr::null_mut(), ptr::null_mut());
    // SAFETY: valid out-pointers; the objects are live until destroyed below (the rdma by
    // the state callback).
    unsafe {
        ok(doca_pe_create(&mut pe));
        ok(doca_rdma_create(dev, &mut rdma));
        ok(doca_rdma_set_connection_state_callbacks(
            rdma,
            Some(cb_request),
            Some(cb_established),
            Some(cb_failure_stops),
            Some(cb_disconnect),
        ));
        ok(crate::ctx::doca_ctx_set_state_changed_cb(doca_rdma_as_ctx(rdma), Some(destroy_when_idle)));
        ok(doca_pe_connect_ctx(pe, doca_rdma_as_ctx(rdma)));
        ok(doca_ctx_start(doca_rdma_as_ctx(rdma)));
    }
    DOOMED.with(|d| d.set((rdma, None, None, 0)));
    let refused = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let a = addr(DOCA_RDMA_ADDR_TYPE_IPv4, "127.0.0.1", refused);
    // SAFETY: live rdma and address.
    ok(unsafe { doca_rdma_connect_to_addr(rdma, a, doca_data::from_u64(1)) });
    let deadline = std::time::Instant::now() + T;
    while DOOMED.with(|d| d.get().2.is_none()) {
        // SAFETY: live PE.
        unsafe { doca_pe_progress(pe) };
        assert!(std::time::Instant::now() < deadline, "no failure callback or no IDLE report");
    }
    // The PE goes on without the rdma (its queue must not name it any more).
    for _ in 0..100 {
        // SAFETY: live PE.
        unsafe { doca_pe_progress(pe) };
    }
    let (_, stop, destroy, calls) = DOOMED.with(|d| d.get());
    assert_eq!(stop, Some(DOCA_ERROR_IN_PROGRESS), "a stop from the callback");
    assert_eq!(destroy, Some(DOCA_SUCCESS), "a destroy from the IDLE report");
    assert_eq!(calls, 1);
    // SAFETY: the address's connection is gone with its rdma; the PE has no ctx left.
    unsafe {
        ok(doca_rdma_addr_destroy(a));
        ok(doca_pe_destroy(pe));
        ok(crate::dev::doca_dev_close(dev));
    }
}

/// A client that sends its REQUEST and is gone before the server reads it (both arrive in one
/// read: the request, then the end of the stream). The server reports the request, then its
/// failure, and answering it is a CM failure (CONNECTION_ABORTED). Found by chaos_links:
/// the handshake was dropped silently with its connection left in the requested state, so
/// the later accept failed with BAD_STATE and no failure callback ever came.
#[test]
fn a_request_whose_client_left_before_it_was_read_fails() {
    setup();
    let srv = Side::new(1, cm_cfg());
    let port = listen(&srv);
    let other = Side::new(3, cm_cfg());
    POLICY.with(|p| p.set(Policy::Hold));
    let (blob, _c) = other.export().unwrap();
    {
        let mut raw = TcpStream::connect(("127.0.0.1", port)).unwrap();
        raw.write_all(&Msg::Request { blob }.encode()).unwrap();
    }
    assert!(run_until(&[srv.pe], T, || count("failure") == 1));
    let evs = take_evs();
    assert_eq!(evs.iter().map(|e| e.kind).collect::<Vec<_>>(), ["request", "failure"]);
    assert_eq!(evs[0].conn, evs[1].conn);
    let req = evs[0].conn as *mut doca_rdma_connection;
    // SAFETY: live connection; its handshake is over.
    assert_eq!(unsafe { doca_rdma_connection_accept(req, ptr::null_mut(), 0) }, DOCA_ERROR_CONNECTION_ABORTED);
    other.destroy();
    srv.destroy();
}
