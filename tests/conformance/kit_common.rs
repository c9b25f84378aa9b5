//! The provider-agnostic core of the RDMA test harnesses, one file compiled into two
//! crates: the conformance suite's kit (`tests/conformance/kit.rs`, against doca-sys) and
//! doca-soft's own unit-test kit (`doca-soft/src/testkit/rdma.rs`, against the provider's
//! entry points). Checked calls, the event loops that follow DOCA's notification protocol,
//! and the peer-process protocol (this test binary re-executed in a role, talking in
//! `MSG` lines).
//!
//! It names only C API items, taken from the including module (`use super::*`), plus four
//! the includer defines: `Side` (an RDMA endpoint with public `pe` and `rdma`, `state`,
//! `stop` and `release_memory`; its task helpers and `destroy` are here), `pe_fd` (the PE's
//! notification fd), `ROLE_ENV` (the variable that
//! selects a peer's role) and `PEER_WAIT` (the bound of every wait for a peer). Each harness
//! uses a subset, hence the includers' `#[allow(dead_code)]`.

use std::cell::{Cell, RefCell};
use std::ptr;
use std::time::{Duration, Instant};

use super::*;

/// Panics with the symbolic name of an unexpected status.
#[track_caller]
pub fn ok(e: doca_error_t) {
    assert_eq!(e, DOCA_SUCCESS, "{}", name(e));
}

/// The symbolic name of a status (the provider's own, through `doca_error_get_name`).
pub fn name(e: doca_error_t) -> String {
    // SAFETY: doca_error_get_name returns a static NUL-terminated string (or NULL).
    let p = unsafe { doca_error_get_name(e) };
    if p.is_null() {
        return format!("<code {}>", e.0);
    }
    // SAFETY: non-NULL, static, NUL-terminated.
    unsafe { std::ffi::CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

pub fn res(e: doca_error_t) -> Result<(), doca_error_t> {
    if e == DOCA_SUCCESS {
        Ok(())
    } else {
        Err(e)
    }
}

/// Drains every PE until none has work; returns the units of work done.
pub fn drain(pes: &[*mut doca_pe]) -> usize {
    let mut total = 0;
    for _ in 0..10_000_000 {
        let mut round = 0;
        for &pe in pes {
            // SAFETY: live PEs of this thread.
            while unsafe { doca_pe_progress(pe) } == 1 {
                round += 1;
            }
        }
        if round == 0 {
            return total;
        }
        total += round;
    }
    panic!("progress never settled");
}

/// Progresses `pes` until `cond` holds or `limit` passes, sleeping on the notification fds
/// between rounds (drain, arm, drain again, poll, clear): DOCA's event-driven protocol, so a
/// provider whose fd does not wake makes these loops time out. Spurious wake-ups are fine.
pub fn run_until(pes: &[*mut doca_pe], limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        drain(pes);
        if cond() {
            return true;
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        for &pe in pes {
            // SAFETY: live PE.
            ok(unsafe { doca_pe_request_notification(pe) });
        }
        if drain(pes) == 0 && !cond() {
            let mut fds: Vec<libc::pollfd> =
                pes.iter().map(|&pe| libc::pollfd { fd: pe_fd(pe), events: libc::POLLIN, revents: 0 }).collect();
            let ms = (deadline - now).as_millis().min(100) as i32;
            // SAFETY: `fds` is a valid array of pollfds for the call.
            unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms.max(1)) };
        }
        for &pe in pes {
            // SAFETY: live PE; the handle argument is unused on Linux.
            ok(unsafe { doca_pe_clear_notification(pe, pe_fd(pe)) });
        }
    }
}

/// Bytes as lower-case hex (blobs cross the pipe as text lines).
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2).map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap()).collect()
}

