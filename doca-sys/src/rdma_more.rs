//! RDMA configuration, capabilities and per-task accessors (`doca_rdma.h`, DOCA 3.0; every
//! function experimental there), and the connection management by address (RDMA CM).
//!
//! Properties are set while the ctx is IDLE (`DOCA_ERROR_BAD_STATE` after start) and read
//! back in any state. Task setters return nothing and may only be used while the caller owns
//! the task (before submit or inside its completion callback), to re-use it.

use super::*;

opaque!(
    /// An RDMA context's handle for a GPU data path.
    doca_gpu_dev_rdma,
    /// A DPA completion context.
    doca_dpa_completion,
    /// An address to listen on or connect to (connection management).
    doca_rdma_addr,
    /// RDMA task: read a peer's sync event.
    doca_rdma_task_remote_net_sync_event_get,
    /// RDMA task: set a peer's sync event.
    doca_rdma_task_remote_net_sync_event_notify_set,
    /// RDMA task: add to a peer's sync event, fetching the old value.
    doca_rdma_task_remote_net_sync_event_notify_add,
);

extern "C" {
    pub fn doca_rdma_set_transport_type(rdma: *mut doca_rdma, transport_type: doca_rdma_transport_type)
        -> doca_error_t;
    pub fn doca_rdma_get_transport_type(
        rdma: *const doca_rdma,
        transport_type: *mut doca_rdma_transport_type,
    ) -> doca_error_t;
    pub fn doca_rdma_set_mtu(rdma: *mut doca_rdma, mtu: doca_mtu_size) -> doca_error_t;
    pub fn doca_rdma_get_mtu(rdma: *const doca_rdma, mtu: *mut doca_mtu_size) -> doca_error_t;
    pub fn doca_rdma_set_grh_enabled(rdma: *mut doca_rdma, grh_enabled: u8) -> doca_error_t;
    pub fn doca_rdma_get_grh_enabled(rdma: *const doca_rdma, grh_enabled: *mut u8) -> doca_error_t;
    pub fn doca_rdma_set_gid_index(rdma: *mut doca_rdma, gid_index: u32) -> doca_error_t;
    pub fn doca_rdma_get_gid_index(rdma: *const doca_rdma, gid_index: *mut u32) -> doca_error_t;
    pub fn doca_rdma_set_sl(rdma: *mut doca_rdma, sl: u32) -> doca_error_t;
    pub fn doca_rdma_get_sl(rdma: *const doca_rdma, sl: *mut u32) -> doca_error_t;
    pub fn doca_rdma_set_rnr_retry_count(rdma: *mut doca_rdma, rnr_retry_count: u8) -> doca_error_t;
    pub fn doca_rdma_get_rnr_retry_count(rdma: *const doca_rdma, rnr_retry_count: *mut u8) -> doca_error_t;
    pub fn doca_rdma_set_connection_request_timeout(rdma: *mut doca_rdma, timeout: u16) -> doca_error_t;
    pub fn doca_rdma_get_connection_request_timeout(rdma: *const doca_rdma, timeout: *mut u16) -> doca_error_t;
    pub fn doca_rdma_set_max_send_buf_list_len(rdma: *mut doca_rdma, max_send_buf_list_len: u32) -> doca_error_t;
    pub fn doca_rdma_get_max_send_buf_list_len(rdma: *const doca_rdma, max_send_buf_list_len: *mut u32)
        -> doca_error_t;
    pub fn doca_rdma_get_permissions(rdma: *mut doca_rdma, permissions: *mut u32) -> doca_error_t;
    pub fn doca_rdma_get_max_num_connections(rdma: *mut doca_rdma, max_num_connections: *mut u16) -> doca_error_t;
    pub fn doca_rdma_get_send_queue_size(rdma: *const doca_rdma, send_queue_size: *mut u32) -> doca_error_t;
    pub fn doca_rdma_get_recv_queue_size(rdma: *const doca_rdma, recv_queue_size: *mut u32) -> doca_error_t;
    pub fn doca_rdma_task_receive_set_dst_buf_list_len(rdma: *mut doca_rdma, buf_list_len: u32) -> doca_error_t;
    pub fn doca_rdma_task_receive_get_dst_buf_list_len(rdma: *const doca_rdma, buf_list_len: *mut u32) -> doca_error_t;
    pub fn doca_rdma_get_dpa_handle(rdma: *mut doca_rdma, dpa_rdma: *mut doca_dpa_dev_rdma_t) -> doca_error_t;
    pub fn doca_rdma_get_gpu_handle(rdma: *mut doca_rdma, gpu_rdma: *mut *mut doca_gpu_dev_rdma) -> doca_error_t;
    pub fn doca_rdma_dpa_completion_attach(rdma: *mut doca_rdma, dpa_comp: *mut doca_dpa_completion) -> doca_error_t;

    // ---- capabilities of a device ----
    pub fn doca_rdma_cap_get_max_recv_queue_size(
        devinfo: *const doca_devinfo,
        max_recv_queue_size: *mut u32,
    ) -> doca_error_t;
    pub fn doca_rdma_cap_get_max_send_queue_size(
        devinfo: *const doca_devinfo,
        max_send_queue_size: *mut u32,
    ) -> doca_error_t;
    pub fn doca_rdma_cap_get_max_send_buf_list_len(
        devinfo: *const doca_devinfo,
        max_send_buf_list_len: *mut u32,
    ) -> doca_error_t;
    pub fn doca_rdma_cap_get_max_message_size(devinfo: *const doca_devinfo, max_message_size: *mut u32)
        -> doca_error_t;
    pub fn doca_rdma_cap_get_gid_table_size(devinfo: *const doca_devinfo, gid_table_size: *mut u32) -> doca_error_t;
    pub fn doca_rdma_cap_get_gid(
        devinfo: *const doca_devinfo,
        start_index: u32,
        num_entries: u32,
        gid_array: *mut doca_rdma_gid,
    ) -> doca_error_t;
    pub fn doca_rdma_cap_transport_type_is_supported(
        devinfo: *const doca_devinfo,
        transport_type: doca_rdma_transport_type,
    ) -> doca_error_t;
    pub fn doca_rdma_cap_task_receive_get_max_dst_buf_list_len(
        devinfo: *const doca_devinfo,
        transport_type: doca_rdma_transport_type,
        max_buf_list_len: *mut u32,
    ) -> doca_error_t;
    /// SUCCESS when the device supports the task type, NOT_SUPPORTED otherwise.
    pub fn doca_rdma_cap_task_receive_is_supported(devinfo: *const doca_devinfo) -> doca_error_t;
    pub fn doca_rdma_cap_task_send_is_supported(devinfo: *const doca_devinfo) -> doca_error_t;
    pub fn doca_rdma_cap_task_send_imm_is_supported(devinfo: *const doca_devinfo) -> doca_error_t;
    pub fn doca_rdma_cap_task_read_is_supported(devinfo: *const doca_devinfo) -> doca_error_t;
    pub fn doca_rdma_cap_task_write_is_supported(devinfo: *const doca_devinfo) -> doca_error_t;
    pub fn doca_rdma_cap_task_write_imm_is_supported(devinfo: *const doca_devinfo) -> doca_error_t;
    pub fn doca_rdma_cap_task_atomic_cmp_swp_is_supported(devinfo: *const doca_devinfo) -> doca_error_t;
    pub fn doca_rdma_cap_task_atomic_fetch_add_is_supported(devinfo: *const doca_devinfo) -> doca_error_t;

    // ---- task accessors (re-use) ----
    pub fn doca_rdma_task_receive_set_dst_buf(task: *mut doca_rdma_task_receive, dst_buf: *mut doca_buf);
    pub fn doca_rdma_task_receive_get_dst_buf(task: *const doca_rdma_task_receive) -> *mut doca_buf;
    pub fn doca_rdma_task_send_set_src_buf(task: *mut doca_rdma_task_send, src_buf: *const doca_buf);
    pub fn doca_rdma_task_send_get_src_buf(task: *const doca_rdma_task_send) -> *const doca_buf;
    pub fn doca_rdma_task_send_set_rdma_connection(
        task: *mut doca_rdma_task_send,
        rdma_connection: *mut doca_rdma_connection,
    );
    pub fn doca_rdma_task_send_get_rdma_connection(task: *const doca_rdma_task_send) -> *const doca_rdma_connection;
    pub fn doca_rdma_task_send_imm_set_src_buf(task: *mut doca_rdma_task_send_imm, src_buf: *const doca_buf);
    pub fn doca_rdma_task_send_imm_get_src_buf(task: *const doca_rdma_task_send_imm) -> *const doca_buf;
    pub fn doca_rdma_task_send_imm_set_immediate_data(task: *mut doca_rdma_task_send_imm, immediate_data: doca_be32_t);
    pub fn doca_rdma_task_send_imm_get_immediate_data(task: *const doca_rdma_task_send_imm) -> doca_be32_t;
    pub fn doca_rdma_task_send_imm_set_rdma_connection(
        task: *mut doca_rdma_task_send_imm,
        rdma_connection: *mut doca_rdma_connection,
    );
    pub fn doca_rdma_task_send_imm_get_rdma_connection(
        task: *const doca_rdma_task_send_imm,
    ) -> *const doca_rdma_connection;
    pub fn doca_rdma_task_read_set_src_buf(task: *mut doca_rdma_task_read, src_buf: *const doca_buf);
    pub fn doca_rdma_task_read_get_src_buf(task: *const doca_rdma_task_read) -> *const doca_buf;
    pub fn doca_rdma_task_read_set_dst_buf(task: *mut doca_rdma_task_read, dst_buf: *mut doca_buf);
    pub fn doca_rdma_task_read_get_dst_buf(task: *const doca_rdma_task_read) -> *mut doca_buf;
    pub fn doca_rdma_task_read_set_rdma_connection(
        task: *mut doca_rdma_task_read,
        rdma_connection: *mut doca_rdma_connection,
    );
    pub fn doca_rdma_task_read_get_rdma_connection(task: *const doca_rdma_task_read) -> *const doca_rdma_connection;
    /// Bytes read (the source's data length); valid after a successful completion only.
    pub fn doca_rdma_task_read_get_result_len(task: *const doca_rdma_task_read) -> u32;
    pub fn doca_rdma_task_write_set_src_buf(task: *mut doca_rdma_task_write, src_buf: *const doca_buf);
    pub fn doca_rdma_task_write_get_src_buf(task: *const doca_rdma_task_write) -> *const doca_buf;
    pub fn doca_rdma_task_write_set_dst_buf(task: *mut doca_rdma_task_write, dst_buf: *mut doca_buf);
    pub fn doca_rdma_task_write_get_dst_buf(task: *const doca_rdma_task_write) -> *mut doca_buf;
    pub fn doca_rdma_task_write_set_rdma_connection(
        task: *mut doca_rdma_task_write,
        rdma_connection: *mut doca_rdma_connection,
    );
    pub fn doca_rdma_task_write_get_rdma_connection(task: *const doca_rdma_task_write) -> *const doca_rdma_connection;
    pub fn doca_rdma_task_write_imm_set_src_buf(task: *mut doca_rdma_task_write_imm, src_buf: *const doca_buf);
    pub fn doca_rdma_task_write_imm_get_src_buf(task: *const doca_rdma_task_write_imm) -> *const doca_buf;
    pub fn doca_rdma_task_write_imm_set_dst_buf(task: *mut doca_rdma_task_write_imm, dst_buf: *mut doca_buf);
    pub fn doca_rdma_task_write_imm_get_dst_buf(task: *const doca_rdma_task_write_imm) -> *mut doca_buf;
    pub fn doca_rdma_task_write_imm_set_immediate_data(
        task: *mut doca_rdma_task_write_imm,
        immediate_data: doca_be32_t,
    );
    pub fn doca_rdma_task_write_imm_get_immediate_data(task: *const doca_rdma_task_write_imm) -> doca_be32_t;
    pub fn doca_rdma_task_write_imm_set_rdma_connection(
        task: *mut doca_rdma_task_write_imm,
        rdma_connection: *mut doca_rdma_connection,
    );
    pub fn doca_rdma_task_write_imm_get_rdma_connection(
        task: *const doca_rdma_task_write_imm,
    ) -> *const doca_rdma_connection;
    pub fn doca_rdma_task_atomic_cmp_swp_set_dst_buf(task: *mut doca_rdma_task_atomic_cmp_swp, dst_buf: *mut doca_buf);
    pub fn doca_rdma_task_atomic_cmp_swp_get_dst_buf(task: *const doca_rdma_task_atomic_cmp_swp) -> *mut doca_buf;
    pub fn doca_rdma_task_atomic_cmp_swp_set_result_buf(
        task: *mut doca_rdma_task_atomic_cmp_swp,
        result_buf: *mut doca_buf,
    );
    pub fn doca_rdma_task_atomic_cmp_swp_get_result_buf(task: *const doca_rdma_task_atomic_cmp_swp) -> *mut doca_buf;
    pub fn doca_rdma_task_atomic_cmp_swp_set_cmp_data(task: *mut doca_rdma_task_atomic_cmp_swp, cmp_data: u64);
    pub fn doca_rdma_task_atomic_cmp_swp_get_cmp_data(task: *const doca_rdma_task_atomic_cmp_swp) -> u64;
    pub fn doca_rdma_task_atomic_cmp_swp_set_swap_data(task: *mut doca_rdma_task_atomic_cmp_swp, swap_data: u64);
    pub fn doca_rdma_task_atomic_cmp_swp_get_swap_data(task: *const doca_rdma_task_atomic_cmp_swp) -> u64;
    pub fn doca_rdma_task_atomic_cmp_swp_set_rdma_connection(
        task: *mut doca_rdma_task_atomic_cmp_swp,
        rdma_connection: *mut doca_rdma_connection,
    );
    pub fn doca_rdma_task_atomic_cmp_swp_get_rdma_connection(
        task: *const doca_rdma_task_atomic_cmp_swp,
    ) -> *const doca_rdma_connection;
    pub fn doca_rdma_task_atomic_fetch_add_set_dst_buf(
        task: *mut doca_rdma_task_atomic_fetch_add,
        dst_buf: *mut doca_buf,
    );
    pub fn doca_rdma_task_atomic_fetch_add_get_dst_buf(task: *const doca_rdma_task_atomic_fetch_add) -> *mut doca_buf;
    pub fn doca_rdma_task_atomic_fetch_add_set_result_buf(
        task: *mut doca_rdma_task_atomic_fetch_add,
        result_buf: *mut doca_buf,
    );
    pub fn doca_rdma_task_atomic_fetch_add_get_result_buf(
        task: *const doca_rdma_task_atomic_fetch_add,
    ) -> *mut doca_buf;
    pub fn doca_rdma_task_atomic_fetch_add_set_add_data(task: *mut doca_rdma_task_atomic_fetch_add, add_data: u64);
    pub fn doca_rdma_task_atomic_fetch_add_get_add_data(task: *const doca_rdma_task_atomic_fetch_add) -> u64;
    pub fn doca_rdma_task_atomic_fetch_add_set_rdma_connection(
        task: *mut doca_rdma_task_atomic_fetch_add,
        rdma_connection: *mut doca_rdma_connection,
    );
    pub fn doca_rdma_task_atomic_fetch_add_get_rdma_connection(
        task: *const doca_rdma_task_atomic_fetch_add,
    ) -> *const doca_rdma_connection;
}

