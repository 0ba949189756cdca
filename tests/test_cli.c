/* Tests for the kvio command as a user runs it: exit status (0 success,
 * 1 run failed, 2 usage or input error) and messages of each command. */
#include <criterion/criterion.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <jansson.h>
#include <math.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvio/clock.h"
#include "kvio/run.h"
#include "kvio/redis.h"
#include "tests/helpers.h"

Test(cli, version_and_help, .timeout = 20)
{
    test_run_t run = test_kvio(NULL, "--version", NULL);
    cr_assert_eq(run.status, 0);
    cr_assert(test_contains(run.out, "kvio " KVIO_VERSION), "%s", run.out);
    test_run_free(&run);
    run = test_kvio(NULL, "--help", NULL);
    cr_assert_eq(run.status, 0);
    cr_assert(test_contains(run.out, "usage: kvio"));
    cr_assert(test_contains(run.out, "validate"));
    test_run_free(&run);
    const char *commands[] = {"run", "validate", "list"};
    for (size_t i = 0; i < 3; i++) {
        run = test_kvio(NULL, commands[i], "--help", NULL);
        cr_assert_eq(run.status, 0, "%s --help", commands[i]);
        cr_assert(test_contains(run.out, "usage: kvio"), "%s", run.out);
        test_run_free(&run);
    }
}

/* Lines of text and the widest, in columns (UTF-8 continuation bytes take
 * none). */
static void measure_lines(const char *text, size_t *lines_p, size_t *widest_p)
{
    size_t lines = 0, widest = 0, width = 0;
    for (const unsigned char *c = (const unsigned char *)text; *c != '\0'; c++) {
        if (*c == '\n') {
            lines++;
            widest = width > widest ? width : widest;
            width = 0;
        } else {
            width += (*c & 0xc0) != 0x80;
        }
    }
    *lines_p = lines;
    *widest_p = widest;
}

/* #21: `run --help` was 179 lines up to 336 columns. It now shows the top
 * level with one line per section, in 80 columns; `--help SECTION` lists
 * that section's keys; an unknown section exits 2 naming the sections. */
Test(cli, run_help_fits_80_columns_and_opens_sections, .timeout = 20)
{
    test_run_t run = test_kvio(NULL, "run", "--help", NULL);
    cr_assert_eq(run.status, 0);
    size_t lines, widest;
    measure_lines(run.out, &lines, &widest);
    cr_expect_leq(lines, 70, "%s", run.out);
    cr_expect_leq(widest, 80, "%s", run.out);
    cr_expect(test_contains(run.out, "serve.*"), "%s", run.out);
    cr_expect(!test_contains(run.out, "serve.kvcache.index"), "%s", run.out);
    test_run_free(&run);
    const char *sections[] = {"ranks", "model", "gpu", "device", "cost", "serve", "slo",
                              "train", "weight_sync", "update", "stream"};
    for (size_t i = 0; i < sizeof(sections) / sizeof(sections[0]); i++) {
        run = test_kvio(NULL, "run", "--help", sections[i], NULL);
        cr_assert_eq(run.status, 0, "--help %s", sections[i]);
        measure_lines(run.out, &lines, &widest);
        cr_expect_leq(widest, 80, "--help %s: %s", sections[i], run.out);
        test_run_free(&run);
    }
    run = test_kvio(NULL, "validate", "--help", "serve.kvcache.index", NULL);
    cr_assert_eq(run.status, 0);
    cr_expect(test_contains(run.out, "serve.kvcache.index"), "%s", run.out);
    cr_expect(test_contains(run.out, "one of hash|radix"), "%s", run.out);
    test_run_free(&run);
    run = test_kvio(NULL, "run", "chat", "--help", NULL);
    cr_assert_eq(run.status, 0, "a workload before --help is the workload: %s", run.err);
    cr_expect(test_contains(run.out, "serve.*"), "%s", run.out);
    test_run_free(&run);
    run = test_kvio(NULL, "run", "--help", "serve.kvcach", NULL);
    cr_assert_eq(run.status, 2);
    cr_expect(test_contains(run.err, "no workload key or section 'serve.kvcach'"), "%s",
              run.err);
    test_run_free(&run);
}

Test(cli, usage_errors_exit_2, .timeout = 20)
{
    test_run_t run = test_kvio(NULL, "frobnicate", NULL);
    cr_assert_eq(run.status, 2);
    cr_assert(test_contains(run.err, "unknown command 'frobnicate'"), "%s", run.err);
    test_run_free(&run);
    run = test_kvio(NULL, NULL);
    cr_assert_eq(run.status, 2);
    test_run_free(&run);
    run = test_kvio(NULL, "run", "--bogus", NULL);
    cr_assert_eq(run.status, 2);
    cr_assert(test_contains(run.err, "unknown option '--bogus'"), "%s", run.err);
    test_run_free(&run);
    run = test_kvio(NULL, "validate", NULL);
    cr_assert_eq(run.status, 2);
    test_run_free(&run);
    run = test_kvio(NULL, "run", "--set", NULL);
    cr_assert_eq(run.status, 2);
    test_run_free(&run);
}

/* Every command reads its options one way (getopt_long): a value as
 * --name=VALUE or --name VALUE (-cVALUE or -c VALUE), options before or
 * after the operands, "--" before an operand; an unknown option exits 2
 * naming it and the command. Each row runs in fresh directories, so files
 * it writes (-o out) print the same. option NULL: a command with no value
 * option (only the unknown option is checked). */
typedef struct spelling_case {
    const char *command;
    const char *option; /* "--name" or "-c" */
    const char *value;
    const char *rest[8]; /* the other arguments, NULL-terminated */
} spelling_case_t;

static const spelling_case_t spelling_cases[] = {
    {"run", "--set", "duration=2s", {"chat", "-o", "out", "--allow-invalid"}},
    {"run", "--output", "out", {"chat", "--set", "duration=2s", "--allow-invalid"}},
    {"run", "-o", "out", {"chat", "--set", "duration=2s", "--allow-invalid"}},
    {"compare", "--vary", "serve.scheduler.policy=fcfs,lpm",
     {"chat", "--set", "duration=2s", "-o", "out"}},
    {"compare", "--repeat", "2",
     {"chat", "--set", "duration=2s", "--vary", "serve.scheduler.policy=fcfs,lpm", "-o",
      "out"}},
    {"validate", "--set", "warmup=5s", {"chat", "--dump"}},
    {"list", NULL, NULL, {NULL}},
    {"stream", "--set", "stream.requests=20", {"chat", "-o", "-"}},
    {"stream", "--trace", KVIO_SOURCE_DIR "/tests/fixtures/mooncake_small.jsonl", {"--stats"}},
    /* CSV: the JSON's host block (load, free memory) differs run to run. */
    {"cachesim", "--capacity", "10,100",
     {KVIO_SOURCE_DIR "/tests/fixtures/mooncake_small.jsonl", "--csv"}},
    {"cachesim", "-o", "-",
     {KVIO_SOURCE_DIR "/tests/fixtures/mooncake_small.jsonl", "--csv"}},
    {"report", "--out", "out", {KVIO_SOURCE_DIR "/tests/fixtures/report/run-lpm"}},
    {"cost", "--model", "llama3-70b", {"--prefill", "128", "--json"}},
    {"cost", "--tp", "4", {"--model", "llama3-70b", "--decode", "8", "--context", "100"}},
    {"fit", NULL, NULL, {NULL}},
};

/* kvio COMMAND with the option (joined: --name=VALUE / -cVALUE; else two
 * arguments) before or after the row's other arguments, in a fresh
 * directory. */
static test_run_t run_spelling(const spelling_case_t *row, bool joined, bool option_first)
{
    const char *argv[24];
    char joined_text[512];
    size_t argc = 0, option_at = 2;
    argv[argc++] = test_kvio_binary();
    argv[argc++] = row->command;
    for (size_t i = 0; row->rest[i] != NULL; i++)
        argv[argc++] = row->rest[i];
    if (!option_first)
        option_at = argc;
    size_t inserted = joined ? 1 : 2;
    memmove(&argv[option_at + inserted], &argv[option_at], (argc - option_at) * sizeof(argv[0]));
    argc += inserted;
    if (joined) {
        snprintf(joined_text, sizeof(joined_text), "%s%s%s", row->option,
                 row->option[1] == '-' ? "=" : "", row->value);
        argv[option_at] = joined_text;
    } else {
        argv[option_at] = row->option;
        argv[option_at + 1] = row->value;
    }
    argv[argc] = NULL;
    char *dir = test_tmpdir();
    test_run_t run = test_exec(dir, argv);
    test_rmtree(dir);
    free(dir);
    return run;
}

Test(cli, every_option_takes_its_value_either_way_and_unknown_ones_exit_2, .timeout = 180)
{
    for (size_t i = 0; i < sizeof(spelling_cases) / sizeof(spelling_cases[0]); i++) {
        const spelling_case_t *row = &spelling_cases[i];
        if (row->option != NULL) {
            test_run_t first = run_spelling(row, false, true);
            cr_assert_eq(first.status, 0, "kvio %s %s %s ...: %s", row->command, row->option,
                         row->value, first.err);
            cr_assert_neq(first.out[0], '\0', "kvio %s %s: no output", row->command,
                          row->option);
            for (int form = 1; form < 4; form++) {
                bool joined = form & 1, option_first = form < 2;
                test_run_t other = run_spelling(row, joined, option_first);
                cr_assert_eq(other.status, 0, "kvio %s %s (%s, option %s): %s", row->command,
                             row->option, joined ? "joined" : "two arguments",
                             option_first ? "first" : "last", other.err);
                cr_expect_str_eq(other.out, first.out, "kvio %s %s (%s, option %s)",
                                 row->command, row->option, joined ? "joined" : "two arguments",
                                 option_first ? "first" : "last");
                test_run_free(&other);
            }
            test_run_free(&first);
            /* The option last, without its value. */
            const char *argv[24] = {test_kvio_binary(), row->command};
            size_t argc = 2;
            for (size_t a = 0; row->rest[a] != NULL; a++)
                argv[argc++] = row->rest[a];
            argv[argc++] = row->option;
            argv[argc] = NULL;
            test_run_t missing = test_exec(NULL, argv);
            char expected[128];
            snprintf(expected, sizeof(expected), "kvio %s: %s needs ", row->command, row->option);
            cr_expect_eq(missing.status, 2, "kvio %s ... %s", row->command, row->option);
            cr_expect(test_contains(missing.err, expected), "%s", missing.err);
            test_run_free(&missing);
        }
        test_run_t run = test_kvio(NULL, row->command, "--no-such-option", NULL);
        char expected[160];
        snprintf(expected, sizeof(expected),
                 "kvio %s: unknown option '--no-such-option' (see kvio %s --help)", row->command,
                 row->command);
        cr_expect_eq(run.status, 2, "kvio %s --no-such-option: %d", row->command, run.status);
        cr_expect(test_contains(run.err, expected), "%s", run.err);
        test_run_free(&run);
    }
}

/* What getopt_long adds, said plainly: a value given to a flag, an
 * ambiguous prefix, a short option unknown; "--" makes what follows
 * operands; -v and -q still work after the command. */
