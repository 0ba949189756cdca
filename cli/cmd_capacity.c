/* kvio capacity: parses the arguments and prints what kvio_capacity
 * (run/capacity.c) found: the highest arrival rate that meets the SLO for
 * the share of requests asked, and the curve the search walked. */
#include "cli/cli.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvio/capacity.h"
#include "kvio/format.h"

#define MAX_SETS 128

static void usage(FILE *out)
{
    fprintf(out,
            "usage: kvio capacity WORKLOAD|PRESET [--slo ttft=DURATION[,tpot=DURATION]]\n"
            "                     [--attain SHARE] [--low RATE] [--high RATE]\n"
            "                     [--tolerance FRACTION] [--seeds N] [--warmup-share F]\n"
            "                     [--no-confirm] [--users] [--vary KEY=A,B,...]\n"
            "                     [--set KEY=VALUE]... [-o|--output DIR] [--force]\n"
            "                     [--format table|json]\n\n"
            "Finds the highest load at which the share --attain (default 0.9) of the\n"
            "requests meets the SLO (TTFT and TPOT bounds; default: the workload's slo:),\n"
            "over simulate runs. Each probe runs one stream.arrival.rate with --seeds\n"
            "seeds (default 3); it meets when every seed's attainment reaches the share and\n"
            "no seed fell behind. Arrivals of a warm-up are left out of every figure: the\n"
            "workload's warmup:, else the first --warmup-share of the duration (default\n"
            "0.2; 0 for the default, negative for none), while chat sessions still ramp.\n"
            "The search doubles from the workload's rate (or --low/--high) until a probe\n"
            "fails, then bisects until the bracket is within --tolerance (default 0.01)\n"
            "of its top. The knee is the offered rate as measured at the highest rate met\n"
            "below the first failure (mean and 95 %% interval over the seeds), not the\n"
            "configured rate; a curve that fails and then meets again is reported as not\n"
            "monotone. The confirm then serves the knee's rate for the workload's own\n"
            "duration (a --set duration= shortens the probes only) with the same seeds and\n"
            "says whether the SLO held (--no-confirm skips it). Probes are whole runs\n"
            "in DIR/rate-<R>/seed-<S>; DIR/capacity.json has the knee, the binding bound,\n"
            "the curve and the confirm run (default DIR: results/capacity-<name>-<time>).\n"
            "--users: the most users of a closed loop instead: stream.users where the\n"
            "stream has them (MLPerf Storage's QoS search), else serve.max_concurrency,\n"
            "from the workload's or 1, to the last whole user; probes in DIR/users-<N>).\n"
            "--vary KEY=A,B: one search per value, in DIR/KEY-A, ... (needs -o);\n"
            "capacity.json lists them under variants, and kvio report draws them.\n");
}

typedef struct capacity_args {
    kvio_capacity_options_t options;
    const char *sets[MAX_SETS];
    const char *vary_values[MAX_SETS];
    char *vary_text;   /* the --vary value, cut at '=' and ',' (owned) */
    bool json_output, help;
} capacity_args_t;

enum {
    CAP_HELP = 1, CAP_SLO, CAP_ATTAIN, CAP_LOW, CAP_HIGH, CAP_TOLERANCE, CAP_SET, CAP_OUTPUT,
    CAP_FORCE, CAP_FORMAT, CAP_USERS, CAP_VARY, CAP_SEEDS, CAP_WARMUP_SHARE, CAP_NO_CONFIRM,
};

static const kvio_cli_option_t capacity_options[] = {
    {"help", 'h', NULL, CAP_HELP},
    {"slo", 0, "ttft=DURATION,tpot=DURATION", CAP_SLO},
    {"attain", 0, "a share", CAP_ATTAIN},
    {"low", 0, "a rate", CAP_LOW},
    {"high", 0, "a rate", CAP_HIGH},
    {"tolerance", 0, "a fraction", CAP_TOLERANCE},
    {"set", 0, "KEY=VALUE", CAP_SET},
    {"output", 'o', "a directory", CAP_OUTPUT},
    {"force", 0, NULL, CAP_FORCE},
    {"format", 0, "table or json", CAP_FORMAT},
    {"users", 0, NULL, CAP_USERS},
    {"vary", 0, "KEY=A,B,...", CAP_VARY},
    {"seeds", 0, "a count", CAP_SEEDS},
    {"warmup-share", 0, "a fraction", CAP_WARMUP_SHARE},
    {"no-confirm", 0, NULL, CAP_NO_CONFIRM},
    {NULL, 0, NULL, 0},
};

