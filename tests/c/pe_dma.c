/*
 * pe_dma.c -- a progress engine driving DMA memcpy tasks, in the three ways NVIDIA's PE samples
 * rely on (pe_polling, pe_async_stop, pe_task_error), written from what those samples expect of
 * DOCA, not from their code:
 *
 *   pe_dma polling      NUM copies allocated, then submitted, then the PE polled until every
 *                       callback ran; each destination holds its source's byte pattern.
 *   pe_dma async-stop   doca_ctx_stop from inside a completion callback once half the copies
 *                       completed: IN_PROGRESS, RUNNING -> STOPPING at once, the rest delivered
 *                       (completed or flushed through the error callback), then STOPPING ->
 *                       IDLE from a later progress.
 *   pe_dma task-error   one copy of the batch has an empty source: every submit succeeds, that
 *                       copy fails through its error callback, and the DMA context stops by
 *                       itself (RUNNING -> STOPPING without a stop call), reaching IDLE once the
 *                       callbacks freed every task. A provider whose context kept running
 *                       would make the sample's final loop (progress until IDLE) spin forever;
 *                       here that wait is bounded and fails. Then the context starts again and
 *                       copies.
 *
 * The device is the first one that supports DMA memcpy (doca_dma_cap_task_memcpy_is_supported),
 * as the samples choose it. Every wait is bounded; the program exits 0 only after its checks.
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

DOCA_LOG_REGISTER(PE_DMA);

#include "sample_common.h"

#define NUM_TASKS 16
#define COPY_SIZE 1024
#define BAD_TASK 2

enum mode { POLLING, ASYNC_STOP, TASK_ERROR };

struct state {
	enum mode mode;
	struct doca_ctx *ctx;
	int completed, failed, done;
	bool ok[NUM_TASKS], seen[NUM_TASKS];
	bool stop_called, stopping_seen, stopping_unasked, idle_seen;
	doca_error_t stop_result, error_status[NUM_TASKS];
};

/* Frees a copy's two buffers and the task (what the samples do in both callbacks). */
static void release(struct doca_dma_task_memcpy *task)
{
	doca_buf_dec_refcount((struct doca_buf *)doca_dma_task_memcpy_get_src(task), NULL);
	doca_buf_dec_refcount(doca_dma_task_memcpy_get_dst(task), NULL);
	doca_task_free(doca_dma_task_memcpy_as_task(task));
}

/* Whether the destination of a completed copy holds the byte `value` everywhere. */
static bool holds(struct doca_dma_task_memcpy *task, uint8_t value)
{
	const struct doca_buf *dst = doca_dma_task_memcpy_get_dst(task);
	uint8_t *data = NULL;
	size_t len = 0, i;

	if (doca_buf_get_data(dst, (void **)&data) != DOCA_SUCCESS || doca_buf_get_data_len(dst, &len) != DOCA_SUCCESS)
		return false;
	if (len != COPY_SIZE)
		return false;
	for (i = 0; i < len; i++)
		if (data[i] != value)
			return false;
	return true;
}

static void copied(struct doca_dma_task_memcpy *task, union doca_data ud, union doca_data cud)
{
	struct state *st = cud.ptr;
	uint64_t k = ud.u64;

	st->completed++;
	st->done++;
	if (k < NUM_TASKS) {
		st->seen[k] = true;
		st->ok[k] = holds(task, (uint8_t)(k + 1));
		CHECK(st->ok[k], "copy %lu: the destination does not hold its source", (unsigned long)k);
	}
	release(task);
	if (st->mode == ASYNC_STOP && st->completed == NUM_TASKS / 2) {
		st->stop_called = true;
		st->stop_result = doca_ctx_stop(st->ctx);
	}
}

static void failed(struct doca_dma_task_memcpy *task, union doca_data ud, union doca_data cud)
{
	struct state *st = cud.ptr;
	uint64_t k = ud.u64;

	st->failed++;
	st->done++;
	if (k < NUM_TASKS) {
		st->seen[k] = true;
		st->error_status[k] = doca_task_get_status(doca_dma_task_memcpy_as_task(task));
	}
	release(task);
}

static void state_changed(const union doca_data cud, struct doca_ctx *ctx, enum doca_ctx_states prev,
			  enum doca_ctx_states next)
{
	struct state *st = cud.ptr;

	(void)ctx;
	if (prev == DOCA_CTX_STATE_RUNNING && next == DOCA_CTX_STATE_STOPPING) {
		st->stopping_seen = true;
		st->stopping_unasked = !st->stop_called;
	}
	if (prev == DOCA_CTX_STATE_STOPPING && next == DOCA_CTX_STATE_IDLE)
		st->idle_seen = true;
}

