//! The trampolines driven through the C function pointers, with the fake worker of
//! `testing` and direct calls for the edge cases it does not reach.

use std::cell::Cell;

use super::*;
use crate::testing::{Domain, Member, Segment, Worker};
use crate::ReplyTo;

thread_local! {
    // Each test runs on its own thread, so these do not leak between tests.
    static DROPS: Cell<usize> = const { Cell::new(0) };
    static PANIC_IN_PROGRESS: Cell<bool> = const { Cell::new(false) };
    static BUSY_IN_PROGRESS: Cell<bool> = const { Cell::new(false) };
}

/// A plugin whose behaviour the payload selects.
struct TestPlugin {
    later: Vec<ReplyTo>,
}

impl Drop for TestPlugin {
    fn drop(&mut self) {
        DROPS.with(|d| d.set(d.get() + 1));
    }
}

fn parse_u64(b: &[u8]) -> Result<u64, Status> {
    std::str::from_utf8(b).ok().and_then(|s| s.parse().ok()).ok_or(Status::INVALID_VALUE)
}

impl Plugin for TestPlugin {
    const VERSION: u64 = 0x1234;

    fn open(_: &WorkerCtx) -> Result<Self, Status> {
        Ok(TestPlugin { later: Vec::new() })
    }

    fn address(&self) -> &[u8] {
        b"test-address"
    }

    fn command(&mut self, ctx: &WorkerCtx, cmd: Command<'_>, out: &mut Notifications) -> Result<(), Status> {
        let p = cmd.payload;
        if let Some(rest) = p.strip_prefix(b"echo:") {
            out.push(cmd.reply_to().ok(rest.to_vec()));
        } else if p == b"later" {
            self.later.push(cmd.reply_to());
        } else if p == b"fail" {
            out.push(cmd.reply_to().ok(b"must not be sent".to_vec()));
            return Err(Status::NOT_FOUND);
        } else if p == b"panic" {
            out.push(cmd.reply_to().ok(b"must not be sent".to_vec()));
            panic!("test panic in command");
        } else if let Some(id) = p.strip_prefix(b"addr:") {
            let a = ctx.addr(parse_u64(id)?)?;
            out.push(cmd.reply_to().ok(a.to_vec()));
        } else if let Some(va) = p.strip_prefix(b"seg:") {
            let seg = ctx.segment_of(5, parse_u64(va)?)?;
            let mut body = seg.to_le_bytes().to_vec();
            body.extend_from_slice(ctx.memh(5, seg)?);
            body.extend_from_slice(ctx.mkey(5, seg)?);
            out.push(cmd.reply_to().ok(body));
        } else {
            return Err(Status::INVALID_VALUE);
        }
        Ok(())
    }

    fn progress(&mut self, _: &WorkerCtx, out: &mut Notifications) {
        for r in self.later.drain(..) {
            out.push(r.ok(b"done".to_vec()));
        }
        if BUSY_IN_PROGRESS.with(|b| b.get()) {
            out.made_progress();
        }
        if PANIC_IN_PROGRESS.with(|p| p.get()) {
            out.push(ReplyTo { plugin: 0, urom_context: 0, dest_id: 0 }.ok(b"must not be sent".to_vec()));
            panic!("test panic in progress");
        }
    }
}

crate::export_plugin!(TestPlugin);

struct PanicOnOpen;

impl Plugin for PanicOnOpen {
    const VERSION: u64 = 1;
    fn open(_: &WorkerCtx) -> Result<Self, Status> {
        panic!("test panic in open");
    }
    fn command(&mut self, _: &WorkerCtx, _: Command<'_>, _: &mut Notifications) -> Result<(), Status> {
        Ok(())
    }
}

unsafe extern "C" fn panic_on_open_iface(out: *mut urom_plugin_iface) -> doca_error_t {
    // SAFETY: forwarded contract of urom_plugin_get_iface.
    unsafe { get_iface::<PanicOnOpen>(out) }
}

