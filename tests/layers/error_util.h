// Helpers for tests of config and usage errors (tests/layers and tests/models).
#pragma once
#include <gtest/gtest.h>

#include <string>

#include "core/check.h"

namespace kiln::testing {

// The message of the kiln::Error that f throws ("" when it throws none).
template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

inline void expect_has(const std::string& msg, const std::string& part) {
  EXPECT_NE(msg.find(part), std::string::npos) << "message: " << msg << "\nexpected to contain: " << part;
}

}  // namespace kiln::testing
