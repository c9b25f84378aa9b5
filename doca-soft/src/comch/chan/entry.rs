//! Every `doca_comch_*` C entry point: argument and object checks, then a call into the
//! server, client and connection objects of `chan.rs` (the model). Split from `chan.rs` so that
//! the model reads on its own; the functions are re-exported from `chan`, their old path.

use core::ffi::{c_char, c_void, CStr};
use core::ptr;

use super::*;

// ---- entry points: lookups ----

/// # Safety
/// A non-NULL `p` must point to a server or client of this provider (DOCA contract).
unsafe fn ep_ref<'a>(p: *const Endpoint, role: Role) -> Result<&'a Endpoint, doca_error_t> {
    // SAFETY: per the contract.
    let e = unsafe { obj(p) }?;
    let want = if role == Role::Server { SERVER_MAGIC } else { CLIENT_MAGIC };
    if e.magic != want {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    Ok(e)
}

fn name_of(name: *const c_char) -> Result<Vec<u8>, doca_error_t> {
    if name.is_null() {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    // SAFETY: a non-NULL name is a NUL-terminated string (DOCA contract); at most the cap is
    // relevant, and CStr stops at the NUL.
    let n = unsafe { CStr::from_ptr(name) }.to_bytes();
    if n.is_empty() || n.len() + 1 > MAX_NAME_LEN as usize {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    Ok(n.to_vec())
}

fn create(
    role: Role,
    dev: *mut doca_dev,
    repr: *mut doca_dev_rep,
    name: *const c_char,
    outp: *mut *mut Endpoint,
) -> Result<(), doca_error_t> {
    let d = dev_ref(dev)?;
    let name = name_of(name)?;
    if outp.is_null() || !crate::rep::is_open_or_null(repr) {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    let raw = Box::into_raw(Endpoint::new(role, d, repr, name));
    // SAFETY: `raw` was just created from a Box; only shared access follows.
    unsafe { (*raw).ctx.bind_owner(raw) };
    // SAFETY: non-NULL out-pointer, writable by the caller's contract.
    unsafe { out(outp, raw) }
}

fn destroy(p: *mut Endpoint, role: Role) -> Result<(), doca_error_t> {
    // SAFETY: non-NULL pointers come from create (DOCA contract).
    let e = unsafe { ep_ref(p, role) }?;
    e.ctx.teardown().map_err(|_| DOCA_ERROR_IN_USE)?;
    // SAFETY: created by Box::into_raw; IDLE, no task allocated, disconnected from its PE.
    let mut b = unsafe { Box::from_raw(p) };
    b.magic = 0;
    // A connection still held here is the one whose event is being delivered right now: its
    // callback stopped and destroyed its own endpoint (the event task went back to the pool
    // before the callback, so nothing else can hold one on an IDLE ctx). The event touches
    // the connection once the callback returns (`Event::done`), so that one object is left
    // allocated (an orphan) instead of being freed under it; its last reference frees it.
    // Consumers and producers (of any thread) may hold connections too: whether one is freed
    // here or by its last holder is decided by one read-modify-write (see `FastHolds`).
    for conn in b.conns.get_mut().drain(..) {
        // Unboxed first: once the word says orphan, its last holder may free it on its thread.
        let p = Box::into_raw(conn);
        // SAFETY: just unboxed; alive until freed below or by its last holder, after the
        // read-modify-write, past which it is not used here.
        let c = unsafe { &*p };
        let driver = if c.refs.get() > 0 { DRIVER_HELD } else { 0 };
        c.orphan.set(true);
        let before = c.holds.0.fetch_or(ORPHAN | driver, Ordering::AcqRel);
        if driver == 0 && before & HOLD_COUNT == 0 {
            // SAFETY: nothing held it when it became an orphan, and nothing holds an orphan
            // anew: the last reference is ours (see `FastHolds`).
            drop(unsafe { Box::from_raw(p) });
        }
    }
    drop(b);
    Ok(())
}

/// Runs `f` on an IDLE endpoint (setters and registrations); BAD_STATE otherwise.
fn idle(p: *const Endpoint, role: Role, f: impl FnOnce(&Endpoint) -> Result<(), doca_error_t>) -> doca_error_t {
    guard_err(|| {
        // SAFETY: as in destroy.
        let e = unsafe { ep_ref(p, role) }?;
        if e.ctx.state() != DOCA_CTX_STATE_IDLE {
            return Err(DOCA_ERROR_BAD_STATE);
        }
        f(e)
    })
}

fn get<T>(p: *const Endpoint, role: Role, dst: *mut T, f: impl FnOnce(&Endpoint) -> T) -> doca_error_t {
    guard_err(|| {
        // SAFETY: as in destroy.
        let e = unsafe { ep_ref(p, role) }?;
        // SAFETY: NULL is rejected; otherwise writable by the caller's contract.
        unsafe { out(dst, f(e)) }
    })
}

fn as_ctx(p: *mut Endpoint, role: Role) -> *mut doca_ctx {
    guard(ptr::null_mut(), || {
        // SAFETY: as in destroy.
        match unsafe { ep_ref(p, role) } {
            // SAFETY: `p` is live; the field address stays valid for its life.
            Ok(_) => unsafe { ptr::addr_of_mut!((*p).ctx) },
            Err(_) => ptr::null_mut(),
        }
    })
}

fn send_conf(
    p: *mut Endpoint,
    role: Role,
    ok: doca_comch_task_send_completion_cb_t,
    err: doca_comch_task_send_completion_cb_t,
    n: u32,
) -> doca_error_t {
    idle(p, role, |e| {
        if n > MAX_SEND_TASKS {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        task::set_conf::<doca_comch_task_send>(&e.ctx, ok, err, n)?;
        e.send_conf.set(true);
        Ok(())
    })
}

fn send_alloc(
    p: *mut Endpoint,
    role: Role,
    peer: *mut doca_comch_connection,
    msg: *const c_void,
    len: u32,
    outp: *mut *mut doca_comch_task_send,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: as in destroy.
        let e = unsafe { ep_ref(p, role) }?;
        // SAFETY: a non-NULL connection pointer comes from this provider (DOCA contract).
        let c = unsafe { conn_ref(peer) }?;
        if outp.is_null() || (msg.is_null() && len != 0) || !ptr::eq(c.owner, e) {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let limit = if c.state.get() == ConnState::Connected { c.max_msg.get() } else { e.max_msg.get() };
        if len > limit {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let t = task::alloc::<doca_comch_task_send>(&e.ctx, doca_data::from_u64(0))?;
        // SAFETY: a freshly allocated slot of this ctx's pool.
        let x = unsafe { t.as_ref() };
        // Held until the task is freed (`release_send`): the connection outlives its sends.
        c.hold();
        x.conn.set(c);
        x.msg.set(msg.cast());
        x.len.set(len);
        // SAFETY: non-NULL out-pointer, writable by the caller's contract.
        unsafe { out(outp, t.as_ptr()) }
    })
}

fn cap(devinfo: *const doca_devinfo, dst: *mut u32, v: u32) -> doca_error_t {
    guard_err(|| {
        devinfo_ref(devinfo)?;
        // SAFETY: NULL is rejected; otherwise writable by the caller's contract.
        unsafe { out(dst, v) }
    })
}

// ---- entry points: capabilities ----

#[no_mangle]
pub unsafe extern "C" fn doca_comch_cap_get_max_name_len(devinfo: *const doca_devinfo, v: *mut u32) -> doca_error_t {
    cap(devinfo, v, MAX_NAME_LEN)
}
#[no_mangle]
pub unsafe extern "C" fn doca_comch_cap_get_max_msg_size(devinfo: *const doca_devinfo, v: *mut u32) -> doca_error_t {
    cap(devinfo, v, MAX_MSG_SIZE)
}
#[no_mangle]
pub unsafe extern "C" fn doca_comch_cap_get_max_recv_queue_size(
    devinfo: *const doca_devinfo,
    v: *mut u32,
) -> doca_error_t {
    cap(devinfo, v, MAX_RECV_QUEUE)
}
#[no_mangle]
pub unsafe extern "C" fn doca_comch_cap_get_max_clients(devinfo: *const doca_devinfo, v: *mut u32) -> doca_error_t {
    cap(devinfo, v, MAX_CLIENTS)
}
#[no_mangle]
pub unsafe extern "C" fn doca_comch_cap_get_max_send_tasks(devinfo: *const doca_devinfo, v: *mut u32) -> doca_error_t {
    cap(devinfo, v, MAX_SEND_TASKS)
}
#[no_mangle]
pub unsafe extern "C" fn doca_comch_cap_server_is_supported(devinfo: *const doca_devinfo) -> doca_error_t {
    // Every soft device can play either role (the roles are the program's, see docs).
    guard_err(|| devinfo_ref(devinfo).map(drop))
}
#[no_mangle]
pub unsafe extern "C" fn doca_comch_cap_client_is_supported(devinfo: *const doca_devinfo) -> doca_error_t {
    guard_err(|| devinfo_ref(devinfo).map(drop))
}

// ---- entry points: server ----

#[no_mangle]
pub unsafe extern "C" fn doca_comch_server_create(
    dev: *mut doca_dev,
    repr: *mut doca_dev_rep,
    name: *const c_char,
    comch_server: *mut *mut doca_comch_server,
) -> doca_error_t {
    guard_err(|| create(Role::Server, dev, repr, name, comch_server))
}
#[no_mangle]
pub unsafe extern "C" fn doca_comch_server_destroy(comch_server: *mut doca_comch_server) -> doca_error_t {
    guard_err(|| destroy(comch_server, Role::Server))
}
#[no_mangle]
pub unsafe extern "C" fn doca_comch_server_as_ctx(comch_server: *mut doca_comch_server) -> *mut doca_ctx {
    as_ctx(comch_server, Role::Server)
}
#[no_mangle]
pub unsafe extern "C" fn doca_comch_server_set_max_msg_size(s: *mut doca_comch_server, size: u32) -> doca_error_t {
    idle(s, Role::Server, |e| set_max_msg(e, size))
}
#[no_mangle]
pub unsafe extern "C" fn doca_comch_server_get_max_msg_size(
    s: *const doca_comch_server,
    size: *mut u32,
) -> doca_error_t {
    get(s, Role::Server, size, |e| e.max_msg.get())
}
#[no_mangle]
pub unsafe extern "C" fn doca_comch_server_set_recv_queue_size(s: *mut doca_comch_server, size: u32) -> doca_error_t {
    idle(s, Role::Server, |e| set_recv_queue(e, size))
}
#[no_mangle]
pub unsafe extern "C" fn doca_comch_server_get_recv_queue_size(
    s: *const doca_comch_server,
    size: *mut u32,
) -> doca_error_t {
    get(s, Role::Server, size, |e| e.recv_queue.get())
}
#[no_mangle]
pub unsafe extern "C" fn doca_comch_server_get_device(
    s: *const doca_comch_server,
    dev: *mut *mut doca_dev,
) -> doca_error_t {
    get(s, Role::Server, dev, |e| e.dev.as_ptr())
}
#[no_mangle]
pub unsafe extern "C" fn doca_comch_server_get_device_rep(
    s: *const doca_comch_server,
    rep: *mut *mut doca_dev_rep,
) -> doca_error_t {
    get(s, Role::Server, rep, |e| e.repr)
}
#[no_mangle]
pub unsafe extern "C" fn doca_comch_server_disconnect(
    s: *mut doca_comch_server,
    connection: *mut doca_comch_connection,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: as in destroy.
        let e = unsafe { ep_ref(s, Role::Server) }?;
        // SAFETY: as in send_alloc.
        let c = unsafe { conn_ref(connection) }?;
        if !e.owns(c) {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        if c.state.get() == ConnState::Closed {
            return Err(DOCA_ERROR_NOT_CONNECTED);
        }
        c.close(e, Some(DOCA_ERROR_CONNECTION_RESET));
        // The user asked for it: no disconnect event follows, and the connection is freed
        // once nothing holds it (from the next progress on).
        c.released.set(true);
        Ok(())
    })
}

fn set_max_msg(e: &Endpoint, size: u32) -> Result<(), doca_error_t> {
    if size == 0 || size > MAX_MSG_SIZE {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    e.max_msg.set(size);
    Ok(())
}

fn set_recv_queue(e: &Endpoint, size: u32) -> Result<(), doca_error_t> {
    if size == 0 || size > MAX_RECV_QUEUE {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    e.recv_queue.set(size);
    Ok(())
}

// ---- entry points: client ----

#[no_mangle]
pub unsafe extern "C" fn doca_comch_client_create(
    dev: *mut doca_dev,
    name: *const c_char,
    comch_client: *mut *mut doca_comch_client,
) -> doca_error_t {
    guard_err(|| create(Role::Client, dev, ptr::null_mut(), name, comch_client))
}
#[no_mangle]
pub unsafe extern "C" fn doca_comch_client_destroy(comch_client: *mut doca_comch_client) -> doca_error_t {
    guard_err(|| destroy(comch_client, Role::Client))
}
#[no_mangle]
pub unsafe extern "C" fn doca_comch_client_as_ctx(comch_client: *mut doca_comch_client) -> *mut doca_ctx {
    as_ctx(comch_client, Role::Client)
}
#[no_mangle]
pub unsafe extern "C" fn doca_comch_client_set_max_msg_size(c: *mut doca_comch_client, size: u32) -> doca_error_t {
    idle(c, Role::Client, |e| set_max_msg(e, size))
}
#[no_mangle]
pub unsafe extern "C" fn doca_comch_client_get_max_msg_size(
    c: *const doca_comch_client,
    size: *mut u32,
) -> doca_error_t {
    get(c, Role::Client, size, |e| e.max_msg.get())
}
#[no_mangle]
pub unsafe extern "C" fn doca_comch_client_set_recv_queue_size(c: *mut doca_comch_client, size: u32) -> doca_error_t {
    idle(c, Role::Client, |e| set_recv_queue(e, size))
}
#[no_mangle]
pub unsafe extern "C" fn doca_comch_client_get_recv_queue_size(
    c: *const doca_comch_client,
    size: *mut u32,
) -> doca_error_t {
    get(c, Role::Client, size, |e| e.recv_queue.get())
}
#[no_mangle]
pub unsafe extern "C" fn doca_comch_client_get_device(
    c: *const doca_comch_client,
    dev: *mut *mut doca_dev,
) -> doca_error_t {
    get(c, Role::Client, dev, |e| e.dev.as_ptr())
}
#[no_mangle]
pub unsafe extern "C" fn doca_comch_client_get_connection(
    c: *const doca_comch_client,
    connection: *mut *mut doca_comch_connection,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: as in destroy.
        let e = unsafe { ep_ref(c, Role::Client) }?;
        if e.ctx.state() != DOCA_CTX_STATE_RUNNING {
            return Err(DOCA_ERROR_BAD_STATE);
        }
        let conn = e.the_client_conn().ok_or(DOCA_ERROR_BAD_STATE)?;
        // SAFETY: NULL is rejected; otherwise writable by the caller's contract.
        unsafe { out(connection, conn as *const _ as *mut doca_comch_connection) }
    })
}

// ---- entry points: connections ----

#[no_mangle]
pub unsafe extern "C" fn doca_comch_connection_set_user_data(
    connection: *mut doca_comch_connection,
    user_data: doca_data,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: as in send_alloc.
        unsafe { conn_ref(connection) }?.user_data.set(user_data);
        Ok(())
    })
}
#[no_mangle]
pub unsafe extern "C" fn doca_comch_connection_get_user_data(connection: *const doca_comch_connection) -> doca_data {
    guard(doca_data::from_u64(0), || {
        // SAFETY: as in send_alloc.
        unsafe { conn_ref(connection) }.map_or(doca_data::from_u64(0), |c| c.user_data.get())
    })
}
#[no_mangle]
pub unsafe extern "C" fn doca_comch_server_get_server_ctx(
    connection: *const doca_comch_connection,
) -> *mut doca_comch_server {
    // SAFETY: a non-NULL connection pointer comes from this provider (DOCA contract).
    guard(ptr::null_mut(), || match unsafe { conn_ref(connection) } {
        // SAFETY: a connection's owner lives as long as the connection.
        Ok(c) if unsafe { &*c.owner }.role == Role::Server => c.owner as *mut _,
        _ => ptr::null_mut(),
    })
}
#[no_mangle]
pub unsafe extern "C" fn doca_comch_client_get_client_ctx(
    connection: *const doca_comch_connection,
) -> *mut doca_comch_client {
    // SAFETY: a non-NULL connection pointer comes from this provider (DOCA contract).
    guard(ptr::null_mut(), || match unsafe { conn_ref(connection) } {
        // SAFETY: a connection's owner lives as long as the connection.
        Ok(c) if unsafe { &*c.owner }.role == Role::Client => c.owner as *mut _,
        _ => ptr::null_mut(),
    })
}
#[no_mangle]
pub unsafe extern "C" fn doca_comch_connection_update_info(connection: *mut doca_comch_connection) -> doca_error_t {
    guard_err(|| {
        // SAFETY: as in send_alloc.
        let c = unsafe { conn_ref(connection) }?;
        match c.state.get() {
            ConnState::Handshaking => Err(DOCA_ERROR_CONNECTION_INPROGRESS),
            ConnState::Closed => Err(DOCA_ERROR_CONNECTION_ABORTED),
            ConnState::Connected => {
                for (s, v) in c.snapshot.iter().zip(&c.counters) {
                    s.set(v.get());
                }
                Ok(())
            }
        }
    })
}
#[no_mangle]
pub unsafe extern "C" fn doca_comch_connection_get_counter(
    connection: *const doca_comch_connection,
    counter_type: doca_comch_counter,
    counter_value: *mut u64,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: as in send_alloc.
        let c = unsafe { conn_ref(connection) }?;
        let i = match counter_type {
            DOCA_COMCH_COUNTER_SENT_MESSAGES => 0,
            DOCA_COMCH_COUNTER_SENT_BYTES => 1,
            DOCA_COMCH_COUNTER_RECV_MESSAGES => 2,
            DOCA_COMCH_COUNTER_RECV_BYTES => 3,
            _ => return Err(DOCA_ERROR_INVALID_VALUE),
        };
        // SAFETY: NULL is rejected; otherwise writable by the caller's contract.
        unsafe { out(counter_value, c.snapshot[i].get()) }
    })
}

