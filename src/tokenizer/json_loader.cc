// SAX reader for tokenizer.json. The DOM is built only for the small sections, which keeps loading the
// 15 MB MiniMax-M3 file to a fraction of nlohmann's full-DOM time (and avoids a 200k-entry std::map).
#include "tokenizer/json_loader.h"

#include <cstdio>
#include <filesystem>
#include <memory>

#include "common/error.h"

namespace m3::tok {
namespace {

using json = nlohmann::json;

class Handler : public nlohmann::json_sax<json> {
 public:
  explicit Handler(TokenizerJson& out) : out_(out) {}

  std::string error;  // set when a callback returned false for a reason of ours

  bool null() override { return scalar(json(nullptr), "null"); }
  bool boolean(bool v) override { return scalar(json(v), "a boolean"); }
  bool number_float(number_float_t v, const string_t&) override { return scalar(json(v), "a float"); }
  bool binary(binary_t&) override { return fail_with("unexpected binary value"); }

  bool number_integer(number_integer_t v) override {
    if (mode_ == Mode::kVocab) return vocab_entry(v);
    return scalar(json(v), "an integer");
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (mode_ == Mode::kVocab) {
      if (v > static_cast<number_unsigned_t>(INT64_MAX)) return fail_with("model.vocab id out of range");
      return vocab_entry(static_cast<int64_t>(v));
    }
    return scalar(json(v), "an integer");
  }

  bool string(string_t& s) override {
    if (mode_ == Mode::kMerges) {
      if (merge_depth_ == 2) {
        merge_parts_.push_back(std::move(s));
        return true;
      }
      // Legacy "left right" spelling: byte-level tokens never contain a plain space, so there is exactly one.
      size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
        return fail_with("model.merges entry " + std::to_string(out_.merges.size()) + " ('" + s +
                         "') is not two tokens separated by one space");
      }
      out_.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
      return true;
    }
    return scalar(json(std::move(s)), "a string");
  }

  bool key(string_t& k) override {
    if (mode_ == Mode::kVocab) {
      vocab_key_ = std::move(k);
    } else {
      pending_key_ = std::move(k);
    }
    return true;
  }

  bool start_object(std::size_t) override {
    if (mode_ != Mode::kDom) return fail_with(bulk_name() + " holds an unexpected object");
    if (at_model_level() && pending_key_ == "vocab") {
      mode_ = Mode::kVocab;
      out_.has_vocab = true;
      return true;
    }
    open(json::object());
    return true;
  }

  bool end_object() override {
    if (mode_ == Mode::kVocab) {
      mode_ = Mode::kDom;
      return true;
    }
    stack_.pop_back();
    path_.pop_back();
    return true;
  }

  bool start_array(std::size_t) override {
    if (mode_ == Mode::kVocab) return fail_with("model.vocab holds an array where an id was expected");
    if (mode_ == Mode::kMerges) {
      if (merge_depth_ != 1) return fail_with("model.merges entries nest too deeply");
      merge_depth_ = 2;
      merge_parts_.clear();
      return true;
    }
    if (at_model_level() && pending_key_ == "merges") {
      mode_ = Mode::kMerges;
      merge_depth_ = 1;
      out_.has_merges = true;
      return true;
    }
    open(json::array());
    return true;
  }

  bool end_array() override {
    if (mode_ == Mode::kMerges) {
      if (merge_depth_ == 2) {
        if (merge_parts_.size() != 2) {
          return fail_with("model.merges entry " + std::to_string(out_.merges.size()) +
                           " is not a pair of token strings");
        }
        out_.merges.emplace_back(std::move(merge_parts_[0]), std::move(merge_parts_[1]));
        merge_depth_ = 1;
      } else {
        mode_ = Mode::kDom;
      }
      return true;
    }
    stack_.pop_back();
    path_.pop_back();
    return true;
  }

  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& ex) override {
    error = "invalid JSON at byte " + std::to_string(position) + ": " + ex.what();
    return false;
  }

 private:
  enum class Mode { kDom, kVocab, kMerges };

  bool fail_with(std::string message) {
    error = std::move(message);
    return false;
  }

  std::string bulk_name() const { return mode_ == Mode::kVocab ? "model.vocab" : "model.merges"; }

  // True when the innermost open container is the top-level "model" object.
  bool at_model_level() const { return stack_.size() == 2 && path_[1] == "model"; }

  bool vocab_entry(int64_t id) {
    out_.vocab.emplace_back(std::move(vocab_key_), id);
    return true;
  }

  bool scalar(json v, const char* what) {
    if (mode_ == Mode::kVocab)
      return fail_with(std::string("model.vocab holds ") + what + " where an id was expected");
    if (mode_ == Mode::kMerges)
      return fail_with(std::string("model.merges holds ") + what + " where a token was expected");
    insert(std::move(v));
    return true;
  }

  json* insert(json v) {
    if (stack_.empty()) {
      out_.root = std::move(v);
      return &out_.root;
    }
    json* top = stack_.back();
    if (top->is_array()) {
      top->push_back(std::move(v));
      return &top->back();
    }
    json& slot = (*top)[pending_key_];
    slot = std::move(v);
    return &slot;
  }

  void open(json container) {
    std::string key = stack_.empty() || stack_.back()->is_array() ? std::string() : pending_key_;
    stack_.push_back(insert(std::move(container)));
    path_.push_back(std::move(key));
  }

  TokenizerJson& out_;
  Mode mode_ = Mode::kDom;
  std::vector<json*> stack_;
  std::vector<std::string> path_;  // the key each open container was stored under
  std::string pending_key_;
  std::string vocab_key_;
  int merge_depth_ = 0;
  std::vector<std::string> merge_parts_;
};

std::string read_file(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) fail(ErrorKind::kNotFound, "tokenizer: cannot open '" + path + "'");
  std::string data;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f.get())) > 0) data.append(buf, n);
  if (std::ferror(f.get())) fail(ErrorKind::kCorruptData, "tokenizer: error reading '" + path + "'");
  return data;
}

}  // namespace

TokenizerJson read_tokenizer_json(const std::string& path) {
  std::error_code ec;
  std::string file = path;
  if (std::filesystem::is_directory(path, ec))
    file = (std::filesystem::path(path) / "tokenizer.json").string();
  TokenizerJson out;
  out.path = file;
  const std::string data = read_file(file);
  out.vocab.reserve(data.size() / 40);
  out.merges.reserve(data.size() / 40);
  Handler handler(out);
  bool ok = json::sax_parse(data.begin(), data.end(), &handler, json::input_format_t::json, /*strict=*/true);
  if (!ok) {
    fail(ErrorKind::kCorruptData,
         "tokenizer: " + file + ": " + (handler.error.empty() ? std::string("invalid JSON") : handler.error));
  }
  if (!out.root.is_object())
    fail(ErrorKind::kCorruptData, "tokenizer: " + file + ": top level is not a JSON object");
  return out;
}

}  // namespace m3::tok
