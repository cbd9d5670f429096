// Field-by-field parsing; ranges follow vLLM/OpenAI (landscape.md §4.9 rows 23-35).
#include "server/openai_params.h"

#include "server/json_body.h"

namespace m3 {

void parse_basic_sampling(const nlohmann::ordered_json& j, SamplingParams& s) {
  if (auto v = opt_number(j, "temperature")) {
    if (*v < 0 || *v > 2) reject("'temperature' must be in [0, 2]", "temperature");
    s.temperature = static_cast<float>(*v);
  }
  if (auto v = opt_number(j, "top_p")) {
    if (!(*v > 0 && *v <= 1)) reject("'top_p' must be in (0, 1]", "top_p");
    s.top_p = static_cast<float>(*v);
  }
  if (auto v = opt_int(j, "top_k")) {
    if (*v < -1) reject("'top_k' must be -1 (off) or non-negative", "top_k");
    s.top_k = static_cast<int>(*v);
  }
}

nlohmann::ordered_json chat_template_kwargs(const nlohmann::ordered_json& body) {
  nlohmann::ordered_json kwargs =
      body.contains("chat_template_kwargs") ? body["chat_template_kwargs"] : nlohmann::ordered_json();
  if (auto effort = opt_string(body, "reasoning_effort")) {
    if (!kwargs.is_object()) kwargs = nlohmann::ordered_json::object();
    if (!kwargs.contains("reasoning_effort")) kwargs["reasoning_effort"] = *effort;
    if (*effort == "none" && !kwargs.contains("thinking_mode")) kwargs["thinking_mode"] = "disabled";
  }
  return kwargs;
}

ThinkingBudget thinking_budget(const Tokenizer& tok, int budget, ThinkingStart start) {
  const auto open = tok.token_to_id("<mm:think>"), close = tok.token_to_id("</mm:think>");
  if (!open || !close)
    fail(ErrorKind::kInvalidArgument, "this model has no reasoning markers for a thinking budget");
  ThinkingBudget b;
  b.budget = budget;
  b.start_token = *open;
  b.end_token = *close;
  b.starts_inside = start == ThinkingStart::kStartsInReasoning;
  return b;
}

void parse_openai_sampling(const nlohmann::ordered_json& j, const ApiServer& server, bool chat,
                           GenerationSpec& spec, StreamOptions& stream) {
  const ServerOptions& o = server.options();
  Request& r = spec.request;
  SamplingParams& s = r.sampling;
  s = o.default_sampling;
  const int64_t max_len = server.context().engine->max_model_len();
  const int64_t prompt_len = static_cast<int64_t>(r.prompt.size());
  if (prompt_len >= max_len)
    reject("This model's maximum context length is " + std::to_string(max_len) +
               " tokens. However, your prompt has " + std::to_string(prompt_len) + " tokens.",
           chat ? "messages" : "prompt");

  auto max_tokens = opt_int(j, "max_completion_tokens");
  if (!max_tokens) max_tokens = opt_int(j, "max_tokens");
  if (max_tokens) {
    if (*max_tokens < 1) reject("'max_tokens' must be at least 1", "max_tokens");
    if (prompt_len + *max_tokens > max_len)
      reject("This model's maximum context length is " + std::to_string(max_len) +
                 " tokens. However, you requested " + std::to_string(prompt_len + *max_tokens) + " tokens (" +
                 std::to_string(prompt_len) + " in the messages, " + std::to_string(*max_tokens) +
                 " in the completion).",
             "max_tokens");
    r.max_tokens = static_cast<int>(*max_tokens);
  } else {
    r.max_tokens =
        static_cast<int>(std::min<int64_t>(max_len - prompt_len, o.default_max_tokens.value_or(INT32_MAX)));
  }
  if (auto v = opt_int(j, "min_tokens")) {
    if (*v < 0 || *v > r.max_tokens) reject("'min_tokens' must be in [0, max_tokens]", "min_tokens");
    r.min_tokens = static_cast<int>(*v);
  }
  parse_basic_sampling(j, s);
  if (auto v = opt_number(j, "min_p")) {
    if (!(*v >= 0 && *v <= 1)) reject("'min_p' must be in [0, 1]", "min_p");
    s.min_p = static_cast<float>(*v);
  }
  if (auto v = opt_number(j, "presence_penalty")) {
    if (!(*v >= -2 && *v <= 2)) reject("'presence_penalty' must be in [-2, 2]", "presence_penalty");
    s.presence_penalty = static_cast<float>(*v);
  }
  if (auto v = opt_number(j, "frequency_penalty")) {
    if (!(*v >= -2 && *v <= 2)) reject("'frequency_penalty' must be in [-2, 2]", "frequency_penalty");
    s.frequency_penalty = static_cast<float>(*v);
  }
  if (auto v = opt_number(j, "repetition_penalty")) {
    if (!(*v > 0)) reject("'repetition_penalty' must be > 0", "repetition_penalty");
    s.repetition_penalty = static_cast<float>(*v);
  }
  if (j.contains("seed") && !j["seed"].is_null()) {
    if (!j["seed"].is_number_integer()) reject("'seed' must be a 64-bit integer", "seed");
    r.seed = j["seed"].is_number_unsigned() ? j["seed"].get<uint64_t>()
                                            : static_cast<uint64_t>(j["seed"].get<int64_t>());
  }
  if (j.contains("cache_salt") && !j["cache_salt"].is_null()) {  // vLLM: prefix-cache isolation
    if (!j["cache_salt"].is_string() || j["cache_salt"].get_ref<const std::string&>().empty())
      reject("'cache_salt' must be a non-empty string", "cache_salt");
    uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
    for (unsigned char c : j["cache_salt"].get_ref<const std::string&>()) h = (h ^ c) * 0x100000001b3ull;
    r.cache_salt = h | 1;  // 0 is the unsalted namespace
  }
  if (j.contains("logit_bias") && !j["logit_bias"].is_null()) {
    if (!j["logit_bias"].is_object())
      reject("'logit_bias' must be an object of token id -> bias", "logit_bias");
    const int vocab = server.context().engine->config().vocab_size;
    for (auto it = j["logit_bias"].begin(); it != j["logit_bias"].end(); ++it) {
      int64_t id = -1;
      try {
        size_t used = 0;
        id = std::stoll(it.key(), &used);
        if (used != it.key().size()) id = -1;
      } catch (...) {
      }
      if (id < 0 || id >= vocab)
        reject("'logit_bias' key '" + it.key() + "' is not a token id in [0, " + std::to_string(vocab) + ")",
               "logit_bias");
      if (!it.value().is_number() || it.value().get<double>() < -100 || it.value().get<double>() > 100)
        reject("'logit_bias' values must be numbers in [-100, 100]", "logit_bias");
      s.logit_bias[static_cast<int32_t>(id)] = it.value().get<float>();
    }
  }
  if (auto v = opt_bool(j, "ignore_eos")) r.ignore_eos = *v;
  if (j.contains("stop_token_ids") && !j["stop_token_ids"].is_null()) {
    if (!j["stop_token_ids"].is_array())
      reject("'stop_token_ids' must be a list of token ids", "stop_token_ids");
    for (const auto& t : j["stop_token_ids"]) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0)
        reject("'stop_token_ids' must hold token ids", "stop_token_ids");
      r.stop_token_ids.push_back(t.get<int32_t>());
    }
  }
  spec.text.stop = string_or_list(j, "stop", static_cast<size_t>(o.max_stop));
  for (const auto& st : spec.text.stop)
    if (st.size() > 1024) reject("'stop' strings must be at most 1024 bytes", "stop");
  if (auto v = opt_bool(j, "include_stop_str_in_output")) spec.text.include_stop_str_in_output = *v;
  if (auto v = opt_bool(j, "skip_special_tokens")) spec.text.skip_special_tokens = *v;

  if (auto v = opt_int(j, "n")) {
    if (*v < 1 || *v > o.max_n) reject("'n' must be in [1, " + std::to_string(o.max_n) + "]", "n");
    spec.n = static_cast<int>(*v);
  }
  if (j.contains("best_of") && !j["best_of"].is_null()) reject("'best_of' is not supported", "best_of");

  if (chat) {
    const bool want = opt_bool(j, "logprobs").value_or(false);
    auto top = opt_int(j, "top_logprobs");
    if (top && (*top < 0 || *top > o.max_logprobs))
      reject("'top_logprobs' must be in [0, " + std::to_string(o.max_logprobs) + "]", "top_logprobs");
    if (top && !want) reject("'top_logprobs' needs 'logprobs': true", "top_logprobs");
    if (want) s.logprobs = static_cast<int>(top.value_or(0));
  } else if (auto lp = opt_int(j, "logprobs")) {
    if (*lp < 0 || *lp > o.max_logprobs)
      reject("'logprobs' must be in [0, " + std::to_string(o.max_logprobs) + "]", "logprobs");
    s.logprobs = static_cast<int>(*lp);
  }

  stream.stream = opt_bool(j, "stream").value_or(false);
  if (j.contains("stream_options") && !j["stream_options"].is_null()) {
    if (!j["stream_options"].is_object()) reject("'stream_options' must be an object", "stream_options");
    if (!stream.stream) reject("'stream_options' is only allowed when 'stream' is true", "stream_options");
    stream.include_usage = opt_bool(j["stream_options"], "include_usage").value_or(false);
  }
}

nlohmann::json chat_logprobs_json(const Tokenizer& tok, const std::vector<int32_t>& ids,
                                  const std::vector<TokenLogprobs>& lps, int top_n) {
  auto entry = [&](int32_t id, float lp) {
    std::string_view b = tok.token_bytes(id);
    std::vector<int> bytes(b.begin(), b.end());
    for (int& x : bytes) x &= 0xff;
    return nlohmann::json{{"token", tok.decode(std::vector<int32_t>{id})}, {"logprob", lp}, {"bytes", bytes}};
  };
  nlohmann::json content = nlohmann::json::array();
  for (size_t i = 0; i < ids.size() && i < lps.size(); ++i) {
    nlohmann::json e = entry(ids[i], lps[i].logprob);
    nlohmann::json top = nlohmann::json::array();
    for (int k = 0; k < top_n && k < static_cast<int>(lps[i].top.size()); ++k)
      top.push_back(entry(lps[i].top[k].first, lps[i].top[k].second));
    e["top_logprobs"] = top;
    content.push_back(e);
  }
  return {{"content", content}};
}

}  // namespace m3
