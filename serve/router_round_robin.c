/* round_robin: request i goes to rank i mod the number of ranks. */
#include "serve/serve_int.h"

static uint32_t next_in_turn(const kvio_router_call_t *call)
{
    uint64_t *next = call->state;
    return (uint32_t)((*next)++ % call->count);
}

const kvio_router_ops_t kvio_router_round_robin = {
    .plugin = {.name = "round_robin", .help = "each rank in turn",
               .options = kvio_no_options},
    .state_size = sizeof(uint64_t),
    .choose = next_in_turn,
};