// ---- connection management by address ----
extern "C" {
    pub fn doca_rdma_set_connection_state_callbacks(
        rdma: *mut doca_rdma,
        doca_rdma_connect_request_cb: doca_rdma_connection_request_cb_t,
        doca_rdma_connect_established_cb: doca_rdma_connection_established_cb_t,
        doca_rdma_connect_failure_cb: doca_rdma_connection_failure_cb_t,
        doca_rdma_disconnect_cb: doca_rdma_connection_disconnection_cb_t,
    ) -> doca_error_t;
    pub fn doca_rdma_addr_create(
        addr_type: doca_rdma_addr_type,
        address: *const c_char,
        port: u16,
        addr: *mut *mut doca_rdma_addr,
    ) -> doca_error_t;
    pub fn doca_rdma_addr_destroy(addr: *mut doca_rdma_addr) -> doca_error_t;
    pub fn doca_rdma_addr_get_params(
        addr: *mut doca_rdma_addr,
        addr_type: *mut doca_rdma_addr_type,
        address: *mut *const c_char,
        port: *mut u16,
    ) -> doca_error_t;
    pub fn doca_rdma_start_listen_to_port(rdma: *mut doca_rdma, port: u16) -> doca_error_t;
    pub fn doca_rdma_stop_listen_to_port(rdma: *mut doca_rdma, port: u16) -> doca_error_t;
    pub fn doca_rdma_connect_to_addr(
        rdma: *mut doca_rdma,
        addr: *mut doca_rdma_addr,
        connection_user_data: doca_data,
    ) -> doca_error_t;
    pub fn doca_rdma_connection_accept(
        rdma_connection: *mut doca_rdma_connection,
        private_data: *mut core::ffi::c_void,
        private_data_len: u8,
    ) -> doca_error_t;
    pub fn doca_rdma_connection_reject(rdma_connection: *mut doca_rdma_connection) -> doca_error_t;
    pub fn doca_rdma_connection_disconnect(rdma_connection: *mut doca_rdma_connection) -> doca_error_t;
    pub fn doca_rdma_connection_set_user_data(
        rdma_connection: *mut doca_rdma_connection,
        connection_user_data: doca_data,
    ) -> doca_error_t;
    pub fn doca_rdma_connection_get_user_data(
        rdma_connection: *const doca_rdma_connection,
        connection_user_data: *mut doca_data,
    ) -> doca_error_t;
    pub fn doca_rdma_connection_get_id(
        rdma_connection: *const doca_rdma_connection,
        connection_id: *mut u32,
    ) -> doca_error_t;
    pub fn doca_rdma_connection_get_addr(
        rdma_connection: *const doca_rdma_connection,
        addr: *mut *mut doca_rdma_addr,
    ) -> doca_error_t;
}

