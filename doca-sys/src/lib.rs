//! Raw declarations of the NVIDIA DOCA 3.x C API subset that async-doca binds.
//!
//! Everything here is `unsafe extern "C"`, written by hand from the interface facts of the
//! API (names, argument order, types, numeric values). No header was copied and no bindgen
//! is used, so these declarations are the contract that both providers must honour:
//!
//! * feature `soft` (default) links [`doca_soft`](https://docs.rs/doca-soft), this project's
//!   software implementation of the same C ABI, so the crate works on any Linux machine;
//! * feature `system` links NVIDIA's `doca-common` (found with pkg-config) on a BlueField
//!   host. Without the SDK the declarations still type-check (`cargo check`), and a real
//!   link fails after a warning that says how to point the build at an SDK.
//!
//! The rules of the C API apply unchanged: a progress engine (PE), its contexts, tasks and
//! buffers are used from one thread; task ownership passes to the library on a successful
//! submit and back to the caller in the completion callback; callbacks run inside
//! [`doca_pe_progress`]. Safe wrappers live in the `async-doca` crate, not here.
//!
//! Helpers that are `static inline` in NVIDIA's headers (and so not exported by its
//! libraries) are re-implemented here as Rust functions with the same names, for example
//! [`doca_buf_inventory_buf_get_by_addr`].
#![allow(non_camel_case_types)]
#![no_std]

#[cfg(all(feature = "soft", feature = "system"))]
compile_error!("doca-sys: enable exactly one provider feature: `soft` (default) or `system`");

// Linking the software provider: its `#[no_mangle]` functions resolve the declarations below.
#[cfg(feature = "soft")]
extern crate doca_soft as _;

use core::ffi::c_char;

include!("types.rs");

