/* The synthetic stream: an arrival process for new conversations, lengths
 * from distributions, and prefix structure (system prompts and documents with
 * Zipf popularity, multi-turn sessions whose turns share the whole previous
 * context, context mutation). Pending later turns wait in a min-heap, so
 * requests leave in arrival order; nothing holds token arrays. */
#include "workloads/workloads_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TURNS 10000
#define NO_SESSION UINT32_MAX

/* A live conversation: its context so far as segments. */
typedef struct session {
    kvio_segment_t *segments;
    uint32_t num_segments, capacity;
    uint64_t id;
    uint32_t turn;            /* turns emitted */
    uint32_t turns;           /* turns it will have */
    uint32_t prompt_tokens;   /* of the last turn */
    uint32_t output_tokens;   /* of the last turn */
    uint64_t output_content_id;
    uint64_t cache_salt;      /* its tenant's, every turn */
    uint32_t next_free;
} session_t;

/* A closed loop's user waiting for the answer to request id: then it
 * sends its session's next turn (NO_SESSION: a new conversation). */
typedef struct answer {
    uint64_t id;
    uint32_t session;
} answer_t;

/* A later turn waiting for its arrival time (closed loop, NO_SESSION: a
 * user's new conversation). */
typedef struct pending {
    int64_t time_ns;
    uint64_t sequence;  /* ties break in the order turns were scheduled */
    uint32_t session;
} pending_t;

typedef struct synthetic {
    /* configuration (copies) */
    uint64_t max_requests;
    int64_t end_ns;                /* 0: no time bound */
    int top_process;               /* as configured */
    int process;                   /* of the current phase */
    double mean_gap_ns;            /* between new conversations */
    double gap_cv;
    kvio_stream_phase_t *phases;
    size_t num_phases;
    double turns_per_conversation;
    kvio_dist_t input_tokens, output_tokens, priority;
    kvio_dist_t turns, think_time, user_tokens;
    kvio_dist_t mutation_position, mutation_tokens;
    double mutation_probability;
    int mutation_unit;
    uint64_t max_context;
    int64_t max_tokens;            /* 0: derived per request */
    int64_t output_max;            /* output_tokens' max, or 0 */
    uint32_t min_unique_tokens;
    /* catalog of shared content */
    uint32_t *system_prompt_tokens;
    uint32_t num_system_prompts;
    kvio_dist_t system_prompt_popularity;
    bool system_prompts_zipf;
    uint32_t *document_tokens;
    uint32_t num_documents;
    uint32_t documents_per_request;
    kvio_dist_t document_popularity;
    bool documents_zipf;
    /* random streams, one per purpose */
    kvio_rng_t arrival_rng, length_rng, prefix_rng, session_rng, mutation_rng, priority_rng,
        salt_rng;
    uint64_t cache_salts;          /* tenants; 0: no salt */
    /* arrival state */
    double clock_ns;
    size_t phase;
    double phase_end_ns;
    uint64_t batch_left;
    int64_t fresh_time_ns;         /* next new conversation; INT64_MAX: none */
    kvio_dist_t gap;               /* gamma gaps of the current process or phase */
    /* sessions and pending turns */
    session_t *sessions;
    uint32_t num_sessions, free_session;
    pending_t *heap;
    size_t heap_size, heap_capacity;
    uint64_t sequence;
    uint64_t next_session_id;
    uint64_t next_unique;          /* content ids of user text, outputs, rewrites */
    uint64_t emitted;
    /* closed loop: each user is in the heap or waits for one answer */
    uint32_t users;
    answer_t *answers;
    uint32_t num_answers;
    /* the request being handed out */
    kvio_request_t request;
    kvio_segment_t *single;        /* segments of a one-turn request */
    kvio_segment_t *scratch;       /* rewrite buffer */
    uint32_t scratch_capacity;
} synthetic_t;

static uint32_t sample_tokens(const kvio_dist_t *dist, kvio_rng_t *rng, uint32_t minimum)
{
    double value = kvio_dist_sample(dist, rng);
    if (!(value >= minimum))
        return minimum;
    if (value >= KVIO_STREAM_MAX_TOKENS)
        return KVIO_STREAM_MAX_TOKENS;
    return (uint32_t)llround(value);
}

static uint32_t sample_turns(synthetic_t *generator)
{
    double value = kvio_dist_sample(&generator->turns, &generator->session_rng);
    if (!(value >= 1))
        return 1;
    if (value > MAX_TURNS)
        return MAX_TURNS;
    return (uint32_t)llround(value);
}

