/*
 * doca_rdma.h -- RDMA of the DOCA 3.x C API (soft provider of async-doca: processes of one host).
 *
 * Written for this project from the interface facts in the project's API notes; not NVIDIA's
 * header.
 *
 * Reliable connections only. Once the context is started, doca_rdma_export() gives a blob and
 * a connection; the blob goes to the peer out of band, which hands it to doca_rdma_connect().
 * Tasks name the connection they use (the 3.x form). Receives are posted in advance and consumed
 * in order by sends, sends with immediate and writes with immediate. A failed task puts the
 * context in an error state until it is stopped, restarted and reconnected.
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#ifndef ASYNC_DOCA_RDMA_H
#define ASYNC_DOCA_RDMA_H

/* NVIDIA's doca_rdma.h is the one DOCA header that brings <stdbool.h>; RDMA programs rely on it. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "doca_error.h"
#include "doca_types.h"

#ifdef __cplusplus
extern "C" {
#endif

struct doca_rdma;
struct doca_rdma_connection;
struct doca_dev;
struct doca_ctx;
struct doca_task;
struct doca_buf;
struct doca_rdma_task_receive;
struct doca_rdma_task_send;
struct doca_rdma_task_send_imm;
struct doca_rdma_task_read;
struct doca_rdma_task_write;
struct doca_rdma_task_write_imm;
struct doca_rdma_task_atomic_cmp_swp;
struct doca_rdma_task_atomic_fetch_add;
struct doca_devinfo;
struct doca_gpu_dev_rdma;
struct doca_dpa_completion;

/* The handle of an RDMA context on a DPA (never produced by the soft provider). */
typedef uint64_t doca_dpa_dev_rdma_t;

enum doca_rdma_transport_type {
	DOCA_RDMA_TRANSPORT_TYPE_RC = 0, /* reliable connection */
	DOCA_RDMA_TRANSPORT_TYPE_DC = 1, /* dynamically connected (not supported by the soft provider) */
};

/* One entry of a device's GID table. */
struct doca_rdma_gid {
	uint8_t raw[DOCA_GID_BYTE_LENGTH];
};

enum doca_rdma_opcode {
	DOCA_RDMA_OPCODE_RECV_SEND = 0,
	DOCA_RDMA_OPCODE_RECV_SEND_WITH_IMM = 1,
	DOCA_RDMA_OPCODE_RECV_WRITE_WITH_IMM = 2,
};

doca_error_t doca_rdma_create(struct doca_dev *dev, struct doca_rdma **rdma);
doca_error_t doca_rdma_destroy(struct doca_rdma *rdma);
struct doca_ctx *doca_rdma_as_ctx(struct doca_rdma *rdma);
doca_error_t doca_rdma_set_permissions(struct doca_rdma *rdma, uint32_t permissions);
doca_error_t doca_rdma_set_send_queue_size(struct doca_rdma *rdma, uint32_t size);
doca_error_t doca_rdma_set_recv_queue_size(struct doca_rdma *rdma, uint32_t size);
doca_error_t doca_rdma_set_max_num_connections(struct doca_rdma *rdma, uint16_t max);
doca_error_t doca_rdma_export(struct doca_rdma *rdma, const void **local_conn_details, size_t *local_conn_details_size,
			      struct doca_rdma_connection **rdma_connection);
doca_error_t doca_rdma_connect(struct doca_rdma *rdma, const void *remote_conn_details,
			       size_t remote_conn_details_size, struct doca_rdma_connection *rdma_connection);

/* Per task kind: a callback type, a pool configuration and the cast to doca_task. */
#define ASYNC_DOCA_RDMA_TASK_KIND(kind)                                                                   \
	typedef void (*doca_rdma_task_##kind##_completion_cb_t)(struct doca_rdma_task_##kind * task,       \
								union doca_data task_user_data,             \
								union doca_data ctx_user_data);             \
	doca_error_t doca_rdma_task_##kind##_set_conf(struct doca_rdma *rdma,                              \
						      doca_rdma_task_##kind##_completion_cb_t ok_cb,        \
						      doca_rdma_task_##kind##_completion_cb_t err_cb,       \
						      uint32_t num_tasks);                                  \
	struct doca_task *doca_rdma_task_##kind##_as_task(struct doca_rdma_task_##kind *task);

