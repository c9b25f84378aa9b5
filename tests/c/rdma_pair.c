/*
 * rdma_pair.c -- every RDMA operation between a requester and a responder process, written the
 * way NVIDIA's RDMA samples are: argp flags, a registered log source, a device chosen by IB
 * device name or PCI address, connection and memory descriptors traded through files.
 *
 *   rdma_pair -d <dev> --role responder --dir <dir>
 *   rdma_pair -d <dev> --role requester --dir <dir>
 *
 * The responder posts four receives and exports its memory (descriptor file "mmap"). The
 * requester then, on one connection: send, send with immediate, write (4 KiB), write with
 * immediate (8 bytes; consumes the third receive), read (4 KiB the responder prepared),
 * fetch-add and compare-swap on a 64-bit counter, and a final send "done". The responder checks
 * every receive (opcode, length, immediate, bytes) and its memory after "done"; the requester
 * checks what it read and the atomics' old values. Each exits 0 only if everything matched.
 *
 * Memory: ordinary heap memory, except the responder's atomic target: the soft provider performs
 * remote atomics only on memory it can share with the requester (doca_soft_alloc_shared).
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
/* The soft provider's extensions, only where it is the provider (NVIDIA's SDK has no such header). */
#if defined(__has_include)
#if __has_include(<doca_soft.h>)
#include <doca_soft.h>
#endif
#endif

DOCA_LOG_REGISTER(RDMA_PAIR);

#include "sample_common.h"

#define MEM_LEN (16 * 1024)
#define OFF_WRITE 0
#define OFF_WRITE_IMM 4096
#define OFF_READ 8192
#define OFF_RECV 12288 /* four receive slots of 256 bytes */
#define ATOMIC_LEN 4096
#define NUM_OPS 16
#define IMM_SEND 0x11223344u
#define IMM_WRITE 0x55667788u

struct config {
	struct sample_config common; /* -d, --dir */
	bool requester;
};

struct op_state {
	doca_error_t status[NUM_OPS];
	bool done[NUM_OPS];
	enum doca_rdma_opcode opcode[NUM_OPS];
	uint32_t len[NUM_OPS];
	doca_be32_t imm[NUM_OPS];
	int completed;
};

/* ---- argp ---- */

static doca_error_t role_cb(void *param, void *config)
{
	const char *role = param;

	if (strcmp(role, "requester") != 0 && strcmp(role, "responder") != 0) {
		DOCA_LOG_ERR("--role is requester or responder, not %s", role);
		return DOCA_ERROR_INVALID_VALUE;
	}
	((struct config *)config)->requester = strcmp(role, "requester") == 0;
	return DOCA_SUCCESS;
}

/* ---- completions: one callback per task kind, all recording into the ctx's op_state ---- */

#define RECORDER(kind)                                                                             \
	static void kind##_done(struct doca_rdma_task_##kind *task, union doca_data ud, union doca_data cud) \
	{                                                                                          \
		struct op_state *st = cud.ptr;                                                     \
		struct doca_task *t = doca_rdma_task_##kind##_as_task(task);                       \
		record(st, ud.u64, doca_task_get_status(t));                                       \
		doca_task_free(t);                                                                 \
	}

static void record(struct op_state *st, uint64_t op, doca_error_t status)
{
	if (op >= NUM_OPS)
		return;
	st->status[op] = status;
	st->done[op] = true;
	st->completed++;
}

RECORDER(send)
RECORDER(send_imm)
RECORDER(read)
RECORDER(write)
RECORDER(write_imm)
RECORDER(atomic_fetch_add)
RECORDER(atomic_cmp_swp)

