//! The plugin's DOCA resources: one device, one PE, one RDMA ctx with every connection
//! (host and peers), the receive and send buffer pools, and the one-sided transfers to and
//! from host memory.
//!
//! # Ownership and threads
//! Everything here is created in [`Rdma::open`] and destroyed in `Drop`, on the worker's one
//! thread (a PE and its ctxs are single-threaded). Completion callbacks run inside
//! `doca_pe_progress`; they only record an [`Event`] in the queue the ctx's user data points
//! at (a `Box` whose address never changes) and free their task, so no callback ever touches
//! plugin state. [`Rdma::next_event`] hands them to the plugin, one at a time, after progress.
//!
//! Connections are owned by the ctx (valid until `doca_rdma_destroy`); the plugin keeps raw
//! pointers to them. One-sided transfers own their buffers and mmaps in [`Io`] until their
//! completion event is turned back into the staging memory by [`Rdma::finish_io`]. Small
//! transfers (up to [`IO_STAGE`]) borrow a slot of a staging area registered once instead of
//! registering their memory, and copy through it.
//!
//! On drop the ctx is stopped first: every task still in flight (posted receives included)
//! completes through its callback with an error and is freed there; the transfers' resources
//! are then released, then the buffers, the inventory, the mmaps, the ctx, the PE, the device.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::ffi::c_void;
use std::ptr;

use doca_sys as sys;
use doca_urom_plugin::Status;

/// Payload bytes of one message chunk.
pub(crate) const CHUNK: usize = 64 * 1024;
/// Chunk header: sender rank u32, magic u32, tag u64, offset u64, total u64.
pub(crate) const HDR: usize = 32;
/// One receive or send slot: a header and a chunk.
pub(crate) const SLOT: usize = HDR + CHUNK;
/// Receive buffers kept posted.
const RECV_SLOTS: usize = 32;
/// Chunks in flight (the send window, in chunks).
pub(crate) const SEND_SLOTS: usize = 16;
/// One-sided transfers to or from host memory in flight at once.
pub(crate) const IO_MAX: usize = 32;
/// Transfers up to this size go through a staging slot of memory registered once (one copy
/// of at most this many bytes), instead of registering the transfer's own memory: an mmap's
/// create, start, stop and destroy cost more than the copy (an offloaded 8 B allreduce made
/// two such registrations per member).
pub(crate) const IO_STAGE: usize = 4096;
/// Connections one ctx may export: the host and up to 255 peers.
const MAX_CONNS: u16 = crate::proto::MAX_MEMBERS as u16 + 1;

/// Magic of a chunk header ("DCC1").
const CHUNK_MAGIC: u32 = u32::from_le_bytes(*b"DCC1");

/// The header in front of every chunk of a message between workers ([`HDR`] bytes, little
/// endian): the sender's rank, [`CHUNK_MAGIC`], the message's tag, the chunk's offset in the
/// message and the message's length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ChunkHeader {
    pub(crate) from: usize,
    pub(crate) tag: u64,
    pub(crate) off: u64,
    pub(crate) total: u64,
}

impl ChunkHeader {
    #[inline]
    pub(crate) fn encode(&self) -> [u8; HDR] {
        let mut h = [0u8; HDR];
        h[0..4].copy_from_slice(&(self.from as u32).to_le_bytes());
        h[4..8].copy_from_slice(&CHUNK_MAGIC.to_le_bytes());
        h[8..16].copy_from_slice(&self.tag.to_le_bytes());
        h[16..24].copy_from_slice(&self.off.to_le_bytes());
        h[24..32].copy_from_slice(&self.total.to_le_bytes());
        h
    }

