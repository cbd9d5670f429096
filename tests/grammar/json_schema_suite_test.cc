// The JSON-schema grammar against the JSON Schema Test Suite (tests/fixtures/json_schema_test_suite): every
// schema that compiles must reject every instance the suite calls invalid (soundness: output that follows the
// grammar always validates), and accept most valid ones. The grammar's language is narrower by design (object
// keys in the schema's order, integers without a fraction part, bounded digit runs), so a rejected valid
// instance is counted, not failed. oneOf is taken only when no value can match two branches (else a 400),
// which is what keeps it sound here.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"

namespace m3::grammar {
namespace {

using nlohmann::ordered_json;

TEST(JsonSchemaSuite, CompiledSchemasNeverAcceptInvalidInstances) {
  int groups = 0, compiled = 0, invalid_rejected = 0, valid = 0, valid_accepted = 0;
  for (const auto& entry : std::filesystem::directory_iterator("tests/fixtures/json_schema_test_suite")) {
    if (entry.path().extension() != ".json") continue;
    std::ifstream in(entry.path());
    const ordered_json file = ordered_json::parse(in);
    for (const ordered_json& group : file) {
      ++groups;
      const std::string what =
          entry.path().filename().string() + ": " + group["description"].get<std::string>();
      Grammar g;
      try {
        g = json_schema_grammar(group["schema"]);
      } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << what << ": " << e.what();
        continue;  // a keyword the compiler refuses, with a 400
      }
      ++compiled;
      for (const ordered_json& t : group["tests"]) {
        const std::string text = t["data"].dump();
        const bool ok = matches(g, text);
        if (t["valid"].get<bool>()) {
          ++valid;
          valid_accepted += ok;
        } else {
          EXPECT_FALSE(ok) << what << " / " << t["description"].get<std::string>()
                           << ": the grammar accepts an invalid instance " << text;
          invalid_rejected += !ok;
        }
      }
    }
  }
  std::printf(
      "JSON Schema Test Suite: %d groups, %d compiled; invalid instances rejected: %d; valid instances "
      "accepted: %d of %d\n",
      groups, compiled, invalid_rejected, valid_accepted, valid);
  EXPECT_GT(compiled, groups / 2);
  EXPECT_GT(invalid_rejected, 150);
  EXPECT_GT(valid_accepted * 10, valid * 7) << "the grammar should take most valid instances";
}

}  // namespace
}  // namespace m3::grammar
