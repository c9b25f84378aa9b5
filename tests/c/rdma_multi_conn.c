/*
 * rdma_multi_conn.c -- a DOCA RDMA program in the style of the multi-connection samples: one
 * ctx with N connections, one message sent on each, and a sender that stops its ctx (or exits)
 * the moment every send has completed. On RC a completed send was received, so the receiver
 * must get all N messages, whatever the moment the sender stops, before it hears of any
 * connection error.
 *
 * Two processes, the same program:
 *   rdma_multi_conn -d <dev> --role receiver --dir <dir> [-nc N] [--rounds R]
 *   rdma_multi_conn -d <dev> --role sender   --dir <dir> [-nc N] [--rounds R] [--exit-last]
 * Descriptors travel through files in <dir> (one per connection and round, each deleted by its
 * reader); the receiver says it is ready (connected, first receive posted) with a file too.
 * The receiver posts one receive at a time and re-posts from its completion loop, so it is
 * still consuming when the sender stops. Every round uses new contexts. With --exit-last the
 * sender's last round ends the process right after the completions, without any cleanup.
 * The receiver exits 0 only if every message of every round arrived intact.
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <stdbool.h>

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

DOCA_LOG_REGISTER(RDMA_MULTI_CONN);

#include "sample_common.h"

#define MAX_CONNS 16
#define MSG_LEN 16

struct config {
	struct sample_config common; /* -d, --dir */
	bool sender;
	bool role_set;
	int conns;
	int rounds;
	bool exit_last;
};

/* What one round of one side holds. */
struct side {
	struct doca_dev *dev;
	struct doca_pe *pe;
	struct doca_rdma *rdma;
	struct doca_rdma_connection *conn[MAX_CONNS];
	struct doca_mmap *mmap;
	struct doca_buf_inventory *inv;
	uint8_t *mem;
	size_t mem_len;
	/* completions seen by the callbacks */
	int done;
	int received;
	doca_error_t first_error;
	char got[MAX_CONNS][MSG_LEN + 1];
};

/* ---- argp ---- */

static doca_error_t role_cb(void *param, void *config)
{
	struct config *cfg = config;
	const char *role = param;

	if (strcmp(role, "sender") != 0 && strcmp(role, "receiver") != 0) {
		DOCA_LOG_ERR("--role is sender or receiver, not %s", role);
		return DOCA_ERROR_INVALID_VALUE;
	}
	cfg->sender = strcmp(role, "sender") == 0;
	cfg->role_set = true;
	return DOCA_SUCCESS;
}

static doca_error_t conns_cb(void *param, void *config)
{
	int n = *(int *)param;

	if (n < 1 || n > MAX_CONNS) {
		DOCA_LOG_ERR("-nc must be 1..%d", MAX_CONNS);
		return DOCA_ERROR_INVALID_VALUE;
	}
	((struct config *)config)->conns = n;
	return DOCA_SUCCESS;
}

static doca_error_t rounds_cb(void *param, void *config)
{
	int n = *(int *)param;

	if (n < 1) {
		DOCA_LOG_ERR("--rounds must be positive");
		return DOCA_ERROR_INVALID_VALUE;
	}
	((struct config *)config)->rounds = n;
	return DOCA_SUCCESS;
}

static doca_error_t exit_last_cb(void *param, void *config)
{
	((struct config *)config)->exit_last = *(bool *)param;
	return DOCA_SUCCESS;
}

static doca_error_t register_params(void)
{
	doca_error_t result = DOCA_SUCCESS;

	DOCA_ERROR_PROPAGATE(result, sample_register_common(true));
	DOCA_ERROR_PROPAGATE(result,
			     sample_add_param(NULL, "role", "sender or receiver", DOCA_ARGP_TYPE_STRING, role_cb, true));
	DOCA_ERROR_PROPAGATE(result, sample_add_param("nc", "num-connections", "connections per round", DOCA_ARGP_TYPE_INT,
					       conns_cb, false));
	DOCA_ERROR_PROPAGATE(result, sample_add_param(NULL, "rounds", "rounds, each with new contexts", DOCA_ARGP_TYPE_INT,
					       rounds_cb, false));
	DOCA_ERROR_PROPAGATE(result, sample_add_param(NULL, "exit-last", "sender: exit right after the last completions",
					       DOCA_ARGP_TYPE_BOOLEAN, exit_last_cb, false));
	return result;
}

/* ---- completions ---- */

static void note_error(struct side *s, doca_error_t status)
{
	if (s->first_error == DOCA_SUCCESS)
		s->first_error = status;
}

