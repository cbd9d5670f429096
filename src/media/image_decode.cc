// Image decoding with libjpeg-turbo, libpng and libwebp, matching Pillow's Image.open(f).convert("RGB").
// libjpeg and libpng report errors by longjmp: every call into them happens in a small function that holds
// no C++ object with a destructor (the *_c functions below), and the errors come back as plain flags and
// messages that the C++ callers turn into m3::Error.
#include "media/image_decode.h"

#include <array>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

// clang-format off
#include <jpeglib.h>  // needs <cstdio> first
#include <jerror.h>
// clang-format on
#include <png.h>
#include <webp/decode.h>

#include "common/error.h"

namespace m3::media {
namespace {

[[noreturn]] void invalid(const std::string& message) {
  fail(ErrorKind::kInvalidArgument, message);
}

// Dimensions from the header, checked before anything of image size is allocated.
void check_dimensions(int64_t width, int64_t height, const DecodeLimits& limits) {
  if (width <= 0 || height <= 0)
    invalid("the image is " + std::to_string(width) + " x " + std::to_string(height) + " pixels (empty)");
  if (width * height > limits.max_pixels)
    invalid("the image is " + std::to_string(width) + " x " + std::to_string(height) +
            " pixels; the limit is " + std::to_string(limits.max_pixels) + " pixels");
}

RgbImage make_image(int width, int height) {
  RgbImage image;
  image.width = width;
  image.height = height;
  image.pixels.assign(size_t(width) * size_t(height) * 3, 0);
  return image;
}

// Grey samples in out[0, n) spread to R=G=B over out[0, 3n), back to front so it can run in place.
void replicate_grey(uint8_t* out, size_t n) {
  for (size_t i = n; i-- > 0;) {
    uint8_t v = out[i];
    out[3 * i] = out[3 * i + 1] = out[3 * i + 2] = v;
  }
}

// ---------------------------------------------------------------------------------------------------------
// JPEG

// Files with more scans than this are refused (libjpeg-turbo's advice for untrusted input, as djpeg's
// -maxscans): a few MB of progressive JPEG with thousands of tiny scans would take minutes to decode. Pillow
// has no such limit; no real image comes near it.
constexpr int kMaxJpegScans = 1000;

struct JpegErrorManager {
  jpeg_error_mgr pub;  // first, so that cinfo->err casts to this struct
  std::jmp_buf jump;
  bool finishing;  // after the last scanline: a missing EOI is fine then, as it is for Pillow
  bool truncated;
  char message[JMSG_LENGTH_MAX];
};

// Plain C data only: it lives across setjmp/longjmp.
struct JpegDecoder {
  jpeg_decompress_struct cinfo;
  JpegErrorManager err;
  jpeg_progress_mgr progress;
};

void jpeg_on_error(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// Warnings ("Corrupt JPEG data: ...") are ignored, as Pillow ignores them, except running out of data:
// jpeg_mem_src then warns and pads with a fake EOI (grey pixels), where Pillow raises "image file is
// truncated".
void jpeg_on_message(j_common_ptr cinfo, int msg_level) {
  auto* err = reinterpret_cast<JpegErrorManager*>(cinfo->err);
  if (msg_level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF && !err->finishing) {
    err->truncated = true;
    std::longjmp(err->jump, 1);
  }
}

void jpeg_on_progress(j_common_ptr cinfo) {
  auto* d = reinterpret_cast<j_decompress_ptr>(cinfo);
  if (d->input_scan_number > kMaxJpegScans) {
    auto* err = reinterpret_cast<JpegErrorManager*>(cinfo->err);
    std::snprintf(err->message, sizeof err->message, "more than %d progressive scans", kMaxJpegScans);
    std::longjmp(err->jump, 1);
  }
}

// Creates the decompressor and reads the header. False: see d->err.
bool jpeg_read_header_c(JpegDecoder* d, const uint8_t* data, size_t size) {
  d->cinfo.err = jpeg_std_error(&d->err.pub);
  d->err.pub.error_exit = jpeg_on_error;
  d->err.pub.emit_message = jpeg_on_message;
  if (setjmp(d->err.jump)) return false;
  jpeg_create_decompress(&d->cinfo);
  d->progress.progress_monitor = jpeg_on_progress;
  d->cinfo.progress = &d->progress;
  jpeg_mem_src(&d->cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&d->cinfo, TRUE);
  return true;
}

enum class JpegOutput { kGrey, kRgb, kCmyk };

// Pillow reads 4-channel JPEGs as "CMYK;I" (Adobe's inverted polarity) and converts CMYK to RGB with
// R = 255 - K' - (C' * (255 - K') / 255, rounded) where C' = 255 - C and K' = 255 - K are the inverted
// samples.
void cmyk_row_to_rgb(const uint8_t* in, uint8_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i, in += 4, out += 3) {
    int nk = in[3];  // 255 - (255 - K)
    for (int c = 0; c < 3; ++c) {
      int t = (255 - in[c]) * nk + 128;
      int v = nk - (((t >> 8) + t) >> 8);
      out[c] = static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
    }
  }
}

// Decodes every scanline into `out` (width * height * 3). `scratch` holds one 4-channel row for CMYK.
bool jpeg_read_pixels_c(JpegDecoder* d, JpegOutput mode, uint8_t* out, uint8_t* scratch) {
  if (setjmp(d->err.jump)) return false;
  jpeg_start_decompress(&d->cinfo);
  if (d->cinfo.output_width != d->cinfo.image_width || d->cinfo.output_height != d->cinfo.image_height) {
    std::snprintf(d->err.message, sizeof d->err.message, "output size differs from the header");
    return false;  // `out` is sized from the header
  }
  const size_t width = d->cinfo.output_width;
  while (d->cinfo.output_scanline < d->cinfo.output_height) {
    uint8_t* dst = out + size_t(d->cinfo.output_scanline) * width * 3;
    JSAMPROW row = mode == JpegOutput::kCmyk ? scratch : dst;
    if (jpeg_read_scanlines(&d->cinfo, &row, 1) != 1) {
      d->err.truncated = true;
      return false;
    }
    if (mode == JpegOutput::kGrey) replicate_grey(dst, width);
    if (mode == JpegOutput::kCmyk) cmyk_row_to_rgb(scratch, dst, width);
  }
  d->err.finishing = true;
  jpeg_finish_decompress(&d->cinfo);
  return true;
}

struct JpegGuard {
  JpegDecoder* d;
  ~JpegGuard() { jpeg_destroy_decompress(&d->cinfo); }  // a no-op when create never ran (mem == NULL)
};

[[noreturn]] void jpeg_fail(const JpegDecoder& d) {
  if (d.err.truncated) invalid("truncated JPEG image");
  invalid(std::string("corrupt JPEG image: ") + d.err.message);
}

RgbImage decode_jpeg(std::span<const uint8_t> bytes, const DecodeLimits& limits) {
  JpegDecoder d;
  std::memset(&d, 0, sizeof d);
  JpegGuard guard{&d};
  if (!jpeg_read_header_c(&d, bytes.data(), bytes.size())) jpeg_fail(d);

  // Pillow: 1 component "L", 3 "RGB" (libjpeg decides YCbCr or RGB), 4 "CMYK" (libjpeg turns YCCK to CMYK).
  JpegOutput mode;
  switch (d.cinfo.jpeg_color_space) {
    case JCS_GRAYSCALE:
      mode = JpegOutput::kGrey;
      d.cinfo.out_color_space = JCS_GRAYSCALE;
      break;
    case JCS_YCbCr:
    case JCS_RGB:
      mode = JpegOutput::kRgb;
      d.cinfo.out_color_space = JCS_RGB;
      break;
    case JCS_CMYK:
    case JCS_YCCK:
      mode = JpegOutput::kCmyk;
      d.cinfo.out_color_space = JCS_CMYK;
      break;
    default:
      invalid("JPEG images with " + std::to_string(d.cinfo.num_components) +
              " colour components are not supported");
  }
  // Pillow's defaults (not draft mode): accurate integer IDCT, fancy upsampling, no scaling.
  d.cinfo.dct_method = JDCT_ISLOW;
  d.cinfo.do_fancy_upsampling = TRUE;
  d.cinfo.scale_num = d.cinfo.scale_denom = 1;
  check_dimensions(d.cinfo.image_width, d.cinfo.image_height, limits);

  RgbImage image = make_image(int(d.cinfo.image_width), int(d.cinfo.image_height));
  std::vector<uint8_t> scratch(mode == JpegOutput::kCmyk ? size_t(image.width) * 4 : 0);
  if (!jpeg_read_pixels_c(&d, mode, image.pixels.data(), scratch.data())) jpeg_fail(d);
  return image;
}

// ---------------------------------------------------------------------------------------------------------
// PNG

// Chunk checksums as Pillow checks them: every chunk before the first IDAT must be intact; IDAT and later
// chunks are not checked (libpng is told to ignore CRCs, which would otherwise reject bad IDAT CRCs).
uint32_t crc32_of(const uint8_t* p, size_t n) {
  static const auto table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t be32(const uint8_t* p) {
  return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3];
}

// Checks IHDR's size against the limits, then the chunk CRCs up to the first IDAT. Truncation is left to
// libpng, so that it is reported where it happens.
void check_png_chunks_before_idat(std::span<const uint8_t> bytes, const DecodeLimits& limits) {
  for (size_t pos = 8; bytes.size() - pos >= 8;) {
    uint32_t length = be32(&bytes[pos]);
    const uint8_t* type = &bytes[pos + 4];
    if (std::memcmp(type, "IDAT", 4) == 0 || std::memcmp(type, "IEND", 4) == 0) return;
    if (length > 0x7FFFFFFFu) invalid("corrupt PNG image: bad chunk length");
    if (bytes.size() - pos - 8 < size_t(length) + 4) return;
    if (crc32_of(type, size_t(length) + 4) != be32(type + 4 + length)) {
      std::string name;
      for (int i = 0; i < 4; ++i) name += (type[i] >= 0x20 && type[i] < 0x7F) ? char(type[i]) : '?';
      invalid("corrupt PNG image: bad checksum in the " + name + " chunk");
    }
    if (pos == 8 && std::memcmp(type, "IHDR", 4) == 0 && length == 13)
      check_dimensions(be32(type + 4), be32(type + 8), limits);
    pos += 8 + size_t(length) + 4;
  }
}

struct PngReader {
  png_structp png;
  png_infop info;
  const uint8_t* data;
  size_t size, pos;
  bool truncated;
  char message[256];
};

void png_on_error(png_structp png, png_const_charp message) {
  auto* r = static_cast<PngReader*>(png_get_error_ptr(png));
  std::snprintf(r->message, sizeof r->message, "%s", message ? message : "unknown error");
  png_longjmp(png, 1);
}

void png_on_warning(png_structp, png_const_charp) {}

void png_on_read(png_structp png, png_bytep out, size_t n) {
  auto* r = static_cast<PngReader*>(png_get_io_ptr(png));
  if (n > r->size - r->pos) {
    r->truncated = true;
    png_error(png, "truncated");
  }
  std::memcpy(out, r->data + r->pos, n);
  r->pos += n;
}

bool png_read_header_c(PngReader* r) {
  if (setjmp(png_jmpbuf(r->png))) return false;
  png_set_read_fn(r->png, r, png_on_read);
  png_set_crc_action(r->png, PNG_CRC_QUIET_USE, PNG_CRC_QUIET_USE);
  png_set_user_limits(r->png, 0x7FFFFFFF, 0x7FFFFFFF);  // DecodeLimits::max_pixels decides
  // Metadata Pillow may read but never applies to pixels: skip it rather than inflate it.
  static const png_byte kSkipped[] = "iCCP\0zTXt\0iTXt\0tEXt\0sPLT\0eXIf\0";
  png_set_keep_unknown_chunks(r->png, PNG_HANDLE_CHUNK_NEVER, kSkipped, 6);
  png_read_info(r->png, r->info);
  return true;
}

// How a row is laid out after libpng's transforms, and how it becomes RGB.
enum class PngLayout { kGrey8, kGrey16, kGreyAlpha, kRgb, kRgba, kPalette };

size_t png_bytes_per_pixel(PngLayout layout) {
  switch (layout) {
    case PngLayout::kGrey8:
    case PngLayout::kPalette:
      return 1;
    case PngLayout::kGrey16:
    case PngLayout::kGreyAlpha:
      return 2;
    case PngLayout::kRgb:
      return 3;
    case PngLayout::kRgba:
      return 4;
  }
  return 0;
}

struct PngPlan {
  PngLayout layout;
  bool strip_16, expand_grey, pack_indices, interlaced;
  size_t width, height, row_bytes;
  uint8_t palette[256 * 3];  // entries past PLTE stay black, as in Pillow's palette
};

void png_row_to_rgb(const PngPlan& plan, const uint8_t* in, uint8_t* out) {
  const size_t n = plan.width;
  switch (plan.layout) {
    case PngLayout::kGrey8:
      for (size_t i = 0; i < n; ++i) out[3 * i] = out[3 * i + 1] = out[3 * i + 2] = in[i];
      break;
    case PngLayout::kGrey16:
      // Pillow reads 16-bit grey as mode "I;16"; its I;16 -> RGB conversion clips to 255 (no scaling).
      for (size_t i = 0; i < n; ++i) {
        uint8_t v = in[2 * i] == 0 ? in[2 * i + 1] : 255;
        out[3 * i] = out[3 * i + 1] = out[3 * i + 2] = v;
      }
      break;
    case PngLayout::kGreyAlpha:
      for (size_t i = 0; i < n; ++i) out[3 * i] = out[3 * i + 1] = out[3 * i + 2] = in[2 * i];
      break;
    case PngLayout::kRgb:
      if (in != out) std::memcpy(out, in, n * 3);
      break;
    case PngLayout::kRgba:
      for (size_t i = 0; i < n; ++i) std::memcpy(out + 3 * i, in + 4 * i, 3);
      break;
    case PngLayout::kPalette:
      for (size_t i = 0; i < n; ++i) std::memcpy(out + 3 * i, plan.palette + 3 * size_t(in[i]), 3);
      break;
  }
}

// `raw` holds one row (non-interlaced) or the whole image (interlaced) in the plan's layout; for kRgb it is
// `out` itself. `rows` has `height` entries for interlaced images.
bool png_read_pixels_c(PngReader* r, const PngPlan* plan, uint8_t* out, uint8_t* raw, png_bytep* rows) {
  if (setjmp(png_jmpbuf(r->png))) return false;
  if (plan->strip_16) png_set_strip_16(r->png);  // the high byte, as Pillow's ;16B unpackers take
  if (plan->expand_grey) png_set_expand_gray_1_2_4_to_8(r->png);
  if (plan->pack_indices) png_set_packing(r->png);
  png_set_interlace_handling(r->png);
  png_read_update_info(r->png, r->info);
  if (png_get_rowbytes(r->png, r->info) != plan->row_bytes) png_error(r->png, "unexpected row layout");
  const size_t out_stride = plan->width * 3;
  if (plan->interlaced) {
    for (size_t y = 0; y < plan->height; ++y) rows[y] = raw + y * plan->row_bytes;
    png_read_image(r->png, rows);
    for (size_t y = 0; y < plan->height; ++y)
      png_row_to_rgb(*plan, raw + y * plan->row_bytes, out + y * out_stride);
  } else {
    for (size_t y = 0; y < plan->height; ++y) {
      uint8_t* dst = out + y * out_stride;
      uint8_t* src = plan->layout == PngLayout::kRgb ? dst : raw;
      png_read_row(r->png, src, nullptr);
      png_row_to_rgb(*plan, src, dst);
    }
  }
  return true;  // no png_read_end: Pillow does not need the chunks after the image data either
}

struct PngGuard {
  PngReader* r;
  ~PngGuard() { png_destroy_read_struct(&r->png, r->info ? &r->info : nullptr, nullptr); }
};

[[noreturn]] void png_fail(const PngReader& r) {
  if (r.truncated) invalid("truncated PNG image");
  invalid(std::string("corrupt PNG image: ") + r.message);
}

RgbImage decode_png(std::span<const uint8_t> bytes, const DecodeLimits& limits) {
  check_png_chunks_before_idat(bytes, limits);
  PngReader r;
  std::memset(&r, 0, sizeof r);
  r.data = bytes.data();
  r.size = bytes.size();
  r.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &r, png_on_error, png_on_warning);
  if (!r.png) fail(ErrorKind::kInternal, "cannot create a PNG decoder");
  PngGuard guard{&r};
  r.info = png_create_info_struct(r.png);
  if (!r.info) fail(ErrorKind::kInternal, "cannot create a PNG decoder");
  if (!png_read_header_c(&r)) png_fail(r);

