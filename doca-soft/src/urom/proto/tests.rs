//! Unit tests of `proto.rs` (moved out of line: longer than the workspace's ~150-line limit for
//! inline test modules).

use super::*;

fn cpus() -> CpuSet {
    let mut c = [0u64; 16];
    c[0] = 0b1011;
    c[15] = 1 << 63;
    c
}

fn addrs() -> Vec<PluginAddr> {
    vec![PluginAddr { plugin: 1, addr: vec![1, 2, 3] }, PluginAddr { plugin: 4, addr: vec![] }]
}

fn domain() -> Domain {
    Domain {
        members: vec![
            Member {
                worker_id: 7,
                addrs: addrs(),
                segs: vec![Seg { va: 0x1000, len: 64, memh: vec![9; 5], mkey: vec![8; 3] }],
            },
            Member { worker_id: 8, addrs: vec![], segs: vec![] },
        ],
    }
}

/// Every message of each enum, with non-trivial field values, as (encoding, check) pairs.
/// An encoding and a check that bytes decode back to the same message.
type Case = (Vec<u8>, Box<dyn Fn(&[u8]) -> bool>);

fn all() -> Vec<Case> {
    let mut v: Vec<Case> = Vec::new();
    macro_rules! case {
        ($ty:ident, $m:expr) => {{
            let m: $ty = $m;
            let enc = m.encode();
            v.push((enc, Box::new(move |b: &[u8]| $ty::decode(b).as_ref() == Ok(&m))));
        }};
    }
    case!(Request, Request::Hello { req: 1, proto: PROTO_VERSION, pid: 42, max_workers: 3, max_msg_size: 4096 });
    case!(
        Request,
        Request::Spawn {
            req: 2,
            worker_id: WORKER_ID_ANY,
            gid: 5,
            plugins: 0b110,
            cpuset: cpus(),
            max_inflight: 8,
            env: vec!["A=1".into(), "".into(), "ÜNÏ=2".into()],
        }
    );
    case!(Request, Request::Stop { req: 3, worker_id: 1 << 63 });
    case!(Request, Request::WorkersByGid { req: 4, gid: 77 });
    case!(
        Reply,
        Reply::Welcome {
            req: 1,
            proto: 1,
            max_msg_size: 8192,
            max_workers: 64,
            cpuset: cpus(),
            plugins: vec![
                PluginInfo { id: 1, version: 3, name: "loopback".into() },
                PluginInfo { id: 2, version: 0, name: "".into() },
            ],
        }
    );
    case!(Reply, Reply::Spawned { req: 2, worker_id: 9, pid: 1234, addrs: addrs() });
    case!(Reply, Reply::Stopped { req: 3, worker_id: 9 });
    case!(Reply, Reply::Workers { req: 4, ids: vec![1, 2, u64::MAX] });
    case!(Reply, Reply::Workers { req: 4, ids: vec![] });
    case!(Reply, Reply::Error { req: 0, status: DOCA_ERROR_AUTHENTICATION, reason: "uid 5 refused".into() });
    case!(Reply, Reply::WorkerExited { worker_id: 3, status: DOCA_ERROR_CONNECTION_ABORTED, how: "signal 9".into() });
    case!(HostToWorker, HostToWorker::Command { ctx: 11, plugin: 2, payload: vec![0xaa; 100] });
    case!(HostToWorker, HostToWorker::DomainCreate { ctx: 12, domain: domain() });
    case!(HostToWorker, HostToWorker::DomainCreate { ctx: 12, domain: Domain::default() });
    case!(HostToWorker, HostToWorker::DomainDestroy { ctx: 13 });
    case!(
        WorkerToHost,
        WorkerToHost::Notify { ctx: 11, plugin: 2, status: doca_error_t(-5), packed: vec![1, 2, 3, 4] }
    );
    case!(WorkerToDaemon, WorkerToDaemon::Ready { addrs: addrs() });
    case!(WorkerToDaemon, WorkerToDaemon::Failed { status: DOCA_ERROR_NOT_FOUND, reason: "no plugin".into() });
    case!(DaemonToWorker, DaemonToWorker::Attach { conn: 5 });
    case!(DaemonToWorker, DaemonToWorker::Exit);
    v
}

