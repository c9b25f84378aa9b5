//! Unit tests of `pe.rs` (moved out of line: longer than the workspace's ~150-line limit for
//! inline test modules).

use super::*;
use crate::ctx::{doca_ctx_set_state_changed_cb, doca_ctx_start, doca_ctx_stop};
use crate::task::{doca_task_free, doca_task_submit};
use crate::testkit::*;

fn arm(pe: *mut doca_pe) {
    // SAFETY: live PE.
    assert_eq!(unsafe { doca_pe_request_notification(pe) }, DOCA_SUCCESS);
}

fn clear(pe: *mut doca_pe) {
    // SAFETY: live PE.
    assert_eq!(unsafe { doca_pe_clear_notification(pe, -1) }, DOCA_SUCCESS);
}

fn started_dummy(pe: *mut doca_pe, n: u32) -> *mut Dummy {
    let d = Dummy::create(false);
    Dummy::set_conf(d, n).unwrap();
    // SAFETY: live objects.
    unsafe {
        assert_eq!(doca_pe_connect_ctx(pe, Dummy::ctx(d)), DOCA_SUCCESS);
        assert_eq!(doca_ctx_start(Dummy::ctx(d)), DOCA_SUCCESS);
    }
    d
}

#[test]
fn handle_is_stable_and_readable_exactly_with_work() {
    reset();
    let pe = new_pe();
    let fd = pe_fd(pe);
    assert!(fd >= 0);
    assert_eq!(pe_fd(pe), fd, "the handle never changes");
    let d = started_dummy(pe, 4);
    THEN.with(|t| t.set(Then::Free));

    // Idle and armed: not readable.
    drain(pe);
    arm(pe);
    assert!(!readable(fd, 0));

    // A completion queued while armed makes it readable.
    let t = Dummy::alloc(d, 1).unwrap();
    // SAFETY: live task.
    assert_eq!(unsafe { doca_task_submit(t) }, DOCA_SUCCESS);
    assert!(readable(fd, 0));
    clear(pe);
    assert_eq!(drain(pe), 1);
    assert!(!readable(fd, 0), "cleared and drained: quiet");

    // Not armed: queuing a completion does not touch the eventfd...
    let t = Dummy::alloc(d, 2).unwrap();
    // SAFETY: live task.
    assert_eq!(unsafe { doca_task_submit(t) }, DOCA_SUCCESS);
    assert!(!readable(fd, 0));
    // ...but arming with work already pending makes it readable at once.
    arm(pe);
    assert!(readable(fd, 0));
    clear(pe);
    assert_eq!(drain(pe), 1);
    arm(pe);
    assert!(!readable(fd, 0));
    clear(pe);

    // SAFETY: live ctx.
    unsafe { doca_ctx_stop(Dummy::ctx(d)) };
    Dummy::destroy(d).unwrap();
    destroy_pe(pe);
}

#[test]
fn due_transition_wakes_an_armed_pe() {
    reset();
    let pe = new_pe();
    let fd = pe_fd(pe);
    let d = started_dummy(pe, 1);
    let t = Dummy::alloc(d, 1).unwrap();
    // SAFETY: live ctx.
    let r = unsafe { doca_ctx_stop(Dummy::ctx(d)) };
    assert_eq!(r, DOCA_ERROR_IN_PROGRESS);
    drain(pe);
    arm(pe);
    assert!(!readable(fd, 0));
    // Freeing the last task (outside progress) makes STOPPING → IDLE due.
    // SAFETY: owned task.
    unsafe { doca_task_free(t) };
    assert!(readable(fd, 0));
    clear(pe);
    assert_eq!(drain(pe), 1);
    Dummy::destroy(d).unwrap();
    destroy_pe(pe);
}

