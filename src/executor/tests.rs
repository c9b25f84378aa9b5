//! Unit tests of executor internals (the public behaviour is tested in `tests/executor.rs`).

use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Wake, Waker};
use std::time::Duration;

use super::completion::{keep_waker_in, KeptWaker, Slots, Ticket, WaiterList};
use super::local::{current_rc, with_current};
use super::{spawn_local, time, yield_now, Runtime};

struct CountWake(std::sync::atomic::AtomicUsize);
impl Wake for CountWake {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

fn counting_waker() -> (Arc<CountWake>, Waker) {
    let c = Arc::new(CountWake(Default::default()));
    (c.clone(), Waker::from(c))
}

#[test]
fn slots_are_recycled_without_growing() {
    let slots = Slots::new();
    for _ in 0..10_000 {
        let a = slots.reserve_for_test();
        let b = slots.reserve_for_test();
        assert_ne!(a, b);
        slots.release_for_test(a);
        slots.release_for_test(b);
    }
    assert_eq!(slots.in_use(), 0);
    assert_eq!(slots.chunks_for_test(), 1, "steady state allocates no new chunk");
}

#[test]
fn slot_keys_are_generational() {
    let slots = Slots::new();
    let a = slots.reserve_for_test();
    slots.release_for_test(a);
    let b = slots.reserve_for_test();
    assert_eq!(a & 0xffff_ffff, b & 0xffff_ffff, "same slot reused");
    assert_ne!(a, b, "with a new generation");
    assert!(!slots.is_live_for_test(a), "a stale key finds nothing");
    assert!(slots.is_live_for_test(b));
    // Result areas have stable addresses while reserved, across growth of the table.
    let p = slots.out_ptr_for_test(b);
    let many: Vec<u64> = (0..1000).map(|_| slots.reserve_for_test()).collect();
    assert_eq!(slots.out_ptr_for_test(b), p);
    for k in many {
        slots.release_for_test(k);
    }
    slots.release_for_test(b);
}

#[test]
fn only_remote_operations_are_counted_as_such() {
    const REMOTE: bool = true;
    const LOCAL: bool = false;
    let slots = Slots::new();
    assert!(!slots.only_remote(), "nothing in flight: an idle executor spins the busy way");
    let a = slots.reserve_kind_for_test(REMOTE);
    let b = slots.reserve_kind_for_test(REMOTE);
    assert!(slots.only_remote(), "two offloaded commands and nothing else: a yielding spin");
    let c = slots.reserve_kind_for_test(LOCAL);
    assert!(!slots.only_remote(), "an operation a busy spin catches restores the busy spin");
    slots.release_for_test(c);
    assert!(slots.only_remote());
    slots.release_for_test(a);
    // The slot of `a` is reused by an ordinary operation: its mark went with the release.
    let d = slots.reserve_kind_for_test(LOCAL);
    assert_eq!(d & 0xffff_ffff, a & 0xffff_ffff, "same slot reused");
    assert!(!slots.only_remote());
    slots.release_for_test(d);
    assert!(slots.only_remote());
    slots.release_for_test(b);
    assert!(!slots.only_remote());
    assert_eq!(slots.in_use(), 0);
}

#[test]
fn waiter_tickets_do_not_duplicate_wakers() {
    let list = WaiterList::new();
    let (count, waker) = counting_waker();
    let mut ticket: Ticket = None;
    for _ in 0..100 {
        list.register(&mut ticket, &waker);
    }
    list.wake_all();
    assert_eq!(count.0.load(std::sync::atomic::Ordering::SeqCst), 1);
    // After a wake-up the old ticket is stale: registering again queues anew.
    list.register(&mut ticket, &waker);
    list.wake_all();
    assert_eq!(count.0.load(std::sync::atomic::Ordering::SeqCst), 2);
}

#[test]
#[cfg_attr(miri, ignore = "crosses FFI into the DOCA provider or makes system calls Miri cannot run")]
fn finished_tasks_leave_the_registry() {
    let rt = Runtime::builder().cpus("0".parse().unwrap()).build().unwrap();
    rt.block_on(async {
        let hs: Vec<_> = (0..50)
            .map(|i| {
                spawn_local(async move {
                    yield_now().await;
                    time::sleep(Duration::from_micros(i)).await;
                })
            })
            .collect();
        for h in hs {
            h.await.unwrap();
        }
        let left = with_current(|core| core.registered_tasks()).unwrap();
        assert_eq!(left, 0, "every task that went pending unregistered when it finished");
    });
}

#[test]
#[cfg_attr(miri, ignore = "crosses FFI into the DOCA provider or makes system calls Miri cannot run")]
fn tasks_that_never_pend_are_never_registered() {
    let rt = Runtime::builder().cpus("0".parse().unwrap()).build().unwrap();
    rt.block_on(async {
        let seen = Rc::new(Cell::new(0));
        for _ in 0..10 {
            let s = seen.clone();
            let h = spawn_local(async move {
                s.set(s.get() + with_current(|core| core.registered_tasks()).unwrap());
            });
            h.await.unwrap();
        }
        // Only the block_on future itself is not a task: nothing was registered meanwhile.
        assert_eq!(seen.get(), 0);
    });
}

#[test]
#[cfg_attr(miri, ignore = "crosses FFI into the DOCA provider or makes system calls Miri cannot run")]
fn operations_never_progress_the_pe_from_inside_progress() {
    // DOCA forbids calling progress from a callback: the inline completion fast path must
    // refuse while the executor is inside progress (or a callback), and the operation then
    // completes through the loop.
    let rt = Runtime::builder().cpus("0".parse().unwrap()).build().unwrap();
    rt.block_on(async {
        let dev = crate::Device::open_default().unwrap();
        let ev = crate::sync_event::SyncEvent::builder(&dev).build().await.unwrap();
        let mut get = Box::pin(ev.get());
        let core = current_rc().unwrap();
        {
            let _inside = core.enter_progress();
            assert!(futures_lite::future::poll_once(get.as_mut()).await.is_none(), "progressed inside progress");
        }
        assert_eq!(get.await.unwrap(), 0);
        // Outside progress, the same operation completes on its first poll.
        assert_eq!(futures_lite::future::poll_once(Box::pin(ev.get())).await.unwrap().unwrap(), 0);
    });
}

#[test]
#[cfg_attr(miri, ignore = "crosses FFI into the DOCA provider or makes system calls Miri cannot run")]
fn no_task_runs_inline_inside_progress() {
    // A join handle's first poll may run its task on the spot, but never from inside DOCA
    // progress or a callback: the task then runs from the loop.
    let rt = Runtime::builder().cpus("0".parse().unwrap()).build().unwrap();
    rt.block_on(async {
        let ran = Rc::new(Cell::new(false));
        let r = ran.clone();
        let mut h = spawn_local(async move { r.set(true) });
        let core = current_rc().unwrap();
        {
            let _inside = core.enter_progress();
            assert!(futures_lite::future::poll_once(&mut h).await.is_none());
            assert!(!ran.get(), "a task ran inside progress");
        }
        h.await.unwrap();
        assert!(ran.get());
        // Outside progress, the first poll of a fresh handle runs its task.
        let r = ran.clone();
        let h = spawn_local(async move { r.set(false) });
        assert!(futures_lite::future::poll_once(h).await.is_some());
        assert!(!ran.get());
    });
}

#[test]
#[cfg_attr(miri, ignore = "crosses FFI into the DOCA provider or makes system calls Miri cannot run")]
#[should_panic(expected = "outside an async-doca executor")]
fn spawn_local_outside_an_executor_panics() {
    drop(spawn_local(async {}));
}

#[test]
#[cfg_attr(miri, ignore = "crosses FFI into the DOCA provider or makes system calls Miri cannot run")]
#[should_panic(expected = "block_on")]
fn nested_block_on_panics() {
    let rt = Runtime::builder().cpus("0".parse().unwrap()).build().unwrap();
    let h = rt.handle();
    rt.block_on(async move { h.block_on(async {}) });
}

#[test]
#[cfg_attr(miri, ignore = "crosses FFI into the DOCA provider or makes system calls Miri cannot run")]
fn a_waiting_task_spins_in_its_poll_only_where_the_executor_would_spin() {
    use super::local::SPIN_INLINE_ROUNDS;
    use crate::IdleMode;
    // A `done` that becomes true at its `n`th look, and counts its looks.
    fn looks(n: usize) -> (Rc<Cell<usize>>, impl Fn() -> bool) {
        let seen = Rc::new(Cell::new(0));
        let s = seen.clone();
        (seen, move || {
            s.set(s.get() + 1);
            s.get() >= n
        })
    }
    for (idle, spins) in [
        (IdleMode::Polling, true),
        (IdleMode::Event, false),
        (IdleMode::Adaptive(Duration::ZERO), false),
        // A budget no test machine uses up in 128 rounds: the rounds bound it, as polling's.
        (IdleMode::Adaptive(Duration::from_secs(60)), true),
    ] {
        let rt = Runtime::builder().cpus("0".parse().unwrap()).idle(idle).build().unwrap();
        // On the worker: a `block_on` executor never polls (it is not on a CPU of its own).
        let on_worker = rt.spawn_on(0, move || async move {
            let core = current_rc().unwrap();
            let (seen, done) = looks(10);
            assert_eq!(core.spin_inline(done), spins, "{idle:?}");
            assert_eq!(seen.get(), if spins { 10 } else { 0 }, "{idle:?}: looks until done, or none");
            if !spins {
                return;
            }
            // Never done: it gives up after its rounds, and the task goes Pending.
            let (seen, done) = looks(usize::MAX);
            assert!(!core.spin_inline(done));
            assert_eq!(seen.get(), SPIN_INLINE_ROUNDS as usize);
            assert!(!core.take_spun_out(), "{idle:?}: the rounds ran out, not the budget");
            // Another task can run: no spin at all (it would hold that task back).
            let other = spawn_local(async {});
            let (seen, done) = looks(1);
            assert!(!core.spin_inline(done));
            assert_eq!(seen.get(), 0, "spun while another task was ready");
            other.await.unwrap();
            // Inside progress (a callback) DOCA forbids progress: refused.
            let (seen, done) = looks(1);
            {
                let _inside = core.enter_progress();
                assert!(!core.spin_inline(done));
            }
            assert_eq!(seen.get(), 0);
        });
        rt.block_on(on_worker.unwrap()).unwrap();
    }
    // An adaptive budget bounds the spin by the clock, and the executor then sleeps at its
    // next idle turn instead of spinning a second budget.
    let rt = Runtime::builder()
        .cpus("0".parse().unwrap())
        .idle(IdleMode::Adaptive(Duration::from_micros(1)))
        .build()
        .unwrap();
    let on_worker = rt.spawn_on(0, || async {
        let core = current_rc().unwrap();
        let (seen, done) = looks(usize::MAX);
        // Each round sleeps 1 µs: the budget is gone by round 2 whatever the machine.
        let slow = move || {
            std::thread::sleep(Duration::from_micros(1));
            done()
        };
        assert!(!core.spin_inline(slow));
        assert!(seen.get() <= 2, "the budget was not looked at: {} rounds", seen.get());
        assert!(core.take_spun_out(), "a spin that used up its budget tells the next idle turn");
        assert!(!core.take_spun_out(), "once");
    });
    rt.block_on(on_worker.unwrap()).unwrap();
}

/// A posted-ahead operation (a receive, a wait) spins in its poll like any other until a
/// spin for one runs out; then the next posted-ahead waits go `Pending` at once (the task
/// may be about to send what completes them), and the spin comes back after them. The polls
/// that submit learn apart from the later ones: a task that posts ahead and awaits later
/// still spins when it awaits. Other kinds are not affected, and an offloaded command never
/// spins.
#[test]
#[cfg_attr(miri, ignore = "crosses FFI into the DOCA provider or makes system calls Miri cannot run")]
fn a_posted_ahead_wait_spins_until_its_spins_run_out() {
    use super::local::SPIN_INLINE_ROUNDS;
    use crate::IdleMode;
    let rt = Runtime::builder().cpus("0".parse().unwrap()).idle(IdleMode::Polling).build().unwrap();
    let on_worker = rt.spawn_on(0, || async {
        let core = current_rc().unwrap();
        let looks = Rc::new(Cell::new(0usize));
        let counting = |n: usize| {
            let looks = looks.clone();
            move || {
                looks.set(looks.get() + 1);
                looks.get() >= n
            }
        };
        // (remote, posted ahead, submitted in this poll, done at look n) -> (done, looks)
        let spin = |remote: bool, ahead: bool, first: bool, n: usize| {
            looks.set(0);
            let done = core.spin_inline_for(remote, ahead, first, counting(n));
            (done, looks.get())
        };
        let never = usize::MAX;
        let rounds = SPIN_INLINE_ROUNDS as usize;
        assert_eq!(spin(false, true, true, 3), (true, 3), "caught at its third look");
        assert_eq!(spin(true, false, true, 1), (false, 0), "an offloaded command never spins");
        assert_eq!(spin(false, true, true, never), (false, rounds), "ran out");
        assert_eq!(spin(false, true, true, 1), (false, 0), "the next posted-ahead wait does not spin");
        assert_eq!(spin(false, false, true, 2), (true, 2), "a write still spins");
        assert_eq!(spin(false, true, false, 2), (true, 2), "nor does a later poll's wait learn from it");
        assert_eq!(spin(false, true, true, never), (false, rounds), "back after one skipped wait");
        assert_eq!(spin(false, true, true, 1), (false, 0));
        assert_eq!(spin(false, true, true, 1), (false, 0), "two skipped after the second run-out");
        assert_eq!(spin(false, true, true, 1), (true, 1));
        // The later polls' own rule.
        assert_eq!(spin(false, true, false, never), (false, rounds));
        assert_eq!(spin(false, true, false, 1), (false, 0));
        assert_eq!(spin(false, true, true, 1), (true, 1), "a submitting poll still spins");
        assert_eq!(spin(false, true, false, 1), (true, 1));
    });
    rt.block_on(on_worker.unwrap()).unwrap();
}

/// While only a remote operation (an offloaded command) is in flight, an adaptive executor
/// spins the yielding way for its learned budget and then sleeps: a long wait costs it a
/// spin, not its CPU. (A yielding spin that never ran out would use the whole wait: alone on
/// its CPU each round is a `sched_yield` that returns at once.)
#[test]
#[cfg_attr(miri, ignore = "crosses FFI into the DOCA provider or makes system calls Miri cannot run")]
fn a_wait_for_a_remote_answer_yields_its_cpu_then_sleeps() {
    use crate::IdleMode;
    fn thread_cpu() -> Duration {
        let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: `t` is a valid timespec to write.
        assert_eq!(unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) }, 0);
        Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
    }
    let rt = Runtime::builder()
        .cpus("0".parse().unwrap())
        .idle(IdleMode::Adaptive(Duration::from_micros(5)))
        .build()
        .unwrap();
    let on_worker = rt.spawn_on(0, || async {
        let core = current_rc().unwrap();
        let command = core.slots.reserve_kind_for_test(true);
        assert!(core.slots.only_remote());
        let wait = Duration::from_millis(200);
        let before = thread_cpu();
        time::sleep(wait).await;
        let used = thread_cpu() - before;
        core.slots.release_for_test(command);
        // The spin is at most the ceiling (100 µs); the rest is one wake-up. A quarter of the
        // wait leaves room for any machine, and fails a spin that does not end.
        assert!(used < wait / 4, "the executor used {used:?} of CPU in a {wait:?} wait");
    });
    rt.block_on(on_worker.unwrap()).unwrap();
}

