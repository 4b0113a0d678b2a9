// Running a sweep's runs as child `kiln train` processes (runner.h).
#include "tools/sweep/runner.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include "core/device.h"
#include "tools/deploy/config.h"
#include "tools/engine/metrics.h"  // write_file_atomically
#include "tools/engine/run_lock.h"
#include "tools/sweep/run_state.h"
#include "tools/sweep/summary.h"

namespace fs = std::filesystem;

namespace kiln::sweep {

namespace {

volatile sig_atomic_t g_signals = 0, g_last_signal = 0;
extern "C" void on_stop_signal(int sig) {
  g_last_signal = sig;
  g_signals = g_signals + 1;
}

// SIGINT/SIGTERM counted for the sweep's lifetime (the previous handlers come back after).
class StopSignals {
 public:
  StopSignals() {
    g_signals = 0;
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
  }
  ~StopSignals() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }

 private:
  struct sigaction old_int_ {}, old_term_ {};
};

// Starts argv with stdout and stderr appended to `log`, stdin from /dev/null, in its own process group,
// with SIGTERM when this process dies. Everything the child uses is prepared before fork (only
// async-signal-safe calls between fork and exec).
pid_t spawn_child(const std::vector<std::string>& args, const std::string& log) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  KILN_CHECK(pid >= 0, "kiln sweep: cannot start a process (fork failed): ", std::strerror(errno));
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(143);  // the sweep died before the line above
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    const int null_fd = open("/dev/null", O_RDONLY);
    if (fd >= 0) dup2(fd, 1), dup2(fd, 2);
    if (null_fd >= 0) dup2(null_fd, 0);
    execv(argv[0], argv.data());
    static const char kMsg[] = "kiln sweep: cannot run the kiln executable\n";
    (void)!write(2, kMsg, sizeof kMsg - 1);
    _exit(127);
  }
  return pid;
}

// The error a run's log ended with: its last "error" line, else its last line (at most 300 characters).
std::string last_error(const std::string& log) {
  std::ifstream in(log);
  std::string line, last, err;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \r\t") == std::string::npos) continue;
    last = line;
    if (line.find("error") != std::string::npos) err = line;
  }
  std::string e = err.empty() ? last : err;
  if (e.size() > 300) e = e.substr(0, 297) + "...";
  return e.empty() ? "(the log is empty)" : e;
}

std::string clock_text(double s) {
  const long t = std::lround(std::max(0.0, s));
  char buf[32];
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  else std::snprintf(buf, sizeof buf, "%ld:%02ld", t / 60, t % 60);
  return buf;
}

int64_t usable_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max<int64_t>(1, std::thread::hardware_concurrency());
}

// Whether the run config leaves the thread count to OpenMP (train.threads absent, 0 or "auto").
bool threads_unset(const json& config) {
  const json t = config.value("train", json::object()).value("threads", json("auto"));
  return t.is_null() || t == "auto" || t == 0;
}

// The command that starts or resumes `run` (its folder prepared): `kiln train RUN` when it has a checkpoint
// to resume; else a new run from configs/<run>.json (a folder without a checkpoint moved to restarted/).
std::vector<std::string> child_command(const SweepPlan& plan, const PlannedRun& run, const RunnerOptions& opt,
                                       int64_t threads, bool* resumed) {
  const fs::path dir = fs::path(plan.dir) / run.name;
  std::vector<std::string> args = {opt.kiln, "train"};
  *resumed = fs::exists(dir / "last") && fs::exists(dir / "config.json");
  if (*resumed) {
    args.push_back(dir.string());
    return args;
  }
  if (fs::exists(dir)) {
    const fs::path aside = fs::path(plan.dir) / "restarted";
    fs::create_directories(aside);
    int n = 1;
    while (fs::exists(aside / (run.name + "-" + std::to_string(n)))) ++n;
    fs::rename(dir, aside / (run.name + "-" + std::to_string(n)));
  }
  json config = run_config(plan, run);
  if (threads > 0 && threads_unset(config)) config["train"]["threads"] = threads;
  const fs::path file = fs::path(plan.dir) / "configs" / (run.name + ".json");
  fs::create_directories(file.parent_path());
  write_file_atomically(file.string(), config.dump(2) + "\n");
  args.push_back(file.string());
  return args;
}