    /// The header of a received chunk and its payload: an error for a chunk shorter than a
    /// header or without the magic.
    #[inline]
    pub(crate) fn decode(data: &[u8]) -> Result<(ChunkHeader, &[u8]), String> {
        if data.len() < HDR {
            return Err(format!("a chunk of {} bytes", data.len()));
        }
        let u32_at = |i: usize| u32::from_le_bytes(data[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(data[i..i + 8].try_into().expect("8 bytes"));
        if u32_at(4) != CHUNK_MAGIC {
            return Err("a chunk with a bad header".into());
        }
        let h = ChunkHeader { from: u32_at(0) as usize, tag: u64_at(8), off: u64_at(16), total: u64_at(24) };
        Ok((h, &data[HDR..]))
    }
}

const K_RECV: u64 = 1;
const K_SEND: u64 = 2;
const K_IO: u64 = 3;

fn token(kind: u64, index: u64) -> sys::doca_data {
    sys::doca_data::from_u64((kind << 56) | index)
}

/// What a completion callback recorded.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Event {
    /// Receive slot `slot` completed with `len` bytes.
    Recv { slot: usize, len: usize, status: sys::doca_error_t },
    /// Send slot `slot` is free again.
    Send { slot: usize, status: sys::doca_error_t },
    /// One-sided transfer `id` finished.
    Io { id: u64, status: sys::doca_error_t },
}

type Events = RefCell<VecDeque<Event>>;

/// Records an event; called from completion callbacks (no panic may escape into C).
///
/// # Safety
/// `ctx_ud` is the ctx user data set in [`Rdma::open`]: a pointer to the live `Events` box.
unsafe fn record(ctx_ud: sys::doca_data, ev: Event) {
    // SAFETY: per the contract; the box outlives the ctx (dropped after it is destroyed).
    let q = unsafe { &*(ctx_ud.ptr as *const Events) };
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // Never borrowed across `doca_pe_progress`, so this cannot fail; if it ever did, the
        // event would be lost rather than unwinding into C.
        if let Ok(mut q) = q.try_borrow_mut() {
            q.push_back(ev);
        }
    }));
}

fn index_of(ud: sys::doca_data) -> u64 {
    // SAFETY: every task's user data is set with `token` (a plain integer).
    unsafe { ud.u64_ & ((1 << 56) - 1) }
}

unsafe extern "C" fn recv_cb(task: *mut sys::doca_rdma_task_receive, ud: sys::doca_data, ctx_ud: sys::doca_data) {
    // SAFETY: the task is ours again in its callback and freed once here; the result getters
    // are valid in the callback; `ctx_ud` is our events box.
    unsafe {
        let t = sys::doca_rdma_task_receive_as_task(task);
        let len = sys::doca_rdma_task_receive_get_result_len(task) as usize;
        let status = sys::doca_task_get_status(t);
        sys::doca_task_free(t);
        record(ctx_ud, Event::Recv { slot: index_of(ud) as usize, len, status });
    }
}

unsafe extern "C" fn send_cb(task: *mut sys::doca_rdma_task_send, ud: sys::doca_data, ctx_ud: sys::doca_data) {
    // SAFETY: as in `recv_cb`.
    unsafe {
        let t = sys::doca_rdma_task_send_as_task(task);
        let status = sys::doca_task_get_status(t);
        sys::doca_task_free(t);
        record(ctx_ud, Event::Send { slot: index_of(ud) as usize, status });
    }
}

unsafe extern "C" fn read_cb(task: *mut sys::doca_rdma_task_read, ud: sys::doca_data, ctx_ud: sys::doca_data) {
    // SAFETY: as in `recv_cb`.
    unsafe {
        let t = sys::doca_rdma_task_read_as_task(task);
        let status = sys::doca_task_get_status(t);
        sys::doca_task_free(t);
        record(ctx_ud, Event::Io { id: index_of(ud), status });
    }
}

unsafe extern "C" fn write_cb(task: *mut sys::doca_rdma_task_write, ud: sys::doca_data, ctx_ud: sys::doca_data) {
    // SAFETY: as in `recv_cb`.
    unsafe {
        let t = sys::doca_rdma_task_write_as_task(task);
        let status = sys::doca_task_get_status(t);
        sys::doca_task_free(t);
        record(ctx_ud, Event::Io { id: index_of(ud), status });
    }
}

/// The plugin SDK's status for a doca-sys error code (the SDK carries its own copy of the
/// type, so as not to link a provider into every plugin).
pub(crate) fn status(e: sys::doca_error_t) -> Status {
    Status(doca_urom_plugin::abi::doca_error_t(e.0))
}

fn ok(e: sys::doca_error_t) -> Result<(), Status> {
    status(e).result()
}

/// Zeroed page-aligned memory, freed on drop.
struct Area {
    ptr: *mut u8,
    layout: std::alloc::Layout,
}

impl Area {
    fn new(len: usize) -> Result<Area, Status> {
        let layout = std::alloc::Layout::from_size_align(len.max(1), 4096).map_err(|_| Status::NO_MEMORY)?;
        // SAFETY: non-zero size; freed once in Drop with the same layout.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(Status::NO_MEMORY);
        }
        Ok(Area { ptr, layout })
    }
}

impl Drop for Area {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout; every mmap over it is destroyed first
        // (fields of `Rdma` are torn down in its Drop before the areas are dropped).
        unsafe { std::alloc::dealloc(self.ptr, self.layout) }
    }
}

/// Imported host mmaps kept while unused.
const MAX_IMPORTS: usize = 64;

