/*
 * comch_fast.c -- the Comch fast path between two processes, in the pattern of NVIDIA's
 * comch_data_path_high_speed sample (written from what the sample expects of DOCA, not from its
 * code): a server (the DPU side, on a representor of the host function) and a client meet by
 * name; then
 *
 *   round 1: the server's consumer posts N buffers; the client's producer learns the consumer's
 *            id from its new-consumer event and sends N messages with 4 immediate bytes,
 *            retrying while the submit answers DOCA_ERROR_AGAIN (nothing posted yet);
 *   round 2: the same with the roles swapped.
 *
 * Each side checks every received buffer (data, length, producer id, immediate bytes), then
 * stops and destroys its consumer and producer before its server or client.
 *
 *   comch_fast --role server --name NAME [-d dev] [-n N]      (run with DOCA_SOFT_ROLE=dpu)
 *   comch_fast --role client --name NAME [-d dev] [-n N]
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
#include <time.h>

#include <doca_buf.h>
#include <doca_buf_inventory.h>
#include <doca_comch.h>
#include <doca_comch_consumer.h>
#include <doca_comch_producer.h>
#include <doca_ctx.h>
#include <doca_dev.h>
#include <doca_error.h>
#include <doca_log.h>
#include <doca_mmap.h>
#include <doca_pe.h>

DOCA_LOG_REGISTER(COMCH_FAST);

#include "sample_common.h"

#define MAX_N 16
#define MSG_ROOM 256
#define IMM_LEN 4

struct side {
	bool server;
	struct doca_pe *pe; /* the server's or client's */
	struct doca_comch_connection *conn;
	volatile uint32_t remote_consumer; /* 0: not announced yet */
	volatile bool remote_expired;
	/* this round's completions */
	volatile int received, sent;
	int n;
	uint32_t expect_producer;
	const char *expect_prefix;
	uint8_t *region; /* receive buffers, MSG_ROOM each */
};

static struct side me;

/* ---- control path events ---- */

static void on_connect(struct doca_comch_event_connection_status_changed *e, struct doca_comch_connection *c,
		       uint8_t ok)
{
	(void)e;
	if (ok)
		me.conn = c;
}

static void on_disconnect(struct doca_comch_event_connection_status_changed *e, struct doca_comch_connection *c,
			  uint8_t ok)
{
	(void)e;
	(void)c;
	(void)ok;
}

static void on_msg(struct doca_comch_event_msg_recv *e, uint8_t *buf, uint32_t len, struct doca_comch_connection *c)
{
	(void)e;
	(void)buf;
	(void)len;
	(void)c;
}

static void on_new_consumer(struct doca_comch_event_consumer *e, struct doca_comch_connection *c, uint32_t id)
{
	(void)e;
	(void)c;
	me.remote_consumer = id;
	me.remote_expired = false;
}

static void on_expired_consumer(struct doca_comch_event_consumer *e, struct doca_comch_connection *c, uint32_t id)
{
	(void)e;
	(void)c;
	if (id == me.remote_consumer)
		me.remote_expired = true;
}

static void on_ctrl_sent(struct doca_comch_task_send *task, union doca_data ud, union doca_data cud)
{
	(void)ud;
	(void)cud;
	doca_task_free(doca_comch_task_send_as_task(task));
}

/* ---- fast path completions ---- */

static void on_recv(struct doca_comch_consumer_task_post_recv *task, union doca_data ud, union doca_data cud)
{
	struct doca_task *t = doca_comch_consumer_task_post_recv_as_task(task);
	struct doca_buf *buf = doca_comch_consumer_task_post_recv_get_buf(task);
	doca_error_t status = doca_task_get_status(t);
	char want[64];
	uint8_t *data = NULL;
	size_t len = 0;
	int k = (int)ud.u64;
	const uint8_t *imm = doca_comch_consumer_task_post_recv_get_imm_data(task);

	(void)cud;
	snprintf(want, sizeof(want), "%s-%d", me.expect_prefix, k);
	CHECK(status == DOCA_SUCCESS, "receive %d: %s", k, doca_error_get_name(status));
	if (status == DOCA_SUCCESS) {
		doca_buf_get_data(buf, (void **)&data);
		doca_buf_get_data_len(buf, &len);
		/* Messages arrive in posting order: the k-th posted buffer holds the k-th message. */
		CHECK(len == strlen(want) && memcmp(data, want, len) == 0, "receive %d: %.*s, not %s", k, (int)len,
		      (const char *)data, want);
		/* The peer's producer: non-zero, and the same one for the whole round. */
		if (me.expect_producer == 0)
			me.expect_producer = doca_comch_consumer_task_post_recv_get_producer_id(task);
		CHECK(me.expect_producer != 0 &&
			      doca_comch_consumer_task_post_recv_get_producer_id(task) == me.expect_producer,
		      "receive %d from producer %u", k, doca_comch_consumer_task_post_recv_get_producer_id(task));
		CHECK(doca_comch_consumer_task_post_recv_get_imm_data_len(task) == IMM_LEN && imm != NULL &&
			      imm[0] == (uint8_t)k && imm[3] == 0xA5,
		      "receive %d: immediate bytes", k);
	}
	doca_buf_dec_refcount(buf, NULL);
	doca_task_free(t);
	me.received++;
}

