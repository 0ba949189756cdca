/* The documents stay true to the tree: every relative link in README.md,
 * docs/ and the folders' READMEs reaches a file (and its heading, when the
 * link names one), every source path they quote in backticks exists, and
 * every workload a command in a code block names is an embedded preset.
 * A planted tree with one of each mistake fails, naming file and line.
 * And every test in tests/ names its timeout. */
#include <criterion/criterion.h>
#include <ctype.h>
#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tests/helpers.h"

/* Folders whose paths the documents quote; a quoted path under any other
 * (results/, build-release/) is an example, not a file of the tree. */
static const char *const SOURCE_FOLDERS[] = {
    "bench/", "cli/",   "cmake/",   "core/",      "docs/", "fuzz/",  "http/",    "include/",
    "kvcache/", "model/", "run/",  "sched/",     "scripts/", "serve/", "tests/", "train/",
    "workloads/", "xfer/", "gpu/",
};

/* Commands whose first argument is a workload or trace file, or a preset. */
static const char *const WORKLOAD_COMMANDS[] = {"run",      "compare", "capacity", "serve",
                                                "validate", "stream",  "cachesim"};

typedef struct {
    char text[8192];
    size_t len;
    int count;
} problems_t;

static void problem(problems_t *p, const char *file, int line, const char *what, const char *item)
{
    p->count++;
    int n = snprintf(p->text + p->len, sizeof(p->text) - p->len, "%s:%d: %s: %s\n", file, line,
                     what, item);
    if (n > 0 && p->len + (size_t)n < sizeof(p->text))
        p->len += (size_t)n;
}

static bool exists(const char *root, const char *relative)
{
    char path[2048];
    snprintf(path, sizeof(path), "%s/%s", root, relative);
    struct stat st;
    return stat(path, &st) == 0;
}

/* GitHub's anchor for a heading: lower case, punctuation dropped, spaces to
 * hyphens. */
static void slug(const char *heading, size_t len, char *out, size_t size)
{
    size_t at = 0;
    for (size_t i = 0; i < len && at + 1 < size; i++) {
        unsigned char c = (unsigned char)heading[i];
        if (isalnum(c) || c == '-' || c == '_')
            out[at++] = (char)tolower(c);
        else if (c == ' ')
            out[at++] = '-';
    }
    out[at] = '\0';
}

static bool has_heading(const char *text, const char *anchor)
{
    bool fenced = false;
    for (const char *line = text; line != NULL && *line != '\0';) {
        const char *end = strchr(line, '\n');
        size_t len = end != NULL ? (size_t)(end - line) : strlen(line);
        if (strncmp(line, "```", 3) == 0)
            fenced = !fenced;
        if (!fenced && line[0] == '#') {
            size_t skip = strspn(line, "#");
            if (skip < len && line[skip] == ' ') {
                char s[512];
                slug(line + skip + 1, len - skip - 1, s, sizeof(s));
                if (strcmp(s, anchor) == 0)
                    return true;
            }
        }
        line = end != NULL ? end + 1 : NULL;
    }
    return false;
}

/* Joins FILE's folder and LINK into a path relative to the root,
 * resolving "..". */
static void resolve(const char *file, const char *link, char *out, size_t size)
{
    char joined[2048];
    const char *slash = strrchr(file, '/');
    if (slash != NULL)
        snprintf(joined, sizeof(joined), "%.*s/%s", (int)(slash - file), file, link);
    else
        snprintf(joined, sizeof(joined), "%s", link);
    char *parts[64];
    int n = 0;
    for (char *save = NULL, *part = strtok_r(joined, "/", &save); part != NULL && n < 64;
         part = strtok_r(NULL, "/", &save)) {
        if (strcmp(part, ".") == 0)
            continue;
        if (strcmp(part, "..") == 0 && n > 0 && strcmp(parts[n - 1], "..") != 0)
            n--;
        else
            parts[n++] = part; /* a ".." above the root stays, so the link fails */
    }
    size_t at = 0;
    out[0] = '\0';
    for (int i = 0; i < n && at < size; i++)
        at += (size_t)snprintf(out + at, size - at, "%s%s", i > 0 ? "/" : "", parts[i]);
}

