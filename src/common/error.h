// Error type shared by every module. Errors carry a kind so that the server can map them to HTTP status codes
// (invalid input -> 400, not found -> 404, ...) and a message that names the offending flag, file or tensor.
#pragma once

#include <stdexcept>
#include <string>

namespace m3 {

enum class ErrorKind {
  kInvalidArgument,  // the caller's input is wrong (bad flag, bad request field, bad JSONL line)
  kNotFound,         // a file, tensor or model that was asked for does not exist
  kCorruptData,      // a file exists but its contents are malformed (safetensors header, config.json)
  kUnsupported,  // valid input that this build cannot honour (an unknown activation, TP > 1 before it lands)
  kResourceExhausted,  // a limit was hit (queue full, body too large): retry later -> 429 / 413
  kUnavailable,        // the server cannot take work now (loading, draining) -> 503
  kInternal,
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message, std::string param = "")
      : std::runtime_error(message), kind_(kind), param_(std::move(param)) {}
  ErrorKind kind() const { return kind_; }
  const std::string& param() const { return param_; }  // the request field at fault, when one is

 private:
  ErrorKind kind_;
  std::string param_;
};

const char* error_kind_name(ErrorKind kind);

[[noreturn]] inline void fail(ErrorKind kind, const std::string& message) {
  throw Error(kind, message);
}

// A request field that is wrong: kInvalidArgument naming the field (the server reports it as `param`).
[[noreturn]] inline void fail_field(const std::string& message, const std::string& param) {
  throw Error(ErrorKind::kInvalidArgument, message, param);
}

// Throws kInternal when an invariant the code itself guarantees does not hold (never for user input).
#define M3_CHECK(cond, msg)                                                                     \
  do {                                                                                          \
    if (!(cond)) ::m3::fail(::m3::ErrorKind::kInternal, std::string("check failed: ") + (msg)); \
  } while (0)

}  // namespace m3