/* Progresses `pe` until `*flag` (or the bounded wait ends); whether it became true. */
static bool progress_until(struct doca_pe *pe, const bool *flag)
{
	uint64_t deadline = sample_now_ms() + SAMPLE_TIMEOUT_MS;

	while (!*flag) {
		if (sample_now_ms() > deadline)
			return false;
		(void)doca_pe_progress(pe);
	}
	return true;
}

/* Allocates copy `k` (source filled with k+1, empty destination; `empty_src` gives the source no
 * data) and submits it; the submit's result. */
static doca_error_t submit_copy(struct doca_dma *dma, struct doca_buf_inventory *inv, struct doca_mmap *mmap,
				uint8_t *mem, uint64_t k, bool empty_src)
{
	uint8_t *src = mem + 2 * k * COPY_SIZE, *dst = src + COPY_SIZE;
	struct doca_buf *s = NULL, *d = NULL;
	struct doca_dma_task_memcpy *task = NULL;
	union doca_data ud = {.u64 = k};
	doca_error_t result;

	memset(src, (int)(k + 1), COPY_SIZE);
	memset(dst, 0, COPY_SIZE);
	result = doca_buf_inventory_buf_get_by_data(inv, mmap, src, COPY_SIZE, &s);
	if (result == DOCA_SUCCESS && empty_src)
		result = doca_buf_reset_data_len(s);
	DOCA_ERROR_PROPAGATE(result, doca_buf_inventory_buf_get_by_addr(inv, mmap, dst, COPY_SIZE, &d));
	DOCA_ERROR_PROPAGATE(result, doca_dma_task_memcpy_alloc_init(dma, s, d, ud, &task));
	DOCA_ERROR_PROPAGATE(result, doca_task_submit(doca_dma_task_memcpy_as_task(task)));
	if (DOCA_IS_ERROR(result)) {
		DOCA_LOG_ERR("copy %lu: %s", (unsigned long)k, doca_error_get_name(result));
		if (task != NULL)
			doca_task_free(doca_dma_task_memcpy_as_task(task));
		if (s != NULL)
			doca_buf_dec_refcount(s, NULL);
		if (d != NULL)
			doca_buf_dec_refcount(d, NULL);
	}
	return result;
}

static void check_outcome(struct state *st, struct doca_pe *pe)
{
	size_t inflight = 1;
	int k;

	CHECK(st->done == NUM_TASKS, "%d of %d callbacks ran", st->done, NUM_TASKS);
	for (k = 0; k < NUM_TASKS; k++)
		CHECK(st->seen[k], "copy %d: no callback", k);
	switch (st->mode) {
	case POLLING:
		CHECK(st->completed == NUM_TASKS, "%d copies completed, %d failed", st->completed, st->failed);
		CHECK(!st->stopping_seen, "the context stopped by itself");
		break;
	case ASYNC_STOP:
		CHECK(st->stop_called && st->stop_result == DOCA_ERROR_IN_PROGRESS,
		      "a stop with copies in flight returned %s, not IN_PROGRESS", doca_error_get_name(st->stop_result));
		CHECK(st->stopping_seen && !st->stopping_unasked, "RUNNING -> STOPPING was not reported by the stop");
		CHECK(st->completed >= NUM_TASKS / 2, "%d copies completed before the stop", st->completed);
		for (k = 0; k < NUM_TASKS; k++)
			CHECK(st->ok[k] || st->error_status[k] != DOCA_SUCCESS, "copy %d neither completed nor flushed", k);
		CHECK(progress_until(pe, &st->idle_seen), "STOPPING -> IDLE never came");
		break;
	case TASK_ERROR:
		CHECK(st->ok[0] && st->ok[1], "the copies before the failed one did not complete");
		CHECK(st->error_status[BAD_TASK] != DOCA_SUCCESS, "the copy with an empty source did not fail");
		CHECK(st->stopping_seen && st->stopping_unasked, "the failed copy did not stop the context");
		/* The sample's wait: nothing in flight, then the IDLE report. */
		CHECK(doca_ctx_get_num_inflight_tasks(st->ctx, &inflight) == DOCA_SUCCESS && inflight == 0,
		      "%zu tasks still in flight", inflight);
		CHECK(progress_until(pe, &st->idle_seen), "STOPPING -> IDLE never came: the context kept running");
		break;
	}
}

