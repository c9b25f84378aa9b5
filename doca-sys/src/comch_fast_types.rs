// The Comch fast-path callback types, shared by doca-sys and doca-soft (textually included by
// both, as comch_types.rs is). Written from the interface facts of `doca_comch_consumer.h` and
// `doca_comch_producer.h`.

/// Completion (or error) callback of a fast-path post-receive task (`doca_comch_consumer.h`).
pub type doca_comch_consumer_task_post_recv_completion_cb_t = Option<
    unsafe extern "C" fn(
        task: *mut doca_comch_consumer_task_post_recv,
        task_user_data: doca_data,
        ctx_user_data: doca_data,
    ),
>;
/// Completion (or error) callback of a fast-path send task (`doca_comch_producer.h`).
pub type doca_comch_producer_task_send_completion_cb_t = Option<
    unsafe extern "C" fn(task: *mut doca_comch_producer_task_send, task_user_data: doca_data, ctx_user_data: doca_data),
>;
