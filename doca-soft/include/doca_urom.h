/*
 * doca_urom.h -- UROM host side of the DOCA 3.x C API (soft provider of async-doca).
 *
 * Written for this project from the interface facts in the project's API notes; not NVIDIA's
 * header. The worker-side plugin ABI is in doca_urom_plugin.h.
 *
 * Service context: set the device and start; starting connects to the UROM service of this
 * host, found through the file named by DOCA_UROM_SERVICE_FILE (lines
 * "<app_hostname> dpu <dev_hostname> <dev_pci_addr> <net,devs>"). Worker context: set the
 * service, id, plugins and limits, start (the service spawns the worker: STARTING, then
 * RUNNING). Command tasks carry a plugin's packed command in their payload buffer and come back
 * with its packed notification in their response buffer; one callback for success and failure.
 * Domain context: the workers of one parallel application, joined by an out-of-band allgather.
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#ifndef ASYNC_DOCA_UROM_H
#define ASYNC_DOCA_UROM_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "doca_error.h"
#include "doca_types.h"

#ifdef __cplusplus
extern "C" {
#endif

struct doca_dev;
struct doca_ctx;
struct doca_task;
struct doca_buf;
struct doca_urom_service;
struct doca_urom_worker;
struct doca_urom_domain;
struct doca_urom_worker_cmd_task;
struct doca_urom_service_get_workers_by_gid_task;

/* Lets the service choose the worker's id (all bits set; DOCA spells it -1ULL). */
#define DOCA_UROM_WORKER_ID_ANY (~0ULL)

/*
 * CPU-set helpers (DOCA defines them here, over UCX's UCS_CPU_* macros; doca_cpu_set_t has
 * the layout of UCX's ucs_cpu_set_t, see doca_types.h). `p` points to a doca_cpu_set_t; CPUs
 * beyond DOCA_CPU_SETSIZE are ignored by DOCA_CPU_SET and never set.
 */
#define ASYNC_DOCA_CPU_WORD_BITS (8 * sizeof(unsigned long))
/* Clears every CPU. */
#define DOCA_CPU_ZERO(p) memset((p), 0, sizeof(doca_cpu_set_t))
/* Adds CPU `cpu`. */
#define DOCA_CPU_SET(cpu, p)                                                                        \
	do {                                                                                        \
		size_t doca_cpu__ = (size_t)(cpu);                                                  \
		if (doca_cpu__ < DOCA_CPU_SETSIZE)                                                  \
			(p)->ucs_bits[doca_cpu__ / ASYNC_DOCA_CPU_WORD_BITS] |=                     \
				1UL << (doca_cpu__ % ASYNC_DOCA_CPU_WORD_BITS);                     \
	} while (0)
/* Non-zero when CPU `cpu` is in the set (a macro in DOCA too, not a symbol). */
#define doca_cpu_is_set(cpu, p)                                                                     \
	((size_t)(cpu) < DOCA_CPU_SETSIZE &&                                                        \
	 (((p)->ucs_bits[(size_t)(cpu) / ASYNC_DOCA_CPU_WORD_BITS] >> ((size_t)(cpu) % ASYNC_DOCA_CPU_WORD_BITS)) & 1UL))
#define DOCA_UROM_PLUGIN_NAME_MAX_LEN 48

/* One plugin the service offers: its id (one bit), version and name. */
struct doca_urom_service_plugin_info {
	uint64_t id;
	uint64_t version;
	char plugin_name[DOCA_UROM_PLUGIN_NAME_MAX_LEN];
};

/* ---- service -------------------------------------------------------------------------------- */
doca_error_t doca_urom_service_create(struct doca_urom_service **service);
doca_error_t doca_urom_service_destroy(struct doca_urom_service *service);
doca_error_t doca_urom_service_set_max_comm_msg_size(struct doca_urom_service *service, size_t msg_size);
doca_error_t doca_urom_service_set_max_workers(struct doca_urom_service *service, uint32_t max_workers);
doca_error_t doca_urom_service_set_dev(struct doca_urom_service *service, struct doca_dev *dev);
struct doca_ctx *doca_urom_service_as_ctx(struct doca_urom_service *service);
doca_error_t doca_urom_service_get_plugins_list(struct doca_urom_service *service,
						const struct doca_urom_service_plugin_info **plugins,
						size_t *plugins_count);
doca_error_t doca_urom_service_get_cpuset(struct doca_urom_service *service, doca_cpu_set_t *cpuset);

typedef void (*doca_urom_service_get_workers_by_gid_task_completion_cb_t)(
	struct doca_urom_service_get_workers_by_gid_task *task, union doca_data task_user_data,
	union doca_data ctx_user_data);
doca_error_t doca_urom_service_get_workers_by_gid_task_allocate_init(
	struct doca_urom_service *service, uint32_t gid, doca_urom_service_get_workers_by_gid_task_completion_cb_t cb,
	struct doca_urom_service_get_workers_by_gid_task **task);
/* The split form of allocate_init: gid 0 and no callback until set_gid / set_cb (a submit
 * without a callback fails with DOCA_ERROR_INVALID_VALUE). */
doca_error_t doca_urom_service_get_workers_by_gid_task_allocate(struct doca_urom_service *service,
								struct doca_urom_service_get_workers_by_gid_task **task);
void doca_urom_service_get_workers_by_gid_task_set_gid(struct doca_urom_service_get_workers_by_gid_task *task,
							uint32_t gid);
void doca_urom_service_get_workers_by_gid_task_set_cb(struct doca_urom_service_get_workers_by_gid_task *task,
						       doca_urom_service_get_workers_by_gid_task_completion_cb_t cb);
