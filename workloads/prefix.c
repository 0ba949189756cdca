/* Where the prefix breaks (kvio/conversation.h): each turn of a session is
 * rendered as the server would prefill it and compared, token by token,
 * with what the session's previous turn left in the cache (its prompt and
 * its answer). Past the first difference the two are brought back in step
 * (the next run of matching tokens), so that every break of a turn is
 * found, each placed in its message; breaks at the same place cluster, and
 * the cache hit each cluster costs is what the turns would hit without it. */
#include "kvio/conversation.h"

#include "kvio/array.h"
#include "kvio/hashset.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

/* Tokens that must match again for two prompts to be back in step, how far
 * ahead each is searched, and the most breaks kept per turn. */
#define RESYNC_TOKENS 8
#define RESYNC_WINDOW 4096
#define MAX_BREAKS 32

static size_t common_length(const uint32_t *a, size_t a_count, const uint32_t *b, size_t b_count)
{
    size_t n = 0;
    while (n < a_count && n < b_count && a[n] == b[n])
        n++;
    return n;
}

/* The first place at or after (*i_p, *j_p) where RESYNC_TOKENS tokens of
 * cur and prev match again; false when none is within the window. */
static bool resync(const kvio_tokens_t *cur, const kvio_tokens_t *prev, size_t *i_p, size_t *j_p)
{
    size_t i0 = *i_p, j0 = *j_p;
    if (cur->count < i0 + RESYNC_TOKENS || prev->count < j0 + RESYNC_TOKENS)
        return false;
    kvio_map_t grams = {0};
    size_t j_end = prev->count - RESYNC_TOKENS;
    if (j_end > j0 + RESYNC_WINDOW)
        j_end = j0 + RESYNC_WINDOW;
    bool found = false;
    if (kvio_map_reserve(&grams, j_end - j0 + 1) != KVIO_OK)
        return false;
    for (size_t j = j_end + 1; j-- > j0;) /* the earliest position wins */
        kvio_map_set(&grams, XXH3_64bits(&prev->ids[j], RESYNC_TOKENS * sizeof(uint32_t)),
                     (uint32_t)(j - j0 + 1));
    size_t i_end = cur->count - RESYNC_TOKENS;
    if (i_end > i0 + RESYNC_WINDOW)
        i_end = i0 + RESYNC_WINDOW;
    for (size_t i = i0; i <= i_end && !found; i++) {
        uint32_t at = kvio_map_get(&grams, XXH3_64bits(&cur->ids[i],
                                                       RESYNC_TOKENS * sizeof(uint32_t)));
        if (at != 0 && memcmp(&cur->ids[i], &prev->ids[j0 + at - 1],
                              RESYNC_TOKENS * sizeof(uint32_t)) == 0) {
            *i_p = i;
            *j_p = j0 + at - 1;
            found = true;
        }
    }
    kvio_map_fini(&grams);
    return found;
}

/* length bytes of text from start, cut to whole UTF-8 characters. */
static void excerpt(const char *text, size_t text_length, size_t start, size_t end, char *out)
{
    if (end > text_length)
        end = text_length;
    while (start < end && ((unsigned char)text[start] & 0xc0) == 0x80)
        start++;
    while (end > start && end < text_length && ((unsigned char)text[end] & 0xc0) == 0x80)
        end--;
    memcpy(out, text + start, end - start);
    out[end - start] = '\0';
}

/* The break at cur's token i (prev's token j): its message and the text
 * each side. */
