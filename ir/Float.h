// Conversions between double and the narrow floating-point formats (f16,
// bf16, f8e4m3fn, f8e5m2), rounding to nearest even. f8e4m3fn has no
// infinity: out-of-range values saturate to its largest finite value, as
// ONNX's Cast does by default.
#pragma once
#include <cstdint>

namespace sgc::ir {

uint16_t toF16(double x);
double fromF16(uint16_t bits);
uint16_t toBF16(double x);
double fromBF16(uint16_t bits);
uint8_t toF8E4M3FN(double x);
double fromF8E4M3FN(uint8_t bits);
uint8_t toF8E5M2(double x);
double fromF8E5M2(uint8_t bits);

} // namespace sgc::ir
