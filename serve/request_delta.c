/* What the updates did to one request: the same request of the run with
 * updates minus its twin of the paired control without (latencies, tokens
 * cached and recomputed). Plain arithmetic on two finished requests, below
 * the rows of requests.csv and the control's comparison that show it. */
#include "kvio/serve.h"

static double tpot_ns(const kvio_engine_finished_t *request)
{
    if (request->output_tokens < 2)
        return 0;
    return (double)(request->finish_ns - request->first_token_ns) /
           (double)(request->output_tokens - 1);
}

kvio_request_delta_t kvio_request_delta(const kvio_engine_finished_t *with,
                                        const kvio_engine_finished_t *without)
{
    return (kvio_request_delta_t){
        .ttft_ns = (with->first_token_ns - with->arrival_ns) -
                   (without->first_token_ns - without->arrival_ns),
        .e2el_ns = (with->finish_ns - with->arrival_ns) - (without->finish_ns - without->arrival_ns),
        .max_itl_ns = with->max_itl_ns - without->max_itl_ns,
        .tpot_ns = tpot_ns(with) - tpot_ns(without),
        .cached_tokens = (int64_t)with->cached_tokens - (int64_t)without->cached_tokens,
        .recomputed_tokens =
            (int64_t)with->recomputed_tokens - (int64_t)without->recomputed_tokens};
}

bool kvio_request_delta_any(const kvio_request_delta_t *delta)
{
    return delta->ttft_ns != 0 || delta->e2el_ns != 0 || delta->max_itl_ns != 0 ||
           delta->tpot_ns != 0 || delta->cached_tokens != 0 || delta->recomputed_tokens != 0;
}
