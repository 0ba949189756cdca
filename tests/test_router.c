/* Routers on small exact cases, table-driven: a fake view of four ranks
 * (load, cached prefix, running decode blocks) and the rank each router
 * picks, call after call. */
#include <criterion/criterion.h>
#include <string.h>

#include "kvio/serve.h"
#include "tests/helpers.h"

#define RANKS 4
#define CALLS 5

typedef struct fake_ranks {
    uint32_t load[RANKS];
    size_t cached_tokens[RANKS];
    uint64_t active[RANKS];
    uint32_t free[RANKS];
} fake_ranks_t;

static uint32_t fake_load(void *context, uint32_t rank)
{
    return ((fake_ranks_t *)context)->load[rank];
}

static size_t fake_cached_prefix(void *context, uint32_t rank, const kvio_hash_t *hashes,
                                 size_t num_hashes, uint32_t prompt_tokens)
{
    (void)hashes;
    (void)num_hashes;
    (void)prompt_tokens;
    return ((fake_ranks_t *)context)->cached_tokens[rank];
}

static uint64_t fake_active(void *context, uint32_t rank)
{
    return ((fake_ranks_t *)context)->active[rank];
}

static uint32_t fake_free(void *context, uint32_t rank)
{
    return ((fake_ranks_t *)context)->free[rank];
}

typedef struct router_case {
    const char *router; /* the serve.router section */
    const char *what;
    uint32_t count;     /* ranks to choose among */
    fake_ranks_t ranks;
    uint32_t prompt_tokens;
    int expected[CALLS]; /* the rank of each successive call; -1: no more calls */
} router_case_t;

static const router_case_t cases[] = {
    {"{policy: round_robin}", "each rank in turn", 3, {.load = {0}}, 16, {0, 1, 2, 0, 1}},
    {"{policy: least_loaded}", "the fewest requests; ties to the lower rank", 4,
     {.load = {3, 1, 1, 2}}, 16, {1, 1, -1}},
    {"{policy: prefix_affinity}", "the longest prefix within load_cap 16", 3,
     {.load = {0, 2, 30}, .cached_tokens = {0, 64, 128}}, 160, {1, -1}},
    {"{policy: prefix_affinity, prefix_affinity: {load_cap: 1}}",
     "over the cap, the least loaded", 3, {.load = {0, 2, 30}, .cached_tokens = {0, 64, 128}},
     160, {0, -1}},
    {"{policy: kv_cost}", "uncached prefill blocks plus decode blocks, lowest", 4,
     {.active = {10, 20, 5, 9}, .cached_tokens = {0, 128, 64, 128}}, 128, {2, -1}},
    {"{policy: free_kv}", "most blocks free after the uncached prompt, then fewest requests", 4,
     {.free = {20, 14, 20, 23}, .cached_tokens = {0, 160, 64, 0}, .load = {3, 2, 1, 9}}, 160,
     {2, -1}},
};

Test(router, every_router_picks_as_documented, .timeout = 10)
{
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        const router_case_t *test = &cases[c];
        kvio_router_config_t config = {0};
        char error[256];
        cr_assert_eq(kvio_config_bind_text(kvio_router_options, test->router, "test", &config,
                                           error, sizeof(error)),
                     KVIO_OK, "%s", error);
        kvio_router_t *router = NULL;
        cr_assert_eq(kvio_router_create(&config, &router), KVIO_OK);
        fake_ranks_t ranks = test->ranks;
        kvio_router_view_t view = {.context = &ranks, .block_size = 16, .load = fake_load,
                                   .cached_prefix = fake_cached_prefix,
                                   .active_decode_blocks = fake_active,
                                   .free_blocks = fake_free};
        kvio_engine_request_t request = {.prompt_tokens = test->prompt_tokens};
        for (int call = 0; call < CALLS && test->expected[call] >= 0; call++)
            cr_expect_eq(kvio_router_choose_view(router, &view, test->count, &request),
                         (uint32_t)test->expected[call], "%s (%s): call %d", test->router,
                         test->what, call);
        kvio_router_destroy(router);
        kvio_config_free(kvio_router_options, &config);
    }
}
