// JSON text from values that may hold strings a candidate controls (its output, its file names, its build log):
// bytes that are not valid UTF-8 become U+FFFD instead of an exception, so a candidate's bytes can never turn into
// kwb's internal error. Every JSON kwb writes goes through here.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace kwb {

inline std::string json_text(const nlohmann::json& j, int indent = -1) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace kwb
