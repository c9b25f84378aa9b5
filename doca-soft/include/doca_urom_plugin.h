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

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Status codes: doca_error_t (int-sized; new values may appear in newer releases) --------- */
#include "doca_error.h"

/* ---- API version: major << 24 | minor << 16 | patch ----------------------------------------- */
#define UROM_PLUGIN_DOCA_API_VERSION_MAJOR 3
#define UROM_PLUGIN_DOCA_API_VERSION_MINOR 0
#define UROM_PLUGIN_DOCA_API_VERSION_PATCH 0
#define UROM_PLUGIN_DOCA_API_VERSION                                                                \
	(((size_t)UROM_PLUGIN_DOCA_API_VERSION_MAJOR << 24) |                                         \
	 ((size_t)UROM_PLUGIN_DOCA_API_VERSION_MINOR << 16) | (size_t)UROM_PLUGIN_DOCA_API_VERSION_PATCH)

/* ---- UCX's intrusive list: circular, doubly linked; an empty head points to itself ----------- */
#ifndef ASYNC_DOCA_UCS_LIST_DEFINED
#define ASYNC_DOCA_UCS_LIST_DEFINED
typedef struct ucs_list_link {
	struct ucs_list_link *prev;
	struct ucs_list_link *next;
} ucs_list_link_t;

/* The address of the structure of type `type` whose member `member` is at `ptr`. */
#define ucs_container_of(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))

static inline void ucs_list_head_init(ucs_list_link_t *head)
{
	head->prev = head;
	head->next = head;
}

static inline int ucs_list_is_empty(const ucs_list_link_t *head)
{
	return head->next == head;
}

static inline void ucs_list_add_tail(ucs_list_link_t *head, ucs_list_link_t *elem)
{
	elem->prev = head->prev;
	elem->next = head;
	head->prev->next = elem;
	head->prev = elem;
}

static inline void ucs_list_del(ucs_list_link_t *elem)
{
	elem->prev->next = elem->next;
	elem->next->prev = elem->prev;
}

/* Unlinks the first entry of a non-empty list and evaluates to its enclosing `type *`. */
#define ucs_list_extract_head(head, type, member)                                                  \
	({                                                                                            \
		ucs_list_link_t *ucs_list_first__ = (head)->next;                                     \
		ucs_list_del(ucs_list_first__);                                                       \
		ucs_container_of(ucs_list_first__, type, member);                                     \
	})
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
	size_t __doca_api_version; /* UROM_PLUGIN_DOCA_API_VERSION */
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

/* ---- Exported by every plugin shared object --------------------------------------------------- */
doca_error_t urom_plugin_get_iface(struct urom_plugin_iface *iface);
doca_error_t urom_plugin_get_version(uint64_t *version);

#ifdef __cplusplus
}
#endif

#endif /* ASYNC_DOCA_UROM_PLUGIN_H */
