/*
 * doca_urom_plugin.h -- the UROM worker plugin ABI, as async-doca's soft provider implements it.
 *
 * Written for this project from the interface facts of the DOCA 3.x plugin ABI (struct and
 * function names, member order, types, numeric values); it is not NVIDIA's header. The names
 * match DOCA's so a plugin written for DOCA compiles against it unchanged.
 *
 * A worker process loads each plugin shared object and calls urom_plugin_get_iface() and
 * urom_plugin_get_version(). Every entry point of one plugin runs on the worker's single thread.
 *
 * Ownership:
 *  - worker_cmd() receives a list of urom_worker_cmd_desc allocated by the worker with malloc();
 *    the plugin takes each entry off the list and free()s it.
 *  - progress() appends urom_worker_notif_desc entries that the plugin allocated with malloc();
 *    the worker packs each with notif_pack() and free()s it. progress() returns
 *    DOCA_ERROR_EMPTY when it appended nothing.
 *  - addr(): when *addr_len is too small, set it to the length needed and return
 *    DOCA_ERROR_INVALID_VALUE.
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#ifndef ASYNC_DOCA_UROM_PLUGIN_H
#define ASYNC_DOCA_UROM_PLUGIN_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

/* Status codes (doca_error_t); attributes and the struct-version helpers (DOCA_STRUCT_START). */
#include "doca_compat.h"
#include "doca_error.h"

/* ---- API version ------------------------------------------------------------------------------
 * A plugin stamps its interface table with the DOCA_VERSION_EXACT of the SDK it was built with
 * (major << 24 | minor << 16 | patch), as DOCA does: DOCA_STRUCT_CTOR(iface) from doca_compat.h,
 * or { DOCA_STRUCT_CTOR_LIST_START, ... }. The soft worker accepts a plugin whose major version
 * is its own. UROM_PLUGIN_DOCA_API_VERSION is this project's name for the same value (not DOCA's).
 */
#define UROM_PLUGIN_DOCA_API_VERSION DOCA_VERSION_EXACT

/* ---- UCX's intrusive list ------------------------------------------------------------------------
 * DOCA's plugin ABI uses UCX's ucs_list_link_t, and DOCA's own plugins include UCX's list header
 * themselves, so with UCX installed this header uses that very header (one definition of the
 * type for the whole plugin). Only without UCX does it define a compatible list: the same
 * layout (prev, next; circular; an empty head points to itself) and the ucs_list_* helpers
 * plugins use, with UCX's names and meanings. Define ASYNC_DOCA_NO_UCX to force the fallback.
 */
#if !defined(ASYNC_DOCA_NO_UCX) && defined(__has_include)
#if __has_include(<ucs/datastruct/list.h>)
#include <ucs/datastruct/list.h>
#define ASYNC_DOCA_UCS_LIST_FROM_UCX 1
#endif
#endif

#ifndef ASYNC_DOCA_UCS_LIST_FROM_UCX
#ifndef ASYNC_DOCA_UCS_LIST_DEFINED
#define ASYNC_DOCA_UCS_LIST_DEFINED
typedef struct ucs_list_link {
	struct ucs_list_link *prev;
	struct ucs_list_link *next;
} ucs_list_link_t;

/* The address of the structure of type `type` whose member `member` is at `ptr`. */
#define ucs_container_of(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))

/* A list head initialised empty at its definition. */
#define UCS_LIST_HEAD(name) ucs_list_link_t name = {&(name), &(name)}

static inline void ucs_list_head_init(ucs_list_link_t *head)
{
	head->prev = head;
	head->next = head;
}

static inline int ucs_list_is_empty(const ucs_list_link_t *head)
{
	return head->next == head;
}

/* Links `elem` between `prev` and `next`, which are adjacent. */
static inline void ucs_list_insert_between(ucs_list_link_t *prev, ucs_list_link_t *next, ucs_list_link_t *elem)
{
	elem->prev = prev;
	elem->next = next;
	prev->next = elem;
	next->prev = elem;
}

static inline void ucs_list_add_tail(ucs_list_link_t *head, ucs_list_link_t *elem)
{
	ucs_list_insert_between(head->prev, head, elem);
}

static inline void ucs_list_add_head(ucs_list_link_t *head, ucs_list_link_t *elem)
{
	ucs_list_insert_between(head, head->next, elem);
}

static inline void ucs_list_del(ucs_list_link_t *elem)
{
	elem->prev->next = elem->next;
	elem->next->prev = elem->prev;
}

static inline unsigned long ucs_list_length(const ucs_list_link_t *head)
{
	unsigned long n = 0;
	const ucs_list_link_t *e;

	for (e = head->next; e != head; e = e->next)
		n++;
	return n;
}