struct Import {
    mmap: *mut sys::doca_mmap,
    /// Transfers in flight through it.
    users: usize,
}

/// A one-sided transfer in flight and what it holds.
struct Io {
    /// The transfer's own registration of `mem` (null when it goes through a staging slot).
    local_mmap: *mut sys::doca_mmap,
    /// The staging slot the transfer goes through instead, if it is small.
    stage: Option<usize>,
    /// A read (the slot's bytes are copied into `mem` when it finishes).
    read: bool,
    /// Borrowed from `Rdma::imports` (the entry with this mmap), which counts this transfer.
    remote_mmap: *mut sys::doca_mmap,
    local_buf: *mut sys::doca_buf,
    remote_buf: *mut sys::doca_buf,
    /// The local side: filled by a read, the source of a write. Its heap block does not move
    /// while the transfer runs (the Vec is never touched until `finish_io`).
    mem: Vec<u8>,
}

/// See the module docs.
pub(crate) struct Rdma {
    dev: *mut sys::doca_dev,
    pe: *mut sys::doca_pe,
    /// Whether the PE's notification is requested (see [`Rdma::arm`]); cleared by the next
    /// [`Rdma::progress`].
    armed: bool,
    rdma: *mut sys::doca_rdma,
    inv: *mut sys::doca_buf_inventory,
    events: Box<Events>,
    recv_mmap: *mut sys::doca_mmap,
    recv_bufs: Vec<*mut sys::doca_buf>,
    send_mmap: *mut sys::doca_mmap,
    send_bufs: Vec<*mut sys::doca_buf>,
    send_free: Vec<usize>,
    /// The staging area's registration and its free slots ([`IO_STAGE`] bytes each).
    stage_mmap: *mut sys::doca_mmap,
    stage_free: Vec<usize>,
    /// Transfers in flight by id, at most [`IO_MAX`]: a list, searched by id, since a map
    /// would hash an id for every transfer to find one of a handful.
    io: Vec<(u64, Io)>,
    next_io: u64,
    /// Host mmaps imported from their mkeys, kept across collectives: an import maps the
    /// host's whole segment, and mapping it afresh for every collective would fault every
    /// page in again. Unused entries are dropped beyond [`MAX_IMPORTS`]. A list searched by
    /// key: a job uses one or two host segments per member, and hashing a key of ~100 bytes
    /// with SipHash on every transfer cost more than comparing it with each.
    imports: Vec<(Vec<u8>, Import)>,
    // Last: freed after the mmaps over them.
    recv_area: Area,
    send_area: Area,
    stage_area: Area,
}

/// Creates and starts an mmap over `[ptr, ptr + len)`.
///
/// # Safety
/// The memory outlives the mmap; `dev` is open.
unsafe fn local_mmap(
    dev: *mut sys::doca_dev,
    ptr: *mut u8,
    len: usize,
    access: u32,
) -> Result<*mut sys::doca_mmap, Status> {
    let mut m = ptr::null_mut();
    // SAFETY: per the contract; `m` is destroyed on any failure after creation.
    unsafe {
        ok(sys::doca_mmap_create(&mut m))?;
        let r = ok(sys::doca_mmap_set_memrange(m, ptr.cast(), len))
            .and_then(|()| ok(sys::doca_mmap_set_permissions(m, access)))
            .and_then(|()| ok(sys::doca_mmap_add_dev(m, dev)))
            .and_then(|()| ok(sys::doca_mmap_start(m)));
        if let Err(e) = r {
            sys::doca_mmap_destroy(m);
            return Err(e);
        }
    }
    Ok(m)
}

