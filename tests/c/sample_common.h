/*
 * sample_common.h -- helpers shared by the DOCA C programs of tests/c/, written the way DOCA
 * programs are written: a device chosen by IB device name or PCI address, descriptors traded
 * through files between two processes, contexts driven by their progress engine.
 *
 * Only DOCA API and POSIX: nothing here is specific to the soft provider. Include it after
 * DOCA_LOG_REGISTER (the helpers log through the program's source).
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#ifndef TESTS_C_SAMPLE_COMMON_H
#define TESTS_C_SAMPLE_COMMON_H

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <doca_argp.h>
#include <doca_buf_inventory.h>
#include <doca_ctx.h>
#include <doca_dev.h>
#include <doca_error.h>
#include <doca_log.h>
#include <doca_mmap.h>
#include <doca_pe.h>

/* How long any wait of these programs may take before it is a failure (no hang in a test). */
#define SAMPLE_TIMEOUT_MS 20000

/* A check of a program's results: a failed one is logged and counted in `failures`, which
 * the program reports (and fails on) at its end. */
static int failures __attribute__((unused));

#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			DOCA_LOG_ERR("check failed: " __VA_ARGS__);                                \
			failures++;                                                                \
		}                                                                                  \
	} while (0)

/* The flags every program here shares; each program's config starts with this struct. */
struct sample_config {
	char device[64]; /* -d/--device: IB device name or PCI address */
	char dir[256];   /* --dir: where descriptors are traded (the two-process programs) */
};

static inline doca_error_t sample_copy_flag(char *dst, size_t cap, const char *value)
{
	if (strlen(value) >= cap) {
		DOCA_LOG_ERR("value too long: %s", value);
		return DOCA_ERROR_INVALID_VALUE;
	}
	strcpy(dst, value);
	return DOCA_SUCCESS;
}

static inline doca_error_t sample_device_cb(void *param, void *config)
{
	struct sample_config *c = config;

	return sample_copy_flag(c->device, sizeof(c->device), param);
}

static inline doca_error_t sample_dir_cb(void *param, void *config)
{
	struct sample_config *c = config;

	return sample_copy_flag(c->dir, sizeof(c->dir), param);
}

/* Creates, fills and registers one argp parameter (a NULL short name: long form only). */
static inline doca_error_t sample_add_param(const char *short_name, const char *long_name, const char *description,
					    enum doca_argp_type type, doca_argp_param_cb_t cb, bool mandatory)
{
	struct doca_argp_param *p;
	doca_error_t result;

	result = doca_argp_param_create(&p);
	if (DOCA_IS_ERROR(result))
		return result;
	if (short_name != NULL)
		doca_argp_param_set_short_name(p, short_name);
	doca_argp_param_set_long_name(p, long_name);
	doca_argp_param_set_description(p, description);
	doca_argp_param_set_callback(p, cb);
	doca_argp_param_set_type(p, type);
	if (mandatory)
		doca_argp_param_set_mandatory(p);
	return doca_argp_register_param(p);
}

/* Registers -d/--device (mandatory) and, with `with_dir`, --dir (mandatory). */
static inline doca_error_t sample_register_common(bool with_dir)
{
	doca_error_t result;

	result = sample_add_param("d", "device", "IB device name or PCI address", DOCA_ARGP_TYPE_STRING,
				  sample_device_cb, true);
	if (with_dir)
		DOCA_ERROR_PROPAGATE(result, sample_add_param(NULL, "dir", "directory for the descriptor files",
							      DOCA_ARGP_TYPE_STRING, sample_dir_cb, true));
	return result;
}

static inline uint64_t sample_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Opens the first device for which `supported` (a doca_*_cap_*_is_supported function) answers
 * DOCA_SUCCESS, the way the samples pick a device for a library. */
static inline doca_error_t sample_open_capable_device(doca_error_t (*supported)(const struct doca_devinfo *),
						      struct doca_dev **dev)
{
	struct doca_devinfo **list;
	uint32_t n, i;
	doca_error_t result = doca_devinfo_create_list(&list, &n);