/* Unlinks the first element of a non-empty list and returns its link. */
static inline ucs_list_link_t *ucs_list_extract_head_elem(ucs_list_link_t *head)
{
	ucs_list_link_t *first = head->next;

	ucs_list_del(first);
	return first;
}

/* Unlinks the first entry of a non-empty list and evaluates to its enclosing `type *`. */
#define ucs_list_extract_head(head, type, member) ucs_container_of(ucs_list_extract_head_elem(head), type, member)

/* The first / last entry of a non-empty list. */
#define ucs_list_head(head, type, member) ucs_container_of((head)->next, type, member)
#define ucs_list_tail(head, type, member) ucs_container_of((head)->prev, type, member)
#define ucs_list_next(elem, type, member) ucs_container_of((elem)->next, type, member)

/* Iterates `elem` (a `type *` named like the entries' type) over the list. */
#define ucs_list_for_each(elem, head, member)                                                     \
	for (elem = ucs_container_of((head)->next, __typeof__(*elem), member); &(elem)->member != (head); \
	     elem = ucs_container_of((elem)->member.next, __typeof__(*elem), member))

/* The same, allowing the loop body to unlink (and free) `elem`; `tmp` is scratch. */
#define ucs_list_for_each_safe(elem, tmp, head, member)                                           \
	for (elem = ucs_container_of((head)->next, __typeof__(*elem), member),                    \
	    tmp = ucs_container_of((elem)->member.next, __typeof__(*elem), member);               \
	     &(elem)->member != (head);                                                           \
	     elem = tmp, tmp = ucs_container_of((tmp)->member.next, __typeof__(*elem), member))
#endif /* ASYNC_DOCA_UCS_LIST_DEFINED */
#endif /* !ASYNC_DOCA_UCS_LIST_FROM_UCX */

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Commands and notifications ------------------------------------------------------------- */

/* A command for a plugin: `len` bytes of packed command follow the header. */
struct urom_worker_cmd {
	uint64_t type;         /* the plugin id (one bit) */
	uint64_t urom_context; /* the host's task key, echoed in the notification */
	uint64_t len;          /* bytes in plugin_cmd */
	uint8_t plugin_cmd[];
};

/* A notification from a plugin: `len` bytes of plugin data follow the header. */
struct urom_worker_notify {
	uint64_t type;         /* the plugin id */
	uint64_t urom_context; /* the command's */
	uint64_t len;          /* bytes in plugin_notif */
	doca_error_t status;   /* the command's outcome */
	uint32_t reserved;
	uint8_t plugin_notif[];
};

/* One entry of the list given to worker_cmd (malloc'd by the worker, freed by the plugin). */
struct urom_worker_cmd_desc {
	ucs_list_link_t entry;
	uint64_t dest_id; /* who sent it; the answer carries the same value */
	struct urom_worker_cmd worker_cmd;
};

/* One entry a plugin appends in progress (malloc'd by the plugin, freed by the worker). */
struct urom_worker_notif_desc {
	ucs_list_link_t entry;
	uint64_t dest_id; /* the answered command's */
	struct urom_worker_notify worker_notif;
};

struct urom_worker_ctx;

/* ---- The plugin's entry points --------------------------------------------------------------- */
struct urom_plugin_iface {
	DOCA_STRUCT_START; /* size_t __doca_api_version: DOCA_VERSION_EXACT of the building SDK */
	doca_error_t (*open)(struct urom_worker_ctx *ctx);
	void (*close)(struct urom_worker_ctx *ctx);
	doca_error_t (*addr)(struct urom_worker_ctx *ctx, void *addr, size_t *addr_len);
	doca_error_t (*worker_cmd)(struct urom_worker_ctx *ctx, ucs_list_link_t *cmd_list);
	doca_error_t (*progress)(struct urom_worker_ctx *ctx, ucs_list_link_t *notif_list);
	doca_error_t (*notif_pack)(struct urom_worker_notify *notif, size_t *packed_notif_len, void *packed_notif);
};

/* ---- What the worker tells a plugin about the members of its domain -------------------------- */
struct urom_domain_lookups_iface {
	/* The address this plugin reported on member `domain_id`. */
	doca_error_t (*addr_lookup)(struct urom_worker_ctx *ctx, uint64_t domain_id, void **addr);
	/* The index of the member's registered buffer that contains `va`. */
	doca_error_t (*seg_lookup)(struct urom_worker_ctx *ctx, uint64_t domain_id, uint64_t va, int *seg);
	/* The memory handle of the member's buffer `seg`. */
	doca_error_t (*memh_lookup)(struct urom_worker_ctx *ctx, uint64_t domain_id, int seg, size_t *len,
				    void **memh);
	/* The remote key of the member's buffer `seg`. */
	doca_error_t (*mkey_lookup)(struct urom_worker_ctx *ctx, uint64_t domain_id, int seg, size_t *len,
				    void **rkey);
};

