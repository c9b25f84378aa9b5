/*
 * doca_argp.h -- command-line and JSON parameter parsing of the DOCA 3.x C API (soft provider
 * of async-doca).
 *
 * Written for this project from the interface facts in the project's API notes; not NVIDIA's
 * header.
 *
 * Use (one global parser per process):
 *   doca_argp_init(NULL, &config);                     NULL: the program name is argv[0]
 *   doca_argp_param_create(&p);                        then set its names, description,
 *   doca_argp_param_set_long_name(p, "device");        callback and type, maybe mandatory,
 *   ...                                                and hand it over:
 *   doca_argp_register_param(p);                       argp owns it from now on
 *   doca_argp_start(argc, argv);                       parse; each matched parameter's callback
 *                                                      runs with (value pointer, &config)
 *   ...
 *   doca_argp_destroy();                               at exit
 *
 * Callbacks receive `char *` (STRING, JSON_OBJ: the object's JSON text), `int *` (INT) or
 * `bool *` (BOOLEAN; on the command line a boolean flag takes no value). The pointee lives only
 * during the call: copy it. A callback that returns an error makes doca_argp_start fail with it.
 *
 * Built-in flags: -h/--help, -v/--version, -l/--log-level <10..70>, --sdk-log-level <10..70>,
 * -j/--json <file> (a JSON object whose keys are long names). Short names may have several
 * characters and still take one dash (-ld). Values: "-d mlx5_0", "--device mlx5_0" or
 * "--device=mlx5_0".
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#ifndef ASYNC_DOCA_ARGP_H
#define ASYNC_DOCA_ARGP_H

#include <stdarg.h>
#include <stdint.h>

#include "doca_error.h"
#include "doca_log.h"

#ifdef __cplusplus
extern "C" {
#endif

enum doca_argp_type {
	DOCA_ARGP_TYPE_UNKNOWN = 0,
	DOCA_ARGP_TYPE_STRING = 1,
	DOCA_ARGP_TYPE_INT = 2,
	DOCA_ARGP_TYPE_BOOLEAN = 3,
	DOCA_ARGP_TYPE_JSON_OBJ = 4,
};

struct doca_argp_param; /* one flag (opaque) */
struct doca_argp_cmd;   /* one sub-command (opaque) */

typedef doca_error_t (*doca_argp_param_cb_t)(void *param, void *config);
typedef doca_error_t (*doca_argp_cmd_cb_t)(void *config);
typedef doca_error_t (*doca_argp_dpdk_cb_t)(int argc, char **argv);
typedef doca_error_t (*doca_argp_validation_cb_t)(void *config);
typedef doca_error_t (*doca_argp_logger_cb_t)(enum doca_log_level level, const char *format, va_list args);

/* The parser. */
doca_error_t doca_argp_init(const char *program_name, void *program_config);
doca_error_t doca_argp_start(int argc, char **argv);
doca_error_t doca_argp_destroy(void);
/* Prints the usage text on stdout and returns (programs call it from their own checks). */
void doca_argp_usage(void);
/* A DPDK program: argv before "--" goes to `callback` (with argv[0]), the rest to argp. */
void doca_argp_set_dpdk_program(doca_argp_dpdk_cb_t callback);
doca_error_t doca_argp_register_param(struct doca_argp_param *input_param);
doca_error_t doca_argp_register_cmd(struct doca_argp_cmd *input_cmd);
/* Replaces what -v does; the callback's `param` argument is NULL. */
doca_error_t doca_argp_register_version_callback(doca_argp_param_cb_t callback);
/* Called once after every parameter callback ran, with the program config. */
doca_error_t doca_argp_register_validation_callback(doca_argp_validation_cb_t callback);
/* argp's own messages (parse errors) go to `callback` instead of the application log. */
static inline doca_error_t doca_argp_register_logger_callback(doca_argp_logger_cb_t callback);
/* Back to the default: argp's messages go to the application log (source "ARGP"). */
doca_error_t doca_argp_disable_logger_callback(void);
/* The level given with -l / --sdk-log-level, or the current global limit when none was. */
doca_error_t doca_argp_get_log_level(int *log_level);
doca_error_t doca_argp_get_sdk_log_level(int *log_level);

