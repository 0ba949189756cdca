/* Tests for synthetic streams: arrival processes (rate, burstiness, phases,
 * batch), lengths, prefix structure (system prompts, documents with Zipf
 * popularity, sessions that share the whole previous context, mutation),
 * block hashes checked against xxhsum, determinism and configuration errors. */
#include "kvio/run.h"
#include "kvio/stream.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/helpers.h"

#include <xxhash.h>

/* Binds a workload from YAML text and creates its stream: the status, with
 * the message in error_p. */
static kvio_status_t try_stream_from_yaml(const char *yaml, int64_t duration_ns,
                                          kvio_stream_t **stream_p, char error_p[1024])
{
    kvio_config_doc_t *doc = NULL;
    cr_assert_eq(kvio_config_doc_parse(yaml, strlen(yaml), "test", &doc, error_p, 1024),
                 KVIO_OK, "%s", error_p);
    kvio_workload_t workload = {0};
    cr_assert_eq(kvio_config_bind(kvio_workload_options, doc, &workload, error_p, 1024),
                 KVIO_OK, "%s", error_p);
    kvio_config_doc_destroy(doc);
    kvio_status_t status = kvio_stream_create(&workload.stream, (uint64_t)workload.seed,
                                              duration_ns, stream_p, error_p, 1024);
    kvio_workload_free(&workload);
    return status;
}

static kvio_stream_t *stream_from_yaml(const char *yaml, int64_t duration_ns)
{
    char error[1024] = "";
    kvio_stream_t *stream = NULL;
    cr_assert_eq(try_stream_from_yaml(yaml, duration_ns, &stream, error), KVIO_OK, "%s", error);
    return stream;
}

/* Expected hash of bytes, from xxhsum -H2 run on a file the test writes. */
static void xxhsum_bytes(const uint8_t *bytes, size_t length, char hex_p[33])
{
    char *dir = test_tmpdir();
    char path[512], command[600];
    snprintf(path, sizeof(path), "%s/payload", dir);
    FILE *file = fopen(path, "wb");
    cr_assert_not_null(file);
    cr_assert_eq(fwrite(bytes, 1, length, file), length);
    fclose(file);
    snprintf(command, sizeof(command), "xxhsum -H2 '%s'", path);
    FILE *pipe = popen(command, "r");
    cr_assert_not_null(pipe);
    char line[256] = "";
    cr_assert_not_null(fgets(line, sizeof(line), pipe), "xxhsum printed nothing");
    pclose(pipe);
    cr_assert(sscanf(line, "%32s", hex_p) == 1);
    test_rmtree(dir);
    free(dir);
}

static size_t put_u32(uint8_t *out, uint32_t value)
{
    for (int i = 0; i < 4; i++)
        out[i] = (uint8_t)(value >> (8 * i));
    return 4;
}

static size_t put_u64(uint8_t *out, uint64_t value)
{
    for (int i = 0; i < 8; i++)
        out[i] = (uint8_t)(value >> (8 * i));
    return 8;
}

/* Parses 32 hex digits into 16 bytes (the canonical parent form). */
static void hex_to_bytes(const char *hex, uint8_t bytes_p[16])
{
    for (int i = 0; i < 16; i++) {
        unsigned value;
        cr_assert(sscanf(hex + 2 * i, "%2x", &value) == 1);
        bytes_p[i] = (uint8_t)value;
    }
}

static double mean_of(const double *values, size_t count)
{
    double sum = 0;
    for (size_t i = 0; i < count; i++)
        sum += values[i];
    return sum / (double)count;
}

static double cv_of(const double *values, size_t count)
{
    double mean = mean_of(values, count), sum = 0;
    for (size_t i = 0; i < count; i++)
        sum += (values[i] - mean) * (values[i] - mean);
    return sqrt(sum / (double)(count - 1)) / mean;
}

/* Gaps between consecutive arrivals, in seconds. */
static size_t collect_gaps(kvio_stream_t *stream, double *gaps, size_t max)
{
    const kvio_request_t *request;
    int64_t previous = 0;
    size_t count = 0;
    while (kvio_stream_next(stream, &request) == KVIO_OK && request != NULL && count < max) {
        gaps[count++] = (double)(request->arrival_ns - previous) / 1e9;
        cr_assert_geq(request->arrival_ns, previous, "arrivals out of order");
        previous = request->arrival_ns;
    }
    return count;
}

Test(stream, poisson_arrivals_have_the_configured_rate, .timeout = 30)
{
    kvio_stream_t *stream = stream_from_yaml(
        "seed: 7\nstream: {requests: 40000, arrival: {process: poisson, rate: 50}}\n", 0);
    static double gaps[40000];
    size_t count = collect_gaps(stream, gaps, 40000);
    cr_assert_eq(count, 40000);
    cr_assert_float_eq(1.0 / mean_of(gaps, count), 50.0, 1.5, "rate %g",
                       1.0 / mean_of(gaps, count));
    cr_assert_float_eq(cv_of(gaps, count), 1.0, 0.03, "cv %g", cv_of(gaps, count));
    kvio_stream_destroy(stream);
}

Test(stream, gamma_arrivals_have_the_configured_rate_and_cv, .timeout = 30)
{
    kvio_stream_t *stream = stream_from_yaml(
        "seed: 3\nstream: {requests: 200000, arrival: {process: gamma, rate: 20, cv: 3}}\n", 0);
    static double gaps[200000];
    size_t count = collect_gaps(stream, gaps, 200000);
    cr_assert_eq(count, 200000);
    cr_assert_float_eq(1.0 / mean_of(gaps, count), 20.0, 0.8, "rate %g",
                       1.0 / mean_of(gaps, count));
    cr_assert_float_eq(cv_of(gaps, count), 3.0, 0.2, "cv %g", cv_of(gaps, count));
    kvio_stream_destroy(stream);
}

