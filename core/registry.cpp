// Registration places and the failures of static registrations (core/registry.h).
#include "core/registry.h"


namespace kiln {

namespace {
std::vector<std::string>& failures() {
  static std::vector<std::string> f;
  return f;
}
}  // namespace

std::string place_text(const SourcePlace& where) {
  // The file as the compiler was given it (absolute, or relative to the build folder), shortened to
  // the path under kiln's source folders (models/registry.cpp) where it lies in one.
  std::string file = where.file_name();
  size_t cut = std::string::npos;
  for (const char* top : {"/core/", "/layers/", "/models/", "/optim/", "/data/", "/tools/"}) {
    const size_t at = file.rfind(top);
    if (at != std::string::npos && (cut == std::string::npos || at > cut)) cut = at;
  }
  if (cut != std::string::npos) file = file.substr(cut + 1);
  return file + ":" + std::to_string(where.line());
}

void note_registration_failure(const std::string& what) { failures().push_back(what); }

void check_registrations() {
  if (failures().empty()) return;
  std::string all;
  for (const std::string& f : failures()) all += (all.empty() ? "" : "; ") + f;
  KILN_FAIL("registration failed at start-up: ", all);
}

Registration::Registration(void (*add)()) noexcept {
  try {
    add();
  } catch (const std::exception& e) {
    note_registration_failure(e.what());
  } catch (...) {
    note_registration_failure("a registration threw a non-standard exception");
  }
}

}  // namespace kiln