ASYNC_DOCA_RDMA_TASK_KIND(receive)
ASYNC_DOCA_RDMA_TASK_KIND(send)
ASYNC_DOCA_RDMA_TASK_KIND(send_imm)
ASYNC_DOCA_RDMA_TASK_KIND(read)
ASYNC_DOCA_RDMA_TASK_KIND(write)
ASYNC_DOCA_RDMA_TASK_KIND(write_imm)
ASYNC_DOCA_RDMA_TASK_KIND(atomic_cmp_swp)
ASYNC_DOCA_RDMA_TASK_KIND(atomic_fetch_add)
#undef ASYNC_DOCA_RDMA_TASK_KIND

doca_error_t doca_rdma_task_receive_allocate_init(struct doca_rdma *rdma, struct doca_buf *dst_buf,
						  union doca_data user_data, struct doca_rdma_task_receive **task);
doca_error_t doca_rdma_task_send_allocate_init(struct doca_rdma *rdma, struct doca_rdma_connection *conn,
					       const struct doca_buf *src_buf, union doca_data user_data,
					       struct doca_rdma_task_send **task);
doca_error_t doca_rdma_task_send_imm_allocate_init(struct doca_rdma *rdma, struct doca_rdma_connection *conn,
						   const struct doca_buf *src_buf, doca_be32_t immediate_data,
						   union doca_data user_data, struct doca_rdma_task_send_imm **task);
doca_error_t doca_rdma_task_read_allocate_init(struct doca_rdma *rdma, struct doca_rdma_connection *conn,
					       const struct doca_buf *src_buf, struct doca_buf *dst_buf,
					       union doca_data user_data, struct doca_rdma_task_read **task);
doca_error_t doca_rdma_task_write_allocate_init(struct doca_rdma *rdma, struct doca_rdma_connection *conn,
						const struct doca_buf *src_buf, struct doca_buf *dst_buf,
						union doca_data user_data, struct doca_rdma_task_write **task);
doca_error_t doca_rdma_task_write_imm_allocate_init(struct doca_rdma *rdma, struct doca_rdma_connection *conn,
						    const struct doca_buf *src_buf, struct doca_buf *dst_buf,
						    doca_be32_t immediate_data, union doca_data user_data,
						    struct doca_rdma_task_write_imm **task);
doca_error_t doca_rdma_task_atomic_cmp_swp_allocate_init(struct doca_rdma *rdma, struct doca_rdma_connection *conn,
							 struct doca_buf *dst_buf, struct doca_buf *result_buf,
							 uint64_t cmp_data, uint64_t swap_data,
							 union doca_data user_data,
							 struct doca_rdma_task_atomic_cmp_swp **task);
doca_error_t doca_rdma_task_atomic_fetch_add_allocate_init(struct doca_rdma *rdma,
							   struct doca_rdma_connection *conn,
							   struct doca_buf *dst_buf, struct doca_buf *result_buf,
							   uint64_t add_data, union doca_data user_data,
							   struct doca_rdma_task_atomic_fetch_add **task);

enum doca_rdma_opcode doca_rdma_task_receive_get_result_opcode(const struct doca_rdma_task_receive *task);
uint32_t doca_rdma_task_receive_get_result_len(const struct doca_rdma_task_receive *task);
doca_be32_t doca_rdma_task_receive_get_result_immediate_data(const struct doca_rdma_task_receive *task);
const struct doca_rdma_connection *
doca_rdma_task_receive_get_result_rdma_connection(const struct doca_rdma_task_receive *task);


/*
 * Configuration of the context. Setters need an IDLE context (DOCA_ERROR_BAD_STATE after
 * start); getters work in any state. On the soft provider the link-level properties
 * (transport, MTU, GRH, GID index, service level, RNR retries, connection-request timeout)
 * are validated and stored only: its transport has no wire. Queue sizes are rounded up to a
 * power of two and the getters report the size in use. Reliable connections only: DC is
 * DOCA_ERROR_NOT_SUPPORTED.
 */