Test(stream, constant_arrivals_are_evenly_spaced, .timeout = 10)
{
    kvio_stream_t *stream = stream_from_yaml(
        "stream: {requests: 100, arrival: {process: constant, rate: 4}}\n", 0);
    const kvio_request_t *request;
    int count = 0;
    while (kvio_stream_next(stream, &request) == KVIO_OK && request != NULL) {
        count++;
        cr_assert_eq(request->arrival_ns, count * 250000000LL, "arrival %d at %lld", count,
                     (long long)request->arrival_ns);
    }
    cr_assert_eq(count, 100);
    kvio_stream_destroy(stream);
}

Test(stream, phases_follow_each_phase_rate_and_end_the_stream, .timeout = 10)
{
    kvio_stream_t *stream = stream_from_yaml(
        "stream:\n  arrival:\n    process: phases\n    phases:\n"
        "      - {duration: 20s, rate: 200}\n      - {duration: 20s, rate: 20, process: gamma, cv: 2}\n"
        "      - {duration: 5s, rate: 0}\n      - {duration: 10s, rate: 50, process: constant}\n",
        0);
    const kvio_request_t *request;
    int counts[4] = {0};
    int64_t last = 0;
    while (kvio_stream_next(stream, &request) == KVIO_OK && request != NULL) {
        int64_t t = request->arrival_ns;
        counts[t < 20000000000LL ? 0 : t < 40000000000LL ? 1 : t < 45000000000LL ? 2 : 3]++;
        last = t;
    }
    cr_assert_float_eq(counts[0], 4000, 250, "phase 1: %d", counts[0]);
    cr_assert_float_eq(counts[1], 400, 120, "phase 2: %d", counts[1]);
    cr_assert_eq(counts[2], 0);
    cr_assert(counts[3] >= 499 && counts[3] <= 500, "phase 4: %d", counts[3]);
    cr_assert_lt(last, 55000000000LL);
    kvio_stream_destroy(stream);
}

Test(stream, batch_puts_every_request_at_time_zero, .timeout = 10)
{
    kvio_stream_t *stream =
        stream_from_yaml("stream: {requests: 300, arrival: {process: batch}}\n", 60000000000LL);
    const kvio_request_t *request;
    int count = 0;
    while (kvio_stream_next(stream, &request) == KVIO_OK && request != NULL) {
        cr_assert_eq(request->arrival_ns, 0);
        cr_assert_eq(request->id, (uint64_t)count);
        count++;
    }
    cr_assert_eq(count, 300);
    kvio_stream_destroy(stream);
}

Test(stream, duration_bounds_a_stream_without_a_request_count, .timeout = 10)
{
    kvio_stream_t *stream =
        stream_from_yaml("stream: {arrival: {process: poisson, rate: 100}}\n", 10000000000LL);
    const kvio_request_t *request;
    int count = 0;
    while (kvio_stream_next(stream, &request) == KVIO_OK && request != NULL) {
        cr_assert_lt(request->arrival_ns, 10000000000LL);
        count++;
    }
    cr_assert_float_eq(count, 1000, 120, "%d requests", count);
    kvio_stream_destroy(stream);
}

Test(stream, rate_counts_every_turn_of_a_session, .timeout = 20)
{
    kvio_stream_t *stream = stream_from_yaml(
        "stream:\n  arrival: {rate: 30}\n"
        "  prefix: {sessions: {turns: 4, think_time: {dist: exponential, mean: 1s}}}\n",
        200000000000LL);
    const kvio_request_t *request;
    int count = 0;
    while (kvio_stream_next(stream, &request) == KVIO_OK && request != NULL)
        count++;
    /* 200 s at 30 requests/s; the last conversations are cut by the end. */
    cr_assert_float_eq(count, 6000, 300, "%d requests", count);
    kvio_stream_destroy(stream);
}

Test(stream, lengths_follow_their_distributions_and_max_tokens_is_the_output_max,
     .timeout = 20)
{
    kvio_stream_t *stream = stream_from_yaml(
        "stream:\n  requests: 50000\n  input_tokens: 1000\n"
        "  output_tokens: {dist: lognormal, mean: 200, stddev: 150, max: 1500}\n"
        "  priority: {dist: uniform, low: 0, high: 3}\n",
        0);
    const kvio_request_t *request;
    double output_sum = 0;
    int count = 0, priorities[4] = {0};
    while (kvio_stream_next(stream, &request) == KVIO_OK && request != NULL) {
        cr_assert_eq(request->input_tokens, 1000);
        cr_assert_eq(request->num_segments, 1);
        cr_assert_eq(request->max_tokens, 1500);
        cr_assert(request->output_tokens >= 1 && request->output_tokens <= 1500);
        cr_assert(request->priority >= 0 && request->priority <= 3);
        priorities[request->priority]++;
        output_sum += request->output_tokens;
        count++;
    }
    cr_assert_eq(count, 50000);
    cr_assert_float_eq(output_sum / count, 200, 8, "mean output %g", output_sum / count);
    cr_assert(priorities[1] > 0 && priorities[2] > 0);
    kvio_stream_destroy(stream);
}

/* Full-block hashes of the request's first num_tokens tokens. */
static size_t request_hashes(const kvio_request_t *request, uint32_t block_size,
                             uint64_t num_tokens, kvio_hash_t *hashes)
{
    size_t count = (size_t)(num_tokens / block_size);
    cr_assert_eq(kvio_request_block_hashes(request, block_size, 0, count, NULL, hashes), KVIO_OK);
    return count;
}