  png_uint_32 width = 0, height = 0;
  int bit_depth = 0, color_type = 0, interlace = 0;
  png_get_IHDR(r.png, r.info, &width, &height, &bit_depth, &color_type, &interlace, nullptr, nullptr);
  check_dimensions(width, height, limits);

  auto plan = std::make_unique<PngPlan>();
  std::memset(plan.get(), 0, sizeof(PngPlan));
  plan->width = width;
  plan->height = height;
  plan->interlaced = interlace != PNG_INTERLACE_NONE;
  switch (color_type) {
    case PNG_COLOR_TYPE_GRAY:
      plan->layout = bit_depth == 16 ? PngLayout::kGrey16 : PngLayout::kGrey8;
      plan->expand_grey = bit_depth < 8;  // 1 -> 0/255, 2 -> x85, 4 -> x17, as Pillow's "1", "L;2", "L;4"
      break;
    case PNG_COLOR_TYPE_GRAY_ALPHA:
      plan->layout = PngLayout::kGreyAlpha;
      plan->strip_16 = bit_depth == 16;
      break;
    case PNG_COLOR_TYPE_RGB:
      plan->layout = PngLayout::kRgb;
      plan->strip_16 = bit_depth == 16;
      break;
    case PNG_COLOR_TYPE_RGB_ALPHA:
      plan->layout = PngLayout::kRgba;
      plan->strip_16 = bit_depth == 16;
      break;
    case PNG_COLOR_TYPE_PALETTE: {
      plan->layout = PngLayout::kPalette;
      plan->pack_indices = bit_depth < 8;
      png_colorp entries = nullptr;
      int count = 0;
      if (png_get_PLTE(r.png, r.info, &entries, &count) == 0 || count <= 0)
        invalid("corrupt PNG image: palette image without a palette");
      for (int i = 0; i < count && i < 256; ++i) {
        plan->palette[3 * i] = entries[i].red;
        plan->palette[3 * i + 1] = entries[i].green;
        plan->palette[3 * i + 2] = entries[i].blue;
      }
      break;
    }
    default:
      invalid("corrupt PNG image: colour type " + std::to_string(color_type));
  }
  plan->row_bytes = size_t(width) * png_bytes_per_pixel(plan->layout);