/* ---------- arrivals ---------- */

static void set_gap_process(synthetic_t *generator, int process, double rate, double cv)
{
    generator->gap.kind = KVIO_DIST_GAMMA;
    generator->gap.mean = rate > 0 ? 1e9 / (rate / generator->turns_per_conversation) : 0;
    generator->gap.cv = cv;
    generator->mean_gap_ns = generator->gap.mean;
    generator->gap_cv = cv;
    generator->process = process;
}

static double sample_gap(synthetic_t *generator, int process)
{
    double mean = generator->mean_gap_ns;
    switch (process) {
    case KVIO_ARRIVAL_POISSON:
        return -mean * log1p(-kvio_rng_uniform(&generator->arrival_rng));
    case KVIO_ARRIVAL_GAMMA:
        return kvio_dist_sample(&generator->gap, &generator->arrival_rng);
    default:
        return mean;
    }
}

/* Moves fresh_time_ns to the next new conversation. */
static void advance_arrival(synthetic_t *generator, int top_process)
{
    if (top_process == KVIO_ARRIVAL_BATCH) {
        if (generator->batch_left == 0) {
            generator->fresh_time_ns = INT64_MAX;
        } else {
            generator->batch_left--;
            generator->fresh_time_ns = 0;
        }
        return;
    }
    if (top_process != KVIO_ARRIVAL_PHASES) {
        generator->clock_ns += sample_gap(generator, generator->process);
        generator->fresh_time_ns = generator->clock_ns < 9e18 ? llround(generator->clock_ns)
                                                              : INT64_MAX;
        return;
    }
    /* Phases: a gap that crosses the phase's end restarts in the next phase
     * at the boundary (exact for poisson, which is memoryless). */
    for (;;) {
        if (generator->phase >= generator->num_phases) {
            generator->fresh_time_ns = INT64_MAX;
            return;
        }
        const kvio_stream_phase_t *phase = &generator->phases[generator->phase];
        double gap = phase->rate > 0 ? sample_gap(generator, phase->process) : INFINITY;
        if (generator->clock_ns + gap < generator->phase_end_ns) {
            generator->clock_ns += gap;
            generator->fresh_time_ns = llround(generator->clock_ns);
            return;
        }
        generator->clock_ns = generator->phase_end_ns;
        generator->phase++;
        if (generator->phase < generator->num_phases) {
            const kvio_stream_phase_t *next = &generator->phases[generator->phase];
            generator->phase_end_ns += (double)next->duration_ns;
            set_gap_process(generator, next->process, next->rate, next->cv);
        }
    }
}

/* ---------- sessions and the heap ---------- */

static kvio_status_t ensure_segments(kvio_segment_t **segments_p, uint32_t *capacity_p,
                                     uint32_t needed)
{
    if (needed <= *capacity_p)
        return KVIO_OK;
    uint32_t capacity = *capacity_p ? *capacity_p : 8;
    while (capacity < needed)
        capacity *= 2;
    kvio_segment_t *bigger = realloc(*segments_p, capacity * sizeof(kvio_segment_t));
    if (bigger == NULL)
        return KVIO_ERR_NOMEM;
    *segments_p = bigger;
    *capacity_p = capacity;
    return KVIO_OK;
}

static kvio_status_t session_alloc(synthetic_t *generator, uint32_t *index_p)
{
    if (generator->free_session == NO_SESSION) {
        uint32_t count = generator->num_sessions ? generator->num_sessions * 2 : 64;
        session_t *bigger = realloc(generator->sessions, count * sizeof(session_t));
        if (bigger == NULL)
            return KVIO_ERR_NOMEM;
        memset(bigger + generator->num_sessions, 0,
               (count - generator->num_sessions) * sizeof(session_t));
        for (uint32_t i = generator->num_sessions; i < count; i++)
            bigger[i].next_free = i + 1 < count ? i + 1 : NO_SESSION;
        generator->free_session = generator->num_sessions;
        generator->sessions = bigger;
        generator->num_sessions = count;
    }
    uint32_t index = generator->free_session;
    generator->free_session = generator->sessions[index].next_free;
    generator->sessions[index].num_segments = 0;
    *index_p = index;
    return KVIO_OK;
}

/* Returns the slot; its segments stay allocated (and valid until the next
 * request is made) for the next conversation to reuse. */
static void session_release(synthetic_t *generator, uint32_t index)
{
    generator->sessions[index].next_free = generator->free_session;
    generator->free_session = index;
}