Test(stream, a_turn_begins_with_every_full_block_of_the_previous_turn, .timeout = 30)
{
    kvio_stream_t *stream = stream_from_yaml(
        "seed: 11\nstream:\n  requests: 3000\n  arrival: {rate: 50}\n"
        "  prefix:\n    system_prompts: {count: 5, tokens: 300}\n"
        "    sessions: {turns: {dist: uniform, low: 2, high: 6}, think_time: "
        "{dist: exponential, mean: 2s}}\n",
        0);
    enum { MAX_SESSIONS = 4096, MAX_BLOCKS = 8192 };
    static kvio_request_t *previous[MAX_SESSIONS];
    static kvio_hash_t before[MAX_BLOCKS], after[MAX_BLOCKS];
    const kvio_request_t *request;
    int later_turns = 0, interleaved = 0;
    uint64_t last_session = 0;
    while (kvio_stream_next(stream, &request) == KVIO_OK && request != NULL) {
        if (request->session_id == 0)
            continue;
        cr_assert_lt(request->session_id, MAX_SESSIONS);
        interleaved += last_session != 0 && request->session_id != last_session;
        last_session = request->session_id;
        kvio_request_t *earlier = previous[request->session_id];
        if (earlier != NULL) {
            later_turns++;
            cr_assert_eq(request->turn, earlier->turn + 1);
            cr_assert_geq(request->arrival_ns, earlier->arrival_ns);
            uint64_t context = (uint64_t)earlier->input_tokens + earlier->output_tokens;
            cr_assert_gt(request->input_tokens, context);
            for (uint32_t block_size = 16; block_size <= 512; block_size *= 32) {
                /* The previous prompt and its output, as full blocks. */
                size_t count = request_hashes(earlier, block_size, context, before);
                cr_assert_lt(count, MAX_BLOCKS);
                size_t mine = request_hashes(request, block_size, request->input_tokens, after);
                cr_assert_geq(mine, count);
                for (size_t b = 0; b < count; b++)
                    cr_assert(kvio_hash_equal(before[b], after[b]),
                              "session %llu turn %u block %zu (size %u) differs",
                              (unsigned long long)request->session_id, request->turn, b,
                              block_size);
            }
            kvio_request_destroy(earlier);
        }
        cr_assert_eq(kvio_request_clone(request, &previous[request->session_id]), KVIO_OK);
    }
    cr_assert_gt(later_turns, 1000);
    cr_assert_gt(interleaved, 1000, "sessions should interleave");
    for (int i = 0; i < MAX_SESSIONS; i++)
        kvio_request_destroy(previous[i]);
    kvio_stream_destroy(stream);
}

Test(stream, mutation_changes_every_block_from_the_rewrite_on, .timeout = 20)
{
    kvio_stream_t *stream = stream_from_yaml(
        "stream:\n  requests: 200\n  input_tokens: 1000\n  output_tokens: 50\n"
        "  prefix:\n    sessions: {turns: 3, user_tokens: 40, think_time: 100ms}\n"
        "    mutation: {probability: 1, position: 100, position_unit: tokens, tokens: 5}\n",
        0);
    static kvio_request_t *previous[1024];
    kvio_hash_t before[128], after[128];
    const kvio_request_t *request;
    int checked = 0;
    while (kvio_stream_next(stream, &request) == KVIO_OK && request != NULL) {
        cr_assert_lt(request->session_id, 1024);
        kvio_request_t *earlier = previous[request->session_id];
        if (earlier != NULL) {
            /* The context keeps its length: previous + output + 40 new. */
            cr_assert_eq(request->input_tokens, earlier->input_tokens + 50 + 40);
            size_t count = request_hashes(earlier, 16, earlier->input_tokens, before);
            request_hashes(request, 16, request->input_tokens, after);
            /* Tokens 100..104 were rewritten: blocks 0-5 (tokens 0-95) stay. */
            for (size_t b = 0; b < count; b++)
                cr_assert_eq(kvio_hash_equal(before[b], after[b]), b < 6, "block %zu", b);
            checked++;
            kvio_request_destroy(earlier);
        }
        cr_assert_eq(kvio_request_clone(request, &previous[request->session_id]), KVIO_OK);
    }
    cr_assert_gt(checked, 100);
    for (int i = 0; i < 1024; i++)
        kvio_request_destroy(previous[i]);
    kvio_stream_destroy(stream);
}

Test(stream, documents_are_shared_with_zipf_popularity, .timeout = 30)
{
    kvio_stream_t *stream = stream_from_yaml(
        "seed: 5\nstream:\n  requests: 40000\n  input_tokens: 100\n"
        "  prefix: {documents: {count: 50, zipf: 1.0, per_request: 2, tokens: 256}}\n",
        0);
    double harmonic = 0;
    for (int k = 1; k <= 50; k++)
        harmonic += 1.0 / k;
    int first_counts[50] = {0};
    const kvio_request_t *request;
    kvio_hash_t hashes[64];
    kvio_hash_t first_block_of[50];
    bool seen[50] = {false};
    int count = 0;
    while (kvio_stream_next(stream, &request) == KVIO_OK && request != NULL) {
        cr_assert_eq(request->num_segments, 3);
        uint64_t first = request->segments[0].content_id & 0xffffffffu;
        uint64_t second = request->segments[1].content_id & 0xffffffffu;
        cr_assert_neq(first, second, "documents of a request are distinct");
        cr_assert_lt(first, 50);
        first_counts[first]++;
        /* The same document gives the same blocks in any request. */
        request_hashes(request, 16, 256, hashes);
        if (seen[first])
            cr_assert(kvio_hash_equal(first_block_of[first], hashes[15]));
        first_block_of[first] = hashes[15];
        seen[first] = true;
        count++;
    }
    cr_assert_eq(count, 40000);
    /* P(rank k) = k^-1 / H_50 for the first draw. */
    for (int k = 0; k < 4; k++) {
        double expected = 40000.0 / (k + 1) / harmonic;
        cr_assert_float_eq(first_counts[k], expected, expected * 0.08 + 30,
                           "document %d drawn %d times, expected %.0f", k, first_counts[k],
                           expected);
    }
    kvio_stream_destroy(stream);
}

