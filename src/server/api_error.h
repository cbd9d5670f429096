// Client-facing errors: an HTTP status, an error type and a message (and the offending parameter), rendered
// in the OpenAI shape {"error": {"message", "type", "param", "code"}} or the Anthropic shape
// {"type": "error", "error": {"type", "message"}}. Bad input is always 4xx; 5xx is reserved for our faults.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace m3 {

struct ApiError {
  int status = 400;
  std::string type = "invalid_request_error";
  std::string message;
  std::string param;       // offending request field, if known
  int retry_after = -1;    // seconds, for 429 / 503
  nlohmann::json details;  // Anthropic's machine-readable `error.details` ({"error_code": ...}), when set
};

ApiError api_error(int status, std::string message, std::string param = "");
// Maps an m3::Error raised while handling a request (validation, template, tokenizer, engine admission).
ApiError api_error_from(const Error& e);

nlohmann::json openai_error_body(const ApiError& e);
nlohmann::json anthropic_error_body(const ApiError& e);

// Thrown by request parsing helpers; caught by the route wrapper and rendered in the route's shape.
struct ApiException {
  ApiError error;
};

[[noreturn]] inline void reject(std::string message, std::string param = "", int status = 400) {
  throw ApiException{api_error(status, std::move(message), std::move(param))};
}

}  // namespace m3
