/* Facts about the machine that kvio checks before it allocates: how much
 * memory is available, so requests that cannot fit are refused with the
 * numbers instead of failing halfway. */
#ifndef KVIO_SYSINFO_H
#define KVIO_SYSINFO_H

#include "kvio/status.h"

#include <jansson.h>

#include <stddef.h>
#include <stdint.h>

/* Bytes of memory the kernel reports available (/proc/meminfo
 * MemAvailable). On error the reason is in error_p. */
kvio_status_t kvio_mem_available(uint64_t *bytes_p, char *error_p, size_t error_len);

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
