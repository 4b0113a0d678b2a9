// The convolution algorithm chooser and its caches (process and disk). See conv_algo.h.
//
// Disk format 2 (docs/conv_algorithms.md): the machine without the thread count, each entry with its own,
//   {"kiln_conv_algo": 2, "machine": file_machine(),
//    "entries": [{"key": ConvKey::str(), "pass": "forward", "threads": 2, "algo": "winograd",
//                 "ms": {"direct": 1.9, "winograd": 1.2}}, ...]}
// so that processes of different thread counts share one file. Format 1 (the thread count in
// "machine": "CPU; 2 threads; oneDNN ..."; entries without "threads") is still read.
#include "core/cpu/conv_algo.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/check.h"
#include "core/dnnl_context.h"

namespace kiln::ops::conv_algo {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kWarmup = 1, kReps = 3;
constexpr int kFormat = 2;
// The revision of the candidates' kernels, part of machine_id(): a cache measured against other
// kernels (or another candidate set) is measured again. 2: the AVX2 Winograd transforms. 3: im2col
// for forward and backward-data. 4: the blocked view of direct.
constexpr int kKernelsRevision = 4;

std::atomic<int> g_mode{-1};
std::atomic<int> g_excluded{0};  // bit (1 << Algo) per candidate left out

bool is_excluded(Algo a) { return (g_excluded.load() >> static_cast<int>(a)) & 1; }

// " -im2col" per candidate left out: the choices made without them are kept apart from the full set's.
std::string exclusion_suffix() {
  std::string s;
  for (Algo a : {Algo::winograd, Algo::im2col, Algo::blocked})
    if (is_excluded(a)) s += std::string(" -") + algo_name(a);
  return s;
}

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

double clock_timer(const Candidate& c, double best) {
  double first = 0;
  for (int i = 0; i < kWarmup; ++i) {
    auto t0 = Clock::now();
    c.run();
    first = ms_since(t0);
  }
  // Far slower than the best already: its warm-up run says enough, and more runs only cost time.
  if (best > 0 && first > 3 * best) return first;
  double ms = std::numeric_limits<double>::infinity();
  for (int i = 0; i < kReps; ++i) {
    auto t0 = Clock::now();
    c.run();
    ms = std::min(ms, ms_since(t0));
  }
  return ms;
}

std::string default_cache_path() {
  if (const char* e = std::getenv("KILN_CONV_CACHE")) {
    std::string s(e);
    if (s == "off" || s == "0" || s == "none") return "";
    if (!s.empty()) return s;
  }
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/kiln/conv_algo.json";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/kiln/conv_algo.json";
  return "";
}

// An entry of the file: a choice and the OpenMP thread count it was measured with.
struct DiskEntry {
  Entry entry;
  int threads = 0;
};

int current_threads() { return omp_get_max_threads(); }

struct State {
  std::mutex mu;
  std::map<std::string, size_t> index;  // key + "|" + pass -> position in `list`
  std::vector<Entry> list;
  Stats stats;
  Timer timer;
  bool loaded = false;
  bool path_set = false;
  std::string path;
  std::function<void(const std::string&)> warn;
  std::set<std::string> disk_used;  // disk entries answered in this process (counted once)
  std::map<std::string, int> threads_of;  // slot -> the thread count its entry was measured with