static void receive_done(struct doca_rdma_task_receive *task, union doca_data ud, union doca_data cud)
{
	struct op_state *st = cud.ptr;
	struct doca_task *t = doca_rdma_task_receive_as_task(task);

	if (ud.u64 < NUM_OPS && doca_task_get_status(t) == DOCA_SUCCESS) {
		st->opcode[ud.u64] = doca_rdma_task_receive_get_result_opcode(task);
		st->len[ud.u64] = doca_rdma_task_receive_get_result_len(task);
		st->imm[ud.u64] = doca_rdma_task_receive_get_result_immediate_data(task);
	}
	record(st, ud.u64, doca_task_get_status(t));
	doca_task_free(t);
}

/* ---- resources ---- */

struct side {
	struct doca_dev *dev;
	struct doca_pe *pe;
	struct doca_rdma *rdma;
	struct doca_rdma_connection *conn;
	uint8_t *mem;        /* heap memory: messages, writes, reads */
	uint8_t *atomic_mem; /* the 64-bit counter (and the requester's result slots) */
	struct doca_mmap *mmap, *atomic_mmap, *remote, *remote_atomic;
	struct doca_buf_inventory *inv;
	struct doca_buf *bufs[32];
	int n_bufs;
	struct op_state st;
};

static doca_error_t alloc_atomic_mem(uint8_t **mem)
{
#ifdef ASYNC_DOCA_SOFT
	return doca_soft_alloc_shared(ATOMIC_LEN, (void **)mem);
#else
	*mem = aligned_alloc(4096, ATOMIC_LEN);
	if (*mem == NULL)
		return DOCA_ERROR_NO_MEMORY;
	memset(*mem, 0, ATOMIC_LEN);
	return DOCA_SUCCESS;
#endif
}

static void free_atomic_mem(uint8_t *mem)
{
#ifdef ASYNC_DOCA_SOFT
	doca_soft_free_shared(mem);
#else
	free(mem);
#endif
}

static doca_error_t local_mmap(struct side *s, void *addr, size_t len, struct doca_mmap **m)
{
	doca_error_t result;

	result = doca_mmap_create(m);
	if (DOCA_IS_ERROR(result))
		return result;
	DOCA_ERROR_PROPAGATE(result, doca_mmap_set_memrange(*m, addr, len));
	DOCA_ERROR_PROPAGATE(result,
			     doca_mmap_set_permissions(*m, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE | DOCA_ACCESS_FLAG_RDMA_READ |
							   DOCA_ACCESS_FLAG_RDMA_WRITE | DOCA_ACCESS_FLAG_RDMA_ATOMIC));
	DOCA_ERROR_PROPAGATE(result, doca_mmap_add_dev(*m, s->dev));
	DOCA_ERROR_PROPAGATE(result, doca_mmap_start(*m));
	return result;
}