doca_error_t doca_urom_service_get_workers_by_gid_task_release(struct doca_urom_service_get_workers_by_gid_task *task);
struct doca_task *
doca_urom_service_get_workers_by_gid_task_as_task(struct doca_urom_service_get_workers_by_gid_task *task);
size_t doca_urom_service_get_workers_by_gid_task_get_workers_count(
	struct doca_urom_service_get_workers_by_gid_task *task);
const uint64_t *
doca_urom_service_get_workers_by_gid_task_get_worker_ids(struct doca_urom_service_get_workers_by_gid_task *task);

/* ---- worker --------------------------------------------------------------------------------- */
doca_error_t doca_urom_worker_create(struct doca_urom_worker **worker);
doca_error_t doca_urom_worker_destroy(struct doca_urom_worker *worker);
doca_error_t doca_urom_worker_set_service(struct doca_urom_worker *worker, struct doca_urom_service *service);
doca_error_t doca_urom_worker_set_id(struct doca_urom_worker *worker, uint64_t worker_id);
doca_error_t doca_urom_worker_set_gid(struct doca_urom_worker *worker, uint32_t gid);
doca_error_t doca_urom_worker_set_plugins(struct doca_urom_worker *worker, uint64_t plugins);
doca_error_t doca_urom_worker_set_cpuset(struct doca_urom_worker *worker, doca_cpu_set_t cpuset);
doca_error_t doca_urom_worker_set_max_inflight_tasks(struct doca_urom_worker *worker, uint32_t max_tasks);
doca_error_t doca_urom_worker_set_env(struct doca_urom_worker *worker, char *const env[], size_t count);
doca_error_t doca_urom_worker_get_id(struct doca_urom_worker *worker, uint64_t *worker_id);
doca_error_t doca_urom_worker_get_gid(struct doca_urom_worker *worker, uint32_t *gid);
struct doca_ctx *doca_urom_worker_as_ctx(struct doca_urom_worker *worker);

typedef void (*doca_urom_worker_cmd_task_completion_cb_t)(struct doca_urom_worker_cmd_task *task,
							  union doca_data task_user_data,
							  union doca_data ctx_user_data);
/* A command task without a plugin (set one with doca_urom_worker_cmd_task_set_plugin). The
 * payload's data is its whole capacity (the service's max message size): pack at
 * doca_buf_get_data() within doca_buf_get_data_len() bytes, then doca_buf_set_data() the
 * packed length. */
doca_error_t doca_urom_worker_cmd_task_allocate(struct doca_urom_worker *worker,
						struct doca_urom_worker_cmd_task **task);
doca_error_t doca_urom_worker_cmd_task_allocate_init(struct doca_urom_worker *worker, uint64_t plugin,
						     struct doca_urom_worker_cmd_task **task);
doca_error_t doca_urom_worker_cmd_task_release(struct doca_urom_worker_cmd_task *task);
void doca_urom_worker_cmd_task_set_plugin(struct doca_urom_worker_cmd_task *task, uint64_t plugin);
void doca_urom_worker_cmd_task_set_cb(struct doca_urom_worker_cmd_task *task,
				      doca_urom_worker_cmd_task_completion_cb_t cb);
struct doca_buf *doca_urom_worker_cmd_task_get_payload(struct doca_urom_worker_cmd_task *task);
struct doca_buf *doca_urom_worker_cmd_task_get_response(struct doca_urom_worker_cmd_task *task);
void *doca_urom_worker_cmd_task_get_user_data(struct doca_urom_worker_cmd_task *task); /* 32 bytes */
struct doca_task *doca_urom_worker_cmd_task_as_task(struct doca_urom_worker_cmd_task *task);

/* ---- domain --------------------------------------------------------------------------------- */
typedef doca_error_t (*doca_urom_domain_allgather_cb_t)(void *sbuf, void *rbuf, size_t msglen, void *coll_info,
							 void **req);
typedef doca_error_t (*doca_urom_domain_req_test_cb_t)(void *req); /* SUCCESS when done, IN_PROGRESS before */
typedef doca_error_t (*doca_urom_domain_req_free_cb_t)(void *req);

/* The application's out-of-band allgather, used while the domain starts. */
struct doca_urom_domain_oob_coll {
	doca_urom_domain_allgather_cb_t allgather;
	doca_urom_domain_req_test_cb_t req_test;
	doca_urom_domain_req_free_cb_t req_free;
	void *coll_info;
	uint32_t n_oob_indexes;
	uint32_t oob_index;
};

doca_error_t doca_urom_domain_create(struct doca_urom_domain **domain);
doca_error_t doca_urom_domain_destroy(struct doca_urom_domain *domain);
doca_error_t doca_urom_domain_set_oob(struct doca_urom_domain *domain, struct doca_urom_domain_oob_coll *oob);
doca_error_t doca_urom_domain_set_workers(struct doca_urom_domain *domain, uint64_t *domain_worker_ids,
					  struct doca_urom_worker **workers, size_t workers_cnt);
doca_error_t doca_urom_domain_set_buffers_count(struct doca_urom_domain *domain, size_t buffers_cnt);
doca_error_t doca_urom_domain_add_buffer(struct doca_urom_domain *domain, void *buffer, size_t buf_len, void *memh,
					 size_t memh_len, void *mkey, size_t mkey_len);
struct doca_ctx *doca_urom_domain_as_ctx(struct doca_urom_domain *domain);

#ifdef __cplusplus
}
#endif

#endif /* ASYNC_DOCA_UROM_H */
