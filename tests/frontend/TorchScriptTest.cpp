// The TorchScript reader on archives built here: a module's tensors are read
// through their storage views, and malformed or hostile archives (truncated or
// corrupted zips, unexpected pickle globals, storages that disagree with their
// tensors, unknown aten ops, data-dependent control flow) each give one clear
// error and never a crash.
#include "frontend/torchscript/Importer.h"
#include "frontend/torchscript/Pickle.h"
#include "frontend/torchscript/Script.h"
#include "ir/interp/Interpreter.h"

#include <zip.h>

#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <map>

using namespace sgc;
namespace fs = std::filesystem;

namespace {

/// Pickle protocol 2, written opcode by opcode.
struct Pickle {
  std::string b = "\x80\x02";
  Pickle& global(const std::string& m, const std::string& n) { b += "c" + m + "\n" + n + "\n"; return *this; }
  Pickle& str(const std::string& s) {
    b += 'X';
    for (int i = 0; i < 4; ++i) b += char(s.size() >> (8 * i) & 0xff);
    b += s;
    return *this;
  }
  Pickle& integer(int v) { b += 'J'; for (int i = 0; i < 4; ++i) b += char(uint32_t(v) >> (8 * i) & 0xff); return *this; }
  Pickle& op(char c) { b += c; return *this; }
  Pickle& ints(std::initializer_list<int> v) {
    op('(');
    for (int x : v) integer(x);
    return op('t');
  }
  /// _rebuild_tensor_v2(('storage', FloatStorage, key, 'cpu', numel), offset, sizes, strides, False, OrderedDict())
  Pickle& tensor(const std::string& key, int numel, int offset, std::initializer_list<int> sizes, std::initializer_list<int> strides) {
    global("torch._utils", "_rebuild_tensor_v2").op('(');
    op('(').str("storage").global("torch", "FloatStorage").str(key).str("cpu").integer(numel).op('t').op('Q');
    integer(offset).ints(sizes).ints(strides).op('\x89').global("collections", "OrderedDict").op(')').op('R').op('t').op('R');
    return *this;
  }
  /// A module object: GLOBAL, NEWOBJ, then its state dict (the caller adds the entries between
  /// open() and close()).
  Pickle& open(const std::string& cls) { return global("__torch__", cls).op(')').op('\x81').op('}').op('(').str("training").op('\x88'); }
  Pickle& close() { return op('u').op('b'); }
  std::string done() { return b + "."; }
};

std::string floats(std::initializer_list<float> v) {
  std::string s;
  for (float f : v) s.append(reinterpret_cast<const char*>(&f), 4);
  return s;
}

const char* kCode = R"(class M(Module):
  __parameters__ = ["weight", ]
  __buffers__ = []
  weight : Tensor
  training : bool
  def forward(self: __torch__.M,
    x: Tensor) -> Tensor:
    weight = self.weight
    _0 = torch.matmul(x, weight)
    return torch.sum(_0)
)";

class TorchScript : public ::testing::Test {
protected:
  void SetUp() override {
    dir = fs::temp_directory_path() / ("sgc-torchscript-" + std::to_string(getpid()));
    fs::create_directories(dir);
  }
  void TearDown() override { fs::remove_all(dir); }

  /// A zip of `entries` under the top folder "m/", as torch.jit.save writes them (stored).
  std::string zipOf(const std::map<std::string, std::string>& entries) {
    std::string path = (dir / "archive.pt").string();
    int err = 0;
    zip_t* z = zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &err);
    EXPECT_TRUE(z);
    for (const auto& [name, data] : entries) {
      zip_source_t* s = zip_source_buffer(z, data.data(), data.size(), 0);
      zip_int64_t i = zip_file_add(z, ("m/" + name).c_str(), s, ZIP_FL_OVERWRITE);
      zip_set_file_compression(z, (zip_uint64_t)i, ZIP_CM_STORE, 0);
    }
    EXPECT_EQ(zip_close(z), 0);
    std::ifstream f(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  }

  /// The module M of kCode with a weight of the given view of storage "0".
  std::map<std::string, std::string> module(int numel, int offset, std::initializer_list<int> sizes, std::initializer_list<int> strides,
                                            const std::string& storage) {
    Pickle p;
    p.open("M").str("weight").tensor("0", numel, offset, sizes, strides).close();
    return {{"data.pkl", p.done()}, {"code/__torch__.py", kCode}, {"data/0", storage}, {"version", "3"}};
  }

  static ts_import::Options typed() { return {{{"x", ir::Type::of(ir::DType::F32, {1, 2})}}}; }

  std::string errorOf(const std::string& bytes, const ts_import::Options& o = typed()) {
    auto g = ts_import::importArchiveBytes(bytes, "m.pt", o);
    if (g) return "";
    return errorText(g.takeError());
  }

  fs::path dir;
};