static void send_done(struct doca_rdma_task_send *task, union doca_data task_ud, union doca_data ctx_ud)
{
	struct side *s = ctx_ud.ptr;
	struct doca_task *t = doca_rdma_task_send_as_task(task);
	struct doca_buf *src = (struct doca_buf *)doca_rdma_task_send_get_src_buf(task);

	(void)task_ud;
	if (doca_task_get_status(t) != DOCA_SUCCESS)
		note_error(s, doca_task_get_status(t));
	s->done++;
	doca_task_free(t);
	doca_buf_dec_refcount(src, NULL);
}

static void recv_done(struct doca_rdma_task_receive *task, union doca_data task_ud, union doca_data ctx_ud)
{
	struct side *s = ctx_ud.ptr;
	struct doca_task *t = doca_rdma_task_receive_as_task(task);
	struct doca_buf *dst = doca_rdma_task_receive_get_dst_buf(task);
	doca_error_t status = doca_task_get_status(t);

	if (status == DOCA_SUCCESS) {
		void *data;
		size_t len = 0;

		doca_buf_get_data(dst, &data);
		doca_buf_get_data_len(dst, &len);
		if (len == MSG_LEN && s->received < MAX_CONNS) {
			memcpy(s->got[s->received], data, MSG_LEN);
			s->got[s->received][MSG_LEN] = '\0';
		} else {
			DOCA_LOG_ERR("message %lu of %zu bytes", (unsigned long)task_ud.u64, len);
			note_error(s, DOCA_ERROR_UNEXPECTED);
		}
		s->received++;
	} else {
		note_error(s, status);
	}
	doca_task_free(t);
	doca_buf_dec_refcount(dst, NULL);
}

/* ---- one round ---- */

static doca_error_t side_open(struct side *s, const struct config *cfg)
{
	doca_error_t result;
	int n = cfg->conns;

	memset(s, 0, sizeof(*s));
	s->mem_len = 4096;
	s->mem = calloc(1, s->mem_len);
	if (s->mem == NULL)
		return DOCA_ERROR_NO_MEMORY;
	result = sample_open_device(cfg->common.device, &s->dev);
	if (DOCA_IS_ERROR(result))
		return result;
	result = doca_pe_create(&s->pe);
	DOCA_ERROR_PROPAGATE(result, doca_rdma_create(s->dev, &s->rdma));
	if (DOCA_IS_ERROR(result))
		return result;
	DOCA_ERROR_PROPAGATE(result, doca_rdma_set_permissions(s->rdma, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE));
	DOCA_ERROR_PROPAGATE(result, doca_rdma_set_max_num_connections(s->rdma, (uint16_t)n));
	DOCA_ERROR_PROPAGATE(result, doca_rdma_task_send_set_conf(s->rdma, send_done, send_done, (uint32_t)n));
	DOCA_ERROR_PROPAGATE(result, doca_rdma_task_receive_set_conf(s->rdma, recv_done, recv_done, (uint32_t)n));
	DOCA_ERROR_PROPAGATE(result, doca_ctx_set_user_data(doca_rdma_as_ctx(s->rdma), (union doca_data){.ptr = s}));
	DOCA_ERROR_PROPAGATE(result, doca_pe_connect_ctx(s->pe, doca_rdma_as_ctx(s->rdma)));
	if (DOCA_IS_ERROR(result))
		return result;
	result = sample_ctx_start(s->pe, doca_rdma_as_ctx(s->rdma));
	DOCA_ERROR_PROPAGATE(result, doca_mmap_create(&s->mmap));
	if (DOCA_IS_ERROR(result))
		return result;
	DOCA_ERROR_PROPAGATE(result, doca_mmap_set_memrange(s->mmap, s->mem, s->mem_len));
	DOCA_ERROR_PROPAGATE(result, doca_mmap_set_permissions(s->mmap, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE));
	DOCA_ERROR_PROPAGATE(result, doca_mmap_add_dev(s->mmap, s->dev));
	DOCA_ERROR_PROPAGATE(result, doca_mmap_start(s->mmap));
	DOCA_ERROR_PROPAGATE(result, doca_buf_inventory_create((size_t)(2 * n), &s->inv));
	DOCA_ERROR_PROPAGATE(result, doca_buf_inventory_start(s->inv));
	return result;
}

