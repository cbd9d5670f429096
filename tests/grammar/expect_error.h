// Test helper for the grammar front ends: a compile that must fail with kInvalidArgument naming `part`.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "common/error.h"

namespace m3::grammar {

// Runs compile(input); expects m3::Error(kInvalidArgument) whose message contains `part`.
template <typename Compile>
void expect_compile_error(Compile compile, const std::string& input, const std::string& part) {
  try {
    compile(input);
    ADD_FAILURE() << "no error for: " << input;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
        << "message: " << e.what() << "\nexpected to contain: " << part << "\nfor: " << input;
  }
}

}  // namespace m3::grammar
