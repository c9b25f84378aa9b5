/*
 * c_loopback -- a UROM worker plugin written in C against doca-soft/include/doca_urom_plugin.h.
 *
 * It answers every command with a notification whose body is the command's payload with its
 * bytes in reverse order, so a test can tell its answers from worker_graph's. One command is
 * different: "LOOKUP" followed by a u64 domain worker id and a u64 address (22 bytes, host byte
 * order) runs the four domain lookup helpers of doca_urom_plugin.h inside the worker and
 * answers with what they found (see c_loopback_probe_lookups) and their status. It exists to
 * check that the header describes the same ABI the Rust side (doca-sys, the SDK, the soft
 * worker) implements: the struct sizes are asserted below against the values doca-sys checks.
 *
 * Model: open() allocates the state (a list of answers not yet handed over); worker_cmd() turns
 * each command into a malloc'd notification descriptor on that list and frees the command
 * descriptor; progress() moves the whole list to the worker, which frees each entry after
 * notif_pack(). close() frees answers never handed over. The address is the fixed string
 * "c_loopback".
 *
 * Build: cc -shared -fPIC -O2 -Wall -Werror -I doca-soft/include -o libc_loopback.so c_loopback.c
 * (with UCX's headers installed the list type is UCX's; -DASYNC_DOCA_NO_UCX forces the header's
 * own compatible definition). With -DC_LOOPBACK_DOCA_LOG and `pkg-config --cflags --libs
 * doca-common` it also logs through DOCA_LOG, as NVIDIA's plugins do, linked to the DOCA library
 * (libdoca_soft.so here) like theirs: open() logs "c_loopback opened".
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <doca_urom_plugin.h>

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#ifdef C_LOOPBACK_DOCA_LOG
#include <doca_log.h>
DOCA_LOG_REGISTER(C_LOOPBACK);
#endif

/* The layout doca-sys asserts in _UROM_PLUGIN_ABI_CHECKS (doca-sys/src/urom_plugin.rs). */
_Static_assert(sizeof(struct urom_worker_cmd) == 24, "urom_worker_cmd");
_Static_assert(sizeof(struct urom_worker_notify) == 32, "urom_worker_notify");
_Static_assert(sizeof(struct urom_worker_cmd_desc) == 48, "urom_worker_cmd_desc");
_Static_assert(sizeof(struct urom_worker_notif_desc) == 56, "urom_worker_notif_desc");
_Static_assert(sizeof(struct urom_plugin_iface) == 56, "urom_plugin_iface");
_Static_assert(sizeof(struct urom_domain_lookups_iface) == 32, "urom_domain_lookups_iface");
_Static_assert(sizeof(struct urom_worker_ctx) == 96, "urom_worker_ctx");
_Static_assert(sizeof(doca_error_t) == 4, "doca_error_t");
_Static_assert(sizeof(ucs_list_link_t) == 2 * sizeof(void *), "ucs_list_link_t");
_Static_assert(DOCA_VERSION_EXACT == 0x0300003A, "DOCA_VERSION_EXACT of 3.0.0058");

/* Which list definition this build used: UCX's own header, or doca_urom_plugin.h's fallback. */
#ifdef ASYNC_DOCA_UCS_LIST_FROM_UCX
const char c_loopback_list_impl[] = "ucx";
#else
const char c_loopback_list_impl[] = "fallback";
#endif

#define C_LOOPBACK_VERSION 1

static const char c_loopback_address[] = "c_loopback";

struct c_loopback {
	ucs_list_link_t pending; /* urom_worker_notif_desc entries not yet given to the worker */
	uint64_t progress_calls; /* how often the worker called progress (the "PROGRESS" command) */
};

