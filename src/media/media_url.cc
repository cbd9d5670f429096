// Media URLs to bytes: data: URLs (base64), file:// paths confined to --allowed-local-media-path, and
// http(s) URLs, which are checked against --allowed-media-domains and then refused (no fetching yet).
// Messages go back to clients: they quote at most ~100 characters of a URL.
#include "media/media_url.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "common/ascii.h"
#include "common/error.h"
#include "media/media_fetch.h"

namespace m3::media {
namespace {

namespace fs = std::filesystem;

constexpr size_t kQuotedChars = 100;

[[noreturn]] void invalid(const std::string& message) {
  fail(ErrorKind::kInvalidArgument, message);
}

// A piece of client input for a message: shortened, control bytes replaced.
std::string quote(std::string_view text) {
  std::string out;
  for (char c : text.substr(0, kQuotedChars)) out += (uint8_t(c) < 0x20 || c == 0x7F) ? '?' : c;
  if (text.size() > kQuotedChars) out += "...";
  return "'" + out + "'";
}

// 0-63 for the standard and URL-safe alphabets, -1 otherwise.
int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+' || c == '-') return 62;
  if (c == '/' || c == '_') return 63;
  return -1;
}

// The decoded size of base64 text without decoding it (whitespace and padding do not count).
size_t base64_decoded_size(std::string_view text) {
  size_t symbols = 0;
  for (char c : text)
    if (base64_value(c) >= 0) ++symbols;
  return symbols / 4 * 3 + (symbols % 4 == 0 ? 0 : symbols % 4 - 1);
}

std::string size_limit_message(std::string_view what, size_t size, size_t limit) {
  return std::string(what) + " is " + std::to_string(size) + " bytes; the limit is " + std::to_string(limit) +
         " bytes";
}

// data:[<mediatype>][;param=value]*;base64,<data>
std::vector<uint8_t> load_data_url(std::string_view url, const MediaPolicy& policy) {
  std::string_view rest = url.substr(5);  // after "data:"
  size_t comma = rest.find(',');
  if (comma == std::string_view::npos) invalid("malformed data: URL " + quote(url) + ": no ','");
  std::string_view meta = rest.substr(0, comma), payload = rest.substr(comma + 1);

  std::vector<std::string> params;
  for (size_t start = 0;;) {
    size_t semi = meta.find(';', start);
    params.push_back(ascii_lower(ascii_trim(meta.substr(start, semi - start))));
    if (semi == std::string_view::npos) break;
    start = semi + 1;
  }
  if (params.size() < 2 || params.back() != "base64") invalid("data: URLs must be base64-encoded");
  const std::string& type = params.front();
  bool media = type.empty() || type.starts_with("image/") || type.starts_with("video/") ||
               type == "application/octet-stream";
  if (!media) invalid("data: URL media type " + quote(type) + " is not an image or video type");

  size_t size = base64_decoded_size(payload);
  if (size > policy.max_bytes) invalid(size_limit_message("the data: URL's content", size, policy.max_bytes));
  return decode_base64(payload);
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string percent_decode(std::string_view text, std::string_view url) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    int hi = i + 2 < text.size() ? hex_value(text[i + 1]) : -1;
    int lo = i + 2 < text.size() ? hex_value(text[i + 2]) : -1;
    if (hi < 0 || lo < 0) invalid("malformed percent-escape in " + quote(url));
    out += char(hi * 16 + lo);
    i += 2;
  }
  return out;
}

// Whether `path` is `dir` or below it; both canonical.
bool is_inside(const fs::path& path, const fs::path& dir) {
  auto p = path.begin();
  for (auto d = dir.begin(); d != dir.end(); ++d) {
    if (d->empty()) continue;  // a trailing separator
    if (p == path.end() || *p != *d) return false;
    ++p;
  }
  return true;
}

std::vector<uint8_t> load_file_url(std::string_view url, const MediaPolicy& policy) {
  if (policy.allowed_local_media_path.empty()) invalid("file:// URLs need --allowed-local-media-path");
  std::string_view rest = url.substr(7);  // after "file://"
  if (rest.empty() || rest.front() != '/')
    invalid("file:// URLs must name an absolute local path (file:///path), not " + quote(url));
  rest = rest.substr(0, rest.find_first_of("?#"));
  std::string path_text = percent_decode(rest, url);
  if (path_text.find('\0') != std::string::npos) invalid("malformed file:// URL " + quote(url));

  const std::string outside = quote(path_text) + " is outside --allowed-local-media-path";
  std::error_code ec;
  fs::path allowed = fs::weakly_canonical(fs::path(policy.allowed_local_media_path), ec);
  if (ec) invalid("--allowed-local-media-path " + quote(policy.allowed_local_media_path) + " is unusable");
  // weakly_canonical resolves symlinks only in the part of the path that exists: decide on the lexical
  // form first (so that missing files outside are reported as outside), then on the fully resolved one.
  fs::path requested = fs::weakly_canonical(fs::path(path_text), ec);
  if (ec || !is_inside(requested, allowed)) invalid(outside);
  fs::path resolved = fs::canonical(requested, ec);
  if (ec) invalid("cannot read " + quote(path_text) + ": " + ec.message());
  if (!is_inside(resolved, allowed)) invalid(outside);
  if (!fs::is_regular_file(resolved, ec)) invalid("cannot read " + quote(path_text) + ": not a regular file");
  uintmax_t size = fs::file_size(resolved, ec);
  if (ec) invalid("cannot read " + quote(path_text) + ": " + ec.message());
  if (size > policy.max_bytes) invalid(size_limit_message(quote(path_text), size_t(size), policy.max_bytes));

  std::ifstream in(resolved, std::ios::binary);
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  if (!in || !in.read(reinterpret_cast<char*>(bytes.data()), std::streamsize(bytes.size())))
    invalid("cannot read " + quote(path_text));
  return bytes;
}

