/*
 * sync_event_pair.c -- a sync event shared by two processes, in the pattern of NVIDIA's
 * sync_event samples: the exporter creates the event (remote-PCI publisher, CPU subscriber),
 * exports it and hands the blob over (a file here); the importer opens it with
 * doca_sync_event_create_from_export. Both drive it as a context with tasks on their own PE,
 * in event mode: R rounds of notify_set / wait_eq ping-pong, then a get task checks the final
 * value. Each side exits 0 only if every round matched.
 *
 *   sync_event_pair -d <dev> --role exporter --dir <dir> [--rounds R]
 *   sync_event_pair -d <dev> --role importer --dir <dir> [--rounds R]
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <stdbool.h>

#include <doca_argp.h>
#include <doca_ctx.h>
#include <doca_dev.h>
#include <doca_error.h>
#include <doca_log.h>
#include <doca_pe.h>
#include <doca_sync_event.h>

DOCA_LOG_REGISTER(SYNC_EVENT_PAIR);

#include "sample_common.h"

struct config {
	struct sample_config common; /* -d, --dir */
	bool exporter;
	int rounds;
};

struct state {
	volatile bool done;
	doca_error_t status;
};

static doca_error_t role_cb(void *param, void *config)
{
	const char *role = param;

	if (strcmp(role, "exporter") != 0 && strcmp(role, "importer") != 0) {
		DOCA_LOG_ERR("--role is exporter or importer, not %s", role);
		return DOCA_ERROR_INVALID_VALUE;
	}
	((struct config *)config)->exporter = strcmp(role, "exporter") == 0;
	return DOCA_SUCCESS;
}

static doca_error_t rounds_cb(void *param, void *config)
{
	int n = *(int *)param;

	if (n < 1)
		return DOCA_ERROR_INVALID_VALUE;
	((struct config *)config)->rounds = n;
	return DOCA_SUCCESS;
}

/* ---- completions: every task kind records into the state its task user data points at ---- */

static void finish(struct doca_task *t, union doca_data ud)
{
	struct state *st = ud.ptr;

	st->status = doca_task_get_status(t);
	st->done = true;
	doca_task_free(t);
}

static void set_done(struct doca_sync_event_task_notify_set *task, union doca_data ud, union doca_data cud)
{
	(void)cud;
	finish(doca_sync_event_task_notify_set_as_doca_task(task), ud);
}

static void wait_done(struct doca_sync_event_task_wait_eq *task, union doca_data ud, union doca_data cud)
{
	(void)cud;
	finish(doca_sync_event_task_wait_eq_as_doca_task(task), ud);
}

static void get_done(struct doca_sync_event_task_get *task, union doca_data ud, union doca_data cud)
{
	(void)cud;
	finish(doca_sync_event_task_get_as_doca_task(task), ud);
}

/* Submits `task` and progresses (in event mode) until its callback ran. */
static doca_error_t run(struct doca_pe *pe, struct doca_task *task, struct state *st)
{
	doca_error_t result;

	st->done = false;
	result = doca_task_submit(task);
	if (DOCA_IS_ERROR(result)) {
		doca_task_free(task);
		return result;
	}
	result = sample_progress_until(pe, &st->done);
	return DOCA_IS_ERROR(result) ? result : st->status;
}

static doca_error_t notify_set(struct doca_pe *pe, struct doca_sync_event *ev, uint64_t value)
{
	struct doca_sync_event_task_notify_set *t;
	struct state st = {0};
	doca_error_t result;

	result = doca_sync_event_task_notify_set_alloc_init(ev, value, (union doca_data){.ptr = &st}, &t);
	if (DOCA_IS_ERROR(result))
		return result;
	return run(pe, doca_sync_event_task_notify_set_as_doca_task(t), &st);
}

static doca_error_t wait_eq(struct doca_pe *pe, struct doca_sync_event *ev, uint64_t value)
{
	struct doca_sync_event_task_wait_eq *t;
	struct state st = {0};
	doca_error_t result;

	result = doca_sync_event_task_wait_eq_alloc_init(ev, value, UINT64_MAX, (union doca_data){.ptr = &st}, &t);
	if (DOCA_IS_ERROR(result))
		return result;
	return run(pe, doca_sync_event_task_wait_eq_as_doca_task(t), &st);
}