/* One per loaded plugin in a worker. */
struct urom_worker_ctx {
	struct urom_plugin_iface iface;
	struct urom_domain_lookups_iface domain_iface;
	void *plugin_ctx; /* the plugin's own state, set by open */
};

/* ---- Domain lookups for plugins ------------------------------------------------------------------
 * Header-only, as in DOCA: each calls the worker's function in ctx->domain_iface. `domain_id` is
 * a member worker's id in the plugin's domain. Errors: INVALID_VALUE (a NULL argument, a ctx the
 * worker does not know), NOT_FOUND (no domain holds that worker, no such segment or address).
 * The returned pointers stay valid while the domain is installed in the worker.
 */

/* The address this plugin reported on worker `domain_id` (what its addr() wrote there). */
static inline doca_error_t doca_urom_worker_domain_addr_lookup(struct urom_worker_ctx *ctx, uint64_t domain_id,
							       void **addr)
{
	return ctx->domain_iface.addr_lookup(ctx, domain_id, addr);
}

/* The index of worker `domain_id`'s registered buffer that contains the address `va`. */
static inline doca_error_t doca_urom_worker_domain_seg_lookup(struct urom_worker_ctx *ctx, uint64_t domain_id,
							      uint64_t va, int *seg)
{
	return ctx->domain_iface.seg_lookup(ctx, domain_id, va, seg);
}

/* The memory handle bytes registered for buffer `seg` of worker `domain_id`, and their length. */
static inline doca_error_t doca_urom_worker_domain_memh_lookup(struct urom_worker_ctx *ctx, uint64_t domain_id,
							       int seg, size_t *len, void **memh)
{
	return ctx->domain_iface.memh_lookup(ctx, domain_id, seg, len, memh);
}

/* The remote key bytes registered for buffer `seg` of worker `domain_id`, and their length. */
static inline doca_error_t doca_urom_worker_domain_mkey_lookup(struct urom_worker_ctx *ctx, uint64_t domain_id,
							       int seg, size_t *len, void **rkey)
{
	return ctx->domain_iface.mkey_lookup(ctx, domain_id, seg, len, rkey);
}

/* ---- Exported by every plugin shared object --------------------------------------------------- */
doca_error_t urom_plugin_get_iface(struct urom_plugin_iface *iface);
doca_error_t urom_plugin_get_version(uint64_t *version);

/* ---- Soft-only extension (not part of DOCA): letting the worker sleep ---------------------------
 * DOCA's plugin ABI gives a worker nothing to wait on while commands are outstanding, so it must
 * keep calling progress(). A plugin for the soft provider may also export
 *
 *   doca_error_t urom_plugin_soft_arm(struct urom_worker_ctx *ctx, int *fd);
 *
 * The soft worker looks the symbol up when it loads the plugin (it is optional; NVIDIA's worker
 * never calls it). It calls it before it would go to sleep: when commands are outstanding on the
 * plugin and a progress() call advanced nothing, and when the worker is idle (a plugin may have
 * work of its own between commands; one that cannot be armed is then progressed every 1 ms):
 *  - DOCA_SUCCESS, *fd set: *fd becomes readable (POLLIN) once progress() has work again (arm a
 *    DOCA PE with doca_pe_request_notification and hand out its notification handle, or an
 *    epoll fd gathering it with the plugin's sockets). The worker sleeps in poll() on it and on
 *    its own sockets. The plugin's next progress() ends the armed state (clear the PE there).
 *  - DOCA_SUCCESS, *fd == -1: the plugin has no work of its own (its work comes with commands);
 *    the worker sleeps on its own sockets.
 *  - DOCA_ERROR_AGAIN: progress() has work right now; the worker does not sleep.
 *  - any other code: the plugin cannot tell; the worker polls progress() with a bounded back-off.
 * The worker also wakes up now and then on its own, so a missed wake-up costs time, not a hang.
 */
typedef doca_error_t (*urom_plugin_soft_arm_fn)(struct urom_worker_ctx *ctx, int *fd);
doca_error_t urom_plugin_soft_arm(struct urom_worker_ctx *ctx, int *fd);

#ifdef __cplusplus
}
#endif

#endif /* ASYNC_DOCA_UROM_PLUGIN_H */