static doca_error_t c_loopback_open(struct urom_worker_ctx *ctx)
{
	struct c_loopback *state;

	if (ctx == NULL)
		return DOCA_ERROR_INVALID_VALUE;
	state = calloc(1, sizeof(*state));
	if (state == NULL)
		return DOCA_ERROR_NO_MEMORY;
	ucs_list_head_init(&state->pending);
	ctx->plugin_ctx = state;
#ifdef C_LOOPBACK_DOCA_LOG
	DOCA_LOG_INFO("c_loopback opened");
#endif
	return DOCA_SUCCESS;
}

static void c_loopback_close(struct urom_worker_ctx *ctx)
{
	struct c_loopback *state;

	if (ctx == NULL || ctx->plugin_ctx == NULL)
		return;
	state = ctx->plugin_ctx;
	while (!ucs_list_is_empty(&state->pending))
		free(ucs_list_extract_head(&state->pending, struct urom_worker_notif_desc, entry));
	free(state);
	ctx->plugin_ctx = NULL;
}

static doca_error_t c_loopback_addr(struct urom_worker_ctx *ctx, void *addr, size_t *addr_len)
{
	size_t needed = sizeof(c_loopback_address) - 1;

	if (ctx == NULL || ctx->plugin_ctx == NULL || addr_len == NULL)
		return DOCA_ERROR_INVALID_VALUE;
	if (*addr_len < needed || addr == NULL) {
		*addr_len = needed;
		return DOCA_ERROR_INVALID_VALUE;
	}
	memcpy(addr, c_loopback_address, needed);
	*addr_len = needed;
	return DOCA_SUCCESS;
}

doca_error_t c_loopback_probe_lookups(struct urom_worker_ctx *ctx, uint64_t domain_id, uint64_t va, size_t addr_len,
				      uint8_t *out, size_t *out_len);

#define LOOKUP_CMD_LEN (6 + 2 * sizeof(uint64_t))
#define LOOKUP_REPLY_MAX 600

/* A "LOOKUP" command: the notification's body is the lookups' findings. */
static struct urom_worker_notif_desc *c_loopback_lookup(struct urom_worker_ctx *ctx, struct urom_worker_cmd_desc *cmd)
{
	struct urom_worker_notif_desc *notif;
	uint64_t domain_id, va;
	size_t out_len = LOOKUP_REPLY_MAX;

	notif = malloc(sizeof(*notif) + LOOKUP_REPLY_MAX);
	if (notif == NULL)
		return NULL;
	memcpy(&domain_id, cmd->worker_cmd.plugin_cmd + 6, sizeof(domain_id));
	memcpy(&va, cmd->worker_cmd.plugin_cmd + 6 + sizeof(domain_id), sizeof(va));
	notif->worker_notif.status = c_loopback_probe_lookups(ctx, domain_id, va, sizeof(c_loopback_address) - 1,
							      (uint8_t *)notif->worker_notif.plugin_notif, &out_len);
	notif->worker_notif.len = notif->worker_notif.status == DOCA_SUCCESS ? out_len : 0;
	return notif;
}