#[test]
fn doorbell_rung_by_another_thread() {
    let pe = new_pe();
    let fd = pe_fd(pe);
    arm(pe);
    assert!(!readable(fd, 0));
    // SAFETY: live PE (read-only access to its doorbell address).
    let addr = unsafe { &*pe }.doorbell_address();
    std::thread::spawn(move || crate::doorbell::ring(addr).unwrap()).join().unwrap();
    assert!(readable(fd, 1000));
    clear(pe);
    assert!(!readable(fd, 0));
    // Rung while not armed: the next arm drains it (nothing to do → quiet).
    crate::doorbell::ring(addr).unwrap();
    arm(pe);
    assert!(!readable(fd, 0));
    clear(pe);
    destroy_pe(pe);
    // The PE is gone: its doorbell reports NOT_FOUND to ringers. Not always at once: a
    // process that another test forks at this moment holds a copy of every socket until
    // it execs (CLOEXEC closes it then), so the name can stay bound for a moment.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        match crate::doorbell::ring(addr) {
            Err(DOCA_ERROR_NOT_FOUND) => break,
            Ok(()) if std::time::Instant::now() < deadline => std::thread::sleep(std::time::Duration::from_millis(1)),
            other => panic!("ringing a destroyed PE gave {other:?}, not NOT_FOUND"),
        }
    }
}

