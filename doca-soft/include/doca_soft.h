/*
 * doca_soft.h -- extensions of async-doca's soft DOCA provider. NOT part of NVIDIA's DOCA:
 * code meant to run on both providers uses them only under #ifdef ASYNC_DOCA_SOFT (defined
 * here) or not at all.
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#ifndef ASYNC_DOCA_SOFT_H
#define ASYNC_DOCA_SOFT_H

#include <stddef.h>
#include <stdint.h>

#include "doca_error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ASYNC_DOCA_SOFT 1

struct doca_urom_service;
struct doca_urom_worker;

/* Zeroed, page-aligned shared memory that peer processes reach without this process's help (the
 * soft provider's path for one-sided RDMA and atomics from other processes). len 0 or a NULL
 * out-pointer: DOCA_ERROR_INVALID_VALUE. */
doca_error_t doca_soft_alloc_shared(size_t len, void **out_ptr);
/* Frees memory from doca_soft_alloc_shared (DOCA_ERROR_INVALID_VALUE for any other pointer). */
doca_error_t doca_soft_free_shared(void *ptr);

/* A leak check's counter: how many tasks of any kind are allocated and not yet freed in the
 * whole process, over every context and thread (0 once every context is gone). A NULL
 * out-pointer: DOCA_ERROR_INVALID_VALUE. */
doca_error_t doca_soft_get_num_allocated_tasks(size_t *num_tasks);

/* Connect this service to the soft daemon on the Unix socket `path` instead of resolving it
 * through DOCA_UROM_SERVICE_FILE or the default socket. Before start only. */
doca_error_t doca_soft_urom_service_set_socket_path(struct doca_urom_service *service, const char *path);
/* Why the last start of `worker` failed (DOCA_SUCCESS if it did not), and the daemon's reason
 * as a string owned by the worker. */
doca_error_t doca_soft_urom_worker_get_start_error(struct doca_urom_worker *worker, doca_error_t *error);
doca_error_t doca_soft_urom_worker_get_start_error_reason(struct doca_urom_worker *worker, const char **reason);

/*
 * The private data the server passed to doca_rdma_connection_accept, on the client's
 * connection (valid from its established callback). `data` must have room for 255 bytes.
 */
struct doca_rdma_connection;
doca_error_t doca_soft_rdma_connection_get_private_data(const struct doca_rdma_connection *rdma_connection,
							uint8_t *data, uint8_t *len);

#ifdef __cplusplus
}
#endif

#endif /* ASYNC_DOCA_SOFT_H */
