//! Two sandbox instances in one process, driven through their C entry points by the SDK's
//! fake worker, sharing a fake domain: member 1 is `a`, member 2 is `b`.

use super::*;
use doca_urom_plugin::testing::{Domain, Member, Packed, Worker};
use std::rc::Rc;

const PLUGIN: u64 = 1 << 1;

fn pair() -> (Rc<Domain>, Worker, Worker) {
    let domain = Domain::new();
    let mut a = Worker::open(urom_plugin_get_iface, domain.clone()).expect("open a");
    let mut b = Worker::open(urom_plugin_get_iface, domain.clone()).expect("open b");
    domain.set_member(1, Member { addr: Some(a.address().unwrap()), segs: vec![] });
    domain.set_member(2, Member { addr: Some(b.address().unwrap()), segs: vec![] });
    (domain, a, b)
}

/// A send whose sandbox `context` is the UROM context plus 1000 (to tell the two apart).
fn send(w: &mut Worker, ctx: u64, dest: u64, tag: u64, data: &[u8]) {
    w.command(PLUGIN, ctx, 0, &Cmd::send(ctx + 1000, dest, tag, data.to_vec()).encode()).unwrap();
}

fn recv(w: &mut Worker, ctx: u64, tag: u64) {
    w.command(PLUGIN, ctx, 0, &Cmd::recv(ctx + 1000, tag).encode()).unwrap();
}

fn sent(ctx: u64) -> Notif {
    Notif::TagSend { context: ctx + 1000, status: ucs::OK }
}

fn received(ctx: u64, tag: u64, data: &[u8]) -> Notif {
    Notif::TagRecv { context: ctx + 1000, sender_tag: tag, status: ucs::OK, data: data.to_vec() }
}

fn body(p: &Packed) -> Notif {
    assert_eq!(p.status, Status::SUCCESS, "{p:?}");
    Notif::decode(p.packed.as_ref().unwrap()).unwrap()
}

