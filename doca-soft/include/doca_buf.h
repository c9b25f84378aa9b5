/*
 * doca_buf.h -- buffers of the DOCA 3.x C API (soft provider of async-doca).
 *
 * Written for this project from the interface facts in the project's API notes; not NVIDIA's
 * header.
 *
 * A buffer describes a region [head, head + len) of an mmap and a payload [data, data +
 * data_len) inside it. As a source the payload is read; as a destination data is appended
 * after the payload. At reference count 0 the buffer returns to its inventory.
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#ifndef ASYNC_DOCA_BUF_H
#define ASYNC_DOCA_BUF_H

#include <stddef.h>
#include <stdint.h>

#include "doca_error.h"

#ifdef __cplusplus
extern "C" {
#endif

struct doca_buf;

doca_error_t doca_buf_inc_refcount(struct doca_buf *buf, uint16_t *refcount);
doca_error_t doca_buf_dec_refcount(struct doca_buf *buf, uint16_t *refcount); /* refcount may be NULL */
doca_error_t doca_buf_get_len(const struct doca_buf *buf, size_t *len);
doca_error_t doca_buf_get_head(const struct doca_buf *buf, void **head);
doca_error_t doca_buf_get_data(const struct doca_buf *buf, void **data);
doca_error_t doca_buf_get_data_len(const struct doca_buf *buf, size_t *data_len);
doca_error_t doca_buf_set_data(struct doca_buf *buf, void *data, size_t data_len);
doca_error_t doca_buf_set_data_len(struct doca_buf *buf, size_t data_len);
doca_error_t doca_buf_reset_data_len(struct doca_buf *buf);
doca_error_t doca_buf_chain_list(struct doca_buf *list1, struct doca_buf *list2);

#ifdef __cplusplus
}
#endif

#endif /* ASYNC_DOCA_BUF_H */