Test(stream, system_prompts_are_shared_and_first, .timeout = 10)
{
    kvio_stream_t *stream = stream_from_yaml(
        "stream:\n  requests: 500\n  input_tokens: 2000\n"
        "  prefix: {system_prompts: {count: 1, tokens: 640}}\n",
        0);
    const kvio_request_t *request;
    kvio_hash_t hashes[200], first[41];
    bool have_first = false;
    while (kvio_stream_next(stream, &request) == KVIO_OK && request != NULL) {
        cr_assert_eq(request->input_tokens, 2000);
        size_t count = request_hashes(request, 16, 2000, hashes);
        cr_assert_eq(count, 125);
        if (have_first) {
            for (int b = 0; b < 40; b++)
                cr_assert(kvio_hash_equal(first[b], hashes[b]));
            /* Block 40 starts the request's unique suffix. */
            cr_assert(!kvio_hash_equal(first[40], hashes[40]));
        }
        memcpy(first, hashes, sizeof(first));
        have_first = true;
    }
    kvio_stream_destroy(stream);
}

Test(stream, block_hashes_match_xxhsum_over_the_documented_layout, .timeout = 20)
{
    /* Prompt: 10 tokens of content 7 (from 0), 20 of content 9 (from 5);
     * output: content 11. Block size 16 over prompt + 2 output tokens. */
    kvio_segment_t segments[] = {{7, 0, 10}, {9, 5, 20}};
    kvio_request_t request = {.input_tokens = 30, .output_tokens = 2, .num_segments = 2,
                              .segments = segments, .output_content_id = 11};
    kvio_hash_t hashes[2];
    cr_assert_eq(kvio_request_block_hashes(&request, 16, 0, 2, NULL, hashes), KVIO_OK);
    uint8_t bytes[16 + 3 * 16] = {0};
    size_t length = 16;
    length += put_u64(bytes + length, 7);
    length += put_u32(bytes + length, 0);
    length += put_u32(bytes + length, 10);
    length += put_u64(bytes + length, 9);
    length += put_u32(bytes + length, 5);
    length += put_u32(bytes + length, 6);
    char expected[33], actual[33];
    xxhsum_bytes(bytes, length, expected);
    kvio_hash_format(hashes[0], actual);
    cr_assert_str_eq(actual, expected);
    /* Block 1: parent, then (9, 11, 14) and (11, 0, 2). */
    hex_to_bytes(expected, bytes);
    length = 16;
    length += put_u64(bytes + length, 9);
    length += put_u32(bytes + length, 11);
    length += put_u32(bytes + length, 14);
    length += put_u64(bytes + length, 11);
    length += put_u32(bytes + length, 0);
    length += put_u32(bytes + length, 2);
    xxhsum_bytes(bytes, length, expected);
    kvio_hash_format(hashes[1], actual);
    cr_assert_str_eq(actual, expected);
    /* Starting at block 1 with block 0 as parent gives the same hash. */
    kvio_hash_t again;
    cr_assert_eq(kvio_request_block_hashes(&request, 16, 1, 1, &hashes[0], &again), KVIO_OK);
    cr_assert(kvio_hash_equal(again, hashes[1]));
    /* Blocks past prompt + output are refused. */
    cr_assert_eq(kvio_request_block_hashes(&request, 16, 0, 3, NULL, hashes), KVIO_ERR_INVALID);
    cr_assert_eq(kvio_request_block_hashes(&request, 0, 0, 1, NULL, hashes), KVIO_ERR_INVALID);
}

/* Marsaglia's xorshift64: test values of every magnitude. */
static uint64_t xorshift(uint64_t *state)
{
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    return *state;
}

Test(stream, trace_block_hashes_match_xxh3_over_the_documented_layout, .timeout = 20)
{
    /* parent's canonical bytes, u64 trace hash id, u32 index in the trace
     * block: against xxhsum once, then against the library's XXH3-128 for
     * parents, ids and indices of every size (the chain computes it from
     * words, not bytes). */
    uint8_t bytes[28] = {0};
    put_u64(bytes + 16, 12345);
    put_u32(bytes + 24, 3);
    char expected[33], actual[33];
    xxhsum_bytes(bytes, sizeof(bytes), expected);
    kvio_hash_format(kvio_hash_trace_block(NULL, 12345, 3), actual);
    cr_assert_str_eq(actual, expected);
    uint64_t state = 0x9e3779b97f4a7c15ull;
    for (int round = 0; round < 2000; round++) {
        uint64_t values[4];
        for (int v = 0; v < 4; v++)
            values[v] = xorshift(&state) >> (round % 64); /* small and large values */
        kvio_hash_t parent = {.low = values[0], .high = values[1]};
        uint32_t first = (uint32_t)(values[3] >> 32);
        kvio_hash_t chain[3];
        kvio_hash_trace_chain(round % 2 ? &parent : NULL, values[2], first, 3, chain);
        kvio_hash_t previous = parent;
        for (int i = 0; i < 3; i++) {
            if (i > 0 || round % 2)
                kvio_hash_to_bytes(previous, bytes);
            else
                memset(bytes, 0, 16);
            put_u64(bytes + 16, values[2]);
            put_u32(bytes + 24, first + (uint32_t)i);
            XXH128_hash_t reference = XXH3_128bits(bytes, sizeof(bytes));
            cr_assert(chain[i].low == reference.low64 && chain[i].high == reference.high64,
                      "round %d block %d", round, i);
            cr_assert(kvio_hash_equal(chain[i], kvio_hash_trace_block(i > 0 || round % 2
                                                                          ? &previous
                                                                          : NULL,
                                                                      values[2],
                                                                      first + (uint32_t)i)));
            previous = chain[i];
        }
    }
}

/* A block inside one content (one run) is hashed from words in registers:
 * the same value as XXH3-128 over its 32 bytes (parent, content id,
 * offset, length), for parents and fields of every size. */
