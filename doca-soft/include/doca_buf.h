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
 * Buffers chain into lists. The first element stands for the list: it holds the list's
 * reference count (the others stay at 1 and refuse inc/dec with NOT_PERMITTED), and when its
 * count reaches 0 every element returns to its inventory. A task given a list gathers the
 * payloads of its elements in order (a source) or scatters into the room after each
 * element's payload in order (a destination).
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#ifndef ASYNC_DOCA_BUF_H
#define ASYNC_DOCA_BUF_H

#include <stddef.h>
#include <stdint.h>

#include "doca_compat.h"
#include "doca_error.h"

#ifdef __cplusplus
extern "C" {
#endif

struct doca_buf;

/* `refcount` (may be NULL) receives the count before the call. */
doca_error_t doca_buf_inc_refcount(struct doca_buf *buf, uint16_t *refcount);
doca_error_t doca_buf_dec_refcount(struct doca_buf *buf, uint16_t *refcount);
doca_error_t doca_buf_get_refcount(const struct doca_buf *buf, uint16_t *refcount);
doca_error_t doca_buf_get_len(const struct doca_buf *buf, size_t *len);
doca_error_t doca_buf_get_head(const struct doca_buf *buf, void **head);
doca_error_t doca_buf_get_data(const struct doca_buf *buf, void **data);
doca_error_t doca_buf_get_data_len(const struct doca_buf *buf, size_t *data_len);
doca_error_t doca_buf_set_data(struct doca_buf *buf, void *data, size_t data_len);
doca_error_t doca_buf_set_data_len(struct doca_buf *buf, size_t data_len);
doca_error_t doca_buf_reset_data_len(struct doca_buf *buf);

/* Lists. `list1`/`list2` of the chain calls are first elements; `list2` must have count 1. */
doca_error_t doca_buf_get_next_in_list(struct doca_buf *buf, struct doca_buf **next_buf); /* NULL at the end */
doca_error_t doca_buf_get_last_in_list(struct doca_buf *buf, struct doca_buf **last_buf);
doca_error_t doca_buf_is_last_in_list(const struct doca_buf *buf, uint8_t *is_last);
doca_error_t doca_buf_is_first_in_list(const struct doca_buf *buf, uint8_t *is_first);
doca_error_t doca_buf_is_in_list(const struct doca_buf *buf, uint8_t *is_in_list);
doca_error_t doca_buf_get_list_len(const struct doca_buf *buf, uint32_t *num_elements); /* first elements only */
doca_error_t doca_buf_chain_list(struct doca_buf *list1, struct doca_buf *list2);
DOCA_EXPERIMENTAL
doca_error_t doca_buf_chain_list_tail(struct doca_buf *list1_head, struct doca_buf *list1_tail, struct doca_buf *list2);
doca_error_t doca_buf_unchain_list(struct doca_buf *list1, struct doca_buf *list2); /* list2 starts its own list again */

#ifdef __cplusplus
}
#endif

#endif /* ASYNC_DOCA_BUF_H */
