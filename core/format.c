/* Numbers as kvio writes and reads them: sizes and durations with units
 * (parsed from the YAML, formatted back for summary.json and help), UTC
 * times, and the digits of CSV rows, formatted by hand because printf's
 * float path was a large share of a simulate run. */
#include "kvio/format.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const double KVIO_SIZE_LIMIT = 18446744073709551615.0;

typedef struct unit {
    const char *name;
    double scale;
} unit_t;

static const unit_t size_units[] = {
    {"B", 1.0}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
    {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0},
    {"TiB", 1099511627776.0}, {NULL, 0},
};

static const unit_t duration_units[] = {
    {"ns", 1.0}, {"us", 1e3}, {"ms", 1e6}, {"s", 1e9}, {"m", 60e9},
    {"min", 60e9}, {"h", 3600e9}, {NULL, 0},
};

/* Splits "1.5GiB" into 1.5 and a unit; returns false when the number part
 * is malformed. unit_p points into text. */
static bool split_number(const char *text, double *number_p, const char **unit_p)
{
    while (*text == ' ')
        text++;
    char *end;
    errno = 0;
    double number = strtod(text, &end);
    if (end == text || errno == ERANGE || !isfinite(number))
        return false;
    while (*end == ' ')
        end++;
    *number_p = number;
    *unit_p = end;
    return true;
}

static kvio_status_t parse_with_units(const char *text, const unit_t *units, bool unit_required,
                                      const char *what, double *value_p, char *error_p,
                                      size_t error_len)
{
    double number;
    const char *unit_text;
    char names[128] = "";
    for (const unit_t *unit = units; unit->name != NULL; unit++) {
        strncat(names, unit->name, sizeof(names) - strlen(names) - 1);
        if (unit[1].name != NULL)
            strncat(names, ", ", sizeof(names) - strlen(names) - 1);
    }
    if (!split_number(text, &number, &unit_text)) {
        snprintf(error_p, error_len, "'%s' is not a %s (a number and a unit: %s)", text, what,
                 names);
        return KVIO_ERR_CONFIG;
    }
    if (number < 0) {
        snprintf(error_p, error_len, "%s '%s' is negative", what, text);
        return KVIO_ERR_CONFIG;
    }
    if (*unit_text == '\0') {
        if (unit_required) {
            snprintf(error_p, error_len, "%s '%s' needs a unit (%s)", what, text, names);
            return KVIO_ERR_CONFIG;
        }
        *value_p = number;
        return KVIO_OK;
    }
    for (const unit_t *unit = units; unit->name != NULL; unit++) {
        if (strcmp(unit->name, unit_text) == 0) {
            *value_p = number * unit->scale;
            return KVIO_OK;
        }
    }
    snprintf(error_p, error_len, "%s '%s' has an unknown unit '%s' (use %s)", what, text,
             unit_text, names);
    return KVIO_ERR_CONFIG;
}

kvio_status_t kvio_parse_size(const char *text, uint64_t *bytes_p, char *error_p,
                              size_t error_len)
{
    double bytes;
    kvio_status_t status = parse_with_units(text, size_units, false, "size", &bytes, error_p,
                                            error_len);
    if (status != KVIO_OK)
        return status;
    if (bytes >= KVIO_SIZE_LIMIT) {
        snprintf(error_p, error_len, "size '%s' is too large", text);
        return KVIO_ERR_CONFIG;
    }
    *bytes_p = (uint64_t)llround(bytes);
    return KVIO_OK;
}

kvio_status_t kvio_parse_duration(const char *text, int64_t *ns_p, char *error_p,
                                  size_t error_len)
{
    double ns;
    kvio_status_t status = parse_with_units(text, duration_units, true, "duration", &ns,
                                            error_p, error_len);
    if (status != KVIO_OK)
        return status;
    if (ns >= 9.2e18) {
        snprintf(error_p, error_len, "duration '%s' is too long", text);
        return KVIO_ERR_CONFIG;
    }
    *ns_p = (int64_t)llround(ns);
    return KVIO_OK;
}

