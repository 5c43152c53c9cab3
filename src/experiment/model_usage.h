// What a model endpoint's answer says it cost, for an arm that calls a hosted model (issue 43; docs/arms.md): the
// tokens parsed from the OpenAI-compatible formats (chat completions and responses) and the Anthropic messages
// format, whole (one JSON body) and streamed (server-sent events), priced from the experiment's table and held
// against the arm's budgets. Pure functions over text: the proxy that forwards an arm's requests (and records them)
// calls them on every response, and a replay calls them on the recorded ones, so both count the same.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kwb {

struct ModelUsage {
  bool found = false;  // the answer carried a usage block (a failed request may not)
  std::string model;   // as the answer names it ("" when it does not)
  // Prompt tokens, with the prompt cache's reads and writes (billed as input, at their own rates by some providers;
  // counted here as input, the budget's unit).
  std::uint64_t input_tokens = 0;
  std::uint64_t output_tokens = 0;
};

// The usage in a response body: a JSON object (OpenAI `usage.prompt_tokens`/`completion_tokens` or
// `input_tokens`/`output_tokens`, Anthropic `usage.input_tokens`/`output_tokens` and `cache_*_input_tokens`, a
// responses API `response.usage`), or a server-sent event stream (`data:` lines: OpenAI chunks whose last carries
// `usage`, Anthropic `message_start` then `message_delta` with the output count so far, `response.completed`).
// found is false when no usage is in it; a body that is not JSON or an event stream is that too, never an error.
ModelUsage parse_model_usage(std::string_view body);

// A price per million tokens, from the experiment file. `model` is a model's name, or a prefix ending in '*'
// ("claude-sonnet-4*"); the first row that matches prices.
struct ModelPrice {
  std::string model;
  double input_usd_per_mtok = 0.0;
  double output_usd_per_mtok = 0.0;
};
// The cost of `usage` in US dollars; nullopt when no row matches its model (an unpriced model fails a money budget:
// see over_budget).
std::optional<double> price_usd(const ModelUsage& usage, const std::vector<ModelPrice>& prices);

// An arm's limits, per attempt or per arm; an absent limit does not bind.
struct ModelBudget {
  std::optional<std::uint64_t> requests;
  std::optional<std::uint64_t> input_tokens;
  std::optional<std::uint64_t> output_tokens;
  std::optional<double> usd;
};

struct ModelSpend {
  std::uint64_t requests = 0;
  std::uint64_t input_tokens = 0;
  std::uint64_t output_tokens = 0;
  double usd = 0.0;
  std::vector<std::string> unpriced;  // models answered that no price row matched
  // One answered request.
  void add(const ModelUsage& usage, const std::vector<ModelPrice>& prices);
};

// Why `spent` is past `budget` ("" when it is not): the first limit passed, as "output_tokens: 10240 of 8000". A
// money budget with an unpriced model in the spend is passed too: its cost is unknown, so it cannot be shown within.
std::string over_budget(const ModelBudget& budget, const ModelSpend& spent);
// Why one more request may not be sent ("" when it may): the request limit reached, or a limit already passed.
std::string refuse_next_request(const ModelBudget& budget, const ModelSpend& spent);

// `text` with every occurrence of each secret (an API key) replaced by "[redacted:NAME]" (its variable's name), so
// that no record, transcript or report holds a key. Secrets shorter than 8 characters are still replaced.
struct Secret {
  std::string name;  // the environment variable that holds it
  std::string value;
};
std::string redact(std::string text, const std::vector<Secret>& secrets);

}  // namespace kwb