// Whether every run of the plan trains on the CPU: train.device "cpu", or "" (the first GPU if any) on a machine
// without one.
bool all_on_cpu(const SweepPlan& plan) {
  for (const PlannedRun& r : planned_runs(plan)) {
    const json d = run_config(plan, r).value("train", json::object()).value("device", json(""));
    if (d == "cpu") continue;
    if (d == "" && cuda_device_count() == 0) continue;
    return false;
  }
  return true;
}

struct Child {
  pid_t pid = -1;
  size_t index = 0;  // in planned_runs
  std::vector<std::string> devices;
  std::chrono::steady_clock::time_point start;
  std::string log;
  std::uintmax_t log_start = 0;  // the log's size when it started: what it wrote since lies after
};

// Whether the child already says it got a stop signal ("kiln: SIGTERM: finishing the step in flight"): a
// scheduler (SLURM's scancel) signals every process of the job, and a second signal would stop it unsaved.
bool child_got_stop(const Child& c) {
  std::ifstream in(c.log, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(c.log_start));
  const std::string since((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return since.find("kiln: SIGINT: finishing") != std::string::npos ||
         since.find("kiln: SIGTERM: finishing") != std::string::npos;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

bool take_devices(const std::vector<std::string>& need, std::vector<std::string>& free, std::vector<std::string>* taken) {
  taken->clear();
  if (need.empty()) {
    if (free.empty()) return false;
    taken->push_back(free.front());
    free.erase(free.begin());
    return true;
  }
  for (const std::string& d : need)
    if (std::count(free.begin(), free.end(), d) == 0) return false;
  for (const std::string& d : need) free.erase(std::find(free.begin(), free.end(), d));
  *taken = need;
  return true;
}

std::vector<std::string> variant_devices(const Variant& v) {
  std::vector<std::string> out;
  for (const std::string& o : v.overrides) {
    const std::optional<KeyValue> kv = split_key_value(o);
    if (!kv || expand_short_form(kv->key) != "train.device") continue;
    out.clear();
    std::string cur;
    for (char c : kv->value + ",") {
      if (c == ',') {
        if (!cur.empty()) out.push_back(cur);
        cur.clear();
      } else if (c != '[' && c != ']' && c != ' ' && c != '"') {
        cur += c;
      }
    }
  }
  return out;
}

double sweep_eta_seconds(double mean_run_s, const std::vector<double>& in_flight_elapsed_s, size_t waiting, int64_t slots) {
  std::vector<double> free_in;  // seconds until each slot is free
  for (double e : in_flight_elapsed_s) free_in.push_back(std::max(0.0, mean_run_s - e));
  while (free_in.size() < static_cast<size_t>(std::max<int64_t>(1, slots))) free_in.push_back(0);
  for (size_t i = 0; i < waiting; ++i) *std::min_element(free_in.begin(), free_in.end()) += mean_run_s;
  return *std::max_element(free_in.begin(), free_in.end());
}

namespace {

// The sweep in flight: what is left, the children, the clock.
class SweepRun {
 public:
  SweepRun(const SweepPlan& plan, const RunnerOptions& opt, std::ostream& out)
      : plan_(plan), opt_(opt), out_(out), runs_(planned_runs(plan)) {}
  int run();

 private:
  void plan_work();
  void start_ready();
  void reap();
  void ended(const Child& c, int code);
  std::string eta(size_t ending = SIZE_MAX) const;  // `ending`: a run that has just ended, still a child
  std::string tag(size_t i) const {
    return "[sweep " + plan_.name + "] run " + std::to_string(i + 1) + " of " + std::to_string(runs_.size()) + ": " +
           runs_[i].name;
  }

  const SweepPlan& plan_;
  const RunnerOptions& opt_;
  std::ostream& out_;
  std::vector<PlannedRun> runs_;
  std::vector<size_t> waiting_;  // to start, plan order
  std::vector<Child> children_;
  std::vector<std::string> free_;
  int64_t threads_ = 0, slots_ = 1, finished_ = 0, failed_ = 0, to_run_ = 0, ended_here_ = 0;
  double ended_seconds_ = 0;
  int forwarded_ = 0;
};

void SweepRun::plan_work() {
  for (size_t i = 0; i < runs_.size(); ++i) {
    const RunStatus s = run_status(plan_.dir, runs_[i].name);
    if (s.state == RunState::finished) ++finished_;
    else if (s.state == RunState::failed && !opt_.retry_failed) ++failed_;
    else waiting_.push_back(i);
  }
  to_run_ = static_cast<int64_t>(waiting_.size());
  const Placement& p = opt_.placement;
  free_ = p.devices;
  int64_t parallel = p.parallel;
  if (free_.empty()) {
    const int64_t cores = opt_.cores > 0 ? opt_.cores : usable_cores();
    if (parallel == 0) parallel = cores >= 2 && all_on_cpu(plan_) ? 2 : 1;
    free_.assign(static_cast<size_t>(parallel), "");
    if (parallel > 1) threads_ = std::max<int64_t>(1, cores / parallel);
  }
  slots_ = static_cast<int64_t>(free_.size());
  for (const Variant& v : plan_.variants)
    for (const std::string& d : variant_devices(v)) {
      KILN_CHECK(p.devices.empty() || std::count(p.devices.begin(), p.devices.end(), d) > 0, "kiln sweep ", plan_.name,
                 ": variant '", v.label, "' trains on device ", d, ", which is not among devices=", join(p.devices, ","));
    }
  out_ << "[sweep " << plan_.name << "] " << runs_.size() << " runs: " << finished_ << " finished, " << failed_
       << " failed (kept; retry=failed runs them again), " << to_run_ << " to run, "
       << (p.devices.empty() ? std::to_string(parallel) + " at a time on the run's device" +
                                   (threads_ > 0 ? " (" + std::to_string(threads_) + (threads_ == 1 ? " CPU thread" : " CPU threads") + " each)" : "")
                             : "one per device of " + join(p.devices, ","))
       << "; folder " << plan_.dir << std::endl;
}

// Each run takes the mean of those ended here (sweep_eta_seconds).
std::string SweepRun::eta(size_t ending) const {
  if (ended_here_ == 0) return "sweep eta after the first run";
  std::vector<double> elapsed;
  for (const Child& c : children_)
    if (c.index != ending) elapsed.push_back(seconds_since(c.start));
  return "sweep eta " + clock_text(sweep_eta_seconds(ended_seconds_ / static_cast<double>(ended_here_), elapsed,
                                                     waiting_.size(), slots_));
}

void SweepRun::start_ready() {
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    const PlannedRun& run = runs_[*it];
    std::vector<std::string> taken;
    std::vector<std::string> need = opt_.placement.devices.empty() ? std::vector<std::string>()
                                                                   : variant_devices(plan_.variants[run.variant]);
    if (!take_devices(need, free_, &taken)) {
      ++it;
      continue;
    }
    if (opt_.retry_failed) clear_failure(plan_.dir, run.name);
    bool resumed = false;
    std::vector<std::string> cmd = child_command(plan_, run, opt_, threads_, &resumed);
    if (!opt_.placement.devices.empty()) cmd.push_back("device=" + join(taken, ","));
    const fs::path logs = fs::path(plan_.dir) / "logs";
    fs::create_directories(logs);
    const std::string log = (logs / (run.name + ".log")).string();
    std::error_code ec;
    const std::uintmax_t size = fs::exists(log) ? fs::file_size(log, ec) : 0;
    children_.push_back(Child{spawn_child(cmd, log), *it, taken, std::chrono::steady_clock::now(), log, ec ? 0 : size});
    out_ << tag(*it) << (resumed ? " resumed" : " started")
         << (taken.empty() || taken[0].empty() ? "" : " on device " + join(taken, ",")) << " (log " << log << "; " << eta()
         << ")" << std::endl;
    it = waiting_.erase(it);
  }
}

void SweepRun::ended(const Child& c, int code) {
  const PlannedRun& run = runs_[c.index];
  const double took = seconds_since(c.start);
  const std::string log = (fs::path(plan_.dir) / "logs" / (run.name + ".log")).string();
  if (code == 0) {
    const RunStatus s = run_status(plan_.dir, run.name);
    const RunMetrics m = read_run((fs::path(plan_.dir) / run.name).string());
    if (s.state == RunState::finished) ++finished_;
    ++ended_here_;
    ended_seconds_ += took;
    char top1[64] = "";
    if (m.has_metrics) std::snprintf(top1, sizeof top1, ": val top1 %.2f%%", m.final_top1);
    out_ << tag(c.index) << " " << state_name(s.state) << " in " << clock_text(took) << top1 << " (" << finished_ << " of "
         << runs_.size() << " finished; " << eta(c.index) << ")" << std::endl;
  } else if (forwarded_ > 0 && (code == 128 + SIGINT || code == 128 + SIGTERM)) {
    out_ << tag(c.index) << " stopped by the signal (exit " << code << "); it resumes when the sweep continues" << std::endl;
  } else {
    const std::string err = last_error(log);
    record_failure(plan_.dir, run.name, err, code);
    ++failed_;
    ++ended_here_;
    ended_seconds_ += took;
    out_ << tag(c.index) << " FAILED (exit " << code << "): " << err << "; recorded in " << plan_.dir
         << "/failed.json, the sweep goes on (kiln sweep " << plan_.dir << " retry=failed runs it again)" << std::endl;
  }
}

void SweepRun::reap() {
  for (auto it = children_.begin(); it != children_.end();) {
    int status = 0;
    if (waitpid(it->pid, &status, WNOHANG) != it->pid) {
      ++it;
      continue;
    }
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    ended(*it, code);
    for (const std::string& d : it->devices) free_.push_back(d);
    it = children_.erase(it);
    std::vector<std::string> running;
    for (const Child& c : children_) running.push_back(runs_[c.index].name);
    write_summary(summarize(plan_, running), plan_.dir);
  }
}

int SweepRun::run() {
  plan_work();
  StopSignals signals;
  while (true) {
    if (g_signals > forwarded_) {
      if (forwarded_ == 0)
        out_ << "\n[sweep " << plan_.name << "] " << (g_last_signal == SIGINT ? "SIGINT" : "SIGTERM") << ": stopping the "
             << children_.size() << " run(s) in flight (each saves; a second signal stops them at once)" << std::endl;
      // The first signal: to each run that did not get it itself (a scheduler may signal every process of
      // the job; the run's handler says so in its log within a moment). A second one: to every run.
      if (forwarded_ == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
      for (const Child& c : children_)
        if (forwarded_ > 0 || !child_got_stop(c)) kill(c.pid, g_last_signal);
      forwarded_ = g_signals;
    }
    if (forwarded_ == 0) start_ready();
    if (children_.empty()) break;
    reap();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  write_summary(summarize(plan_), plan_.dir);
  if (forwarded_ > 0 && finished_ + failed_ < static_cast<int64_t>(runs_.size())) {
    out_ << "[sweep " << plan_.name << "] stopped: " << finished_ << " of " << runs_.size()
         << " runs finished; continue the sweep with: kiln sweep " << plan_.dir << std::endl;
    return 128 + g_last_signal;
  }
  out_ << "[sweep " << plan_.name << "] done: " << finished_ << " of " << runs_.size() << " runs finished"
       << (failed_ ? ", " + std::to_string(failed_) + " failed (kiln sweep " + plan_.dir + " retry=failed)" : "")
       << "; table: " << plan_.dir << "/summary.md" << std::endl;
  return failed_ ? 1 : 0;
}

}  // namespace

int run_sweep(const SweepPlan& plan, const RunnerOptions& opt, std::ostream& out) {
  RunLock lock(plan.dir, "kiln sweep");
  SweepRun run(plan, opt, out);
  return run.run();
}

}  // namespace kiln::sweep