/// The peer process; killed and reaped on drop.
pub struct Peer {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Peer {
    /// Runs the ignored test `test` of this binary in `role`, stdin and stdout piped.
    pub fn spawn(test: &str, role: &str) -> Peer {
        use std::io::BufRead;
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", test, "--nocapture", "--test-threads=1", "--include-ignored"])
            .env(ROLE_ENV, role)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .expect("spawn the peer process");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines().map_while(|l| l.ok()) {
                // The harness may print its own text before ours on the same line.
                if let Some(i) = line.find("MSG ") {
                    if tx.send(line[i + 4..].trim().to_string()).is_err() {
                        return;
                    }
                }
            }
        });
        Peer { child, stdin, lines: rx }
    }

    /// The peer's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The next message from the peer (within `PEER_WAIT`).
    pub fn recv(&mut self) -> String {
        self.lines
            .recv_timeout(PEER_WAIT)
            .unwrap_or_else(|e| panic!("no message from the peer within {PEER_WAIT:?}: {e}"))
    }

    /// The next message, which must start with `tag `; returns the rest.
    pub fn expect(&mut self, tag: &str) -> String {
        let m = self.recv();
        m.strip_prefix(&format!("{tag} ")).unwrap_or_else(|| panic!("expected `{tag}`, got {m:?}")).to_string()
    }

    pub fn send(&mut self, line: &str) {
        use std::io::Write;
        let s = self.stdin.as_mut().expect("stdin open");
        writeln!(s, "{line}").unwrap();
        s.flush().unwrap();
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Closes stdin and waits (bounded) for a successful exit.
    pub fn wait_success(&mut self) {
        self.stdin.take();
        let deadline = Instant::now() + PEER_WAIT;
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                assert!(st.success(), "the peer failed: {st}");
                return;
            }
            if Instant::now() > deadline {
                self.kill();
                panic!("the peer did not exit within {PEER_WAIT:?}");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            self.kill();
        }
    }
}

/// Peer side: one message line for the parent.
pub fn tell_parent(msg: &str) {
    use std::io::Write;
    println!("MSG {msg}");
    std::io::stdout().flush().unwrap();
}

/// Peer side: the next line from the parent, or None at end of input.
pub fn from_parent() -> Option<String> {
    let mut s = String::new();
    match std::io::stdin().read_line(&mut s) {
        Ok(0) | Err(_) => None,
        Ok(_) => Some(s.trim().to_string()),
    }
}

// ---- recording RDMA callbacks ----

/// A recorded RDMA completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rec {
    pub kind: &'static str,
    /// The ctx user data (which side).
    pub side: u64,
    /// The task user data.
    pub ud: u64,
    pub status: doca_error_t,
    pub opcode: doca_rdma_opcode,
    pub len: u32,
    pub imm: doca_be32_t,
    pub conn: usize,
}

thread_local! {
    static RECS: RefCell<Vec<Rec>> = const { RefCell::new(Vec::new()) };
    /// When set, the recording callbacks keep completed tasks (in KEPT) instead of freeing
    /// them, for tests that re-use a task.
    static KEEP: Cell<bool> = const { Cell::new(false) };
    static KEPT: RefCell<Vec<*mut doca_task>> = const { RefCell::new(Vec::new()) };
}

/// Makes the recording callbacks of this thread keep (true) or free (false) completed tasks.
pub fn keep_tasks(keep: bool) {
    KEEP.with(|k| k.set(keep));
}

/// The completed tasks kept since the last call, oldest first (ours to re-use or free).
pub fn take_kept() -> Vec<*mut doca_task> {
    KEPT.with(|k| std::mem::take(&mut *k.borrow_mut()))
}

pub fn take_recs() -> Vec<Rec> {
    RECS.with(|r| std::mem::take(&mut *r.borrow_mut()))
}

pub fn rec_count() -> usize {
    RECS.with(|r| r.borrow().len())
}

/// The first recorded completion that failed, if any (not taken).
pub fn failed_rec() -> Option<Rec> {
    RECS.with(|r| r.borrow().iter().find(|x| x.status != DOCA_SUCCESS).copied())
}

/// Number of recorded completions of one side, not taken yet.
pub fn count_of(side: u64) -> usize {
    RECS.with(|r| r.borrow().iter().filter(|x| x.side == side).count())
}

pub fn recs_of(recs: &[Rec], side: u64) -> Vec<Rec> {
    recs.iter().filter(|r| r.side == side).copied().collect()
}