  std::string cache_path_locked() {
    if (!path_set) {
      path = default_cache_path();
      path_set = true;
    }
    return path;
  }
  void warning(const std::string& m) {
    if (warn)
      warn(m);
    else
      std::fprintf(stderr, "kiln: warning: %s\n", m.c_str());
  }
};

State& state() {
  static State s;
  return s;
}

std::string slot(const std::string& key, Pass p) { return key + "|" + pass_name(p); }

bool algo_from(const std::string& s, Algo* a) {
  for (Algo x : {Algo::direct, Algo::winograd, Algo::im2col, Algo::blocked})
    if (s == algo_name(x)) return *a = x, true;
  return false;
}
bool pass_from(const std::string& s, Pass* p) {
  for (Pass x : {Pass::forward, Pass::backward_data, Pass::backward_weights})
    if (s == pass_name(x)) return *p = x, true;
  return false;
}

// The CPU, oneDNN and kernels part of machine_id(), without the thread count: format 2's "machine".
std::string file_machine();

// Format 1's "machine", "CPU; N threads; REST": N, and whether "CPU; REST" is this file_machine().
bool format1_machine(const std::string& m, int* threads) {
  const std::string tag = " threads; ";
  const size_t t = m.find(tag);
  if (t == std::string::npos) return false;
  const size_t start = m.rfind("; ", t);
  if (start == std::string::npos) return false;
  const std::string n = m.substr(start + 2, t - start - 2);
  if (n.empty() || n.size() > 6 || n.find_first_not_of("0123456789") != std::string::npos) return false;
  *threads = std::stoi(n);
  return *threads >= 1 && m.substr(0, start) + "; " + m.substr(t + tag.size()) == file_machine();
}

// The entries of a cache file (every thread count's), or false with the reason ("" when there is no file).
bool read_file(const std::string& path, std::vector<DiskEntry>* out, std::string* why) {
  std::ifstream f(path);
  if (!f) return *why = "", false;  // no file yet: nothing to say
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const std::exception& e) {
    *why = std::string("it is not valid JSON (") + e.what() + ")";
    return false;
  }
  if (!j.is_object() || !j.contains("kiln_conv_algo") || !(j["kiln_conv_algo"] == 1 || j["kiln_conv_algo"] == kFormat) ||
      !j.contains("machine") || !j["machine"].is_string() || !j.contains("entries") || !j["entries"].is_array()) {
    *why = "it is not a kiln conv_algo cache of format 1 or 2 (keys kiln_conv_algo, machine, entries)";
    return false;
  }
  const bool old = j["kiln_conv_algo"] == 1;
  const std::string machine = j["machine"].get<std::string>();
  int old_threads = 0;  // format 1: every entry's, from "machine"
  if (old ? !format1_machine(machine, &old_threads) : machine != file_machine()) {
    *why = "it was written for another machine or kiln version (\"" + machine + "\", this one is \"" +
           (old ? machine_id() : file_machine()) + "\")";
    return false;
  }
  std::vector<DiskEntry> es;
  for (size_t i = 0; i < j["entries"].size(); ++i) {
    const auto& e = j["entries"][i];
    DiskEntry d;
    Entry& en = d.entry;
    bool ok = e.is_object() && e.contains("key") && e["key"].is_string() && e.contains("pass") &&
              e["pass"].is_string() && e.contains("algo") && e["algo"].is_string() &&
              pass_from(e["pass"].get<std::string>(), &en.pass) && algo_from(e["algo"].get<std::string>(), &en.choice.algo);
    if (ok && old) {
      d.threads = old_threads;
    } else if (ok) {
      ok = e.contains("threads") && e["threads"].is_number_integer() && e["threads"].get<int64_t>() >= 1 &&
           e["threads"].get<int64_t>() <= 1 << 20;
      if (ok) d.threads = static_cast<int>(e["threads"].get<int64_t>());
    }
    if (ok && e.contains("ms")) {
      ok = e["ms"].is_object();
      for (auto it = e["ms"].begin(); ok && it != e["ms"].end(); ++it) {
        Timing t{};
        ok = algo_from(it.key(), &t.algo) && it->is_number();
        if (ok) t.ms = it->get<double>(), en.choice.times.push_back(t);
      }
    }
    if (!ok) {
      *why = "entries[" + std::to_string(i) + "] is not {key, pass, " + (old ? "" : "threads, ") +
             "algo, ms} with known pass and algorithm names" + (old ? "" : " and a thread count >= 1");
      return false;
    }
    en.key = e["key"].get<std::string>();
    en.choice.from_disk = true;
    es.push_back(std::move(d));
  }
  *out = std::move(es);
  return true;
}

void insert_locked(State& s, Entry e) {
  const std::string k = slot(e.key, e.pass);
  auto it = s.index.find(k);
  if (it != s.index.end()) {
    s.list[it->second] = std::move(e);
    return;
  }
  s.index.emplace(k, s.list.size());
  s.list.push_back(std::move(e));
}

bool load_locked(State& s) {
  s.loaded = true;
  const std::string path = s.cache_path_locked();
  if (path.empty()) return false;
  std::vector<DiskEntry> es;
  std::string why;
  if (!read_file(path, &es, &why)) {
    if (!why.empty()) s.warning("ignoring the convolution algorithm cache " + path + ": " + why);
    return false;
  }
  const int threads = current_threads();  // other thread counts' entries stay in the file for their processes
  for (DiskEntry& d : es) {
    const std::string sl = slot(d.entry.key, d.entry.pass);
    if (d.threads != threads || s.index.count(sl)) continue;
    s.threads_of[sl] = threads;
    insert_locked(s, std::move(d.entry));
  }
  return true;
}