/* Parameters. Setters take a live, unregistered parameter. */
doca_error_t doca_argp_param_create(struct doca_argp_param **param);
doca_error_t doca_argp_param_destroy(struct doca_argp_param *param); /* only if never registered */
void doca_argp_param_set_short_name(struct doca_argp_param *param, const char *name);
void doca_argp_param_set_long_name(struct doca_argp_param *param, const char *name);
void doca_argp_param_set_arguments(struct doca_argp_param *param, const char *arguments);
void doca_argp_param_set_description(struct doca_argp_param *param, const char *description);
void doca_argp_param_set_callback(struct doca_argp_param *param, doca_argp_param_cb_t callback);
void doca_argp_param_set_type(struct doca_argp_param *param, enum doca_argp_type type);
void doca_argp_param_set_mandatory(struct doca_argp_param *param);
void doca_argp_param_set_cli_only(struct doca_argp_param *param);     /* refused in JSON */
void doca_argp_param_set_multiplicity(struct doca_argp_param *param); /* may repeat; JSON: an array */
void doca_argp_param_set_singular(struct doca_argp_param *param);     /* must be the only flag given */
void doca_argp_param_set_inherited(struct doca_argp_param *param);    /* also valid after a command */
void doca_argp_param_set_hidden(struct doca_argp_param *param);       /* left out of the usage */

/* Sub-commands: "prog [flags] NAME [NAME's flags]"; the chosen command's callback runs last. */
doca_error_t doca_argp_cmd_create(struct doca_argp_cmd **cmd);
doca_error_t doca_argp_cmd_destroy(struct doca_argp_cmd *cmd); /* only if never registered */
void doca_argp_cmd_set_name(struct doca_argp_cmd *cmd, const char *name);
void doca_argp_cmd_set_description(struct doca_argp_cmd *cmd, const char *description);
void doca_argp_cmd_set_callback(struct doca_argp_cmd *cmd, doca_argp_cmd_cb_t callback);
void doca_argp_cmd_set_hidden(struct doca_argp_cmd *cmd);
doca_error_t doca_argp_cmd_register_param(struct doca_argp_cmd *cmd, struct doca_argp_param *input_param);
doca_error_t doca_argp_cmd_register_cmd(struct doca_argp_cmd *cmd, struct doca_argp_cmd *input_cmd);

/*
 * Soft-provider detail: libdoca_soft.so is written in Rust, which cannot build a va_list, so
 * argp hands each finished message line to a plain function, and the static inline
 * doca_argp_register_logger_callback() below turns that into the call DOCA defines,
 * callback(level, "%s", <va_list holding the line>). The trampoline and the stored callback
 * are private to the file that registers the logger.
 */
typedef void (*doca_soft_argp_line_logger_t)(uint32_t level, const char *line);
doca_error_t doca_soft_argp_set_line_logger(doca_soft_argp_line_logger_t logger);

static doca_argp_logger_cb_t _doca_soft_argp_logger;

static inline doca_error_t _doca_soft_argp_call_logger(enum doca_log_level level, const char *format, ...)
{
	doca_error_t result;
	va_list ap;

	va_start(ap, format);
	result = _doca_soft_argp_logger(level, format, ap);
	va_end(ap);
	return result;
}

static inline void _doca_soft_argp_line(uint32_t level, const char *line)
{
	if (_doca_soft_argp_logger != NULL)
		(void)_doca_soft_argp_call_logger((enum doca_log_level)level, "%s", line);
}

static inline doca_error_t doca_argp_register_logger_callback(doca_argp_logger_cb_t callback)
{
	if (callback == NULL)
		return DOCA_ERROR_INVALID_VALUE;
	_doca_soft_argp_logger = callback;
	return doca_soft_argp_set_line_logger(_doca_soft_argp_line);
}

#ifdef __cplusplus
}
#endif

#endif /* ASYNC_DOCA_ARGP_H */
