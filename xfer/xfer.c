/* Transport framework: the option table, stubs for transports whose part
 * is not built (the registry is xfer/transports.c), and the wrappers that
 * every publish and receive goes through.
 * The wrappers take the timestamps (rank 0's clock), count bytes and polls,
 * and bound every wait; the plug-ins only move data. */
#include "xfer/xfer_int.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvio/clock.h"
#include "kvio/log.h"
#include "kvio/model.h"
#include "kvio/sysinfo.h"

const char *const kvio_xfer_fanout_names[] = {"sequential", "chain", NULL};
static const char *const host_hop_names[] = {"put", "mapped", NULL};
const char *const kvio_xfer_discovery_names[] = {"poll", "notify", NULL};
static const char *const disconnect_names[] = {"reconnect", "fail", NULL};

static const kvio_opt_t file_options[] = {
    {.key = "dir", .type = KVIO_OPT_STRING, .offset = offsetof(kvio_xfer_file_config_t, dir),
     .default_value = "/tmp/kvio-updates", .help = "directory the versions are written to"},
    {.key = "fsync", .type = KVIO_OPT_BOOL, .offset = offsetof(kvio_xfer_file_config_t, fsync),
     .default_value = "true", .help = "fsync the file (and directory) before the rename"},
    {.key = "direct", .type = KVIO_OPT_BOOL, .offset = offsetof(kvio_xfer_file_config_t, direct),
     .default_value = "false", .help = "O_DIRECT writes and reads (bytes and chunk: 4KiB multiples)"},
    {.key = "discovery", .type = KVIO_OPT_ENUM,
     .offset = offsetof(kvio_xfer_file_config_t, discovery), .values = kvio_xfer_discovery_names,
     .default_value = "poll",
     .help = "poll: list the directory every poll_interval (model repositories); notify: inotify"},
    {.key = "poll_interval", .type = KVIO_OPT_DURATION,
     .offset = offsetof(kvio_xfer_file_config_t, poll_interval_ns), .default_value = "1s",
     .flags = KVIO_OPT_HAS_MIN, .min = 1000, .help = "time between two polls"},
    {.key = "keep", .type = KVIO_OPT_INT, .offset = offsetof(kvio_xfer_file_config_t, keep),
     .default_value = "2", .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 1, .max = 1000,
     .help = "versions kept; older ones are deleted"},
    {.key = NULL},
};

static const kvio_opt_t redis_options[] = {
    {.key = "url", .type = KVIO_OPT_STRING, .offset = offsetof(kvio_xfer_redis_config_t, url),
     .default_value = "redis://127.0.0.1:6379", .help = "redis://[:password@]host:port[/db]"},
    {.key = "prefix", .type = KVIO_OPT_STRING,
     .offset = offsetof(kvio_xfer_redis_config_t, prefix), .default_value = "\"kvio:update:\"",
     .help = "key and channel prefix"},
    {.key = "keep", .type = KVIO_OPT_INT, .offset = offsetof(kvio_xfer_redis_config_t, keep),
     .default_value = "2", .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 1, .max = 1000,
     .help = "versions kept; older keys are deleted"},
    {.key = "on_disconnect", .type = KVIO_OPT_ENUM,
     .offset = offsetof(kvio_xfer_redis_config_t, on_disconnect), .values = disconnect_names,
     .default_value = "reconnect",
     .help = "Redis went away: reconnect (every 200 ms, for up to ranks.timeout; a version "
             "lost with it is republished or skipped) or fail at once naming the URL"},
    {.key = NULL},
};

static const kvio_opt_t model_options[] = {
    {.key = "latency", .type = KVIO_OPT_DURATION,
     .offset = offsetof(kvio_xfer_model_config_t, latency_ns), .default_value = "0s",
     .help = "simulate: fixed cost per update and receiver (0s: transport default)"},
    {.key = "bandwidth", .type = KVIO_OPT_DOUBLE,
     .offset = offsetof(kvio_xfer_model_config_t, bandwidth_gbps), .default_value = "0",
     .flags = KVIO_OPT_HAS_MIN, .min = 0,
     .help = "simulate: GB/s (1e9 bytes/s) per stream (0: transport default)"},
    {.key = "from", .type = KVIO_OPT_STRING,
     .offset = offsetof(kvio_xfer_model_config_t, from),
     .help = "simulate: results directory of an emulate update run of the same transport "
             "kind (bench/update.sh with KVIO_BENCH_RESULTS keeps them); latency and "
             "bandwidth left at 0 are taken from its measurements"},
    {.key = NULL},
};

