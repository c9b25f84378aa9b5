/*
 * doca_version.h -- which DOCA API a program was compiled against, and which library it runs on.
 *
 * Written for this project from the interface facts of DOCA 3.0 (macro names, the numeric
 * encodings, the two functions); it is not NVIDIA's header. async-doca's soft provider
 * implements the DOCA 3.0.0058 API, so these are the values of that release.
 *
 * Two encodings of one version:
 *  - "exact": major in bits 24 and up, minor in bits 16..23, the patch/build number in the low
 *    16 bits (3.0.0058 is 0x0300003A). This is what versioned structs carry
 *    (DOCA_STRUCT_CTOR in doca_compat.h stamps it), e.g. a UROM plugin's interface table.
 *  - "official": the same with the patch multiplied by 1000, for ordering comparisons of
 *    releases (DOCA_VERSION_EQ_CURRENT / DOCA_VERSION_LTE_CURRENT).
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#ifndef ASYNC_DOCA_VERSION_H
#define ASYNC_DOCA_VERSION_H

#include <stddef.h>

#include "doca_compat.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DOCA_VERSION_MAJOR 3
#define DOCA_VERSION_MINOR 0
#define DOCA_VERSION_PATCH 58
#define DOCA_VERSION_STRING "3.0.0058"

/* major << 24 | minor << 16 | patch, as a size_t (the type of __doca_api_version). */
#define DOCA_VERSION_CALC_EXACT(major, minor, patch) ((size_t)((major) << 24 | (minor) << 16 | (patch)))
#define DOCA_VERSION_EXACT DOCA_VERSION_CALC_EXACT(DOCA_VERSION_MAJOR, DOCA_VERSION_MINOR, DOCA_VERSION_PATCH)

/*
 * The comparison form: patch * 1000 in the low bits. DOCA leaves the patch argument
 * unparenthesised in this macro; so do we, so that an expression argument computes the same
 * (surprising) value it computes with DOCA's header.
 */
#define DOCA_VERSION_CALC(major, minor, patch) ((size_t)((major) << 24 | (minor) << 16 | (patch * 1000)))
#define DOCA_VERSION_OFFICIAL DOCA_VERSION_CALC(DOCA_VERSION_MAJOR, DOCA_VERSION_MINOR, DOCA_VERSION_PATCH)
/* Whether the compiled-against release is exactly / at least the given one. */
#define DOCA_VERSION_EQ_CURRENT(major, minor, patch) (DOCA_VERSION_CALC(major, minor, patch) == DOCA_VERSION_OFFICIAL)
#define DOCA_VERSION_LTE_CURRENT(major, minor, patch) (DOCA_VERSION_CALC(major, minor, patch) <= DOCA_VERSION_OFFICIAL)

/*
 * The version this program was compiled against ("3.0.0058"). Header-only: it reads the macro
 * above, so it answers for the headers, not for the library loaded at run time.
 */
static inline const char *doca_version(void)
{
	return DOCA_VERSION_STRING;
}

/*
 * The version of the DOCA library the program runs against, as a static NUL-terminated
 * string owned by the library. With libdoca_soft.so: the DOCA API version it implements.
 */
DOCA_EXPERIMENTAL
const char *doca_version_runtime(void);

#ifdef __cplusplus
}
#endif

#endif /* ASYNC_DOCA_VERSION_H */
