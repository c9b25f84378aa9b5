/*
 * doca_pe.h -- progress engine and tasks of the DOCA 3.x C API (soft provider of async-doca).
 *
 * Written for this project from the interface facts in the project's API notes; not NVIDIA's
 * header.
 *
 * Model: a progress engine (PE) serves many contexts. doca_pe_progress() does one unit of work
 * and returns 1, or 0 when there was nothing; task and context callbacks run inside it, on the
 * calling thread, and must not call it. Event-driven use: drain, arm with
 * doca_pe_request_notification(), drain once more, wait for the notification handle to be
 * readable, doca_pe_clear_notification(), drain again. A PE and its objects are used from one
 * thread.
 *
 * Tasks: after a successful submit the library owns the task until its callback, where it
 * returns to the caller (free it or submit it again). A failed submit leaves it with the caller.
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#ifndef ASYNC_DOCA_PE_H
#define ASYNC_DOCA_PE_H

#include <stddef.h>
#include <stdint.h>

#include "doca_error.h"
#include "doca_types.h"

#ifdef __cplusplus
extern "C" {
#endif

struct doca_pe;
struct doca_ctx;
struct doca_task;

typedef void (*doca_task_completion_cb_t)(struct doca_task *task, union doca_data task_user_data,
					  union doca_data ctx_user_data);

enum doca_pe_event_mode {
	DOCA_PE_EVENT_MODE_PROGRESS_SELECTIVE = 0,
	DOCA_PE_EVENT_MODE_PROGRESS_ALL = 1,
};

doca_error_t doca_pe_create(struct doca_pe **pe);
doca_error_t doca_pe_destroy(struct doca_pe *pe);
uint8_t doca_pe_progress(struct doca_pe *pe);
doca_error_t doca_pe_get_notification_handle(const struct doca_pe *pe, doca_notification_handle_t *handle);
doca_error_t doca_pe_request_notification(struct doca_pe *pe);
doca_error_t doca_pe_clear_notification(struct doca_pe *pe, doca_notification_handle_t handle);
doca_error_t doca_pe_get_num_inflight_tasks(const struct doca_pe *pe, size_t *num_inflight_tasks);
doca_error_t doca_pe_connect_ctx(struct doca_pe *pe, struct doca_ctx *ctx);
doca_error_t doca_pe_set_event_mode(struct doca_pe *pe, enum doca_pe_event_mode event_mode);

/*
 * Flags of doca_task_submit_ex (a bit mask). Without FLUSH the context may hold the task to
 * batch it with later ones, until a flushed submit or doca_ctx_flush_tasks(); the soft
 * provider also pushes held tasks on the next doca_pe_progress(), so they always complete.
 * OPTIMIZE_REPORTS is a hint about completion reporting; the soft provider reports every
 * completion and ignores it.
 */
enum doca_task_submit_flag {
	DOCA_TASK_SUBMIT_FLAG_NONE = 0U,
	DOCA_TASK_SUBMIT_FLAG_FLUSH = 1U << 0,
	DOCA_TASK_SUBMIT_FLAG_OPTIMIZE_REPORTS = 1U << 1,
};

doca_error_t doca_task_submit(struct doca_task *task);
/* Same ownership rules as doca_task_submit(). */
doca_error_t doca_task_submit_ex(struct doca_task *task, uint32_t flags);
doca_error_t doca_task_try_submit(struct doca_task *task);
void doca_task_free(struct doca_task *task);
doca_error_t doca_task_get_status(const struct doca_task *task);
void doca_task_set_user_data(struct doca_task *task, union doca_data user_data);
union doca_data doca_task_get_user_data(const struct doca_task *task);
struct doca_ctx *doca_task_get_ctx(const struct doca_task *task);

#ifdef __cplusplus
}
#endif

#endif /* ASYNC_DOCA_PE_H */
