/*
 * urom_host.c -- a UROM host program written the way NVIDIA's UROM samples are: argp flags, a
 * registered log source, the device chosen by IB device name or PCI address, the service found
 * through DOCA_UROM_SERVICE_FILE, every state change reported through the progress engine.
 *
 *   urom_host -d <dev> [--plugin c_loopback]
 *
 * 1. Service ctx (starts synchronously), the plugin found by name in its plugin list.
 * 2. A worker (id ANY) with that plugin: start returns IN_PROGRESS, progress brings RUNNING.
 * 3. A command packed the way the samples pack: at the fresh payload's data, within its data
 *    length, then doca_buf_set_data() with the packed length; the answer must be the plugin's
 *    body only (c_loopback reverses the bytes).
 * 4. A domain of this one worker (a trivial out-of-band allgather, one registered buffer with
 *    a memory handle and a key): the "LOOKUP" command makes the C plugin run the four domain
 *    lookup helpers of doca_urom_plugin.h inside the worker; their findings must be the
 *    worker's plugin address, segment 0, and the handle and key given here.
 * 5. Teardown: domain, then worker (stop is reported through progress: at least one progress
 *    call must return 1), then service.
 * Exits 0 only if every check passed.
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <stdbool.h>

#include <doca_argp.h>
#include <doca_buf.h>
#include <doca_ctx.h>
#include <doca_dev.h>
#include <doca_error.h>
#include <doca_log.h>
#include <doca_pe.h>
#include <doca_urom.h>

DOCA_LOG_REGISTER(UROM_HOST);

#include "sample_common.h"

struct config {
	struct sample_config common; /* -d */
	char plugin[DOCA_UROM_PLUGIN_NAME_MAX_LEN];
	int arm_cpus; /* > 0: require and use the service's CPUs 0..arm_cpus-1 */
};

struct answer {
	volatile bool done;
	doca_error_t status;
	uint8_t body[1024];
	size_t len;
};

static doca_error_t plugin_cb(void *param, void *config)
{
	snprintf(((struct config *)config)->plugin, DOCA_UROM_PLUGIN_NAME_MAX_LEN, "%s", (const char *)param);
	return DOCA_SUCCESS;
}

static doca_error_t arm_cpus_cb(void *param, void *config)
{
	int n = *(int *)param;

	if (n < 0 || n > DOCA_CPU_SETSIZE)
		return DOCA_ERROR_INVALID_VALUE;
	((struct config *)config)->arm_cpus = n;
	return DOCA_SUCCESS;
}

/* ---- the domain's out-of-band collective: one member, so the allgather is a copy ---- */

static int oob_request;

static doca_error_t oob_allgather(void *sbuf, void *rbuf, size_t msglen, void *coll_info, void **req)
{
	(void)coll_info;
	memcpy(rbuf, sbuf, msglen);
	*req = &oob_request;
	return DOCA_SUCCESS;
}

static doca_error_t oob_test(void *req)
{
	return req == &oob_request ? DOCA_SUCCESS : DOCA_ERROR_INVALID_VALUE;
}

static doca_error_t oob_free(void *req)
{
	(void)req;
	return DOCA_SUCCESS;
}

/* ---- commands ---- */

static void command_done(struct doca_urom_worker_cmd_task *task, union doca_data ud, union doca_data cud)
{
	struct answer *a = ud.ptr;
	struct doca_buf *response = doca_urom_worker_cmd_task_get_response(task);
	void *data;
	size_t len = 0;

	(void)cud;
	a->status = doca_task_get_status(doca_urom_worker_cmd_task_as_task(task));
	if (a->status == DOCA_SUCCESS && doca_buf_get_data(response, &data) == DOCA_SUCCESS &&
	    doca_buf_get_data_len(response, &len) == DOCA_SUCCESS && len <= sizeof(a->body)) {
		memcpy(a->body, data, len);
		a->len = len;
	}
	a->done = true;
	doca_urom_worker_cmd_task_release(task);
}

