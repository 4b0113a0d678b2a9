// `kiln predict RUN|CONFIG [weights=FILE] INPUT... [topk=5] [out=FILE.csv|FILE.jsonl] [batch=N]
//  [key=value ...]`: the top-k classes of image files (tools/deploy/predict.h, docs/predict.md).
// stdout: one line per image, "PATH: NAME (0.9123), NAME (0.0510), ..."; stderr: each input that
// could not be predicted, by name, the files a folder scan skipped, and a summary with images/s.
// out=: one row per input, a failed one with its error and no classes. Exit 0 when every image was
// predicted, 1 when some were not (the others are still predicted and written).
// An argument that names an existing file or folder is an INPUT even when it holds '='; other
// key=value arguments are the command's keys or config overrides (device=cpu, workers=4, ...).
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>

#include "core/check.h"
#include "tools/cli/commands.h"
#include "tools/cli/kv_args.h"
#include "tools/deploy/predict.h"

namespace fs = std::filesystem;

namespace kiln::cli {

namespace {

const char* kUsage =
    "usage: kiln predict RUN|CONFIG [weights=FILE] INPUT... [topk=5] [out=FILE.csv|FILE.jsonl] [batch=N]\n"
    "                    [device=cpu|0|cuda:1] [key=value ...]\n"
    "  RUN     a run folder (runs/<name>): its config.json, classes.json and best checkpoint (else its last)\n"
    "  CONFIG  a config file; then weights=FILE is required\n"
    "  INPUT   image files (.jpg .jpeg .png .bmp .webp), folders (searched recursively) or .txt image lists\n"
    "  topk    classes per image (default 5; at most the model's classes)\n"
    "  out     also write a .csv or .jsonl file: one row per input, a failed one with its error\n"
    "  batch   images per forward pass (default: the config's validation batch, at most 256)\n"
    "Images go through the config's validation transforms. Inputs that cannot be read are reported on\n"
    "stderr (and in out=) and the others still predicted; the exit code is then 1. A folder's files that\n"
    "are not images by their extension are skipped, counted on stderr.\n";

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos && (s.empty() || (s.front() != ' ' && s.back() != ' '))) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

std::string prob_text(double p, const char* format) {
  char buf[32];
  std::snprintf(buf, sizeof buf, format, p);
  return buf;
}

int64_t parse_positive(const std::string& key, const std::string& v) {
  try {
    size_t used = 0;
    const long long n = std::stoll(v, &used);
    if (used == v.size() && n >= 1) return n;
  } catch (const std::exception&) {
  }
  KILN_FAIL(key, "=", v, ": expected a whole number >= 1");
}

// The command's arguments: its inputs, its own keys and the config overrides (in options).
struct PredictArgs {
  std::vector<std::string> inputs;
  int64_t topk = 5;
  std::string out_path;  // out=, "" = none
  PredictOptions options;
};

PredictArgs parse_predict_args(const Args& args) {
  KILN_CHECK(!args.empty() && args[0].find('=') == std::string::npos, "kiln predict needs a run folder or a config "
             "file first; see kiln predict --help");
  PredictArgs a;
  std::vector<std::string> kv_text;  // an argument without '=', or an existing file, is an input
  for (size_t i = 1; i < args.size(); ++i) {
    std::error_code ec;
    (args[i].find('=') == std::string::npos || fs::exists(args[i], ec) ? a.inputs : kv_text).push_back(args[i]);
  }
  const KeyValueArgs kv("kiln predict", kv_text, {{"weights", ""}, {"topk", ""}, {"out", ""}, {"batch", ""}},
                        KeyValueArgs::Mode::overrides);
  std::map<std::string, std::string> own;
  for (const char* k : {"weights", "topk", "out", "batch"})
    if (kv.given(k)) own[k] = kv.str(k);
  a.options.overrides = kv.overrides();
  KILN_CHECK(!a.inputs.empty(), "kiln predict: no INPUT given (image files, folders or .txt image "
             "lists); see kiln predict --help");
  if (own.count("topk")) a.topk = parse_positive("topk", own["topk"]);
  if (own.count("batch")) a.options.batch = parse_positive("batch", own["batch"]);
  a.options.weights = own.count("weights") ? own["weights"] : "";
  KILN_CHECK(!own.count("weights") || !a.options.weights.empty(), "weights=: empty file name");
  a.out_path = own.count("out") ? own["out"] : "";
  return a;
}

// Where the predictions go: a line per image on stdout, each failed input on stderr, and with out= a
// row per input in a .csv or .jsonl file (a failed one with its error and no classes).
class PredictionSink {
 public:
  // Checks and opens out= before any work.
  explicit PredictionSink(const std::string& out_path) : path_(out_path) {
    const auto ext = fs::path(path_).extension().string();
    KILN_CHECK(path_.empty() || ext == ".csv" || ext == ".jsonl", "out=", path_, ": the format is chosen by the "
               "extension; accepted: .csv (path,rank1_class,rank1_prob,...) or .jsonl (one JSON object per image)");
    csv_ = ext == ".csv";
    if (!path_.empty()) {
      out_.open(path_);
      KILN_CHECK(out_, "out=", path_, ": cannot write the file");
    }
  }
  // The classes' names and k, the classes per image (the csv's header).
  void begin(const std::vector<std::string>& names, int64_t k) {
    names_ = &names;
    k_ = k;
    if (!out_.is_open() || !csv_) return;
    out_ << "path";
    for (int64_t r = 1; r <= k; ++r) out_ << ",rank" << r << "_class,rank" << r << "_prob";
    out_ << ",error\n";
  }
  void failed(const std::string& path, const std::string& error) {
    std::cerr << "kiln: predict: " << error << "\n";
    if (csv_) out_ << csv_field(path) << std::string(static_cast<size_t>(2 * k_), ',') << "," << csv_field(error) << "\n";
    else if (out_.is_open()) out_ << json{{"path", path}, {"error", error}}.dump() << "\n";
  }
  void predicted(const Prediction& p) {
    std::string line = p.path + ":";
    json top = json::array();
    if (csv_) out_ << csv_field(p.path);
    for (size_t r = 0; r < p.index.size(); ++r) {
      const std::string& name = (*names_)[static_cast<size_t>(p.index[r])];
      line += (r ? ", " : " ") + name + " (" + prob_text(p.prob[r], "%.4f") + ")";
      if (csv_) out_ << "," << csv_field(name) << "," << prob_text(p.prob[r], "%.6f");
      top.push_back({{"class", name}, {"index", p.index[r]}, {"prob", p.prob[r]}});
    }
    std::cout << line << "\n";
    if (csv_) out_ << ",\n";
    else if (out_.is_open()) out_ << json{{"path", p.path}, {"topk", top}}.dump() << "\n";
  }
  void close() {
    if (!out_.is_open()) return;
    out_.close();
    KILN_CHECK(out_.good(), "out=", path_, ": writing the file failed");
  }

