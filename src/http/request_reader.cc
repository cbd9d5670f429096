// RequestReader: Beast's basic_parser does the byte-level work (request line, field syntax, chunk sizes, body
// limits); the callbacks here add what RFC 9112 asks and Beast lets through (duplicate Content-Length fields,
// Content-Length beside a non-chunked Transfer-Encoding, transfer codings other than chunked) and turn every
// refusal into a status and a message a client can act on.
#include "http/request_reader.h"

#include <algorithm>
#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/error.hpp>
#include <limits>
#include <vector>

namespace m3::http {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;

namespace {

std::vector<std::string_view> split_list(std::string_view s) {
  std::vector<std::string_view> out;
  while (true) {
    size_t comma = s.find(',');
    out.push_back(trim_ows(s.substr(0, comma)));
    if (comma == std::string_view::npos) break;
    s.remove_prefix(comma + 1);
  }
  return out;
}

// The request line costs "SP SP HTTP/1.x CRLF" besides the method and target; Beast limits the request line
// and the fields separately, so the fields get what the line left of max_header_bytes.
constexpr size_t kRequestLineOverhead = 12;

uint32_t clamp_u32(size_t v) {
  return static_cast<uint32_t>(std::min<size_t>(v, std::numeric_limits<uint32_t>::max()));
}

}  // namespace

std::string body_too_large_message(size_t max_body_bytes) {
  return "request body exceeds " + std::to_string(max_body_bytes) + " bytes";
}

std::string target_too_long_message(size_t max_target_bytes) {
  return "request target longer than " + std::to_string(max_target_bytes) + " bytes";
}

std::string head_too_large_message(const ServerLimits& limits) {
  return "request headers too large (at most " + std::to_string(limits.max_headers) + " fields, " +
         std::to_string(limits.max_header_bytes) + " bytes)";
}

class RequestReader::Parser final : public bhttp::basic_parser<true> {
 public:
  Parser(const ServerLimits& limits, Request& request) : limits_(limits), request_(request) {
    eager(true);
    header_limit(clamp_u32(limits.max_header_bytes));
    body_limit(static_cast<std::uint64_t>(limits.max_body_bytes));
  }

  bool line_done = false;
  bool expect_continue = false;
  size_t content_length_fields = 0;
  bool transfer_encoding = false;
  int status = 0;  // a refusal decided in a callback (Beast only sees "some error")
  std::string message;

 private:
  void refuse(beast::error_code& ec, int code, std::string text) {
    status = code;
    message = std::move(text);
    ec = bhttp::error::bad_value;
  }

  void on_request_impl(bhttp::verb, beast::string_view method, beast::string_view target, int version,
                       beast::error_code& ec) override {
    line_done = true;
    request_.method.assign(method.data(), method.size());
    request_.target.assign(target.data(), target.size());
    request_.version = version;
    // Absolute-form ("http://host/p?q", RFC 9112 3.2.2) routes like origin-form.
    std::string_view t(target.data(), target.size());
    if (t.starts_with("http://") || t.starts_with("https://")) {
      size_t slash = t.find('/', t.find("//") + 2);
      t = slash == std::string_view::npos ? std::string_view("/") : t.substr(slash);
    }
    size_t q = t.find('?');
    request_.path = std::string(t.substr(0, q));
    request_.query = q == std::string_view::npos ? std::string() : std::string(t.substr(q + 1));
    if (target.size() > limits_.max_target_bytes) {
      return refuse(ec, 414, target_too_long_message(limits_.max_target_bytes));
    }
    size_t line = method.size() + target.size() + kRequestLineOverhead;
    if (line >= limits_.max_header_bytes) return refuse(ec, 431, head_too_large_message(limits_));
    header_limit(clamp_u32(limits_.max_header_bytes - line));
  }

  void on_response_impl(int, beast::string_view, int, beast::error_code& ec) override {
    ec = bhttp::error::bad_version;  // a request parser never sees a status line
  }

  void on_field_impl(bhttp::field f, beast::string_view name, beast::string_view value,
                     beast::error_code& ec) override {
    if (is_header_done()) return;  // trailer fields of a chunked body are not part of the request
    if (request_.headers.size() >= limits_.max_headers)
      return refuse(ec, 431, head_too_large_message(limits_));
    std::string_view v(value.data(), value.size());
    if (f == bhttp::field::content_length) {
      // RFC 9110 8.6 lets a recipient either reject a repeated or list-valued Content-Length or collapse
      // equal values; rejecting is the choice that leaves no room for a front proxy to frame the body
      // differently.
      if (++content_length_fields > 1) return refuse(ec, 400, "duplicate Content-Length");
      if (v.find(',') != std::string_view::npos) return refuse(ec, 400, "invalid Content-Length");
      if (transfer_encoding) return refuse(ec, 400, "both Content-Length and Transfer-Encoding");
    } else if (f == bhttp::field::transfer_encoding) {
      if (transfer_encoding) return refuse(ec, 400, "duplicate Transfer-Encoding");
      transfer_encoding = true;
      if (content_length_fields > 0) return refuse(ec, 400, "both Content-Length and Transfer-Encoding");
      std::vector<std::string_view> codings = split_list(v);
      // RFC 9112 6.3: a request whose last transfer coding is not chunked has no reliable length: 400.
      if (!iequals(codings.back(), "chunked")) {
        return refuse(ec, 400, "unsupported Transfer-Encoding '" + std::string(v) + "' (only chunked)");
      }
      // RFC 9112 6.1: a transfer coding the server does not implement is 501.
      if (codings.size() > 1) {
        return refuse(ec, 501, "unsupported Transfer-Encoding '" + std::string(v) + "' (only chunked)");
      }
    } else if (f == bhttp::field::expect) {
      expect_continue = iequals(trim_ows(v), "100-continue");
    }
    request_.headers.add(std::string(name.data(), name.size()), std::string(v));
  }