  RgbImage image = make_image(int(width), int(height));
  std::vector<uint8_t> raw;
  std::vector<png_bytep> rows;
  if (plan->interlaced) {
    if (plan->layout != PngLayout::kRgb) raw.resize(plan->row_bytes * height);
    rows.resize(height);
  } else if (plan->layout != PngLayout::kRgb) {
    raw.resize(plan->row_bytes);
  }
  uint8_t* raw_ptr = raw.empty() ? image.pixels.data() : raw.data();
  if (!png_read_pixels_c(&r, plan.get(), image.pixels.data(), raw_ptr, rows.data())) png_fail(r);
  return image;
}

// ---------------------------------------------------------------------------------------------------------
// WebP

std::string webp_status_text(VP8StatusCode status) {
  switch (status) {
    case VP8_STATUS_OUT_OF_MEMORY:
      return "out of memory";
    case VP8_STATUS_INVALID_PARAM:
      return "invalid parameter";
    case VP8_STATUS_BITSTREAM_ERROR:
      return "bitstream error";
    case VP8_STATUS_UNSUPPORTED_FEATURE:
      return "unsupported feature";
    case VP8_STATUS_SUSPENDED:
      return "suspended";
    case VP8_STATUS_USER_ABORT:
      return "aborted";
    case VP8_STATUS_NOT_ENOUGH_DATA:
      return "not enough data";
    default:
      return "error " + std::to_string(int(status));
  }
}

[[noreturn]] void webp_fail(VP8StatusCode status) {
  if (status == VP8_STATUS_NOT_ENOUGH_DATA) invalid("truncated WebP image");
  invalid("corrupt WebP image: " + webp_status_text(status));
}

// Decodes a still bitstream (a whole RIFF file, or an ANMF frame's ALPH + VP8 / VP8L chunks) into `out`.
void webp_decode_into(const uint8_t* data, size_t size, uint8_t* out, int width, int height) {
  WebPDecoderConfig config;
  if (!WebPInitDecoderConfig(&config)) fail(ErrorKind::kInternal, "libwebp version mismatch");
  config.output.colorspace = MODE_RGB;
  config.output.is_external_memory = 1;
  config.output.u.RGBA.rgba = out;
  config.output.u.RGBA.stride = width * 3;
  config.output.u.RGBA.size = size_t(width) * size_t(height) * 3;
  VP8StatusCode status = WebPDecode(data, size, &config);
  WebPFreeDecBuffer(&config.output);
  if (status != VP8_STATUS_OK) webp_fail(status);
}

uint32_t le24(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16;
}

uint32_t le32(const uint8_t* p) {
  return le24(p) | uint32_t(p[3]) << 24;
}

// Pillow decodes animated WebPs with WebPAnimDecoder and shows the first frame: a zeroed canvas with frame 1
// decoded (not blended: the first frame is a key frame) at its offset.
RgbImage decode_webp_first_frame(std::span<const uint8_t> bytes, int canvas_width, int canvas_height) {
  size_t riff_end = size_t(le32(&bytes[4])) + 8;
  if (riff_end > bytes.size()) invalid("truncated WebP image");
  size_t pos = 12;
  while (true) {
    if (pos > riff_end || riff_end - pos < 8) invalid("corrupt WebP image: animation without frames");
    size_t length = le32(&bytes[pos + 4]);
    if (riff_end - pos - 8 < length) invalid("truncated WebP image");
    const uint8_t* payload = &bytes[pos + 8];
    if (std::memcmp(&bytes[pos], "ANMF", 4) == 0) {
      if (length < 16) invalid("corrupt WebP image: short ANMF chunk");
      int64_t x = 2 * int64_t(le24(payload)), y = 2 * int64_t(le24(payload + 3));
      int64_t w = 1 + int64_t(le24(payload + 6)), h = 1 + int64_t(le24(payload + 9));
      if (x + w > canvas_width || y + h > canvas_height)
        invalid("corrupt WebP image: the first frame lies outside the canvas");
      int fw = 0, fh = 0;
      if (!WebPGetInfo(payload + 16, length - 16, &fw, &fh) || fw != w || fh != h)
        invalid("corrupt WebP image: bad first frame");
      std::vector<uint8_t> frame(size_t(w) * size_t(h) * 3);
      webp_decode_into(payload + 16, length - 16, frame.data(), fw, fh);
      RgbImage image = make_image(canvas_width, canvas_height);
      for (int64_t row = 0; row < h; ++row)
        std::memcpy(&image.pixels[size_t((y + row) * canvas_width + x) * 3], &frame[size_t(row * w) * 3],
                    size_t(w) * 3);
      return image;
    }
    pos += 8 + length + (length & 1);
  }
}

RgbImage decode_webp(std::span<const uint8_t> bytes, const DecodeLimits& limits) {
  WebPBitstreamFeatures features;
  VP8StatusCode status = WebPGetFeatures(bytes.data(), bytes.size(), &features);
  if (status != VP8_STATUS_OK) webp_fail(status);
  check_dimensions(features.width, features.height, limits);
  if (features.has_animation) return decode_webp_first_frame(bytes, features.width, features.height);
  RgbImage image = make_image(features.width, features.height);
  webp_decode_into(bytes.data(), bytes.size(), image.pixels.data(), image.width, image.height);
  return image;
}

}  // namespace

std::string sniff_image_format(std::span<const uint8_t> bytes) {
  static const uint8_t kPng[] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
  if (bytes.size() >= 3 && bytes[0] == 0xFF && bytes[1] == 0xD8 && bytes[2] == 0xFF) return "jpeg";
  if (bytes.size() >= 8 && std::memcmp(bytes.data(), kPng, 8) == 0) return "png";
  if (bytes.size() >= 12 && std::memcmp(bytes.data(), "RIFF", 4) == 0 &&
      std::memcmp(bytes.data() + 8, "WEBP", 4) == 0)
    return "webp";
  return "";
}

RgbImage decode_image(std::span<const uint8_t> bytes, const DecodeLimits& limits) {
  if (bytes.size() > limits.max_bytes)
    invalid("the image is " + std::to_string(bytes.size()) + " bytes; the limit is " +
            std::to_string(limits.max_bytes) + " bytes");
  std::string format = sniff_image_format(bytes);
  if (format == "jpeg") return decode_jpeg(bytes, limits);
  if (format == "png") return decode_png(bytes, limits);
  if (format == "webp") return decode_webp(bytes, limits);
  invalid("not a JPEG, PNG or WebP image");
}

}  // namespace m3::media