static doca_error_t c_loopback_worker_cmd(struct urom_worker_ctx *ctx, ucs_list_link_t *cmd_list)
{
	struct c_loopback *state;
	struct urom_worker_cmd_desc *cmd;
	struct urom_worker_notif_desc *notif;
	uint64_t i, len;

	if (ctx == NULL || ctx->plugin_ctx == NULL || cmd_list == NULL)
		return DOCA_ERROR_INVALID_VALUE;
	state = ctx->plugin_ctx;
	while (!ucs_list_is_empty(cmd_list)) {
		cmd = ucs_list_extract_head(cmd_list, struct urom_worker_cmd_desc, entry);
		len = cmd->worker_cmd.len;
		if (len == LOOKUP_CMD_LEN && memcmp(cmd->worker_cmd.plugin_cmd, "LOOKUP", 6) == 0) {
			notif = c_loopback_lookup(ctx, cmd);
		} else if (len == 16 && memcmp(cmd->worker_cmd.plugin_cmd, "OVERSIZE", 8) == 0) {
			/* An answer of the given size, which notif_pack then writes without looking at
			 * the room it is given (what NVIDIA's sandbox and RDMO packers do). */
			uint64_t size;

			memcpy(&size, cmd->worker_cmd.plugin_cmd + 8, sizeof(size));
			notif = size <= (64u << 20) ? malloc(sizeof(*notif) + size) : NULL;
			if (notif != NULL) {
				notif->worker_notif.len = size;
				notif->worker_notif.status = DOCA_SUCCESS;
				memset(notif->worker_notif.plugin_notif, 'x', size);
				notif->worker_notif.plugin_notif[0] = 'O'; /* marks it for notif_pack */
			}
		} else if (len == 8 && memcmp(cmd->worker_cmd.plugin_cmd, "ERRNOTIF", 8) == 0) {
			/* What NVIDIA's sandbox and RDMO plugins do on some errors: queue an answer and
			 * return the error too. The command must be answered once (with the error). */
			notif = malloc(sizeof(*notif) + 5);
			if (notif != NULL) {
				notif->worker_notif.len = 5;
				notif->worker_notif.status = DOCA_SUCCESS;
				memcpy(notif->worker_notif.plugin_notif, "STRAY", 5);
				notif->dest_id = cmd->dest_id;
				notif->worker_notif.type = cmd->worker_cmd.type;
				notif->worker_notif.urom_context = cmd->worker_cmd.urom_context;
				notif->worker_notif.reserved = 0;
				ucs_list_add_tail(&state->pending, &notif->entry);
			}
			free(cmd);
			return DOCA_ERROR_INVALID_VALUE;
		} else if (len == 8 && memcmp(cmd->worker_cmd.plugin_cmd, "PROGRESS", 8) == 0) {
			/* The answer is the count of progress calls so far (the worker's idle loop). */
			notif = malloc(sizeof(*notif) + sizeof(state->progress_calls));
			if (notif != NULL) {
				notif->worker_notif.len = sizeof(state->progress_calls);
				notif->worker_notif.status = DOCA_SUCCESS;
				memcpy(notif->worker_notif.plugin_notif, &state->progress_calls,
				       sizeof(state->progress_calls));
			}
		} else {
			notif = malloc(sizeof(*notif) + len);
			if (notif != NULL) {
				notif->worker_notif.len = len;
				notif->worker_notif.status = DOCA_SUCCESS;
				for (i = 0; i < len; i++)
					notif->worker_notif.plugin_notif[i] = cmd->worker_cmd.plugin_cmd[len - 1 - i];
			}
		}
		if (notif == NULL) {
			free(cmd);
			return DOCA_ERROR_NO_MEMORY;
		}
		notif->dest_id = cmd->dest_id;
		notif->worker_notif.type = cmd->worker_cmd.type;
		notif->worker_notif.urom_context = cmd->worker_cmd.urom_context;
		notif->worker_notif.reserved = 0;
		ucs_list_add_tail(&state->pending, &notif->entry);
		free(cmd);
	}
	return DOCA_SUCCESS;
}

static doca_error_t c_loopback_progress(struct urom_worker_ctx *ctx, ucs_list_link_t *notif_list)
{
	struct c_loopback *state;

	if (ctx == NULL || ctx->plugin_ctx == NULL || notif_list == NULL)
		return DOCA_ERROR_INVALID_VALUE;
	state = ctx->plugin_ctx;
	state->progress_calls++;
	if (ucs_list_is_empty(&state->pending))
		return DOCA_ERROR_EMPTY;
	while (!ucs_list_is_empty(&state->pending)) {
		struct urom_worker_notif_desc *notif =
			ucs_list_extract_head(&state->pending, struct urom_worker_notif_desc, entry);
		ucs_list_add_tail(notif_list, &notif->entry);
	}
	return DOCA_SUCCESS;
}

