/*
 * dma_lists.c -- one DMA memcpy from a list of source buffers to a list of destination buffers,
 * the way NVIDIA's dma_local_copy sample uses buffer lists (written from what the sample expects
 * of DOCA, not from its code):
 *
 *   dma_lists NUM_SRC NUM_DST SIZE
 *
 * - the device is the first that supports DMA memcpy, and the program refuses to run when
 *   NUM_SRC + NUM_DST exceeds doca_dma_cap_task_memcpy_get_max_buf_list_len, as the sample does
 *   (so a provider answering 1 fails the sample's default run of one source and one destination);
 * - a SIZE-byte source region is cut into NUM_SRC buffers whose data is their whole segment, a
 *   SIZE-byte destination region into NUM_DST empty buffers (the first segment takes the
 *   remainder), each chained into one list with doca_buf_chain_list;
 * - one memcpy of the two list heads; the destination list's data sections, read in list order,
 *   must equal the source region;
 * - teardown gives back only the two heads, and the inventory must then hold every element
 *   again (a list returns whole through its first element).
 *
 * Every wait is bounded; the program exits 0 only after its checks.
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <doca_buf.h>
#include <doca_buf_inventory.h>
#include <doca_ctx.h>
#include <doca_dev.h>
#include <doca_dma.h>
#include <doca_error.h>
#include <doca_log.h>
#include <doca_mmap.h>
#include <doca_pe.h>

DOCA_LOG_REGISTER(DMA_LISTS);

#include "sample_common.h"

struct state {
	volatile bool done;
	doca_error_t status;
};

static void finished(struct doca_dma_task_memcpy *task, union doca_data ud, union doca_data cud)
{
	struct state *st = cud.ptr;

	(void)ud;
	st->status = doca_task_get_status(doca_dma_task_memcpy_as_task(task));
	st->done = true;
	doca_task_free(doca_dma_task_memcpy_as_task(task));
}

/* Cuts [mem, mem + len) into `n` buffers chained into one list at *head: the first segment takes
 * the remainder; with `filled` each element's data is its whole segment (a source), otherwise
 * empty (a destination). On failure nothing stays taken. */
static doca_error_t make_list(struct doca_buf_inventory *inv, struct doca_mmap *mmap, uint8_t *mem, size_t len,
			      uint32_t n, bool filled, struct doca_buf **head)
{
	size_t seg = len / n, off = 0;
	doca_error_t result = DOCA_SUCCESS;
	uint32_t i;

	*head = NULL;
	for (i = 0; i < n && result == DOCA_SUCCESS; i++) {
		size_t l = i == 0 ? seg + len % n : seg;
		struct doca_buf *b = NULL;

		result = filled ? doca_buf_inventory_buf_get_by_data(inv, mmap, mem + off, l, &b) :
				  doca_buf_inventory_buf_get_by_addr(inv, mmap, mem + off, l, &b);
		if (result == DOCA_SUCCESS && *head != NULL) {
			result = doca_buf_chain_list(*head, b);
			if (result != DOCA_SUCCESS)
				doca_buf_dec_refcount(b, NULL);
		} else if (result == DOCA_SUCCESS)
			*head = b;
		off += l;
	}
	if (result != DOCA_SUCCESS) {
		DOCA_LOG_ERR("building a list of %u: %s", n, doca_error_get_name(result));
		if (*head != NULL)
			doca_buf_dec_refcount(*head, NULL);
		*head = NULL;
	}
	return result;
}

/* Whether the data sections of the list at `head`, in list order, are exactly `want`. */
static bool list_holds(struct doca_buf *head, const uint8_t *want, size_t len)
{
	struct doca_buf *b = head;
	size_t at = 0;

	while (b != NULL) {
		uint8_t *data = NULL;
		size_t n = 0;

		if (doca_buf_get_data(b, (void **)&data) != DOCA_SUCCESS ||
		    doca_buf_get_data_len(b, &n) != DOCA_SUCCESS || at + n > len || memcmp(data, want + at, n) != 0)
			return false;
		at += n;
		if (doca_buf_get_next_in_list(b, &b) != DOCA_SUCCESS)
			return false;
	}
	return at == len;
}