doca_error_t doca_rdma_set_transport_type(struct doca_rdma *rdma, enum doca_rdma_transport_type transport_type);
doca_error_t doca_rdma_get_transport_type(const struct doca_rdma *rdma, enum doca_rdma_transport_type *transport_type);
doca_error_t doca_rdma_set_mtu(struct doca_rdma *rdma, enum doca_mtu_size mtu);
doca_error_t doca_rdma_get_mtu(const struct doca_rdma *rdma, enum doca_mtu_size *mtu);
doca_error_t doca_rdma_get_permissions(struct doca_rdma *rdma, uint32_t *permissions);
doca_error_t doca_rdma_set_grh_enabled(struct doca_rdma *rdma, uint8_t grh_enabled);
doca_error_t doca_rdma_get_grh_enabled(const struct doca_rdma *rdma, uint8_t *grh_enabled);
doca_error_t doca_rdma_set_gid_index(struct doca_rdma *rdma, uint32_t gid_index);
doca_error_t doca_rdma_get_gid_index(const struct doca_rdma *rdma, uint32_t *gid_index);
doca_error_t doca_rdma_set_sl(struct doca_rdma *rdma, uint32_t sl);
doca_error_t doca_rdma_get_sl(const struct doca_rdma *rdma, uint32_t *sl);
doca_error_t doca_rdma_set_rnr_retry_count(struct doca_rdma *rdma, uint8_t rnr_retry_count);
doca_error_t doca_rdma_get_rnr_retry_count(const struct doca_rdma *rdma, uint8_t *rnr_retry_count);
/* In milliseconds: how long connection establishment by address may take (connect_to_addr to answer). */
doca_error_t doca_rdma_set_connection_request_timeout(struct doca_rdma *rdma, uint16_t timeout);
doca_error_t doca_rdma_get_connection_request_timeout(const struct doca_rdma *rdma, uint16_t *timeout);
doca_error_t doca_rdma_get_max_num_connections(struct doca_rdma *rdma, uint16_t *max_num_connections);
doca_error_t doca_rdma_get_send_queue_size(const struct doca_rdma *rdma, uint32_t *send_queue_size);
doca_error_t doca_rdma_get_recv_queue_size(const struct doca_rdma *rdma, uint32_t *recv_queue_size);
doca_error_t doca_rdma_set_max_send_buf_list_len(struct doca_rdma *rdma, uint32_t max_send_buf_list_len);
doca_error_t doca_rdma_get_max_send_buf_list_len(const struct doca_rdma *rdma, uint32_t *max_send_buf_list_len);
doca_error_t doca_rdma_task_receive_set_dst_buf_list_len(struct doca_rdma *rdma, uint32_t buf_list_len);
doca_error_t doca_rdma_task_receive_get_dst_buf_list_len(const struct doca_rdma *rdma, uint32_t *buf_list_len);
/* GPU and DPA data paths: DOCA_ERROR_NOT_SUPPORTED on the soft provider. */
doca_error_t doca_rdma_get_dpa_handle(struct doca_rdma *rdma, doca_dpa_dev_rdma_t *dpa_rdma);
doca_error_t doca_rdma_get_gpu_handle(struct doca_rdma *rdma, struct doca_gpu_dev_rdma **gpu_rdma);
doca_error_t doca_rdma_dpa_completion_attach(struct doca_rdma *rdma, struct doca_dpa_completion *dpa_comp);

/* Capabilities of a device: the limits the provider enforces. */
doca_error_t doca_rdma_cap_get_max_recv_queue_size(const struct doca_devinfo *devinfo, uint32_t *max_recv_queue_size);
doca_error_t doca_rdma_cap_get_max_send_queue_size(const struct doca_devinfo *devinfo, uint32_t *max_send_queue_size);
doca_error_t doca_rdma_cap_get_max_send_buf_list_len(const struct doca_devinfo *devinfo,
						     uint32_t *max_send_buf_list_len);
doca_error_t doca_rdma_cap_get_max_message_size(const struct doca_devinfo *devinfo, uint32_t *max_message_size);
doca_error_t doca_rdma_cap_get_gid_table_size(const struct doca_devinfo *devinfo, uint32_t *gid_table_size);
/* Copies num_entries GIDs starting at start_index into the caller's array. */
doca_error_t doca_rdma_cap_get_gid(const struct doca_devinfo *devinfo, uint32_t start_index, uint32_t num_entries,
				   struct doca_rdma_gid *gid_array);
/* DOCA_SUCCESS when supported, DOCA_ERROR_NOT_SUPPORTED when not. */
doca_error_t doca_rdma_cap_transport_type_is_supported(const struct doca_devinfo *devinfo,
						       enum doca_rdma_transport_type transport_type);