Test(stream, one_run_block_hashes_are_xxh3_of_their_bytes, .timeout = 60)
{
    uint64_t state = 0x2545f4914f6cdd1dull;
    for (int round = 0; round < 2000; round++) {
        uint64_t values[5];
        for (int v = 0; v < 5; v++)
            values[v] = xorshift(&state) >> (round % 64);
        kvio_hash_t parent = {.low = values[0], .high = values[1]};
        kvio_hash_run_t run = {.content_id = values[2], .offset = (uint32_t)values[3],
                               .length = (uint32_t)values[4]};
        uint8_t bytes[32] = {0};
        if (round % 2)
            kvio_hash_to_bytes(parent, bytes);
        put_u64(bytes + 16, run.content_id);
        put_u32(bytes + 24, run.offset);
        put_u32(bytes + 28, run.length);
        XXH128_hash_t reference = XXH3_128bits(bytes, sizeof(bytes));
        kvio_hash_t hash = kvio_hash_runs(round % 2 ? &parent : NULL, &run, 1);
        cr_assert(hash.low == reference.low64 && hash.high == reference.high64, "round %d",
                  round);
    }
}

/* #23: chains hashed side by side (two lanes, a lane taking the next chain
 * when its own ends) give what each block's own hash function gives: spans
 * of trace blocks (indices stepping by one), of one-run blocks (offsets
 * stepping by the block's length), blocks of several runs, empty spans,
 * empty chains, and chains of unequal lengths. */
Test(stream, chains_hashed_side_by_side_match_each_block_hashed_alone, .timeout = 60)
{
    enum { CHAINS = 7, MAX_SPANS = 6, MAX_BLOCKS = 200 };
    static const kvio_hash_run_t two_runs[2] = {{.content_id = 5, .offset = 10, .length = 6},
                                                {.content_id = 6, .offset = 0, .length = 10}};
    static const kvio_hash_span_t spans[CHAINS][MAX_SPANS] = {
        {{.kind = KVIO_HASH_SPAN_TRACE, .count = 31, .id = 1ull << 40, .first = 1},
         {.kind = KVIO_HASH_SPAN_TRACE, .count = 32, .id = 77, .first = 0},
         {.kind = KVIO_HASH_SPAN_RUNS, .count = 1, .runs = two_runs, .num_runs = 2},
         {.kind = KVIO_HASH_SPAN_RUN, .count = 40, .id = 9, .first = 16, .length = 16}},
        {{.kind = KVIO_HASH_SPAN_RUN, .count = 0, .id = 3, .first = 0, .length = 16}},
        {{.kind = KVIO_HASH_SPAN_RUNS, .count = 1, .runs = two_runs, .num_runs = 2},
         {.kind = KVIO_HASH_SPAN_RUNS, .count = 1, .runs = two_runs + 1, .num_runs = 1}},
        {{.kind = KVIO_HASH_SPAN_RUN, .count = 150, .id = UINT64_MAX, .first = 0, .length = 32}},
        {{.kind = KVIO_HASH_SPAN_TRACE, .count = 1, .id = 5, .first = 31},
         {.kind = KVIO_HASH_SPAN_RUN, .count = 0, .id = 3, .first = 0, .length = 16},
         {.kind = KVIO_HASH_SPAN_TRACE, .count = 3, .id = 6, .first = 0}},
        {{.kind = KVIO_HASH_SPAN_RUN, .count = 7, .id = 12, .first = 1u << 31, .length = 64},
         {.kind = KVIO_HASH_SPAN_TRACE, .count = 64, .id = 13, .first = 0}},
        {{.kind = KVIO_HASH_SPAN_TRACE, .count = 2, .id = 14, .first = 7}},
    };
    static const size_t num_spans[CHAINS] = {4, 1, 2, 1, 3, 2, 0};
    kvio_hash_t together[CHAINS][MAX_BLOCKS];
    kvio_hash_chain_t chains[CHAINS];
    for (size_t c = 0; c < CHAINS; c++)
        chains[c] = (kvio_hash_chain_t){
            .parent = {.low = c % 2 ? 0x1234 : 0, .high = c % 2 ? 5 : 0},
            .spans = spans[c], .num_spans = num_spans[c], .hashes_p = together[c]};
    kvio_hash_chains(chains, CHAINS);
    for (size_t c = 0; c < CHAINS; c++) {
        kvio_hash_t previous = chains[c].parent;
        size_t block = 0;
        for (size_t s = 0; s < num_spans[c]; s++) {
            const kvio_hash_span_t *span = &spans[c][s];
            for (uint32_t k = 0; k < span->count; k++, block++) {
                kvio_hash_run_t run = {.content_id = span->id,
                                       .offset = span->first + k * span->length,
                                       .length = span->length};
                kvio_hash_t alone =
                    span->kind == KVIO_HASH_SPAN_TRACE
                        ? kvio_hash_trace_block(&previous, span->id, span->first + k)
                    : span->kind == KVIO_HASH_SPAN_RUN
                        ? kvio_hash_runs(&previous, &run, 1)
                        : kvio_hash_runs(&previous, span->runs, span->num_runs);
                cr_assert(kvio_hash_equal(together[c][block], alone), "chain %zu block %zu", c,
                          block);
                previous = alone;
            }
        }
    }
}

/* #23: requests hashed together (the simulator hashes a request beside the
 * ones dispatched after it) get the hashes each gets alone: Mooncake-like
 * trace requests of many lengths, salted or not, asked for their prompt
 * and output, part of the prompt or nothing; a trace whose blocks are not
 * a multiple of the engine's; synthetic requests, with blocks of up to
 * four runs and offsets that wrap past 2^32; more spans and runs than fit
 * on the stack; more requests than are hashed in one group. */