impl Rdma {
    /// Opens the first device, creates and starts the ctx and posts every receive.
    pub(crate) fn open() -> Result<Rdma, Status> {
        let mut me = Rdma {
            dev: ptr::null_mut(),
            pe: ptr::null_mut(),
            armed: false,
            rdma: ptr::null_mut(),
            inv: ptr::null_mut(),
            events: Box::new(RefCell::new(VecDeque::new())),
            recv_mmap: ptr::null_mut(),
            recv_bufs: Vec::new(),
            send_mmap: ptr::null_mut(),
            send_bufs: Vec::new(),
            send_free: (0..SEND_SLOTS).rev().collect(),
            stage_mmap: ptr::null_mut(),
            stage_free: (0..IO_MAX).rev().collect(),
            io: Vec::with_capacity(IO_MAX),
            next_io: 0,
            imports: Vec::new(),
            recv_area: Area::new(RECV_SLOTS * SLOT)?,
            send_area: Area::new(SEND_SLOTS * SLOT)?,
            stage_area: Area::new(IO_MAX * IO_STAGE)?,
        };
        // SAFETY: plain DOCA setup on objects `me` owns; its Drop tears down whatever was
        // created if a step fails. Every pointer is fresh from DOCA or an out-pointer.
        unsafe {
            let (mut list, mut n) = (ptr::null_mut(), 0u32);
            ok(sys::doca_devinfo_create_list(&mut list, &mut n))?;
            let opened = if n == 0 { Err(Status::NOT_FOUND) } else { ok(sys::doca_dev_open(*list, &mut me.dev)) };
            sys::doca_devinfo_destroy_list(list);
            opened?;
            ok(sys::doca_pe_create(&mut me.pe))?;
            ok(sys::doca_rdma_create(me.dev, &mut me.rdma))?;
            let r = me.rdma;
            let perms = sys::DOCA_ACCESS_FLAG_LOCAL_READ_WRITE
                | sys::DOCA_ACCESS_FLAG_RDMA_READ
                | sys::DOCA_ACCESS_FLAG_RDMA_WRITE;
            ok(sys::doca_rdma_set_permissions(r, perms))?;
            ok(sys::doca_rdma_set_max_num_connections(r, MAX_CONNS))?;
            // DOCA 3.0 documents NOT_SUPPORTED here on the CPU data path (the library then
            // sizes the receive queue itself); not a failure of the setup.
            let rq = sys::doca_rdma_set_recv_queue_size(r, RECV_SLOTS as u32);
            if rq != sys::DOCA_ERROR_NOT_SUPPORTED {
                ok(rq)?;
            }
            ok(sys::doca_rdma_set_send_queue_size(r, (SEND_SLOTS + IO_MAX) as u32))?;
            ok(sys::doca_rdma_task_receive_set_conf(r, Some(recv_cb), Some(recv_cb), RECV_SLOTS as u32))?;
            ok(sys::doca_rdma_task_send_set_conf(r, Some(send_cb), Some(send_cb), SEND_SLOTS as u32))?;
            ok(sys::doca_rdma_task_read_set_conf(r, Some(read_cb), Some(read_cb), IO_MAX as u32))?;
            ok(sys::doca_rdma_task_write_set_conf(r, Some(write_cb), Some(write_cb), IO_MAX as u32))?;
            let ctx = sys::doca_rdma_as_ctx(r);
            let events: *const Events = &*me.events;
            ok(sys::doca_ctx_set_user_data(ctx, sys::doca_data { ptr: events.cast_mut().cast() }))?;
            ok(sys::doca_pe_connect_ctx(me.pe, ctx))?;
            let st = sys::doca_ctx_start(ctx);
            if st != sys::DOCA_SUCCESS && st != sys::DOCA_ERROR_IN_PROGRESS {
                return Err(status(st));
            }
            let mut state = sys::DOCA_CTX_STATE_IDLE;
            for _ in 0..100_000 {
                ok(sys::doca_ctx_get_state(ctx, &mut state))?;
                if state == sys::DOCA_CTX_STATE_RUNNING {
                    break;
                }
                sys::doca_pe_progress(me.pe);
            }
            if state != sys::DOCA_CTX_STATE_RUNNING {
                return Err(Status::INITIALIZATION);
            }
            ok(sys::doca_buf_inventory_create(RECV_SLOTS + SEND_SLOTS + 2 * IO_MAX, &mut me.inv))?;
            ok(sys::doca_buf_inventory_start(me.inv))?;
            let lrw = sys::DOCA_ACCESS_FLAG_LOCAL_READ_WRITE;
            me.recv_mmap = local_mmap(me.dev, me.recv_area.ptr, RECV_SLOTS * SLOT, lrw)?;
            me.send_mmap = local_mmap(me.dev, me.send_area.ptr, SEND_SLOTS * SLOT, lrw)?;
            me.stage_mmap = local_mmap(me.dev, me.stage_area.ptr, IO_MAX * IO_STAGE, lrw)?;
            for k in 0..RECV_SLOTS {
                let mut b = ptr::null_mut();
                let p = me.recv_area.ptr.add(k * SLOT).cast::<c_void>();
                ok(sys::doca_buf_inventory_buf_get_by_addr(me.inv, me.recv_mmap, p, SLOT, &mut b))?;
                me.recv_bufs.push(b);
            }
            for k in 0..SEND_SLOTS {
                let mut b = ptr::null_mut();
                let p = me.send_area.ptr.add(k * SLOT).cast::<c_void>();
                ok(sys::doca_buf_inventory_buf_get_by_addr(me.inv, me.send_mmap, p, SLOT, &mut b))?;
                me.send_bufs.push(b);
            }
            for k in 0..RECV_SLOTS {
                me.post_recv(k)?;
            }
        }
        Ok(me)
    }

