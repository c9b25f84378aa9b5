/*
 * doca_sync_event.h -- sync events of the DOCA 3.x C API (soft provider of async-doca).
 *
 * Written for this project from the interface facts in the project's API notes; not NVIDIA's
 * header.
 *
 * A 64-bit counter with one publisher and one subscriber location. Started with
 * doca_sync_event_start() it is used synchronously; connected to a PE through
 * doca_sync_event_as_ctx() it is driven with tasks. Masked waits compare (value & mask).
 * An export blob lets another process open the same counter.
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#ifndef ASYNC_DOCA_SYNC_EVENT_H
#define ASYNC_DOCA_SYNC_EVENT_H

#include <stddef.h>
#include <stdint.h>

#include "doca_error.h"
#include "doca_types.h"

#ifdef __cplusplus
extern "C" {
#endif

struct doca_sync_event;
struct doca_dev;
struct doca_ctx;
struct doca_task;
struct doca_sync_event_task_get;
struct doca_sync_event_task_notify_set;
struct doca_sync_event_task_notify_add;
struct doca_sync_event_task_wait_eq;
struct doca_sync_event_task_wait_neq;

doca_error_t doca_sync_event_create(struct doca_sync_event **event);
doca_error_t doca_sync_event_destroy(struct doca_sync_event *event);
doca_error_t doca_sync_event_add_publisher_location_cpu(struct doca_sync_event *event, struct doca_dev *dev);
doca_error_t doca_sync_event_add_subscriber_location_cpu(struct doca_sync_event *event, struct doca_dev *dev);
doca_error_t doca_sync_event_add_publisher_location_remote_pci(struct doca_sync_event *event);
doca_error_t doca_sync_event_add_subscriber_location_remote_pci(struct doca_sync_event *event);
doca_error_t doca_sync_event_add_publisher_location_remote_net(struct doca_sync_event *event);
doca_error_t doca_sync_event_set_addr(struct doca_sync_event *event, uint64_t *addr);
doca_error_t doca_sync_event_start(struct doca_sync_event *event);
doca_error_t doca_sync_event_stop(struct doca_sync_event *event);
struct doca_ctx *doca_sync_event_as_ctx(struct doca_sync_event *event);
doca_error_t doca_sync_event_export_to_remote_pci(struct doca_sync_event *event, struct doca_dev *dev,
						  const uint8_t **data, size_t *sz);
doca_error_t doca_sync_event_export_to_remote_net(struct doca_sync_event *event, const uint8_t **data,
						  size_t *sz);
doca_error_t doca_sync_event_create_from_export(struct doca_dev *dev, const uint8_t *data, size_t sz,
						struct doca_sync_event **event);

/* Synchronous data path. */
doca_error_t doca_sync_event_get(struct doca_sync_event *event, uint64_t *value);
doca_error_t doca_sync_event_update_add(struct doca_sync_event *event, uint64_t value, uint64_t *fetched);
doca_error_t doca_sync_event_update_set(struct doca_sync_event *event, uint64_t value);
doca_error_t doca_sync_event_wait_gt(struct doca_sync_event *event, uint64_t value, uint64_t mask);
doca_error_t doca_sync_event_wait_gt_yield(struct doca_sync_event *event, uint64_t value, uint64_t mask);
doca_error_t doca_sync_event_wait_eq(struct doca_sync_event *event, uint64_t value, uint64_t mask);
doca_error_t doca_sync_event_wait_neq(struct doca_sync_event *event, uint64_t value, uint64_t mask);
doca_error_t doca_sync_event_wait_eq_yield(struct doca_sync_event *event, uint64_t value, uint64_t mask);
doca_error_t doca_sync_event_wait_neq_yield(struct doca_sync_event *event, uint64_t value, uint64_t mask);

/* Asynchronous tasks: per kind a callback type, a pool configuration and the cast to doca_task. */
#define ASYNC_DOCA_SYNC_EVENT_TASK_KIND(kind)                                                              \
	typedef void (*doca_sync_event_task_##kind##_completion_cb_t)(                                      \
		struct doca_sync_event_task_##kind * task, union doca_data task_user_data,                  \
		union doca_data ctx_user_data);                                                             \
	doca_error_t doca_sync_event_task_##kind##_set_conf(struct doca_sync_event *event,                  \
							    doca_sync_event_task_##kind##_completion_cb_t ok_cb, \
							    doca_sync_event_task_##kind##_completion_cb_t err_cb, \
							    uint32_t num_tasks);                            \
	struct doca_task *doca_sync_event_task_##kind##_as_doca_task(struct doca_sync_event_task_##kind *task);

ASYNC_DOCA_SYNC_EVENT_TASK_KIND(get)
ASYNC_DOCA_SYNC_EVENT_TASK_KIND(notify_set)
ASYNC_DOCA_SYNC_EVENT_TASK_KIND(notify_add)
ASYNC_DOCA_SYNC_EVENT_TASK_KIND(wait_eq)
ASYNC_DOCA_SYNC_EVENT_TASK_KIND(wait_neq)
#undef ASYNC_DOCA_SYNC_EVENT_TASK_KIND

doca_error_t doca_sync_event_task_get_alloc_init(struct doca_sync_event *event, uint64_t *ret_val_ptr,
						 union doca_data user_data, struct doca_sync_event_task_get **task);
doca_error_t doca_sync_event_task_notify_set_alloc_init(struct doca_sync_event *event, uint64_t set_val,
							union doca_data user_data,
							struct doca_sync_event_task_notify_set **task);