void save_locked(State& s) {
  const std::string path = s.cache_path_locked();
  if (path.empty()) return;
  std::vector<DiskEntry> merged;
  std::string why;
  read_file(path, &merged, &why);  // others' measurements (any thread count) are kept; an untrusted file is replaced
  auto disk_slot = [](const std::string& key, Pass p, int threads) { return slot(key, p) + "|" + std::to_string(threads); };
  std::map<std::string, size_t> at;
  for (size_t i = 0; i < merged.size(); ++i) at[disk_slot(merged[i].entry.key, merged[i].entry.pass, merged[i].threads)] = i;
  for (const Entry& e : s.list) {
    // Measured answers go to disk with the thread count they were measured with; this process's own
    // replace the file's, those it read from the file are written back only if the file lost them.
    if (e.choice.times.empty()) continue;
    auto mt = s.threads_of.find(slot(e.key, e.pass));
    const int threads = mt != s.threads_of.end() ? mt->second : current_threads();
    const std::string k = disk_slot(e.key, e.pass, threads);
    auto it = at.find(k);
    if (it == at.end()) {
      at[k] = merged.size();
      merged.push_back({e, threads});
    } else if (!e.choice.from_disk) {
      merged[it->second] = {e, threads};
    }
  }
  nlohmann::json j = {{"kiln_conv_algo", kFormat}, {"machine", file_machine()}, {"entries", nlohmann::json::array()}};
  for (const DiskEntry& d : merged) {
    const Entry& e = d.entry;
    nlohmann::json ms = nlohmann::json::object();
    for (const Timing& t : e.choice.times) ms[algo_name(t.algo)] = t.ms;
    j["entries"].push_back({{"key", e.key}, {"pass", pass_name(e.pass)}, {"threads", d.threads},
                            {"algo", algo_name(e.choice.algo)}, {"ms", ms}});
  }
  std::error_code ec;
  fs::path p(path);
  if (p.has_parent_path()) fs::create_directories(p.parent_path(), ec);
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  {
    std::ofstream f(tmp);
    f << j.dump(1) << "\n";
    if (!f) {
      s.warning("could not write the convolution algorithm cache " + tmp + "; choices are kept for this process only");
      fs::remove(tmp, ec);
      return;
    }
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    s.warning("could not rename " + tmp + " to " + path + ": " + ec.message());
    fs::remove(tmp, ec);
  }
}

}  // namespace

Mode parse_mode(const std::string& s, const std::string& what) {
  if (s.empty() || s == "auto") return Mode::automatic;
  if (s == "direct") return Mode::direct;
  if (s == "winograd") return Mode::winograd;
  if (s == "heuristic") return Mode::heuristic;
  KILN_FAIL(what, "=", s, ": accepted values are auto (measure), heuristic, direct and winograd");
}

Mode mode() {
  int m = g_mode.load();
  if (m < 0) {
    const char* e = std::getenv("KILN_CONV_ALGO");
    m = static_cast<int>(parse_mode(e ? e : "", "KILN_CONV_ALGO"));
    g_mode.store(m);
  }
  return static_cast<Mode>(m);
}

void set_mode(Mode m) { g_mode.store(static_cast<int>(m)); }

void set_excluded(const std::vector<Algo>& algos) {
  int m = 0;
  for (Algo a : algos)
    if (a != Algo::direct) m |= 1 << static_cast<int>(a);
  g_excluded.store(m);
}

std::vector<Algo> excluded() {
  std::vector<Algo> v;
  for (Algo a : {Algo::winograd, Algo::im2col, Algo::blocked})
    if (is_excluded(a)) v.push_back(a);
  return v;
}

const char* algo_name(Algo a) {
  static const char* const kNames[] = {"direct", "winograd", "im2col", "blocked"};  // the order of Algo
  return kNames[static_cast<int>(a)];
}

const char* pass_name(Pass p) {
  static const char* const kNames[] = {"forward", "backward_data", "backward_weights"};  // the order of Pass
  return kNames[static_cast<int>(p)];
}

