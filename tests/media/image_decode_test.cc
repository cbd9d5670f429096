// Image decoding: test images are encoded here with libpng, libjpeg and libwebp, decoded by decode_image and
// compared with the pixels Pillow's Image.open(f).convert("RGB") gives; bad input must fail cleanly.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

// clang-format off
#include <jpeglib.h>  // needs <cstdio> first
// clang-format on
#include <png.h>
#include <webp/decode.h>
#include <webp/encode.h>

#include "common/error.h"
#include "media/image_decode.h"

using m3::media::decode_image;
using m3::media::DecodeLimits;
using m3::media::RgbImage;
using Bytes = std::vector<uint8_t>;

namespace {

// ---- encoders -------------------------------------------------------------------------------------------

void png_abort(png_structp, png_const_charp message) {
  std::fprintf(stderr, "libpng (test encoder): %s\n", message);
  std::abort();
}

void png_append(png_structp png, png_bytep data, size_t n) {
  auto* out = static_cast<Bytes*>(png_get_io_ptr(png));
  out->insert(out->end(), data, data + n);
}

struct PngSpec {
  int width = 0, height = 0;
  int color_type = PNG_COLOR_TYPE_RGB;
  int bit_depth = 8;
  bool interlace = false;
  std::vector<png_color> palette;
  Bytes trns;                               // palette alpha entries
  std::optional<png_color_16> trns_colour;  // grey / RGB transparent colour
};

// `rows`: the image in PNG's own row format (big-endian 16-bit samples, sub-byte samples packed).
PngSpec png_spec(int width, int height, int color_type = PNG_COLOR_TYPE_RGB, int bit_depth = 8,
                 bool interlace = false) {
  PngSpec spec;
  spec.width = width;
  spec.height = height;
  spec.color_type = color_type;
  spec.bit_depth = bit_depth;
  spec.interlace = interlace;
  return spec;
}

Bytes encode_png(const PngSpec& spec, const Bytes& rows) {
  Bytes out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, png_abort, nullptr);
  png_infop info = png_create_info_struct(png);
  png_set_write_fn(png, &out, png_append, nullptr);
  png_set_IHDR(png, info, spec.width, spec.height, spec.bit_depth, spec.color_type,
               spec.interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  if (!spec.palette.empty()) png_set_PLTE(png, info, spec.palette.data(), int(spec.palette.size()));
  png_set_check_for_invalid_index(png, -1);  // indices past the palette are part of a test
  if (!spec.trns.empty()) png_set_tRNS(png, info, spec.trns.data(), int(spec.trns.size()), nullptr);
  if (spec.trns_colour) png_set_tRNS(png, info, nullptr, 0, &*spec.trns_colour);
  png_write_info(png, info);
  size_t stride = rows.size() / spec.height;
  std::vector<png_bytep> pointers;
  for (int y = 0; y < spec.height; ++y) pointers.push_back(const_cast<uint8_t*>(rows.data()) + y * stride);
  png_write_image(png, pointers.data());
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

void jpeg_abort(j_common_ptr cinfo) {
  char message[JMSG_LENGTH_MAX];
  (*cinfo->err->format_message)(cinfo, message);
  std::fprintf(stderr, "libjpeg (test encoder): %s\n", message);
  std::abort();
}

struct JpegSpec {
  int width = 0, height = 0, components = 3;
  J_COLOR_SPACE in_space = JCS_RGB, file_space = JCS_YCbCr;
  int quality = 95;
  bool progressive = false;
};

JpegSpec jpeg_spec(int width, int height, int components = 3, J_COLOR_SPACE in_space = JCS_RGB,
                   J_COLOR_SPACE file_space = JCS_YCbCr, bool progressive = false) {
  JpegSpec spec;
  spec.width = width;
  spec.height = height;
  spec.components = components;
  spec.in_space = in_space;
  spec.file_space = file_space;
  spec.progressive = progressive;
  return spec;
}

DecodeLimits limits(size_t max_bytes, int64_t max_pixels) {
  DecodeLimits l;
  l.max_bytes = max_bytes;
  l.max_pixels = max_pixels;
  return l;
}

Bytes encode_jpeg(const JpegSpec& spec, const Bytes& pixels) {
  jpeg_compress_struct cinfo;
  jpeg_error_mgr err;
  cinfo.err = jpeg_std_error(&err);
  err.error_exit = jpeg_abort;
  jpeg_create_compress(&cinfo);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &buffer, &size);
  cinfo.image_width = spec.width;
  cinfo.image_height = spec.height;
  cinfo.input_components = spec.components;
  cinfo.in_color_space = spec.in_space;
  jpeg_set_defaults(&cinfo);
  jpeg_set_colorspace(&cinfo, spec.file_space);
  jpeg_set_quality(&cinfo, spec.quality, TRUE);
  if (spec.progressive) jpeg_simple_progression(&cinfo);
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row =
        const_cast<uint8_t*>(pixels.data()) + size_t(cinfo.next_scanline) * spec.width * spec.components;
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  Bytes out(buffer, buffer + size);
  std::free(buffer);
  return out;
}

// A plain libjpeg decode of `bytes` in `out_space` with libjpeg's defaults, which are Pillow's.
Bytes reference_jpeg_decode(const Bytes& bytes, J_COLOR_SPACE out_space) {
  jpeg_decompress_struct cinfo;
  jpeg_error_mgr err;
  cinfo.err = jpeg_std_error(&err);
  err.error_exit = jpeg_abort;
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, bytes.data(), bytes.size());
  jpeg_read_header(&cinfo, TRUE);
  cinfo.out_color_space = out_space;
  jpeg_start_decompress(&cinfo);
  size_t stride = size_t(cinfo.output_width) * cinfo.output_components;
  Bytes out(stride * cinfo.output_height);
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = out.data() + size_t(cinfo.output_scanline) * stride;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return out;
}

