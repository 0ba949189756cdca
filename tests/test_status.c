/* Tests for status codes and the block hash. */
#include "kvio/status.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

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