/// Contexts whose handles outlive their executor are destroyed at its shutdown newest first:
/// one created after another may depend on it (a UROM worker on its service), and DOCA
/// refuses to destroy an object in use. (In creation order, the service's destroy failed with
/// `IN_USE`, and it, the PE and the device leaked.)
#[test]
#[cfg_attr(miri, ignore = "crosses FFI into the DOCA provider or makes system calls Miri cannot run")]
fn contexts_kept_past_the_shutdown_are_destroyed_newest_first() {
    use crate::ext::DocaCtx;
    use crate::{sys, Device};
    let order = Rc::new(std::cell::RefCell::new(Vec::new()));
    let rt = Runtime::builder().cpus("0".parse().unwrap()).build().unwrap();
    let kept = rt
        .block_on({
            let order = order.clone();
            async move {
                let dev = Device::open_default()?;
                let mut kept = Vec::new();
                for i in 0..3 {
                    let mut dma = std::ptr::null_mut();
                    // SAFETY: an open device; a valid out-pointer.
                    crate::error::check(unsafe { sys::doca_dma_create(dev.as_ptr(), &mut dma) }, "dma create")?;
                    let (order, dev) = (order.clone(), dev.clone());
                    // SAFETY: a fresh DMA context of this thread, destroyed only by the DocaCtx.
                    let ctx = unsafe {
                        DocaCtx::new("dma", dma, sys::doca_dma_as_ctx(dma), move |d| {
                            order.borrow_mut().push(i);
                            let rc = sys::doca_dma_destroy(d);
                            drop(dev);
                            rc
                        })
                    }?;
                    kept.push(ctx);
                }
                Ok::<_, crate::Error>(kept)
            }
        })
        .unwrap();
    drop(rt);
    assert_eq!(*order.borrow(), [2, 1, 0], "destroyed at the shutdown, newest first");
    drop(kept);
}