Bytes from_webp(uint8_t* data, size_t size) {
  EXPECT_GT(size, 0u);
  Bytes out(data, data + size);
  WebPFree(data);
  return out;
}

// ---- test data and checks -------------------------------------------------------------------------------

Bytes random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  Bytes out(n);
  for (auto& b : out) b = uint8_t(rng());
  return out;
}

// A smooth RGB gradient (JPEG-friendly).
Bytes gradient_rgb(int width, int height) {
  Bytes out;
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x) {
      out.push_back(uint8_t(x * 255 / (width - 1)));
      out.push_back(uint8_t(y * 255 / (height - 1)));
      out.push_back(uint8_t((x + y) * 255 / (width + height - 2)));
    }
  return out;
}

RgbImage decode(const Bytes& bytes, const DecodeLimits& limits = {}) {
  return decode_image(std::span<const uint8_t>(bytes), limits);
}

// decode_image must throw m3::Error(kInvalidArgument), with `fragment` in the message when given.
void expect_invalid(const Bytes& bytes, const std::string& fragment = "", const DecodeLimits& limits = {}) {
  try {
    decode(bytes, limits);
    ADD_FAILURE() << "decoded without error (" << bytes.size() << " bytes)";
  } catch (const m3::Error& e) {
    EXPECT_EQ(e.kind(), m3::ErrorKind::kInvalidArgument) << e.what();
    if (!fragment.empty()) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  }
}

// Either decodes or throws kInvalidArgument; anything else (a crash, another error) fails.
void expect_no_crash(const Bytes& bytes) {
  try {
    RgbImage image = decode(bytes);
    EXPECT_EQ(image.pixels.size(), size_t(image.width) * image.height * 3);
  } catch (const m3::Error& e) {
    EXPECT_EQ(e.kind(), m3::ErrorKind::kInvalidArgument) << e.what();
  }
}

Bytes grey_to_rgb(const Bytes& grey) {
  Bytes out;
  for (uint8_t g : grey) out.insert(out.end(), {g, g, g});
  return out;
}

uint32_t test_crc32(const uint8_t* p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
  }
  return ~c;
}

void put_be32(Bytes& out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(uint8_t(v >> s));
}

void append_png_chunk(Bytes& out, const char* type, const Bytes& data) {
  put_be32(out, uint32_t(data.size()));
  size_t start = out.size();
  out.insert(out.end(), type, type + 4);
  out.insert(out.end(), data.begin(), data.end());
  put_be32(out, test_crc32(&out[start], data.size() + 4));
}

// Offset just past the data of the last IDAT chunk.
size_t png_idat_end(const Bytes& png) {
  size_t end = 0;
  for (size_t pos = 8; pos + 8 <= png.size();) {
    uint32_t length =
        uint32_t(png[pos]) << 24 | uint32_t(png[pos + 1]) << 16 | uint32_t(png[pos + 2]) << 8 | png[pos + 3];
    if (std::memcmp(&png[pos + 4], "IDAT", 4) == 0) end = pos + 8 + length;
    pos += 12 + length;
  }
  return end;
}

}  // namespace