    /// (Re)posts receive slot `slot`.
    pub(crate) fn post_recv(&mut self, slot: usize) -> Result<(), Status> {
        let b = self.recv_bufs[slot];
        let mut t = ptr::null_mut();
        // SAFETY: the slot's buffer is not in any task (its receive completed or was never
        // posted); the ctx is ours, used on this thread.
        unsafe {
            ok(sys::doca_buf_reset_data_len(b))?;
            ok(sys::doca_rdma_task_receive_allocate_init(self.rdma, b, token(K_RECV, slot as u64), &mut t))?;
            let task = sys::doca_rdma_task_receive_as_task(t);
            if let Err(e) = ok(sys::doca_task_submit(task)) {
                sys::doca_task_free(task);
                return Err(e);
            }
        }
        Ok(())
    }

    /// The bytes receive slot `slot` got (`len` from its event).
    pub(crate) fn recv_data(&self, slot: usize, len: usize) -> &[u8] {
        assert!(slot < RECV_SLOTS && len <= SLOT);
        // SAFETY: inside the receive area; the slot is not posted while its data is read
        // (the caller reposts after copying).
        unsafe { std::slice::from_raw_parts(self.recv_area.ptr.add(slot * SLOT), len) }
    }

    /// Exports a new connection: its blob and the connection.
    pub(crate) fn export(&mut self) -> Result<(Vec<u8>, *mut sys::doca_rdma_connection), Status> {
        let (mut d, mut len, mut conn) = (ptr::null(), 0usize, ptr::null_mut());
        // SAFETY: valid out-pointers; the blob is owned by the connection and copied at once.
        unsafe {
            ok(sys::doca_rdma_export(self.rdma, &mut d, &mut len, &mut conn))?;
            Ok((std::slice::from_raw_parts(d.cast::<u8>(), len).to_vec(), conn))
        }
    }

    /// Connects `conn` (from [`Rdma::export`]) to a peer's blob.
    pub(crate) fn connect(&mut self, conn: *mut sys::doca_rdma_connection, blob: &[u8]) -> Result<(), Status> {
        // SAFETY: `conn` is one of this ctx's connections; the blob is only read (and
        // validated by the provider).
        ok(unsafe { sys::doca_rdma_connect(self.rdma, blob.as_ptr().cast(), blob.len(), conn) })
    }

    /// The PE's notification handle: readable once armed ([`Rdma::arm`]) and the PE has work.
    pub(crate) fn notification_fd(&self) -> Result<sys::doca_notification_handle_t, Status> {
        let mut fd = sys::DOCA_NOTIFICATION_HANDLE_INVALID;
        // SAFETY: our PE; `fd` is a valid out-pointer.
        ok(unsafe { sys::doca_pe_get_notification_handle(self.pe, &mut fd) })?;
        Ok(fd)
    }

    /// Requests the PE's notification (DOCA's arm step): from now until the next
    /// [`Rdma::progress`], its handle becomes readable when progress has work, at once if it
    /// has some already.
    pub(crate) fn arm(&mut self) -> Result<(), Status> {
        if !self.armed {
            // SAFETY: our PE, on its thread.
            ok(unsafe { sys::doca_pe_request_notification(self.pe) })?;
            self.armed = true;
        }
        Ok(())
    }

    /// Progresses the PE until it has nothing more to do (bounded). Ends an armed state first
    /// (DOCA's loop: wake up, clear the notification, progress).
    pub(crate) fn progress(&mut self) -> bool {
        if std::mem::take(&mut self.armed) {
            // SAFETY: our PE; the handle argument is the PE's own (ignored on Linux).
            unsafe {
                let mut fd = sys::DOCA_NOTIFICATION_HANDLE_INVALID;
                sys::doca_pe_get_notification_handle(self.pe, &mut fd);
                sys::doca_pe_clear_notification(self.pe, fd);
            }
        }
        let mut any = false;
        for _ in 0..1024 {
            // SAFETY: our PE, on its thread; callbacks only record events.
            if unsafe { sys::doca_pe_progress(self.pe) } == 0 {
                break;
            }
            any = true;
        }
        any
    }