static void on_sent(struct doca_comch_producer_task_send *task, union doca_data ud, union doca_data cud)
{
	struct doca_task *t = doca_comch_producer_task_send_as_task(task);
	doca_error_t status = doca_task_get_status(t);

	(void)cud;
	CHECK(status == DOCA_SUCCESS, "send %d: %s", (int)ud.u64, doca_error_get_name(status));
	doca_buf_dec_refcount((struct doca_buf *)doca_comch_producer_task_send_get_buf(task), NULL);
	doca_task_free(t);
	me.sent++;
}

/* Progresses the given PEs until *flag (a counter) reaches `target`, bounded. */
static doca_error_t progress_until_count(struct doca_pe **pes, int npes, volatile int *counter, int target)
{
	uint64_t deadline = sample_now_ms() + SAMPLE_TIMEOUT_MS;
	int i;

	while (*counter < target) {
		if (sample_now_ms() > deadline)
			return DOCA_ERROR_TIME_OUT;
		for (i = 0; i < npes; i++)
			(void)doca_pe_progress(pes[i]);
	}
	return DOCA_SUCCESS;
}

static doca_error_t wait_state(struct doca_pe **pes, int npes, struct doca_ctx *ctx, enum doca_ctx_states want)
{
	uint64_t deadline = sample_now_ms() + SAMPLE_TIMEOUT_MS;
	enum doca_ctx_states st;
	int i;

	for (;;) {
		if (doca_ctx_get_state(ctx, &st) == DOCA_SUCCESS && st == want)
			return DOCA_SUCCESS;
		if (sample_now_ms() > deadline)
			return DOCA_ERROR_TIME_OUT;
		for (i = 0; i < npes; i++)
			(void)doca_pe_progress(pes[i]);
	}
}

static doca_error_t stop_ctx(struct doca_pe **pes, int npes, struct doca_ctx *ctx)
{
	doca_error_t result = doca_ctx_stop(ctx);

	if (result != DOCA_SUCCESS && result != DOCA_ERROR_IN_PROGRESS)
		return result;
	return wait_state(pes, npes, ctx, DOCA_CTX_STATE_IDLE);
}

/* A started mmap over `mem` on `dev`, as the sample makes it (PCI read-write). */
static doca_error_t make_mmap(struct doca_dev *dev, void *mem, size_t len, struct doca_mmap **mmap)
{
	doca_error_t result = doca_mmap_create(mmap);

	DOCA_ERROR_PROPAGATE(result, doca_mmap_add_dev(*mmap, dev));
	DOCA_ERROR_PROPAGATE(result, doca_mmap_set_permissions(*mmap, DOCA_ACCESS_FLAG_PCI_READ_WRITE));
	DOCA_ERROR_PROPAGATE(result, doca_mmap_set_memrange(*mmap, mem, len));
	DOCA_ERROR_PROPAGATE(result, doca_mmap_start(*mmap));
	return result;
}

