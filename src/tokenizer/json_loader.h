// Reads a HF tokenizer.json in one SAX pass. model.vocab and model.merges (the 15 MB bulk) go straight into
// flat vectors; every other section is kept as a small nlohmann DOM for the component parsers. Errors are
// m3::Error naming the file (kNotFound, kCorruptData with the byte offset of a JSON syntax error).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace m3::tok {

struct TokenizerJson {
  std::string path;     // the file actually read, for error messages
  nlohmann::json root;  // everything except model.vocab and model.merges
  bool has_vocab = false;
  bool has_merges = false;
  std::vector<std::pair<std::string, int64_t>> vocab;       // in file order
  std::vector<std::pair<std::string, std::string>> merges;  // in file order (rank = index)
};

// `path` is a tokenizer.json file or a directory holding one.
TokenizerJson read_tokenizer_json(const std::string& path);

}  // namespace m3::tok