/// A plugin with a custom pack: the body doubled.
struct Doubler;

impl Plugin for Doubler {
    const VERSION: u64 = 1;
    fn open(_: &WorkerCtx) -> Result<Self, Status> {
        Ok(Doubler)
    }
    fn command(&mut self, _: &WorkerCtx, cmd: Command<'_>, out: &mut Notifications) -> Result<(), Status> {
        out.push(cmd.reply_to().ok(cmd.payload.to_vec()));
        Ok(())
    }
    fn pack(body: &[u8], out: &mut [u8]) -> Result<usize, Status> {
        let n = body.len() * 2;
        let dst = out.get_mut(..n).ok_or(Status::TOO_BIG)?;
        dst[..body.len()].copy_from_slice(body);
        dst[body.len()..].copy_from_slice(body);
        Ok(n)
    }
}

unsafe extern "C" fn doubler_iface(out: *mut urom_plugin_iface) -> doca_error_t {
    // SAFETY: forwarded contract of urom_plugin_get_iface.
    unsafe { get_iface::<Doubler>(out) }
}

fn worker() -> Worker {
    Worker::open(urom_plugin_get_iface, Domain::new()).expect("open")
}

#[test]
fn command_progress_pack_round_trip() {
    let mut w = worker();
    w.command(1 << 3, 77, 9, b"echo:hello").unwrap();
    let got = w.progress().unwrap();
    assert_eq!(got.len(), 1);
    let n = &got[0];
    assert_eq!((n.plugin, n.urom_context, n.dest_id, n.status), (1 << 3, 77, 9, Status::SUCCESS));
    assert_eq!(n.packed.as_deref(), Ok(&b"hello"[..]));
    // Nothing more: progress says EMPTY and appends nothing.
    assert!(w.progress().unwrap().is_empty());
}

#[test]
fn progress_reports_empty_through_the_raw_entry_point() {
    let mut w = worker();
    let f = w.iface().progress.unwrap();
    let mut head = ucs_list_link { prev: ptr::null_mut(), next: ptr::null_mut() };
    // SAFETY: an initialised list head and the plugin's own ctx.
    unsafe {
        list::init(&mut head);
        assert_eq!(f(w.raw_ctx(), &mut head), DOCA_ERROR_EMPTY);
        assert!(list::is_empty(&head));
    }
}

#[test]
fn progress_without_answers_reports_success_when_work_advanced() {
    let mut w = worker();
    let f = w.iface().progress.unwrap();
    let mut head = ucs_list_link { prev: ptr::null_mut(), next: ptr::null_mut() };
    BUSY_IN_PROGRESS.with(|b| b.set(true));
    // SAFETY: an initialised list head and the plugin's own ctx.
    unsafe {
        list::init(&mut head);
        assert_eq!(f(w.raw_ctx(), &mut head), DOCA_SUCCESS, "busy: SUCCESS with an empty list");
        assert!(list::is_empty(&head));
        BUSY_IN_PROGRESS.with(|b| b.set(false));
        assert_eq!(f(w.raw_ctx(), &mut head), DOCA_ERROR_EMPTY, "the mark lasts one call");
    }
}

#[test]
fn answers_given_later_in_progress_keep_their_addressing() {
    let mut w = worker();
    w.command(2, 1, 100, b"later").unwrap();
    w.command(2, 2, 200, b"echo:now").unwrap();
    let got = w.progress().unwrap();
    // Queued in push order: the echo was pushed during its command, "later" in progress.
    let keys: Vec<_> = got.iter().map(|n| (n.urom_context, n.dest_id, n.packed.clone().unwrap())).collect();
    assert_eq!(keys, vec![(2, 200, b"now".to_vec()), (1, 100, b"done".to_vec())]);
}

