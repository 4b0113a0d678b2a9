// Test helper: expect a call to throw kiln::Error whose message contains every given part (the op,
// the shapes, what is accepted), so error messages stay useful.
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "core/check.h"

// EXPECT_HAS(message, part): the message contains `part` (printed whole when it does not).
#define EXPECT_HAS(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << (msg)

namespace kiln::testing {

inline void expect_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "expected kiln::Error mentioning " << (parts.empty() ? "" : parts[0]);
  } catch (const Error& e) {
    std::string m = e.what();
    for (const auto& p : parts) EXPECT_NE(m.find(p), std::string::npos) << "'" << p << "' not in: " << m;
  }
}

// The message of the kiln::Error `f` throws; "" when it throws none.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// error_of(f) without the " (file.cpp:123)" that builds without NDEBUG append (core/check.h), for
// tests that compare a whole message.
inline std::string error_text_of(const std::function<void()>& f) {
  std::string m = error_of(f);
  const auto open = m.rfind(" (");
  if (open != std::string::npos && !m.empty() && m.back() == ')') {
    const std::string loc = m.substr(open + 2, m.size() - open - 3);
    const auto colon = loc.rfind(':');
    const bool digits = colon != std::string::npos && colon + 1 < loc.size() &&
                        loc.find_first_not_of("0123456789", colon + 1) == std::string::npos;
    if (digits && loc.find(' ') == std::string::npos) m.erase(open);
  }
  return m;
}

}  // namespace kiln::testing