#[test]
fn registered_fds_in_every_mode() {
    let pe = new_pe();
    let fd = pe_fd(pe);
    // SAFETY: live PE.
    let p = unsafe { &*pe };
    // SAFETY: eventfd with constant flags.
    let drain_ev = unsafe { OwnedFd::from_raw_fd(libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC)) };
    // SAFETY: as above.
    let level_ev = unsafe { OwnedFd::from_raw_fd(libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC)) };
    p.register_fd(drain_ev.as_raw_fd(), FdMode::Drain).unwrap();
    p.register_fd(level_ev.as_raw_fd(), FdMode::Level).unwrap();
    assert_eq!(p.register_fd(level_ev.as_raw_fd(), FdMode::Level), Err(DOCA_ERROR_ALREADY_EXIST));
    let one = 1u64;
    arm(pe);
    // SAFETY: 8-byte write to our eventfd.
    unsafe { libc::write(drain_ev.as_raw_fd(), (&one as *const u64).cast(), 8) };
    assert!(readable(fd, 0));
    clear(pe);
    assert!(!readable(fd, 0), "drain-mode fd was drained");
    // SAFETY: as above.
    unsafe { libc::write(level_ev.as_raw_fd(), (&one as *const u64).cast(), 8) };
    assert!(readable(fd, 0));
    clear(pe);
    assert!(readable(fd, 0), "level-mode fd is left for its ctx to consume");
    drain_fd(level_ev.as_raw_fd());
    assert!(!readable(fd, 0));
    // An eventfd-mode fd is emptied too, whatever its count (one read takes all of it).
    // SAFETY: as above.
    let counter_ev = unsafe { OwnedFd::from_raw_fd(libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC)) };
    p.register_fd(counter_ev.as_raw_fd(), FdMode::Eventfd).unwrap();
    for _ in 0..3 {
        // SAFETY: as above.
        unsafe { libc::write(counter_ev.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }
    assert!(readable(fd, 0));
    clear(pe);
    assert!(!readable(fd, 0), "eventfd-mode fd was emptied");
    p.unregister_fd(counter_ev.as_raw_fd());
    p.unregister_fd(level_ev.as_raw_fd());
    p.unregister_fd(drain_ev.as_raw_fd());
    // SAFETY: as above.
    unsafe { libc::write(level_ev.as_raw_fd(), (&one as *const u64).cast(), 8) };
    assert!(!readable(fd, 0), "unregistered");
    destroy_pe(pe);
}

/// A connected pair of non-blocking datagram sockets.
fn socket_pair() -> (OwnedFd, OwnedFd) {
    let mut sv = [-1; 2];
    // SAFETY: `sv` has room for the two descriptors.
    let r = unsafe {
        libc::socketpair(libc::AF_UNIX, libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0, sv.as_mut_ptr())
    };
    assert_eq!(r, 0);
    // SAFETY: fresh descriptors owned by nobody else.
    unsafe { (OwnedFd::from_raw_fd(sv[0]), OwnedFd::from_raw_fd(sv[1])) }
}

#[test]
fn hooks_see_which_level_fds_are_ready() {
    reset();
    let pe = new_pe();
    // SAFETY: live PE.
    let p = unsafe { &*pe };
    let d = started_dummy(pe, 4);
    let (ready_rx, ready_tx) = socket_pair();
    let (quiet_rx, _quiet_tx) = socket_pair();
    let (unregistered_rx, _unregistered_tx) = socket_pair();
    p.register_fd(ready_rx.as_raw_fd(), FdMode::Level).unwrap();
    p.register_fd(quiet_rx.as_raw_fd(), FdMode::Level).unwrap();
    // SAFETY: one byte from a valid buffer to our socket.
    assert_eq!(unsafe { libc::send(ready_tx.as_raw_fd(), b"x".as_ptr().cast(), 1, 0) }, 1);
    let dummy = Dummy::get(d);
    *dummy.probe.borrow_mut() = vec![ready_rx.as_raw_fd(), quiet_rx.as_raw_fd(), unregistered_rx.as_raw_fd()];
    drain(pe);
    assert_eq!(
        *dummy.probed.borrow(),
        [true, false, true],
        "readable: ready; registered and quiet: not; not registered: may be (the hook reads it)"
    );
    // Outside a walk over the hooks nothing is known: every descriptor may be ready.
    assert!(p.fd_ready(quiet_rx.as_raw_fd()));
    // A look answers for later walks within SCAN_FRESH: data consumed behind the PE's back
    // still looks ready (the hook would find it empty and say so), and new data is not seen.
    // The look is dated an hour ahead so that it is fresh however long this (debug, loaded)
    // test takes until the next walk; the expiry itself is tested below, with a real sleep.
    p.date_last_look_for_test(std::time::Instant::now() + std::time::Duration::from_secs(3600));
    let mut b = [0u8; 4];
    // SAFETY: `b` has room for the byte.
    assert_eq!(unsafe { libc::recv(ready_rx.as_raw_fd(), b.as_mut_ptr().cast(), b.len(), 0) }, 1);
    // SAFETY: as above.
    assert_eq!(unsafe { libc::send(_quiet_tx.as_raw_fd(), b"y".as_ptr().cast(), 1, 0) }, 1);
    drain(pe);
    assert_eq!(*dummy.probed.borrow(), [true, false, true], "the last look still answers");
    // A hook that finds a descriptor empty tells the PE, which stops saying it is ready.
    p.fd_empty(ready_rx.as_raw_fd());
    // Once the look is older than SCAN_FRESH, the next walk looks again.
    p.date_last_look_for_test(std::time::Instant::now());
    std::thread::sleep(SCAN_FRESH);
    drain(pe);
    assert_eq!(*dummy.probed.borrow(), [false, true, true]);
    // SAFETY: `b` has room for the byte.
    assert_eq!(unsafe { libc::recv(quiet_rx.as_raw_fd(), b.as_mut_ptr().cast(), b.len(), 0) }, 1);
    // Arming sweeps the set, and its look is the next walks' scan.
    // SAFETY: live PE.
    assert_eq!(unsafe { doca_pe_request_notification(pe) }, DOCA_SUCCESS);
    drain(pe);
    assert_eq!(*dummy.probed.borrow(), [false, false, true], "the arm's look is fresh");
    // SAFETY: live PE.
    assert_eq!(unsafe { doca_pe_clear_notification(pe, 0) }, DOCA_SUCCESS);
    std::thread::sleep(SCAN_FRESH);

    // More ready sources than one look returns: every registered one may be ready.
    let many: Vec<_> = (0..SCAN_EVENTS).map(|_| socket_pair()).collect();
    for (rx, tx) in &many {
        p.register_fd(rx.as_raw_fd(), FdMode::Level).unwrap();
        // SAFETY: as above.
        assert_eq!(unsafe { libc::send(tx.as_raw_fd(), b"x".as_ptr().cast(), 1, 0) }, 1);
    }
    drain(pe);
    assert_eq!(*dummy.probed.borrow(), [true, true, true], "a full look cannot say which are quiet");
    for (rx, _) in &many {
        p.unregister_fd(rx.as_raw_fd());
    }
    p.unregister_fd(ready_rx.as_raw_fd());
    p.unregister_fd(quiet_rx.as_raw_fd());
    // SAFETY: live ctx.
    unsafe { doca_ctx_stop(Dummy::ctx(d)) };
    Dummy::destroy(d).unwrap();
    destroy_pe(pe);
}

#[test]
fn a_quiet_descriptor_accepts_an_older_look() {
    reset();
    let pe = new_pe();
    // SAFETY: live PE.
    let p = unsafe { &*pe };
    let d = started_dummy(pe, 4);
    let (rx, tx) = socket_pair();
    p.register_fd(rx.as_raw_fd(), FdMode::Level).unwrap();
    let dummy = Dummy::get(d);
    *dummy.probe.borrow_mut() = vec![rx.as_raw_fd()];
    drain(pe);
    assert_eq!(*dummy.probed.borrow(), [false]);
    // SAFETY: one byte from a valid buffer to our socket.
    assert_eq!(unsafe { libc::send(tx.as_raw_fd(), b"x".as_ptr().cast(), 1, 0) }, 1);
    // The last look is older than SCAN_FRESH but younger than an hour.
    p.date_last_look_for_test(std::time::Instant::now() - 2 * SCAN_FRESH);
    dummy.probe_fresh.set(Some(std::time::Duration::from_secs(3600)));
    drain(pe);
    assert_eq!(*dummy.probed.borrow(), [false], "a look younger than the asker's freshness answers");
    dummy.probe_fresh.set(None);
    drain(pe);
    assert_eq!(*dummy.probed.borrow(), [true], "asked with SCAN_FRESH, the PE looks again");
    p.unregister_fd(rx.as_raw_fd());
    // SAFETY: live ctx.
    unsafe { doca_ctx_stop(Dummy::ctx(d)) };
    Dummy::destroy(d).unwrap();
    destroy_pe(pe);
}

#[test]
fn event_mode_and_counters() {
    let pe = new_pe();
    // SAFETY: live PE, valid out-pointer.
    unsafe {
        assert_eq!(doca_pe_set_event_mode(pe, DOCA_PE_EVENT_MODE_PROGRESS_SELECTIVE), DOCA_SUCCESS);
        assert_eq!((*pe).event_mode(), DOCA_PE_EVENT_MODE_PROGRESS_SELECTIVE);
        assert_eq!(doca_pe_set_event_mode(pe, 7), DOCA_ERROR_INVALID_VALUE);
        let mut n = 5;
        assert_eq!(doca_pe_get_num_inflight_tasks(pe, &mut n), DOCA_SUCCESS);
        assert_eq!(n, 0);
        assert_eq!(doca_pe_progress(pe), 0);
    }
    destroy_pe(pe);
}

/// Whether the PE may skip its look for a due transition (see `doca_pe::transitions`).
fn no_transition_to_look_for(pe: *mut doca_pe) -> bool {
    // SAFETY: live PE, used on this thread only.
    !unsafe { &*pe }.transitions.get()
}

#[test]
fn transitions_made_due_after_an_idle_look_are_reported() {
    reset();
    let pe = new_pe();
    let (a, b) = (Dummy::create(false), Dummy::create(true));
    let (ca, cb) = (Dummy::ctx(a), Dummy::ctx(b));
    Dummy::set_conf(a, 2).unwrap();
    Dummy::set_conf(b, 2).unwrap();
    // SAFETY: live objects throughout.
    unsafe {
        doca_ctx_set_state_changed_cb(ca, Some(rec_state));
        doca_ctx_set_state_changed_cb(cb, Some(rec_state));
        assert_eq!(doca_pe_connect_ctx(pe, ca), DOCA_SUCCESS);
        assert_eq!(doca_pe_connect_ctx(pe, cb), DOCA_SUCCESS);
        assert_eq!(doca_ctx_start(ca), DOCA_SUCCESS);
        assert_eq!(doca_ctx_start(cb), DOCA_ERROR_IN_PROGRESS);
    }
    take_states();
    assert_eq!(drain(pe), 0, "b's start is not finished: nothing to do");
    assert!(no_transition_to_look_for(pe), "an idle progress found none due and says so");

    // An async start finished by a progress hook: reported by that same progress call.
    Dummy::get(b).ready.set(true);
    // SAFETY: live PE.
    assert_eq!(unsafe { doca_pe_progress(pe) }, 1);
    assert_eq!(take_states(), vec![(DOCA_CTX_STATE_STARTING, DOCA_CTX_STATE_RUNNING)]);
    assert_eq!(drain(pe), 0);
    assert!(no_transition_to_look_for(pe));

    // Both stopped with a task allocated: STOPPING, nothing due until the tasks are freed,
    // which happens outside progress, after a look that found none due.
    let (ta, tb) = (Dummy::alloc(a, 1).unwrap(), Dummy::alloc(b, 2).unwrap());
    // SAFETY: live ctxs.
    unsafe {
        assert_eq!(doca_ctx_stop(ca), DOCA_ERROR_IN_PROGRESS);
        assert_eq!(doca_ctx_stop(cb), DOCA_ERROR_IN_PROGRESS);
    }
    assert_eq!(drain(pe), 0);
    assert!(no_transition_to_look_for(pe));
    // SAFETY: owned tasks.
    unsafe {
        doca_task_free(ta);
        assert!(!no_transition_to_look_for(pe), "freeing the last task of a STOPPING ctx tells the PE");
        doca_task_free(tb);
    }
    // Two due at once: one report per progress call, and the look goes on after the first.
    // SAFETY: live PE.
    unsafe {
        assert_eq!(doca_pe_progress(pe), 1);
        assert!(!no_transition_to_look_for(pe), "a report leaves the look on");
        assert_eq!(doca_pe_progress(pe), 1);
        assert_eq!(doca_pe_progress(pe), 0);
    }
    assert!(no_transition_to_look_for(pe));
    assert_eq!(
        take_states(),
        vec![
            (DOCA_CTX_STATE_RUNNING, DOCA_CTX_STATE_STOPPING),
            (DOCA_CTX_STATE_RUNNING, DOCA_CTX_STATE_STOPPING),
            (DOCA_CTX_STATE_STOPPING, DOCA_CTX_STATE_IDLE),
            (DOCA_CTX_STATE_STOPPING, DOCA_CTX_STATE_IDLE),
        ]
    );

    // A failed async start, finished by a progress hook after an idle look.
    Dummy::get(b).fail_start.set(true);
    // SAFETY: live ctx.
    assert_eq!(unsafe { doca_ctx_start(cb) }, DOCA_ERROR_IN_PROGRESS);
    assert_eq!(drain(pe), 0);
    assert!(no_transition_to_look_for(pe));
    Dummy::get(b).ready.set(true);
    // SAFETY: live PE.
    assert_eq!(unsafe { doca_pe_progress(pe) }, 1);
    assert_eq!(
        take_states(),
        vec![(DOCA_CTX_STATE_IDLE, DOCA_CTX_STATE_STARTING), (DOCA_CTX_STATE_STARTING, DOCA_CTX_STATE_IDLE)]
    );
    assert_eq!(drain(pe), 0);
    assert!(no_transition_to_look_for(pe));

    Dummy::destroy(a).unwrap();
    Dummy::destroy(b).unwrap();
    destroy_pe(pe);
}
