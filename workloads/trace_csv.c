/* CSV traces, read by header names: Azure LLM inference
 * (TIMESTAMP,ContextTokens,GeneratedTokens; dates become times relative to
 * the first request; every prompt is unique content) and BurstGPT
 * (Timestamp in seconds, Request tokens, Response tokens; with a Session ID
 * column, a session's requests share its previous context). */
#include "workloads/workloads_int.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MAX_FIELDS 64

/* Columns of interest; -1 when absent. */
typedef struct csv_state {
    bool have_header;
    int timestamp, input, output, session;
    int num_columns;
    /* BurstGPT sessions: name -> id (open addressing), last record per id */
    char **session_names;
    uint64_t *session_ids;
    size_t session_slots, num_sessions;
} csv_state_t;

/* Splits line in place into fields (double quotes group commas; "" is a
 * quote). Returns the number of fields, or -1 when there are too many or a
 * quote is not closed. */
static int split_fields(char *line, char **fields)
{
    int count = 0;
    char *read = line;
    for (;;) {
        if (count == MAX_FIELDS)
            return -1;
        while (*read == ' ' || *read == '\t')
            read++;
        char *write = read;
        fields[count++] = write;
        if (*read == '"') {
            read++;
            for (;;) {
                if (*read == '\0')
                    return -1;
                if (*read == '"') {
                    if (read[1] == '"') {
                        *write++ = '"';
                        read += 2;
                        continue;
                    }
                    read++;
                    break;
                }
                *write++ = *read++;
            }
            while (*read == ' ' || *read == '\t')
                read++;
            if (*read != ',' && *read != '\0')
                return -1;
        } else {
            while (*read != ',' && *read != '\0')
                *write++ = *read++;
            while (write > fields[count - 1] && (write[-1] == ' ' || write[-1] == '\t'))
                write--;
        }
        char separator = *read;
        *write = '\0';
        if (separator == '\0')
            return count;
        read++;
    }
}

static int find_column(char **fields, int count, const char *name)
{
    for (int i = 0; i < count; i++) {
        if (strcasecmp(fields[i], name) == 0)
            return i;
    }
    return -1;
}

static kvio_status_t parse_header(csv_state_t *state, char **fields, int count, bool azure,
                                  char *error_p, size_t error_len)
{
    const char *names[3] = {azure ? "TIMESTAMP" : "Timestamp",
                            azure ? "ContextTokens" : "Request tokens",
                            azure ? "GeneratedTokens" : "Response tokens"};
    int *columns[3] = {&state->timestamp, &state->input, &state->output};
    for (int i = 0; i < 3; i++) {
        *columns[i] = find_column(fields, count, names[i]);
        if (*columns[i] < 0) {
            snprintf(error_p, error_len, "the header has no '%s' column (%s CSV needs %s, %s, %s)",
                     names[i], azure ? "Azure" : "BurstGPT", names[0], names[1], names[2]);
            return KVIO_ERR_PARSE;
        }
    }
    state->session = azure ? -1 : find_column(fields, count, "Session ID");
    state->num_columns = count;
    state->have_header = true;
    return KVIO_INPROGRESS;
}

/* Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
 * days_from_civil). */
static int64_t days_from_civil(int64_t year, unsigned month, unsigned day)
{
    year -= month <= 2;
    int64_t era = (year >= 0 ? year : year - 399) / 400;
    unsigned year_of_era = (unsigned)(year - era * 400);
    unsigned day_of_year = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1;
    unsigned day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    return era * 146097 + (int64_t)day_of_era - 719468;
}

/* "2023-11-16 18:17:03.9799600" (or with a 'T') as ns since the epoch, UTC. */
static kvio_status_t parse_date(const char *text, int64_t *ns_p, char *error_p, size_t error_len)
{
    int year, month, day, hour, minute, second, consumed = 0;
    char separator;
    if (sscanf(text, "%4d-%2d-%2d%c%2d:%2d:%2d%n", &year, &month, &day, &separator, &hour,
               &minute, &second, &consumed) != 7 ||
        (separator != ' ' && separator != 'T') || year < 1970 || year > 2200 || month < 1 ||
        month > 12 || day < 1 || day > 31 || hour > 23 || minute > 59 || second > 59 ||
        hour < 0 || minute < 0 || second < 0) {
        /* (A second of 60 is a leap second, which UTC times in a log do
         * not carry and Python's datetime refuses.) */
        snprintf(error_p, error_len, "TIMESTAMP '%.40s' is not a date like 2023-11-16 18:17:03.98",
                 text);
        return KVIO_ERR_PARSE;
    }
    /* A day the month does not have (2023-02-29, 04-31) is no date. */
    static const int month_days[12] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    if (day > month_days[month - 1] || (month == 2 && day == 29 && !leap)) {
        snprintf(error_p, error_len, "TIMESTAMP '%.40s': %04d-%02d has no day %d", text, year,
                 month, day);
        return KVIO_ERR_PARSE;
    }
    const char *rest = text + consumed;
    int64_t fraction_ns = 0;
    if (*rest == '.') {
        rest++;
        int64_t scale = 100000000;
        if (!(*rest >= '0' && *rest <= '9')) {
            snprintf(error_p, error_len, "TIMESTAMP '%.40s' has an empty fraction", text);
            return KVIO_ERR_PARSE;
        }
        for (; *rest >= '0' && *rest <= '9'; rest++) {
            fraction_ns += (*rest - '0') * scale;
            scale /= 10;
        }
    }
    if (*rest == 'Z')
        rest++;
    if (*rest != '\0') {
        snprintf(error_p, error_len, "TIMESTAMP '%.40s' has trailing text", text);
        return KVIO_ERR_PARSE;
    }
    int64_t days = days_from_civil(year, (unsigned)month, (unsigned)day);
    int64_t seconds = days * 86400 + hour * 3600 + minute * 60 + second;
    *ns_p = seconds * 1000000000 + fraction_ns;
    return KVIO_OK;
}

