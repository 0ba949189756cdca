/* Tests for status codes and the block hash. */
#include "kvio/status.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

Test(status, every_code_has_its_own_text, .timeout = 10)
{
    cr_assert_str_eq(kvio_strerror(KVIO_OK), "success");
    cr_assert_str_eq(kvio_strerror(KVIO_ERR_NO_SPACE), "no space");
    cr_assert_str_eq(kvio_strerror((kvio_status_t)-999), "unknown status");
    cr_assert_eq(kvio_status_from_errno(ENOSPC), KVIO_ERR_NO_SPACE);
    cr_assert_eq(kvio_status_from_errno(ENOENT), KVIO_ERR_NOT_FOUND);
}
