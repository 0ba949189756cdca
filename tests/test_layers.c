/* The layering check (scripts/check_layers.sh): main's tree follows the
 * module order and no two of its library's files call each other, and a
 * planted include that points up, one that reaches into another folder's
 * private header, a header no module owns, headers in an include circle,
 * files that call each other and an over-long serve function each fail it,
 * naming the file and line (or the circle). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "tests/helpers.h"

#define CHECK KVIO_SOURCE_DIR "/scripts/check_layers.sh"

static test_run_t check(const char *root)
{
    const char *argv[] = {"bash", CHECK, root, NULL};
    return test_exec(NULL, argv);
}

/* The check with the library's object files: call circles too. */
static test_run_t check_calls(const char *root, const char *objects)
{
    const char *argv[] = {"bash", CHECK, root, objects, NULL};
    return test_exec(NULL, argv);
}

Test(layers, main_follows_the_module_order, .timeout = 120)
{
    test_run_t run = check_calls(KVIO_SOURCE_DIR, KVIO_LIB_OBJECTS);
    cr_expect_eq(run.status, 0, "the check fails on main:\n%s", run.err);
    test_run_free(&run);
}

/* A small tree: xfer/ and train/ with their public headers. */
static char *planted_tree(void)
{
    char *root = test_tmpdir();
    const char *folders[] = {"include", "include/kvio", "xfer", "train", "serve"};
    for (size_t i = 0; i < sizeof(folders) / sizeof(folders[0]); i++) {
        char path[512];
        snprintf(path, sizeof(path), "%s/%s", root, folders[i]);
        cr_assert_eq(mkdir(path, 0755), 0, "%s", path);
    }
    free(test_write_file(root, "include/kvio/xfer.h", "#include \"kvio/status.h\"\n"));
    free(test_write_file(root, "include/kvio/train.h", "#include \"kvio/xfer.h\"\n"));
    free(test_write_file(root, "include/kvio/status.h", "\n"));
    free(test_write_file(root, "train/train.c", "#include \"kvio/train.h\"\n"));
    free(test_write_file(root, "xfer/xfer.c", "#include \"kvio/xfer.h\"\n"));
    return root;
}

Test(layers, a_clean_planted_tree_passes, .timeout = 60)
{
    char *root = planted_tree();
    test_run_t run = check(root);
    cr_expect_eq(run.status, 0, "%s", run.err);
    test_run_free(&run);
    test_rmtree(root);
    free(root);
}

typedef struct planted {
    const char *file, *text; /* what is planted */
    const char *expected;    /* what the failure names */
} planted_t;

static const planted_t plantings[] = {
    {"xfer/xfer_up.c", "#include \"kvio/xfer.h\"\n#include \"kvio/train.h\"\n",
     "xfer/xfer_up.c:2: xfer includes kvio/train.h of train, which is not below it"},
    {"include/kvio/xfer.h", "#include \"kvio/train.h\"\n",
     "include/kvio/xfer.h:1: xfer includes kvio/train.h of train"},
    {"train/peek.c", "#include \"xfer/xfer_int.h\"\n",
     "train/peek.c:1: train includes xfer/xfer_int.h, private to xfer/"},
    {"xfer/odd.c", "#include \"kvio/mystery.h\"\n",
     "xfer/odd.c:1: includes kvio/mystery.h, which belongs to no module"},
};

Test(layers, each_planted_breach_fails_naming_file_and_line, .timeout = 60)
{
    for (size_t i = 0; i < sizeof(plantings) / sizeof(plantings[0]); i++) {
        char *root = planted_tree();
        free(test_write_file(root, plantings[i].file, plantings[i].text));
        test_run_t run = check(root);
        cr_expect_eq(run.status, 1, "%s: exit %d", plantings[i].file, run.status);
        cr_expect(test_contains(run.err, plantings[i].expected), "%s: expected \"%s\" in:\n%s",
                  plantings[i].file, plantings[i].expected, run.err);
        test_run_free(&run);
        test_rmtree(root);
        free(root);
    }
}