static kvio_status_t parse_seconds(const char *text, int64_t *ns_p, char *error_p,
                                   size_t error_len)
{
    char *end;
    errno = 0;
    double seconds = strtod(text, &end);
    /* Decimal only: strtod reads "0x10" as 16 s, and the Azure reader
     * refuses it. */
    if (end == text || *end != '\0' || errno == ERANGE || !isfinite(seconds) ||
        strspn(text, "0123456789.eE+-") != strlen(text)) {
        snprintf(error_p, error_len, "Timestamp '%.40s' is not a number of seconds", text);
        return KVIO_ERR_PARSE;
    }
    if (seconds < 0 || seconds > 1e9) {
        snprintf(error_p, error_len, "Timestamp %.17g s is %s", seconds,
                 seconds < 0 ? "negative" : "absurd (more than 1e9 s)");
        return KVIO_ERR_PARSE;
    }
    *ns_p = llround(seconds * 1e9);
    return KVIO_OK;
}

static uint64_t name_hash(const char *name)
{
    uint64_t hash = 1469598103934665603ull;
    for (; *name; name++)
        hash = (hash ^ (unsigned char)*name) * 1099511628211ull;
    return hash;
}

/* The session id of a name: 1, 2, ... in order of first appearance. */
static kvio_status_t session_id(csv_state_t *state, const char *name, uint64_t *id_p)
{
    if (state->num_sessions * 2 >= state->session_slots) {
        size_t slots = state->session_slots ? state->session_slots * 2 : 1024;
        char **names = calloc(slots, sizeof(char *));
        uint64_t *ids = calloc(slots, sizeof(uint64_t));
        if (names == NULL || ids == NULL) {
            free(names);
            free(ids);
            return KVIO_ERR_NOMEM;
        }
        for (size_t i = 0; i < state->session_slots; i++) {
            if (state->session_names[i] == NULL)
                continue;
            size_t slot = name_hash(state->session_names[i]) & (slots - 1);
            while (names[slot] != NULL)
                slot = (slot + 1) & (slots - 1);
            names[slot] = state->session_names[i];
            ids[slot] = state->session_ids[i];
        }
        free(state->session_names);
        free(state->session_ids);
        state->session_names = names;
        state->session_ids = ids;
        state->session_slots = slots;
    }
    size_t slot = name_hash(name) & (state->session_slots - 1);
    while (state->session_names[slot] != NULL) {
        if (strcmp(state->session_names[slot], name) == 0) {
            *id_p = state->session_ids[slot];
            return KVIO_OK;
        }
        slot = (slot + 1) & (state->session_slots - 1);
    }
    char *copy = strdup(name);
    if (copy == NULL)
        return KVIO_ERR_NOMEM;
    state->session_names[slot] = copy;
    state->session_ids[slot] = ++state->num_sessions;
    *id_p = state->num_sessions;
    return KVIO_OK;
}

static kvio_status_t parse_row(kvio_trace_t *trace, char *line, bool azure, char *error_p,
                               size_t error_len)
{
    csv_state_t *state = trace->format_state;
    char *fields[MAX_FIELDS];
    int count = split_fields(line, fields);
    if (count < 0) {
        snprintf(error_p, error_len, "not a CSV row (unclosed quote or more than %d fields)",
                 MAX_FIELDS);
        return KVIO_ERR_PARSE;
    }
    if (!state->have_header)
        return parse_header(state, fields, count, azure, error_p, error_len);
    if (count != state->num_columns) {
        snprintf(error_p, error_len, "%d fields, but the header has %d", count,
                 state->num_columns);
        return KVIO_ERR_PARSE;
    }
    int64_t arrival_ns;
    uint32_t input, output;
    kvio_status_t status =
        azure ? parse_date(fields[state->timestamp], &arrival_ns, error_p, error_len)
              : parse_seconds(fields[state->timestamp], &arrival_ns, error_p, error_len);
    if (status == KVIO_OK)
        status = kvio_trace_parse_tokens(fields[state->input], 1, &input, error_p, error_len,
                                         azure ? "ContextTokens" : "Request tokens");
    if (status == KVIO_OK)
        status = kvio_trace_parse_tokens(fields[state->output], 0, &output, error_p, error_len,
                                         azure ? "GeneratedTokens" : "Response tokens");
    uint64_t session = 0;
    if (status == KVIO_OK && state->session >= 0 && fields[state->session][0] != '\0')
        status = session_id(state, fields[state->session], &session);
    if (status != KVIO_OK)
        return status;
    kvio_segment_t *segment = kvio_trace_reserve_segments(trace, 1);
    kvio_trace_record_t *record = segment != NULL ? kvio_trace_add_record(trace) : NULL;
    if (record == NULL)
        return KVIO_ERR_NOMEM;
    /* Unique content: the prompt and output are named after the line. */
    *segment = (kvio_segment_t){KVIO_CONTENT_TRACE | trace->line << 1, 0, input};
    trace->num_segments++;
    record->request.arrival_ns = arrival_ns;
    record->request.input_tokens = input;
    record->request.output_tokens = output;
    record->request.session_id = session;
    record->request.num_segments = 1;
    record->request.output_content_id = KVIO_CONTENT_TRACE | (trace->line << 1 | 1);
    return KVIO_OK;
}

