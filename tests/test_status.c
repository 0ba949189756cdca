/* Tests for status codes and the block hash. */
#include "kvio/status.h"
#include "kvio/log.h"
#include "kvio/progress.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

Test(status, every_code_has_its_own_text, .timeout = 10)
{
#define STATUS_CODE(name, value, text) name,
    static const kvio_status_t codes[] = {KVIO_STATUS_LIST(STATUS_CODE)};
#undef STATUS_CODE
    size_t count = sizeof(codes) / sizeof(codes[0]);
    for (size_t i = 0; i < count; i++) {
        cr_expect_str_neq(kvio_strerror(codes[i]), "unknown status", "code %d", codes[i]);
        for (size_t j = 0; j < i; j++)
            cr_expect_str_neq(kvio_strerror(codes[i]), kvio_strerror(codes[j]),
                              "codes %d and %d share a text", codes[i], codes[j]);
    }
    cr_assert_str_eq(kvio_strerror(KVIO_OK), "success");
    cr_assert_str_eq(kvio_strerror(KVIO_ERR_NO_SPACE), "no space");
    cr_assert_str_eq(kvio_strerror((kvio_status_t)-999), "unknown status");
    cr_assert_eq(kvio_status_from_errno(ENOSPC), KVIO_ERR_NO_SPACE);
    cr_assert_eq(kvio_status_from_errno(ENOENT), KVIO_ERR_NOT_FOUND);
}

/* Not on a terminal (a log file), progress is a whole line with the total,
 * the percentage and the time left; -q (log level error) silences it. */
Test(status, progress_off_a_terminal_writes_lines_with_total_percent_and_time_left,
     .timeout = 10)
{
    char path[] = "/tmp/kvio-progress-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    fflush(stderr);
    int saved = dup(STDERR_FILENO);
    dup2(fd, STDERR_FILENO);
    kvio_progress_t *progress = NULL;
    cr_assert_eq(kvio_progress_create("simulate: requests", 200, &progress), KVIO_OK);
    kvio_progress_set_interval(progress, 0);
    kvio_progress_update(progress, 50);
    kvio_progress_destroy(progress);
    kvio_log_level_t level = kvio_log_get_level();
    kvio_log_set_level(KVIO_LOG_ERROR);
    cr_assert_eq(kvio_progress_create("quiet", 10, &progress), KVIO_OK);
    kvio_progress_set_interval(progress, 0);
    kvio_progress_update(progress, 5);
    kvio_progress_destroy(progress);
    kvio_log_set_level(level);
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    char text[512] = "";
    ssize_t length = pread(fd, text, sizeof(text) - 1, 0);
    close(fd);
    unlink(path);
    cr_assert_gt(length, 0);
    cr_assert_not_null(strstr(text, "kvio: progress: simulate: requests 50/200 (25%) "), "%s",
                       text);
    cr_assert_not_null(strstr(text, "left\n"), "%s", text);
    cr_assert_null(strstr(text, "quiet"), "%s", text);
    cr_assert_null(strchr(text, '\r'), "%s", text);
}
