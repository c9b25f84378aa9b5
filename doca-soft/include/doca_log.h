/*
 * doca_log.h -- logging of the DOCA 3.x C API (soft provider of async-doca).
 *
 * Written for this project from the interface facts in the project's API notes; not NVIDIA's
 * header.
 *
 * Model:
 *  - Sources. Every .c file that logs says DOCA_LOG_REGISTER(NAME) once; that declares the
 *    file's `log_source` and registers NAME before main() runs. DOCA_LOG_INFO("x=%d", x) and
 *    friends then log under that source.
 *  - Levels. Numbers, bigger = more verbose (DISABLE 10 ... TRACE 70). A backend prints a
 *    record of level L when upper_limit <= L <= lower_limit ("lower"/"upper" speak of
 *    severity). Defaults: global lower limit INFO, global upper limit CRIT, global SDK limit
 *    INFO. A new backend copies the current global limits and follows later global changes
 *    unless its limit was made strict.
 *  - Backends. Application backends (standard, file, fd, buffer, syslog) receive the
 *    program's DOCA_LOG_* records; SDK backends (the *_sdk constructors) receive the
 *    libraries' own records (for example why a call returned DOCA_ERROR_NOT_SUPPORTED). With
 *    no SDK backend the libraries are silent. Backends live until the process exits.
 *
 * Soft-provider detail: C variadic functions cannot be written in stable Rust, so doca_log()
 * is a static inline function here. It formats the message with vsnprintf and hands the
 * finished text to doca_soft_log_emit(), which libdoca_soft.so exports. Programs call
 * doca_log() / DOCA_LOG_* exactly as with NVIDIA's SDK; nothing else changes.
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#ifndef ASYNC_DOCA_LOG_H
#define ASYNC_DOCA_LOG_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "doca_error.h"

#ifdef __cplusplus
extern "C" {
#endif

enum doca_log_level {
	DOCA_LOG_LEVEL_DISABLE = 10, /* as a limit: print nothing */
	DOCA_LOG_LEVEL_CRIT = 20,
	DOCA_LOG_LEVEL_ERROR = 30,
	DOCA_LOG_LEVEL_WARNING = 40,
	DOCA_LOG_LEVEL_INFO = 50,
	DOCA_LOG_LEVEL_DEBUG = 60,
	DOCA_LOG_LEVEL_TRACE = 70,
};

/* A log destination (opaque; owned by the library until exit). */
struct doca_log_backend;

/* A buffer backend calls this with its buffer after writing one record into it. */
typedef void (*log_flush_callback)(char *buf);

/* Sources: `*source` receives the id DOCA_LOG_* passes to doca_log(). */
doca_error_t doca_log_register_source(const char *source_name, int *source);
doca_error_t doca_log_unregister_source(int source);

/* Application backends. `standard` creates two: stdout for INFO and more verbose records,
 * stderr for WARNING and more severe ones. */
doca_error_t doca_log_backend_create_standard(void);
doca_error_t doca_log_backend_create_with_file(FILE *fptr, struct doca_log_backend **backend);
doca_error_t doca_log_backend_create_with_fd(int fd, struct doca_log_backend **backend);
doca_error_t doca_log_backend_create_with_buf(char *buf, size_t capacity, log_flush_callback handler,
					      struct doca_log_backend **backend);
doca_error_t doca_log_backend_create_with_syslog(const char *name, struct doca_log_backend **backend);

/* SDK backends: the same destinations, for the libraries' own records. */
doca_error_t doca_log_backend_create_with_file_sdk(FILE *fptr, struct doca_log_backend **backend);
doca_error_t doca_log_backend_create_with_fd_sdk(int fd, struct doca_log_backend **backend);
doca_error_t doca_log_backend_create_with_buf_sdk(char *buf, size_t capacity, log_flush_callback handler,
						  struct doca_log_backend **backend);
doca_error_t doca_log_backend_create_with_syslog_sdk(const char *name, struct doca_log_backend **backend);

/* Per-backend limits. The *_strict calls pin the current limit against later global changes. */
doca_error_t doca_log_backend_set_level_lower_limit(struct doca_log_backend *backend, uint32_t level);
doca_error_t doca_log_backend_set_level_upper_limit(struct doca_log_backend *backend, uint32_t upper_limit);
doca_error_t doca_log_backend_set_level_lower_limit_strict(struct doca_log_backend *backend);
doca_error_t doca_log_backend_set_level_upper_limit_strict(struct doca_log_backend *backend);
/* The most verbose level an SDK backend prints. */
doca_error_t doca_log_backend_set_sdk_level(struct doca_log_backend *backend, uint32_t level);