TEST_F(TorchScript, ReadsAParameterThroughItsStorageView) {
  // The weight is the transpose of [[1, 2], [3, 4]], one element into its storage: strides (1, 2).
  auto g = ts_import::importArchiveBytes(zipOf(module(5, 1, {2, 2}, {1, 2}, floats({9, 1, 2, 3, 4}))), "m.pt", typed());
  ASSERT_TRUE(bool(g)) << errorText(g.takeError());
  ASSERT_EQ((*g)->params.size(), 1u);
  EXPECT_EQ((*g)->params[0]->name, "weight");
  const ir::Tensor& w = *(*g)->params[0]->data;
  EXPECT_EQ(w.getF(0), 1);
  EXPECT_EQ(w.getF(1), 3); // row 0 of the transpose
  EXPECT_EQ(w.getF(2), 2);
  ir::Tensor x = ir::Tensor::fromF64(ir::DType::F32, {1, 2}, {1, 10});
  auto out = ir::run(**g, {{"x", x}});
  ASSERT_TRUE(bool(out)) << errorText(out.takeError());
  EXPECT_EQ(out->at("output").getF(0), (1 + 10 * 2) + (3 + 10 * 4)); // sum of [1, 10] @ [[1, 3], [2, 4]]
}

TEST_F(TorchScript, TruncatedOrCorruptedZipsAreErrors) {
  std::string good = zipOf(module(4, 0, {2, 2}, {2, 1}, floats({1, 2, 3, 4})));
  EXPECT_NE(errorOf(good.substr(0, good.size() / 2)).find("not a TorchScript archive (a zip file)"), std::string::npos);
  EXPECT_NE(errorOf("").find("m.pt"), std::string::npos);
  std::string corrupted = good;
  size_t at = corrupted.find("torch._utils");
  ASSERT_NE(at, std::string::npos);
  corrupted[at] = 'T'; // inside data.pkl: its CRC no longer matches
  std::string e = errorOf(corrupted);
  EXPECT_NE(e.find("data.pkl"), std::string::npos) << e;
}

TEST_F(TorchScript, APickleAskingForAnUnexpectedGlobalIsRefused) {
  Pickle p;
  p.global("os", "system").str("true").op('\x85').op('R');
  auto entries = module(4, 0, {2, 2}, {2, 1}, floats({1, 2, 3, 4}));
  entries["data.pkl"] = p.done();
  std::string e = errorOf(zipOf(entries));
  EXPECT_NE(e.find("asks for the global 'os.system'"), std::string::npos) << e;
}

TEST_F(TorchScript, AStorageThatDisagreesWithItsTensorIsAnError) {
  std::string e = errorOf(zipOf(module(4, 0, {2, 2}, {2, 1}, floats({1, 2}))));
  EXPECT_NE(e.find("tensor weight (storage data/0): the storage holds 8 bytes, the pickle says 4 elements of 4"), std::string::npos) << e;
  e = errorOf(zipOf(module(4, 1, {2, 2}, {2, 1}, floats({1, 2, 3, 4}))));
  EXPECT_NE(e.find("its view reaches element 4 of a storage of 4"), std::string::npos) << e;
  auto entries = module(4, 0, {2, 2}, {2, 1}, floats({1, 2, 3, 4}));
  Pickle p;
  p.open("M").str("weight").tensor("../0", 4, 0, {2, 2}, {2, 1}).close();
  entries["data.pkl"] = p.done();
  e = errorOf(zipOf(entries));
  EXPECT_NE(e.find("a storage key may not name a path"), std::string::npos) << e;
}

TEST_F(TorchScript, AnUnknownAtenOpIsNamedWithItsArguments) {
  auto entries = module(4, 0, {2, 2}, {2, 1}, floats({1, 2, 3, 4}));
  std::string code = kCode;
  code.replace(code.find("torch.sum(_0)"), 13, "torch.frobnicate(_0, 3, alpha=0.5)");
  entries["code/__torch__.py"] = code;
  std::string e = errorOf(zipOf(entries));
  EXPECT_NE(e.find("code/__torch__.py:10: aten::frobnicate(Tensor, int, alpha=float) is not supported"), std::string::npos) << e;
}