std::string ConvKey::str() const {
  std::ostringstream o;
  o << "n" << n << " h" << h << " w" << w << " c" << c << " k" << k << " " << kh << "x" << kw << " s" << stride_h
    << "x" << stride_w << " p" << pad_h << "x" << pad_w << " d" << dil_h << "x" << dil_w << " g" << groups << " "
    << dtype_name(dtype) << (bias ? " bias" : " nobias");
  return o.str();
}

double ConvKey::flops() const {
  const int64_t oh = (h + 2 * pad_h - dil_h * (kh - 1) - 1) / stride_h + 1;
  const int64_t ow = (w + 2 * pad_w - dil_w * (kw - 1) - 1) / stride_w + 1;
  return 2.0 * static_cast<double>(n * oh * ow * k) * static_cast<double>(kh * kw * (c / std::max<int64_t>(1, groups)));
}

std::vector<Algo> applicable(const ConvKey& k, Pass pass) {
  std::vector<Algo> a{Algo::direct};
  const bool three = k.kh == 3 && k.kw == 3 && k.dil_h == 1 && k.dil_w == 1 && k.groups == 1 &&
                     (k.dtype == DType::f32 || k.dtype == DType::bf16);
  if (three && k.stride_h == 1 && k.stride_w == 1 && k.pad_h == 1 && k.pad_w == 1) a.push_back(Algo::winograd);
  // im2col_backward_weights: square stride and pad; the bias gradient stays with the direct pass.
  if (pass == Pass::backward_weights && three && !k.bias && k.stride_h == k.stride_w && k.pad_h == k.pad_w &&
      k.pad_h <= 2)
    a.push_back(Algo::im2col);
  // im2col_forward / im2col_backward_data: any kernel larger than 1x1 (a 1x1 convolution is a GEMM
  // in oneDNN already), dilation 1, one group, no bias (forward).
  const bool general = k.kh * k.kw > 1 && k.dil_h == 1 && k.dil_w == 1 && k.groups == 1 &&
                       (k.dtype == DType::f32 || k.dtype == DType::bf16);
  if ((pass == Pass::backward_data || (pass == Pass::forward && !k.bias)) && general) a.push_back(Algo::im2col);
  // blocked: NHWC with 8 or 16 channels is byte for byte oneDNN's nChw8c / nChw16c, so its blocked
  // kernels run on kiln's tensors without a reorder when input and output have that many channels.
  // (conv2d offers it only where oneDNN has a non-reference kernel for the view.)
  if (k.groups == 1 && k.c == k.k && (k.c == 8 || k.c == 16)) a.push_back(Algo::blocked);
  a.erase(std::remove_if(a.begin(), a.end(), is_excluded), a.end());
  return a;
}

Algo fastest(const std::vector<Timing>& times) {
  KILN_CHECK(!times.empty(), "conv_algo::fastest: no timings");
  size_t best = 0;
  for (size_t i = 1; i < times.size(); ++i)
    if (times[i].ms < times[best].ms) best = i;
  if (best != 0 && !(times[best].ms < (1.0 - kMargin) * times[0].ms)) best = 0;
  return times[best].algo;
}

void set_timer(Timer t) {
  State& s = state();
  std::lock_guard<std::mutex> l(s.mu);
  s.timer = std::move(t);
}

Algo choose(const ConvKey& key, Pass pass, const std::vector<Candidate>& candidates, Algo heuristic_pick) {
  KILN_CHECK(!candidates.empty() && candidates[0].algo == Algo::direct,
             "conv_algo::choose: the candidates must start with direct");
  auto has = [&](Algo a) {
    return std::any_of(candidates.begin(), candidates.end(), [&](const Candidate& c) { return c.algo == a; });
  };
  if (mode() != Mode::automatic || key.flops() < kMinMeasureFlops)
    return has(heuristic_pick) ? heuristic_pick : Algo::direct;
  if (candidates.size() == 1) return Algo::direct;
  State& s = state();
  const std::string k = key.str() + exclusion_suffix(), sl = slot(k, pass);
  Timer timer;
  {
    std::lock_guard<std::mutex> l(s.mu);
    if (!s.loaded) load_locked(s);
    auto it = s.index.find(sl);
    if (it != s.index.end()) {
      Entry& e = s.list[it->second];
      if (has(e.choice.algo)) {
        if (e.choice.from_disk && s.disk_used.insert(sl).second) ++s.stats.from_disk;
        return e.choice.algo;
      }
      // A stored algorithm that cannot run this shape: not trusted, measured again below.
    }
    timer = s.timer;
  }
  const auto t0 = Clock::now();
  std::vector<Timing> times;
  double best = 0;
  for (const Candidate& c : candidates) {
    double ms = timer ? timer(c, best) : clock_timer(c, best);
    times.push_back({c.algo, ms});
    if (best == 0 || ms < best) best = ms;
  }
  const double spent = ms_since(t0) * 1e-3;
  Entry e{k, pass, Choice{fastest(times), times, false}};
  std::lock_guard<std::mutex> l(s.mu);
  s.stats.measure_seconds += spent;
  auto it = s.index.find(sl);
  if (it != s.index.end() && !s.list[it->second].choice.from_disk && has(s.list[it->second].choice.algo))
    return s.list[it->second].choice.algo;  // another thread measured it meanwhile: one answer per process
  ++s.stats.measured;
  const Algo a = e.choice.algo;
  s.threads_of[sl] = current_threads();
  insert_locked(s, std::move(e));
  save_locked(s);
  return a;
}

