// Headers (case-insensitive lookups, arrival order, set / remove) and Request::query_param decoding.
#include <gtest/gtest.h>

#include "http/message.h"

namespace m3::http {
namespace {

TEST(HttpHeaders, LookupsIgnoreCaseAndKeepOrder) {
  Headers h;
  h.add("Content-Type", "application/json");
  h.add("X-Tag", "a");
  h.add("x-tag", "b");
  EXPECT_TRUE(h.has("content-type"));
  EXPECT_EQ(h.get("CONTENT-TYPE"), "application/json");
  EXPECT_EQ(h.get("X-TAG"), "a");
  EXPECT_EQ(h.count("x-Tag"), 2u);
  EXPECT_EQ(h.get("missing"), "");
  EXPECT_FALSE(h.has("missing"));
  ASSERT_EQ(h.size(), 3u);
  EXPECT_EQ(h.fields()[2].second, "b");
}

TEST(HttpHeaders, SetReplacesEveryFieldAndRemoveDropsThem) {
  Headers h;
  h.add("X-Tag", "a");
  h.add("Other", "o");
  h.add("x-tag", "b");
  h.set("X-TAG", "c");
  EXPECT_EQ(h.count("x-tag"), 1u);
  EXPECT_EQ(h.get("x-tag"), "c");
  h.remove("X-Tag");
  EXPECT_FALSE(h.has("x-tag"));
  EXPECT_EQ(h.size(), 1u);
}

TEST(HttpHeaders, IequalsComparesAsciiCaseInsensitively) {
  EXPECT_TRUE(iequals("Transfer-Encoding", "transfer-encoding"));
  EXPECT_FALSE(iequals("abc", "abd"));
  EXPECT_FALSE(iequals("abc", "abcd"));
  EXPECT_TRUE(iequals("", ""));
}

TEST(HttpRequest, QueryParamPercentDecodesAndTreatsPlusAsSpace) {
  Request r;
  r.query = "beta=true&q=hello+world%21&empty=&flag&enc%20key=v%2Bw&bad=%zz%4";
  EXPECT_EQ(r.query_param("beta"), "true");
  EXPECT_EQ(r.query_param("q"), "hello world!");
  EXPECT_EQ(r.query_param("empty"), "");
  EXPECT_EQ(r.query_param("flag"), "");
  EXPECT_EQ(r.query_param("enc key"), "v+w");
  EXPECT_EQ(r.query_param("bad"), "%zz%4");  // malformed escapes stay literal
  EXPECT_EQ(r.query_param("missing"), "");
}

TEST(HttpRequest, QueryParamReturnsTheFirstOccurrence) {
  Request r;
  r.query = "a=1&a=2";
  EXPECT_EQ(r.query_param("a"), "1");
}

}  // namespace
}  // namespace m3::http