// ---- format detection -----------------------------------------------------------------------------------

TEST(ImageDecode, SniffsFormats) {
  using m3::media::sniff_image_format;
  Bytes jpeg = {0xFF, 0xD8, 0xFF, 0xE0};
  Bytes png = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
  Bytes webp = {'R', 'I', 'F', 'F', 0, 0, 0, 0, 'W', 'E', 'B', 'P'};
  Bytes wav = {'R', 'I', 'F', 'F', 0, 0, 0, 0, 'W', 'A', 'V', 'E'};
  EXPECT_EQ(sniff_image_format(jpeg), "jpeg");
  EXPECT_EQ(sniff_image_format(png), "png");
  EXPECT_EQ(sniff_image_format(webp), "webp");
  EXPECT_EQ(sniff_image_format(wav), "");
  EXPECT_EQ(sniff_image_format(Bytes{0xFF, 0xD8}), "");
  EXPECT_EQ(sniff_image_format(Bytes{}), "");
  expect_invalid(Bytes{}, "not a JPEG, PNG or WebP image");
  expect_invalid(Bytes{'G', 'I', 'F', '8', '9', 'a', 1, 0, 1, 0}, "not a JPEG, PNG or WebP image");
  expect_invalid(random_bytes(1000, 1), "not a JPEG, PNG or WebP image");
}

// ---- PNG --------------------------------------------------------------------------------------------------

TEST(ImageDecode, PngRgbExact) {
  Bytes rgb = random_bytes(7 * 5 * 3, 2);
  for (bool interlace : {false, true}) {
    RgbImage image = decode(encode_png(png_spec(7, 5, PNG_COLOR_TYPE_RGB, 8, interlace), rgb));
    EXPECT_EQ(image.width, 7);
    EXPECT_EQ(image.height, 5);
    EXPECT_EQ(image.pixels, rgb) << "interlace " << interlace;
  }
}

TEST(ImageDecode, PngRgbaDropsAlphaWithoutBlending) {
  Bytes rgba = random_bytes(9 * 4 * 4, 3), rgb;
  for (size_t i = 0; i < rgba.size(); i += 4) {
    if (i % 3 == 0) rgba[i + 3] = 0;  // fully transparent pixels keep their colour too
    rgb.insert(rgb.end(), &rgba[i], &rgba[i + 3]);
  }
  for (bool interlace : {false, true}) {
    PngSpec spec = png_spec(9, 4, PNG_COLOR_TYPE_RGBA, 8, interlace);
    EXPECT_EQ(decode(encode_png(spec, rgba)).pixels, rgb);
  }
}

TEST(ImageDecode, PngGreyReplicated) {
  Bytes grey = random_bytes(6 * 3, 4);
  PngSpec spec = png_spec(6, 3, PNG_COLOR_TYPE_GRAY);
  EXPECT_EQ(decode(encode_png(spec, grey)).pixels, grey_to_rgb(grey));
  // A tRNS colour is transparency only: convert("RGB") ignores it.
  spec.trns_colour = png_color_16{0, 0, 0, 0, grey[0]};
  EXPECT_EQ(decode(encode_png(spec, grey)).pixels, grey_to_rgb(grey));
}

TEST(ImageDecode, PngGreyAlphaDropsAlpha) {
  Bytes ga = random_bytes(5 * 4 * 2, 5), grey;
  for (size_t i = 0; i < ga.size(); i += 2) grey.push_back(ga[i]);
  PngSpec spec = png_spec(5, 4, PNG_COLOR_TYPE_GRAY_ALPHA);
  EXPECT_EQ(decode(encode_png(spec, ga)).pixels, grey_to_rgb(grey));
  spec.bit_depth = 16;  // Pillow: "LA;16B" -> high bytes
  Bytes ga16 = random_bytes(5 * 4 * 4, 6), grey16;
  for (size_t i = 0; i < ga16.size(); i += 4) grey16.push_back(ga16[i]);
  EXPECT_EQ(decode(encode_png(spec, ga16)).pixels, grey_to_rgb(grey16));
}