static kvio_prefix_break_t place_break(const kvio_conversation_turn_t *turn,
                                       const kvio_chat_rendering_t *cur,
                                       const kvio_chat_rendering_t *prev, size_t i, size_t j)
{
    kvio_prefix_break_t found = {.token = (uint32_t)i, .cluster = -1};
    size_t offset = i < cur->offsets.count ? cur->offsets.ids[i] : cur->length;
    size_t message = 0;
    while (message + 1 <= turn->num_messages && cur->message_offsets[message + 1] <= offset)
        message++;
    found.message = (uint32_t)message;
    found.label = message < turn->num_messages ? turn->labels[message] : "reply header";
    size_t start = cur->message_offsets[message < turn->num_messages ? message : turn->num_messages];
    size_t first = i;
    while (first > 0 && cur->offsets.ids[first - 1] >= start)
        first--;
    found.token_in_message = (uint32_t)(i - first);
    excerpt(cur->text, cur->length, offset > KVIO_PREFIX_CONTEXT_BYTES ? offset - KVIO_PREFIX_CONTEXT_BYTES : 0,
            offset, found.before);
    excerpt(cur->text, cur->length, offset, offset + KVIO_PREFIX_CONTEXT_BYTES, found.after);
    size_t prev_offset = j < prev->offsets.count ? prev->offsets.ids[j] : prev->length;
    excerpt(prev->text, prev->length, prev_offset, prev_offset + KVIO_PREFIX_CONTEXT_BYTES,
            found.previous);
    return found;
}

/* Every break of a turn: the first difference, then after each return to
 * step the next one, until one of the two ends or they never meet again. */
static kvio_status_t find_breaks(const kvio_conversation_turn_t *turn,
                                 const kvio_chat_rendering_t *cur,
                                 const kvio_chat_rendering_t *prev, kvio_prefix_turn_t *row)
{
    size_t i = row->reusable_tokens, j = row->reusable_tokens;
    size_t capacity = 0;
    while (i < cur->tokens.count && j < prev->tokens.count && row->num_breaks < MAX_BREAKS) {
        if (kvio_array_reserve((void **)&row->breaks, &capacity, row->num_breaks + 1,
                               sizeof(kvio_prefix_break_t), 4) != KVIO_OK)
            return KVIO_ERR_NOMEM;
        row->breaks[row->num_breaks++] = place_break(turn, cur, prev, i, j);
        if (!resync(&cur->tokens, &prev->tokens, &i, &j))
            break;
        size_t same = common_length(&cur->tokens.ids[i], cur->tokens.count - i,
                                    &prev->tokens.ids[j], prev->tokens.count - j);
        i += same;
        j += same;
    }
    return KVIO_OK;
}

/* What a block cache hits of a reusable prefix: whole blocks, and never the
 * prompt's last token (vLLM recomputes it to get the first output). */
static uint32_t cached(uint32_t reusable, uint32_t prompt, uint32_t block_size)
{
    uint32_t most = prompt > 0 ? prompt - 1 : 0;
    uint32_t hit = reusable < most ? reusable : most;
    return hit / block_size * block_size;
}

kvio_status_t kvio_conversation_append_answer(const kvio_conversation_turn_t *turn,
                                              const kvio_tokenizer_t *tokenizer,
                                              kvio_chat_template_t template_id,
                                              kvio_chat_rendering_t *rendering)
{
    if (turn->output == NULL)
        return KVIO_OK;
    kvio_chat_message_t answer = {.role = "assistant", .role_length = 9,
                                  .content = turn->output,
                                  .content_length = turn->output_length,
                                  .kind = turn->output_kind};
    return kvio_chat_render_answer(template_id, tokenizer, &answer, rendering);
}

kvio_status_t kvio_conversation_render(const kvio_conversation_turn_t *turn,
                                       const kvio_tokenizer_t *tokenizer,
                                       kvio_chat_template_t template_id,
                                       kvio_chat_rendering_t *rendering_p)
{
    /* harmony writes the day of the request; a log's time is it (a time
     * before 2001 is a relative one: the template's own day). */
    char date[32];
    kvio_chat_options_t options = {.add_generation_prompt = true};
    struct tm day;
    /* Only a day gmtime can give and strftime can write whole (a time of
     * 1e30 s left the buffer unterminated: stack bytes as the date). */
    if (isfinite(turn->time_s) && turn->time_s > 978307200.0 && turn->time_s < 253402300800.0) {
        time_t seconds = (time_t)turn->time_s;
        if (gmtime_r(&seconds, &day) != NULL && strftime(date, sizeof(date), "%Y-%m-%d", &day) > 0)
            options.date = date;
    }
    return kvio_chat_render_spans(template_id, tokenizer, turn->messages, turn->num_messages,
                                  &options, rendering_p);
}

