/* Tests for kvio report: the page made from fixture results has every chart
 * (by id and title), each SVG is well-formed XML, no number is NaN or
 * infinite, nothing external is referenced; two runs and a compare set are
 * compared side by side; long series are downsampled; bad input is refused
 * with the file named, and mutated input never crashes the reader. */
#include <criterion/criterion.h>
#include <stdarg.h>
#include <ctype.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvio/report.h"
#include "kvio/rng.h"
#include "tests/helpers.h"

#define FIXTURES KVIO_SOURCE_DIR "/tests/fixtures/report"

/* ---------- helpers ---------- */

/* A tiny XML well-formedness check of text[0, length): balanced, properly
 * nested tags, quoted attributes, and only known entities. Returns NULL when
 * well-formed, else a static reason. */
static const char *xml_problem(const char *text, size_t length)
{
    const char *stack[256];
    size_t stack_lengths[256];
    size_t depth = 0;
    const char *end = text + length;
    for (const char *c = text; c < end;) {
        if (*c == '&') {
            const char *entities[] = {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;", "&#"};
            bool known = false;
            for (size_t i = 0; i < 6 && !known; i++)
                known = strncmp(c, entities[i], strlen(entities[i])) == 0;
            if (!known)
                return "unknown entity";
            const char *semicolon = memchr(c, ';', (size_t)(end - c));
            if (semicolon == NULL || semicolon - c > 8)
                return "unterminated entity";
            c = semicolon + 1;
            continue;
        }
        if (*c != '<') {
            if (*c == '>')
                return "bare >";
            c++;
            continue;
        }
        bool closing = c[1] == '/';
        const char *name = c + (closing ? 2 : 1);
        const char *name_end = name;
        while (name_end < end && (isalnum((unsigned char)*name_end) || *name_end == '-' ||
                                  *name_end == ':' || *name_end == '_'))
            name_end++;
        if (name_end == name)
            return "tag without a name";
        const char *cursor = name_end;
        bool self_closing = false;
        while (cursor < end && *cursor != '>') {
            if (isspace((unsigned char)*cursor)) {
                cursor++;
                continue;
            }
            if (*cursor == '/' && cursor + 1 < end && cursor[1] == '>') {
                self_closing = true;
                cursor++;
                continue;
            }
            if (closing)
                return "attribute on a closing tag";
            const char *attribute = cursor;
            while (cursor < end && (isalnum((unsigned char)*cursor) || *cursor == '-' ||
                                    *cursor == ':' || *cursor == '_'))
                cursor++;
            if (cursor == attribute || cursor >= end || *cursor != '=' || cursor[1] != '"')
                return "attribute not name=\"value\"";
            const char *value_end = memchr(cursor + 2, '"', (size_t)(end - cursor - 2));
            if (value_end == NULL)
                return "unterminated attribute value";
            for (const char *v = cursor + 2; v < value_end; v++)
                if (*v == '<' || (*v == '&' && strncmp(v, "&amp;", 5) != 0 &&
                                  strncmp(v, "&quot;", 6) != 0 && strncmp(v, "&lt;", 4) != 0 &&
                                  strncmp(v, "&gt;", 4) != 0 && strncmp(v, "&#", 2) != 0))
                    return "< or bare & in an attribute value";
            cursor = value_end + 1;
        }
        if (cursor >= end)
            return "unterminated tag";
        size_t name_length = (size_t)(name_end - name);
        if (closing) {
            if (depth == 0 || stack_lengths[depth - 1] != name_length ||
                strncmp(stack[depth - 1], name, name_length) != 0)
                return "closing tag does not match";
            depth--;
        } else if (!self_closing) {
            if (depth == 256)
                return "nested too deep";
            stack[depth] = name;
            stack_lengths[depth++] = name_length;
        }
        c = cursor + 1;
    }
    return depth == 0 ? NULL : "unclosed tag";
}

/* A label slanted by -35 degrees and anchored at its end reaches left by
 * its width (6.4 px a character, the renderer's estimate) times cos 35:
 * it must start inside the picture (labels were clipped). Returns how many
 * slanted labels the SVG from start to end has. */
static size_t check_slanted_labels(const char *start, const char *end)
{
    size_t count = 0;
    for (const char *label = strstr(start, "rotate(-35 "); label != NULL && label < end;
         label = strstr(label + 1, "rotate(-35 ")) {
        double x = strtod(label + strlen("rotate(-35 "), NULL);
        const char *text = strchr(label, '>') + 1;
        size_t chars = (size_t)(strchr(text, '<') - text);
        cr_assert_geq(x - 0.82 * 6.4 * (double)chars, -0.5, "label '%.*s' at x %.1f is clipped",
                      (int)chars, text, x);
        count++;
    }
    return count;
}

/* Checks every <svg>...</svg> of an HTML page; returns how many there are. */
static size_t check_svgs(const char *html)
{
    size_t count = 0;
    for (const char *start = strstr(html, "<svg"); start != NULL;
         start = strstr(start + 1, "<svg")) {
        const char *end = strstr(start, "</svg>");
        cr_assert_not_null(end, "an <svg> is not closed");
        const char *problem = xml_problem(start, (size_t)(end + 6 - start));
        cr_assert_null(problem, "svg #%zu is not well-formed XML: %s", count + 1,
                       problem != NULL ? problem : "");
        check_slanted_labels(start, end);
        count++;
    }
    return count;
}

/* True when the word occurs as a token (not inside a longer word). */
static bool has_token(const char *text, const char *word)
{
    size_t length = strlen(word);
    for (const char *at = strcasestr(text, word); at != NULL; at = strcasestr(at + 1, word)) {
        bool before = at > text && isalnum((unsigned char)at[-1]);
        bool after = isalnum((unsigned char)at[length]);
        if (!before && !after)
            return true;
    }
    return false;
}

/* The text of figure id="id" ... </figure>, malloc'd, or NULL. */
static char *figure(const char *html, const char *id)
{
    char needle[128];
    snprintf(needle, sizeof(needle), "<figure id=\"%s\">", id);
    const char *start = strstr(html, needle);
    if (start == NULL)
        return NULL;
    const char *end = strstr(start, "</figure>");
    cr_assert_not_null(end);
    return strndup(start, (size_t)(end - start));
}

static size_t count_of(const char *text, const char *needle)
{
    size_t count = 0;
    for (const char *at = strstr(text, needle); at != NULL; at = strstr(at + 1, needle))
        count++;
    return count;
}

/* Copies a fixture run directory (its known files) to dir/name. */
static void copy_fixture(const char *dir, const char *fixture, const char *name)
{
    char path[1200];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    cr_assert_eq(mkdir(path, 0755), 0);
    const char *files[] = {"summary.json", "requests.csv", "iterations.csv", "updates.csv"};
    for (size_t i = 0; i < 4; i++) {
        char source[1200];
        snprintf(source, sizeof(source), "%s/%s/%s", FIXTURES, fixture, files[i]);
        char *text = test_read_file(source);
        if (text == NULL)
            continue;
        free(test_write_file(path, files[i], text));
        free(text);
    }
}

static char *report_html(const char *out_dir)
{
    char path[2048];
    snprintf(path, sizeof(path), "%s/report.html", out_dir);
    return test_read_file(path);
}

/* Reports input (in dir) into dir/out; the page, asserting it was written. */
static char *report_of(const char *dir, const char *input)
{
    test_run_t run = test_kvio(dir, "report", input, "-o", "out", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    test_run_free(&run);
    char out[1100];
    snprintf(out, sizeof(out), "%s/out", dir);
    char *html = report_html(out);
    cr_assert_not_null(html);
    return html;
}

/* ---------- the page ---------- */

Test(report, fixture_report_has_every_chart_with_valid_svg, .timeout = 30)
{
    char *dir = test_tmpdir();
    test_run_t run = test_kvio(dir, "report", FIXTURES "/run-fcfs", FIXTURES "/run-lpm",
                               FIXTURES "/cachesim.json", "-o", "out", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    cr_assert(test_contains(run.out, "out/report.html (2 runs, 1 cachesim result)"), "%s",
              run.out);
    test_run_free(&run);
    char out[1100];
    snprintf(out, sizeof(out), "%s/out", dir);
    char *html = report_html(out);
    cr_assert_not_null(html);
    static const struct {
        const char *id, *title;
    } charts[] = {
        {"chart-ttft-cdf", "Time to first token (TTFT), CDF"},
        {"chart-tpot-cdf", "Time per output token (TPOT), CDF"},
        {"chart-e2el-cdf", "End-to-end latency (E2EL), CDF"},
        {"chart-throughput", "Request throughput and goodput"},
        {"chart-token-throughput", "Token throughput"},
        {"chart-hit-rate", "Prefix-cache hit rate"},
        {"chart-kv-usage", "KV-cache usage over time"},
        {"chart-batch-size", "Batch size over time"},
        {"chart-preemptions", "Preemptions over time"},
        {"chart-hit-rate-capacity-1", "Hit rate vs cache capacity: cachesim.json"},
        {"chart-update-breakdown", "Model-update latency breakdown (mean)"},
        {"chart-update-breakdown-1", "Model-update latency per update: run-fcfs"},
        {"chart-staleness", "Model staleness over time"},
        {"chart-tier-traffic", "KV-cache tier traffic"},
        {"chart-ttft-over-time", "TTFT over time, with the activations: run-fcfs"},
        {"chart-hit-rate-over-time", "Prefix hit rate over time, with the activations: run-fcfs"},
        {"chart-utilization", "Accelerator utilization"},
    };
    size_t num_charts = sizeof(charts) / sizeof(charts[0]);
    for (size_t i = 0; i < num_charts; i++) {
        char *text = figure(html, charts[i].id);
        cr_assert_not_null(text, "no chart %s", charts[i].id);
        char title[256];
        snprintf(title, sizeof(title), "<title id=\"%s-title\">%s</title>", charts[i].id,
                 charts[i].title);
        cr_assert(test_contains(text, title), "%s has no title '%s'", charts[i].id,
                  charts[i].title);
        cr_assert(test_contains(text, "<figcaption>"), "%s has no caption", charts[i].id);
        free(text);
    }
    cr_assert_eq(check_svgs(html), num_charts);
    /* Axis titles carry units. */
    const char *units[] = {"TTFT (ms)", "fraction of requests", "requests per second",
                           "tokens per second", "KV blocks in use (%)", "time (s)",
                           "capacity (blocks, log scale)", "share of the update latency (%)",
                           "GB (10^9 bytes)", "versions behind (count)"};
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
        cr_assert(test_contains(html, units[i]), "no axis title '%s'", units[i]);
    const char *bad_numbers[] = {"nan", "inf", "-inf", "infinity", "-nan"};
    for (size_t i = 0; i < 5; i++)
        cr_assert(!has_token(html, bad_numbers[i]), "the page contains '%s'", bad_numbers[i]);
    const char *external[] = {"http:", "https:", "<script", "<link", "src=", "@import",
                              "url(http", "file:"};
    for (size_t i = 0; i < sizeof(external) / sizeof(external[0]); i++)
        cr_assert(!test_contains(html, external[i]), "the page references '%s'", external[i]);
    /* The tier chart holds both tiers; the update chart all six versions. */
    char *tiers = figure(html, "chart-tier-traffic");
    cr_assert(test_contains(tiers, ">host</text>") && test_contains(tiers, ">redis</text>"));
    cr_assert(test_contains(tiers, "bytes_read") && test_contains(tiers, "bytes_written"));
    free(tiers);
    char *updates = figure(html, "chart-update-breakdown-1");
    cr_assert(test_contains(updates, "6 of 6 versions shown"), "%s", updates);
    free(updates);
    /* TTFT and hit rate over time mark every activation of run-fcfs (its
     * updates.csv: 6 versions on 2 ranks) over run-fcfs's requests alone:
     * run-lpm, without updates, gets no such chart (its requests under
     * run-fcfs's activations said nothing). */
    const char *over_time[] = {"chart-ttft-over-time", "chart-hit-rate-over-time"};
    for (size_t c = 0; c < 2; c++) {
        char *chart = figure(html, over_time[c]);
        cr_assert_eq(count_of(chart, "stroke-dasharray=\"4 3\""), 12, "%s", over_time[c]);
        cr_assert_eq(count_of(chart, "<polyline"), 1, "%s", over_time[c]);
        cr_assert(test_contains(chart, "this run&#39;s 12 activations"), "%s", chart);
        free(chart);
    }
    cr_assert_null(figure(html, "chart-ttft-over-time-2"));
    free(html);
    test_rmtree(dir);
    free(dir);
}

Test(report, two_runs_are_compared_side_by_side, .timeout = 30)
{
    char *dir = test_tmpdir();
    test_run_t run = test_kvio(dir, "report", FIXTURES "/run-fcfs", FIXTURES "/run-lpm", "--out",
                               "out", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    test_run_free(&run);
    char out[1100];
    snprintf(out, sizeof(out), "%s/out", dir);
    char *html = report_html(out);
    cr_assert_not_null(html);
    const char *lines[] = {"chart-ttft-cdf", "chart-tpot-cdf", "chart-e2el-cdf", "chart-kv-usage",
                           "chart-preemptions"};
    for (size_t i = 0; i < 5; i++) {
        char *text = figure(html, lines[i]);
        cr_assert_not_null(text, "%s", lines[i]);
        cr_assert_eq(count_of(text, "<polyline"), 2, "%s: one line per run", lines[i]);
        cr_assert(test_contains(text, ">run-fcfs</text>") && test_contains(text, ">run-lpm</text>"),
                  "%s: legend names both runs", lines[i]);
        free(text);
    }
    char *bars = figure(html, "chart-hit-rate");
    cr_assert_eq(count_of(bars, "<rect x="), 2 + 1 + 1, "two bars, a legend swatch, a frame");
    cr_assert(test_contains(bars, "run-fcfs, prefix-cache hit rate: 50.0"), "%s", bars);
    cr_assert(test_contains(bars, "run-lpm, prefix-cache hit rate: 70.0"), "%s", bars);
    free(bars);
    /* The runs table has one row per run, with the scheduler. */
    cr_assert(test_contains(html, "<td class=\"text\">run-lpm</td>"));
    cr_assert(test_contains(html, "<td class=\"text\">lpm</td>"));
    /* Only run-fcfs has updates.csv: the page says which runs the update
     * charts cover. */
    cr_assert(test_contains(html, "cover the 1 of 2 runs that have an updates.csv"));
    free(html);
    test_rmtree(dir);
    free(dir);
}

Test(report, charts_without_data_are_skipped_with_a_note, .timeout = 30)
{
    char *dir = test_tmpdir();
    test_run_t run = test_kvio(dir, "report", FIXTURES "/run-lpm", "-o", "out", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    test_run_free(&run);
    char out[1100];
    snprintf(out, sizeof(out), "%s/out", dir);
    char *html = report_html(out);
    cr_assert_not_null(html);
    cr_assert_null(strstr(html, "id=\"chart-update-breakdown\""));
    cr_assert_null(strstr(html, "id=\"chart-staleness\""));
    cr_assert_null(strstr(html, "id=\"chart-tier-traffic\""));
    cr_assert(test_contains(html, "Model-update charts skipped: no run has an updates.csv"));
    cr_assert(test_contains(html, "Tier traffic chart skipped"));
    cr_assert_not_null(strstr(html, "id=\"chart-ttft-cdf\""));
    free(html);
    test_rmtree(dir);
    free(dir);
}

Test(report, compare_directory_expands_into_its_variants, .timeout = 60)
{
    char *dir = test_tmpdir();
    test_run_t run = test_kvio(dir, "compare", "chat", "--vary",
                               "serve.scheduler.policy=fcfs,lpm", "--repeat", "2", "--set",
                               "duration=15s", "-o", "cmp", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    test_run_free(&run);
    run = test_kvio(dir, "report", "cmp", "-o", "out", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    cr_assert(test_contains(run.out, "(2 runs, 0 cachesim results)"), "%s", run.out);
    test_run_free(&run);
    char out[1100];
    snprintf(out, sizeof(out), "%s/out", dir);
    char *html = report_html(out);
    cr_assert_not_null(html);
    cr_assert(test_contains(html, "<td class=\"text\">policy=fcfs</td>"));
    cr_assert(test_contains(html, "<td class=\"text\">policy=lpm</td>"));
    cr_assert(test_contains(html, "</td><td>2</td>"), "two seeds per variant");
    char *bars = figure(html, "chart-throughput");
    cr_assert(test_contains(bars, "whiskers span min to max"), "%s", bars);
    /* chat sets no SLO: throughput bars only, no goodput "meeting the SLOs". */
    cr_assert_eq(count_of(bars, "<path d=\"M"), 2, "a whisker per bar");
    cr_assert(test_contains(bars, "no run set an SLO"), "%s", bars);
    cr_assert_not(test_contains(bars, "meeting the SLOs"), "%s", bars);
    free(bars);
    check_svgs(html);
    free(html);
    test_rmtree(dir);
    free(dir);
}

/* A rate sweep (bench/pkas.sh, or compare varying the rate) is drawn as
 * output throughput against offered rate, one line per admission policy
 * with its predictor. */
Test(report, a_rate_sweep_is_drawn_as_throughput_against_rate, .timeout = 60)
{
    char *dir = test_tmpdir();
    test_run_t run = test_kvio(dir, "compare", "chat", "--vary", "stream.arrival.rate=5,10,20",
                               "--vary", "serve.scheduler.policy=conservative,pkas", "--set",
                               "duration=10s", "--set", "serve.scheduler.predictor=noisy",
                               "-o", "cmp", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    test_run_free(&run);
    char *html = report_of(dir, "cmp");
    char *chart = figure(html, "chart-throughput-vs-rate");
    cr_assert_not_null(chart, "no throughput-against-rate chart");
    cr_expect(test_contains(chart, "Output throughput against offered rate: chat"), "%s", chart);
    cr_expect(test_contains(chart, ">conservative<"), "%s", chart);
    cr_expect(test_contains(chart, ">pkas, noisy 0.5<"), "%s", chart);
    cr_expect_eq(count_of(chart, "<polyline"), 2, "a line per policy");
    free(chart);
    chart = figure(html, "chart-ttft-vs-rate");
    cr_assert_not_null(chart, "no TTFT-against-rate chart");
    cr_expect_eq(count_of(chart, "<polyline"), 2, "a line per policy");
    free(chart);
    /* Six variant names do not fit their slots: slanted, inside the picture. */
    chart = figure(html, "chart-throughput");
    cr_expect_eq(check_slanted_labels(chart, chart + strlen(chart)), 6, "%s", chart);
    free(chart);
    check_svgs(html);
    free(html);
    test_rmtree(dir);
    free(dir);
}

/* #21: a line chart of 16 runs was unreadable (8 colours, then dashes).
 * Past 8 runs a line chart is split into panels of 8 on the same axes. */
Test(report, line_charts_of_many_runs_are_split_into_panels_of_eight, .timeout = 60)
{
    char *dir = test_tmpdir();
    test_run_t run = test_kvio(dir, "compare", "chat", "--vary",
                               "stream.arrival.rate=1,2,3,4,5,6,7,8,9,10", "--set",
                               "duration=5s", "-q", "-o", "cmp", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    test_run_free(&run);
    char *html = report_of(dir, "cmp");
    char *first = figure(html, "chart-kv-usage");
    char *second = figure(html, "chart-kv-usage-2");
    cr_assert_not_null(first);
    cr_assert_not_null(second, "no second panel");
    cr_expect(test_contains(first, "KV-cache usage over time (runs 1-8 of 10)"), "%s", first);
    cr_expect(test_contains(second, "KV-cache usage over time (runs 9-10 of 10)"), "%s", second);
    cr_expect_eq(count_of(first, "<polyline"), 8);
    cr_expect_eq(count_of(second, "<polyline"), 2);
    cr_expect(test_contains(second, ">rate=10<"), "%s", second);
    free(first);
    free(second);
    check_svgs(html);
    free(html);
    test_rmtree(dir);
    free(dir);
}

/* The tier chart from a real run's keys (not a hand-made fixture): it
 * plotted the tier's capacity (size_bytes) instead of its traffic. */
Test(report, the_tier_chart_shows_a_real_runs_traffic, .timeout = 60)
{
    char *dir = test_tmpdir();
    test_run_t run = test_kvio(dir, "run", "chat", "--set", "duration=10s", "--set",
                               "serve.kvcache.blocks=1000", "--set",
                               "serve.kvcache.tiers=[{kind: host, size: 256MiB}]", "-o", "res",
                               NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    test_run_free(&run);
    char *html = report_of(dir, "res");
    char *chart = figure(html, "chart-tier-traffic");
    cr_assert_not_null(chart, "no tier chart");
    cr_expect(test_contains(chart, "bytes_written"), "%s", chart);
    cr_expect(test_contains(chart, "host (rank 0)"), "%s", chart);
    cr_expect_not(test_contains(chart, "size_bytes"), "%s", chart);
    free(chart);
    chart = figure(html, "chart-hit-rate");
    cr_assert_not_null(chart, "no hit-rate chart");
    cr_expect(test_contains(chart, ">with lower-tier hits<"), "%s", chart);
    free(chart);
    /* Its latency by percentile, reads and writes of the tier. */
    chart = figure(html, "chart-tier-latency");
    cr_assert_not_null(chart, "no tier latency chart");
    cr_expect(test_contains(chart, "host (rank 0) read") &&
                  test_contains(chart, "host (rank 0) write"),
              "%s", chart);
    free(chart);
    free(html);
    test_rmtree(dir);
    free(dir);
}

/* An emulate run's tiers say what they moved each second, and the report
 * draws it: the seconds add up to the tier's bytes. */
Test(report, the_tier_bandwidth_chart_adds_up_to_the_tier_s_bytes, .timeout = 120)
{
    char *dir = test_tmpdir();
    test_run_t run = test_kvio(dir, "run", "chat", "--set", "mode=emulate", "--set",
                               "duration=4s", "--set", "serve.kvcache.capacity=512MiB", "--set",
                               "serve.kvcache.tiers=[{kind: host, size: 256MiB, write: through}]",
                               "-o", "res", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    test_run_free(&run);
    json_t *summary = test_summary(dir, "res");
    const json_t *tier = test_json(summary, "metrics.tiers.0");
    const json_t *written = test_json(tier, "per_second.write_gbps");
    double sum = 0;
    for (size_t i = 0; i < json_array_size(written); i++)
        sum += json_number_value(json_array_get(written, i));
    double bytes = test_json_number(tier, "bytes_written");
    cr_assert_gt(bytes, 0, "the chat run wrote through to the tier");
    cr_expect_float_eq(sum * 1e9, bytes, 1e-6 * bytes, "%.0f bytes by second, %.0f in all",
                       sum * 1e9, bytes);
    cr_expect_eq(json_array_size(written),
                 json_array_size(test_json(tier, "per_second.read_gbps")));
    json_decref(summary);
    char *html = report_of(dir, "res");
    char *chart = figure(html, "chart-tier-bandwidth");
    cr_assert_not_null(chart, "no tier bandwidth chart");
    cr_expect(test_contains(chart, "host (rank 0) write"), "%s", chart);
    free(chart);
    free(html);
    test_rmtree(dir);
    free(dir);
}

/* #21: comparing update transports printed rows of zeros and no update
 * latency, and the report refused the result (metrics.request_throughput
 * is missing). An update-only compare shows update rows and --metrics
 * rows, and reports. */
Test(report, an_update_only_compare_shows_update_rows_and_reports, .timeout = 120)
{
#ifndef KVIO_HAVE_UCX
    test_require("ucx", 0, "ucx transport not built");
#endif
    char *dir = test_tmpdir();
    test_run_t run = test_kvio(dir, "compare", "repro/viper-update", "--set",
                               "train.bytes=4MiB", "--set", "train.steps=3", "--set",
                               "train.step_time={dist: constant, value: 50ms}", "--vary",
                               "train.transport.kind=ucx,file", "--metrics",
                               "model_updates.update_latency_ms.p99", "-o", "cmp", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    cr_expect(test_contains(run.out, "update latency ms (mean)"), "%s", run.out);
    cr_expect(test_contains(run.out, "model_updates.update_latency_ms.p99"), "%s", run.out);
    cr_expect_not(test_contains(run.out, "request_throughput"), "%s", run.out);
    test_run_free(&run);
    char *html = report_of(dir, "cmp");
    cr_expect(test_contains(html, "id=\"chart-update-breakdown\""));
    cr_expect(test_contains(html, "no run served requests"));
    free(html);
    test_rmtree(dir);
    free(dir);
}

/* Weight sync as buckets (weight_sync:): a delta compare gets the update's
 * times per variant, as summary.json has them, and the share of the
 * weights on the wire (100 % whole, 13.5 % for 4.5 % bf16 deltas with a
 * 4-byte index each). */
Test(report, weight_sync_runs_get_their_update_times_and_wire_share, .timeout = 60)
{
    char *dir = test_tmpdir();
    test_run_t run = test_kvio(dir, "compare", "repro/checkpoint-engine-glm-4.5-air", "--vary",
                               "weight_sync.delta=0,0.045", "-o", "cmp", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    /* compare's table has the weight-sync rows too. */
    cr_expect(test_contains(run.out, "weight sync ms (last server)") &&
                  test_contains(run.out, "weight sync wire bytes"), "%s", run.out);
    test_run_free(&run);
    char *html = report_of(dir, "cmp");
    char *times = figure(html, "chart-sync-times");
    cr_assert_not_null(times, "no weight-sync chart");
    static const char *const variants[] = {"delta=0", "delta=0.045"};
    for (int v = 0; v < 2; v++) {
        char path[1200], title[128];
        snprintf(path, sizeof(path), "%s/cmp/%s/summary.json", dir, variants[v]);
        json_t *summary = json_load_file(path, 0, NULL);
        cr_assert_not_null(summary, "%s", path);
        double update_ms = test_json_number(summary, "metrics.model_updates.weight_sync.update_ms");
        json_decref(summary);
        cr_assert_gt(update_ms, 10);
        snprintf(title, sizeof(title), "%s, last server done: ", variants[v]);
        const char *bar = strstr(times, title);
        cr_assert_not_null(bar, "%s not in %s", title, times);
        double shown = strtod(bar + strlen(title), NULL);
        cr_expect(fabs(shown - update_ms) <= update_ms * 0.01, "%s: %g shown, %g in summary.json",
                  variants[v], shown, update_ms);
    }
    cr_expect(test_contains(times, "trainer&#39;s last bucket staged"), "%s", times);
    free(times);
    char *wire = figure(html, "chart-sync-wire");
    cr_assert_not_null(wire);
    cr_expect(test_contains(wire, "delta=0, bytes on the wire: 100<"), "%s", wire);
    cr_expect(test_contains(wire, "delta=0.045, bytes on the wire: 13.5<"), "%s", wire);
    free(wire);
    check_svgs(html);
    free(html);
    test_rmtree(dir);
    free(dir);
}

/* #21: latency axes were linear ("2500k ms" ticks, the fast runs in one
 * pixel); latencies spanning decades (an overloaded run) get a log axis. */
Test(report, latencies_spanning_decades_get_a_log_axis, .timeout = 60)
{
    char *dir = test_tmpdir();
    test_run_t run = test_kvio(dir, "run", "chat", "--set", "duration=15s", "--set",
                               "serve.kvcache.capacity=4GiB", "--set", "stream.arrival.rate=25",
                               "-o", "res", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    test_run_free(&run);
    char *html = report_of(dir, "res");
    char *chart = figure(html, "chart-ttft-cdf");
    cr_assert_not_null(chart);
    cr_expect(test_contains(chart, "Log x axis: the latencies span"), "%s", chart);
    free(chart);
    check_svgs(html);
    free(html);
    test_rmtree(dir);
    free(dir);
}

Test(report, long_time_series_are_downsampled, .timeout = 60)
{
    char *dir = test_tmpdir();
    copy_fixture(dir, "run-lpm", "long");
    char path[1200];
    snprintf(path, sizeof(path), "%s/long/iterations.csv", dir);
    FILE *file = fopen(path, "w");
    cr_assert_not_null(file);
    fprintf(file, "time_s,rank,duration_ms,batch_size,prefill_tokens,decode_seqs,kv_usage,"
                  "running,waiting,preempted,swap_bytes\n");
    for (int i = 0; i < 300000; i++)
        fprintf(file, "%.6f,0,5.0,%d,0,%d,%.4f,1,0,%d,0\n", i * 0.005, 1 + i % 9, i % 9,
                (i % 1000) / 1000.0, i % 5000 == 0);
    fclose(file);
    test_run_t run = test_kvio(dir, "report", "long", "-o", "out", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    test_run_free(&run);
    snprintf(path, sizeof(path), "%s/out", dir);
    char *html = report_html(path);
    cr_assert_not_null(html);
    cr_assert_lt(strlen(html), 400000, "a 300k-iteration run gives a small page");
    char *usage = figure(html, "chart-kv-usage");
    const char *points = strstr(usage, "points=\"");
    cr_assert_not_null(points);
    size_t count = 0;
    for (const char *c = points + 8; *c != '"'; c++)
        count += *c == ',';
    cr_assert_leq(count, KVIO_REPORT_MAX_POINTS);
    cr_assert_geq(count, KVIO_REPORT_MAX_POINTS / 2);
    free(usage);
    /* 60 preemptions over the run (one every 5000 iterations). */
    char *preemptions = figure(html, "chart-preemptions");
    cr_assert(test_contains(preemptions, ">60</text>") || test_contains(preemptions, ">70</text>"),
              "the y axis reaches the 60 preemptions");
    free(preemptions);
    free(html);
    test_rmtree(dir);
    free(dir);
}

/* ---------- bad input ---------- */

typedef struct bad_case {
    const char *file;    /* file of the copied fixture to replace (NULL: delete summary) */
    const char *content;
    const char *message; /* expected in stderr */
} bad_case_t;

Test(report, bad_input_is_refused_with_the_file_named, .timeout = 60)
{
    static const bad_case_t cases[] = {
        {"summary.json", "{\"metrics\": {\"goodput\": 1", "summary.json:1:"},
        {"summary.json", "[1, 2]", "summary.json: not a JSON object"},
        {"summary.json", "{\"complete\": true}", "summary.json: no metrics object"},
        {"summary.json",
         "{\"metrics\": {\"request_throughput\": 1, \"output_throughput\": 1, "
         "\"goodput\": \"NaN\", \"hit_rate\": 0.5}}",
         "summary.json: metrics.goodput is not a number"},
        {"summary.json",
         "{\"metrics\": {\"request_throughput\": 1e300, \"output_throughput\": 1, \"goodput\": 1, "
         "\"hit_rate\": 0.5}}",
         "summary.json: metrics.request_throughput is out of range"},
        {"summary.json",
         "{\"metrics\": {\"request_throughput\": 1, \"output_throughput\": 1, \"goodput\": 1, "
         "\"hit_rate\": 0.5, \"tiers\": 7}}",
         "metrics.tiers is neither an array nor an object"},
        {"summary.json",
         "{\"metrics\": {\"request_throughput\": 1, \"output_throughput\": 1, "
         "\"hit_rate\": 0.5, \"model_updates\": {\"weight_sync\": {\"staged_ms\": 1, "
         "\"update_ms\": \"slow\", \"bytes\": 8, \"wire_bytes\": 8}}}}",
         "summary.json: metrics.model_updates.weight_sync.update_ms is not a number"},
        {"summary.json",
         "{\"metrics\": {\"request_throughput\": 1, \"output_throughput\": 1, "
         "\"hit_rate\": 0.5, \"model_updates\": {\"weight_sync\": [1]}}}",
         "summary.json: metrics.model_updates.weight_sync is not an object"},
        {NULL, NULL, "no summary.json (is it a kvio results directory?)"},
        {"requests.csv",
         "id,rank,arrival_s,first_token_s,finish_s,input_tokens,output_tokens,cached_tokens,"
         "preemptions,model_version,measured\n1,0,0.1,nan,0.5,10,5,0,0,0,1\n",
         "requests.csv:2: first_token_s: 'nan' is not a number in range"},
        {"requests.csv",
         "id,rank,arrival_s,first_token_s,finish_s,input_tokens,output_tokens,cached_tokens,"
         "preemptions,model_version,measured\n1,0,0.1,0.2,0.5,10,5,0,0,0,1\n2,0,0.3,inf,1,1,1,"
         "0,0,0,1\n",
         "requests.csv:3: first_token_s: 'inf'"},
        {"requests.csv", "id,rank,arrival_s\n1,0,0.1\n", "requests.csv: no column 'first_token_s'"},
        {"requests.csv",
         "id,rank,arrival_s,first_token_s,finish_s,input_tokens,output_tokens,cached_tokens,"
         "preemptions,model_version,measured\n1,0,0.5,0.2,0.1,10,5,0,0,0,1\n",
         "requests.csv:2: times out of order"},
        {"requests.csv",
         "id,rank,arrival_s,first_token_s,finish_s,input_tokens,output_tokens,cached_tokens,"
         "preemptions,model_version,measured\n1,0,0.1\n",
         "requests.csv:2: 3 fields, no first_token_s"},
        {"requests.csv", "", "requests.csv: empty file (no header)"},
        {"iterations.csv",
         "time_s,rank,duration_ms,batch_size,prefill_tokens,decode_seqs,kv_usage,running,waiting,"
         "preempted,swap_bytes\n0.1,0,5,2,10,1,1.5,1,0,0,0\n",
         "iterations.csv:2: value out of range"},
        {"iterations.csv",
         "time_s,rank,duration_ms,batch_size,prefill_tokens,decode_seqs,kv_usage,running,waiting,"
         "preempted,swap_bytes\n0.1,0,5,two,10,1,0.5,1,0,0,0\n",
         "iterations.csv:2: batch_size: 'two' is not a number in range"},
        {"updates.csv", "version,rank,t_ready\n1,0,0.5\n", "updates.csv: no column 't_activated'"},
        {"updates.csv",
         "version,rank,bytes,t_ready,t_xfer_start,t_xfer_end,t_notified,t_verified,t_activated\n"
         "1,0,100,2.0,2.1,2.2,2.3,2.4,1.0\n",
         "updates.csv:2: rank out of range (0..4095) or t_activated before t_ready"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *dir = test_tmpdir();
        copy_fixture(dir, "run-fcfs", "run");
        char path[1200];
        if (cases[i].file == NULL) {
            snprintf(path, sizeof(path), "%s/run/summary.json", dir);
            cr_assert_eq(unlink(path), 0);
        } else {
            free(test_write_file(dir, "run/placeholder", ""));
            snprintf(path, sizeof(path), "run/%s", cases[i].file);
            free(test_write_file(dir, path, cases[i].content));
        }
        test_run_t run = test_kvio(dir, "report", "run", "-o", "out", NULL);
        cr_assert_eq(run.status, 2, "case %zu: exit %d, stderr %s", i, run.status, run.err);
        cr_assert(test_contains(run.err, cases[i].message), "case %zu: stderr is '%s'", i,
                  run.err);
        cr_assert(test_contains(run.err, cases[i].file != NULL ? "run/" : "run: "),
                  "case %zu names the file: %s", i, run.err);
        snprintf(path, sizeof(path), "%s/out/report.html", dir);
        struct stat info;
        cr_assert_neq(stat(path, &info), 0, "case %zu: no report is written", i);
        test_run_free(&run);
        test_rmtree(dir);
        free(dir);
    }
}

Test(report, bad_paths_and_arguments_exit_2, .timeout = 30)
{
    char *dir = test_tmpdir();
    test_run_t run = test_kvio(dir, "report", "missing-dir", NULL);
    cr_assert_eq(run.status, 2);
    cr_assert(test_contains(run.err, "missing-dir: No such file or directory"), "%s", run.err);
    test_run_free(&run);
    run = test_kvio(dir, "report", NULL);
    cr_assert_eq(run.status, 2);
    cr_assert(test_contains(run.err, "which results?"), "%s", run.err);
    test_run_free(&run);
    run = test_kvio(dir, "report", FIXTURES "/run-lpm", "--bogus", NULL);
    cr_assert_eq(run.status, 2);
    cr_assert(test_contains(run.err, "unknown option '--bogus'"), "%s", run.err);
    test_run_free(&run);
    run = test_kvio(dir, "report", FIXTURES "/run-lpm", "-o", NULL);
    cr_assert_eq(run.status, 2);
    test_run_free(&run);
    /* A file that is not cachesim output. */
    free(test_write_file(dir, "other.json", "{\"results\": 3}"));
    run = test_kvio(dir, "report", "other.json", NULL);
    cr_assert_eq(run.status, 2);
    cr_assert(test_contains(run.err, "other.json: not a `kvio cachesim --json` result"), "%s",
              run.err);
    test_run_free(&run);
    /* compare.json naming a variant outside its directory. */
    char compare_dir[1200];
    snprintf(compare_dir, sizeof(compare_dir), "%s/cmp", dir);
    cr_assert_eq(mkdir(compare_dir, 0755), 0);
    free(test_write_file(dir, "cmp/compare.json",
                         "{\"repeat\": 1, \"variants\": [{\"name\": \"..\", \"runs\": [{}]}]}"));
    run = test_kvio(dir, "report", "cmp", NULL);
    cr_assert_eq(run.status, 2);
    cr_assert(test_contains(run.err, "compare.json: variants[0].name is missing or not a plain "
                                     "name"),
              "%s", run.err);
    test_run_free(&run);
    run = test_kvio(dir, "report", "--help", NULL);
    cr_assert_eq(run.status, 0);
    cr_assert(test_contains(run.out, "usage: kvio report"));
    test_run_free(&run);
    test_rmtree(dir);
    free(dir);
}

/* Without gnuplot --png says so and the HTML is still written; a
 * KVIO_GNUPLOT that cannot run is named with why (it said "gnuplot not
 * installed"). */
Test(report, png_without_gnuplot_says_so, .timeout = 30)
{
    char *dir = test_tmpdir();
    setenv("KVIO_GNUPLOT", "/nonexistent/gnuplot", 1);
    test_run_t run = test_kvio(dir, "report", FIXTURES "/run-lpm", "-o", "named", "--png", NULL);
    unsetenv("KVIO_GNUPLOT");
    cr_assert_eq(run.status, 1, "%s", run.err);
    cr_assert(test_contains(run.err, "--png: KVIO_GNUPLOT=/nonexistent/gnuplot: No such file or "
                                     "directory"),
              "%s", run.err);
    test_run_free(&run);
    const char *path_before = getenv("PATH");
    char *saved_path = path_before != NULL ? strdup(path_before) : NULL;
    setenv("PATH", dir, 1);
    run = test_kvio(dir, "report", FIXTURES "/run-lpm", "-o", "out", "--png", NULL);
    if (saved_path != NULL)
        setenv("PATH", saved_path, 1);
    free(saved_path);
    cr_assert_eq(run.status, 1, "%s", run.err);
    cr_assert(test_contains(run.err, "--png needs gnuplot, which is not installed"), "%s",
              run.err);
    char path[1200];
    snprintf(path, sizeof(path), "%s/out/report.html", dir);
    struct stat info;
    cr_assert_eq(stat(path, &info), 0, "the HTML is still written");
    test_run_free(&run);
    test_rmtree(dir);
    free(dir);
}

/* Whether pid has ended: no such process, or a zombie not yet reaped (its
 * parent died; whoever adopts it reaps it). */
static bool process_gone(pid_t pid)
{
    if (kill(pid, 0) != 0)
        return true;
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    char *stat = test_read_file(path);
    const char *paren = stat != NULL ? strrchr(stat, ')') : NULL;
    bool zombie = paren != NULL && paren[1] == ' ' && paren[2] == 'Z';
    free(stat);
    return zombie;
}

/* A gnuplot that hangs is stopped at KVIO_GNUPLOT_TIMEOUT with an error
 * naming it (kvio report --png hung), and one whose kvio report is killed
 * dies with it (it outlived the kill). */
Test(report, a_hanging_gnuplot_is_stopped_and_dies_with_kvio, .timeout = 60)
{
    char *dir = test_tmpdir();
    char script[1200], pid_path[1200];
    snprintf(pid_path, sizeof(pid_path), "%s/gnuplot.pid", dir);
    char text[1400];
    snprintf(text, sizeof(text), "#!/bin/sh\necho $$ > %s\nexec sleep 1000\n", pid_path);
    char *written = test_write_file(dir, "hang.sh", text);
    snprintf(script, sizeof(script), "%s", written);
    free(written);
    chmod(script, 0755);
    setenv("KVIO_GNUPLOT", script, 1);
    setenv("KVIO_GNUPLOT_TIMEOUT", "1", 1);
    test_run_t run = test_kvio(dir, "report", FIXTURES "/run-lpm", "-o", "out", "--png", NULL);
    unsetenv("KVIO_GNUPLOT_TIMEOUT");
    cr_assert_eq(run.status, 1, "%s", run.err);
    cr_assert(test_contains(run.err, "hang.sh did not finish"), "%s", run.err);
    test_run_free(&run);
    char *pid_text = test_read_file(pid_path);
    cr_assert_not_null(pid_text);
    pid_t child = (pid_t)atol(pid_text);
    free(pid_text);
    cr_assert(child > 0 && process_gone(child), "the hung gnuplot %d was left running", child);
    /* kvio report killed: its gnuplot goes too. */
    unlink(pid_path);
    pid_t kvio = fork();
    cr_assert_neq(kvio, -1);
    if (kvio == 0) {
        if (chdir(dir) != 0)
            _exit(127);
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
        dup2(null, 2);
        execl(test_kvio_binary(), "kvio", "report", FIXTURES "/run-lpm", "-o", "killed", "--png",
              (char *)NULL);
        _exit(127);
    }
    child = 0;
    for (double waited = 0; child == 0 && waited < test_seconds(20); waited += 0.02) {
        pid_text = test_read_file(pid_path);
        child = pid_text != NULL ? (pid_t)atol(pid_text) : 0;
        free(pid_text);
        usleep(20000);
    }
    unsetenv("KVIO_GNUPLOT");
    cr_assert_gt(child, 0, "gnuplot never started");
    kill(kvio, SIGKILL);
    waitpid(kvio, NULL, 0);
    bool gone = false;
    for (double waited = 0; !gone && waited < test_seconds(5); waited += 0.02) {
        gone = process_gone(child);
        usleep(20000);
    }
    if (!gone)
        kill(child, SIGKILL);
    cr_assert(gone, "gnuplot %d outlived the killed kvio report", child);
    test_rmtree(dir);
    free(dir);
}

Test(report, png_charts_with_gnuplot, .timeout = 60)
{
    if (!test_require("gnuplot", kvio_report_gnuplot_available(), "gnuplot is not installed"))
        return;
    char *dir = test_tmpdir();
    test_run_t run = test_kvio(dir, "report", FIXTURES "/run-fcfs", FIXTURES "/cachesim.json",
                               "-o", "out", "--png", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    cr_assert(test_contains(run.out, "wrote 14 PNG charts"), "%s", run.out);
    test_run_free(&run);
    const char *ids[] = {"chart-ttft-cdf", "chart-throughput", "chart-update-breakdown-1",
                         "chart-hit-rate-capacity-1", "chart-tier-traffic"};
    for (size_t i = 0; i < 5; i++) {
        char path[1200];
        snprintf(path, sizeof(path), "%s/out/%s.png", dir, ids[i]);
        FILE *file = fopen(path, "rb");
        cr_assert_not_null(file, "no %s", path);
        unsigned char magic[8] = {0};
        cr_assert_eq(fread(magic, 1, 8, file), 8);
        fclose(file);
        cr_assert_eq(memcmp(magic, "\x89PNG\r\n\x1a\n", 8), 0, "%s is not a PNG", path);
    }
    test_rmtree(dir);
    free(dir);
}

/* ---------- the library call ---------- */

Test(report, library_refuses_bad_input_and_keeps_its_state, .timeout = 30)
{
    kvio_report_t *report = NULL;
    cr_assert_eq(kvio_report_create(&report), KVIO_OK);
    char error[1024] = "";
    cr_assert_eq(kvio_report_write_html(report, "/tmp/never.html", error, sizeof(error)),
                 KVIO_ERR_INVALID);
    cr_assert(test_contains(error, "nothing to report"), "%s", error);
    cr_assert_eq(kvio_report_add(report, FIXTURES "/run-fcfs", error, sizeof(error)), KVIO_OK);
    cr_assert_eq(kvio_report_add(report, FIXTURES, error, sizeof(error)), KVIO_ERR_NOT_FOUND);
    cr_assert(test_contains(error, "no summary.json"), "%s", error);
    cr_assert_eq(kvio_report_num_runs(report), 1);
    /* The same directory twice gets a distinct label. */
    cr_assert_eq(kvio_report_add(report, FIXTURES "/run-fcfs/", error, sizeof(error)), KVIO_OK);
    char *dir = test_tmpdir();
    char path[1200];
    snprintf(path, sizeof(path), "%s/r.html", dir);
    cr_assert_eq(kvio_report_write_html(report, path, error, sizeof(error)), KVIO_OK, "%s", error);
    char *html = test_read_file(path);
    cr_assert(test_contains(html, ">run-fcfs (2)</td>"));
    free(html);
    kvio_report_destroy(report);
    test_rmtree(dir);
    free(dir);
}

/* Mutated inputs (bytes flipped, lines cut, digits swapped for letters) are
 * either read or refused with a message; the reader never crashes. */
Test(report, mutated_inputs_never_crash_the_reader, .timeout = 120)
{
    int rounds = getenv("KVIO_FUZZ_ROUNDS") != NULL ? atoi(getenv("KVIO_FUZZ_ROUNDS")) : 300;
    const char *files[] = {"summary.json", "requests.csv", "iterations.csv", "updates.csv"};
    char *originals[4];
    for (size_t f = 0; f < 4; f++) {
        char path[1200];
        snprintf(path, sizeof(path), "%s/run-fcfs/%s", FIXTURES, files[f]);
        originals[f] = test_read_file(path);
        cr_assert_not_null(originals[f]);
    }
    kvio_rng_t rng;
    kvio_rng_seed(&rng, 42, 0, "report-fuzz");
    char *dir = test_tmpdir();
    copy_fixture(dir, "run-fcfs", "run");
    char run_dir[1200], html[1200];
    snprintf(run_dir, sizeof(run_dir), "%s/run", dir);
    snprintf(html, sizeof(html), "%s/r.html", dir);
    size_t refused = 0;
    for (int round = 0; round < rounds; round++) {
        size_t f = kvio_rng_next(&rng) % 4;
        char *text = strdup(originals[f]);
        size_t length = strlen(text);
        int mutations = 1 + (int)(kvio_rng_next(&rng) % 4);
        for (int m = 0; m < mutations && length > 0; m++) {
            size_t at = kvio_rng_next(&rng) % length;
            static const char replacements[] = "x,.-9e\n\"{}[]0 ";
            switch (kvio_rng_next(&rng) % 3) {
            case 0:
                text[at] = replacements[kvio_rng_next(&rng) % (sizeof(replacements) - 1)];
                break;
            case 1: text[at] = (char)(kvio_rng_next(&rng) % 255 + 1); break;
            default: length = at; text[at] = '\0'; break;
            }
        }
        char name[64];
        snprintf(name, sizeof(name), "run/%s", files[f]);
        free(test_write_file(dir, name, text));
        free(text);
        kvio_report_t *report = NULL;
        cr_assert_eq(kvio_report_create(&report), KVIO_OK);
        char error[2048] = "";
        kvio_status_t status = kvio_report_add(report, run_dir, error, sizeof(error));
        if (status == KVIO_OK) {
            cr_assert_eq(kvio_report_write_html(report, html, error, sizeof(error)), KVIO_OK,
                         "%s", error);
            char *page = test_read_file(html);
            cr_assert(!has_token(page, "nan") && !has_token(page, "inf"));
            check_svgs(page);
            free(page);
        } else {
            refused++;
            cr_assert(error[0] != '\0', "round %d: refused without a message", round);
            cr_assert(test_contains(error, files[f]) || test_contains(error, run_dir),
                      "round %d: the message names the file: %s", round, error);
        }
        kvio_report_destroy(report);
        free(test_write_file(dir, name, originals[f]));
    }
    cr_assert_gt(refused, 0, "some mutations are refused");
    for (size_t f = 0; f < 4; f++)
        free(originals[f]);
    test_rmtree(dir);
    free(dir);
}

/* A coupled simulate run with its control: the report draws each request's
 * cost (TTFT and E2EL against the twin, one step line each) and each
 * update's (the latency its requests gained, the stall), one point per
 * activated update and rank. */
Test(report, a_controlled_run_gets_its_update_cost_charts, .timeout = 60)
{
    char *dir = test_tmpdir();
    test_run_t run = test_kvio(dir, "run", "update-interference", "--set", "duration=60s",
                               "-o", "res", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    test_run_free(&run);
    char *html = report_of(dir, "res");
    char *cdf = figure(html, "chart-update-cost-cdf");
    cr_assert_not_null(cdf, "no update cost chart");
    cr_expect(test_contains(cdf, "What updates cost each request, against the control"));
    cr_expect_eq(count_of(cdf, "<polyline"), 2, "TTFT and E2EL");
    char *per_update = figure(html, "chart-update-cost-per-update");
    cr_assert_not_null(per_update);
    cr_expect_eq(count_of(per_update, "<polyline"), 2, "gained latency and stall");
    cr_expect(test_contains(per_update, "added_e2el_ms"));
    cr_expect_eq(check_svgs(html) > 0, true);
    free(cdf);
    free(per_update);
    free(html);
    test_rmtree(dir);
    free(dir);
}

/* #35: kvio report draws a kvio capacity directory: SLO attainment against
 * the load probed, one line per search (a --vary directory: one per value),
 * the share asked dashed, the capacities in the caption; a capacity.json
 * with an attainment outside 0..1 is refused naming the key. */
Test(report, capacity_searches_are_drawn, .timeout = 30)
{
    char *dir = test_tmpdir();
    char path[1200];
    snprintf(path, sizeof(path), "%s/cap", dir);
    cr_assert_eq(mkdir(path, 0755), 0);
    free(test_write_file(
        path, "capacity.json",
        "{\"varies\": \"stream.arrival.rate\", \"capacity\": 100, \"capacity_rps\": 100,"
        " \"attain\": 0.9, \"curve\": [{\"offered_rate\": 200, \"attainment\": 0.05},"
        " {\"offered_rate\": 50, \"attainment\": 1}, {\"offered_rate\": 100,"
        " \"attainment\": 0.95}]}"));
    snprintf(path, sizeof(path), "%s/users", dir);
    cr_assert_eq(mkdir(path, 0755), 0);
    free(test_write_file(
        path, "capacity.json",
        "{\"vary\": \"cost.c1\", \"variants\": ["
        "{\"vary\": \"cost.c1\", \"value\": \"0.01\", \"capacity\": 3, \"capacity_users\": 3,"
        " \"attain\": 0.9, \"curve\": [{\"users\": 3, \"attainment\": 1}, {\"users\": 4,"
        " \"attainment\": 0.02}]},"
        "{\"vary\": \"cost.c1\", \"value\": \"0.005\", \"capacity\": 7, \"capacity_users\": 7,"
        " \"attain\": 0.9, \"curve\": [{\"users\": 7, \"attainment\": 1}, {\"users\": 8,"
        " \"attainment\": 0.04}]}]}"));
    test_run_t run = test_kvio(dir, "report", "cap", "users", "-o", "out", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    cr_expect(test_contains(run.out, "3 capacity searches"), "%s", run.out);
    test_run_free(&run);
    snprintf(path, sizeof(path), "%s/out", dir);
    char *html = report_html(path);
    cr_assert_not_null(html);
    char *rate = figure(html, "chart-capacity");
    cr_assert_not_null(rate, "no rate chart");
    cr_expect(test_contains(rate, "SLO attainment vs offered rate"));
    cr_expect(test_contains(rate, "cap 100 req/s"), "the capacity in the caption");
    char *users = figure(html, "chart-capacity-users");
    cr_assert_not_null(users, "no users chart");
    cr_expect(test_contains(users, "users cost.c1=0.01 3 users"));
    cr_expect(test_contains(users, "users cost.c1=0.005 7 users"));
    free(rate);
    free(users);
    free(html);
    /* Out of range: named with its key. */
    snprintf(path, sizeof(path), "%s/bad", dir);
    cr_assert_eq(mkdir(path, 0755), 0);
    free(test_write_file(path, "capacity.json",
                         "{\"capacity\": 1, \"attain\": 0.9, \"curve\": [{\"offered_rate\": 1,"
                         " \"attainment\": 1.5}]}"));
    run = test_kvio(dir, "report", "bad", "-o", "out2", NULL);
    cr_expect_eq(run.status, 2);
    cr_expect(test_contains(run.err, "capacity.json: curve[0].offered_rate must be above 0 and "
                                     "attainment in 0..1"),
              "%s", run.err);
    test_run_free(&run);
    test_rmtree(dir);
    free(dir);
}

/* #40 item 15 (part): kvio report blamed a missing metric for a failed run,
 * followed a symlinked summary.json (and echoed its first token), and
 * accepted schema_version 999 and negative throughputs. Each is refused
 * naming the file and why. */
Test(report, bad_summaries_are_refused_saying_why, .timeout = 30)
{
    char *dir = test_tmpdir();
    static const struct {
        const char *name, *summary, *message;
    } cases[] = {
        {"failed", "{\"schema_version\": 1, \"complete\": false, \"error\": \"serve rank 1: "
                   "it broke\", \"metrics\": {}}",
         "the run failed and measured nothing: serve rank 1: it broke"},
        {"future", "{\"schema_version\": 999, \"metrics\": {\"request_throughput\": 1}}",
         "schema_version 999 is newer than this kvio reads (1)"},
        {"negative", "{\"schema_version\": 1, \"metrics\": {\"request_throughput\": -3, "
                     "\"output_throughput\": 1, \"hit_rate\": 0}}",
         "metrics.request_throughput is negative (-3)"},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        char path[1200];
        snprintf(path, sizeof(path), "%s/%s", dir, cases[c].name);
        cr_assert_eq(mkdir(path, 0755), 0);
        free(test_write_file(path, "summary.json", cases[c].summary));
        test_run_t run = test_kvio(dir, "report", cases[c].name, "-o", "out", NULL);
        cr_expect_eq(run.status, 2, "%s: %s", cases[c].name, run.err);
        cr_expect(test_contains(run.err, cases[c].message), "%s: %s", cases[c].name, run.err);
        test_run_free(&run);
    }
    /* A summary.json that is a link to someone's file. */
    char *secret = test_write_file(dir, "secret.txt", "hunter2 is the password\n");
    char path[1200];
    snprintf(path, sizeof(path), "%s/linked", dir);
    cr_assert_eq(mkdir(path, 0755), 0);
    snprintf(path, sizeof(path), "%s/linked/summary.json", dir);
    cr_assert_eq(symlink(secret, path), 0);
    test_run_t run = test_kvio(dir, "report", "linked", "-o", "out", NULL);
    cr_expect_neq(run.status, 0);
    cr_expect(test_contains(run.err, "summary.json: not a regular file (a symbolic link)"), "%s",
              run.err);
    cr_expect(!test_contains(run.err, "hunter2"), "the link's target was echoed: %s", run.err);
    test_run_free(&run);
    free(secret);
    test_rmtree(dir);
    free(dir);
}

/* The report of inputs (NULL-terminated) written to dir/out. */
static char *report_into(const char *dir, const char *out, const char *first, ...)
{
    const char *argv[16] = {test_kvio_binary(), "report"};
    size_t argc = 2;
    va_list args;
    va_start(args, first);
    for (const char *input = first; input != NULL && argc < 12; input = va_arg(args, const char *))
        argv[argc++] = input;
    va_end(args);
    argv[argc++] = "-o";
    argv[argc++] = out;
    argv[argc] = NULL;
    test_run_t run = test_exec(dir, argv);
    cr_assert_eq(run.status, 0, "%s", run.err);
    test_run_free(&run);
    char path[1100];
    snprintf(path, sizeof(path), "%s/%s", dir, out);
    char *html = report_html(path);
    cr_assert_not_null(html);
    return html;
}

/* #41 items 2 and 3: updates whose latencies differ a thousandfold each
 * show (latency bars on a log axis, bandwidth bars, the breakdown as
 * shares), the file transport's publish is named as such, and simulate
 * runs' update times say they are modelled. */
Test(report, update_times_show_at_every_scale_and_say_when_modelled, .timeout = 60)
{
    char *dir = test_tmpdir();
    test_run_t run = test_kvio(dir, "compare", "quickstart", "--set", "mode=simulate", "--set",
                               "duration=10s", "--vary", "train.transport.kind=ucx,file",
                               "--vary", "train.bytes=1MiB,512MiB", "-o", "cmp", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    test_run_free(&run);
    char *html = report_into(dir, "out", "cmp", NULL);
    char *latency = figure(html, "chart-update-latency");
    cr_assert_not_null(latency);
    cr_expect(test_contains(latency, "Log y axis"), "%s", latency);
    cr_expect(test_contains(latency, "(modelled)"), "%s", latency);
    free(latency);
    char *bandwidth = figure(html, "chart-update-bandwidth");
    cr_assert_not_null(bandwidth);
    cr_expect(test_contains(bandwidth, "GB/s"), "%s", bandwidth);
    free(bandwidth);
    char *breakdown = figure(html, "chart-update-breakdown");
    cr_assert_not_null(breakdown);
    cr_expect(test_contains(breakdown, "publish (write, SET)"), "%s", breakdown);
    cr_expect(test_contains(breakdown, "share of the update latency (%)"), "%s", breakdown);
    cr_expect_not(test_contains(breakdown, "wait (ready to transfer start)"), "%s", breakdown);
    free(breakdown);
    free(html);
    test_rmtree(dir);
    free(dir);
}

/* #41 items 2 and 7: two unrelated rate sweeps of one workload are two
 * charts against the rate offered as measured; an overloaded run's
 * verdict is on the page and its bars are marked; the TTFT-against-rate
 * chart goes log when the queue explodes, with the SLO drawn; a run
 * without an SLO has no goodput bar; counts have whole ticks; utilization
 * and inference loss have charts; the page names the commit and host; an
 * existing report is kept unless --force. */
Test(report, the_page_marks_what_misleads_and_draws_the_slos, .timeout = 120)
{
    char *dir = test_tmpdir();
    test_run_t run = test_kvio(dir, "compare", "chat", "--set", "duration=20s", "--set",
                               "serve.kvcache.capacity=4GiB", "--set", "slo.ttft=2s", "--vary",
                               "stream.arrival.rate=5,60", "-o", "overloaded", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    test_run_free(&run);
    run = test_kvio(dir, "compare", "chat", "--set", "duration=20s", "--set",
                    "serve.kvcache.capacity=8GiB", "--vary", "stream.arrival.rate=4,8", "-o",
                    "calm", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    test_run_free(&run);
    run = test_kvio(dir, "run", "quickstart", "--set", "mode=simulate", "--set", "duration=10s",
                    "-o", "coupled", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    test_run_free(&run);
    char *html = report_into(dir, "out", "overloaded", "calm", "coupled", NULL);

    /* Two sweeps, not one line joining them; x is the measured rate. */
    char *first = figure(html, "chart-ttft-vs-rate"), *second = figure(html, "chart-ttft-vs-rate-2");
    cr_assert(first != NULL && second != NULL, "two sweeps, two charts");
    cr_expect(test_contains(first, "offered rate, measured"), "%s", first);
    /* The overloaded sweep: a log axis and its SLO as a dashed line. */
    char *overloaded = test_contains(first, "Log y axis") ? first : second;
    cr_expect(test_contains(overloaded, "Log y axis"), "%s\n%s", first, second);
    cr_expect(test_contains(overloaded, "class=\"y-mark\""), "%s", overloaded);
    free(first);
    free(second);

    /* The verdict in the runs table, "(!)" on the bars. */
    char *table = strstr(html, "<table id=\"runs\">");
    cr_assert_not_null(table);
    cr_expect(test_contains(table, "overload"), "the overloaded run's verdict");
    char *throughput = figure(html, "chart-throughput");
    cr_assert_not_null(throughput);
    cr_expect(test_contains(throughput, "(!)"), "%s", throughput);
    /* Runs without an SLO: no goodput bar (it was drawn as 0). */
    cr_expect_eq(count_of(throughput, ", goodput (requests meeting the SLOs):"), 3, "%s",
                 throughput);
    free(throughput);
    char *utilization = figure(html, "chart-utilization");
    cr_expect_not_null(utilization);
    free(utilization);
    char *loss = figure(html, "chart-inference-loss");
    cr_expect_not_null(loss);
    free(loss);
    char *provenance = strstr(html, "id=\"provenance\"");
    cr_assert_not_null(provenance);
    cr_expect(test_contains(provenance, "(commit "), "%.300s", provenance);
    free(html);

    /* Whole ticks on counts: a run without preemptions is 0 to 1, no 0.2. */
    html = report_into(dir, "small", "calm", NULL);
    char *preemptions = figure(html, "chart-preemptions");
    cr_assert_not_null(preemptions);
    cr_expect_not(test_contains(preemptions, ">0.2</text>"), "%s", preemptions);
    cr_expect(test_contains(preemptions, ">1</text>"), "%s", preemptions);
    free(preemptions);
    free(html);

    /* An existing report is kept unless --force. */
    run = test_kvio(dir, "report", "calm", "-o", "small", NULL);
    cr_expect_eq(run.status, 2, "%s", run.err);
    cr_expect(test_contains(run.err, "small/report.html exists; use --force"), "%s", run.err);
    test_run_free(&run);
    run = test_kvio(dir, "report", "calm", "-o", "small", "--force", NULL);
    cr_expect_eq(run.status, 0, "%s", run.err);
    test_run_free(&run);
    test_rmtree(dir);
    free(dir);
}

/* A `kvio prefix --format json` result gets its section: the hit rate as
 * it is, without its cause and without any, with the cause's place and
 * text; each turn's prompt against what it reused. A prefix file missing
 * its totals is refused naming the key. */
Test(report, a_prefix_result_draws_its_causes, .timeout = 60)
{
    char *dir = test_tmpdir();
    test_run_t run = test_kvio(dir, "prefix", KVIO_SOURCE_DIR
                               "/workloads/conversations/agent-harness.jsonl", "--format", "json",
                               NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    free(test_write_file(dir, "prefix.json", run.out));
    test_run_free(&run);
    char *html = report_of(dir, "prefix.json");
    cr_assert_eq(check_svgs(html), 2);
    char *bars = figure(html, "chart-prefix-hits-1");
    cr_assert_not_null(bars);
    cr_assert(test_contains(bars, "without: system (message 0), tokens 69-71"), "%s", bars);
    cr_assert(test_contains(bars, "without any"));
    cr_assert(test_contains(bars, "5 of 5 later turns break"), "%s", bars);
    cr_assert(test_contains(bars, "`19 UTC\\nWorking"), "%s", bars);
    free(bars);
    char *lines = figure(html, "chart-prefix-turns-1");
    cr_assert_not_null(lines);
    free(lines);
    cr_assert(test_contains(html, "1 prefix result"));
    free(html);
    free(test_write_file(dir, "bad.json", "{\"clusters\": [], \"turns\": [{\"prompt_tokens\": 3}]}"));
    run = test_kvio(dir, "report", "bad.json", "-o", "bad", NULL);
    cr_assert_eq(run.status, 2, "%s", run.err);
    cr_assert(test_contains(run.err, "bad.json: prompt_tokens is missing"), "%s", run.err);
    test_run_free(&run);
    test_rmtree(dir);
    free(dir);
}

/* #39: a prefill/decode run's report stacks its mean TTFT in its parts, and
 * the parts add up to the run's mean TTFT; a colocated run has no such bar. */
Test(report, a_pd_run_s_ttft_parts_stack_up_to_its_mean_ttft, .timeout = 60)
{
    char *dir = test_tmpdir();
    test_run_t run = test_kvio(dir, "run", "chat", "--set", "duration=20s", "--set",
                               "ranks.prefill=1", "--set", "ranks.decode=2", "-o", "pd", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    test_run_free(&run);
    run = test_kvio(dir, "run", "chat", "--set", "duration=20s", "-o", "colocated", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    test_run_free(&run);
    json_t *summary = test_summary(dir, "pd");
    const json_t *parts = test_json(summary, "metrics.pd.mean_ttft_parts_ms");
    double sum = 0;
    const char *key;
    json_t *value;
    json_object_foreach((json_t *)parts, key, value)
        sum += json_number_value(value);
    double mean = test_json_number(summary, "metrics.ttft_ms.mean");
    cr_expect(fabs(sum - mean) < 1e-3 * mean, "parts %.4f ms, mean TTFT %.4f ms", sum, mean);
    json_decref(summary);
    test_run_t report = test_kvio(dir, "report", "pd", "colocated", "-o", "rep", NULL);
    cr_assert_eq(report.status, 0, "%s", report.err);
    test_run_free(&report);
    char path[1200];
    snprintf(path, sizeof(path), "%s/rep/report.html", dir);
    char *html = test_read_file(path);
    cr_assert_not_null(html);
    char *chart = figure(html, "chart-pd-ttft-parts");
    cr_assert_not_null(chart, "no TTFT parts chart");
    cr_expect(test_contains(chart, "KV transfer"), "%s", chart);
    cr_expect(!test_contains(chart, "colocated"), "the colocated run has no parts: %s", chart);
    free(chart);
    free(html);
    test_rmtree(dir);
    free(dir);
}
