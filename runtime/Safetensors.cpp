// The safetensors reader and writer.
#include "runtime/Safetensors.h"

#include "runtime/OutputFile.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sys/stat.h>
#include <tuple>
#include <unistd.h>

namespace sgc::rt {

size_t stDTypeSize(const std::string& d) {
  static const std::map<std::string, size_t> sizes = {
      {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"I64", 8}, {"I32", 4},
      {"I16", 2}, {"I8", 1},  {"U64", 8}, {"U32", 4},  {"U16", 2},  {"U8", 1},        {"BOOL", 1}};
  auto it = sizes.find(d);
  return it == sizes.end() ? 0 : it->second;
}

constexpr uint64_t kMaxHeaderBytes = 100'000'000; // the reference implementation's limit

static bool fail(std::string& error, const std::string& msg) {
  error = msg;
  return false;
}

bool parseSafetensors(const uint8_t* data, size_t size, const std::string& what, StFile& out, std::string& error) {
  if (size < 8) return fail(error, what + ": not a safetensors file (shorter than its 8-byte header length)");
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; --i) hlen = hlen << 8 | data[i];
  if (hlen > size - 8) return fail(error, what + ": header length " + std::to_string(hlen) + " exceeds the file size");
  if (hlen > kMaxHeaderBytes) return fail(error, what + ": header length " + std::to_string(hlen) + " exceeds the format's 100 MB limit");
  // A name given twice would silently keep the last: refused, as the format's reference reader does.
  std::set<std::string> names;
  std::string twice;
  auto seeKey = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    if (event == nlohmann::json::parse_event_t::key && depth == 1 && !names.insert(parsed.get<std::string>()).second && twice.empty())
      twice = parsed.get<std::string>();
    return true;
  };
  nlohmann::json header = nlohmann::json::parse(data + 8, data + 8 + hlen, seeKey, false);
  if (header.is_discarded() || !header.is_object()) return fail(error, what + ": header is not a JSON object");
  if (!twice.empty()) return fail(error, what + ": the header names tensor '" + twice + "' twice");
  const uint8_t* body = data + 8 + hlen;
  size_t bodySize = size - 8 - hlen;
  std::vector<std::tuple<uint64_t, uint64_t, std::string>> spans; // each tensor's [begin, end)
  for (auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    std::string where = what + ": tensor '" + name + "'";
    if (!info.is_object() || !info.contains("dtype") || !info["dtype"].is_string() || !info.contains("shape") ||
        !info["shape"].is_array() || !info.contains("data_offsets") || !info["data_offsets"].is_array() ||
        info["data_offsets"].size() != 2)
      return fail(error, where + " needs dtype, shape and data_offsets");
    StTensor t;
    t.dtype = info["dtype"];
    size_t es = stDTypeSize(t.dtype);
    if (!es) return fail(error, where + " has unknown dtype '" + t.dtype + "'");
    uint64_t numel = 1;
    for (auto& d : info["shape"]) {
      if (!d.is_number_unsigned()) return fail(error, where + " has a shape entry that is not a non-negative integer");
      uint64_t v = d.get<uint64_t>();
      if (v > (uint64_t)INT64_MAX || (v && numel > (uint64_t(1) << 62) / v)) return fail(error, where + " is too large");
      numel *= v;
      t.shape.push_back((int64_t)v);
    }
    auto& offs = info["data_offsets"];
    if (!offs[0].is_number_unsigned() || !offs[1].is_number_unsigned()) return fail(error, where + " has bad data_offsets");
    uint64_t b = offs[0], e = offs[1];
    if (b > e || e > bodySize) return fail(error, where + " has data_offsets outside the file");
    if (e - b != numel * es)
      return fail(error, where + " holds " + std::to_string(e - b) + " bytes, expected " + std::to_string(numel * es) + " for its shape");
    t.data.assign(body + b, body + e);
    out[name] = std::move(t);
    spans.emplace_back(b, e, name);
  }
  // The tensors tile the data in order of their offsets, without overlaps or holes (the reference's rule).
  std::sort(spans.begin(), spans.end());
  uint64_t at = 0;
  for (auto& [b, e, name] : spans) {
    if (b != at)
      return fail(error, what + ": tensor '" + name + "' starts at byte " + std::to_string(b) + " of the data, expected " +
                             std::to_string(at) + (b < at ? " (it overlaps the tensor before it)" : " (a hole before it)"));
    at = e;
  }
  if (at != bodySize) return fail(error, what + ": " + std::to_string(bodySize - at) + " bytes after the last tensor's data");
  return true;
}

bool readSafetensors(const std::string& path, StFile& out, std::string& error) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return fail(error, path + ": cannot open: " + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) return fail(error, path + ": is a directory, not a safetensors file");
  if (!S_ISREG(st.st_mode)) return fail(error, path + ": not a regular file (a device, pipe or socket), not a safetensors file");
  std::ifstream f(path, std::ios::binary);
  if (!f) return fail(error, path + ": cannot open");
  std::vector<uint8_t> bytes((size_t)st.st_size); // a regular file: its size bounds what is read
  if (!f.read((char*)bytes.data(), (std::streamsize)bytes.size())) return fail(error, path + ": read error (the file changed as it was read?)");
  return parseSafetensors(bytes.data(), bytes.size(), path, out, error);
}

bool writeSafetensors(const std::string& path, const StFile& tensors, std::string& error) {
  nlohmann::json header = nlohmann::json::object();
  uint64_t off = 0;
  for (auto& [name, t] : tensors) {
    header[name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {off, off + t.data.size()}}};
    off += t.data.size();
  }
  std::string h = header.dump();
  while ((h.size() + 8) % 8) h += ' '; // the data starts 8-byte aligned
  std::string tmp = temporaryFor(path);
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return fail(error, path + ": cannot create " + tmp);
    uint64_t n = h.size();
    for (int i = 0; i < 8; ++i) f.put((char)(n >> (8 * i) & 0xff));
    f.write(h.data(), (std::streamsize)h.size());
    for (auto& [name, t] : tensors) f.write((const char*)t.data.data(), (std::streamsize)t.data.size());
    f.flush();
    if (!f) {
      std::remove(tmp.c_str());
      return fail(error, path + ": write failed");
    }
  }
  return commitOutput(tmp, path, error); // fsynced and renamed into place (a device is written directly)
}

} // namespace sgc::rt