/// Records a completion (with the receive results for a successful receive, `len` for the
/// other kinds) and frees the task.
unsafe fn record(
    kind: &'static str,
    t: *mut doca_task,
    ud: doca_data,
    cud: doca_data,
    rx: *mut doca_rdma_task_receive,
    len: u32,
) {
    // SAFETY: called by the PE with a live task that is ours inside the callback.
    let status = unsafe { doca_task_get_status(t) };
    let (mut opcode, mut len, mut imm, mut conn) = (0, len, 0, 0usize);
    if !rx.is_null() && status == DOCA_SUCCESS {
        // SAFETY: a live receive task that completed.
        unsafe {
            opcode = doca_rdma_task_receive_get_result_opcode(rx);
            len = doca_rdma_task_receive_get_result_len(rx);
            if opcode != DOCA_RDMA_OPCODE_RECV_SEND {
                imm = doca_rdma_task_receive_get_result_immediate_data(rx);
            }
            conn = doca_rdma_task_receive_get_result_rdma_connection(rx) as usize;
        }
    }
    RECS.with(|r| {
        r.borrow_mut().push(Rec { kind, side: cud.as_u64(), ud: ud.as_u64(), status, opcode, len, imm, conn })
    });
    if KEEP.with(|k| k.get()) {
        KEPT.with(|k| k.borrow_mut().push(t));
    } else {
        // SAFETY: ours to free in the callback.
        unsafe { doca_task_free(t) };
    }
}

macro_rules! recorder {
    ($cb:ident, $ty:ty, $as_task:ident, $kind:literal, $rx:expr) => {
        pub unsafe extern "C" fn $cb(t: *mut $ty, ud: doca_data, cud: doca_data) {
            // SAFETY: forwarded from the PE with a live task of this kind.
            unsafe { record($kind, $as_task(t), ud, cud, $rx(t), 0) }
        }
    };
}
fn no_rx<T>(_: *mut T) -> *mut doca_rdma_task_receive {
    ptr::null_mut()
}
fn rx(t: *mut doca_rdma_task_receive) -> *mut doca_rdma_task_receive {
    t
}
recorder!(cb_receive, doca_rdma_task_receive, doca_rdma_task_receive_as_task, "receive", rx);
recorder!(cb_send, doca_rdma_task_send, doca_rdma_task_send_as_task, "send", no_rx);
recorder!(cb_send_imm, doca_rdma_task_send_imm, doca_rdma_task_send_imm_as_task, "send_imm", no_rx);
/// A read's completion, with its result length (`doca_rdma_task_read_get_result_len`) in
/// `len` when it succeeded.
pub unsafe extern "C" fn cb_read(t: *mut doca_rdma_task_read, ud: doca_data, cud: doca_data) {
    // SAFETY: forwarded from the PE with a live read task; the length is read only after a
    // success, where DOCA defines it.
    unsafe {
        let task = doca_rdma_task_read_as_task(t);
        let len = if doca_task_get_status(task) == DOCA_SUCCESS { doca_rdma_task_read_get_result_len(t) } else { 0 };
        record("read", task, ud, cud, ptr::null_mut(), len)
    }
}
recorder!(cb_write, doca_rdma_task_write, doca_rdma_task_write_as_task, "write", no_rx);
recorder!(cb_write_imm, doca_rdma_task_write_imm, doca_rdma_task_write_imm_as_task, "write_imm", no_rx);
recorder!(cb_cmp_swp, doca_rdma_task_atomic_cmp_swp, doca_rdma_task_atomic_cmp_swp_as_task, "cmp_swp", no_rx);
recorder!(cb_fetch_add, doca_rdma_task_atomic_fetch_add, doca_rdma_task_atomic_fetch_add_as_task, "fetch_add", no_rx);
recorder!(
    cb_rn_get,
    doca_rdma_task_remote_net_sync_event_get,
    doca_rdma_task_remote_net_sync_event_get_as_task,
    "rn_get",
    no_rx
);
recorder!(
    cb_rn_set,
    doca_rdma_task_remote_net_sync_event_notify_set,
    doca_rdma_task_remote_net_sync_event_notify_set_as_task,
    "rn_set",
    no_rx
);
recorder!(
    cb_rn_add,
    doca_rdma_task_remote_net_sync_event_notify_add,
    doca_rdma_task_remote_net_sync_event_notify_add_as_task,
    "rn_add",
    no_rx
);

