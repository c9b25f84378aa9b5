/*
 * doca_ctx.h -- contexts of the DOCA 3.x C API (soft provider of async-doca).
 *
 * Written for this project from the interface facts in the project's API notes; not NVIDIA's
 * header.
 *
 * A context is connected to one PE while IDLE, then started. doca_ctx_start() may finish at
 * once (RUNNING) or later (STARTING, then RUNNING through progress). doca_ctx_stop() with tasks
 * in flight answers DOCA_ERROR_IN_PROGRESS: the context is STOPPING, the tasks come back through
 * their error callbacks during progress, and it reaches IDLE once they are all freed.
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#ifndef ASYNC_DOCA_CTX_H
#define ASYNC_DOCA_CTX_H

#include <stddef.h>
#include <stdint.h>

#include "doca_error.h"
#include "doca_types.h"

#ifdef __cplusplus
extern "C" {
#endif

struct doca_ctx;
struct doca_devinfo;
struct doca_gpu;
struct doca_dpa;

enum doca_ctx_states {
	DOCA_CTX_STATE_IDLE = 0,
	DOCA_CTX_STATE_STARTING = 1,
	DOCA_CTX_STATE_RUNNING = 2,
	DOCA_CTX_STATE_STOPPING = 3,
};

typedef void (*doca_ctx_state_changed_callback_t)(const union doca_data user_data, struct doca_ctx *ctx,
						  enum doca_ctx_states prev_state, enum doca_ctx_states next_state);

doca_error_t doca_ctx_start(struct doca_ctx *ctx);
doca_error_t doca_ctx_stop(struct doca_ctx *ctx);
doca_error_t doca_ctx_get_state(const struct doca_ctx *ctx, enum doca_ctx_states *state);
doca_error_t doca_ctx_set_state_changed_cb(struct doca_ctx *ctx, doca_ctx_state_changed_callback_t cb);
doca_error_t doca_ctx_set_user_data(struct doca_ctx *ctx, union doca_data user_data);
doca_error_t doca_ctx_get_user_data(const struct doca_ctx *ctx, union doca_data *user_data);
doca_error_t doca_ctx_get_num_inflight_tasks(const struct doca_ctx *ctx, size_t *num_inflight_tasks);

/* Pushes the tasks submitted without DOCA_TASK_SUBMIT_FLAG_FLUSH; the context must not be IDLE. */
void doca_ctx_flush_tasks(struct doca_ctx *ctx);
/* Completion vectors: IDLE only, 0 .. num_comp_vectors - 1 (the soft device has one). */
doca_error_t doca_ctx_set_completion_vector(struct doca_ctx *ctx, uint32_t comp_vector);
doca_error_t doca_ctx_cap_get_num_completion_vectors(const struct doca_devinfo *devinfo, uint32_t *num_comp_vectors);
/* GPU / DPA data paths: IDLE only; DOCA_ERROR_NOT_SUPPORTED on the soft provider (no GPU, no DPA). */
doca_error_t doca_ctx_set_datapath_on_gpu(struct doca_ctx *ctx, struct doca_gpu *gpu_dev);
doca_error_t doca_ctx_set_datapath_on_dpa(struct doca_ctx *ctx, struct doca_dpa *dpa_dev);

#ifdef __cplusplus
}
#endif

#endif /* ASYNC_DOCA_CTX_H */