TEST_F(TorchScript, ErrorsNameTheModelsSourceLineFromTheDebugRecords) {
  auto entries = module(4, 0, {2, 2}, {2, 1}, floats({1, 2, 3, 4}));
  std::string code = kCode;
  code.replace(code.find("torch.sum(_0)"), 13, "torch.frobnicate(_0)");
  entries["code/__torch__.py"] = code;
  // ("FORMAT_WITH_STRING_TABLE", strings, ((offset, ((text indices, file index, first line), start, end), handle), ...)):
  // the statement's record says its text starts at line 7 of /src/model.py, the range on its second line.
  std::string first = "    def forward(self, x):\n", second = "        return torch.frobnicate(torch.matmul(x, self.weight))\n";
  auto intlist = [](Pickle& p, std::initializer_list<int> v) {
    p.global("torch.jit._pickle", "build_intlist").op('(').op(']').op('(');
    for (int x : v) p.integer(x);
    p.op('e').op('t').op('R');
  };
  Pickle d;
  d.op('(').str("FORMAT_WITH_STRING_TABLE").op('(').str("").str(first).str(second).str("/src/model.py").op('t').op('(');
  d.op('(').integer(0).op('(').op('(');
  intlist(d, {});
  d.integer(0).integer(0).op('t').integer(0).integer(0).op('t').integer(0).op('t');
  d.op('(').integer((int)code.find("torch.frobnicate")).op('(').op('(');
  intlist(d, {1, 2});
  d.integer(3).integer(7).op('t').integer((int)first.size() + 8).integer((int)(first.size() + second.size())).op('t').integer(1).op('t');
  d.op('t').op('t');
  entries["code/__torch__.py.debug_pkl"] = d.done();
  std::string e = errorOf(zipOf(entries));
  EXPECT_NE(e.find("aten::frobnicate(Tensor) is not supported"), std::string::npos) << e;
  EXPECT_NE(e.find("(model source: /src/model.py:8)"), std::string::npos) << e;
}

TEST_F(TorchScript, DataDependentControlFlowIsAnErrorNamingTheLine) {
  auto entries = module(4, 0, {2, 2}, {2, 1}, floats({1, 2, 3, 4}));
  std::string code = kCode;
  code.replace(code.find("    return torch.sum(_0)"), 24, "    if torch.gt(torch.sum(_0), 0.):\n      _1 = _0\n    else:\n      _1 = weight\n    return torch.sum(_1)");
  entries["code/__torch__.py"] = code;
  std::string e = errorOf(zipOf(entries));
  EXPECT_NE(e.find("__torch__.py:10: an 'if' on a tensor"), std::string::npos) << e;
  EXPECT_NE(e.find("data-dependent control flow is not supported"), std::string::npos) << e;
}

TEST_F(TorchScript, AnArgumentWithoutATypeNamesTheFlag) {
  std::string e = errorOf(zipOf(module(4, 0, {2, 2}, {2, 1}, floats({1, 2, 3, 4}))), {});
  EXPECT_NE(e.find("the forward's argument 'x' (Tensor) has no type"), std::string::npos) << e;
  EXPECT_NE(e.find("--input-type x="), std::string::npos) << e;
}

TEST_F(TorchScript, AForwardWithoutSelfIsAnError) {
  auto entries = module(4, 0, {2, 2}, {2, 1}, floats({1, 2, 3, 4}));
  entries["code/__torch__.py"] = "class M(Module):\n  __parameters__ = []\n  def forward() -> Tensor:\n    return 1\n";
  std::string e = errorOf(zipOf(entries)); // typed inputs name an argument such a forward cannot have
  EXPECT_NE(e.find("__torch__.M.forward takes no self"), std::string::npos) << e;
}

TEST_F(TorchScript, ACodeFileThatDoesNotParseNamesItsLine) {
  auto entries = module(4, 0, {2, 2}, {2, 1}, floats({1, 2, 3, 4}));
  entries["code/__torch__.py"] = std::string(kCode) + "  def broken(self):\n    x = (1, \n";
  std::string e = errorOf(zipOf(entries));
  EXPECT_NE(e.find("code/__torch__.py:13"), std::string::npos) << e;
}

TEST_F(TorchScript, GarbageNeverCrashesTheReaders) {
  std::string good = zipOf(module(4, 0, {2, 2}, {2, 1}, floats({1, 2, 3, 4})));
  Pickle p;
  p.open("M").str("weight").tensor("0", 4, 0, {2, 2}, {2, 1}).close();
  std::string pickle = p.done();
  uint32_t seed = 1;
  for (int i = 0; i < 300; ++i) {
    for (std::string* s : {&good, &pickle}) {
      std::string m = *s;
      for (int k = 0; k < 4; ++k) {
        seed = seed * 1664525 + 1013904223;
        m[seed % m.size()] = char(seed >> 24);
      }
      if (s == &good) {
        errorOf(m); // an error or a graph: either is fine, a crash is not
      } else {
        auto r = ts_import::unpickle(m, "fuzz");
        if (!r) consumeError(r.takeError());
      }
    }
    std::string code = kCode;
    seed = seed * 1664525 + 1013904223;
    code[seed % code.size()] = "()[],:=.\n 0a\"'"[seed % 15];
    auto c = ts_import::parseCode(code, "__torch__", "fuzz.py");
    if (!c) consumeError(c.takeError());
  }
  // A list that holds itself: the pickle may make cycles, and freeing them must not recurse.
  Pickle cyc;
  cyc.op(']').op('q').b += '\0';
  cyc.op('h').b += '\0';
  cyc.op('a');
  auto r = ts_import::unpickle(cyc.done(), "cycle");
  ASSERT_TRUE(bool(r)) << errorText(r.takeError());
  EXPECT_EQ((*r)->root->items[0], (*r)->root);
}

} // namespace