doca_error_t doca_rdma_cap_task_receive_get_max_dst_buf_list_len(const struct doca_devinfo *devinfo,
								 enum doca_rdma_transport_type transport_type,
								 uint32_t *max_buf_list_len);

doca_error_t doca_rdma_cap_task_receive_is_supported(const struct doca_devinfo *devinfo);
doca_error_t doca_rdma_cap_task_send_is_supported(const struct doca_devinfo *devinfo);
doca_error_t doca_rdma_cap_task_send_imm_is_supported(const struct doca_devinfo *devinfo);
doca_error_t doca_rdma_cap_task_read_is_supported(const struct doca_devinfo *devinfo);
doca_error_t doca_rdma_cap_task_write_is_supported(const struct doca_devinfo *devinfo);
doca_error_t doca_rdma_cap_task_write_imm_is_supported(const struct doca_devinfo *devinfo);
doca_error_t doca_rdma_cap_task_atomic_cmp_swp_is_supported(const struct doca_devinfo *devinfo);
doca_error_t doca_rdma_cap_task_atomic_fetch_add_is_supported(const struct doca_devinfo *devinfo);

/*
 * Task accessors, to re-use a task: in its completion callback a task is the caller's again
 * with all its parameters; change them with these setters, reset destination buffers (results
 * are appended after their data) and submit it again. Setters may only be used while the
 * caller owns the task. doca_rdma_task_read_get_result_len() is valid after success only.
 */