/// Progresses both workers until `a` and `b` produced `want_a` and `want_b` notifications, or
/// a bounded number of rounds passed.
fn progress_both(a: &mut Worker, want_a: usize, b: &mut Worker, want_b: usize) -> (Vec<Packed>, Vec<Packed>) {
    let (mut got_a, mut got_b) = (Vec::new(), Vec::new());
    for _ in 0..20_000 {
        let (na, nb) = (a.progress().unwrap(), b.progress().unwrap());
        if na.is_empty() && nb.is_empty() {
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        got_a.extend(na);
        got_b.extend(nb);
        if got_a.len() >= want_a && got_b.len() >= want_b {
            break;
        }
    }
    (got_a, got_b)
}

#[test]
fn send_then_receive() {
    let (_d, mut a, mut b) = pair();
    recv(&mut b, 10, 7);
    send(&mut a, 20, 2, 7, b"hello");
    let (ga, gb) = progress_both(&mut a, 1, &mut b, 1);
    assert_eq!(ga.len(), 1);
    assert_eq!(ga[0].urom_context, 20);
    assert_eq!(body(&ga[0]), sent(20));
    assert_eq!(gb.len(), 1);
    assert_eq!(gb[0].urom_context, 10);
    assert_eq!(body(&gb[0]), received(10, 7, b"hello"));
}

#[test]
fn message_before_its_receive_is_queued() {
    let (_d, mut a, mut b) = pair();
    send(&mut a, 1, 2, 3, b"early");
    // Let b pull the datagram off its socket with no receive posted.
    let (ga, gb) = progress_both(&mut a, 1, &mut b, 0);
    assert_eq!(body(&ga[0]), sent(1));
    assert!(gb.is_empty());
    for _ in 0..10 {
        assert!(b.progress().unwrap().is_empty());
    }
    recv(&mut b, 2, 3);
    let gb = b.progress().unwrap();
    assert_eq!(gb.len(), 1);
    assert_eq!(body(&gb[0]), received(2, 3, b"early"));
}

#[test]
fn receives_match_by_tag_in_arrival_order() {
    let (_d, mut a, mut b) = pair();
    send(&mut a, 1, 2, 1, b"one-a");
    send(&mut a, 2, 2, 2, b"two");
    send(&mut a, 3, 2, 1, b"one-b");
    // Both directions: b sends to a as well.
    send(&mut b, 4, 1, 9, b"back");
    recv(&mut b, 11, 2);
    recv(&mut b, 12, 1);
    recv(&mut b, 13, 1);
    recv(&mut a, 14, 9);
    let (ga, gb) = progress_both(&mut a, 4, &mut b, 4);
    let by_ctx = |v: &[Packed], c: u64| body(v.iter().find(|p| p.urom_context == c).expect("answered"));
    assert_eq!(by_ctx(&gb, 11), received(11, 2, b"two"));
    assert_eq!(by_ctx(&gb, 12), received(12, 1, b"one-a"));
    assert_eq!(by_ctx(&gb, 13), received(13, 1, b"one-b"));
    assert_eq!(by_ctx(&gb, 4), sent(4));
    assert_eq!(by_ctx(&ga, 14), received(14, 9, b"back"));
    for c in 1..=3 {
        assert_eq!(by_ctx(&ga, c), sent(c));
    }
}

#[test]
fn a_full_receiver_queues_sends_and_keeps_their_order() {
    let (_d, mut a, mut b) = pair();
    // Far more than the kernel's datagram queue of an unread socket (max_dgram_qlen, 10 by
    // default) and its buffer: some sends must wait in the plugin.
    const N: u64 = 200;
    let data = vec![0x5a; 4096];
    for i in 0..N {
        send(&mut a, i, 2, 5, &[&i.to_le_bytes()[..], &data].concat());
    }
    let early_done = a.progress().unwrap().len();
    assert!((early_done as u64) < N, "expected back-pressure, all {N} sends finished at once");
    for i in 0..N {
        recv(&mut b, 1000 + i, 5);
    }
    let (ga, gb) = progress_both(&mut a, N as usize - early_done, &mut b, N as usize);
    assert_eq!(ga.len() + early_done, N as usize);
    assert!(ga.iter().all(|p| matches!(body(p), Notif::TagSend { status: ucs::OK, .. })));
    assert_eq!(gb.len(), N as usize);
    for (i, p) in gb.iter().enumerate() {
        let Notif::TagRecv { data: got, .. } = body(p) else { panic!("not a receive: {p:?}") };
        assert_eq!(got[..8], (i as u64).to_le_bytes(), "message {i} out of order");
        assert_eq!(p.urom_context, 1000 + i as u64);
    }
}

#[test]
fn bad_commands_are_answered_with_errors() {
    let (_d, mut a, b) = pair();
    a.command(PLUGIN, 1, 0, b"\x01\x00").unwrap();
    send(&mut a, 2, 99, 1, b"nobody");
    a.command(PLUGIN, 3, 0, &Cmd::send(3, 2, 1, vec![0; MAX_DATA + 1]).encode()).unwrap();
    drop(b); // closes b's socket
    send(&mut a, 4, 2, 1, b"gone");
    let got = a.progress().unwrap();
    let st: Vec<_> = got.iter().map(|p| (p.urom_context, p.status)).collect();
    assert_eq!(
        st,
        [(1, Status::INVALID_VALUE), (2, Status::NOT_FOUND), (3, Status::TOO_BIG), (4, Status::NOT_CONNECTED)]
    );
    // A command that does not decode has no body; the others carry their context and the
    // matching UCX status, as NVIDIA's plugin answers.
    assert_eq!(got[0].packed.as_deref(), Ok(&[][..]));
    let ucs_of = |p: &Packed| match Notif::decode(p.packed.as_ref().unwrap()).unwrap() {
        Notif::TagSend { context, status } => (context, status),
        n => panic!("{n:?}"),
    };
    assert_eq!(ucs_of(&got[1]), (1002, ucs::ERR_INVALID_ADDR));
    assert_eq!(ucs_of(&got[2]), (3, ucs::ERR_INVALID_PARAM));
    assert_eq!(ucs_of(&got[3]), (1004, ucs::ERR_UNREACHABLE));
    // The plugin still works.
    send(&mut a, 5, 1, 8, b"self");
    recv(&mut a, 6, 8);
    let got = a.progress_until(2, 1000).unwrap();
    assert_eq!(got.len(), 2);
}

#[test]
fn addresses_are_unique_abstract_names() {
    let (_d, mut a, mut b) = pair();
    let (aa, ab) = (a.address().unwrap(), b.address().unwrap());
    assert_ne!(aa, ab);
    let name = std::str::from_utf8(&aa[doca_urom_plugin::FRAME_HEADER_LEN..]).unwrap();
    assert!(name.starts_with(&format!("async-doca-urom-sandbox-{}-", std::process::id())), "{name}");
}

#[test]
fn receives_match_under_their_tag_mask_and_truncate() {
    let (_d, mut a, mut b) = pair();
    // Any tag whose high byte is 0xAB; the low bits come back as the sender's tag.
    b.command(PLUGIN, 1, 0, &Cmd::TagRecv { context: 11, count: 3, tag: 0xAB00, tag_mask: 0xFF00 }.encode()).unwrap();
    send(&mut a, 2, 2, 0x1234, b"other");
    send(&mut a, 3, 2, 0xAB42, b"abcdef");
    let (_, gb) = progress_both(&mut a, 2, &mut b, 1);
    assert_eq!(gb.len(), 1);
    assert_eq!(gb[0].status, Status::DRIVER, "truncated to the receive's 3 bytes");
    assert_eq!(
        Notif::decode(gb[0].packed.as_ref().unwrap()).unwrap(),
        Notif::TagRecv { context: 11, sender_tag: 0xAB42, status: ucs::ERR_MESSAGE_TRUNCATED, data: b"abc".to_vec() }
    );
    // The unmatched message waits for a receive of its own tag.
    recv(&mut b, 4, 0x1234);
    let gb = b.progress_until(1, 1000).unwrap();
    assert_eq!(body(&gb[0]), received(4, 0x1234, b"other"));
}

#[test]
fn mapped_memory_is_not_supported() {
    let (_d, mut a, _b) = pair();
    a.command(PLUGIN, 1, 0, &Cmd::MemMap { context: 5, exported_memh: vec![1; 16] }.encode()).unwrap();
    let mapped = Cmd::TagSendMapped { context: 6, dest: 2, buffer: 0x1000, count: 8, tag: 1, memh_id: 9 };
    a.command(PLUGIN, 2, 0, &mapped.encode()).unwrap();
    let got = a.progress().unwrap();
    assert_eq!(got.len(), 2);
    assert!(got.iter().all(|p| p.status == Status::NOT_SUPPORTED));
    assert_eq!(Notif::decode(got[0].packed.as_ref().unwrap()).unwrap(), Notif::MemMap { context: 5, memh_id: 0 });
    assert_eq!(
        Notif::decode(got[1].packed.as_ref().unwrap()).unwrap(),
        Notif::TagSend { context: 6, status: ucs::ERR_UNSUPPORTED }
    );
}
