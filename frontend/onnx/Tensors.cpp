// TensorProto decoding, including external data confined to the model's
// folder (no absolute paths, no '..', no symlinks leading outside).
#include "frontend/onnx/Internal.h"

#include "ir/File.h"
#include "ir/shapes/Shapes.h"

#include <cstring>
#include <filesystem>
#include <fstream>

namespace sgc::onnx_import {
namespace fs = std::filesystem;

namespace {

constexpr int64_t kMaxElements = int64_t(1) << 40;

template <typename Field, typename Set>
Error fromField(const Field& f, ir::Tensor& t, const std::string& what, Set set) {
  if ((int64_t)f.size() != t.numel())
    return makeError(what + ": holds " + std::to_string(f.size()) + " values, expected " + std::to_string(t.numel()) + " for its shape");
  for (int64_t i = 0; i < t.numel(); ++i) set(i, f[(int)i]);
  return Error::success();
}

Expected<fs::path> externalPath(const std::string& location, const std::string& baseDir, const std::string& what) {
  if (baseDir.empty()) return makeError(what + ": external data is not allowed here");
  fs::path rel(location);
  if (location.empty() || rel.is_absolute() || rel.has_root_name() || rel.has_root_directory())
    return makeError(what + ": external data location '" + location + "' must be a relative path inside the model's folder");
  for (const auto& part : rel)
    if (part == "..") return makeError(what + ": external data location '" + location + "' leaves the model's folder");
  std::error_code ec;
  fs::path base = fs::canonical(baseDir, ec);
  if (ec) return makeError(what + ": cannot resolve the model's folder");
  fs::path full = fs::weakly_canonical(base / rel, ec);
  if (ec) return makeError(what + ": cannot resolve external data location '" + location + "'");
  auto [b, f] = std::mismatch(base.begin(), base.end(), full.begin(), full.end());
  if (b != base.end()) return makeError(what + ": external data location '" + location + "' resolves outside the model's folder");
  return full;
}

Error readExternal(const onnx::TensorProto& t, ir::Tensor& out, const std::string& baseDir, const std::string& what) {
  std::string location;
  uint64_t need = (uint64_t)out.numel() * ir::dtypeSize(out.dtype);
  uint64_t offset = 0, length = need;
  bool hasLength = false;
  for (const auto& kv : t.external_data()) {
    try {
      if (kv.key() == "location") location = kv.value();
      else if (kv.key() == "offset") offset = std::stoull(kv.value());
      else if (kv.key() == "length") length = std::stoull(kv.value()), hasLength = true;
    } catch (const std::exception&) {
      return makeError(what + ": external data " + kv.key() + " '" + kv.value() + "' is not a number");
    }
  }
  if (hasLength && length != need)
    return makeError(what + ": external data length " + std::to_string(length) + " differs from " + std::to_string(need) + " bytes for its shape");
  auto path = externalPath(location, baseDir, what);
  if (!path) return path.takeError();
  std::error_code ec;
  if (!fs::is_regular_file(*path, ec)) return makeError(what + ": external data file '" + location + "' is not a regular file");
  uint64_t size = fs::file_size(*path, ec);
  if (ec || offset > size || size - offset < need)
    return makeError(what + ": external data file '" + location + "' is too short for offset " + std::to_string(offset) + " and " + std::to_string(need) + " bytes");
  out.bytes.assign(need, 0); // allocated only once the file is known to hold it
  std::ifstream f(*path, std::ios::binary);
  f.seekg((std::streamoff)offset);
  f.read((char*)out.bytes.data(), (std::streamsize)out.bytes.size());
  if (!f) return makeError(what + ": cannot read external data file '" + location + "'");
  return Error::success();
}

Error decodeTypedFields(const onnx::TensorProto& t, ir::Tensor& out, const std::string& what) {
  using ir::DType;
  auto setF = [&](int64_t i, double v) { out.setF(i, v); };
  auto setI = [&](int64_t i, int64_t v) { out.setI(i, v); };
  auto setBits16 = [&](int64_t i, int32_t v) { uint16_t b = (uint16_t)v; std::memcpy(out.bytes.data() + 2 * i, &b, 2); };
  auto setBits8 = [&](int64_t i, int32_t v) { out.bytes[i] = (uint8_t)v; };
  switch (out.dtype) {
  case DType::F32: return fromField(t.float_data(), out, what, setF);
  case DType::F64: return fromField(t.double_data(), out, what, setF);
  case DType::I64: return fromField(t.int64_data(), out, what, setI);
  case DType::U32:
  case DType::U64: return fromField(t.uint64_data(), out, what, [&](int64_t i, uint64_t v) { out.setI(i, (int64_t)v); });
  case DType::F16:
  case DType::BF16: return fromField(t.int32_data(), out, what, setBits16);
  case DType::F8E4M3FN:
  case DType::F8E5M2: return fromField(t.int32_data(), out, what, setBits8);
  default: return fromField(t.int32_data(), out, what, setI);
  }
}

} // namespace

Expected<ir::Tensor> decodeTensor(const onnx::TensorProto& t, const std::string& baseDir, const std::string& what) {
  auto dtype = ir::dtypeFromOnnx(t.data_type());
  if (!dtype) return makeError(what + ": unsupported or unknown dtype code " + std::to_string(t.data_type()));
  if (t.has_segment()) return makeError(what + ": segmented tensors are not supported");
  if (t.dims_size() > ir::kMaxRank) return makeError(what + ": rank " + std::to_string(t.dims_size()) + " is over " + std::to_string(ir::kMaxRank));
  std::vector<int64_t> shape(t.dims().begin(), t.dims().end());
  for (int64_t d : shape)
    if (d < 0) return makeError(what + ": negative dim " + std::to_string(d));
  if (!ir::checkedNumel(shape, kMaxElements)) return makeError(what + ": too many elements (over 2^40)");
  ir::Tensor out;
  out.dtype = *dtype;
  out.shape = shape;
  uint64_t bytes = (uint64_t)out.numel() * ir::dtypeSize(*dtype);
  bool external = t.data_location() == onnx::TensorProto::EXTERNAL;
  if (!external && !t.has_raw_data()) {
    // Typed fields hold at most as many values as the message has bytes; refuse before allocating.
    size_t available = (size_t)t.float_data_size() + t.double_data_size() + t.int64_data_size() + t.int32_data_size() + t.uint64_data_size();
    if ((uint64_t)out.numel() != available && out.numel() > 0)
      return makeError(what + ": holds " + std::to_string(available) + " values, expected " + std::to_string(out.numel()) + " for its shape");
  } else if (!external && t.raw_data().size() != bytes) {
    return makeError(what + ": raw data has " + std::to_string(t.raw_data().size()) + " bytes, expected " + std::to_string(bytes) + " for " + ir::toString(ir::Type::of(*dtype, shape)));
  }
  if (external) {
    if (Error e = readExternal(t, out, baseDir, what)) return e;
  } else if (t.has_raw_data()) {
    const uint8_t* raw = (const uint8_t*)t.raw_data().data();
    out.bytes.assign(raw, raw + bytes); // one copy, no zeroing first
  } else {
    out.bytes.assign(bytes, 0);
    if (Error e = decodeTypedFields(t, out, what)) return e;
  }
  return out;
}

Expected<ir::Tensor> readTensorFile(const std::string& path, std::string* name) {
  auto bytes = readWholeFile(path);
  if (!bytes) return bytes.takeError();
  onnx::TensorProto t;
  if (!t.ParseFromString(*bytes)) return makeError(path + ": not a valid TensorProto");
  if (name) *name = t.name();
  return decodeTensor(t, "", path);
}

} // namespace sgc::onnx_import
