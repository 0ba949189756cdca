/* kvio capacity: parses the arguments and prints what kvio_capacity
 * (run/capacity.c) found: the highest arrival rate that meets the SLO for
 * the share of requests asked, and the curve the search walked. */
#include "cli/cli.h"

#include <jansson.h>
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
            "                     [--tolerance FRACTION] [--set KEY=VALUE]...\n"
            "                     [-o|--output DIR] [--force] [--format table|json]\n\n"
            "Finds the highest stream.arrival.rate (req/s) at which the share --attain\n"
            "(default 0.9) of the requests meets the SLO (TTFT and TPOT bounds; default:\n"
            "the workload's slo:), by\n"
            "bisection over simulate runs (deterministic). The search doubles from the\n"
            "workload's rate (or --low/--high) until a probe fails, then halves the\n"
            "bracket until it is within --tolerance (default 0.01) of its top. Each\n"
            "probe is a whole run in DIR/rate-<R>; DIR/capacity.json has the capacity,\n"
            "the binding bound and the curve (default DIR: results/capacity-<name>-<time>).\n");
}

typedef struct capacity_args {
    kvio_capacity_options_t options;
    const char *sets[MAX_SETS];
    bool json_output, help;
} capacity_args_t;

enum {
    CAP_HELP = 1, CAP_SLO, CAP_ATTAIN, CAP_LOW, CAP_HIGH, CAP_TOLERANCE, CAP_SET, CAP_OUTPUT,
    CAP_FORCE, CAP_FORMAT,
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

int kvio_cmd_capacity(int argc, char **argv)
{
    capacity_args_t args = {.options = {.attain = 0.9, .tolerance = 0.01}};
    args.options.sets = args.sets;
    kvio_cli_parser_t parser;
    kvio_cli_parser_init(&parser, "kvio capacity", argc, argv, capacity_options);
    const char *value;
    int option, exit_status = KVIO_EXIT_OK;
    while (exit_status == KVIO_EXIT_OK && !args.help &&
           (option = kvio_cli_parser_next(&parser, &value)) != KVIO_CLI_END)
        exit_status = take_capacity_arg(&args, option, value);
    if (exit_status != KVIO_EXIT_OK)
        return exit_status;
    if (args.help) {
        usage(stdout);
        return KVIO_EXIT_OK;
    }
    if (args.options.source == NULL) {
        fprintf(stderr, "kvio capacity: give a workload (and --slo ttft=DURATION,... unless "
                "it has slo:)\n");
        return KVIO_EXIT_USAGE;
    }
    args.options.stop = kvio_cli_stop_on_signals();
    char error[1024] = "";
    json_t *result = NULL;
    kvio_status_t status = kvio_capacity(&args.options, &result, error, sizeof(error));
    if (status != KVIO_OK) {
        fprintf(stderr, "kvio: %s\n", error[0] != '\0' ? error : kvio_strerror(status));
        return kvio_cli_exit_status(status);
    }
    if (args.json_output) {
        json_dumpf(result, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
        fputc('\n', stdout);
    } else {
        kvio_capacity_table(result, stdout);
    }
    json_decref(result);
    return KVIO_EXIT_OK;
}
