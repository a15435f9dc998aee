#include "testutil.h"

START_TEST(placeholder_eval) { ck_assert_int_eq(tt_version_number(), TT_VERSION_NUMBER); }
END_TEST

int main(void) {
    Suite *s = suite_create("eval");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, placeholder_eval);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
