/*
 * doca_config.h -- build-wide switches of the DOCA headers.
 *
 * Written for this project; it is not NVIDIA's header. DOCA's headers gate the struct-version
 * helpers of doca_compat.h (DOCA_STRUCT_START, DOCA_STRUCT_CTOR, ...) on DOCA_COMPAT_HELPERS,
 * which DOCA turns on for host and Arm builds, i.e. every build this project targets. A UROM
 * plugin needs them: struct urom_plugin_iface starts with DOCA_STRUCT_START.
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#ifndef ASYNC_DOCA_CONFIG_H
#define ASYNC_DOCA_CONFIG_H

#ifndef DOCA_COMPAT_HELPERS
#define DOCA_COMPAT_HELPERS
#endif

#endif /* ASYNC_DOCA_CONFIG_H */
