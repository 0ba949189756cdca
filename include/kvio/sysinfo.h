/* Facts about the machine that kvio checks before it allocates: how much
 * memory is available, so requests that cannot fit are refused with the
 * numbers instead of failing halfway. */
#ifndef KVIO_SYSINFO_H
#define KVIO_SYSINFO_H

#include "kvio/status.h"

#include <stddef.h>
#include <stdint.h>

/* Bytes of memory the kernel reports available (/proc/meminfo
 * MemAvailable). On error the reason is in error_p. */
kvio_status_t kvio_mem_available(uint64_t *bytes_p, char *error_p, size_t error_len);

#endif
