// Media URLs: data: URLs and base64, file:// confinement to --allowed-local-media-path (symlinks, "..",
// prefixes), and the http(s) refusals; every failure is kInvalidArgument with a short client-facing message.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "media/media_url.h"

using m3::media::decode_base64;
using m3::media::load_media_url;
using m3::media::MediaPolicy;
using Bytes = std::vector<uint8_t>;
namespace fs = std::filesystem;

namespace {

Bytes bytes_of(std::string_view s) {
  return Bytes(s.begin(), s.end());
}

// The message of the kInvalidArgument that loading `url` throws ("" after a test failure).
std::string load_error(const std::string& url, const MediaPolicy& policy = {}) {
  try {
    load_media_url(url, policy);
    ADD_FAILURE() << "loaded without error: " << url.substr(0, 200);
  } catch (const m3::Error& e) {
    EXPECT_EQ(e.kind(), m3::ErrorKind::kInvalidArgument) << e.what();
    EXPECT_LT(std::string(e.what()).size(), 300u) << e.what();
    return e.what();
  }
  return "";
}

std::string base64_error(std::string_view text) {
  try {
    decode_base64(text);
    ADD_FAILURE() << "decoded without error: " << text;
  } catch (const m3::Error& e) {
    EXPECT_EQ(e.kind(), m3::ErrorKind::kInvalidArgument) << e.what();
    return e.what();
  }
  return "";
}

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << (haystack)

}  // namespace

// ---- base64 -----------------------------------------------------------------------------------------------

TEST(Base64, DecodesStandardAndUrlSafe) {
  EXPECT_EQ(decode_base64(""), Bytes{});
  EXPECT_EQ(decode_base64("Zg=="), bytes_of("f"));
  EXPECT_EQ(decode_base64("Zg"), bytes_of("f"));
  EXPECT_EQ(decode_base64("Zm8="), bytes_of("fo"));
  EXPECT_EQ(decode_base64("Zm8"), bytes_of("fo"));
  EXPECT_EQ(decode_base64("Zm9v"), bytes_of("foo"));
  EXPECT_EQ(decode_base64("Zm9vYmFy"), bytes_of("foobar"));
  EXPECT_EQ(decode_base64("+/8="), (Bytes{0xFB, 0xFF}));
  EXPECT_EQ(decode_base64("-_8="), (Bytes{0xFB, 0xFF}));
  EXPECT_EQ(decode_base64("AAEC/f7/"), (Bytes{0, 1, 2, 0xFD, 0xFE, 0xFF}));
  EXPECT_EQ(decode_base64(" Zm9v\r\nYm\tFy \n"), bytes_of("foobar"));
  EXPECT_EQ(decode_base64("Zg=\n="), bytes_of("f"));
}

TEST(Base64, RejectsBadInput) {
  EXPECT_CONTAINS(base64_error("Zm9v!"), "invalid base64");
  EXPECT_CONTAINS(base64_error("Zm9v\x80"), "invalid base64");
  base64_error("Z");         // one symbol is not a byte
  base64_error("Zm9vY");     // nor is 4n + 1
  base64_error("Zg=");       // padding that does not complete a quad
  base64_error("Zg===");     // too much padding
  base64_error("Zg==Zg==");  // data after padding
  base64_error(std::string_view("Zm\0v", 4));
}

// ---- data: URLs -------------------------------------------------------------------------------------------

TEST(MediaUrl, DataUrls) {
  EXPECT_EQ(load_media_url("data:image/png;base64,Zm9v", {}), bytes_of("foo"));
  EXPECT_EQ(load_media_url("DATA:Image/PNG;BASE64,Zm9v", {}), bytes_of("foo"));
  EXPECT_EQ(load_media_url("data:;base64,Zm9v", {}), bytes_of("foo"));
  EXPECT_EQ(load_media_url("data:video/mp4;base64,Zm9v", {}), bytes_of("foo"));
  EXPECT_EQ(load_media_url("data:application/octet-stream;base64,Zm9v", {}), bytes_of("foo"));
  EXPECT_EQ(load_media_url("data:image/jpeg;name=a.jpg;base64,Zm9v\nYmFy", {}), bytes_of("foobar"));
  EXPECT_EQ(load_media_url("data:image/png;base64,", {}), Bytes{});
}