/// Wakes the task awaiting it from another thread, `after` a pause that the thread spends
/// busy (short) or asleep (long), once the task has gone `Pending`. One thread serves every
/// kick, started once and ended when the kick is dropped: a thread spawned per kick took
/// longer to start than the short waits it was to time (under a sanitizer, always longer
/// than the learned spin's ceiling).
struct RemoteKick {
    shared: Arc<KickShared>,
    requests: std::sync::mpsc::Sender<Duration>,
}

#[derive(Default)]
struct KickShared {
    waker: std::sync::Mutex<Option<Waker>>,
    fired: std::sync::atomic::AtomicBool,
}

impl RemoteKick {
    /// The kicking thread runs on `cpu` when it exists (away from the executor's).
    fn new(cpu: usize) -> RemoteKick {
        use std::sync::atomic::Ordering;
        let shared = Arc::new(KickShared::default());
        let (requests, rx) = std::sync::mpsc::channel::<Duration>();
        let kick = shared.clone();
        std::thread::spawn(move || {
            // Best effort: a machine without that CPU (or a cpuset without it) runs it anywhere.
            if let Ok(set) = crate::CpuSet::from_cpus([cpu]) {
                let _ = set.pin_current_thread();
            }
            while let Ok(after) = rx.recv() {
                // Wait for the task to park its waker, then for the pause, then wake it.
                let waker = loop {
                    if let Some(w) = kick.waker.lock().unwrap().take() {
                        break w;
                    }
                    std::hint::spin_loop();
                };
                if after >= Duration::from_millis(1) {
                    std::thread::sleep(after);
                } else {
                    let t = std::time::Instant::now();
                    while t.elapsed() < after {
                        std::hint::spin_loop();
                    }
                }
                kick.fired.store(true, Ordering::SeqCst);
                waker.wake();
            }
        });
        RemoteKick { shared, requests }
    }

