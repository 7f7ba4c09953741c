// colo-plot: the PNG it writes has the asked size and shows each run's curves in each panel
// (pixels of the run's colour in every quadrant), not an empty frame; bad input names the file.
#include <colo/files/files.h>
#include <colo/data/image_codec.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "temporary_directory.h"

namespace {

const std::string kColoPlot = COLO_BINARY_DIR "/bin/colo-plot";

struct Result {
  int exit_code = -1;
  std::string output;
};

Result run(const colo::testing::TemporaryDirectory& dir, const std::string& arguments) {
  const std::string log = dir / "log.txt";
  const int status = std::system((kColoPlot + " " + arguments + " >" + log + " 2>&1").c_str());
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, text.str()};
}

// A train_vit-like metrics file: loss falling from `start`, a warmup-cosine lr, a steady
// throughput, and an evaluation every 50 steps.
void write_metrics(const std::string& path, double start, bool train = true) {
  std::ofstream out(path);
  for (int step = 10; step <= 300; step += 10) {
    if (train) {
      const double lr = step < 30 ? 2e-3 * step / 30 : 1e-3 * (1 + std::cos(M_PI * (step - 30) / 270.0));
      out << "{\"event\":\"train\",\"epoch\":1,\"step\":" << step << ",\"loss\":" << start * std::exp(-step / 120.0)
          << ",\"lr\":" << lr << ",\"images_per_s\":" << 900 + 100 * start + 30 * std::sin(step) << "}\n";
    }
    if (step % 50 == 0) {
      out << "{\"event\":\"eval\",\"epoch\":1,\"step\":" << step << ",\"top1\":" << 0.5 + step / 1000.0 / start
          << "}\n";
    }
  }
}

// Pixels close to an RGB colour in one quadrant (0: top left, 1: top right, 2: bottom left, 3:
// bottom right).
int64_t count_colour(const colo::data::DecodedImage& image, int quadrant, int r, int g, int b) {
  const int64_t y0 = quadrant / 2 * image.height / 2, x0 = quadrant % 2 * image.width / 2;
  int64_t count = 0;
  for (int64_t y = y0; y < y0 + image.height / 2; ++y) {
    for (int64_t x = x0; x < x0 + image.width / 2; ++x) {
      const uint8_t* p = image.pixels.data() + (y * image.width + x) * 3;
      if (std::abs(p[0] - r) < 40 && std::abs(p[1] - g) < 40 && std::abs(p[2] - b) < 40) ++count;
    }
  }
  return count;
}

colo::data::DecodedImage read_png(const std::string& path) {
  const auto bytes = colo::data::read_binary_file(path);
  return colo::data::decode_image(bytes.data(), bytes.size(), path);
}

class ColoPlot : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!colo::files::exists(kColoPlot)) GTEST_SKIP() << kColoPlot << " is not built (no PLplot in this build)";
  }
  colo::testing::TemporaryDirectory dir_;
};

TEST_F(ColoPlot, DrawsEveryRunInEveryPanel) {
  write_metrics(dir_ / "a.jsonl", 2.3);
  write_metrics(dir_ / "b.jsonl", 1.5);
  const Result result = run(dir_, dir_ / "a.jsonl " + dir_ / "b.jsonl --label ddp --label zero -o " + dir_ / "c.png" +
                                      " --width 900 --height 640");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const auto image = read_png(dir_ / "c.png");
  EXPECT_EQ(image.width, 900);
  EXPECT_EQ(image.height, 640);
  for (int quadrant = 0; quadrant < 4; ++quadrant) {
    // Run 1 blue (0, 114, 178), run 2 vermilion (213, 94, 0): a curve is hundreds of pixels.
    EXPECT_GT(count_colour(image, quadrant, 0, 114, 178), 150) << "run 1 missing in panel " << quadrant;
    EXPECT_GT(count_colour(image, quadrant, 213, 94, 0), 150) << "run 2 missing in panel " << quadrant;
  }
}

TEST_F(ColoPlot, APanelWithoutRecordsHasNoCurve) {
  // Evaluations only: the top-1 panel (bottom right, which also holds the legend) has the run's
  // colour, the three training panels have none.
  write_metrics(dir_ / "eval.jsonl", 2.0, /*train=*/false);
  const Result result = run(dir_, dir_ / "eval.jsonl -o " + dir_ / "e.png");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const auto image = read_png(dir_ / "e.png");
  EXPECT_EQ(image.width, 1200);
  EXPECT_EQ(image.height, 800);
  EXPECT_GT(count_colour(image, 3, 0, 114, 178), 150);
  for (int quadrant = 0; quadrant < 3; ++quadrant) EXPECT_EQ(count_colour(image, quadrant, 0, 114, 178), 0) << quadrant;
}

TEST_F(ColoPlot, BadInputNamesTheFile) {
  Result result = run(dir_, dir_ / "missing.jsonl -o " + dir_ / "x.png");
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.output.find("missing.jsonl: cannot open"), std::string::npos) << result.output;
  {
    std::ofstream out(dir_ / "bad.jsonl");
    out << "{\"event\":\"train\",\"step\":1,\"loss\":2}\nnot json\n";
  }
  result = run(dir_, dir_ / "bad.jsonl -o " + dir_ / "x.png");
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.output.find("bad.jsonl:2: not a JSON line"), std::string::npos) << result.output;
  result = run(dir_, dir_ / "bad.jsonl");
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_NE(result.output.find("-o FILE.png is required"), std::string::npos) << result.output;
  EXPECT_FALSE(colo::files::exists(dir_ / "x.png"));
}

}  // namespace