#[test]
fn failed_command_gets_exactly_one_error_answer() {
    let mut w = worker();
    w.command(2, 5, 1, b"fail").unwrap();
    w.command(2, 6, 1, b"no such command").unwrap();
    let got = w.progress().unwrap();
    assert_eq!(got.len(), 2);
    assert_eq!((got[0].urom_context, got[0].status), (5, Status::NOT_FOUND));
    assert_eq!(got[0].packed.as_deref(), Ok(&[][..]));
    assert_eq!((got[1].urom_context, got[1].status), (6, Status::INVALID_VALUE));
}

#[test]
fn panic_in_command_is_unexpected_and_the_plugin_lives_on() {
    let mut w = worker();
    w.command(2, 5, 1, b"panic").unwrap();
    w.command(2, 6, 1, b"echo:still here").unwrap();
    let got = w.progress().unwrap();
    assert_eq!(got.len(), 2);
    assert_eq!((got[0].urom_context, got[0].status), (5, Status::UNEXPECTED));
    assert_eq!(got[0].packed.as_deref(), Ok(&[][..]));
    assert_eq!(got[1].packed.as_deref(), Ok(&b"still here"[..]));
}

#[test]
fn panic_in_progress_is_unexpected_and_earlier_answers_survive() {
    let mut w = worker();
    w.command(2, 5, 1, b"echo:queued").unwrap();
    PANIC_IN_PROGRESS.with(|p| p.set(true));
    assert_eq!(w.progress().unwrap_err(), Status::UNEXPECTED);
    PANIC_IN_PROGRESS.with(|p| p.set(false));
    let got = w.progress().unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].packed.as_deref(), Ok(&b"queued"[..]));
}

#[test]
fn panic_in_open_is_unexpected() {
    assert_eq!(Worker::open(panic_on_open_iface, Domain::new()).err(), Some(Status::UNEXPECTED));
}

#[test]
fn address_is_framed_and_too_small_reports_the_size() {
    let mut w = worker();
    let needed = FRAME_HEADER_LEN + b"test-address".len();
    assert_eq!(w.address_with_room(0).unwrap_err(), (Status::INVALID_VALUE, needed));
    assert_eq!(w.address_with_room(needed - 1).unwrap_err(), (Status::INVALID_VALUE, needed));
    let a = w.address_with_room(needed).unwrap();
    assert_eq!(&a[..4], &(b"test-address".len() as u32).to_le_bytes());
    assert_eq!(&a[4..], b"test-address");
    assert_eq!(w.address().unwrap(), a);
    // More room than needed: the reported length is the address's.
    assert_eq!(w.address_with_room(needed + 10).unwrap(), a);
}

#[test]
fn notif_pack_too_small_and_custom_pack() {
    let mut w = worker();
    w.pack_room = 3;
    w.command(2, 1, 1, b"echo:four").unwrap();
    let got = w.progress().unwrap();
    assert_eq!(got[0].packed, Err(Status::TOO_BIG));

    let mut d = Worker::open(doubler_iface, Domain::new()).unwrap();
    d.command(2, 1, 1, b"ab").unwrap();
    assert_eq!(d.progress().unwrap()[0].packed.as_deref(), Ok(&b"abab"[..]));
    d.pack_room = 3;
    d.command(2, 1, 1, b"ab").unwrap();
    assert_eq!(d.progress().unwrap()[0].packed, Err(Status::TOO_BIG));
}

#[test]
fn domain_lookups_reach_the_worker_table() {
    let domain = Domain::new();
    let mut a = Worker::open(urom_plugin_get_iface, domain.clone()).unwrap();
    let mut b = Worker::open(urom_plugin_get_iface, domain.clone()).unwrap();
    domain.set_member(
        5,
        Member {
            addr: Some(b.address().unwrap()),
            segs: vec![
                Segment { va: 0x1000, len: 0x100, memh: b"h0".to_vec(), mkey: b"k0".to_vec() },
                Segment { va: 0x2000, len: 0x100, memh: b"h1".to_vec(), mkey: b"key1".to_vec() },
            ],
        },
    );
    a.command(2, 1, 1, b"addr:5").unwrap();
    a.command(2, 2, 1, b"addr:6").unwrap();
    a.command(2, 3, 1, b"seg:8447").unwrap(); // 0x20ff: last byte of segment 1
    a.command(2, 4, 1, b"seg:8448").unwrap(); // 0x2100: just past it
    let got = a.progress().unwrap();
    assert_eq!(got[0].packed.as_deref(), Ok(&b"test-address"[..]));
    assert_eq!(got[1].status, Status::NOT_FOUND);
    assert_eq!(got[2].packed.as_deref(), Ok(&b"\x01\x00\x00\x00h1key1"[..]));
    assert_eq!(got[3].status, Status::NOT_FOUND);
}