TEST(ImageDecode, PngLowBitDepthGrey) {
  // 1-bit: 0 / 255 (Pillow mode "1"); 2-bit: x85 ("L;2"); 4-bit: x17 ("L;4").
  for (int depth : {1, 2, 4}) {
    const int width = 11, height = 3, levels = 1 << depth;
    Bytes rows, expected;
    for (int y = 0; y < height; ++y) {
      Bytes row((width * depth + 7) / 8, 0);
      for (int x = 0; x < width; ++x) {
        int v = (x * 7 + y * 3) % levels;
        row[x * depth / 8] |= uint8_t(v << (8 - depth - (x * depth) % 8));
        expected.push_back(uint8_t(v * 255 / (levels - 1)));
      }
      rows.insert(rows.end(), row.begin(), row.end());
    }
    for (bool interlace : {false, true}) {
      PngSpec spec = png_spec(width, height, PNG_COLOR_TYPE_GRAY, depth, interlace);
      EXPECT_EQ(decode(encode_png(spec, rows)).pixels, grey_to_rgb(expected)) << depth << "-bit";
    }
  }
}

TEST(ImageDecode, Png16BitKeepsHighByte) {
  Bytes rgb16 = random_bytes(4 * 3 * 6, 7), rgb;
  for (size_t i = 0; i < rgb16.size(); i += 2) rgb.push_back(rgb16[i]);
  PngSpec spec = png_spec(4, 3, PNG_COLOR_TYPE_RGB, 16);
  EXPECT_EQ(decode(encode_png(spec, rgb16)).pixels, rgb);
  spec.interlace = true;
  EXPECT_EQ(decode(encode_png(spec, rgb16)).pixels, rgb);

  Bytes rgba16 = random_bytes(4 * 3 * 8, 8), rgb_a;
  for (size_t i = 0; i < rgba16.size(); i += 8)
    rgb_a.insert(rgb_a.end(), {rgba16[i], rgba16[i + 2], rgba16[i + 4]});
  spec = png_spec(4, 3, PNG_COLOR_TYPE_RGBA, 16);
  EXPECT_EQ(decode(encode_png(spec, rgba16)).pixels, rgb_a);
}

TEST(ImageDecode, Png16BitGreyClipsLikePillow) {
  // Pillow opens 16-bit grey as "I;16" and its I;16 -> RGB conversion clips at 255 instead of scaling.
  const std::array<uint16_t, 6> values = {0x0000, 0x0001, 0x00AB, 0x00FF, 0x0100, 0xFFFF};
  Bytes rows, expected;
  for (uint16_t v : values) {
    rows.push_back(uint8_t(v >> 8));
    rows.push_back(uint8_t(v));
    expected.push_back(v > 255 ? 255 : uint8_t(v));
  }
  PngSpec spec = png_spec(3, 2, PNG_COLOR_TYPE_GRAY, 16);
  EXPECT_EQ(decode(encode_png(spec, rows)).pixels, grey_to_rgb(expected));
  spec.interlace = true;
  EXPECT_EQ(decode(encode_png(spec, rows)).pixels, grey_to_rgb(expected));
}

TEST(ImageDecode, PngPaletteExpanded) {
  std::vector<png_color> palette = {{10, 20, 30}, {200, 100, 0}, {0, 255, 7}, {1, 2, 3}, {90, 80, 70}};
  // 8-bit indices, a tRNS (ignored: alpha is dropped) and an index past the palette (black, as in Pillow).
  Bytes indices = {0, 1, 2, 3, 4, 9, 4, 3, 2, 1, 0, 0};
  Bytes expected;
  for (uint8_t i : indices) {
    png_color c = i < palette.size() ? palette[i] : png_color{0, 0, 0};
    expected.insert(expected.end(), {c.red, c.green, c.blue});
  }
  PngSpec spec = png_spec(4, 3, PNG_COLOR_TYPE_PALETTE);
  spec.palette = palette;
  spec.trns = {0, 128, 255};
  EXPECT_EQ(decode(encode_png(spec, indices)).pixels, expected);
  spec.interlace = true;
  EXPECT_EQ(decode(encode_png(spec, indices)).pixels, expected);

  // 2-bit indices: 4 per byte.
  Bytes packed, expected2;
  for (int y = 0; y < 2; ++y) {
    Bytes idx = {uint8_t(y), 1, 2, 3, uint8_t(3 - y)};
    uint8_t b0 = uint8_t(idx[0] << 6 | idx[1] << 4 | idx[2] << 2 | idx[3]), b1 = uint8_t(idx[4] << 6);
    packed.insert(packed.end(), {b0, b1});
    for (uint8_t i : idx)
      expected2.insert(expected2.end(), {palette[i].red, palette[i].green, palette[i].blue});
  }
  PngSpec spec2 = png_spec(5, 2, PNG_COLOR_TYPE_PALETTE, 2);
  spec2.palette.assign(palette.begin(), palette.begin() + 4);
  EXPECT_EQ(decode(encode_png(spec2, packed)).pixels, expected2);
}