/* --slo ttft=2s,tpot=80ms */
static int take_slo(capacity_args_t *args, const char *value)
{
    char *list = strdup(value), *save = NULL;
    if (list == NULL)
        return KVIO_EXIT_FAILED;
    int exit_status = KVIO_EXIT_OK;
    for (char *item = strtok_r(list, ",", &save); item != NULL && exit_status == KVIO_EXIT_OK;
         item = strtok_r(NULL, ",", &save)) {
        char *equals = strchr(item, '=');
        int64_t *slot = NULL;
        if (equals != NULL && strncmp(item, "ttft", (size_t)(equals - item)) == 0 &&
            equals - item == 4)
            slot = &args->options.ttft_ns;
        else if (equals != NULL && strncmp(item, "tpot", 4) == 0 && equals - item == 4)
            slot = &args->options.tpot_ns;
        char error[256] = "";
        if (slot == NULL ||
            kvio_parse_duration(equals + 1, slot, error, sizeof(error)) != KVIO_OK ||
            *slot <= 0) {
            fprintf(stderr, "kvio capacity: --slo '%s': give ttft=DURATION and/or "
                    "tpot=DURATION (2s, 80ms)%s%s\n", item, error[0] ? ": " : "", error);
            exit_status = KVIO_EXIT_USAGE;
        }
    }
    free(list);
    return exit_status;
}

static int take_number(const char *name, const char *value, double *slot)
{
    char *end = NULL;
    *slot = strtod(value, &end);
    if (end == value || *end != '\0') {
        fprintf(stderr, "kvio capacity: --%s needs a number, got '%s'\n", name, value);
        return KVIO_EXIT_USAGE;
    }
    return KVIO_EXIT_OK;
}

/* --vary serve.scheduler.policy=fcfs,pkas: the key and its values. */
static int take_vary(capacity_args_t *args, const char *value)
{
    kvio_capacity_options_t *options = &args->options;
    if (args->vary_text != NULL) {
        fprintf(stderr, "kvio capacity: --vary once (one key, its values after '=')\n");
        return KVIO_EXIT_USAGE;
    }
    args->vary_text = strdup(value);
    if (args->vary_text == NULL)
        return KVIO_EXIT_FAILED;
    char *equals = strchr(args->vary_text, '=');
    if (equals == NULL || equals == args->vary_text || equals[1] == '\0') {
        fprintf(stderr, "kvio capacity: --vary '%s': give KEY=A,B,... (e.g. "
                "serve.scheduler.policy=fcfs,pkas)\n", value);
        return KVIO_EXIT_USAGE;
    }
    *equals = '\0';
    options->vary_key = args->vary_text;
    char *save = NULL;
    for (char *item = strtok_r(equals + 1, ",", &save); item != NULL;
         item = strtok_r(NULL, ",", &save)) {
        int exit_status = kvio_cli_append("kvio capacity", "--vary values", args->vary_values,
                                          &options->num_vary, MAX_SETS, item);
        if (exit_status != KVIO_EXIT_OK)
            return exit_status;
    }
    options->vary_values = args->vary_values;
    return KVIO_EXIT_OK;
}