#[test]
fn every_message_round_trips() {
    for (enc, check) in all() {
        assert!(check(&enc), "round trip failed for {enc:?}");
    }
}

#[test]
fn every_truncation_and_extension_is_refused() {
    for (enc, check) in all() {
        for n in 0..enc.len() {
            assert!(!check(&enc[..n]), "prefix of {n} bytes of {enc:?} decoded");
        }
        let mut longer = enc.clone();
        longer.push(0);
        assert!(!check(&longer), "trailing byte accepted for {enc:?}");
    }
    // Decoding errors are INVALID_VALUE specifically (not just "not equal").
    let enc = Request::Stop { req: 1, worker_id: 2 }.encode();
    assert_eq!(Request::decode(&enc[..enc.len() - 1]), Err(DOCA_ERROR_INVALID_VALUE));
    assert_eq!(Request::decode(&[]), Err(DOCA_ERROR_INVALID_VALUE));
}

#[test]
fn unknown_tags_huge_lengths_and_bad_utf8_are_refused() {
    for tag in [0u32, 5, 99, u32::MAX] {
        let mut b = tag.to_le_bytes().to_vec();
        b.extend_from_slice(&[0; 64]);
        assert_eq!(Request::decode(&b), Err(DOCA_ERROR_INVALID_VALUE));
    }
    assert_eq!(Reply::decode(&7u32.to_le_bytes()), Err(DOCA_ERROR_INVALID_VALUE));
    assert_eq!(HostToWorker::decode(&4u32.to_le_bytes()), Err(DOCA_ERROR_INVALID_VALUE));
    assert_eq!(WorkerToHost::decode(&2u32.to_le_bytes()), Err(DOCA_ERROR_INVALID_VALUE));
    assert_eq!(WorkerToDaemon::decode(&3u32.to_le_bytes()), Err(DOCA_ERROR_INVALID_VALUE));
    assert_eq!(DaemonToWorker::decode(&3u32.to_le_bytes()), Err(DOCA_ERROR_INVALID_VALUE));

    // A count of 4 billion ids in a tiny packet: refused without allocating for it.
    let mut b = 4u32.to_le_bytes().to_vec();
    b.extend_from_slice(&1u64.to_le_bytes());
    b.extend_from_slice(&u32::MAX.to_le_bytes());
    assert_eq!(Reply::decode(&b), Err(DOCA_ERROR_INVALID_VALUE));
    // A payload length beyond the packet.
    let mut b = 1u32.to_le_bytes().to_vec();
    b.extend_from_slice(&[0; 16]);
    b.extend_from_slice(&u32::MAX.to_le_bytes());
    b.extend_from_slice(&[1, 2, 3]);
    assert_eq!(HostToWorker::decode(&b), Err(DOCA_ERROR_INVALID_VALUE));
    // Invalid UTF-8 in a str.
    let mut b = 2u32.to_le_bytes().to_vec();
    b.extend_from_slice(&6i32.to_le_bytes());
    b.extend_from_slice(&2u32.to_le_bytes());
    b.extend_from_slice(&[0xff, 0xfe]);
    assert_eq!(WorkerToDaemon::decode(&b), Err(DOCA_ERROR_INVALID_VALUE));
    // A domain whose member count claims more than the packet holds.
    let mut b = 2u32.to_le_bytes().to_vec();
    b.extend_from_slice(&1u64.to_le_bytes());
    b.extend_from_slice(&1_000_000u32.to_le_bytes());
    b.extend_from_slice(&[0; 32]);
    assert_eq!(HostToWorker::decode(&b), Err(DOCA_ERROR_INVALID_VALUE));
}

