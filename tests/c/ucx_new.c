/*
 * ucx_new.c -- checks that the UCX given to the compiler and loader is one NVIDIA's UROM plugins
 * can use: API 1.15 or later at compile time and at run time, and a UCP context and worker
 * with the features those plugins ask for (tags, remote memory access, active messages), whose
 * address can be packed for a peer.
 *
 *   cc ucx_new.c $(pkg-config --cflags --libs ucx) -o ucx_new && ./ucx_new
 *
 * Exits 0 only if every step succeeded.
 *
 * SPDX-License-Identifier: BSD-3-Clause
 */
#include <stdio.h>
#include <stdlib.h>

#include <ucp/api/ucp.h>

#if UCP_API_VERSION < UCP_VERSION(1, 15)
#error "UCX older than 1.15: NVIDIA's UROM plugins need 1.15 or later"
#endif

#define FAIL(what, st)                                                                              \
	do {                                                                                        \
		fprintf(stderr, "ucx_new: %s: %s\n", what, ucs_status_string(st));                  \
		return EXIT_FAILURE;                                                                \
	} while (0)

int main(void)
{
	unsigned major, minor, release;
	ucp_config_t *config;
	ucp_context_h context;
	ucp_worker_h worker;
	ucp_address_t *address;
	size_t address_len;
	ucs_status_t st;
	ucp_params_t params = {
		.field_mask = UCP_PARAM_FIELD_FEATURES,
		.features = UCP_FEATURE_TAG | UCP_FEATURE_RMA | UCP_FEATURE_AM,
	};
	ucp_worker_params_t worker_params = {
		.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
		.thread_mode = UCS_THREAD_MODE_SINGLE,
	};

	ucp_get_version(&major, &minor, &release);
	if (UCP_VERSION(major, minor) < UCP_VERSION(1, 15)) {
		fprintf(stderr, "ucx_new: the loaded library is UCX %u.%u.%u, older than 1.15\n", major, minor,
			release);
		return EXIT_FAILURE;
	}
	st = ucp_config_read(NULL, NULL, &config);
	if (st != UCS_OK)
		FAIL("ucp_config_read", st);
	st = ucp_init(&params, config, &context);
	ucp_config_release(config);
	if (st != UCS_OK)
		FAIL("ucp_init", st);
	st = ucp_worker_create(context, &worker_params, &worker);
	if (st != UCS_OK)
		FAIL("ucp_worker_create", st);
	st = ucp_worker_get_address(worker, &address, &address_len);
	if (st != UCS_OK)
		FAIL("ucp_worker_get_address", st);
	printf("UCX %u.%u.%u: context, worker and a %zu-byte worker address\n", major, minor, release,
	       address_len);
	ucp_worker_release_address(worker, address);
	ucp_worker_destroy(worker);
	ucp_cleanup(context);
	return EXIT_SUCCESS;
}
