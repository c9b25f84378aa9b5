/*
 * doca_comch_producer.h -- the producer half of the Comch fast path, DOCA 3.x C API (soft
 * provider of async-doca).
 *
 * Written for this project from the interface facts in the project's API notes; not NVIDIA's
 * header.
 *
 * A producer is a context built on an established comch connection; its send task moves a
 * buffer's data (and optional immediate bytes) into a receive posted by the consumer of a given
 * id on the other side. Its start is synchronous. A send to a consumer with no receive posted
 * is refused at submit with DOCA_ERROR_AGAIN (the task stays with the caller, who retries).
 * In the soft provider a producer is used on the thread of its connection's server or client.
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#ifndef ASYNC_DOCA_COMCH_PRODUCER_H
#define ASYNC_DOCA_COMCH_PRODUCER_H

#include <stdint.h>

#include "doca_comch.h"
#include "doca_error.h"
#include "doca_types.h"

#ifdef __cplusplus
extern "C" {
#endif

struct doca_buf;
struct doca_ctx;
struct doca_devinfo;
struct doca_task;
struct doca_comch_connection;
struct doca_comch_producer;
struct doca_comch_producer_task_send;

/* Completion and error callbacks of a send task share this type. */
typedef void (*doca_comch_producer_task_send_completion_cb_t)(struct doca_comch_producer_task_send *task,
							      union doca_data task_user_data,
							      union doca_data ctx_user_data);

doca_error_t doca_comch_producer_create(struct doca_comch_connection *comch_connection,
					struct doca_comch_producer **producer);
doca_error_t doca_comch_producer_destroy(struct doca_comch_producer *producer);
struct doca_ctx *doca_comch_producer_as_ctx(struct doca_comch_producer *producer);
doca_error_t doca_comch_producer_get_id(const struct doca_comch_producer *producer, uint32_t *id);

doca_error_t doca_comch_producer_cap_is_supported(const struct doca_devinfo *devinfo);
doca_error_t doca_comch_producer_cap_get_max_num_tasks(const struct doca_devinfo *devinfo, uint32_t *max_num_tasks);
doca_error_t doca_comch_producer_cap_get_max_buf_size(const struct doca_devinfo *devinfo, uint32_t *max_buf_size);
doca_error_t doca_comch_producer_cap_get_max_buf_list_len(const struct doca_devinfo *devinfo,
							   uint32_t *max_buf_list_len);
doca_error_t doca_comch_producer_cap_get_max_producers(const struct doca_devinfo *devinfo, uint32_t *max_producers);

doca_error_t doca_comch_producer_task_send_set_conf(struct doca_comch_producer *producer,
						     doca_comch_producer_task_send_completion_cb_t task_completion_cb,
						     doca_comch_producer_task_send_completion_cb_t task_error_cb,
						     uint32_t num_send_tasks);
/* The immediate bytes are copied into the task. */
doca_error_t doca_comch_producer_task_send_alloc_init(struct doca_comch_producer *producer, const struct doca_buf *buf,
						       uint8_t *imm_data, uint32_t imm_data_len, uint32_t consumer_id,
						       struct doca_comch_producer_task_send **task);
const struct doca_buf *doca_comch_producer_task_send_get_buf(const struct doca_comch_producer_task_send *task);
void doca_comch_producer_task_send_set_buf(struct doca_comch_producer_task_send *task, const struct doca_buf *buf);
uint32_t doca_comch_producer_task_send_get_consumer_id(const struct doca_comch_producer_task_send *task);
void doca_comch_producer_task_send_set_consumer_id(struct doca_comch_producer_task_send *task, const uint32_t consumer_id);
uint8_t *doca_comch_producer_task_send_get_imm_data(const struct doca_comch_producer_task_send *task);
uint32_t doca_comch_producer_task_send_get_imm_data_len(const struct doca_comch_producer_task_send *task);
void doca_comch_producer_task_send_set_imm_data(struct doca_comch_producer_task_send *task, uint8_t *imm_data,
						uint32_t imm_data_len);
struct doca_task *doca_comch_producer_task_send_as_task(struct doca_comch_producer_task_send *task);

#ifdef __cplusplus
}
#endif

#endif /* ASYNC_DOCA_COMCH_PRODUCER_H */