Test(cli, option_errors_name_the_option_and_the_command, .timeout = 30)
{
    static const struct {
        const char *args[6];
        const char *message;
    } cases[] = {
        {{"cost", "--json=yes"}, "kvio cost: --json takes no value (see kvio cost --help)"},
        {{"stream", "--st"}, "kvio stream: ambiguous option '--st' (could be --stats, --strict, "
                             "--start)"},
        {{"report", "-x"}, "kvio report: unknown option '-x' (see kvio report --help)"},
        {{"run", "--modle=x"}, "kvio run: unknown option '--modle' (see kvio run --help)"},
        {{"validate", "--force", "chat"}, "kvio validate: unknown option '--force'"},
        {{"list", "extra"}, "kvio list: unexpected argument 'extra'"},
        {{"--bogus"}, "kvio: unknown option '--bogus' (see kvio --help)"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *argv[8] = {test_kvio_binary()};
        for (size_t a = 0; cases[i].args[a] != NULL; a++)
            argv[a + 1] = cases[i].args[a];
        test_run_t run = test_exec(NULL, argv);
        cr_expect_eq(run.status, 2, "%s: %d", cases[i].message, run.status);
        cr_expect(test_contains(run.err, cases[i].message), "%s", run.err);
        test_run_free(&run);
    }
    test_run_t run = test_kvio(NULL, "validate", "--set", "warmup=5s", "--", "chat", NULL);
    cr_expect_eq(run.status, 0, "%s", run.err);
    cr_expect(test_contains(run.out, "chat: ok"), "%s", run.out);
    test_run_free(&run);
    run = test_kvio(NULL, "-vv", "validate", "chat", "-q", "--set=warmup=5s", NULL);
    cr_expect_eq(run.status, 0, "%s", run.err);
    test_run_free(&run);
    run = test_kvio(NULL, "report", "--ou", "x", NULL); /* --out and --output: one option */
    cr_expect_eq(run.status, 2);
    cr_expect(test_contains(run.err, "which results?"), "%s", run.err);
    test_run_free(&run);
}

/* The quickstart is a 25 s emulate run with GiB-sized buffers: the tests
 * shorten it and shrink its memory so they stay quick on a busy machine. */
#define SMALL_MODEL "model.preset=llama3.2-1b"
#define SMALL_KV "serve.kvcache.capacity=512MiB"
#define SMALL_WEIGHTS "train.bytes=32MiB"

Test(cli, run_quickstart_writes_results, .timeout = 90)
{
    char *dir = test_tmpdir();
    /* No file: the quickstart preset (shortened; it is a 25 s emulate run). */
    test_run_t run = test_kvio(dir, "run", "--set", "duration=2s", "--set", SMALL_KV, "--set",
                               SMALL_WEIGHTS, "--set", SMALL_MODEL, "--allow-invalid", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    cr_assert(test_contains(run.out, "results/quickstart-"), "%s", run.out);
    test_run_free(&run);

    /* A checkpoint every 2 steps (0.8 s), so the 2 s run has updates too. */
    run = test_kvio(dir, "run", "quickstart", "-o", "out", "--set", "duration=2s", "--set",
                    SMALL_KV, "--set", SMALL_WEIGHTS, "--set", SMALL_MODEL, "--set",
                    "train.checkpoint.every_n_steps=2", "--allow-invalid", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    char path[1100];
    snprintf(path, sizeof(path), "%s/out/summary.json", dir);
    char *summary = test_read_file(path);
    cr_assert_not_null(summary);
    cr_assert(test_contains(summary, "\"complete\": true"), "%s", summary);
    /* The coupled run: requests served and model updates activated. */
    const char *completed = strstr(summary, "\"completed\": ");
    const char *activated = strstr(summary, "\"updates_activated\": ");
    cr_assert(completed != NULL && activated != NULL, "%s", summary);
    cr_expect_gt(strtod(completed + strlen("\"completed\": "), NULL), 0);
    cr_expect_geq(strtod(activated + strlen("\"updates_activated\": "), NULL), 1);
    free(summary);
    test_run_free(&run);

    run = test_kvio(dir, "run", "quickstart", "-o", "out", NULL);
    cr_assert_eq(run.status, 2);
    cr_assert(test_contains(run.err, "out: results directory exists (use --force"), "%s",
              run.err);
    test_run_free(&run);
    run = test_kvio(dir, "run", "quickstart", "-o", "out", "--force", "--set", "duration=2s",
                    "--set", SMALL_KV, "--set", SMALL_WEIGHTS, "--set", SMALL_MODEL,
                    "--allow-invalid", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    test_run_free(&run);
    test_rmtree(dir);
    free(dir);
}

Test(cli, bad_workload_exits_2_with_file_line_and_key, .timeout = 20)
{
    char *dir = test_tmpdir();
    char *file = test_write_file(dir, "w.yaml", "name: x\nmode: simulte\n");
    test_run_t run = test_kvio(dir, "run", file, "-o", "out", NULL);
    cr_assert_eq(run.status, 2);
    char expected[1200];
    snprintf(expected, sizeof(expected),
             "%s:2:7: mode: 'simulte' is not one of simulate, emulate (did you mean 'simulate'?)",
             file);
    cr_assert(test_contains(run.err, expected), "%s", run.err);
    /* Nothing was written for a refused run. */
    char out[1100];
    snprintf(out, sizeof(out), "%s/out", dir);
    struct stat info;
    cr_assert_neq(stat(out, &info), 0);
    test_run_free(&run);

    run = test_kvio(dir, "run", "nosuchthing", NULL);
    cr_assert_eq(run.status, 2);
    cr_assert(test_contains(run.err, "nosuchthing: no such file, and no preset"), "%s", run.err);
    test_run_free(&run);

    run = test_kvio(dir, "run", "quickstart", "--set", "seed=-4", NULL);
    cr_assert_eq(run.status, 2);
    cr_assert(test_contains(run.err, "--set seed=-4: seed: -4 is below the minimum 0"), "%s",
              run.err);
    test_run_free(&run);
    free(file);
    test_rmtree(dir);
    free(dir);
}

Test(cli, unwritable_output_fails_before_running, .timeout = 20)
{
    test_run_t run = test_kvio(NULL, "run", "quickstart", "-o", "/proc/kvio-out", NULL);
    cr_assert_neq(run.status, 0);
    cr_assert(test_contains(run.err, "/proc/kvio-out: cannot create results directory"), "%s",
              run.err);
    test_run_free(&run);
}

Test(cli, validate_and_dump, .timeout = 20)
{
    char *dir = test_tmpdir();
    char *file = test_write_file(dir, "w.yaml", "name: v\nduration: 90s\n");
    test_run_t run = test_kvio(dir, "validate", file, NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    cr_assert(test_contains(run.out, ": ok"), "%s", run.out);
    test_run_free(&run);
    run = test_kvio(dir, "validate", file, "--dump", "--set", "warmup=5s", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    cr_assert(test_contains(run.out, "\"duration\": \"90s\""), "%s", run.out);
    cr_assert(test_contains(run.out, "\"warmup\": \"5s\""), "%s", run.out);
    cr_assert(test_contains(run.out, "\"seed\": 1"), "%s", run.out);
    test_run_free(&run);
    char *bad = test_write_file(dir, "bad.yaml", "name: v\nduraton: 90s\n");
    run = test_kvio(dir, "validate", bad, NULL);
    cr_assert_eq(run.status, 2);
    cr_assert(test_contains(run.err, "bad.yaml:2:1: duraton: unknown key (did you mean 'duration'?)"),
              "%s", run.err);
    test_run_free(&run);
    free(file);
    free(bad);
    test_rmtree(dir);
    free(dir);
}

/* Reliability (#22.16): what kvio run refuses, kvio validate refuses too,
 * with the same words, and the refused run leaves no directory: a request
 * larger than the whole KV cache (found only at run time before: 44 s into
 * an mpirun job), a bad line deep in a trace (validate said ok), a file
 * tier whose parent is missing (refused after the directory existed). */
Test(cli, validate_refuses_what_run_refuses_before_any_directory, .timeout = 30)
{
    char *dir = test_tmpdir();
    char trace_text[4096] = "";
    for (int i = 0, at = 0; i < 40; i++)
        at += snprintf(trace_text + at, sizeof(trace_text) - (size_t)at,
                       "{\"timestamp\": %d, \"input_length\": %s, \"output_length\": 4, "
                       "\"hash_ids\": [%d]}\n", i * 10, i == 30 ? "\"x\"" : "100", i);
    char *trace = test_write_file(dir, "t.jsonl", trace_text);
    char tier_parent[1100];
    snprintf(tier_parent, sizeof(tier_parent), "%s/no/such", dir);
    char workload_text[2048];
    snprintf(workload_text, sizeof(workload_text),
             "name: refused\nmode: emulate\nmodel: {preset: llama3.2-1b}\n"
             "gpu: {preset: h200}\nduration: 1s\n"
             "serve:\n  kvcache:\n    block_size: 16\n    blocks: 4\n"
             "    tiers: [{kind: file, file: {path: %s/tier}, size: 1MiB}]\n"
             "stream:\n  requests: 3\n  arrival: {process: poisson, rate: 10}\n"
             "  input_tokens: {dist: constant, value: 40}\n"
             "  output_tokens: {dist: constant, value: 26}\n", tier_parent);
    char *file = test_write_file(dir, "w.yaml", workload_text);
    char trace_set[1200];
    snprintf(trace_set, sizeof(trace_set), "stream.trace.path=%s", trace);
    struct {
        const char *set1, *set2, *expected;
    } cases[] = {
        /* 40 + 26 - 1 = 65 tokens: one more than 4 blocks of 16 hold. */
        {"mode=simulate", "seed=1",
         "request 0 needs the KV of 65 tokens (40 input + 26 output - 1), 5 blocks of 16, "
         "but serve.kvcache holds 4 blocks (64 tokens)"},
        {"stream.output_tokens.value=25", "seed=1", "/tier: no such directory, nor its parent"},
        {"serve.kvcache.blocks=1000", trace_set, "t.jsonl:31: 'input_length' is not an integer"},
        /* #53: a prompt of 40 tokens computed in one step (chunked prefill
         * off) cannot fit a 32-token budget: vLLM refuses this at start-up;
         * kvio's run died half-way saying the KV cache was too small. */
        {"serve.engine.chunked_prefill=false", "serve.engine.max_num_batched_tokens=32",
         "serve.engine.max_num_batched_tokens: 32 is below the prompt of request 0 (40 tokens) "
         "with serve.engine.chunked_prefill: false"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        test_run_t check = test_kvio(dir, "validate", file, "--set", cases[i].set1, "--set",
                                     cases[i].set2, NULL);
        cr_expect_eq(check.status, 2, "case %zu: %s", i, check.err);
        cr_expect(test_contains(check.err, cases[i].expected), "case %zu: %s", i, check.err);
        test_run_t run = test_kvio(dir, "run", file, "-o", "out", "--set", cases[i].set1,
                                   "--set", cases[i].set2, NULL);
        cr_expect_eq(run.status, 2, "case %zu: %s", i, run.err);
        cr_expect(test_contains(run.err, cases[i].expected), "case %zu: %s", i, run.err);
        char out[1100];
        snprintf(out, sizeof(out), "%s/out", dir);
        struct stat info;
        cr_expect_neq(stat(out, &info), 0, "case %zu: the refused run made %s", i, out);
        test_run_free(&check);
        test_run_free(&run);
    }
    /* At 64 tokens it fits, and validate says so. */
    test_run_t fits = test_kvio(dir, "validate", file, "--set", "mode=simulate", "--set",
                                "stream.output_tokens.value=25", NULL);
    cr_expect_eq(fits.status, 0, "%s", fits.err);
    test_run_free(&fits);
    free(file);
    free(trace);
    test_rmtree(dir);
    free(dir);
}

/* #53: hybrid KV groups (gpt-oss, serve.kvcache.hybrid) need the window
 * group's blocks too: a fresh request's first step takes as many for the
 * window group as for the full one. A 1,000-token prompt needs 2 x 63 =
 * 126 blocks of 16 then; validate passed at 100 and the run died half-way.
 * Now validate, run and compare (every variant, before any run) refuse it
 * with the same words and no directory; at 126 it runs. */
Test(cli, validate_refuses_a_hybrid_cache_too_small_for_both_groups, .timeout = 60)
{
    char *dir = test_tmpdir();
    char *file = test_write_file(
        dir, "w.yaml",
        "name: hybrid\nmode: simulate\nmodel: {preset: gpt-oss-20b}\ngpu: {preset: h200}\n"
        "serve:\n  kvcache: {block_size: 16, blocks: 100, hybrid: true}\n"
        "stream:\n  requests: 5\n  arrival: {process: poisson, rate: 10}\n"
        "  input_tokens: {dist: constant, value: 1000}\n"
        "  output_tokens: {dist: constant, value: 2}\n");
    const char *expected = "126 blocks of 16 in its full and window groups";
    test_run_t check = test_kvio(dir, "validate", file, NULL);
    cr_expect_eq(check.status, 2, "%s", check.err);
    cr_expect(test_contains(check.err, expected), "%s", check.err);
    test_run_t run = test_kvio(dir, "run", file, "-o", "out", NULL);
    cr_expect_eq(run.status, 2, "%s", run.err);
    cr_expect(test_contains(run.err, expected), "%s", run.err);
    test_run_t compare = test_kvio(dir, "compare", file, "--vary",
                                   "serve.kvcache.blocks=126,100", "-o", "cmp", NULL);
    cr_expect_eq(compare.status, 2, "%s", compare.err);
    cr_expect(test_contains(compare.err, expected), "%s", compare.err);
    char path[1100];
    struct stat info;
    snprintf(path, sizeof(path), "%s/out", dir);
    cr_expect_neq(stat(path, &info), 0, "the refused run made %s", path);
    snprintf(path, sizeof(path), "%s/cmp", dir);
    cr_expect_neq(stat(path, &info), 0, "the refused compare ran a variant into %s", path);
    test_run_t fits = test_kvio(dir, "run", file, "--set", "serve.kvcache.blocks=126", "-o",
                                "fits", NULL);
    cr_expect_eq(fits.status, 0, "%s", fits.err);
    test_run_free(&check);
    test_run_free(&run);
    test_run_free(&compare);
    test_run_free(&fits);
    free(file);
    test_rmtree(dir);
    free(dir);
}

/* #21: summary.json has vLLM's flat keys (what `vllm bench serve` users
 * read), request_goodput null without an SLO, and where and what ran: the
 * host and the build; --version names the commit and parts; verbosity flags
 * work after the command; a run that completes nothing exits 1. */
Test(cli, results_speak_vllm_and_say_where_they_ran, .timeout = 60)
{
    char *dir = test_tmpdir();
    test_run_t run = test_kvio(dir, "run", "chat", "-q", "--set=duration=5s", "--output=a",
                               NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    test_run_free(&run);
    run = test_kvio(dir, "run", "chat", "--set", "duration=5s", "--set", "slo.ttft=50ms",
                    "-o", "b", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    test_run_free(&run);
    for (int with_slo = 0; with_slo < 2; with_slo++) {
        char path[1200];
        snprintf(path, sizeof(path), "%s/%s/summary.json", dir, with_slo ? "b" : "a");
        json_t *summary = json_load_file(path, 0, NULL);
        cr_assert_not_null(summary);
        const json_t *vllm = json_object_get(summary, "vllm");
        const json_t *metrics = json_object_get(summary, "metrics");
        const char *keys[] = {"completed", "duration", "total_input_tokens",
                              "total_output_tokens", "request_throughput", "output_throughput",
                              "total_token_throughput", "mean_ttft_ms", "median_ttft_ms",
                              "std_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_itl_ms",
                              "p99_e2el_ms"};
        for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++)
            cr_expect(json_is_number(json_object_get(vllm, keys[k])), "vllm.%s", keys[k]);
        /* vllm's are numpy's, from every request (test_results pins them);
         * the histogram's p99 is within its error of the same data. */
        double p99 = test_json_number(vllm, "p99_ttft_ms");
        cr_expect(p99 >= test_json_number(metrics, "ttft_ms.p50") &&
                      p99 <= test_json_number(metrics, "ttft_ms.max") * (1 + 1.0 / 256),
                  "vllm p99 %.3f against the histogram's %.3f", p99,
                  test_json_number(metrics, "ttft_ms.p99"));
        cr_expect_gt(test_json_number(vllm, "std_tpot_ms"), 0);
        const json_t *goodput = json_object_get(vllm, "request_goodput");
        if (with_slo)
            cr_expect(json_is_number(goodput), "request_goodput with an SLO");
        else
            cr_expect(json_is_null(goodput), "request_goodput is null without an SLO");
        const json_t *host = json_object_get(summary, "host");
        cr_expect_gt(test_json_integer(host, "cores_online"), 0);
        cr_expect_gt(test_json_integer(host, "memory_total_bytes"), 0);
        cr_expect(json_string_length(json_object_get(host, "kernel")) > 0);
        const json_t *build = json_object_get(summary, "build");
        cr_expect(json_string_length(json_object_get(build, "commit")) > 0);
        cr_expect(json_is_boolean(json_object_get(json_object_get(build, "parts"), "ucx")));
        json_decref(summary);
    }
    run = test_kvio(NULL, "--version", NULL);
    cr_expect(test_contains(run.out, "(commit ") && test_contains(run.out, "ucx:"), "%s",
              run.out);
    test_run_free(&run);
    /* --format json: summary.json (run) and compare.json (compare) on stdout. */
    run = test_kvio(dir, "run", "chat", "--set", "duration=5s", "-o", "j", "--format=json", NULL);
    cr_expect_eq(run.status, 0, "%s", run.err);
    json_t *printed = json_loads(run.out, 0, NULL);
    cr_expect(test_json_true(printed, "complete"), "%s", run.out);
    json_decref(printed);
    test_run_free(&run);
    run = test_kvio(dir, "compare", "chat", "--set", "duration=5s", "--vary",
                    "serve.scheduler.policy=fcfs,lpm", "-o", "jc", "--format", "json", NULL);
    cr_expect_eq(run.status, 0, "%s", run.err);
    printed = json_loads(run.out, 0, NULL);
    cr_expect_eq(json_array_size(json_object_get(printed, "variants")), 2, "%s", run.out);
    json_decref(printed);
    /* Progress after each run: i/N, the percentage, the time so far and left. */
    cr_expect(test_contains(run.err, "kvio compare: 1/2 (50%) policy=fcfs done, ") &&
                  test_contains(run.err, "s left\n") &&
                  test_contains(run.err, "kvio compare: 2/2 (100%) policy=lpm done, "),
              "%s", run.err);
    test_run_free(&run);
    char *zero = test_write_file(dir, "zero.yaml",
                                 "name: zero\nmode: simulate\nduration: 1s\n"
                                 "stream: {arrival: {process: poisson, rate: 0.001}}\n");
    run = test_kvio(dir, "run", zero, "-o", "z", NULL);
    cr_expect_eq(run.status, 1, "a run that completes no request");
    cr_expect(test_contains(run.err, "no request completed"), "%s", run.err);
    test_run_free(&run);
    free(zero);
    test_rmtree(dir);
    free(dir);
}

/* #53 item 4: repro/viper-update as the issue runs it, at 16 MB: each
 * variant publishes 3 versions by default, and the table and each run's
 * figures give the first update apart from the warm ones. */
Test(cli, the_viper_repro_publishes_three_versions_and_keeps_the_first_apart, .timeout = 120)
{
    char *dir = test_tmpdir();
    char file_dir[1200];
    snprintf(file_dir, sizeof(file_dir), "train.transport.file.dir=%s/versions", dir);
    test_run_t run = test_kvio(dir, "compare", "repro/viper-update", "--set", "train.bytes=16MB",
                               "--set", file_dir, "--vary", "train.transport.kind=ucx,file",
                               "-o", "viper", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    cr_expect(test_contains(run.out, "first update ms") &&
                  test_contains(run.out, "warm update latency ms (mean)") &&
                  test_contains(run.out, "versions published"),
              "%s", run.out);
    const char *variants[] = {"viper/kind=ucx", "viper/kind=file"};
    for (int i = 0; i < 2; i++) {
        json_t *summary = test_summary(dir, variants[i]);
        const json_t *updates = test_json(summary, "metrics.model_updates");
        cr_expect_geq(test_json_integer(updates, "versions_published"), 3, "%s", variants[i]);
        cr_expect_gt(test_json_number(updates, "first_update_ms"), 0, "%s", variants[i]);
        cr_expect_geq(test_json_integer(updates, "warm_update_latency_ms.count"), 2, "%s",
                      variants[i]);
        json_decref(summary);
    }
    test_run_free(&run);
    test_rmtree(dir);
    free(dir);
}

/* The README's recipes, as written but at small sizes: which scheduler
 * (compare with seeds), an update over ucx, file and redis (16 MiB instead
 * of 16 GB; redis when the test Redis runs), the hit rate of a trace at N
 * GiB of KV, and whether a disk holds KV fast enough (3 s, small tiers). */
Test(cli, the_readme_recipes_run_at_small_sizes, .timeout = 180)
{
    char *dir = test_tmpdir();
    /* Which scheduler: the knee first, then the comparison below it, where
     * no variant may be overloaded (above it the recipe would mislead). */
    test_run_t run = test_kvio(dir, "capacity", "chat", "--set", "serve.kvcache.capacity=4GiB",
                               "--set", "duration=15s", "--slo", "ttft=2s,tpot=80ms", "-o", "knee",
                               NULL);
    cr_expect_eq(run.status, 0, "%s", run.err);
    cr_expect(test_contains(run.out, "binding"), "%s", run.out);
    test_run_free(&run);
    run = test_kvio(dir, "compare", "chat", "--set", "serve.kvcache.capacity=4GiB", "--set",
                    "duration=15s", "--set", "stream.arrival.rate=10", "--set", "slo.ttft=2s",
                    "--set", "slo.tpot=80ms", "--vary", "serve.scheduler.policy=fcfs,lpm,pkas",
                    "--repeat", "2", "-o", "which-scheduler", NULL);
    cr_expect_eq(run.status, 0, "%s", run.err);
    cr_expect(test_contains(run.out, "policy=pkas") && test_contains(run.out, "±"), "%s",
              run.out);
    cr_expect(!test_contains(run.out, "overloaded ("), "%s", run.out);
    test_run_free(&run);

    const char *url = getenv("KVIO_TEST_REDIS_URL");
    char url_set[600];
    snprintf(url_set, sizeof(url_set), "train.transport.redis.url=%s",
             url != NULL ? url : "redis://127.0.0.1:6379");
    run = test_kvio(dir, "compare", "repro/viper-update", "--set", "train.bytes=16MiB", "--set",
                    url_set, "--set", "train.steps=2", "--set",
                    "train.step_time={dist: constant, value: 100ms}", "--vary",
                    url != NULL ? "train.transport.kind=ucx,file,redis"
                                : "train.transport.kind=ucx,file",
                    "--metrics", "model_updates.update_latency_ms.p99", "-o", "transports", NULL);
    cr_expect_eq(run.status, 0, "%s", run.err);
    cr_expect(test_contains(run.out, "model_updates.update_latency_ms.p99"), "%s", run.out);
    test_run_free(&run);

    char trace[2048] = "";
    for (int i = 0, at = 0; i < 20; i++)
        at += snprintf(trace + at, sizeof(trace) - (size_t)at,
                       "{\"timestamp\": %d, \"input_length\": 1024, \"output_length\": 8, "
                       "\"hash_ids\": [%d, %d]}\n", i * 100, i % 3, 100 + i);
    free(test_write_file(dir, "my_trace.jsonl", trace));
    run = test_kvio(dir, "cachesim", "my_trace.jsonl", "--format", "mooncake", "--capacity",
                    "1GiB,4GiB,unlimited", "--model", "llama3-8b", "--eviction", "lru,s3fifo",
                    NULL);
    cr_expect_eq(run.status, 0, "%s", run.err);
    cr_expect(test_contains(run.out, "s3fifo"), "%s", run.out);
    test_run_free(&run);

    char tiers[1200];
    snprintf(tiers, sizeof(tiers),
             "serve.kvcache.tiers=[{kind: host, size: 64MiB}, {kind: file, size: 256MiB, "
             "file: {path: %s/kvio}}]", dir);
    run = test_kvio(dir, "run", "chat", "--set", "mode=emulate", "--set", "duration=3s",
                    "--set", "model.preset=llama3.2-1b", "--set",
                    "serve.kvcache.capacity=1200MiB", "--set", tiers, "--set",
                    "serve.kvcache.placement=waterfall", "-o", "disk", "--allow-invalid", NULL);
    cr_expect_eq(run.status, 0, "%s", run.err);
    cr_expect(test_contains(run.out, "tier 1 (file)") &&
                  test_contains(run.out, "storage throughput"),
              "%s", run.out);
    test_run_free(&run);
    test_rmtree(dir);
    free(dir);
}

/* Validates every preset kvio list printed after marker; how many. */
static size_t validate_listed(const char *listing, const char *marker)
{
    size_t validated = 0;
    for (const char *at = strstr(listing, marker); at != NULL; at = strstr(at + 1, marker)) {
        char name[64];
        cr_assert_eq(sscanf(at + 2, "%63s", name), 1);
        test_run_t check = test_kvio("/", "validate", name, NULL);
        cr_expect_eq(check.status, 0, "%s: %s", name, check.err);
        test_run_free(&check);
        validated++;
    }
    return validated;
}

Test(cli, list_shows_embedded_presets, .timeout = 20)
{
    test_run_t run = test_kvio("/", "list", NULL);
    cr_assert_eq(run.status, 0);
    cr_assert(test_contains(run.out, "quickstart"), "%s", run.out);
    test_run_free(&run);
    /* Presets work from any directory, since they live in the binary. */
    run = test_kvio("/", "validate", "quickstart", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    test_run_free(&run);
    /* So do the reproductions (workloads/repro/) and MLPerf Storage's
     * scenarios (workloads/mlperf/), by name: every one listed validates. */
    run = test_kvio("/", "list", NULL);
    cr_assert(test_contains(run.out, "repro/pkas-decode-bound"), "%s", run.out);
    cr_assert_geq(validate_listed(run.out, "  repro/"), 10);
    cr_assert_geq(validate_listed(run.out, "  mlperf/"), 4);
    test_run_free(&run);
}

Test(cli, sigint_writes_an_incomplete_summary, .timeout = 60)
{
    /* A long simulate run stopped by SIGINT keeps what it measured and says
     * complete: false; the exit status says the run did not finish. */
    char *dir = test_tmpdir();
    char out[1100];
    snprintf(out, sizeof(out), "%s/out", dir);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        int null_fd = open("/dev/null", O_WRONLY);
        dup2(null_fd, 1);
        dup2(null_fd, 2);
        execl(KVIO_BINARY, KVIO_BINARY, "run", "chat", "--set", "stream.requests=5000000",
              "-o", out, (char *)NULL);
        _exit(127);
    }
    /* Wait until the run has started writing, then interrupt it. */
    char csv[1200];
    snprintf(csv, sizeof(csv), "%s/requests.csv", out);
    for (int i = 0; i < 200 && access(csv, F_OK) != 0; i++)
        usleep(20000);
    usleep(300000);
    kill(pid, SIGINT);
    int wait_status = 0;
    waitpid(pid, &wait_status, 0);
    cr_assert(WIFEXITED(wait_status));
    cr_assert_eq(WEXITSTATUS(wait_status), 1);
    char path[1200];
    snprintf(path, sizeof(path), "%s/summary.json", out);
    char *summary = test_read_file(path);
    cr_assert_not_null(summary, "no summary after SIGINT");
    cr_assert(test_contains(summary, "\"complete\": false"), "%s", summary);
    cr_assert(test_contains(summary, "\"completed\":"), "%s", summary);
    /* #40 item 15: it said why not (it had no error). */
    cr_expect(test_contains(summary, "\"error\": \"run interrupted before it finished"),
              "%.400s", summary);
    free(summary);
    test_rmtree(dir);
    free(dir);
}

static const char *coupled_long_workload =
    "name: coupled-long\nseed: 4\nmode: emulate\nduration: 60s\n"
    "ranks: {train: 1, serve: 1, runtime: local, timeout: 20s}\n"
    "model: {preset: llama3.2-1b}\ngpu: {preset: h200}\n"
    "serve:\n  kvcache: {block_size: 16, blocks: 400}\n"
    "train:\n  step_time: {dist: constant, value: 100ms}\n  bytes: 8MiB\n"
    "  checkpoint: {policy: every_n_steps, every_n_steps: 3}\n"
    "  transport: {kind: ucx, chunk: 4MiB, inflight: 2}\n"
    "update: {apply: shadow, verify: true, serving: engine}\n"
    "stream:\n  arrival: {process: poisson, rate: 20}\n"
    "  input_tokens: {dist: lognormal, mean: 600, stddev: 300, min: 16, max: 2048}\n"
    "  output_tokens: {dist: lognormal, mean: 40, stddev: 30, min: 1, max: 128}\n";

/* SIGINT or SIGTERM during the coupled run (trainer + serving engine): the
 * trainer announces the end, the serve rank stops serving, summary.json says
 * complete: false with what was measured, exit 1, well before the 60 s run. */
static void interrupt_coupled_run(int signal_number)
{
    char *dir = test_tmpdir();
    char *yaml = test_write_file(dir, "coupled.yaml", coupled_long_workload);
    char out[1100], log_path[1100];
    snprintf(out, sizeof(out), "%s/out", dir);
    snprintf(log_path, sizeof(log_path), "%s/err.log", dir);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        int null_fd = open("/dev/null", O_WRONLY);
        int log_fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(null_fd, 1);
        dup2(log_fd, 2);
        execl(KVIO_BINARY, KVIO_BINARY, "-v", "run", yaml, "-o", out, (char *)NULL);
        _exit(127);
    }
    /* Every rank is set up once the run logs t0; let it serve and publish a
     * few versions (one every 0.3 s), then interrupt it. */
    uint64_t started_by = kvio_time_ns() + (uint64_t)(test_seconds(30) * 1e9);
    for (bool started = false; !started && kvio_time_ns() < started_by; usleep(20000)) {
        char *log = test_read_file(log_path);
        started = log != NULL && test_contains(log, "the run starts now (t0)");
        free(log);
    }
    usleep((useconds_t)(test_seconds(1.0) * 1e6));
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    kill(pid, signal_number);
    int wait_status = 0;
    pid_t waited = 0;
    uint64_t deadline = kvio_time_ns() + (uint64_t)(test_seconds(15) * 1e9);
    while ((waited = waitpid(pid, &wait_status, WNOHANG)) == 0 && kvio_time_ns() < deadline)
        usleep(10000);
    if (waited == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &wait_status, 0);
        cr_assert_fail("the coupled run did not stop within %.0f s of signal %d",
                       test_seconds(15), signal_number);
    }
    cr_assert(WIFEXITED(wait_status));
    cr_assert_eq(WEXITSTATUS(wait_status), 1);
    char path[1200];
    snprintf(path, sizeof(path), "%s/summary.json", out);
    char *summary = test_read_file(path);
    cr_assert_not_null(summary, "no summary after signal %d", signal_number);
    cr_assert(test_contains(summary, "\"complete\": false"), "%s", summary);
    cr_assert(test_contains(summary, "\"model_updates\":"), "%s", summary);
    cr_assert(test_contains(summary, "\"completed\":"), "%s", summary);
    cr_assert(test_contains(summary, "\"served_by_version\":"), "%s", summary);
    /* Interrupted, not failed: the error says so (#40 item 15). */
    cr_assert(test_contains(summary, "\"error\": \"run interrupted before it finished"), "%s",
              summary);
    free(summary);
    snprintf(path, sizeof(path), "%s/updates.csv", out);
    char *updates = test_read_file(path);
    cr_assert_not_null(updates);
    cr_assert(test_contains(updates, "\n1,1,"), "no version 1 in updates.csv: %s", updates);
    free(updates);
    free(yaml);
    test_rmtree(dir);
    free(dir);
}

Test(cli, sigint_stops_the_coupled_run, .timeout = 60)
{
    interrupt_coupled_run(SIGINT);
}

Test(cli, sigterm_stops_the_coupled_run, .timeout = 60)
{
    interrupt_coupled_run(SIGTERM);
}

/* #53.8: SIGINT during emulate's set-up (here a 3 GiB KV pool being faulted
 * in, a transport connected, weights filled) stopped only once every rank
 * was set up (15.8 s) and printed a table of zeros. Now the set-up prints
 * its progress, stops within about a second, and summary.json says
 * complete: false, setup_interrupted, and the verdict incomplete; exit 1,
 * no table. */
Test(cli, sigint_during_setup_stops_at_once_with_an_incomplete_result, .timeout = 90)
{
    char *dir = test_tmpdir();
    char *yaml = test_write_file(
        dir, "setup.yaml",
        "name: setup-stop\nseed: 4\nmode: emulate\nduration: 30s\n"
        "ranks: {train: 1, serve: 1, runtime: local, timeout: 20s}\n"
        "model: {preset: llama3-8b}\ngpu: {preset: h200}\n"
        "serve:\n  kvcache: {block_size: 16, capacity: 3GiB}\n"
        "train:\n  step_time: {dist: constant, value: 100ms}\n  bytes: 64MiB\n"
        "  checkpoint: {policy: every_n_steps, every_n_steps: 3}\n"
        "  transport: {kind: ucx, chunk: 4MiB, inflight: 2}\n"
        "update: {apply: shadow, verify: true, serving: engine}\n"
        "stream:\n  arrival: {process: poisson, rate: 5}\n"
        "  input_tokens: {dist: constant, value: 200}\n"
        "  output_tokens: {dist: constant, value: 20}\n");
    char out[1100], log_path[1100], stdout_path[1100];
    snprintf(out, sizeof(out), "%s/out", dir);
    snprintf(log_path, sizeof(log_path), "%s/err.log", dir);
    snprintf(stdout_path, sizeof(stdout_path), "%s/out.txt", dir);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        int out_fd = open(stdout_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int log_fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(out_fd, 1);
        dup2(log_fd, 2);
        execl(KVIO_BINARY, KVIO_BINARY, "run", yaml, "-o", out, (char *)NULL);
        _exit(127);
    }
    /* The set-up's first line: the ranks have only begun (the pool alone is
     * 12 pieces of 256 MiB to fault in). */
    uint64_t begun_by = kvio_time_ns() + (uint64_t)(test_seconds(30) * 1e9);
    bool begun = false;
    while (!begun && kvio_time_ns() < begun_by) {
        char *log = test_read_file(log_path);
        begun = log != NULL && test_contains(log, "kvio: set-up ");
        free(log);
        if (!begun)
            usleep(2000);
    }
    cr_assert(begun, "no set-up progress on stderr");
    kill(pid, SIGINT);
    uint64_t signalled = kvio_time_ns();
    int wait_status = 0;
    pid_t waited = 0;
    uint64_t deadline = signalled + (uint64_t)(test_seconds(2) * 1e9);
    while ((waited = waitpid(pid, &wait_status, WNOHANG)) == 0 && kvio_time_ns() < deadline)
        usleep(5000);
    double took_s = (double)(kvio_time_ns() - signalled) / 1e9;
    if (waited == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &wait_status, 0);
    }
    char *log = test_read_file(log_path);
    cr_assert_neq(waited, 0, "SIGINT during set-up: still running %.1f s later: %s", took_s,
                  log != NULL ? log : "");
    cr_assert(WIFEXITED(wait_status));
    cr_expect_eq(WEXITSTATUS(wait_status), 1, "%s", log != NULL ? log : "");
    cr_expect(!test_contains(log, "the run starts now (t0)"), "the run started: %s", log);
    char path[1200];
    snprintf(path, sizeof(path), "%s/summary.json", out);
    char *summary = test_read_file(path);
    cr_assert_not_null(summary, "no summary after SIGINT during set-up: %s", log);
    cr_expect(test_contains(summary, "\"complete\": false"), "%s", summary);
    cr_expect(test_contains(summary, "\"setup_interrupted\": true"), "%s", summary);
    cr_expect(test_contains(summary, "\"kind\": \"incomplete\""), "%s", summary);
    cr_expect(test_contains(summary, "\"error\": \"stopped during set-up"), "%s", summary);
    /* No table of zeros on stdout. */
    char *table = test_read_file(stdout_path);
    cr_expect(table == NULL || !test_contains(table, "TTFT"), "a table: %s", table);
    free(table);
    free(summary);
    free(log);
    free(yaml);
    test_rmtree(dir);
    free(dir);
}

/* Reliability (#22.1), deterministically: nothing ignored SIGPIPE, so any
 * write to a closed pipe or socket (Redis gone mid-write; `kvio run | head`)
 * killed kvio (exit 141). The binary, its stdout a pipe nobody reads, now
 * finishes the run; and kvio_run makes SIGPIPE harmless for its caller. */
Test(cli, a_closed_pipe_or_socket_does_not_kill_kvio, .timeout = 60)
{
    char *dir = test_tmpdir();
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    close(fds[0]); /* nobody reads what kvio prints */
    char out[1100];
    snprintf(out, sizeof(out), "%s/out", dir);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        signal(SIGPIPE, SIG_DFL);
        dup2(fds[1], 1);
        int null_fd = open("/dev/null", O_WRONLY);
        dup2(null_fd, 2);
        execl(KVIO_BINARY, KVIO_BINARY, "run", "chat", "--set", "duration=2s", "-o", out,
              (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    int status = 0;
    waitpid(pid, &status, 0);
    cr_assert(!WIFSIGNALED(status), "kvio died of signal %d", WTERMSIG(status));
    char path[1200];
    snprintf(path, sizeof(path), "%s/summary.json", out);
    char *summary = test_read_file(path);
    cr_assert(summary != NULL && test_contains(summary, "\"complete\": true"));
    free(summary);
    /* In-process: after kvio_run a write to a closed pipe is EPIPE. */
    pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        signal(SIGPIPE, SIG_DFL);
        kvio_workload_t workload;
        char error[512], run_dir[1200];
        if (kvio_workload_load("chat", (const char *[]){"duration=1s"}, 1, &workload, error,
                               sizeof(error)) != KVIO_OK)
            _exit(3);
        snprintf(run_dir, sizeof(run_dir), "%s/in-process", dir);
        kvio_run_options_t options = {.output_dir = run_dir, .quiet = true};
        kvio_run_result_t result;
        if (kvio_run(&workload, &options, &result, error, sizeof(error)) != KVIO_OK)
            _exit(4);
        kvio_workload_free(&workload);
        int pair[2];
        if (pipe(pair) != 0)
            _exit(5);
        close(pair[0]);
        _exit(write(pair[1], "x", 1) < 0 && errno == EPIPE ? 0 : 6);
    }
    waitpid(pid, &status, 0);
    cr_assert(!WIFSIGNALED(status), "the caller died of signal %d", WTERMSIG(status));
    cr_assert_eq(WEXITSTATUS(status), 0);
    test_rmtree(dir);
    free(dir);
}

/* Reliability (#22.5): a Redis password in a URL was written in plaintext
 * to summary.json (mode 0644) and by validate --dump; both show *** now. */
Test(cli, redis_passwords_never_reach_the_results_or_the_dump, .timeout = 60)
{
    char *dir = test_tmpdir();
    const char *tier = "serve.kvcache.tiers=[{kind: redis, redis: {url: "
                       "\"redis://:s3cret@127.0.0.1:6379/0\"}, size: 1GiB}]";
    const char *transport = "train.transport.redis.url=redis://admin:hunter2@127.0.0.1:1";
    test_run_t run = test_kvio(dir, "validate", "chat", "--set", tier, "--set", transport,
                               "--dump", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    cr_assert(!test_contains(run.out, "s3cret") && !test_contains(run.out, "hunter2"), "%s",
              run.out);
    cr_assert(test_contains(run.out, "redis://:***@127.0.0.1:6379/0"), "%s", run.out);
    cr_assert(test_contains(run.out, "redis://admin:***@127.0.0.1:1"), "%s", run.out);
    test_run_free(&run);
    /* A simulate run models the tier: no connection, the same config. */
    run = test_kvio(dir, "run", "chat", "--set", "duration=2s", "--set", tier, "--set",
                    transport, "-o", "out", "--allow-invalid", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    test_run_free(&run);
    char path[1200];
    snprintf(path, sizeof(path), "%s/out/summary.json", dir);
    char *summary = test_read_file(path);
    cr_assert_not_null(summary);
    cr_assert(!test_contains(summary, "s3cret") && !test_contains(summary, "hunter2"));
    cr_assert(test_contains(summary, "redis://:***@127.0.0.1:6379/0"));
    free(summary);
    /* Nor the command echoed in summary.json and run.log. */
    snprintf(path, sizeof(path), "%s/out/run.log", dir);
    char *log = test_read_file(path);
    cr_assert_not_null(log);
    cr_assert(!test_contains(log, "s3cret") && !test_contains(log, "hunter2"), "%s", log);
    cr_assert(test_contains(log, "redis://admin:***@127.0.0.1:1"), "%s", log);
    free(log);
    test_rmtree(dir);
    free(dir);
}

/* #40 item 13: a password holding '@' ended at its first '@': the rest
 * was taken for the host and printed in stderr and summary.json
 * ("redis://Pa55@127.0.0.1:6441: name or service not known"); %40 was not
 * decoded; ?password= was not redacted. The password now runs to the last
 * '@', is %-decoded, and every message and dump shows ***. */
Test(cli, a_redis_password_with_an_at_sign_stays_secret, .timeout = 60)
{
    kvio_redis_url_t url;
    char error[512] = "";
    cr_assert_eq(kvio_redis_parse_url("redis://:Pa55@word@127.0.0.1:6441/2", &url, error,
                                      sizeof(error)),
                 KVIO_OK, "%s", error);
    cr_expect_str_eq(url.password, "Pa55@word");
    cr_expect_str_eq(url.host, "127.0.0.1");
    cr_expect_eq(url.port, 6441);
    cr_expect_eq(url.db, 2);
    cr_assert_eq(kvio_redis_parse_url("redis://user:Pa55%40word@localhost", &url, error,
                                      sizeof(error)),
                 KVIO_OK, "%s", error);
    cr_expect_str_eq(url.password, "Pa55@word", "%%40 decoded");
    cr_expect_neq(kvio_redis_parse_url("redis://:Pa55@word@127.0.0.1:port", &url, error,
                                       sizeof(error)),
                  KVIO_OK);
    cr_expect(!test_contains(error, "Pa55") && !test_contains(error, "word"), "%s", error);
    cr_expect(test_contains(error, "redis://:***@127.0.0.1:port: bad port"), "%s", error);
    char shown[256];
    kvio_url_redact("redis://127.0.0.1:6379/0?password=hunter2&x=1", shown, sizeof(shown));
    cr_expect_str_eq(shown, "redis://127.0.0.1:6379/0?password=***&x=1");
    char *dir = test_tmpdir();
    test_run_t run = test_kvio(
        dir, "validate", "chat", "--set",
        "serve.kvcache.tiers=[{kind: redis, redis: {url: \"redis://:Pa55@word@127.0.0.1:1\"}, "
        "size: 1GiB}]",
        "--dump", NULL);
    cr_expect(!test_contains(run.out, "Pa55") && !test_contains(run.out, "word@"), "%s",
              run.out);
    cr_expect(test_contains(run.out, "redis://:***@127.0.0.1:1"), "%s", run.out);
    test_run_free(&run);
    test_rmtree(dir);
    free(dir);
}

/* A 2 s emulate run of chat in dir with a Redis tier at url, into out. */
static test_run_t run_with_redis_tier(const char *dir, const char *url)
{
    char tier[384];
    snprintf(tier, sizeof(tier), "serve.kvcache.tiers=[{kind: redis, redis: {url: \"%s\"}, "
             "size: 64MiB}]", url);
    return test_kvio(dir, "run", "chat", "--set", "mode=emulate", "--set", "duration=2s", "--set",
                     "serve.kvcache.blocks=400", "--set", tier, "-o", "out", NULL);
}

/* A password in the query (?password=, as redis-py reads it) is read (it
 * was "bad port"), a bad %-escape is refused (%zz was taken as it was),
 * and a password the server refuses is named as that, not "is the Redis
 * server running and reachable?". */
Test(cli, redis_url_queries_escapes_and_wrong_passwords_are_named, .timeout = 60)
{
    kvio_redis_url_t url;
    char error[512] = "";
    cr_assert_eq(kvio_redis_parse_url("redis://127.0.0.1:6441/0?password=hun%40ter2&db=3", &url,
                                      error, sizeof(error)),
                 KVIO_OK, "%s", error);
    cr_expect_str_eq(url.password, "hun@ter2");
    cr_expect_eq(url.port, 6441);
    cr_expect_eq(url.db, 3);
    static const char *const refused[][2] = {
        {"redis://:pa%zzss@127.0.0.1:6441", "the password has a bad %-escape"},
        {"redis://:pass%4@127.0.0.1:6441", "the password has a bad %-escape"},
        {"redis://127.0.0.1:6441?password=%g1", "the query's password has a bad %-escape"},
        {"redis://127.0.0.1:6441?user=x", "the query's user is not one kvio reads"},
        {"redis://127.0.0.1:6441?db=x", "bad database number"},
    };
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        cr_expect_neq(kvio_redis_parse_url(refused[i][0], &url, error, sizeof(error)), KVIO_OK,
                      "%s", refused[i][0]);
        cr_expect(test_contains(error, refused[i][1]), "%s: %s", refused[i][0], error);
        cr_expect(!test_contains(error, "zz") && !test_contains(error, "pass%"), "%s", error);
    }
    int port = test_free_port();
    if (!test_require("redis", port > 0 && test_redis_up(port), "no redis-server"))
        return;
    test_redis_cli(port, "config set requirepass right");
    char tier_url[128];
    snprintf(tier_url, sizeof(tier_url), "redis://127.0.0.1:%d?password=hunter2", port);
    char *dir = test_tmpdir();
    test_run_t run = run_with_redis_tier(dir, tier_url);
    test_redis_cli(port, "-a right config set requirepass ''");
    test_redis_down(port);
    cr_expect_eq(run.status, 1, "%s", run.err);
    cr_expect(test_contains(run.err, "the server refused the password"), "%s", run.err);
    cr_expect(!test_contains(run.err, "running and reachable"), "%s", run.err);
    cr_expect(!test_contains(run.err, "hunter2"), "the password was printed: %s", run.err);
    test_run_free(&run);
    test_rmtree(dir);
    free(dir);
}

/* Reliability (#22.8, #22.11): --force reused a directory with the earlier
 * run's files in it (a stale updates.csv that kvio report then drew); and
 * name=../../escape wrote outside results/. Now the earlier run's files go
 * (nothing else of the directory's), and such a name is refused with its
 * key before anything is created. */
Test(cli, force_drops_the_earlier_runs_files_and_names_stay_inside, .timeout = 60)
{
    char *dir = test_tmpdir();
    test_run_t run = test_kvio(dir, "run", "quickstart", "--set", "mode=simulate", "--set",
                               "duration=5s", "-o", "out", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    test_run_free(&run);
    char path[1200];
    snprintf(path, sizeof(path), "%s/out/updates.csv", dir);
    cr_assert_eq(access(path, F_OK), 0, "the first run wrote no updates.csv");
    free(test_write_file(dir, "out/notes.txt", "mine\n"));
    run = test_kvio(dir, "run", "chat", "--set", "duration=2s", "-o", "out", "--force",
                    "--allow-invalid", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    test_run_free(&run);
    cr_assert_neq(access(path, F_OK), 0, "the earlier run's updates.csv is still there");
    snprintf(path, sizeof(path), "%s/out/notes.txt", dir);
    cr_assert_eq(access(path, F_OK), 0, "a file kvio did not write was removed");
    run = test_kvio(dir, "run", "chat", "--set", "name=../../escape", NULL);
    cr_assert_eq(run.status, 2);
    cr_assert(test_contains(run.err, "name: '../../escape' is not a plain name"), "%s", run.err);
    test_run_free(&run);
    snprintf(path, sizeof(path), "%s/results", dir);
    cr_assert_neq(access(path, F_OK), 0, "a results directory was created");
    test_rmtree(dir);
    free(dir);
}

/* #40 item 4: --force followed a planted updates.csv.tmp link and wrote
 * outside the results; sync.csv and the temporaries stayed; two --force
 * runs into one directory both exited 0 and one run's results were gone.
 * Now the temporaries are fresh names (O_EXCL | O_NOFOLLOW) renamed over
 * the files, --force removes exactly the files kvio writes (a link there is
 * removed, its target untouched), and a directory another kvio run holds is
 * refused. */
Test(cli, force_never_follows_a_planted_link_and_one_run_holds_a_directory, .timeout = 60)
{
    char *dir = test_tmpdir();
    char *victim = test_write_file(dir, "victim", "precious bytes\n");
    char out[1100], path[1300];
    snprintf(out, sizeof(out), "%s/out", dir);
    cr_assert_eq(mkdir(out, 0755), 0);
    /* #59 item 10: vllm.json too (a stale one stayed; a link made the run fail). */
    const char *planted[] = {"summary.json.tmp", "updates.csv.tmp", "requests.csv",
                             "iterations.csv", "summary.json", "vllm.json"};
    for (size_t i = 0; i < sizeof(planted) / sizeof(planted[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", out, planted[i]);
        cr_assert_eq(symlink(victim, path), 0);
    }
    free(test_write_file(out, "sync.csv", "stale\n"));
    test_run_t run = test_kvio(dir, "run", "chat", "--set", "duration=2s", "-o", "out",
                               "--force", "--allow-invalid", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    test_run_free(&run);
    char *text = test_read_file(victim);
    cr_expect_str_eq(text, "precious bytes\n", "a planted link's target was written");
    free(text);
    const char *written[] = {"summary.json", "requests.csv", "iterations.csv", "vllm.json"};
    for (size_t i = 0; i < 4; i++) {
        snprintf(path, sizeof(path), "%s/%s", out, written[i]);
        struct stat info;
        cr_assert_eq(lstat(path, &info), 0, "%s", path);
        cr_expect(S_ISREG(info.st_mode), "%s is not a plain file", written[i]);
    }
    snprintf(path, sizeof(path), "%s/sync.csv", out);
    cr_expect_neq(access(path, F_OK), 0, "--force left the earlier run's sync.csv");
    /* Another run holds the directory: refused, nothing removed. */
    int held = open(out, O_RDONLY | O_DIRECTORY);
    cr_assert_geq(held, 0);
    cr_assert_eq(flock(held, LOCK_EX | LOCK_NB), 0);
    run = test_kvio(dir, "run", "chat", "--set", "duration=2s", "-o", "out", "--force", NULL);
    cr_expect_eq(run.status, 2);
    cr_expect(test_contains(run.err, "results directory in use by another kvio run"), "%s",
              run.err);
    test_run_free(&run);
    snprintf(path, sizeof(path), "%s/summary.json", out);
    cr_expect_eq(access(path, F_OK), 0, "the holder's summary.json was removed");
    close(held);
    run = test_kvio(dir, "run", "chat", "--set", "duration=2s", "-o", "out", "--force",
                    "--allow-invalid", NULL);
    cr_expect_eq(run.status, 0, "released: the run goes on: %s", run.err);
    test_run_free(&run);
    test_rmtree(dir);
    free(victim);
    free(dir);
}

/* #40 item 2: simulate never checked memory; 4,096 serve ranks of
 * Kimi-K2's pool (116,559 blocks each) passed validate and the OOM killer
 * ended the run at 24 GB. Now validate and run refuse, before any results
 * directory, with the numbers: ranks, GiB needed, MiB per rank, blocks and
 * GiB available. 4,096 ranks of 10 M blocks (about 4 TiB of bookkeeping)
 * fit no machine the suite runs on. */
Test(cli, simulate_refuses_pools_the_memory_cannot_hold, .timeout = 60)
{
    char *dir = test_tmpdir();
    const char *commands[] = {"validate", "run"};
    for (size_t c = 0; c < 2; c++) {
        test_run_t run = c == 0 ? test_kvio(dir, "validate", "chat", "--set", "ranks.serve=4096",
                                            "--set", "serve.kvcache.blocks=10000000", NULL)
                                : test_kvio(dir, "run", "chat", "--set", "ranks.serve=4096",
                                            "--set", "serve.kvcache.blocks=10000000", "-o",
                                            "out", NULL);
        cr_expect_eq(run.status, 2, "%s: %s", commands[c], run.err);
        cr_expect(test_contains(run.err, "simulate: 4096 serve rank(s) need"), "%s", run.err);
        cr_expect(test_contains(run.err, "10000000 blocks"), "%s", run.err);
        cr_expect(test_contains(run.err, "GiB available"), "%s", run.err);
        test_run_free(&run);
    }
    char path[1200];
    snprintf(path, sizeof(path), "%s/out", dir);
    cr_expect_neq(access(path, F_OK), 0, "a results directory was made for a refused run");
    test_rmtree(dir);
    free(dir);
}

/* #40 item 6: a warmup that covers the run (warmup: 1h, or warmup_requests
 * beyond the stream) printed 0.00 ms latencies with exit 0 and complete:
 * true. Like a run that completes nothing, it now fails (exit 1) saying
 * so, and summary.json says complete: false. */
Test(cli, a_warmup_that_covers_the_run_is_a_failed_run, .timeout = 60)
{
    char *dir = test_tmpdir();
    const char *warmups[] = {"warmup=1h", "warmup_requests=100000"};
    for (size_t w = 0; w < 2; w++) {
        test_run_t run = test_kvio(dir, "run", "chat", "--set", "duration=2s", "--set",
                                   warmups[w], "-o", "out", "--force", NULL);
        cr_expect_eq(run.status, 1, "%s: %s", warmups[w], run.err);
        cr_expect(test_contains(run.err, "no request was measured"), "%s", run.err);
        test_run_free(&run);
        json_t *summary = test_summary(dir, "out");
        cr_expect(json_is_false(json_object_get(summary, "complete")), "%s", warmups[w]);
        json_decref(summary);
    }
    test_rmtree(dir);
    free(dir);
}

/* #59 item 11: weight_sync's per-tensor time at its bound (60 s) over
 * Kimi-K2's tensors for 200 steps put the last update 26 years into the run,
 * reported complete and valid. Now it is refused, naming the keys. */
Test(cli, a_weight_sync_schedule_past_the_clock_is_refused, .timeout = 60)
{
    char *dir = test_tmpdir();
    test_run_t run = test_kvio(dir, "run", "repro/checkpoint-engine-kimi-k2", "--set",
                               "weight_sync.tensor_overhead=60s", "--set", "train.steps=200",
                               "-o", "out", NULL);
    cr_expect_eq(run.status, 2, "%s", run.err);
    cr_expect(test_contains(run.err, "past the run clock's 10-year limit") &&
                  test_contains(run.err, "weight_sync.*"),
              "%s", run.err);
    test_run_free(&run);
    test_rmtree(dir);
    free(dir);
}

/* #40 item 5: the virtual clock overflowed by accumulation: cost.c0 =
 * 9.99e8 ms with one request at a time ran 292 years of virtual time to
 * int64's end and exited 0, complete, with absurd latencies; weight_sync.
 * tensor_overhead = 1h gave negative activation times. Now a run whose
 * clock would pass 10 years fails naming the cost keys, and the sync's
 * per-tensor and per-message times are bounded (60 s). */
Test(cli, a_clock_that_would_pass_its_limit_fails_naming_the_cost, .timeout = 60)
{
    char *dir = test_tmpdir();
    test_run_t run = test_kvio(dir, "run", "chat", "--set", "cost.kind=linear", "--set",
                               "cost.c0=9.99e8", "--set", "serve.engine.max_num_seqs=1", "-o",
                               "out", NULL);
    cr_expect_eq(run.status, 2, "%s", run.err);
    cr_expect(test_contains(run.err, "the run's clock would pass 10 years"), "%s", run.err);
    cr_expect(test_contains(run.err, "check cost.*"), "%s", run.err);
    test_run_free(&run);
    char path[1200];
    snprintf(path, sizeof(path), "%s/out/summary.json", dir);
    char *text = test_read_file(path);
    json_t *summary = text != NULL ? json_loads(text, 0, NULL) : NULL;
    cr_assert_not_null(summary);
    cr_expect(json_is_false(json_object_get(summary, "complete")));
    json_decref(summary);
    free(text);
    const char *bounded[] = {"weight_sync.tensor_overhead=1h", "weight_sync.control=1h"};
    for (size_t i = 0; i < 2; i++) {
        run = test_kvio(dir, "validate", "chat", "--set", bounded[i], NULL);
        cr_expect_eq(run.status, 2, "%s", bounded[i]);
        cr_expect(test_contains(run.err, "is above the maximum 60s"), "%s", run.err);
        test_run_free(&run);
    }
    test_rmtree(dir);
    free(dir);
}

/* #40 item 14: a full results disk said "requests.csv: write failed" with
 * no reason. The cause is kept and named, with the file kvio was writing
 * (not its temporary's name). */
Test(cli, a_full_results_disk_names_its_cause, .timeout = 60)
{
    char *dir = test_tmpdir();
    char reason[256];
    if (!test_private_mount(dir, "tmpfs", 0, "size=128k", reason, sizeof(reason))) {
        test_rmtree(dir);
        test_require("mount", 0, reason);
    }
    test_run_t run = test_kvio(dir, "run", "chat", "--set", "duration=30s", "-o", "out", NULL);
    cr_expect_eq(run.status, 1, "%s", run.err);
    /* 128 KiB holds the summary but not the CSVs (iterations.csv is 225 KB
     * here); the first one closed names the cause. */
    cr_expect(test_contains(run.err, ".csv: write failed: No space left on device"), "%s",
              run.err);
    cr_expect(!test_contains(run.err, "/.summary.json."), "a temporary's name: %s", run.err);
    test_run_free(&run);
    umount2(dir, MNT_DETACH);
    test_rmtree(dir);
    free(dir);
}

/* kvio stream onto a full disk, /dev/full or a closed pipe names the cause
 * (it said "input/output error") and leaves no partial file behind; a
 * device it wrote to stays. */
Test(cli, a_full_disk_under_kvio_stream_names_its_cause_and_leaves_no_part, .timeout = 60)
{
    char *dir = test_tmpdir();
    test_run_t run = test_kvio(dir, "stream", "quickstart", "-o", "/dev/full", NULL);
    cr_expect_eq(run.status, 1, "%s", run.err);
    cr_expect(test_contains(run.err, "/dev/full: write failed: No space left on device"), "%s",
              run.err);
    cr_expect_eq(access("/dev/full", F_OK), 0);
    test_run_free(&run);
    char reason[256];
    if (!test_private_mount(dir, "tmpfs", 0, "size=64k", reason, sizeof(reason))) {
        test_rmtree(dir);
        test_require("mount", 0, reason);
    }
    run = test_kvio(dir, "stream", "chat", "-o", "out.jsonl", NULL);
    cr_expect_eq(run.status, 1, "%s", run.err);
    cr_expect(test_contains(run.err, "out.jsonl: write failed: No space left on device"), "%s",
              run.err);
    char path[1100];
    snprintf(path, sizeof(path), "%s/out.jsonl", dir);
    cr_expect_neq(access(path, F_OK), 0, "a partial out.jsonl was left");
    test_run_free(&run);
    umount2(dir, MNT_DETACH);
    test_rmtree(dir);
    free(dir);
}

/* Small inputs that got a wrong or no message: -o X --event-trace X (it
 * said "X: exists and is not a directory" of a file kvio had just made),
 * kvio report on a compare.json ("not a kvio cachesim --json result"),
 * cachesim --eviction with 70 names (exit 2, nothing said), a --set value
 * of 3,000 bytes (its message was cut before the reason). */
Test(cli, small_inputs_get_the_message_that_fits_them, .timeout = 60)
{
    char *dir = test_tmpdir();
    test_run_t run = test_kvio(dir, "run", "quickstart", "--set", "mode=simulate", "--set",
                               "duration=2s", "-o", "X", "--event-trace", "./X/", NULL);
    cr_expect_eq(run.status, 2, "%s", run.err);
    cr_expect(test_contains(run.err, "--event-trace ./X/ is the results directory (-o X)"), "%s",
              run.err);
    char path[1200];
    snprintf(path, sizeof(path), "%s/X", dir);
    cr_expect_neq(access(path, F_OK), 0, "X was made");
    test_run_free(&run);
    run = test_kvio(dir, "compare", "quickstart", "--set", "mode=simulate", "--set",
                    "duration=1s", "--vary", "seed=1,2", "-o", "cmp", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    test_run_free(&run);
    run = test_kvio(dir, "report", "cmp/compare.json", "-o", "report", NULL);
    cr_expect_eq(run.status, 2, "%s", run.err);
    cr_expect(test_contains(run.err, "cmp/compare.json: kvio compare's compare.json; give kvio "
                                     "report its directory"),
              "%s", run.err);
    test_run_free(&run);
    char names[400] = "lru";
    for (int i = 1; i < 70; i++)
        strcat(names, ",lru");
    char fixture[1200];
    snprintf(fixture, sizeof(fixture), "%s/tests/fixtures/mooncake_small.jsonl", KVIO_SOURCE_DIR);
    run = test_kvio(dir, "cachesim", fixture, "--eviction", names, NULL);
    cr_expect_eq(run.status, 2, "%s", run.err);
    cr_expect(test_contains(run.err, "--eviction takes at most 64 policies"), "%s", run.err);
    test_run_free(&run);
    char set[3100] = "stream.arrival.rate=";
    memset(set + strlen(set), 'x', 3000);
    set[3020] = '\0';
    run = test_kvio(dir, "validate", "chat", "--set", set, NULL);
    cr_expect_eq(run.status, 2, "%s", run.err);
    cr_expect(test_contains(run.err, "... (3020 bytes): stream.arrival.rate: expected a number"),
              "%s", run.err);
    test_run_free(&run);
    test_rmtree(dir);
    free(dir);
}

/* #40 item 11: validate said ok for what run refuses: a GPU of 1e-300 or
 * 1e3 FLOP/s, a linear cost of all-zero coefficients, c0 = -5, c0 = 1e12.
 * Both now try the cost model on one decode token and on a full token
 * budget of prefill, before any results directory. */
Test(cli, validate_refuses_a_cost_model_run_refuses, .timeout = 60)
{
    static const char *const cases[][2] = {
        {"gpu.flops=1e-300", NULL},      {"gpu.flops=1e3", NULL},
        {"cost.kind=linear", NULL},      {"cost.kind=linear", "cost.c0=1e12"},
    };
    char *dir = test_tmpdir();
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        test_run_t run = cases[c][1] != NULL
                             ? test_kvio(dir, "validate", "chat", "--set", cases[c][0], "--set",
                                         cases[c][1], NULL)
                             : test_kvio(dir, "validate", "chat", "--set", cases[c][0], NULL);
        cr_expect_eq(run.status, 2, "%s: %s", cases[c][0], run.out);
        cr_expect(test_contains(run.err, "by the cost model; it must take more than 0 and less "
                                         "than 1e6 s (check cost.* and gpu.*)"),
                  "%s: %s", cases[c][0], run.err);
        test_run_free(&run);
    }
    test_run_t run = test_kvio(dir, "validate", "chat", NULL);
    cr_expect_eq(run.status, 0, "the preset as it ships: %s", run.err);
    test_run_free(&run);
    test_rmtree(dir);
    free(dir);
}

/* A negative linear coefficient is refused naming its key (c0 = -5 with
 * c1 = -1 was clamped and reported as an iteration taking 0 s). */
Test(cli, negative_cost_coefficients_are_refused_naming_the_key, .timeout = 60)
{
    static const char *const cases[][2] = {
        {"cost.c0=-5", "cost.c0: -5 is below the minimum 0"},
        {"cost.c1=-1", "cost.c1: -1 is below the minimum 0"},
        {"cost.c2=-0.5", "cost.c2: -0.5 is below the minimum 0"},
        {"cost.c3=-1e-9", "cost.c3: -1e-09 is below the minimum 0"},
    };
    char *dir = test_tmpdir();
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        test_run_t run = test_kvio(dir, "validate", "chat", "--set", "cost.kind=linear", "--set",
                                   "cost.c0=5", "--set", cases[c][0], NULL);
        cr_expect_eq(run.status, 2, "%s: %s", cases[c][0], run.out);
        cr_expect(test_contains(run.err, cases[c][1]), "%s: %s", cases[c][0], run.err);
        test_run_free(&run);
    }
    test_rmtree(dir);
    free(dir);
}

/* Attention heads that the KV heads do not divide are refused (heads 3
 * with kv_heads 8, kv_heads 7 with 32 heads ran). */
Test(cli, heads_the_kv_heads_do_not_divide_are_refused, .timeout = 60)
{
    static const char *const cases[][3] = {
        {"model.heads=3", "model.kv_heads=8", "model.kv_heads: 8 does not divide the 3 attention"},
        {"model.heads=32", "model.kv_heads=7", "model.kv_heads: 7 does not divide the 32 attention"},
        {"model.heads=32", "model.kv_heads=64", "model.kv_heads: 64 does not divide the 32"},
    };
    char *dir = test_tmpdir();
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        test_run_t run = test_kvio(dir, "validate", "chat", "--set", cases[c][0], "--set",
                                   cases[c][1], NULL);
        cr_expect_eq(run.status, 2, "%s %s: %s", cases[c][0], cases[c][1], run.out);
        cr_expect(test_contains(run.err, cases[c][2]), "%s", run.err);
        test_run_free(&run);
    }
    test_run_t run = test_kvio(dir, "validate", "chat", "--set", "model.heads=32", "--set",
                               "model.kv_heads=4", NULL);
    cr_expect_eq(run.status, 0, "%s", run.err);
    test_run_free(&run);
    test_rmtree(dir);
    free(dir);
}

/* #40 item 15 (part): small inputs refused silently or wrongly. cachesim
 * --eviction ',' exited 2 with no message; serve..kvcache.blocks was read as
 * serve.kvcache.blocks; kvio run DIR said "read error" (exit 1); a tensor
 * parallelism of 3 on 8 KV heads ran. Each exits 2 naming the cause. */
Test(cli, small_inputs_are_refused_naming_the_cause, .timeout = 60)
{
    char *dir = test_tmpdir();
    char fixture[1200];
    snprintf(fixture, sizeof(fixture), "%s/tests/fixtures/mooncake_small.jsonl", KVIO_SOURCE_DIR);
    struct {
        const char *args[6];
        const char *message;
    } cases[] = {
        {{"cachesim", fixture, "--eviction", ",", NULL}, "--eviction ',' names no policy"},
        {{"validate", "chat", "--set", "serve..kvcache.blocks=10", NULL},
         "the key serve..kvcache.blocks has an empty part"},
        {{"run", ".", NULL}, ".: is a directory, not a workload file"},
        {{"validate", "chat", "--set", "cost.tensor_parallel=3", NULL},
         "cost.tensor_parallel: 3 does not split the model's 32 attention heads and 8 KV heads"},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        const char *const *a = cases[c].args;
        test_run_t run = test_kvio(dir, a[0], a[1], a[2], a[3], a[4], NULL);
        cr_expect_eq(run.status, 2, "case %zu: %s", c, run.err);
        cr_expect(test_contains(run.err, cases[c].message), "case %zu: %s", c, run.err);
        test_run_free(&run);
    }
    test_rmtree(dir);
    free(dir);
}

/* #40 item 15 (part): compare --vary with a value twice failed midway;
 * update.die_rank beyond the serve ranks was ignored; --event-trace FILE
 * overwrote a user's file without --force and left one when the run was
 * refused; kvio run --format json | head exited 0 after the failed write. */
Test(cli, more_small_inputs_are_refused_naming_the_cause, .timeout = 90)
{
    char *dir = test_tmpdir();
    test_run_t run = test_kvio(dir, "compare", "chat", "--vary", "serve.scheduler.policy=fcfs,fcfs",
                               "-o", "cmp", NULL);
    cr_expect_eq(run.status, 2, "%s", run.err);
    cr_expect(test_contains(run.err, "--vary serve.scheduler.policy: 'fcfs' is given twice"),
              "%s", run.err);
    test_run_free(&run);
    run = test_kvio(dir, "validate", "quickstart", "--set", "update.die_during_version=2", "--set",
                    "update.die_rank=9", NULL);
    cr_expect_eq(run.status, 2, "%s", run.err);
    cr_expect(test_contains(run.err, "update.die_rank: 9 is no serve rank"), "%s", run.err);
    test_run_free(&run);
    char *mine = test_write_file(dir, "mine.pfw", "mine\n");
    run = test_kvio(dir, "run", "chat", "--set", "duration=2s", "--event-trace", "mine.pfw", "-o",
                    "out", NULL);
    cr_expect_eq(run.status, 2, "%s", run.err);
    cr_expect(test_contains(run.err, "--event-trace mine.pfw: exists (use --force"), "%s",
              run.err);
    test_run_free(&run);
    char *text = test_read_file(mine);
    cr_expect_str_eq(text, "mine\n", "the user's file was overwritten");
    free(text);
    char path[1200];
    snprintf(path, sizeof(path), "%s/out", dir);
    cr_expect_neq(access(path, F_OK), 0, "a refused run made its results directory");
    /* A device is no user's file: a trace to /dev/null (bench/report.sh's
     * measure of the trace's cost) runs. */
    run = test_kvio(dir, "run", "chat", "--set", "duration=2s", "--event-trace", "/dev/null",
                    "-o", "devnull", "--allow-invalid", NULL);
    cr_expect_eq(run.status, 0, "%s", run.err);
    test_run_free(&run);
    char command[2600];
    /* Its stdout /dev/full: every write fails, as into a pipe whose reader
     * has gone (| head), without the race of when head goes. */
    snprintf(command, sizeof(command),
             "'%s' run chat --set duration=2s --format json -o out2 >/dev/full; "
             "echo \"status $?\" >&2", test_kvio_binary());
    const char *argv[] = {"bash", "-c", command, NULL};
    run = test_exec(dir, argv);
    cr_expect(test_contains(run.err, "status 1"), "%d: %s", run.status, run.err);
    cr_expect(test_contains(run.err, "writing the summary to stdout failed"), "%s", run.err);
    test_run_free(&run);
    /* #40 item 15: turns past their bound were taken as 10,000 silently; a
     * cost of --batch 0 printed a 0-token batch; --metrics with a key no
     * run has added nothing, silently. */
    run = test_kvio(dir, "validate", "chat", "--set", "stream.prefix.sessions.turns=100000", NULL);
    cr_expect_eq(run.status, 2, "%s", run.err);
    cr_expect(test_contains(run.err, "stream.prefix.sessions.turns: 100000 is above the largest, "
                                     "10000"),
              "%s", run.err);
    test_run_free(&run);
    run = test_kvio(dir, "cost", "--prefill", "100", "--batch", "0", NULL);
    cr_expect_eq(run.status, 2, "%s", run.err);
    cr_expect(test_contains(run.err, "--batch 0: a batch holds at least one sequence"), "%s",
              run.err);
    test_run_free(&run);
    run = test_kvio(dir, "compare", "chat", "--set", "duration=2s", "--vary",
                    "serve.scheduler.policy=fcfs,lpm", "--metrics", "foo.bar", "-o", "metrics",
                    NULL);
    /* #52: --metrics names a declared figure; another is refused before any
     * run, with no directory made (it was a warning after every run). */
    cr_expect_eq(run.status, 2, "%s", run.err);
    cr_expect(test_contains(run.err, "--metrics foo.bar: not a number kvio reports"), "%s",
              run.err);
    test_run_free(&run);
    snprintf(path, sizeof(path), "%s/metrics", dir);
    cr_expect_neq(access(path, F_OK), 0, "a refused compare made %s", path);
    free(mine);
    test_rmtree(dir);
    free(dir);
}

/* #40 item 7: under mpirun a workload without trainers ran as N independent
 * copies (mpirun -np 4: four results directories, each a full run, exit 0).
 * A run that is one process now refuses mpirun's processes on every rank,
 * before any directory. (mpirun's environment stands in for mpirun.) */
Test(cli, one_process_runs_refuse_mpiruns_copies, .timeout = 30)
{
    char *dir = test_tmpdir();
    const char *argv[] = {"env", "OMPI_COMM_WORLD_SIZE=4", test_kvio_binary(), "run", "chat",
                          "--set", "ranks.serve=4", "-o", "out", NULL};
    test_run_t run = test_exec(dir, argv);
    cr_expect_eq(run.status, 2, "%s", run.err);
    cr_expect(test_contains(run.err, "mpirun started 4 processes, but this run (mode: "
                                     "simulate, no trainers) is one process"),
              "%s", run.err);
    test_run_free(&run);
    char path[1200];
    snprintf(path, sizeof(path), "%s/out", dir);
    cr_expect_neq(access(path, F_OK), 0, "a results directory was made");
    test_rmtree(dir);
    free(dir);
}

/* #40 item 11 (part): an unreachable Redis tier was refused only after the
 * results directory existed (a regression). Emulate now pings every Redis
 * tier in its preflight: refused before any directory, naming the tier. */
Test(cli, an_unreachable_redis_tier_is_refused_before_the_run, .timeout = 30)
{
    int port = test_free_port();
    cr_assert_gt(port, 0);
    char url[128];
    snprintf(url, sizeof(url), "redis://127.0.0.1:%d", port);
    char *dir = test_tmpdir();
    test_run_t run = run_with_redis_tier(dir, url);
    cr_expect_eq(run.status, 1, "%s", run.err);
    cr_expect(test_contains(run.err, "serve.kvcache.tiers[0].redis: redis://127.0.0.1:"), "%s",
              run.err);
    cr_expect(test_contains(run.err, "connection refused"), "%s", run.err);
    test_run_free(&run);
    char path[1200];
    snprintf(path, sizeof(path), "%s/out", dir);
    cr_expect_neq(access(path, F_OK), 0, "a results directory was made");
    test_rmtree(dir);
    free(dir);
}

/* #40 item 14 (part): a 5 KB -o path left about 4 KB of nested directories
 * before it failed. It is refused before anything is made. */
Test(cli, a_results_path_too_long_is_refused_before_any_directory, .timeout = 30)
{
    char *dir = test_tmpdir();
    char path[5200];
    size_t at = 0;
    for (int part = 0; part < 25; part++) {
        memset(path + at, 'd', 200);
        at += 200;
        path[at++] = '/';
    }
    path[at - 1] = '\0';
    test_run_t run = test_kvio(dir, "run", "chat", "--set", "duration=2s", "-o", path, NULL);
    cr_expect_eq(run.status, 2, "%s", run.err);
    cr_expect(test_contains(run.err, "results directory: a path of 5024 bytes"), "%s", run.err);
    test_run_free(&run);
    char first[1400];
    snprintf(first, sizeof(first), "%s/%.200s", dir, path);
    cr_expect_neq(access(first, F_OK), 0, "a parent directory was made");
    test_rmtree(dir);
    free(dir);
}

/* #41 item 1: an overloaded run (served 26.6 of 99.7 req/s) printed no
 * warning. summary.json now says valid and lists warnings with the measured
 * value and the threshold, printed after the table even with -q. #52: the
 * verdict decides the exit status: 1, the reason on the last line; with
 * --allow-invalid (an overload study) 0. */
Test(cli, an_overloaded_run_is_marked_invalid_with_the_numbers, .timeout = 60)
{
    char *dir = test_tmpdir();
    test_run_t run = test_kvio_verdict(dir, "-q", "run", "chat", "--set", "duration=5s", "--set",
                                       "stream.arrival.rate=200", "-o", "over", NULL);
    cr_expect_eq(run.status, 1, "%s", run.err);
    cr_expect(test_contains(run.err, "warning: overloaded: served"), "%s", run.err);
    const char *last = run.err + strlen(run.err);
    while (last > run.err && last[-1] == '\n')
        last--;
    while (last > run.err && last[-1] != '\n')
        last--;
    cr_expect(strncmp(last, "kvio: the run is not valid", 26) == 0 &&
                  test_contains(last, "overloaded: served"),
              "the last line says why: %s", last);
    test_run_free(&run);
    run = test_kvio_verdict(dir, "-q", "run", "chat", "--set", "duration=5s", "--set",
                            "stream.arrival.rate=200", "-o", "studied", "--allow-invalid", NULL);
    cr_expect_eq(run.status, 0, "%s", run.err);
    cr_expect(test_contains(run.err, "(--allow-invalid: exit 0)"), "%s", run.err);
    test_run_free(&run);
    char path[1200];
    snprintf(path, sizeof(path), "%s/over/summary.json", dir);
    char *text = test_read_file(path);
    json_t *summary = text != NULL ? json_loads(text, 0, NULL) : NULL;
    cr_assert_not_null(summary);
    cr_expect(json_is_false(json_object_get(summary, "valid")));
    const json_t *warning = json_array_get(json_object_get(summary, "warnings"), 0);
    cr_expect_str_eq(test_json_string(warning, "kind"), "overload");
    cr_expect_lt(test_json_number(warning, "measured"), test_json_number(warning, "threshold"));
    json_decref(summary);
    free(text);
    run = test_kvio_verdict(dir, "-q", "run", "chat", "--set", "duration=5s", "-o", "fine", NULL);
    cr_expect_eq(run.status, 0, "%s", run.err);
    cr_expect(!test_contains(run.err, "warning"), "%s", run.err);
    test_run_free(&run);
    snprintf(path, sizeof(path), "%s/fine/summary.json", dir);
    text = test_read_file(path);
    summary = text != NULL ? json_loads(text, 0, NULL) : NULL;
    cr_assert_not_null(summary);
    cr_expect(json_is_true(json_object_get(summary, "valid")), "%s", text);
    cr_expect_eq(json_array_size(json_object_get(summary, "warnings")), 0);
    json_decref(summary);
    free(text);
    test_rmtree(dir);
    free(dir);
}

/* #41 item 9 (part): a misspelt command, option or preset got no
 * suggestion, while keys and values did. */
Test(cli, misspelt_commands_options_and_presets_get_a_suggestion, .timeout = 30)
{
    static const struct {
        const char *args[4];
        const char *message;
    } cases[] = {
        {{"runn", NULL}, "unknown command 'runn' (did you mean 'run'?"},
        {{"run", "chat", "--sett", "x=1"}, "unknown option '--sett' (did you mean '--set'?)"},
        {{"run", "caht", NULL}, "no preset of that name (kvio list shows them; did you mean "
                                "'chat'?)"},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        const char *const *a = cases[c].args;
        test_run_t run = test_kvio(NULL, a[0], a[1], a[2], a[3], NULL);
        cr_expect_eq(run.status, 2, "case %zu: %s", c, run.err);
        cr_expect(test_contains(run.err, cases[c].message), "case %zu: %s", c, run.err);
        test_run_free(&run);
    }
}

/* #40 item 11: a file tier on a read-only file system or larger than the
 * free space under it, and host tiers over this machine's memory, were
 * refused only once the ranks failed, after the results directory was
 * made. Now before it, exit 2, with the numbers (validate says the same). */
Test(cli, tiers_that_cannot_fit_are_refused_before_the_run, .timeout = 60)
{
    char *dir = test_tmpdir();
    char read_only[1200], small[1200];
    snprintf(read_only, sizeof(read_only), "%s/ro", dir);
    snprintf(small, sizeof(small), "%s/small", dir);
    mkdir(read_only, 0700);
    mkdir(small, 0700);
    char reason[256];
    if (!test_private_mount(read_only, "tmpfs", MS_RDONLY, "size=1m", reason, sizeof(reason)) ||
        !test_private_mount(small, "tmpfs", 0, "size=1m", reason, sizeof(reason))) {
        test_rmtree(dir);
        test_require("mount", 0, reason);
    }
    char tiers[3][1400];
    snprintf(tiers[0], sizeof(tiers[0]),
             "serve.kvcache.tiers=[{kind: file, file: {path: %s/kv}, size: 1MiB}]", read_only);
    snprintf(tiers[1], sizeof(tiers[1]),
             "serve.kvcache.tiers=[{kind: file, file: {path: %s}, size: 64MiB}]", small);
    snprintf(tiers[2], sizeof(tiers[2]),
             "serve.kvcache.tiers=[{kind: host, size: 100TiB}]");
    const char *expected[3] = {"is on a read-only file system",
                               "the file tier needs 0.12 GiB (size x serve ranks)",
                               "GiB of host tiers)) but this machine has"};
    for (int i = 0; i < 3; i++) {
        test_run_t run = test_kvio(dir, "run", "chat", "--set", "mode=emulate", "--set",
                                   "duration=2s", "--set", "serve.kvcache.blocks=400", "--set",
                                   "ranks.serve=2", "--set", tiers[i], "-o", "out", NULL);
        cr_expect_eq(run.status, 2, "case %d: %s", i, run.err);
        cr_expect(test_contains(run.err, expected[i]), "case %d: %s", i, run.err);
        test_run_free(&run);
        char path[1300];
        snprintf(path, sizeof(path), "%s/out", dir);
        cr_expect_neq(access(path, F_OK), 0, "case %d: a results directory was made", i);
    }
    test_run_t validated = test_kvio(dir, "validate", "chat", "--set", "mode=emulate", "--set",
                                     tiers[0], NULL);
    cr_expect_eq(validated.status, 2, "%s", validated.err);
    cr_expect(test_contains(validated.err, expected[0]), "%s", validated.err);
    test_run_free(&validated);
    umount2(read_only, MNT_DETACH);
    umount2(small, MNT_DETACH);
    test_rmtree(dir);
    free(dir);
}

/* #40 item 14: a message naming a long path was cut at about 1,030
 * characters, before its cause. Now the cause ends it. */
Test(cli, a_long_path_in_a_message_keeps_its_cause, .timeout = 30)
{
    char *dir = test_tmpdir();
    char *blocker = test_write_file(dir, "blocker", "a file, not a directory\n");
    char long_part[1300];
    size_t at = 0;
    for (int part = 0; part < 6; part++) {
        memset(long_part + at, (char)('d' + part), 200);
        at += 200;
        long_part[at++] = '/';
    }
    long_part[at - 1] = '\0';
    char output[2600], trace[2600];
    snprintf(output, sizeof(output), "%s/%s", blocker, long_part);
    snprintf(trace, sizeof(trace), "stream.trace.path=%s/%s/x.jsonl", dir, long_part);
    test_run_t run = test_kvio(dir, "run", "chat", "--set", "duration=2s", "-o", output, NULL);
    cr_expect_neq(run.status, 0);
    cr_expect(test_contains(run.err, "Not a directory"), "%s", run.err);
    test_run_free(&run);
    run = test_kvio(dir, "run", "chat", "--set", "duration=2s", "--set", trace, NULL);
    cr_expect_eq(run.status, 2, "%s", run.err);
    cr_expect(test_contains(run.err, "x.jsonl: No such file or directory"), "%s", run.err);
    test_run_free(&run);
    free(blocker);
    test_rmtree(dir);
    free(dir);
}

/* #41 item 6: provenance. summary.json's config echo, run again, failed
 * ("kvio: null: No such file or directory"); the command line and its
 * overrides were kept nowhere, nor the warnings a run logged. Now `kvio run
 * DIR/summary.json` reruns a simulate run byte for byte, summary.json has
 * the command and the overrides, and run.log has the command, every warning
 * (also under -q) and how the run ended. */
Test(cli, the_config_echo_reruns_a_simulate_run_byte_for_byte, .timeout = 60)
{
    char *dir = test_tmpdir();
    test_run_t run = test_kvio(dir, "run", "chat", "--set", "duration=20s", "--set",
                               "stream.arrival.rate=150", "-o", "first", "-q", "--allow-invalid",
                               NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    test_run_free(&run);
    run = test_kvio(dir, "run", "first/summary.json", "-o", "again", "-q", "--allow-invalid",
                    NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    test_run_free(&run);
    const char *files[] = {"requests.csv", "iterations.csv"};
    for (size_t i = 0; i < 2; i++) {
        char first[1300], again[1300];
        snprintf(first, sizeof(first), "%s/first/%s", dir, files[i]);
        snprintf(again, sizeof(again), "%s/again/%s", dir, files[i]);
        char *a = test_read_file(first), *b = test_read_file(again);
        cr_assert(a != NULL && b != NULL);
        cr_expect_str_eq(a, b, "%s differs", files[i]);
        free(a);
        free(b);
    }
    char path[1300];
    snprintf(path, sizeof(path), "%s/first/summary.json", dir);
    json_t *summary = json_load_file(path, 0, NULL);
    cr_assert_not_null(summary);
    cr_expect_str_eq(test_json_string(summary, "command.0"), "kvio");
    cr_expect_str_eq(test_json_string(summary, "command.1"), "run");
    cr_expect_str_eq(test_json_string(summary, "overrides.1"), "stream.arrival.rate=150");
    json_decref(summary);
    snprintf(path, sizeof(path), "%s/first/run.log", dir);
    char *log = test_read_file(path);
    cr_assert_not_null(log, "no run.log");
    cr_expect(test_contains(log, "command: kvio run 'chat' '--set' 'duration=20s'"), "%s", log);
    cr_expect(test_contains(log, "kvio: warning: overloaded"), "hushed by -q, kept: %s", log);
    cr_expect(test_contains(log, "complete: true"), "%s", log);
    free(log);
    /* compare.json and cachesim's JSON name the host and the build too. */
    run = test_kvio(dir, "compare", "chat", "--set", "duration=2s", "--vary",
                    "serve.scheduler.policy=fcfs,lpm", "-o", "cmp", "-q", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    test_run_free(&run);
    snprintf(path, sizeof(path), "%s/cmp/compare.json", dir);
    json_t *compare = json_load_file(path, 0, NULL);
    cr_assert_not_null(compare);
    cr_expect_gt(strlen(test_json_string(compare, "host.hostname")), 0);
    cr_expect_gt(strlen(test_json_string(compare, "build.kvio_version")), 0);
    json_decref(compare);
    test_rmtree(dir);
    free(dir);
}

/* #41 item 9: the run's header names the mode, model, GPU and ranks; a
 * coupled run's table fits 80 columns (it was 101); --event-trace inside
 * the -o directory works (it failed: the directory did not exist yet); a
 * fifth --vary says what is wrong; emulate says it is setting up. */
Test(cli, the_command_line_says_what_runs_and_fits_80_columns, .timeout = 90)
{
    char *dir = test_tmpdir();
    test_run_t run = test_kvio(dir, "run", "quickstart", "--set", "mode=simulate", "-o", "qs",
                               "--event-trace", "qs/events.pfw", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    cr_expect(test_contains(run.out, "kvio run quickstart (simulate: llama3-8b on h200, 1 train "
                                     "+ 2 serve ranks)"),
              "%s", run.out);
    cr_expect(test_contains(run.out, "updates activated"), "%s", run.out);
    size_t lines, widest;
    measure_lines(run.out, &lines, &widest);
    cr_expect_leq(widest, 80, "%s", run.out);
    test_run_free(&run);
    char path[1300];
    snprintf(path, sizeof(path), "%s/qs/events.pfw", dir);
    cr_expect_eq(access(path, F_OK), 0, "no event trace inside the results directory");
    run = test_kvio(dir, "compare", "chat", "--vary", "seed=1,2", "--vary", "duration=1s,2s",
                    "--vary", "stream.arrival.rate=1,2", "--vary", "serve.scheduler.policy=fcfs,lpm",
                    "--vary", "serve.kvcache.block_size=16,32", NULL);
    cr_expect_eq(run.status, 2);
    cr_expect(test_contains(run.err, "at most 4 --vary keys") &&
                  test_contains(run.err, "'serve.kvcache.block_size=16,32' is one more"),
              "%s", run.err);
    test_run_free(&run);
    run = test_kvio(dir, "run", "chat", "--set", "mode=emulate", "--set", "duration=1s", "--set",
                    "serve.kvcache.blocks=400", "--set", "stream.arrival.rate=20", "-o", "em",
                    "--allow-invalid", NULL);
    cr_expect_eq(run.status, 0, "%s", run.err);
    cr_expect(test_contains(run.err, "kvio: emulate: setting up 1 rank"), "%s", run.err);
    test_run_free(&run);
    test_rmtree(dir);
    free(dir);
}

/* #41 item 4: compare printed values as 1.519e+04±1.4e+04 and kept the
 * paired difference from the first variant in compare.json only. Now fixed
 * decimals, the paired differences under the table, and compare.csv. */
Test(cli, compare_prints_paired_differences_and_writes_a_csv, .timeout = 90)
{
    char *dir = test_tmpdir();
    test_run_t run = test_kvio(dir, "compare", "chat", "--set", "duration=20s", "--set",
                               "serve.kvcache.blocks=600", "--vary",
                               "serve.scheduler.policy=fcfs,sjf", "--repeat", "3", "-o", "cmp",
                               NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    cr_expect(test_contains(run.out, "difference from policy=fcfs, paired by seed"), "%s",
              run.out);
    cr_expect(!test_contains(run.out, "e+0"), "an exponent in the table: %s", run.out);
    cr_expect(test_contains(run.out, " ± "), "%s", run.out);
    test_run_free(&run);
    char path[1300];
    snprintf(path, sizeof(path), "%s/cmp/compare.csv", dir);
    test_csv_t csv = test_csv_read(path);
    cr_expect_eq(test_csv_column(&csv, "delta_vs_first"), 4);
    size_t sjf_rows = 0;
    for (size_t row = 0; row < csv.num_rows; row++) {
        if (strcmp(csv.rows[row][0], "policy=sjf") == 0) {
            sjf_rows++;
            cr_expect(!isnan(test_csv_number(&csv, row, "delta_vs_first")), "row %zu", row);
        } else {
            cr_expect(isnan(test_csv_number(&csv, row, "delta_vs_first")), "row %zu", row);
        }
    }
    cr_expect_gt(sjf_rows, 5);
    test_csv_free(&csv);
    test_rmtree(dir);
    free(dir);
}

/* stream.users closes its loop where the stream is read: emulate serve
 * ranks that share one stream (or a client rank) cannot hear each other's
 * answers, so the workload is refused before the run, naming the key. */
Test(cli, closed_loop_users_over_shared_emulate_ranks_are_refused, .timeout = 30)
{
    char *dir = test_tmpdir();
    free(test_write_file(dir, "w.yaml",
                         "name: users\nmode: emulate\nduration: 5s\nranks: {serve: 2}\n"
                         "model: {preset: llama3.2-1b}\ngpu: {preset: h200}\n"
                         "serve: {kvcache: {capacity: 256MiB}}\nstream: {users: 4}\n"));
    test_run_t run = test_kvio(dir, "validate", "w.yaml", NULL);
    cr_expect_eq(run.status, 2, "%s", run.err);
    cr_expect(test_contains(run.err, "stream.users: a closed loop hears each answer where its "
                                     "stream is read") &&
                  test_contains(run.err, "ranks.serve: 2"),
              "%s", run.err);
    test_run_free(&run);
    /* One serve rank is fine, and so is simulate over two. */
    run = test_kvio(dir, "validate", "w.yaml", "--set", "ranks.serve=1", NULL);
    cr_expect_eq(run.status, 0, "%s", run.err);
    test_run_free(&run);
    run = test_kvio(dir, "validate", "w.yaml", "--set", "mode=simulate", NULL);
    cr_expect_eq(run.status, 0, "%s", run.err);
    test_run_free(&run);
    test_rmtree(dir);
    free(dir);
}
