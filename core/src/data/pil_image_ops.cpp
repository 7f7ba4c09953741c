// Pillow's 8-bit arithmetic, step for step (its C types included: Image.blend computes in float
// and truncates, the affine filters in double and truncate), so that timm's ops give the same
// bytes here. The Pillow source each function follows is named in its comment.
#include <colo/data/pil_image_ops.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace colo::data {

ByteImage to_byte_image(const float* chw, int64_t channels, int64_t height, int64_t width) {
  ByteImage image(channels, height, width);
  for (size_t i = 0; i < image.pixels.size(); ++i) {
    const float v = std::nearbyint(std::clamp(chw[i], 0.0f, 1.0f) * 255.0f);
    image.pixels[i] = static_cast<uint8_t>(v);
  }
  return image;
}

void from_byte_image(const ByteImage& image, float* chw) {
  // ToTensor's division, in float.
  for (size_t i = 0; i < image.pixels.size(); ++i) chw[i] = static_cast<float>(image.pixels[i]) / 255.0f;
}

namespace pil {
namespace {

using Lut = std::array<uint8_t, 256>;

int64_t plane(const ByteImage& image) { return image.height * image.width; }

ByteImage apply_luts(const ByteImage& image, const std::vector<Lut>& luts) {
  ByteImage out = image;
  const int64_t n = plane(image);
  for (int64_t c = 0; c < image.channels; ++c) {
    const Lut& lut = luts[static_cast<size_t>(luts.size() == 1 ? 0 : c)];
    uint8_t* p = out.pixels.data() + c * n;
    for (int64_t i = 0; i < n; ++i) p[i] = lut[p[i]];
  }
  return out;
}

ByteImage apply_lut(const ByteImage& image, const Lut& lut) { return apply_luts(image, {lut}); }

std::array<int64_t, 256> histogram(const ByteImage& image, int64_t channel) {
  std::array<int64_t, 256> h{};
  const uint8_t* p = image.pixels.data() + channel * plane(image);
  for (int64_t i = 0; i < plane(image); ++i) ++h[p[i]];
  return h;
}

// Image.convert("L") of RGB (Convert.c's L24: ITU-R 601-2 luma in 16-bit fixed point, rounded);
// one channel is its own luma.
std::vector<uint8_t> luma(const ByteImage& image) {
  const int64_t n = plane(image);
  if (image.channels == 1) return {image.pixels.begin(), image.pixels.end()};
  std::vector<uint8_t> l(static_cast<size_t>(n));
  const uint8_t* r = image.pixels.data();
  const uint8_t* g = r + n;
  const uint8_t* b = g + n;
  for (int64_t i = 0; i < n; ++i) {
    l[static_cast<size_t>(i)] = static_cast<uint8_t>((r[i] * 19595 + g[i] * 38470 + b[i] * 7471 + 0x8000) >> 16);
  }
  return l;
}

// A one-channel image repeated into every channel (Image.convert("L").convert("RGB")).
ByteImage replicate(const std::vector<uint8_t>& gray, const ByteImage& like) {
  ByteImage out(like.channels, like.height, like.width);
  for (int64_t c = 0; c < like.channels; ++c) std::copy(gray.begin(), gray.end(), out.pixels.begin() + c * plane(like));
  return out;
}

// Image.blend(degenerate, image, factor) (Blend.c): alpha is a C float; between 0 and 1 the result
// is truncated, outside it clamped and truncated.
ByteImage blend(const ByteImage& degenerate, const ByteImage& image, double factor) {
  const auto alpha = static_cast<float>(factor);
  if (alpha == 0.0f) return degenerate;
  if (alpha == 1.0f) return image;
  ByteImage out = image;
  const bool inside = alpha >= 0 && alpha <= 1.0f;
  for (size_t i = 0; i < out.pixels.size(); ++i) {
    const int a = degenerate.pixels[i];
    const int b = image.pixels[i];
    const float t = static_cast<float>(a) + alpha * static_cast<float>(b - a);
    if (inside) {
      out.pixels[i] = static_cast<uint8_t>(t);
    } else {
      out.pixels[i] = t <= 0.0f ? 0 : t >= 255.0f ? 255 : static_cast<uint8_t>(t);
    }
  }
  return out;
}

// ImageFilter.SMOOTH (kernel 1 1 1 / 1 5 1 / 1 1 1 over 13) as Filter.c's ImagingFilter3x3 runs
// it: float sums from +0.5, truncated; the outermost rows and columns copied.
ByteImage smooth(const ByteImage& image) {
  if (image.height < 3 || image.width < 3) return image;  // ImagingFilter copies small images
  ByteImage out = image;
  const float side = 1.0f / 13.0f;
  const float centre = 5.0f / 13.0f;
  const float middle[3] = {side, centre, side};
  const float edge[3] = {side, side, side};
  for (int64_t c = 0; c < image.channels; ++c) {
    for (int64_t y = 1; y + 1 < image.height; ++y) {
      for (int64_t x = 1; x + 1 < image.width; ++x) {
        auto row = [&](int64_t yy, const float* k) {
          return static_cast<float>(image.at(c, yy, x - 1)) * k[0] + static_cast<float>(image.at(c, yy, x)) * k[1] +
                 static_cast<float>(image.at(c, yy, x + 1)) * k[2];
        };
        float ss = 0.5f;
        ss += row(y + 1, edge);
        ss += row(y, middle);
        ss += row(y - 1, edge);
        ss = ss < 0.0f ? 0.0f : ss;
        ss = ss > 255.0f ? 255.0f : ss;
        out.at(c, y, x) = static_cast<uint8_t>(ss);
      }
    }
  }
  return out;
}

int64_t clip(int64_t v, int64_t size) { return v < 0 ? 0 : v < size ? v : size - 1; }

// Geometry.c's bilinear_filter: false when (x, y) is outside the source (the fill stays).
bool bilinear(const ByteImage& im, double xin, double yin, uint8_t* out) {
  if (xin < 0.0 || xin >= static_cast<double>(im.width) || yin < 0.0 || yin >= static_cast<double>(im.height)) {
    return false;
  }
  xin -= 0.5;
  yin -= 0.5;
  const auto x = static_cast<int64_t>(std::floor(xin));
  const auto y = static_cast<int64_t>(std::floor(yin));
  const double dx = xin - static_cast<double>(x);
  const double dy = yin - static_cast<double>(y);
  const int64_t x0 = clip(x, im.width);
  const int64_t x1 = clip(x + 1, im.width);
  for (int64_t c = 0; c < im.channels; ++c) {
    auto lerp = [&](int64_t row) {
      const int a = im.at(c, row, x0);
      const int b = im.at(c, row, x1);
      return a + (b - a) * dx;
    };
    double v1 = lerp(clip(y, im.height));
    const double v2 = y + 1 >= 0 && y + 1 < im.height ? lerp(y + 1) : v1;
    v1 = v1 + (v2 - v1) * dy;
    out[c] = v1 <= 0.0 ? 0 : static_cast<uint8_t>(v1);
  }
  return true;
}

double cubic(double v1, double v2, double v3, double v4, double d) {
  const double p1 = v2;
  const double p2 = -v1 + v3;
  const double p3 = 2 * (v1 - v2) + v3 - v4;
  const double p4 = -v1 + v2 - v3 + v4;
  return p1 + d * (p2 + d * (p3 + d * p4));
}

// Geometry.c's bicubic_filter.
bool bicubic(const ByteImage& im, double xin, double yin, uint8_t* out) {
  if (xin < 0.0 || xin >= static_cast<double>(im.width) || yin < 0.0 || yin >= static_cast<double>(im.height)) {
    return false;
  }
  xin -= 0.5;
  yin -= 0.5;
  auto x = static_cast<int64_t>(std::floor(xin));
  auto y = static_cast<int64_t>(std::floor(yin));
  const double dx = xin - static_cast<double>(x);
  const double dy = yin - static_cast<double>(y);
  --x;
  --y;
  const int64_t xs[4] = {clip(x, im.width), clip(x + 1, im.width), clip(x + 2, im.width), clip(x + 3, im.width)};
  for (int64_t c = 0; c < im.channels; ++c) {
    auto row = [&](int64_t r) {
      return cubic(im.at(c, r, xs[0]), im.at(c, r, xs[1]), im.at(c, r, xs[2]), im.at(c, r, xs[3]), dx);
    };
    auto inside = [&](int64_t r) { return r >= 0 && r < im.height; };
    const double v1 = row(clip(y, im.height));
    const double v2 = inside(y + 1) ? row(y + 1) : v1;
    const double v3 = inside(y + 2) ? row(y + 2) : v2;
    const double v4 = inside(y + 3) ? row(y + 3) : v3;
    const double v = cubic(v1, v2, v3, v4, dy);
    out[c] = v <= 0.0 ? 0 : v >= 255.0 ? 255 : static_cast<uint8_t>(v);
  }
  return true;
}

// Python's round(x, 15): the correctly rounded decimal, read back.
double round15(double x) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.15f", x);
  return std::strtod(text, nullptr);
}

// Python's float modulo (the sign of the divisor).
double python_mod(double x, double m) {
  double r = std::fmod(x, m);
  if (r != 0.0) {
    if ((m < 0) != (r < 0)) r += m;
  } else {
    r = std::copysign(0.0, m);
  }
  return r;
}

}  // namespace

