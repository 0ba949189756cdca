/* libFuzzer target for kvio serve's request bodies (http/openai.c): the
 * first byte picks the endpoint (bit 0: chat), the chat template (bits 1-2)
 * and whether the output length is drawn (bit 3); the rest is the body, as
 * a client sends it. A body that is taken is planned and its answer
 * rendered whole and streamed, as the server would. */
#include "http/http_int.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t options = data[0];
    kvio_api_t api = (options & 1) ? KVIO_API_CHAT : KVIO_API_COMPLETIONS;
    kvio_api_server_t server = {.model_name = "m", .max_model_len = 4096,
                                .chat_template = (kvio_chat_template_t)((options >> 1) % 3)};
    kvio_dist_t lengths = {.kind = KVIO_DIST_CONSTANT, .value = 7};
    kvio_api_request_t request;
    kvio_http_error_t error;
    if (!kvio_api_parse(api, (const char *)data + 1, size - 1, &server, &request, &error)) {
        if (error.status < 400 || error.status > 599 || error.message[0] == '\0')
            abort(); /* every refusal says why, with an error status */
        kvio_api_request_fini(&request);
        return 0;
    }
    kvio_api_plan_t plan;
    if (kvio_api_plan(&request, &server, (options & 8) ? &lengths : NULL, 1, &plan, &error) &&
        plan.output_tokens <= 4096) {
        kvio_api_answer_t answer = {.api = api, .id = "cmpl-fuzz", .created = 1, .model = "m",
                                    .prompt_tokens = (uint32_t)request.prompt.count,
                                    .include_usage = request.include_usage,
                                    .continuous_usage = request.continuous_usage};
        json_decref(kvio_api_response_json(&answer, &plan, plan.output_tokens, "length", 0));
        char *text = NULL;
        size_t length = 0, capacity = 0;
        uint32_t half = plan.output_tokens / 2;
        kvio_api_stream_tokens(&answer, &plan, 0, half, NULL, &text, &length, &capacity);
        kvio_api_stream_tokens(&answer, &plan, half, plan.output_tokens, "length", &text, &length,
                               &capacity);
        kvio_api_stream_end(&answer, NULL, plan.output_tokens, 0, &text, &length, &capacity);
        free(text);
    }
    kvio_api_request_fini(&request);
    return 0;
}
