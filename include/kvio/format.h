/* Numbers as kvio writes and reads them: sizes ("4GiB", "512MiB", "4GB",
 * "16384") and durations ("250ms", "2s", "1.5h") with their units, UTC
 * times, and decimal digits written straight into a buffer (CSV rows). */
#ifndef KVIO_FORMAT_H
#define KVIO_FORMAT_H

#include "kvio/status.h"

#include <stddef.h>
#include <stdint.h>

/* Parses "4GiB", "512MiB", "4GB", "16384" (bytes). */
kvio_status_t kvio_parse_size(const char *text, uint64_t *bytes_p, char *error_p,
                              size_t error_len);

/* Parses "250ms", "2s", "100us", "1.5h" into ns; a unit is required. */
kvio_status_t kvio_parse_duration(const char *text, int64_t *ns_p, char *error_p,
                                  size_t error_len);

/* Formats bytes with the largest binary unit that divides them ("4GiB"). */
void kvio_format_size(uint64_t bytes, char *text_p, size_t text_len);

/* Formats ns with the largest unit that divides them ("250ms"). */
void kvio_format_duration(int64_t ns, char *text_p, size_t text_len);

/* "2026-12-02T18:54:12.345Z" of a wall-clock time in ns since the epoch. */
void kvio_format_utc(unsigned long long wall_ns, char *text_p, size_t text_len);

/* text on one line for quoting between backticks, into out (size bytes,
 * NUL-terminated; returns out): newline, tab and carriage return as \n,
 * \t and \r, other control characters and the backtick as \xNN, cut to
 * whole UTF-8 characters where out is full. */
const char *kvio_format_one_line(const char *text, char *out, size_t size);

/* How many of text's first length bytes are whole, valid UTF-8 characters
 * (no overlong forms, surrogates or code points past U+10FFFF): length
 * when all are; a text cut mid-character keeps this many. */
size_t kvio_utf8_valid_length(const char *text, size_t length);

/* Writes value's decimal digits at out (at most 20, no NUL); returns how
 * many. */
size_t kvio_format_unsigned(char *out, uint64_t value);

/* Writes value as printf's "%.<decimals>f" does (decimals at most 6), the
 * same bytes, at out (no NUL; at most 320 bytes); returns how many. */
size_t kvio_format_fixed(char *out, double value, int decimals);

#endif