ByteImage auto_contrast(const ByteImage& image) {
  std::vector<Lut> luts;
  for (int64_t c = 0; c < image.channels; ++c) {
    const auto h = histogram(image, c);
    int lo = 0;
    while (lo < 255 && h[static_cast<size_t>(lo)] == 0) ++lo;
    int hi = 255;
    while (hi > 0 && h[static_cast<size_t>(hi)] == 0) --hi;
    Lut lut{};
    for (int i = 0; i < 256; ++i) {
      if (hi <= lo) {
        lut[static_cast<size_t>(i)] = static_cast<uint8_t>(i);
        continue;
      }
      const double scale = 255.0 / (hi - lo);
      const double offset = -lo * scale;
      const auto v = static_cast<int64_t>(i * scale + offset);  // Python's int(): towards zero
      lut[static_cast<size_t>(i)] = static_cast<uint8_t>(std::clamp<int64_t>(v, 0, 255));
    }
    luts.push_back(lut);
  }
  return apply_luts(image, luts);
}

ByteImage equalize(const ByteImage& image) {
  std::vector<Lut> luts;
  for (int64_t c = 0; c < image.channels; ++c) {
    const auto h = histogram(image, c);
    int64_t total = 0;
    int64_t nonzero = 0;
    int64_t last = 0;
    for (const int64_t count : h) {
      total += count;
      if (count) ++nonzero, last = count;
    }
    Lut lut{};
    const int64_t step = nonzero <= 1 ? 0 : (total - last) / 255;
    int64_t n = step / 2;
    for (int i = 0; i < 256; ++i) {
      // point() clips the table to a byte.
      lut[static_cast<size_t>(i)] =
          step == 0 ? static_cast<uint8_t>(i) : static_cast<uint8_t>(std::min<int64_t>(n / step, 255));
      n += h[static_cast<size_t>(i)];
    }
    luts.push_back(lut);
  }
  return apply_luts(image, luts);
}

