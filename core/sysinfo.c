/* Machine facts read where kvio decides whether a request fits. */
#include "kvio/sysinfo.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

kvio_status_t kvio_mem_available(uint64_t *bytes_p, char *error_p, size_t error_len)
{
    FILE *meminfo = fopen("/proc/meminfo", "r");
    if (meminfo == NULL) {
        snprintf(error_p, error_len, "/proc/meminfo: %s", strerror(errno));
        return KVIO_ERR_IO;
    }
    char line[256];
    unsigned long long kib = 0;
    bool found = false;
    while (!found && fgets(line, sizeof(line), meminfo) != NULL)
        found = sscanf(line, "MemAvailable: %llu kB", &kib) == 1;
    fclose(meminfo);
    if (!found) {
        snprintf(error_p, error_len, "/proc/meminfo: no MemAvailable line");
        return KVIO_ERR_IO;
    }
    *bytes_p = (uint64_t)kib * 1024;
    return KVIO_OK;
}
