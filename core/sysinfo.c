/* Machine facts: the memory kvio checks before it allocates, and the host
 * record summary.json keeps of where a run ran. */
#include "kvio/sysinfo.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/utsname.h>
#include <unistd.h>

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

/* The value after "key" and a colon or equals sign on the first line of
 * path that starts with key, quotes and surrounding space removed; "" when
 * there is none. */
static void file_value(const char *path, const char *key, char *value_p, size_t value_len)
{
    value_p[0] = '\0';
    FILE *file = fopen(path, "r");
    if (file == NULL)
        return;
    char line[512];
    size_t key_length = strlen(key);
    while (fgets(line, sizeof(line), file) != NULL) {
        if (strncmp(line, key, key_length) != 0)
            continue;
        char *value = line + key_length;
        while (*value == ' ' || *value == '\t' || *value == ':' || *value == '=' || *value == '"')
            value++;
        size_t length = strcspn(value, "\"\n");
        snprintf(value_p, value_len, "%.*s", (int)length, value);
        break;
    }
    fclose(file);
}

json_t *kvio_host_json(void)
{
    char hostname[256] = "", cpu[256], os[256], memory[64];
    gethostname(hostname, sizeof(hostname) - 1);
    file_value("/proc/cpuinfo", "model name", cpu, sizeof(cpu));
    file_value("/etc/os-release", "PRETTY_NAME", os, sizeof(os));
    file_value("/proc/meminfo", "MemTotal", memory, sizeof(memory));
    struct utsname name;
    bool named = uname(&name) == 0;
    double load[3] = {0, 0, 0};
    int loads = getloadavg(load, 3);
    uint64_t available = 0;
    char error[128];
    bool have_available = kvio_mem_available(&available, error, sizeof(error)) == KVIO_OK;
    json_t *host = json_object();
    json_object_set_new(host, "hostname", json_string(hostname));
    json_object_set_new(host, "cpu", json_string(cpu));
    json_object_set_new(host, "cores_online", json_integer(sysconf(_SC_NPROCESSORS_ONLN)));
    json_object_set_new(host, "memory_total_bytes",
                        json_integer((json_int_t)strtoull(memory, NULL, 10) * 1024));
    json_object_set_new(host, "memory_available_bytes",
                        have_available ? json_integer((json_int_t)available) : json_null());
    json_object_set_new(host, "os", json_string(os));
    json_object_set_new(host, "kernel", json_string(named ? name.release : ""));
    json_object_set_new(host, "machine", json_string(named ? name.machine : ""));
    json_object_set_new(host, "load_average",
                        loads == 3 ? json_pack("[f, f, f]", load[0], load[1], load[2])
                                   : json_null());
    return host;
}

/* How much is faulted in between looks at the stop. Small, because
 * MADV_POPULATE_WRITE holds the process's mmap lock (read) through its
 * piece, and every mmap or munmap of another thread (a rank's malloc of a
 * large block, UCX's set-up) waits for it: with 256 MiB pieces, faulted in
 * at 0.5 GB/s on a virtual machine, a serve rank waited 1 s to start its
 * pool while the other faulted its own in. */
#define FAULT_PIECE_BYTES (16ull << 20)

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14; an older kernel refuses it (EINVAL) */
#endif

kvio_status_t kvio_fault_in(void *memory, size_t bytes, bool huge, volatile sig_atomic_t *stop)
{
    if (memory == NULL || bytes == 0)
        return KVIO_OK;
    if (huge)
        madvise(memory, bytes, MADV_HUGEPAGE);
    bool populate = true;
    for (size_t at = 0; at < bytes; at += FAULT_PIECE_BYTES) {
        if (stop != NULL && *stop)
            return KVIO_ERR_INTERRUPTED;
        size_t piece = bytes - at < FAULT_PIECE_BYTES ? bytes - at : FAULT_PIECE_BYTES;
        unsigned char *start = (unsigned char *)memory + at;
        if (populate && madvise(start, piece, MADV_POPULATE_WRITE) == 0)
            continue;
        populate = false; /* refused once (old kernel, odd mapping): the rest by hand */
        memset(start, 0, piece);
    }
    return KVIO_OK;
}

kvio_status_t kvio_fault_in_alloc(size_t bytes, volatile sig_atomic_t *stop, void **memory_p)
{
    void *memory = mmap(NULL, bytes > 0 ? bytes : 1, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED)
        return KVIO_ERR_NOMEM;
    kvio_status_t status = kvio_fault_in(memory, bytes, true, stop);
    if (status != KVIO_OK) {
        kvio_fault_in_free(memory, bytes);
        return status;
    }
    *memory_p = memory;
    return KVIO_OK;
}

void kvio_fault_in_free(void *memory, size_t bytes)
{
    if (memory != NULL)
        munmap(memory, bytes > 0 ? bytes : 1);
}