// The host of an http(s) URL, lower-cased, without userinfo, port, IPv6 brackets or a trailing dot.
std::string url_host(std::string_view after_scheme) {
  std::string_view authority = after_scheme.substr(0, after_scheme.find_first_of("/?#\\"));
  size_t at = authority.rfind('@');
  if (at != std::string_view::npos) authority.remove_prefix(at + 1);
  std::string_view host = authority;
  if (host.starts_with('[')) {
    size_t close = host.find(']');
    host = close == std::string_view::npos ? std::string_view() : host.substr(1, close - 1);
  } else {
    size_t colon = host.find(':');
    if (colon != std::string_view::npos) host = host.substr(0, colon);
  }
  if (host.ends_with('.')) host.remove_suffix(1);
  return ascii_lower(host);
}

bool host_allowed(const std::string& host, const std::vector<std::string>& domains) {
  if (host.empty()) return false;
  return std::any_of(domains.begin(), domains.end(), [&](const std::string& d) {
    std::string_view domain = ascii_trim(d);
    if (domain.starts_with('[') && domain.ends_with(']')) domain = domain.substr(1, domain.size() - 2);
    if (domain.ends_with('.')) domain.remove_suffix(1);
    return !domain.empty() && ascii_lower(domain) == host;
  });
}

// The URL's scheme, lower-cased, or "" when it has none.
std::string url_scheme(std::string_view url) {
  size_t colon = url.find(':');
  if (colon == std::string_view::npos || colon == 0) return "";
  for (size_t i = 0; i < colon; ++i) {
    char c = url[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (i > 0 && ((c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.'));
    if (!ok) return "";
  }
  return ascii_lower(url.substr(0, colon));
}

// An http(s) URL of an allowed host, and every redirect's target likewise.
void check_remote(const std::string& url, const MediaPolicy& policy) {
  const std::string scheme = url_scheme(url);
  if (scheme != "http" && scheme != "https")
    invalid("redirected to a URL that is not http(s): " + quote(url));
  std::string_view rest = std::string_view(url).substr(scheme.size() + 1);
  if (!rest.starts_with("//")) invalid("malformed " + scheme + ":// URL " + quote(url));
  if (!host_allowed(url_host(rest.substr(2)), policy.allowed_media_domains))
    invalid(policy.allowed_media_domains.empty()
                ? "remote media URLs are disabled; the server allows only domains listed in "
                  "--allowed-media-domains"
                : "the host of " + quote(url) + " is not in --allowed-media-domains");
}

std::vector<uint8_t> load_remote_url(const std::string& url, const MediaPolicy& policy) {
  check_remote(url, policy);
  FetchLimits limits;
  limits.max_bytes = policy.max_bytes;
  limits.timeout_ms = policy.fetch_timeout_ms;
  return fetch_url(url, limits, [&](const std::string& u) { check_remote(u, policy); });
}

}  // namespace

std::vector<uint8_t> load_media_url(const std::string& url, const MediaPolicy& policy) {
  std::string scheme = url_scheme(url);
  if (scheme == "data") return load_data_url(url, policy);
  if (scheme == "file") {
    if (url.size() < 7 || url.compare(5, 2, "//") != 0)
      invalid("file:// URLs must name an absolute local path (file:///path), not " + quote(url));
    return load_file_url(url, policy);
  }
  if (scheme == "http" || scheme == "https") return load_remote_url(url, policy);
  if (scheme.empty())
    invalid("unsupported image URL scheme in " + quote(url) +
            "; expected a data:, file:// or http(s):// URL");
  invalid("unsupported image URL scheme " + quote(scheme) + "; expected a data:, file:// or http(s):// URL");
}

std::vector<uint8_t> decode_base64(std::string_view text) {
  std::vector<uint8_t> out;
  out.reserve(text.size() / 4 * 3 + 3);
  uint32_t bits = 0;
  int nbits = 0;
  size_t symbols = 0, padding = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (ascii_is_space(c)) continue;
    if (c == '=') {
      ++padding;
      continue;
    }
    int v = base64_value(c);
    if (v < 0 || padding > 0) {
      std::string what = v < 0 ? "byte " + std::to_string(uint8_t(c)) : "data after '=' padding";
      invalid("invalid base64: " + what + " at offset " + std::to_string(i));
    }
    ++symbols;
    bits = (bits << 6) | uint32_t(v);
    nbits += 6;
    if (nbits >= 8) {
      nbits -= 8;
      out.push_back(uint8_t(bits >> nbits));
      bits &= (1u << nbits) - 1;
    }
  }
  if (symbols % 4 == 1) invalid("invalid base64: truncated data");
  if (padding > 0 && (padding > 2 || (symbols + padding) % 4 != 0)) invalid("invalid base64: bad padding");
  return out;
}

}  // namespace m3::media