static void check_link(const char *root, const char *file, int line, const char *link,
                       problems_t *p)
{
    if (strstr(link, "://") != NULL || strncmp(link, "mailto:", 7) == 0)
        return;
    char target[1024], anchor[512] = "";
    const char *hash = strchr(link, '#');
    char path[1024];
    snprintf(path, sizeof(path), "%.*s", (int)(hash != NULL ? (size_t)(hash - link) : strlen(link)),
             link);
    if (hash != NULL)
        snprintf(anchor, sizeof(anchor), "%s", hash + 1);
    if (path[0] == '\0')
        snprintf(target, sizeof(target), "%s", file);
    else
        resolve(file, path, target, sizeof(target));
    if (!exists(root, target)) {
        problem(p, file, line, "link to a missing file", link);
        return;
    }
    size_t tlen = strlen(target);
    if (anchor[0] == '\0' || tlen < 3 || strcmp(target + tlen - 3, ".md") != 0)
        return;
    char full[2048];
    snprintf(full, sizeof(full), "%s/%s", root, target);
    char *text = test_read_file(full);
    if (text == NULL || !has_heading(text, anchor))
        problem(p, file, line, "link to a missing heading", link);
    free(text);
}

static void check_quoted_path(const char *root, const char *file, int line, const char *quoted,
                              problems_t *p)
{
    bool source = false;
    for (size_t i = 0; i < sizeof(SOURCE_FOLDERS) / sizeof(SOURCE_FOLDERS[0]); i++)
        source = source || strncmp(quoted, SOURCE_FOLDERS[i], strlen(SOURCE_FOLDERS[i])) == 0;
    if (!source || strpbrk(quoted, " *<>{}[]$|") != NULL)
        return;
    for (const char *c = quoted; *c != '\0'; c++)
        if (isupper((unsigned char)*c) && strncmp(c, "README", 6) != 0 &&
            strncmp(c, "DESIGN", 6) != 0)
            return; /* a placeholder such as tests/fixtures/TARGET */
    char path[1024];
    snprintf(path, sizeof(path), "%s", quoted);
    size_t len = strlen(path);
    while (len > 0 && (path[len - 1] == '/' || path[len - 1] == '.' || path[len - 1] == ','))
        path[--len] = '\0';
    if (!exists(root, path))
        problem(p, file, line, "quoted path does not exist", quoted);
}

/* `kvio COMMAND NAME` with a lower-case NAME that is not a file (nor a
 * placeholder in capitals) must be a preset under workloads/presets/, workloads/repro/ or
 * workloads/mlperf/. */
static void check_command(const char *root, const char *file, int line, const char *text,
                          size_t len, problems_t *p)
{
    char copy[1024];
    snprintf(copy, sizeof(copy), "%.*s", (int)(len < sizeof(copy) - 1 ? len : sizeof(copy) - 1),
             text);
    for (char *at = strstr(copy, "kvio "); at != NULL; at = strstr(at + 1, "kvio ")) {
        if (at > copy && (isalnum((unsigned char)at[-1]) || at[-1] == '_' || at[-1] == '-'))
            continue;
        char command[32], name[256];
        if (sscanf(at + 5, "%31s %255s", command, name) != 2)
            continue;
        bool takes_workload = false;
        for (size_t i = 0; i < sizeof(WORKLOAD_COMMANDS) / sizeof(WORKLOAD_COMMANDS[0]); i++)
            takes_workload = takes_workload || strcmp(command, WORKLOAD_COMMANDS[i]) == 0;
        bool placeholder = false;
        for (const char *c = name; *c != '\0'; c++)
            placeholder = placeholder || isupper((unsigned char)*c);
        if (!takes_workload || placeholder || !islower((unsigned char)name[0]) ||
            strchr(name, '$') != NULL)
            continue;
        const char *dot = strrchr(name, '.');
        if (dot != NULL) {
            /* A file in the tree (a user's own would be in capitals; the
             * shared traces sit beside a checkout, not in it). */
            bool in_tree = strcmp(dot, ".yaml") == 0 || strcmp(dot, ".jsonl") == 0;
            if (in_tree && strncmp(name, "../shared/", 10) != 0 && !exists(root, name))
                problem(p, file, line, "command names a missing file", name);
            continue;
        }
        char preset[512], repro[512];
        snprintf(preset, sizeof(preset), "workloads/presets/%s.yaml", name);
        snprintf(repro, sizeof(repro), "workloads/%s.yaml", name);
        if (!exists(root, preset) && !exists(root, repro))
            problem(p, file, line, "command names no preset", name);
    }
}

