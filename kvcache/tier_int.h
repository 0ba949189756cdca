/* Private parts of the KV tiers: the backend plug-in interface. A backend
 * only moves bytes of whole blocks; the framework (kvcache/tier.c) keeps the
 * index, chooses victims, takes the timestamps and counts. */
#ifndef KVIO_TIER_INT_H
#define KVIO_TIER_INT_H

#include "kvio/tier.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The store disappears with the process (host memory): the framework does
 * not ask the backend to delete evicted blocks or to clean up at the end. */
#define KVIO_TIER_CAP_VOLATILE (1u << 0)
/* The entry is a view of the shared store (kind: shared), never a backend
 * of its own: the framework reads and writes the store instead. */
#define KVIO_TIER_CAP_SHARED (1u << 1)

/* What a backend's init gets. */
typedef struct kvio_tier_setup {
    const void *options;      /* its own options (its plugin table's struct) */
    const kvio_tier_config_t *config; /* the caller's, for create only: device, run_id, rank */
    uint64_t block_bytes;
    uint32_t capacity;        /* blocks it must hold */
} kvio_tier_setup_t;

/* A backend: one const table in its own file (kvcache/tier_<name>.c) and
 * one X(name) in kvcache/tiers.c. Every call gets the block's slot
 * (0..capacity-1, unique among the blocks held; a slot is reused after its
 * block was removed) and its hash. Errors return a kvio status and write
 * "context: reason" into error_p. The framework allocates and zeroes priv
 * (priv_size bytes) and frees it after fini; it copies nothing of the
 * options, so init copies what it keeps. */
typedef struct kvio_tier_ops {
    kvio_plugin_t plugin; /* name, help, its options, their check */
    unsigned caps;
    size_t priv_size;
    /* The simulate model's defaults: bytes/s and ns per operation (may
     * depend on the options: a pageable host arena is slower). */
    void (*model)(const void *options, double *bandwidth_p, int64_t *latency_ns_p);
    /* Emulate, before the ranks start (may be NULL): what the backend needs
     * to hold bytes (the entry's size times the serve ranks); path names
     * the entry. */
    kvio_status_t (*preflight)(const void *options, uint64_t bytes, const char *path,
                               char *error_p, size_t error_len);
    kvio_status_t (*init)(void *priv, const kvio_tier_setup_t *setup, char *error_p,
                          size_t error_len);
    void (*fini)(void *priv);
    /* One block (may be NULL: see put_batch). A get returns
     * KVIO_ERR_NOT_FOUND when the block is gone (deleted behind the
     * tier's back); the backend cleans up what is left of it. */
    kvio_status_t (*put)(void *priv, uint32_t slot, kvio_hash_t hash, const void *data,
                         char *error_p, size_t error_len);
    kvio_status_t (*get)(void *priv, uint32_t slot, kvio_hash_t hash, void *data,
                         char *error_p, size_t error_len);
    kvio_status_t (*remove)(void *priv, uint32_t slot, kvio_hash_t hash, char *error_p,
                            size_t error_len);
    /* count blocks moved together (slots[i], hashes[i], data[i]); each
     * one's status into statuses_p[i] and its own latency, submission to
     * completion, into latencies_ns_p[i]; the first failure's text in
     * error_p. A backend gives these, or put and get (the framework then
     * calls them block by block), or neither when it holds its blocks in
     * this process's memory (KVIO_TIER_CAP_VOLATILE with address: the
     * framework copies them itself). */
    void (*put_batch)(void *priv, const uint32_t *slots, const kvio_hash_t *hashes,
                      const void *const *data, size_t count, kvio_status_t *statuses_p,
                      int64_t *latencies_ns_p, char *error_p, size_t error_len);
    void (*get_batch)(void *priv, const uint32_t *slots, const kvio_hash_t *hashes,
                      void *const *data, size_t count, kvio_status_t *statuses_p,
                      int64_t *latencies_ns_p, char *error_p, size_t error_len);
    /* Backends holding blocks in host memory (host): where the block in
     * slot lives, for callers that copy it themselves (a GPU pool's batched
     * loads). May be NULL. */
    const void *(*address)(const void *priv, uint32_t slot);
    /* Remote tiers: the block in slot is at location (kvio_tier_list). */
    void (*locate)(void *priv, uint32_t slot, uint64_t location);
    /* One line on what the backend uses, and the same as JSON fields. */
    void (*describe)(const void *priv, char *text_p, size_t text_len);
    void (*report)(const void *priv, json_t *object);
} kvio_tier_ops_t;

/* The remote backend (kvcache/tier_remote.c): not in the registry, made by
 * kvio_tier_create_remote. */
extern const kvio_tier_ops_t kvio_tier_remote_ops, kvio_tier_remote_mapped_ops;

/* The block device under a directory (kvcache/tier_device.c): found when
 * a file tier is made, reported with what it did since. */
typedef struct tier_device {
    unsigned major, minor;
    bool known;              /* found in /proc/diskstats */
    char name[64], model[128], fs[32], options[256];
    uint64_t start[3];       /* sectors read, sectors written, ms busy, when opened */
    uint64_t start_ns;
} tier_device_t;

void tier_device_open(tier_device_t *device, const char *dir);

/* Adds "device": {name, model, file_system, mount_options, bytes_read,
 * bytes_written, utilization since it was opened} to object. */
void tier_device_report(const tier_device_t *device, json_t *object);

#endif