doca_error_t doca_sync_event_task_notify_add_alloc_init(struct doca_sync_event *event, uint64_t inc_val,
							uint64_t *fetched_val_ptr, union doca_data user_data,
							struct doca_sync_event_task_notify_add **task);
doca_error_t doca_sync_event_task_wait_eq_alloc_init(struct doca_sync_event *event, uint64_t wait_val,
						     uint64_t mask, union doca_data user_data,
						     struct doca_sync_event_task_wait_eq **task);
doca_error_t doca_sync_event_task_wait_neq_alloc_init(struct doca_sync_event *event, uint64_t wait_val,
						      uint64_t mask, union doca_data user_data,
						      struct doca_sync_event_task_wait_neq **task);

/*
 * Task accessors, to re-use a task: in its completion callback a task is the caller's again
 * with its parameters; change them and submit it again. Setters only while the caller owns
 * the task.
 */
void doca_sync_event_task_get_set_ret_val_ptr(struct doca_sync_event_task_get *task, uint64_t *ret_val_ptr);
uint64_t *doca_sync_event_task_get_get_ret_val_ptr(const struct doca_sync_event_task_get *task);
void doca_sync_event_task_notify_set_set_set_val(struct doca_sync_event_task_notify_set *task, uint64_t set_val);
uint64_t doca_sync_event_task_notify_set_get_set_val(const struct doca_sync_event_task_notify_set *task);
void doca_sync_event_task_notify_add_set_inc_val(struct doca_sync_event_task_notify_add *task, uint64_t inc_val);
uint64_t doca_sync_event_task_notify_add_get_inc_val(const struct doca_sync_event_task_notify_add *task);
void doca_sync_event_task_notify_add_set_fetched_val_ptr(struct doca_sync_event_task_notify_add *task,
							  uint64_t *fetched_val_ptr);
uint64_t *doca_sync_event_task_notify_add_get_fetched_val_ptr(const struct doca_sync_event_task_notify_add *task);
void doca_sync_event_task_wait_eq_set_wait_val(struct doca_sync_event_task_wait_eq *task, uint64_t wait_val);
uint64_t doca_sync_event_task_wait_eq_get_wait_val(const struct doca_sync_event_task_wait_eq *task);
void doca_sync_event_task_wait_eq_set_mask(struct doca_sync_event_task_wait_eq *task, uint64_t mask);
uint64_t doca_sync_event_task_wait_eq_get_mask(const struct doca_sync_event_task_wait_eq *task);
void doca_sync_event_task_wait_neq_set_wait_val(struct doca_sync_event_task_wait_neq *task, uint64_t wait_val);
uint64_t doca_sync_event_task_wait_neq_get_wait_val(const struct doca_sync_event_task_wait_neq *task);
void doca_sync_event_task_wait_neq_set_mask(struct doca_sync_event_task_wait_neq *task, uint64_t mask);
uint64_t doca_sync_event_task_wait_neq_get_mask(const struct doca_sync_event_task_wait_neq *task);

/*
 * Remote-net handles: a peer's event opened from its doca_sync_event_export_to_remote_net
 * blob. Only a target of the doca_rdma_task_remote_net_sync_event_* tasks on an RDMA
 * connection to the exporting process; it cannot be started, waited on or read directly.
 * A PCI export is refused here (DOCA_ERROR_NOT_SUPPORTED), as a network export is refused by
 * doca_sync_event_create_from_export.
 */
struct doca_sync_event_remote_net;
struct doca_devinfo;
doca_error_t doca_sync_event_remote_net_create_from_export(struct doca_dev *dev, const uint8_t *data, size_t sz,
							   struct doca_sync_event_remote_net **event);
doca_error_t doca_sync_event_remote_net_destroy(struct doca_sync_event_remote_net *event);
/* Capabilities: DOCA_SUCCESS when supported (every soft device), DOCA_ERROR_NOT_SUPPORTED otherwise
 * (INVALID_VALUE for a NULL devinfo). */
doca_error_t doca_sync_event_cap_remote_net_is_create_from_export_supported(const struct doca_devinfo *devinfo);
doca_error_t doca_sync_event_cap_is_export_to_remote_net_supported(const struct doca_devinfo *devinfo);
doca_error_t doca_sync_event_cap_is_create_from_export_supported(const struct doca_devinfo *devinfo);
doca_error_t doca_sync_event_cap_is_export_to_remote_pci_supported(const struct doca_devinfo *devinfo);
doca_error_t doca_sync_event_cap_task_get_is_supported(const struct doca_devinfo *devinfo);
doca_error_t doca_sync_event_cap_task_notify_set_is_supported(const struct doca_devinfo *devinfo);
doca_error_t doca_sync_event_cap_task_notify_add_is_supported(const struct doca_devinfo *devinfo);
doca_error_t doca_sync_event_cap_task_wait_eq_is_supported(const struct doca_devinfo *devinfo);
doca_error_t doca_sync_event_cap_task_wait_neq_is_supported(const struct doca_devinfo *devinfo);
/* No DPA nor GPU here: DOCA_ERROR_NOT_SUPPORTED. */
doca_error_t doca_sync_event_cap_is_export_to_dpa_supported(const struct doca_devinfo *devinfo);
doca_error_t doca_sync_event_cap_is_export_to_gpu_supported(const struct doca_devinfo *devinfo);
doca_error_t doca_sync_event_cap_remote_net_is_export_to_dpa_supported(const struct doca_devinfo *devinfo);
doca_error_t doca_sync_event_cap_remote_net_is_export_to_gpu_supported(const struct doca_devinfo *devinfo);

#ifdef __cplusplus
}
#endif

#endif /* ASYNC_DOCA_SYNC_EVENT_H */
