// `kiln data export` (any data source written out as an image folder) and `kiln bench data`
// (images/s of a config's input pipeline). See docs/data.md.
//
//   kiln data export CONFIG|FOLDER out=DIR [format=png|jpeg] [quality=95] [split=train|val|both]
//                    [limit=N] [key=value ...]
// writes DIR/<split>/<class>/<index>.<ext> for the raw images of the source (no transforms). Class
// folders are named after the source's classes (Dataset::class_names(), class_folder_names() below),
// so that ImageFolder's sorted class order gives back the same names and labels; <index> is the
// dataset index. limit=N takes N samples evenly spaced over the split. A FOLDER argument is read as
// an image_folder root. An image the encoder refuses (over 65500 pixels a side) is an error naming
// the sample's source file (or dataset and index) and the output file not written.
//
//   kiln data imagenet-like photos=DIR out=DIR [classes=1000] [train=30] [val=5] [quality=90] [grain=16]
//                           [seed=0] [threads=0]
// writes an ImageNet-shaped folder of JPEGs made from a few photos (data/imagenet_like.h): the GPU
// check's `e2e` input. Prints the file count, the bytes and the time taken.
//
//   kiln bench data CONFIG [threads=N] [batches=N] [warmup=N] [split=train|val] [key=value ...]
// prints the loader's images/s for the split's transforms (no model), and images/s per thread.
// Other key=value arguments are config overrides, as for kiln train (data.root=..., batch=...).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <string_view>
#include <unistd.h>

#include "core/check.h"
#include "data/bench.h"
#include "data/config.h"
#include "data/image_encode.h"
#include "data/image_folder.h"
#include "data/imagenet_like.h"
#include "tools/cli/commands.h"
#include "tools/deploy/config.h"
#include "tools/cli/kv_args.h"

namespace fs = std::filesystem;