/* Packs `body` into a fresh command task the way the samples do, submits, waits. */
static doca_error_t command(struct doca_pe *pe, struct doca_urom_worker *worker, uint64_t plugin, const void *body,
			    size_t len, struct answer *a)
{
	struct doca_urom_worker_cmd_task *task;
	struct doca_buf *payload;
	void *data;
	size_t room = 0;
	doca_error_t result;

	memset(a, 0, sizeof(*a));
	result = doca_urom_worker_cmd_task_allocate_init(worker, plugin, &task);
	if (DOCA_IS_ERROR(result))
		return result;
	payload = doca_urom_worker_cmd_task_get_payload(task);
	result = doca_buf_get_data(payload, &data);
	DOCA_ERROR_PROPAGATE(result, doca_buf_get_data_len(payload, &room));
	if (result == DOCA_SUCCESS && room < len) {
		DOCA_LOG_ERR("payload room %zu < %zu", room, len);
		result = DOCA_ERROR_TOO_BIG;
	}
	if (DOCA_IS_ERROR(result)) {
		doca_urom_worker_cmd_task_release(task);
		return result;
	}
	memcpy(data, body, len);
	result = doca_buf_set_data(payload, data, len);
	doca_urom_worker_cmd_task_set_cb(task, command_done);
	doca_task_set_user_data(doca_urom_worker_cmd_task_as_task(task), (union doca_data){.ptr = a});
	DOCA_ERROR_PROPAGATE(result, doca_task_submit(doca_urom_worker_cmd_task_as_task(task)));
	if (DOCA_IS_ERROR(result)) {
		doca_urom_worker_cmd_task_release(task);
		return result;
	}
	result = sample_progress_until(pe, &a->done);
	return DOCA_IS_ERROR(result) ? result : a->status;
}

static doca_error_t start_and_wait(struct doca_pe *pe, struct doca_ctx *ctx, doca_error_t expected)
{
	doca_error_t result = doca_ctx_start(ctx);

	if (result != expected)
		DOCA_LOG_WARN("ctx start returned %s (the samples expect %s)", doca_error_get_name(result),
			      doca_error_get_name(expected));
	if (result != DOCA_SUCCESS && result != DOCA_ERROR_IN_PROGRESS)
		return result;
	return sample_wait_state(pe, ctx, DOCA_CTX_STATE_RUNNING);
}

/* Stops `ctx` and progresses to IDLE; returns how many progress calls reported work. */
static doca_error_t stop_and_wait(struct doca_pe *pe, struct doca_ctx *ctx, int *events)
{
	uint64_t deadline = sample_now_ms() + SAMPLE_TIMEOUT_MS;
	enum doca_ctx_states st = DOCA_CTX_STATE_RUNNING;
	doca_error_t result = doca_ctx_stop(ctx);

	*events = 0;
	if (result != DOCA_SUCCESS && result != DOCA_ERROR_IN_PROGRESS)
		return result;
	while (doca_ctx_get_state(ctx, &st) == DOCA_SUCCESS && st != DOCA_CTX_STATE_IDLE) {
		if (sample_now_ms() > deadline)
			return DOCA_ERROR_TIME_OUT;
		*events += (int)doca_pe_progress(pe);
	}
	return DOCA_SUCCESS;
}

