// The DMA callback type, shared by doca-sys and doca-soft (textually included by both, as
// types.rs is). Written from the interface facts of `doca_dma.h`.

/// Completion (or error) callback of a DMA memcpy task; runs inside `doca_pe_progress`.
pub type doca_dma_task_memcpy_completion_cb_t = Option<
    unsafe extern "C" fn(task: *mut doca_dma_task_memcpy, task_user_data: doca_data, ctx_user_data: doca_data),
>;