    fn arm(&self, after: Duration) -> impl std::future::Future<Output = ()> + '_ {
        use std::sync::atomic::Ordering;
        self.shared.fired.store(false, Ordering::SeqCst);
        self.requests.send(after).expect("the kicking thread lives as long as the kick");
        std::future::poll_fn(move |cx| {
            if self.shared.fired.load(Ordering::SeqCst) {
                return std::task::Poll::Ready(());
            }
            *self.shared.waker.lock().unwrap() = Some(cx.waker().clone());
            std::task::Poll::Pending
        })
    }
}

#[test]
#[cfg_attr(miri, ignore = "crosses FFI into the DOCA provider or makes system calls Miri cannot run")]
fn an_adaptive_executor_learns_to_spin_through_short_waits_and_unlearns_after_long_ones() {
    use super::learned_spin::ceiling_for;
    use crate::IdleMode;
    let floor = Duration::from_micros(5);
    let rt = Runtime::builder().cpus("0".parse().unwrap()).idle(IdleMode::Adaptive(floor)).build().unwrap();
    let (raised, after_long) = rt
        .block_on(rt.spawn(async move {
            let kick = RemoteKick::new(1);
            let budget = || with_current(|c| c.learned_spin.budget()).unwrap();
            // Waits of 5 ms: spinning is waste; each halves the budget toward the floor (the
            // executor may have learned something from its start already).
            for _ in 0..10 {
                kick.arm(Duration::from_millis(5)).await;
            }
            assert_eq!(budget(), floor, "long waits keep the budget at the floor");
            // Waits of ~20 µs: longer than the 5 µs spin, shorter than the ceiling. The
            // executor sleeps through the first ones and should learn to spin instead. A
            // loaded machine may stretch any one wait past the ceiling: many tries.
            let mut raised = Duration::ZERO;
            for _ in 0..2000 {
                kick.arm(Duration::from_micros(20)).await;
                raised = raised.max(budget());
                if raised > floor {
                    break;
                }
            }
            // And long waits again.
            for _ in 0..10 {
                kick.arm(Duration::from_millis(5)).await;
            }
            (raised, budget())
        }))
        .unwrap();
    assert!(raised > floor && raised <= ceiling_for(floor), "short waits raise the budget: {raised:?}");
    assert_eq!(after_long, floor, "long waits bring it back to the floor");
}