/// The payload length of a buffer.
pub fn data_len(b: *mut doca_buf) -> usize {
    let mut n = 0;
    // SAFETY: a live buffer, valid out-pointer.
    ok(unsafe { doca_buf_get_data_len(b, &mut n) });
    n
}

// ---- a side's connections and tasks (every allocate + submit frees the task on a submit error) ----

impl Side {
    /// Stops (if needed) and destroys everything, checking each step.
    pub fn destroy(&self) {
        if self.destroyed.replace(true) {
            return;
        }
        if self.state() != DOCA_CTX_STATE_IDLE {
            self.stop();
        }
        // SAFETY: every object is live and no task is allocated any more.
        unsafe {
            for b in self.bufs.borrow_mut().drain(..) {
                ok(doca_buf_dec_refcount(b, ptr::null_mut()));
            }
            for m in self.imported.borrow_mut().drain(..) {
                ok(doca_mmap_destroy(m));
            }
            for m in self.extra.borrow_mut().drain(..) {
                ok(doca_mmap_destroy(m));
            }
            ok(doca_buf_inventory_destroy(self.inv));
            ok(doca_mmap_destroy(self.mmap));
            ok(doca_rdma_destroy(self.rdma));
            ok(doca_pe_destroy(self.pe));
            ok(doca_dev_close(self.dev));
        }
        self.release_memory();
    }

    pub fn export(&self) -> Result<(Vec<u8>, *mut doca_rdma_connection), doca_error_t> {
        let (mut p, mut n, mut c) = (ptr::null(), 0usize, ptr::null_mut());
        // SAFETY: live rdma, valid out-pointers; the blob is copied at once.
        unsafe {
            res(doca_rdma_export(self.rdma, &mut p, &mut n, &mut c))?;
            Ok((std::slice::from_raw_parts(p.cast::<u8>(), n).to_vec(), c))
        }
    }

    pub fn connect(&self, blob: &[u8], c: *mut doca_rdma_connection) -> Result<(), doca_error_t> {
        // SAFETY: live rdma; `blob` readable.
        res(unsafe { doca_rdma_connect(self.rdma, blob.as_ptr().cast(), blob.len(), c) })
    }

    /// Submits a freshly allocated task; a failed submit leaves it with us, so it is freed.
    pub fn submit(&self, t: *mut doca_task) -> Result<(), doca_error_t> {
        // SAFETY: a freshly allocated task of ours.
        let r = unsafe { doca_task_submit(t) };
        if r != DOCA_SUCCESS {
            // SAFETY: still ours after a failed submit.
            unsafe { doca_task_free(t) };
        }
        res(r)
    }

    pub fn recv(&self, dst: *mut doca_buf, ud: u64) -> Result<(), doca_error_t> {
        let mut t = ptr::null_mut();
        // SAFETY: live objects, valid out-pointer.
        unsafe {
            res(doca_rdma_task_receive_allocate_init(self.rdma, dst, doca_data::from_u64(ud), &mut t))?;
            self.submit(doca_rdma_task_receive_as_task(t))
        }
    }

    pub fn send(&self, c: *mut doca_rdma_connection, src: *mut doca_buf, ud: u64) -> Result<(), doca_error_t> {
        let mut t = ptr::null_mut();
        // SAFETY: live objects, valid out-pointer.
        unsafe {
            res(doca_rdma_task_send_allocate_init(self.rdma, c, src, doca_data::from_u64(ud), &mut t))?;
            self.submit(doca_rdma_task_send_as_task(t))
        }
    }

    pub fn send_imm(
        &self,
        c: *mut doca_rdma_connection,
        src: *mut doca_buf,
        imm: u32,
        ud: u64,
    ) -> Result<(), doca_error_t> {
        let mut t = ptr::null_mut();
        // SAFETY: live objects, valid out-pointer.
        unsafe {
            res(doca_rdma_task_send_imm_allocate_init(self.rdma, c, src, imm, doca_data::from_u64(ud), &mut t))?;
            self.submit(doca_rdma_task_send_imm_as_task(t))
        }
    }