void doca_rdma_task_receive_set_dst_buf(struct doca_rdma_task_receive *task, struct doca_buf *dst_buf);
struct doca_buf *doca_rdma_task_receive_get_dst_buf(const struct doca_rdma_task_receive *task);
void doca_rdma_task_send_set_src_buf(struct doca_rdma_task_send *task, const struct doca_buf *src_buf);
const struct doca_buf *doca_rdma_task_send_get_src_buf(const struct doca_rdma_task_send *task);
void doca_rdma_task_send_set_rdma_connection(struct doca_rdma_task_send *task, struct doca_rdma_connection *rdma_connection);
const struct doca_rdma_connection *doca_rdma_task_send_get_rdma_connection(const struct doca_rdma_task_send *task);
void doca_rdma_task_send_imm_set_src_buf(struct doca_rdma_task_send_imm *task, const struct doca_buf *src_buf);
const struct doca_buf *doca_rdma_task_send_imm_get_src_buf(const struct doca_rdma_task_send_imm *task);
void doca_rdma_task_send_imm_set_immediate_data(struct doca_rdma_task_send_imm *task, doca_be32_t immediate_data);
doca_be32_t doca_rdma_task_send_imm_get_immediate_data(const struct doca_rdma_task_send_imm *task);
void doca_rdma_task_send_imm_set_rdma_connection(struct doca_rdma_task_send_imm *task, struct doca_rdma_connection *rdma_connection);
const struct doca_rdma_connection *doca_rdma_task_send_imm_get_rdma_connection(const struct doca_rdma_task_send_imm *task);
void doca_rdma_task_read_set_src_buf(struct doca_rdma_task_read *task, const struct doca_buf *src_buf);
const struct doca_buf *doca_rdma_task_read_get_src_buf(const struct doca_rdma_task_read *task);
void doca_rdma_task_read_set_dst_buf(struct doca_rdma_task_read *task, struct doca_buf *dst_buf);
struct doca_buf *doca_rdma_task_read_get_dst_buf(const struct doca_rdma_task_read *task);
void doca_rdma_task_read_set_rdma_connection(struct doca_rdma_task_read *task, struct doca_rdma_connection *rdma_connection);
const struct doca_rdma_connection *doca_rdma_task_read_get_rdma_connection(const struct doca_rdma_task_read *task);
uint32_t doca_rdma_task_read_get_result_len(const struct doca_rdma_task_read *task);
void doca_rdma_task_write_set_src_buf(struct doca_rdma_task_write *task, const struct doca_buf *src_buf);
const struct doca_buf *doca_rdma_task_write_get_src_buf(const struct doca_rdma_task_write *task);
void doca_rdma_task_write_set_dst_buf(struct doca_rdma_task_write *task, struct doca_buf *dst_buf);
struct doca_buf *doca_rdma_task_write_get_dst_buf(const struct doca_rdma_task_write *task);
void doca_rdma_task_write_set_rdma_connection(struct doca_rdma_task_write *task, struct doca_rdma_connection *rdma_connection);
const struct doca_rdma_connection *doca_rdma_task_write_get_rdma_connection(const struct doca_rdma_task_write *task);
void doca_rdma_task_write_imm_set_src_buf(struct doca_rdma_task_write_imm *task, const struct doca_buf *src_buf);
const struct doca_buf *doca_rdma_task_write_imm_get_src_buf(const struct doca_rdma_task_write_imm *task);
void doca_rdma_task_write_imm_set_dst_buf(struct doca_rdma_task_write_imm *task, struct doca_buf *dst_buf);
struct doca_buf *doca_rdma_task_write_imm_get_dst_buf(const struct doca_rdma_task_write_imm *task);
void doca_rdma_task_write_imm_set_immediate_data(struct doca_rdma_task_write_imm *task, doca_be32_t immediate_data);
doca_be32_t doca_rdma_task_write_imm_get_immediate_data(const struct doca_rdma_task_write_imm *task);
void doca_rdma_task_write_imm_set_rdma_connection(struct doca_rdma_task_write_imm *task, struct doca_rdma_connection *rdma_connection);
const struct doca_rdma_connection *doca_rdma_task_write_imm_get_rdma_connection(const struct doca_rdma_task_write_imm *task);
void doca_rdma_task_atomic_cmp_swp_set_dst_buf(struct doca_rdma_task_atomic_cmp_swp *task, struct doca_buf *dst_buf);
struct doca_buf *doca_rdma_task_atomic_cmp_swp_get_dst_buf(const struct doca_rdma_task_atomic_cmp_swp *task);
void doca_rdma_task_atomic_cmp_swp_set_result_buf(struct doca_rdma_task_atomic_cmp_swp *task, struct doca_buf *result_buf);
struct doca_buf *doca_rdma_task_atomic_cmp_swp_get_result_buf(const struct doca_rdma_task_atomic_cmp_swp *task);
void doca_rdma_task_atomic_cmp_swp_set_cmp_data(struct doca_rdma_task_atomic_cmp_swp *task, uint64_t cmp_data);
uint64_t doca_rdma_task_atomic_cmp_swp_get_cmp_data(const struct doca_rdma_task_atomic_cmp_swp *task);
void doca_rdma_task_atomic_cmp_swp_set_swap_data(struct doca_rdma_task_atomic_cmp_swp *task, uint64_t swap_data);
uint64_t doca_rdma_task_atomic_cmp_swp_get_swap_data(const struct doca_rdma_task_atomic_cmp_swp *task);
void doca_rdma_task_atomic_cmp_swp_set_rdma_connection(struct doca_rdma_task_atomic_cmp_swp *task, struct doca_rdma_connection *rdma_connection);
const struct doca_rdma_connection *doca_rdma_task_atomic_cmp_swp_get_rdma_connection(const struct doca_rdma_task_atomic_cmp_swp *task);
void doca_rdma_task_atomic_fetch_add_set_dst_buf(struct doca_rdma_task_atomic_fetch_add *task, struct doca_buf *dst_buf);
struct doca_buf *doca_rdma_task_atomic_fetch_add_get_dst_buf(const struct doca_rdma_task_atomic_fetch_add *task);
void doca_rdma_task_atomic_fetch_add_set_result_buf(struct doca_rdma_task_atomic_fetch_add *task, struct doca_buf *result_buf);
struct doca_buf *doca_rdma_task_atomic_fetch_add_get_result_buf(const struct doca_rdma_task_atomic_fetch_add *task);
void doca_rdma_task_atomic_fetch_add_set_add_data(struct doca_rdma_task_atomic_fetch_add *task, uint64_t add_data);
uint64_t doca_rdma_task_atomic_fetch_add_get_add_data(const struct doca_rdma_task_atomic_fetch_add *task);
void doca_rdma_task_atomic_fetch_add_set_rdma_connection(struct doca_rdma_task_atomic_fetch_add *task, struct doca_rdma_connection *rdma_connection);
const struct doca_rdma_connection *doca_rdma_task_atomic_fetch_add_get_rdma_connection(const struct doca_rdma_task_atomic_fetch_add *task);