	if (DOCA_IS_ERROR(result))
		return result;
	result = DOCA_ERROR_NOT_FOUND;
	for (i = 0; i < n && result == DOCA_ERROR_NOT_FOUND; i++)
		if (supported(list[i]) == DOCA_SUCCESS)
			result = doca_dev_open(list[i], dev);
	doca_devinfo_destroy_list(list);
	return result;
}

/* Opens the device whose IB device name or PCI address is `name` (the samples' -d flag). */
static inline doca_error_t sample_open_device(const char *name, struct doca_dev **dev)
{
	struct doca_devinfo **list;
	uint32_t n, i;
	doca_error_t result;

	result = doca_devinfo_create_list(&list, &n);
	if (DOCA_IS_ERROR(result)) {
		DOCA_LOG_ERR("no device list: %s", doca_error_get_descr(result));
		return result;
	}
	result = DOCA_ERROR_NOT_FOUND;
	for (i = 0; i < n; i++) {
		char ibdev[64] = {0};
		uint8_t same_pci = 0;

		if (doca_devinfo_get_ibdev_name(list[i], ibdev, sizeof(ibdev)) == DOCA_SUCCESS &&
		    strcmp(ibdev, name) == 0) {
			result = doca_dev_open(list[i], dev);
			break;
		}
		if (doca_devinfo_is_equal_pci_addr(list[i], name, &same_pci) == DOCA_SUCCESS && same_pci) {
			result = doca_dev_open(list[i], dev);
			break;
		}
	}
	doca_devinfo_destroy_list(list);
	if (result == DOCA_ERROR_NOT_FOUND)
		DOCA_LOG_ERR("no device named %s (IB device name or PCI address)", name);
	return result;
}

/* Writes `len` bytes to `path` so that a reader never sees a partial file (temp + rename). */
static inline doca_error_t sample_write_file(const char *path, const void *data, size_t len)
{
	char tmp[512];
	FILE *f;

	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "wb");
	if (f == NULL) {
		DOCA_LOG_ERR("cannot create %s: %s", tmp, strerror(errno));
		return DOCA_ERROR_IO_FAILED;
	}
	if (len > 0 && fwrite(data, 1, len, f) != len) {
		fclose(f);
		return DOCA_ERROR_IO_FAILED;
	}
	if (fclose(f) != 0 || rename(tmp, path) != 0)
		return DOCA_ERROR_IO_FAILED;
	return DOCA_SUCCESS;
}

/* Waits (bounded) for `path` to appear and reads it into a malloc'ed buffer (free it). */
static inline doca_error_t sample_read_file(const char *path, uint8_t **data, size_t *len)
{
	uint64_t deadline = sample_now_ms() + SAMPLE_TIMEOUT_MS;
	FILE *f;
	long size;

	while ((f = fopen(path, "rb")) == NULL) {
		if (sample_now_ms() > deadline) {
			DOCA_LOG_ERR("%s never appeared", path);
			return DOCA_ERROR_TIME_OUT;
		}
		usleep(1000);
	}
	fseek(f, 0, SEEK_END);
	size = ftell(f);
	fseek(f, 0, SEEK_SET);
	*data = malloc(size > 0 ? (size_t)size : 1);
	if (*data == NULL) {
		fclose(f);
		return DOCA_ERROR_NO_MEMORY;
	}
	*len = fread(*data, 1, (size_t)size, f);
	fclose(f);
	return *len == (size_t)size ? DOCA_SUCCESS : DOCA_ERROR_IO_FAILED;
}