static bool pending_before(const pending_t *a, const pending_t *b)
{
    return a->time_ns < b->time_ns || (a->time_ns == b->time_ns && a->sequence < b->sequence);
}

static kvio_status_t heap_push(synthetic_t *generator, int64_t time_ns, uint32_t session)
{
    if (generator->heap_size == generator->heap_capacity) {
        size_t capacity = generator->heap_capacity ? generator->heap_capacity * 2 : 64;
        pending_t *bigger = realloc(generator->heap, capacity * sizeof(pending_t));
        if (bigger == NULL)
            return KVIO_ERR_NOMEM;
        generator->heap = bigger;
        generator->heap_capacity = capacity;
    }
    pending_t item = {.time_ns = time_ns, .sequence = generator->sequence++, .session = session};
    size_t child = generator->heap_size++;
    while (child > 0) {
        size_t parent = (child - 1) / 2;
        if (!pending_before(&item, &generator->heap[parent]))
            break;
        generator->heap[child] = generator->heap[parent];
        child = parent;
    }
    generator->heap[child] = item;
    return KVIO_OK;
}

static pending_t heap_pop(synthetic_t *generator)
{
    pending_t top = generator->heap[0];
    pending_t last = generator->heap[--generator->heap_size];
    size_t parent = 0;
    for (;;) {
        size_t child = 2 * parent + 1;
        if (child >= generator->heap_size)
            break;
        if (child + 1 < generator->heap_size &&
            pending_before(&generator->heap[child + 1], &generator->heap[child]))
            child++;
        if (!pending_before(&generator->heap[child], &last))
            break;
        generator->heap[parent] = generator->heap[child];
        parent = child;
    }
    if (generator->heap_size > 0)
        generator->heap[parent] = last;
    return top;
}

/* ---------- requests ---------- */

static uint32_t pick(const kvio_dist_t *popularity, bool zipf, uint32_t count, kvio_rng_t *rng)
{
    if (zipf)
        return (uint32_t)kvio_dist_sample(popularity, rng) - 1;
    return (uint32_t)kvio_rng_below(rng, count);
}

/* Fills the lengths, priority and output of the request. */
static void finish_request(synthetic_t *generator, int64_t time_ns, uint32_t input_tokens)
{
    kvio_request_t *request = &generator->request;
    uint32_t output = sample_tokens(&generator->output_tokens, &generator->length_rng, 1);
    uint32_t limit;
    if (generator->max_tokens > 0)
        limit = (uint32_t)generator->max_tokens;
    else if (generator->output_max > 0)
        limit = (uint32_t)generator->output_max;
    else
        limit = output;
    if (output > limit)
        output = limit;
    request->id = generator->emitted++;
    request->arrival_ns = time_ns;
    request->input_tokens = input_tokens;
    request->output_tokens = output;
    request->max_tokens = limit;
    double priority = kvio_dist_sample(&generator->priority, &generator->priority_rng);
    request->priority = !(priority > -2e9) ? -2000000000
                        : priority < 2e9   ? (int32_t)lround(priority)
                                           : 2000000000;
    request->output_content_id = KVIO_CONTENT_UNIQUE | generator->next_unique++;
    request->trace_block_tokens = 0;
    request->num_trace_hash_ids = 0;
    request->trace_hash_ids = NULL;
}

/* A new conversation's tenant, as its cache salt ("tenant-K", K from 1),
 * or none. */
static uint64_t draw_cache_salt(synthetic_t *generator)
{
    if (generator->cache_salts == 0)
        return 0;
    uint64_t tenant = 1 + kvio_rng_below(&generator->salt_rng, generator->cache_salts);
    char name[32];
    int length = snprintf(name, sizeof(name), "tenant-%llu", (unsigned long long)tenant);
    return kvio_cache_salt(name, (size_t)length);
}

/* What follows the request just made. Open loop: its session's next turn,
 * think_time after it arrived. Closed loop: its user waits for the answer,
 * then sends the session's next turn (NO_SESSION: the conversation is over
 * and a new one starts). */
static kvio_status_t follow(synthetic_t *generator, int64_t time_ns, uint32_t index)
{
    if (generator->users > 0) {
        generator->answers[generator->num_answers++] =
            (answer_t){.id = generator->request.id, .session = index};
        return KVIO_OK;
    }
    if (index == NO_SESSION)
        return KVIO_OK;
    double think = kvio_dist_sample(&generator->think_time, &generator->session_rng);
    return heap_push(generator, time_ns + (think > 0 ? llround(think) : 0), index);
}