static doca_error_t side_open(struct side *s, const struct config *cfg)
{
	union doca_data cud = {.ptr = &s->st};
	doca_error_t result;

	memset(s, 0, sizeof(*s));
	s->mem = aligned_alloc(4096, MEM_LEN);
	if (s->mem == NULL)
		return DOCA_ERROR_NO_MEMORY;
	memset(s->mem, 0, MEM_LEN);
	result = alloc_atomic_mem(&s->atomic_mem);
	DOCA_ERROR_PROPAGATE(result, sample_open_device(cfg->common.device, &s->dev));
	if (DOCA_IS_ERROR(result))
		return result;
	result = doca_pe_create(&s->pe);
	DOCA_ERROR_PROPAGATE(result, doca_rdma_create(s->dev, &s->rdma));
	if (DOCA_IS_ERROR(result))
		return result;
	DOCA_ERROR_PROPAGATE(result, doca_rdma_set_permissions(s->rdma, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE |
									   DOCA_ACCESS_FLAG_RDMA_READ |
									   DOCA_ACCESS_FLAG_RDMA_WRITE |
									   DOCA_ACCESS_FLAG_RDMA_ATOMIC));
	DOCA_ERROR_PROPAGATE(result, doca_rdma_task_receive_set_conf(s->rdma, receive_done, receive_done, 8));
	DOCA_ERROR_PROPAGATE(result, doca_rdma_task_send_set_conf(s->rdma, send_done, send_done, 4));
	DOCA_ERROR_PROPAGATE(result, doca_rdma_task_send_imm_set_conf(s->rdma, send_imm_done, send_imm_done, 4));
	DOCA_ERROR_PROPAGATE(result, doca_rdma_task_read_set_conf(s->rdma, read_done, read_done, 4));
	DOCA_ERROR_PROPAGATE(result, doca_rdma_task_write_set_conf(s->rdma, write_done, write_done, 4));
	DOCA_ERROR_PROPAGATE(result, doca_rdma_task_write_imm_set_conf(s->rdma, write_imm_done, write_imm_done, 4));
	DOCA_ERROR_PROPAGATE(result, doca_rdma_task_atomic_fetch_add_set_conf(s->rdma, atomic_fetch_add_done,
									      atomic_fetch_add_done, 4));
	DOCA_ERROR_PROPAGATE(result, doca_rdma_task_atomic_cmp_swp_set_conf(s->rdma, atomic_cmp_swp_done,
									    atomic_cmp_swp_done, 4));
	DOCA_ERROR_PROPAGATE(result, doca_ctx_set_user_data(doca_rdma_as_ctx(s->rdma), cud));
	DOCA_ERROR_PROPAGATE(result, doca_pe_connect_ctx(s->pe, doca_rdma_as_ctx(s->rdma)));
	if (DOCA_IS_ERROR(result))
		return result;
	result = sample_ctx_start(s->pe, doca_rdma_as_ctx(s->rdma));
	DOCA_ERROR_PROPAGATE(result, local_mmap(s, s->mem, MEM_LEN, &s->mmap));
	DOCA_ERROR_PROPAGATE(result, local_mmap(s, s->atomic_mem, ATOMIC_LEN, &s->atomic_mmap));
	DOCA_ERROR_PROPAGATE(result, doca_buf_inventory_create(32, &s->inv));
	DOCA_ERROR_PROPAGATE(result, doca_buf_inventory_start(s->inv));
	return result;
}

static doca_error_t side_close(struct side *s)
{
	doca_error_t result = DOCA_SUCCESS;
	int i;

	if (s->rdma != NULL)
		DOCA_ERROR_PROPAGATE(result, sample_ctx_stop(s->pe, doca_rdma_as_ctx(s->rdma)));
	for (i = 0; i < s->n_bufs; i++)
		DOCA_ERROR_PROPAGATE(result, doca_buf_dec_refcount(s->bufs[i], NULL));
	if (s->inv != NULL) {
		DOCA_ERROR_PROPAGATE(result, doca_buf_inventory_stop(s->inv));
		DOCA_ERROR_PROPAGATE(result, doca_buf_inventory_destroy(s->inv));
	}
	/* Imported mmaps are stopped before they are destroyed, as the samples' cleanup does. */
	if (s->remote != NULL) {
		DOCA_ERROR_PROPAGATE(result, doca_mmap_stop(s->remote));
		DOCA_ERROR_PROPAGATE(result, doca_mmap_destroy(s->remote));
	}
	if (s->remote_atomic != NULL) {
		DOCA_ERROR_PROPAGATE(result, doca_mmap_stop(s->remote_atomic));
		DOCA_ERROR_PROPAGATE(result, doca_mmap_destroy(s->remote_atomic));
	}
	if (s->mmap != NULL) {
		DOCA_ERROR_PROPAGATE(result, doca_mmap_stop(s->mmap));
		DOCA_ERROR_PROPAGATE(result, doca_mmap_destroy(s->mmap));
	}
	if (s->atomic_mmap != NULL) {
		DOCA_ERROR_PROPAGATE(result, doca_mmap_stop(s->atomic_mmap));
		DOCA_ERROR_PROPAGATE(result, doca_mmap_destroy(s->atomic_mmap));
	}
	if (s->rdma != NULL)
		DOCA_ERROR_PROPAGATE(result, doca_rdma_destroy(s->rdma));
	if (s->pe != NULL)
		DOCA_ERROR_PROPAGATE(result, doca_pe_destroy(s->pe));
	if (s->dev != NULL)
		DOCA_ERROR_PROPAGATE(result, doca_dev_close(s->dev));
	free(s->mem);
	if (s->atomic_mem != NULL)
		free_atomic_mem(s->atomic_mem);
	return result;
}

