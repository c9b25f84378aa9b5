/*
 * log_argp.c -- a DOCA-style C program that exercises the common API: logging (sources,
 * levels, standard / buffer / SDK backends) and argp (every parameter type, a mandatory flag,
 * a repeatable flag, a JSON configuration file, the log-level flags, a validation callback).
 *
 * Built by tests/c_programs.rs with nothing but `pkg-config --cflags --libs doca-common
 * doca-argp` and warning flags, like a program written for NVIDIA's SDK. It includes only DOCA
 * headers and <stdbool.h> (which DOCA programs include themselves): strlen, memset, strcmp,
 * free and printf come through the DOCA headers, as with NVIDIA's.
 *
 * Usage: log_argp -d <device> [-n <count>] [-V] [--name <s>] [-t <tag>]... [-j <json>] [-l <level>]
 * With --expect-* flags it checks what was parsed and exits 0 only if every check passed.
 * A failing doca_argp_start prints "argp_start: <error name>" and exits 3.
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <stdbool.h>

#include <doca_argp.h>
#include <doca_dev.h>
#include <doca_error.h>
#include <doca_log.h>
#include <doca_types.h>

DOCA_LOG_REGISTER(LOG_ARGP::MAIN);

#define MAX_STR 64
#define MAX_TAGS 4

struct config {
	char device[MAX_STR];
	int count;
	bool verbose;
	char name[MAX_STR];
	char tags[MAX_TAGS][MAX_STR];
	int n_tags;
	char settings[256]; /* a JSON object, as text */
	/* what the caller says the parse must produce (empty / -1: not checked) */
	char expect_name[MAX_STR];
	int expect_count;
	int expect_tags;
	bool validated;
};

/* Everything both backends captured, one record after the other. */
static char app_log[8192];
static char sdk_log[8192];

static void append(char *dst, size_t cap, const char *line)
{
	size_t used = strlen(dst);
	size_t n = strlen(line);

	if (used + n + 1 > cap)
		n = cap - used - 1;
	memcpy(dst + used, line, n);
	dst[used + n] = '\0';
}

static void app_flush(char *buf)
{
	append(app_log, sizeof(app_log), buf);
}

static void sdk_flush(char *buf)
{
	append(sdk_log, sizeof(sdk_log), buf);
}

/* argp's own messages, when LOG_ARGP_LOGGER is set in the environment. */
static doca_error_t argp_logger(enum doca_log_level level, const char *format, va_list args)
{
	printf("argp-logger[%d]: ", (int)level);
	vprintf(format, args);
	printf("\n");
	return DOCA_SUCCESS;
}

static int failures;

#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			printf("CHECK FAILED line %d: %s\n", __LINE__, #cond);                     \
			failures++;                                                                \
		}                                                                                  \
	} while (0)

/* ---- argp callbacks: copy the value, as DOCA requires ---- */

static doca_error_t copy_str(char *dst, const char *src)
{
	if (strlen(src) >= MAX_STR) {
		DOCA_LOG_ERR("value too long: %s", src);
		return DOCA_ERROR_INVALID_VALUE;
	}
	strcpy(dst, src);
	return DOCA_SUCCESS;
}

static doca_error_t device_cb(void *param, void *config)
{
	return copy_str(((struct config *)config)->device, (const char *)param);
}

static doca_error_t count_cb(void *param, void *config)
{
	int v = *(int *)param;

	if (v <= 0) {
		DOCA_LOG_ERR("count must be positive, got %d", v);
		return DOCA_ERROR_INVALID_VALUE;
	}
	((struct config *)config)->count = v;
	return DOCA_SUCCESS;
}

static doca_error_t verbose_cb(void *param, void *config)
{
	((struct config *)config)->verbose = *(bool *)param;
	return DOCA_SUCCESS;
}

static doca_error_t name_cb(void *param, void *config)
{
	return copy_str(((struct config *)config)->name, (const char *)param);
}

static doca_error_t tag_cb(void *param, void *config)
{
	struct config *cfg = config;

	if (cfg->n_tags == MAX_TAGS)
		return DOCA_ERROR_FULL;
	return copy_str(cfg->tags[cfg->n_tags++], (const char *)param);
}

static doca_error_t settings_cb(void *param, void *config)
{
	struct config *cfg = config;

	snprintf(cfg->settings, sizeof(cfg->settings), "%s", (const char *)param);
	return DOCA_SUCCESS;
}

static doca_error_t expect_name_cb(void *param, void *config)
{
	return copy_str(((struct config *)config)->expect_name, (const char *)param);
}

static doca_error_t expect_count_cb(void *param, void *config)
{
	((struct config *)config)->expect_count = *(int *)param;
	return DOCA_SUCCESS;
}

static doca_error_t expect_tags_cb(void *param, void *config)
{
	((struct config *)config)->expect_tags = *(int *)param;
	return DOCA_SUCCESS;
}