/* The first turn of a new conversation (or a one-turn request). */
static kvio_status_t emit_first(synthetic_t *generator, int64_t time_ns)
{
    uint32_t turns = sample_turns(generator);
    uint32_t index = NO_SESSION;
    kvio_segment_t *segments = generator->single;
    if (turns > 1) {
        kvio_status_t status = session_alloc(generator, &index);
        if (status == KVIO_OK) {
            session_t *session = &generator->sessions[index];
            status = ensure_segments(&session->segments, &session->capacity,
                                     2 + generator->documents_per_request + 2);
        }
        if (status != KVIO_OK)
            return status;
        segments = generator->sessions[index].segments;
    }
    uint32_t count = 0;
    uint64_t shared = 0;
    if (generator->num_system_prompts > 0) {
        uint32_t prompt = pick(&generator->system_prompt_popularity,
                               generator->system_prompts_zipf, generator->num_system_prompts,
                               &generator->prefix_rng);
        segments[count++] = (kvio_segment_t){KVIO_CONTENT_SYSTEM_PROMPT | prompt, 0,
                                             generator->system_prompt_tokens[prompt]};
        shared += generator->system_prompt_tokens[prompt];
    }
    uint32_t first_document = count;
    for (uint32_t d = 0; d < generator->documents_per_request; d++) {
        uint32_t document = 0;
        /* Distinct documents: redraw a repeat a few times, then accept it. */
        for (int attempt = 0; attempt < 16; attempt++) {
            document = pick(&generator->document_popularity, generator->documents_zipf,
                            generator->num_documents, &generator->prefix_rng);
            bool repeat = false;
            for (uint32_t j = first_document; j < count; j++)
                repeat |= segments[j].content_id == (KVIO_CONTENT_DOCUMENT | document);
            if (!repeat)
                break;
        }
        segments[count++] = (kvio_segment_t){KVIO_CONTENT_DOCUMENT | document, 0,
                                             generator->document_tokens[document]};
        shared += generator->document_tokens[document];
    }
    uint32_t input = sample_tokens(&generator->input_tokens, &generator->length_rng, 1);
    uint32_t suffix = input > shared + generator->min_unique_tokens
                          ? (uint32_t)(input - shared)
                          : generator->min_unique_tokens;
    segments[count++] = (kvio_segment_t){KVIO_CONTENT_UNIQUE | generator->next_unique++, 0,
                                         suffix};
    finish_request(generator, time_ns, (uint32_t)(shared + suffix));
    kvio_request_t *request = &generator->request;
    request->segments = segments;
    request->num_segments = count;
    request->session_id = 0;
    request->turn = 0;
    request->cache_salt = draw_cache_salt(generator);
    if (turns > 1) {
        session_t *session = &generator->sessions[index];
        session->num_segments = count;
        session->id = ++generator->next_session_id;
        session->turn = 1;
        session->turns = turns;
        session->prompt_tokens = request->input_tokens;
        session->output_tokens = request->output_tokens;
        session->output_content_id = request->output_content_id;
        session->cache_salt = request->cache_salt;
        request->session_id = session->id;
    }
    return follow(generator, time_ns, turns > 1 ? index : NO_SESSION);
}

/* Replaces [position, position + length) of the session's context with new
 * content (the harness rewrote it); segments around it are split. */
static kvio_status_t rewrite_context(synthetic_t *generator, session_t *session,
                                     uint64_t position, uint32_t length)
{
    kvio_status_t status = ensure_segments(&generator->scratch, &generator->scratch_capacity,
                                           session->num_segments + 2);
    if (status != KVIO_OK)
        return status;
    uint64_t end = position + length, start = 0;
    uint32_t count = 0;
    bool inserted = false;
    for (uint32_t i = 0; i < session->num_segments; i++) {
        kvio_segment_t segment = session->segments[i];
        uint64_t segment_end = start + segment.tokens;
        if (segment_end <= position || start >= end) {
            generator->scratch[count++] = segment;
        } else {
            if (start < position)
                generator->scratch[count++] = (kvio_segment_t){
                    segment.content_id, segment.offset, (uint32_t)(position - start)};
            if (!inserted) {
                generator->scratch[count++] = (kvio_segment_t){
                    KVIO_CONTENT_UNIQUE | generator->next_unique++, 0, length};
                inserted = true;
            }
            if (segment_end > end)
                generator->scratch[count++] = (kvio_segment_t){
                    segment.content_id, segment.offset + (uint32_t)(end - start),
                    (uint32_t)(segment_end - end)};
        }
        start = segment_end;
    }
    status = ensure_segments(&session->segments, &session->capacity, count + 2);
    if (status != KVIO_OK)
        return status;
    memcpy(session->segments, generator->scratch, count * sizeof(kvio_segment_t));
    session->num_segments = count;
    return KVIO_OK;
}