Test(stream, requests_hashed_together_get_the_hashes_each_gets_alone, .timeout = 20)
{
    enum { REQUESTS = 22, BLOCK = 16, SHORT_SEGMENTS = 300 };
    uint64_t state = 0x2545f4914f6cdd1dull;
    uint64_t ids[REQUESTS][16];
    static uint64_t many_ids[SHORT_SEGMENTS];
    kvio_segment_t segment = {.content_id = 99, .offset = 0, .tokens = 700};
    kvio_segment_t segments[3] = {{.content_id = 1, .offset = 0, .tokens = 40},
                                  {.content_id = 2, .offset = 5, .tokens = 3},
                                  {.content_id = 3, .offset = 100, .tokens = 500}};
    /* Offsets that wrap past 2^32 inside one content. */
    kvio_segment_t wrapping = {.content_id = 8, .offset = UINT32_MAX - 40, .tokens = 200};
    static kvio_segment_t short_segments[SHORT_SEGMENTS];
    for (size_t i = 0; i < SHORT_SEGMENTS; i++) {
        short_segments[i] = (kvio_segment_t){.content_id = 1000 + i, .offset = (uint32_t)i,
                                             .tokens = 5};
        many_ids[i] = xorshift(&state);
    }
    kvio_request_t requests[REQUESTS];
    const kvio_request_t *pointers[REQUESTS];
    size_t counts[REQUESTS];
    kvio_hash_t *together[REQUESTS];
    for (size_t r = 0; r < REQUESTS; r++) {
        for (size_t i = 0; i < 16; i++)
            ids[r][i] = xorshift(&state);
        uint32_t input = 1 + (uint32_t)(xorshift(&state) % 7000);
        requests[r] = (kvio_request_t){
            .id = r, .input_tokens = input, .output_tokens = 1 + (uint32_t)(r * 37 % 300),
            .trace_block_tokens = r == 5 ? 100 : 512, .trace_hash_ids = ids[r],
            .num_trace_hash_ids = 16, .cache_salt = r % 3 == 0 ? kvio_cache_salt("t", 1) : 0};
        if (r == 5)
            requests[r].input_tokens = 1500; /* 15 trace blocks of 100 */
        if (r == 7) {
            requests[r] = (kvio_request_t){.id = r, .input_tokens = 700, .output_tokens = 40,
                                           .num_segments = 1, .segments = &segment};
        }
        if (r == 12) /* salted, with blocks of two and three runs */
            requests[r] = (kvio_request_t){.id = r, .input_tokens = 543, .output_tokens = 70,
                                           .num_segments = 3, .segments = segments,
                                           .cache_salt = kvio_cache_salt("s", 1),
                                           .output_content_id = 4242};
        if (r == 19) /* blocks of three and four runs, more runs than the stack holds */
            requests[r] = (kvio_request_t){.id = r, .input_tokens = 5 * SHORT_SEGMENTS,
                                           .output_tokens = 9, .num_segments = SHORT_SEGMENTS,
                                           .segments = short_segments};
        if (r == 20) /* one trace block per engine block: more spans than the stack holds */
            requests[r] = (kvio_request_t){.id = r, .input_tokens = BLOCK * SHORT_SEGMENTS,
                                           .output_tokens = 3, .trace_block_tokens = BLOCK,
                                           .trace_hash_ids = many_ids,
                                           .num_trace_hash_ids = SHORT_SEGMENTS};
        if (r == 21)
            requests[r] = (kvio_request_t){.id = r, .input_tokens = 200, .output_tokens = 16,
                                           .num_segments = 1, .segments = &wrapping};
        size_t all = ((size_t)requests[r].input_tokens + requests[r].output_tokens) / BLOCK;
        /* Nothing, half the prompt (a trace's, a synthetic one's), or all. */
        counts[r] = r == 4 ? 0 : r == 9 || r == 19 ? requests[r].input_tokens / BLOCK / 2 : all;
        pointers[r] = &requests[r];
        together[r] = calloc(all + 1, sizeof(kvio_hash_t));
        cr_assert_not_null(together[r]);
    }
    cr_assert_eq(kvio_request_block_hashes_many(pointers, BLOCK, counts, together, REQUESTS),
                 KVIO_OK);
    for (size_t r = 0; r < REQUESTS; r++) {
        kvio_hash_t *alone = calloc(counts[r] + 1, sizeof(kvio_hash_t));
        cr_assert_not_null(alone);
        cr_assert_eq(kvio_request_block_hashes(&requests[r], BLOCK, 0, counts[r], NULL, alone),
                     KVIO_OK);
        for (size_t i = 0; i < counts[r]; i++)
            cr_assert(kvio_hash_equal(together[r][i], alone[i]), "request %zu block %zu", r, i);
        free(alone);
    }
    /* Blocks past the output are refused, as alone, before anything is
     * written (the bad request is in the second group of eight). */
    memset(together[0], 0, sizeof(kvio_hash_t));
    counts[10] = ((size_t)requests[10].input_tokens + requests[10].output_tokens) / BLOCK + 1;
    cr_assert_eq(kvio_request_block_hashes_many(pointers, BLOCK, counts, together, 11),
                 KVIO_ERR_INVALID);
    cr_assert(together[0][0].low == 0 && together[0][0].high == 0);
    for (size_t r = 0; r < REQUESTS; r++)
        free(together[r]);
}

/* The whole stream exported in kvio format, as a malloc'd string. */
/* #21: vLLM's cache_salt. The salt is the first block's parent, so equal
 * prompts with different salts share no block, equal salts share all, and
 * hashing from a later block on with its parent gives the same chain. */
