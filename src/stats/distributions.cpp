#include "stats/distributions.h"

#include "stats/checks.h"

#include <cmath>
#include <numbers>
#include <stdexcept>
#include <string>

namespace kwb::stats {

namespace {

// Beyond this many degrees of freedom t quantiles differ from normal ones by less than 3e-7, while lgamma of df/2
// (about 7e7 here) starts losing the digits the incomplete beta needs, so the normal distribution is used instead.
constexpr double k_normal_limit_df = 1e7;
constexpr int k_max_iterations = 10000;

void require_probability(double p, const char* what) {
  if (!(p > 0.0 && p < 1.0)) {
    throw std::invalid_argument(std::string(what) + ": probability must lie strictly between 0 and 1, got " +
                                detail::format_number(p));
  }
}

void require_df(double df, const char* what) {
  if (!(df > 0.0)) {
    throw std::invalid_argument(std::string(what) + ": degrees of freedom must be > 0, got " +
                                detail::format_number(df));
  }
}

double log_beta(double a, double b) { return std::lgamma(a) + std::lgamma(b) - std::lgamma(a + b); }

// Continued fraction for the incomplete beta function by the modified Lentz method (Numerical Recipes, 3rd ed.,
// section 6.4, betacf). Converges quickly for x < (a + 1) / (a + b + 2).
double beta_continued_fraction(double x, double a, double b) {
  constexpr double tiny = 1e-300;
  constexpr double epsilon = 1e-15;
  const auto guard = [](double v) { return std::fabs(v) < tiny ? tiny : v; };
  double c = 1.0;
  double d = 1.0 / guard(1.0 - (a + b) * x / (a + 1.0));
  double h = d;
  for (int m = 1; m <= k_max_iterations; ++m) {
    const double md = m;
    const double even = md * (b - md) * x / ((a - 1.0 + 2.0 * md) * (a + 2.0 * md));
    d = 1.0 / guard(1.0 + even * d);
    c = guard(1.0 + even / c);
    h *= d * c;
    const double odd = -(a + md) * (a + b + md) * x / ((a + 2.0 * md) * (a + 1.0 + 2.0 * md));
    d = 1.0 / guard(1.0 + odd * d);
    c = guard(1.0 + odd / c);
    const double delta = d * c;
    h *= delta;
    if (std::fabs(delta - 1.0) < epsilon) return h;
  }
  throw std::runtime_error("incomplete beta: continued fraction did not converge for a=" + detail::format_number(a) +
                           ", b=" + detail::format_number(b) + ", x=" + detail::format_number(x));
}

// Regularized incomplete beta I_x(a, b). Takes y = 1 - x separately so that callers can pass it without the
// cancellation of computing 1 - x near x = 1.
double regularized_incomplete_beta(double x, double y, double a, double b) {
  if (x <= 0.0) return 0.0;
  if (y <= 0.0) return 1.0;
  const double front = std::exp(a * std::log(x) + b * std::log(y) - log_beta(a, b));
  if (x < (a + 1.0) / (a + b + 2.0)) return front * beta_continued_fraction(x, a, b) / a;
  return 1.0 - front * beta_continued_fraction(y, b, a) / b;
}

// P(T > t) for t >= 0: 0.5 * I_{df/(df+t^2)}(df/2, 1/2). Written with r = t^2/df so that huge t (r = inf) gives
// x = 0, y = 1 instead of inf/inf.
double t_upper_tail(double t, double df) {
  const double r = t * t / df;
  return 0.5 * regularized_incomplete_beta(1.0 / (1.0 + r), 1.0 / (1.0 + 1.0 / r), 0.5 * df, 0.5);
}

double t_density(double t, double df) {
  return std::exp(-0.5 * std::log(df) - log_beta(0.5 * df, 0.5) - 0.5 * (df + 1.0) * std::log1p(t * t / df));
}

}  // namespace

double normal_cdf(double x) {
  if (std::isnan(x)) throw std::invalid_argument("normal_cdf: argument is NaN");
  return 0.5 * std::erfc(-x / std::numbers::sqrt2);
}

// Wichura, M. J. (1988), Algorithm AS 241: The percentage points of the normal distribution, Applied Statistics
// 37(3), 477-484. Coefficients of PPND16 as published (also used by CPython's statistics.NormalDist).
double normal_quantile(double p) {
  require_probability(p, "normal_quantile");
  const double q = p - 0.5;
  if (std::fabs(q) <= 0.425) {
    const double r = 0.180625 - q * q;
    return q *
           (((((((2.5090809287301226727e+3 * r + 3.3430575583588128105e+4) * r + 6.7265770927008700853e+4) * r +
                4.5921953931549871457e+4) *
                   r +
               1.3731693765509461125e+4) *
                  r +
              1.9715909503065514427e+3) *
                 r +
             1.3314166789178437745e+2) *
                r +
            3.3871328727963666080e+0) /
           (((((((5.2264952788528545610e+3 * r + 2.8729085735721942674e+4) * r + 3.9307895800092710610e+4) * r +
                2.1213794301586595867e+4) *
                   r +
               5.3941960214247511077e+3) *
                  r +
              6.8718700749205790830e+2) *
                 r +
             4.2313330701600911252e+1) *
                r +
            1.0);
  }
  double r = std::sqrt(-std::log(q < 0.0 ? p : 1.0 - p));
  double x;
  if (r <= 5.0) {
    r -= 1.6;
    x = (((((((7.7454501427834140764e-4 * r + 2.2723844989269184583e-2) * r + 2.4178072517745061177e-1) * r +
             1.2704582524523683826e+0) *
                r +
            3.6478483247632046050e+0) *
               r +
           5.7694972214606914055e+0) *
              r +
          4.6303378461565452959e+0) *
             r +
         1.4234371107496835773e+0) /
        (((((((1.0507500716444168432e-9 * r + 5.4759380849953449460e-4) * r + 1.5198666563616457197e-2) * r +
             1.4810397642748007459e-1) *
                r +
            6.8976733498510000455e-1) *
               r +
           1.6763848301838038494e+0) *
              r +
          2.0531916266377588219e+0) *
             r +
         1.0);
  } else {
    r -= 5.0;
    x = (((((((2.0103343992922881327e-7 * r + 2.7115555687434875782e-5) * r + 1.2426609473880784386e-3) * r +
             2.6532189526576123093e-2) *
                r +
            2.9656057182850489123e-1) *
               r +
           1.7848265399172913358e+0) *
              r +
          5.4637849111641143699e+0) *
             r +
         6.6579046435011037772e+0) /
        (((((((2.0442631033899397856e-15 * r + 1.4215117583164458887e-7) * r + 1.8463183175100546818e-5) * r +
             7.8686913114561325910e-4) *
                r +
            1.4875361290850614853e-2) *
               r +
           1.3692988092273580531e-1) *
              r +
          5.9983220655588793769e-1) *
             r +
         1.0);
  }
  return q < 0.0 ? -x : x;
}

double student_t_cdf(double t, double df) {
  require_df(df, "student_t_cdf");
  if (std::isnan(t)) throw std::invalid_argument("student_t_cdf: argument is NaN");
  if (df > k_normal_limit_df) return normal_cdf(t);
  const double tail = t_upper_tail(std::fabs(t), df);
  return t < 0.0 ? tail : 1.0 - tail;
}

double f_upper_tail(double f, double df1, double df2) {
  require_df(df1, "f_upper_tail");
  require_df(df2, "f_upper_tail");
  if (std::isnan(f)) throw std::invalid_argument("f_upper_tail: argument is NaN");
  if (f <= 0.0) return 1.0;
  // P(F > f) = I_x(df2/2, df1/2) with x = df2 / (df2 + df1 f) (Abramowitz & Stegun 26.6.2), y = 1 - x written out
  // so that a huge f gives x = 0 rather than a rounded 1 - 1.
  const double r = df1 * f / df2;
  return regularized_incomplete_beta(1.0 / (1.0 + r), 1.0 / (1.0 + 1.0 / r), 0.5 * df2, 0.5 * df1);
}

double student_t_quantile(double p, double df) {
  require_probability(p, "student_t_quantile");
  require_df(df, "student_t_quantile");
  if (df > k_normal_limit_df) return normal_quantile(p);
  if (p == 0.5) return 0.0;
  // Solve P(T > x) = q for x > 0 by Newton's method. The tail is convex and decreasing on x > 0, and t quantiles
  // lie beyond normal ones (the t density is flatter at 0 and crosses the normal once), so starting from the normal
  // quantile every step moves right without overshooting. A step that is not clearly positive means the iterate has
  // reached the rounding floor of the tail itself.
  const double q = p < 0.5 ? p : 1.0 - p;
  double x = -normal_quantile(q);
  for (int i = 0; i < k_max_iterations; ++i) {
    const double step = (t_upper_tail(x, df) - q) / t_density(x, df);
    x += step;
    if (!(step > 1e-13 * x)) return p < 0.5 ? -x : x;
  }
  throw std::runtime_error("student_t_quantile: Newton iteration did not converge for p=" + detail::format_number(p) +
                           ", df=" + detail::format_number(df));
}

}  // namespace kwb::stats
