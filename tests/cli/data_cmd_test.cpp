// `kiln data export` (tools/cli/data_cmd.cpp): a data source written as an image folder that reads
// back to the same samples and labels, a JPEG export with a limit, and an unknown format refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "data/config.h"
#include "data/dataset.h"
#include "data/image_decode.h"
#include "data/image_folder.h"
#include "tests/data/data_test_util.h"
#include "tools/cli/commands.h"

using namespace kiln;
namespace kt = kiln::testing;
namespace fs = std::filesystem;

TEST(DataExport, ImageFolderRoundTrip) {
  kt::TempDir dir;
  std::ofstream(dir.file("c.json")) << R"({"data": {"source": "synthetic",
      "synthetic": {"size": 40, "height": 6, "width": 5, "channels": 1, "num_classes": 12, "seed": 2}}})";
  ASSERT_EQ(cli::cmd_data({"export", dir.file("c.json"), "out=" + dir.file("out"), "split=both"}), 0);
  EXPECT_TRUE(fs::is_directory(dir.file("out/train/00")));
  DataConfig c = DataConfig::from_json(Json::parse(R"({"source": "synthetic",
      "synthetic": {"size": 40, "height": 6, "width": 5, "channels": 1, "num_classes": 12, "seed": 2}})"));
  for (Split split : {Split::train, Split::val}) {
    auto src = make_dataset(c, split);
    DecodeOptions d;
    d.channels = 1;
    auto back = ImageFileDataset::open_folder(dir.file("out/") + split_name(split), d, "back");
    ASSERT_EQ(back->size(), src->size());
    for (int64_t i = 0; i < back->size(); ++i) {
      // The file's name is the source index.
      const int64_t idx = std::stoll(fs::path(back->entry(i).path).stem().string());
      Sample a = src->get(idx), b = back->get(i);
      ASSERT_EQ(b.label, a.label) << back->entry(i).path;
      ASSERT_EQ(b.image.shape(), a.image.shape());
      ASSERT_TRUE(std::equal(a.image.data(), a.image.data() + a.image.numel(), b.image.data()));
    }
  }
  // JPEG with a limit: N evenly spaced samples.
  ASSERT_EQ(cli::cmd_data({"export", dir.file("c.json"), "out=" + dir.file("j"), "format=jpeg", "limit=8", "split=val"}), 0);
  int64_t files = 0;
  for (auto& e : fs::recursive_directory_iterator(dir.file("j/val"))) files += e.is_regular_file();
  EXPECT_EQ(files, 8);
  EXPECT_HAS(kt::error_of([&] { cli::cmd_data({"export", dir.file("c.json"), "format=gif", "out=x"}); }), "format");
}