Test(stream, a_cache_salt_keeps_equal_prompts_apart_and_chains_from_the_salt, .timeout = 10)
{
    kvio_segment_t segment = {.content_id = 7, .offset = 0, .tokens = 64};
    kvio_request_t plain = {.input_tokens = 64, .output_tokens = 1, .num_segments = 1,
                            .segments = &segment};
    kvio_request_t tenant_a = plain, tenant_a_again = plain, tenant_b = plain;
    tenant_a.cache_salt = tenant_a_again.cache_salt = kvio_cache_salt("tenant-a", 8);
    tenant_b.cache_salt = kvio_cache_salt("tenant-b", 8);
    cr_assert_neq(tenant_a.cache_salt, 0);
    cr_assert_lt(tenant_a.cache_salt, 1ull << 63, "fits a JSON integer");
    cr_assert_neq(tenant_a.cache_salt, tenant_b.cache_salt);
    kvio_hash_t hashes[4][4];
    const kvio_request_t *requests[4] = {&plain, &tenant_a, &tenant_a_again, &tenant_b};
    for (size_t r = 0; r < 4; r++)
        request_hashes(requests[r], 16, 64, hashes[r]);
    for (size_t i = 0; i < 4; i++) {
        cr_assert(kvio_hash_equal(hashes[1][i], hashes[2][i]), "block %zu: same salt", i);
        cr_assert(!kvio_hash_equal(hashes[0][i], hashes[1][i]), "block %zu: salt vs none", i);
        cr_assert(!kvio_hash_equal(hashes[1][i], hashes[3][i]), "block %zu: a vs b", i);
    }
    kvio_hash_t later[2];
    cr_assert_eq(kvio_request_block_hashes(&tenant_a, 16, 2, 2, &hashes[1][1], later), KVIO_OK);
    cr_assert(kvio_hash_equal(later[0], hashes[1][2]) &&
              kvio_hash_equal(later[1], hashes[1][3]));
}

/* stream.cache_salts: N tenants, one per conversation, every turn of it
 * salted alike; 0 leaves requests unsalted. */
Test(stream, cache_salts_give_each_conversation_one_of_n_tenants, .timeout = 20)
{
    kvio_stream_t *stream = stream_from_yaml(
        "seed: 3\nstream:\n  requests: 2000\n  arrival: {rate: 50}\n  cache_salts: 3\n"
        "  prefix:\n    sessions: {turns: {dist: uniform, low: 1, high: 4}}\n",
        0);
    uint64_t salts[8] = {0}, session_salt[4096] = {0};
    size_t num_salts = 0, turns_checked = 0;
    const kvio_request_t *request;
    while (kvio_stream_next(stream, &request) == KVIO_OK && request != NULL) {
        cr_assert_neq(request->cache_salt, 0);
        size_t s = 0;
        while (s < num_salts && salts[s] != request->cache_salt)
            s++;
        if (s == num_salts) {
            cr_assert_lt(num_salts, 3, "a fourth salt");
            salts[num_salts++] = request->cache_salt;
        }
        if (request->session_id == 0 || request->session_id >= 4096)
            continue;
        if (request->turn == 0) {
            session_salt[request->session_id] = request->cache_salt;
        } else {
            cr_assert_eq(request->cache_salt, session_salt[request->session_id]);
            turns_checked++;
        }
    }
    kvio_stream_destroy(stream);
    cr_assert_eq(num_salts, 3);
    cr_assert_gt(turns_checked, 100);
    cr_assert_eq(salts[0] == kvio_cache_salt("tenant-1", 8) ||
                     salts[0] == kvio_cache_salt("tenant-2", 8) ||
                     salts[0] == kvio_cache_salt("tenant-3", 8),
                 true, "tenants are named tenant-K");
    stream = stream_from_yaml("seed: 3\nstream: {requests: 50, arrival: {rate: 50}}\n", 0);
    while (kvio_stream_next(stream, &request) == KVIO_OK && request != NULL)
        cr_assert_eq(request->cache_salt, 0);
    kvio_stream_destroy(stream);
}

static char *export_text(const char *yaml, kvio_export_format_t format)
{
    kvio_stream_t *stream = stream_from_yaml(yaml, 0);
    char *text = NULL;
    size_t length = 0;
    FILE *out = open_memstream(&text, &length);
    cr_assert_not_null(out);
    uint64_t count = 0;
    char error[256];
    cr_assert_eq(kvio_stream_export(stream, out, format, &count, error, sizeof(error)), KVIO_OK,
                 "%s", error);
    fclose(out);
    kvio_stream_destroy(stream);
    cr_assert_gt(count, 0);
    return text;
}

static const char chat_yaml[] =
    "stream:\n  requests: 2000\n  arrival: {process: gamma, rate: 30, cv: 2}\n"
    "  priority: {dist: uniform, low: 0, high: 2}\n"
    "  prefix:\n    system_prompts: {count: 4, tokens: {dist: uniform, low: 200, high: 900}}\n"
    "    documents: {count: 20, per_request: 2}\n"
    "    sessions: {turns: {dist: uniform, low: 1, high: 5}}\n"
    "    mutation: {probability: 0.3}\n";

Test(stream, the_same_seed_gives_a_byte_identical_export, .timeout = 20)
{
    char with_seed[sizeof(chat_yaml) + 16];
    snprintf(with_seed, sizeof(with_seed), "seed: 9\n%s", chat_yaml);
    char *first = export_text(with_seed, KVIO_EXPORT_KVIO);
    char *second = export_text(with_seed, KVIO_EXPORT_KVIO);
    cr_assert_str_eq(first, second);
    snprintf(with_seed, sizeof(with_seed), "seed: 10\n%s", chat_yaml);
    char *other = export_text(with_seed, KVIO_EXPORT_KVIO);
    cr_assert_str_neq(first, other);
    free(first);
    free(second);
    free(other);
}

