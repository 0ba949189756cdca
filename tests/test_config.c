/* Tests for the configuration system: every option type parses, bad input
 * gives the right message with line:column, --set overrides are checked like
 * the file, and the dump reads back to the same configuration. */
#include "kvio/config.h"

#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "kvio/engine.h"
#include "kvio/kvcache.h"
#include "kvio/run.h"

typedef struct tier {
    int kind;
    uint64_t size;
    char *url;
} tier_t;

typedef struct kvcache_section {
    int64_t block_size;
    uint64_t capacity;
    kvio_opt_list_t tiers;
} kvcache_section_t;

typedef struct sample_config {
    bool verify;
    int64_t count;
    double ratio;
    char *label;
    int policy;
    uint64_t chunk;
    int64_t interval_ns;
    kvio_dist_t step_time;
    kvio_dist_t lengths;
    kvcache_section_t kvcache;
} sample_config_t;

static const char *const policy_names[] = {"fcfs", "lpm", "pkas", NULL};
static const char *const tier_names[] = {"host", "redis", "file", NULL};

static const kvio_opt_t tier_options[] = {
    {.key = "kind", .type = KVIO_OPT_ENUM, .offset = offsetof(tier_t, kind),
     .values = tier_names, .default_value = "host"},
    {.key = "size", .type = KVIO_OPT_SIZE, .offset = offsetof(tier_t, size),
     .default_value = "1GiB"},
    {.key = "url", .type = KVIO_OPT_STRING, .offset = offsetof(tier_t, url)},
    {.key = NULL},
};

static const kvio_opt_t kvcache_options[] = {
    {.key = "block_size", .type = KVIO_OPT_INT, .offset = offsetof(kvcache_section_t, block_size),
     .default_value = "16", .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 1, .max = 1024},
    {.key = "capacity", .type = KVIO_OPT_SIZE, .offset = offsetof(kvcache_section_t, capacity),
     .default_value = "4GiB", .flags = KVIO_OPT_HAS_MIN, .min = 4096},
    {.key = "tiers", .type = KVIO_OPT_LIST, .offset = offsetof(kvcache_section_t, tiers),
     .options = tier_options, .element_size = sizeof(tier_t)},
    {.key = NULL},
};

static const kvio_opt_t sample_options[] = {
    {.key = "verify", .type = KVIO_OPT_BOOL, .offset = offsetof(sample_config_t, verify),
     .default_value = "false"},
    {.key = "count", .type = KVIO_OPT_INT, .offset = offsetof(sample_config_t, count),
     .default_value = "3", .flags = KVIO_OPT_HAS_MIN, .min = 0},
    {.key = "ratio", .type = KVIO_OPT_DOUBLE, .offset = offsetof(sample_config_t, ratio),
     .default_value = "0.5", .flags = KVIO_OPT_HAS_MIN | KVIO_OPT_HAS_MAX, .min = 0, .max = 1},
    {.key = "label", .type = KVIO_OPT_STRING, .offset = offsetof(sample_config_t, label),
     .default_value = "none"},
    {.key = "policy", .type = KVIO_OPT_ENUM, .offset = offsetof(sample_config_t, policy),
     .values = policy_names, .default_value = "fcfs"},
    {.key = "chunk", .type = KVIO_OPT_SIZE, .offset = offsetof(sample_config_t, chunk),
     .default_value = "16MiB"},
    {.key = "interval", .type = KVIO_OPT_DURATION,
     .offset = offsetof(sample_config_t, interval_ns), .default_value = "1s"},
    {.key = "step_time", .type = KVIO_OPT_DIST, .offset = offsetof(sample_config_t, step_time),
     .unit = KVIO_UNIT_DURATION, .default_value = "{dist: constant, value: 100ms}"},
    {.key = "lengths", .type = KVIO_OPT_DIST, .offset = offsetof(sample_config_t, lengths),
     .default_value = "100"},
    {.key = "kvcache", .type = KVIO_OPT_SECTION, .offset = offsetof(sample_config_t, kvcache),
     .options = kvcache_options},
    {.key = NULL},
};

