//! DOCA DMA (`doca-dma`, `doca_dma.h`): a context whose one task copies the payload of a source
//! buffer to the free space of a destination buffer. Either side may be local memory or memory
//! another process exported with `doca_mmap_export_pci` and this one imported: the host/DPU
//! pattern, where the DPU side copies host memory in and results back.
//!
//! The task spelling is `alloc_init` (like sync event and comch), not `allocate_init`.

use super::{doca_buf, doca_ctx, doca_data, doca_dev, doca_devinfo, doca_error_t, doca_task};

include!("dma_types.rs");

opaque!(
    /// A DMA context: memcpy between memory the device can reach.
    doca_dma,
    /// DMA task: copy a source payload after a destination's data.
    doca_dma_task_memcpy,
    /// The GPU-side handle of a DMA context (GPUNetIO; never produced by the soft provider).
    doca_gpu_dma,
);

extern "C" {
    pub fn doca_dma_create(dev: *mut doca_dev, dma: *mut *mut doca_dma) -> doca_error_t;
    pub fn doca_dma_destroy(dma: *mut doca_dma) -> doca_error_t;
    pub fn doca_dma_as_ctx(dma: *mut doca_dma) -> *mut doca_ctx;

    pub fn doca_dma_cap_task_memcpy_is_supported(devinfo: *const doca_devinfo) -> doca_error_t;
    /// Takes the instance, not a devinfo (unlike the other capability getters).
    pub fn doca_dma_cap_get_max_num_tasks(dma: *mut doca_dma, max_num_tasks: *mut u32) -> doca_error_t;
    pub fn doca_dma_cap_task_memcpy_get_max_buf_list_len(
        devinfo: *const doca_devinfo,
        max_buf_list_len: *mut u32,
    ) -> doca_error_t;
    pub fn doca_dma_cap_task_memcpy_get_max_buf_size(devinfo: *const doca_devinfo, buf_size: *mut u64) -> doca_error_t;

    pub fn doca_dma_task_memcpy_set_conf(
        dma: *mut doca_dma,
        task_completion_cb: doca_dma_task_memcpy_completion_cb_t,
        task_error_cb: doca_dma_task_memcpy_completion_cb_t,
        num_memcpy_tasks: u32,
    ) -> doca_error_t;
    pub fn doca_dma_task_memcpy_alloc_init(
        dma: *mut doca_dma,
        src: *const doca_buf,
        dst: *mut doca_buf,
        user_data: doca_data,
        task: *mut *mut doca_dma_task_memcpy,
    ) -> doca_error_t;
    pub fn doca_dma_task_memcpy_as_task(task: *mut doca_dma_task_memcpy) -> *mut doca_task;
    pub fn doca_dma_task_memcpy_set_src(task: *mut doca_dma_task_memcpy, src: *const doca_buf);
    pub fn doca_dma_task_memcpy_get_src(task: *const doca_dma_task_memcpy) -> *const doca_buf;
    pub fn doca_dma_task_memcpy_set_dst(task: *mut doca_dma_task_memcpy, dst: *mut doca_buf);
    pub fn doca_dma_task_memcpy_get_dst(task: *const doca_dma_task_memcpy) -> *mut doca_buf;
    /// Experimental in DOCA (GPUNetIO); the soft provider answers NOT_SUPPORTED.
    pub fn doca_dma_get_gpu_handle(dma: *mut doca_dma, gpu_dma: *mut *mut doca_gpu_dma) -> doca_error_t;
}
