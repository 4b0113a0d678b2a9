// Test helper: the `kiln` binary as a child process, its output in a log file, and what the tests
// that kill or signal it read back (tests/engine/checkpoint_kill_test.cpp, tests/cli/interrupt_test.cpp).
#pragma once
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace kiln::testing {

// The kiln binary of this build.
inline std::string kiln_binary() { return std::string(KILN_BINARY_DIR) + "/tools/kiln"; }

// The whole file, or its last `max_chars` characters ("" when it cannot be read).
inline std::string file_tail(const std::string& file, size_t max_chars = 3000) {
  std::ifstream in(file);
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return s.size() > max_chars ? s.substr(s.size() - max_chars) : s;
}

// `args` (args[0] the program) with stdout and stderr appended to `log`, one OpenMP thread (the
// machines have 2 cores and tests run beside each other), the rest of this environment; -1 on failure.
inline pid_t spawn_logged(const std::vector<std::string>& args, const std::string& log) {
  std::vector<std::string> env = {"OMP_NUM_THREADS=1", "OMP_WAIT_POLICY=passive"};
  for (char** e = environ; *e; ++e)
    if (std::string(*e).rfind("OMP_", 0) != 0) env.emplace_back(*e);
  std::vector<char*> argv, envp;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  return rc == 0 ? pid : -1;
}

// Waits until `done()` holds; false when the child `pid` exits first (its status in *status) or
// `timeout_s` passes (then it is killed).
template <typename Done>
bool wait_until(pid_t pid, Done done, double timeout_s, int* status) {
  const auto t0 = std::chrono::steady_clock::now();
  while (!done()) {
    if (waitpid(pid, status, WNOHANG) == pid) return false;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > timeout_s) {
      kill(pid, SIGKILL);
      waitpid(pid, status, 0);
      return false;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

// Waits for the child to end; its exit code, or 128 + the signal that killed it.
inline int wait_exit_code(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace kiln::testing

namespace kiln::testing {

// What a finished `kiln` command printed and returned.
struct KilnRun {
  int exit_code = -1;
  std::string out, err;
};

// Runs `kiln ARGS` (a shell command line's arguments) in the folder `cwd`, stdout captured, stderr
// through a file beside `cwd`; waits for it.
inline KilnRun run_kiln_in(const std::filesystem::path& cwd, const std::string& args) {
  const std::filesystem::path err = cwd.parent_path() / (cwd.filename().string() + ".stderr");
  const std::string cmd = "cd '" + cwd.string() + "' && '" + kiln_binary() + "' " + args + " 2>'" + err.string() + "'";
  KilnRun r;
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) r.out.append(buf, n);
  const int status = pclose(f);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.err = file_tail(err.string(), std::string::npos);
  return r;
}

}  // namespace kiln::testing