/* A buffer over [addr, addr + len) of `m` holding `data_len` bytes of data; released at close. */
static struct doca_buf *buf(struct side *s, struct doca_mmap *m, void *addr, size_t len, size_t data_len)
{
	struct doca_buf *b = NULL;

	if (s->n_bufs == 32 ||
	    doca_buf_inventory_buf_get_by_args(s->inv, m, addr, len, addr, data_len, &b) != DOCA_SUCCESS) {
		DOCA_LOG_ERR("no buffer for %p+%zu", addr, len);
		failures++;
		return NULL;
	}
	s->bufs[s->n_bufs++] = b;
	return b;
}

static void path_of(char *out, size_t cap, const struct config *cfg, const char *name)
{
	snprintf(out, cap, "%s/%s", cfg->common.dir, name);
}

static doca_error_t publish(const struct config *cfg, const char *name, const void *data, size_t len)
{
	char path[512];

	path_of(path, sizeof(path), cfg, name);
	return sample_write_file(path, data, len);
}

static doca_error_t fetch(const struct config *cfg, const char *name, uint8_t **data, size_t *len)
{
	char path[512];
	doca_error_t result;

	path_of(path, sizeof(path), cfg, name);
	result = sample_read_file(path, data, len);
	unlink(path);
	return result;
}

/* Exports our connection, trades descriptors, connects. */
static doca_error_t connect_peer(struct side *s, const struct config *cfg)
{
	const void *desc;
	uint8_t *peer;
	size_t len, peer_len;
	doca_error_t result;

	result = doca_rdma_export(s->rdma, &desc, &len, &s->conn);
	DOCA_ERROR_PROPAGATE(result, publish(cfg, cfg->requester ? "requester.desc" : "responder.desc", desc, len));
	DOCA_ERROR_PROPAGATE(result, fetch(cfg, cfg->requester ? "responder.desc" : "requester.desc", &peer, &peer_len));
	if (DOCA_IS_ERROR(result))
		return result;
	result = doca_rdma_connect(s->rdma, peer, peer_len, s->conn);
	free(peer);
	return result;
}

static doca_error_t wait_ops(struct side *s, int count)
{
	uint64_t deadline = sample_now_ms() + SAMPLE_TIMEOUT_MS;

	while (s->st.completed < count) {
		if (sample_now_ms() > deadline) {
			DOCA_LOG_ERR("%d of %d operations completed", s->st.completed, count);
			return DOCA_ERROR_TIME_OUT;
		}
		(void)doca_pe_progress(s->pe);
	}
	return DOCA_SUCCESS;
}

/* ---- the two roles ---- */