    /// The oldest event recorded and not handed out yet. Taken one at a time, so that the
    /// callbacks' queue keeps its capacity (handing the whole queue out made the next
    /// completion allocate a new one); the borrow ends before the caller handles the event,
    /// which may submit (never progress) and so records nothing meanwhile.
    pub(crate) fn next_event(&mut self) -> Option<Event> {
        self.events.borrow_mut().pop_front()
    }

    /// Whether a send slot is free.
    pub(crate) fn can_send(&self) -> bool {
        !self.send_free.is_empty()
    }

    /// Sends `header` followed by the concatenation of `payload` (at most [`CHUNK`] bytes in
    /// all) on `conn`: `Ok(Some(slot))`, `Ok(None)` when no slot is free. The parts are
    /// copied into the slot, so a message the engine offers in pieces (its header, then the
    /// data) is not assembled first.
    pub(crate) fn send(
        &mut self,
        conn: *mut sys::doca_rdma_connection,
        header: &[u8; HDR],
        payload: &[&[u8]],
    ) -> Result<Option<usize>, Status> {
        let len: usize = payload.iter().map(|p| p.len()).sum();
        assert!(len <= CHUNK);
        let Some(slot) = self.send_free.pop() else { return Ok(None) };
        let b = self.send_bufs[slot];
        // SAFETY: the slot is free (not in any task); the copies stay inside it (HDR + at
        // most CHUNK = SLOT bytes); `conn` is one of this ctx's connections.
        let r = unsafe {
            let p = self.send_area.ptr.add(slot * SLOT);
            ptr::copy_nonoverlapping(header.as_ptr(), p, HDR);
            let mut at = p.add(HDR);
            for part in payload {
                ptr::copy_nonoverlapping(part.as_ptr(), at, part.len());
                at = at.add(part.len());
            }
            ok(sys::doca_buf_set_data(b, p.cast(), HDR + len)).and_then(|()| {
                let mut t = ptr::null_mut();
                ok(sys::doca_rdma_task_send_allocate_init(self.rdma, conn, b, token(K_SEND, slot as u64), &mut t))?;
                let task = sys::doca_rdma_task_send_as_task(t);
                ok(sys::doca_task_submit(task)).inspect_err(|_| sys::doca_task_free(task))
            })
        };
        match r {
            Ok(()) => Ok(Some(slot)),
            Err(e) => {
                self.send_free.push(slot);
                Err(e)
            }
        }
    }

    /// Send slot `slot` completed: it is free again.
    pub(crate) fn send_done(&mut self, slot: usize) {
        if slot < SEND_SLOTS && !self.send_free.contains(&slot) {
            self.send_free.push(slot);
        }
    }

    /// Transfers in flight.
    pub(crate) fn io_in_flight(&self) -> usize {
        self.io.len()
    }

    /// Starts an RDMA read of `into.len()` bytes at `va` of the host mmap exported as `mkey`
    /// (over `conn`, the connection to the process owning it) into `into`. Returns the
    /// transfer's id; the memory comes back from [`Rdma::finish_io`].
    pub(crate) fn start_read(
        &mut self,
        conn: *mut sys::doca_rdma_connection,
        mkey: &[u8],
        va: u64,
        into: Vec<u8>,
    ) -> Result<u64, Status> {
        self.start_io(conn, mkey, va, into, false)
    }

    /// Starts an RDMA write of `data` to `va` of the host mmap exported as `mkey`.
    pub(crate) fn start_write(
        &mut self,
        conn: *mut sys::doca_rdma_connection,
        mkey: &[u8],
        va: u64,
        data: Vec<u8>,
    ) -> Result<u64, Status> {
        self.start_io(conn, mkey, va, data, true)
    }

