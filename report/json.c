/* The report's readers' small parts, below every loader (load.c,
 * summary.c, paired.c, mlperf.c) and the chart builders: a JSON file read
 * within bounds, a number checked at its key, a label made safe to show. */
#include "report/report_int.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

void report_label_copy(char *label_p, size_t label_len, const char *text)
{
    size_t out = 0;
    const unsigned char *in = (const unsigned char *)(text != NULL ? text : "");
    while (*in != '\0' && out + 5 < label_len) {
        unsigned char c = *in;
        size_t length = c < 0x80          ? 1
                        : (c >> 5) == 6   ? 2
                        : (c >> 4) == 14  ? 3
                        : (c >> 3) == 30  ? 4
                                          : 0;
        bool valid = length > 0;
        for (size_t i = 1; valid && i < length; i++)
            valid = (in[i] & 0xC0) == 0x80;
        if (length == 1 && (c < 0x20 || c == 0x7F))
            valid = false;
        if (!valid) {
            label_p[out++] = '?';
            in++;
            continue;
        }
        memcpy(label_p + out, in, length);
        out += length;
        in += length;
    }
    label_p[out] = '\0';
}

kvio_status_t report_json_load(const char *path, json_t **json_p, char *error_p,
                               size_t error_len)
{
    struct stat info;
    if (lstat(path, &info) != 0) {
        snprintf(error_p, error_len, "%s: %s", path, strerror(errno));
        return errno == ENOENT ? KVIO_ERR_NOT_FOUND : KVIO_ERR_IO;
    }
    /* kvio writes plain files: a link is not followed (nor what it points
     * to echoed in a parse error). */
    if (!S_ISREG(info.st_mode)) {
        snprintf(error_p, error_len, "%s: not a regular file%s", path,
                 S_ISLNK(info.st_mode) ? " (a symbolic link)" : "");
        return KVIO_ERR_INVALID;
    }
    if ((unsigned long long)info.st_size > KVIO_REPORT_MAX_JSON_BYTES) {
        snprintf(error_p, error_len, "%s: %lld bytes is more than a report reads (%u)", path,
                 (long long)info.st_size, KVIO_REPORT_MAX_JSON_BYTES);
        return KVIO_ERR_INVALID;
    }
    json_error_t json_error;
    json_t *json = json_load_file(path, JSON_REJECT_DUPLICATES, &json_error);
    if (json == NULL) {
        snprintf(error_p, error_len, "%s:%d: %s", path, json_error.line, json_error.text);
        return KVIO_ERR_PARSE;
    }
    if (!json_is_object(json)) {
        snprintf(error_p, error_len, "%s: not a JSON object", path);
        json_decref(json);
        return KVIO_ERR_PARSE;
    }
    *json_p = json;
    return KVIO_OK;
}

kvio_status_t report_json_number(const json_t *object, const char *key, const char *where,
                                 const char *path, bool required, double *value_p,
                                 char *error_p, size_t error_len)
{
    const json_t *value = json_object_get(object, key);
    if (value == NULL && !required) {
        *value_p = 0;
        return KVIO_OK;
    }
    if (!json_is_number(value)) {
        snprintf(error_p, error_len, "%s: %s%s is %s", path, where, key,
                 value == NULL ? "missing" : "not a number");
        return KVIO_ERR_PARSE;
    }
    double number = json_number_value(value);
    if (!isfinite(number) || fabs(number) > REPORT_VALUE_LIMIT) {
        snprintf(error_p, error_len, "%s: %s%s is out of range", path, where, key);
        return KVIO_ERR_PARSE;
    }
    *value_p = number;
    return KVIO_OK;
}
