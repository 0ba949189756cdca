/* Tests for event traces: the file kvio run --event-trace writes is one
 * JSON array and, line by line, DFTracer-style JSON lines with the Chrome
 * trace fields; one event per iteration; the API escapes strings, bounds
 * request ids and names the ranks; tracing does not change the results. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "kvio/events.h"
#include "tests/helpers.h"

/* Parses every event line ("[" and "]" lines skipped, a trailing comma
 * dropped) as DFTracer's readers do; returns them as a JSON array. */
static json_t *read_lines(const char *path)
{
    char *text = test_read_file(path);
    cr_assert_not_null(text, "no %s", path);
    json_t *events = json_array();
    char *save = NULL;
    size_t number = 0;
    bool opened = false, closed = false;
    for (char *line = strtok_r(text, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save)) {
        number++;
        if (strcmp(line, "[") == 0) {
            cr_assert_eq(number, 1, "'[' is the first line");
            opened = true;
            continue;
        }
        if (strcmp(line, "]") == 0) {
            closed = true;
            continue;
        }
        cr_assert(!closed, "nothing after ']'");
        size_t length = strlen(line);
        if (length > 0 && line[length - 1] == ',')
            line[length - 1] = '\0';
        json_error_t error;
        json_t *event = json_loads(line, 0, &error);
        cr_assert_not_null(event, "line %zu is not JSON: %s", number, error.text);
        json_array_append_new(events, event);
    }
    cr_assert(opened && closed, "framed by '[' and ']'");
    free(text);
    return events;
}

static void assert_complete_event(const json_t *event)
{
    cr_assert(json_is_string(json_object_get(event, "name")));
    cr_assert(json_is_string(json_object_get(event, "cat")));
    cr_assert(json_is_integer(json_object_get(event, "pid")));
    cr_assert(json_is_integer(json_object_get(event, "tid")));
    cr_assert(json_is_integer(json_object_get(event, "ts")));
    cr_assert(json_is_integer(json_object_get(event, "dur")));
    cr_assert_geq(test_json_integer(event, "dur"), 0);
    cr_assert_str_eq(test_json_string(event, "ph"), "X");
    cr_assert(json_is_integer(json_object_get(json_object_get(event, "args"), "rank")));
}