int main(int argc, char **argv)
{
	struct state st = {0};
	struct doca_dev *dev = NULL;
	struct doca_pe *pe = NULL;
	struct doca_dma *dma = NULL;
	struct doca_mmap *mmap = NULL;
	struct doca_buf_inventory *inv = NULL;
	union doca_data cud;
	size_t mem_len = (size_t)2 * (NUM_TASKS + 1) * COPY_SIZE;
	uint8_t *mem = calloc(1, mem_len);
	bool all_done = false;
	uint64_t deadline;
	uint64_t k;
	doca_error_t result;

	result = doca_log_backend_create_standard();
	if (argc != 2 || mem == NULL) {
		fprintf(stderr, "usage: pe_dma polling|async-stop|task-error\n");
		free(mem);
		return EXIT_FAILURE;
	}
	if (strcmp(argv[1], "polling") == 0)
		st.mode = POLLING;
	else if (strcmp(argv[1], "async-stop") == 0)
		st.mode = ASYNC_STOP;
	else if (strcmp(argv[1], "task-error") == 0)
		st.mode = TASK_ERROR;
	else {
		fprintf(stderr, "unknown mode %s\n", argv[1]);
		free(mem);
		return EXIT_FAILURE;
	}

	DOCA_ERROR_PROPAGATE(result, sample_open_capable_device(doca_dma_cap_task_memcpy_is_supported, &dev));
	DOCA_ERROR_PROPAGATE(result, doca_mmap_create(&mmap));
	DOCA_ERROR_PROPAGATE(result, doca_mmap_set_memrange(mmap, mem, mem_len));
	DOCA_ERROR_PROPAGATE(result, doca_mmap_add_dev(mmap, dev));
	DOCA_ERROR_PROPAGATE(result, doca_mmap_set_permissions(mmap, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE));
	DOCA_ERROR_PROPAGATE(result, doca_mmap_start(mmap));
	DOCA_ERROR_PROPAGATE(result, doca_buf_inventory_create(2 * (NUM_TASKS + 1), &inv));
	DOCA_ERROR_PROPAGATE(result, doca_buf_inventory_start(inv));
	DOCA_ERROR_PROPAGATE(result, doca_pe_create(&pe));
	DOCA_ERROR_PROPAGATE(result, doca_dma_create(dev, &dma));
	if (DOCA_IS_ERROR(result))
		goto out;
	st.ctx = doca_dma_as_ctx(dma);
	cud.ptr = &st;
	DOCA_ERROR_PROPAGATE(result, doca_pe_connect_ctx(pe, st.ctx));
	DOCA_ERROR_PROPAGATE(result, doca_ctx_set_user_data(st.ctx, cud));
	DOCA_ERROR_PROPAGATE(result, doca_dma_task_memcpy_set_conf(dma, copied, failed, NUM_TASKS));
	DOCA_ERROR_PROPAGATE(result, doca_ctx_set_state_changed_cb(st.ctx, state_changed));
	DOCA_ERROR_PROPAGATE(result, doca_ctx_start(st.ctx));
	for (k = 0; k < NUM_TASKS && !DOCA_IS_ERROR(result); k++)
		result = submit_copy(dma, inv, mmap, mem, k, st.mode == TASK_ERROR && k == BAD_TASK);
	if (DOCA_IS_ERROR(result))
		goto out;

	/* Poll until every callback ran (bounded). */
	deadline = sample_now_ms() + SAMPLE_TIMEOUT_MS;
	while (st.done < NUM_TASKS && sample_now_ms() <= deadline)
		(void)doca_pe_progress(pe);
	all_done = st.done == NUM_TASKS;
	CHECK(all_done, "only %d of %d callbacks ran", st.done, NUM_TASKS);
	check_outcome(&st, pe);

	if (st.mode != POLLING && st.idle_seen) {
		/* Stopped (by the program or by the failure): it starts again and copies. */
		bool again_done = false;
		int before = st.completed;

		result = doca_ctx_start(st.ctx);
		CHECK(result == DOCA_SUCCESS, "restart: %s", doca_error_get_name(result));
		if (result == DOCA_SUCCESS && submit_copy(dma, inv, mmap, mem, NUM_TASKS, false) == DOCA_SUCCESS) {
			deadline = sample_now_ms() + SAMPLE_TIMEOUT_MS;
			while (st.completed == before && sample_now_ms() <= deadline)
				(void)doca_pe_progress(pe);
			again_done = st.completed == before + 1;
		}
		CHECK(again_done, "no copy after the restart");
	}

out:
	if (dma != NULL) {
		doca_error_t stop = doca_ctx_stop(st.ctx);

		/* Stopping an IDLE context is a no-op that succeeds (the samples' cleanup does it). */
		if (stop == DOCA_ERROR_IN_PROGRESS) {
			st.idle_seen = false;
			CHECK(progress_until(pe, &st.idle_seen), "the final stop never reached IDLE");
		} else
			CHECK(stop == DOCA_SUCCESS, "final stop: %s", doca_error_get_name(stop));
		DOCA_ERROR_PROPAGATE(result, doca_dma_destroy(dma));
	}
	result = sample_destroy_rest(result, pe, inv, mmap, dev);
	free(mem);
	if (DOCA_IS_ERROR(result) || failures > 0) {
		DOCA_LOG_ERR("pe_dma %s failed: %s, %d failed checks", argv[1], doca_error_get_name(result), failures);
		return EXIT_FAILURE;
	}
	DOCA_LOG_INFO("pe_dma %s: %d copies completed, %d failed, as expected", argv[1], st.completed, st.failed);
	return EXIT_SUCCESS;
}
