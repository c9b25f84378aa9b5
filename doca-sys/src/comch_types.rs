// The Comch callback types and counter enum, shared by doca-sys and doca-soft (textually
// included by both, as types.rs is). Written from the interface facts of `doca_comch.h`.

/// Completion (or error) callback of a Comch send task; runs inside `doca_pe_progress`.
pub type doca_comch_task_send_completion_cb_t = Option<
    unsafe extern "C" fn(task: *mut doca_comch_task_send, task_user_data: doca_data, ctx_user_data: doca_data),
>;
/// A message arrived on `comch_connection`; `recv_buffer` is valid only during the call.
pub type doca_comch_event_msg_recv_cb_t = Option<
    unsafe extern "C" fn(
        event: *mut doca_comch_event_msg_recv,
        recv_buffer: *mut u8,
        msg_len: u32,
        comch_connection: *mut doca_comch_connection,
    ),
>;
/// A client connected (`change_successful` 1; 0 for a failed attempt) or disconnected.
pub type doca_comch_event_connection_status_changed_cb_t = Option<
    unsafe extern "C" fn(
        event: *mut doca_comch_event_connection_status_changed,
        comch_connection: *mut doca_comch_connection,
        change_successful: u8,
    ),
>;

/// The peer created (`new_consumer_event_cb`) or destroyed (`expired_consumer_event_cb`) the
/// consumer `id` on `comch_connection` (the consumer/producer fast path).
pub type doca_comch_event_consumer_cb_t = Option<
    unsafe extern "C" fn(event: *mut doca_comch_event_consumer, comch_connection: *mut doca_comch_connection, id: u32),
>;

/// `enum doca_comch_counter`.
pub type doca_comch_counter = u32;
pub const DOCA_COMCH_COUNTER_SENT_MESSAGES: doca_comch_counter = 1;
pub const DOCA_COMCH_COUNTER_SENT_BYTES: doca_comch_counter = 2;
pub const DOCA_COMCH_COUNTER_RECV_MESSAGES: doca_comch_counter = 3;
pub const DOCA_COMCH_COUNTER_RECV_BYTES: doca_comch_counter = 4;