/* Parses text with overrides and binds it; returns the status and leaves the
 * message in error. */
static kvio_status_t load(const char *text, const char *const *sets, size_t num_sets,
                          sample_config_t *config, char *error, size_t error_len)
{
    kvio_config_doc_t *doc = NULL;
    memset(config, 0, sizeof(*config));
    error[0] = '\0';
    kvio_status_t status = kvio_config_doc_parse(text, strlen(text), "w.yaml", &doc, error,
                                                 error_len);
    for (size_t i = 0; status == KVIO_OK && i < num_sets; i++)
        status = kvio_config_doc_set(doc, sets[i], error, error_len);
    if (status == KVIO_OK)
        status = kvio_config_bind(sample_options, doc, config, error, error_len);
    kvio_config_doc_destroy(doc);
    return status;
}

Test(config, defaults_fill_every_type, .timeout = 10)
{
    sample_config_t config;
    char error[512];
    cr_assert_eq(load("count: 3\n", NULL, 0, &config, error, sizeof(error)), KVIO_OK, "%s", error);
    cr_assert_eq(config.verify, false);
    cr_assert_float_eq(config.ratio, 0.5, 1e-12);
    cr_assert_str_eq(config.label, "none");
    cr_assert_eq(config.policy, 0);
    cr_assert_eq(config.chunk, 16u << 20);
    cr_assert_eq(config.interval_ns, 1000000000);
    cr_assert_eq(config.step_time.kind, KVIO_DIST_CONSTANT);
    cr_assert_float_eq(config.step_time.value, 100e6, 1e-3);
    cr_assert_float_eq(config.lengths.value, 100, 1e-9);
    cr_assert_eq(config.kvcache.block_size, 16);
    cr_assert_eq(config.kvcache.capacity, 4ull << 30);
    cr_assert_eq(config.kvcache.tiers.count, 0);
    kvio_config_free(sample_options, &config);
}

Test(config, every_type_parses, .timeout = 10)
{
    const char *text =
        "verify: yes\n"
        "count: 42\n"
        "ratio: 0.25\n"
        "label: \"chat 8b\"\n"
        "policy: pkas\n"
        "chunk: 512MiB\n"
        "interval: 250ms\n"
        "step_time: {dist: normal, mean: 250ms, stddev: 20ms, min: 1ms}\n"
        "lengths: {dist: empirical, values: [10, 20, 30], weights: [1, 2, 1]}\n"
        "kvcache:\n"
        "  block_size: 32\n"
        "  capacity: 4GB\n"
        "  tiers:\n"
        "    - {kind: host, size: 8GiB}\n"
        "    - kind: redis\n"
        "      url: redis://127.0.0.1:6379\n"
        "      size: 1.5GiB\n";
    sample_config_t config;
    char error[512];
    cr_assert_eq(load(text, NULL, 0, &config, error, sizeof(error)), KVIO_OK, "%s", error);
    cr_assert(config.verify);
    cr_assert_eq(config.count, 42);
    cr_assert_float_eq(config.ratio, 0.25, 1e-12);
    cr_assert_str_eq(config.label, "chat 8b");
    cr_assert_eq(config.policy, 2);
    cr_assert_eq(config.chunk, 512ull << 20);
    cr_assert_eq(config.interval_ns, 250000000);
    cr_assert_eq(config.step_time.kind, KVIO_DIST_NORMAL);
    cr_assert_float_eq(config.step_time.mean, 250e6, 1e-3);
    cr_assert_float_eq(config.step_time.stddev, 20e6, 1e-3);
    cr_assert(config.step_time.has_min);
    cr_assert_float_eq(config.step_time.min, 1e6, 1e-3);
    cr_assert_eq(config.lengths.kind, KVIO_DIST_EMPIRICAL);
    cr_assert_eq(config.lengths.num_values, 3);
    cr_assert_float_eq(config.lengths.values[1], 20, 1e-12);
    cr_assert_eq(config.kvcache.block_size, 32);
    cr_assert_eq(config.kvcache.capacity, 4000000000ull);
    cr_assert_eq(config.kvcache.tiers.count, 2);
    tier_t *tiers = config.kvcache.tiers.items;
    cr_assert_eq(tiers[0].kind, 0);
    cr_assert_eq(tiers[0].size, 8ull << 30);
    cr_assert_null(tiers[0].url);
    cr_assert_eq(tiers[1].kind, 1);
    cr_assert_eq(tiers[1].size, 3ull << 29);
    cr_assert_str_eq(tiers[1].url, "redis://127.0.0.1:6379");
    kvio_config_free(sample_options, &config);
}

