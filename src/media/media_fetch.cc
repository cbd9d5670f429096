// libcurl through dlopen: one easy handle per request, no redirects followed by curl itself (the caller
// checks each hop), the body gathered under a byte limit.
#include "media/media_fetch.h"

#include <curl/curl.h>
#include <dlfcn.h>

#include <memory>

#include "common/error.h"

namespace m3::media {
namespace {

[[noreturn]] void invalid(const std::string& message) {
  fail(ErrorKind::kInvalidArgument, message);
}

struct Curl {
  CURLcode (*global_init)(long) = nullptr;
  CURL* (*easy_init)() = nullptr;
  CURLcode (*easy_setopt)(CURL*, CURLoption, ...) = nullptr;
  CURLcode (*easy_perform)(CURL*) = nullptr;
  CURLcode (*easy_getinfo)(CURL*, CURLINFO, ...) = nullptr;
  void (*easy_cleanup)(CURL*) = nullptr;
  const char* (*easy_strerror)(CURLcode) = nullptr;
  std::string error;  // empty when loaded
};

const Curl& curl() {
  static const Curl c = [] {
    Curl r;
    void* lib = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      r.error = std::string("cannot load libcurl.so.4 (") + dlerror() + ")";
      return r;
    }
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      if (!fn && r.error.empty()) r.error = std::string("libcurl.so.4 has no ") + name;
    };
    sym(r.global_init, "curl_global_init");
    sym(r.easy_init, "curl_easy_init");
    sym(r.easy_setopt, "curl_easy_setopt");
    sym(r.easy_perform, "curl_easy_perform");
    sym(r.easy_getinfo, "curl_easy_getinfo");
    sym(r.easy_cleanup, "curl_easy_cleanup");
    sym(r.easy_strerror, "curl_easy_strerror");
    if (r.error.empty() && r.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
      r.error = "curl_global_init failed";
    return r;
  }();
  if (!c.error.empty())
    fail(ErrorKind::kUnsupported, "fetching http(s) media needs libcurl on the server (Debian: libcurl4): " +
                                      c.error + "; send the media as a data: URL");
  return c;
}

struct Body {
  std::vector<uint8_t> bytes;
  size_t max_bytes = 0;
  bool too_large = false;
};

size_t on_data(char* data, size_t size, size_t n, void* user) {
  auto* b = static_cast<Body*>(user);
  if (b->bytes.size() + size * n > b->max_bytes) {
    b->too_large = true;
    return 0;  // aborts the transfer
  }
  b->bytes.insert(b->bytes.end(), data, data + size * n);
  return size * n;
}

}  // namespace

std::vector<uint8_t> fetch_url(const std::string& first_url, const FetchLimits& limits,
                               const std::function<void(const std::string&)>& allowed) {
  const Curl& c = curl();
  std::string url = first_url;
  for (int hop = 0;; ++hop) {
    allowed(url);
    std::unique_ptr<CURL, void (*)(CURL*)> h(c.easy_init(), c.easy_cleanup);
    if (!h) fail(ErrorKind::kInternal, "curl_easy_init failed");
    Body body;
    body.max_bytes = limits.max_bytes;
    c.easy_setopt(h.get(), CURLOPT_URL, url.c_str());
    c.easy_setopt(h.get(), CURLOPT_PROTOCOLS_STR, "http,https");
    c.easy_setopt(h.get(), CURLOPT_FOLLOWLOCATION, 0L);
    c.easy_setopt(h.get(), CURLOPT_NOSIGNAL, 1L);
    c.easy_setopt(h.get(), CURLOPT_TIMEOUT_MS, long(limits.timeout_ms));
    c.easy_setopt(h.get(), CURLOPT_MAXFILESIZE_LARGE, curl_off_t(limits.max_bytes));
    c.easy_setopt(h.get(), CURLOPT_USERAGENT, "m3serve");
    c.easy_setopt(h.get(), CURLOPT_WRITEFUNCTION, &on_data);
    c.easy_setopt(h.get(), CURLOPT_WRITEDATA, &body);
    const CURLcode rc = c.easy_perform(h.get());
    long status = 0;
    c.easy_getinfo(h.get(), CURLINFO_RESPONSE_CODE, &status);
    const std::string size_limit = "the media at " + first_url + " is larger than the limit of " +
                                   std::to_string(limits.max_bytes) + " bytes";
    if (body.too_large || rc == CURLE_FILESIZE_EXCEEDED) invalid(size_limit);
    if (rc == CURLE_OPERATION_TIMEDOUT)
      invalid("fetching " + url + " took longer than " + std::to_string(limits.timeout_ms / 1000.0) + " s");
    if (rc != CURLE_OK) invalid("cannot fetch " + url + ": " + c.easy_strerror(rc));
    if (status >= 300 && status < 400) {
      char* next = nullptr;
      c.easy_getinfo(h.get(), CURLINFO_REDIRECT_URL, &next);
      if (!next) invalid("fetching " + url + ": HTTP " + std::to_string(status) + " without a Location");
      if (hop + 1 > limits.max_redirects)
        invalid("fetching " + first_url + ": more than " + std::to_string(limits.max_redirects) +
                " redirects");
      url = next;
      continue;
    }
    if (status != 200) invalid("fetching " + url + ": HTTP " + std::to_string(status));
    return std::move(body.bytes);
  }
}

}  // namespace m3::media