static kvio_status_t parse_azure(kvio_trace_t *trace, char *line, size_t length, char *error_p,
                                 size_t error_len)
{
    return parse_row(trace, line, true, error_p, error_len);
}

static kvio_status_t parse_burstgpt(kvio_trace_t *trace, char *line, size_t length,
                                    char *error_p, size_t error_len)
{
    return parse_row(trace, line, false, error_p, error_len);
}

/* In arrival order, a session's request shares as much of the previous
 * request's context (its prompt, then its output) as its prompt holds; the
 * rest of its prompt is new. */
static kvio_status_t share_sessions(kvio_trace_t *trace, char *error_p, size_t error_len)
{
    csv_state_t *state = trace->format_state;
    if (state->num_sessions == 0)
        return KVIO_OK;
    size_t *last = malloc((state->num_sessions + 1) * sizeof(size_t));
    if (last == NULL)
        return KVIO_ERR_NOMEM;
    for (size_t i = 0; i <= state->num_sessions; i++)
        last[i] = SIZE_MAX;
    kvio_status_t status = KVIO_OK;
    for (size_t i = 0; i < trace->num_records && status == KVIO_OK; i++) {
        kvio_trace_record_t *record = &trace->records[i];
        uint64_t session = record->request.session_id;
        if (session == 0)
            continue;
        size_t previous_index = last[session];
        last[session] = i;
        if (previous_index == SIZE_MAX)
            continue;
        kvio_trace_record_t *previous = &trace->records[previous_index];
        record->request.turn = previous->request.turn + 1;
        uint64_t context = (uint64_t)previous->request.input_tokens +
                           previous->request.output_tokens;
        uint32_t input = record->request.input_tokens;
        uint64_t shared = context < input ? context : input;
        /* At most the previous segments, its output and one new segment. */
        kvio_segment_t *out = kvio_trace_reserve_segments(
            trace, previous->request.num_segments + 2);
        if (out == NULL) {
            status = KVIO_ERR_NOMEM;
            break;
        }
        const kvio_segment_t *from = trace->segments + previous->segment_start;
        size_t count = 0;
        uint64_t taken = 0;
        for (uint32_t s = 0; s < previous->request.num_segments && taken < shared; s++) {
            kvio_segment_t segment = from[s];
            if (segment.tokens > shared - taken)
                segment.tokens = (uint32_t)(shared - taken);
            out[count++] = segment;
            taken += segment.tokens;
        }
        if (taken < shared) {
            out[count++] = (kvio_segment_t){previous->request.output_content_id, 0,
                                            (uint32_t)(shared - taken)};
            taken = shared;
        }
        if (input > shared)
            out[count++] = (kvio_segment_t){KVIO_CONTENT_TRACE | record->line << 1, 0,
                                            (uint32_t)(input - shared)};
        record->segment_start = trace->num_segments;
        record->request.num_segments = (uint32_t)count;
        trace->num_segments += count;
    }
    free(last);
    (void)error_p;
    (void)error_len;
    return status;
}

static void csv_fini(kvio_trace_t *trace)
{
    csv_state_t *state = trace->format_state;
    if (state == NULL)
        return;
    for (size_t i = 0; i < state->session_slots; i++)
        free(state->session_names[i]);
    free(state->session_names);
    free(state->session_ids);
    state->session_names = NULL;
    state->session_ids = NULL;
    state->session_slots = 0;
}

const kvio_trace_format_ops_t kvio_trace_csv_azure_ops = {
    .name = "azure",
    .format = KVIO_TRACE_AZURE,
    .absolute_times = true,
    .state_size = sizeof(csv_state_t),
    .parse_line = parse_azure,
    .fini = csv_fini,
};

const kvio_trace_format_ops_t kvio_trace_csv_burstgpt_ops = {
    .name = "burstgpt",
    .format = KVIO_TRACE_BURSTGPT,
    .state_size = sizeof(csv_state_t),
    .parse_line = parse_burstgpt,
    .finish = share_sessions,
    .fini = csv_fini,
};
