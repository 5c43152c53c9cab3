// What a model endpoint's answer cost (experiment/model_usage.h): usage parsed from the OpenAI-compatible and the
// Anthropic formats, whole and streamed, as the providers document them; prices; budgets; keys kept out of records.
#include "experiment/model_usage.h"

#include <gtest/gtest.h>

namespace kwb {
namespace {

TEST(ModelUsage, an_openai_chat_completion_gives_prompt_and_completion_tokens) {
  const ModelUsage u =
      parse_model_usage(R"({"id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-4o-2024-08-06",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 1200, "completion_tokens": 345, "total_tokens": 1545,
              "prompt_tokens_details": {"cached_tokens": 1024}}})");
  EXPECT_TRUE(u.found);
  EXPECT_EQ(u.model, "gpt-4o-2024-08-06");
  EXPECT_EQ(u.input_tokens, 1200u);  // cached tokens are part of prompt_tokens
  EXPECT_EQ(u.output_tokens, 345u);
}

TEST(ModelUsage, an_anthropic_message_counts_its_prompt_cache_as_input) {
  const ModelUsage u = parse_model_usage(R"({"id": "msg_1", "type": "message", "role": "assistant",
    "model": "claude-sonnet-4-20250514", "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
    "usage": {"input_tokens": 20, "cache_creation_input_tokens": 100, "cache_read_input_tokens": 3000,
              "output_tokens": 512}})");
  EXPECT_TRUE(u.found);
  EXPECT_EQ(u.model, "claude-sonnet-4-20250514");
  EXPECT_EQ(u.input_tokens, 3120u);
  EXPECT_EQ(u.output_tokens, 512u);
}

TEST(ModelUsage, an_anthropic_stream_takes_the_last_running_output_count) {
  const ModelUsage u = parse_model_usage(
      "event: message_start\n"
      "data: {\"type\": \"message_start\", \"message\": {\"id\": \"msg_1\", \"model\": \"claude-opus-4-1\", "
      "\"usage\": {\"input_tokens\": 472, \"output_tokens\": 2}}}\n\n"
      "event: content_block_delta\n"
      "data: {\"type\": \"content_block_delta\", \"index\": 0, \"delta\": {\"type\": \"text_delta\", \"text\": "
      "\"Hi\"}}\n\n"
      "event: message_delta\n"
      "data: {\"type\": \"message_delta\", \"delta\": {\"stop_reason\": \"end_turn\"}, \"usage\": {\"output_tokens\": "
      "15}}\n\n"
      "event: message_delta\n"
      "data: {\"type\": \"message_delta\", \"delta\": {}, \"usage\": {\"output_tokens\": 89}}\n\n"
      "event: message_stop\n"
      "data: {\"type\": \"message_stop\"}\n\n");
  EXPECT_TRUE(u.found);
  EXPECT_EQ(u.model, "claude-opus-4-1");
  EXPECT_EQ(u.input_tokens, 472u);
  EXPECT_EQ(u.output_tokens, 89u);  // running totals: the last, not their sum
}

TEST(ModelUsage, an_openai_stream_reads_the_usage_of_its_last_chunk) {
  const ModelUsage u = parse_model_usage(
      "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-4o-mini\",\"choices\":[{\"index\":0,"
      "\"delta\":{\"content\":\"Hel\"}}],\"usage\":null}\r\n\r\n"
      "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-4o-mini\",\"choices\":[],"
      "\"usage\":{\"prompt_tokens\":31,\"completion_tokens\":7,\"total_tokens\":38}}\r\n\r\n"
      "data: [DONE]\r\n\r\n");
  EXPECT_TRUE(u.found);
  EXPECT_EQ(u.model, "gpt-4o-mini");
  EXPECT_EQ(u.input_tokens, 31u);
  EXPECT_EQ(u.output_tokens, 7u);
}

