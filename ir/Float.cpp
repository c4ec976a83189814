// Narrow floating-point formats, described by exponent/mantissa widths and
// converted by one generic encoder and decoder.
#include "ir/Float.h"

#include <cmath>

namespace sgc::ir {
namespace {

struct Format {
  int expBits, mantBits;
  bool ieeeSpecials; ///< all-ones exponent means inf/NaN (else only S.1111.111 is NaN)
};
constexpr Format kF16{5, 10, true}, kBF16{8, 7, true}, kE4M3{4, 3, false}, kE5M2{5, 2, true};

int bias(Format f) { return (1 << (f.expBits - 1)) - 1; }

double maxFinite(Format f) {
  int maxExp = (1 << f.expBits) - 1 - (f.ieeeSpecials ? 1 : 0);
  double mant = f.ieeeSpecials ? 2.0 - std::ldexp(1.0, -f.mantBits) : 2.0 - std::ldexp(2.0, -f.mantBits);
  return std::ldexp(mant, maxExp - bias(f));
}

uint32_t nanBits(Format f) {
  uint32_t allExp = ((1u << f.expBits) - 1) << f.mantBits;
  return f.ieeeSpecials ? allExp | (1u << (f.mantBits - 1)) : allExp | ((1u << f.mantBits) - 1);
}

uint32_t encode(double x, Format f) {
  uint32_t sign = std::signbit(x) ? 1u << (f.expBits + f.mantBits) : 0;
  if (std::isnan(x)) return sign | nanBits(f);
  double a = std::fabs(x);
  uint32_t infBits = ((1u << f.expBits) - 1) << f.mantBits;
  if (std::isinf(a)) return sign | (f.ieeeSpecials ? infBits : nanBits(f) - 1);
  int minExp = 1 - bias(f); // exponent of the smallest normal
  int e = 0;
  std::frexp(a, &e);
  e = std::max(e - 1, minExp);
  double quantum = std::ldexp(1.0, e - f.mantBits);
  double r = std::nearbyint(a / quantum) * quantum; // ties to even
  if (r > maxFinite(f)) // rounded past the largest finite value: inf, or saturate (fn)
    return sign | (f.ieeeSpecials ? infBits : nanBits(f) - 1);
  if (r < std::ldexp(1.0, minExp)) // subnormal or zero
    return sign | (uint32_t)(r / std::ldexp(1.0, minExp - f.mantBits));
  std::frexp(r, &e);
  e -= 1;
  uint32_t mant = (uint32_t)(r / std::ldexp(1.0, e - f.mantBits)) - (1u << f.mantBits);
  return sign | ((uint32_t)(e + bias(f)) << f.mantBits) | mant;
}

double decode(uint32_t bits, Format f) {
  bool neg = bits >> (f.expBits + f.mantBits) & 1;
  uint32_t exp = (bits >> f.mantBits) & ((1u << f.expBits) - 1);
  uint32_t mant = bits & ((1u << f.mantBits) - 1);
  uint32_t maxExp = (1u << f.expBits) - 1;
  double v;
  if (f.ieeeSpecials && exp == maxExp)
    v = mant ? NAN : INFINITY;
  else if (!f.ieeeSpecials && exp == maxExp && mant == (1u << f.mantBits) - 1)
    v = NAN;
  else if (exp == 0)
    v = std::ldexp((double)mant, 1 - bias(f) - f.mantBits);
  else
    v = std::ldexp(1.0 + std::ldexp((double)mant, -f.mantBits), (int)exp - bias(f));
  return neg ? -v : v;
}

} // namespace

uint16_t toF16(double x) { return (uint16_t)encode(x, kF16); }
double fromF16(uint16_t b) { return decode(b, kF16); }
uint16_t toBF16(double x) { return (uint16_t)encode(x, kBF16); }
double fromBF16(uint16_t b) { return decode(b, kBF16); }
uint8_t toF8E4M3FN(double x) { return (uint8_t)encode(x, kE4M3); }
double fromF8E4M3FN(uint8_t b) { return decode(b, kE4M3); }
uint8_t toF8E5M2(double x) { return (uint8_t)encode(x, kE5M2); }
double fromF8E5M2(uint8_t b) { return decode(b, kE5M2); }

} // namespace sgc::ir