int main(int argc, char **argv)
{
	struct config cfg = {.rounds = 100};
	struct doca_dev *dev = NULL;
	struct doca_pe *pe = NULL;
	struct doca_sync_event *ev = NULL;
	struct doca_sync_event_task_get *get;
	struct state st = {0};
	char path[512];
	uint64_t value = 0;
	doca_error_t result;
	int round;

	result = doca_log_backend_create_standard();
	DOCA_ERROR_PROPAGATE(result, doca_argp_init("sync_event_pair", &cfg));
	DOCA_ERROR_PROPAGATE(result, sample_register_common(true));
	DOCA_ERROR_PROPAGATE(result,
			     sample_add_param(NULL, "role", "exporter or importer", DOCA_ARGP_TYPE_STRING, role_cb, true));
	DOCA_ERROR_PROPAGATE(result,
			     sample_add_param(NULL, "rounds", "ping-pong rounds", DOCA_ARGP_TYPE_INT, rounds_cb, false));
	DOCA_ERROR_PROPAGATE(result, doca_argp_start(argc, argv));
	if (DOCA_IS_ERROR(result)) {
		doca_argp_destroy();
		return EXIT_FAILURE;
	}
	snprintf(path, sizeof(path), "%s/sync_event.blob", cfg.common.dir);

	result = sample_open_device(cfg.common.device, &dev);
	/* The device must do what this side needs (as NVIDIA's sync-event samples check). */
	if (result == DOCA_SUCCESS) {
		struct doca_devinfo *info = doca_dev_as_devinfo(dev);

		result = cfg.exporter ? doca_sync_event_cap_is_export_to_remote_pci_supported(info) :
					doca_sync_event_cap_is_create_from_export_supported(info);
		DOCA_ERROR_PROPAGATE(result, doca_sync_event_cap_task_wait_eq_is_supported(info));
		DOCA_ERROR_PROPAGATE(result, doca_sync_event_cap_task_notify_set_is_supported(info));
		DOCA_ERROR_PROPAGATE(result, doca_sync_event_cap_task_get_is_supported(info));
		if (DOCA_IS_ERROR(result))
			DOCA_LOG_ERR("the device lacks a capability: %s", doca_error_get_name(result));
	}
	DOCA_ERROR_PROPAGATE(result, doca_pe_create(&pe));
	if (DOCA_IS_ERROR(result))
		goto out;
	if (cfg.exporter) {
		/* Both sides set and both wait: each location is declared. */
		result = doca_sync_event_create(&ev);
		DOCA_ERROR_PROPAGATE(result, doca_sync_event_add_publisher_location_remote_pci(ev));
		DOCA_ERROR_PROPAGATE(result, doca_sync_event_add_publisher_location_cpu(ev, dev));
		DOCA_ERROR_PROPAGATE(result, doca_sync_event_add_subscriber_location_cpu(ev, dev));
		DOCA_ERROR_PROPAGATE(result, doca_sync_event_add_subscriber_location_remote_pci(ev));
	} else {
		uint8_t *blob;
		size_t len;

		result = sample_read_file(path, &blob, &len);
		if (DOCA_IS_ERROR(result))
			goto out;
		unlink(path);
		result = doca_sync_event_create_from_export(dev, blob, len, &ev);
		free(blob);
	}
	DOCA_ERROR_PROPAGATE(result, doca_sync_event_task_notify_set_set_conf(ev, set_done, set_done, 2));
	DOCA_ERROR_PROPAGATE(result, doca_sync_event_task_wait_eq_set_conf(ev, wait_done, wait_done, 2));
	DOCA_ERROR_PROPAGATE(result, doca_sync_event_task_get_set_conf(ev, get_done, get_done, 2));
	DOCA_ERROR_PROPAGATE(result, doca_pe_connect_ctx(pe, doca_sync_event_as_ctx(ev)));
	if (DOCA_IS_ERROR(result))
		goto out;
	result = sample_ctx_start(pe, doca_sync_event_as_ctx(ev));
	if (DOCA_IS_ERROR(result))
		goto out;
	if (cfg.exporter) {
		const uint8_t *blob;
		size_t len;

		result = doca_sync_event_export_to_remote_pci(ev, dev, &blob, &len);
		DOCA_ERROR_PROPAGATE(result, sample_write_file(path, blob, len));
		if (DOCA_IS_ERROR(result))
			goto out;
	}
	/* The importer sets odd values, the exporter answers with the next even one. */
	for (round = 1; round <= cfg.rounds && result == DOCA_SUCCESS; round++) {
		uint64_t odd = (uint64_t)(2 * round - 1);

		if (cfg.exporter) {
			result = wait_eq(pe, ev, odd);
			DOCA_ERROR_PROPAGATE(result, notify_set(pe, ev, odd + 1));
		} else {
			result = notify_set(pe, ev, odd);
			DOCA_ERROR_PROPAGATE(result, wait_eq(pe, ev, odd + 1));
		}
		if (DOCA_IS_ERROR(result))
			DOCA_LOG_ERR("round %d: %s", round, doca_error_get_name(result));
	}
	if (result == DOCA_SUCCESS) {
		result = doca_sync_event_task_get_alloc_init(ev, &value, (union doca_data){.ptr = &st}, &get);
		if (result == DOCA_SUCCESS)
			result = run(pe, doca_sync_event_task_get_as_doca_task(get), &st);
		if (result == DOCA_SUCCESS && value != (uint64_t)(2 * cfg.rounds)) {
			DOCA_LOG_ERR("final value %lu, expected %d", (unsigned long)value, 2 * cfg.rounds);
			result = DOCA_ERROR_UNEXPECTED;
		}
	}
out:
	if (ev != NULL) {
		doca_error_t tmp = doca_ctx_stop(doca_sync_event_as_ctx(ev));

		if (tmp == DOCA_SUCCESS || tmp == DOCA_ERROR_IN_PROGRESS)
			DOCA_ERROR_PROPAGATE(result, sample_wait_state(pe, doca_sync_event_as_ctx(ev), DOCA_CTX_STATE_IDLE));
		DOCA_ERROR_PROPAGATE(result, doca_sync_event_destroy(ev));
	}
	if (pe != NULL)
		DOCA_ERROR_PROPAGATE(result, doca_pe_destroy(pe));
	if (dev != NULL)
		doca_dev_close(dev);
	doca_argp_destroy();
	if (DOCA_IS_ERROR(result)) {
		DOCA_LOG_ERR("%s failed: %s", cfg.exporter ? "exporter" : "importer", doca_error_get_name(result));
		return EXIT_FAILURE;
	}
	DOCA_LOG_INFO("%s: %d rounds, final value %lu", cfg.exporter ? "exporter" : "importer", cfg.rounds,
		      (unsigned long)value);
	return EXIT_SUCCESS;
}