static doca_error_t responder(struct side *s, const struct config *cfg)
{
	const void *desc;
	size_t len;
	uint64_t counter;
	doca_error_t result;
	int i;

	for (i = 0; i < 4096; i++)
		s->mem[OFF_READ + i] = (uint8_t)(i * 7 + 3);
	counter = 100;
	memcpy(s->atomic_mem, &counter, sizeof(counter));
	result = connect_peer(s, cfg);
	for (i = 0; i < 4; i++) {
		struct doca_rdma_task_receive *r;
		struct doca_buf *b = buf(s, s->mmap, s->mem + OFF_RECV + 256 * i, 256, 0);

		if (b == NULL)
			return DOCA_ERROR_NO_MEMORY;
		DOCA_ERROR_PROPAGATE(result, doca_rdma_task_receive_allocate_init(s->rdma, b, (union doca_data){.u64 = (uint64_t)i},
										    &r));
		if (DOCA_IS_ERROR(result))
			return result;
		DOCA_ERROR_PROPAGATE(result, doca_task_submit(doca_rdma_task_receive_as_task(r)));
	}
	DOCA_ERROR_PROPAGATE(result, doca_mmap_export_rdma(s->mmap, s->dev, &desc, &len));
	DOCA_ERROR_PROPAGATE(result, publish(cfg, "mmap.desc", desc, len));
	DOCA_ERROR_PROPAGATE(result, doca_mmap_export_rdma(s->atomic_mmap, s->dev, &desc, &len));
	DOCA_ERROR_PROPAGATE(result, publish(cfg, "atomic.desc", desc, len));
	DOCA_ERROR_PROPAGATE(result, wait_ops(s, 4));
	if (DOCA_IS_ERROR(result))
		return result;
	for (i = 0; i < 4; i++)
		CHECK(s->st.status[i] == DOCA_SUCCESS, "receive %d: %s", i, doca_error_get_name(s->st.status[i]));
	CHECK(s->st.opcode[0] == DOCA_RDMA_OPCODE_RECV_SEND && s->st.len[0] == 5, "send: opcode %d len %u",
	      (int)s->st.opcode[0], s->st.len[0]);
	CHECK(memcmp(s->mem + OFF_RECV, "hello", 5) == 0, "send bytes");
	CHECK(s->st.opcode[1] == DOCA_RDMA_OPCODE_RECV_SEND_WITH_IMM && s->st.imm[1] == IMM_SEND && s->st.len[1] == 3,
	      "send_imm: opcode %d imm %x len %u", (int)s->st.opcode[1], s->st.imm[1], s->st.len[1]);
	CHECK(memcmp(s->mem + OFF_RECV + 256, "imm", 3) == 0, "send_imm bytes");
	CHECK(s->st.opcode[2] == DOCA_RDMA_OPCODE_RECV_WRITE_WITH_IMM && s->st.imm[2] == IMM_WRITE &&
		      s->st.len[2] == 8,
	      "write_imm: opcode %d imm %x len %u", (int)s->st.opcode[2], s->st.imm[2], s->st.len[2]);
	CHECK(memcmp(s->mem + OFF_RECV + 768, "done", 4) == 0, "final send");
	/* Everything the requester did before "done" is visible now. */
	for (i = 0; i < 4096; i++)
		if (s->mem[OFF_WRITE + i] != (uint8_t)(i ^ 0x5A)) {
			CHECK(false, "written byte %d", i);
			break;
		}
	CHECK(memcmp(s->mem + OFF_WRITE_IMM, "write+im", 8) == 0, "write_imm bytes");
	memcpy(&counter, s->atomic_mem, sizeof(counter));
	CHECK(counter == 7, "counter after fetch-add 5 and compare-swap 105->7: %lu", (unsigned long)counter);
	return failures == 0 ? DOCA_SUCCESS : DOCA_ERROR_UNEXPECTED;
}

