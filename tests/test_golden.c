/* Golden simulate runs: the presets, a Mooncake replay and variants that
 * stress eviction, preemption (recompute and swap), other policies, routers
 * and several ranks, each pinned by the XXH3-128 digests of its
 * requests.csv and iterations.csv. A change to the engine, the pool, the
 * cost model or a stream that moves any number shows up here; a deliberate
 * one updates the digests (the failure message prints the new ones). */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvio/hash.h"
#include "kvio/run.h"
#include "tests/helpers.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

/* A Mooncake trace replayed on Llama-3-8B / H200 (the fixture's path is
 * filled in). */
#define MOONCAKE_YAML                                                                       \
    "name: mooncake\nmode: simulate\nmodel: {preset: llama3-8b}\ngpu: {preset: h200}\n"     \
    "stream: {trace: {path: %s, format: mooncake}}\n"
#define MOONCAKE_SMALL KVIO_SOURCE_DIR "/tests/fixtures/mooncake_small.jsonl"

#define MAX_SETS 6

typedef struct golden_case {
    const char *name;
    const char *source; /* a preset, or NULL: the Mooncake fixture */
    const char *sets[MAX_SETS];
    const char *requests_digest;   /* XXH3-128 of requests.csv */
    const char *iterations_digest; /* XXH3-128 of iterations.csv */
    const char *updates_digest;    /* XXH3-128 of updates.csv (runs with updates) */
} golden_case_t;

