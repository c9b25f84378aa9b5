// The UROM plugin ABI (worker side): the structs a plugin shared object and the worker process
// exchange. Value types only, shared by doca-sys, doca-soft (its worker process) and the plugin
// SDK through `include!`, so the layout is written once. `doca_error_t` and `c_void` must be in
// scope where this file is included.

/// The version a plugin reports in [`urom_plugin_iface::__doca_api_version`]: the
/// `DOCA_VERSION_EXACT` (`major << 24 | minor << 16 | patch`) of the SDK it was built with, as
/// DOCA's `DOCA_STRUCT_CTOR` stamps it (3.0.0058: `0x0300003A`). A worker accepts a plugin
/// whose major version is its own.
pub const UROM_PLUGIN_DOCA_API_VERSION: usize = DOCA_VERSION_EXACT;

/// `struct urom_worker_cmd`: a command as the worker hands it to a plugin. `plugin_cmd` is the
/// host's packed payload, `len` bytes long, stored right after the header.
#[repr(C)]
#[derive(Debug)]
pub struct urom_worker_cmd {
    /// The plugin id (one bit) the command is for.
    pub type_: u64,
    /// Opaque to the plugin: echoed in the notification so the host finds its task.
    pub urom_context: u64,
    /// Length of `plugin_cmd` in bytes.
    pub len: u64,
    /// The packed command (flexible array member).
    pub plugin_cmd: [u8; 0],
}

/// `struct urom_worker_notify`: a notification as a plugin produces it.
#[repr(C)]
#[derive(Debug)]
pub struct urom_worker_notify {
    /// The plugin id (one bit) the notification comes from.
    pub type_: u64,
    /// The command's `urom_context`, echoed.
    pub urom_context: u64,
    /// Length of `plugin_notif` in bytes.
    pub len: u64,
    /// The command's outcome; the host task completes with it.
    pub status: doca_error_t,
    pub reserved: u32,
    /// The plugin's notification body (flexible array member).
    pub plugin_notif: [u8; 0],
}

/// `struct ucs_list_link`: UCX's intrusive, circular, doubly linked list. A list is a head
/// link whose `next`/`prev` point to itself when empty.
#[repr(C)]
#[derive(Debug)]
pub struct ucs_list_link {
    pub prev: *mut ucs_list_link,
    pub next: *mut ucs_list_link,
}

/// `struct urom_worker_cmd_desc`: one command in the list given to `worker_cmd`. Allocated
/// with C `malloc` by the worker; the plugin `free`s each entry it removes from the list.
#[repr(C)]
#[derive(Debug)]
pub struct urom_worker_cmd_desc {
    pub entry: ucs_list_link,
    /// Who sent the command; a notification answering it carries the same `dest_id`.
    pub dest_id: u64,
    pub worker_cmd: urom_worker_cmd,
}

/// `struct urom_worker_notif_desc`: one notification a plugin appends to the list given to
/// `progress`. Allocated by the plugin with C `malloc`; the worker `free`s it after packing.
#[repr(C)]
#[derive(Debug)]
pub struct urom_worker_notif_desc {
    pub entry: ucs_list_link,
    /// The `dest_id` of the command this answers.
    pub dest_id: u64,
    pub worker_notif: urom_worker_notify,
}

/// `struct urom_plugin_iface`: the plugin's entry points, filled by `urom_plugin_get_iface`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct urom_plugin_iface {
    /// [`UROM_PLUGIN_DOCA_API_VERSION`] of the API the plugin was built against.
    pub __doca_api_version: usize,
    /// Creates the plugin's state (stored in `ctx.plugin_ctx`).
    pub open: Option<unsafe extern "C" fn(ctx: *mut urom_worker_ctx) -> doca_error_t>,
    /// Destroys the plugin's state.
    pub close: Option<unsafe extern "C" fn(ctx: *mut urom_worker_ctx)>,
    /// Writes the plugin's worker address into `addr`. When `*addr_len` is too small it sets
    /// the needed length and returns `DOCA_ERROR_INVALID_VALUE`.
    pub addr:
        Option<unsafe extern "C" fn(ctx: *mut urom_worker_ctx, addr: *mut c_void, addr_len: *mut usize) -> doca_error_t>,
    /// Takes commands off `cmd_list` (freeing each entry it removes).
    pub worker_cmd: Option<unsafe extern "C" fn(ctx: *mut urom_worker_ctx, cmd_list: *mut ucs_list_link) -> doca_error_t>,
    /// Advances the plugin; appends finished notifications to `notif_list`, `DOCA_ERROR_EMPTY`
    /// when there are none.
    pub progress:
        Option<unsafe extern "C" fn(ctx: *mut urom_worker_ctx, notif_list: *mut ucs_list_link) -> doca_error_t>,
    /// Packs `notif` into `packed_notif`; on entry `*packed_notif_len` is the room available,
    /// on return the packed length.
    pub notif_pack: Option<
        unsafe extern "C" fn(
            notif: *mut urom_worker_notify,
            packed_notif_len: *mut usize,
            packed_notif: *mut c_void,
        ) -> doca_error_t,
    >,
}

