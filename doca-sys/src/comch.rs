//! DOCA Comch (`doca-comch`, `doca_comch.h`): the communication channel between a DPU program
//! (the server, bound to a representor of the host function it serves and a name) and host
//! programs (clients of that name). Messages are sent with a task and received as an event.
//!
//! The consumer/producer fast path (`doca_comch_consumer.h`, `doca_comch_producer.h`) is
//! declared without its DPA functions.

use super::{doca_buf, doca_ctx, doca_data, doca_dev, doca_dev_rep, doca_devinfo, doca_error_t, doca_mmap, doca_task};
use core::ffi::{c_char, c_void};

include!("comch_types.rs");
include!("comch_fast_types.rs");

opaque!(
    /// The DPU side of a channel (a ctx): accepts clients connecting to its name.
    doca_comch_server,
    /// The host side of a channel (a ctx): one connection to the server of its name.
    doca_comch_client,
    /// One client's connection, on either side.
    doca_comch_connection,
    /// Comch task: send one message on a connection.
    doca_comch_task_send,
    /// The event object passed to receive callbacks.
    doca_comch_event_msg_recv,
    /// The event object passed to connection status callbacks.
    doca_comch_event_connection_status_changed,
    /// The event object passed to consumer callbacks.
    doca_comch_event_consumer,
    /// Fast path: a consumer (a ctx) posting receive buffers on a connection.
    doca_comch_consumer,
    /// Fast path: a producer (a ctx) sending buffers to a consumer of the peer.
    doca_comch_producer,
    /// Fast path: a consumer's post-receive task.
    doca_comch_consumer_task_post_recv,
    /// Fast path: a producer's send task.
    doca_comch_producer_task_send,
);