/* Global limits (applied to every backend whose limit is not strict). */
doca_error_t doca_log_level_set_global_lower_limit(uint32_t level);
doca_error_t doca_log_level_set_global_upper_limit(uint32_t upper_limit);
uint32_t doca_log_level_get_global_lower_limit(void);
uint32_t doca_log_level_get_global_upper_limit(void);
doca_error_t doca_log_level_set_global_sdk_limit(uint32_t level);
uint32_t doca_log_level_get_global_sdk_limit(void);

/*
 * Soft-provider detail (not part of NVIDIA's API; called by doca_log() below):
 * doca_soft_log_enabled() says whether any application backend would print a record of this
 * level, so disabled levels cost no formatting; doca_soft_log_emit() logs one finished
 * message (no trailing newline needed) and returns what doca_log() returns.
 */
int doca_soft_log_enabled(uint32_t level);
doca_error_t doca_soft_log_emit(uint32_t level, int source, const char *fname, int line, const char *func,
				const char *message);

/* Logs one printf-style record under `source` (see DOCA_LOG_* for the usual way to call it). */
static inline doca_error_t doca_log(uint32_t level, int source, const char *fname, int line, const char *func,
				    const char *format, ...) __attribute__((format(printf, 6, 7)));

static inline doca_error_t doca_log(uint32_t level, int source, const char *fname, int line, const char *func,
				    const char *format, ...)
{
	char small[512];
	char *msg = small;
	doca_error_t result;
	va_list ap;
	int n;

	if (format == NULL)
		return DOCA_ERROR_INVALID_VALUE;
	if (!doca_soft_log_enabled(level))
		return DOCA_SUCCESS;
	va_start(ap, format);
	n = vsnprintf(small, sizeof(small), format, ap);
	va_end(ap);
	if (n < 0)
		return DOCA_ERROR_INVALID_VALUE;
	if ((size_t)n >= sizeof(small)) {
		/* Longer than the stack buffer: format again into one that fits. */
		msg = (char *)malloc((size_t)n + 1);
		if (msg == NULL)
			return DOCA_ERROR_NO_MEMORY;
		va_start(ap, format);
		vsnprintf(msg, (size_t)n + 1, format, ap);
		va_end(ap);
	}
	result = doca_soft_log_emit(level, source, fname, line, func, msg);
	if (msg != small)
		free(msg);
	return result;
}

/*
 * DOCA_LOG_REGISTER(NAME): once per .c file that logs, at file scope. Declares the file's
 * `log_source` and registers NAME (stringified, so RDMA::COMMON is fine) from a constructor
 * that runs before main(). No destructor: sources live until exit.
 */
#define DOCA_LOG_REGISTER(SOURCE)                                                                  \
	static int log_source;                                                                     \
	static void __attribute__((constructor(101), used)) _doca_soft_log_register_source(void)  \
	{                                                                                          \
		doca_log_register_source(#SOURCE, &log_source);                                    \
	}

#define DOCA_LOG(level, format, ...)                                                               \
	doca_log(level, log_source, __FILE__, __LINE__, __func__, format, ##__VA_ARGS__)

#define DOCA_LOG_CRIT(format, ...) DOCA_LOG(DOCA_LOG_LEVEL_CRIT, format, ##__VA_ARGS__)
#define DOCA_LOG_ERR(format, ...) DOCA_LOG(DOCA_LOG_LEVEL_ERROR, format, ##__VA_ARGS__)
#define DOCA_LOG_WARN(format, ...) DOCA_LOG(DOCA_LOG_LEVEL_WARNING, format, ##__VA_ARGS__)
#define DOCA_LOG_INFO(format, ...) DOCA_LOG(DOCA_LOG_LEVEL_INFO, format, ##__VA_ARGS__)
#define DOCA_LOG_DBG(format, ...) DOCA_LOG(DOCA_LOG_LEVEL_DEBUG, format, ##__VA_ARGS__)

/* Trace records exist only in builds that define DOCA_LOGGING_ALLOW_TRACE. */
#ifdef DOCA_LOGGING_ALLOW_TRACE
#define DOCA_LOG_TRC(format, ...) DOCA_LOG(DOCA_LOG_LEVEL_TRACE, format, ##__VA_ARGS__)
#else
#define DOCA_LOG_TRC(format, ...)                                                                  \
	do {                                                                                       \
	} while (0)
#endif

#ifdef __cplusplus
}
#endif

#endif /* ASYNC_DOCA_LOG_H */