void kvio_format_size(uint64_t bytes, char *text_p, size_t text_len)
{
    static const char *const names[] = {"TiB", "GiB", "MiB", "KiB"};
    static const unsigned shifts[] = {40, 30, 20, 10};
    for (int i = 0; i < 4; i++) {
        uint64_t unit = (uint64_t)1 << shifts[i];
        if (bytes >= unit && bytes % unit == 0) {
            snprintf(text_p, text_len, "%llu%s", (unsigned long long)(bytes / unit), names[i]);
            return;
        }
    }
    snprintf(text_p, text_len, "%llu", (unsigned long long)bytes);
}

void kvio_format_duration(int64_t ns, char *text_p, size_t text_len)
{
    static const char *const names[] = {"s", "ms", "us"};
    static const int64_t scales[] = {1000000000, 1000000, 1000};
    for (int i = 0; i < 3; i++) {
        if (ns != 0 && ns % scales[i] == 0) {
            snprintf(text_p, text_len, "%lld%s", (long long)(ns / scales[i]), names[i]);
            return;
        }
    }
    if (ns == 0)
        snprintf(text_p, text_len, "0s");
    else
        snprintf(text_p, text_len, "%lldns", (long long)ns);
}

void kvio_format_utc(unsigned long long wall_ns, char *text_p, size_t text_len)
{
    time_t seconds = (time_t)(wall_ns / 1000000000ull);
    unsigned milliseconds = (unsigned)(wall_ns % 1000000000ull / 1000000ull);
    struct tm utc;
    gmtime_r(&seconds, &utc);
    char date[32];
    if (strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%S", &utc) == 0)
        date[0] = '\0';
    snprintf(text_p, text_len, "%.20s.%03uZ", date, milliseconds % 1000u);
}

/* "00" to "99": digits are written two at a time. */
static const char digit_pairs[201] = "0001020304050607080910111213141516171819"
                                     "2021222324252627282930313233343536373839"
                                     "4041424344454647484950515253545556575859"
                                     "6061626364656667686970717273747576777879"
                                     "8081828384858687888990919293949596979899";

/* Writes exactly 8 digits of value (< 10^8), zero-padded, ending at end. */
static void format_8_digits(char *end, uint32_t value)
{
    for (int i = 0; i < 4; i++) {
        unsigned pair = (value % 100) * 2;
        value /= 100;
        *--end = digit_pairs[pair + 1];
        *--end = digit_pairs[pair];
    }
}

/* The number of decimal digits of value (at least 1). */
static size_t count_digits(uint64_t value)
{
    size_t count = 1;
    while (value >= 10000) {
        value /= 10000;
        count += 4;
    }
    return count + (value >= 10) + (value >= 100) + (value >= 1000);
}

/* Written in place from its last digit (the length counted first: no
 * copy, which for a short number cost more than the digits); 32-bit
 * arithmetic in chunks of 8 digits. */
size_t kvio_format_unsigned(char *out, uint64_t value)
{
    /* Most numbers of a row or an event are one or two digits (ranks,
     * tracks, counts of a batch): those without counting or looping. */
    if (value < 10) {
        out[0] = (char)('0' + value);
        return 1;
    }
    if (value < 100) {
        memcpy(out, &digit_pairs[2 * value], 2);
        return 2;
    }
    size_t length = count_digits(value);
    char *at = out + length;
    while (value >= 100000000) {
        format_8_digits(at, (uint32_t)(value % 100000000));
        at -= 8;
        value /= 100000000;
    }
    uint32_t small = (uint32_t)value;
    while (small >= 100) {
        unsigned pair = (small % 100) * 2;
        small /= 100;
        *--at = digit_pairs[pair + 1];
        *--at = digit_pairs[pair];
    }
    if (small >= 10) {
        *--at = digit_pairs[small * 2 + 1];
        *--at = digit_pairs[small * 2];
    } else {
        *--at = (char)('0' + small);
    }
    return length;
}

/* Writes the count lowest digits of value (zeros in front) before end. */
static void put_digits(char *end, uint64_t value, int count)
{
    for (; count >= 2; count -= 2) {
        end -= 2;
        memcpy(end, &digit_pairs[2 * (value % 100)], 2);
        value /= 100;
    }
    if (count == 1)
        end[-1] = (char)('0' + value % 10);
}

/* As printf's "%.<decimals>f" (decimals at most 6): the double's exact binary value
 * rounded to nearest, ties to even (glibc). value = m * 2^e exactly, so
 * value * 10^decimals = m * 10^decimals * 2^e is an integer shifted right,
 * computed in 128 bits; values outside [0, 10^12) and -0 go to sprintf. */
size_t kvio_format_fixed(char *out, double value, int decimals)
{
    static const uint64_t powers[] = {1, 10, 100, 1000, 10000, 100000, 1000000};
    if (!(value >= 0 && value < 1e12) || signbit(value))
        return (size_t)sprintf(out, "%.*f", decimals, value);
    /* value = mantissa * 2^-shift, from the IEEE fields (a zero or
     * subnormal value is far below half a unit of the last digit). */
    uint64_t bits;
    memcpy(&bits, &value, sizeof(bits));
    int biased = (int)(bits >> 52); /* the sign bit is clear */
    uint64_t mantissa = bits & ((UINT64_C(1) << 52) - 1);
    int shift = 1074;
    if (biased != 0) {
        mantissa |= UINT64_C(1) << 52;
        shift = 1075 - biased;
    }
    unsigned __int128 scaled = (unsigned __int128)mantissa * powers[decimals];
    uint64_t units;
    if (shift <= 0) {
        units = (uint64_t)(scaled << -shift);
    } else if (shift >= 127) {
        units = 0; /* below half a unit of the last digit */
    } else {
        units = (uint64_t)(scaled >> shift);
        unsigned __int128 remainder = scaled & (((unsigned __int128)1 << shift) - 1);
        unsigned __int128 half = (unsigned __int128)1 << (shift - 1);
        if (remainder > half || (remainder == half && (units & 1)))
            units++;
    }
    /* The split at the point by a constant for the common precisions (a
     * multiplication, where a divisor read from the table is a division). */
    uint64_t whole, fraction;
    switch (decimals) {
    case 3: whole = units / 1000, fraction = units % 1000; break;
    case 6: whole = units / 1000000, fraction = units % 1000000; break;
    default: whole = units / powers[decimals], fraction = units % powers[decimals]; break;
    }
    size_t length = kvio_format_unsigned(out, whole);
    if (decimals > 0) {
        out[length++] = '.';
        put_digits(out + length + decimals, fraction, decimals);
        length += (size_t)decimals;
    }
    return length;
}

size_t kvio_utf8_valid_length(const char *text, size_t length)
{
    const unsigned char *bytes = (const unsigned char *)text;
    size_t at = 0;
    while (at < length) {
        unsigned char lead = bytes[at];
        size_t size = lead < 0x80 ? 1 : lead >= 0xc2 && lead <= 0xdf ? 2
                      : lead >= 0xe0 && lead <= 0xef ? 3 : lead >= 0xf0 && lead <= 0xf4 ? 4 : 0;
        if (size == 0 || at + size > length)
            return at;
        /* The second byte's range rules out overlong forms, surrogates and
         * code points past U+10FFFF (RFC 3629's table). */
        unsigned char low = lead == 0xe0 ? 0xa0 : lead == 0xf0 ? 0x90 : 0x80;
        unsigned char high = lead == 0xed ? 0x9f : lead == 0xf4 ? 0x8f : 0xbf;
        if (size > 1 && (bytes[at + 1] < low || bytes[at + 1] > high))
            return at;
        for (size_t i = 2; i < size; i++)
            if ((bytes[at + i] & 0xc0) != 0x80)
                return at;
        at += size;
    }
    return at;
}

const char *kvio_format_one_line(const char *text, char *out, size_t size)
{
    size_t at = 0;
    while (*text != '\0') {
        unsigned char lead = (unsigned char)*text;
        char escaped[8] = "";
        if (lead == '\n' || lead == '\t' || lead == '\r')
            snprintf(escaped, sizeof(escaped), "\\%c", lead == '\n' ? 'n' : lead == '\t' ? 't' : 'r');
        else if (lead < 0x20 || lead == '`')
            snprintf(escaped, sizeof(escaped), "\\x%02x", lead);
        size_t length = escaped[0] ? strlen(escaped)
                        : lead < 0x80 ? 1 : lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : 2;
        if (at + length + 1 > size)
            break; /* a whole character, or none */
        if (escaped[0]) {
            memcpy(out + at, escaped, length);
            text++;
        } else {
            for (size_t i = 0; i < length && *text != '\0'; i++)
                out[at + i] = *text++;
        }
        at += length;
    }
    if (size > 0)
        out[at] = '\0';
    return out;
}