Test(config, every_distribution_kind_parses, .timeout = 10)
{
    /* Each text, the kind it must give and one parameter it must carry. */
    static const struct {
        const char *text;
        kvio_dist_kind_t kind;
        size_t offset;
        double value;
    } cases[] = {
        {"lengths: 7\n", KVIO_DIST_CONSTANT, offsetof(kvio_dist_t, value), 7},
        {"lengths: {dist: constant, value: 7}\n", KVIO_DIST_CONSTANT,
         offsetof(kvio_dist_t, value), 7},
        {"lengths: {dist: uniform, low: 1, high: 9}\n", KVIO_DIST_UNIFORM,
         offsetof(kvio_dist_t, high), 9},
        {"lengths: {dist: normal, mean: 5, stddev: 1}\n", KVIO_DIST_NORMAL,
         offsetof(kvio_dist_t, mean), 5},
        {"lengths: {dist: lognormal, mean: 1200, stddev: 900, max: 16384}\n",
         KVIO_DIST_LOGNORMAL, offsetof(kvio_dist_t, max), 16384},
        {"lengths: {dist: exponential, mean: 3}\n", KVIO_DIST_EXPONENTIAL,
         offsetof(kvio_dist_t, mean), 3},
        {"lengths: {dist: gamma, mean: 3, cv: 2}\n", KVIO_DIST_GAMMA, offsetof(kvio_dist_t, cv),
         2},
        {"lengths: {dist: zipf, n: 100, s: 1.1}\n", KVIO_DIST_ZIPF, offsetof(kvio_dist_t, s),
         1.1},
        {"lengths: {dist: empirical, values: [1, 2]}\n", KVIO_DIST_EMPIRICAL,
         offsetof(kvio_dist_t, value), 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        sample_config_t config;
        char error[512];
        cr_assert_eq(load(cases[i].text, NULL, 0, &config, error, sizeof(error)), KVIO_OK,
                     "%s: %s", cases[i].text, error);
        cr_expect_eq(config.lengths.kind, cases[i].kind, "%s", cases[i].text);
        double got;
        memcpy(&got, (const char *)&config.lengths + cases[i].offset, sizeof(got));
        cr_expect_float_eq(got, cases[i].value, 1e-12, "%s", cases[i].text);
        if (cases[i].kind == KVIO_DIST_EMPIRICAL)
            cr_expect(config.lengths.num_values == 2 && config.lengths.values[1] == 2.0);
        kvio_config_free(sample_options, &config);
    }
}

/* A bad input and a fragment its message must contain. */
typedef struct bad_case {
    const char *text;
    const char *set;
    const char *message;
} bad_case_t;

static const bad_case_t bad_cases[] = {
    {"cuont: 3\n", NULL, "w.yaml:1:1: cuont: unknown key (did you mean 'count'?)"},
    {"count: many\n", NULL, "w.yaml:1:8: count: expected an integer, got 'many'"},
    {"count: -1\n", NULL, "w.yaml:1:8: count: -1 is below the minimum 0"},
    {"kvcache:\n  block_size: 0\n", NULL,
     "w.yaml:2:15: kvcache.block_size: 0 is below the minimum 1"},
    {"chunk: 4XB\n", NULL, "w.yaml:1:8: chunk: size '4XB' has an unknown unit 'XB'"},
    {"interval: 250\n", NULL, "w.yaml:1:11: interval: duration '250' needs a unit"},
    {"interval: 3 fortnights\n", NULL, "w.yaml:1:11: interval: duration '3 fortnights' has an unknown unit"},
    {"", NULL, "w.yaml: the file is empty"},
    {"# only a comment\n", NULL, "w.yaml: the file is empty"},
    {"- a\n- b\n", NULL, "w.yaml:1:1: the top level must be a mapping of keys, not a sequence"},
    {"count: 1\ncount: 2\n", NULL, "w.yaml:2:1: duplicate key 'count' (first at line 1)"},
    {"kvcache:\n\tblock_size: 4\n", NULL, "w.yaml:2:1: found character that cannot start any token"},
    {"label: \"unterminated\n", NULL, "w.yaml:2:1: found unexpected end of stream"},
    {"policy: lmp\n", NULL, "w.yaml:1:9: policy: 'lmp' is not one of fcfs, lpm, pkas (did you mean 'lpm'?)"},
    {"verify: maybe\n", NULL, "w.yaml:1:9: verify: expected true or false, got 'maybe'"},
    {"ratio: 1.5\n", NULL, "w.yaml:1:8: ratio: 1.5 is above the maximum 1"},
    {"kvcache: 5\n", NULL, "w.yaml:1:10: kvcache: expected a mapping of keys"},
    {"kvcache:\n  tiers:\n    - {kind: tape}\n", NULL,
     "w.yaml:3:14: kvcache.tiers[0].kind: 'tape' is not one of host, redis, file"},
    {"step_time: {dist: normal, mean: 1s}\n", NULL,
     "w.yaml:1:12: step_time: a normal distribution needs 'stddev'"},
    {"step_time: {dist: poisson, mean: 1s}\n", NULL,
     "w.yaml:1:19: step_time: unknown distribution 'poisson'"},
    {"step_time: {dist: normal, mean: 1s, stddev: 1s, shape: 2}\n", NULL,
     "step_time.shape: unknown key for a normal distribution"},
    {"count: 3\n", "kvcache.blocksize=4",
     "--set kvcache.blocksize=4: kvcache.blocksize: unknown key (did you mean 'block_size'?)"},
    {"count: 3\n", "count=lots", "--set count=lots: count: expected an integer, got 'lots'"},
    {"count: 3\n", "count", "--set count: expected KEY=VALUE"},
    {"count: 3\n", "count.deep=1", "--set count.deep=1: 'deep' is inside a value that is not a mapping"},
    {"count: 3\n", "label=[unclosed", "--set label=[unclosed: bad value"},
    {"a: &x 1\nb: *x\n", NULL, "w.yaml:2:4: aliases (*name) are not supported"},
};

Test(config, bad_inputs_name_line_column_and_key, .timeout = 10)
{
    for (size_t i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
        const bad_case_t *bad = &bad_cases[i];
        sample_config_t config;
        char error[512];
        const char *sets[1] = {bad->set};
        kvio_status_t status = load(bad->text, sets, bad->set ? 1 : 0, &config, error,
                                    sizeof(error));
        cr_expect_eq(status, KVIO_ERR_CONFIG, "case %zu (%s) was accepted", i, bad->text);
        cr_expect(strstr(error, bad->message) != NULL, "case %zu: got '%s', want '%s'", i, error,
                  bad->message);
    }
}

Test(config, set_overrides_values_lists_and_sections, .timeout = 10)
{
    const char *text = "count: 3\nkvcache:\n  tiers:\n    - {kind: host, size: 1GiB}\n";
    const char *sets[] = {"count=9", "kvcache.block_size=64", "kvcache.tiers.0.size=2GiB",
                          "step_time={dist: exponential, mean: 5ms}", "label=it's"};
    sample_config_t config;
    char error[512];
    cr_assert_eq(load(text, sets, 5, &config, error, sizeof(error)), KVIO_OK, "%s", error);
    cr_assert_eq(config.count, 9);
    cr_assert_eq(config.kvcache.block_size, 64);
    cr_assert_eq(((tier_t *)config.kvcache.tiers.items)[0].size, 2ull << 30);
    cr_assert_eq(config.step_time.kind, KVIO_DIST_EXPONENTIAL);
    cr_assert_float_eq(config.step_time.mean, 5e6, 1e-3);
    cr_assert_str_eq(config.label, "it's");
    kvio_config_free(sample_options, &config);
}

Test(config, set_out_of_range_is_checked_like_the_file, .timeout = 10)
{
    const char *sets[] = {"kvcache.block_size=0"};
    sample_config_t config;
    char error[512];
    cr_assert_eq(load("count: 1\n", sets, 1, &config, error, sizeof(error)), KVIO_ERR_CONFIG);
    cr_assert_str_eq(error,
                     "--set kvcache.block_size=0: kvcache.block_size: 0 is below the minimum 1");
}

Test(config, dump_reads_back_to_the_same_config, .timeout = 10)
{
    const char *text = "verify: true\ncount: 5\nchunk: 3MiB\ninterval: 1500us\n"
                       "step_time: {dist: gamma, mean: 2s, cv: 0.5}\n"
                       "kvcache: {tiers: [{kind: file, size: 1000, url: /tmp/x}]}\n";
    sample_config_t first, second;
    char error[512];
    cr_assert_eq(load(text, NULL, 0, &first, error, sizeof(error)), KVIO_OK, "%s", error);
    json_t *dumped = kvio_config_to_json(sample_options, &first);
    char *dumped_text = json_dumps(dumped, JSON_COMPACT | JSON_SORT_KEYS);
    cr_assert_eq(load(dumped_text, NULL, 0, &second, error, sizeof(error)), KVIO_OK,
                 "dump did not read back: %s\n%s", error, dumped_text);
    json_t *again = kvio_config_to_json(sample_options, &second);
    char *again_text = json_dumps(again, JSON_COMPACT | JSON_SORT_KEYS);
    cr_assert_str_eq(dumped_text, again_text);
    cr_assert(strstr(dumped_text, "\"chunk\":\"3MiB\"") != NULL, "%s", dumped_text);
    cr_assert(strstr(dumped_text, "\"interval\":\"1500us\"") != NULL, "%s", dumped_text);
    free(dumped_text);
    free(again_text);
    json_decref(dumped);
    json_decref(again);
    kvio_config_free(sample_options, &first);
    kvio_config_free(sample_options, &second);
}

Test(config, sizes_and_durations_parse_with_units, .timeout = 10)
{
    uint64_t bytes;
    int64_t ns;
    char error[256];
    cr_assert_eq(kvio_parse_size("16384", &bytes, error, sizeof(error)), KVIO_OK);
    cr_assert_eq(bytes, 16384);
    cr_assert_eq(kvio_parse_size("4GiB", &bytes, error, sizeof(error)), KVIO_OK);
    cr_assert_eq(bytes, 4ull << 30);
    cr_assert_eq(kvio_parse_size("2KB", &bytes, error, sizeof(error)), KVIO_OK);
    cr_assert_eq(bytes, 2000);
    cr_assert_eq(kvio_parse_size("-1MiB", &bytes, error, sizeof(error)), KVIO_ERR_CONFIG);
    cr_assert_eq(kvio_parse_duration("2s", &ns, error, sizeof(error)), KVIO_OK);
    cr_assert_eq(ns, 2000000000);
    cr_assert_eq(kvio_parse_duration("1.5h", &ns, error, sizeof(error)), KVIO_OK);
    cr_assert_eq(ns, 5400000000000);
    cr_assert_eq(kvio_parse_duration("100us", &ns, error, sizeof(error)), KVIO_OK);
    cr_assert_eq(ns, 100000);
    char text[32];
    kvio_format_size(3ull << 30, text, sizeof(text));
    cr_assert_str_eq(text, "3GiB");
    kvio_format_duration(250000000, text, sizeof(text));
    cr_assert_str_eq(text, "250ms");
}

Test(config, workload_loads_preset_and_file_with_overrides, .timeout = 10)
{
    kvio_workload_t workload;
    char error[512];
    const char *sets[] = {"duration=5s"};
    cr_assert_eq(kvio_workload_load("quickstart", sets, 1, &workload, error, sizeof(error)),
                 KVIO_OK, "%s", error);
    cr_assert_str_eq(workload.name, "quickstart");
    cr_assert_eq(workload.duration_ns, 5000000000);
    kvio_workload_free(&workload);
    cr_assert_eq(kvio_workload_load("/nonexistent/w.yaml", NULL, 0, &workload, error,
                                    sizeof(error)), KVIO_ERR_NOT_FOUND);
    cr_assert(strstr(error, "/nonexistent/w.yaml: no such file") != NULL, "%s", error);
}

/* Reliability (#22.7): 40,000 levels of nesting in a file (80 KB) or 65,000
 * in a --set value overflowed the stack (SIGSEGV); nesting is bounded and
 * refused with the position. */
Test(config, deep_nesting_is_refused_not_a_crash, .timeout = 30)
{
    size_t levels = 40000;
    char *text = malloc(8 * levels + 64);
    cr_assert_not_null(text);
    size_t at = (size_t)sprintf(text, "seed: ");
    for (size_t i = 0; i < levels; i++)
        at += (size_t)sprintf(text + at, "{a: ");
    at += (size_t)sprintf(text + at, "1");
    for (size_t i = 0; i < levels; i++)
        text[at++] = '}';
    text[at++] = '\n';
    text[at] = '\0';
    kvio_workload_t workload;
    char error[1024];
    cr_assert_eq(kvio_workload_parse(text, "deep.yaml", NULL, 0, &workload, error,
                                     sizeof(error)), KVIO_ERR_CONFIG);
    cr_assert(strstr(error, "deep.yaml:1:") != NULL &&
                  strstr(error, "nested more than 64 levels deep") != NULL, "%s", error);
    memset(text, '[', 65000);
    memcpy(text, "seed=", 5);
    text[65000] = '\0';
    const char *overrides[] = {text};
    cr_assert_eq(kvio_workload_load("chat", overrides, 1, &workload, error, sizeof(error)),
                 KVIO_ERR_CONFIG);
    free(text);
}

/* Reliability (#22.16): validate said ok for eviction: clock (run refused
 * it only after creating the results directory, without a position) and
 * took ranks.runtime: foo. Both are refused at load with file:line:col; the
 * eviction names are the kvcache registry's. */
Test(config, unknown_eviction_and_runtime_are_refused_with_their_position, .timeout = 10)
{
    char evictions[512], eviction_error[600];
    kvio_registry_names(&kvio_evictions, evictions, sizeof(evictions));
    snprintf(eviction_error, sizeof(eviction_error),
             "w.yaml:4:15: serve.kvcache.eviction: 'clock' is not an eviction policy kvio has "
             "(one of %s", evictions);
    const struct {
        const char *text, *expected;
    } cases[] = {
        {"name: x\nserve:\n  kvcache:\n    eviction: clock\n", eviction_error},
        {"name: x\nranks: {runtime: foo}\n",
         "w.yaml:2:18: ranks.runtime: 'foo' is not one of auto, local, mpi"},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        kvio_workload_t workload;
        char error[512] = "";
        cr_assert_eq(kvio_workload_parse(cases[c].text, "w.yaml", NULL, 0, &workload, error,
                                         sizeof(error)), KVIO_ERR_CONFIG, "case %zu", c);
        cr_assert(strstr(error, cases[c].expected) != NULL, "%s", error);
    }
}