/* Stops the ctx (a no-op success if it is already IDLE) and releases everything. */
static doca_error_t side_close(struct side *s)
{
	doca_error_t result = DOCA_SUCCESS;

	if (s->rdma != NULL)
		DOCA_ERROR_PROPAGATE(result, sample_ctx_stop(s->pe, doca_rdma_as_ctx(s->rdma)));
	if (s->inv != NULL) {
		DOCA_ERROR_PROPAGATE(result, doca_buf_inventory_stop(s->inv));
		DOCA_ERROR_PROPAGATE(result, doca_buf_inventory_destroy(s->inv));
	}
	if (s->mmap != NULL) {
		DOCA_ERROR_PROPAGATE(result, doca_mmap_stop(s->mmap));
		DOCA_ERROR_PROPAGATE(result, doca_mmap_destroy(s->mmap));
	}
	if (s->rdma != NULL)
		DOCA_ERROR_PROPAGATE(result, doca_rdma_destroy(s->rdma));
	if (s->pe != NULL)
		DOCA_ERROR_PROPAGATE(result, doca_pe_destroy(s->pe));
	if (s->dev != NULL)
		DOCA_ERROR_PROPAGATE(result, doca_dev_close(s->dev));
	free(s->mem);
	return result;
}

static void desc_path(char *out, size_t cap, const struct config *cfg, const char *who, int round, int conn)
{
	snprintf(out, cap, "%s/%s-r%04d-c%02d.desc", cfg->common.dir, who, round, conn);
}

/* Exports every connection, trades descriptors through files, connects. */
static doca_error_t connect_all(struct side *s, const struct config *cfg, int round)
{
	const char *me = cfg->sender ? "sender" : "receiver";
	const char *peer = cfg->sender ? "receiver" : "sender";
	char path[512];
	doca_error_t result;
	int i;

	for (i = 0; i < cfg->conns; i++) {
		const void *desc;
		size_t len;

		result = doca_rdma_export(s->rdma, &desc, &len, &s->conn[i]);
		if (DOCA_IS_ERROR(result))
			return result;
		desc_path(path, sizeof(path), cfg, me, round, i);
		result = sample_write_file(path, desc, len);
		if (DOCA_IS_ERROR(result))
			return result;
	}
	for (i = 0; i < cfg->conns; i++) {
		uint8_t *desc;
		size_t len;

		desc_path(path, sizeof(path), cfg, peer, round, i);
		result = sample_read_file(path, &desc, &len);
		if (DOCA_IS_ERROR(result))
			return result;
		unlink(path);
		result = doca_rdma_connect(s->rdma, desc, len, s->conn[i]);
		free(desc);
		if (DOCA_IS_ERROR(result)) {
			DOCA_LOG_ERR("connect %d: %s", i, doca_error_get_name(result));
			return result;
		}
	}
	return DOCA_SUCCESS;
}

static doca_error_t post_receive(struct side *s, int slot)
{
	struct doca_rdma_task_receive *task;
	struct doca_buf *buf;
	doca_error_t result;

	result = doca_buf_inventory_buf_get_by_addr(s->inv, s->mmap, s->mem + 64 * slot, 64, &buf);
	if (DOCA_IS_ERROR(result))
		return result;
	result = doca_rdma_task_receive_allocate_init(s->rdma, buf, (union doca_data){.u64 = (uint64_t)slot}, &task);
	if (DOCA_IS_ERROR(result)) {
		doca_buf_dec_refcount(buf, NULL);
		return result;
	}
	result = doca_task_submit(doca_rdma_task_receive_as_task(task));
	if (DOCA_IS_ERROR(result)) {
		doca_task_free(doca_rdma_task_receive_as_task(task));
		doca_buf_dec_refcount(buf, NULL);
	}
	return result;
}

static void message_of(char *out, int round, int conn)
{
	char text[MSG_LEN + 1];

	snprintf(text, sizeof(text), "round%04d-conn%02d", round, conn);
	memcpy(out, text, MSG_LEN);
}

static doca_error_t sender_round(const struct config *cfg, int round)
{
	struct side s;
	char path[512];
	uint8_t *ready;
	size_t len;
	uint64_t deadline;
	doca_error_t result;
	int i;

	result = side_open(&s, cfg);
	DOCA_ERROR_PROPAGATE(result, connect_all(&s, cfg, round));
	if (DOCA_IS_ERROR(result))
		goto out;
	snprintf(path, sizeof(path), "%s/ready-r%04d", cfg->common.dir, round);
	result = sample_read_file(path, &ready, &len);
	if (DOCA_IS_ERROR(result))
		goto out;
	free(ready);
	unlink(path);
	for (i = 0; i < cfg->conns; i++) {
		struct doca_rdma_task_send *task;
		struct doca_buf *buf;

		message_of((char *)s.mem + 64 * i, round, i);
		result = doca_buf_inventory_buf_get_by_data(s.inv, s.mmap, s.mem + 64 * i, MSG_LEN, &buf);
		if (DOCA_IS_ERROR(result))
			goto out;
		result = doca_rdma_task_send_allocate_init(s.rdma, s.conn[i], buf, (union doca_data){.u64 = (uint64_t)i},
							   &task);
		if (DOCA_IS_ERROR(result))
			goto out;
		result = doca_task_submit(doca_rdma_task_send_as_task(task));
		if (DOCA_IS_ERROR(result))
			goto out;
	}
	deadline = sample_now_ms() + SAMPLE_TIMEOUT_MS;
	while (s.done < cfg->conns) {
		if (sample_now_ms() > deadline) {
			result = DOCA_ERROR_TIME_OUT;
			goto out;
		}
		(void)doca_pe_progress(s.pe);
	}
	if (s.first_error != DOCA_SUCCESS) {
		DOCA_LOG_ERR("round %d: a send failed: %s", round, doca_error_get_name(s.first_error));
		result = s.first_error;
		goto out;
	}
	/* Every send completed: leave at once, as the samples do. */
	if (cfg->exit_last && round == cfg->rounds - 1)
		_exit(0);
out:
	DOCA_ERROR_PROPAGATE(result, side_close(&s));
	return result;
}