static golden_case_t cases[] = {
    /* The presets as they ship. */
    {"agent", "agent", {"mode=simulate"},
     "ce72ae291258b9af4cd9d09d8f3c98d4", "70945a0515f3d30f7e03767ab5fd7d1b", NULL},
    {"chat", "chat", {"mode=simulate"},
     "482bef9c880d36196c0a0c89d5626d24", "e3fea15eb171a91755fd2426bcc13bd5", NULL},
    {"code-completion", "code-completion", {"mode=simulate"},
     "e57f058445093cda9cdc4ad9e0270725", "66d7a24ece8d0ba6038efd913040b1b5", NULL},
    {"long-context", "long-context", {"mode=simulate"},
     "a85f37dc99be446a05fd7081b86256a3", "eb60105eea15c1b6737a68735de7da3e", NULL},
    {"offline-batch", "offline-batch", {"mode=simulate"},
     "b1b862731e100cb217fd278ac644bc48", "afcff486b4100eea1af5504d22e3d273", NULL},
    {"rag", "rag", {"mode=simulate"},
     "98de1da7f5c8b3da06bc8b846aac30f1", "fce5ca95ce631d25e6ba94a22156d664", NULL},
    {"mooncake", NULL, {NULL},
     "0648782e7894a43458575230a9c7b118", "ea791769a452a1c6fcff4a75f803352c", NULL},
    /* Small KV caches: eviction, preemption, policies, routers, ranks. */
    {"mooncake-tight", NULL, {"serve.kvcache.blocks=72"},
     "b30d0c91ff6b7b1aaa7944c5fbd234df", "d32d5261b6fe7625db3c71d2ce25de03", NULL},
    {"agent-tight", "agent",
     {"mode=simulate", "duration=120s", "serve.kvcache.blocks=3000"},
     "88ab3bc7fe858be255362a98024df22b", "754bea5254d56ea7b0e5f654f14f6a8c", NULL},
    {"chat-swap-lfu", "chat",
     {"mode=simulate", "duration=120s", "serve.kvcache.blocks=1100",
      "serve.engine.preemption=swap", "serve.kvcache.eviction=lfu",
      "serve.kvcache.free_order=prepend_unhashed"},
     "bff34fdff0e25e8fe90c8f6d340efc58", "c29dd80df367962b5b2f16b9fd4c9f63", NULL},
    {"rag-lpm", "rag",
     {"mode=simulate", "serve.scheduler.policy=lpm", "serve.kvcache.blocks=300"},
     "6944bded8a7b71d630403d9f1c362417", "a157b06a90dcc583b5cc1736f4bccc06", NULL},
    {"chat-dfs-weight", "chat",
     {"mode=simulate", "duration=60s", "serve.scheduler.policy=dfs-weight",
      "serve.kvcache.blocks=500"},
     "b4be2c6f6535180000ffba1891b96ffc", "641a4f50fb3eeb34b4ec10ea0b1dc80d", NULL},
    {"chat-pkas", "chat",
     {"mode=simulate", "duration=60s", "serve.scheduler.policy=pkas",
      "serve.kvcache.blocks=500"},
     "41ab46608fec5e7c4f6ccebdde90a11d", "23098d40a7026de6373e50d3e4ea0a07", NULL},
    {"agent-priority", "agent",
     {"mode=simulate", "duration=60s", "serve.scheduler.policy=priority",
      "stream.priority={dist: uniform, low: 0, high: 3}", "serve.kvcache.blocks=2500",
      "serve.engine.long_prefill_token_threshold=1024"},
     "ec6591a3ca31eda2e9e6862c0d8119be", "43290d4709ce6a01cacc584a397e50bf", NULL},
    {"long-context-sjf-s3fifo", "long-context",
     {"mode=simulate", "serve.scheduler.policy=sjf", "serve.kvcache.blocks=9000",
      "serve.kvcache.eviction=s3fifo"},
     "fc0f2c220804fe6562b989a13049fb37", "041eca69a1f17596a2050042b0638c64", NULL},
    {"chat-prefix-affinity", "chat",
     {"mode=simulate", "duration=60s", "ranks.serve=2", "serve.router.policy=prefix_affinity",
      "serve.kvcache.blocks=800"},
     "1849fb1f478e9317986b0acc41ca64cb", "d4ac0f533645172ca22a4f49feeae960", NULL},
    {"code-completion-kv-cost", "code-completion",
     {"mode=simulate", "ranks.serve=3", "serve.router.policy=kv_cost",
      "serve.kvcache.blocks=500"},
     "b5ec7b3edf509c168e2b94c7de7db882", "e511100fc97f0ed0220c46442700563a", NULL},
    /* #57: serve.kvcache.index: radix, SGLang's tree over the pool, under
     * the schedulers that read it. */
    {"rag-lpm-radix", "rag",
     {"mode=simulate", "serve.scheduler.policy=lpm", "serve.kvcache.blocks=300",
      "serve.kvcache.index=radix"},
     "17835bd1fecc91a351c6f0427b19ef89", "bac7736b75247ba3b665e0166582b4d9", NULL},
    {"chat-dfs-weight-radix-fifo", "chat",
     {"mode=simulate", "duration=60s", "serve.scheduler.policy=dfs-weight",
      "serve.kvcache.blocks=500", "serve.kvcache.index=radix", "serve.kvcache.eviction=fifo"},
     "4cec08664b1589488a75d150cdfc882b", "8efa9ac9f5f8465da625af3e9b2ef969", NULL},
    /* #36: a load's blocks go to a tier as one batch, charged one latency
     * and their bytes over the link, not a latency per block. */
    {"chat-host-tier", "chat",
     {"mode=simulate", "duration=60s", "serve.kvcache.tiers=[{kind: host, size: 1GiB}]",
      "serve.kvcache.blocks=600"},
     "8e2244a0cb8da1485c657c23ba888b0f", "f428f5cda9619e696b26dd1a289d6667", NULL},
    {"offline-batch-least-loaded", "offline-batch",
     {"mode=simulate", "ranks.serve=2", "serve.router.policy=least_loaded",
      "serve.engine.chunked_prefill=false", "serve.kvcache.blocks=2000"},
     "5918f41931e0becb0c39e34325202b02", "960ddf5b3e56a056c4f2e4388c0d786e", NULL},
    /* Coupled simulate runs: what an update does to serving (stall, drain,
     * lend, release, abort, flush or versioned cache), pinned with the
     * activation times the engines took (updates.csv). */
    {"quickstart-shadow", "quickstart", {"mode=simulate"},
     "71cab646d412fab410ae7a0a1b142b1b", "46737f08d1f1ec804e3ac65e503cbee2",
     "744a7f68fa1adee1b59d60fa386fac38"},
    {"quickstart-stall", "quickstart", {"mode=simulate", "update.apply=stall"},
     "f87c48baaba5f9d91646134e90cce086", "caf97e59875ac6417cb8236750e2366c",
     "e1b7286eb6b12def3fc88ce200a8cb02"},
    {"quickstart-wait", "quickstart",
     {"mode=simulate", "update.in_flight=wait", "update.on_activate.cache=version"},
     "ca7bded366eb4e3871c1ed6b3d00be63", "1fd20d47f485a298744a743b5b115285",
     "cd2f94cbf25935a286701a28e5068a1a"},
    {"quickstart-abort-keep", "quickstart",
     {"mode=simulate", "update.in_flight=abort", "update.on_activate.cache=keep"},
     "21da89f487c08f64a704384f10dc3e73", "2cd12c97980c3c1d208f63b664c1641a",
     "647b0f76566bcf7d170a2aa33dee9c39"},
    {"quickstart-colocated", "quickstart",
     {"mode=simulate", "update.colocated=true", "serve.kvcache.capacity=1200MiB"},
     "b4037ffdcc9935f5c439e9494b5365f2", "b9d0593696f05dc619864b1fc0547888",
     "8e621ca20755eb5476af1c71b65d29b9"},
    {"quickstart-release", "quickstart",
     {"mode=simulate", "update.colocated=release", "ranks.serve=3",
      "serve.router.policy=least_loaded"},
     "d98dc5a0eba26be3f714d968a171bbb0", "f9485d0db2a69ab2faf2f7178c0ea26b",
     "e80c11931ffd6aa519b3453b49460f43"},
};

