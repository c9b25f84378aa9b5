/*
 * doca_types.h -- value types shared by the DOCA 3.x C API (soft provider of async-doca).
 *
 * Written for this project from the interface facts in the project's API notes; not NVIDIA's
 * header. Sizes and offsets are checked against the Rust declarations (doca-sys) by the
 * project's tests (tests/c_abi.rs).
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#ifndef ASYNC_DOCA_TYPES_H
#define ASYNC_DOCA_TYPES_H

#include <stddef.h>
#include <stdint.h>
#ifdef __linux__
#include <linux/types.h>
#endif

#include "doca_error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Opaque user data carried by tasks and contexts; 8 bytes, passed by value. */
union doca_data {
	void *ptr;
	uint64_t u64;
};

/* An OS event handle: a file descriptor on Linux. */
typedef int doca_event_handle_t;
/* The value no valid event handle has (DOCA spells this macro in lower case). */
#define doca_event_invalid_handle (-1)

/* A file descriptor on Linux: readable when the progress engine has work. */
typedef doca_event_handle_t doca_notification_handle_t;
#define DOCA_NOTIFICATION_HANDLE_INVALID (-1)

/* Length in bytes of an InfiniBand/RoCE GID. */
#define DOCA_GID_BYTE_LENGTH 16

/*
 * Big-endian integers (RDMA immediate data, wire fields). On Linux these are the kernel's
 * sparse-annotated types, which are plain unsigned integers of the same width to a compiler.
 */
#ifdef __linux__
typedef __be16 doca_be16_t;
typedef __be32 doca_be32_t;
typedef __be64 doca_be64_t;
#else
typedef uint16_t doca_be16_t;
typedef uint32_t doca_be32_t;
typedef uint64_t doca_be64_t;
#endif

/* A chain of memory ranges (address, length), linked through `next`; NULL ends it. */
struct doca_gather_list {
	void *addr;
	uint64_t len;
	struct doca_gather_list *next;
};

/* The kind of PCI function a device is. */
enum doca_pci_func_type {
	DOCA_PCI_FUNC_TYPE_PF = 0, /* physical function */
	DOCA_PCI_FUNC_TYPE_VF = 1, /* virtual function */
	DOCA_PCI_FUNC_TYPE_SF = 2, /* scalable function */
};

/* Where GPU-related memory lives and who may access it. */
enum doca_gpu_mem_type {
	DOCA_GPU_MEM_TYPE_GPU = 0,     /* GPU memory, GPU access only */
	DOCA_GPU_MEM_TYPE_GPU_CPU = 1, /* GPU memory the CPU can also reach */
	DOCA_GPU_MEM_TYPE_CPU_GPU = 2, /* CPU memory the GPU can also reach */
};

/* How an Ethernet send waits for its scheduled time. */
enum doca_eth_wait_on_time_type {
	DOCA_ETH_WAIT_ON_TIME_TYPE_NONE = 0,
	DOCA_ETH_WAIT_ON_TIME_TYPE_NATIVE = 1,
	DOCA_ETH_WAIT_ON_TIME_TYPE_DPDK = 2,
};

/* Path MTU sizes (RDMA); RAW_ETHERNET is reserved. */
enum doca_mtu_size {
	DOCA_MTU_SIZE_256_BYTES = 0,
	DOCA_MTU_SIZE_512_BYTES = 1,
	DOCA_MTU_SIZE_1K_BYTES = 2,
	DOCA_MTU_SIZE_2K_BYTES = 3,
	DOCA_MTU_SIZE_4K_BYTES = 4,
	DOCA_MTU_SIZE_RAW_ETHERNET = 5,
};

/* Memory and RDMA access rights (a bit mask of these). */
enum doca_access_flag {
	DOCA_ACCESS_FLAG_LOCAL_READ_ONLY = 0,
	DOCA_ACCESS_FLAG_LOCAL_READ_WRITE = 1,
	DOCA_ACCESS_FLAG_RDMA_READ = 2,
	DOCA_ACCESS_FLAG_RDMA_WRITE = 4,
	DOCA_ACCESS_FLAG_RDMA_ATOMIC = 8,
	DOCA_ACCESS_FLAG_PCI_READ_ONLY = 16,
	DOCA_ACCESS_FLAG_PCI_READ_WRITE = 32,
	DOCA_ACCESS_FLAG_PCI_RELAXED_ORDERING = 64,
};

/* A set of CPUs, bit n of the array for CPU n (the layout of UCX's ucs_cpu_set_t). */
#define DOCA_CPU_SETSIZE 1024
typedef struct {
	unsigned long ucs_bits[DOCA_CPU_SETSIZE / (8 * sizeof(unsigned long))];
} doca_cpu_set_t;

static inline void doca_cpu_set_add(doca_cpu_set_t *set, unsigned int cpu)
{
	if (cpu < DOCA_CPU_SETSIZE)
		set->ucs_bits[cpu / (8 * sizeof(unsigned long))] |= 1UL << (cpu % (8 * sizeof(unsigned long)));
}

#ifdef __cplusplus
}
#endif

#endif /* ASYNC_DOCA_TYPES_H */