TEST(ImageDecode, PngChecksumsAsPillowChecksThem) {
  Bytes rgb = random_bytes(4 * 4 * 3, 9);
  Bytes png = encode_png(png_spec(4, 4), rgb);
  // Before the image data: checked.
  Bytes bad_ihdr = png;
  bad_ihdr[8 + 8 + 13] ^= 0xFF;  // IHDR's CRC
  expect_invalid(bad_ihdr, "bad checksum in the IHDR chunk");
  // IDAT: Pillow does not check it, neither do we.
  Bytes bad_idat = png;
  bad_idat[png_idat_end(png)] ^= 0xFF;
  EXPECT_EQ(decode(bad_idat).pixels, rgb);
}

TEST(ImageDecode, PngHugeHeaderFailsOnTheLimit) {
  Bytes png = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
  Bytes ihdr;
  put_be32(ihdr, 100000);
  put_be32(ihdr, 100000);
  ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0});
  append_png_chunk(png, "IHDR", ihdr);
  append_png_chunk(png, "IDAT", {0x78, 0x9C, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01});
  append_png_chunk(png, "IEND", {});
  expect_invalid(png, "the image is 100000 x 100000 pixels; the limit is 67108864 pixels");
  // The same from a file cut right after IHDR.
  png.resize(8 + 25);
  expect_invalid(png, "the limit is 67108864 pixels");
}

TEST(ImageDecode, PngZeroSizeRejected) {
  Bytes png = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
  Bytes ihdr;
  put_be32(ihdr, 0);
  put_be32(ihdr, 10);
  ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0});
  append_png_chunk(png, "IHDR", ihdr);
  append_png_chunk(png, "IEND", {});
  expect_invalid(png, "0 x 10 pixels");
}

TEST(ImageDecode, PngTruncated) {
  Bytes png = encode_png(png_spec(16, 16), random_bytes(16 * 16 * 3, 10));
  size_t idat_end = png_idat_end(png);
  ASSERT_GT(idat_end, 50u);
  for (size_t cut = 0; cut < idat_end; ++cut) {
    SCOPED_TRACE("cut at " + std::to_string(cut));
    expect_invalid(Bytes(png.begin(), png.begin() + cut));
  }
  expect_invalid(Bytes(png.begin(), png.begin() + idat_end - 1), "truncated PNG image");
}

// ---- JPEG -------------------------------------------------------------------------------------------------

TEST(ImageDecode, JpegGradientCloseToSource) {
  const int width = 48, height = 32;
  Bytes rgb = gradient_rgb(width, height);
  Bytes jpeg = encode_jpeg(jpeg_spec(width, height), rgb);
  RgbImage image = decode(jpeg);
  ASSERT_EQ(image.width, width);
  ASSERT_EQ(image.height, height);
  int worst = 0;
  for (size_t i = 0; i < rgb.size(); ++i)
    worst = std::max(worst, std::abs(int(image.pixels[i]) - int(rgb[i])));
  EXPECT_LE(worst, 6);
  // Exactly libjpeg's own decode with its default (Pillow's) settings: ISLOW IDCT, fancy upsampling.
  EXPECT_EQ(image.pixels, reference_jpeg_decode(jpeg, JCS_RGB));
}

TEST(ImageDecode, JpegProgressive) {
  Bytes rgb = gradient_rgb(40, 24);
  Bytes jpeg = encode_jpeg(jpeg_spec(40, 24, 3, JCS_RGB, JCS_YCbCr, true), rgb);
  EXPECT_EQ(decode(jpeg).pixels, reference_jpeg_decode(jpeg, JCS_RGB));
  for (size_t cut : {jpeg.size() / 4, jpeg.size() / 2, jpeg.size() - 3}) {
    SCOPED_TRACE("cut at " + std::to_string(cut));
    expect_invalid(Bytes(jpeg.begin(), jpeg.begin() + cut));
  }
}