Test(events, run_writes_one_event_per_iteration, .timeout = 60)
{
    char *dir = test_tmpdir();
    test_run_t run = test_kvio(dir, "run", "chat", "--set", "duration=20s", "-o", "out",
                               "--event-trace", "trace.pfw", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    test_run_free(&run);
    char path[1200];
    snprintf(path, sizeof(path), "%s/trace.pfw", dir);
    /* The whole file is one JSON array (Perfetto, chrome://tracing). */
    json_error_t error;
    json_t *array = json_load_file(path, 0, &error);
    cr_assert(json_is_array(array), "not a JSON array: %s (line %d)", error.text, error.line);
    json_t *events = read_lines(path);
    cr_assert_eq(json_array_size(events), json_array_size(array));
    json_decref(array);

    snprintf(path, sizeof(path), "%s/out/summary.json", dir);
    json_t *summary = json_load_file(path, 0, &error);
    cr_assert_not_null(summary);
    json_int_t iterations =
        test_json_integer(summary, "metrics.iterations");
    cr_assert_gt(iterations, 100);
    json_decref(summary);

    json_int_t counted = 0, last_ts = -1;
    size_t index;
    json_t *event;
    json_array_foreach(events, index, event)
    {
        const char *phase = test_json_string(event, "ph");
        if (strcmp(phase, "M") == 0)
            continue;
        assert_complete_event(event);
        if (strcmp(test_json_string(event, "cat"), "iteration") != 0)
            continue;
        counted++;
        json_t *args = json_object_get(event, "args");
        json_int_t batch = test_json_integer(args, "batch_size");
        cr_assert_gt(batch, 0);
        double usage = test_json_number(args, "kv_usage");
        cr_assert(usage >= 0 && usage <= 1, "kv_usage %g", usage);
        cr_assert(json_is_integer(json_object_get(args, "prefill_tokens")));
        cr_assert(json_is_integer(json_object_get(args, "decode_seqs")));
        json_t *ids = json_object_get(args, "request_ids");
        cr_assert(json_is_array(ids));
        cr_assert_eq((json_int_t)json_array_size(ids), batch < 64 ? batch : 64);
        cr_assert_eq(test_json_integer(args, "num_requests"), batch);
        json_int_t ts = test_json_integer(event, "ts");
        cr_assert_geq(ts, last_ts, "one rank's iterations in time order");
        last_ts = ts;
    }
    cr_assert_eq(counted, iterations, "one event per iteration");
    /* The rank and its track are named for the viewers. */
    json_t *last = json_array_get(events, json_array_size(events) - 1);
    cr_assert_str_eq(test_json_string(last, "ph"), "M");
    json_decref(events);
    test_rmtree(dir);
    free(dir);
}

Test(events, tracing_does_not_change_the_results, .timeout = 60)
{
    char *dir = test_tmpdir();
    test_run_t run = test_kvio(dir, "run", "chat", "--set", "duration=20s", "-o", "plain",
                               NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    test_run_free(&run);
    run = test_kvio(dir, "run", "chat", "--set", "duration=20s", "-o", "traced",
                    "--event-trace=traced.pfw", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    test_run_free(&run);
    const char *files[] = {"requests.csv", "iterations.csv"};
    for (size_t i = 0; i < 2; i++) {
        char plain[1200], traced[1200];
        snprintf(plain, sizeof(plain), "%s/plain/%s", dir, files[i]);
        snprintf(traced, sizeof(traced), "%s/traced/%s", dir, files[i]);
        char *a = test_read_file(plain), *b = test_read_file(traced);
        cr_assert(a != NULL && b != NULL);
        cr_assert_str_eq(a, b, "%s differs with tracing on", files[i]);
        free(a);
        free(b);
    }
    /* Off by default: the plain run wrote no trace anywhere. */
    char path[1200];
    snprintf(path, sizeof(path), "%s/plain/trace.pfw", dir);
    struct stat info;
    cr_assert_neq(stat(path, &info), 0);
    test_rmtree(dir);
    free(dir);
}

Test(events, unwritable_trace_is_refused_before_the_run, .timeout = 30)
{
    char *dir = test_tmpdir();
    test_run_t run = test_kvio(dir, "run", "chat", "-o", "out", "--event-trace",
                               "no/such/dir/t.pfw", NULL);
    cr_assert_eq(run.status, 2, "%s", run.err);
    cr_assert(test_contains(run.err, "--event-trace no/such/dir/t.pfw: No such file or directory"),
              "%s", run.err);
    char path[1200];
    snprintf(path, sizeof(path), "%s/out", dir);
    struct stat info;
    cr_assert_neq(stat(path, &info), 0, "no results directory for a refused run");
    test_run_free(&run);
    run = test_kvio(dir, "run", "chat", "--event-trace", NULL);
    cr_assert_eq(run.status, 2);
    cr_assert(test_contains(run.err, "--event-trace needs a file"), "%s", run.err);
    test_run_free(&run);
    test_rmtree(dir);
    free(dir);
}

typedef struct writer_args {
    kvio_event_trace_t *trace;
    uint32_t rank;
} writer_args_t;

static void *write_events(void *argument)
{
    writer_args_t *args = argument;
    for (int i = 0; i < 500; i++)
        kvio_event_trace_tier(args->trace, args->rank, "redis", i % 2, (int64_t)i * 1000000,
                              250000, 4096, NULL, 0);
    return NULL;
}

Test(events, api_events_escape_bound_and_name_ranks, .timeout = 30)
{
    char *dir = test_tmpdir();
    char path[1200];
    snprintf(path, sizeof(path), "%s/api.pfw", dir);
    kvio_event_trace_t *trace = NULL;
    char error[512];
    cr_assert_eq(kvio_event_trace_open(path, KVIO_EVENT_LEVEL_IO, &trace, error, sizeof(error)),
                 KVIO_OK, "%s", error);
    kvio_event_trace_update(trace, 1, 7, "xfer", 1500, 2000000, 16000000000LL);
    uint64_t ids[100];
    for (size_t i = 0; i < 100; i++)
        ids[i] = 1000 + i;
    kvio_event_trace_swap(trace, 2, 1, 5000, 3000, 1 << 20, ids, 100);
    kvio_event_trace_tier(trace, 0, "odd \"tier\"\n\\name", 0, 0, 10, 512, ids, 3);
    /* Two threads write at once: every line stays whole. */
    pthread_t threads[2];
    writer_args_t args[2] = {{trace, 3}, {trace, 4}};
    for (int t = 0; t < 2; t++)
        pthread_create(&threads[t], NULL, write_events, &args[t]);
    for (int t = 0; t < 2; t++)
        pthread_join(threads[t], NULL);
    kvio_event_trace_write(NULL, NULL); /* tracing off: a no-op */
    cr_assert_eq(kvio_event_trace_close(trace), KVIO_OK);

    json_error_t json_error;
    json_t *array = json_load_file(path, 0, &json_error);
    cr_assert(json_is_array(array), "%s", json_error.text);
    json_decref(array);
    json_t *events = read_lines(path);
    json_t *update = json_array_get(events, 0);
    assert_complete_event(update);
    cr_assert_str_eq(test_json_string(update, "cat"), "update");
    cr_assert_str_eq(test_json_string(update, "name"), "xfer");
    cr_assert_eq(test_json_integer(update, "ts"), 1);
    cr_assert_eq(test_json_integer(update, "dur"), 2000);
    json_t *update_args = json_object_get(update, "args");
    cr_assert_eq(test_json_integer(update_args, "version"), 7);
    cr_assert_eq(test_json_integer(update_args, "bytes"), 16000000000LL);
    cr_assert_eq(test_json_integer(update_args, "rank"), 1);
    json_t *swap_args = json_object_get(json_array_get(events, 1), "args");
    cr_assert_eq(json_array_size(json_object_get(swap_args, "request_ids")),
                 KVIO_EVENT_MAX_REQUEST_IDS);
    cr_assert_eq(test_json_integer(swap_args, "num_requests"), 100);
    json_t *tier = json_array_get(events, 2);
    cr_assert_str_eq(test_json_string(tier, "args.tier"),
                     "odd \"tier\"\n\\name");
    cr_assert_str_eq(test_json_string(tier, "name"), "tier_read");
    size_t tier_events = 0, names = 0;
    size_t index;
    json_t *event;
    json_array_foreach(events, index, event)
    {
        const char *cat = test_json_string(event, "cat");
        tier_events += strcmp(cat, "tier") == 0;
        if (strcmp(test_json_string(event, "ph"), "M") == 0) {
            names++;
            cr_assert(json_is_string(json_object_get(json_object_get(event, "args"), "name")));
        }
    }
    cr_assert_eq(tier_events, 1001);
    /* Ranks 0..4 each get a process name and a name per track they used. */
    cr_assert_eq(names, 5 + 5);
    json_decref(events);
    test_rmtree(dir);
    free(dir);
}

/* The same events into path at level (iterations with 40 request ids, a
 * swap and a model-update stage each). */
static void write_sample(const char *path, kvio_event_level_t level, int count)
{
    kvio_event_trace_t *trace = NULL;
    char error[512];
    cr_assert_eq(kvio_event_trace_open(path, level, &trace, error, sizeof(error)), KVIO_OK,
                 "%s", error);
    uint64_t ids[40];
    kvio_event_arg_t args[] = {{"kv_usage", 0.25}, {"batch_size", 40}};
    for (int i = 0; i < count; i++) {
        for (size_t k = 0; k < 40; k++)
            ids[k] = (uint64_t)i * 40 + k;
        kvio_event_t event = {.kind = KVIO_EVENT_ITERATION, .name = "iteration", .rank = 0,
                              .start_ns = (int64_t)i * 1000000, .duration_ns = 900000,
                              .bytes = -1, .request_ids = ids, .num_request_ids = 40,
                              .args = args, .num_args = 2};
        kvio_event_trace_write(trace, &event);
        kvio_event_trace_swap(trace, 0, 1, (int64_t)i * 1000000, 1000, 4096, NULL, 0);
        kvio_event_trace_update(trace, 0, 1, "xfer", (int64_t)i * 1000000, 1000, 1 << 20);
    }
    cr_assert_eq(kvio_event_trace_close(trace), KVIO_OK);
}

/* A .pfw.gz trace is gzip, in several members (whole lines each, written
 * by the background writer), and gunzips to the very bytes the .pfw of
 * the same events holds. */
Test(events, gz_trace_gunzips_to_the_plain_trace, .timeout = 60)
{
    char *dir = test_tmpdir();
    char plain[1200], packed[1200];
    snprintf(plain, sizeof(plain), "%s/t.pfw", dir);
    snprintf(packed, sizeof(packed), "%s/t.pfw.gz", dir);
    write_sample(plain, KVIO_EVENT_LEVEL_IO, 6000);
    write_sample(packed, KVIO_EVENT_LEVEL_IO, 6000);
    char *expected = test_read_file(plain);
    cr_assert_not_null(expected);
    size_t expected_length = strlen(expected);
    cr_assert_gt(expected_length, 2u << 20, "more than one chunk: %zu bytes", expected_length);
    struct stat info;
    cr_assert_eq(stat(packed, &info), 0);
    cr_expect_lt((size_t)info.st_size, expected_length / 4, "compressed: %lld of %zu bytes",
                 (long long)info.st_size, expected_length);
    /* zlib reads the members one after the other, as gunzip does. */
    gzFile file = gzopen(packed, "rb");
    cr_assert_not_null(file);
    char *got = malloc(expected_length + 1);
    cr_assert_not_null(got);
    int read = gzread(file, got, (unsigned)expected_length + 1);
    gzclose(file);
    cr_assert_eq((size_t)read, expected_length);
    cr_assert(memcmp(got, expected, expected_length) == 0, "the same bytes");
    free(got);
    free(expected);
    test_rmtree(dir);
    free(dir);
}

/* --event-trace-level: iterations keeps the iteration events without their
 * request ids; requests keeps the ids; neither writes swaps or model-update
 * stages; io (the default) writes them all. */
Test(events, levels_choose_what_is_traced, .timeout = 30)
{
    static const struct {
        const char *name;
        size_t events; /* complete events of 3 iterations */
        bool ids;
    } cases[] = {{"iterations", 3, false}, {"requests", 3, true}, {"io", 9, true}};
    char *dir = test_tmpdir();
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        kvio_event_level_t level;
        cr_assert_eq(kvio_event_level_parse(cases[c].name, &level), KVIO_OK);
        char path[1200];
        snprintf(path, sizeof(path), "%s/%s.pfw", dir, cases[c].name);
        write_sample(path, level, 3);
        json_t *events = read_lines(path);
        size_t complete = 0, with_ids = 0, index;
        json_t *event;
        json_array_foreach(events, index, event)
        {
            if (strcmp(test_json_string(event, "ph"), "X") != 0)
                continue;
            complete++;
            with_ids += json_object_get(json_object_get(event, "args"), "request_ids") != NULL;
        }
        cr_expect_eq(complete, cases[c].events, "%s: %zu events", cases[c].name, complete);
        cr_expect_eq(with_ids, cases[c].ids ? 3u : 0u, "%s: %zu with ids", cases[c].name,
                     with_ids);
        json_decref(events);
    }
    kvio_event_level_t level;
    cr_expect_eq(kvio_event_level_parse("all", &level), KVIO_ERR_INVALID);
    test_rmtree(dir);
    free(dir);
}

/* A batch's id list is copied from the last one written when it is the
 * same (consecutive iterations mostly run one batch), and so is the start
 * it shares with it; a list that differs in one id, in length, in its
 * first id, or comes back after another is written as given, through the
 * generic event and through an iteration's record (only the ids past the
 * shared start recorded), over many chunks. */
Test(events, repeated_id_lists_are_written_as_given, .timeout = 60)
{
    static const uint64_t lists[][4] = {
        {7, 8, 9, 10},    {7, 8, 9, 10},  {7, 8, 9, 11},      {7, 8, 9, 0},
        {7, 8, 9, 10},    {7, 8, 9, 10},  {7, 123456, 9, 10}, {7, 123456, 9, 10},
        {7, 12, 9, 10},   {5, 12, 9, 10}, {7, 8, 0, 0},       {7, 8, 99999, 10}};
    static const size_t counts[] = {4, 4, 4, 3, 4, 2, 4, 1, 4, 4, 2, 4};
    size_t num_lists = sizeof(counts) / sizeof(counts[0]);
    enum { ROUNDS = 3000 }; /* about 4 MB of records: chunks handed over mid-list */
    char *dir = test_tmpdir();
    for (int way = 0; way < 2; way++) {
        char path[1200];
        snprintf(path, sizeof(path), "%s/t%d.pfw", dir, way);
        kvio_event_trace_t *trace = NULL;
        char error[512];
        cr_assert_eq(kvio_event_trace_open(path, KVIO_EVENT_LEVEL_IO, &trace, error,
                                           sizeof(error)),
                     KVIO_OK, "%s", error);
        for (size_t e = 0; e < num_lists * ROUNDS; e++) {
            const uint64_t *list = lists[e % num_lists];
            size_t count = counts[e % num_lists];
            if (way == 0) {
                kvio_event_t event = {.kind = KVIO_EVENT_ITERATION, .name = "iteration",
                                      .rank = 0, .start_ns = (int64_t)e * 1000,
                                      .duration_ns = 900, .bytes = -1, .request_ids = list,
                                      .num_request_ids = count};
                kvio_event_trace_write(trace, &event);
            } else {
                kvio_event_iteration_t iteration = {
                    .start_ns = (int64_t)e * 1000, .duration_ns = 900,
                    .request_ids = list, .num_request_ids = count};
                kvio_event_trace_iteration(trace, &iteration);
            }
        }
        cr_assert_eq(kvio_event_trace_close(trace), KVIO_OK);
        json_error_t json_error;
        json_t *events = json_load_file(path, 0, &json_error);
        cr_assert_not_null(events, "%s", json_error.text);
        size_t seen = 0;
        for (size_t i = 0; i < json_array_size(events); i++) {
            json_t *args = json_object_get(json_array_get(events, i), "args");
            json_t *ids = json_object_get(args, "request_ids");
            if (ids == NULL)
                continue;
            size_t list = seen % num_lists;
            cr_assert_eq(json_array_size(ids), counts[list], "event %zu", seen);
            for (size_t k = 0; k < counts[list]; k++)
                cr_assert_eq(json_integer_value(json_array_get(ids, k)),
                             (json_int_t)lists[list][k], "way %d, event %zu, id %zu", way,
                             seen, k);
            seen++;
        }
        cr_assert_eq(seen, num_lists * ROUNDS);
        json_decref(events);
    }
    test_rmtree(dir);
    free(dir);
}

/* The iteration event's line template writes the bytes the generic event
 * with the same arguments does, at every level: fractional, whole, zero
 * and large numbers, more ids than are written, none. */
Test(events, iteration_template_writes_the_generic_event, .timeout = 30)
{
    static const struct {
        int64_t start_ns, duration_ns;
        uint64_t batch, prefill, decode;
        double usage;
        uint64_t running, waiting, preempted;
        size_t num_ids;
    } cases[] = {
        {0, 0, 1, 1395, 0, 0.001665, 1, 0, 0, 1},
        {1999, 999, 64, 0, 64, 0.5, 64, 3, 0, 64},
        {123456789012345, 40000000, 100, 16384, 99, 1.0, 100, 12345, 7, 100},
        {5000, -10, 2, 7, 1, 0.0, 2, 0, 0, 0},
        {86400000000000, 1, 3, 4294967296ULL, 2, 0.1234567, 3, 1, 1, 3},
    };
    uint64_t ids[100];
    for (size_t i = 0; i < 100; i++)
        ids[i] = i * 997 + (i % 3 == 0 ? 123456789 : 0);
    char *dir = test_tmpdir();
    const char *levels[] = {"io", "requests", "iterations"};
    for (size_t l = 0; l < 3; l++) {
        kvio_event_level_t level;
        cr_assert_eq(kvio_event_level_parse(levels[l], &level), KVIO_OK);
        char paths[2][1200];
        for (int way = 0; way < 2; way++) {
            snprintf(paths[way], sizeof(paths[way]), "%s/%s_%d.pfw", dir, levels[l], way);
            kvio_event_trace_t *trace = NULL;
            char error[512];
            cr_assert_eq(kvio_event_trace_open(paths[way], level, &trace, error, sizeof(error)),
                         KVIO_OK, "%s", error);
            for (int repeat = 0; repeat < 2; repeat++)
                for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
                    uint32_t rank = (uint32_t)(c % 2);
                    const uint64_t *list = cases[c].num_ids > 0 ? ids + c : NULL;
                    if (way == 0) {
                        kvio_event_iteration_t iteration = {
                            .rank = rank, .start_ns = cases[c].start_ns,
                            .duration_ns = cases[c].duration_ns,
                            .batch_size = cases[c].batch, .prefill_tokens = cases[c].prefill,
                            .decode_seqs = cases[c].decode, .kv_usage = cases[c].usage,
                            .running = cases[c].running, .waiting = cases[c].waiting,
                            .preempted = cases[c].preempted, .request_ids = list,
                            .num_request_ids = cases[c].num_ids};
                        kvio_event_trace_iteration(trace, &iteration);
                        continue;
                    }
                    kvio_event_arg_t args[] = {
                        {"batch_size", (double)cases[c].batch},
                        {"prefill_tokens", (double)cases[c].prefill},
                        {"decode_seqs", (double)cases[c].decode},
                        {"kv_usage", cases[c].usage},
                        {"running", (double)cases[c].running},
                        {"waiting", (double)cases[c].waiting},
                        {"preempted", (double)cases[c].preempted},
                    };
                    kvio_event_t event = {.kind = KVIO_EVENT_ITERATION, .name = "iteration",
                                          .rank = rank, .start_ns = cases[c].start_ns,
                                          .duration_ns = cases[c].duration_ns, .bytes = -1,
                                          .request_ids = list,
                                          .num_request_ids = cases[c].num_ids, .args = args,
                                          .num_args = 7};
                    kvio_event_trace_write(trace, &event);
                }
            kvio_event_trace_iteration(trace, NULL); /* nothing */
            cr_assert_eq(kvio_event_trace_close(trace), KVIO_OK);
        }
        char *template = test_read_file(paths[0]), *generic = test_read_file(paths[1]);
        cr_assert(template != NULL && generic != NULL);
        cr_assert_str_eq(template, generic, "level %s", levels[l]);
        json_t *events = read_lines(paths[0]);
        cr_assert_eq(json_array_size(events), 10 + 2 + 2, "10 events, 2 ranks named");
        json_decref(events);
        free(template);
        free(generic);
    }
    kvio_event_iteration_t none = {0};
    kvio_event_trace_iteration(NULL, &none); /* tracing off: a no-op */
    test_rmtree(dir);
    free(dir);
}

typedef struct iteration_writer {
    kvio_event_trace_t *trace;
    uint32_t rank;
    int count;
} iteration_writer_t;

static void *write_iterations(void *argument)
{
    iteration_writer_t *writer = argument;
    uint64_t ids[40];
    for (int i = 0; i < writer->count; i++) {
        for (size_t k = 0; k < 40; k++)
            ids[k] = (uint64_t)i * 40 + k;
        kvio_event_iteration_t iteration = {
            .rank = writer->rank, .start_ns = (int64_t)i * 1000000, .duration_ns = 900000,
            .batch_size = 40, .kv_usage = 0.25, .request_ids = ids, .num_request_ids = 40};
        kvio_event_trace_iteration(writer->trace, &iteration);
    }
    return NULL;
}

/* Threads that write at once, none of them the one that opened the trace,
 * each many chunks' worth: the file opens with "[", every line is whole,
 * ids are unique, and each thread's events keep their order, their ids
 * increasing. */
Test(events, threads_write_whole_lines_in_their_order, .timeout = 60)
{
    enum { THREADS = 4, PER_THREAD = 5000 };
    char *dir = test_tmpdir();
    char path[1200];
    snprintf(path, sizeof(path), "%s/threads.pfw.gz", dir);
    kvio_event_trace_t *trace = NULL;
    char error[512];
    cr_assert_eq(kvio_event_trace_open(path, KVIO_EVENT_LEVEL_IO, &trace, error, sizeof(error)),
                 KVIO_OK, "%s", error);
    pthread_t threads[THREADS];
    iteration_writer_t writers[THREADS];
    for (int t = 0; t < THREADS; t++) {
        writers[t] = (iteration_writer_t){trace, (uint32_t)t, PER_THREAD};
        cr_assert_eq(pthread_create(&threads[t], NULL, write_iterations, &writers[t]), 0);
    }
    for (int t = 0; t < THREADS; t++)
        pthread_join(threads[t], NULL);
    cr_assert_eq(kvio_event_trace_close(trace), KVIO_OK);

    /* Gunzipped, as DFTracer's readers take a .pfw.gz. */
    char plain[1200];
    snprintf(plain, sizeof(plain), "%s/threads.pfw", dir);
    gzFile in = gzopen(path, "rb");
    FILE *out = fopen(plain, "wb");
    cr_assert(in != NULL && out != NULL);
    char buffer[65536];
    int got;
    size_t total = 0;
    while ((got = gzread(in, buffer, sizeof(buffer))) > 0) {
        fwrite(buffer, 1, (size_t)got, out);
        total += (size_t)got;
    }
    gzclose(in);
    fclose(out);
    cr_assert_gt(total, 4u << 20, "several chunks a thread: %zu bytes", total);
    json_t *events = read_lines(plain);
    size_t count = 0, index;
    json_t *event;
    json_int_t last_id[THREADS], last_ts[THREADS];
    for (int t = 0; t < THREADS; t++)
        last_id[t] = last_ts[t] = -1;
    char *seen = calloc((size_t)THREADS * PER_THREAD * 2, 1);
    cr_assert_not_null(seen);
    json_array_foreach(events, index, event)
    {
        if (strcmp(test_json_string(event, "ph"), "X") != 0)
            continue;
        count++;
        json_int_t id = test_json_integer(event, "id"), ts = test_json_integer(event, "ts");
        json_int_t rank = test_json_integer(event, "pid");
        cr_assert(rank >= 0 && rank < THREADS);
        cr_assert(id >= 0 && id < (json_int_t)THREADS * PER_THREAD * 2, "id %lld",
                  (long long)id);
        cr_assert(!seen[id], "id %lld twice", (long long)id);
        seen[id] = 1;
        if (last_id[rank] >= 0) {
            cr_assert_eq(ts, last_ts[rank] + 1000, "rank %lld in order", (long long)rank);
            cr_assert_gt(id, last_id[rank], "rank %lld's ids increasing", (long long)rank);
        }
        last_id[rank] = id;
        last_ts[rank] = ts;
    }
    cr_assert_eq(count, (size_t)THREADS * PER_THREAD);
    free(seen);
    json_decref(events);
    test_rmtree(dir);
    free(dir);
}

typedef struct crowd_writer {
    kvio_event_trace_t *trace;
    pthread_barrier_t *all_alive;
    uint32_t rank;
} crowd_writer_t;

static void *write_in_a_crowd(void *argument)
{
    crowd_writer_t *writer = argument;
    uint64_t ids[3] = {writer->rank, writer->rank + 1, writer->rank + 2};
    for (int i = 0; i < 40; i++) {
        if (i == 1)
            pthread_barrier_wait(writer->all_alive); /* every thread has its own id now */
        kvio_event_iteration_t iteration = {.rank = writer->rank % 8,
                                            .start_ns = (int64_t)i * 1000000,
                                            .duration_ns = 1000, .batch_size = 3,
                                            .request_ids = ids, .num_request_ids = 3};
        kvio_event_trace_iteration(writer->trace, &iteration);
        kvio_event_trace_tier(writer->trace, writer->rank % 8, "host", i % 2,
                              (int64_t)i * 1000000, 500, 4096, ids, 2);
    }
    return NULL;
}

/* More threads alive at once than have chunks of their own: the rest
 * share one under the lock, and every event of every thread is written
 * whole. */
Test(events, threads_past_their_own_chunks_share_one, .timeout = 60)
{
    enum { THREADS = 80 };
    char *dir = test_tmpdir();
    char path[1200];
    snprintf(path, sizeof(path), "%s/crowd.pfw", dir);
    kvio_event_trace_t *trace = NULL;
    char error[512];
    cr_assert_eq(kvio_event_trace_open(path, KVIO_EVENT_LEVEL_IO, &trace, error, sizeof(error)),
                 KVIO_OK, "%s", error);
    pthread_barrier_t all_alive;
    cr_assert_eq(pthread_barrier_init(&all_alive, NULL, THREADS), 0);
    pthread_t threads[THREADS];
    crowd_writer_t writers[THREADS];
    for (int t = 0; t < THREADS; t++) {
        writers[t] = (crowd_writer_t){trace, &all_alive, (uint32_t)t};
        cr_assert_eq(pthread_create(&threads[t], NULL, write_in_a_crowd, &writers[t]), 0);
    }
    for (int t = 0; t < THREADS; t++)
        pthread_join(threads[t], NULL);
    pthread_barrier_destroy(&all_alive);
    cr_assert_eq(kvio_event_trace_close(trace), KVIO_OK);
    json_t *events = read_lines(path);
    size_t iterations = 0, tiers = 0, index;
    json_t *event;
    json_array_foreach(events, index, event)
    {
        if (strcmp(test_json_string(event, "ph"), "X") != 0)
            continue;
        json_t *ids = json_object_get(json_object_get(event, "args"), "request_ids");
        cr_assert(json_is_array(ids));
        json_int_t first = json_integer_value(json_array_get(ids, 0));
        cr_assert_eq(json_integer_value(json_array_get(ids, 1)), first + 1);
        if (strcmp(test_json_string(event, "cat"), "iteration") == 0) {
            iterations++;
            cr_assert_eq(json_array_size(ids), 3);
            cr_assert_eq(json_integer_value(json_array_get(ids, 2)), first + 2);
        } else {
            tiers++;
            cr_assert_eq(json_array_size(ids), 2);
        }
    }
    cr_assert_eq(iterations, (size_t)THREADS * 40);
    cr_assert_eq(tiers, (size_t)THREADS * 40);
    json_decref(events);
    test_rmtree(dir);
    free(dir);
}