TEST(MediaUrl, BadDataUrls) {
  EXPECT_EQ(load_error("data:image/png,rawbytes"), "data: URLs must be base64-encoded");
  EXPECT_EQ(load_error("data:image/png;charset=utf-8,rawbytes"), "data: URLs must be base64-encoded");
  EXPECT_CONTAINS(load_error("data:image/png;base64"), "no ','");
  EXPECT_CONTAINS(load_error("data:text/plain;base64,Zm9v"), "'text/plain' is not an image or video");
  EXPECT_CONTAINS(load_error("data:image/png;base64,Zm9v*"), "invalid base64");
}

TEST(MediaUrl, DataUrlSizeLimitCheckedBeforeDecoding) {
  MediaPolicy policy;
  policy.max_bytes = 6;
  EXPECT_EQ(load_media_url("data:image/png;base64,Zm9vYmFy", policy), bytes_of("foobar"));
  EXPECT_EQ(load_media_url("data:image/png;base64,Zm9v\n\n\n\nYmFy", policy), bytes_of("foobar"));
  EXPECT_EQ(load_error("data:image/png;base64,Zm9vYmFyYg==", policy),
            "the data: URL's content is 7 bytes; the limit is 6 bytes");
  // A huge payload: refused on its length, and the message quotes none of it.
  std::string huge = "data:image/png;base64," + std::string(4 << 20, 'A');
  EXPECT_EQ(load_error(huge, policy), "the data: URL's content is 3145728 bytes; the limit is 6 bytes");
}

// ---- schemes ----------------------------------------------------------------------------------------------

TEST(MediaUrl, UnsupportedSchemes) {
  EXPECT_CONTAINS(load_error("ftp://example.com/a.png"), "unsupported image URL scheme 'ftp'");
  EXPECT_CONTAINS(load_error(""), "unsupported image URL scheme");
  EXPECT_CONTAINS(load_error("just some text"), "unsupported image URL scheme");
  EXPECT_CONTAINS(load_error("/etc/passwd"), "unsupported image URL scheme");
  EXPECT_CONTAINS(load_error("C:\\images\\a.png"), "unsupported image URL scheme");
  // Long URLs are quoted short.
  std::string message = load_error("gopher:" + std::string(5000, 'x'));
  EXPECT_CONTAINS(message, "unsupported image URL scheme 'gopher'");
  message = load_error(std::string(5000, 'y'));
  EXPECT_CONTAINS(message, "...");
  EXPECT_LT(message.size(), 200u);
}

TEST(MediaUrl, RemoteUrlsOnlyForAllowedHosts) {
  const std::string disabled =
      "remote media URLs are disabled; the server allows only domains listed in --allowed-media-domains";
  EXPECT_EQ(load_error("https://example.com/cat.png"), disabled);
  EXPECT_EQ(load_error("http://example.com/cat.png"), disabled);

  MediaPolicy policy;
  policy.allowed_media_domains = {"images.example.com", "[::1]"};
  const std::string not_allowed = "is not in --allowed-media-domains";
  // Host confusion: the host is what an HTTP client would connect to.
  EXPECT_CONTAINS(load_error("https://images.example.com@evil.com/cat.png", policy), not_allowed);
  EXPECT_CONTAINS(load_error("https://evil.com\\@images.example.com/cat.png", policy), not_allowed);
  EXPECT_CONTAINS(load_error("https://images.example.com.evil.com/cat.png", policy), not_allowed);
  EXPECT_CONTAINS(load_error("https://evil.com/images.example.com", policy), not_allowed);
  EXPECT_CONTAINS(load_error("https://evil.com#@images.example.com", policy), not_allowed);
  EXPECT_CONTAINS(load_error("https:///cat.png", policy), not_allowed);
  EXPECT_CONTAINS(load_error("https:images.example.com/cat.png", policy), "malformed https:// URL");
}

// ---- file:// ----------------------------------------------------------------------------------------------