int main(int argc, char **argv)
{
	struct state st = {0};
	struct doca_dev *dev = NULL;
	struct doca_pe *pe = NULL;
	struct doca_dma *dma = NULL;
	struct doca_mmap *mmap = NULL;
	struct doca_buf_inventory *inv = NULL;
	struct doca_buf *src = NULL, *dst = NULL;
	struct doca_dma_task_memcpy *task = NULL;
	union doca_data cud = {.ptr = &st}, ud = {.u64 = 0};
	uint32_t num_src, num_dst, max_list = 0, len = 0, free_elements = 0;
	uint8_t *mem = NULL;
	size_t size, i;
	doca_error_t result;

	result = doca_log_backend_create_standard();
	if (argc != 4) {
		fprintf(stderr, "usage: dma_lists NUM_SRC NUM_DST SIZE\n");
		return EXIT_FAILURE;
	}
	num_src = (uint32_t)strtoul(argv[1], NULL, 10);
	num_dst = (uint32_t)strtoul(argv[2], NULL, 10);
	size = strtoul(argv[3], NULL, 10);
	if (num_src == 0 || num_dst == 0 || size < num_src || size < num_dst) {
		fprintf(stderr, "each list needs at least one element and a byte per element\n");
		return EXIT_FAILURE;
	}

	DOCA_ERROR_PROPAGATE(result, sample_open_capable_device(doca_dma_cap_task_memcpy_is_supported, &dev));
	if (result == DOCA_SUCCESS)
		result = doca_dma_cap_task_memcpy_get_max_buf_list_len(doca_dev_as_devinfo(dev), &max_list);
	if (result == DOCA_SUCCESS && num_src + num_dst > max_list) {
		DOCA_LOG_ERR("%u source and %u destination buffers exceed the list limit %u", num_src, num_dst,
			     max_list);
		result = DOCA_ERROR_INVALID_VALUE;
	}
	if (result == DOCA_SUCCESS && (mem = malloc(2 * size)) == NULL)
		result = DOCA_ERROR_NO_MEMORY;
	if (DOCA_IS_ERROR(result))
		goto out;
	for (i = 0; i < size; i++)
		mem[i] = (uint8_t)(i * 31 + 7);
	memset(mem + size, 0, size);

	DOCA_ERROR_PROPAGATE(result, doca_mmap_create(&mmap));
	DOCA_ERROR_PROPAGATE(result, doca_mmap_set_memrange(mmap, mem, 2 * size));
	DOCA_ERROR_PROPAGATE(result, doca_mmap_add_dev(mmap, dev));
	DOCA_ERROR_PROPAGATE(result, doca_mmap_set_permissions(mmap, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE));
	DOCA_ERROR_PROPAGATE(result, doca_mmap_start(mmap));
	/* As the sample: an inventory of exactly the elements of both lists. */
	DOCA_ERROR_PROPAGATE(result, doca_buf_inventory_create(num_src + num_dst, &inv));
	DOCA_ERROR_PROPAGATE(result, doca_buf_inventory_start(inv));
	DOCA_ERROR_PROPAGATE(result, doca_pe_create(&pe));
	DOCA_ERROR_PROPAGATE(result, doca_dma_create(dev, &dma));
	if (DOCA_IS_ERROR(result))
		goto out;
	DOCA_ERROR_PROPAGATE(result, doca_pe_connect_ctx(pe, doca_dma_as_ctx(dma)));
	DOCA_ERROR_PROPAGATE(result, doca_ctx_set_user_data(doca_dma_as_ctx(dma), cud));
	DOCA_ERROR_PROPAGATE(result, doca_dma_task_memcpy_set_conf(dma, finished, finished, 1));
	DOCA_ERROR_PROPAGATE(result, sample_ctx_start(pe, doca_dma_as_ctx(dma)));
	DOCA_ERROR_PROPAGATE(result, make_list(inv, mmap, mem, size, num_src, true, &src));
	DOCA_ERROR_PROPAGATE(result, make_list(inv, mmap, mem + size, size, num_dst, false, &dst));
	if (DOCA_IS_ERROR(result))
		goto out;
	CHECK(doca_buf_get_list_len(src, &len) == DOCA_SUCCESS && len == num_src, "source list of %u, not %u", len,
	      num_src);
	CHECK(doca_buf_get_list_len(dst, &len) == DOCA_SUCCESS && len == num_dst, "destination list of %u, not %u",
	      len, num_dst);

	DOCA_ERROR_PROPAGATE(result, doca_dma_task_memcpy_alloc_init(dma, src, dst, ud, &task));
	DOCA_ERROR_PROPAGATE(result, doca_task_submit(doca_dma_task_memcpy_as_task(task)));
	if (DOCA_IS_ERROR(result)) {
		if (task != NULL)
			doca_task_free(doca_dma_task_memcpy_as_task(task));
		goto out;
	}
	DOCA_ERROR_PROPAGATE(result, sample_progress_until(pe, &st.done));
	CHECK(st.done && st.status == DOCA_SUCCESS, "the copy ended with %s", doca_error_get_name(st.status));
	CHECK(list_holds(dst, mem, size), "the destination list does not hold the source region in order");
	CHECK(memcmp(mem, mem + size, size) == 0, "the destination region differs from the source region");

out:
	/* Only the heads: each returns its whole list. */
	if (src != NULL)
		doca_buf_dec_refcount(src, NULL);
	if (dst != NULL)
		doca_buf_dec_refcount(dst, NULL);
	if (inv != NULL && result == DOCA_SUCCESS) {
		CHECK(doca_buf_inventory_get_num_free_elements(inv, &free_elements) == DOCA_SUCCESS &&
			      free_elements == num_src + num_dst,
		      "%u of %u elements back in the inventory", free_elements, num_src + num_dst);
	}
	if (dma != NULL) {
		CHECK(sample_ctx_stop(pe, doca_dma_as_ctx(dma)) == DOCA_SUCCESS, "the final stop");
		DOCA_ERROR_PROPAGATE(result, doca_dma_destroy(dma));
	}
	result = sample_destroy_rest(result, pe, inv, mmap, dev);
	free(mem);
	if (DOCA_IS_ERROR(result) || failures > 0) {
		DOCA_LOG_ERR("dma_lists %u %u %zu failed: %s, %d failed checks", num_src, num_dst, size,
			     doca_error_get_name(result), failures);
		return EXIT_FAILURE;
	}
	DOCA_LOG_INFO("dma_lists: %u source and %u destination buffers, %zu bytes copied in order", num_src, num_dst,
		      size);
	return EXIT_SUCCESS;
}