TEST(ImageDecode, JpegGreyReplicated) {
  Bytes grey;
  for (int y = 0; y < 16; ++y)
    for (int x = 0; x < 24; ++x) grey.push_back(uint8_t(x * 10 + y));
  Bytes jpeg = encode_jpeg(jpeg_spec(24, 16, 1, JCS_GRAYSCALE, JCS_GRAYSCALE), grey);
  RgbImage image = decode(jpeg);
  EXPECT_EQ(image.pixels, grey_to_rgb(reference_jpeg_decode(jpeg, JCS_GRAYSCALE)));
}

TEST(ImageDecode, JpegCmykAndYcckAsPillowConvertsThem) {
  const int width = 16, height = 8;
  Bytes cmyk;
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x)
      cmyk.insert(cmyk.end(), {uint8_t(x * 16), uint8_t(y * 32), uint8_t(255 - x * 8), uint8_t(x * y * 2)});
  for (J_COLOR_SPACE file_space : {JCS_CMYK, JCS_YCCK}) {
    SCOPED_TRACE(file_space == JCS_CMYK ? "CMYK" : "YCCK");
    Bytes jpeg = encode_jpeg(jpeg_spec(width, height, 4, JCS_CMYK, file_space), cmyk);
    // Pillow: raw CMYK inverted ("CMYK;I"), then R = (255 - K') - round(C' * (255 - K') / 255).
    Bytes raw = reference_jpeg_decode(jpeg, JCS_CMYK), expected;
    for (size_t i = 0; i < raw.size(); i += 4) {
      int nk = 255 - (255 - raw[i + 3]);
      for (int c = 0; c < 3; ++c) {
        int inverted = 255 - raw[i + c];
        expected.push_back(uint8_t(nk - std::lround(inverted * nk / 255.0)));
      }
    }
    RgbImage image = decode(jpeg);
    EXPECT_EQ(image.width, width);
    EXPECT_EQ(image.pixels, expected);
  }
}

TEST(ImageDecode, JpegTruncatedAndCorrupt) {
  Bytes jpeg = encode_jpeg(jpeg_spec(32, 32), gradient_rgb(32, 32));
  for (size_t cut = 0; cut + 2 < jpeg.size(); cut += cut < 700 ? 1 : 7) {
    SCOPED_TRACE("cut at " + std::to_string(cut));
    expect_invalid(Bytes(jpeg.begin(), jpeg.begin() + cut));
  }
  expect_invalid(Bytes(jpeg.begin(), jpeg.begin() + jpeg.size() - 20), "truncated JPEG image");
  // A header cut: libjpeg's own message.
  Bytes garbage = {0xFF, 0xD8, 0xFF, 0xC0, 0x00, 0x03, 0x00};
  expect_invalid(garbage);
  Bytes bad_marker = jpeg;
  bad_marker[3] = 0x01;  // not a valid marker code after the SOI
  expect_no_crash(bad_marker);
}

// ---- WebP -------------------------------------------------------------------------------------------------

TEST(ImageDecode, WebpLosslessExact) {
  Bytes rgb = random_bytes(13 * 7 * 3, 11);
  uint8_t* out = nullptr;
  size_t size = WebPEncodeLosslessRGB(rgb.data(), 13, 7, 13 * 3, &out);
  RgbImage image = decode(from_webp(out, size));
  EXPECT_EQ(image.width, 13);
  EXPECT_EQ(image.height, 7);
  EXPECT_EQ(image.pixels, rgb);

  // RGBA: alpha dropped (alpha kept above 0 so that the encoder may not rewrite hidden colours).
  Bytes rgba = random_bytes(6 * 5 * 4, 12), expected;
  for (size_t i = 0; i < rgba.size(); i += 4) {
    rgba[i + 3] = uint8_t(1 + rgba[i + 3] % 255);
    expected.insert(expected.end(), &rgba[i], &rgba[i + 3]);
  }
  size = WebPEncodeLosslessRGBA(rgba.data(), 6, 5, 6 * 4, &out);
  EXPECT_EQ(decode(from_webp(out, size)).pixels, expected);
}

TEST(ImageDecode, WebpLossyCloseToSource) {
  Bytes rgb = gradient_rgb(32, 24);
  uint8_t* out = nullptr;
  size_t size = WebPEncodeRGB(rgb.data(), 32, 24, 32 * 3, 95, &out);
  Bytes webp = from_webp(out, size);
  RgbImage image = decode(webp);
  int worst = 0;
  for (size_t i = 0; i < rgb.size(); ++i)
    worst = std::max(worst, std::abs(int(image.pixels[i]) - int(rgb[i])));
  EXPECT_LE(worst, 12);
  int w = 0, h = 0;
  uint8_t* reference = WebPDecodeRGB(webp.data(), webp.size(), &w, &h);
  ASSERT_NE(reference, nullptr);
  EXPECT_EQ(image.pixels, Bytes(reference, reference + size_t(w) * h * 3));
  WebPFree(reference);
}