static doca_error_t validate_cb(void *config)
{
	struct config *cfg = config;

	cfg->validated = true;
	if (strcmp(cfg->device, "bad-device") == 0) {
		DOCA_LOG_ERR("device %s refused by validation", cfg->device);
		doca_argp_usage(); /* prints and returns, as DOCA 3.x samples expect */
		return DOCA_ERROR_INVALID_VALUE;
	}
	return DOCA_SUCCESS;
}

/* Creates, fills and registers one parameter. */
static doca_error_t add_param(const char *short_name, const char *long_name, const char *arguments,
			      const char *description, enum doca_argp_type type, doca_argp_param_cb_t cb,
			      bool mandatory, bool multi)
{
	struct doca_argp_param *p;
	doca_error_t result;

	result = doca_argp_param_create(&p);
	if (DOCA_IS_ERROR(result))
		return result;
	if (short_name != NULL)
		doca_argp_param_set_short_name(p, short_name);
	doca_argp_param_set_long_name(p, long_name);
	if (arguments != NULL)
		doca_argp_param_set_arguments(p, arguments);
	doca_argp_param_set_description(p, description);
	doca_argp_param_set_callback(p, cb);
	doca_argp_param_set_type(p, type);
	if (mandatory)
		doca_argp_param_set_mandatory(p);
	if (multi)
		doca_argp_param_set_multiplicity(p);
	return doca_argp_register_param(p);
}

static doca_error_t register_params(void)
{
	doca_error_t result = DOCA_SUCCESS, tmp;

	/* Keep the first error, as DOCA programs do in their setup and cleanup paths. */
	tmp = add_param("d", "device", "<device name>", "Device to use", DOCA_ARGP_TYPE_STRING, device_cb, true,
			false);
	DOCA_ERROR_PROPAGATE(result, tmp);
	tmp = add_param("n", "count", "<num>", "How many", DOCA_ARGP_TYPE_INT, count_cb, false, false);
	DOCA_ERROR_PROPAGATE(result, tmp);
	tmp = add_param("V", "verbose", NULL, "Say more", DOCA_ARGP_TYPE_BOOLEAN, verbose_cb, false, false);
	DOCA_ERROR_PROPAGATE(result, tmp);
	tmp = add_param(NULL, "name", "<name>", "A name", DOCA_ARGP_TYPE_STRING, name_cb, false, false);
	DOCA_ERROR_PROPAGATE(result, tmp);
	tmp = add_param("t", "tag", "<tag>", "A tag (repeatable)", DOCA_ARGP_TYPE_STRING, tag_cb, false, true);
	DOCA_ERROR_PROPAGATE(result, tmp);
	tmp = add_param(NULL, "settings", "<json>", "Settings object", DOCA_ARGP_TYPE_JSON_OBJ, settings_cb, false,
			false);
	DOCA_ERROR_PROPAGATE(result, tmp);
	tmp = add_param(NULL, "expect-name", "<name>", "Check: --name", DOCA_ARGP_TYPE_STRING, expect_name_cb,
			false, false);
	DOCA_ERROR_PROPAGATE(result, tmp);
	tmp = add_param(NULL, "expect-count", "<num>", "Check: --count", DOCA_ARGP_TYPE_INT, expect_count_cb,
			false, false);
	DOCA_ERROR_PROPAGATE(result, tmp);
	tmp = add_param(NULL, "expect-tags", "<num>", "Check: number of tags", DOCA_ARGP_TYPE_INT, expect_tags_cb,
			false, false);
	DOCA_ERROR_PROPAGATE(result, tmp);
	return result;
}

/* Provokes a NOT_SUPPORTED from the library (a soft device has no InfiniBand LID), whose reason
 * the SDK log gets. */
static doca_error_t provoke_not_supported(void)
{
	struct doca_devinfo **list;
	uint32_t n = 0;
	uint16_t lid = 0;
	doca_error_t result;

	result = doca_devinfo_create_list(&list, &n);
	if (result != DOCA_SUCCESS || n == 0)
		return DOCA_ERROR_NOT_FOUND;
	result = doca_devinfo_get_lid(list[0], &lid); /* the call under test */
	doca_devinfo_destroy_list(list);
	return result;
}