/* Receives n messages "<prefix>-k" from the peer's producer, into n posted buffers. */
static doca_error_t receive_round(struct doca_dev *dev, int n, const char *prefix)
{
	struct doca_pe *kpe = NULL;
	struct doca_comch_consumer *consumer = NULL;
	struct doca_mmap *mmap = NULL;
	struct doca_buf_inventory *inv = NULL;
	struct doca_pe *pes[2];
	size_t len = (size_t)n * MSG_ROOM;
	doca_error_t result, start;
	int k;

	me.region = calloc(1, len);
	me.received = 0;
	me.expect_producer = 0;
	me.expect_prefix = prefix;
	if (me.region == NULL)
		return DOCA_ERROR_NO_MEMORY;
	result = make_mmap(dev, me.region, len, &mmap);
	DOCA_ERROR_PROPAGATE(result, doca_buf_inventory_create(n, &inv));
	DOCA_ERROR_PROPAGATE(result, doca_buf_inventory_start(inv));
	DOCA_ERROR_PROPAGATE(result, doca_pe_create(&kpe));
	DOCA_ERROR_PROPAGATE(result, doca_comch_consumer_create(me.conn, mmap, &consumer));
	if (DOCA_IS_ERROR(result))
		goto out;
	pes[0] = me.pe;
	pes[1] = kpe;
	DOCA_ERROR_PROPAGATE(result, doca_comch_consumer_set_imm_data_len(consumer, IMM_LEN));
	DOCA_ERROR_PROPAGATE(result, doca_comch_consumer_task_post_recv_set_conf(consumer, on_recv, on_recv, n));
	DOCA_ERROR_PROPAGATE(result, doca_pe_connect_ctx(kpe, doca_comch_consumer_as_ctx(consumer)));
	if (DOCA_IS_ERROR(result))
		goto out;
	start = doca_ctx_start(doca_comch_consumer_as_ctx(consumer));
	CHECK(start == DOCA_ERROR_IN_PROGRESS, "consumer start: %s", doca_error_get_name(start));
	DOCA_ERROR_PROPAGATE(result, wait_state(pes, 2, doca_comch_consumer_as_ctx(consumer), DOCA_CTX_STATE_RUNNING));
	for (k = 0; k < n && result == DOCA_SUCCESS; k++) {
		struct doca_buf *b = NULL;
		struct doca_comch_consumer_task_post_recv *t = NULL;

		result = doca_buf_inventory_buf_get_by_addr(inv, mmap, me.region + (size_t)k * MSG_ROOM, MSG_ROOM, &b);
		DOCA_ERROR_PROPAGATE(result, doca_comch_consumer_task_post_recv_alloc_init(consumer, b, &t));
		if (result == DOCA_SUCCESS)
			doca_task_set_user_data(doca_comch_consumer_task_post_recv_as_task(t), (union doca_data){.u64 = k});
		DOCA_ERROR_PROPAGATE(result, doca_task_submit(doca_comch_consumer_task_post_recv_as_task(t)));
	}
	DOCA_ERROR_PROPAGATE(result, progress_until_count(pes, 2, &me.received, n));
	DOCA_ERROR_PROPAGATE(result, stop_ctx(pes, 2, doca_comch_consumer_as_ctx(consumer)));
out:
	if (consumer != NULL)
		DOCA_ERROR_PROPAGATE(result, doca_comch_consumer_destroy(consumer));
	result = sample_destroy_rest(result, kpe, inv, mmap, NULL);
	free(me.region);
	return result;
}