const kvio_opt_t kvio_xfer_options[] = {
    {.key = "kind", .type = KVIO_OPT_PLUGIN, .offset = offsetof(kvio_xfer_config_t, kind),
     .registry = &kvio_transports, .default_value = "ucx",
     .help = "the transport (kvio list): ucx, file, redis, cuda-ipc, staged"},
    {.key = "chunk", .type = KVIO_OPT_SIZE, .offset = offsetof(kvio_xfer_config_t, chunk),
     .default_value = "4MiB", .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 4096,
     .max = 512.0 * 1024 * 1024, .help = "bytes per put, write, SET or GET"},
    {.key = "inflight", .type = KVIO_OPT_INT, .offset = offsetof(kvio_xfer_config_t, inflight),
     .default_value = "4", .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 1, .max = 1024,
     .help = "ucx: puts in flight; redis: SETs per pipeline"},
    {.key = "fanout", .type = KVIO_OPT_ENUM, .offset = offsetof(kvio_xfer_config_t, fanout),
     .values = kvio_xfer_fanout_names, .default_value = "sequential",
     .help = "ucx, several receivers: one after the other, or a pipelined chain"},
    {.key = "host_hop", .type = KVIO_OPT_ENUM, .offset = offsetof(kvio_xfer_config_t, host_hop),
     .values = host_hop_names, .default_value = "put",
     .help = "staged: put (a UCX put between pinned host rings, any nodes) or mapped (the "
             "sender's GPU copies into the receiver's ring, mapped by UCX: same node, no CPU "
             "copy)"},
    {.key = "ucx_path", .type = KVIO_OPT_ENUM, .offset = offsetof(kvio_xfer_config_t, ucx_path),
     .values = host_hop_names, .default_value = "mapped",
     .help = "ucx, host weights: mapped (where UCX maps a receiver's slot into the sender, "
             "shared memory, the sender stores into it with the checksum in the same pass) "
             "or put (every chunk a ucp_put_nbx)"},
    {.key = "die_after_chunks", .type = KVIO_OPT_INT,
     .offset = offsetof(kvio_xfer_config_t, die_after_chunks), .default_value = "0",
     .flags = KVIO_OPT_HAS_MIN, .min = 0,
     .help = "fault injection: the sender stops as if it died after this many chunks"},
    {.key = "file", .type = KVIO_OPT_SECTION, .offset = offsetof(kvio_xfer_config_t, file),
     .options = file_options, .help = "file transport"},
    {.key = "redis", .type = KVIO_OPT_SECTION, .offset = offsetof(kvio_xfer_config_t, redis),
     .options = redis_options, .help = "redis transport"},
    {.key = "model", .type = KVIO_OPT_SECTION, .offset = offsetof(kvio_xfer_config_t, model),
     .options = model_options, .help = "simulate mode: latency + bytes / bandwidth"},
    {.key = NULL},
};

/* Stubs for the transports whose part this build leaves out: the same name,
 * shape and simulate defaults (KVIO_XFER_ABOUT_*), and a preflight that
 * refuses an emulate run, saying what to build. */
