// Error kinds and log-level parsing.
#include <gtest/gtest.h>

#include "common/error.h"
#include "common/log.h"

#include <nlohmann/json.hpp>

namespace m3 {
namespace {

TEST(Common, ErrorCarriesKindAndMessage) {
  try {
    fail(ErrorKind::kNotFound, "tensor 'x' in a.safetensors");
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNotFound);
    EXPECT_STREQ(e.what(), "tensor 'x' in a.safetensors");
    EXPECT_STREQ(error_kind_name(e.kind()), "not found");
    return;
  }
  FAIL();
}

TEST(Common, LogLevels) {
  EXPECT_EQ(parse_log_level("debug"), LogLevel::kDebug);
  EXPECT_EQ(parse_log_level("warning"), LogLevel::kWarn);
  EXPECT_THROW(parse_log_level("loud"), Error);
}

}  // namespace
}  // namespace m3

namespace m3 {
namespace {

TEST(Common, JsonLogLinesAreOneObjectWithFields) {
  set_log_format(LogFormat::kJson);
  ::testing::internal::CaptureStderr();
  log_fields(LogLevel::kWarn, "http", {{"status", "404"}, {"path", "/x\"y"}});
  const std::string out = ::testing::internal::GetCapturedStderr();
  set_log_format(LogFormat::kText);
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out.back(), '\n');
  const auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["level"], "warn");
  EXPECT_EQ(j["msg"], "http");
  EXPECT_EQ(j["status"], "404");
  EXPECT_EQ(j["path"], "/x\"y");
  EXPECT_TRUE(j.contains("time"));
  EXPECT_THROW(parse_log_format("xml"), Error);
}

TEST(Common, TextLogLinesCarryFieldsAsKeyValues) {
  ::testing::internal::CaptureStderr();
  log_fields(LogLevel::kError, "http", {{"status", "500"}});
  const std::string out = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(out.rfind("ERROR ", 0), 0u) << out;
  EXPECT_NE(out.find("http status=500"), std::string::npos) << out;
}

}  // namespace
}  // namespace m3