/* A later turn: previous prompt + previous output (+ a rewrite) + new
 * tokens. Returns KVIO_INPROGRESS when the conversation ended instead. */
static kvio_status_t emit_turn(synthetic_t *generator, int64_t time_ns, uint32_t index)
{
    session_t *session = &generator->sessions[index];
    kvio_status_t status = ensure_segments(&session->segments, &session->capacity,
                                           session->num_segments + 4);
    if (status != KVIO_OK)
        return status;
    if (session->output_tokens > 0)
        session->segments[session->num_segments++] =
            (kvio_segment_t){session->output_content_id, 0, session->output_tokens};
    uint64_t context = (uint64_t)session->prompt_tokens + session->output_tokens;
    if (generator->mutation_probability > 0 &&
        kvio_rng_uniform(&generator->mutation_rng) < generator->mutation_probability) {
        double where = kvio_dist_sample(&generator->mutation_position, &generator->mutation_rng);
        if (generator->mutation_unit == KVIO_POSITION_FRACTION)
            where *= (double)context;
        uint64_t position = !(where > 0)              ? 0
                            : where < (double)context ? (uint64_t)where
                                                      : context - 1;
        uint32_t length = sample_tokens(&generator->mutation_tokens, &generator->mutation_rng, 1);
        if (length > context - position)
            length = (uint32_t)(context - position);
        status = rewrite_context(generator, session, position, length);
        if (status != KVIO_OK)
            return status;
    }
    uint32_t user = sample_tokens(&generator->user_tokens, &generator->length_rng, 1);
    if (context + user > generator->max_context) {
        session_release(generator, index);
        return KVIO_INPROGRESS;
    }
    session->segments[session->num_segments++] =
        (kvio_segment_t){KVIO_CONTENT_UNIQUE | generator->next_unique++, 0, user};
    finish_request(generator, time_ns, (uint32_t)(context + user));
    kvio_request_t *request = &generator->request;
    request->segments = session->segments;
    request->num_segments = session->num_segments;
    request->session_id = session->id;
    request->cache_salt = session->cache_salt;
    request->turn = session->turn++;
    session->prompt_tokens = request->input_tokens;
    session->output_tokens = request->output_tokens;
    session->output_content_id = request->output_content_id;
    if (session->turn >= session->turns) {
        session_release(generator, index);
        index = NO_SESSION;
    }
    return follow(generator, time_ns, index);
}

static kvio_status_t synthetic_next(void *source, const kvio_request_t **request_p)
{
    synthetic_t *generator = source;
    for (;;) {
        if (generator->max_requests > 0 && generator->emitted >= generator->max_requests) {
            *request_p = NULL;
            return KVIO_OK;
        }
        bool turn = generator->heap_size > 0 &&
                    generator->heap[0].time_ns <= generator->fresh_time_ns;
        int64_t time_ns = turn ? generator->heap[0].time_ns : generator->fresh_time_ns;
        if (time_ns == INT64_MAX || (generator->end_ns > 0 && time_ns >= generator->end_ns)) {
            *request_p = NULL;
            return KVIO_OK;
        }
        kvio_status_t status;
        if (turn) {
            pending_t pending = heap_pop(generator);
            if (pending.session == NO_SESSION) {
                status = emit_first(generator, time_ns);
            } else {
                status = emit_turn(generator, time_ns, pending.session);
                if (status == KVIO_INPROGRESS) {
                    /* The conversation ended: a closed loop's user starts another now. */
                    status = generator->users > 0 ? heap_push(generator, time_ns, NO_SESSION)
                                                  : KVIO_OK;
                    if (status != KVIO_OK)
                        return status;
                    continue;
                }
            }
        } else {
            status = emit_first(generator, time_ns);
            advance_arrival(generator, generator->top_process);
        }
        if (status != KVIO_OK)
            return status;
        *request_p = &generator->request;
        return KVIO_OK;
    }
}

