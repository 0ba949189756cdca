/* Command-line options of every kvio command, one way: a table of options
 * turned into getopt_long's, read in order, operands returned in place, and
 * each usage error printed once, naming the option and the command. */
#include "cli/cli.h"

#include "kvio/config.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

/* getopt_long's val of the long form of options[i]; short forms return
 * their character (below 256), so an error says which form was used. */
#define LONG_VALUE(index) (256 + (int)(index))

void kvio_cli_parser_init(kvio_cli_parser_t *parser, const char *command, int argc, char **argv,
                          const kvio_cli_option_t *options)
{
    memset(parser, 0, sizeof(*parser));
    parser->command = command;
    parser->argc = argc;
    parser->argv = argv;
    parser->options = options;
    /* "-": operands come back in order as 1 (whatever POSIXLY_CORRECT says);
     * ":": a missing value returns ':', not '?'. */
    size_t used = (size_t)snprintf(parser->short_options, sizeof(parser->short_options), "-:");
    size_t count = 0;
    for (const kvio_cli_option_t *option = options;
         option->name != NULL && count < KVIO_CLI_MAX_OPTIONS; option++, count++) {
        /* Aliases (one id, two names) share a val: a prefix of both is not
         * ambiguous to getopt. */
        size_t first = 0;
        while (options[first].id != option->id)
            first++;
        parser->long_options[count] = (struct option){
            .name = option->name,
            .has_arg = option->value_name != NULL ? required_argument : no_argument,
            .val = LONG_VALUE(first),
        };
        if (option->short_name != 0 && used + 3 < sizeof(parser->short_options)) {
            parser->short_options[used++] = option->short_name;
            if (option->value_name != NULL)
                parser->short_options[used++] = ':';
            parser->short_options[used] = '\0';
        }
    }
    parser->num_options = count;
    /* optind 0 makes glibc start afresh (each command scans its own argv);
     * opterr 0: the messages are ours. */
    optind = 0;
    opterr = 0;
}

/* The table entry getopt's val (long or short form) stands for; NULL if none. */
static const kvio_cli_option_t *find_option(const kvio_cli_parser_t *parser, int value)
{
    if (value >= LONG_VALUE(0) && value < LONG_VALUE(parser->num_options))
        return &parser->options[value - LONG_VALUE(0)];
    for (size_t i = 0; i < parser->num_options && value > 0; i++)
        if (parser->options[i].short_name == value)
            return &parser->options[i];
    return NULL;
}

/* "--name" for a long form, "-c" for a short one. */
static void option_spelling(const kvio_cli_parser_t *parser, int value, char *text, size_t size)
{
    const kvio_cli_option_t *option = find_option(parser, value);
    if (value >= LONG_VALUE(0) && option != NULL)
        snprintf(text, size, "--%s", option->name);
    else
        snprintf(text, size, "-%c", value);
}

/* An unknown or ambiguous "--name[=value]" (getopt leaves no optopt for
 * those): says which, listing the options an ambiguous prefix could be. */
static void report_long_error(const kvio_cli_parser_t *parser, const char *arg)
{
    const char *name = arg + 2;
    int length = (int)strcspn(name, "=");
    size_t matches = 0;
    for (size_t i = 0; i < parser->num_options; i++)
        matches += strncmp(parser->options[i].name, name, (size_t)length) == 0 &&
                   parser->long_options[i].val == LONG_VALUE(i);
    if (matches < 2) {
        char typed[128];
        snprintf(typed, sizeof(typed), "%.*s", length < 127 ? length : 127, name);
        const char *close = kvio_closest_name(typed, &parser->options[0].name,
                                              parser->num_options, sizeof(kvio_cli_option_t));
        fprintf(stderr, "%s: unknown option '--%s'", parser->command, typed);
        if (close != NULL)
            fprintf(stderr, " (did you mean '--%s'?)", close);
        return;
    }
    fprintf(stderr, "%s: ambiguous option '--%.*s' (could be", parser->command, length, name);
    const char *separator = " ";
    for (size_t i = 0; i < parser->num_options; i++) {
        if (strncmp(parser->options[i].name, name, (size_t)length) == 0) {
            fprintf(stderr, "%s--%s", separator, parser->options[i].name);
            separator = ", ";
        }
    }
    fprintf(stderr, ")");
}

