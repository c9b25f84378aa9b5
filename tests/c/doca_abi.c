/*
 * doca_abi.c -- a C program written against the DOCA 3.x C API, built by tests/c_abi.rs with
 * cc against the project's own headers (doca-soft/include) and linked against libdoca_soft.so.
 *
 * It proves from the C side what the Rust declarations (doca-sys) promise:
 *   1. layout: prints the size and field offsets of every public struct and the value of every
 *      enum constant of the API; the Rust test compares them with doca-sys, line by line.
 *      The sizes that the API fixes are also static assertions here.
 *   2. progress engine + sync event: a task pool, task and ctx user data passed by value to the
 *      callbacks, the ctx state callback, the notification fd protocol (arm, poll, clear), and
 *      a stop that flushes an in-flight wait through its error callback.
 *   3. RDMA between two processes (fork): export/connect over a socketpair, a one-sided write
 *      into the peer's memory, then a send that the peer receives (ordering on a connection).
 *   4. one UROM command: service found through DOCA_UROM_SERVICE_FILE, a worker spawned with
 *      the plugin named on the command line, the packed command given in hex, the packed
 *      notification printed in hex for the Rust side to decode.
 *
 * Usage: doca_abi <plugin-name> <command-hex>
 * Output: "layout ...", "value ...", "ok <step>", "urom_reply <hex>"; exit 0 when every check
 * passed. Every wait is bounded (alarm), so a hang becomes a failure.
 *
 * Only DOCA API calls are used (no soft-provider extension), so the same file builds against
 * NVIDIA's headers and libraries on a BlueField host.
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdalign.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <doca_buf.h>
#include <doca_buf_inventory.h>
#include <doca_ctx.h>
#include <doca_version.h>
#include <doca_dev.h>
#include <doca_error.h>
#include <doca_mmap.h>
#include <doca_pe.h>
#include <doca_rdma.h>
#include <doca_sync_event.h>
#include <doca_types.h>
#include <doca_urom.h>
#include <doca_urom_plugin.h>

/* ---- sizes the API fixes (checked at compile time; the offsets are compared by the test) ---- */
_Static_assert(sizeof(union doca_data) == 8, "doca_data is 8 bytes");
_Static_assert(sizeof(doca_error_t) == sizeof(int), "doca_error_t is int-sized");
_Static_assert(sizeof(doca_notification_handle_t) == sizeof(int), "the notification handle is an fd");
_Static_assert(sizeof(struct doca_urom_service_plugin_info) == 64, "plugin info");
_Static_assert(offsetof(struct doca_urom_service_plugin_info, plugin_name) == 16, "plugin name offset");
_Static_assert(sizeof(struct doca_urom_domain_oob_coll) == 40, "oob coll");
_Static_assert(sizeof(doca_cpu_set_t) == 128, "cpu set");
_Static_assert(sizeof(struct urom_worker_cmd) == 24, "worker cmd header");
_Static_assert(sizeof(struct urom_worker_notify) == 32, "worker notify header");
_Static_assert(offsetof(struct urom_worker_notify, status) == 24, "notify status offset");
_Static_assert(sizeof(struct urom_worker_ctx) == 96, "worker ctx");

#define FAIL(...)                                                                                  \
	do {                                                                                       \
		fprintf(stderr, "doca_abi[%d] %s:%d: ", (int)getpid(), __FILE__, __LINE__);       \
		fprintf(stderr, __VA_ARGS__);                                                      \
		fprintf(stderr, "\n");                                                             \
		exit(1);                                                                           \
	} while (0)