/*
 * Connection management by address ("RDMA CM"). The soft provider runs the handshake over
 * TCP to the given address and keeps its shared-memory data path, so both peers must be on
 * this host: connecting to an address of another host is DOCA_ERROR_NOT_SUPPORTED (the SDK
 * log says why). Listening binds 127.0.0.1 and ::1. All callbacks come from doca_pe_progress;
 * the listening and handshake sockets are part of the PE's notification handle.
 */
struct doca_rdma_addr;

enum doca_rdma_addr_type {
	DOCA_RDMA_ADDR_TYPE_IPv4 = 0, /* "127.0.0.1" */
	DOCA_RDMA_ADDR_TYPE_IPv6 = 1, /* "::1" */
	DOCA_RDMA_ADDR_TYPE_GID = 2,  /* a GID in IPv6 notation (IPv4-mapped GIDs mean that IPv4 address) */
};

/* Server: a client asks to connect; answer with doca_rdma_connection_accept or _reject. */
typedef void (*doca_rdma_connection_request_cb_t)(struct doca_rdma_connection *rdma_connection,
						  union doca_data ctx_user_data);
/* Both sides: the handshake completed; tasks may use the connection from now on. */
typedef void (*doca_rdma_connection_established_cb_t)(struct doca_rdma_connection *rdma_connection,
						      union doca_data connection_user_data,
						      union doca_data ctx_user_data);
/* The connection could not be made (refused, rejected, timed out, peer gone mid-handshake). */
typedef void (*doca_rdma_connection_failure_cb_t)(struct doca_rdma_connection *rdma_connection,
						  union doca_data connection_user_data,
						  union doca_data ctx_user_data);
/* The peer of an established connection disconnected or exited; answer with _disconnect. */
typedef void (*doca_rdma_connection_disconnection_cb_t)(struct doca_rdma_connection *rdma_connection,
							union doca_data connection_user_data,
							union doca_data ctx_user_data);

/* IDLE only. The request callback may be NULL on a pure client (requests are then refused). */
doca_error_t doca_rdma_set_connection_state_callbacks(struct doca_rdma *rdma,
						      doca_rdma_connection_request_cb_t doca_rdma_connect_request_cb,
						      doca_rdma_connection_established_cb_t doca_rdma_connect_established_cb,
						      doca_rdma_connection_failure_cb_t doca_rdma_connect_failure_cb,
						      doca_rdma_connection_disconnection_cb_t doca_rdma_disconnect_cb);
doca_error_t doca_rdma_addr_create(enum doca_rdma_addr_type addr_type, const char *address, uint16_t port,
				   struct doca_rdma_addr **addr);
/* DOCA_ERROR_BAD_STATE while a connection uses the address. */
doca_error_t doca_rdma_addr_destroy(struct doca_rdma_addr *addr);
doca_error_t doca_rdma_addr_get_params(struct doca_rdma_addr *addr, enum doca_rdma_addr_type *addr_type,
				       const char **address, uint16_t *port);
/* The ctx must be RUNNING. A port another listener holds: DOCA_ERROR_CONNECTION_ABORTED. */
doca_error_t doca_rdma_start_listen_to_port(struct doca_rdma *rdma, uint16_t port);
/* Refuses new requests; existing connections stay. */
doca_error_t doca_rdma_stop_listen_to_port(struct doca_rdma *rdma, uint16_t port);
/* The outcome comes later: established or failure callback. The addr must outlive it. */
doca_error_t doca_rdma_connect_to_addr(struct doca_rdma *rdma, struct doca_rdma_addr *addr,
				       union doca_data connection_user_data);
doca_error_t doca_rdma_connection_accept(struct doca_rdma_connection *rdma_connection, void *private_data,
					 uint8_t private_data_len);
doca_error_t doca_rdma_connection_reject(struct doca_rdma_connection *rdma_connection);
/* The peer gets its disconnection callback; calling it on a connection already over is a no-op. */
doca_error_t doca_rdma_connection_disconnect(struct doca_rdma_connection *rdma_connection);
doca_error_t doca_rdma_connection_set_user_data(struct doca_rdma_connection *rdma_connection,
						union doca_data connection_user_data);
doca_error_t doca_rdma_connection_get_user_data(const struct doca_rdma_connection *rdma_connection,
						union doca_data *connection_user_data);