ByteImage invert(const ByteImage& image) {
  Lut lut{};
  for (int i = 0; i < 256; ++i) lut[static_cast<size_t>(i)] = static_cast<uint8_t>(255 - i);
  return apply_lut(image, lut);
}

ByteImage solarize(const ByteImage& image, int threshold) {
  Lut lut{};
  for (int i = 0; i < 256; ++i) lut[static_cast<size_t>(i)] = static_cast<uint8_t>(i < threshold ? i : 255 - i);
  return apply_lut(image, lut);
}

ByteImage solarize_add(const ByteImage& image, int add, int threshold) {
  Lut lut{};
  for (int i = 0; i < 256; ++i) {
    lut[static_cast<size_t>(i)] = static_cast<uint8_t>(i < threshold ? std::clamp(i + add, 0, 255) : i);
  }
  return apply_lut(image, lut);
}

ByteImage posterize(const ByteImage& image, int bits) {
  if (bits >= 8) return image;
  const int mask = bits <= 0 ? 0 : ~((1 << (8 - bits)) - 1) & 0xff;
  Lut lut{};
  for (int i = 0; i < 256; ++i) lut[static_cast<size_t>(i)] = static_cast<uint8_t>(i & mask);
  return apply_lut(image, lut);
}

ByteImage color(const ByteImage& image, double factor) { return blend(replicate(luma(image), image), image, factor); }