TEST(ModelUsage, a_responses_api_answer_whole_or_streamed_gives_input_and_output_tokens) {
  const ModelUsage whole = parse_model_usage(
      R"({"id": "resp_1", "object": "response", "model": "gpt-5", "usage": {"input_tokens": 90, "output_tokens": 300,
          "output_tokens_details": {"reasoning_tokens": 256}}})");
  EXPECT_EQ(whole.input_tokens, 90u);
  EXPECT_EQ(whole.output_tokens, 300u);  // reasoning tokens are output tokens, billed as such
  const ModelUsage streamed = parse_model_usage(
      "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"model\":\"gpt-5\"}}\n\n"
      "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"model\":\"gpt-5\","
      "\"usage\":{\"input_tokens\":90,\"output_tokens\":300}}}\n\n");
  EXPECT_TRUE(streamed.found);
  EXPECT_EQ(streamed.model, "gpt-5");
  EXPECT_EQ(streamed.input_tokens, 90u);
  EXPECT_EQ(streamed.output_tokens, 300u);
}

TEST(ModelUsage, an_answer_without_usage_or_not_json_counts_nothing_and_is_no_error) {
  EXPECT_FALSE(parse_model_usage(R"({"error": {"type": "rate_limit_error", "message": "slow down"}})").found);
  EXPECT_FALSE(parse_model_usage("<html>502 Bad Gateway</html>").found);
  EXPECT_FALSE(parse_model_usage("").found);
  EXPECT_FALSE(parse_model_usage("data: {not json\n\n").found);
}

TEST(ModelUsage, prices_match_a_model_or_a_prefix_and_an_unpriced_model_fails_a_money_budget) {
  const std::vector<ModelPrice> prices = {{"claude-sonnet-4*", 3.0, 15.0}, {"gpt-4o-mini", 0.15, 0.6}};
  ModelUsage u;
  u.model = "claude-sonnet-4-20250514";
  u.input_tokens = 1'000'000;
  u.output_tokens = 100'000;
  EXPECT_DOUBLE_EQ(price_usd(u, prices).value(), 4.5);
  u.model = "gpt-4o";  // not gpt-4o-mini, and no prefix row
  EXPECT_FALSE(price_usd(u, prices).has_value());
  ModelSpend spend;
  spend.add(u, prices);
  ModelBudget budget;
  budget.usd = 10.0;
  EXPECT_NE(over_budget(budget, spend).find("usd: the model 'gpt-4o' has no row in the price table"),
            std::string::npos);
  budget.usd.reset();
  EXPECT_EQ(over_budget(budget, spend), "");
}

TEST(ModelUsage, a_budget_is_passed_by_its_first_limit_and_the_request_limit_refuses_the_next_request) {
  const std::vector<ModelPrice> prices = {{"m", 1.0, 2.0}};
  ModelUsage answer;
  answer.found = true;
  answer.model = "m";
  answer.input_tokens = 1000;
  answer.output_tokens = 4000;
  ModelBudget budget;
  budget.requests = 2;
  budget.output_tokens = 10'000;
  ModelSpend spend;
  EXPECT_EQ(refuse_next_request(budget, spend), "");
  spend.add(answer, prices);
  spend.add(answer, prices);
  EXPECT_EQ(over_budget(budget, spend), "");
  EXPECT_EQ(refuse_next_request(budget, spend), "requests: 2 of 2 already sent");
  spend.add(answer, prices);
  EXPECT_EQ(over_budget(budget, spend), "requests: 3 of 2");
  budget.requests.reset();
  EXPECT_EQ(over_budget(budget, spend), "output_tokens: 12000 of 10000");
  EXPECT_DOUBLE_EQ(spend.usd, 3 * (1000 * 1.0 + 4000 * 2.0) / 1e6);
}

TEST(ModelUsage, a_key_never_reaches_a_record) {
  const std::vector<Secret> keys = {{"ANTHROPIC_API_KEY", "sk-ant-api03-abcdefgh"}, {"EMPTY", ""}};
  EXPECT_EQ(redact("x-api-key: sk-ant-api03-abcdefgh\nagain sk-ant-api03-abcdefgh.", keys),
            "x-api-key: [redacted:ANTHROPIC_API_KEY]\nagain [redacted:ANTHROPIC_API_KEY].");
  EXPECT_EQ(redact("nothing here", keys), "nothing here");
}

}  // namespace
}  // namespace kwb