    fn start_io(
        &mut self,
        conn: *mut sys::doca_rdma_connection,
        mkey: &[u8],
        va: u64,
        mut mem: Vec<u8>,
        write: bool,
    ) -> Result<u64, Status> {
        if mem.is_empty() {
            return Err(Status::INVALID_VALUE);
        }
        let id = self.next_io;
        let mut io = Io {
            local_mmap: ptr::null_mut(),
            stage: None,
            read: !write,
            remote_mmap: ptr::null_mut(),
            local_buf: ptr::null_mut(),
            remote_buf: ptr::null_mut(),
            mem: Vec::new(),
        };
        let len = mem.len();
        if len <= IO_STAGE {
            io.stage = self.stage_free.pop();
        }
        // SAFETY: the local side is either a staging slot (IO_STAGE bytes of the staging
        // area, registered for the ctx's life and lent to this transfer alone until
        // `release`) or `mem`'s heap block under its own mmap, which moves into `io` (moving
        // a Vec does not move its block) and stays untouched until `finish_io`; the remote
        // mmap is imported from the host's export and only used through buffers inside it;
        // everything created is released by `release` on failure.
        let r = unsafe {
            (|| {
                let (local_mmap, lp) = match io.stage {
                    Some(k) => {
                        let slot = self.stage_area.ptr.add(k * IO_STAGE);
                        if write {
                            ptr::copy_nonoverlapping(mem.as_ptr(), slot, len);
                        }
                        (self.stage_mmap, slot.cast::<c_void>())
                    }
                    None => {
                        let lrw = sys::DOCA_ACCESS_FLAG_LOCAL_READ_WRITE;
                        io.local_mmap = local_mmap(self.dev, mem.as_mut_ptr(), len, lrw)?;
                        (io.local_mmap, mem.as_mut_ptr().cast::<c_void>())
                    }
                };
                io.remote_mmap = self.import(mkey)?;
                let rp = va as usize as *mut c_void;
                if write {
                    let mut t = ptr::null_mut();
                    ok(sys::doca_buf_inventory_buf_get_by_data(self.inv, local_mmap, lp, len, &mut io.local_buf))?;
                    ok(sys::doca_buf_inventory_buf_get_by_addr(self.inv, io.remote_mmap, rp, len, &mut io.remote_buf))?;
                    ok(sys::doca_rdma_task_write_allocate_init(
                        self.rdma,
                        conn,
                        io.local_buf,
                        io.remote_buf,
                        token(K_IO, id),
                        &mut t,
                    ))?;
                    let task = sys::doca_rdma_task_write_as_task(t);
                    ok(sys::doca_task_submit(task)).inspect_err(|_| sys::doca_task_free(task))
                } else {
                    let mut t = ptr::null_mut();
                    ok(sys::doca_buf_inventory_buf_get_by_addr(self.inv, local_mmap, lp, len, &mut io.local_buf))?;
                    ok(sys::doca_buf_inventory_buf_get_by_data(self.inv, io.remote_mmap, rp, len, &mut io.remote_buf))?;
                    ok(sys::doca_rdma_task_read_allocate_init(
                        self.rdma,
                        conn,
                        io.remote_buf,
                        io.local_buf,
                        token(K_IO, id),
                        &mut t,
                    ))?;
                    let task = sys::doca_rdma_task_read_as_task(t);
                    ok(sys::doca_task_submit(task)).inspect_err(|_| sys::doca_task_free(task))
                }
            })()
        };
        io.mem = mem;
        match r {
            Ok(()) => {
                self.next_io += 1;
                self.io.push((id, io));
                Ok(id)
            }
            Err(e) => {
                // SAFETY: no task holds the buffers (allocation or submit failed).
                unsafe { self.release(&mut io) };
                Err(e)
            }
        }
    }

    /// Releases transfer `id`'s resources after its completion event; returns its memory.
    pub(crate) fn finish_io(&mut self, id: u64) -> Option<Vec<u8>> {
        let i = self.io.iter().position(|(i, _)| *i == id)?;
        let (_, mut io) = self.io.swap_remove(i);
        if let (Some(k), true) = (io.stage, io.read) {
            // SAFETY: the transfer completed, so the slot holds what the read brought (or,
            // if it failed, bytes the caller drops); `mem` has the transfer's length, at
            // most IO_STAGE.
            unsafe {
                ptr::copy_nonoverlapping(self.stage_area.ptr.add(k * IO_STAGE), io.mem.as_mut_ptr(), io.mem.len())
            };
        }
        // SAFETY: the transfer's task completed (its event came), so nothing uses them.
        unsafe { self.release(&mut io) };
        Some(std::mem::take(&mut io.mem))
    }

    /// The host mmap exported as `mkey`, imported once and counted as used.
    fn import(&mut self, mkey: &[u8]) -> Result<*mut sys::doca_mmap, Status> {
        if let Some((_, i)) = self.imports.iter_mut().find(|(k, _)| k.as_slice() == mkey) {
            i.users += 1;
            return Ok(i.mmap);
        }
        let mut m = ptr::null_mut();
        // SAFETY: the blob is only read (and validated by the provider); valid out-pointer.
        ok(unsafe {
            sys::doca_mmap_create_from_export(ptr::null(), mkey.as_ptr().cast(), mkey.len(), self.dev, &mut m)
        })?;
        self.imports.push((mkey.to_vec(), Import { mmap: m, users: 1 }));
        Ok(m)
    }

