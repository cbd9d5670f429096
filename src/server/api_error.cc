// Status and type mapping.
#include "server/api_error.h"

namespace m3 {

ApiError api_error(int status, std::string message, std::string param) {
  ApiError e;
  e.status = status;
  e.message = std::move(message);
  e.param = std::move(param);
  switch (status) {
    case 401:
      e.type = "authentication_error";
      break;
    case 404:
      e.type = "not_found_error";
      break;
    case 405:
      e.type = "invalid_request_error";
      break;
    case 413:
      e.type = "request_too_large";
      break;
    case 415:
      e.type = "invalid_request_error";
      break;
    case 429:
      e.type = "rate_limit_error";
      e.retry_after = 1;
      break;
    case 503:
      e.type = "overloaded_error";
      e.retry_after = 5;
      break;
    default:
      e.type = status >= 500 ? "api_error" : "invalid_request_error";
  }
  return e;
}

namespace {

ApiError api_error_of_kind(const Error& err) {
  switch (err.kind()) {
    case ErrorKind::kInvalidArgument:
    case ErrorKind::kCorruptData:
      return api_error(400, err.what());
    case ErrorKind::kUnsupported:
      return api_error(400, err.what());
    case ErrorKind::kNotFound:
      return api_error(404, err.what());
    case ErrorKind::kResourceExhausted:
      return api_error(429, err.what());
    case ErrorKind::kUnavailable:
      return api_error(503, err.what());
    case ErrorKind::kInternal:
      return api_error(500, err.what());
  }
  return api_error(500, err.what());
}

}  // namespace

ApiError api_error_from(const Error& err) {
  ApiError e = api_error_of_kind(err);
  e.param = err.param();
  return e;
}

nlohmann::json openai_error_body(const ApiError& e) {
  nlohmann::json err = {{"message", e.message}, {"type", e.type}, {"param", nullptr}, {"code", e.status}};
  if (!e.param.empty()) err["param"] = e.param;
  return {{"error", err}};
}

nlohmann::json anthropic_error_body(const ApiError& e) {
  std::string type = e.type;
  if (e.status == 400 || e.status == 405 || e.status == 415) type = "invalid_request_error";
  nlohmann::json err = {{"type", type}, {"message", e.message}};
  if (!e.details.is_null()) err["details"] = e.details;
  return {{"type", "error"}, {"error", err}};
}

}  // namespace m3
