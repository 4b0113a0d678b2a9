// Helpers for tests of config and usage errors (tests/layers and tests/models).
#pragma once
#include <gtest/gtest.h>

#include <string>

#include "core/check.h"
#include "tests/expect_error.h"  // error_of

namespace kiln::testing {


inline void expect_has(const std::string& msg, const std::string& part) {
  EXPECT_NE(msg.find(part), std::string::npos) << "message: " << msg << "\nexpected to contain: " << part;
}

}  // namespace kiln::testing
