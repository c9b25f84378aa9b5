/*
 * A UROM test plugin ("echo"), built by the host end-to-end tests with the system C compiler.
 * Commands (the packed payload) and their notifications:
 *   "die"          the worker process exits at once (_exit(3)): the host sees it die
 *   "fail..."      DOCA_ERROR_IO_FAILED, the payload echoed
 *   "addr:<id>"    the address this plugin reported on domain member <id> (8 bytes), looked up
 *                  through the worker's domain table; DOCA_ERROR_NOT_FOUND without a domain
 *   anything else  success, the payload echoed
 * The plugin's worker address is 8 bytes: "EA" followed by the process id in 6 bytes.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int doca_error_t;
#define OK 0
#define ERR_INVALID_VALUE 6
#define ERR_NOT_FOUND 16
#define ERR_IO_FAILED 17
#define ERR_EMPTY 25

struct ucs_list_link { struct ucs_list_link *prev, *next; };
struct urom_worker_cmd { uint64_t type; uint64_t urom_context; uint64_t len; uint8_t plugin_cmd[]; };
struct urom_worker_notify {
	uint64_t type; uint64_t urom_context; uint64_t len; doca_error_t status; uint32_t reserved;
	uint8_t plugin_notif[];
};
struct urom_worker_cmd_desc { struct ucs_list_link entry; uint64_t dest_id; struct urom_worker_cmd worker_cmd; };
struct urom_worker_notif_desc { struct ucs_list_link entry; uint64_t dest_id; struct urom_worker_notify worker_notif; };
struct urom_worker_ctx;
struct urom_plugin_iface {
	size_t __doca_api_version;
	doca_error_t (*open)(struct urom_worker_ctx *ctx);
	void (*close)(struct urom_worker_ctx *ctx);
	doca_error_t (*addr)(struct urom_worker_ctx *ctx, void *addr, size_t *addr_len);
	doca_error_t (*worker_cmd)(struct urom_worker_ctx *ctx, struct ucs_list_link *cmd_list);
	doca_error_t (*progress)(struct urom_worker_ctx *ctx, struct ucs_list_link *notif_list);
	doca_error_t (*notif_pack)(struct urom_worker_notify *notif, size_t *packed_notif_len, void *packed_notif);
};
struct urom_domain_lookups_iface {
	doca_error_t (*addr_lookup)(struct urom_worker_ctx *ctx, uint64_t domain_id, void **addr);
	doca_error_t (*seg_lookup)(struct urom_worker_ctx *ctx, uint64_t domain_id, uint64_t va, int *seg);
	doca_error_t (*memh_lookup)(struct urom_worker_ctx *ctx, uint64_t domain_id, int seg, size_t *len, void **memh);
	doca_error_t (*mkey_lookup)(struct urom_worker_ctx *ctx, uint64_t domain_id, int seg, size_t *len, void **rkey);
};
struct urom_worker_ctx { struct urom_plugin_iface iface; struct urom_domain_lookups_iface domain_iface; void *plugin_ctx; };

/* Finished notifications waiting for progress (a worker process runs one instance). */
static struct ucs_list_link pending = { &pending, &pending };

static void list_del(struct ucs_list_link *e) { e->prev->next = e->next; e->next->prev = e->prev; }
static void list_add_tail(struct ucs_list_link *head, struct ucs_list_link *e)
{
	e->next = head; e->prev = head->prev; head->prev->next = e; head->prev = e;
}

static void my_addr(uint8_t out[8])
{
	uint64_t pid = (uint64_t)getpid();
	out[0] = 'E'; out[1] = 'A';
	for (int i = 0; i < 6; i++) out[2 + i] = (uint8_t)(pid >> (8 * i));
}

static doca_error_t p_open(struct urom_worker_ctx *ctx) { ctx->plugin_ctx = NULL; return OK; }
static void p_close(struct urom_worker_ctx *ctx) { (void)ctx; }

static doca_error_t p_addr(struct urom_worker_ctx *ctx, void *addr, size_t *addr_len)
{
	(void)ctx;
	if (*addr_len < 8) { *addr_len = 8; return ERR_INVALID_VALUE; }
	my_addr(addr);
	*addr_len = 8;
	return OK;
}

static struct urom_worker_notif_desc *notif(uint64_t dest, const struct urom_worker_cmd *c, doca_error_t st,
					    const void *body, size_t len)
{
	struct urom_worker_notif_desc *n = malloc(sizeof(*n) + len);
	if (!n) return NULL;
	n->dest_id = dest;
	n->worker_notif.type = c->type;
	n->worker_notif.urom_context = c->urom_context;
	n->worker_notif.len = len;
	n->worker_notif.status = st;
	n->worker_notif.reserved = 0;
	memcpy(n->worker_notif.plugin_notif, body, len);
	return n;
}

static doca_error_t p_worker_cmd(struct urom_worker_ctx *ctx, struct ucs_list_link *cmd_list)
{
	while (cmd_list->next != cmd_list) {
		struct urom_worker_cmd_desc *d = (struct urom_worker_cmd_desc *)cmd_list->next;
		struct urom_worker_cmd *c = &d->worker_cmd;
		struct urom_worker_notif_desc *n;
		list_del(&d->entry);
		if (c->len == 3 && memcmp(c->plugin_cmd, "die", 3) == 0)
			_exit(3);
		if (c->len > 5 && memcmp(c->plugin_cmd, "addr:", 5) == 0) {
			char num[32] = {0};
			size_t k = c->len - 5 < sizeof(num) - 1 ? c->len - 5 : sizeof(num) - 1;
			void *a = NULL;
			doca_error_t st;
			memcpy(num, c->plugin_cmd + 5, k);
			st = ctx->domain_iface.addr_lookup(ctx, strtoull(num, NULL, 10), &a);
			n = st == OK ? notif(d->dest_id, c, OK, a, 8) : notif(d->dest_id, c, st, "", 0);
		} else {
			int fail = c->len >= 4 && memcmp(c->plugin_cmd, "fail", 4) == 0;
			n = notif(d->dest_id, c, fail ? ERR_IO_FAILED : OK, c->plugin_cmd, c->len);
		}
		free(d);
		if (n) list_add_tail(&pending, &n->entry);
	}
	return OK;
}

static doca_error_t p_progress(struct urom_worker_ctx *ctx, struct ucs_list_link *notif_list)
{
	(void)ctx;
	if (pending.next == &pending) return ERR_EMPTY;
	while (pending.next != &pending) {
		struct ucs_list_link *e = pending.next;
		list_del(e);
		list_add_tail(notif_list, e);
	}
	return OK;
}

/* Packed as DOCA's plugins pack: the notification header, then the body. */
static doca_error_t p_notif_pack(struct urom_worker_notify *n, size_t *len, void *packed)
{
	size_t total = sizeof(*n) + n->len;
	if (*len < total) return ERR_INVALID_VALUE;
	memcpy(packed, n, total);
	*len = total;
	return OK;
}

doca_error_t urom_plugin_get_iface(struct urom_plugin_iface *iface)
{
	iface->__doca_api_version = (size_t)3 << 24 | 58; /* DOCA_VERSION_EXACT of 3.0.0058 */
	iface->open = p_open;
	iface->close = p_close;
	iface->addr = p_addr;
	iface->worker_cmd = p_worker_cmd;
	iface->progress = p_progress;
	iface->notif_pack = p_notif_pack;
	return OK;
}

doca_error_t urom_plugin_get_version(uint64_t *version)
{
	*version = 0x0102;
	return OK;
}
