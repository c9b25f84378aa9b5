/*
 * doca_dma.h -- DMA of the DOCA 3.x C API (soft provider of async-doca).
 *
 * Written for this project from the interface facts in the project's API notes; not NVIDIA's
 * header.
 *
 * A DMA context has one task: memcpy. It copies the payload (data, data_len) of the source
 * buffer into the free space after the destination's payload and grows the destination's
 * data_len by that much. Either buffer may be local memory or memory another process exported
 * with doca_mmap_export_pci() and this one opened with doca_mmap_create_from_export(): the
 * host/DPU pattern. In the soft provider the submitting thread performs the copy; the
 * completion still arrives from doca_pe_progress(). Note the spelling: alloc_init.
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#ifndef ASYNC_DOCA_DMA_H
#define ASYNC_DOCA_DMA_H

#include <stddef.h>
#include <stdint.h>

#include "doca_error.h"
#include "doca_types.h"

#ifdef __cplusplus
extern "C" {
#endif

struct doca_dma;
struct doca_dma_task_memcpy;
struct doca_gpu_dma;
struct doca_dev;
struct doca_devinfo;
struct doca_ctx;
struct doca_task;
struct doca_buf;

/* Called from doca_pe_progress() when a memcpy task succeeded (or, as the error callback,
 * failed: read the reason with doca_task_get_status()). */
typedef void (*doca_dma_task_memcpy_completion_cb_t)(struct doca_dma_task_memcpy *task,
						     union doca_data task_user_data,
						     union doca_data ctx_user_data);

/* Lifecycle: create on an open device, use through the ctx, destroy when IDLE. */
doca_error_t doca_dma_create(struct doca_dev *dev, struct doca_dma **dma);
doca_error_t doca_dma_destroy(struct doca_dma *dma);
struct doca_ctx *doca_dma_as_ctx(struct doca_dma *dma);

/* Capabilities. max_buf_list_len 1 means no chained buffers; max_buf_size is the largest
 * single copy in bytes. The task count limit is asked of an instance, not a devinfo. */
doca_error_t doca_dma_cap_task_memcpy_is_supported(const struct doca_devinfo *devinfo);
doca_error_t doca_dma_cap_get_max_num_tasks(struct doca_dma *dma, uint32_t *max_num_tasks);
doca_error_t doca_dma_cap_task_memcpy_get_max_buf_list_len(const struct doca_devinfo *devinfo,
							   uint32_t *max_buf_list_len);
doca_error_t doca_dma_cap_task_memcpy_get_max_buf_size(const struct doca_devinfo *devinfo, uint64_t *buf_size);

/* The memcpy task: configure while IDLE, allocate and submit while RUNNING. */
doca_error_t doca_dma_task_memcpy_set_conf(struct doca_dma *dma,
					   doca_dma_task_memcpy_completion_cb_t task_completion_cb,
					   doca_dma_task_memcpy_completion_cb_t task_error_cb,
					   uint32_t num_memcpy_tasks);
doca_error_t doca_dma_task_memcpy_alloc_init(struct doca_dma *dma,
					     const struct doca_buf *src,
					     struct doca_buf *dst,
					     union doca_data user_data,
					     struct doca_dma_task_memcpy **task);
struct doca_task *doca_dma_task_memcpy_as_task(struct doca_dma_task_memcpy *task);
void doca_dma_task_memcpy_set_src(struct doca_dma_task_memcpy *task, const struct doca_buf *src);
const struct doca_buf *doca_dma_task_memcpy_get_src(const struct doca_dma_task_memcpy *task);
void doca_dma_task_memcpy_set_dst(struct doca_dma_task_memcpy *task, struct doca_buf *dst);
struct doca_buf *doca_dma_task_memcpy_get_dst(const struct doca_dma_task_memcpy *task);

/* GPU data path (experimental in DOCA). The soft provider has none: DOCA_ERROR_NOT_SUPPORTED. */
doca_error_t doca_dma_get_gpu_handle(struct doca_dma *dma, struct doca_gpu_dma **gpu_dma);

#ifdef __cplusplus
}
#endif

#endif /* ASYNC_DOCA_DMA_H */
