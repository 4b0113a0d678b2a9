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

}  // namespace

int cmd_predict(const Args& args) {
  if (wants_help(args, kUsage)) return 0;
  KILN_CHECK(!args.empty() && args[0].find('=') == std::string::npos, "kiln predict needs a run folder or a config "
             "file first; see kiln predict --help");
  std::vector<std::string> inputs, kv_text;  // an argument without '=', or an existing file, is an input
  for (size_t i = 1; i < args.size(); ++i) {
    std::error_code ec;
    (args[i].find('=') == std::string::npos || fs::exists(args[i], ec) ? inputs : kv_text).push_back(args[i]);
  }
  const KeyValueArgs kv("kiln predict", kv_text, {{"weights", ""}, {"topk", ""}, {"out", ""}, {"batch", ""}},
                        KeyValueArgs::Mode::overrides);
  std::map<std::string, std::string> own;
  for (const char* k : {"weights", "topk", "out", "batch"})
    if (kv.given(k)) own[k] = kv.str(k);
  PredictOptions o;
  o.overrides = kv.overrides();
  KILN_CHECK(!inputs.empty(), "kiln predict: no INPUT given (image files, folders or .txt image "
             "lists); see kiln predict --help");
  const int64_t topk = own.count("topk") ? parse_positive("topk", own["topk"]) : 5;
  if (own.count("batch")) o.batch = parse_positive("batch", own["batch"]);
  o.weights = own.count("weights") ? own["weights"] : "";
  KILN_CHECK(!own.count("weights") || !o.weights.empty(), "weights=: empty file name");

  // The output file is checked and opened before any work.
  const std::string out_path = own.count("out") ? own["out"] : "";
  const auto ext = fs::path(out_path).extension().string();
  KILN_CHECK(out_path.empty() || ext == ".csv" || ext == ".jsonl", "out=", out_path, ": the format is chosen by the "
             "extension; accepted: .csv (path,rank1_class,rank1_prob,...) or .jsonl (one JSON object per image)");
  const bool csv = ext == ".csv";
  std::ofstream out;
  if (!out_path.empty()) {
    out.open(out_path);
    KILN_CHECK(out, "out=", out_path, ": cannot write the file");
  }

  Predictor predictor(args[0], o);
  const std::vector<std::string>& names = predictor.class_names();
  const int64_t k = std::min<int64_t>(topk, static_cast<int64_t>(names.size()));
  if (out.is_open() && csv) {
    out << "path";
    for (int64_t r = 1; r <= k; ++r) out << ",rank" << r << "_class,rank" << r << "_prob";
    out << ",error\n";
  }
  // A failed input: reported on stderr, and a row of its own in the file (its error, no classes).
  auto failed_row = [&](const std::string& path, const std::string& error) {
    std::cerr << "kiln: predict: " << error << "\n";
    if (csv) out << csv_field(path) << std::string(static_cast<size_t>(2 * k), ',') << "," << csv_field(error) << "\n";
    else if (out.is_open()) out << json{{"path", path}, {"error", error}}.dump() << "\n";
  };

  const CollectedInputs in = collect_inputs(inputs);
  for (const std::string& s : in.skipped) std::cerr << "kiln: predict: " << s << "\n";
  for (const CollectedInputs::Failed& f : in.failed) failed_row(f.input, f.error);
  const std::vector<std::string>& paths = in.paths;
  int64_t predicted = 0, failed = static_cast<int64_t>(in.failed.size());
  const auto t0 = std::chrono::steady_clock::now();
  // A batch at a time, so that lines appear as the images are predicted.
  const size_t step = static_cast<size_t>(predictor.batch_size());
  for (size_t b0 = 0; b0 < paths.size(); b0 += step) {
    std::vector<std::string> chunk(paths.begin() + static_cast<std::ptrdiff_t>(b0),
                                   paths.begin() + static_cast<std::ptrdiff_t>(std::min(paths.size(), b0 + step)));
    for (const Prediction& p : predictor.predict(chunk, topk)) {
      if (!p.ok()) {
        failed_row(p.path, p.error);
        ++failed;
        continue;
      }
      ++predicted;
      std::string line = p.path + ":";
      json top = json::array();
      if (csv) out << csv_field(p.path);
      for (size_t r = 0; r < p.index.size(); ++r) {
        const std::string& name = names[static_cast<size_t>(p.index[r])];
        line += (r ? ", " : " ") + name + " (" + prob_text(p.prob[r], "%.4f") + ")";
        if (csv) out << "," << csv_field(name) << "," << prob_text(p.prob[r], "%.6f");
        top.push_back({{"class", name}, {"index", p.index[r]}, {"prob", p.prob[r]}});
      }
      std::cout << line << "\n";
      if (csv) out << ",\n";
      else if (out.is_open()) out << json{{"path", p.path}, {"topk", top}}.dump() << "\n";
    }
    std::cout.flush();
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (out.is_open()) {
    out.close();
    KILN_CHECK(out.good(), "out=", out_path, ": writing the file failed");
  }
  std::fprintf(stderr, "kiln: predicted %lld image(s) in %.2f s (%.1f images/s) on %s, batch %lld, weights %s%s%s\n",
               static_cast<long long>(predicted), s, s > 0 ? predicted / s : 0.0, predictor.device().str().c_str(),
               static_cast<long long>(predictor.batch_size()), predictor.weights().c_str(),
               out_path.empty() ? "" : " -> ", out_path.c_str());
  if (failed > 0) {
    std::fprintf(stderr, "kiln: predict: %lld input(s) could not be predicted (listed above)\n",
                 static_cast<long long>(failed));
    return 1;
  }
  return 0;
}

}  // namespace kiln::cli
