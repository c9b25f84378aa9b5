/*
 * pe_events.c -- one progress engine driving several contexts in event mode, the way NVIDIA's
 * pe_event sample does: the PE's notification handle in an epoll set, armed with
 * doca_pe_request_notification, slept on, cleared with doca_pe_clear_notification, progressed.
 *
 * Contexts on the one PE: two sync events (ctx mode, each with a wait task that another thread
 * satisfies later through the synchronous update API) and an RDMA ctx connected to itself (a
 * receive posted before the wait, a send submitted when the first event fired). The program
 * checks that it slept on the handle, that every wake-up was earned (no busy loop: the number
 * of wake-ups is bounded), and that every task completed with the right result; it exits 0
 * only then.
 *
 *   pe_events -d <dev>
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <pthread.h>
#include <stdbool.h>
#include <sys/epoll.h>

#include <doca_argp.h>
#include <doca_buf.h>
#include <doca_buf_inventory.h>
#include <doca_ctx.h>
#include <doca_dev.h>
#include <doca_error.h>
#include <doca_log.h>
#include <doca_mmap.h>
#include <doca_pe.h>
#include <doca_rdma.h>
#include <doca_sync_event.h>

DOCA_LOG_REGISTER(PE_EVENTS);

#include "sample_common.h"

struct config {
	struct sample_config common; /* -d */
};

struct state {
	struct doca_sync_event *ev[2];
	int waits_done;
	doca_error_t wait_status[2];
	bool recv_done, send_done;
	doca_error_t recv_status, send_status;
	uint32_t recv_len;
	int armed; /* set (atomically) once the main thread armed the PE: the publisher starts then */
};

static void wait_done(struct doca_sync_event_task_wait_eq *task, union doca_data ud, union doca_data cud)
{
	struct state *st = cud.ptr;
	struct doca_task *t = doca_sync_event_task_wait_eq_as_doca_task(task);

	st->wait_status[ud.u64] = doca_task_get_status(t);
	st->waits_done++;
	doca_task_free(t);
}

static void recv_cb(struct doca_rdma_task_receive *task, union doca_data ud, union doca_data cud)
{
	struct state *st = cud.ptr;
	struct doca_task *t = doca_rdma_task_receive_as_task(task);

	(void)ud;
	st->recv_status = doca_task_get_status(t);
	st->recv_len = doca_rdma_task_receive_get_result_len(task);
	st->recv_done = true;
	doca_task_free(t);
}

static void send_cb(struct doca_rdma_task_send *task, union doca_data ud, union doca_data cud)
{
	struct state *st = cud.ptr;
	struct doca_task *t = doca_rdma_task_send_as_task(task);

	(void)ud;
	st->send_status = doca_task_get_status(t);
	st->send_done = true;
	doca_task_free(t);
}

/* The other thread: fires the two events, some time apart, through the synchronous API,
 * starting once the main thread has armed the PE (a main thread delayed on a loaded machine
 * would otherwise find both events fired before it ever slept, and count no wake-up). */
static void *publisher(void *arg)
{
	struct state *st = arg;
	uint64_t deadline = sample_now_ms() + SAMPLE_TIMEOUT_MS;

	while (!__atomic_load_n(&st->armed, __ATOMIC_ACQUIRE) && sample_now_ms() < deadline)
		usleep(1000);
	usleep(50 * 1000);
	if (doca_sync_event_update_set(st->ev[0], 1) != DOCA_SUCCESS)
		DOCA_LOG_ERR("update_set 0 failed");
	usleep(50 * 1000);
	if (doca_sync_event_update_set(st->ev[1], 2) != DOCA_SUCCESS)
		DOCA_LOG_ERR("update_set 1 failed");
	return NULL;
}

static doca_error_t start_ctx(struct doca_pe *pe, struct doca_ctx *ctx, struct state *st)
{
	doca_error_t result;

	result = doca_ctx_set_user_data(ctx, (union doca_data){.ptr = st});
	DOCA_ERROR_PROPAGATE(result, doca_pe_connect_ctx(pe, ctx));
	if (DOCA_IS_ERROR(result))
		return result;
	return sample_ctx_start(pe, ctx);
}