/* The message for the getopt_long error just returned: result '?' or ':'
 * (also for an empty value), value getopt's optopt (the option's val). */
static void report_error(const kvio_cli_parser_t *parser, int result, int value)
{
    char spelling[64];
    const char *arg = optind > 0 && optind <= parser->argc ? parser->argv[optind - 1] : "";
    const kvio_cli_option_t *option = find_option(parser, value);
    if (result == ':') {
        option_spelling(parser, value, spelling, sizeof(spelling));
        fprintf(stderr, "%s: %s needs %s", parser->command, spelling,
                option != NULL ? option->value_name : "a value");
    } else if (value >= LONG_VALUE(0) && option != NULL) {
        fprintf(stderr, "%s: --%s takes no value", parser->command, option->name);
    } else if (value == 0 && strncmp(arg, "--", 2) == 0) {
        report_long_error(parser, arg);
    } else {
        fprintf(stderr, "%s: unknown option '-%c'", parser->command, value);
    }
    fprintf(stderr, " (see %s --help)\n", parser->command);
}

int kvio_cli_parser_next(kvio_cli_parser_t *parser, const char **value_p)
{
    *value_p = NULL;
    if (!parser->operands_only) {
        int result = getopt_long(parser->argc, parser->argv, parser->short_options,
                                 parser->long_options, NULL);
        if (result == 1) {
            *value_p = optarg;
            return KVIO_CLI_OPERAND;
        }
        if (result == '?' || result == ':') {
            report_error(parser, result, optopt);
            return KVIO_CLI_ERROR;
        }
        if (result != -1) {
            const kvio_cli_option_t *option = find_option(parser, result);
            if (option != NULL && option->value_name != NULL && optarg[0] == '\0') {
                /* --output= or -o '': as good as no value */
                report_error(parser, ':', result);
                return KVIO_CLI_ERROR;
            }
            *value_p = optarg;
            return option != NULL ? option->id : KVIO_CLI_ERROR;
        }
        /* -1 with arguments left: they follow "--", operands all. */
        parser->operands_only = true;
    }
    if (optind < parser->argc) {
        *value_p = parser->argv[optind++];
        return KVIO_CLI_OPERAND;
    }
    return KVIO_CLI_END;
}

int kvio_cli_take_one(const char *command, const char *what, const char **slot_p,
                      const char *value)
{
    if (*slot_p != NULL) {
        fprintf(stderr, "%s: more than one %s given ('%s' and '%s')\n", command, what, *slot_p,
                value);
        return KVIO_EXIT_USAGE;
    }
    *slot_p = value;
    return KVIO_EXIT_OK;
}

int kvio_cli_append(const char *command, const char *what, const char **list, size_t *count_p,
                    size_t max, const char *value)
{
    if (*count_p == max) {
        fprintf(stderr, "%s: more than %zu %s\n", command, max, what);
        return KVIO_EXIT_USAGE;
    }
    list[(*count_p)++] = value;
    return KVIO_EXIT_OK;
}

static volatile sig_atomic_t stop_requested;

static void request_stop(int signal_number)
{
    (void)signal_number;
    stop_requested = stop_requested < 2 ? stop_requested + 1 : 2;
}

volatile sig_atomic_t *kvio_cli_stop_on_signals(void)
{
    struct sigaction action;
    memset(&action, 0, sizeof(action));
    action.sa_handler = request_stop;
    sigaction(SIGINT, &action, NULL);
    sigaction(SIGTERM, &action, NULL);
    return &stop_requested;
}