static int take_capacity_arg(capacity_args_t *args, int option, const char *value)
{
    kvio_capacity_options_t *options = &args->options;
    switch (option) {
    case CAP_HELP:
        args->help = true;
        return KVIO_EXIT_OK;
    case CAP_SLO:
        return take_slo(args, value);
    case CAP_ATTAIN:
        return take_number("attain", value, &options->attain);
    case CAP_LOW:
        return take_number("low", value, &options->low);
    case CAP_HIGH:
        return take_number("high", value, &options->high);
    case CAP_TOLERANCE:
        return take_number("tolerance", value, &options->tolerance);
    case CAP_SET:
        return kvio_cli_append("kvio capacity", "--set options", args->sets, &options->num_sets,
                               MAX_SETS, value);
    case CAP_OUTPUT:
        options->output_dir = value;
        return KVIO_EXIT_OK;
    case CAP_FORCE:
        options->force = true;
        return KVIO_EXIT_OK;
    case CAP_USERS:
        options->users = true;
        return KVIO_EXIT_OK;
    case CAP_VARY:
        return take_vary(args, value);
    case CAP_SEEDS: {
        double seeds = 0;
        int exit_status = take_number("seeds", value, &seeds);
        if (exit_status == KVIO_EXIT_OK &&
            (seeds != floor(seeds) || seeds < 1 || seeds > KVIO_CAPACITY_MAX_SEEDS)) {
            fprintf(stderr, "kvio capacity: --seeds takes a whole number from 1 to %d, got "
                    "'%s'\n", KVIO_CAPACITY_MAX_SEEDS, value);
            exit_status = KVIO_EXIT_USAGE;
        }
        options->seeds = (long)seeds;
        return exit_status;
    }
    case CAP_WARMUP_SHARE: {
        int exit_status = take_number("warmup-share", value, &options->warmup_share);
        if (exit_status == KVIO_EXIT_OK && options->warmup_share >= 1) {
            fprintf(stderr, "kvio capacity: --warmup-share takes a fraction below 1, got "
                    "'%s'\n", value);
            exit_status = KVIO_EXIT_USAGE;
        }
        return exit_status;
    }
    case CAP_NO_CONFIRM:
        options->no_confirm = true;
        return KVIO_EXIT_OK;
    case CAP_FORMAT:
        if (strcmp(value, "json") != 0 && strcmp(value, "table") != 0) {
            fprintf(stderr, "kvio capacity: --format takes table or json\n");
            return KVIO_EXIT_USAGE;
        }
        args->json_output = strcmp(value, "json") == 0;
        return KVIO_EXIT_OK;
    case KVIO_CLI_OPERAND:
        return kvio_cli_take_one("kvio capacity", "workload", &options->source, value);
    default:
        return KVIO_EXIT_USAGE;
    }
}

static int capacity_main(capacity_args_t *args, int argc, char **argv);

int kvio_cmd_capacity(int argc, char **argv)
{
    capacity_args_t args = {.options = {.attain = 0.9, .tolerance = 0.01}};
    int exit_status = capacity_main(&args, argc, argv);
    free(args.vary_text);
    return exit_status;
}

static int capacity_main(capacity_args_t *args_p, int argc, char **argv)
{
    args_p->options.sets = args_p->sets;
    kvio_cli_parser_t parser;
    kvio_cli_parser_init(&parser, "kvio capacity", argc, argv, capacity_options);
    const char *value;
    int option, exit_status = KVIO_EXIT_OK;
    while (exit_status == KVIO_EXIT_OK && !args_p->help &&
           (option = kvio_cli_parser_next(&parser, &value)) != KVIO_CLI_END)
        exit_status = take_capacity_arg(args_p, option, value);
    if (exit_status != KVIO_EXIT_OK)
        return exit_status;
    if (args_p->help) {
        usage(stdout);
        return KVIO_EXIT_OK;
    }
    if (args_p->options.source == NULL) {
        fprintf(stderr, "kvio capacity: give a workload (and --slo ttft=DURATION,... unless "
                "it has slo:)\n");
        return KVIO_EXIT_USAGE;
    }
    args_p->options.stop = kvio_cli_stop_on_signals();
    char error[KVIO_CLI_ERROR_MAX] = "";
    kvio_capacity_t *capacity = NULL;
    kvio_status_t status = kvio_capacity(&args_p->options, &capacity, error, sizeof(error));
    if (status != KVIO_OK) {
        fprintf(stderr, "kvio: %s\n", error[0] != '\0' ? error : kvio_strerror(status));
        return kvio_cli_exit_status(status);
    }
    if (args_p->json_output) {
        json_t *result = kvio_capacity_json(capacity);
        json_dumpf(result, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
        fputc('\n', stdout);
        json_decref(result);
    } else {
        kvio_capacity_print(capacity, stdout);
    }
    kvio_capacity_destroy(capacity);
    return KVIO_EXIT_OK;
}