/* Two private headers that include each other: a circle the compiler's
 * include guards hide, named as its chain. */
Test(layers, headers_that_include_each_other_fail_naming_the_circle, .timeout = 60)
{
    char *root = planted_tree();
    free(test_write_file(root, "serve/loop_int.h", "#include \"serve/pd_int.h\"\n"));
    free(test_write_file(root, "serve/pd_int.h", "#include \"kvio/status.h\"\n"
                                                 "#include \"serve/loop_int.h\"\n"));
    test_run_t run = check(root);
    cr_expect_eq(run.status, 1, "exit %d", run.status);
    cr_expect(test_contains(run.err, "include circle: serve/loop_int.h -> serve/pd_int.h -> "
                                     "serve/loop_int.h") ||
                  test_contains(run.err, "include circle: serve/pd_int.h -> serve/loop_int.h -> "
                                         "serve/pd_int.h"),
              "%s", run.err);
    test_run_free(&run);
    test_rmtree(root);
    free(root);
}

Test(layers, a_serve_function_over_150_lines_fails, .timeout = 60)
{
    char *root = planted_tree();
    size_t size = 64 * 200;
    char *text = malloc(size);
    cr_assert_not_null(text);
    size_t at = (size_t)snprintf(text, size, "static int long_step(int x)\n{\n");
    for (int i = 0; i < 151; i++)
        at += (size_t)snprintf(text + at, size - at, "    x += %d;\n", i);
    snprintf(text + at, size - at, "    return x;\n}\n");
    free(test_write_file(root, "serve/loop.c", text));
    free(text);
    test_run_t run = check(root);
    cr_expect_eq(run.status, 1);
    cr_expect(test_contains(run.err, "serve/loop.c:1: long_step is 152 lines"), "%s", run.err);
    test_run_free(&run);
    test_rmtree(root);
    free(root);
}

/* Compiles root/NAME (a one-line C file of the given text) into
 * root/objects/NAME.o, as CMake lays the library's objects out. */
static void planted_object(const char *root, const char *name, const char *text)
{
    char *source = test_write_file(root, name, text);
    char object[512];
    snprintf(object, sizeof(object), "%s/objects/%s.o", root, name);
    const char *argv[] = {"cc", "-c", source, "-o", object, NULL};
    test_run_t run = test_exec(NULL, argv);
    cr_assert_eq(run.status, 0, "cc %s: %s", name, run.err);
    test_run_free(&run);
    free(source);
}

/* Two files of a module that call each other: a circle the linker accepts,
 * named as its chain; the same call one way only passes. */
Test(layers, files_that_call_each_other_fail_naming_the_circle, .timeout = 60)
{
    char *root = planted_tree();
    char objects[512], folder[600];
    snprintf(objects, sizeof(objects), "%s/objects", root);
    snprintf(folder, sizeof(folder), "%s/xfer", objects);
    cr_assert_eq(mkdir(objects, 0755), 0);
    cr_assert_eq(mkdir(folder, 0755), 0);
    planted_object(root, "xfer/a.c", "int b(void);\nint a(void) { return b(); }\n");
    planted_object(root, "xfer/b.c", "int b(void) { return 1; }\n");
    test_run_t run = check_calls(root, objects);
    cr_expect_eq(run.status, 0, "a calls b alone: %s", run.err);
    test_run_free(&run);

    planted_object(root, "xfer/b.c", "int a(void);\nint b(void) { return a() + 1; }\n");
    run = check_calls(root, objects);
    cr_expect_eq(run.status, 1, "exit %d", run.status);
    cr_expect(test_contains(run.err, "call circle: xfer/a.c -> xfer/b.c -> xfer/a.c") ||
                  test_contains(run.err, "call circle: xfer/b.c -> xfer/a.c -> xfer/b.c"),
              "%s", run.err);
    test_run_free(&run);
    test_rmtree(root);
    free(root);
}