// ---- entry points: send task and events ----

#[no_mangle]
pub unsafe extern "C" fn doca_comch_server_task_send_set_conf(
    s: *mut doca_comch_server,
    task_completion_cb: doca_comch_task_send_completion_cb_t,
    task_error_cb: doca_comch_task_send_completion_cb_t,
    num_send_tasks: u32,
) -> doca_error_t {
    send_conf(s, Role::Server, task_completion_cb, task_error_cb, num_send_tasks)
}
#[no_mangle]
pub unsafe extern "C" fn doca_comch_client_task_send_set_conf(
    c: *mut doca_comch_client,
    task_completion_cb: doca_comch_task_send_completion_cb_t,
    task_error_cb: doca_comch_task_send_completion_cb_t,
    num_send_tasks: u32,
) -> doca_error_t {
    send_conf(c, Role::Client, task_completion_cb, task_error_cb, num_send_tasks)
}
#[no_mangle]
pub unsafe extern "C" fn doca_comch_server_task_send_alloc_init(
    s: *mut doca_comch_server,
    peer: *mut doca_comch_connection,
    msg: *const c_void,
    len: u32,
    task: *mut *mut doca_comch_task_send,
) -> doca_error_t {
    send_alloc(s, Role::Server, peer, msg, len, task)
}
#[no_mangle]
pub unsafe extern "C" fn doca_comch_client_task_send_alloc_init(
    c: *mut doca_comch_client,
    peer: *mut doca_comch_connection,
    msg: *const c_void,
    len: u32,
    task: *mut *mut doca_comch_task_send,
) -> doca_error_t {
    send_alloc(c, Role::Client, peer, msg, len, task)
}
#[no_mangle]
pub unsafe extern "C" fn doca_comch_task_send_as_task(task: *mut doca_comch_task_send) -> *mut doca_task {
    // The header is the first field: the conversion is a cast (NULL stays NULL).
    task.cast()
}
#[no_mangle]
pub unsafe extern "C" fn doca_comch_server_event_msg_recv_register(
    s: *mut doca_comch_server,
    recv_event_cb: doca_comch_event_msg_recv_cb_t,
) -> doca_error_t {
    idle(s, Role::Server, |e| {
        recv_event_cb.ok_or(DOCA_ERROR_INVALID_VALUE)?;
        e.recv_cb.set(recv_event_cb);
        Ok(())
    })
}
#[no_mangle]
pub unsafe extern "C" fn doca_comch_client_event_msg_recv_register(
    c: *mut doca_comch_client,
    recv_event_cb: doca_comch_event_msg_recv_cb_t,
) -> doca_error_t {
    idle(c, Role::Client, |e| {
        recv_event_cb.ok_or(DOCA_ERROR_INVALID_VALUE)?;
        e.recv_cb.set(recv_event_cb);
        Ok(())
    })
}
#[no_mangle]
pub unsafe extern "C" fn doca_comch_server_event_connection_status_changed_register(
    s: *mut doca_comch_server,
    connect_event_cb: doca_comch_event_connection_status_changed_cb_t,
    disconnect_event_cb: doca_comch_event_connection_status_changed_cb_t,
) -> doca_error_t {
    idle(s, Role::Server, |e| {
        if connect_event_cb.is_none() || disconnect_event_cb.is_none() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        e.connect_cb.set(connect_event_cb);
        e.disconnect_cb.set(disconnect_event_cb);
        Ok(())
    })
}
#[no_mangle]
pub unsafe extern "C" fn doca_comch_server_event_consumer_register(
    s: *mut doca_comch_server,
    new_consumer_event_cb: doca_comch_event_consumer_cb_t,
    expired_consumer_event_cb: doca_comch_event_consumer_cb_t,
) -> doca_error_t {
    idle(s, Role::Server, |e| consumer_register(e, new_consumer_event_cb, expired_consumer_event_cb))
}
#[no_mangle]
pub unsafe extern "C" fn doca_comch_client_event_consumer_register(
    c: *mut doca_comch_client,
    new_consumer_event_cb: doca_comch_event_consumer_cb_t,
    expired_consumer_event_cb: doca_comch_event_consumer_cb_t,
) -> doca_error_t {
    idle(c, Role::Client, |e| consumer_register(e, new_consumer_event_cb, expired_consumer_event_cb))
}

/// Stores the consumer callbacks (both required, as for the connection callbacks). They never
/// run here: no consumer can exist (see `Endpoint::consumer_cbs`).
fn consumer_register(
    e: &Endpoint,
    new_cb: doca_comch_event_consumer_cb_t,
    expired_cb: doca_comch_event_consumer_cb_t,
) -> Result<(), doca_error_t> {
    if new_cb.is_none() || expired_cb.is_none() {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    e.consumer_cbs.set((new_cb, expired_cb));
    Ok(())
}
