/*
 * doca_error.h -- status codes of the DOCA 3.x C API, as async-doca's soft provider implements it.
 *
 * Written for this project from the interface facts listed in the project's API notes (names,
 * numeric values); it is not NVIDIA's header. The names match DOCA's, so C code written for
 * DOCA compiles against these headers and links against libdoca_soft.so.
 *
 * doca_error_t is int-sized. Newer releases add values: treat unknown codes as errors.
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#ifndef ASYNC_DOCA_ERROR_H
#define ASYNC_DOCA_ERROR_H

/*
 * NVIDIA's doca_error.h reaches <string.h>, <stdlib.h>, <stdint.h>, <assert.h> and <stddef.h>
 * through its own includes, and DOCA programs call strlen, memset, free ... relying on that.
 * We include them directly so the same programs compile unchanged.
 */
#include <assert.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Branch hints: a condition that is almost always true / false. */
#if defined(__GNUC__) || defined(__clang__)
#define doca_likely(x) __builtin_expect(!!(x), 1)
#define doca_unlikely(x) __builtin_expect(!!(x), 0)
#else
#define doca_likely(x) (x)
#define doca_unlikely(x) (x)
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Plugins get it through doca_urom_plugin.h, which includes this header. */
typedef enum doca_error {
	DOCA_SUCCESS = 0,
	DOCA_ERROR_UNKNOWN = 1,
	DOCA_ERROR_NOT_PERMITTED = 2,
	DOCA_ERROR_IN_USE = 3,
	DOCA_ERROR_NOT_SUPPORTED = 4,
	DOCA_ERROR_AGAIN = 5,
	DOCA_ERROR_INVALID_VALUE = 6,
	DOCA_ERROR_NO_MEMORY = 7,
	DOCA_ERROR_INITIALIZATION = 8,
	DOCA_ERROR_TIME_OUT = 9,
	DOCA_ERROR_SHUTDOWN = 10,
	DOCA_ERROR_CONNECTION_RESET = 11,
	DOCA_ERROR_CONNECTION_ABORTED = 12,
	DOCA_ERROR_CONNECTION_INPROGRESS = 13,
	DOCA_ERROR_NOT_CONNECTED = 14,
	DOCA_ERROR_NO_LOCK = 15,
	DOCA_ERROR_NOT_FOUND = 16,
	DOCA_ERROR_IO_FAILED = 17,
	DOCA_ERROR_BAD_STATE = 18,
	DOCA_ERROR_UNSUPPORTED_VERSION = 19,
	DOCA_ERROR_OPERATING_SYSTEM = 20,
	DOCA_ERROR_DRIVER = 21,
	DOCA_ERROR_UNEXPECTED = 22,
	DOCA_ERROR_ALREADY_EXIST = 23,
	DOCA_ERROR_FULL = 24,
	DOCA_ERROR_EMPTY = 25,
	DOCA_ERROR_IN_PROGRESS = 26,
	DOCA_ERROR_TOO_BIG = 27,
	DOCA_ERROR_AUTHENTICATION = 28,
	DOCA_ERROR_BAD_CONFIG = 29,
	DOCA_ERROR_SKIPPED = 30,
} doca_error_t;

/* 1 when `r` is not DOCA_SUCCESS (with a hint that errors are rare), else 0. */
#define DOCA_IS_ERROR(r) doca_unlikely((r) != DOCA_SUCCESS)

/*
 * Keeps the first error of a cleanup sequence: `r` (an lvalue) takes the value of `t` only
 * while `r` is still DOCA_SUCCESS. Typical use: result = first_step(); then
 * DOCA_ERROR_PROPAGATE(result, tmp) after each later cleanup call stored in `tmp`.
 */
#define DOCA_ERROR_PROPAGATE(r, t)                                                                 \
	do {                                                                                       \
		if ((r) == DOCA_SUCCESS)                                                           \
			(r) = (t);                                                                 \
	} while (0)

/* The symbolic name ("DOCA_ERROR_NO_MEMORY") and a one-line description of a code. Static strings. */
const char *doca_error_get_name(doca_error_t error);
const char *doca_error_get_descr(doca_error_t error);

#ifdef __cplusplus
}
#endif

#endif /* ASYNC_DOCA_ERROR_H */
