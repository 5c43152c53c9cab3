// Normal, Student t and F distribution functions, written out so that intervals do not depend on a statistics
// library. Arguments outside the domain throw std::invalid_argument.
#pragma once

namespace kwb::stats {

double normal_cdf(double x);
// Inverse of normal_cdf for p in (0, 1); Wichura's AS241 (PPND16), relative error about 1e-16.
double normal_quantile(double p);

// P(T <= t) for Student's t with df > 0 degrees of freedom (df need not be an integer).
double student_t_cdf(double t, double df);
// Inverse of student_t_cdf for p in (0, 1), df > 0; accurate to about 1e-9 relative up to df = 1e7. Beyond that
// both functions return the normal values, which differ from t's by less than 3e-7.
double student_t_quantile(double p, double df);

// P(F > f) for Snedecor's F with df1, df2 > 0 degrees of freedom: the p-value of an analysis of variance's F test.
// f <= 0 gives 1.
double f_upper_tail(double f, double df1, double df2);

}  // namespace kwb::stats