doca_error_t doca_rdma_connection_get_id(const struct doca_rdma_connection *rdma_connection, uint32_t *connection_id);
/* The peer's address (the client's own addr object on the client). Do not destroy it on the server. */
doca_error_t doca_rdma_connection_get_addr(const struct doca_rdma_connection *rdma_connection,
					   struct doca_rdma_addr **addr);

/*
 * Remote-net sync event tasks: read, set or add to the peer's sync event (opened with
 * doca_sync_event_remote_net_create_from_export from the peer's export) without the peer's
 * CPU. They keep their connection's submission order; the peer's waiters are woken.
 * get appends the 8-byte value to dst_buf; notify_set writes the first 8 data bytes of
 * src_buf; notify_add adds add_data and appends the previous value to result_buf.
 * An event exported by another process than the connection's peer: DOCA_ERROR_NOT_PERMITTED.
 */
struct doca_sync_event_remote_net;
struct doca_rdma_task_remote_net_sync_event_get;
struct doca_rdma_task_remote_net_sync_event_notify_set;
struct doca_rdma_task_remote_net_sync_event_notify_add;

typedef void (*doca_rdma_task_remote_net_sync_event_get_completion_cb_t)(
	struct doca_rdma_task_remote_net_sync_event_get *task, union doca_data task_user_data,
	union doca_data ctx_user_data);
typedef void (*doca_rdma_task_remote_net_sync_event_notify_set_completion_cb_t)(
	struct doca_rdma_task_remote_net_sync_event_notify_set *task, union doca_data task_user_data,
	union doca_data ctx_user_data);
typedef void (*doca_rdma_task_remote_net_sync_event_notify_add_completion_cb_t)(
	struct doca_rdma_task_remote_net_sync_event_notify_add *task, union doca_data task_user_data,
	union doca_data ctx_user_data);

doca_error_t doca_rdma_cap_task_remote_net_sync_event_get_is_supported(const struct doca_devinfo *devinfo);
doca_error_t doca_rdma_cap_task_remote_net_sync_event_notify_set_is_supported(const struct doca_devinfo *devinfo);
doca_error_t doca_rdma_cap_task_remote_net_sync_event_notify_add_is_supported(const struct doca_devinfo *devinfo);

doca_error_t doca_rdma_task_remote_net_sync_event_get_set_conf(
	struct doca_rdma *rdma, doca_rdma_task_remote_net_sync_event_get_completion_cb_t successful_task_completion_cb,
	doca_rdma_task_remote_net_sync_event_get_completion_cb_t error_task_completion_cb, uint32_t num_tasks);
doca_error_t doca_rdma_task_remote_net_sync_event_get_allocate_init(
	struct doca_rdma *rdma, struct doca_rdma_connection *rdma_connection,
	const struct doca_sync_event_remote_net *event, struct doca_buf *dst_buf, union doca_data user_data,
	struct doca_rdma_task_remote_net_sync_event_get **task);
struct doca_task *doca_rdma_task_remote_net_sync_event_get_as_task(struct doca_rdma_task_remote_net_sync_event_get *task);
void doca_rdma_task_remote_net_sync_event_get_set_sync_event(struct doca_rdma_task_remote_net_sync_event_get *task,
							     const struct doca_sync_event_remote_net *event);
const struct doca_sync_event_remote_net *
doca_rdma_task_remote_net_sync_event_get_get_sync_event(const struct doca_rdma_task_remote_net_sync_event_get *task);
void doca_rdma_task_remote_net_sync_event_get_set_dst_buf(struct doca_rdma_task_remote_net_sync_event_get *task,
							  struct doca_buf *dst_buf);
struct doca_buf *
doca_rdma_task_remote_net_sync_event_get_get_dst_buf(const struct doca_rdma_task_remote_net_sync_event_get *task);
void doca_rdma_task_remote_net_sync_event_get_set_rdma_connection(struct doca_rdma_task_remote_net_sync_event_get *task,
								  struct doca_rdma_connection *rdma_connection);
const struct doca_rdma_connection *doca_rdma_task_remote_net_sync_event_get_get_rdma_connection(
	const struct doca_rdma_task_remote_net_sync_event_get *task);

doca_error_t doca_rdma_task_remote_net_sync_event_notify_set_set_conf(
	struct doca_rdma *rdma,
	doca_rdma_task_remote_net_sync_event_notify_set_completion_cb_t successful_task_completion_cb,
	doca_rdma_task_remote_net_sync_event_notify_set_completion_cb_t error_task_completion_cb, uint32_t num_tasks);
