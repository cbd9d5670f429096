// Error kinds and log-level parsing.
#include <gtest/gtest.h>

#include "common/error.h"
#include "common/log.h"

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