static kvio_status_t analyze_session(const kvio_conversation_session_t *session,
                                     uint32_t session_index, const kvio_prefix_params_t *params,
                                     kvio_prefix_turn_t *rows)
{
    kvio_chat_rendering_t prev = {0};
    kvio_status_t status = KVIO_OK;
    for (size_t t = 0; t < session->num_turns && status == KVIO_OK; t++) {
        const kvio_conversation_turn_t *turn = &session->turns[t];
        kvio_chat_rendering_t cur = {0};
        status = kvio_conversation_render(turn, params->tokenizer, params->chat_template, &cur);
        if (status != KVIO_OK)
            break;
        kvio_prefix_turn_t *row = &rows[t];
        *row = (kvio_prefix_turn_t){.session = session_index, .turn = (uint32_t)t,
                                    .prompt_tokens = (uint32_t)cur.tokens.count};
        if (t > 0) {
            row->expected_tokens = (uint32_t)prev.tokens.count;
            row->reusable_tokens = (uint32_t)common_length(cur.tokens.ids, cur.tokens.count,
                                                           prev.tokens.ids, prev.tokens.count);
            row->cached_tokens = cached(row->reusable_tokens, row->prompt_tokens,
                                        params->block_size);
            status = find_breaks(turn, &cur, &prev, row);
        }
        if (status == KVIO_OK)
            status = kvio_conversation_append_answer(turn, params->tokenizer,
                                                     params->chat_template, &cur);
        kvio_chat_rendering_fini(&prev);
        prev = cur;
    }
    kvio_chat_rendering_fini(&prev);
    return status;
}

/* ---------- clusters ---------- */

/* Whether a break is at the cluster's place: its message, near the token
 * the cluster started with. */
static bool same_place(const kvio_prefix_cluster_t *cluster, uint32_t anchor,
                       const kvio_prefix_break_t *found)
{
    uint32_t distance = found->token_in_message > anchor ? found->token_in_message - anchor
                                                         : anchor - found->token_in_message;
    return cluster->message == found->message && distance <= KVIO_PREFIX_CLUSTER_TOKENS &&
           strcmp(cluster->label, found->label) == 0;
}

/* The reuse of a turn if no break of cluster c happened (c < 0: none at
 * all): up to its first break of another cluster, else all the previous
 * turn left. */
static uint32_t reusable_without(const kvio_prefix_turn_t *row, int c)
{
    for (size_t b = 0; b < row->num_breaks; b++)
        if (c >= 0 && row->breaks[b].cluster != c)
            return row->breaks[b].token;
    return row->expected_tokens < row->prompt_tokens ? row->expected_tokens : row->prompt_tokens;
}

/* Cluster indexes by their clusters' turns, most first (qsort_r). */
static int by_turns(const void *left_p, const void *right_p, void *clusters_p)
{
    const kvio_prefix_cluster_t *clusters = clusters_p;
    const kvio_prefix_cluster_t *left = &clusters[*(const size_t *)left_p];
    const kvio_prefix_cluster_t *right = &clusters[*(const size_t *)right_p];
    if (left->turns != right->turns)
        return left->turns > right->turns ? -1 : 1;
    return left->first_turn < right->first_turn ? -1 : left->first_turn > right->first_turn;
}