int main(int argc, char **argv)
{
	struct config cfg = {0};
	struct state st = {0};
	struct doca_dev *dev = NULL;
	struct doca_pe *pe = NULL;
	struct doca_rdma *rdma = NULL;
	struct doca_rdma_connection *conn;
	struct doca_mmap *mmap = NULL;
	struct doca_buf_inventory *inv = NULL;
	struct doca_buf *rbuf = NULL, *sbuf = NULL;
	struct doca_rdma_task_receive *recv;
	struct doca_rdma_task_send *send;
	doca_notification_handle_t handle;
	struct epoll_event ev = {.events = EPOLLIN}, out;
	const void *blob;
	size_t blob_len;
	char *mem;
	pthread_t thread;
	bool thread_started = false, send_submitted = false;
	int epfd = -1, wakeups = 0, i;
	uint64_t deadline;
	doca_error_t result;

	result = doca_log_backend_create_standard();
	DOCA_ERROR_PROPAGATE(result, doca_argp_init("pe_events", &cfg));
	DOCA_ERROR_PROPAGATE(result, sample_register_common(false));
	DOCA_ERROR_PROPAGATE(result, doca_argp_start(argc, argv));
	if (DOCA_IS_ERROR(result)) {
		doca_argp_destroy();
		return EXIT_FAILURE;
	}

	mem = calloc(1, 4096);
	result = sample_open_device(cfg.common.device, &dev);
	DOCA_ERROR_PROPAGATE(result, doca_pe_create(&pe));
	if (DOCA_IS_ERROR(result) || mem == NULL)
		goto out;

	/* Two sync events as contexts of the PE, each with one wait task. */
	for (i = 0; i < 2; i++) {
		struct doca_sync_event_task_wait_eq *w;

		result = doca_sync_event_create(&st.ev[i]);
		DOCA_ERROR_PROPAGATE(result, doca_sync_event_add_publisher_location_cpu(st.ev[i], dev));
		DOCA_ERROR_PROPAGATE(result, doca_sync_event_add_subscriber_location_cpu(st.ev[i], dev));
		DOCA_ERROR_PROPAGATE(result, doca_sync_event_task_wait_eq_set_conf(st.ev[i], wait_done, wait_done, 2));
		DOCA_ERROR_PROPAGATE(result, start_ctx(pe, doca_sync_event_as_ctx(st.ev[i]), &st));
		DOCA_ERROR_PROPAGATE(result, doca_sync_event_task_wait_eq_alloc_init(st.ev[i], (uint64_t)(i + 1), UINT64_MAX,
										     (union doca_data){.u64 = (uint64_t)i}, &w));
		if (DOCA_IS_ERROR(result))
			goto out;
		result = doca_task_submit(doca_sync_event_task_wait_eq_as_doca_task(w));
		if (DOCA_IS_ERROR(result))
			goto out;
	}

	/* An RDMA ctx connected to itself, a receive posted. */
	result = doca_rdma_create(dev, &rdma);
	DOCA_ERROR_PROPAGATE(result, doca_rdma_set_permissions(rdma, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE));
	DOCA_ERROR_PROPAGATE(result, doca_rdma_task_receive_set_conf(rdma, recv_cb, recv_cb, 2));
	DOCA_ERROR_PROPAGATE(result, doca_rdma_task_send_set_conf(rdma, send_cb, send_cb, 2));
	DOCA_ERROR_PROPAGATE(result, start_ctx(pe, doca_rdma_as_ctx(rdma), &st));
	DOCA_ERROR_PROPAGATE(result, doca_rdma_export(rdma, &blob, &blob_len, &conn));
	DOCA_ERROR_PROPAGATE(result, doca_rdma_connect(rdma, blob, blob_len, conn));
	DOCA_ERROR_PROPAGATE(result, doca_mmap_create(&mmap));
	if (DOCA_IS_ERROR(result))
		goto out;
	DOCA_ERROR_PROPAGATE(result, doca_mmap_set_memrange(mmap, mem, 4096));
	DOCA_ERROR_PROPAGATE(result, doca_mmap_set_permissions(mmap, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE));
	DOCA_ERROR_PROPAGATE(result, doca_mmap_add_dev(mmap, dev));
	DOCA_ERROR_PROPAGATE(result, doca_mmap_start(mmap));
	DOCA_ERROR_PROPAGATE(result, doca_buf_inventory_create(4, &inv));
	DOCA_ERROR_PROPAGATE(result, doca_buf_inventory_start(inv));
	DOCA_ERROR_PROPAGATE(result, doca_buf_inventory_buf_get_by_addr(inv, mmap, mem + 1024, 256, &rbuf));
	DOCA_ERROR_PROPAGATE(result, doca_rdma_task_receive_allocate_init(rdma, rbuf, (union doca_data){.u64 = 0}, &recv));
	if (DOCA_IS_ERROR(result))
		goto out;
	DOCA_ERROR_PROPAGATE(result, doca_task_submit(doca_rdma_task_receive_as_task(recv)));

	/* The notification handle in an epoll set. */
	DOCA_ERROR_PROPAGATE(result, doca_pe_get_notification_handle(pe, &handle));
	if (DOCA_IS_ERROR(result))
		goto out;
	epfd = epoll_create1(0);
	if (epfd < 0 || epoll_ctl(epfd, EPOLL_CTL_ADD, handle, &ev) != 0) {
		result = DOCA_ERROR_OPERATING_SYSTEM;
		goto out;
	}
	if (pthread_create(&thread, NULL, publisher, &st) != 0) {
		result = DOCA_ERROR_OPERATING_SYSTEM;
		goto out;
	}
	thread_started = true;

	deadline = sample_now_ms() + SAMPLE_TIMEOUT_MS;
	while (st.waits_done < 2 || !st.recv_done || !st.send_done) {
		if (sample_now_ms() > deadline) {
			DOCA_LOG_ERR("timed out: %d waits, recv %d, send %d", st.waits_done, st.recv_done, st.send_done);
			result = DOCA_ERROR_TIME_OUT;
			goto out;
		}
		while (doca_pe_progress(pe) != 0)
			;
		if (!send_submitted && st.waits_done > 0) {
			/* The first event fired: send to ourselves. */
			memcpy(mem, "event-driven", 12);
			result = doca_buf_inventory_buf_get_by_data(inv, mmap, mem, 12, &sbuf);
			DOCA_ERROR_PROPAGATE(result, doca_rdma_task_send_allocate_init(rdma, conn, sbuf,
										     (union doca_data){.u64 = 1}, &send));
			DOCA_ERROR_PROPAGATE(result, doca_task_submit(doca_rdma_task_send_as_task(send)));
			if (DOCA_IS_ERROR(result))
				goto out;
			send_submitted = true;
			continue;
		}
		if (st.waits_done == 2 && st.recv_done && st.send_done)
			break;
		/* Nothing to do now: arm, sleep on the handle, clear. */
		result = doca_pe_request_notification(pe);
		if (DOCA_IS_ERROR(result))
			goto out;
		__atomic_store_n(&st.armed, 1, __ATOMIC_RELEASE);
		if (epoll_wait(epfd, &out, 1, 1000) > 0)
			wakeups++;
		result = doca_pe_clear_notification(pe, handle);
		if (DOCA_IS_ERROR(result))
			goto out;
	}
	if (wakeups < 1 || wakeups > 50) {
		DOCA_LOG_ERR("%d wake-ups from the notification handle (expected a few)", wakeups);
		result = DOCA_ERROR_UNEXPECTED;
	}
	for (i = 0; i < 2; i++)
		if (st.wait_status[i] != DOCA_SUCCESS) {
			DOCA_LOG_ERR("wait %d: %s", i, doca_error_get_name(st.wait_status[i]));
			result = DOCA_ERROR_UNEXPECTED;
		}
	if (st.recv_status != DOCA_SUCCESS || st.send_status != DOCA_SUCCESS || st.recv_len != 12 ||
	    memcmp(mem + 1024, "event-driven", 12) != 0) {
		DOCA_LOG_ERR("loopback message: recv %s send %s len %u", doca_error_get_name(st.recv_status),
			     doca_error_get_name(st.send_status), st.recv_len);
		result = DOCA_ERROR_UNEXPECTED;
	}
	DOCA_LOG_INFO("%d wake-ups for 2 events and a message", wakeups);

out:
	if (thread_started)
		pthread_join(thread, NULL);
	if (epfd >= 0)
		close(epfd);
	if (rdma != NULL)
		DOCA_ERROR_PROPAGATE(result, sample_ctx_stop(pe, doca_rdma_as_ctx(rdma)));
	for (i = 0; i < 2; i++)
		if (st.ev[i] != NULL)
			DOCA_ERROR_PROPAGATE(result, sample_ctx_stop(pe, doca_sync_event_as_ctx(st.ev[i])));
	if (rbuf != NULL)
		doca_buf_dec_refcount(rbuf, NULL);
	if (sbuf != NULL)
		doca_buf_dec_refcount(sbuf, NULL);
	sample_destroy_memory(inv, mmap);
	if (rdma != NULL)
		DOCA_ERROR_PROPAGATE(result, doca_rdma_destroy(rdma));
	for (i = 0; i < 2; i++)
		if (st.ev[i] != NULL)
			DOCA_ERROR_PROPAGATE(result, doca_sync_event_destroy(st.ev[i]));
	if (pe != NULL)
		DOCA_ERROR_PROPAGATE(result, doca_pe_destroy(pe));
	if (dev != NULL)
		doca_dev_close(dev);
	free(mem);
	doca_argp_destroy();
	if (DOCA_IS_ERROR(result)) {
		DOCA_LOG_ERR("pe_events failed: %s", doca_error_get_name(result));
		return EXIT_FAILURE;
	}
	return EXIT_SUCCESS;
}