 private:
  std::string path_;
  bool csv_ = false;
  std::ofstream out_;
  const std::vector<std::string>* names_ = nullptr;
  int64_t k_ = 0;
};

}  // namespace

int cmd_predict(const Args& args) {
  if (wants_help(args, kUsage)) return 0;
  const PredictArgs a = parse_predict_args(args);
  PredictionSink sink(a.out_path);
  Predictor predictor(args[0], a.options);
  sink.begin(predictor.class_names(), std::min<int64_t>(a.topk, static_cast<int64_t>(predictor.class_names().size())));

  const CollectedInputs in = collect_inputs(a.inputs);
  for (const std::string& s : in.skipped) std::cerr << "kiln: predict: " << s << "\n";
  for (const CollectedInputs::Failed& f : in.failed) sink.failed(f.input, f.error);
  const std::vector<std::string>& paths = in.paths;
  int64_t predicted = 0, failed = static_cast<int64_t>(in.failed.size());
  const auto t0 = std::chrono::steady_clock::now();
  // A batch at a time, so that lines appear as the images are predicted.
  const size_t step = static_cast<size_t>(predictor.batch_size());
  for (size_t b0 = 0; b0 < paths.size(); b0 += step) {
    std::vector<std::string> chunk(paths.begin() + static_cast<std::ptrdiff_t>(b0),
                                   paths.begin() + static_cast<std::ptrdiff_t>(std::min(paths.size(), b0 + step)));
    for (const Prediction& p : predictor.predict(chunk, a.topk)) {
      if (p.ok()) {
        ++predicted;
        sink.predicted(p);
      } else {
        sink.failed(p.path, p.error);
        ++failed;
      }
    }
    std::cout.flush();
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  sink.close();
  std::fprintf(stderr, "kiln: predicted %lld image(s) in %.2f s (%.1f images/s) on %s, batch %lld, weights %s%s%s\n",
               static_cast<long long>(predicted), s, s > 0 ? predicted / s : 0.0, predictor.device().str().c_str(),
               static_cast<long long>(predictor.batch_size()), predictor.weights().c_str(),
               a.out_path.empty() ? "" : " -> ", a.out_path.c_str());
  if (failed > 0) {
    std::fprintf(stderr, "kiln: predict: %lld input(s) could not be predicted (listed above)\n",
                 static_cast<long long>(failed));
    return 1;
  }
  return 0;
}

}  // namespace kiln::cli