/* Sends n messages "<prefix>-k" with immediate bytes {k, 0, 0, 0xA5} to the peer's consumer. */
static doca_error_t send_round(struct doca_dev *dev, int n, const char *prefix, uint32_t *producer_id)
{
	struct doca_pe *ppe = NULL;
	struct doca_comch_producer *producer = NULL;
	struct doca_mmap *mmap = NULL;
	struct doca_buf_inventory *inv = NULL;
	struct doca_pe *pes[2];
	char *text = calloc((size_t)n, 32);
	struct timespec pause = {.tv_sec = 0, .tv_nsec = 100 * 1000};
	doca_error_t result;
	int k, again = 0;

	me.sent = 0;
	if (text == NULL)
		return DOCA_ERROR_NO_MEMORY;
	pes[0] = me.pe;
	/* The peer's consumer id comes with its new-consumer event, from the control PE. */
	{
		uint64_t deadline = sample_now_ms() + SAMPLE_TIMEOUT_MS;

		while (me.remote_consumer == 0 && sample_now_ms() <= deadline)
			(void)doca_pe_progress(me.pe);
	}
	result = me.remote_consumer != 0 ? DOCA_SUCCESS : DOCA_ERROR_TIME_OUT;
	for (k = 0; k < n; k++)
		snprintf(text + 32 * k, 32, "%s-%d", prefix, k);
	DOCA_ERROR_PROPAGATE(result, make_mmap(dev, text, (size_t)n * 32, &mmap));
	DOCA_ERROR_PROPAGATE(result, doca_buf_inventory_create(n, &inv));
	DOCA_ERROR_PROPAGATE(result, doca_buf_inventory_start(inv));
	DOCA_ERROR_PROPAGATE(result, doca_pe_create(&ppe));
	DOCA_ERROR_PROPAGATE(result, doca_comch_producer_create(me.conn, &producer));
	if (DOCA_IS_ERROR(result))
		goto out;
	pes[1] = ppe;
	DOCA_ERROR_PROPAGATE(result, doca_comch_producer_get_id(producer, producer_id));
	DOCA_ERROR_PROPAGATE(result, doca_comch_producer_task_send_set_conf(producer, on_sent, on_sent, n));
	DOCA_ERROR_PROPAGATE(result, doca_pe_connect_ctx(ppe, doca_comch_producer_as_ctx(producer)));
	DOCA_ERROR_PROPAGATE(result, doca_ctx_start(doca_comch_producer_as_ctx(producer)));
	for (k = 0; k < n && result == DOCA_SUCCESS; k++) {
		struct doca_buf *b = NULL;
		struct doca_comch_producer_task_send *t = NULL;
		uint8_t imm[IMM_LEN] = {(uint8_t)k, 0, 0, 0xA5};
		doca_error_t r;
		uint64_t deadline = sample_now_ms() + SAMPLE_TIMEOUT_MS;

		result = doca_buf_inventory_buf_get_by_data(inv, mmap, text + 32 * k, strlen(text + 32 * k), &b);
		DOCA_ERROR_PROPAGATE(result, doca_comch_producer_task_send_alloc_init(producer, b, imm, IMM_LEN,
										     me.remote_consumer, &t));
		if (DOCA_IS_ERROR(result))
			break;
		doca_task_set_user_data(doca_comch_producer_task_send_as_task(t), (union doca_data){.u64 = k});
		/* As the sample: retry while nothing is posted, without progressing anything. */
		do {
			r = doca_task_submit(doca_comch_producer_task_send_as_task(t));
			if (r == DOCA_ERROR_AGAIN) {
				again++;
				nanosleep(&pause, NULL);
			}
		} while (r == DOCA_ERROR_AGAIN && sample_now_ms() <= deadline);
		result = r;
	}
	DOCA_LOG_INFO("%d submits answered AGAIN", again);
	DOCA_ERROR_PROPAGATE(result, progress_until_count(pes, 2, &me.sent, n));
	DOCA_ERROR_PROPAGATE(result, stop_ctx(pes, 2, doca_comch_producer_as_ctx(producer)));
out:
	if (producer != NULL)
		DOCA_ERROR_PROPAGATE(result, doca_comch_producer_destroy(producer));
	result = sample_destroy_rest(result, ppe, inv, mmap, NULL);
	free(text);
	return result;
}