ByteImage contrast(const ByteImage& image, double factor) {
  // ImageStat's mean of the luma, rounded by int(mean + 0.5).
  const auto l = luma(image);
  double sum = 0.0;
  for (const uint8_t v : l) sum += v;
  const auto mean = static_cast<uint8_t>(static_cast<int64_t>(sum / static_cast<double>(l.size()) + 0.5));
  return blend(replicate(std::vector<uint8_t>(l.size(), mean), image), image, factor);
}

ByteImage brightness(const ByteImage& image, double factor) {
  return blend(ByteImage(image.channels, image.height, image.width), image, factor);
}

ByteImage sharpness(const ByteImage& image, double factor) { return blend(smooth(image), image, factor); }

ByteImage affine(const ByteImage& image, const std::array<double, 6>& a, Resample resample, const FillColor& fill) {
  if (image.channels > 3) throw std::invalid_argument("pil::affine: at most 3 channels");
  ByteImage out(image.channels, image.height, image.width);
  uint8_t pixel[3];
  for (int64_t y = 0; y < image.height; ++y) {
    for (int64_t x = 0; x < image.width; ++x) {
      // Geometry.c's affine_transform: the output pixel's centre.
      const double xc = static_cast<double>(x) + 0.5;
      const double yc = static_cast<double>(y) + 0.5;
      const double xin = a[0] * xc + a[1] * yc + a[2];
      const double yin = a[3] * xc + a[4] * yc + a[5];
      const bool inside =
          resample == Resample::kBilinear ? bilinear(image, xin, yin, pixel) : bicubic(image, xin, yin, pixel);
      for (int64_t c = 0; c < image.channels; ++c) out.at(c, y, x) = inside ? pixel[c] : fill[static_cast<size_t>(c)];
    }
  }
  return out;
}

ByteImage rotate(const ByteImage& image, double degrees, Resample resample, const FillColor& fill) {
  // Image.rotate without expand, centre or translate: a copy at 0; otherwise the inverse rotation
  // about the centre, its terms rounded to 15 decimals as Pillow rounds them. (Pillow's exact
  // transposes at 90, 180 and 270 degrees are not reproduced: timm's levels stay within 30.)
  const double angle = python_mod(degrees, 360.0);
  if (angle == 0.0) return image;
  const double radians = -(angle * (M_PI / 180.0));
  const double cosine = round15(std::cos(radians));
  const double sine = round15(std::sin(radians));
  const double minus_sine = round15(-std::sin(radians));
  const double cx = static_cast<double>(image.width) / 2.0;
  const double cy = static_cast<double>(image.height) / 2.0;
  std::array<double, 6> m{cosine, sine, 0.0, minus_sine, cosine, 0.0};
  m[2] = cosine * -cx + sine * -cy + 0.0 + cx;
  m[5] = minus_sine * -cx + cosine * -cy + 0.0 + cy;
  return affine(image, m, resample, fill);
}

}  // namespace pil
}  // namespace colo::data
