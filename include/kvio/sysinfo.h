/* Facts about the machine that kvio checks before it allocates: how much
 * memory is available, so requests that cannot fit are refused with the
 * numbers instead of failing halfway. */
#ifndef KVIO_SYSINFO_H
#define KVIO_SYSINFO_H

#include "kvio/status.h"

#include <jansson.h>

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Bytes of memory the kernel reports available (/proc/meminfo
 * MemAvailable). On error the reason is in error_p. */
kvio_status_t kvio_mem_available(uint64_t *bytes_p, char *error_p, size_t error_len);

/* Makes fresh host memory real now, not a promise (emulate's KV pools,
 * swap space and weight buffers, before t0): in huge pages where the kernel
 * has them when huge is true, each 16 MiB piece populated by the kernel
 * (MADV_POPULATE_WRITE, Linux 5.14: its bytes unchanged) or, where it
 * cannot, zeroed by a memset. Between pieces it looks at *stop (may be
 * NULL) and returns KVIO_ERR_INTERRUPTED once it is set, so a stop during
 * set-up is seen within a fraction of a second. */
kvio_status_t kvio_fault_in(void *memory, size_t bytes, bool huge,
                            volatile sig_atomic_t *stop);

/* The one way kvio allocates a large host region it needs real before t0:
 * fresh anonymous memory (mmap), in huge pages where the kernel has them,
 * faulted in by kvio_fault_in. On a virtual machine a 4 KiB page costs a
 * trap on its first touch through each mapping (measured at ~10 us, 0.4
 * GB/s) where a 2 MiB one costs one per 512 pages. Sets *memory_p (free
 * with kvio_fault_in_free) and returns KVIO_OK; KVIO_ERR_NOMEM when the
 * mapping is refused, KVIO_ERR_INTERRUPTED when *stop (may be NULL) was set
 * on the way (nothing is left mapped). */
kvio_status_t kvio_fault_in_alloc(size_t bytes, volatile sig_atomic_t *stop, void **memory_p);

/* Frees what kvio_fault_in_alloc returned (bytes as asked; NULL is a no-op). */
void kvio_fault_in_free(void *memory, size_t bytes);

/* Where a run runs (summary.json's host block): hostname, CPU model, cores
 * online, memory total and available, OS, kernel, architecture and the load
 * average when asked. */
json_t *kvio_host_json(void);

/* What this kvio is (summary.json's build block): version, git commit,
 * build type, the optional parts built in and the libraries' versions. */
json_t *kvio_build_json(void);

/* The same on one line, for kvio --version. */
void kvio_build_describe(char *text_p, size_t text_len);

#endif