    /// Frees a transfer's buffers and local mmap and returns its import (destroying unused
    /// imports beyond [`MAX_IMPORTS`]).
    ///
    /// # Safety
    /// No task uses them any more.
    unsafe fn release(&mut self, io: &mut Io) {
        // SAFETY: per the contract; each handle is released once and nulled.
        unsafe {
            for b in [&mut io.local_buf, &mut io.remote_buf] {
                if !b.is_null() {
                    sys::doca_buf_dec_refcount(*b, ptr::null_mut());
                    *b = ptr::null_mut();
                }
            }
            if !io.local_mmap.is_null() {
                sys::doca_mmap_stop(io.local_mmap);
                sys::doca_mmap_destroy(io.local_mmap);
                io.local_mmap = ptr::null_mut();
            }
        }
        if let Some(k) = io.stage.take() {
            self.stage_free.push(k);
        }
        if !io.remote_mmap.is_null() {
            // By its mmap, so that a transfer need not keep a copy of the key: the imports
            // are few (one per host segment in use, at most MAX_IMPORTS kept).
            if let Some((_, i)) = self.imports.iter_mut().find(|(_, i)| i.mmap == io.remote_mmap) {
                i.users -= 1;
            }
            io.remote_mmap = ptr::null_mut();
        }
        if self.imports.len() > MAX_IMPORTS {
            self.imports.retain(|(_, i)| {
                if i.users > 0 {
                    return true;
                }
                // SAFETY: no transfer uses it (no buffer over it is left).
                unsafe { destroy_mmap(i.mmap) };
                false
            });
        }
    }
}

/// Stops and destroys an mmap.
///
/// # Safety
/// No buffer over it is left.
unsafe fn destroy_mmap(m: *mut sys::doca_mmap) {
    // SAFETY: per the contract.
    unsafe {
        sys::doca_mmap_stop(m);
        sys::doca_mmap_destroy(m);
    }
}

impl Drop for Rdma {
    fn drop(&mut self) {
        // SAFETY: teardown in reverse order on this thread (see the module docs). Stopping
        // flushes every task through its callback, which frees it; after the ctx is IDLE no
        // task refers to a buffer, so buffers, inventory and mmaps can go.
        unsafe {
            if !self.rdma.is_null() && !self.pe.is_null() {
                let ctx = sys::doca_rdma_as_ctx(self.rdma);
                sys::doca_ctx_stop(ctx);
                let mut state = sys::DOCA_CTX_STATE_RUNNING;
                for _ in 0..100_000 {
                    sys::doca_pe_progress(self.pe);
                    if sys::doca_ctx_get_state(ctx, &mut state) != sys::DOCA_SUCCESS
                        || state == sys::DOCA_CTX_STATE_IDLE
                    {
                        break;
                    }
                }
            }
            self.events.borrow_mut().clear();
            for (_, mut io) in std::mem::take(&mut self.io) {
                self.release(&mut io);
            }
            for (_, i) in self.imports.drain(..) {
                destroy_mmap(i.mmap);
            }
            for b in self.recv_bufs.drain(..).chain(self.send_bufs.drain(..)) {
                sys::doca_buf_dec_refcount(b, ptr::null_mut());
            }
            if !self.inv.is_null() {
                sys::doca_buf_inventory_stop(self.inv);
                sys::doca_buf_inventory_destroy(self.inv);
            }
            for m in [self.recv_mmap, self.send_mmap, self.stage_mmap] {
                if !m.is_null() {
                    sys::doca_mmap_stop(m);
                    sys::doca_mmap_destroy(m);
                }
            }
            if !self.rdma.is_null() {
                sys::doca_rdma_destroy(self.rdma);
            }
            if !self.pe.is_null() {
                sys::doca_pe_destroy(self.pe);
            }
            if !self.dev.is_null() {
                sys::doca_dev_close(self.dev);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunk_header_reads_back_what_was_written_and_refuses_a_short_or_foreign_chunk() {
        let h = ChunkHeader { from: 3, tag: 0x0123_4567_89ab_cdef, off: 4096, total: 1 << 20 };
        let mut chunk = h.encode().to_vec();
        chunk.extend_from_slice(b"payload");
        let (back, payload) = ChunkHeader::decode(&chunk).expect("a whole header");
        assert_eq!(back, h);
        assert_eq!(payload, b"payload");
        // A header alone carries an empty payload.
        assert_eq!(ChunkHeader::decode(&h.encode()).expect("a header alone").1, b"");
        assert!(ChunkHeader::decode(&chunk[..HDR - 1]).is_err(), "shorter than a header");
        let mut foreign = chunk.clone();
        foreign[4] ^= 1;
        assert!(ChunkHeader::decode(&foreign).is_err(), "without the magic");
    }
}