static doca_error_t receiver_round(const struct config *cfg, int round)
{
	struct side s;
	char path[512];
	uint64_t deadline;
	doca_error_t result;
	int posted = 0, i, j;

	result = side_open(&s, cfg);
	DOCA_ERROR_PROPAGATE(result, connect_all(&s, cfg, round));
	DOCA_ERROR_PROPAGATE(result, post_receive(&s, posted++));
	if (DOCA_IS_ERROR(result))
		goto out;
	snprintf(path, sizeof(path), "%s/ready-r%04d", cfg->common.dir, round);
	result = sample_write_file(path, "ready", 5);
	if (DOCA_IS_ERROR(result))
		goto out;
	deadline = sample_now_ms() + SAMPLE_TIMEOUT_MS;
	while (s.received < cfg->conns && s.first_error == DOCA_SUCCESS) {
		int before = s.received;

		if (sample_now_ms() > deadline) {
			result = DOCA_ERROR_TIME_OUT;
			goto out;
		}
		(void)doca_pe_progress(s.pe);
		/* Re-post from the completion loop, one receive at a time. */
		for (i = before; i < s.received && posted < cfg->conns; i++) {
			result = post_receive(&s, posted++);
			if (DOCA_IS_ERROR(result)) {
				DOCA_LOG_ERR("round %d: re-posting a receive after %d messages: %s", round, s.received,
					     doca_error_get_name(result));
				note_error(&s, result);
			}
		}
	}
	if (s.received < cfg->conns) {
		DOCA_LOG_ERR("round %d: LOST MESSAGES: %d of %d arrived, then %s", round, s.received, cfg->conns,
			     doca_error_get_name(s.first_error));
		result = DOCA_ERROR_UNEXPECTED;
		goto out;
	}
	/* Every message once, intact, whatever the order of the connections. */
	for (i = 0; i < cfg->conns; i++) {
		char want[MSG_LEN];
		int seen = 0;

		message_of(want, round, i);
		for (j = 0; j < cfg->conns; j++)
			seen += memcmp(s.got[j], want, MSG_LEN) == 0;
		if (seen != 1) {
			DOCA_LOG_ERR("round %d: message %.*s arrived %d times", round, MSG_LEN, want, seen);
			result = DOCA_ERROR_UNEXPECTED;
		}
	}
out:
	DOCA_ERROR_PROPAGATE(result, side_close(&s));
	return result;
}

int main(int argc, char **argv)
{
	struct config cfg = {.conns = 3, .rounds = 1};
	doca_error_t result;
	int round;

	result = doca_log_backend_create_standard();
	if (DOCA_IS_ERROR(result))
		return EXIT_FAILURE;
	result = doca_argp_init("rdma_multi_conn", &cfg);
	if (DOCA_IS_ERROR(result))
		return EXIT_FAILURE;
	result = register_params();
	DOCA_ERROR_PROPAGATE(result, doca_argp_start(argc, argv));
	if (DOCA_IS_ERROR(result)) {
		DOCA_LOG_ERR("arguments: %s", doca_error_get_descr(result));
		doca_argp_destroy();
		return EXIT_FAILURE;
	}
	for (round = 0; round < cfg.rounds && result == DOCA_SUCCESS; round++)
		result = cfg.sender ? sender_round(&cfg, round) : receiver_round(&cfg, round);
	doca_argp_destroy();
	if (DOCA_IS_ERROR(result)) {
		DOCA_LOG_ERR("%s failed in round %d: %s", cfg.sender ? "sender" : "receiver", round - 1,
			     doca_error_get_name(result));
		return EXIT_FAILURE;
	}
	DOCA_LOG_INFO("%s: %d rounds of %d connections, every message delivered", cfg.sender ? "sender" : "receiver",
		      cfg.rounds, cfg.conns);
	return EXIT_SUCCESS;
}