/// `struct urom_domain_lookups_iface`: what a plugin may ask the worker about the members of
/// a domain it belongs to. `domain_id` is a member's worker id within the domain.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct urom_domain_lookups_iface {
    /// The address this plugin reported on that member.
    pub addr_lookup:
        Option<unsafe extern "C" fn(ctx: *mut urom_worker_ctx, domain_id: u64, addr: *mut *mut c_void) -> doca_error_t>,
    /// The index of that member's buffer (segment) containing virtual address `va`.
    pub seg_lookup:
        Option<unsafe extern "C" fn(ctx: *mut urom_worker_ctx, domain_id: u64, va: u64, seg: *mut c_int) -> doca_error_t>,
    /// The memory handle of that member's segment `seg`.
    pub memh_lookup: Option<
        unsafe extern "C" fn(
            ctx: *mut urom_worker_ctx,
            domain_id: u64,
            seg: c_int,
            len: *mut usize,
            memh: *mut *mut c_void,
        ) -> doca_error_t,
    >,
    /// The remote key of that member's segment `seg`.
    pub mkey_lookup: Option<
        unsafe extern "C" fn(
            ctx: *mut urom_worker_ctx,
            domain_id: u64,
            seg: c_int,
            len: *mut usize,
            rkey: *mut *mut c_void,
        ) -> doca_error_t,
    >,
}

/// `struct urom_worker_ctx`: one per loaded plugin in a worker.
#[repr(C)]
#[derive(Debug)]
pub struct urom_worker_ctx {
    pub iface: urom_plugin_iface,
    pub domain_iface: urom_domain_lookups_iface,
    /// The plugin's own state, set by `open`.
    pub plugin_ctx: *mut c_void,
}

/// `urom_plugin_get_iface`, exported by every plugin shared object.
pub type urom_plugin_get_iface_fn = unsafe extern "C" fn(iface: *mut urom_plugin_iface) -> doca_error_t;
/// `urom_plugin_get_version`, exported by every plugin shared object.
pub type urom_plugin_get_version_fn = unsafe extern "C" fn(version: *mut u64) -> doca_error_t;

/// **Soft-only extension, not part of DOCA:** `urom_plugin_soft_arm`, which a plugin shared
/// object may export so that the soft worker can sleep instead of polling `progress`.
///
/// The worker calls it (with commands outstanding on the plugin, after a `progress` call that
/// advanced nothing) before it would sleep. The plugin answers:
/// * `DOCA_SUCCESS` and `*fd`: a descriptor that becomes readable (`POLLIN`) when `progress`
///   has work again; the worker sleeps in `poll(2)` on it together with its own sockets. The
///   plugin's next `progress` call, whatever woke the worker, ends the armed state.
/// * `DOCA_ERROR_AGAIN`: `progress` has work now; do not sleep.
/// * anything else (or no such symbol): the plugin cannot tell; the worker keeps polling
///   `progress` with its bounded back-off.
pub type urom_plugin_soft_arm_fn =
    unsafe extern "C" fn(ctx: *mut urom_worker_ctx, fd: *mut c_int) -> doca_error_t;

#[allow(dead_code)]
const _UROM_PLUGIN_ABI_CHECKS: () = {
    assert!(core::mem::size_of::<urom_worker_cmd>() == 24);
    assert!(core::mem::size_of::<urom_worker_notify>() == 32);
    assert!(core::mem::size_of::<urom_worker_cmd_desc>() == 48);
    assert!(core::mem::size_of::<urom_worker_notif_desc>() == 56);
    assert!(core::mem::size_of::<urom_plugin_iface>() == 56);
    assert!(core::mem::size_of::<urom_domain_lookups_iface>() == 32);
    assert!(core::mem::size_of::<urom_worker_ctx>() == 96);
};

/// Bytes in front of the body in a packed notification: `type`, `urom_context`, `len`,
/// `status`, `reserved` of [`urom_worker_notify`] (32).
pub const UROM_NOTIFY_HEADER_LEN: usize = core::mem::offset_of!(urom_worker_notify, plugin_notif);

/// Splits what a plugin's `notif_pack` wrote into the header's status and the body.
///
/// A plugin packs a notification as DOCA's plugins do: the [`urom_worker_notify`] header (its
/// fields in native byte order) followed by `len` body bytes. The host receives only the body,
/// and its task completes with the header's status. `None` when the bytes are shorter than a
/// header or than the length the header announces.
pub fn urom_notify_unpack(packed: &[u8]) -> Option<(doca_error_t, &[u8])> {
    let field = |at: usize, n: usize| packed.get(at..at + n);
    let len = u64::from_ne_bytes(field(16, 8)?.try_into().ok()?);
    let status = i32::from_ne_bytes(field(24, 4)?.try_into().ok()?);
    let len = usize::try_from(len).ok()?;
    let body = packed.get(UROM_NOTIFY_HEADER_LEN..UROM_NOTIFY_HEADER_LEN.checked_add(len)?)?;
    Some((doca_error_t(status), body))
}

