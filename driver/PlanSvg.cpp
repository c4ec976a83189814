#include "driver/PlanSvg.h"

#include "driver/Common.h"

#include <algorithm>
#include <cstdio>

namespace sgc::driver {
namespace {

constexpr double kWidth = 1000, kHeight = 600, kLeft = 90, kTop = 40, kRight = 220, kBottom = 50;
const char* kColour[rt::kNumRegions] = {"#4e79a7", "#59a14f", "#edc948", "#b07aa1", "#f28e2b", "#e15759"};

std::string escaped(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '&' ? "&amp;" : c == '"' ? "&quot;" : std::string(1, c);
  return out;
}

std::string fmt(const char* f, double a) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, a);
  return buf;
}

} // namespace

std::string planSvg(const rt::Program& p, const std::string& title) {
  uint64_t base[rt::kNumRegions], total = rt::regionOffsets(p, base); // as a session lays the arena out
  int steps = 1;
  for (const rt::TensorDesc& t : p.tensors) steps = std::max(steps, t.last + 1);
  double sx = kWidth / steps, sy = kHeight / (double)std::max<uint64_t>(total, 1);
  auto y = [&](uint64_t at) { return kTop + kHeight - (double)at * sy; }; // offset 0 at the bottom
  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + fmt("%.0f", kLeft + kWidth + kRight) + "\" height=\"" +
                    fmt("%.0f", kTop + kHeight + kBottom) + "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  svg += "<text x=\"" + fmt("%.0f", kLeft) + "\" y=\"22\" font-size=\"15\">" + escaped(title) + ": " + withCommas((int64_t)total) +
         " bytes, " + std::to_string(steps) + " schedule positions</text>\n";
  svg += "<rect x=\"" + fmt("%.1f", kLeft) + "\" y=\"" + fmt("%.1f", kTop) + "\" width=\"" + fmt("%.1f", kWidth) + "\" height=\"" +
         fmt("%.1f", kHeight) + "\" fill=\"#f7f7f7\" stroke=\"#999\"/>\n";
  for (const rt::TensorDesc& t : p.tensors) {
    if (t.last < t.first || t.bytes == 0) continue;
    uint64_t lo = base[t.region] + t.offset;
    double h = std::max((double)t.bytes * sy, 0.5);
    svg += "<rect x=\"" + fmt("%.2f", kLeft + t.first * sx) + "\" y=\"" + fmt("%.2f", y(lo) - h) + "\" width=\"" +
           fmt("%.2f", std::max((t.last - t.first + 1) * sx, 0.5)) + "\" height=\"" + fmt("%.2f", h) + "\" fill=\"" + kColour[t.region] +
           "\" fill-opacity=\"0.8\"><title>" + escaped(t.name) + ": " + withCommas((int64_t)t.bytes) + " bytes, " + rt::kRegionNames[t.region] +
           ", live [" + std::to_string(t.first) + ", " + std::to_string(t.last) + "]</title></rect>\n";
  }
  // The regions' extents on the left, their legend on the right.
  for (int r = 0; r < rt::kNumRegions; ++r) {
    if (!p.regions[r]) continue;
    double top = y(base[r] + p.regions[r]), bottom = y(base[r]);
    svg += "<line x1=\"" + fmt("%.1f", kLeft - 6) + "\" x2=\"" + fmt("%.1f", kLeft - 6) + "\" y1=\"" + fmt("%.2f", top) + "\" y2=\"" +
           fmt("%.2f", bottom) + "\" stroke=\"" + kColour[r] + "\" stroke-width=\"6\"/>\n";
    double ly = kTop + 20 + 22 * r;
    svg += "<rect x=\"" + fmt("%.0f", kLeft + kWidth + 16) + "\" y=\"" + fmt("%.0f", ly - 10) + "\" width=\"12\" height=\"12\" fill=\"" + kColour[r] +
           "\"/><text x=\"" + fmt("%.0f", kLeft + kWidth + 34) + "\" y=\"" + fmt("%.0f", ly) + "\">" + rt::kRegionNames[r] + " " +
           withCommas((int64_t)p.regions[r]) + (r == rt::kNumRegions - 1 ? " (peak)" : "") + "</text>\n";
  }
  svg += "<text x=\"" + fmt("%.0f", kLeft + kWidth / 2) + "\" y=\"" + fmt("%.0f", kTop + kHeight + 32) +
         "\" text-anchor=\"middle\">schedule position (a kernel group each: forward, backward, update)</text>\n";
  svg += "<text transform=\"translate(24 " + fmt("%.0f", kTop + kHeight / 2) + ") rotate(-90)\" text-anchor=\"middle\">arena offset (" +
         withCommas((int64_t)total) + " bytes at the top)</text>\n";
  svg += "</svg>\n";
  return svg;
}

} // namespace sgc::driver