int main(int argc, char **argv)
{
	struct config cfg = {.plugin = "c_loopback"};
	struct doca_dev *dev = NULL;
	struct doca_pe *pe = NULL;
	struct doca_urom_service *service = NULL;
	struct doca_urom_worker *worker = NULL;
	struct doca_urom_domain *domain = NULL;
	const struct doca_urom_service_plugin_info *plugins;
	struct doca_urom_domain_oob_coll oob = {
		.allgather = oob_allgather, .req_test = oob_test, .req_free = oob_free, .n_oob_indexes = 1,
		.oob_index = 0};
	static uint8_t region[4096];
	static struct answer a;
	uint8_t lookup[6 + 2 * sizeof(uint64_t)];
	uint64_t plugin_id = 0, worker_id = 0, va;
	size_t n_plugins = 0, i;
	const char *text = "hello, plugin";
	int events = 0;
	doca_error_t result;

	result = doca_log_backend_create_standard();
	DOCA_ERROR_PROPAGATE(result, doca_argp_init("urom_host", &cfg));
	DOCA_ERROR_PROPAGATE(result, sample_register_common(false));
	DOCA_ERROR_PROPAGATE(result, sample_add_param("p", "plugin", "plugin name (default c_loopback)",
						      DOCA_ARGP_TYPE_STRING, plugin_cb, false));
	DOCA_ERROR_PROPAGATE(result, sample_add_param("a", "arm-cpus",
						      "require the service to offer exactly CPUs 0..N-1, a DPU's Arm cores, "
						      "and run the worker on all of them (NVIDIA's UROM samples ask for 0-7)",
						      DOCA_ARGP_TYPE_INT, arm_cpus_cb, false));
	DOCA_ERROR_PROPAGATE(result, doca_argp_start(argc, argv));
	if (DOCA_IS_ERROR(result)) {
		doca_argp_destroy();
		return EXIT_FAILURE;
	}

	/* 1. The service. */
	result = sample_open_device(cfg.common.device, &dev);
	DOCA_ERROR_PROPAGATE(result, doca_pe_create(&pe));
	DOCA_ERROR_PROPAGATE(result, doca_urom_service_create(&service));
	if (DOCA_IS_ERROR(result))
		goto out;
	DOCA_ERROR_PROPAGATE(result, doca_urom_service_set_max_workers(service, 4));
	DOCA_ERROR_PROPAGATE(result, doca_urom_service_set_dev(service, dev));
	DOCA_ERROR_PROPAGATE(result, doca_pe_connect_ctx(pe, doca_urom_service_as_ctx(service)));
	DOCA_ERROR_PROPAGATE(result, start_and_wait(pe, doca_urom_service_as_ctx(service), DOCA_SUCCESS));
	DOCA_ERROR_PROPAGATE(result, doca_urom_service_get_plugins_list(service, &plugins, &n_plugins));
	if (DOCA_IS_ERROR(result))
		goto out;
	for (i = 0; i < n_plugins; i++)
		if (strcmp(plugins[i].plugin_name, cfg.plugin) == 0)
			plugin_id = plugins[i].id;
	if (plugin_id == 0) {
		DOCA_LOG_ERR("the service offers no plugin %s", cfg.plugin);
		result = DOCA_ERROR_NOT_FOUND;
		goto out;
	}

	/* 1b. As NVIDIA's UROM samples do: the service must offer the DPU's first Arm cores, and
	 * the worker runs on them. */
	if (cfg.arm_cpus > 0) {
		doca_cpu_set_t offered;
		int cpu;

		result = doca_urom_service_get_cpuset(service, &offered);
		if (DOCA_IS_ERROR(result))
			goto out;
		for (cpu = 0; cpu < DOCA_CPU_SETSIZE; cpu++) {
			bool want = cpu < cfg.arm_cpus;

			if ((doca_cpu_is_set(cpu, &offered) != 0) != want) {
				DOCA_LOG_ERR("the service's cpuset %s CPU %d; expected exactly 0-%d",
					     cpu < cfg.arm_cpus ? "lacks" : "has", cpu, cfg.arm_cpus - 1);
				result = DOCA_ERROR_NOT_FOUND;
				goto out;
			}
		}
	}

	/* 2. A worker with the plugin. */
	result = doca_urom_worker_create(&worker);
	DOCA_ERROR_PROPAGATE(result, doca_urom_worker_set_service(worker, service));
	DOCA_ERROR_PROPAGATE(result, doca_urom_worker_set_id(worker, DOCA_UROM_WORKER_ID_ANY));
	DOCA_ERROR_PROPAGATE(result, doca_urom_worker_set_plugins(worker, plugin_id));
	DOCA_ERROR_PROPAGATE(result, doca_urom_worker_set_max_inflight_tasks(worker, 8));
	if (cfg.arm_cpus > 0) {
		doca_cpu_set_t cpus;
		int cpu;

		DOCA_CPU_ZERO(&cpus);
		for (cpu = 0; cpu < cfg.arm_cpus; cpu++)
			DOCA_CPU_SET(cpu, &cpus);
		DOCA_ERROR_PROPAGATE(result, doca_urom_worker_set_cpuset(worker, cpus));
	}
	DOCA_ERROR_PROPAGATE(result, doca_pe_connect_ctx(pe, doca_urom_worker_as_ctx(worker)));
	DOCA_ERROR_PROPAGATE(result, start_and_wait(pe, doca_urom_worker_as_ctx(worker), DOCA_ERROR_IN_PROGRESS));
	DOCA_ERROR_PROPAGATE(result, doca_urom_worker_get_id(worker, &worker_id));
	if (DOCA_IS_ERROR(result))
		goto out;

	/* 3. A command: the answer is the plugin's body only. */
	result = command(pe, worker, plugin_id, text, strlen(text), &a);
	if (DOCA_IS_ERROR(result))
		goto out;
	CHECK(a.len == strlen(text), "answer of %zu bytes to %zu", a.len, strlen(text));
	for (i = 0; i < a.len && i < strlen(text); i++)
		if (a.body[i] != (uint8_t)text[strlen(text) - 1 - i]) {
			CHECK(false, "answer byte %zu", i);
			break;
		}

	/* 3b. An idle worker still progresses a plugin that cannot tell it when it has work (no
	 * soft-only arm, as every NVIDIA plugin): the plugin counts the calls. */
	{
		uint64_t before = 0, after = 0;
		struct timespec idle = {.tv_sec = 0, .tv_nsec = 200 * 1000 * 1000};

		result = command(pe, worker, plugin_id, "PROGRESS", 8, &a);
		if (result == DOCA_SUCCESS && a.len == sizeof(before))
			memcpy(&before, a.body, sizeof(before));
		nanosleep(&idle, NULL);
		DOCA_ERROR_PROPAGATE(result, command(pe, worker, plugin_id, "PROGRESS", 8, &a));
		if (result == DOCA_SUCCESS && a.len == sizeof(after))
			memcpy(&after, a.body, sizeof(after));
		if (DOCA_IS_ERROR(result))
			goto out;
		DOCA_LOG_INFO("plugin progress calls over 200 ms idle: %lu", (unsigned long)(after - before));
		CHECK(after >= before + 20, "an idle worker progressed its plugin %lu times in 200 ms",
		      (unsigned long)(after - before));
	}

	/* 3c. A plugin that queues an answer and returns an error: answered once, with the error,
	 * and the next command gets its own answer (not the stray one). */
	result = command(pe, worker, plugin_id, "ERRNOTIF", 8, &a);
	CHECK(result == DOCA_ERROR_INVALID_VALUE, "ERRNOTIF answered %s", doca_error_get_name(result));
	result = command(pe, worker, plugin_id, "xyz", 3, &a);
	if (DOCA_IS_ERROR(result))
		goto out;
	CHECK(a.len == 3 && memcmp(a.body, "zyx", 3) == 0, "the command after ERRNOTIF got %zu bytes '%.*s'", a.len,
	      (int)a.len, (const char *)a.body);

	/* 3d. A 1 MiB answer that the plugin packs without looking at the room it is given: the
	 * worker refuses it (TOO_BIG) instead of writing past its buffer, and lives on. */
	{
		uint8_t over[16];
		uint64_t size = 1 << 20;

		memcpy(over, "OVERSIZE", 8);
		memcpy(over + 8, &size, sizeof(size));
		result = command(pe, worker, plugin_id, over, sizeof(over), &a);
		CHECK(result == DOCA_ERROR_TOO_BIG, "a 1 MiB answer: %s", doca_error_get_name(result));
		result = command(pe, worker, plugin_id, "abc", 3, &a);
		if (DOCA_IS_ERROR(result))
			goto out;
		CHECK(a.len == 3 && memcmp(a.body, "cba", 3) == 0, "the worker after an oversized answer");
	}

	/* 4. A domain of this worker; the plugin's lookups inside the worker. */
	result = doca_urom_domain_create(&domain);
	DOCA_ERROR_PROPAGATE(result, doca_urom_domain_set_oob(domain, &oob));
	DOCA_ERROR_PROPAGATE(result, doca_urom_domain_set_workers(domain, &worker_id, &worker, 1));
	DOCA_ERROR_PROPAGATE(result, doca_urom_domain_set_buffers_count(domain, 1));
	DOCA_ERROR_PROPAGATE(result, doca_urom_domain_add_buffer(domain, region, sizeof(region), "MEMH-0", 6, "KEY", 3));
	DOCA_ERROR_PROPAGATE(result, doca_pe_connect_ctx(pe, doca_urom_domain_as_ctx(domain)));
	DOCA_ERROR_PROPAGATE(result, start_and_wait(pe, doca_urom_domain_as_ctx(domain), DOCA_ERROR_IN_PROGRESS));
	if (DOCA_IS_ERROR(result))
		goto out;
	va = (uint64_t)(uintptr_t)(region + 100);
	memcpy(lookup, "LOOKUP", 6);
	memcpy(lookup + 6, &worker_id, sizeof(worker_id));
	memcpy(lookup + 6 + sizeof(worker_id), &va, sizeof(va));
	result = command(pe, worker, plugin_id, lookup, sizeof(lookup), &a);
	if (DOCA_IS_ERROR(result)) {
		DOCA_LOG_ERR("the plugin's domain lookups failed: %s", doca_error_get_name(result));
		goto out;
	}
	/* address "c_loopback", segment 0, memh (len 6) "MEMH-0", mkey (len 3) "KEY" */
	CHECK(a.len == 10 + 1 + 1 + 6 + 1 + 3, "lookup answer of %zu bytes", a.len);
	CHECK(memcmp(a.body, "c_loopback", 10) == 0, "the member's address");
	CHECK(a.body[10] == 0, "segment %u", a.body[10]);
	CHECK(a.body[11] == 6 && memcmp(a.body + 12, "MEMH-0", 6) == 0, "memory handle");
	CHECK(a.body[18] == 3 && memcmp(a.body + 19, "KEY", 3) == 0, "memory key");

out:
	/* 5. Teardown, each stop reported through the PE. */
	if (domain != NULL) {
		DOCA_ERROR_PROPAGATE(result, stop_and_wait(pe, doca_urom_domain_as_ctx(domain), &events));
		DOCA_ERROR_PROPAGATE(result, doca_urom_domain_destroy(domain));
	}
	if (worker != NULL) {
		DOCA_ERROR_PROPAGATE(result, stop_and_wait(pe, doca_urom_worker_as_ctx(worker), &events));
		CHECK(events > 0, "the worker's stop was never reported through progress");
		DOCA_ERROR_PROPAGATE(result, doca_urom_worker_destroy(worker));
	}
	if (service != NULL) {
		DOCA_ERROR_PROPAGATE(result, stop_and_wait(pe, doca_urom_service_as_ctx(service), &events));
		DOCA_ERROR_PROPAGATE(result, doca_urom_service_destroy(service));
	}
	if (pe != NULL)
		DOCA_ERROR_PROPAGATE(result, doca_pe_destroy(pe));
	if (dev != NULL)
		doca_dev_close(dev);
	doca_argp_destroy();
	if (DOCA_IS_ERROR(result) || failures > 0) {
		DOCA_LOG_ERR("urom_host failed: %s, %d failed checks", doca_error_get_name(result), failures);
		return EXIT_FAILURE;
	}
	DOCA_LOG_INFO("command and domain lookups verified through %s", cfg.plugin);
	return EXIT_SUCCESS;
}
