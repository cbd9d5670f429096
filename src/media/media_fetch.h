// http(s) media URLs for hosts in --allowed-media-domains: fetched with libcurl (opened with dlopen, as
// libcurl.so.4, on first use: present on nearly every host, and its TLS and its certificate store are the
// system's), with a time limit, a byte limit checked while the body arrives, and redirects followed only to
// allowed hosts (each hop checked by the caller's rule). Where libcurl is missing, a clear error says so.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace m3::media {

struct FetchLimits {
  size_t max_bytes = size_t(20) << 20;
  int timeout_ms = 30000;  // the whole transfer
  int max_redirects = 5;
};

// The body of a 200 answer to GET `url`. `allowed(url)` is asked before every request, the first and each
// redirect's target, and throws m3::Error(kInvalidArgument) to refuse it. Throws kInvalidArgument for a
// failed transfer, another status, a body past max_bytes or too many redirects; kUnsupported without libcurl.
std::vector<uint8_t> fetch_url(const std::string& url, const FetchLimits& limits,
                               const std::function<void(const std::string&)>& allowed);

}  // namespace m3::media