std::vector<Entry> entries() {
  State& s = state();
  std::lock_guard<std::mutex> l(s.mu);
  return s.list;
}

Stats stats() {
  State& s = state();
  std::lock_guard<std::mutex> l(s.mu);
  return s.stats;
}

std::string report_once() {
  static std::atomic<bool> done{false};
  State& s = state();
  std::lock_guard<std::mutex> l(s.mu);
  // Nothing measured (every pair from the disk cache, or no convolution): nothing that cost time to say.
  if (done.load() || s.stats.measured == 0) return "";
  done.store(true);
  char buf[160];
  std::snprintf(buf, sizeof buf, "conv_algo: %lld (shape, pass) pairs measured in %.1f s, %lld from the disk cache",
                static_cast<long long>(s.stats.measured), s.stats.measure_seconds,
                static_cast<long long>(s.stats.from_disk));
  const std::string path = s.cache_path_locked();
  return std::string(buf) + (path.empty() ? " (off)" : " (" + path + ")") + "\n";
}

void reset() {
  State& s = state();
  std::lock_guard<std::mutex> l(s.mu);
  s.index.clear();
  s.list.clear();
  s.stats = Stats{};
  s.disk_used.clear();
  s.threads_of.clear();
  s.loaded = false;
}

std::string cache_path() {
  State& s = state();
  std::lock_guard<std::mutex> l(s.mu);
  return s.cache_path_locked();
}

void set_cache_path(const std::string& path) {
  State& s = state();
  std::lock_guard<std::mutex> l(s.mu);
  s.path = path;
  s.path_set = true;
  s.loaded = false;
}

bool load_cache() {
  State& s = state();
  std::lock_guard<std::mutex> l(s.mu);
  return load_locked(s);
}

namespace {

// The CPU model and its relevant ISA flags, "AMD EPYC 7B13 [avx2]".
const std::string& cpu_id() {
  static const std::string cpu = [] {
    std::string model = "unknown cpu";
    std::ifstream f("/proc/cpuinfo");
    std::string line;
    std::string flags;
    while (std::getline(f, line)) {
      auto value = [&] {
        auto c = line.find(':');
        return c == std::string::npos ? std::string() : line.substr(std::min(line.size(), c + 2));
      };
      if (line.rfind("model name", 0) == 0 && model == "unknown cpu") model = value();
      if (line.rfind("flags", 0) == 0 && flags.empty()) flags = " " + value() + " ";
    }
    std::string isa;
    for (const char* fl : {"avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_bf16"})
      if (flags.find(std::string(" ") + fl + " ") != std::string::npos) isa += std::string(isa.empty() ? "" : ",") + fl;
    return model + " [" + isa + "]";
  }();
  return cpu;
}

// "oneDNN 2.6.3; kiln kernels 3": what else a measurement depends on.
std::string versions() {
  const dnnl_version_t* v = dnnl_version();
  std::ostringstream o;
  o << "oneDNN " << v->major << "." << v->minor << "." << v->patch << "; kiln kernels " << kKernelsRevision;
  return o.str();
}

std::string file_machine() { return cpu_id() + "; " + versions(); }

}  // namespace

std::string machine_id() { return cpu_id() + "; " + std::to_string(current_threads()) + " threads; " + versions(); }

void set_warning_sink(std::function<void(const std::string&)> sink) {
  State& s = state();
  std::lock_guard<std::mutex> l(s.mu);
  s.warn = std::move(sink);
}

}  // namespace kiln::ops::conv_algo
