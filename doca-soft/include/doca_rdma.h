/*
 * doca_rdma.h -- RDMA of the DOCA 3.x C API (soft provider of async-doca: processes of one host).
 *
 * Written for this project from the interface facts in the project's API notes; not NVIDIA's
 * header.
 *
 * Reliable connections only. Once the context is started, doca_rdma_export() gives a blob and
 * a connection; the blob goes to the peer out of band, which hands it to doca_rdma_connect().
 * Tasks name the connection they use (the 3.x form). Receives are posted in advance and consumed
 * in order by sends, sends with immediate and writes with immediate. A failed task puts the
 * context in an error state until it is stopped, restarted and reconnected.
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#ifndef ASYNC_DOCA_RDMA_H
#define ASYNC_DOCA_RDMA_H

/* NVIDIA's doca_rdma.h is the one DOCA header that brings <stdbool.h>; RDMA programs rely on it. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "doca_error.h"
#include "doca_types.h"

#ifdef __cplusplus
extern "C" {
#endif

struct doca_rdma;
struct doca_rdma_connection;
struct doca_dev;
struct doca_ctx;
struct doca_task;
struct doca_buf;
struct doca_rdma_task_receive;
struct doca_rdma_task_send;
struct doca_rdma_task_send_imm;
struct doca_rdma_task_read;
struct doca_rdma_task_write;
struct doca_rdma_task_write_imm;
struct doca_rdma_task_atomic_cmp_swp;
struct doca_rdma_task_atomic_fetch_add;

enum doca_rdma_opcode {
	DOCA_RDMA_OPCODE_RECV_SEND = 0,
	DOCA_RDMA_OPCODE_RECV_SEND_WITH_IMM = 1,
	DOCA_RDMA_OPCODE_RECV_WRITE_WITH_IMM = 2,
};

doca_error_t doca_rdma_create(struct doca_dev *dev, struct doca_rdma **rdma);
doca_error_t doca_rdma_destroy(struct doca_rdma *rdma);
struct doca_ctx *doca_rdma_as_ctx(struct doca_rdma *rdma);
doca_error_t doca_rdma_set_permissions(struct doca_rdma *rdma, uint32_t permissions);
doca_error_t doca_rdma_set_send_queue_size(struct doca_rdma *rdma, uint32_t size);
doca_error_t doca_rdma_set_recv_queue_size(struct doca_rdma *rdma, uint32_t size);
doca_error_t doca_rdma_set_max_num_connections(struct doca_rdma *rdma, uint16_t max);
doca_error_t doca_rdma_export(struct doca_rdma *rdma, const void **local_conn_details, size_t *local_conn_details_size,
			      struct doca_rdma_connection **rdma_connection);
doca_error_t doca_rdma_connect(struct doca_rdma *rdma, const void *remote_conn_details,
			       size_t remote_conn_details_size, struct doca_rdma_connection *rdma_connection);

/* Per task kind: a callback type, a pool configuration and the cast to doca_task. */
#define ASYNC_DOCA_RDMA_TASK_KIND(kind)                                                                   \
	typedef void (*doca_rdma_task_##kind##_completion_cb_t)(struct doca_rdma_task_##kind * task,       \
								union doca_data task_user_data,             \
								union doca_data ctx_user_data);             \
	doca_error_t doca_rdma_task_##kind##_set_conf(struct doca_rdma *rdma,                              \
						      doca_rdma_task_##kind##_completion_cb_t ok_cb,        \
						      doca_rdma_task_##kind##_completion_cb_t err_cb,       \
						      uint32_t num_tasks);                                  \
	struct doca_task *doca_rdma_task_##kind##_as_task(struct doca_rdma_task_##kind *task);

ASYNC_DOCA_RDMA_TASK_KIND(receive)
ASYNC_DOCA_RDMA_TASK_KIND(send)
ASYNC_DOCA_RDMA_TASK_KIND(send_imm)
ASYNC_DOCA_RDMA_TASK_KIND(read)
ASYNC_DOCA_RDMA_TASK_KIND(write)
ASYNC_DOCA_RDMA_TASK_KIND(write_imm)
ASYNC_DOCA_RDMA_TASK_KIND(atomic_cmp_swp)
ASYNC_DOCA_RDMA_TASK_KIND(atomic_fetch_add)
#undef ASYNC_DOCA_RDMA_TASK_KIND

doca_error_t doca_rdma_task_receive_allocate_init(struct doca_rdma *rdma, struct doca_buf *dst_buf,
						  union doca_data user_data, struct doca_rdma_task_receive **task);
doca_error_t doca_rdma_task_send_allocate_init(struct doca_rdma *rdma, struct doca_rdma_connection *conn,
					       const struct doca_buf *src_buf, union doca_data user_data,
					       struct doca_rdma_task_send **task);
doca_error_t doca_rdma_task_send_imm_allocate_init(struct doca_rdma *rdma, struct doca_rdma_connection *conn,
						   const struct doca_buf *src_buf, doca_be32_t immediate_data,
						   union doca_data user_data, struct doca_rdma_task_send_imm **task);
doca_error_t doca_rdma_task_read_allocate_init(struct doca_rdma *rdma, struct doca_rdma_connection *conn,
					       const struct doca_buf *src_buf, struct doca_buf *dst_buf,
					       union doca_data user_data, struct doca_rdma_task_read **task);
doca_error_t doca_rdma_task_write_allocate_init(struct doca_rdma *rdma, struct doca_rdma_connection *conn,
						const struct doca_buf *src_buf, struct doca_buf *dst_buf,
						union doca_data user_data, struct doca_rdma_task_write **task);
doca_error_t doca_rdma_task_write_imm_allocate_init(struct doca_rdma *rdma, struct doca_rdma_connection *conn,
						    const struct doca_buf *src_buf, struct doca_buf *dst_buf,
						    doca_be32_t immediate_data, union doca_data user_data,
						    struct doca_rdma_task_write_imm **task);
doca_error_t doca_rdma_task_atomic_cmp_swp_allocate_init(struct doca_rdma *rdma, struct doca_rdma_connection *conn,
							 struct doca_buf *dst_buf, struct doca_buf *result_buf,
							 uint64_t cmp_data, uint64_t swap_data,
							 union doca_data user_data,
							 struct doca_rdma_task_atomic_cmp_swp **task);
doca_error_t doca_rdma_task_atomic_fetch_add_allocate_init(struct doca_rdma *rdma,
							   struct doca_rdma_connection *conn,
							   struct doca_buf *dst_buf, struct doca_buf *result_buf,
							   uint64_t add_data, union doca_data user_data,
							   struct doca_rdma_task_atomic_fetch_add **task);

enum doca_rdma_opcode doca_rdma_task_receive_get_result_opcode(const struct doca_rdma_task_receive *task);
uint32_t doca_rdma_task_receive_get_result_len(const struct doca_rdma_task_receive *task);
doca_be32_t doca_rdma_task_receive_get_result_immediate_data(const struct doca_rdma_task_receive *task);
const struct doca_rdma_connection *
doca_rdma_task_receive_get_result_rdma_connection(const struct doca_rdma_task_receive *task);

#ifdef __cplusplus
}
#endif

#endif /* ASYNC_DOCA_RDMA_H */