static int64_t synthetic_due_ns(void *source)
{
    const synthetic_t *generator = source;
    if (generator->max_requests > 0 && generator->emitted >= generator->max_requests)
        return -1;
    if (generator->heap_size > 0 &&
        !(generator->end_ns > 0 && generator->heap[0].time_ns >= generator->end_ns))
        return generator->heap[0].time_ns;
    return generator->num_answers > 0 ? INT64_MAX : -1;
}

static void synthetic_finished(void *source, uint64_t id, int64_t finish_ns)
{
    synthetic_t *generator = source;
    for (uint32_t i = 0; i < generator->num_answers; i++) {
        if (generator->answers[i].id != id)
            continue;
        uint32_t session = generator->answers[i].session;
        generator->answers[i] = generator->answers[--generator->num_answers];
        double think = kvio_dist_sample(&generator->think_time, &generator->session_rng);
        /* Cannot fail: the heap has room for every user. */
        (void)heap_push(generator, finish_ns + (think > 0 ? llround(think) : 0), session);
        return;
    }
}

static void synthetic_destroy(void *source)
{
    synthetic_t *generator = source;
    if (generator == NULL)
        return;
    kvio_dist_t *dists[] = {&generator->input_tokens, &generator->output_tokens,
                            &generator->priority, &generator->turns, &generator->think_time,
                            &generator->user_tokens, &generator->mutation_position,
                            &generator->mutation_tokens, &generator->system_prompt_popularity,
                            &generator->document_popularity};
    for (size_t i = 0; i < sizeof(dists) / sizeof(dists[0]); i++)
        kvio_dist_clear(dists[i]);
    for (uint32_t i = 0; i < generator->num_sessions; i++)
        free(generator->sessions[i].segments);
    free(generator->sessions);
    free(generator->heap);
    free(generator->answers);
    free(generator->phases);
    free(generator->system_prompt_tokens);
    free(generator->document_tokens);
    free(generator->single);
    free(generator->scratch);
    free(generator);
}

static const kvio_stream_source_ops_t synthetic_ops = {
    .name = "synthetic",
    .next = synthetic_next,
    .destroy = synthetic_destroy,
};

/* A closed loop's: it also says when it is due and hears finishes. */
static const kvio_stream_source_ops_t synthetic_closed_ops = {
    .name = "synthetic",
    .next = synthetic_next,
    .due_ns = synthetic_due_ns,
    .finished = synthetic_finished,
    .destroy = synthetic_destroy,
};

/* ---------- creation ---------- */

static kvio_status_t fail(char *error_p, size_t error_len, kvio_status_t status,
                          const char *fmt, const char *detail)
{
    snprintf(error_p, error_len, fmt, detail);
    return status;
}

/* The largest value a distribution yields (its max clamp, or the top of a
 * bounded kind), or 0 when it is unbounded. */
static double natural_max(const kvio_dist_t *dist)
{
    double top = 0;
    if (dist->kind == KVIO_DIST_CONSTANT) {
        top = dist->value;
    } else if (dist->kind == KVIO_DIST_UNIFORM) {
        top = dist->high;
    } else if (dist->kind == KVIO_DIST_EMPIRICAL) {
        for (size_t i = 0; i < dist->num_values; i++)
            top = dist->values[i] > top ? dist->values[i] : top;
    } else if (!dist->has_max) {
        return 0;
    }
    if (dist->has_max && (top == 0 || dist->max < top))
        top = dist->max;
    return top;
}

/* Draws each catalog entry's length once, from its own random stream. */
static kvio_status_t make_catalog(const kvio_dist_t *tokens, uint64_t seed, const char *purpose,
                                  uint32_t count, uint32_t **lengths_p, uint32_t *longest_p)
{
    uint32_t *lengths = malloc((count ? count : 1) * sizeof(uint32_t));
    if (lengths == NULL)
        return KVIO_ERR_NOMEM;
    kvio_rng_t rng;
    kvio_rng_seed(&rng, seed, 0, purpose);
    uint32_t longest = 0;
    for (uint32_t i = 0; i < count; i++) {
        lengths[i] = sample_tokens(tokens, &rng, 1);
        if (lengths[i] > longest)
            longest = lengths[i];
    }
    *lengths_p = lengths;
    *longest_p = longest;
    return KVIO_OK;
}

static kvio_status_t make_popularity(double zipf, uint32_t count, kvio_dist_t *dist_p,
                                     bool *zipf_p)
{
    *zipf_p = zipf > 0 && count > 1;
    if (!*zipf_p)
        return KVIO_OK;
    kvio_dist_t dist = {.kind = KVIO_DIST_ZIPF, .n = count, .s = zipf};
    char message[128];
    if (kvio_dist_prepare(&dist, message, sizeof(message)) != KVIO_OK)
        return KVIO_ERR_CONFIG;
    *dist_p = dist;
    return KVIO_OK;
}