#define STUB(symbol, about, reason)                                                        \
    static kvio_status_t symbol##_refuse(const kvio_xfer_config_t *config, uint64_t bytes, \
                                         char *error_p, size_t error_len)                  \
    {                                                                                      \
        (void)config, (void)bytes;                                                         \
        snprintf(error_p, error_len, "%s", reason);                                        \
        return KVIO_ERR_UNSUPPORTED;                                                       \
    }                                                                                      \
    const kvio_xfer_ops_t symbol = {about, .preflight = symbol##_refuse};

#ifndef KVIO_HAVE_UCX
STUB(kvio_xfer_ucx_ops, KVIO_XFER_ABOUT_UCX,
     "ucx transport not built (configure with KVIO_WITH_UCX=ON)")
STUB(kvio_xfer_ucx_bucket_ops, KVIO_XFER_ABOUT_UCX,
     "ucx transport not built (configure with KVIO_WITH_UCX=ON)")
#endif

/* The GPU transports need CUDA, and UCX for their notices (staged also for
 * its data). */
#if !defined(KVIO_HAVE_CUDA) || !defined(KVIO_HAVE_UCX)
#ifdef KVIO_HAVE_CUDA
#define CUDA_BUILT "yes"
#else
#define CUDA_BUILT "no"
#endif
#ifdef KVIO_HAVE_UCX
#define UCX_BUILT "yes"
#else
#define UCX_BUILT "no"
#endif
STUB(kvio_xfer_cuda_ipc_ops, KVIO_XFER_ABOUT_CUDA_IPC,
     "cuda-ipc transport not built (configure with KVIO_WITH_CUDA=ON and KVIO_WITH_UCX=ON; "
     "this build has CUDA " CUDA_BUILT ", UCX " UCX_BUILT ")")
STUB(kvio_xfer_staged_ops, KVIO_XFER_ABOUT_STAGED,
     "staged transport not built (configure with KVIO_WITH_CUDA=ON and KVIO_WITH_UCX=ON)")
#endif

/* The transport config->kind chose (NULL before binding). */
static const kvio_xfer_ops_t *chosen_ops(const kvio_xfer_config_t *config)
{
    return (const kvio_xfer_ops_t *)config->kind.plugin;
}

uint32_t kvio_xfer_kind_caps(const kvio_xfer_config_t *config)
{
    const kvio_xfer_ops_t *ops = chosen_ops(config);
    return ops != NULL ? ops->caps : 0;
}

/* The plug-in for config: its kind's, or, with weight_sync's buckets, the
 * bucketed one (ucx only; NULL with the reason otherwise). */
static const kvio_xfer_ops_t *config_ops(const kvio_xfer_config_t *config, char *error_p,
                                         size_t error_len)
{
    const kvio_xfer_ops_t *ops = chosen_ops(config);
    if (ops == NULL) {
        snprintf(error_p, error_len, "no transport chosen");
        return NULL;
    }
    if (config->num_buckets == 0)
        return ops;
    if (!kvio_choice_is(&config->kind, "ucx")) {
        snprintf(error_p, error_len, "weight_sync: emulate mode moves buckets over "
                 "train.transport.kind: ucx only, not %s", ops->plugin.name);
        return NULL;
    }
    return &kvio_xfer_ucx_bucket_ops;
}

kvio_xfer_bucket_stamp_t *kvio_xfer_bucket_stamp_add(kvio_xfer_t *xfer, size_t count)
{
    if (xfer->num_stamps + count > xfer->stamps_capacity) {
        size_t capacity = xfer->stamps_capacity > 0 ? xfer->stamps_capacity : 64;
        while (capacity < xfer->num_stamps + count)
            capacity *= 2;
        kvio_xfer_bucket_stamp_t *bigger = realloc(xfer->stamps, capacity * sizeof(*bigger));
        if (bigger == NULL)
            return NULL;
        xfer->stamps = bigger;
        xfer->stamps_capacity = capacity;
    }
    kvio_xfer_bucket_stamp_t *first = xfer->stamps + xfer->num_stamps;
    memset(first, 0, count * sizeof(*first));
    xfer->num_stamps += count;
    return first;
}

void kvio_xfer_bucket_stamps(const kvio_xfer_t *xfer, const kvio_xfer_bucket_stamp_t **stamps_p,
                             size_t *count_p)
{
    *stamps_p = xfer->stamps;
    *count_p = xfer->num_stamps;
}

void kvio_xfer_set_error(kvio_xfer_t *xfer, const char *fmt, ...)
{
    if (xfer->error[0] != '\0')
        return;
    va_list args;
    va_start(args, fmt);
    vsnprintf(xfer->error, sizeof(xfer->error), fmt, args);
    va_end(args);
}

void *kvio_xfer_aligned_alloc(uint64_t bytes)
{
    void *buffer = NULL;
    if (posix_memalign(&buffer, 4096, bytes > 0 ? bytes : 4096) != 0)
        return NULL;
    return buffer;
}

/* Where the weights go for this transport and device.weights: true for GPU
 * memory. A combination that cannot work is a configuration error. */
static kvio_status_t weights_on_gpu(const kvio_xfer_config_t *config,
                                    const kvio_xfer_ops_t *ops, bool *gpu_p, char *error_p,
                                    size_t error_len)
{
    int weights = config->device.weights;
    if (ops->init != NULL && (ops->caps & KVIO_XFER_CAP_GPU_ONLY)) {
        if (weights == KVIO_WEIGHTS_HOST) {
            snprintf(error_p, error_len, "%s transport moves GPU memory: device.weights: "
                     "host does not fit it (use auto or cuda)", ops->plugin.name);
            return KVIO_ERR_CONFIG;
        }
        *gpu_p = true;
        return KVIO_OK;
    }
    if (weights == KVIO_WEIGHTS_CUDA && ops->init != NULL &&
        !(ops->caps & KVIO_XFER_CAP_GPU_MEM)) {
        snprintf(error_p, error_len, "%s transport reads and writes host memory: with "
                 "device.weights: cuda use train.transport.kind: staged or cuda-ipc", ops->plugin.name);
        return KVIO_ERR_CONFIG;
    }
    *gpu_p = weights == KVIO_WEIGHTS_CUDA;
    return KVIO_OK;
}

kvio_status_t kvio_xfer_preflight(const kvio_xfer_config_t *config, uint64_t bytes,
                                  char *error_p, size_t error_len)
{
    const kvio_xfer_ops_t *ops = config_ops(config, error_p, error_len);
    if (ops == NULL)
        return KVIO_ERR_CONFIG;
    bool gpu = false;
    kvio_status_t status = weights_on_gpu(config, ops, &gpu, error_p, error_len);
    if (status != KVIO_OK)
        return status;
    if (ops->preflight != NULL)
        status = ops->preflight(config, bytes, error_p, error_len);
    if (status == KVIO_OK && gpu && (ops->caps & KVIO_XFER_CAP_GPU_ONLY)) {
        /* The GPU transports have no host fallback. */
        kvio_device_info_t info;
        char reason[512];
        if (kvio_device_query((int)config->device.index, &info, reason, sizeof(reason)) !=
            KVIO_OK) {
            snprintf(error_p, error_len, "%s transport: %s", ops->plugin.name, reason);
            status = KVIO_ERR_CONFIG;
        }
    }
    return status;
}

/* Opens the cuda domain the buffers go to (xfer->device stays NULL for host
 * buffers, also after a fallback to host, which is logged). */
static kvio_status_t open_device(kvio_xfer_t *xfer, char *error_p, size_t error_len)
{
    const kvio_xfer_ops_t *ops = xfer->ops;
    const kvio_device_config_t *device = &xfer->config->device;
    bool gpu = false;
    kvio_status_t status = weights_on_gpu(xfer->config, ops, &gpu, error_p, error_len);
    if (status != KVIO_OK || !gpu || xfer->role == KVIO_XFER_BYSTANDER)
        return status;
    bool gpu_only = (ops->caps & KVIO_XFER_CAP_GPU_ONLY) != 0;
    char reason[512] = "";
    kvio_device_t *domain = NULL;
    status = kvio_device_create(KVIO_MEMORY_CUDA,
                                gpu_only ? KVIO_FALLBACK_ERROR : device->fallback,
                                device->index, kvio_rte_index(xfer->rte), &domain, reason,
                                sizeof(reason));
    if (status != KVIO_OK) {
        snprintf(error_p, error_len, "%s transport: weights on the GPU: %s", ops->plugin.name, reason);
        return status;
    }
    if (kvio_device_kind(domain) != KVIO_MEMORY_CUDA) {
        kvio_warn("rank %d: %s transport: weights in %s", kvio_rte_index(xfer->rte), ops->plugin.name,
                  kvio_device_describe(domain));
        kvio_device_destroy(domain);
        return KVIO_OK;
    }
    xfer->device = domain;
    return KVIO_OK;
}

/* Says why the set-up barrier failed: the runtime's verdict on the rank it
 * waited for (which rank, and whether it failed, ended or fell silent). */
static void setup_barrier_error(const kvio_xfer_t *xfer, kvio_status_t status, char *error_p,
                                size_t error_len)
{
    snprintf(error_p, error_len, "%s transport: rank %d: waiting for every rank's set-up: %s",
             xfer->ops->plugin.name, kvio_rte_index(xfer->rte),
             kvio_rte_verdict(xfer->rte)[0] ? kvio_rte_verdict(xfer->rte) : kvio_strerror(status));
}

kvio_status_t kvio_xfer_create(const kvio_xfer_config_t *config, kvio_rte_t *rte,
                               kvio_xfer_role_t role, int sender, const int *receivers,
                               int num_receivers, uint64_t bytes, kvio_xfer_t **xfer_p,
                               char *error_p, size_t error_len)
{
    const kvio_xfer_ops_t *ops = config_ops(config, error_p, error_len);
    if (ops == NULL)
        return KVIO_ERR_CONFIG;
    if (ops->init == NULL) {
        if (ops->preflight != NULL)
            return ops->preflight(config, bytes, error_p, error_len);
        snprintf(error_p, error_len, "%s transport not built", ops->plugin.name);
        return KVIO_ERR_UNSUPPORTED;
    }
    if (config->fanout == KVIO_XFER_FANOUT_CHAIN && !(ops->caps & KVIO_XFER_CAP_CHAIN)) {
        snprintf(error_p, error_len, "%s transport: fanout: chain is not supported",
                 ops->plugin.name);
        return KVIO_ERR_CONFIG;
    }
    kvio_status_t status = KVIO_ERR_NOMEM;
    kvio_xfer_t *xfer = calloc(1, sizeof(*xfer));
    if (xfer == NULL)
        goto fail;
    *xfer = (kvio_xfer_t){.ops = ops, .config = config, .rte = rte, .role = role,
                          .sender = sender, .num_receivers = num_receivers,
                          .self_index = -1, .bytes = bytes};
    xfer->receivers = calloc((size_t)num_receivers + 1, sizeof(int));
    if (xfer->receivers == NULL)
        goto fail;
    for (int i = 0; i < num_receivers; i++) {
        xfer->receivers[i] = receivers[i];
        if (receivers[i] == kvio_rte_index(rte))
            xfer->self_index = i;
    }
    if (ops->priv_size > 0 && (xfer->priv = calloc(1, ops->priv_size)) == NULL)
        goto fail;
    status = open_device(xfer, error_p, error_len);
    if (status == KVIO_OK)
        status = ops->init(xfer, error_p, error_len);
    if (status != KVIO_OK)
        goto fail_init;
    /* Fault in host receive slots now, so the first version into each slot
     * is not charged the page faults the later ones never pay, and the
     * sender's buffer, so the trainer's fill is not slowed by them: the
     * kernel populates them (kvio_fault_in; a memset where it cannot). GPU
     * slots (xfer->device) came zeroed from kvio_device_alloc, and the host
     * must not touch them. With deltas, slot 1 (active when the serve loop
     * starts) takes the trainer's starting weights: the first delta
     * applies on them. */
    const kvio_delta_t *delta = kvio_xfer_delta(xfer);
    for (int slot = 0; slot < 2 && xfer->device == NULL; slot++) {
        if (xfer->slots[slot] == NULL || xfer->bytes == 0)
            continue;
        kvio_fault_in(xfer->slots[slot], xfer->bytes, true, NULL);
        if (slot == 1 && delta != NULL && role == KVIO_XFER_RECEIVER)
            kvio_weights_fill_as(xfer->slots[slot], xfer->bytes, delta->seed,
                                 &xfer->config->data);
    }
    if (xfer->device == NULL && role == KVIO_XFER_SENDER)
        kvio_fault_in(xfer->send_buffer, xfer->bytes, true, NULL);
    /* No rank may put into a slot before its owner has faulted it in: a
     * sender (or, in a chain, a server) that got there first had its first
     * version wiped by the memset that did it now and then. */
    status = kvio_rte_barrier(rte);
    if (status != KVIO_OK) {
        setup_barrier_error(xfer, status, error_p, error_len);
        ops->fini(xfer);
        goto fail_init;
    }
    *xfer_p = xfer;
    return KVIO_OK;
fail:
    snprintf(error_p, error_len, "transport: out of memory");
fail_init:
    if (xfer != NULL) {
        kvio_device_destroy(xfer->device);
        free(xfer->priv);
        free(xfer->receivers);
    }
    free(xfer);
    return status;
}

void kvio_xfer_detach(kvio_xfer_t *xfer)
{
    if (xfer != NULL && xfer->ops->detach != NULL)
        xfer->ops->detach(xfer);
}

void kvio_xfer_destroy(kvio_xfer_t *xfer)
{
    if (xfer == NULL)
        return;
    if (xfer->ops->fini != NULL)
        xfer->ops->fini(xfer);
    kvio_device_destroy(xfer->device);
    free(xfer->stamps);
    free(xfer->priv);
    free(xfer->receivers);
    free(xfer);
}

void *kvio_xfer_send_buffer(kvio_xfer_t *xfer) { return xfer->send_buffer; }
kvio_device_t *kvio_xfer_device(const kvio_xfer_t *xfer) { return xfer->device; }
const kvio_data_t *kvio_xfer_data(const kvio_xfer_t *xfer) { return &xfer->config->data; }

int kvio_xfer_route_children(const kvio_xfer_t *xfer, int index, int children[2])
{
    int count = 0, n = xfer->num_receivers;
    if (xfer->config->route == KVIO_XFER_ROUTE_CHAIN && index + 1 < n) {
        children[count++] = index + 1;
    } else if (xfer->config->route == KVIO_XFER_ROUTE_TREE) {
        for (int child = 2 * index + 1; child <= 2 * index + 2 && child < n; child++)
            children[count++] = child;
    }
    return count;
}

int kvio_xfer_route_parent(const kvio_xfer_t *xfer, int index)
{
    if (index <= 0 || xfer->config->route == KVIO_XFER_ROUTE_DIRECT)
        return -1;
    return xfer->config->route == KVIO_XFER_ROUTE_CHAIN ? index - 1 : (index - 1) / 2;
}

bool kvio_xfer_sums_fetch(const kvio_xfer_t *xfer)
{
    return (xfer->ops->caps & KVIO_XFER_CAP_SUMS_FETCH) != 0;
}

bool kvio_xfer_fetched_sum(const kvio_xfer_t *xfer, uint64_t version, uint64_t *sum_p)
{
    if (version == 0 || xfer->fetched_version != version) /* only SUMS_FETCH plug-ins set it */
        return false;
    *sum_p = xfer->fetched_sum;
    return true;
}

const kvio_delta_t *kvio_xfer_delta(const kvio_xfer_t *xfer)
{
    return xfer->config->num_buckets > 0 && xfer->config->delta.fraction > 0
               ? &xfer->config->delta
               : NULL;
}
void *kvio_xfer_slot(kvio_xfer_t *xfer, int slot) { return xfer->slots[slot & 1]; }
bool kvio_xfer_in_memory(const kvio_xfer_t *xfer) { return xfer != NULL && xfer->in_memory; }
uint64_t kvio_xfer_polls(const kvio_xfer_t *xfer) { return xfer->polls; }
int64_t kvio_xfer_poll_interval_ns(const kvio_xfer_t *xfer) { return xfer->poll_interval_ns; }

void kvio_xfer_touch(const void *memory, uint64_t bytes, size_t page)
{
    const volatile unsigned char *bytes_at = memory;
    unsigned char sink = 0;
    for (uint64_t at = 0; at < bytes; at += page)
        sink ^= bytes_at[at];
    if (bytes > 0)
        sink ^= bytes_at[bytes - 1]; /* the last page, when memory is not page-aligned */
    (void)sink;
}

bool kvio_xfer_fault_now(kvio_xfer_t *xfer)
{
    int64_t limit = xfer->config->die_after_chunks;
    if (limit <= 0 || xfer->role != KVIO_XFER_SENDER || xfer->chunks_sent < (uint64_t)limit) {
        xfer->chunks_sent++;
        return false;
    }
    kvio_xfer_set_error(xfer, "%s transport: injected fault: the sender died after %lld chunks",
                        xfer->ops->plugin.name, (long long)limit);
    return true;
}
const char *kvio_xfer_info(const kvio_xfer_t *xfer) { return xfer->info; }
const char *kvio_xfer_error(const kvio_xfer_t *xfer) { return xfer->error; }

static kvio_status_t checked(kvio_xfer_t *xfer, kvio_status_t status, const char *what)
{
    if (status != KVIO_OK && status != KVIO_INPROGRESS) {
        kvio_xfer_set_error(xfer, "%s transport: %s: %s", xfer->ops->plugin.name, what,
                            kvio_strerror(status));
    }
    return status;
}

void kvio_xfer_hash_piece(kvio_xfer_t *xfer, uint64_t offset, uint64_t length)
{
    if (!xfer->hashing)
        return;
    if (offset != xfer->put_sum.done) {
        xfer->hashing = false; /* out of order: the publish fails below */
        return;
    }
    kvio_sum_pass(&xfer->put_sum, NULL, length);
}

void kvio_xfer_store_piece(kvio_xfer_t *xfer, void *target, uint64_t offset, uint64_t length)
{
    if (xfer->hashing && offset == xfer->put_sum.done) {
        kvio_sum_pass(&xfer->put_sum, target, length);
        return;
    }
    xfer->hashing = false; /* out of order (if it was summing): the publish fails below */
    kvio_copy_streaming(target, (const char *)xfer->send_buffer + offset, length);
}

/* Whether publish_and_checksum can sum the buffer as the first receiver's
 * bytes are put (sequential) or as the first hop's are (chain). */
static bool hash_on_put(const kvio_xfer_t *xfer)
{
    return (xfer->ops->caps & KVIO_XFER_CAP_HASH_ON_PUT) &&
           !(xfer->ops->caps & KVIO_XFER_CAP_SHARED_STORE) && xfer->device == NULL &&
           xfer->num_receivers > 0;
}

bool kvio_xfer_put_checksum(const kvio_xfer_t *xfer, uint64_t *checksum_p)
{
    if (!xfer->hashing || xfer->put_sum.done != xfer->bytes)
        return false;
    *checksum_p = kvio_sum_digest(&xfer->put_sum);
    return true;
}

static void sum_begin(kvio_xfer_t *xfer)
{
    kvio_sum_start(&xfer->put_sum, xfer->send_buffer, xfer->bytes);
    xfer->hashing = true;
}

/* After the put that summed: the checksum into meta, or an error when the
 * plug-in did not pass every byte in order. */
static kvio_status_t sum_end(kvio_xfer_t *xfer, kvio_xfer_meta_t *meta)
{
    bool whole = kvio_xfer_put_checksum(xfer, &meta->checksum);
    xfer->hashing = false;
    if (whole)
        return KVIO_OK;
    kvio_xfer_set_error(xfer, "%s transport: the checksum saw %llu of %llu bytes in order",
                        xfer->ops->plugin.name, (unsigned long long)xfer->put_sum.done,
                        (unsigned long long)xfer->bytes);
    return KVIO_ERR_INTERNAL;
}

/* One put to a push receiver (target -1: the chain's first hop, or, with
 * buckets, every receiver), summing the buffer on the way when summing is
 * set (meta->checksum is then filled in before the notice; a chain's
 * completing message, or the last bucket's notice, carries it on). */
static kvio_status_t put_summed(kvio_xfer_t *xfer, int target, kvio_xfer_meta_t *meta,
                                bool summing)
{
    if (summing)
        sum_begin(xfer);
    bool chain = target < 0 && !(xfer->ops->caps & KVIO_XFER_CAP_BUCKETS);
    kvio_status_t status =
        chain ? checked(xfer, xfer->ops->chain(xfer, meta), "putting the weights down the chain")
              : checked(xfer, xfer->ops->put(xfer, target, meta), "putting the weights");
    if (summing && status == KVIO_OK)
        status = sum_end(xfer, meta);
    xfer->hashing = false;
    return status;
}

static kvio_status_t publish(kvio_xfer_t *xfer, uint64_t version, uint64_t checksum,
                             bool summing, int64_t t_ready_ns,
                             kvio_xfer_publish_times_t *times_p)
{
    kvio_xfer_publish_times_t times = {0};
    kvio_xfer_meta_t meta = {.magic = KVIO_XFER_MAGIC, .version = version,
                             .bytes = xfer->bytes, .checksum = checksum,
                             .slot = (uint32_t)(version & 1), .t_ready_ns = t_ready_ns};
    kvio_status_t status = KVIO_OK;
    const kvio_xfer_ops_t *ops = xfer->ops;
    if (ops->caps & KVIO_XFER_CAP_SHARED_STORE) {
        times.start_ns = kvio_rte_time_ns(xfer->rte);
        meta.t_xfer_start_ns = times.start_ns;
        status = checked(xfer, ops->put(xfer, -1, &meta), "publishing");
        meta.t_xfer_end_ns = kvio_rte_time_ns(xfer->rte);
        if (status == KVIO_OK) {
            times.bytes_moved = xfer->bytes;
            status = checked(xfer, ops->notify(xfer, -1, &meta), "notifying");
        }
    } else if (ops->caps & KVIO_XFER_CAP_BUCKETS) {
        /* Buckets: one pipeline into every receiver, each bucket announced
         * as it lands (the plug-in waits for the receivers' slots). */
        times.start_ns = kvio_rte_time_ns(xfer->rte);
        meta.t_xfer_start_ns = times.start_ns;
        status = put_summed(xfer, -1, &meta, summing);
        if (status == KVIO_OK)
            times.bytes_moved = xfer->bytes * (uint64_t)xfer->num_receivers;
    } else if (xfer->config->fanout == KVIO_XFER_FANOUT_CHAIN) {
        /* Chain: a free slot on every receiver, then the first hop; the
         * receivers forward it and notify themselves. */
        int64_t credit_start = kvio_rte_time_ns(xfer->rte);
        for (int target = 0; target < xfer->num_receivers && status == KVIO_OK; target++)
            status = checked(xfer, ops->wait_credit(xfer, target, &meta),
                             "waiting for a free receive slot");
        times.start_ns = kvio_rte_time_ns(xfer->rte);
        times.credit_ns = times.start_ns - credit_start;
        meta.t_xfer_start_ns = times.start_ns;
        if (status == KVIO_OK)
            status = put_summed(xfer, -1, &meta, summing);
        if (status == KVIO_OK)
            times.bytes_moved = xfer->bytes;
    } else {
        /* Push: per receiver, wait for a free slot, put, then notify. */
        for (int target = 0; target < xfer->num_receivers && status == KVIO_OK; target++) {
            int64_t credit_start = kvio_rte_time_ns(xfer->rte);
            if (ops->wait_credit != NULL)
                status = checked(xfer, ops->wait_credit(xfer, target, &meta),
                                 "waiting for a free receive slot");
            int64_t put_start = kvio_rte_time_ns(xfer->rte);
            times.credit_ns += put_start - credit_start;
            if (status != KVIO_OK)
                break;
            if (target == 0)
                times.start_ns = put_start;
            meta.t_xfer_start_ns = put_start;
            /* Summed once, on the way to the first receiver. */
            status = put_summed(xfer, target, &meta, summing && target == 0);
            meta.t_xfer_end_ns = kvio_rte_time_ns(xfer->rte);
            if (status == KVIO_OK) {
                times.bytes_moved += xfer->bytes;
                status = checked(xfer, ops->notify(xfer, target, &meta), "notifying");
            }
        }
    }
    times.end_ns = kvio_rte_time_ns(xfer->rte);
    times.checksum = meta.checksum;
    if (status == KVIO_OK && times_p != NULL)
        *times_p = times;
    return status;
}

kvio_status_t kvio_xfer_publish(kvio_xfer_t *xfer, uint64_t version, uint64_t checksum,
                                int64_t t_ready_ns, kvio_xfer_publish_times_t *times_p)
{
    if (xfer->role != KVIO_XFER_SENDER)
        return KVIO_ERR_INVALID;
    return publish(xfer, version, checksum, false, t_ready_ns, times_p);
}

kvio_status_t kvio_xfer_publish_and_checksum(kvio_xfer_t *xfer, uint64_t version,
                                             int64_t t_ready_ns,
                                             kvio_xfer_publish_times_t *times_p)
{
    if (xfer->role != KVIO_XFER_SENDER || xfer->device != NULL || times_p == NULL)
        return KVIO_ERR_INVALID;
    if (!hash_on_put(xfer))
        return publish(xfer, version, kvio_weights_checksum(xfer->send_buffer, xfer->bytes),
                       false, t_ready_ns, times_p);
    return publish(xfer, version, 0, true, t_ready_ns, times_p);
}

kvio_status_t kvio_xfer_finish(kvio_xfer_t *xfer, uint64_t last_version)
{
    kvio_xfer_meta_t meta = {.magic = KVIO_XFER_MAGIC, .version = last_version,
                             .bytes = xfer->bytes, .flags = KVIO_XFER_META_END,
                             .t_ready_ns = kvio_rte_time_ns(xfer->rte)};
    if (xfer->ops->caps & KVIO_XFER_CAP_SHARED_STORE)
        return checked(xfer, xfer->ops->notify(xfer, -1, &meta), "announcing the end");
    if (xfer->config->fanout == KVIO_XFER_FANOUT_CHAIN)
        return checked(xfer, xfer->ops->chain(xfer, &meta), "announcing the end");
    kvio_status_t status = KVIO_OK;
    for (int target = 0; target < xfer->num_receivers && status == KVIO_OK; target++)
        status = checked(xfer, xfer->ops->notify(xfer, target, &meta), "announcing the end");
    return status;
}

kvio_status_t kvio_xfer_poll(kvio_xfer_t *xfer, int free_slot, kvio_xfer_receive_t *receive_p)
{
    xfer->polls++;
    kvio_xfer_meta_t meta;
    kvio_status_t status = checked(xfer, xfer->ops->poll(xfer, &meta), "polling");
    if (status != KVIO_OK)
        return status;
    int64_t now = kvio_rte_time_ns(xfer->rte);
    if (meta.magic != KVIO_XFER_MAGIC) {
        kvio_xfer_set_error(xfer, "%s transport: a notice with a bad magic number",
                            xfer->ops->plugin.name);
        return KVIO_ERR_TRANSPORT;
    }
    kvio_xfer_receive_t receive = {.meta = meta, .slot = free_slot, .t_notified_ns = now};
    if (!(meta.flags & KVIO_XFER_META_END) && meta.bytes != xfer->bytes) {
        kvio_xfer_set_error(xfer, "%s transport: version %llu has %llu bytes, expected %llu",
                            xfer->ops->plugin.name, (unsigned long long)meta.version,
                            (unsigned long long)meta.bytes, (unsigned long long)xfer->bytes);
        return KVIO_ERR_TRANSPORT;
    }
    if (xfer->ops->caps & KVIO_XFER_CAP_PUSH) {
        /* The data was in place before the notice; the sender timed it. */
        receive.slot = (int)meta.slot;
        receive.offset = meta.bytes;
        receive.t_xfer_start_ns = meta.t_xfer_start_ns;
        receive.t_xfer_end_ns = meta.t_xfer_end_ns;
        receive.complete = true;
    }
    *receive_p = receive;
    return KVIO_OK;
}

kvio_status_t kvio_xfer_fetch_step(kvio_xfer_t *xfer, kvio_xfer_receive_t *receive)
{
    if (receive->complete)
        return KVIO_OK;
    if (receive->offset == 0 && receive->t_xfer_start_ns == 0)
        receive->t_xfer_start_ns = kvio_rte_time_ns(xfer->rte);
    uint64_t remaining = receive->meta.bytes - receive->offset;
    uint64_t length = remaining < xfer->config->chunk ? remaining : xfer->config->chunk;
    uint64_t moved = 0;
    char *buffer = xfer->slots[receive->slot & 1];
    kvio_status_t status = checked(xfer, xfer->ops->fetch(xfer, &receive->meta,
                                                          buffer + receive->offset,
                                                          receive->offset, length, &moved),
                                   "reading the weights");
    if (status != KVIO_OK)
        return status;
    receive->offset += moved;
    if (receive->offset >= receive->meta.bytes) {
        receive->complete = true;
        receive->t_xfer_end_ns = kvio_rte_time_ns(xfer->rte);
    }
    return KVIO_OK;
}

kvio_status_t kvio_xfer_landed(kvio_xfer_t *xfer, kvio_xfer_landed_t *landed_p)
{
    if (xfer->role != KVIO_XFER_RECEIVER || !(xfer->ops->caps & KVIO_XFER_CAP_LANDED))
        return KVIO_INPROGRESS;
    kvio_xfer_landed_t landed;
    kvio_status_t status = xfer->ops->landed(xfer, &landed);
    if (status != KVIO_OK)
        return status == KVIO_INPROGRESS ? status : checked(xfer, status, "taking news");
    /* Nothing the plug-in was told may point outside a slot. */
    if (landed.version == 0 || (landed.slot != 0 && landed.slot != 1) ||
        landed.bytes > xfer->bytes)
        return KVIO_INPROGRESS;
    *landed_p = landed;
    return KVIO_OK;
}

kvio_status_t kvio_xfer_ack(kvio_xfer_t *xfer, const kvio_xfer_receive_t *receive,
                            int free_slot)
{
    if (xfer->ops->ack == NULL)
        return KVIO_OK;
    kvio_xfer_meta_t meta = receive->meta;
    meta.slot = (uint32_t)free_slot;
    return checked(xfer, xfer->ops->ack(xfer, &meta), "acknowledging");
}

void kvio_xfer_progress(kvio_xfer_t *xfer)
{
    if (xfer->ops->progress != NULL)
        xfer->ops->progress(xfer);
}

void kvio_xfer_model_params(const kvio_xfer_config_t *config, int64_t *latency_ns_p,
                            double *bandwidth_gbps_p, kvio_xfer_model_source_t *latency_source_p,
                            kvio_xfer_model_source_t *bandwidth_source_p)
{
    const kvio_xfer_model_config_t *model = &config->model;
    kvio_xfer_model_source_t latency_source = KVIO_XFER_MODEL_DEFAULT;
    kvio_xfer_model_source_t bandwidth_source = KVIO_XFER_MODEL_DEFAULT;
    const kvio_xfer_ops_t *ops = chosen_ops(config);
    *latency_ns_p = ops->model.latency_ns;
    *bandwidth_gbps_p = ops->model.bandwidth_gbps;
    if (model->latency_ns > 0) {
        *latency_ns_p = model->latency_ns;
        latency_source = KVIO_XFER_MODEL_SET;
    } else if (model->taken) {
        *latency_ns_p = model->taken_latency_ns;
        latency_source = KVIO_XFER_MODEL_TAKEN;
    }
    if (model->bandwidth_gbps > 0) {
        *bandwidth_gbps_p = model->bandwidth_gbps;
        bandwidth_source = KVIO_XFER_MODEL_SET;
    } else if (model->taken && model->taken_bandwidth_gbps > 0) {
        *bandwidth_gbps_p = model->taken_bandwidth_gbps;
        bandwidth_source = KVIO_XFER_MODEL_TAKEN;
    }
    if (latency_source_p != NULL)
        *latency_source_p = latency_source;
    if (bandwidth_source_p != NULL)
        *bandwidth_source_p = bandwidth_source;
}

/* Transports the model treats as a shared store: written once, read by each. */
static bool model_shared_store(const kvio_xfer_config_t *config)
{
    return chosen_ops(config)->caps & KVIO_XFER_CAP_SHARED_STORE;
}

/* The model itself, for given parameters (ns; GB/s = bytes per ns). */
static void model_times(const kvio_xfer_config_t *config, double latency_ns,
                        double bandwidth_gbps, uint64_t bytes, int receiver, int num_receivers,
                        double *arrival_p, double *busy_p)
{
    double whole_ns = (double)bytes / bandwidth_gbps;
    double chunk_ns = (double)(config->chunk < bytes ? config->chunk : bytes) / bandwidth_gbps;
    double arrival = 0, busy = 0;
    unsigned caps = chosen_ops(config)->caps;
    if ((caps & KVIO_XFER_CAP_CHAIN) && config->fanout == KVIO_XFER_FANOUT_CHAIN) {
        /* Pipelined chain: the first hop carries everything, each further
         * hop adds one chunk. */
        arrival = latency_ns * (receiver + 1) + whole_ns + chunk_ns * receiver;
        busy = latency_ns + whole_ns;
    } else if (!(caps & KVIO_XFER_CAP_SHARED_STORE)) {
        arrival = (latency_ns + whole_ns) * (receiver + 1);
        busy = (latency_ns + whole_ns) * num_receivers;
    } else {
        /* Shared store (model_shared_store): written once, then every
         * receiver reads it. */
        busy = latency_ns + whole_ns;
        arrival = busy + latency_ns + whole_ns;
        if ((caps & KVIO_XFER_CAP_POLL) && config->file.discovery == KVIO_XFER_DISCOVER_POLL)
            arrival += (double)config->file.poll_interval_ns / 2; /* mean wait for a poll */
    }
    *arrival_p = arrival;
    *busy_p = busy;
}

void kvio_xfer_model(const kvio_xfer_config_t *config, uint64_t bytes, int receiver,
                     int num_receivers, int64_t *arrival_ns_p, int64_t *sender_busy_ns_p)
{
    int64_t latency_ns;
    double bandwidth_gbps, arrival, busy;
    kvio_xfer_model_params(config, &latency_ns, &bandwidth_gbps, NULL, NULL);
    model_times(config, (double)latency_ns, bandwidth_gbps, bytes, receiver, num_receivers,
                &arrival, &busy);
    *arrival_ns_p = (int64_t)arrival;
    *sender_busy_ns_p = (int64_t)busy;
}

/* Mean arrival over the receivers for a given latency. */
static double mean_arrival(const kvio_xfer_config_t *config, double latency_ns,
                           double bandwidth_gbps, uint64_t bytes, int num_receivers)
{
    double sum = 0, arrival, busy;
    for (int receiver = 0; receiver < num_receivers; receiver++) {
        model_times(config, latency_ns, bandwidth_gbps, bytes, receiver, num_receivers,
                    &arrival, &busy);
        sum += arrival;
    }
    return sum / num_receivers;
}

kvio_status_t kvio_xfer_model_fit(const kvio_xfer_config_t *measured_config, int num_receivers,
                                  const kvio_xfer_measured_t *measured, int64_t *latency_ns_p,
                                  double *bandwidth_gbps_p)
{
    double moving_ns = measured->transfer_ns, moves = 1;
    if (model_shared_store(measured_config)) {
        moving_ns += measured->write_ns;
        moves = 2;
    }
    if (num_receivers < 1 || measured->bytes == 0 || !(moving_ns > 0))
        return KVIO_ERR_INVALID;
    double bandwidth_gbps = moves * (double)measured->bytes / moving_ns; /* bytes per ns */
    /* The mean arrival is affine in the latency (a + b·latency, b >= 1):
     * two evaluations give a and b. */
    double at_zero = mean_arrival(measured_config, 0, bandwidth_gbps, measured->bytes,
                                  num_receivers);
    double slope = (mean_arrival(measured_config, 1e6, bandwidth_gbps, measured->bytes,
                                 num_receivers) - at_zero) / 1e6;
    double latency = (measured->arrival_ns - at_zero) / slope;
    *latency_ns_p = latency > 0 ? (int64_t)llround(latency) : 0;
    *bandwidth_gbps_p = bandwidth_gbps;
    return KVIO_OK;
}