extern "C" {
    pub fn doca_comch_cap_get_max_name_len(devinfo: *const doca_devinfo, max_name_len: *mut u32) -> doca_error_t;
    pub fn doca_comch_cap_get_max_msg_size(devinfo: *const doca_devinfo, size: *mut u32) -> doca_error_t;
    pub fn doca_comch_cap_get_max_recv_queue_size(devinfo: *const doca_devinfo, size: *mut u32) -> doca_error_t;
    pub fn doca_comch_cap_get_max_clients(devinfo: *const doca_devinfo, num_clients: *mut u32) -> doca_error_t;
    pub fn doca_comch_cap_get_max_send_tasks(devinfo: *const doca_devinfo, max_send_tasks: *mut u32) -> doca_error_t;
    pub fn doca_comch_cap_server_is_supported(devinfo: *const doca_devinfo) -> doca_error_t;
    pub fn doca_comch_cap_client_is_supported(devinfo: *const doca_devinfo) -> doca_error_t;

    pub fn doca_comch_server_create(
        dev: *mut doca_dev,
        repr: *mut doca_dev_rep,
        name: *const c_char,
        comch_server: *mut *mut doca_comch_server,
    ) -> doca_error_t;
    pub fn doca_comch_server_destroy(comch_server: *mut doca_comch_server) -> doca_error_t;
    pub fn doca_comch_server_as_ctx(comch_server: *mut doca_comch_server) -> *mut doca_ctx;
    pub fn doca_comch_server_set_max_msg_size(comch_server: *mut doca_comch_server, size: u32) -> doca_error_t;
    pub fn doca_comch_server_get_max_msg_size(comch_server: *const doca_comch_server, size: *mut u32) -> doca_error_t;
    pub fn doca_comch_server_set_recv_queue_size(comch_server: *mut doca_comch_server, size: u32) -> doca_error_t;
    pub fn doca_comch_server_get_recv_queue_size(
        comch_server: *const doca_comch_server,
        size: *mut u32,
    ) -> doca_error_t;
    pub fn doca_comch_server_get_device(
        comch_server: *const doca_comch_server,
        dev: *mut *mut doca_dev,
    ) -> doca_error_t;
    pub fn doca_comch_server_get_device_rep(
        comch_server: *const doca_comch_server,
        rep: *mut *mut doca_dev_rep,
    ) -> doca_error_t;
    pub fn doca_comch_server_disconnect(
        comch_server: *mut doca_comch_server,
        connection: *mut doca_comch_connection,
    ) -> doca_error_t;

    pub fn doca_comch_client_create(
        dev: *mut doca_dev,
        name: *const c_char,
        comch_client: *mut *mut doca_comch_client,
    ) -> doca_error_t;
    pub fn doca_comch_client_destroy(comch_client: *mut doca_comch_client) -> doca_error_t;
    pub fn doca_comch_client_as_ctx(comch_client: *mut doca_comch_client) -> *mut doca_ctx;
    pub fn doca_comch_client_set_max_msg_size(comch_client: *mut doca_comch_client, size: u32) -> doca_error_t;
    pub fn doca_comch_client_get_max_msg_size(comch_client: *const doca_comch_client, size: *mut u32) -> doca_error_t;
    pub fn doca_comch_client_set_recv_queue_size(comch_client: *mut doca_comch_client, size: u32) -> doca_error_t;
    pub fn doca_comch_client_get_recv_queue_size(
        comch_client: *const doca_comch_client,
        size: *mut u32,
    ) -> doca_error_t;
    pub fn doca_comch_client_get_device(
        comch_client: *const doca_comch_client,
        dev: *mut *mut doca_dev,
    ) -> doca_error_t;
    pub fn doca_comch_client_get_connection(
        comch_client: *const doca_comch_client,
        connection: *mut *mut doca_comch_connection,
    ) -> doca_error_t;

    pub fn doca_comch_connection_set_user_data(
        connection: *mut doca_comch_connection,
        user_data: doca_data,
    ) -> doca_error_t;
    pub fn doca_comch_connection_get_user_data(connection: *const doca_comch_connection) -> doca_data;
    pub fn doca_comch_server_get_server_ctx(connection: *const doca_comch_connection) -> *mut doca_comch_server;
    pub fn doca_comch_client_get_client_ctx(connection: *const doca_comch_connection) -> *mut doca_comch_client;

    pub fn doca_comch_server_task_send_set_conf(
        comch_server: *mut doca_comch_server,
        task_completion_cb: doca_comch_task_send_completion_cb_t,
        task_error_cb: doca_comch_task_send_completion_cb_t,
        num_send_tasks: u32,
    ) -> doca_error_t;
    pub fn doca_comch_client_task_send_set_conf(
        comch_client: *mut doca_comch_client,
        task_completion_cb: doca_comch_task_send_completion_cb_t,
        task_error_cb: doca_comch_task_send_completion_cb_t,
        num_send_tasks: u32,
    ) -> doca_error_t;
    pub fn doca_comch_server_task_send_alloc_init(
        comch_server: *mut doca_comch_server,
        peer: *mut doca_comch_connection,
        msg: *const c_void,
        len: u32,
        task: *mut *mut doca_comch_task_send,
    ) -> doca_error_t;
    pub fn doca_comch_client_task_send_alloc_init(
        comch_client: *mut doca_comch_client,
        peer: *mut doca_comch_connection,
        msg: *const c_void,
        len: u32,
        task: *mut *mut doca_comch_task_send,
    ) -> doca_error_t;
    pub fn doca_comch_task_send_as_task(task: *mut doca_comch_task_send) -> *mut doca_task;

    pub fn doca_comch_server_event_msg_recv_register(
        comch_server: *mut doca_comch_server,
        recv_event_cb: doca_comch_event_msg_recv_cb_t,
    ) -> doca_error_t;
    pub fn doca_comch_client_event_msg_recv_register(
        comch_client: *mut doca_comch_client,
        recv_event_cb: doca_comch_event_msg_recv_cb_t,
    ) -> doca_error_t;
    pub fn doca_comch_server_event_connection_status_changed_register(
        comch_server: *mut doca_comch_server,
        connect_event_cb: doca_comch_event_connection_status_changed_cb_t,
        disconnect_event_cb: doca_comch_event_connection_status_changed_cb_t,
    ) -> doca_error_t;

    pub fn doca_comch_server_event_consumer_register(
        comch_server: *mut doca_comch_server,
        new_consumer_event_cb: doca_comch_event_consumer_cb_t,
        expired_consumer_event_cb: doca_comch_event_consumer_cb_t,
    ) -> doca_error_t;
    pub fn doca_comch_client_event_consumer_register(
        comch_client: *mut doca_comch_client,
        new_consumer_event_cb: doca_comch_event_consumer_cb_t,
        expired_consumer_event_cb: doca_comch_event_consumer_cb_t,
    ) -> doca_error_t;

    pub fn doca_comch_connection_update_info(comch_connection: *mut doca_comch_connection) -> doca_error_t;
    pub fn doca_comch_connection_get_counter(
        comch_connection: *const doca_comch_connection,
        counter_type: doca_comch_counter,
        counter_value: *mut u64,
    ) -> doca_error_t;

    // ---- fast path: consumer (doca_comch_consumer.h) ----
    pub fn doca_comch_consumer_create(
        comch_connection: *mut doca_comch_connection,
        buf_mmap: *mut doca_mmap,
        consumer: *mut *mut doca_comch_consumer,
    ) -> doca_error_t;
    pub fn doca_comch_consumer_destroy(consumer: *mut doca_comch_consumer) -> doca_error_t;
    pub fn doca_comch_consumer_as_ctx(consumer: *mut doca_comch_consumer) -> *mut doca_ctx;
    pub fn doca_comch_consumer_get_id(consumer: *const doca_comch_consumer, id: *mut u32) -> doca_error_t;
    pub fn doca_comch_consumer_cap_is_supported(devinfo: *const doca_devinfo) -> doca_error_t;
    pub fn doca_comch_consumer_cap_get_max_num_tasks(
        devinfo: *const doca_devinfo,
        max_num_tasks: *mut u32,
    ) -> doca_error_t;
    pub fn doca_comch_consumer_cap_get_max_buf_size(
        devinfo: *const doca_devinfo,
        max_buf_size: *mut u32,
    ) -> doca_error_t;
    pub fn doca_comch_consumer_cap_get_max_buf_list_len(
        devinfo: *const doca_devinfo,
        max_buf_list_len: *mut u32,
    ) -> doca_error_t;
    pub fn doca_comch_consumer_cap_get_max_consumers(
        devinfo: *const doca_devinfo,
        max_consumers: *mut u32,
    ) -> doca_error_t;
    pub fn doca_comch_consumer_cap_get_max_imm_data_len(
        devinfo: *const doca_devinfo,
        max_imm_data_len: *mut u32,
    ) -> doca_error_t;
    pub fn doca_comch_consumer_set_imm_data_len(consumer: *mut doca_comch_consumer, imm_data_len: u32) -> doca_error_t;
    pub fn doca_comch_consumer_get_imm_data_len(
        consumer: *const doca_comch_consumer,
        imm_data_len: *mut u32,
    ) -> doca_error_t;
    pub fn doca_comch_consumer_task_post_recv_set_conf(
        consumer: *mut doca_comch_consumer,
        task_completion_cb: doca_comch_consumer_task_post_recv_completion_cb_t,
        task_error_cb: doca_comch_consumer_task_post_recv_completion_cb_t,
        num_post_recv_tasks: u32,
    ) -> doca_error_t;
    pub fn doca_comch_consumer_task_post_recv_alloc_init(
        consumer: *mut doca_comch_consumer,
        buf: *mut doca_buf,
        task: *mut *mut doca_comch_consumer_task_post_recv,
    ) -> doca_error_t;
    pub fn doca_comch_consumer_task_post_recv_get_buf(task: *const doca_comch_consumer_task_post_recv)
        -> *mut doca_buf;
    pub fn doca_comch_consumer_task_post_recv_set_buf(
        task: *mut doca_comch_consumer_task_post_recv,
        buf: *mut doca_buf,
    );
    pub fn doca_comch_consumer_task_post_recv_get_producer_id(task: *const doca_comch_consumer_task_post_recv) -> u32;
    pub fn doca_comch_consumer_task_post_recv_get_imm_data(
        task: *const doca_comch_consumer_task_post_recv,
    ) -> *const u8;
    pub fn doca_comch_consumer_task_post_recv_get_imm_data_len(task: *const doca_comch_consumer_task_post_recv) -> u32;
    pub fn doca_comch_consumer_task_post_recv_as_task(task: *mut doca_comch_consumer_task_post_recv) -> *mut doca_task;

    // ---- fast path: producer (doca_comch_producer.h) ----
    pub fn doca_comch_producer_create(
        comch_connection: *mut doca_comch_connection,
        producer: *mut *mut doca_comch_producer,
    ) -> doca_error_t;
    pub fn doca_comch_producer_destroy(producer: *mut doca_comch_producer) -> doca_error_t;
    pub fn doca_comch_producer_as_ctx(producer: *mut doca_comch_producer) -> *mut doca_ctx;
    pub fn doca_comch_producer_get_id(producer: *const doca_comch_producer, id: *mut u32) -> doca_error_t;
    pub fn doca_comch_producer_cap_is_supported(devinfo: *const doca_devinfo) -> doca_error_t;
    pub fn doca_comch_producer_cap_get_max_num_tasks(
        devinfo: *const doca_devinfo,
        max_num_tasks: *mut u32,
    ) -> doca_error_t;
    pub fn doca_comch_producer_cap_get_max_buf_size(
        devinfo: *const doca_devinfo,
        max_buf_size: *mut u32,
    ) -> doca_error_t;
    pub fn doca_comch_producer_cap_get_max_buf_list_len(
        devinfo: *const doca_devinfo,
        max_buf_list_len: *mut u32,
    ) -> doca_error_t;
    pub fn doca_comch_producer_cap_get_max_producers(
        devinfo: *const doca_devinfo,
        max_producers: *mut u32,
    ) -> doca_error_t;
    pub fn doca_comch_producer_task_send_set_conf(
        producer: *mut doca_comch_producer,
        task_completion_cb: doca_comch_producer_task_send_completion_cb_t,
        task_error_cb: doca_comch_producer_task_send_completion_cb_t,
        num_send_tasks: u32,
    ) -> doca_error_t;
    pub fn doca_comch_producer_task_send_alloc_init(
        producer: *mut doca_comch_producer,
        buf: *const doca_buf,
        imm_data: *mut u8,
        imm_data_len: u32,
        consumer_id: u32,
        task: *mut *mut doca_comch_producer_task_send,
    ) -> doca_error_t;
    pub fn doca_comch_producer_task_send_get_buf(task: *const doca_comch_producer_task_send) -> *const doca_buf;
    pub fn doca_comch_producer_task_send_set_buf(task: *mut doca_comch_producer_task_send, buf: *const doca_buf);
    pub fn doca_comch_producer_task_send_get_consumer_id(task: *const doca_comch_producer_task_send) -> u32;
    pub fn doca_comch_producer_task_send_set_consumer_id(task: *mut doca_comch_producer_task_send, consumer_id: u32);
    pub fn doca_comch_producer_task_send_get_imm_data(task: *const doca_comch_producer_task_send) -> *mut u8;
    pub fn doca_comch_producer_task_send_get_imm_data_len(task: *const doca_comch_producer_task_send) -> u32;
    pub fn doca_comch_producer_task_send_set_imm_data(
        task: *mut doca_comch_producer_task_send,
        imm_data: *mut u8,
        imm_data_len: u32,
    );
    pub fn doca_comch_producer_task_send_as_task(task: *mut doca_comch_producer_task_send) -> *mut doca_task;
}