namespace kiln::cli {

namespace {

// CONFIG (a JSON file) or FOLDER (an image_folder root), then overrides.
json load_data_source(const std::string& arg) {
  std::error_code ec;
  if (fs::is_directory(arg, ec)) return json{{"data", {{"source", "image_folder"}, {"root", arg}}}};
  return load_config_file(arg);
}

int64_t parse_count(const std::string& key, const std::string& v, int64_t min) {
  try {
    size_t used = 0;
    int64_t n = std::stoll(v, &used);
    if (used == v.size() && n >= min) return n;
  } catch (const std::exception&) {
  }
  KILN_FAIL(key, "=", v, ": expected a whole number >= ", min);
}

struct CmdArgs {
  std::map<std::string, std::string> own;  // the command's keys
  std::vector<std::string> overrides;      // the rest: config overrides
};
CmdArgs split_args(const Args& args, size_t from, const std::vector<std::string>& keys) {
  std::map<std::string, std::string> defaults;
  for (const std::string& k : keys) defaults[k] = "";
  const KeyValueArgs kv("kiln data", Args(args.begin() + static_cast<std::ptrdiff_t>(std::min(from, args.size())), args.end()),
                        defaults, KeyValueArgs::Mode::overrides);
  CmdArgs a;
  for (const std::string& k : keys)
    if (kv.given(k)) a.own[k] = kv.str(k);
  a.overrides = kv.overrides();
  return a;
}

// A class name as a folder name: '/', '\\' and the characters Windows refuses (: * ? " < > |) and
// control characters become '_'; an empty name, "." and ".." become "_".
std::string safe_folder_name(const std::string& name) {
  std::string s = name;
  for (char& ch : s)
    if (static_cast<unsigned char>(ch) < 0x20 || std::string_view("/\\:*?\"<>|").find(ch) != std::string_view::npos)
      ch = '_';
  if (s.empty() || s == "." || s == "..") s = "_";
  return s;
}

// The class folders for `names` (by label): the safe names when their byte-wise order is the labels'
// (ImageFolder sorts the folders), else each prefixed with its label zero-padded to one width,
// "0_T-shirt_top" .. "9_Ankle boot" (a name that is its own label, "0".."11", is the padded label alone).
std::vector<std::string> class_folder_names(const std::vector<std::string>& names) {
  std::vector<std::string> safe;
  for (const std::string& n : names) safe.push_back(safe_folder_name(n));
  // ImageFolder numbers the folders in byte-wise sorted order: the names alone keep the labels when
  // they are already in that order and distinct (CIFAR-10's, "0".."9").
  if (std::adjacent_find(safe.begin(), safe.end(), std::greater_equal<std::string>()) == safe.end()) return safe;
  const int width = static_cast<int>(std::to_string(std::max<size_t>(names.size(), 1) - 1).size());
  std::vector<std::string> out;
  for (size_t i = 0; i < safe.size(); ++i) {
    std::string label = std::to_string(i);
    label = std::string(static_cast<size_t>(width) - label.size(), '0') + label;
    out.push_back(safe[i] == std::to_string(i) ? label : label + "_" + safe[i]);
  }
  return out;
}

// A sample for messages: its image file for sources of files ("a/b.png (sample 3 of image_folder
// train (a))"), else the dataset and index ("cifar10 train (...): sample 3").
std::string sample_source(const Dataset& ds, int64_t idx) {
  if (const auto* files = dynamic_cast<const ImageFileDataset*>(&ds))
    return files->entry(idx).path + " (sample " + std::to_string(idx) + " of " + ds.name() + ")";
  return ds.name() + ": sample " + std::to_string(idx);
}

std::vector<Split> parse_splits(const std::string& s, bool both_ok) {
  if (s == "train") return {Split::train};
  if (s == "val") return {Split::val};
  if (s == "both" && both_ok) return {Split::train, Split::val};
  KILN_FAIL("split=", s, ": accepted: train, val", both_ok ? ", both" : "");
}

int data_export(const Args& args) {
  static const char* kUsage =
      "usage: kiln data export CONFIG|FOLDER out=DIR [format=png|jpeg] [quality=95] [split=train|val|both] "
      "[limit=N] [key=value ...]";
  if (wants_help(args, kUsage)) return 0;
  KILN_CHECK(!args.empty() && args[0].find('=') == std::string::npos, kUsage);
  CmdArgs a = split_args(args, 1, {"out", "format", "quality", "split", "limit"});
  KILN_CHECK(a.own.count("out") && !a.own["out"].empty(), "kiln data export needs out=DIR; ", kUsage);
  const std::string out = a.own["out"];
  const std::string format = a.own.count("format") ? a.own["format"] : "png";
  check_choice(format, {"png", "jpeg"}, "format");
  const int64_t quality = a.own.count("quality") ? parse_count("quality", a.own["quality"], 1) : 95;
  KILN_CHECK(quality <= 100, "quality=", quality, ": accepted 1..100");
  const int64_t limit = a.own.count("limit") ? parse_count("limit", a.own["limit"], 1) : 0;
  const std::vector<Split> splits = parse_splits(a.own.count("split") ? a.own["split"] : "both", true);

  json config = load_data_source(args[0]);
  apply_overrides(config, a.overrides);
  KILN_CHECK(config.contains("data"), args[0], ": no \"data\" section");
  json dj = config["data"];
  dj.erase("train_transforms");  // the raw images; no reduced decoding
  dj.erase("val_transforms");
  DataConfig dc = DataConfig::from_json(dj, "data", false);

  JpegEncodeOptions jpeg;
  jpeg.quality = static_cast<int>(quality);
  const std::string ext = format == "png" ? ".png" : ".jpg";
  for (Split split : splits) {
    auto ds = make_dataset(dc, split);
    const int64_t n = ds->size(), k = ds->num_classes();
    const int64_t count = limit > 0 ? std::min(limit, n) : n;
    std::vector<std::string> folders = class_folder_names(ds->class_names());
    KILN_CHECK(static_cast<int64_t>(folders.size()) == k, ds->name(), ": ", folders.size(), " class names for ", k,
               " classes");
    const int iwidth = static_cast<int>(std::to_string(std::max<int64_t>(n - 1, 0)).size());
    auto padded = [](int64_t v, int w) {
      std::string s = std::to_string(v);
      return std::string(static_cast<size_t>(std::max<int>(0, w - static_cast<int>(s.size()))), '0') + s;
    };
    std::vector<int64_t> per_class(static_cast<size_t>(k), 0);
    Sample s;
    for (int64_t i = 0; i < count; ++i) {
      const int64_t idx = limit > 0 ? i * n / count : i;
      ds->get_into(idx, s);
      KILN_CHECK(s.image.c == 1 || s.image.c == 3, ds->name(), ": sample ", idx, " has ", s.image.c,
                 " channels; export writes 1 or 3");
      const fs::path dir = fs::path(out) / split_name(split) / folders[static_cast<size_t>(s.label)];
      if (per_class[static_cast<size_t>(s.label)]++ == 0) fs::create_directories(dir);
      const std::string what = sample_source(*ds, idx);
      const std::string file = (dir / (padded(idx, iwidth) + ext)).string();
      std::vector<uint8_t> bytes;
      try {  // an image too large to encode: the error names the sample's source, then the output
        bytes = format == "png" ? encode_png(s.image.data(), s.image.h, s.image.w, s.image.c, 3, what)
                                : encode_jpeg(s.image.data(), s.image.h, s.image.w, s.image.c, jpeg, what);
      } catch (const Error& e) {
        throw Error(std::string(e.what()) + "; " + file + " not written");
      }
      write_file(file, bytes);
    }
    int64_t empty = 0;
    for (int64_t c : per_class) empty += c == 0;
    std::printf("%s: %lld images of %lld classes -> %s/%s\n", ds->name().c_str(), static_cast<long long>(count),
                static_cast<long long>(k), out.c_str(), split_name(split));
    if (empty > 0)
      std::printf("warning: %lld of %lld classes got no image (raise limit=); reading the folder back would "
                  "number the classes differently\n", static_cast<long long>(empty), static_cast<long long>(k));
  }
  return 0;
}

int data_imagenet_like(const Args& args) {
  static const char* kUsage =
      "usage: kiln data imagenet-like photos=DIR out=DIR [classes=1000] [train=30] [val=5] [quality=90] [grain=16] "
      "[seed=0] [threads=0]";
  if (wants_help(args, kUsage)) return 0;
  const KeyValueArgs kv("kiln data imagenet-like", args,
                        {{"photos", ""}, {"out", ""}, {"classes", "1000"}, {"train", "30"}, {"val", "5"},
                         {"quality", "90"}, {"grain", "16"}, {"seed", "0"}, {"threads", "0"}});
  KILN_CHECK(!kv.str("photos").empty() && !kv.str("out").empty(), "kiln data imagenet-like needs photos=DIR and out=DIR; ",
             kUsage);
  ImageNetLikeOptions o;
  o.photos = kv.str("photos");
  o.out = kv.str("out");
  o.classes = kv.integer("classes", 1);
  o.train_per_class = kv.integer("train", 1);
  o.val_per_class = kv.integer("val", 0);
  const int64_t quality = kv.integer("quality", 1);
  KILN_CHECK(quality <= 100, "kiln data imagenet-like: quality=", quality, ": accepted 1..100");
  o.quality = static_cast<int>(quality);
  {
    const std::string& g = kv.str("grain");
    size_t used = 0;
    double v = -1;
    try {
      v = std::stod(g, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    KILN_CHECK(used == g.size() && v >= 0 && v <= 64, "kiln data imagenet-like: grain=", g,
               ": accepted a number of levels in 0..64");
    o.grain = v;
  }
  o.seed = static_cast<uint64_t>(kv.integer("seed", 0));
  const int64_t threads = kv.integer("threads", 0);
  KILN_CHECK(threads <= 4096, "kiln data imagenet-like: threads=", threads, ": accepted 0 (the cores) .. 4096");
  o.threads = static_cast<int>(threads);
  const bool tty = isatty(fileno(stdout)) != 0;
  const ImageNetLikeReport r = make_imagenet_like(o, [&](int64_t done, int64_t total) {
    if (tty) std::printf("\r%lld of %lld images", static_cast<long long>(done), static_cast<long long>(total)), std::fflush(stdout);
  });
  const int64_t files = r.train_files + r.val_files;
  std::printf("%simagenet-like: %lld train + %lld val JPEGs of %lld classes from %lld photos, %.2f GB (%.0f KB on "
              "average), in %.1f s with %d threads -> %s\n",
              tty ? "\r" : "", static_cast<long long>(r.train_files), static_cast<long long>(r.val_files),
              static_cast<long long>(o.classes), static_cast<long long>(r.photos), static_cast<double>(r.bytes) / 1e9,
              static_cast<double>(r.bytes) / 1e3 / static_cast<double>(std::max<int64_t>(files, 1)), r.seconds,
              r.threads, o.out.c_str());
  std::printf("  data.root=%s/ILSVRC/Data/CLS-LOC data.val_labels=%s/LOC_val_solution.csv "
              "data.class_names_file=%s/LOC_synset_mapping.txt\n",
              o.out.c_str(), o.out.c_str(), o.out.c_str());
  return 0;
}

}  // namespace

const std::vector<Command>& data_commands() {
  static const std::vector<Command> kCommands = {
      {"export", "CONFIG|FOLDER out=DIR", "write a data source as an image folder DIR/<split>/<class>/<i>.png",
       data_export},
      {"imagenet-like", "photos=DIR out=DIR", "write an ImageNet-shaped folder of JPEGs made from a few photos",
       data_imagenet_like},
  };
  return kCommands;
}

int cmd_data(const Args& args) { return dispatch(data_commands(), args, "data"); }

int bench_data_cmd(const Args& args) {
  static const char* kUsage =
      "usage: kiln bench data CONFIG [threads=N] [batches=N] [warmup=N] [split=train|val] [key=value ...]";
  if (wants_help(args, kUsage)) return 0;
  KILN_CHECK(!args.empty() && args[0].find('=') == std::string::npos, kUsage);
  CmdArgs a = split_args(args, 1, {"threads", "batches", "warmup", "split"});
  json config = load_data_source(args[0]);
  apply_overrides(config, a.overrides);
  KILN_CHECK(config.contains("data"), args[0], ": no \"data\" section");
  DataConfig dc = DataConfig::from_json(config["data"], "data");
  if (a.own.count("threads")) {
    dc.loader.workers = parse_count("threads", a.own["threads"], 0);
    // An "auto" prefetch (absent, "auto" or 0) follows the threads asked for, not the config's workers.
    const json& d = config["data"];
    if (!d.contains("prefetch") || d["prefetch"] == "auto" || d["prefetch"] == 0) dc.loader.prefetch = 0;
  }
  const int64_t batches = a.own.count("batches") ? parse_count("batches", a.own["batches"], 1) : 50;
  const int64_t warmup = a.own.count("warmup") ? parse_count("warmup", a.own["warmup"], 0) : 3;
  const Split split = parse_splits(a.own.count("split") ? a.own["split"] : "train", false)[0];
  auto loader = make_loader(dc, split);
  const ImageShape s = loader->epoch_image_shape(0);  // what bench_loader's epoch 0 delivers (progressive_resize)
  std::printf("# kiln bench data: %s, %lld samples, batch %lld, %lld threads, output %s %s, transforms %s\n",
              loader->dataset().name().c_str(), static_cast<long long>(loader->dataset().size()),
              static_cast<long long>(loader->options().batch_size), static_cast<long long>(dc.loader.workers),
              s.str().c_str(), dc.loader.dtype.c_str(), dc.transforms(split).to_json().dump().c_str());
  DataBenchResult r = bench_loader(*loader, batches, warmup);
  const double per_thread = r.images_per_second / static_cast<double>(std::max<int64_t>(dc.loader.workers, 1));
  std::printf("images_per_s %.1f\nimages_per_s_per_thread %.1f\nimages %lld\nseconds %.3f\n", r.images_per_second,
              per_thread, static_cast<long long>(r.images), r.seconds);
  return 0;
}

}  // namespace kiln::cli
