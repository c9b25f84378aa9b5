/*
 * doca_compat.h -- symbol attributes and struct-version helpers of the DOCA headers.
 *
 * Written for this project from the interface facts of DOCA 3.0 (macro names and what they
 * expand to on Linux); it is not NVIDIA's header.
 *
 * Attributes. DOCA marks each function of its API as stable or experimental:
 *  - DOCA_STABLE: exported with default visibility and kept by the linker.
 *  - DOCA_EXPERIMENTAL: the same, placed in section .text.experimental; unless the program
 *    defines DOCA_ALLOW_EXPERIMENTAL_API, a call also draws a deprecation warning (only a
 *    warning: the call still builds). NVIDIA's samples all build with that define.
 *  - DOCA_DEPRECATED: the same pattern with section .text.deprecated and the switch
 *    DOCA_ALLOW_DEPRECATED_API.
 * The soft provider's own headers mostly declare functions without these attributes; they are
 * here so programs (and plugins) that use them on their own declarations compile unchanged.
 *
 * Struct versions. Some structs a program hands to DOCA start with DOCA_STRUCT_START, a
 * size_t the program stamps with DOCA_VERSION_EXACT of the headers it was built with
 * (DOCA_STRUCT_CTOR and friends), so the library can tell which layout it was given. A UROM
 * plugin's interface table (struct urom_plugin_iface) is one: the worker checks the stamp.
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#ifndef ASYNC_DOCA_COMPAT_H
#define ASYNC_DOCA_COMPAT_H

#include <stddef.h>
#include <string.h>

#include "doca_config.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)

#define DOCA_USED __attribute__((used))
#define DOCA_STABLE __attribute__((visibility("default"))) DOCA_USED

#ifdef DOCA_ALLOW_EXPERIMENTAL_API
#define DOCA_EXPERIMENTAL __attribute__((section(".text.experimental"))) DOCA_STABLE
#else
#define DOCA_EXPERIMENTAL                                                                          \
	__attribute__((deprecated("experimental DOCA API: define DOCA_ALLOW_EXPERIMENTAL_API to use it " \
				  "without this warning"),                                          \
		       section(".text.experimental"))) DOCA_STABLE
#endif

#ifdef DOCA_ALLOW_DEPRECATED_API
#define DOCA_DEPRECATED __attribute__((section(".text.deprecated"))) DOCA_STABLE
#else
#define DOCA_DEPRECATED                                                                            \
	__attribute__((deprecated("deprecated DOCA API: define DOCA_ALLOW_DEPRECATED_API to use it " \
				  "without this warning"),                                          \
		       section(".text.deprecated"))) DOCA_STABLE
#endif

#else /* neither GCC nor clang: no attributes */

#define DOCA_USED
#define DOCA_STABLE
#define DOCA_EXPERIMENTAL
#define DOCA_DEPRECATED

#endif

#ifdef DOCA_COMPAT_HELPERS
/*
 * The version stamp needs DOCA_VERSION_EXACT; doca_version.h includes this file first, so the
 * macros below only expand (at their use) after both are complete.
 */
#include "doca_version.h"

/* The first member of a versioned struct. */
#define DOCA_STRUCT_START size_t __doca_api_version
/* The version a versioned struct (given by pointer) was stamped with. */
#define DOCA_STRUCT_GET_VERSION(X) (X)->__doca_api_version
/* Stamps a versioned struct (an lvalue) with the version of these headers. */
#define DOCA_STRUCT_CTOR(X) (X).__doca_api_version = DOCA_VERSION_EXACT
#define DOCA_STRUCT_PTR_CTOR(X) DOCA_STRUCT_CTOR(*(X))
/* Zeroes the whole struct, then stamps it. */
#define DOCA_STRUCT_MEMSET_CTOR(X)                                                                 \
	do {                                                                                      \
		memset(&(X), 0, sizeof(X));                                                       \
		DOCA_STRUCT_CTOR(X);                                                              \
	} while (0)
#define DOCA_STRUCT_PTR_MEMSET_CTOR(X) DOCA_STRUCT_MEMSET_CTOR(*(X))
/* The stamp as the first entry of a designated initializer: { DOCA_STRUCT_CTOR_LIST_START, ... }. */
#define DOCA_STRUCT_CTOR_LIST_START .__doca_api_version = DOCA_VERSION_EXACT
/* Defines a stamped (otherwise zeroed) variable `name` of type `struct st`. */
#define DOCA_STRUCT_DEF(st, name) struct st name = {.__doca_api_version = DOCA_VERSION_EXACT}
#endif /* DOCA_COMPAT_HELPERS */

#ifdef __cplusplus
}
#endif

#endif /* ASYNC_DOCA_COMPAT_H */