static void check_document(const char *root, const char *file, problems_t *p)
{
    char full[2048];
    snprintf(full, sizeof(full), "%s/%s", root, file);
    char *text = test_read_file(full);
    cr_assert_not_null(text, "%s", full);
    bool fenced = false;
    int number = 1;
    for (const char *line = text; *line != '\0'; number++) {
        const char *end = strchr(line, '\n');
        size_t len = end != NULL ? (size_t)(end - line) : strlen(line);
        if (strncmp(line, "```", 3) == 0) {
            fenced = !fenced;
        } else if (fenced) {
            check_command(root, file, number, line, len, p);
        } else {
            for (const char *at = line; (at = strstr(at, "](")) != NULL && at < line + len;) {
                const char *close = memchr(at + 2, ')', (size_t)(line + len - at - 2));
                if (close == NULL)
                    break;
                char link[1024];
                snprintf(link, sizeof(link), "%.*s", (int)(close - at - 2), at + 2);
                check_link(root, file, number, link, p);
                at = close;
            }
            for (const char *at = line; (at = memchr(at, '`', (size_t)(line + len - at))) != NULL;) {
                const char *close = memchr(at + 1, '`', (size_t)(line + len - at - 1));
                if (close == NULL)
                    break;
                char quoted[1024];
                snprintf(quoted, sizeof(quoted), "%.*s", (int)(close - at - 1), at + 1);
                check_quoted_path(root, file, number, quoted, p);
                check_command(root, file, number, quoted, strlen(quoted), p);
                at = close + 1;
            }
        }
        if (end == NULL)
            break;
        line = end + 1;
    }
    free(text);
}

/* README.md, the .md files in docs/ and every top-level folder's README.md. */
static int check_tree(const char *root, problems_t *p)
{
    int documents = 0;
    if (exists(root, "README.md")) {
        check_document(root, "README.md", p);
        documents++;
    }
    DIR *top = opendir(root);
    cr_assert_not_null(top, "%s", root);
    for (struct dirent *entry; (entry = readdir(top)) != NULL;) {
        if (entry->d_name[0] == '.' || strncmp(entry->d_name, "build", 5) == 0)
            continue;
        char name[600];
        snprintf(name, sizeof(name), "%s/README.md", entry->d_name);
        if (exists(root, name)) {
            check_document(root, name, p);
            documents++;
        }
    }
    closedir(top);
    char docs[1100];
    snprintf(docs, sizeof(docs), "%s/docs", root);
    DIR *folder = opendir(docs);
    for (struct dirent *entry; folder != NULL && (entry = readdir(folder)) != NULL;) {
        size_t len = strlen(entry->d_name);
        if (len < 4 || strcmp(entry->d_name + len - 3, ".md") != 0 ||
            strcmp(entry->d_name, "README.md") == 0)
            continue;
        char name[600];
        snprintf(name, sizeof(name), "docs/%s", entry->d_name);
        check_document(root, name, p);
        documents++;
    }
    if (folder != NULL)
        closedir(folder);
    return documents;
}

Test(docs, the_documents_name_only_what_exists, .timeout = 30)
{
    problems_t p = {0};
    int documents = check_tree(KVIO_SOURCE_DIR, &p);
    cr_expect_geq(documents, 10, "README.md, docs/ and the folders' READMEs");
    cr_expect_eq(p.count, 0, "%s", p.text);
}

Test(docs, a_planted_mistake_of_each_kind_is_named, .timeout = 30)
{
    char *root = test_tmpdir();
    char path[1100];
    snprintf(path, sizeof(path), "%s/docs", root);
    cr_assert_eq(mkdir(path, 0755), 0);
    snprintf(path, sizeof(path), "%s/workloads", root);
    cr_assert_eq(mkdir(path, 0755), 0);
    snprintf(path, sizeof(path), "%s/workloads/presets", root);
    cr_assert_eq(mkdir(path, 0755), 0);
    free(test_write_file(root, "workloads/presets/chat.yaml", "duration: 1s\n"));
    free(test_write_file(root, "docs/guide.md", "# Guide\n\n## The `engine`: vLLM v1\n\n"
                                                "Back to [the start](../README.md).\n"));
    free(test_write_file(root, "README.md",
                         "# Tool\n\n"
                         "See [the guide](docs/guide.md#the-engine-vllm-v1) and "
                         "`workloads/presets/chat.yaml`.\n"
                         "A [broken link](docs/missing.md) here.\n"
                         "A [wrong heading](docs/guide.md#the-scheduler).\n"
                         "Quoted: `tests/fixtures/gone.jsonl`, `results/mine` and "
                         "`tests/fixtures/TARGET-name`.\n"
                         "\n```sh\nkvio run chat --set duration=5s\n"
                         "kvio compare chaat --vary x=1,2\nkvio run my.yaml\n"
                         "kvio run MY.yaml\n```\n"));
    problems_t p = {0};
    cr_expect_eq(check_tree(root, &p), 2);
    cr_expect_eq(p.count, 5, "%s", p.text);
    cr_expect(test_contains(p.text, "README.md:4: link to a missing file: docs/missing.md"), "%s",
              p.text);
    cr_expect(test_contains(p.text, "README.md:5: link to a missing heading"), "%s", p.text);
    cr_expect(test_contains(p.text, "README.md:6: quoted path does not exist: tests/fixtures/gone"),
              "%s", p.text);
    cr_expect(test_contains(p.text, "README.md:10: command names no preset: chaat"), "%s", p.text);
    cr_expect(test_contains(p.text, "README.md:11: command names a missing file: my.yaml"), "%s",
              p.text);
    test_rmtree(root);
    free(root);
}