  void on_header_impl(beast::error_code&) override {}

  void on_body_init_impl(boost::optional<std::uint64_t> const& length, beast::error_code&) override {
    // Beast has already refused a length over body_limit, so this reserve is bounded.
    if (length) request_.body.reserve(static_cast<size_t>(*length));
  }

  size_t on_body_impl(beast::string_view body, beast::error_code&) override {
    request_.body.append(body.data(), body.size());
    return body.size();
  }

  void on_chunk_header_impl(std::uint64_t, beast::string_view, beast::error_code&) override {}

  size_t on_chunk_body_impl(std::uint64_t, beast::string_view body, beast::error_code&) override {
    request_.body.append(body.data(), body.size());
    return body.size();
  }

  void on_finish_impl(beast::error_code&) override {}

  const ServerLimits& limits_;
  Request& request_;
};

RequestReader::RequestReader(const ServerLimits& limits) : limits_(limits) {
  reset();
}

RequestReader::~RequestReader() = default;

void RequestReader::reset() {
  request_ = Request();
  parser_ = std::make_unique<Parser>(limits_, request_);
  state_ = State::kHead;
  started_ = false;
  error_status_ = 0;
  error_message_.clear();
}

bool RequestReader::expects_continue() const {
  return state_ == State::kBody && parser_->expect_continue && request_.version >= 11;
}

Request RequestReader::take_request() {
  return std::move(request_);
}

void RequestReader::fail(int status, std::string message) {
  state_ = State::kError;
  error_status_ = status;
  error_message_ = std::move(message);
}

// Beast reports an over-long request line as a header_limit error; telling 414 from 431 needs a look at how
// far the target has already run in the bytes buffered so far.
bool RequestReader::target_too_long(std::string_view input) const {
  size_t sp = input.find(' ');
  if (sp == std::string_view::npos) return false;
  size_t end = input.find_first_of(" \r\n", sp + 1);
  size_t length = (end == std::string_view::npos ? input.size() : end) - (sp + 1);
  return length > limits_.max_target_bytes;
}

size_t RequestReader::feed(std::string_view input) {
  if (state_ == State::kDone || state_ == State::kError) return 0;
  size_t used = 0;
  if (!started_) {
    // RFC 9112 2.2: empty lines before a request line are ignored.
    while (used < input.size() && (input[used] == '\r' || input[used] == '\n')) ++used;
    if (used == input.size()) return used;
    started_ = true;
  }
  Parser& p = *parser_;
  while (used < input.size()) {
    std::string_view rest = input.substr(used);
    if (!p.line_done && target_too_long(rest)) {
      fail(414, target_too_long_message(limits_.max_target_bytes));
      return used;
    }
    beast::error_code ec;
    size_t n = p.put(boost::asio::const_buffer(rest.data(), rest.size()), ec);
    used += n;
    if (ec == bhttp::error::need_more) {
      // Beast bounds the head itself; in the body only a chunk-size line or the trailers can stall, and those
      // get the same budget as a head.
      if (p.is_header_done() && input.size() - used > limits_.max_header_bytes) {
        fail(400, "malformed chunked body (chunk line or trailers too long)");
      }
      break;
    }
    if (ec) {
      using E = bhttp::error;
      if (p.status != 0) {
        fail(p.status, p.message);
      } else if (ec == E::header_limit) {
        if (!p.line_done && target_too_long(rest)) {
          fail(414, target_too_long_message(limits_.max_target_bytes));
        } else {
          fail(431, head_too_large_message(limits_));
        }
      } else if (ec == E::body_limit) {
        fail(413, body_too_large_message(limits_.max_body_bytes));
      } else if (ec == E::bad_content_length) {
        fail(400, p.transfer_encoding           ? "both Content-Length and Transfer-Encoding"
                  : p.content_length_fields > 0 ? "conflicting Content-Length values"
                                                : "invalid Content-Length");
      } else if (ec == E::bad_transfer_encoding) {
        fail(400, p.content_length_fields > 0 ? "both Content-Length and Transfer-Encoding"
                                              : "duplicate Transfer-Encoding");
      } else if (ec == E::bad_chunk || ec == E::bad_chunk_extension) {
        fail(400, "malformed chunked body");
      } else if (!p.line_done) {
        fail(400, "malformed request line");
      } else if (!p.is_header_done()) {
        fail(400, "malformed request header field");
      } else {
        fail(400, "malformed request (" + ec.message() + ")");
      }
      return used;
    }
    if (p.is_done()) {
      state_ = State::kDone;
      return used;
    }
    if (p.is_header_done()) state_ = State::kBody;
    if (n == 0) break;
  }
  if (state_ == State::kHead && p.is_header_done()) state_ = State::kBody;
  return used;
}

}  // namespace m3::http
