/* A fixed-rate (or fixed-concurrency) load generator for kvio serve
 * (bench/serve.sh): streamed completions over plain sockets and epoll, so
 * that the client's own time is small and known; every server-sent event
 * is stamped (CLOCK_REALTIME) as it arrives and logged, to compare what a
 * client saw with what the engine did (tokens.csv).
 *
 *   serve_load --port P --requests N (--rate R | --concurrency C)
 *              --prompt-tokens T --max-tokens M --log FILE [--seed S]
 *
 * Log lines: request,response_id,event,kind,time_ns (kind: send, token,
 * usage, done). Exit 1 when a request failed (its status printed). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

typedef enum { READ_HEADERS, READ_SIZE, READ_DATA, READ_DATA_END, READ_DONE } read_state_t;

typedef struct stream {
    int fd;
    int index;
    char *request;
    size_t request_length, request_sent;
    read_state_t state;
    char line[256];          /* headers and chunk-size lines */
    size_t line_length;
    size_t chunk_left;
    char event[65536];       /* the SSE event being read */
    size_t event_length;
    int events;
    int status;
    char id[80];
} stream_t;

typedef struct options {
    const char *host;
    int port, requests, concurrency;
    double rate;
    int prompt_tokens, max_tokens;
    const char *log;
    unsigned seed;
} options_t;

static int64_t now_ns(void)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
}

static FILE *log_file;
static int failures;

static void log_line(int request, const char *id, int event, const char *kind, int64_t time)
{
    fprintf(log_file, "%d,%s,%d,%s,%lld\n", request, id[0] ? id : "-", event, kind,
            (long long)time);
}

/* A distinct prompt per request (no prefix shared), as token ids. */
static char *make_request(const options_t *options, int index, size_t *length_p)
{
    size_t capacity = (size_t)options->prompt_tokens * 12 + 512;
    char *body = malloc(capacity);
    size_t length = (size_t)snprintf(body, capacity, "{\"prompt\": [");
    for (int t = 0; t < options->prompt_tokens; t++)
        length += (size_t)snprintf(body + length, capacity - length, t ? ",%u" : "%u",
                                   (options->seed + (unsigned)index) * 100003u + (unsigned)t);
    length += (size_t)snprintf(body + length, capacity - length,
                               "], \"max_tokens\": %d, \"ignore_eos\": true, \"stream\": true, "
                               "\"stream_options\": {\"include_usage\": true}}",
                               options->max_tokens);
    char *request = malloc(length + 256);
    size_t total = (size_t)snprintf(request, length + 256,
                                    "POST /v1/completions HTTP/1.1\r\nHost: %s\r\n"
                                    "Content-Type: application/json\r\nContent-Length: %zu\r\n"
                                    "Connection: close\r\n\r\n%.*s",
                                    options->host, length, (int)length, body);
    free(body);
    *length_p = total;
    return request;
}

/* One complete SSE event: "data: {...}" or "data: [DONE]". */
static void on_event(stream_t *stream, int64_t time)
{
    const char *data = strstr(stream->event, "data: ");
    if (data == NULL)
        return;
    data += 6;
    if (strncmp(data, "[DONE]", 6) == 0) {
        log_line(stream->index, stream->id, stream->events++, "done", time);
        return;
    }
    const char *id = strstr(data, "\"id\":\"");
    if (id != NULL && stream->id[0] == '\0') {
        id += 6;
        size_t length = strcspn(id, "\"");
        snprintf(stream->id, sizeof(stream->id), "%.*s", (int)length, id);
    }
    bool usage = strstr(data, "\"choices\":[]") != NULL;
    log_line(stream->index, stream->id, stream->events++, usage ? "usage" : "token", time);
}

/* Body bytes of the chunked response: events split on blank lines. */
static void on_body(stream_t *stream, const char *bytes, size_t length, int64_t time)
{
    for (size_t i = 0; i < length; i++) {
        if (stream->event_length + 1 < sizeof(stream->event))
            stream->event[stream->event_length++] = bytes[i];
        stream->event[stream->event_length] = '\0';
        if (stream->event_length >= 2 && stream->event[stream->event_length - 1] == '\n' &&
            stream->event[stream->event_length - 2] == '\n') {
            on_event(stream, time);
            stream->event_length = 0;
        }
    }
}

/* Parses what arrived: the status line and headers, then the chunked body. */
static void on_bytes(stream_t *stream, const char *bytes, size_t length, int64_t time)
{
    size_t i = 0;
    while (i < length && stream->state != READ_DONE) {
        if (stream->state == READ_DATA) {
            size_t take = length - i < stream->chunk_left ? length - i : stream->chunk_left;
            on_body(stream, bytes + i, take, time);
            i += take;
            stream->chunk_left -= take;
            if (stream->chunk_left == 0)
                stream->state = READ_DATA_END;
            continue;
        }
        char c = bytes[i++];
        if (stream->line_length + 1 < sizeof(stream->line))
            stream->line[stream->line_length++] = c;
        if (c != '\n')
            continue;
        stream->line[stream->line_length] = '\0';
        stream->line_length = 0;
        if (stream->state == READ_HEADERS) {
            if (strncmp(stream->line, "HTTP/1.1 ", 9) == 0)
                stream->status = atoi(stream->line + 9);
            else if (strcmp(stream->line, "\r\n") == 0)
                stream->state = READ_SIZE;
        } else if (stream->state == READ_DATA_END) {
            stream->state = READ_SIZE; /* the CRLF after a chunk */
        } else {
            stream->chunk_left = strtoul(stream->line, NULL, 16);
            stream->state = stream->chunk_left > 0 ? READ_DATA : READ_DONE;
        }
    }
}