doca_error_t doca_rdma_task_remote_net_sync_event_notify_set_allocate_init(
	struct doca_rdma *rdma, struct doca_rdma_connection *rdma_connection, struct doca_sync_event_remote_net *event,
	const struct doca_buf *src_buf, union doca_data user_data,
	struct doca_rdma_task_remote_net_sync_event_notify_set **task);
struct doca_task *
doca_rdma_task_remote_net_sync_event_notify_set_as_task(struct doca_rdma_task_remote_net_sync_event_notify_set *task);
void doca_rdma_task_remote_net_sync_event_notify_set_set_sync_event(
	struct doca_rdma_task_remote_net_sync_event_notify_set *task, struct doca_sync_event_remote_net *event);
struct doca_sync_event_remote_net *doca_rdma_task_remote_net_sync_event_notify_set_get_sync_event(
	const struct doca_rdma_task_remote_net_sync_event_notify_set *task);
void doca_rdma_task_remote_net_sync_event_notify_set_set_src_buf(
	struct doca_rdma_task_remote_net_sync_event_notify_set *task, const struct doca_buf *src_buf);
const struct doca_buf *doca_rdma_task_remote_net_sync_event_notify_set_get_src_buf(
	const struct doca_rdma_task_remote_net_sync_event_notify_set *task);
void doca_rdma_task_remote_net_sync_event_notify_set_set_rdma_connection(
	struct doca_rdma_task_remote_net_sync_event_notify_set *task, struct doca_rdma_connection *rdma_connection);
const struct doca_rdma_connection *doca_rdma_task_remote_net_sync_event_notify_set_get_rdma_connection(
	const struct doca_rdma_task_remote_net_sync_event_notify_set *task);

doca_error_t doca_rdma_task_remote_net_sync_event_notify_add_set_conf(
	struct doca_rdma *rdma,
	doca_rdma_task_remote_net_sync_event_notify_add_completion_cb_t successful_task_completion_cb,
	doca_rdma_task_remote_net_sync_event_notify_add_completion_cb_t error_task_completion_cb, uint32_t num_tasks);
doca_error_t doca_rdma_task_remote_net_sync_event_notify_add_allocate_init(
	struct doca_rdma *rdma, struct doca_rdma_connection *rdma_connection, struct doca_sync_event_remote_net *event,
	struct doca_buf *result_buf, uint64_t add_data, union doca_data user_data,
	struct doca_rdma_task_remote_net_sync_event_notify_add **task);
struct doca_task *
doca_rdma_task_remote_net_sync_event_notify_add_as_task(struct doca_rdma_task_remote_net_sync_event_notify_add *task);
void doca_rdma_task_remote_net_sync_event_notify_add_set_sync_event(
	struct doca_rdma_task_remote_net_sync_event_notify_add *task, struct doca_sync_event_remote_net *event);
struct doca_sync_event_remote_net *doca_rdma_task_remote_net_sync_event_notify_add_get_sync_event(
	const struct doca_rdma_task_remote_net_sync_event_notify_add *task);
void doca_rdma_task_remote_net_sync_event_notify_add_set_result_buf(
	struct doca_rdma_task_remote_net_sync_event_notify_add *task, struct doca_buf *result_buf);
struct doca_buf *doca_rdma_task_remote_net_sync_event_notify_add_get_result_buf(
	const struct doca_rdma_task_remote_net_sync_event_notify_add *task);
void doca_rdma_task_remote_net_sync_event_notify_add_set_add_data(
	struct doca_rdma_task_remote_net_sync_event_notify_add *task, uint64_t add_data);
uint64_t doca_rdma_task_remote_net_sync_event_notify_add_get_add_data(
	const struct doca_rdma_task_remote_net_sync_event_notify_add *task);
void doca_rdma_task_remote_net_sync_event_notify_add_set_rdma_connection(
	struct doca_rdma_task_remote_net_sync_event_notify_add *task, struct doca_rdma_connection *rdma_connection);
const struct doca_rdma_connection *doca_rdma_task_remote_net_sync_event_notify_add_get_rdma_connection(
	const struct doca_rdma_task_remote_net_sync_event_notify_add *task);

#ifdef __cplusplus
}
#endif

#endif /* ASYNC_DOCA_RDMA_H */
