// Numbers for people: thousands separators, binary byte units, time units. One definition for every view.
#pragma once

#include <string>

namespace kwb {

std::string grouped_count(double v);   // 1234567.4 -> "1,234,567"
std::string bytes_text(double bytes);  // "512 B", "1.5 KiB", "2.0 MiB", "1.25 GiB"
std::string time_text(double ns);      // "350 ns", "2.68 us", "1.50 ms", "2.00 s"

}  // namespace kwb
