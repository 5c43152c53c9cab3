#include "stats/alpha_spending_rule.h"

#include "stats/checks.h"

#include <numbers>
#include <stdexcept>
#include <string>

namespace kwb::stats {

AlphaSpendingRule::AlphaSpendingRule(double alpha, size_t min_blocks, unsigned growth_percent)
    : m_alpha(alpha), m_min_blocks(min_blocks), m_growth_percent(growth_percent) {
  if (!(alpha > 0.0 && alpha < 1.0)) {
    throw std::invalid_argument("AlphaSpendingRule: alpha must lie strictly between 0 and 1 (e.g. 0.05), got " +
                                detail::format_number(alpha));
  }
  if (min_blocks < k_smallest_min_blocks) {
    throw std::invalid_argument("AlphaSpendingRule: min_blocks must be >= " + std::to_string(k_smallest_min_blocks) +
                                ", got " + std::to_string(min_blocks));
  }
  if (growth_percent < 1) {
    throw std::invalid_argument("AlphaSpendingRule: growth_percent must be >= 1 (e.g. 50 for a factor of 1.5)");
  }
}

// Integer arithmetic so that the schedule is exact: a double factor of 1.1 makes 10 * 1.1 round up to 12.
size_t AlphaSpendingRule::look_after(size_t look) const { return look + (look * m_growth_percent + 99) / 100; }

bool AlphaSpendingRule::is_look(size_t blocks) const {
  size_t look = m_min_blocks;
  while (look < blocks) look = look_after(look);
  return look == blocks;
}

size_t AlphaSpendingRule::look_index(size_t blocks) const {
  size_t looks = 0;
  for (size_t look = m_min_blocks; look <= blocks; look = look_after(look)) ++looks;
  return looks;
}

size_t AlphaSpendingRule::next_look(size_t blocks) const {
  size_t look = m_min_blocks;
  while (look <= blocks) look = look_after(look);
  return look;
}

double AlphaSpendingRule::alpha_at_look(size_t k) const {
  if (k == 0) throw std::invalid_argument("AlphaSpendingRule: looks are numbered from 1, got look 0");
  const double kd = static_cast<double>(k);
  return m_alpha * (1.0 - k_final_share) * 6.0 / (std::numbers::pi * std::numbers::pi * kd * kd);
}

double AlphaSpendingRule::confidence_at_look(size_t k) const { return 1.0 - alpha_at_look(k); }

double AlphaSpendingRule::confidence_for_final(size_t looks_done) const {
  double spent = 0.0;
  for (size_t k = 1; k <= looks_done; ++k) spent += alpha_at_look(k);
  return 1.0 - (m_alpha - spent);
}

}  // namespace kwb::stats