#[test]
fn arbitrary_bytes_never_panic() {
    // A small deterministic generator: the decoders must return, never panic, on noise.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for round in 0..20_000u32 {
        let len = (round % 96) as usize;
        let mut b = Vec::with_capacity(len);
        for _ in 0..len {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            b.push(x as u8);
        }
        if len >= 4 {
            b[..4].copy_from_slice(&(1 + round % 6).to_le_bytes());
        }
        let _ = Request::decode(&b);
        let _ = Reply::decode(&b);
        let _ = HostToWorker::decode(&b);
        let _ = WorkerToHost::decode(&b);
        let _ = WorkerToDaemon::decode(&b);
        let _ = DaemonToWorker::decode(&b);
    }
}

#[test]
fn packets_and_fds_cross_a_socketpair() {
    let (a, b) = seqpacket_pair(false).unwrap();
    let (x, y) = seqpacket_pair(false).unwrap();
    let msg = Reply::Spawned { req: 1, worker_id: 2, pid: 3, addrs: addrs() }.encode();
    send_msg(a.as_fd(), &msg, Some(x.as_fd())).unwrap();
    send_msg(a.as_fd(), &DaemonToWorker::Exit.encode(), None).unwrap();

    let mut buf = vec![0u8; max_packet(0)];
    let (n, fd) = recv_msg(b.as_fd(), &mut buf).unwrap();
    assert_eq!(Reply::decode(&buf[..n]).unwrap(), Reply::decode(&msg).unwrap());
    let passed = fd.expect("descriptor passed");
    // SAFETY: F_GETFD on a live fd we own.
    let fdflags = unsafe { libc::fcntl(passed.as_raw_fd(), libc::F_GETFD) };
    assert!(fdflags & libc::FD_CLOEXEC != 0, "received fd must be CLOEXEC");
    // The passed descriptor is the same socket: what goes in on it comes out of `y`.
    send_msg(passed.as_fd(), b"ping", None).unwrap();
    let (n, none) = recv_msg(y.as_fd(), &mut buf).unwrap();
    assert_eq!(&buf[..n], b"ping");
    assert!(none.is_none());

    let (n, none) = recv_msg(b.as_fd(), &mut buf).unwrap();
    assert_eq!(DaemonToWorker::decode(&buf[..n]).unwrap(), DaemonToWorker::Exit);
    assert!(none.is_none());

    // A packet larger than the buffer is an error, not a silent truncation.
    send_msg(a.as_fd(), &[7u8; 64], None).unwrap();
    let mut small = [0u8; 16];
    assert_eq!(recv_msg(b.as_fd(), &mut small).unwrap_err().kind(), io::ErrorKind::InvalidData);

    // Hang-up reads as length 0; sending to a closed peer is EPIPE, not SIGPIPE.
    drop(a);
    assert_eq!(recv_msg(b.as_fd(), &mut buf).unwrap().0, 0);
    assert_eq!(send_msg(b.as_fd(), b"x", None).unwrap_err().raw_os_error(), Some(libc::EPIPE));
}

#[test]
fn nonblocking_recv_would_block_and_peer_cred_is_ours() {
    let (a, _b) = seqpacket_pair(true).unwrap();
    let mut buf = [0u8; 8];
    assert_eq!(recv_msg(a.as_fd(), &mut buf).unwrap_err().kind(), io::ErrorKind::WouldBlock);
    let cred = peer_cred(a.as_fd()).unwrap();
    // SAFETY: getuid/getpid cannot fail.
    assert_eq!(cred.uid, unsafe { libc::getuid() });
    // SAFETY: as above.
    assert_eq!(cred.pid, unsafe { libc::getpid() } as u32);
    fit_packet(a.as_fd(), 1 << 20).unwrap();
}

#[test]
fn socket_paths_follow_the_doc() {
    assert_eq!(service_socket_path("/run/x.sock"), PathBuf::from("/run/x.sock"));
    let p = service_socket_path("dpu0");
    assert!(p.to_str().unwrap().ends_with("/async-doca-urom-dpu0.sock"), "{p:?}");
    let d = default_socket_path();
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    assert!(d.to_str().unwrap().ends_with(&format!("/async-doca-urom-{uid}.sock")), "{d:?}");
}