/* #52: every test names its own timeout (Criterion's .timeout), so a hung
 * test fails by itself instead of holding the suite until ctest's limit:
 * each Test( or ParameterizedTest( at a line's start in text (file, for
 * the message) whose arguments lack .timeout is a problem. */
static void check_timeouts(const char *file, const char *text, problems_t *p)
{
    int line = 1;
    for (const char *at = text; *at != '\0'; at++) {
        bool start = at == text || at[-1] == '\n';
        if (at != text && at[-1] == '\n')
            line++;
        if (!start || (strncmp(at, "Test(", 5) != 0 && strncmp(at, "ParameterizedTest(", 18) != 0))
            continue;
        const char *open = strchr(at, '(');
        int depth = 0;
        const char *end = open;
        for (; *end != '\0'; end++) {
            depth += *end == '(' ? 1 : *end == ')' ? -1 : 0;
            if (depth == 0)
                break;
        }
        char name[160];
        const char *comma = strchr(open, ',');
        size_t skip = comma != NULL && comma < end ? (size_t)(comma - open) + 1 : 1;
        while (open[skip] == ' ' || open[skip] == '\n')
            skip++;
        size_t length = strcspn(open + skip, ",)\n");
        snprintf(name, sizeof(name), "%.*s", (int)length, open + skip);
        bool timed = false;
        for (const char *t = open; t < end && !timed; t++)
            timed = strncmp(t, ".timeout", 8) == 0;
        if (!timed)
            problem(p, file, line, "test without a .timeout", name);
    }
}

Test(docs, every_test_has_a_timeout, .timeout = 30)
{
    char folder_path[1100];
    snprintf(folder_path, sizeof(folder_path), "%s/tests", KVIO_SOURCE_DIR);
    DIR *folder = opendir(folder_path);
    cr_assert_not_null(folder);
    problems_t p = {0};
    size_t files = 0;
    for (struct dirent *entry = readdir(folder); entry != NULL; entry = readdir(folder)) {
        size_t length = strlen(entry->d_name);
        if (strncmp(entry->d_name, "test_", 5) != 0 || length < 3 ||
            strcmp(entry->d_name + length - 2, ".c") != 0)
            continue;
        char path[1400];
        snprintf(path, sizeof(path), "%s/%s", folder_path, entry->d_name);
        char *text = test_read_file(path);
        cr_assert_not_null(text, "%s", path);
        char file[300];
        snprintf(file, sizeof(file), "tests/%s", entry->d_name);
        check_timeouts(file, text, &p);
        free(text);
        files++;
    }
    closedir(folder);
    cr_expect_geq(files, 30);
    cr_expect_eq(p.count, 0, "%s", p.text);
    /* A planted test without one is named, with its line. */
    problems_t planted = {0};
    check_timeouts("tests/test_x.c",
                   "#include <x.h>\nTest(x, timed, .timeout = 5)\n{\n}\n\n"
                   "Test(x, a_long_name_on_two,\n     .init = setup)\n{\n}\n"
                   "ParameterizedTest(int *n, x, each, .timeout = 5)\n{\n}\n",
                   &planted);
    cr_expect_eq(planted.count, 1, "%s", planted.text);
    cr_expect(test_contains(planted.text, "tests/test_x.c:6: test without a .timeout"), "%s",
              planted.text);
    cr_expect(test_contains(planted.text, "a_long_name_on_two"), "%s", planted.text);
}