namespace {

void put_le(Bytes& out, uint32_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(uint8_t(v >> (8 * i)));
}

void append_riff_chunk(Bytes& out, const char* type, const Bytes& data) {
  out.insert(out.end(), type, type + 4);
  put_le(out, uint32_t(data.size()), 4);
  out.insert(out.end(), data.begin(), data.end());
  if (data.size() % 2) out.push_back(0);
}

Bytes webp_lossless(const Bytes& rgb, int w, int h) {
  uint8_t* out = nullptr;
  size_t size = WebPEncodeLosslessRGB(rgb.data(), w, h, w * 3, &out);
  return from_webp(out, size);
}

struct WebpFrame {
  int x, y;
  Bytes still;  // a still WebP file: its image chunks (ALPH + VP8, or VP8L) go into the ANMF
};

// An animated WebP: a canvas with the frames at their offsets.
Bytes animated_webp(int canvas_w, int canvas_h, const std::vector<WebpFrame>& frames) {
  Bytes body = {'W', 'E', 'B', 'P'};
  Bytes vp8x = {0x02 | 0x10, 0, 0, 0};  // animation and alpha flags
  put_le(vp8x, canvas_w - 1, 3);
  put_le(vp8x, canvas_h - 1, 3);
  append_riff_chunk(body, "VP8X", vp8x);
  append_riff_chunk(body, "ANIM", {0xFF, 0xFF, 0xFF, 0xFF, 0, 0});  // white background: not used by Pillow
  for (const WebpFrame& frame : frames) {
    int w = 0, h = 0;
    EXPECT_TRUE(WebPGetInfo(frame.still.data(), frame.still.size(), &w, &h));
    size_t start = std::memcmp(&frame.still[12], "VP8X", 4) == 0 ? 12 + 8 + 10 : 12;
    Bytes anmf;
    put_le(anmf, frame.x / 2, 3);
    put_le(anmf, frame.y / 2, 3);
    put_le(anmf, w - 1, 3);
    put_le(anmf, h - 1, 3);
    put_le(anmf, 100, 3);  // duration
    anmf.push_back(0);
    anmf.insert(anmf.end(), frame.still.begin() + start, frame.still.end());
    append_riff_chunk(body, "ANMF", anmf);
  }
  Bytes file = {'R', 'I', 'F', 'F'};
  put_le(file, uint32_t(body.size()), 4);
  file.insert(file.end(), body.begin(), body.end());
  return file;
}

}  // namespace

TEST(ImageDecode, WebpAnimatedFirstFrame) {
  Bytes frame1 = random_bytes(3 * 2 * 3, 13), frame2 = random_bytes(4 * 4 * 3, 14);
  Bytes webp =
      animated_webp(6, 5, {{2, 2, webp_lossless(frame1, 3, 2)}, {0, 0, webp_lossless(frame2, 4, 4)}});
  WebPBitstreamFeatures features;
  ASSERT_EQ(WebPGetFeatures(webp.data(), webp.size(), &features), VP8_STATUS_OK);
  ASSERT_TRUE(features.has_animation);
  RgbImage image = decode(webp);
  ASSERT_EQ(image.width, 6);
  ASSERT_EQ(image.height, 5);
  Bytes expected(6 * 5 * 3, 0);  // WebPAnimDecoder's zeroed canvas
  for (int y = 0; y < 2; ++y) std::memcpy(&expected[((2 + y) * 6 + 2) * 3], &frame1[y * 3 * 3], 3 * 3);
  EXPECT_EQ(image.pixels, expected);

  // A first frame that pokes out of the canvas, and a cut file.
  expect_invalid(animated_webp(4, 4, {{2, 2, webp_lossless(frame1, 3, 2)}}), "outside the canvas");
  for (size_t cut = 12; cut < webp.size(); cut += 5) {
    SCOPED_TRACE("cut at " + std::to_string(cut));
    expect_invalid(Bytes(webp.begin(), webp.begin() + cut));
  }
}