Test(stream, unbounded_or_empty_configurations_are_refused, .timeout = 10)
{
    const char *cases[][2] = {
        {"stream: {arrival: {rate: 5}}\n", "unbounded"},
        {"stream: {arrival: {process: phases}}\n", "phases"},
        {"stream: {arrival: {process: batch}}\n", "batch"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        kvio_config_doc_t *doc = NULL;
        char error[512] = "";
        cr_assert_eq(kvio_config_doc_parse(cases[i][0], strlen(cases[i][0]), "t", &doc, error,
                                           sizeof(error)),
                     KVIO_OK);
        kvio_workload_t workload = {0};
        cr_assert_eq(kvio_config_bind(kvio_workload_options, doc, &workload, error,
                                      sizeof(error)),
                     KVIO_OK, "%s", error);
        kvio_config_doc_destroy(doc);
        kvio_stream_t *stream = NULL;
        cr_assert_eq(kvio_stream_create(&workload.stream, 1, 0, &stream, error, sizeof(error)),
                     KVIO_ERR_CONFIG, "case %zu", i);
        cr_assert(test_contains(error, cases[i][1]), "case %zu: %s", i, error);
        kvio_workload_free(&workload);
    }
}

Test(stream, bad_stream_values_cite_file_line_and_column, .timeout = 10)
{
    char *dir = test_tmpdir();
    const char *cases[][2] = {
        {"stream:\n  arrival: {rate: -1}\n", "w.yaml:2:19: stream.arrival.rate"},
        {"stream:\n  arrival:\n    process: poison\n", "did you mean 'poisson'"},
        {"stream:\n  prefix:\n    sessions: {turn: 3}\n", "stream.prefix.sessions.turn"},
        {"stream:\n  trace: {format: csv}\n", "stream.trace.format"},
        {"stream:\n  input_tokens: {dist: lognormal, mean: -4, stddev: 1}\n",
         "stream.input_tokens"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *path = test_write_file(dir, "w.yaml", cases[i][0]);
        kvio_workload_t workload;
        char error[1024] = "";
        cr_assert_eq(kvio_workload_load(path, NULL, 0, &workload, error, sizeof(error)),
                     KVIO_ERR_CONFIG, "case %zu", i);
        cr_assert(test_contains(error, cases[i][1]), "case %zu: %s", i, error);
        cr_assert(test_contains(error, "w.yaml:"), "case %zu: %s", i, error);
        free(path);
    }
    test_rmtree(dir);
    free(dir);
}

/* stream.users (MLPerf Storage kv-cache.py's users): each user sends its
 * next turn think_time after its answer, and nothing before it. */
Test(stream, a_closed_loop_user_waits_for_its_answer_then_thinks, .timeout = 20)
{
    kvio_stream_t *stream = stream_from_yaml(
        "stream:\n  users: 3\n  input_tokens: 1000\n  output_tokens: 50\n"
        "  prefix:\n    sessions: {turns: 2, user_tokens: 40, think_time: 100ms}\n",
        60000000000ll);
    cr_assert(kvio_stream_closed_loop(stream));
    /* Each user starts a think time in: three first turns at 100 ms. */
    const kvio_request_t *request;
    uint64_t ids[3];
    for (int u = 0; u < 3; u++) {
        cr_assert_eq(kvio_stream_due_ns(stream), 100000000ll);
        cr_assert_eq(kvio_stream_next(stream, &request), KVIO_OK);
        cr_assert_not_null(request);
        cr_assert_eq(request->turn, 0);
        cr_assert_eq(request->arrival_ns, 100000000ll);
        ids[u] = request->id;
    }
    /* Every user waits: nothing is due, and the stream has not ended. */
    cr_assert_eq(kvio_stream_next(stream, &request), KVIO_OK);
    cr_assert_null(request);
    cr_assert_eq(kvio_stream_due_ns(stream), INT64_MAX);
    /* An id the stream does not wait for changes nothing. */
    kvio_stream_finished(stream, 999, 1000000000ll);
    cr_assert_eq(kvio_stream_due_ns(stream), INT64_MAX);
    /* The second user's answer at 2 s: its next turn at 2.1 s, whose prompt
     * holds the first turn and its answer. */
    kvio_stream_finished(stream, ids[1], 2000000000ll);
    cr_assert_eq(kvio_stream_due_ns(stream), 2100000000ll);
    cr_assert_eq(kvio_stream_next(stream, &request), KVIO_OK);
    cr_assert_not_null(request);
    cr_assert_eq(request->turn, 1);
    cr_assert_eq(request->input_tokens, 1000 + 50 + 40);
    cr_assert_eq(request->arrival_ns, 2100000000ll);
    uint64_t second = request->id;
    /* Its conversation had two turns: after this answer the user starts a
     * new conversation. */
    kvio_stream_finished(stream, second, 3000000000ll);
    cr_assert_eq(kvio_stream_next(stream, &request), KVIO_OK);
    cr_assert_not_null(request);
    cr_assert_eq(request->turn, 0);
    cr_assert_eq(request->arrival_ns, 3100000000ll);
    uint64_t fresh = request->id;
    /* A turn due past the run's end is never made: once the last user is
     * answered too late, the stream ends. */
    kvio_stream_finished(stream, ids[0], 59950000000ll);
    kvio_stream_finished(stream, ids[2], 59950000000ll);
    kvio_stream_finished(stream, fresh, 59950000000ll);
    cr_assert_eq(kvio_stream_next(stream, &request), KVIO_OK);
    cr_assert_null(request);
    cr_assert_eq(kvio_stream_due_ns(stream), -1);
    kvio_stream_destroy(stream);
}

Test(stream, closed_loop_users_need_the_synthetic_stream, .timeout = 60)
{
    char error[1024] = "";
    kvio_stream_t *stream = NULL;
    cr_assert_eq(try_stream_from_yaml("stream:\n  users: 4\n  trace: {path: /nonexistent.jsonl}\n",
                                      0, &stream, error),
                 KVIO_ERR_CONFIG);
    cr_assert(strstr(error, "stream.users") != NULL, "%s", error);
}
