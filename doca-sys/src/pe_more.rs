//! Progress engine and context additions of DOCA 3.0 (`doca_pe.h`, `doca_ctx.h`; every
//! function experimental there): submit with flags, flushing deferred submissions, completion
//! vectors and GPU/DPA data paths.
//!
//! Task batches (`doca_task_batch_*`) are not declared: in DOCA 3.0 only `doca_eth_txq`
//! allocates them, and no library this crate binds does.

use super::*;

opaque!(
    /// A GPU device handle (`doca-gpunetio`).
    doca_gpu,
    /// A DPA device handle (`doca-dpa`).
    doca_dpa,
);

extern "C" {
    /// Submits like [`doca_task_submit`]; without [`DOCA_TASK_SUBMIT_FLAG_FLUSH`] the ctx may
    /// hold the task until a flushed submit or [`doca_ctx_flush_tasks`].
    pub fn doca_task_submit_ex(task: *mut doca_task, flags: u32) -> doca_error_t;
    /// Pushes the tasks submitted without FLUSH (the ctx must not be IDLE).
    pub fn doca_ctx_flush_tasks(ctx: *mut doca_ctx);
    /// IDLE only; `comp_vector < doca_ctx_cap_get_num_completion_vectors`.
    pub fn doca_ctx_set_completion_vector(ctx: *mut doca_ctx, comp_vector: u32) -> doca_error_t;
    pub fn doca_ctx_cap_get_num_completion_vectors(
        devinfo: *const doca_devinfo,
        num_comp_vectors: *mut u32,
    ) -> doca_error_t;
    /// IDLE only; a ctx with a GPU data path may start without a PE.
    pub fn doca_ctx_set_datapath_on_gpu(ctx: *mut doca_ctx, gpu_dev: *mut doca_gpu) -> doca_error_t;
    /// IDLE only; a ctx with a DPA data path may start without a PE.
    pub fn doca_ctx_set_datapath_on_dpa(ctx: *mut doca_ctx, dpa_dev: *mut doca_dpa) -> doca_error_t;
}