/* The digest of a file, as 32 hex digits. */
static void file_digest(const char *path, char text_p[33])
{
    char *data = test_read_file(path);
    cr_assert_not_null(data, "%s: cannot read", path);
    XXH128_hash_t digest = XXH3_128bits(data, strlen(data));
    kvio_hash_format((kvio_hash_t){.low = digest.low64, .high = digest.high64}, text_p);
    free(data);
}

#define NUM_CASES (sizeof(cases) / sizeof(cases[0]))

/* Criterion runs each parameter in a fresh process (another address
 * space), so the parameters are indices into the table, not pointers. */
static size_t case_indices[NUM_CASES];

ParameterizedTestParameters(golden, digests_match)
{
    for (size_t i = 0; i < NUM_CASES; i++)
        case_indices[i] = i;
    return cr_make_param_array(size_t, case_indices, NUM_CASES);
}

ParameterizedTest(size_t *index, golden, digests_match, .timeout = 120)
{
    const golden_case_t *golden = &cases[*index];
    char *dir = test_tmpdir();
    char *file = NULL;
    const char *source = golden->source;
    if (source == NULL) {
        char text[1024];
        snprintf(text, sizeof(text), MOONCAKE_YAML, MOONCAKE_SMALL);
        file = test_write_file(dir, "mooncake.yaml", text);
        source = file;
    }
    size_t num_sets = 0;
    while (num_sets < MAX_SETS && golden->sets[num_sets] != NULL)
        num_sets++;
    kvio_workload_t workload;
    char error[1024];
    cr_assert_eq(kvio_workload_load(source, golden->sets, num_sets, &workload, error,
                                    sizeof(error)),
                 KVIO_OK, "%s: %s", golden->name, error);
    char out[1100];
    snprintf(out, sizeof(out), "%s/out", dir);
    kvio_run_options_t options = {.output_dir = out, .quiet = true, .source = source};
    kvio_run_result_t result;
    cr_assert_eq(kvio_run(&workload, &options, &result, error, sizeof(error)), KVIO_OK, "%s: %s",
                 golden->name, error);
    kvio_workload_free(&workload);
    const char *names[] = {"requests.csv", "iterations.csv", "updates.csv"};
    const char *expected[] = {golden->requests_digest, golden->iterations_digest,
                              golden->updates_digest};
    int num_files = golden->updates_digest != NULL ? 3 : 2;
    char got[3][33] = {"", "", ""};
    for (int f = 0; f < num_files; f++) {
        char path[1200];
        snprintf(path, sizeof(path), "%s/%s", out, names[f]);
        file_digest(path, got[f]);
    }
    for (int f = 0; f < num_files; f++)
        cr_expect_str_eq(got[f], expected[f], "%s: %s changed: {\"%s\", \"%s\", \"%s\"}",
                         golden->name, names[f], got[0], got[1], got[2]);
    test_rmtree(dir);
    free(dir);
    free(file);
}
