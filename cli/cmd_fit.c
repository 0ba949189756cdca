/* kvio fit: the linear form's coefficients by least squares on measured
 * steps (a CSV of prefill_tokens, decode_seqs, context_tokens, time_ms, or
 * kvio's iterations.csv). */
#include "cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvio/cost.h"

enum { COST_HELP = 1 };

int kvio_cmd_fit(int argc, char **argv)
{
    static const kvio_cli_option_t options[] = {{"help", 'h', NULL, COST_HELP},
                                                {NULL, 0, NULL, 0}};
    kvio_cli_parser_t parser;
    kvio_cli_parser_init(&parser, "kvio fit", argc, argv, options);
    const char *value, *path = NULL;
    int option;
    size_t num_files = 0;
    while ((option = kvio_cli_parser_next(&parser, &value)) != KVIO_CLI_END) {
        if (option == KVIO_CLI_ERROR)
            return KVIO_EXIT_USAGE;
        if (option == COST_HELP) {
            printf("usage: kvio fit STEPS.csv|iterations.csv\n\n"
                   "Fits t = c0 + c1*prefill_tokens + c2*decode_seqs + c3*context_tokens (ms)\n"
                   "to measured iterations (CSV with those columns and time_ms) and prints\n"
                   "the coefficients for the cost section (kind: linear) and the fit error.\n"
                   "A kvio iterations.csv works too (duration_ms; no context column: c3 = 0).\n");
            return KVIO_EXIT_OK;
        }
        path = value;
        num_files++;
    }
    if (num_files != 1) {
        fprintf(stderr, "kvio fit: which file? (kvio fit STEPS.csv)\n");
        return KVIO_EXIT_USAGE;
    }
    char error[512];
    kvio_cost_sample_t *samples = NULL;
    size_t count = 0;
    kvio_status_t status = kvio_cost_read_samples(path, &samples, &count, error, sizeof(error));
    if (status == KVIO_OK) {
        kvio_cost_fit_t fit;
        status = kvio_cost_fit_linear(samples, count, &fit, error, sizeof(error));
        if (status == KVIO_OK) {
            printf("# %zu samples; RMSE %.4g ms, max error %.4g ms, R^2 %.6f\n", fit.samples,
                   fit.rmse_ms, fit.max_abs_error_ms, fit.r_squared);
            printf("cost: {kind: linear, c0: %.6g, c1: %.6g, c2: %.6g, c3: %.6g}\n", fit.c0,
                   fit.c1, fit.c2, fit.c3);
        } else {
            snprintf(error + strlen(error), sizeof(error) - strlen(error), " (%s)", path);
        }
    }
    free(samples);
    if (status != KVIO_OK) {
        fprintf(stderr, "kvio fit: %s\n", error);
        return KVIO_EXIT_USAGE;
    }
    return KVIO_EXIT_OK;
}