/* A closed loop: no arrival process; every user starts its first
 * conversation a think time in, so that they do not all start at once. */
static kvio_status_t start_users(synthetic_t *generator, uint32_t users)
{
    generator->users = users;
    generator->fresh_time_ns = INT64_MAX;
    generator->answers = malloc(users * sizeof(answer_t));
    generator->heap = malloc(users * sizeof(pending_t));
    if (generator->answers == NULL || generator->heap == NULL)
        return KVIO_ERR_NOMEM;
    generator->heap_capacity = users;
    for (uint32_t u = 0; u < users; u++) {
        double think = kvio_dist_sample(&generator->think_time, &generator->session_rng);
        kvio_status_t status = heap_push(generator, think > 0 ? llround(think) : 0, NO_SESSION);
        if (status != KVIO_OK)
            return status;
    }
    return KVIO_OK;
}

kvio_status_t kvio_synthetic_create(const kvio_stream_config_t *config, uint64_t seed,
                                    int64_t duration_ns, kvio_stream_t **stream_p,
                                    char *error_p, size_t error_len)
{
    const kvio_stream_prefix_config_t *prefix = &config->prefix;
    const kvio_stream_arrival_config_t *arrival = &config->arrival;
    kvio_status_t status = KVIO_OK;
    kvio_stream_t *stream = NULL;
    synthetic_t *generator = calloc(1, sizeof(*generator));
    if (generator == NULL)
        return KVIO_ERR_NOMEM;
    generator->free_session = NO_SESSION;
    generator->max_requests = (uint64_t)config->requests;
    generator->end_ns = config->requests > 0 ? 0 : duration_ns;
    generator->mutation_probability = prefix->mutation.probability;
    generator->mutation_unit = prefix->mutation.position_unit;
    generator->max_context = (uint64_t)prefix->sessions.max_context;
    generator->max_tokens = config->max_tokens;
    generator->min_unique_tokens = (uint32_t)prefix->min_unique_tokens;
    double output_max = natural_max(&config->output_tokens);
    if (output_max >= 1)
        generator->output_max = output_max >= KVIO_STREAM_MAX_TOKENS ? KVIO_STREAM_MAX_TOKENS
                                                                     : llround(output_max);
    const kvio_dist_t *sources[] = {&config->input_tokens, &config->output_tokens,
                                    &config->priority, &prefix->sessions.turns,
                                    &prefix->sessions.think_time, &prefix->sessions.user_tokens,
                                    &prefix->mutation.position, &prefix->mutation.tokens};
    kvio_dist_t *targets[] = {&generator->input_tokens, &generator->output_tokens,
                              &generator->priority, &generator->turns, &generator->think_time,
                              &generator->user_tokens, &generator->mutation_position,
                              &generator->mutation_tokens};
    for (size_t i = 0; i < sizeof(sources) / sizeof(sources[0]) && status == KVIO_OK; i++)
        status = kvio_dist_copy(sources[i], targets[i]);
    if (status != KVIO_OK)
        goto cleanup;

    /* The shared catalog. */
    uint32_t longest_prompt = 0, longest_document = 0;
    generator->num_system_prompts = (uint32_t)prefix->system_prompts.count;
    generator->num_documents = (uint32_t)prefix->documents.count;
    generator->documents_per_request =
        generator->num_documents == 0 ? 0
        : prefix->documents.per_request > generator->num_documents
            ? generator->num_documents
            : (uint32_t)prefix->documents.per_request;
    status = make_catalog(&prefix->system_prompts.tokens, seed, "stream.system_prompts",
                          generator->num_system_prompts, &generator->system_prompt_tokens,
                          &longest_prompt);
    if (status == KVIO_OK)
        status = make_catalog(&prefix->documents.tokens, seed, "stream.documents",
                              generator->num_documents, &generator->document_tokens,
                              &longest_document);
    if (status == KVIO_OK)
        status = make_popularity(prefix->system_prompts.zipf, generator->num_system_prompts,
                                 &generator->system_prompt_popularity,
                                 &generator->system_prompts_zipf);
    if (status == KVIO_OK)
        status = make_popularity(prefix->documents.zipf, generator->num_documents,
                                 &generator->document_popularity, &generator->documents_zipf);
    if (status != KVIO_OK)
        goto cleanup;
    if ((uint64_t)longest_prompt + (uint64_t)generator->documents_per_request * longest_document +
            generator->min_unique_tokens >
        KVIO_STREAM_MAX_TOKENS) {
        status = fail(error_p, error_len, KVIO_ERR_CONFIG,
                      "stream.prefix: system prompt and documents can exceed %s tokens",
                      "10000000");
        goto cleanup;
    }
    generator->single = malloc((2 + generator->documents_per_request) * sizeof(kvio_segment_t));
    if (generator->single == NULL) {
        status = KVIO_ERR_NOMEM;
        goto cleanup;
    }

    /* Mean turns per conversation, so that `rate` counts every turn. */
    kvio_rng_seed(&generator->session_rng, seed, 0, "stream.turns-mean");
    if (generator->turns.kind == KVIO_DIST_CONSTANT) {
        generator->turns_per_conversation = sample_turns(generator);
    } else {
        double total = 0;
        for (int i = 0; i < 65536; i++)
            total += sample_turns(generator);
        generator->turns_per_conversation = total / 65536;
    }
    kvio_rng_seed(&generator->arrival_rng, seed, 0, "stream.arrivals");
    kvio_rng_seed(&generator->length_rng, seed, 0, "stream.lengths");
    kvio_rng_seed(&generator->prefix_rng, seed, 0, "stream.prefix");
    kvio_rng_seed(&generator->session_rng, seed, 0, "stream.sessions");
    kvio_rng_seed(&generator->mutation_rng, seed, 0, "stream.mutation");
    kvio_rng_seed(&generator->priority_rng, seed, 0, "stream.priority");
    kvio_rng_seed(&generator->salt_rng, seed, 0, "stream.cache_salts");
    generator->cache_salts = (uint64_t)config->cache_salts;

    /* The arrival process. */
    int top_process = arrival->process;
    generator->top_process = top_process;
    if (top_process == KVIO_ARRIVAL_PHASES) {
        if (arrival->phases.count == 0) {
            status = fail(error_p, error_len, KVIO_ERR_CONFIG, "%s",
                          "stream.arrival: process phases needs a list of phases");
            goto cleanup;
        }
        generator->num_phases = arrival->phases.count;
        generator->phases = malloc(generator->num_phases * sizeof(kvio_stream_phase_t));
        if (generator->phases == NULL) {
            status = KVIO_ERR_NOMEM;
            goto cleanup;
        }
        memcpy(generator->phases, arrival->phases.items,
               generator->num_phases * sizeof(kvio_stream_phase_t));
        generator->phase_end_ns = (double)generator->phases[0].duration_ns;
        set_gap_process(generator, generator->phases[0].process, generator->phases[0].rate,
                        generator->phases[0].cv);
    } else if (top_process == KVIO_ARRIVAL_BATCH) {
        generator->batch_left = arrival->count > 0 ? (uint64_t)arrival->count
                                                   : (uint64_t)config->requests;
        if (generator->batch_left == 0) {
            status = fail(error_p, error_len, KVIO_ERR_CONFIG, "%s",
                          "stream.arrival: process batch needs stream.requests or "
                          "arrival.count");
            goto cleanup;
        }
        generator->process = KVIO_ARRIVAL_BATCH;
    } else {
        set_gap_process(generator, top_process, arrival->rate, arrival->cv);
    }
    bool ends = generator->max_requests > 0 || generator->end_ns > 0 ||
                (config->users == 0 &&
                 (top_process == KVIO_ARRIVAL_PHASES || top_process == KVIO_ARRIVAL_BATCH));
    if (!ends) {
        status = fail(error_p, error_len, KVIO_ERR_CONFIG, "%s",
                      "stream: unbounded (set stream.requests or the workload's duration)");
        goto cleanup;
    }
    if (config->users > 0)
        status = start_users(generator, (uint32_t)config->users);
    else
        advance_arrival(generator, top_process);
    if (status != KVIO_OK)
        goto cleanup;

    stream = calloc(1, sizeof(*stream));
    if (stream == NULL) {
        status = KVIO_ERR_NOMEM;
        goto cleanup;
    }
    stream->ops = generator->users > 0 ? &synthetic_closed_ops : &synthetic_ops;
    stream->source = generator;
    *stream_p = stream;
    return KVIO_OK;

cleanup:
    if (status == KVIO_ERR_NOMEM)
        snprintf(error_p, error_len, "stream: out of memory");
    synthetic_destroy(generator);
    return status;
}
