// Header lookups (case-insensitive, arrival order kept) and query-string decoding for the HTTP messages.
// Names compare ASCII-case-insensitively as RFC 9110 says; values are never altered here.
#include "http/message.h"

#include <algorithm>

namespace m3::http {

namespace {

char lower(char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// application/x-www-form-urlencoded decoding: '+' is a space, %XX a byte; a malformed escape stays literal
// (clients that forget to escape '%' should not lose the rest of the value).
std::string form_decode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '+') {
      out.push_back(' ');
    } else if (c == '%' && i + 2 < s.size() && hex_value(s[i + 1]) >= 0 && hex_value(s[i + 2]) >= 0) {
      out.push_back(static_cast<char>(hex_value(s[i + 1]) * 16 + hex_value(s[i + 2])));
      i += 2;
    } else {
      out.push_back(c);
    }
  }
  return out;
}

}  // namespace

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

std::string_view trim_ows(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

void Headers::set(const std::string& name, std::string value) {
  remove(name);
  fields_.emplace_back(name, std::move(value));
}

void Headers::remove(std::string_view name) {
  std::erase_if(fields_, [&](const auto& f) { return iequals(f.first, name); });
}

bool Headers::has(std::string_view name) const {
  return count(name) > 0;
}

std::string Headers::get(std::string_view name) const {
  for (const auto& [k, v] : fields_) {
    if (iequals(k, name)) return v;
  }
  return "";
}

size_t Headers::count(std::string_view name) const {
  return static_cast<size_t>(
      std::count_if(fields_.begin(), fields_.end(), [&](const auto& f) { return iequals(f.first, name); }));
}

std::string Request::query_param(std::string_view name) const {
  std::string_view q = query;
  while (!q.empty()) {
    size_t amp = q.find('&');
    std::string_view pair = q.substr(0, amp);
    q = amp == std::string_view::npos ? std::string_view() : q.substr(amp + 1);
    size_t eq = pair.find('=');
    std::string_view key = pair.substr(0, eq);
    if (form_decode(key) != name) continue;
    return eq == std::string_view::npos ? std::string() : form_decode(pair.substr(eq + 1));
  }
  return "";
}

}  // namespace m3::http