TEST(ImageDecode, WebpAnimatedLossyAlphaFrame) {
  // A lossy frame with alpha: ALPH + VP8 chunks inside the ANMF.
  Bytes rgba = random_bytes(8 * 6 * 4, 18);
  uint8_t* out = nullptr;
  size_t size = WebPEncodeRGBA(rgba.data(), 8, 6, 8 * 4, 90, &out);
  Bytes still = from_webp(out, size);
  ASSERT_EQ(std::memcmp(&still[12], "VP8X", 4), 0);
  int w = 0, h = 0;
  uint8_t* reference = WebPDecodeRGB(still.data(), still.size(), &w, &h);
  ASSERT_NE(reference, nullptr);
  Bytes expected(10 * 8 * 3, 0);
  for (int y = 0; y < 6; ++y) std::memcpy(&expected[((2 + y) * 10 + 2) * 3], reference + y * 8 * 3, 8 * 3);
  WebPFree(reference);
  EXPECT_EQ(decode(animated_webp(10, 8, {{2, 2, still}})).pixels, expected);
}

TEST(ImageDecode, WebpTruncatedAndCorrupt) {
  Bytes rgb = gradient_rgb(32, 24);
  uint8_t* out = nullptr;
  size_t size = WebPEncodeRGB(rgb.data(), 32, 24, 32 * 3, 80, &out);
  Bytes lossy = from_webp(out, size);
  size = WebPEncodeLosslessRGB(rgb.data(), 32, 24, 32 * 3, &out);
  Bytes lossless = from_webp(out, size);
  for (const Bytes* webp : {&lossy, &lossless}) {
    for (size_t cut = 0; cut < webp->size(); cut += 3) {
      SCOPED_TRACE("cut at " + std::to_string(cut));
      expect_invalid(Bytes(webp->begin(), webp->begin() + cut));
    }
    expect_invalid(Bytes(webp->begin(), webp->end() - 1), "truncated WebP image");
  }
  Bytes bad = lossy;
  for (size_t i = 40; i < bad.size(); ++i) bad[i] = 0xFF;
  expect_no_crash(bad);
}

// ---- limits and random damage -----------------------------------------------------------------------------

TEST(ImageDecode, Limits) {
  Bytes png = encode_png(png_spec(20, 10), random_bytes(20 * 10 * 3, 15));
  expect_invalid(png, "the image is " + std::to_string(png.size()) + " bytes; the limit is 100 bytes",
                 limits(100, int64_t(1) << 30));
  expect_invalid(png, "the image is 20 x 10 pixels; the limit is 199 pixels", limits(1 << 20, 199));
  EXPECT_EQ(decode(png, limits(png.size(), 200)).width, 20);

  Bytes jpeg = encode_jpeg(jpeg_spec(20, 10), gradient_rgb(20, 10));
  expect_invalid(jpeg, "the image is 20 x 10 pixels; the limit is 199 pixels", limits(1 << 20, 199));
  uint8_t* out = nullptr;
  size_t size = WebPEncodeLosslessRGB(gradient_rgb(20, 10).data(), 20, 10, 60, &out);
  expect_invalid(from_webp(out, size), "the image is 20 x 10 pixels; the limit is 199 pixels",
                 limits(1 << 20, 199));
}

TEST(ImageDecode, RandomDamageNeverCrashes) {
  std::vector<Bytes> seeds;
  seeds.push_back(encode_png(png_spec(8, 8, PNG_COLOR_TYPE_RGB, 8, true), random_bytes(8 * 8 * 3, 16)));
  seeds.push_back(encode_jpeg(jpeg_spec(16, 16), gradient_rgb(16, 16)));
  seeds.push_back(encode_jpeg(jpeg_spec(16, 16, 3, JCS_RGB, JCS_YCbCr, true), gradient_rgb(16, 16)));
  uint8_t* out = nullptr;
  size_t size = WebPEncodeRGB(gradient_rgb(16, 16).data(), 16, 16, 48, 80, &out);
  seeds.push_back(from_webp(out, size));
  std::mt19937 rng(17);
  for (const Bytes& seed : seeds) {
    for (int round = 0; round < 300; ++round) {
      Bytes damaged = seed;
      int flips = 1 + int(rng() % 4);
      for (int f = 0; f < flips; ++f) damaged[3 + rng() % (damaged.size() - 3)] = uint8_t(rng());
      expect_no_crash(damaged);
    }
    for (int round = 0; round < 50; ++round) {
      Bytes noise = random_bytes(20 + rng() % 400, uint32_t(rng()));
      std::memcpy(noise.data(), seed.data(), 12);  // the right magic, garbage after it
      expect_no_crash(noise);
    }
  }
}
