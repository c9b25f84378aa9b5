/*
 * doca_buf_inventory.h -- buffer inventories of the DOCA 3.x C API (soft provider of async-doca).
 *
 * Written for this project from the interface facts in the project's API notes; not NVIDIA's
 * header.
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#ifndef ASYNC_DOCA_BUF_INVENTORY_H
#define ASYNC_DOCA_BUF_INVENTORY_H

#include <stddef.h>
#include <stdint.h>

#include "doca_error.h"

#ifdef __cplusplus
extern "C" {
#endif

struct doca_buf_inventory;
struct doca_mmap;
struct doca_buf;

doca_error_t doca_buf_inventory_create(size_t num_elements, struct doca_buf_inventory **inventory);
doca_error_t doca_buf_inventory_destroy(struct doca_buf_inventory *inventory);
doca_error_t doca_buf_inventory_start(struct doca_buf_inventory *inventory);
doca_error_t doca_buf_inventory_stop(struct doca_buf_inventory *inventory);
doca_error_t doca_buf_inventory_buf_get_by_args(struct doca_buf_inventory *inventory, struct doca_mmap *mmap,
						void *addr, size_t len, void *data, size_t data_len,
						struct doca_buf **buf);
doca_error_t doca_buf_inventory_get_num_free_elements(const struct doca_buf_inventory *inventory,
						      uint32_t *num_free);

/* Inline helpers (not exported by the library): a buffer over [addr, addr + len) with an empty
 * payload (a destination), and one whose payload is all of [data, data + len) (a source). */
static inline doca_error_t doca_buf_inventory_buf_get_by_addr(struct doca_buf_inventory *inventory,
							       struct doca_mmap *mmap, void *addr, size_t len,
							       struct doca_buf **buf)
{
	return doca_buf_inventory_buf_get_by_args(inventory, mmap, addr, len, addr, 0, buf);
}

static inline doca_error_t doca_buf_inventory_buf_get_by_data(struct doca_buf_inventory *inventory,
							       struct doca_mmap *mmap, void *data, size_t len,
							       struct doca_buf **buf)
{
	return doca_buf_inventory_buf_get_by_args(inventory, mmap, data, len, data, len, buf);
}

#ifdef __cplusplus
}
#endif

#endif /* ASYNC_DOCA_BUF_INVENTORY_H */