#[test]
fn close_drops_the_plugin_once() {
    DROPS.with(|d| d.set(0));
    let mut w = worker();
    let close = w.iface().close.unwrap();
    // SAFETY: the plugin's ctx; a second close finds plugin_ctx NULL and does nothing.
    unsafe { close(w.raw_ctx()) };
    assert_eq!(DROPS.with(|d| d.get()), 1);
    // Calls after close are refused, not use-after-free.
    assert_eq!(w.command(2, 1, 1, b"echo:x"), Err(Status::BAD_STATE));
    drop(w);
    assert_eq!(DROPS.with(|d| d.get()), 1);
}

#[test]
fn null_arguments_are_invalid_value() {
    // SAFETY: every call passes NULL where the entry point must check for it.
    unsafe {
        assert_eq!(urom_plugin_get_iface(ptr::null_mut()), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(urom_plugin_get_version(ptr::null_mut()), DOCA_ERROR_INVALID_VALUE);
        let i = iface::<TestPlugin>();
        assert_eq!(i.open.unwrap()(ptr::null_mut()), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(i.notif_pack.unwrap()(ptr::null_mut(), ptr::null_mut(), ptr::null_mut()), DOCA_ERROR_INVALID_VALUE);
        i.close.unwrap()(ptr::null_mut());
        let mut w = worker();
        assert_eq!(i.worker_cmd.unwrap()(w.raw_ctx(), ptr::null_mut()), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(i.progress.unwrap()(w.raw_ctx(), ptr::null_mut()), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(i.addr.unwrap()(w.raw_ctx(), ptr::null_mut(), ptr::null_mut()), DOCA_ERROR_INVALID_VALUE);
    }
}

#[test]
fn version_and_iface_table() {
    let mut v = 0;
    // SAFETY: valid out-pointers.
    unsafe {
        assert_eq!(urom_plugin_get_version(&mut v), DOCA_SUCCESS);
        let mut i: urom_plugin_iface = core::mem::zeroed();
        assert_eq!(urom_plugin_get_iface(&mut i), DOCA_SUCCESS);
        assert_eq!(i.__doca_api_version, UROM_PLUGIN_DOCA_API_VERSION);
    }
    assert_eq!(v, 0x1234);
}

#[test]
fn plugin_methods_can_be_tested_directly_with_a_fake_ctx() {
    use crate::testing::with_worker_ctx;
    let domain = Domain::new();
    let framed = [&12u32.to_le_bytes()[..], b"test-address"].concat();
    domain.set_member(3, Member { addr: Some(framed), segs: vec![] });
    with_worker_ctx(domain, |ctx| {
        let mut p = TestPlugin::open(ctx).unwrap();
        let mut out = Notifications::new();
        let cmd = Command { plugin: 1, urom_context: 2, dest_id: 3, payload: b"addr:3" };
        p.command(ctx, cmd, &mut out).unwrap();
        let cmd = Command { plugin: 1, urom_context: 4, dest_id: 3, payload: b"addr:4" };
        assert_eq!(p.command(ctx, cmd, &mut out), Err(Status::NOT_FOUND));
        assert_eq!(ctx.memh(3, 0), Err(Status::NOT_FOUND));
        let got = out.take_all();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].body, b"test-address");
        assert_eq!((got[0].urom_context, got[0].dest_id), (2, 3));
    });
}
