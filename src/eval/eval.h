/* Evaluation internals: the special functions behind tt_ttest_paired, exposed to the
 * unit tests. Everything else of the module lives in eval.c behind the public API. */
#ifndef TT_EVAL_H
#define TT_EVAL_H

#include "common/common.h"

/* Regularized incomplete beta function I_x(a, b) for a, b > 0 and 0 <= x <= 1,
 * evaluated by its continued fraction (modified Lentz); NaN for arguments outside
 * that domain. log B(a,b) is formed from lgamma values of magnitude about
 * (a+b) log(a+b), whose rounding bounds the relative accuracy: ~1e-14 for a, b below
 * ten, ~1e-12 at a + b = 800, ~1e-11 at 10^4 -- far below what a p-value needs. */
double tt_incbeta(double a, double b, double x);

/* Two-sided tail of Student's t distribution with df > 0 degrees of freedom:
 * P(|T| >= |t|) = I_{df/(df+t^2)}(df/2, 1/2). t may be +-inf (gives 0). */
double tt_student_t_p2(double t, double df);

#endif
