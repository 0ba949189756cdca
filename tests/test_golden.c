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
     "1ff4b964a6ec044106aa80acfbc89839", "2494631fdfd837cfbba79b90e86538c5", NULL},
    {"chat", "chat", {"mode=simulate"},
     "5d7b7147ac2ce00f3b9e17485768dbee", "4ce53d18f57b4b0641f68d3e5a6bdcdc", NULL},
    {"code-completion", "code-completion", {"mode=simulate"},
     "e3db63cb26b525929868423ca95a4bfb", "d7a2afcc7e835cf32d71f74137ef0fd3", NULL},
    {"long-context", "long-context", {"mode=simulate"},
     "1d0994ceceb5bb388f6cb780d5f7cdaa", "e259e45da95ff2177a5bfb357dc80b45", NULL},
    {"offline-batch", "offline-batch", {"mode=simulate"},
     "be81bf731b3a0c0e2a12028d1eae9f85", "49e8a1b7fa6fc9d8312a071a4a43151f", NULL},
    {"rag", "rag", {"mode=simulate"},
     "69175527d37c4ec5cb05c3ea37fb036c", "f04a16a7b77b80d53664e4eb10a38c6f", NULL},
    {"mooncake", NULL, {NULL},
     "8fdce9f3d778630c0d518582409e0c5b", "c3b7446809e46539eaf39e5e3d68b46c", NULL},
    /* Small KV caches: eviction, preemption, policies, routers, ranks. */
    {"mooncake-tight", NULL, {"serve.kvcache.blocks=72"},
     "c60541c180ab2b7766e6f0156e190250", "7383b2a249e9eca2e1b873821ea066ae", NULL},
    {"agent-tight", "agent",
     {"mode=simulate", "duration=120s", "serve.kvcache.blocks=3000"},
     "68f3d0495d33cc6a6fc78e29a0f9ed54", "6354a96f108d00613f3662f519666ebe", NULL},
    {"chat-swap-lfu", "chat",
     {"mode=simulate", "duration=120s", "serve.kvcache.blocks=1100",
      "serve.engine.preemption=swap", "serve.kvcache.eviction=lfu",
      "serve.kvcache.free_order=prepend_unhashed"},
     "5d4669ed98d2a85efe151a0c205ccad8", "2269302262a82bc0c9f3ff1f9e399be3", NULL},
    {"rag-lpm", "rag",
     {"mode=simulate", "serve.scheduler.policy=lpm", "serve.kvcache.blocks=300"},
     "42c945ddf77b207dac74456b40ea206f", "72fd3980c068b1d15be28f0cd589c063", NULL},
    {"chat-dfs-weight", "chat",
     {"mode=simulate", "duration=60s", "serve.scheduler.policy=dfs-weight",
      "serve.kvcache.blocks=500"},
     "a61aca90d9167e559e6392cd33f3b97f", "781c169ef905053c207323e77745400e", NULL},
    {"chat-pkas", "chat",
     {"mode=simulate", "duration=60s", "serve.scheduler.policy=pkas",
      "serve.kvcache.blocks=500"},
     "06a85c003164f8a0143d08b0bf4594ce", "424b07d3fff2c960429f1c08ad768b89", NULL},
    {"agent-priority", "agent",
     {"mode=simulate", "duration=60s", "serve.scheduler.policy=priority",
      "stream.priority={dist: uniform, low: 0, high: 3}", "serve.kvcache.blocks=2500",
      "serve.engine.long_prefill_token_threshold=1024"},
     "d35fef26aaea426314a6534e14c786c3", "3fe5ba9398b0b362447ac0eddc4904f1", NULL},
    {"long-context-sjf-s3fifo", "long-context",
     {"mode=simulate", "serve.scheduler.policy=sjf", "serve.kvcache.blocks=9000",
      "serve.kvcache.eviction=s3fifo"},
     "0eee6f149215b79ab1474eddb578542c", "990560c48cebf17ba515930e257386db", NULL},
    {"chat-prefix-affinity", "chat",
     {"mode=simulate", "duration=60s", "ranks.serve=2", "serve.router.policy=prefix_affinity",
      "serve.kvcache.blocks=800"},
     "2a8ce28cf1631064c9a1dc901de17703", "1c3bcce0d58d5b9d450cbb0d597f411e", NULL},
    {"code-completion-kv-cost", "code-completion",
     {"mode=simulate", "ranks.serve=3", "serve.router.policy=kv_cost",
      "serve.kvcache.blocks=500"},
     "ceefb0b5ab1a9450031ce5c48871e7b6", "d18aa1c99d3cb3ddd6b017855d02c339", NULL},
    {"chat-host-tier", "chat",
     {"mode=simulate", "duration=60s", "serve.kvcache.tiers=[{kind: host, size: 1GiB}]",
      "serve.kvcache.blocks=600"},
     "40a111fb4d6f21e70c45de579ad566bb", "9353d80434a017b86507aaf87bd3f357", NULL},
    {"offline-batch-least-loaded", "offline-batch",
     {"mode=simulate", "ranks.serve=2", "serve.router.policy=least_loaded",
      "serve.engine.chunked_prefill=false", "serve.kvcache.blocks=2000"},
     "3c9a0b097bf3a5eb803eba99b10b8710", "148a0bdfade48d680dc962b0343dc969", NULL},
    /* Coupled simulate runs: what an update does to serving (stall, drain,
     * lend, release, abort, flush or versioned cache), pinned with the
     * activation times the engines took (updates.csv). */
    {"quickstart-shadow", "quickstart", {"mode=simulate"},
     "44b8bdd76885c98c1cddafabe8f969c8", "9e851c894cadc5a8766015893f719f50",
     "870dc56969939370a61bc2800c574c2e"},
    {"quickstart-stall", "quickstart", {"mode=simulate", "update.apply=stall"},
     "601eb0adcde760eaae619ea45f1b263c", "eb07b38511acd3cdfd6a585d1efc0931",
     "e1c40ba07fce1eacae382f238dcaf10c"},
    {"quickstart-wait", "quickstart",
     {"mode=simulate", "update.in_flight=wait", "update.on_activate.cache=version"},
     "683f0aa7882c06e53fec5b11c951cce9", "f443e85f5934fa0c4f12241bfde45bac",
     "044b0e1f4e0b3e2963f58762bc9b4e91"},
    {"quickstart-abort-keep", "quickstart",
     {"mode=simulate", "update.in_flight=abort", "update.on_activate.cache=keep"},
     "a1263b54fcd749f6442d071bb318001c", "9f9d075e480baf2b86b467cbbd4f35b2",
     "64ff3ddb75962bbbd659c592da968ba3"},
    {"quickstart-colocated", "quickstart",
     {"mode=simulate", "update.colocated=true", "serve.kvcache.capacity=1200MiB"},
     "177205673a45a553518a38f1605783b3", "79f322e3761cc2812faf43343e13b943",
     "d47a928dccf11c8c3f66f022ca2ce115"},
    {"quickstart-release", "quickstart",
     {"mode=simulate", "update.colocated=release", "ranks.serve=3",
      "serve.router.policy=least_loaded"},
     "00899b211ddb485c23b2790f0154986b", "5edd11f958d97fa0efbcef1e33a2569e",
     "e78488381cc1a2b0c840a844dffacd86"},
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
