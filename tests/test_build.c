#include "testutil.h"

START_TEST(placeholder_build) { ck_assert_int_eq(tt_version_number(), TT_VERSION_NUMBER); }
END_TEST

int main(void) {
    Suite *s = suite_create("build");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, placeholder_build);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