// A soft-provider extension (`doca_soft.h`): the private data of the server's accept, read
// on the client's connection once established (`data` has room for 255 bytes).
#[cfg(feature = "soft")]
extern "C" {
    pub fn doca_soft_rdma_connection_get_private_data(
        rdma_connection: *const doca_rdma_connection,
        data: *mut u8,
        len: *mut u8,
    ) -> doca_error_t;
}

// ---- remote-net sync event tasks ----
extern "C" {
    pub fn doca_rdma_cap_task_remote_net_sync_event_get_is_supported(devinfo: *const doca_devinfo) -> doca_error_t;
    pub fn doca_rdma_task_remote_net_sync_event_get_set_conf(
        rdma: *mut doca_rdma,
        successful_task_completion_cb: doca_rdma_task_remote_net_sync_event_get_completion_cb_t,
        error_task_completion_cb: doca_rdma_task_remote_net_sync_event_get_completion_cb_t,
        num_tasks: u32,
    ) -> doca_error_t;
    pub fn doca_rdma_task_remote_net_sync_event_get_as_task(
        task: *mut doca_rdma_task_remote_net_sync_event_get,
    ) -> *mut doca_task;
    pub fn doca_rdma_task_remote_net_sync_event_get_allocate_init(
        rdma: *mut doca_rdma,
        rdma_connection: *mut doca_rdma_connection,
        event: *const doca_sync_event_remote_net,
        dst_buf: *mut doca_buf,
        user_data: doca_data,
        task: *mut *mut doca_rdma_task_remote_net_sync_event_get,
    ) -> doca_error_t;
    pub fn doca_rdma_task_remote_net_sync_event_get_set_sync_event(
        task: *mut doca_rdma_task_remote_net_sync_event_get,
        sync_event: *const doca_sync_event_remote_net,
    );
    pub fn doca_rdma_task_remote_net_sync_event_get_get_sync_event(
        task: *const doca_rdma_task_remote_net_sync_event_get,
    ) -> *const doca_sync_event_remote_net;
    pub fn doca_rdma_task_remote_net_sync_event_get_set_dst_buf(
        task: *mut doca_rdma_task_remote_net_sync_event_get,
        dst_buf: *mut doca_buf,
    );
    pub fn doca_rdma_task_remote_net_sync_event_get_get_dst_buf(
        task: *const doca_rdma_task_remote_net_sync_event_get,
    ) -> *mut doca_buf;
    pub fn doca_rdma_task_remote_net_sync_event_get_set_rdma_connection(
        task: *mut doca_rdma_task_remote_net_sync_event_get,
        rdma_connection: *mut doca_rdma_connection,
    );
    pub fn doca_rdma_task_remote_net_sync_event_get_get_rdma_connection(
        task: *const doca_rdma_task_remote_net_sync_event_get,
    ) -> *const doca_rdma_connection;
    pub fn doca_rdma_cap_task_remote_net_sync_event_notify_set_is_supported(
        devinfo: *const doca_devinfo,
    ) -> doca_error_t;
    pub fn doca_rdma_task_remote_net_sync_event_notify_set_set_conf(
        rdma: *mut doca_rdma,
        successful_task_completion_cb: doca_rdma_task_remote_net_sync_event_notify_set_completion_cb_t,
        error_task_completion_cb: doca_rdma_task_remote_net_sync_event_notify_set_completion_cb_t,
        num_tasks: u32,
    ) -> doca_error_t;
    pub fn doca_rdma_task_remote_net_sync_event_notify_set_as_task(
        task: *mut doca_rdma_task_remote_net_sync_event_notify_set,
    ) -> *mut doca_task;
    pub fn doca_rdma_task_remote_net_sync_event_notify_set_allocate_init(
        rdma: *mut doca_rdma,
        rdma_connection: *mut doca_rdma_connection,
        event: *mut doca_sync_event_remote_net,
        src_buf: *const doca_buf,
        user_data: doca_data,
        task: *mut *mut doca_rdma_task_remote_net_sync_event_notify_set,
    ) -> doca_error_t;
    pub fn doca_rdma_task_remote_net_sync_event_notify_set_set_sync_event(
        task: *mut doca_rdma_task_remote_net_sync_event_notify_set,
        sync_event: *mut doca_sync_event_remote_net,
    );
    pub fn doca_rdma_task_remote_net_sync_event_notify_set_get_sync_event(
        task: *const doca_rdma_task_remote_net_sync_event_notify_set,
    ) -> *mut doca_sync_event_remote_net;
    pub fn doca_rdma_task_remote_net_sync_event_notify_set_set_src_buf(
        task: *mut doca_rdma_task_remote_net_sync_event_notify_set,
        src_buf: *const doca_buf,
    );
    pub fn doca_rdma_task_remote_net_sync_event_notify_set_get_src_buf(
        task: *const doca_rdma_task_remote_net_sync_event_notify_set,
    ) -> *const doca_buf;
    pub fn doca_rdma_task_remote_net_sync_event_notify_set_set_rdma_connection(
        task: *mut doca_rdma_task_remote_net_sync_event_notify_set,
        rdma_connection: *mut doca_rdma_connection,
    );
    pub fn doca_rdma_task_remote_net_sync_event_notify_set_get_rdma_connection(
        task: *const doca_rdma_task_remote_net_sync_event_notify_set,
    ) -> *const doca_rdma_connection;
    pub fn doca_rdma_cap_task_remote_net_sync_event_notify_add_is_supported(
        devinfo: *const doca_devinfo,
    ) -> doca_error_t;
    pub fn doca_rdma_task_remote_net_sync_event_notify_add_set_conf(
        rdma: *mut doca_rdma,
        successful_task_completion_cb: doca_rdma_task_remote_net_sync_event_notify_add_completion_cb_t,
        error_task_completion_cb: doca_rdma_task_remote_net_sync_event_notify_add_completion_cb_t,
        num_tasks: u32,
    ) -> doca_error_t;
    pub fn doca_rdma_task_remote_net_sync_event_notify_add_as_task(
        task: *mut doca_rdma_task_remote_net_sync_event_notify_add,
    ) -> *mut doca_task;
    pub fn doca_rdma_task_remote_net_sync_event_notify_add_allocate_init(
        rdma: *mut doca_rdma,
        rdma_connection: *mut doca_rdma_connection,
        event: *mut doca_sync_event_remote_net,
        result_buf: *mut doca_buf,
        add_data: u64,
        user_data: doca_data,
        task: *mut *mut doca_rdma_task_remote_net_sync_event_notify_add,
    ) -> doca_error_t;
    pub fn doca_rdma_task_remote_net_sync_event_notify_add_set_sync_event(
        task: *mut doca_rdma_task_remote_net_sync_event_notify_add,
        sync_event: *mut doca_sync_event_remote_net,
    );
    pub fn doca_rdma_task_remote_net_sync_event_notify_add_get_sync_event(
        task: *const doca_rdma_task_remote_net_sync_event_notify_add,
    ) -> *mut doca_sync_event_remote_net;
    pub fn doca_rdma_task_remote_net_sync_event_notify_add_set_result_buf(
        task: *mut doca_rdma_task_remote_net_sync_event_notify_add,
        result_buf: *mut doca_buf,
    );
    pub fn doca_rdma_task_remote_net_sync_event_notify_add_get_result_buf(
        task: *const doca_rdma_task_remote_net_sync_event_notify_add,
    ) -> *mut doca_buf;
    pub fn doca_rdma_task_remote_net_sync_event_notify_add_set_add_data(
        task: *mut doca_rdma_task_remote_net_sync_event_notify_add,
        add_data: u64,
    );
    pub fn doca_rdma_task_remote_net_sync_event_notify_add_get_add_data(
        task: *const doca_rdma_task_remote_net_sync_event_notify_add,
    ) -> u64;
    pub fn doca_rdma_task_remote_net_sync_event_notify_add_set_rdma_connection(
        task: *mut doca_rdma_task_remote_net_sync_event_notify_add,
        rdma_connection: *mut doca_rdma_connection,
    );
    pub fn doca_rdma_task_remote_net_sync_event_notify_add_get_rdma_connection(
        task: *const doca_rdma_task_remote_net_sync_event_notify_add,
    ) -> *const doca_rdma_connection;
}
