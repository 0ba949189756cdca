/* Every registry walked: each plug-in has a name, a one-line help, an
 * options table (an empty one when it has no keys) and a row in its kind's
 * test file, and names are unique within a kind. A plug-in added without
 * its help or its test fails here. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvio/run.h"
#include "tests/helpers.h"

/* Where each kind's plug-ins are tested, and how a test row names one
 * (a printf format taking the name). */
typedef struct kind_test {
    const char *kind;
    const char *file;
    const char *row;
} kind_test_t;

static const kind_test_t kind_tests[] = {
    {"scheduling policy", "tests/test_sched.c", "{policy: %s"},
    {"output-length predictor", "tests/test_sched.c", "{predictor: %s"},
    {"router", "tests/test_router.c", "{\"{policy: %s"},
    {"eviction policy", "tests/test_kvcache.c", "{.policy = \"%s\", "},
    {"tier", "tests/test_tier.c", "{\"%s\", "},
    {"executor", "tests/test_executor.c", "{\"%s\", "},
    {"transport", "tests/test_xfer.c", "{\"%s\", "},
};

static const kind_test_t *kind_test(const char *kind)
{
    for (size_t i = 0; i < sizeof(kind_tests) / sizeof(kind_tests[0]); i++)
        if (strcmp(kind_tests[i].kind, kind) == 0)
            return &kind_tests[i];
    return NULL;
}

Test(plugins, every_registry_entry_has_help_options_and_a_test, .timeout = 10)
{
    size_t kinds = 0;
    for (const kvio_registry_t *const *at = kvio_registries; *at != NULL; at++, kinds++) {
        const kvio_registry_t *registry = *at;
        cr_assert_gt(registry->count, 0, "%s: an empty registry", registry->kind);
        const kind_test_t *test = kind_test(registry->kind);
        cr_assert_not_null(test, "%s: no test file is listed for this kind", registry->kind);
        char path[512];
        snprintf(path, sizeof(path), "%s/%s", KVIO_SOURCE_DIR, test->file);
        char *source = test_read_file(path);
        cr_assert_not_null(source, "%s: cannot read", path);
        for (size_t i = 0; i < registry->count; i++) {
            const kvio_plugin_t *plugin = registry->plugins[i];
            cr_assert_not_null(plugin->name, "%s %zu: no name", registry->kind, i);
            cr_expect(plugin->help != NULL && plugin->help[0] != '\0' &&
                          strchr(plugin->help, '\n') == NULL,
                      "%s %s: no one-line help", registry->kind, plugin->name);
            cr_expect_not_null(plugin->options, "%s %s: no options table (kvio_no_options "
                               "when it has no keys)", registry->kind, plugin->name);
            cr_expect(plugin->options == NULL || plugin->options[0].key == NULL ||
                          plugin->options_size > 0,
                      "%s %s: keys but no options_size", registry->kind, plugin->name);
            cr_expect_eq(kvio_registry_find(registry, plugin->name), plugin,
                         "%s %s: the name is taken twice", registry->kind, plugin->name);
            char row[128];
            snprintf(row, sizeof(row), test->row, plugin->name);
            cr_expect(test_contains(source, row), "%s %s: no test row (\"%s\") in %s",
                      registry->kind, plugin->name, row, test->file);
        }
        free(source);
    }
    cr_expect_geq(kinds, 2);
}

Test(plugins, kvio_list_names_every_plugin, .timeout = 30)
{
    test_run_t run = test_kvio(NULL, "list", NULL);
    cr_assert_eq(run.status, 0, "%s", run.err);
    for (const kvio_registry_t *const *at = kvio_registries; *at != NULL; at++) {
        cr_expect(test_contains(run.out, (*at)->kind), "kvio list: no %s", (*at)->kind);
        for (size_t i = 0; i < (*at)->count; i++) {
            char line[128];
            snprintf(line, sizeof(line), "  %-16s %s", (*at)->plugins[i]->name,
                     (*at)->plugins[i]->help);
            cr_expect(test_contains(run.out, line), "kvio list: no line \"%s\"", line);
        }
    }
    test_run_free(&run);
}