/* Progresses `pe` until `ctx` reaches `want` (bounded). */
static inline doca_error_t sample_wait_state(struct doca_pe *pe, struct doca_ctx *ctx, enum doca_ctx_states want)
{
	uint64_t deadline = sample_now_ms() + SAMPLE_TIMEOUT_MS;
	enum doca_ctx_states st;
	doca_error_t result;

	for (;;) {
		result = doca_ctx_get_state(ctx, &st);
		if (DOCA_IS_ERROR(result))
			return result;
		if (st == want)
			return DOCA_SUCCESS;
		if (sample_now_ms() > deadline) {
			DOCA_LOG_ERR("ctx stuck in state %d waiting for %d", (int)st, (int)want);
			return DOCA_ERROR_TIME_OUT;
		}
		(void)doca_pe_progress(pe);
	}
}

/* Starts `ctx` (synchronously or not) and progresses `pe` until it is RUNNING. */
static inline doca_error_t sample_ctx_start(struct doca_pe *pe, struct doca_ctx *ctx)
{
	doca_error_t result = doca_ctx_start(ctx);

	if (result != DOCA_SUCCESS && result != DOCA_ERROR_IN_PROGRESS)
		return result;
	return sample_wait_state(pe, ctx, DOCA_CTX_STATE_RUNNING);
}

/* Stops `ctx` (a no-op success if it is already IDLE) and progresses `pe` until it is IDLE. */
static inline doca_error_t sample_ctx_stop(struct doca_pe *pe, struct doca_ctx *ctx)
{
	doca_error_t result = doca_ctx_stop(ctx);

	if (result != DOCA_SUCCESS && result != DOCA_ERROR_IN_PROGRESS) {
		DOCA_LOG_ERR("ctx stop: %s", doca_error_get_name(result));
		return result;
	}
	return sample_wait_state(pe, ctx, DOCA_CTX_STATE_IDLE);
}

/* Progresses `pe` until *done is true: busy while there is work, otherwise armed and asleep on
 * the notification handle (DOCA's event protocol). Bounded. */
static inline doca_error_t sample_progress_until(struct doca_pe *pe, volatile bool *done)
{
	uint64_t deadline = sample_now_ms() + SAMPLE_TIMEOUT_MS;
	doca_notification_handle_t fd;
	doca_error_t result;

	result = doca_pe_get_notification_handle(pe, &fd);
	if (DOCA_IS_ERROR(result))
		return result;
	while (!*done) {
		struct pollfd p = {.fd = fd, .events = POLLIN};

		if (sample_now_ms() > deadline)
			return DOCA_ERROR_TIME_OUT;
		if (doca_pe_progress(pe) != 0)
			continue;
		result = doca_pe_request_notification(pe);
		if (DOCA_IS_ERROR(result))
			return result;
		if (doca_pe_progress(pe) == 0 && !*done)
			(void)poll(&p, 1, 100);
		result = doca_pe_clear_notification(pe, fd);
		if (DOCA_IS_ERROR(result))
			return result;
	}
	return DOCA_SUCCESS;
}

/* Stops and destroys an inventory and an mmap, either of which may be NULL (a program's teardown). */
static inline void sample_destroy_memory(struct doca_buf_inventory *inv, struct doca_mmap *mmap)
{
	if (inv != NULL) {
		doca_buf_inventory_stop(inv);
		doca_buf_inventory_destroy(inv);
	}
	if (mmap != NULL) {
		doca_mmap_stop(mmap);
		doca_mmap_destroy(mmap);
	}
}

/* The end of a one-PE program's teardown, once its contexts are destroyed: the PE (its result
 * joins `result`), the inventory and mmap, the device (any of them may be NULL). */
static inline doca_error_t sample_destroy_rest(doca_error_t result, struct doca_pe *pe, struct doca_buf_inventory *inv,
					       struct doca_mmap *mmap, struct doca_dev *dev)
{
	if (pe != NULL)
		DOCA_ERROR_PROPAGATE(result, doca_pe_destroy(pe));
	sample_destroy_memory(inv, mmap);
	if (dev != NULL)
		doca_dev_close(dev);
	return result;
}

#endif /* TESTS_C_SAMPLE_COMMON_H */
