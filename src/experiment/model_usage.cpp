#include "experiment/model_usage.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>

namespace kwb {

namespace {

std::uint64_t count(const nlohmann::json& usage, const char* key) {
  const auto it = usage.find(key);
  if (it == usage.end() || !it->is_number()) return 0;
  if (it->is_number_unsigned()) return it->get<std::uint64_t>();
  if (it->is_number_integer()) return static_cast<std::uint64_t>(std::max<std::int64_t>(0, it->get<std::int64_t>()));
  return static_cast<std::uint64_t>(std::max(0.0, it->get<double>()));
}

bool has(const nlohmann::json& usage, const char* key) { return usage.contains(key) && usage[key].is_number(); }

// One usage block, in whichever format: (input, output), and whether it had either count.
struct Counts {
  bool any = false;
  std::uint64_t input = 0, output = 0;
  bool has_input = false, has_output = false;
};

Counts counts_of(const nlohmann::json& usage) {
  Counts c;
  if (!usage.is_object()) return c;
  // OpenAI chat completions: prompt_tokens (cached ones included in it), completion_tokens.
  if (has(usage, "prompt_tokens") || has(usage, "completion_tokens")) {
    c.input = count(usage, "prompt_tokens");
    c.output = count(usage, "completion_tokens");
    c.has_input = has(usage, "prompt_tokens");
    c.has_output = has(usage, "completion_tokens");
  } else {
    // Anthropic and OpenAI responses: input_tokens, output_tokens; Anthropic bills its prompt cache apart.
    c.input = count(usage, "input_tokens") + count(usage, "cache_creation_input_tokens") +
              count(usage, "cache_read_input_tokens");
    c.output = count(usage, "output_tokens");
    c.has_input = has(usage, "input_tokens") || has(usage, "cache_creation_input_tokens") ||
                  has(usage, "cache_read_input_tokens");
    c.has_output = has(usage, "output_tokens");
  }
  c.any = c.has_input || c.has_output;
  return c;
}

// One JSON object of a response (the whole body, or one event's data) into `u`.
void take(const nlohmann::json& j, ModelUsage& u) {
  if (!j.is_object()) return;
  const std::string type = j.value("type", std::string());
  const nlohmann::json* usage = nullptr;
  const nlohmann::json* model_holder = &j;
  if (type == "message_start" && j.contains("message") && j["message"].is_object()) {
    model_holder = &j["message"];
    if (j["message"].contains("usage")) usage = &j["message"]["usage"];
  } else if ((type == "response.completed" || type == "response.done") && j.contains("response") &&
             j["response"].is_object()) {
    model_holder = &j["response"];
    if (j["response"].contains("usage")) usage = &j["response"]["usage"];
  } else if (j.contains("usage")) {
    usage = &j["usage"];
  }
  if (model_holder->contains("model") && (*model_holder)["model"].is_string()) {
    u.model = (*model_holder)["model"].get<std::string>();
  }
  if (usage == nullptr) return;
  const Counts c = counts_of(*usage);
  if (!c.any) return;
  u.found = true;
  // A stream's counts are running totals (Anthropic's message_delta gives the output so far): the last one given
  // stands, never a sum of them.
  if (c.has_input) u.input_tokens = std::max(u.input_tokens, c.input);
  if (c.has_output) u.output_tokens = std::max(u.output_tokens, c.output);
}

bool is_event_stream(std::string_view body) {
  const size_t first = body.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return false;
  const std::string_view start = body.substr(first);
  return start.starts_with("data:") || start.starts_with("event:") || start.starts_with("id:") ||
         start.starts_with(":");
}

}  // namespace

ModelUsage parse_model_usage(std::string_view body) {
  ModelUsage u;
  if (!is_event_stream(body)) {
    take(nlohmann::json::parse(body, nullptr, false), u);
    return u;
  }
  size_t at = 0;
  while (at < body.size()) {
    size_t end = body.find('\n', at);
    if (end == std::string_view::npos) end = body.size();
    std::string_view line = body.substr(at, end - at);
    at = end + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!line.starts_with("data:")) continue;
    line.remove_prefix(5);
    while (!line.empty() && line.front() == ' ') line.remove_prefix(1);
    if (line == "[DONE]") continue;
    take(nlohmann::json::parse(line, nullptr, false), u);
  }
  return u;
}

std::optional<double> price_usd(const ModelUsage& usage, const std::vector<ModelPrice>& prices) {
  for (const ModelPrice& p : prices) {
    const bool prefix = !p.model.empty() && p.model.back() == '*';
    const bool match = prefix ? usage.model.starts_with(std::string_view(p.model).substr(0, p.model.size() - 1))
                              : usage.model == p.model;
    if (!match) continue;
    return (static_cast<double>(usage.input_tokens) * p.input_usd_per_mtok +
            static_cast<double>(usage.output_tokens) * p.output_usd_per_mtok) /
           1e6;
  }
  return std::nullopt;
}

void ModelSpend::add(const ModelUsage& usage, const std::vector<ModelPrice>& prices) {
  ++requests;
  input_tokens += usage.input_tokens;
  output_tokens += usage.output_tokens;
  if (const std::optional<double> cost = price_usd(usage, prices)) {
    usd += *cost;
  } else if (usage.input_tokens + usage.output_tokens > 0 &&
             std::find(unpriced.begin(), unpriced.end(), usage.model) == unpriced.end()) {
    unpriced.push_back(usage.model);
  }
}

std::string over_budget(const ModelBudget& b, const ModelSpend& s) {
  if (b.requests && s.requests > *b.requests) return fmt::format("requests: {} of {}", s.requests, *b.requests);
  if (b.input_tokens && s.input_tokens > *b.input_tokens) {
    return fmt::format("input_tokens: {} of {}", s.input_tokens, *b.input_tokens);
  }
  if (b.output_tokens && s.output_tokens > *b.output_tokens) {
    return fmt::format("output_tokens: {} of {}", s.output_tokens, *b.output_tokens);
  }
  if (b.usd && !s.unpriced.empty()) {
    return fmt::format("usd: the model '{}' has no row in the price table, so the spend cannot be held to {} USD",
                       s.unpriced.front(), *b.usd);
  }
  if (b.usd && s.usd > *b.usd) return fmt::format("usd: {:.4f} of {}", s.usd, *b.usd);
  return "";
}

std::string refuse_next_request(const ModelBudget& b, const ModelSpend& s) {
  if (std::string over = over_budget(b, s); !over.empty()) return over;
  if (b.requests && s.requests >= *b.requests)
    return fmt::format("requests: {} of {} already sent", s.requests, *b.requests);
  return "";
}

std::string redact(std::string text, const std::vector<Secret>& secrets) {
  for (const Secret& s : secrets) {
    if (s.value.empty()) continue;
    const std::string mark = "[redacted:" + s.name + "]";
    for (size_t at = text.find(s.value); at != std::string::npos; at = text.find(s.value, at + mark.size())) {
      text.replace(at, s.value.size(), mark);
    }
  }
  return text;
}

}  // namespace kwb
