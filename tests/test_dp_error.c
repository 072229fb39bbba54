/*
 * test_dp_error.c: the data-plane error table (common/format/dp_error.c) is whole and consistent: every code
 * fits the header's `c` field, codes are unique, lookup finds each row and nothing else, the worker's
 * actions are the ones the protocol promises for the codes it names, and docs/PROTOCOL.md and
 * schemas/blob.md each list exactly the codes of the table (run from the repository root, as
 * tests/run.sh does).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "format/blob.h"
#include "format/dp_error.h"

static void codes_are_unique_and_fit_the_header(void **state)
{
    (void)state;
    blob_header h;
    for (int i = 0; i < DP_ERR_COUNT; i++) {
        const dp_err_info *row = dp_err_row((dp_err)i);
        assert_non_null(row->code);
        assert_true(strlen(row->code) > 0 && strlen(row->code) < sizeof h.code);
        assert_true(strlen(row->meaning) > 10);
        assert_ptr_equal(dp_err_lookup(row->code), row);
        assert_string_equal(dp_err_code((dp_err)i), row->code);
        for (int j = 0; j < i; j++) assert_string_not_equal(dp_err_row((dp_err)j)->code, row->code);
    }
    assert_null(dp_err_lookup("NOSUCHCODE"));
    assert_null(dp_err_lookup(""));
    assert_null(dp_err_lookup("stale")); /* codes are case-sensitive on the wire */
}

static void actions_are_the_protocols(void **state)
{
    (void)state;
    assert_int_equal(dp_err_lookup("STALE")->action, DP_ACT_REFETCH);
    assert_int_equal(dp_err_lookup("UNKNOWN_WORKER")->action, DP_ACT_REREGISTER);
    assert_int_equal(dp_err_lookup("CORRUPT")->action, DP_ACT_REPAIR);
    assert_int_equal(dp_err_lookup("NOTREADY")->action, DP_ACT_RETRY);
    assert_int_equal(dp_err_lookup("REDIS")->action, DP_ACT_RETRY);
    assert_int_equal(dp_err_lookup("BUSY")->action, DP_ACT_RETRY);
    assert_int_equal(dp_err_lookup("NAN")->action, DP_ACT_FAIL);
    /* a refusal for the server's own state is never counted against the worker */
    for (int i = 0; i < DP_ERR_COUNT; i++) {
        const dp_err_info *row = dp_err_row((dp_err)i);
        if (row->action == DP_ACT_RETRY || row->action == DP_ACT_REPAIR) assert_int_equal(row->recorded, 0);
    }
}

/* The codes listed in the markdown table that follows the line containing `heading` in path: rows
 * "| `CODE` | ..." up to the first line that is not a table row. Returns how many. */
static int doc_codes(const char *path, const char *heading, char codes[][32], int max)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        fail_msg("cannot open %s (run from the repository root)", path);
        return 0;
    }
    char line[4096];
    int in_section = 0, in_table = 0, n = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        if (!in_section) {
            in_section = strstr(line, heading) != NULL;
            continue;
        }
        if (line[0] == '|') {
            in_table = 1;
            const char *a = strstr(line, "| `");
            const char *b = a ? strchr(a + 3, '`') : NULL;
            if (a == line && b != NULL && b - (a + 3) < 32 && n < max) {
                memcpy(codes[n], a + 3, (size_t)(b - (a + 3)));
                codes[n][b - (a + 3)] = '\0';
                n++;
            }
        } else if (in_table) {
            break;
        }
    }
    fclose(f);
    return n;
}

static void check_doc(const char *path, const char *heading)
{
    char codes[64][32];
    int n = doc_codes(path, heading, codes, 64);
    if (n != DP_ERR_COUNT) fail_msg("%s lists %d codes under '%s', the table has %d", path, n, heading, DP_ERR_COUNT);
    for (int i = 0; i < n; i++)
        if (dp_err_lookup(codes[i]) == NULL)
            fail_msg("%s lists %s, which is not in common/format/dp_error.c", path, codes[i]);
    for (int i = 0; i < DP_ERR_COUNT; i++) {
        int found = 0;
        for (int j = 0; j < n; j++) found |= strcmp(codes[j], dp_err_code((dp_err)i)) == 0;
        if (!found) fail_msg("%s does not list %s", path, dp_err_code((dp_err)i));
    }
}

static void docs_list_the_table_whole(void **state)
{
    (void)state;
    check_doc("docs/PROTOCOL.md", "### Data-plane error codes");
    check_doc("schemas/blob.md", "### Error codes of `err`");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(codes_are_unique_and_fit_the_header),
        cmocka_unit_test(actions_are_the_protocols),
        cmocka_unit_test(docs_list_the_table_whole),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