    pub fn write(
        &self,
        c: *mut doca_rdma_connection,
        src: *mut doca_buf,
        dst: *mut doca_buf,
        ud: u64,
    ) -> Result<(), doca_error_t> {
        let mut t = ptr::null_mut();
        // SAFETY: live objects, valid out-pointer.
        unsafe {
            res(doca_rdma_task_write_allocate_init(self.rdma, c, src, dst, doca_data::from_u64(ud), &mut t))?;
            self.submit(doca_rdma_task_write_as_task(t))
        }
    }

    pub fn write_imm(
        &self,
        c: *mut doca_rdma_connection,
        src: *mut doca_buf,
        dst: *mut doca_buf,
        imm: u32,
        ud: u64,
    ) -> Result<(), doca_error_t> {
        let mut t = ptr::null_mut();
        // SAFETY: live objects, valid out-pointer.
        unsafe {
            res(doca_rdma_task_write_imm_allocate_init(self.rdma, c, src, dst, imm, doca_data::from_u64(ud), &mut t))?;
            self.submit(doca_rdma_task_write_imm_as_task(t))
        }
    }

    pub fn read(
        &self,
        c: *mut doca_rdma_connection,
        src: *mut doca_buf,
        dst: *mut doca_buf,
        ud: u64,
    ) -> Result<(), doca_error_t> {
        let mut t = ptr::null_mut();
        // SAFETY: live objects, valid out-pointer.
        unsafe {
            res(doca_rdma_task_read_allocate_init(self.rdma, c, src, dst, doca_data::from_u64(ud), &mut t))?;
            self.submit(doca_rdma_task_read_as_task(t))
        }
    }

    pub fn fetch_add(
        &self,
        c: *mut doca_rdma_connection,
        dst: *mut doca_buf,
        result: *mut doca_buf,
        add: u64,
        ud: u64,
    ) -> Result<(), doca_error_t> {
        let mut t = ptr::null_mut();
        // SAFETY: live objects, valid out-pointer.
        unsafe {
            let d = doca_data::from_u64(ud);
            res(doca_rdma_task_atomic_fetch_add_allocate_init(self.rdma, c, dst, result, add, d, &mut t))?;
            self.submit(doca_rdma_task_atomic_fetch_add_as_task(t))
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub fn cmp_swp(
        &self,
        c: *mut doca_rdma_connection,
        dst: *mut doca_buf,
        result: *mut doca_buf,
        cmp: u64,
        swap: u64,
        ud: u64,
    ) -> Result<(), doca_error_t> {
        let mut t = ptr::null_mut();
        // SAFETY: live objects, valid out-pointer.
        unsafe {
            let d = doca_data::from_u64(ud);
            res(doca_rdma_task_atomic_cmp_swp_allocate_init(self.rdma, c, dst, result, cmp, swap, d, &mut t))?;
            self.submit(doca_rdma_task_atomic_cmp_swp_as_task(t))
        }
    }
}

/// Exports a connection on each side and connects them crosswise: (conn of a, conn of b).
pub fn connect_pair(a: &Side, b: &Side) -> (*mut doca_rdma_connection, *mut doca_rdma_connection) {
    let (ba, ca) = a.export().unwrap();
    let (bb, cb) = b.export().unwrap();
    a.connect(&bb, ca).unwrap();
    b.connect(&ba, cb).unwrap();
    (ca, cb)
}

// ---- connection management by address ----

/// A free port (bound then released; `listen` retries on the rare race).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Starts `s` listening on a fresh port; returns it.
pub fn listen(s: &Side) -> u16 {
    for _ in 0..20 {
        let port = free_port();
        // SAFETY: live rdma.
        if unsafe { doca_rdma_start_listen_to_port(s.rdma, port) } == DOCA_SUCCESS {
            return port;
        }
    }
    panic!("no port to listen on");
}
