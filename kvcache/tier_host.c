/* The host tier: one arena of capacity blocks in host memory, a block per
 * slot. With `pinned: true` the arena is page-locked through a pinned memory
 * domain (core/gpu), so a GPU pool's loads from it are DMA; without CUDA or
 * a device it stays pageable and the tier says why. The arena is
 * pre-faulted so that the first put does not pay page faults. It lends
 * block addresses (address op) for batched copies. */
#include "kvcache/tier_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "kvio/gpu.h"
#include "kvio/log.h"
#include "kvio/sysinfo.h"

typedef struct host_options {
    bool pinned;
} host_options_t;

static const kvio_opt_t host_options[] = {
    {.key = "pinned", .type = KVIO_OPT_BOOL, .offset = offsetof(host_options_t, pinned),
     .default_value = "true",
     .help = "pinned memory (needs CUDA; pageable otherwise, and said so)"},
    {.key = NULL},
};

/* Simulate defaults (bytes/s, GB = 1e9; ns per operation):
 * - pinned, 25 GB/s + 10 us: DMA over PCIe 4.0 x16 (32 GB/s raw) sustains
 *   about 25 GB/s; a cudaMemcpyAsync and its synchronisation cost about
 *   10 us.
 * - pageable, 10 GB/s + 20 us: the driver stages pageable memory through a
 *   pinned bounce buffer (an extra memcpy), which measures 6-12 GB/s. */
static void host_model(const void *options, double *bandwidth_p, int64_t *latency_ns_p)
{
    const host_options_t *host = options;
    *bandwidth_p = host->pinned ? 25e9 : 10e9;
    *latency_ns_p = host->pinned ? 10000 : 20000;
}

typedef struct host_priv {
    unsigned char *arena;
    uint64_t arena_bytes;
    uint64_t block_bytes;
    uint32_t capacity;
    bool pinned;             /* what the arena is */
    bool huge_pages;         /* transparent huge pages asked for and on */
    kvio_device_t *domain;   /* pinned: true: the domain that page-locked it */
    char note[640];          /* why not pinned when asked ("" otherwise) */
} host_priv_t;

/* Whether the kernel's transparent huge pages are on (always or madvise). */
static bool transparent_huge_pages(void)
{
    FILE *file = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (file == NULL)
        return false;
    char text[128] = "";
    bool on = fgets(text, sizeof(text), file) != NULL && strstr(text, "[never]") == NULL;
    fclose(file);
    return on;
}

static kvio_status_t host_init(void *priv, const kvio_tier_setup_t *setup, char *error_p,
                               size_t error_len)
{
    host_priv_t *host = priv;
    const host_options_t *options = setup->options;
    uint64_t block_bytes = setup->block_bytes;
    uint32_t capacity = setup->capacity;
    host->block_bytes = block_bytes;
    host->capacity = capacity;
    host->arena_bytes = block_bytes * capacity;
    uint64_t available = 0;
    kvio_status_t status = kvio_mem_available(&available, error_p, error_len);
    if (status != KVIO_OK)
        return status;
    if (host->arena_bytes > available) {
        snprintf(error_p, error_len,
                 "host tier: %llu blocks of %llu bytes need %llu bytes (%.2f GiB), but only "
                 "%llu bytes (%.2f GiB) of memory are available (MemAvailable)",
                 (unsigned long long)capacity, (unsigned long long)block_bytes,
                 (unsigned long long)host->arena_bytes, (double)host->arena_bytes / (1u << 30),
                 (unsigned long long)available, (double)available / (1u << 30));
        return KVIO_ERR_NO_SPACE;
    }
    void *arena = mmap(NULL, host->arena_bytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (arena == MAP_FAILED) {
        snprintf(error_p, error_len, "host tier: cannot map %llu bytes: %s",
                 (unsigned long long)host->arena_bytes, strerror(errno));
        return KVIO_ERR_NOMEM;
    }
    /* Huge pages where the kernel gives them (transparent huge pages not
     * "never"): a 2 MiB block is one TLB entry, not 512. Asked for before
     * the arena is touched, then every page faulted in at once. */
    host->huge_pages = madvise(arena, host->arena_bytes, MADV_HUGEPAGE) == 0 &&
                       transparent_huge_pages();
    for (uint64_t at = 0; at < host->arena_bytes; at += 4096)
        ((volatile unsigned char *)arena)[at] = 0;
    host->arena = arena;
    host->pinned = false;
    if (options->pinned) {
        /* Without CUDA or a device the domain falls back to host memory and
         * says why; the arena then stays pageable. */
        char reason[512] = "";
        status = kvio_device_create(KVIO_MEMORY_PINNED, KVIO_FALLBACK_HOST,
                                    setup->config->device_index, setup->config->device_rank,
                                    &host->domain, reason, sizeof(reason));
        if (status == KVIO_OK && !kvio_device_fell_back(host->domain)) {
            status = kvio_device_host_register(host->domain, arena, host->arena_bytes);
            if (status != KVIO_OK)
                snprintf(reason, sizeof(reason), "%s", kvio_device_error(host->domain));
            host->pinned = status == KVIO_OK;
        } else if (status == KVIO_OK) {
            snprintf(reason, sizeof(reason), "%s", kvio_device_describe(host->domain));
        }
        if (!host->pinned) {
            snprintf(host->note, sizeof(host->note), "%s", reason);
            kvio_info("host tier: pinned: true, but the arena is pageable (%s)", host->note);
        }
    }
    return KVIO_OK;
}

static void host_fini(void *priv)
{
    host_priv_t *host = priv;
    if (host->pinned)
        kvio_device_host_unregister(host->domain, host->arena);
    kvio_device_destroy(host->domain);
    if (host->arena != NULL)
        munmap(host->arena, host->arena_bytes);
}

static kvio_status_t host_remove(void *priv, uint32_t slot, kvio_hash_t hash, char *error_p,
                                 size_t error_len)
{
    return KVIO_OK; /* the slot is simply overwritten by its next block */
}

static const void *host_address(const void *priv, uint32_t slot)
{
    const host_priv_t *host = priv;
    return host->arena + (uint64_t)slot * host->block_bytes;
}

static void host_describe(const void *priv, char *text_p, size_t text_len)
{
    const host_priv_t *host = priv;
    snprintf(text_p, text_len, "host: %u blocks of %llu bytes in %s memory%s%s%s", host->capacity,
             (unsigned long long)host->block_bytes, host->pinned ? "pinned" : "pageable",
             host->note[0] ? " (" : "", host->note, host->note[0] ? ")" : "");
}

static void host_report(const void *priv, json_t *object)
{
    const host_priv_t *host = priv;
    json_object_set_new(object, "memory", json_string(host->pinned ? "pinned" : "pageable"));
    json_object_set_new(object, "huge_pages", json_boolean(host->huge_pages));
    if (host->note[0] != '\0')
        json_object_set_new(object, "memory_note", json_string(host->note));
}

const kvio_tier_ops_t kvio_tier_host = {
    .plugin = {.name = "host", .help = "an arena of host memory, one block per slot",
               .options = host_options, .options_size = sizeof(host_options_t)},
    .model = host_model,
    .caps = KVIO_TIER_CAP_VOLATILE,
    .priv_size = sizeof(host_priv_t),
    .init = host_init,
    .fini = host_fini,
    .remove = host_remove,
    .address = host_address,
    .describe = host_describe,
    .report = host_report,
};