#[test]
fn bad_paths_are_refused() {
    assert!(unix_addr(Path::new("")).is_err());
    assert!(unix_addr(Path::new(&"x".repeat(200))).is_err());
    assert!(connect(Path::new("/nonexistent-dir-for-urom/sock"), false).is_err());
}

#[test]
fn commands_and_notifications_are_encoded_into_one_buffer_of_their_exact_size() {
    // The per-operation messages: sized up front, so encoding never grows (reallocates) the
    // buffer, whatever the payload's length.
    for n in [0, 1, 100, 4000] {
        let c = HostToWorker::encode_command(7, 2, &vec![0x5a; n]);
        assert_eq!(c.len(), c.capacity(), "command of {n} bytes");
        assert_eq!(
            HostToWorker::decode(&c).unwrap(),
            HostToWorker::Command { ctx: 7, plugin: 2, payload: vec![0x5a; n] }
        );
        let m = WorkerToHost::Notify { ctx: 7, plugin: 2, status: DOCA_SUCCESS, packed: vec![0xa5; n] }.encode();
        assert_eq!(m.len(), m.capacity(), "notification of {n} bytes");
    }
}

#[test]
fn commands_and_notifications_decode_in_place_as_strictly_as_their_owned_forms() {
    for n in [0, 1, 100, 4000] {
        let payload = vec![0x5a; n];
        // The head is the wire's layout (tag 1, ctx, plugin, length; little-endian), and the
        // head and the payload side by side are the packet the decoders read.
        let le = |v: u64, n: usize| v.to_le_bytes()[..n].to_vec();
        let head = [le(1, 4), le(7, 8), le(2, 8), le(n as u64, 4)].concat();
        assert_eq!(HostToWorker::command_head(7, 2, n)[..], head[..]);
        let c = HostToWorker::encode_command(7, 2, &payload);
        assert_eq!([&head[..], &payload].concat(), c);
        assert_eq!(HostToWorker::decode_command(&c), Ok(Some(CommandRef { ctx: 7, plugin: 2, payload: &payload[..] })));
        let packed = vec![0xa5; n];
        let m = WorkerToHost::Notify { ctx: 9, plugin: 4, status: DOCA_ERROR_AGAIN, packed: packed.clone() }.encode();
        let head = [le(1, 4), le(9, 8), le(4, 8), le(DOCA_ERROR_AGAIN.0 as u32 as u64, 4), le(n as u64, 4)].concat();
        assert_eq!(WorkerToHost::notify_head(9, 4, DOCA_ERROR_AGAIN, n)[..], head[..]);
        assert_eq!([&head[..], &packed].concat(), m);
        let got = WorkerToHost::decode_notify(&m).unwrap();
        assert_eq!((got.ctx, got.plugin, got.status, got.packed), (9, 4, DOCA_ERROR_AGAIN, &packed[..]));
        // A byte short or a byte over: refused, as `decode` refuses it.
        for bad in [&c[..c.len() - 1], &[&c[..], &[0u8][..]].concat()[..]] {
            assert_eq!(HostToWorker::decode_command(bad), Err(DOCA_ERROR_INVALID_VALUE));
            assert_eq!(HostToWorker::decode(bad), Err(DOCA_ERROR_INVALID_VALUE));
        }
        for bad in [&m[..m.len() - 1], &[&m[..], &[0u8][..]].concat()[..]] {
            assert_eq!(WorkerToHost::decode_notify(bad), Err(DOCA_ERROR_INVALID_VALUE));
        }
    }
    // Other messages are not commands: `decode` takes them.
    let d = HostToWorker::DomainDestroy { ctx: 3 }.encode();
    assert_eq!(HostToWorker::decode_command(&d), Ok(None));
    assert_eq!(HostToWorker::decode(&d), Ok(HostToWorker::DomainDestroy { ctx: 3 }));
    assert_eq!(HostToWorker::decode_command(&[1, 0]), Err(DOCA_ERROR_INVALID_VALUE));
}
