// Reads {"prompt": "..."} or vLLM's chat shape {"messages", "tools", "add_generation_prompt",
// "chat_template_kwargs"} and prints {"tokens": [...], "prompt": "<rendered text>"}; detokenize reads
// {"tokens": [...]} and prints {"prompt": "..."}. Chat requests go through render_chat_prompt, as /tokenize
// does.
#include "apps/tokenize_command.h"

#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "chat/api/chat_prompt.h"
#include "common/error.h"
#include "server/api_error.h"
#include "server/json_body.h"
#include "tokenizer/tokenizer_config.h"

namespace m3 {
namespace {
namespace fs = std::filesystem;

struct TokenizeArgs {
  std::string dir, chat_template;
  bool skip_special = false;
};

// One JSON object from stdin; malformed input is an m3::Error the CLI reports.
nlohmann::ordered_json read_request() {
  try {
    return parse_json_object(std::string(std::istreambuf_iterator<char>(std::cin), {}));
  } catch (const ApiException& e) {
    fail(ErrorKind::kInvalidArgument, "stdin: " + e.error.message);
  }
}

int tokenize(const TokenizeArgs& a) {
  const fs::path dir(a.dir);
  Tokenizer tok = Tokenizer::load(a.dir);
  const nlohmann::ordered_json req = read_request();
  nlohmann::json out;
  if (req.contains("messages")) {
    const std::string tmpl =
        a.chat_template.empty() ? (dir / "chat_template.jinja").string() : a.chat_template;
    const SpecialTokenStrings special = load_special_token_strings(a.dir);
    const chat::ChatTemplate chat_template = chat::ChatTemplate::from_file(tmpl);
    ChatPrompt p = render_chat_prompt(
        {tok, chat_template, special.bos, special.eos}, req["messages"],
        req.contains("tools") ? req["tools"] : nlohmann::ordered_json(),
        opt_bool(req, "add_generation_prompt").value_or(true),
        req.contains("chat_template_kwargs") ? req["chat_template_kwargs"] : nlohmann::ordered_json(),
        /*allow_media=*/true);
    out = {{"tokens", p.ids}, {"prompt", p.text}};
  } else if (req.contains("prompt") && req["prompt"].is_string()) {
    const std::string text = req["prompt"].get<std::string>();
    out = {{"tokens", tok.encode(text)}, {"prompt", text}};
  } else {
    fail(ErrorKind::kInvalidArgument, "stdin: expected {\"prompt\": \"...\"} or {\"messages\": [...]}");
  }
  std::cout << out.dump() << "\n";
  return 0;
}

int detokenize(const TokenizeArgs& a) {
  Tokenizer tok = Tokenizer::load(a.dir);
  const nlohmann::ordered_json req = read_request();
  if (!req.contains("tokens") || !req["tokens"].is_array())
    fail(ErrorKind::kInvalidArgument, "stdin: expected {\"tokens\": [...]}");
  std::vector<int32_t> ids;
  for (const auto& t : req["tokens"]) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= int64_t(tok.vocab_size()))
      fail(ErrorKind::kInvalidArgument,
           "stdin: 'tokens' must hold token ids in [0, " + std::to_string(tok.vocab_size()) + ")");
    ids.push_back(t.get<int32_t>());
  }
  std::cout << nlohmann::json({{"prompt", tok.decode(ids, a.skip_special)}}).dump() << "\n";
  return 0;
}

}  // namespace

void register_tokenize_commands(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<TokenizeArgs>();
  CLI::App* t = app.add_subcommand("tokenize", "Text or chat messages (JSON on stdin) -> token ids");
  t->add_option("--tokenizer", args->dir, "Directory with tokenizer.json (and chat_template.jinja)")
      ->required();
  t->add_option("--chat-template,--chat_template", args->chat_template, "Jinja chat template file");
  t->callback([args, &exit_code] { exit_code = tokenize(*args); });
  CLI::App* d = app.add_subcommand("detokenize", "Token ids (JSON on stdin) -> text");
  d->add_option("--tokenizer", args->dir, "Directory with tokenizer.json")->required();
  d->add_flag("--skip-special-tokens", args->skip_special, "Leave special tokens out of the text");
  d->callback([args, &exit_code] { exit_code = detokenize(*args); });
}

}  // namespace m3
