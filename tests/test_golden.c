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
     "204c3dff5756c64c4fa30bf4d381d662", "2da4dd9f0b79219437d6399870718dcf", NULL},
    {"chat", "chat", {"mode=simulate"},
     "9c3724e1af9ec6a9f4b6c87ad1fe70a2", "74c4914479944bf6e161de884b9a96d5", NULL},
    {"code-completion", "code-completion", {"mode=simulate"},
     "d83a4e812f0339ed248be95e90261e38", "7b8dbd49a9f5144ad64c5324535abfa7", NULL},
    {"long-context", "long-context", {"mode=simulate"},
     "709ca143e56b91b216a44ae76050494f", "ff67de79184dfd11521945a9c1c7c09a", NULL},
    {"offline-batch", "offline-batch", {"mode=simulate"},
     "1df1b30eac096300773e1ee05049cbb3", "d4b5bc66394e1a56ecbaba4044c7bf41", NULL},
    {"rag", "rag", {"mode=simulate"},
     "a4793391c3f7574efd356655867f0f9e", "ac131976b66e540c4a77b467351d51d0", NULL},
    {"mooncake", NULL, {NULL},
     "0407991d95a96aba068085c75574eccb", "b344c3da4e9db86aee96a43cd9926c17", NULL},
    /* Small KV caches: eviction, preemption, policies, routers, ranks. */
    {"mooncake-tight", NULL, {"serve.kvcache.blocks=72"},
     "510afb623c18115d52f8645bcf34635f", "3d3b05703ebe841df570d598603d52c0", NULL},
    {"agent-tight", "agent",
     {"mode=simulate", "duration=120s", "serve.kvcache.blocks=3000"},
     "87657a6b6d5af8ba4d9ad90ca1041b1d", "9076ebe4a910efc50f57bd08632e4dcc", NULL},
    {"chat-swap-lfu", "chat",
     {"mode=simulate", "duration=120s", "serve.kvcache.blocks=1100",
      "serve.engine.preemption=swap", "serve.kvcache.eviction=lfu",
      "serve.kvcache.free_order=prepend_unhashed"},
     "5a8c6ebfbe7111719123fdc05b5b7ad8", "dcaaf6ec7863735373dc8f00d7f471c7", NULL},
    {"rag-lpm", "rag",
     {"mode=simulate", "serve.scheduler.policy=lpm", "serve.kvcache.blocks=300"},
     "24c660d5d20624b74d8c7b3b2152d787", "2f64c3d0e5bc98459305d8b2d80c2153", NULL},
    {"chat-dfs-weight", "chat",
     {"mode=simulate", "duration=60s", "serve.scheduler.policy=dfs-weight",
      "serve.kvcache.blocks=500"},
     "9367c20bfb10df063e538917fc9eb209", "6a10402d74263bc3bc961e92abbcb21f", NULL},
    {"chat-pkas", "chat",
     {"mode=simulate", "duration=60s", "serve.scheduler.policy=pkas",
      "serve.kvcache.blocks=500"},
     "e3b971abd42e0219d8ace4d83f637a8a", "56f8c6d2b85bcd0294512b2255b9b6a8", NULL},
    {"agent-priority", "agent",
     {"mode=simulate", "duration=60s", "serve.scheduler.policy=priority",
      "stream.priority={dist: uniform, low: 0, high: 3}", "serve.kvcache.blocks=2500",
      "serve.engine.long_prefill_token_threshold=1024"},
     "8131b96b550ea25c48a829614ce783c0", "10d9ea2398bc70501bf85b872708c8a0", NULL},
    {"long-context-sjf-s3fifo", "long-context",
     {"mode=simulate", "serve.scheduler.policy=sjf", "serve.kvcache.blocks=9000",
      "serve.kvcache.eviction=s3fifo"},
     "2bc7d0eb05107df80d05e06b1b962f22", "f5aac5e4793b2b5c70c27a7b22fee52f", NULL},
    {"chat-prefix-affinity", "chat",
     {"mode=simulate", "duration=60s", "ranks.serve=2", "serve.router.policy=prefix_affinity",
      "serve.kvcache.blocks=800"},
     "3546bf75e65f081af81b6c50cd195fb2", "2563c20915eb929ded8eca16066756be", NULL},
    {"code-completion-kv-cost", "code-completion",
     {"mode=simulate", "ranks.serve=3", "serve.router.policy=kv_cost",
      "serve.kvcache.blocks=500"},
     "2b75119821ed185f777393916bb4454f", "3abc7c1bd9e9c0a3db082da3359c83e9", NULL},
    /* #36: a load's blocks go to a tier as one batch, charged one latency
     * and their bytes over the link, not a latency per block. */
    {"chat-host-tier", "chat",
     {"mode=simulate", "duration=60s", "serve.kvcache.tiers=[{kind: host, size: 1GiB}]",
      "serve.kvcache.blocks=600"},
     "1d52cade2c2ea28a0d362b3a6fb98870", "e6e26a60e4f29f5d84dae87d196543c2", NULL},
    {"offline-batch-least-loaded", "offline-batch",
     {"mode=simulate", "ranks.serve=2", "serve.router.policy=least_loaded",
      "serve.engine.chunked_prefill=false", "serve.kvcache.blocks=2000"},
     "e115583247762c64e63523a8e654832a", "5adef209993e76687853d8dde0bbbdc4", NULL},
    /* Coupled simulate runs: what an update does to serving (stall, drain,
     * lend, release, abort, flush or versioned cache), pinned with the
     * activation times the engines took (updates.csv). */
    {"quickstart-shadow", "quickstart", {"mode=simulate"},
     "bafdf3614c7f24c77ae82a09a8469016", "90cca357fef19fa68fdc814378c416dd",
     "5870b5f593808aca91f0e7db612754de"},
    {"quickstart-stall", "quickstart", {"mode=simulate", "update.apply=stall"},
     "39e032a1c557b0b86052b0eebde79c70", "fad64a85161e16e9d06b5f223b5486e0",
     "bff03539926cef5779e8a7c35425f5a9"},
    {"quickstart-wait", "quickstart",
     {"mode=simulate", "update.in_flight=wait", "update.on_activate.cache=version"},
     "c77c62a4b2210a44950bd6ce100de58d", "33eb77675cd922d9b9cadeba922f9229",
     "85e34c916c0c9c9a0848d9812f8bee89"},
    {"quickstart-abort-keep", "quickstart",
     {"mode=simulate", "update.in_flight=abort", "update.on_activate.cache=keep"},
     "be470b65d2f6fe2a030ec4555b44df83", "b56753202ff70d7914d5c1b378f0e581",
     "43fc3d2745ee1d5088e56171ee076d52"},
    {"quickstart-colocated", "quickstart",
     {"mode=simulate", "update.colocated=true", "serve.kvcache.capacity=1200MiB"},
     "2cdf0c3eff33960a3a846adca4285690", "52d6e79d14a166e98d25851a83a67398",
     "5047a9558a119cbc1bb203ca00c2722c"},
    {"quickstart-release", "quickstart",
     {"mode=simulate", "update.colocated=release", "ranks.serve=3",
      "serve.router.policy=least_loaded"},
     "dd1fd3127a2c70cc4edf8a567ee24ea4", "503078085128e2ac1841ba4b0bb6ea20",
     "b7909ce0c9c69a13b461ae825338474c"},
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