macro_rules! opaque {
    ($($(#[$m:meta])* $name:ident),* $(,)?) => {$(
        $(#[$m])*
        #[repr(C)]
        pub struct $name {
            _data: [u8; 0],
            // Opaque C objects are neither Send, Sync nor Unpin.
            _marker: core::marker::PhantomData<(*mut u8, core::marker::PhantomPinned)>,
        }
    )*};
}

opaque!(
    /// A progress engine: runs callbacks of its contexts' tasks.
    doca_pe,
    /// A context (the common face of RDMA, sync event, UROM objects).
    doca_ctx,
    /// A task, the unit of asynchronous work.
    doca_task,
    /// Static information about a device.
    doca_devinfo,
    /// An open device.
    doca_dev,
    /// A memory map: a registered memory range.
    doca_mmap,
    /// A pool of buffer descriptors.
    doca_buf_inventory,
    /// A buffer descriptor over mmap memory.
    doca_buf,
    /// A 64-bit counter shared between execution units.
    doca_sync_event,
    /// Sync event task: read the counter.
    doca_sync_event_task_get,
    /// Sync event task: set the counter.
    doca_sync_event_task_notify_set,
    /// Sync event task: add to the counter, fetching the old value.
    doca_sync_event_task_notify_add,
    /// Sync event task: wait until `(value & mask) == wait_val`.
    doca_sync_event_task_wait_eq,
    /// Sync event task: wait until `(value & mask) != wait_val`.
    doca_sync_event_task_wait_neq,
    /// An RDMA context (reliable connections, the eight RDMA operations).
    doca_rdma,
    /// One RDMA connection of a `doca_rdma` (created by `doca_rdma_export`).
    doca_rdma_connection,
    /// RDMA task: a posted receive buffer.
    doca_rdma_task_receive,
    /// RDMA task: send a message.
    doca_rdma_task_send,
    /// RDMA task: send a message with 32-bit immediate data.
    doca_rdma_task_send_imm,
    /// RDMA task: read remote memory into a local buffer.
    doca_rdma_task_read,
    /// RDMA task: write a local buffer to remote memory.
    doca_rdma_task_write,
    /// RDMA task: write, then deliver immediate data to a posted receive.
    doca_rdma_task_write_imm,
    /// RDMA task: 64-bit remote compare-and-swap.
    doca_rdma_task_atomic_cmp_swp,
    /// RDMA task: 64-bit remote fetch-and-add.
    doca_rdma_task_atomic_fetch_add,
);

extern "C" {
    // ---- errors ----
    pub fn doca_error_get_name(error: doca_error_t) -> *const c_char;
    pub fn doca_error_get_descr(error: doca_error_t) -> *const c_char;

    // ---- version (doca_version.h) ----
    /// The version string of the loaded DOCA library (static, NUL-terminated). Compare
    /// [`doca_version`], the version these declarations were written for.
    pub fn doca_version_runtime() -> *const c_char;

    // ---- progress engine ----
    pub fn doca_pe_create(pe: *mut *mut doca_pe) -> doca_error_t;
    pub fn doca_pe_destroy(pe: *mut doca_pe) -> doca_error_t;
    pub fn doca_pe_progress(pe: *mut doca_pe) -> u8;
    pub fn doca_pe_get_notification_handle(pe: *const doca_pe, handle: *mut doca_notification_handle_t)
        -> doca_error_t;
    pub fn doca_pe_request_notification(pe: *mut doca_pe) -> doca_error_t;
    pub fn doca_pe_clear_notification(pe: *mut doca_pe, handle: doca_notification_handle_t) -> doca_error_t;
    pub fn doca_pe_get_num_inflight_tasks(pe: *const doca_pe, num_inflight_tasks: *mut usize) -> doca_error_t;
    pub fn doca_pe_connect_ctx(pe: *mut doca_pe, ctx: *mut doca_ctx) -> doca_error_t;
    pub fn doca_pe_set_event_mode(pe: *mut doca_pe, event_mode: doca_pe_event_mode) -> doca_error_t;

    // ---- tasks ----
    pub fn doca_task_submit(task: *mut doca_task) -> doca_error_t;
    pub fn doca_task_try_submit(task: *mut doca_task) -> doca_error_t;
    pub fn doca_task_free(task: *mut doca_task);
    pub fn doca_task_get_status(task: *const doca_task) -> doca_error_t;
    pub fn doca_task_set_user_data(task: *mut doca_task, user_data: doca_data);
    pub fn doca_task_get_user_data(task: *const doca_task) -> doca_data;
    pub fn doca_task_get_ctx(task: *const doca_task) -> *mut doca_ctx;

    // ---- contexts ----
    pub fn doca_ctx_start(ctx: *mut doca_ctx) -> doca_error_t;
    pub fn doca_ctx_stop(ctx: *mut doca_ctx) -> doca_error_t;
    pub fn doca_ctx_get_state(ctx: *const doca_ctx, state: *mut doca_ctx_states) -> doca_error_t;
    pub fn doca_ctx_set_state_changed_cb(ctx: *mut doca_ctx, cb: doca_ctx_state_changed_callback_t) -> doca_error_t;
    pub fn doca_ctx_set_user_data(ctx: *mut doca_ctx, user_data: doca_data) -> doca_error_t;
    pub fn doca_ctx_get_user_data(ctx: *const doca_ctx, user_data: *mut doca_data) -> doca_error_t;
    pub fn doca_ctx_get_num_inflight_tasks(ctx: *const doca_ctx, num_inflight_tasks: *mut usize) -> doca_error_t;

    // ---- devices ----
    pub fn doca_devinfo_create_list(dev_list: *mut *mut *mut doca_devinfo, nb_devs: *mut u32) -> doca_error_t;
    pub fn doca_devinfo_destroy_list(dev_list: *mut *mut doca_devinfo) -> doca_error_t;
    pub fn doca_dev_open(devinfo: *mut doca_devinfo, dev: *mut *mut doca_dev) -> doca_error_t;
    pub fn doca_dev_close(dev: *mut doca_dev) -> doca_error_t;
    pub fn doca_dev_as_devinfo(dev: *const doca_dev) -> *mut doca_devinfo;
    pub fn doca_devinfo_get_pci_addr_str(devinfo: *const doca_devinfo, pci_addr_str: *mut c_char) -> doca_error_t;
    pub fn doca_devinfo_is_equal_pci_addr(
        devinfo: *const doca_devinfo,
        pci_addr_str: *const c_char,
        is_equal: *mut u8,
    ) -> doca_error_t;
    pub fn doca_devinfo_get_ibdev_name(
        devinfo: *const doca_devinfo,
        ibdev_name: *mut c_char,
        size: u32,
    ) -> doca_error_t;
    pub fn doca_devinfo_get_iface_name(
        devinfo: *const doca_devinfo,
        iface_name: *mut c_char,
        size: u32,
    ) -> doca_error_t;

    // ---- memory map ----
    pub fn doca_mmap_create(mmap: *mut *mut doca_mmap) -> doca_error_t;
    pub fn doca_mmap_destroy(mmap: *mut doca_mmap) -> doca_error_t;
    pub fn doca_mmap_set_memrange(mmap: *mut doca_mmap, addr: *mut c_void, len: usize) -> doca_error_t;
    pub fn doca_mmap_set_permissions(mmap: *mut doca_mmap, access_mask: u32) -> doca_error_t;
    pub fn doca_mmap_add_dev(mmap: *mut doca_mmap, dev: *mut doca_dev) -> doca_error_t;
    pub fn doca_mmap_start(mmap: *mut doca_mmap) -> doca_error_t;
    pub fn doca_mmap_stop(mmap: *mut doca_mmap) -> doca_error_t;
    pub fn doca_mmap_get_memrange(mmap: *const doca_mmap, addr: *mut *mut c_void, len: *mut usize) -> doca_error_t;
    pub fn doca_mmap_export_rdma(
        mmap: *mut doca_mmap,
        dev: *const doca_dev,
        export_desc: *mut *const c_void,
        export_desc_len: *mut usize,
    ) -> doca_error_t;
    pub fn doca_mmap_export_pci(
        mmap: *mut doca_mmap,
        dev: *const doca_dev,
        export_desc: *mut *const c_void,
        export_desc_len: *mut usize,
    ) -> doca_error_t;
    pub fn doca_mmap_create_from_export(
        user_data: *const doca_data,
        export_desc: *const c_void,
        export_desc_len: usize,
        dev: *mut doca_dev,
        mmap: *mut *mut doca_mmap,
    ) -> doca_error_t;

    // ---- buffer inventory ----
    pub fn doca_buf_inventory_create(num_elements: usize, inventory: *mut *mut doca_buf_inventory) -> doca_error_t;
    pub fn doca_buf_inventory_destroy(inventory: *mut doca_buf_inventory) -> doca_error_t;
    pub fn doca_buf_inventory_start(inventory: *mut doca_buf_inventory) -> doca_error_t;
    pub fn doca_buf_inventory_stop(inventory: *mut doca_buf_inventory) -> doca_error_t;
    pub fn doca_buf_inventory_buf_get_by_args(
        inventory: *mut doca_buf_inventory,
        mmap: *mut doca_mmap,
        addr: *mut c_void,
        len: usize,
        data: *mut c_void,
        data_len: usize,
        buf: *mut *mut doca_buf,
    ) -> doca_error_t;
    pub fn doca_buf_inventory_get_num_free_elements(
        inventory: *const doca_buf_inventory,
        num_free: *mut u32,
    ) -> doca_error_t;

    // ---- buffers ----
    pub fn doca_buf_inc_refcount(buf: *mut doca_buf, refcount: *mut u16) -> doca_error_t;
    pub fn doca_buf_dec_refcount(buf: *mut doca_buf, refcount: *mut u16) -> doca_error_t;
    pub fn doca_buf_get_len(buf: *const doca_buf, len: *mut usize) -> doca_error_t;
    pub fn doca_buf_get_head(buf: *const doca_buf, head: *mut *mut c_void) -> doca_error_t;
    pub fn doca_buf_get_data(buf: *const doca_buf, data: *mut *mut c_void) -> doca_error_t;
    pub fn doca_buf_get_data_len(buf: *const doca_buf, data_len: *mut usize) -> doca_error_t;
    pub fn doca_buf_set_data(buf: *mut doca_buf, data: *mut c_void, data_len: usize) -> doca_error_t;
    pub fn doca_buf_set_data_len(buf: *mut doca_buf, data_len: usize) -> doca_error_t;
    pub fn doca_buf_reset_data_len(buf: *mut doca_buf) -> doca_error_t;
    pub fn doca_buf_get_refcount(buf: *const doca_buf, refcount: *mut u16) -> doca_error_t;

    // ---- buffer lists ----
    pub fn doca_buf_get_next_in_list(buf: *mut doca_buf, next_buf: *mut *mut doca_buf) -> doca_error_t;
    pub fn doca_buf_get_last_in_list(buf: *mut doca_buf, last_buf: *mut *mut doca_buf) -> doca_error_t;
    pub fn doca_buf_is_last_in_list(buf: *const doca_buf, is_last: *mut u8) -> doca_error_t;
    pub fn doca_buf_is_first_in_list(buf: *const doca_buf, is_first: *mut u8) -> doca_error_t;
    pub fn doca_buf_is_in_list(buf: *const doca_buf, is_in_list: *mut u8) -> doca_error_t;
    pub fn doca_buf_get_list_len(buf: *const doca_buf, num_elements: *mut u32) -> doca_error_t;
    pub fn doca_buf_chain_list(list1: *mut doca_buf, list2: *mut doca_buf) -> doca_error_t;
    /// Experimental in DOCA 3.0.
    pub fn doca_buf_chain_list_tail(
        list1_head: *mut doca_buf,
        list1_tail: *mut doca_buf,
        list2: *mut doca_buf,
    ) -> doca_error_t;
    pub fn doca_buf_unchain_list(list1: *mut doca_buf, list2: *mut doca_buf) -> doca_error_t;

    // ---- sync event: objects ----
    pub fn doca_sync_event_create(event: *mut *mut doca_sync_event) -> doca_error_t;
    pub fn doca_sync_event_destroy(event: *mut doca_sync_event) -> doca_error_t;
    pub fn doca_sync_event_add_publisher_location_cpu(event: *mut doca_sync_event, dev: *mut doca_dev) -> doca_error_t;
    pub fn doca_sync_event_add_subscriber_location_cpu(event: *mut doca_sync_event, dev: *mut doca_dev)
        -> doca_error_t;
    pub fn doca_sync_event_add_publisher_location_remote_pci(event: *mut doca_sync_event) -> doca_error_t;
    pub fn doca_sync_event_add_subscriber_location_remote_pci(event: *mut doca_sync_event) -> doca_error_t;
    pub fn doca_sync_event_add_publisher_location_remote_net(event: *mut doca_sync_event) -> doca_error_t;
    pub fn doca_sync_event_set_addr(event: *mut doca_sync_event, addr: *mut u64) -> doca_error_t;
    pub fn doca_sync_event_start(event: *mut doca_sync_event) -> doca_error_t;
    pub fn doca_sync_event_stop(event: *mut doca_sync_event) -> doca_error_t;
    pub fn doca_sync_event_as_ctx(event: *mut doca_sync_event) -> *mut doca_ctx;
    pub fn doca_sync_event_export_to_remote_pci(
        event: *mut doca_sync_event,
        dev: *mut doca_dev,
        data: *mut *const u8,
        sz: *mut usize,
    ) -> doca_error_t;
    pub fn doca_sync_event_export_to_remote_net(
        event: *mut doca_sync_event,
        data: *mut *const u8,
        sz: *mut usize,
    ) -> doca_error_t;
    pub fn doca_sync_event_create_from_export(
        dev: *mut doca_dev,
        data: *const u8,
        sz: usize,
        event: *mut *mut doca_sync_event,
    ) -> doca_error_t;

    // ---- sync event: synchronous data path ----
    pub fn doca_sync_event_get(event: *mut doca_sync_event, value: *mut u64) -> doca_error_t;
    pub fn doca_sync_event_update_add(event: *mut doca_sync_event, value: u64, fetched: *mut u64) -> doca_error_t;
    pub fn doca_sync_event_update_set(event: *mut doca_sync_event, value: u64) -> doca_error_t;
    pub fn doca_sync_event_wait_gt(event: *mut doca_sync_event, value: u64, mask: u64) -> doca_error_t;
    pub fn doca_sync_event_wait_gt_yield(event: *mut doca_sync_event, value: u64, mask: u64) -> doca_error_t;
    pub fn doca_sync_event_wait_eq(event: *mut doca_sync_event, value: u64, mask: u64) -> doca_error_t;
    pub fn doca_sync_event_wait_neq(event: *mut doca_sync_event, value: u64, mask: u64) -> doca_error_t;

    // ---- sync event: asynchronous tasks ----
    pub fn doca_sync_event_task_get_set_conf(
        event: *mut doca_sync_event,
        ok_cb: doca_sync_event_task_get_completion_cb_t,
        err_cb: doca_sync_event_task_get_completion_cb_t,
        num_tasks: u32,
    ) -> doca_error_t;
    pub fn doca_sync_event_task_get_alloc_init(
        event: *mut doca_sync_event,
        ret_val_ptr: *mut u64,
        user_data: doca_data,
        task: *mut *mut doca_sync_event_task_get,
    ) -> doca_error_t;
    pub fn doca_sync_event_task_get_as_doca_task(task: *mut doca_sync_event_task_get) -> *mut doca_task;

    pub fn doca_sync_event_task_notify_set_set_conf(
        event: *mut doca_sync_event,
        ok_cb: doca_sync_event_task_notify_set_completion_cb_t,
        err_cb: doca_sync_event_task_notify_set_completion_cb_t,
        num_tasks: u32,
    ) -> doca_error_t;
    pub fn doca_sync_event_task_notify_set_alloc_init(
        event: *mut doca_sync_event,
        set_val: u64,
        user_data: doca_data,
        task: *mut *mut doca_sync_event_task_notify_set,
    ) -> doca_error_t;
    pub fn doca_sync_event_task_notify_set_as_doca_task(task: *mut doca_sync_event_task_notify_set) -> *mut doca_task;

    pub fn doca_sync_event_task_notify_add_set_conf(
        event: *mut doca_sync_event,
        ok_cb: doca_sync_event_task_notify_add_completion_cb_t,
        err_cb: doca_sync_event_task_notify_add_completion_cb_t,
        num_tasks: u32,
    ) -> doca_error_t;
    pub fn doca_sync_event_task_notify_add_alloc_init(
        event: *mut doca_sync_event,
        inc_val: u64,
        fetched_val_ptr: *mut u64,
        user_data: doca_data,
        task: *mut *mut doca_sync_event_task_notify_add,
    ) -> doca_error_t;
    pub fn doca_sync_event_task_notify_add_as_doca_task(task: *mut doca_sync_event_task_notify_add) -> *mut doca_task;

    pub fn doca_sync_event_task_wait_eq_set_conf(
        event: *mut doca_sync_event,
        ok_cb: doca_sync_event_task_wait_eq_completion_cb_t,
        err_cb: doca_sync_event_task_wait_eq_completion_cb_t,
        num_tasks: u32,
    ) -> doca_error_t;
    pub fn doca_sync_event_task_wait_eq_alloc_init(
        event: *mut doca_sync_event,
        wait_val: u64,
        mask: u64,
        user_data: doca_data,
        task: *mut *mut doca_sync_event_task_wait_eq,
    ) -> doca_error_t;
    pub fn doca_sync_event_task_wait_eq_as_doca_task(task: *mut doca_sync_event_task_wait_eq) -> *mut doca_task;

    pub fn doca_sync_event_task_wait_neq_set_conf(
        event: *mut doca_sync_event,
        ok_cb: doca_sync_event_task_wait_neq_completion_cb_t,
        err_cb: doca_sync_event_task_wait_neq_completion_cb_t,
        num_tasks: u32,
    ) -> doca_error_t;
    pub fn doca_sync_event_task_wait_neq_alloc_init(
        event: *mut doca_sync_event,
        wait_val: u64,
        mask: u64,
        user_data: doca_data,
        task: *mut *mut doca_sync_event_task_wait_neq,
    ) -> doca_error_t;
    pub fn doca_sync_event_task_wait_neq_as_doca_task(task: *mut doca_sync_event_task_wait_neq) -> *mut doca_task;
}

// ---- RDMA (`doca-rdma`) ----
//
// Tasks name their connection (the DOCA 3.x form). The receive result getters are valid in the
// receive task's completion callback.
extern "C" {
    pub fn doca_rdma_create(dev: *mut doca_dev, rdma: *mut *mut doca_rdma) -> doca_error_t;
    pub fn doca_rdma_destroy(rdma: *mut doca_rdma) -> doca_error_t;
    pub fn doca_rdma_as_ctx(rdma: *mut doca_rdma) -> *mut doca_ctx;
    pub fn doca_rdma_set_permissions(rdma: *mut doca_rdma, permissions: u32) -> doca_error_t;
    pub fn doca_rdma_set_send_queue_size(rdma: *mut doca_rdma, size: u32) -> doca_error_t;
    pub fn doca_rdma_set_recv_queue_size(rdma: *mut doca_rdma, size: u32) -> doca_error_t;
    pub fn doca_rdma_set_max_num_connections(rdma: *mut doca_rdma, max: u16) -> doca_error_t;
    pub fn doca_rdma_export(
        rdma: *mut doca_rdma,
        local_conn_details: *mut *const c_void,
        local_conn_details_size: *mut usize,
        rdma_connection: *mut *mut doca_rdma_connection,
    ) -> doca_error_t;
    pub fn doca_rdma_connect(
        rdma: *mut doca_rdma,
        remote_conn_details: *const c_void,
        remote_conn_details_size: usize,
        rdma_connection: *mut doca_rdma_connection,
    ) -> doca_error_t;

    pub fn doca_rdma_task_receive_set_conf(
        rdma: *mut doca_rdma,
        ok_cb: doca_rdma_task_receive_completion_cb_t,
        err_cb: doca_rdma_task_receive_completion_cb_t,
        num_tasks: u32,
    ) -> doca_error_t;
    pub fn doca_rdma_task_receive_as_task(task: *mut doca_rdma_task_receive) -> *mut doca_task;
    pub fn doca_rdma_task_send_set_conf(
        rdma: *mut doca_rdma,
        ok_cb: doca_rdma_task_send_completion_cb_t,
        err_cb: doca_rdma_task_send_completion_cb_t,
        num_tasks: u32,
    ) -> doca_error_t;
    pub fn doca_rdma_task_send_as_task(task: *mut doca_rdma_task_send) -> *mut doca_task;
    pub fn doca_rdma_task_send_imm_set_conf(
        rdma: *mut doca_rdma,
        ok_cb: doca_rdma_task_send_imm_completion_cb_t,
        err_cb: doca_rdma_task_send_imm_completion_cb_t,
        num_tasks: u32,
    ) -> doca_error_t;
    pub fn doca_rdma_task_send_imm_as_task(task: *mut doca_rdma_task_send_imm) -> *mut doca_task;
    pub fn doca_rdma_task_read_set_conf(
        rdma: *mut doca_rdma,
        ok_cb: doca_rdma_task_read_completion_cb_t,
        err_cb: doca_rdma_task_read_completion_cb_t,
        num_tasks: u32,
    ) -> doca_error_t;
    pub fn doca_rdma_task_read_as_task(task: *mut doca_rdma_task_read) -> *mut doca_task;
    pub fn doca_rdma_task_write_set_conf(
        rdma: *mut doca_rdma,
        ok_cb: doca_rdma_task_write_completion_cb_t,
        err_cb: doca_rdma_task_write_completion_cb_t,
        num_tasks: u32,
    ) -> doca_error_t;
    pub fn doca_rdma_task_write_as_task(task: *mut doca_rdma_task_write) -> *mut doca_task;
    pub fn doca_rdma_task_write_imm_set_conf(
        rdma: *mut doca_rdma,
        ok_cb: doca_rdma_task_write_imm_completion_cb_t,
        err_cb: doca_rdma_task_write_imm_completion_cb_t,
        num_tasks: u32,
    ) -> doca_error_t;
    pub fn doca_rdma_task_write_imm_as_task(task: *mut doca_rdma_task_write_imm) -> *mut doca_task;
    pub fn doca_rdma_task_atomic_cmp_swp_set_conf(
        rdma: *mut doca_rdma,
        ok_cb: doca_rdma_task_atomic_cmp_swp_completion_cb_t,
        err_cb: doca_rdma_task_atomic_cmp_swp_completion_cb_t,
        num_tasks: u32,
    ) -> doca_error_t;
    pub fn doca_rdma_task_atomic_cmp_swp_as_task(task: *mut doca_rdma_task_atomic_cmp_swp) -> *mut doca_task;
    pub fn doca_rdma_task_atomic_fetch_add_set_conf(
        rdma: *mut doca_rdma,
        ok_cb: doca_rdma_task_atomic_fetch_add_completion_cb_t,
        err_cb: doca_rdma_task_atomic_fetch_add_completion_cb_t,
        num_tasks: u32,
    ) -> doca_error_t;
    pub fn doca_rdma_task_atomic_fetch_add_as_task(task: *mut doca_rdma_task_atomic_fetch_add) -> *mut doca_task;

    pub fn doca_rdma_task_receive_allocate_init(
        rdma: *mut doca_rdma,
        dst_buf: *mut doca_buf,
        user_data: doca_data,
        task: *mut *mut doca_rdma_task_receive,
    ) -> doca_error_t;
    pub fn doca_rdma_task_send_allocate_init(
        rdma: *mut doca_rdma,
        conn: *mut doca_rdma_connection,
        src_buf: *const doca_buf,
        user_data: doca_data,
        task: *mut *mut doca_rdma_task_send,
    ) -> doca_error_t;
    pub fn doca_rdma_task_send_imm_allocate_init(
        rdma: *mut doca_rdma,
        conn: *mut doca_rdma_connection,
        src_buf: *const doca_buf,
        immediate_data: doca_be32_t,
        user_data: doca_data,
        task: *mut *mut doca_rdma_task_send_imm,
    ) -> doca_error_t;
    pub fn doca_rdma_task_read_allocate_init(
        rdma: *mut doca_rdma,
        conn: *mut doca_rdma_connection,
        src_buf: *const doca_buf,
        dst_buf: *mut doca_buf,
        user_data: doca_data,
        task: *mut *mut doca_rdma_task_read,
    ) -> doca_error_t;
    pub fn doca_rdma_task_write_allocate_init(
        rdma: *mut doca_rdma,
        conn: *mut doca_rdma_connection,
        src_buf: *const doca_buf,
        dst_buf: *mut doca_buf,
        user_data: doca_data,
        task: *mut *mut doca_rdma_task_write,
    ) -> doca_error_t;
    pub fn doca_rdma_task_write_imm_allocate_init(
        rdma: *mut doca_rdma,
        conn: *mut doca_rdma_connection,
        src_buf: *const doca_buf,
        dst_buf: *mut doca_buf,
        immediate_data: doca_be32_t,
        user_data: doca_data,
        task: *mut *mut doca_rdma_task_write_imm,
    ) -> doca_error_t;
    pub fn doca_rdma_task_atomic_cmp_swp_allocate_init(
        rdma: *mut doca_rdma,
        conn: *mut doca_rdma_connection,
        dst_buf: *mut doca_buf,
        result_buf: *mut doca_buf,
        cmp_data: u64,
        swap_data: u64,
        user_data: doca_data,
        task: *mut *mut doca_rdma_task_atomic_cmp_swp,
    ) -> doca_error_t;
    pub fn doca_rdma_task_atomic_fetch_add_allocate_init(
        rdma: *mut doca_rdma,
        conn: *mut doca_rdma_connection,
        dst_buf: *mut doca_buf,
        result_buf: *mut doca_buf,
        add_data: u64,
        user_data: doca_data,
        task: *mut *mut doca_rdma_task_atomic_fetch_add,
    ) -> doca_error_t;

    pub fn doca_rdma_task_receive_get_result_opcode(task: *const doca_rdma_task_receive) -> doca_rdma_opcode;
    pub fn doca_rdma_task_receive_get_result_len(task: *const doca_rdma_task_receive) -> u32;
    pub fn doca_rdma_task_receive_get_result_immediate_data(task: *const doca_rdma_task_receive) -> doca_be32_t;
    pub fn doca_rdma_task_receive_get_result_rdma_connection(
        task: *const doca_rdma_task_receive,
    ) -> *const doca_rdma_connection;
}

mod dev_more;
pub use dev_more::*;

mod pe_more;
pub use pe_more::*;

mod rdma_more;
pub use rdma_more::*;

mod sync_event_more;
pub use sync_event_more::*;

mod urom;
pub use urom::*;

include!("common.rs");

mod dma;
pub use dma::*;

mod comch;
pub use comch::*;

// ---- soft-provider extensions (not part of NVIDIA's DOCA) ----
//
// Memory that another process must reach without the owner's CPU (one-sided RDMA from a
// peer process, and atomics in particular) has to be shared memory on the soft provider.
// These two functions, exported by doca-soft, allocate and free such memory: zeroed,
// page-aligned, backed by a memfd that importers of an mmap over it map themselves. With the
// `system` provider a NIC reaches any registered memory, so ordinary page-aligned memory is
// used instead and these are not declared.
#[cfg(feature = "soft")]
extern "C" {
    /// Allocates `len` bytes of zeroed, page-aligned shared memory into `*out_ptr`
    /// (`DOCA_ERROR_INVALID_VALUE` for `len == 0` or a NULL out-pointer).
    pub fn doca_soft_alloc_shared(len: usize, out_ptr: *mut *mut c_void) -> doca_error_t;
    /// Frees memory from [`doca_soft_alloc_shared`] (`DOCA_ERROR_INVALID_VALUE` for any other
    /// pointer, never a double free).
    pub fn doca_soft_free_shared(ptr: *mut c_void) -> doca_error_t;
    /// Writes to `*num_tasks` how many tasks of any kind are allocated and not freed in the
    /// whole process (a leak check's counter: 0 once every context is gone).
    /// `DOCA_ERROR_INVALID_VALUE` for a NULL out-pointer.
    pub fn doca_soft_get_num_allocated_tasks(num_tasks: *mut usize) -> doca_error_t;
}

/// `doca_buf_inventory_buf_get_by_addr`: a buffer over `[addr, addr+len)` with an empty
/// payload (a destination). `static inline` in NVIDIA's header, so not exported by the
/// library; re-implemented with the same meaning.
///
/// # Safety
/// Same contract as [`doca_buf_inventory_buf_get_by_args`].
#[inline]
pub unsafe fn doca_buf_inventory_buf_get_by_addr(
    inventory: *mut doca_buf_inventory,
    mmap: *mut doca_mmap,
    addr: *mut c_void,
    len: usize,
    buf: *mut *mut doca_buf,
) -> doca_error_t {
    // SAFETY: forwarded unchanged; the caller upholds the contract of the callee.
    unsafe { doca_buf_inventory_buf_get_by_args(inventory, mmap, addr, len, addr, 0, buf) }
}

/// `doca_buf_inventory_buf_get_by_data`: a buffer whose payload is all of `[data, data+len)`
/// (a source). `static inline` in NVIDIA's header; re-implemented with the same meaning.
///
/// # Safety
/// Same contract as [`doca_buf_inventory_buf_get_by_args`].
#[inline]
pub unsafe fn doca_buf_inventory_buf_get_by_data(
    inventory: *mut doca_buf_inventory,
    mmap: *mut doca_mmap,
    data: *mut c_void,
    len: usize,
    buf: *mut *mut doca_buf,
) -> doca_error_t {
    // SAFETY: forwarded unchanged; the caller upholds the contract of the callee.
    unsafe { doca_buf_inventory_buf_get_by_args(inventory, mmap, data, len, data, len, buf) }
}

/// `doca_version`: the DOCA version these declarations describe (`DOCA_VERSION_STRING`,
/// "3.0.0058"), as opposed to [`doca_version_runtime`], the loaded library's. `static inline`
/// in DOCA's header (it reads the macro), so not exported; re-implemented with the same meaning.
///
/// # Safety
/// None: it only returns a pointer to a static string. `unsafe` for symmetry with the C API.
#[inline]
pub unsafe fn doca_version() -> *const c_char {
    DOCA_VERSION_STRING.as_ptr()
}

/// The version of NVIDIA's `doca-common` this crate was built against (feature `system`, as
/// pkg-config reported it; `None` with the soft provider or when the SDK was not found).
pub const DOCA_SYSTEM_VERSION: Option<&str> = option_env!("DOCA_SYS_DOCA_COMMON_VERSION");

/// The symbolic name of a code this crate knows (`"DOCA_ERROR_NO_MEMORY"`), without a call
/// into the provider. Unknown codes (from a newer library) give `None`.
pub fn doca_error_name(err: doca_error_t) -> Option<&'static str> {
    usize::try_from(err.0).ok().and_then(|i| DOCA_ERROR_NAMES.get(i).copied())
}

#[cfg(test)]
mod build_version_tests {
    extern crate std;
    use std::format;
    use std::string::String;

    // The rule build.rs applies to the DOCA found by pkg-config (feature `system`).
    include!("../build/version.rs");

    #[test]
    fn accepts_every_3x_version() {
        for v in ["3.0.0", "3.1.0105", "3.2", " 3.0.0\n"] {
            assert_eq!(check_doca_version("doca-common", v), Ok(()), "{v}");
        }
    }

    #[test]
    fn rejects_other_majors_naming_the_version_found() {
        for v in ["2.9.1", "2.5.0", "4.0.0", "1.5"] {
            let msg: String = check_doca_version("doca-rdma", v).unwrap_err();
            assert!(msg.contains(v.trim()) && msg.contains("doca-rdma") && msg.contains("3.x"), "{msg}");
        }
        assert!(check_doca_version("doca-common", "2.2.0").unwrap_err().contains("progress engine"));
    }

    #[test]
    fn rejects_a_version_that_is_not_a_number() {
        assert!(check_doca_version("doca-urom", "dev").is_err());
        assert!(check_doca_version("doca-urom", "").is_err());
    }
}

/// The layout of every public struct of the API, as the C rules give it on the 64-bit Linux
/// targets DOCA supports (LP64: 8-byte pointers and `size_t`, 4-byte `int` and enums). The C
/// side prints the same numbers from our headers and `tests/c_abi.rs` compares the two; these
/// assertions keep the Rust side honest on machines without a C compiler.
#[cfg(test)]
mod layout_tests {
    use super::*;
    use core::mem::{align_of, offset_of, size_of};

    #[test]
    fn value_types() {
        assert_eq!((size_of::<doca_data>(), align_of::<doca_data>()), (8, 8));
        assert_eq!((offset_of!(doca_data, ptr), offset_of!(doca_data, u64_)), (0, 0));
        assert_eq!(size_of::<doca_error_t>(), 4);
        assert_eq!(size_of::<doca_notification_handle_t>(), 4);
        assert_eq!(size_of::<doca_be32_t>(), 4);
        assert_eq!(size_of::<doca_ctx_states>(), 4);
        assert_eq!(size_of::<doca_rdma_opcode>(), 4);
        assert_eq!((size_of::<doca_cpu_set_t>(), align_of::<doca_cpu_set_t>()), (128, 8));
        // Callbacks are nullable function pointers: one pointer, NULL is None.
        assert_eq!(size_of::<doca_task_completion_cb_t>(), 8);
        assert_eq!(size_of::<doca_ctx_state_changed_callback_t>(), 8);
    }

    #[test]
    fn urom_host_structs() {
        type P = doca_urom_service_plugin_info;
        assert_eq!(size_of::<P>(), 64);
        assert_eq!((offset_of!(P, id), offset_of!(P, version), offset_of!(P, plugin_name)), (0, 8, 16));
        type O = doca_urom_domain_oob_coll;
        assert_eq!(size_of::<O>(), 40);
        let offs = [
            offset_of!(O, allgather),
            offset_of!(O, req_test),
            offset_of!(O, req_free),
            offset_of!(O, coll_info),
            offset_of!(O, n_oob_indexes),
            offset_of!(O, oob_index),
        ];
        assert_eq!(offs, [0, 8, 16, 24, 32, 36]);
    }

    #[test]
    fn urom_plugin_structs() {
        assert_eq!(size_of::<urom_worker_cmd>(), 24);
        assert_eq!(offset_of!(urom_worker_cmd, plugin_cmd), 24);
        assert_eq!(size_of::<urom_worker_notify>(), 32);
        assert_eq!((offset_of!(urom_worker_notify, status), offset_of!(urom_worker_notify, reserved)), (24, 28));
        assert_eq!(offset_of!(urom_worker_notify, plugin_notif), 32);
        assert_eq!(size_of::<ucs_list_link>(), 16);
        assert_eq!((offset_of!(urom_worker_cmd_desc, dest_id), offset_of!(urom_worker_cmd_desc, worker_cmd)), (16, 24));
        assert_eq!(
            (offset_of!(urom_worker_notif_desc, dest_id), offset_of!(urom_worker_notif_desc, worker_notif)),
            (16, 24)
        );
        assert_eq!(size_of::<urom_plugin_iface>(), 56);
        assert_eq!(offset_of!(urom_plugin_iface, notif_pack), 48);
        assert_eq!(size_of::<urom_domain_lookups_iface>(), 32);
        assert_eq!(
            (
                offset_of!(urom_worker_ctx, iface),
                offset_of!(urom_worker_ctx, domain_iface),
                offset_of!(urom_worker_ctx, plugin_ctx)
            ),
            (0, 56, 88)
        );
    }
}