int main(int argc, char **argv)
{
	const char *devname = "soft0", *name = NULL, *role = NULL;
	struct doca_dev *dev = NULL;
	struct doca_devinfo_rep **reps = NULL;
	struct doca_dev_rep *rep = NULL;
	struct doca_comch_server *server = NULL;
	struct doca_comch_client *client = NULL;
	struct doca_ctx *ctx = NULL;
	uint32_t nreps = 0, my_producer = 0;
	doca_error_t result, start;
	int i, n = 4;

	result = doca_log_backend_create_standard();
	for (i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--role") == 0)
			role = argv[i + 1];
		else if (strcmp(argv[i], "--name") == 0)
			name = argv[i + 1];
		else if (strcmp(argv[i], "-d") == 0)
			devname = argv[i + 1];
		else if (strcmp(argv[i], "-n") == 0)
			n = atoi(argv[i + 1]);
	}
	if (role == NULL || name == NULL || n < 1 || n > MAX_N ||
	    (strcmp(role, "server") != 0 && strcmp(role, "client") != 0)) {
		fprintf(stderr, "usage: comch_fast --role server|client --name NAME [-d dev] [-n 1..%d]\n", MAX_N);
		return EXIT_FAILURE;
	}
	me.server = strcmp(role, "server") == 0;
	me.n = n;

	DOCA_ERROR_PROPAGATE(result, sample_open_device(devname, &dev));
	DOCA_ERROR_PROPAGATE(result, doca_comch_producer_cap_is_supported(doca_dev_as_devinfo(dev)));
	DOCA_ERROR_PROPAGATE(result, doca_comch_consumer_cap_is_supported(doca_dev_as_devinfo(dev)));
	DOCA_ERROR_PROPAGATE(result, doca_pe_create(&me.pe));
	if (DOCA_IS_ERROR(result))
		goto out;
	if (me.server) {
		/* The DPU side serves the host function through its representor. */
		result = doca_devinfo_rep_create_list(dev, DOCA_DEVINFO_REP_FILTER_NET, &reps, &nreps);
		if (result == DOCA_SUCCESS && nreps > 0)
			result = doca_dev_rep_open(reps[0], &rep);
		else if (result == DOCA_SUCCESS)
			result = DOCA_ERROR_NOT_FOUND;
		if (reps != NULL)
			doca_devinfo_rep_destroy_list(reps);
		DOCA_ERROR_PROPAGATE(result, doca_comch_server_create(dev, rep, name, &server));
		if (DOCA_IS_ERROR(result))
			goto out;
		ctx = doca_comch_server_as_ctx(server);
		DOCA_ERROR_PROPAGATE(result, doca_comch_server_task_send_set_conf(server, on_ctrl_sent, on_ctrl_sent, 1));
		DOCA_ERROR_PROPAGATE(result, doca_comch_server_event_msg_recv_register(server, on_msg));
		DOCA_ERROR_PROPAGATE(result, doca_comch_server_event_connection_status_changed_register(
						     server, on_connect, on_disconnect));
		DOCA_ERROR_PROPAGATE(result, doca_comch_server_event_consumer_register(server, on_new_consumer,
											 on_expired_consumer));
	} else {
		DOCA_ERROR_PROPAGATE(result, doca_comch_client_create(dev, name, &client));
		if (DOCA_IS_ERROR(result))
			goto out;
		ctx = doca_comch_client_as_ctx(client);
		DOCA_ERROR_PROPAGATE(result, doca_comch_client_task_send_set_conf(client, on_ctrl_sent, on_ctrl_sent, 1));
		DOCA_ERROR_PROPAGATE(result, doca_comch_client_event_msg_recv_register(client, on_msg));
		DOCA_ERROR_PROPAGATE(result, doca_comch_client_event_consumer_register(client, on_new_consumer,
											 on_expired_consumer));
	}
	DOCA_ERROR_PROPAGATE(result, doca_pe_connect_ctx(me.pe, ctx));
	if (DOCA_IS_ERROR(result))
		goto out;
	start = doca_ctx_start(ctx);
	if (start != DOCA_SUCCESS && start != DOCA_ERROR_IN_PROGRESS)
		result = start;
	DOCA_ERROR_PROPAGATE(result, wait_state(&me.pe, 1, ctx, DOCA_CTX_STATE_RUNNING));
	if (!me.server && result == DOCA_SUCCESS)
		result = doca_comch_client_get_connection(client, &me.conn);
	if (me.server && result == DOCA_SUCCESS) {
		uint64_t deadline = sample_now_ms() + SAMPLE_TIMEOUT_MS;

		while (me.conn == NULL && sample_now_ms() <= deadline)
			(void)doca_pe_progress(me.pe);
		if (me.conn == NULL)
			result = DOCA_ERROR_TIME_OUT;
	}
	if (DOCA_IS_ERROR(result))
		goto out;

	/* Round 1: client -> server; round 2: server -> client. */
	if (me.server) {
		DOCA_ERROR_PROPAGATE(result, receive_round(dev, n, "ping"));
		DOCA_ERROR_PROPAGATE(result, send_round(dev, n, "pong", &my_producer));
	} else {
		DOCA_ERROR_PROPAGATE(result, send_round(dev, n, "ping", &my_producer));
		DOCA_ERROR_PROPAGATE(result, receive_round(dev, n, "pong"));
	}

out:
	if (ctx != NULL)
		DOCA_ERROR_PROPAGATE(result, stop_ctx(&me.pe, 1, ctx));
	if (server != NULL)
		DOCA_ERROR_PROPAGATE(result, doca_comch_server_destroy(server));
	if (client != NULL)
		DOCA_ERROR_PROPAGATE(result, doca_comch_client_destroy(client));
	if (rep != NULL)
		doca_dev_rep_close(rep);
	result = sample_destroy_rest(result, me.pe, NULL, NULL, dev);
	if (DOCA_IS_ERROR(result) || failures > 0) {
		DOCA_LOG_ERR("comch_fast %s failed: %s, %d failed checks", role, doca_error_get_name(result), failures);
		return EXIT_FAILURE;
	}
	DOCA_LOG_INFO("comch_fast %s: %d messages received and %d sent through the fast path", role, n, n);
	return EXIT_SUCCESS;
}
