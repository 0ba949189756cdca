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
     "331e6093b72bd917a7db49903218d0cb", "2494631fdfd837cfbba79b90e86538c5", NULL},
    {"chat", "chat", {"mode=simulate"},
     "eda07fe1e268deaad904c0b1e4acc5ec", "e34206678aa66b5e74ce0a6c1faac8bf", NULL},
    {"code-completion", "code-completion", {"mode=simulate"},
     "3f0dd6d65a1ea5ef9373647d049f4fa9", "d7a2afcc7e835cf32d71f74137ef0fd3", NULL},
    {"long-context", "long-context", {"mode=simulate"},
     "d3058c91d5ce08a80e4718fbdd3ebd12", "e259e45da95ff2177a5bfb357dc80b45", NULL},
    {"offline-batch", "offline-batch", {"mode=simulate"},
     "dc6a83dc1b1fc0eb09d34b336faa8b9b", "c08e37fb7362d21393773f1869dfbeb5", NULL},
    {"rag", "rag", {"mode=simulate"},
     "cad1b9d8efed02444588de28178fbd80", "f04a16a7b77b80d53664e4eb10a38c6f", NULL},
    {"mooncake", NULL, {NULL},
     "1f93598f1f33e94b6bfa92d809a7fa2d", "c3b7446809e46539eaf39e5e3d68b46c", NULL},
    /* Small KV caches: eviction, preemption, policies, routers, ranks. */
    {"mooncake-tight", NULL, {"serve.kvcache.blocks=72"},
     "20d1417f4acfe782fb29d5e370303ccd", "7383b2a249e9eca2e1b873821ea066ae", NULL},
    {"agent-tight", "agent",
     {"mode=simulate", "duration=120s", "serve.kvcache.blocks=3000"},
     "f98ad9d20a696467d20a5a635e599631", "1b878cd4c087e93322e28ac211e88a06", NULL},
    {"chat-swap-lfu", "chat",
     {"mode=simulate", "duration=120s", "serve.kvcache.blocks=1100",
      "serve.engine.preemption=swap", "serve.kvcache.eviction=lfu",
      "serve.kvcache.free_order=prepend_unhashed"},
     "5474e51107d3ca43e93308022d89cd18", "2e9c528c75d605fb97602b5d96f7adfb", NULL},
    {"rag-lpm", "rag",
     {"mode=simulate", "serve.scheduler.policy=lpm", "serve.kvcache.blocks=300"},
     "5f6d81fba3a3f7c51e0bcdd0893e0e91", "72fd3980c068b1d15be28f0cd589c063", NULL},
    {"chat-dfs-weight", "chat",
     {"mode=simulate", "duration=60s", "serve.scheduler.policy=dfs-weight",
      "serve.kvcache.blocks=500"},
     "bf1bc447c0bc3882382ebd9ad2d92736", "666ec5f39a3b0a19784ba4d44c84eecb", NULL},
    {"chat-pkas", "chat",
     {"mode=simulate", "duration=60s", "serve.scheduler.policy=pkas",
      "serve.kvcache.blocks=500"},
     "6a40f70dceadc725c5174c7f730215ce", "5754e4280fbc0ef05f0688072c193bad", NULL},
    {"agent-priority", "agent",
     {"mode=simulate", "duration=60s", "serve.scheduler.policy=priority",
      "stream.priority={dist: uniform, low: 0, high: 3}", "serve.kvcache.blocks=2500",
      "serve.engine.long_prefill_token_threshold=1024"},
     "1335d95507f9550a9b0443fac023e799", "622283c57518c68c2074d6f9b3f976d9", NULL},
    {"long-context-sjf-s3fifo", "long-context",
     {"mode=simulate", "serve.scheduler.policy=sjf", "serve.kvcache.blocks=9000",
      "serve.kvcache.eviction=s3fifo"},
     "a716b3227ccad16363afdec2d3d0482b", "f572870121de71d8fc71d491c45fee0f", NULL},
    {"chat-prefix-affinity", "chat",
     {"mode=simulate", "duration=60s", "ranks.serve=2", "serve.router.policy=prefix_affinity",
      "serve.kvcache.blocks=800"},
     "d6a88c0dce9e6f4c5530a1ec9a296166", "2c6cc7db580da0b57f422d1c748ce88e", NULL},
    {"code-completion-kv-cost", "code-completion",
     {"mode=simulate", "ranks.serve=3", "serve.router.policy=kv_cost",
      "serve.kvcache.blocks=500"},
     "a82cff0d35514f748ab53d8fef63d147", "d18aa1c99d3cb3ddd6b017855d02c339", NULL},
    {"chat-host-tier", "chat",
     {"mode=simulate", "duration=60s", "serve.kvcache.tiers=[{kind: host, size: 1GiB}]",
      "serve.kvcache.blocks=600"},
     "4a94cb8b70c5a1fdb7645bc195962a9e", "23f5706c88d00fcc632ca5db4640b0e6", NULL},
    {"offline-batch-least-loaded", "offline-batch",
     {"mode=simulate", "ranks.serve=2", "serve.router.policy=least_loaded",
      "serve.engine.chunked_prefill=false", "serve.kvcache.blocks=2000"},
     "7d2e6c6c9d9dfbc8229eb562ff4674f4", "2d176bc2a0ecc85e13726886f0ff3d39", NULL},
    /* Coupled simulate runs: what an update does to serving (stall, drain,
     * lend, release, abort, flush or versioned cache), pinned with the
     * activation times the engines took (updates.csv). */
    {"quickstart-shadow", "quickstart", {"mode=simulate"},
     "1a0eae8eafd4e683dbed22a8c1637c8a", "c9a9ed39e2e5f28a1f8cf06682f0b164",
     "fdf51a3504d63c6f452bcd079041cef0"},
    {"quickstart-stall", "quickstart", {"mode=simulate", "update.apply=stall"},
     "81a84c1a6df1fefe2d9e2224a54300f9", "4f7036c480fa566150be2913cf499066",
     "4888aec604eadc34777f74ae96b715d9"},
    {"quickstart-wait", "quickstart",
     {"mode=simulate", "update.in_flight=wait", "update.on_activate.cache=version"},
     "9c7ef28b5b3e23796e5f6ec0daf79a85", "b7dfb9115fbd2dc1ffe571d7661e708a",
     "3259e207847098186aa2b672af728a3e"},
    {"quickstart-abort-keep", "quickstart",
     {"mode=simulate", "update.in_flight=abort", "update.on_activate.cache=keep"},
     "6c98ba6ab79db69b4c7003798289c1a9", "c8c55b3c0eee4275b708694338117d03",
     "87d7efa2c640de5cacd04fce804b784e"},
    {"quickstart-colocated", "quickstart",
     {"mode=simulate", "update.colocated=true", "serve.kvcache.capacity=1200MiB"},
     "26197d4b603a77b43631a154f806880d", "cea97c94510fe62b722ed1469d1c8fb4",
     "7c216d57a52de24f33cd49d2401e4beb"},
    {"quickstart-release", "quickstart",
     {"mode=simulate", "update.colocated=release", "ranks.serve=3",
      "serve.router.policy=least_loaded"},
     "20c7d58183ddde8803c28c21d03cd8b0", "5edd11f958d97fa0efbcef1e33a2569e",
     "d145b880b1308d0bd2ecb5fe02b770b0"},
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