static kvio_status_t cluster_breaks(kvio_prefix_result_t *result, uint32_t block_size)
{
    size_t capacity = 0;
    uint32_t *anchors = NULL; /* each cluster's first token, in the order found */
    size_t anchors_capacity = 0;
    for (size_t t = 0; t < result->num_turns; t++) {
        kvio_prefix_turn_t *row = &result->turns[t];
        for (size_t b = 0; b < row->num_breaks; b++) {
            kvio_prefix_break_t *found = &row->breaks[b];
            size_t c = 0;
            while (c < result->num_clusters && !same_place(&result->clusters[c], anchors[c], found))
                c++;
            if (c == result->num_clusters) {
                if (kvio_array_reserve((void **)&result->clusters, &capacity, c + 1,
                                       sizeof(kvio_prefix_cluster_t), 16) != KVIO_OK ||
                    kvio_array_reserve((void **)&anchors, &anchors_capacity, c + 1,
                                       sizeof(uint32_t), 16) != KVIO_OK) {
                    free(anchors);
                    return KVIO_ERR_NOMEM;
                }
                anchors[c] = found->token_in_message;
                result->clusters[result->num_clusters++] = (kvio_prefix_cluster_t){
                    .message = found->message, .label = found->label,
                    .first_token = found->token_in_message,
                    .last_token = found->token_in_message, .first_turn = t};
            }
            kvio_prefix_cluster_t *cluster = &result->clusters[c];
            found->cluster = (int)c;
            cluster->turns += b == 0;
            if (found->token_in_message < cluster->first_token)
                cluster->first_token = found->token_in_message;
            if (found->token_in_message > cluster->last_token)
                cluster->last_token = found->token_in_message;
        }
    }
    free(anchors);
    /* Most turns first; the breaks follow their cluster to its new index. */
    size_t *order = malloc((result->num_clusters ? result->num_clusters : 1) * sizeof(size_t));
    int *moved_to = malloc((result->num_clusters ? result->num_clusters : 1) * sizeof(int));
    kvio_prefix_cluster_t *sorted = malloc((result->num_clusters ? result->num_clusters : 1) *
                                           sizeof(kvio_prefix_cluster_t));
    if (order == NULL || moved_to == NULL || sorted == NULL) {
        free(order);
        free(moved_to);
        free(sorted);
        return KVIO_ERR_NOMEM;
    }
    for (size_t c = 0; c < result->num_clusters; c++)
        order[c] = c;
    qsort_r(order, result->num_clusters, sizeof(size_t), by_turns, result->clusters);
    for (size_t c = 0; c < result->num_clusters; c++) {
        sorted[c] = result->clusters[order[c]];
        moved_to[order[c]] = (int)c;
    }
    free(result->clusters);
    result->clusters = sorted;
    for (size_t t = 0; t < result->num_turns; t++) {
        kvio_prefix_turn_t *row = &result->turns[t];
        for (size_t b = 0; b < row->num_breaks; b++)
            row->breaks[b].cluster = moved_to[row->breaks[b].cluster];
        if (row->turn == 0)
            continue;
        for (size_t c = 0; c < result->num_clusters; c++)
            result->clusters[c].cached_without +=
                cached(reusable_without(row, (int)c), row->prompt_tokens, block_size);
        result->cached_without_breaks +=
            cached(reusable_without(row, -1), row->prompt_tokens, block_size);
    }
    free(order);
    free(moved_to);
    return KVIO_OK;
}

/* ---------- the whole log ---------- */

void kvio_prefix_result_free(kvio_prefix_result_t *result)
{
    if (result == NULL)
        return;
    for (size_t t = 0; t < result->num_turns; t++)
        free(result->turns[t].breaks);
    free(result->turns);
    free(result->clusters);
    free(result);
}

kvio_status_t kvio_prefix_analyze(const kvio_conversation_log_t *log,
                                  const kvio_prefix_params_t *params,
                                  kvio_prefix_result_t **result_p)
{
    kvio_prefix_result_t *result = calloc(1, sizeof(*result));
    if (result == NULL)
        return KVIO_ERR_NOMEM;
    result->turns = calloc(log->num_turns ? log->num_turns : 1, sizeof(kvio_prefix_turn_t));
    kvio_status_t status = result->turns != NULL ? KVIO_OK : KVIO_ERR_NOMEM;
    for (size_t s = 0; s < log->num_sessions && status == KVIO_OK; s++) {
        status = analyze_session(&log->sessions[s], (uint32_t)s, params,
                                 &result->turns[result->num_turns]);
        result->num_turns += log->sessions[s].num_turns;
    }
    for (size_t t = 0; t < result->num_turns && status == KVIO_OK; t++) {
        const kvio_prefix_turn_t *row = &result->turns[t];
        result->prompt_tokens += row->prompt_tokens;
        result->cached_tokens += row->cached_tokens;
        result->turns_with_breaks += row->num_breaks > 0;
    }
    if (status == KVIO_OK)
        status = cluster_breaks(result, params->block_size);
    if (status != KVIO_OK) {
        kvio_prefix_result_free(result);
        return status;
    }
    *result_p = result;
    return KVIO_OK;
}