/// Writes the packed form [`urom_notify_unpack`] reads: the header of `notif` with `len` set to
/// `body.len()`, then `body`, into `out`. The number of bytes written, or `None` when `out` is
/// too small.
pub fn urom_notify_pack(notif: &urom_worker_notify, body: &[u8], out: &mut [u8]) -> Option<usize> {
    let total = UROM_NOTIFY_HEADER_LEN.checked_add(body.len())?;
    let out = out.get_mut(..total)?;
    out[0..8].copy_from_slice(&notif.type_.to_ne_bytes());
    out[8..16].copy_from_slice(&notif.urom_context.to_ne_bytes());
    out[16..24].copy_from_slice(&(body.len() as u64).to_ne_bytes());
    out[24..28].copy_from_slice(&notif.status.0.to_ne_bytes());
    out[28..32].copy_from_slice(&notif.reserved.to_ne_bytes());
    out[UROM_NOTIFY_HEADER_LEN..].copy_from_slice(body);
    Some(total)
}

// ---- the domain lookups a plugin calls (`static inline` in doca_urom_plugin.h) ----
//
// DOCA defines these four as header-only wrappers that call the worker's functions in
// `ctx->domain_iface`; they are not exported by any library, so they are re-implemented here
// with the same meaning. `domain_id` is a member worker's id in the plugin's domain.

/// Calls the function `pick` chooses from `ctx.domain_iface`, or `DOCA_ERROR_INVALID_VALUE`
/// for a NULL ctx or a worker that left the entry NULL.
///
/// # Safety
/// `ctx` is NULL or a live `urom_worker_ctx` the worker gave the plugin.
#[inline]
unsafe fn domain_lookup<F>(
    ctx: *mut urom_worker_ctx,
    pick: impl FnOnce(&urom_domain_lookups_iface) -> Option<F>,
    call: impl FnOnce(F) -> doca_error_t,
) -> doca_error_t {
    if ctx.is_null() {
        return DOCA_ERROR_INVALID_VALUE;
    }
    // SAFETY: caller contract: `ctx` is live; the lookup table is plain data.
    match pick(unsafe { &(*ctx).domain_iface }) {
        Some(f) => call(f),
        None => DOCA_ERROR_INVALID_VALUE,
    }
}

/// `doca_urom_worker_domain_addr_lookup`: the address this plugin reported on worker
/// `domain_id` (what its `addr` callback wrote there, exchanged by the domain's allgather).
///
/// # Safety
/// `ctx` is NULL or the plugin's live ctx; `addr` is valid for one write.
#[inline]
pub unsafe fn doca_urom_worker_domain_addr_lookup(
    ctx: *mut urom_worker_ctx,
    domain_id: u64,
    addr: *mut *mut c_void,
) -> doca_error_t {
    // SAFETY: forwarded unchanged to the worker's function; the caller upholds its contract.
    unsafe { domain_lookup(ctx, |i| i.addr_lookup, |f| f(ctx, domain_id, addr)) }
}

/// `doca_urom_worker_domain_seg_lookup`: the index of worker `domain_id`'s registered buffer
/// that contains `va`.
///
/// # Safety
/// `ctx` is NULL or the plugin's live ctx; `seg` is valid for one write.
#[inline]
pub unsafe fn doca_urom_worker_domain_seg_lookup(
    ctx: *mut urom_worker_ctx,
    domain_id: u64,
    va: u64,
    seg: *mut c_int,
) -> doca_error_t {
    // SAFETY: as above.
    unsafe { domain_lookup(ctx, |i| i.seg_lookup, |f| f(ctx, domain_id, va, seg)) }
}

/// `doca_urom_worker_domain_memh_lookup`: the memory-handle bytes of buffer `seg` of worker
/// `domain_id`, and their length.
///
/// # Safety
/// `ctx` is NULL or the plugin's live ctx; `len` and `memh` are valid for one write each.
#[inline]
pub unsafe fn doca_urom_worker_domain_memh_lookup(
    ctx: *mut urom_worker_ctx,
    domain_id: u64,
    seg: c_int,
    len: *mut usize,
    memh: *mut *mut c_void,
) -> doca_error_t {
    // SAFETY: as above.
    unsafe { domain_lookup(ctx, |i| i.memh_lookup, |f| f(ctx, domain_id, seg, len, memh)) }
}

/// `doca_urom_worker_domain_mkey_lookup`: the remote-key bytes of buffer `seg` of worker
/// `domain_id`, and their length.
///
/// # Safety
/// `ctx` is NULL or the plugin's live ctx; `len` and `rkey` are valid for one write each.
#[inline]
pub unsafe fn doca_urom_worker_domain_mkey_lookup(
    ctx: *mut urom_worker_ctx,
    domain_id: u64,
    seg: c_int,
    len: *mut usize,
    rkey: *mut *mut c_void,
) -> doca_error_t {
    // SAFETY: as above.
    unsafe { domain_lookup(ctx, |i| i.mkey_lookup, |f| f(ctx, domain_id, seg, len, rkey)) }
}