/* Checks a DOCA call that must succeed, naming the code through the library. */
#define CHECK(call)                                                                                \
	do {                                                                                       \
		doca_error_t rc__ = (call);                                                        \
		if (rc__ != DOCA_SUCCESS)                                                          \
			FAIL("%s: %s (%d)", #call, doca_error_get_name(rc__), (int)rc__);          \
	} while (0)

#define EXPECT(cond, ...)                                                                          \
	do {                                                                                       \
		if (!(cond))                                                                       \
			FAIL(__VA_ARGS__);                                                         \
	} while (0)

/* ---- 1. layout ------------------------------------------------------------------------------ */

#define SIZE(type) printf("layout size %s %zu\n", #type, sizeof(type))
#define ALIGN(type) printf("layout align %s %zu\n", #type, (size_t)alignof(type))
#define OFF(type, field) printf("layout offset %s.%s %zu\n", #type, #field, offsetof(type, field))
#define VALUE(name) printf("value %s %lld\n", #name, (long long)(name))

static void print_layout(void)
{
	SIZE(union doca_data);
	ALIGN(union doca_data);
	OFF(union doca_data, ptr);
	OFF(union doca_data, u64);
	SIZE(doca_error_t);
	SIZE(doca_notification_handle_t);
	SIZE(doca_be32_t);
	SIZE(enum doca_ctx_states);
	SIZE(enum doca_pe_event_mode);
	SIZE(enum doca_rdma_opcode);
	SIZE(doca_cpu_set_t);
	ALIGN(doca_cpu_set_t);

	SIZE(struct doca_urom_service_plugin_info);
	OFF(struct doca_urom_service_plugin_info, id);
	OFF(struct doca_urom_service_plugin_info, version);
	OFF(struct doca_urom_service_plugin_info, plugin_name);

	SIZE(struct doca_urom_domain_oob_coll);
	OFF(struct doca_urom_domain_oob_coll, allgather);
	OFF(struct doca_urom_domain_oob_coll, req_test);
	OFF(struct doca_urom_domain_oob_coll, req_free);
	OFF(struct doca_urom_domain_oob_coll, coll_info);
	OFF(struct doca_urom_domain_oob_coll, n_oob_indexes);
	OFF(struct doca_urom_domain_oob_coll, oob_index);

	SIZE(struct urom_worker_cmd);
	OFF(struct urom_worker_cmd, type);
	OFF(struct urom_worker_cmd, urom_context);
	OFF(struct urom_worker_cmd, len);
	OFF(struct urom_worker_cmd, plugin_cmd);

	SIZE(struct urom_worker_notify);
	OFF(struct urom_worker_notify, type);
	OFF(struct urom_worker_notify, urom_context);
	OFF(struct urom_worker_notify, len);
	OFF(struct urom_worker_notify, status);
	OFF(struct urom_worker_notify, reserved);
	OFF(struct urom_worker_notify, plugin_notif);

	SIZE(struct ucs_list_link);
	OFF(struct ucs_list_link, prev);
	OFF(struct ucs_list_link, next);

	SIZE(struct urom_worker_cmd_desc);
	OFF(struct urom_worker_cmd_desc, entry);
	OFF(struct urom_worker_cmd_desc, dest_id);
	OFF(struct urom_worker_cmd_desc, worker_cmd);

	SIZE(struct urom_worker_notif_desc);
	OFF(struct urom_worker_notif_desc, entry);
	OFF(struct urom_worker_notif_desc, dest_id);
	OFF(struct urom_worker_notif_desc, worker_notif);

	SIZE(struct urom_plugin_iface);
	OFF(struct urom_plugin_iface, __doca_api_version);
	OFF(struct urom_plugin_iface, open);
	OFF(struct urom_plugin_iface, close);
	OFF(struct urom_plugin_iface, addr);
	OFF(struct urom_plugin_iface, worker_cmd);
	OFF(struct urom_plugin_iface, progress);
	OFF(struct urom_plugin_iface, notif_pack);

	SIZE(struct urom_domain_lookups_iface);
	OFF(struct urom_domain_lookups_iface, addr_lookup);
	OFF(struct urom_domain_lookups_iface, seg_lookup);
	OFF(struct urom_domain_lookups_iface, memh_lookup);
	OFF(struct urom_domain_lookups_iface, mkey_lookup);

	SIZE(struct urom_worker_ctx);
	OFF(struct urom_worker_ctx, iface);
	OFF(struct urom_worker_ctx, domain_iface);
	OFF(struct urom_worker_ctx, plugin_ctx);

	VALUE(DOCA_SUCCESS);
	VALUE(DOCA_ERROR_UNKNOWN);
	VALUE(DOCA_ERROR_NOT_PERMITTED);
	VALUE(DOCA_ERROR_IN_USE);
	VALUE(DOCA_ERROR_NOT_SUPPORTED);
	VALUE(DOCA_ERROR_AGAIN);
	VALUE(DOCA_ERROR_INVALID_VALUE);
	VALUE(DOCA_ERROR_NO_MEMORY);
	VALUE(DOCA_ERROR_INITIALIZATION);
	VALUE(DOCA_ERROR_TIME_OUT);
	VALUE(DOCA_ERROR_SHUTDOWN);
	VALUE(DOCA_ERROR_CONNECTION_RESET);
	VALUE(DOCA_ERROR_CONNECTION_ABORTED);
	VALUE(DOCA_ERROR_CONNECTION_INPROGRESS);
	VALUE(DOCA_ERROR_NOT_CONNECTED);
	VALUE(DOCA_ERROR_NO_LOCK);
	VALUE(DOCA_ERROR_NOT_FOUND);
	VALUE(DOCA_ERROR_IO_FAILED);
	VALUE(DOCA_ERROR_BAD_STATE);
	VALUE(DOCA_ERROR_UNSUPPORTED_VERSION);
	VALUE(DOCA_ERROR_OPERATING_SYSTEM);
	VALUE(DOCA_ERROR_DRIVER);
	VALUE(DOCA_ERROR_UNEXPECTED);
	VALUE(DOCA_ERROR_ALREADY_EXIST);
	VALUE(DOCA_ERROR_FULL);
	VALUE(DOCA_ERROR_EMPTY);
	VALUE(DOCA_ERROR_IN_PROGRESS);
	VALUE(DOCA_ERROR_TOO_BIG);
	VALUE(DOCA_ERROR_AUTHENTICATION);
	VALUE(DOCA_ERROR_BAD_CONFIG);
	VALUE(DOCA_ERROR_SKIPPED);
	VALUE(DOCA_CTX_STATE_IDLE);
	VALUE(DOCA_CTX_STATE_STARTING);
	VALUE(DOCA_CTX_STATE_RUNNING);
	VALUE(DOCA_CTX_STATE_STOPPING);
	VALUE(DOCA_PE_EVENT_MODE_PROGRESS_SELECTIVE);
	VALUE(DOCA_PE_EVENT_MODE_PROGRESS_ALL);
	VALUE(DOCA_ACCESS_FLAG_LOCAL_READ_ONLY);
	VALUE(DOCA_ACCESS_FLAG_LOCAL_READ_WRITE);
	VALUE(DOCA_ACCESS_FLAG_RDMA_READ);
	VALUE(DOCA_ACCESS_FLAG_RDMA_WRITE);
	VALUE(DOCA_ACCESS_FLAG_RDMA_ATOMIC);
	VALUE(DOCA_ACCESS_FLAG_PCI_READ_ONLY);
	VALUE(DOCA_ACCESS_FLAG_PCI_READ_WRITE);
	VALUE(DOCA_ACCESS_FLAG_PCI_RELAXED_ORDERING);
	VALUE(DOCA_RDMA_OPCODE_RECV_SEND);
	VALUE(DOCA_RDMA_OPCODE_RECV_SEND_WITH_IMM);
	VALUE(DOCA_RDMA_OPCODE_RECV_WRITE_WITH_IMM);
	VALUE(DOCA_UROM_PLUGIN_NAME_MAX_LEN);
	VALUE(DOCA_DEVINFO_PCI_ADDR_SIZE);
	VALUE(DOCA_DEVINFO_IBDEV_NAME_SIZE);
	VALUE(DOCA_DEVINFO_IFACE_NAME_SIZE);
	printf("value DOCA_UROM_WORKER_ID_ANY_IS_ALL_ONES %d\n", DOCA_UROM_WORKER_ID_ANY == UINT64_MAX);
	VALUE(DOCA_VERSION_EXACT);
	VALUE(DOCA_VERSION_OFFICIAL);
	printf("value DOCA_VERSION_LTE_CURRENT_3_0_58 %d\n", DOCA_VERSION_LTE_CURRENT(3, 0, 58));
	/* Compiled-against and running-against versions agree for the soft provider's headers. */
	printf("value DOCA_VERSION_RUNTIME_IS_COMPILED %d\n", strcmp(doca_version(), doca_version_runtime()) == 0);
	{
		doca_cpu_set_t set;

		DOCA_CPU_ZERO(&set);
		DOCA_CPU_SET(3, &set);
		DOCA_CPU_SET(64, &set);
		DOCA_CPU_SET(DOCA_CPU_SETSIZE, &set); /* beyond the set: ignored */
		printf("value DOCA_CPU_MACROS %d\n", doca_cpu_is_set(3, &set) && doca_cpu_is_set(64, &set) &&
							       !doca_cpu_is_set(4, &set) && set.ucs_bits[1] == 1 &&
							       !doca_cpu_is_set(DOCA_CPU_SETSIZE, &set));
	}
	fflush(stdout);
}

/* ---- helpers -------------------------------------------------------------------------------- */

static struct doca_dev *open_first_device(void)
{
	struct doca_devinfo **list = NULL;
	uint32_t n = 0;
	struct doca_dev *dev = NULL;
	char pci[DOCA_DEVINFO_PCI_ADDR_SIZE];
	uint8_t same = 0;

	CHECK(doca_devinfo_create_list(&list, &n));
	EXPECT(n >= 1, "no DOCA device");
	CHECK(doca_dev_open(list[0], &dev));
	CHECK(doca_devinfo_destroy_list(list));
	/* The devinfo of an open device stays valid after the list is gone. */
	CHECK(doca_devinfo_get_pci_addr_str(doca_dev_as_devinfo(dev), pci));
	EXPECT(strlen(pci) == DOCA_DEVINFO_PCI_ADDR_SIZE - 1, "PCI address \"%s\"", pci);
	CHECK(doca_devinfo_is_equal_pci_addr(doca_dev_as_devinfo(dev), pci, &same));
	EXPECT(same == 1, "a device is not equal to its own PCI address");
	return dev;
}

/* Progresses until *flag becomes non-zero (bounded by the process alarm). */
static void progress_until(struct doca_pe *pe, volatile int *flag)
{
	while (!*flag)
		doca_pe_progress(pe);
}

static void wait_state(struct doca_pe *pe, struct doca_ctx *ctx, enum doca_ctx_states want)
{
	enum doca_ctx_states st;

	for (;;) {
		CHECK(doca_ctx_get_state(ctx, &st));
		if (st == want)
			return;
		doca_pe_progress(pe);
	}
}

/* ---- 2. progress engine + sync event -------------------------------------------------------- */

#define TASK_UD 0x1122334455667788ULL

struct se_state {
	int add_done, add_err, wait_done, wait_err, get_done;
	int transitions;
	enum doca_ctx_states seen[8];
	struct doca_ctx *ctx;
	uint64_t fetched, got;
	doca_error_t wait_status;
};

static void check_user_data(struct doca_task *task, union doca_data task_ud, union doca_data ctx_ud,
			    struct se_state *st)
{
	EXPECT(task_ud.u64 == TASK_UD, "task user data %#llx", (unsigned long long)task_ud.u64);
	EXPECT(ctx_ud.ptr == st, "ctx user data %p, expected %p", ctx_ud.ptr, (void *)st);
	EXPECT(doca_task_get_user_data(task).u64 == TASK_UD, "doca_task_get_user_data");
	EXPECT(doca_task_get_ctx(task) == st->ctx, "doca_task_get_ctx");
}

static void add_ok(struct doca_sync_event_task_notify_add *t, union doca_data ud, union doca_data cud)
{
	struct se_state *st = cud.ptr;
	struct doca_task *task = doca_sync_event_task_notify_add_as_doca_task(t);

	check_user_data(task, ud, cud, st);
	EXPECT(doca_task_get_status(task) == DOCA_SUCCESS, "notify_add ok callback with an error status");
	st->add_done = 1;
	doca_task_free(task);
}

static void add_err(struct doca_sync_event_task_notify_add *t, union doca_data ud, union doca_data cud)
{
	(void)ud;
	((struct se_state *)cud.ptr)->add_err = 1;
	doca_task_free(doca_sync_event_task_notify_add_as_doca_task(t));
}

static void get_ok(struct doca_sync_event_task_get *t, union doca_data ud, union doca_data cud)
{
	struct se_state *st = cud.ptr;

	check_user_data(doca_sync_event_task_get_as_doca_task(t), ud, cud, st);
	st->get_done = 1;
	doca_task_free(doca_sync_event_task_get_as_doca_task(t));
}

static void get_err(struct doca_sync_event_task_get *t, union doca_data ud, union doca_data cud)
{
	(void)ud;
	(void)cud;
	FAIL("get failed: %s", doca_error_get_name(doca_task_get_status(doca_sync_event_task_get_as_doca_task(t))));
}

static void wait_ok(struct doca_sync_event_task_wait_eq *t, union doca_data ud, union doca_data cud)
{
	struct se_state *st = cud.ptr;

	check_user_data(doca_sync_event_task_wait_eq_as_doca_task(t), ud, cud, st);
	st->wait_done = 1;
	doca_task_free(doca_sync_event_task_wait_eq_as_doca_task(t));
}

static void wait_err(struct doca_sync_event_task_wait_eq *t, union doca_data ud, union doca_data cud)
{
	struct se_state *st = cud.ptr;
	struct doca_task *task = doca_sync_event_task_wait_eq_as_doca_task(t);

	check_user_data(task, ud, cud, st);
	st->wait_status = doca_task_get_status(task);
	st->wait_err = 1;
	doca_task_free(task);
}

static void state_changed(const union doca_data ud, struct doca_ctx *ctx, enum doca_ctx_states prev,
			  enum doca_ctx_states next)
{
	struct se_state *st = ud.ptr;

	EXPECT(ctx == st->ctx, "state callback for another ctx");
	EXPECT(prev != next, "state callback without a change");
	if (st->transitions < 8)
		st->seen[st->transitions] = next;
	st->transitions++;
}

static void test_sync_event(struct doca_dev *dev)
{
	struct doca_pe *pe = NULL;
	struct doca_sync_event *ev = NULL;
	struct se_state st;
	union doca_data ud = {.u64 = TASK_UD};
	union doca_data back;
	struct doca_sync_event_task_notify_add *add = NULL;
	struct doca_sync_event_task_wait_eq *wait = NULL;
	struct doca_sync_event_task_get *get = NULL;
	doca_notification_handle_t fd = DOCA_NOTIFICATION_HANDLE_INVALID, fd2 = DOCA_NOTIFICATION_HANDLE_INVALID;
	struct pollfd pfd;
	size_t inflight = 99;
	doca_error_t rc;
	int i, rounds = 0;

	memset(&st, 0, sizeof(st));
	CHECK(doca_pe_create(&pe));
	CHECK(doca_pe_get_notification_handle(pe, &fd));
	EXPECT(fd >= 0, "notification handle %d", fd);
	CHECK(doca_sync_event_create(&ev));
	CHECK(doca_sync_event_add_publisher_location_cpu(ev, dev));
	CHECK(doca_sync_event_add_subscriber_location_cpu(ev, dev));
	st.ctx = doca_sync_event_as_ctx(ev);
	EXPECT(st.ctx != NULL, "sync event as ctx");
	CHECK(doca_sync_event_task_notify_add_set_conf(ev, add_ok, add_err, 1));
	CHECK(doca_sync_event_task_wait_eq_set_conf(ev, wait_ok, wait_err, 2));
	CHECK(doca_sync_event_task_get_set_conf(ev, get_ok, get_err, 1));
	CHECK(doca_ctx_set_user_data(st.ctx, (union doca_data){.ptr = &st}));
	CHECK(doca_ctx_get_user_data(st.ctx, &back));
	EXPECT(back.ptr == &st, "ctx user data round trip");
	CHECK(doca_ctx_set_state_changed_cb(st.ctx, state_changed));
	CHECK(doca_pe_connect_ctx(pe, st.ctx));
	rc = doca_ctx_start(st.ctx);
	EXPECT(rc == DOCA_SUCCESS || rc == DOCA_ERROR_IN_PROGRESS, "start: %s", doca_error_get_name(rc));
	wait_state(pe, st.ctx, DOCA_CTX_STATE_RUNNING);
	EXPECT(st.transitions >= 1 && st.seen[st.transitions - 1] == DOCA_CTX_STATE_RUNNING,
	       "state callback did not report RUNNING");

	/* A wait that cannot complete yet, then the add that completes it, in event mode. */
	CHECK(doca_sync_event_task_wait_eq_alloc_init(ev, 5, UINT64_MAX, ud, &wait));
	CHECK(doca_task_submit(doca_sync_event_task_wait_eq_as_doca_task(wait)));
	CHECK(doca_sync_event_task_notify_add_alloc_init(ev, 5, &st.fetched, ud, &add));
	CHECK(doca_task_submit(doca_sync_event_task_notify_add_as_doca_task(add)));
	/* The pool of notify_add holds one task: a second allocation is back-pressure. */
	{
		struct doca_sync_event_task_notify_add *extra = NULL;
		EXPECT(doca_sync_event_task_notify_add_alloc_init(ev, 1, &st.fetched, ud, &extra) ==
			       DOCA_ERROR_NO_MEMORY,
		       "a full task pool must answer NO_MEMORY");
	}
	while (!(st.add_done && st.wait_done)) {
		/* drain, arm, drain once more, then sleep on the fd */
		while (doca_pe_progress(pe))
			;
		if (st.add_done && st.wait_done)
			break;
		CHECK(doca_pe_request_notification(pe));
		if (doca_pe_progress(pe) == 0 && !(st.add_done && st.wait_done)) {
			pfd.fd = fd;
			pfd.events = POLLIN;
			pfd.revents = 0;
			poll(&pfd, 1, 100);
		}
		CHECK(doca_pe_clear_notification(pe, fd));
		EXPECT(++rounds < 1000, "sync event tasks never completed");
	}
	EXPECT(!st.add_err && st.fetched == 0, "notify_add fetched %llu", (unsigned long long)st.fetched);
	CHECK(doca_sync_event_task_get_alloc_init(ev, &st.got, ud, &get));
	CHECK(doca_task_submit(doca_sync_event_task_get_as_doca_task(get)));
	progress_until(pe, &st.get_done);
	EXPECT(st.got == 5, "get read %llu", (unsigned long long)st.got);
	CHECK(doca_pe_get_notification_handle(pe, &fd2));
	EXPECT(fd2 == fd, "the notification handle changed during the PE's life");

	/* Stop with a wait in flight: it comes back through its error callback, then IDLE. */
	CHECK(doca_sync_event_task_wait_eq_alloc_init(ev, 1000, UINT64_MAX, ud, &wait));
	CHECK(doca_task_submit(doca_sync_event_task_wait_eq_as_doca_task(wait)));
	for (i = 0; i < 100; i++)
		doca_pe_progress(pe);
	CHECK(doca_ctx_get_num_inflight_tasks(st.ctx, &inflight));
	EXPECT(inflight == 1, "in-flight tasks %zu", inflight);
	CHECK(doca_pe_get_num_inflight_tasks(pe, &inflight));
	EXPECT(inflight == 1, "in-flight tasks of the PE %zu", inflight);
	rc = doca_ctx_stop(st.ctx);
	EXPECT(rc == DOCA_SUCCESS || rc == DOCA_ERROR_IN_PROGRESS, "stop: %s", doca_error_get_name(rc));
	wait_state(pe, st.ctx, DOCA_CTX_STATE_IDLE);
	EXPECT(st.wait_err && st.wait_status != DOCA_SUCCESS, "the flushed wait did not fail");
	EXPECT(st.seen[(st.transitions - 1) % 8] == DOCA_CTX_STATE_IDLE, "state callback did not report IDLE");

	/* A PE with a ctx still connected cannot go. */
	EXPECT(doca_pe_destroy(pe) == DOCA_ERROR_IN_USE, "PE destroyed under its ctx");
	CHECK(doca_sync_event_destroy(ev));
	CHECK(doca_pe_destroy(pe));
	printf("ok sync_event\n");
	fflush(stdout);
}

/* ---- 3. RDMA between two processes ---------------------------------------------------------- */

#define MEM_LEN 4096
#define WRITE_LEN 64
static const char MESSAGE[] = "hello from C";

static void send_frame(int sock, const void *p, size_t n)
{
	uint32_t len = (uint32_t)n;

	EXPECT(write(sock, &len, 4) == 4 && write(sock, p, n) == (ssize_t)n, "oob write: %s", strerror(errno));
}

static void *recv_frame(int sock, size_t *n)
{
	uint32_t len = 0;
	size_t got = 0;
	char *p;

	EXPECT(read(sock, &len, 4) == 4, "oob read");
	p = malloc(len ? len : 1);
	while (got < len) {
		ssize_t r = read(sock, p + got, len - got);
		EXPECT(r > 0, "oob read body");
		got += (size_t)r;
	}
	*n = len;
	return p;
}

struct rdma_state {
	int write_done, send_done, recv_done;
	doca_error_t status;
	enum doca_rdma_opcode opcode;
	uint32_t len;
	const struct doca_rdma_connection *conn;
};

static void write_cb(struct doca_rdma_task_write *t, union doca_data ud, union doca_data cud)
{
	struct rdma_state *st = ud.ptr;

	(void)cud;
	st->status = doca_task_get_status(doca_rdma_task_write_as_task(t));
	st->write_done = 1;
	doca_task_free(doca_rdma_task_write_as_task(t));
}

static void send_cb(struct doca_rdma_task_send *t, union doca_data ud, union doca_data cud)
{
	struct rdma_state *st = ud.ptr;

	(void)cud;
	st->status = doca_task_get_status(doca_rdma_task_send_as_task(t));
	st->send_done = 1;
	doca_task_free(doca_rdma_task_send_as_task(t));
}

static void recv_cb(struct doca_rdma_task_receive *t, union doca_data ud, union doca_data cud)
{
	struct rdma_state *st = ud.ptr;

	(void)cud;
	st->status = doca_task_get_status(doca_rdma_task_receive_as_task(t));
	if (st->status == DOCA_SUCCESS) {
		st->opcode = doca_rdma_task_receive_get_result_opcode(t);
		st->len = doca_rdma_task_receive_get_result_len(t);
		st->conn = doca_rdma_task_receive_get_result_rdma_connection(t);
	}
	st->recv_done = 1;
	doca_task_free(doca_rdma_task_receive_as_task(t));
}

struct rdma_side {
	struct doca_dev *dev;
	struct doca_pe *pe;
	struct doca_rdma *rdma;
	struct doca_rdma_connection *conn;
	struct doca_mmap *mmap;
	struct doca_buf_inventory *inv;
	char *mem;
};

static void rdma_side_up(struct rdma_side *s, int sock, uint32_t mem_perms)
{
	const void *blob;
	size_t blob_len, peer_len;
	void *peer;

	memset(s, 0, sizeof(*s));
	s->dev = open_first_device();
	s->mem = aligned_alloc(4096, MEM_LEN);
	memset(s->mem, 0, MEM_LEN);
	CHECK(doca_pe_create(&s->pe));
	CHECK(doca_rdma_create(s->dev, &s->rdma));
	CHECK(doca_rdma_set_permissions(s->rdma, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE | DOCA_ACCESS_FLAG_RDMA_WRITE |
							 DOCA_ACCESS_FLAG_RDMA_READ));
	CHECK(doca_rdma_task_write_set_conf(s->rdma, write_cb, write_cb, 4));
	CHECK(doca_rdma_task_send_set_conf(s->rdma, send_cb, send_cb, 4));
	CHECK(doca_rdma_task_receive_set_conf(s->rdma, recv_cb, recv_cb, 4));
	CHECK(doca_pe_connect_ctx(s->pe, doca_rdma_as_ctx(s->rdma)));
	{
		doca_error_t rc = doca_ctx_start(doca_rdma_as_ctx(s->rdma));
		EXPECT(rc == DOCA_SUCCESS || rc == DOCA_ERROR_IN_PROGRESS, "rdma start: %s", doca_error_get_name(rc));
	}
	wait_state(s->pe, doca_rdma_as_ctx(s->rdma), DOCA_CTX_STATE_RUNNING);
	CHECK(doca_rdma_export(s->rdma, &blob, &blob_len, &s->conn));
	send_frame(sock, blob, blob_len);
	peer = recv_frame(sock, &peer_len);
	CHECK(doca_rdma_connect(s->rdma, peer, peer_len, s->conn));
	free(peer);

	CHECK(doca_mmap_create(&s->mmap));
	CHECK(doca_mmap_set_memrange(s->mmap, s->mem, MEM_LEN));
	CHECK(doca_mmap_set_permissions(s->mmap, mem_perms));
	CHECK(doca_mmap_add_dev(s->mmap, s->dev));
	CHECK(doca_mmap_start(s->mmap));
	CHECK(doca_buf_inventory_create(8, &s->inv));
	CHECK(doca_buf_inventory_start(s->inv));
}

static void rdma_side_down(struct rdma_side *s)
{
	doca_error_t rc = doca_ctx_stop(doca_rdma_as_ctx(s->rdma));

	EXPECT(rc == DOCA_SUCCESS || rc == DOCA_ERROR_IN_PROGRESS, "rdma stop: %s", doca_error_get_name(rc));
	wait_state(s->pe, doca_rdma_as_ctx(s->rdma), DOCA_CTX_STATE_IDLE);
	CHECK(doca_buf_inventory_stop(s->inv));
	CHECK(doca_buf_inventory_destroy(s->inv));
	CHECK(doca_mmap_stop(s->mmap));
	CHECK(doca_mmap_destroy(s->mmap));
	CHECK(doca_rdma_destroy(s->rdma));
	CHECK(doca_pe_destroy(s->pe));
	CHECK(doca_dev_close(s->dev));
	free(s->mem);
}

/* The target: exports its memory, posts a receive, checks that the peer's write landed before
 * the peer's send arrived. Exits with the result. */
static void rdma_target(int sock)
{
	struct rdma_side s;
	struct rdma_state st;
	const void *desc;
	size_t desc_len;
	struct doca_buf *rbuf = NULL;
	struct doca_rdma_task_receive *recv = NULL;
	char done = 'd';
	int i;

	/* On the soft provider a peer that is not our ancestor reaches plain memory through
	 * process_vm_writev, which Yama may restrict; allow any tracer (harmless elsewhere). */
	prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
	rdma_side_up(&s, sock, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE | DOCA_ACCESS_FLAG_RDMA_WRITE);
	memset(&st, 0, sizeof(st));
	/* Receive into the second half of the memory, before the peer can send. */
	CHECK(doca_buf_inventory_buf_get_by_addr(s.inv, s.mmap, s.mem + MEM_LEN / 2, 256, &rbuf));
	CHECK(doca_rdma_task_receive_allocate_init(s.rdma, rbuf, (union doca_data){.ptr = &st}, &recv));
	CHECK(doca_task_submit(doca_rdma_task_receive_as_task(recv)));
	CHECK(doca_mmap_export_rdma(s.mmap, s.dev, &desc, &desc_len));
	send_frame(sock, desc, desc_len);
	progress_until(s.pe, &st.recv_done);
	EXPECT(st.status == DOCA_SUCCESS, "receive: %s", doca_error_get_name(st.status));
	EXPECT(st.opcode == DOCA_RDMA_OPCODE_RECV_SEND, "receive opcode %d", (int)st.opcode);
	EXPECT(st.len == sizeof(MESSAGE), "receive length %u", st.len);
	EXPECT(st.conn == s.conn, "receive names another connection");
	EXPECT(memcmp(s.mem + MEM_LEN / 2, MESSAGE, sizeof(MESSAGE)) == 0, "received bytes differ");
	for (i = 0; i < WRITE_LEN; i++)
		EXPECT(s.mem[i] == (char)(0xA0 + i), "written byte %d is %#x", i, (unsigned char)s.mem[i]);
	CHECK(doca_buf_dec_refcount(rbuf, NULL));
	EXPECT(write(sock, &done, 1) == 1, "oob done");
	/* Wait until the peer is finished with our memory before revoking it. */
	EXPECT(read(sock, &done, 1) == 1, "oob bye");
	rdma_side_down(&s);
	exit(0);
}

static void rdma_initiator(int sock)
{
	struct rdma_side s;
	struct rdma_state st;
	void *desc, *raddr = NULL;
	size_t desc_len, rlen = 0;
	struct doca_mmap *remote = NULL;
	struct doca_buf *src = NULL, *dst = NULL, *msg = NULL;
	struct doca_rdma_task_write *wr = NULL;
	struct doca_rdma_task_send *snd = NULL;
	char done = 0;
	int i;

	rdma_side_up(&s, sock, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE);
	memset(&st, 0, sizeof(st));
	desc = recv_frame(sock, &desc_len);
	CHECK(doca_mmap_create_from_export(NULL, desc, desc_len, s.dev, &remote));
	free(desc);
	CHECK(doca_mmap_get_memrange(remote, &raddr, &rlen));
	EXPECT(rlen == MEM_LEN, "remote range length %zu", rlen);
	for (i = 0; i < WRITE_LEN; i++)
		s.mem[i] = (char)(0xA0 + i);
	memcpy(s.mem + 256, MESSAGE, sizeof(MESSAGE));
	CHECK(doca_buf_inventory_buf_get_by_data(s.inv, s.mmap, s.mem, WRITE_LEN, &src));
	CHECK(doca_buf_inventory_buf_get_by_addr(s.inv, remote, raddr, WRITE_LEN, &dst));
	CHECK(doca_buf_inventory_buf_get_by_data(s.inv, s.mmap, s.mem + 256, sizeof(MESSAGE), &msg));
	CHECK(doca_rdma_task_write_allocate_init(s.rdma, s.conn, src, dst, (union doca_data){.ptr = &st}, &wr));
	CHECK(doca_task_submit(doca_rdma_task_write_as_task(wr)));
	progress_until(s.pe, &st.write_done);
	EXPECT(st.status == DOCA_SUCCESS, "write: %s", doca_error_get_name(st.status));
	{
		size_t n = 0;
		CHECK(doca_buf_get_data_len(dst, &n));
		EXPECT(n == WRITE_LEN, "the write did not append to the destination's payload (%zu)", n);
	}
	CHECK(doca_rdma_task_send_allocate_init(s.rdma, s.conn, msg, (union doca_data){.ptr = &st}, &snd));
	CHECK(doca_task_submit(doca_rdma_task_send_as_task(snd)));
	progress_until(s.pe, &st.send_done);
	EXPECT(st.status == DOCA_SUCCESS, "send: %s", doca_error_get_name(st.status));
	EXPECT(read(sock, &done, 1) == 1 && done == 'd', "the target did not confirm");
	CHECK(doca_buf_dec_refcount(src, NULL));
	CHECK(doca_buf_dec_refcount(dst, NULL));
	CHECK(doca_buf_dec_refcount(msg, NULL));
	CHECK(doca_mmap_destroy(remote));
	EXPECT(write(sock, &done, 1) == 1, "oob bye");
	rdma_side_down(&s);
}

static void test_rdma(void)
{
	int sv[2], status = 0;
	pid_t child;

	EXPECT(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair");
	fflush(stdout);
	child = fork();
	EXPECT(child >= 0, "fork");
	if (child == 0) {
		close(sv[0]);
		prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
		rdma_target(sv[1]);
	}
	close(sv[1]);
	rdma_initiator(sv[0]);
	close(sv[0]);
	EXPECT(waitpid(child, &status, 0) == child, "waitpid");
	EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the RDMA target failed (status %#x)", status);
	printf("ok rdma\n");
	fflush(stdout);
}

/* ---- 4. one UROM command -------------------------------------------------------------------- */

struct cmd_state {
	int done;
	doca_error_t status;
	size_t len;
	unsigned char reply[256];
};

static void cmd_cb(struct doca_urom_worker_cmd_task *task, union doca_data ud, union doca_data cud)
{
	struct cmd_state *st = ud.ptr;
	struct doca_buf *resp;
	void *data = NULL;

	(void)cud;
	st->status = doca_task_get_status(doca_urom_worker_cmd_task_as_task(task));
	if (st->status == DOCA_SUCCESS) {
		resp = doca_urom_worker_cmd_task_get_response(task);
		CHECK(doca_buf_get_data(resp, &data));
		CHECK(doca_buf_get_data_len(resp, &st->len));
		EXPECT(st->len <= sizeof(st->reply), "reply of %zu bytes", st->len);
		memcpy(st->reply, data, st->len);
	}
	st->done = 1;
	CHECK(doca_urom_worker_cmd_task_release(task));
}

static size_t unhex(const char *s, unsigned char *out, size_t cap)
{
	size_t n = strlen(s) / 2, i;

	EXPECT(n <= cap && strlen(s) % 2 == 0, "bad hex command");
	for (i = 0; i < n; i++) {
		unsigned int b;
		EXPECT(sscanf(s + 2 * i, "%2x", &b) == 1, "bad hex command");
		out[i] = (unsigned char)b;
	}
	return n;
}

static void test_urom(struct doca_dev *dev, const char *plugin_name, const char *cmd_hex)
{
	struct doca_pe *pe = NULL;
	struct doca_urom_service *svc = NULL;
	struct doca_urom_worker *worker = NULL;
	const struct doca_urom_service_plugin_info *plugins = NULL;
	size_t nplugins = 0, i, cmd_len;
	uint64_t plugin = 0;
	doca_cpu_set_t cpus;
	struct doca_urom_worker_cmd_task *task = NULL;
	struct doca_buf *payload;
	void *head = NULL;
	unsigned char cmd[256];
	struct cmd_state st;
	doca_error_t rc;

	memset(&st, 0, sizeof(st));
	cmd_len = unhex(cmd_hex, cmd, sizeof(cmd));
	CHECK(doca_pe_create(&pe));
	CHECK(doca_urom_service_create(&svc));
	CHECK(doca_urom_service_set_dev(svc, dev));
	CHECK(doca_pe_connect_ctx(pe, doca_urom_service_as_ctx(svc)));
	rc = doca_ctx_start(doca_urom_service_as_ctx(svc));
	EXPECT(rc == DOCA_SUCCESS || rc == DOCA_ERROR_IN_PROGRESS, "service start: %s", doca_error_get_name(rc));
	wait_state(pe, doca_urom_service_as_ctx(svc), DOCA_CTX_STATE_RUNNING);
	CHECK(doca_urom_service_get_plugins_list(svc, &plugins, &nplugins));
	for (i = 0; i < nplugins; i++)
		if (strncmp(plugins[i].plugin_name, plugin_name, DOCA_UROM_PLUGIN_NAME_MAX_LEN) == 0)
			plugin = plugins[i].id;
	EXPECT(plugin != 0 && (plugin & (plugin - 1)) == 0, "plugin %s: id %#llx", plugin_name,
	       (unsigned long long)plugin);
	CHECK(doca_urom_service_get_cpuset(svc, &cpus));

	CHECK(doca_urom_worker_create(&worker));
	CHECK(doca_urom_worker_set_service(worker, svc));
	CHECK(doca_urom_worker_set_id(worker, DOCA_UROM_WORKER_ID_ANY));
	CHECK(doca_urom_worker_set_plugins(worker, plugin));
	CHECK(doca_urom_worker_set_cpuset(worker, cpus)); /* passed by value: 128 bytes */
	CHECK(doca_urom_worker_set_max_inflight_tasks(worker, 4));
	CHECK(doca_pe_connect_ctx(pe, doca_urom_worker_as_ctx(worker)));
	rc = doca_ctx_start(doca_urom_worker_as_ctx(worker));
	EXPECT(rc == DOCA_SUCCESS || rc == DOCA_ERROR_IN_PROGRESS, "worker start: %s", doca_error_get_name(rc));
	wait_state(pe, doca_urom_worker_as_ctx(worker), DOCA_CTX_STATE_RUNNING);

	CHECK(doca_urom_worker_cmd_task_allocate_init(worker, plugin, &task));
	payload = doca_urom_worker_cmd_task_get_payload(task);
	CHECK(doca_buf_get_head(payload, &head));
	memcpy(head, cmd, cmd_len);
	CHECK(doca_buf_set_data(payload, head, cmd_len));
	doca_urom_worker_cmd_task_set_cb(task, cmd_cb);
	doca_task_set_user_data(doca_urom_worker_cmd_task_as_task(task), (union doca_data){.ptr = &st});
	CHECK(doca_task_submit(doca_urom_worker_cmd_task_as_task(task)));
	progress_until(pe, &st.done);
	EXPECT(st.status == DOCA_SUCCESS, "command: %s", doca_error_get_name(st.status));
	printf("urom_reply ");
	for (i = 0; i < st.len; i++)
		printf("%02x", st.reply[i]);
	printf("\n");

	rc = doca_ctx_stop(doca_urom_worker_as_ctx(worker));
	EXPECT(rc == DOCA_SUCCESS || rc == DOCA_ERROR_IN_PROGRESS, "worker stop: %s", doca_error_get_name(rc));
	wait_state(pe, doca_urom_worker_as_ctx(worker), DOCA_CTX_STATE_IDLE);
	CHECK(doca_urom_worker_destroy(worker));
	rc = doca_ctx_stop(doca_urom_service_as_ctx(svc));
	EXPECT(rc == DOCA_SUCCESS || rc == DOCA_ERROR_IN_PROGRESS, "service stop: %s", doca_error_get_name(rc));
	wait_state(pe, doca_urom_service_as_ctx(svc), DOCA_CTX_STATE_IDLE);
	CHECK(doca_urom_service_destroy(svc));
	CHECK(doca_pe_destroy(pe));
	printf("ok urom\n");
	fflush(stdout);
}

int main(int argc, char **argv)
{
	struct doca_dev *dev;

	if (argc != 3) {
		fprintf(stderr, "usage: %s <plugin-name> <command-hex>\n", argv[0]);
		return 2;
	}
	/* Every wait below is a progress loop; the alarm bounds them all (default action: exit). */
	alarm(60);
	print_layout();
	EXPECT(strcmp(doca_error_get_name(DOCA_ERROR_NO_MEMORY), "DOCA_ERROR_NO_MEMORY") == 0,
	       "doca_error_get_name(NO_MEMORY) = %s", doca_error_get_name(DOCA_ERROR_NO_MEMORY));
	EXPECT(doca_error_get_descr(DOCA_ERROR_IN_PROGRESS) != NULL, "doca_error_get_descr");
	/* Fork before any DOCA object exists, so the child starts clean. */
	test_rdma();
	dev = open_first_device();
	test_sync_event(dev);
	test_urom(dev, argv[1], argv[2]);
	CHECK(doca_dev_close(dev));
	printf("ok all\n");
	return 0;
}