/*
 * The packed form is the notification header (type, urom_context, len, status) followed by the
 * body, as DOCA's own plugins pack it; the worker sends the host only the body and turns the
 * header's status into the task's status.
 */
static doca_error_t c_loopback_notif_pack(struct urom_worker_notify *notif, size_t *packed_notif_len,
					  void *packed_notif)
{
	size_t header = offsetof(struct urom_worker_notify, plugin_notif);

	if (notif == NULL || packed_notif_len == NULL)
		return DOCA_ERROR_INVALID_VALUE;
	/* An OVERSIZE answer is packed without the room check, as NVIDIA's packers do. */
	if (*packed_notif_len < header + notif->len && !(notif->len > 0 && notif->plugin_notif[0] == 'O'))
		return DOCA_ERROR_TOO_BIG;
	memcpy(packed_notif, notif, header + notif->len);
	*packed_notif_len = header + notif->len;
	return DOCA_SUCCESS;
}

/*
 * A test hook (not part of the plugin ABI): runs the four header-only domain lookups of
 * doca_urom_plugin.h on `ctx` for member `domain_id` and the buffer containing `va`, and
 * writes what they found to `out`: the first `addr_len` bytes of the member's address, the
 * segment index (one byte), then the memh and mkey, each as a length byte and the bytes.
 * Returns the first failing lookup's status; `*out_len` is the bytes written.
 */
doca_error_t c_loopback_probe_lookups(struct urom_worker_ctx *ctx, uint64_t domain_id, uint64_t va, size_t addr_len,
				      uint8_t *out, size_t *out_len)
{
	void *addr = NULL, *memh = NULL, *mkey = NULL;
	size_t memh_len = 0, mkey_len = 0, o = 0;
	int seg = -1;
	doca_error_t st;

	st = doca_urom_worker_domain_addr_lookup(ctx, domain_id, &addr);
	if (st == DOCA_SUCCESS)
		st = doca_urom_worker_domain_seg_lookup(ctx, domain_id, va, &seg);
	if (st == DOCA_SUCCESS)
		st = doca_urom_worker_domain_memh_lookup(ctx, domain_id, seg, &memh_len, &memh);
	if (st == DOCA_SUCCESS)
		st = doca_urom_worker_domain_mkey_lookup(ctx, domain_id, seg, &mkey_len, &mkey);
	if (st != DOCA_SUCCESS)
		return st;
	if (addr_len + 3 + memh_len + mkey_len > *out_len || memh_len > 255 || mkey_len > 255)
		return DOCA_ERROR_TOO_BIG;
	memcpy(out + o, addr, addr_len);
	o += addr_len;
	out[o++] = (uint8_t)seg;
	out[o++] = (uint8_t)memh_len;
	memcpy(out + o, memh, memh_len);
	o += memh_len;
	out[o++] = (uint8_t)mkey_len;
	memcpy(out + o, mkey, mkey_len);
	o += mkey_len;
	*out_len = o;
	return DOCA_SUCCESS;
}

doca_error_t urom_plugin_get_iface(struct urom_plugin_iface *iface)
{
	if (iface == NULL)
		return DOCA_ERROR_INVALID_VALUE;
	/* Stamped the way DOCA's plugins do it: the building SDK's DOCA_VERSION_EXACT. */
	struct urom_plugin_iface table = {
		.open = c_loopback_open,
		.close = c_loopback_close,
		.addr = c_loopback_addr,
		.worker_cmd = c_loopback_worker_cmd,
		.progress = c_loopback_progress,
		.notif_pack = c_loopback_notif_pack,
	};

	DOCA_STRUCT_CTOR(table);
	*iface = table;
	return DOCA_SUCCESS;
}

doca_error_t urom_plugin_get_version(uint64_t *version)
{
	if (version == NULL)
		return DOCA_ERROR_INVALID_VALUE;
	*version = C_LOOPBACK_VERSION;
	return DOCA_SUCCESS;
}