static doca_error_t requester(struct side *s, const struct config *cfg)
{
	uint8_t *desc;
	size_t len;
	uint64_t old;
	doca_error_t result;
	void *base, *abase;
	size_t base_len, abase_len;
	int i, ops = 0;
	struct doca_rdma_task_send *send;
	struct doca_rdma_task_send_imm *send_imm;
	struct doca_rdma_task_write *write;
	struct doca_rdma_task_write_imm *write_imm;
	struct doca_rdma_task_read *read;
	struct doca_rdma_task_atomic_fetch_add *fadd;
	struct doca_rdma_task_atomic_cmp_swp *cas;

	result = connect_peer(s, cfg);
	DOCA_ERROR_PROPAGATE(result, fetch(cfg, "mmap.desc", &desc, &len));
	if (DOCA_IS_ERROR(result))
		return result;
	result = doca_mmap_create_from_export(NULL, desc, len, s->dev, &s->remote);
	free(desc);
	DOCA_ERROR_PROPAGATE(result, fetch(cfg, "atomic.desc", &desc, &len));
	if (DOCA_IS_ERROR(result))
		return result;
	result = doca_mmap_create_from_export(NULL, desc, len, s->dev, &s->remote_atomic);
	free(desc);
	DOCA_ERROR_PROPAGATE(result, doca_mmap_get_memrange(s->remote, &base, &base_len));
	DOCA_ERROR_PROPAGATE(result, doca_mmap_get_memrange(s->remote_atomic, &abase, &abase_len));
	if (DOCA_IS_ERROR(result))
		return result;

	memcpy(s->mem, "hello", 5);
	memcpy(s->mem + 64, "imm", 3);
	for (i = 0; i < 4096; i++)
		s->mem[OFF_WRITE + 1024 + i] = (uint8_t)(i ^ 0x5A);
	memcpy(s->mem + 128, "write+im", 8);
	memcpy(s->mem + 192, "done", 4);

	/* One operation after the other, each checked; the last send comes after all of them. */
	result = doca_rdma_task_send_allocate_init(s->rdma, s->conn, buf(s, s->mmap, s->mem, 5, 5),
						   (union doca_data){.u64 = 0}, &send);
	DOCA_ERROR_PROPAGATE(result, doca_task_submit(doca_rdma_task_send_as_task(send)));
	DOCA_ERROR_PROPAGATE(result, wait_ops(s, ++ops));
	DOCA_ERROR_PROPAGATE(result, doca_rdma_task_send_imm_allocate_init(s->rdma, s->conn,
									  buf(s, s->mmap, s->mem + 64, 3, 3), IMM_SEND,
									  (union doca_data){.u64 = 1}, &send_imm));
	DOCA_ERROR_PROPAGATE(result, doca_task_submit(doca_rdma_task_send_imm_as_task(send_imm)));
	DOCA_ERROR_PROPAGATE(result, wait_ops(s, ++ops));
	DOCA_ERROR_PROPAGATE(result,
			     doca_rdma_task_write_allocate_init(s->rdma, s->conn,
								buf(s, s->mmap, s->mem + OFF_WRITE + 1024, 4096, 4096),
								buf(s, s->remote, (uint8_t *)base + OFF_WRITE, 4096, 0),
								(union doca_data){.u64 = 2}, &write));
	DOCA_ERROR_PROPAGATE(result, doca_task_submit(doca_rdma_task_write_as_task(write)));
	DOCA_ERROR_PROPAGATE(result, wait_ops(s, ++ops));
	DOCA_ERROR_PROPAGATE(result,
			     doca_rdma_task_write_imm_allocate_init(s->rdma, s->conn, buf(s, s->mmap, s->mem + 128, 8, 8),
								    buf(s, s->remote, (uint8_t *)base + OFF_WRITE_IMM, 8, 0),
								    IMM_WRITE, (union doca_data){.u64 = 3}, &write_imm));
	DOCA_ERROR_PROPAGATE(result, doca_task_submit(doca_rdma_task_write_imm_as_task(write_imm)));
	DOCA_ERROR_PROPAGATE(result, wait_ops(s, ++ops));
	DOCA_ERROR_PROPAGATE(result,
			     doca_rdma_task_read_allocate_init(s->rdma, s->conn,
							       buf(s, s->remote, (uint8_t *)base + OFF_READ, 4096, 4096),
							       buf(s, s->mmap, s->mem + OFF_READ, 4096, 0),
							       (union doca_data){.u64 = 4}, &read));
	DOCA_ERROR_PROPAGATE(result, doca_task_submit(doca_rdma_task_read_as_task(read)));
	DOCA_ERROR_PROPAGATE(result, wait_ops(s, ++ops));
	DOCA_ERROR_PROPAGATE(result, doca_rdma_task_atomic_fetch_add_allocate_init(
					     s->rdma, s->conn, buf(s, s->remote_atomic, abase, 8, 8),
					     buf(s, s->atomic_mmap, s->atomic_mem + 64, 8, 0), 5, (union doca_data){.u64 = 5},
					     &fadd));
	DOCA_ERROR_PROPAGATE(result, doca_task_submit(doca_rdma_task_atomic_fetch_add_as_task(fadd)));
	DOCA_ERROR_PROPAGATE(result, wait_ops(s, ++ops));
	DOCA_ERROR_PROPAGATE(result, doca_rdma_task_atomic_cmp_swp_allocate_init(
					     s->rdma, s->conn, buf(s, s->remote_atomic, abase, 8, 8),
					     buf(s, s->atomic_mmap, s->atomic_mem + 128, 8, 0), 105, 7,
					     (union doca_data){.u64 = 6}, &cas));
	DOCA_ERROR_PROPAGATE(result, doca_task_submit(doca_rdma_task_atomic_cmp_swp_as_task(cas)));
	DOCA_ERROR_PROPAGATE(result, wait_ops(s, ++ops));
	DOCA_ERROR_PROPAGATE(result, doca_rdma_task_send_allocate_init(s->rdma, s->conn,
								      buf(s, s->mmap, s->mem + 192, 4, 4),
								      (union doca_data){.u64 = 7}, &send));
	DOCA_ERROR_PROPAGATE(result, doca_task_submit(doca_rdma_task_send_as_task(send)));
	DOCA_ERROR_PROPAGATE(result, wait_ops(s, ++ops));
	if (DOCA_IS_ERROR(result))
		return result;
	for (i = 0; i < ops; i++)
		CHECK(s->st.status[i] == DOCA_SUCCESS, "operation %d: %s", i, doca_error_get_name(s->st.status[i]));
	for (i = 0; i < 4096; i++)
		if (s->mem[OFF_READ + i] != (uint8_t)(i * 7 + 3)) {
			CHECK(false, "read byte %d", i);
			break;
		}
	memcpy(&old, s->atomic_mem + 64, sizeof(old));
	CHECK(old == 100, "fetch-add old value %lu", (unsigned long)old);
	memcpy(&old, s->atomic_mem + 128, sizeof(old));
	CHECK(old == 105, "compare-swap old value %lu", (unsigned long)old);
	return failures == 0 ? DOCA_SUCCESS : DOCA_ERROR_UNEXPECTED;
}