int main(int argc, char **argv)
{
	struct config cfg;
	struct doca_log_backend *sdk_backend, *app_backend;
	doca_error_t result;
	int level = 0;
	char *copy;

	memset(&cfg, 0, sizeof(cfg));
	cfg.expect_count = -1;
	cfg.expect_tags = -1;

	/* The setup every DOCA sample's main does. */
	result = doca_log_backend_create_standard();
	if (DOCA_IS_ERROR(result))
		return 1;
	result = doca_log_backend_create_with_buf_sdk(malloc(512), 512, sdk_flush, &sdk_backend);
	if (DOCA_IS_ERROR(result))
		return 1;
	result = doca_log_backend_set_sdk_level(sdk_backend, DOCA_LOG_LEVEL_WARNING);
	if (DOCA_IS_ERROR(result))
		return 1;
	/* And an application buffer backend, to check what the program's own records do. */
	result = doca_log_backend_create_with_buf(malloc(512), 512, app_flush, &app_backend);
	if (DOCA_IS_ERROR(result))
		return 1;

	result = doca_argp_init(NULL, &cfg);
	if (result != DOCA_SUCCESS) {
		printf("argp_init: %s\n", doca_error_get_name(result));
		return 1;
	}
	result = register_params();
	if (result == DOCA_SUCCESS)
		result = doca_argp_register_validation_callback(validate_cb);
	if (result == DOCA_SUCCESS && getenv("LOG_ARGP_LOGGER") != NULL)
		result = doca_argp_register_logger_callback(argp_logger);
	if (result != DOCA_SUCCESS) {
		printf("register: %s\n", doca_error_get_name(result));
		doca_argp_destroy();
		return 1;
	}
	result = doca_argp_start(argc, argv);
	if (result != DOCA_SUCCESS) {
		printf("argp_start: %s\n", doca_error_get_name(result));
		doca_argp_destroy();
		return 3;
	}

	/* What was parsed. */
	printf("device=%s count=%d verbose=%d name=%s tags=%d settings=%s\n", cfg.device, cfg.count, cfg.verbose,
	       cfg.name, cfg.n_tags, cfg.settings);
	CHECK(cfg.validated);
	CHECK(strlen(cfg.device) > 0);
	if (cfg.expect_name[0] != '\0')
		CHECK(strcmp(cfg.name, cfg.expect_name) == 0);
	if (cfg.expect_count >= 0)
		CHECK(cfg.count == cfg.expect_count);
	if (cfg.expect_tags >= 0)
		CHECK(cfg.n_tags == cfg.expect_tags);
	CHECK(doca_argp_get_log_level(&level) == DOCA_SUCCESS);
	CHECK((uint32_t)level == doca_log_level_get_global_lower_limit());
	printf("log_level=%d sdk_log_level=%u\n", level, doca_log_level_get_global_sdk_limit());

	/* Levels: a record prints when upper <= level <= lower. */
	DOCA_LOG_INFO("info record %d", 1);
	DOCA_LOG_DBG("debug record %d", 2);
	DOCA_LOG_TRC("trace record %d", 3); /* compiled out: no DOCA_LOGGING_ALLOW_TRACE */
	CHECK(strstr(app_log, "[INFO][LOG_ARGP::MAIN]") != NULL);
	CHECK(strstr(app_log, "info record 1") != NULL);
	CHECK((strstr(app_log, "debug record 2") != NULL) == (level >= DOCA_LOG_LEVEL_DEBUG));
	CHECK(strstr(app_log, "trace record 3") == NULL);
	/* A record longer than the formatting buffer of the header. */
	copy = malloc(2001);
	memset(copy, 'x', 2000);
	copy[2000] = '\0';
	CHECK(DOCA_LOG_WARN("long %s end", copy) == DOCA_SUCCESS);
	free(copy);

	/* The library's own error reason reaches the SDK backend, and only it. */
	result = provoke_not_supported();
	CHECK(result == DOCA_ERROR_NOT_SUPPORTED);
	CHECK(strstr(sdk_log, "[ERR][DOCA_SOFT]") != NULL);
	CHECK(strstr(sdk_log, "without a LID") != NULL);
	CHECK(strstr(app_log, "without a LID") == NULL);
	CHECK(strstr(sdk_log, "info record") == NULL);
	printf("sdk_log: %s", sdk_log);

	/* doca_error.h / doca_types.h names DOCA programs use. */
	CHECK(DOCA_IS_ERROR(DOCA_ERROR_AGAIN) && !DOCA_IS_ERROR(DOCA_SUCCESS));
	result = DOCA_SUCCESS;
	DOCA_ERROR_PROPAGATE(result, DOCA_ERROR_IO_FAILED);
	DOCA_ERROR_PROPAGATE(result, DOCA_ERROR_NO_MEMORY);
	CHECK(result == DOCA_ERROR_IO_FAILED);
	CHECK(doca_likely(1) && !doca_unlikely(0));
	{
		doca_event_handle_t h = doca_event_invalid_handle;
		uint8_t gid[DOCA_GID_BYTE_LENGTH];
		struct doca_gather_list gl = {.addr = gid, .len = sizeof(gid), .next = NULL};

		CHECK(h == -1 && sizeof(gid) == 16 && gl.len == 16);
		CHECK(DOCA_PCI_FUNC_TYPE_SF == 2 && DOCA_MTU_SIZE_4K_BYTES == 4);
	}

	result = doca_argp_destroy();
	CHECK(result == DOCA_SUCCESS);
	if (failures != 0) {
		printf("%d checks failed\n", failures);
		return 1;
	}
	printf("ok all\n");
	return 0;
}
