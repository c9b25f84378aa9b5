//! [`WaiterList`]: futures waiting for an event of a context (a task freed, a state change).

use std::cell::{Cell, RefCell};
use std::marker::PhantomData;
use std::task::Waker;

use crate::executor::local::{main_kept_waker, same_main, Core};
use crate::executor::task::TaskMeta;
use crate::executor::task::{local_waker, same_task};

/// The waker of the one future a completion will wake (an operation's slot, a held group),
/// as the executor keeps it. Parking costs what keeping the waker costs, and on hardware most
/// operations park: a clone of `cx.waker()` is an atomic increment and the wake by value an
/// atomic decrement. The executor's own wakers need neither on their thread, so they are
/// kept as wakers of its own:
///
/// | `cx.waker()` is | kept as | keep and wake |
/// | --- | --- | --- |
/// | a task of this thread's executor | a local waker ([`local_waker`]): a count in a `Cell` | no atomic |
/// | the main future of this thread's `block_on` | its pointer, no count ([`main_kept_waker`]) | no atomic |
/// | anything else (another executor's, tokio's, a combinator's) | a clone | as the waker does |
///
/// All three are a `Waker` inside: two words, woken and dropped through its vtable, so that a
/// slot costs what it did when it kept a clone. The first two are sound on this thread only,
/// so a `KeptWaker` is neither `Send` nor `Sync` and gives its waker to nobody.
pub(crate) struct KeptWaker {
    waker: Waker,
    _this_thread: PhantomData<*const ()>,
}

impl KeptWaker {
    /// Keeps `waker`: as a local waker when it is a task's that `owns` says runs on this
    /// thread's current executor (`local_waker`'s owner check), as the main future's kept
    /// form when it is a `block_on`'s, else as a clone.
    #[inline]
    fn new(waker: &Waker, owns: impl FnOnce(&TaskMeta) -> bool) -> KeptWaker {
        // SAFETY: a `KeptWaker` is neither `Send` nor `Sync` and only wakes or drops its
        // waker: the local and main wakers stay on this thread. `owns` is the owner check
        // `local_waker` asks for (its one caller, `keep_waker_in`, passes `Core::owns_here`,
        // which checks the current executor).
        let own = unsafe { local_waker(waker, owns).or_else(|| main_kept_waker(waker)) };
        KeptWaker { waker: own.unwrap_or_else(|| waker.clone()), _this_thread: PhantomData }
    }

    /// Whether `waker` wakes the same future (so that keeping it again is not needed).
    #[inline]
    fn will_wake(&self, waker: &Waker) -> bool {
        self.waker.will_wake(waker) || same_task(&self.waker, waker) || same_main(&self.waker, waker)
    }

    /// Wakes the future (on this thread, where it was kept).
    #[inline]
    pub(crate) fn wake(self) {
        self.waker.wake();
    }

    /// The kept waker itself, for a wake that knows the executor at hand
    /// ([`Core::wake_kept`](crate::executor::local::Core::wake_kept)).
    ///
    /// # Safety
    /// The waker stays on this thread: it may be a local or main waker, sound only here.
    #[inline]
    pub(crate) unsafe fn into_waker(self) -> Waker {
        self.waker
    }

    /// Which kind of waker is kept: `"task"`, `"main"` or `"other"`.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn kind(&self) -> &'static str {
        if crate::executor::task::is_local(&self.waker) {
            "task"
        } else if crate::executor::local::is_main_kept(&self.waker) {
            "main"
        } else {
            "other"
        }
    }
}

// What a slot keeps is the size of what it kept before: a `Waker`, with its niche.
const _: () = assert!(std::mem::size_of::<Option<KeptWaker>>() == std::mem::size_of::<Option<Waker>>());

impl std::fmt::Debug for KeptWaker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeptWaker").field("data", &self.waker.data()).finish_non_exhaustive()
    }
}

/// Keeps `waker` in `cell` for a completion of `core` (the executor of the slot or held group,
/// which polls it) to wake: what is there already if it wakes the same future (nothing kept
/// again per poll), else `waker` as a [`KeptWaker`]. The one home of "the single waiter of a
/// completion slot or of a held group". Its own tasks' wakers are kept as local wakers when
/// `core` is the current executor ([`Core::owns_here`]), without the look-up of the current
/// executor. (The lanes once kept theirs with that look-up, to spare their inline poll one
/// instruction; keeping the record at hand made this way 3 cheaper there too, 12 parked.)
#[inline(always)]
pub(crate) fn keep_waker_in(core: &Core, cell: &Cell<Option<KeptWaker>>, waker: &Waker) {
    let stale = cell.take();
    match stale {
        Some(k) if k.will_wake(waker) => cell.set(Some(k)),
        stale => {
            drop(stale);
            cell.set(Some(KeptWaker::new(waker, |meta| core.owns_here(meta))));
        }
    }
}

/// Waiters on a context event (task freed, state changed). Each future keeps a ticket so
/// that re-polling replaces its waker instead of queueing duplicates; every wake-up drains
/// the list and opens a new epoch.
pub(crate) struct WaiterList {
    epoch: Cell<u64>,
    wakers: RefCell<Vec<Waker>>,
}

/// A future's place in a [`WaiterList`].
pub(crate) type Ticket = Option<(u64, usize)>;

impl WaiterList {
    pub(crate) fn new() -> WaiterList {
        WaiterList { epoch: Cell::new(0), wakers: RefCell::new(Vec::new()) }
    }

    pub(crate) fn register(&self, ticket: &mut Ticket, waker: &Waker) {
        let mut wakers = self.wakers.borrow_mut();
        if let Some((epoch, i)) = *ticket {
            if epoch == self.epoch.get() {
                if let Some(w) = wakers.get_mut(i) {
                    if !w.will_wake(waker) {
                        w.clone_from(waker);
                    }
                    return;
                }
            }
        }
        *ticket = Some((self.epoch.get(), wakers.len()));
        wakers.push(waker.clone());
    }

    /// Opens a new epoch and wakes every waiter. Inlined for its common case, called at
    /// every completion: nobody waits, and it costs one epoch store and one length test.
    #[inline]
    pub(crate) fn wake_all(&self) {
        self.new_epoch();
        if self.has_waiters() {
            self.wake_waiting();
        }
    }

    /// The first half of [`wake_all`](WaiterList::wake_all): a new epoch, even when nobody
    /// waits (`TaskFreed` compares epochs to see events).
    #[inline]
    pub(crate) fn new_epoch(&self) {
        self.epoch.set(self.epoch.get().wrapping_add(1));
    }

    /// Whether any future waits.
    #[inline]
    pub(crate) fn has_waiters(&self) -> bool {
        !self.wakers.borrow().is_empty()
    }

    /// The second half of [`wake_all`](WaiterList::wake_all), after
    /// [`new_epoch`](WaiterList::new_epoch): wakes every waiter.
    #[cold]
    pub(crate) fn wake_waiting(&self) {
        // Not borrowed while waking (a waker may register again); the list's allocation
        // is kept, so that a context under back-pressure (a wake-up at every completion,
        // a registration at every retry) does not free and allocate it each time.
        let mut wakers = std::mem::take(&mut *self.wakers.borrow_mut());
        for w in wakers.drain(..) {
            w.wake();
        }
        let mut list = self.wakers.borrow_mut();
        if list.is_empty() {
            *list = wakers;
        }
    }

    /// The current epoch (changes at every `wake_all`).
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.get()
    }
}
