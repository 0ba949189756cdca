/* The rank-to-rank message writer and reader (kvio/wire.h), and the
 * messages built on them: every value comes back as written; a message cut
 * short anywhere, or claiming more than it holds, is refused, never read
 * past its end. */
#include "kvio/wire.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "serve/serve_int.h"

Test(wire, values_come_back_as_written, .timeout = 10)
{
    kvio_wire_writer_t out = {0};
    kvio_wire_put_u64(&out, 0);          /* patched below */
    kvio_wire_put_i64(&out, -42);
    kvio_wire_put_f64(&out, 2.5);
    kvio_wire_put_blob(&out, "hello", 5);
    kvio_wire_put_blob(&out, NULL, 0);
    uint32_t array[3] = {7, 8, 9};
    kvio_wire_put(&out, array, sizeof(array));
    uint64_t magic = 0x1234;
    kvio_wire_patch(&out, 0, &magic, sizeof(magic));
    void *blob = NULL;
    size_t length = 0;
    cr_assert_eq(kvio_wire_finish(&out, &blob, &length), KVIO_OK);
    cr_assert_eq(length, 8 + 8 + 8 + 8 + 5 + 8 + 12);
    cr_assert_null(out.data, "finish hands the buffer over");

    kvio_wire_reader_t in = kvio_wire_reader(blob, length);
    uint64_t u = 0, size = 0;
    int64_t i = 0;
    double f = 0;
    cr_assert(kvio_wire_get_u64(&in, &u));
    cr_assert_eq(u, 0x1234);
    cr_assert(kvio_wire_get_i64(&in, &i));
    cr_assert_eq(i, -42);
    cr_assert(kvio_wire_get_f64(&in, &f));
    cr_assert_eq(f, 2.5);
    const char *text = kvio_wire_take_blob(&in, &size);
    cr_assert(text != NULL && size == 5 && memcmp(text, "hello", 5) == 0);
    cr_assert_not_null(kvio_wire_take_blob(&in, &size));
    cr_assert_eq(size, 0);
    const uint32_t *back = kvio_wire_take_array(&in, 3, sizeof(uint32_t));
    cr_assert_not_null(back);
    cr_assert_eq(memcmp(back, array, sizeof(array)), 0);
    cr_assert_eq(kvio_wire_left(&in), 0);
    cr_assert_eq(kvio_wire_status(&in), KVIO_OK);
    free(blob);
}

Test(wire, a_read_past_the_end_fails_and_stays_failed, .timeout = 10)
{
    unsigned char bytes[12] = {0};
    kvio_wire_reader_t in = kvio_wire_reader(bytes, sizeof(bytes));
    uint64_t value;
    cr_assert(kvio_wire_get_u64(&in, &value));
    cr_assert_not(kvio_wire_get_u64(&in, &value), "4 bytes left, 8 asked");
    cr_assert_eq(kvio_wire_status(&in), KVIO_ERR_PARSE);
    uint32_t small;
    cr_assert_not(kvio_wire_get(&in, &small, sizeof(small)), "failed stays failed");
    cr_assert_eq(kvio_wire_left(&in), 0);

    /* A count whose bytes overflow size_t, and a blob longer than what is left. */
    in = kvio_wire_reader(bytes, sizeof(bytes));
    cr_assert_null(kvio_wire_take_array(&in, UINT64_MAX / 2, 16));
    cr_assert_eq(kvio_wire_status(&in), KVIO_ERR_PARSE);
    uint64_t huge = 1000, size = 0;
    memcpy(bytes, &huge, sizeof(huge));
    in = kvio_wire_reader(bytes, sizeof(bytes));
    cr_assert_null(kvio_wire_take_blob(&in, &size));
    cr_assert_eq(kvio_wire_status(&in), KVIO_ERR_PARSE);
    in = kvio_wire_reader(NULL, 100);
    cr_assert_not(kvio_wire_get_u64(&in, &value), "no data, however long it claims to be");
}

static kvio_status_t count_request(void *context, const kvio_engine_request_t *request)
{
    size_t *seen = context;
    cr_assert_eq(request->num_hashes, 3);
    cr_assert_eq(request->hashes[2].low, 5);
    (*seen)++;
    return KVIO_OK;
}

/* Every message a coupled run's ranks exchange, cut at every length short of
 * whole: refused (and the whole one read). */
Test(wire, messages_cut_short_are_refused, .timeout = 30)
{
    /* The client's batch of requests to a serve rank. */
    kvio_serve_batch_t batch = {0};
    kvio_hash_t hashes[3] = {{1, 2}, {3, 4}, {5, 6}};
    for (uint64_t id = 0; id < 3; id++) {
        kvio_engine_request_t request = {.id = id, .prompt_tokens = 48, .output_tokens = 4,
                                         .hashes = hashes, .num_hashes = 3, .measured = true};
        cr_assert_eq(kvio_serve_batch_add(&batch, &request), KVIO_OK);
    }
    cr_assert_eq(kvio_serve_batch_seal(&batch, 77, true), KVIO_OK);
    kvio_hash_buffer_t buffer = {0};
    for (size_t cut = 0; cut <= batch.out.length; cut++) {
        int64_t origin = 0;
        bool last = false;
        size_t seen = 0;
        kvio_status_t status = kvio_serve_batch_read(batch.out.data, cut, count_request, &seen,
                                                     &buffer, &origin, &last);
        if (cut < batch.out.length) {
            cr_expect_eq(status, KVIO_ERR_PARSE, "a batch cut at %zu of %zu", cut,
                         batch.out.length);
        } else {
            cr_assert_eq(status, KVIO_OK);
            cr_assert_eq(seen, 3);
            cr_assert_eq(origin, 77);
            cr_assert(last);
        }
    }
    kvio_serve_batch_fini(&batch);
    free(buffer.hashes);

    /* A serve rank's published cache state to the client. */
    kvio_serve_publisher_t publisher = {0};
    kvio_serve_publisher_note(&publisher, hashes[0], true);
    kvio_serve_publisher_note(&publisher, hashes[1], true);
    kvio_serve_publisher_note(&publisher, hashes[0], false);
    void *state = NULL;
    size_t state_length = 0;
    cr_assert_eq(kvio_serve_publisher_pack(&publisher, NULL, true, &state, &state_length),
                 KVIO_OK);
    kvio_serve_mirror_t *mirror = NULL;
    cr_assert_eq(kvio_serve_mirror_create(1, 16, &mirror), KVIO_OK);
    for (size_t cut = 0; cut < state_length; cut++) {
        bool final = false;
        cr_expect_eq(kvio_serve_mirror_apply(mirror, 0, state, cut, &final), KVIO_ERR_PARSE,
                     "a state message cut at %zu of %zu", cut, state_length);
    }
    bool final = false;
    cr_assert_eq(kvio_serve_mirror_apply(mirror, 0, state, state_length, &final), KVIO_OK);
    cr_assert(final);
    kvio_serve_mirror_destroy(mirror);
    kvio_serve_publisher_fini(&publisher);
    free(state);
}