namespace {

class FileUrl : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string templ = (fs::temp_directory_path() / "m3_media_url_XXXXXX").string();
    ASSERT_NE(mkdtemp(templ.data()), nullptr);
    root_ = templ;
    fs::create_directories(root_ / "allowed" / "sub");
    fs::create_directories(root_ / "allowed2");
    fs::create_directories(root_ / "outside");
    write(root_ / "allowed" / "cat.png", "meow");
    write(root_ / "allowed" / "sub" / "my image#1.png", "purr");
    write(root_ / "allowed2" / "dog.png", "woof");
    write(root_ / "outside" / "secret.txt", "secret");
    fs::create_symlink(root_ / "outside" / "secret.txt", root_ / "allowed" / "link.png");
    fs::create_directory_symlink(root_ / "outside", root_ / "allowed" / "dirlink");
    fs::create_symlink(root_ / "allowed" / "cat.png", root_ / "allowed" / "inner_link.png");
    fs::create_directory_symlink(root_ / "allowed", root_ / "allowed_alias");
    policy_.allowed_local_media_path = (root_ / "allowed").string();
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  static void write(const fs::path& path, const std::string& text) {
    std::ofstream(path, std::ios::binary) << text;
  }
  std::string url(const std::string& relative) const { return "file://" + (root_ / relative).string(); }

  fs::path root_;
  MediaPolicy policy_;
};

}  // namespace

TEST_F(FileUrl, DisabledWithoutTheFlag) {
  EXPECT_EQ(load_error(url("allowed/cat.png")), "file:// URLs need --allowed-local-media-path");
}

TEST_F(FileUrl, ReadsFilesInside) {
  EXPECT_EQ(load_media_url(url("allowed/cat.png"), policy_), bytes_of("meow"));
  EXPECT_EQ(load_media_url(url("allowed/sub/my%20image%231.png"), policy_), bytes_of("purr"));
  EXPECT_EQ(load_media_url(url("allowed/sub/../cat.png"), policy_), bytes_of("meow"));
  EXPECT_EQ(load_media_url(url("allowed//sub/./..//cat.png"), policy_), bytes_of("meow"));
  EXPECT_EQ(load_media_url(url("allowed/inner_link.png"), policy_), bytes_of("meow"));
  EXPECT_EQ(load_media_url(url("allowed/cat.png?query#fragment"), policy_), bytes_of("meow"));
  EXPECT_EQ(load_media_url(url("allowed_alias/cat.png"), policy_), bytes_of("meow"));
  MediaPolicy trailing = policy_;
  trailing.allowed_local_media_path += "/";
  EXPECT_EQ(load_media_url(url("allowed/cat.png"), trailing), bytes_of("meow"));
  MediaPolicy via_alias = policy_;
  via_alias.allowed_local_media_path = (root_ / "allowed_alias").string();
  EXPECT_EQ(load_media_url(url("allowed/cat.png"), via_alias), bytes_of("meow"));
}

TEST_F(FileUrl, RefusesPathsOutside) {
  for (const char* relative :
       {"outside/secret.txt", "allowed/../outside/secret.txt", "allowed/link.png",
        "allowed/dirlink/secret.txt", "allowed/missing/../link.png",
        "allowed/missing/../../outside/secret.txt", "allowed2/dog.png", "outside/missing.png"}) {
    SCOPED_TRACE(relative);
    std::string message = load_error(url(relative), policy_);
    EXPECT_CONTAINS(message, "is outside --allowed-local-media-path");
    EXPECT_EQ(message.find("secret\""), std::string::npos);
  }
  EXPECT_CONTAINS(load_error("file:///etc/passwd", policy_),
                  "'/etc/passwd' is outside --allowed-local-media-path");
  EXPECT_CONTAINS(load_error("file:////etc/passwd", policy_), "is outside --allowed-local-media-path");
  EXPECT_CONTAINS(load_error("file:///%2E%2E/etc/passwd", policy_), "is outside --allowed-local-media-path");
}

TEST_F(FileUrl, ReportsUnreadableFiles) {
  EXPECT_CONTAINS(load_error(url("allowed/missing.png"), policy_), "cannot read");
  EXPECT_CONTAINS(load_error(url("allowed/sub"), policy_), "not a regular file");
  MediaPolicy small = policy_;
  small.max_bytes = 3;
  EXPECT_CONTAINS(load_error(url("allowed/cat.png"), small), "is 4 bytes; the limit is 3 bytes");
}

TEST_F(FileUrl, MalformedFileUrls) {
  EXPECT_CONTAINS(load_error("file://localhost" + (root_ / "allowed/cat.png").string(), policy_),
                  "absolute local path");
  EXPECT_CONTAINS(load_error("file:" + (root_ / "allowed/cat.png").string(), policy_), "absolute local path");
  EXPECT_CONTAINS(load_error(url("allowed/cat%2.png"), policy_), "malformed percent-escape");
  EXPECT_CONTAINS(load_error(url("allowed/cat%00.png"), policy_), "malformed file:// URL");
}