static int open_stream(const options_t *options, stream_t *stream, int epoll_fd)
{
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons((uint16_t)options->port)};
    inet_pton(AF_INET, options->host, &address.sin_addr);
    stream->fd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(stream->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(stream->fd, (struct sockaddr *)&address, sizeof(address)) != 0) {
        perror("serve_load: connect");
        return -1;
    }
    /* The whole request at once (a blocking send), then non-blocking reads. */
    for (size_t sent = 0; sent < stream->request_length;) {
        ssize_t n = send(stream->fd, stream->request + sent, stream->request_length - sent, 0);
        if (n <= 0) {
            perror("serve_load: send");
            return -1;
        }
        sent += (size_t)n;
    }
    log_line(stream->index, "", -1, "send", now_ns());
    fcntl(stream->fd, F_SETFL, fcntl(stream->fd, F_GETFL) | O_NONBLOCK);
    struct epoll_event event = {.events = EPOLLIN, .data.ptr = stream};
    return epoll_ctl(epoll_fd, EPOLL_CTL_ADD, stream->fd, &event);
}

static bool parse_options(int argc, char **argv, options_t *options)
{
    *options = (options_t){.host = "127.0.0.1", .requests = 100, .prompt_tokens = 128,
                           .max_tokens = 64, .seed = 1};
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *key = argv[i], *value = argv[i + 1];
        if (strcmp(key, "--port") == 0)
            options->port = atoi(value);
        else if (strcmp(key, "--host") == 0)
            options->host = value;
        else if (strcmp(key, "--requests") == 0)
            options->requests = atoi(value);
        else if (strcmp(key, "--rate") == 0)
            options->rate = atof(value);
        else if (strcmp(key, "--concurrency") == 0)
            options->concurrency = atoi(value);
        else if (strcmp(key, "--prompt-tokens") == 0)
            options->prompt_tokens = atoi(value);
        else if (strcmp(key, "--max-tokens") == 0)
            options->max_tokens = atoi(value);
        else if (strcmp(key, "--log") == 0)
            options->log = value;
        else if (strcmp(key, "--seed") == 0)
            options->seed = (unsigned)atoi(value);
        else
            return false;
    }
    return options->port > 0 && options->log != NULL && options->requests > 0 &&
           (options->rate > 0) != (options->concurrency > 0);
}

int main(int argc, char **argv)
{
    options_t options;
    if (!parse_options(argc, argv, &options)) {
        fprintf(stderr, "usage: serve_load --port P --requests N (--rate R | --concurrency C) "
                        "--prompt-tokens T --max-tokens M --log FILE [--seed S]\n");
        return 2;
    }
    log_file = fopen(options.log, "w");
    if (log_file == NULL) {
        perror(options.log);
        return 2;
    }
    stream_t *streams = calloc((size_t)options.requests, sizeof(*streams));
    for (int i = 0; i < options.requests; i++) {
        streams[i].index = i;
        streams[i].fd = -1;
        streams[i].request = make_request(&options, i, &streams[i].request_length);
    }
    int epoll_fd = epoll_create1(0);
    int started = 0, finished = 0, in_flight = 0;
    int64_t start = now_ns();
    while (finished < options.requests) {
        /* Start what is due: at the rate, or up to the concurrency. */
        int64_t next_due = INT64_MAX;
        while (started < options.requests) {
            int64_t due = options.rate > 0 ? start + (int64_t)(started * 1e9 / options.rate) : 0;
            bool may = options.rate > 0 ? now_ns() >= due : in_flight < options.concurrency;
            if (!may) {
                next_due = due;
                break;
            }
            if (open_stream(&options, &streams[started], epoll_fd) != 0)
                return 1;
            started++;
            in_flight++;
        }
        int timeout_ms = -1;
        if (next_due != INT64_MAX) {
            int64_t wait = next_due - now_ns();
            timeout_ms = wait > 0 ? (int)(wait / 1000000) : 0;
        }
        struct epoll_event ready[64];
        int count = epoll_wait(epoll_fd, ready, 64, timeout_ms);
        for (int e = 0; e < count; e++) {
            stream_t *stream = ready[e].data.ptr;
            char buffer[65536];
            ssize_t n;
            while ((n = recv(stream->fd, buffer, sizeof(buffer), 0)) > 0)
                on_bytes(stream, buffer, (size_t)n, now_ns());
            if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) ||
                stream->state == READ_DONE) {
                if (stream->status != 200) {
                    fprintf(stderr, "serve_load: request %d: HTTP %d\n", stream->index,
                            stream->status);
                    failures++;
                }
                epoll_ctl(epoll_fd, EPOLL_CTL_DEL, stream->fd, NULL);
                close(stream->fd);
                stream->fd = -1;
                finished++;
                in_flight--;
            }
        }
    }
    fclose(log_file);
    for (int i = 0; i < options.requests; i++)
        free(streams[i].request);
    free(streams);
    return failures > 0 ? 1 : 0;
}
