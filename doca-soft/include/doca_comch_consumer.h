/*
 * doca_comch_consumer.h -- the consumer half of the Comch fast path, DOCA 3.x C API (soft
 * provider of async-doca).
 *
 * Written for this project from the interface facts in the project's API notes; not NVIDIA's
 * header.
 *
 * A consumer is a context built on an established comch connection and an mmap its receive
 * buffers come from; it posts receive tasks that a producer on the other side of the connection
 * fills. The consumer's start returns DOCA_ERROR_IN_PROGRESS and reaches RUNNING through
 * progress; the peer's server or client then reports the consumer's id through its
 * new-consumer event. A completed post-receive task's buffer has grown by the bytes received;
 * the producer's id and the immediate bytes are its results. In the soft provider a consumer
 * is used on the thread of its connection's server or client, and its mmap needs
 * DOCA_ACCESS_FLAG_PCI_READ_WRITE and the connection's device (the producer writes through it).
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#ifndef ASYNC_DOCA_COMCH_CONSUMER_H
#define ASYNC_DOCA_COMCH_CONSUMER_H

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
struct doca_mmap;
struct doca_task;
struct doca_comch_connection;
struct doca_comch_consumer;
struct doca_comch_consumer_task_post_recv;

/* Completion and error callbacks of a post-receive task share this type. */
typedef void (*doca_comch_consumer_task_post_recv_completion_cb_t)(struct doca_comch_consumer_task_post_recv *task,
								   union doca_data task_user_data,
								   union doca_data ctx_user_data);

doca_error_t doca_comch_consumer_create(struct doca_comch_connection *comch_connection, struct doca_mmap *buf_mmap,
					struct doca_comch_consumer **consumer);
doca_error_t doca_comch_consumer_destroy(struct doca_comch_consumer *consumer);
struct doca_ctx *doca_comch_consumer_as_ctx(struct doca_comch_consumer *consumer);
doca_error_t doca_comch_consumer_get_id(const struct doca_comch_consumer *consumer, uint32_t *id);

doca_error_t doca_comch_consumer_cap_is_supported(const struct doca_devinfo *devinfo);
doca_error_t doca_comch_consumer_cap_get_max_num_tasks(const struct doca_devinfo *devinfo, uint32_t *max_num_tasks);
doca_error_t doca_comch_consumer_cap_get_max_buf_size(const struct doca_devinfo *devinfo, uint32_t *max_buf_size);
doca_error_t doca_comch_consumer_cap_get_max_buf_list_len(const struct doca_devinfo *devinfo,
							   uint32_t *max_buf_list_len);
doca_error_t doca_comch_consumer_cap_get_max_consumers(const struct doca_devinfo *devinfo, uint32_t *max_consumers);
doca_error_t doca_comch_consumer_cap_get_max_imm_data_len(const struct doca_devinfo *devinfo,
							   uint32_t *max_imm_data_len);

/* Immediate bytes a post-receive task takes besides its buffer; IDLE only. */
doca_error_t doca_comch_consumer_set_imm_data_len(struct doca_comch_consumer *consumer, uint32_t imm_data_len);
doca_error_t doca_comch_consumer_get_imm_data_len(const struct doca_comch_consumer *consumer, uint32_t *imm_data_len);

doca_error_t doca_comch_consumer_task_post_recv_set_conf(struct doca_comch_consumer *consumer,
							  doca_comch_consumer_task_post_recv_completion_cb_t task_completion_cb,
							  doca_comch_consumer_task_post_recv_completion_cb_t task_error_cb,
							  uint32_t num_post_recv_tasks);
doca_error_t doca_comch_consumer_task_post_recv_alloc_init(struct doca_comch_consumer *consumer, struct doca_buf *buf,
							    struct doca_comch_consumer_task_post_recv **task);
struct doca_buf *doca_comch_consumer_task_post_recv_get_buf(const struct doca_comch_consumer_task_post_recv *task);
void doca_comch_consumer_task_post_recv_set_buf(struct doca_comch_consumer_task_post_recv *task, struct doca_buf *buf);
/* Valid after completion: who sent the buffer, and its immediate bytes (NULL / 0 if none). */
uint32_t doca_comch_consumer_task_post_recv_get_producer_id(const struct doca_comch_consumer_task_post_recv *task);
const uint8_t *doca_comch_consumer_task_post_recv_get_imm_data(const struct doca_comch_consumer_task_post_recv *task);
uint32_t doca_comch_consumer_task_post_recv_get_imm_data_len(const struct doca_comch_consumer_task_post_recv *task);
struct doca_task *doca_comch_consumer_task_post_recv_as_task(struct doca_comch_consumer_task_post_recv *task);

#ifdef __cplusplus
}
#endif

#endif /* ASYNC_DOCA_COMCH_CONSUMER_H */