int main(int argc, char **argv)
{
	struct config cfg = {0};
	struct side s;
	doca_error_t result;

	result = doca_log_backend_create_standard();
	DOCA_ERROR_PROPAGATE(result, doca_argp_init("rdma_pair", &cfg));
	if (DOCA_IS_ERROR(result))
		return EXIT_FAILURE;
	result = sample_register_common(true);
	DOCA_ERROR_PROPAGATE(result, sample_add_param(NULL, "role", "requester or responder", DOCA_ARGP_TYPE_STRING,
						      role_cb, true));
	DOCA_ERROR_PROPAGATE(result, doca_argp_start(argc, argv));
	if (DOCA_IS_ERROR(result)) {
		doca_argp_destroy();
		return EXIT_FAILURE;
	}
	result = side_open(&s, &cfg);
	if (result == DOCA_SUCCESS)
		result = cfg.requester ? requester(&s, &cfg) : responder(&s, &cfg);
	DOCA_ERROR_PROPAGATE(result, side_close(&s));
	doca_argp_destroy();
	if (DOCA_IS_ERROR(result)) {
		DOCA_LOG_ERR("%s failed: %s", cfg.requester ? "requester" : "responder", doca_error_get_name(result));
		return EXIT_FAILURE;
	}
	DOCA_LOG_INFO("%s: every operation verified", cfg.requester ? "requester" : "responder");
	return EXIT_SUCCESS;
}