/// The kept waker of the main future, of a task of this executor and of anything else, each
/// woken by `wake` (a completion's two ways: the kept waker's own wake, and the executor's
/// `wake_kept`) reaches what it names.
fn kept_wakers_reach_their_futures(wake: fn(KeptWaker)) {
    use std::future::poll_fn;
    use std::task::Poll;
    let rt = Runtime::builder().cpus("0".parse().unwrap()).idle(super::IdleMode::Event).build().unwrap();
    rt.block_on(async {
        // The main future: kept by its pointers; the wake sets its flag.
        poll_fn(|cx| {
            let cell = Cell::new(None);
            with_current(|core| keep_waker_in(core, &cell, cx.waker()));
            let kept = cell.take().expect("kept");
            assert_eq!(kept.kind(), "main");
            with_current(|core| core.take_main_woken_for_test());
            wake(kept);
            assert!(with_current(|core| core.take_main_woken_for_test()).unwrap(), "the wake reached the main future");
            Poll::Ready(())
        })
        .await;

        // A task of this executor: kept as a local reference, which wakes it from outside
        // its poll (a lost wake would leave the handle pending until the timeout).
        let shared: Rc<Cell<Option<KeptWaker>>> = Rc::default();
        let kept = shared.clone();
        let mut polls = 0;
        let task = spawn_local(poll_fn(move |cx| {
            polls += 1;
            if polls == 2 {
                return Poll::Ready(polls);
            }
            with_current(|core| keep_waker_in(core, &kept, cx.waker()));
            // Polled again with the same waker: kept once, not again.
            with_current(|core| keep_waker_in(core, &kept, cx.waker()));
            Poll::Pending
        }));
        while shared.take().map(|k| shared.set(Some(k))).is_none() {
            yield_now().await;
        }
        let k = shared.take().unwrap();
        assert_eq!(k.kind(), "task");
        wake(k);
        assert_eq!(time::timeout(Duration::from_secs(20), task).await.expect("woken").unwrap(), 2);

        // Any other waker is cloned, and woken as itself.
        let (count, waker) = counting_waker();
        let cell = Cell::new(None);
        with_current(|core| keep_waker_in(core, &cell, &waker));
        let kept = cell.take().unwrap();
        assert_eq!(kept.kind(), "other");
        wake(kept);
        assert_eq!(count.0.load(std::sync::atomic::Ordering::SeqCst), 1);
    });
}

#[test]
#[cfg_attr(miri, ignore = "crosses FFI into the DOCA provider or makes system calls Miri cannot run")]
fn a_kept_waker_names_this_threads_main_future_or_task_and_clones_any_other() {
    kept_wakers_reach_their_futures(KeptWaker::wake);
}

#[test]
#[cfg_attr(miri, ignore = "crosses FFI into the DOCA provider or makes system calls Miri cannot run")]
fn a_completions_wake_reaches_the_main_future_a_task_and_any_other_waker() {
    kept_wakers_reach_their_futures(|kept| {
        with_current(|core| core.wake_kept(kept));
    });
}
