// The sgc command: dispatches to its subcommands.
#include "driver/Common.h"

#include <cstdio>
#include <cstring>
#include <exception>
#include <new>

namespace {
void usage(FILE* f) {
  fprintf(f, "usage: sgc <command> [options]\n\n"
             "sgc is an ahead-of-time compiler for deep-learning training graphs (and decoders).\n\n"
             "commands:\n"
             "  inspect MODEL|FILE.safetensors   describe a model or a tensor file\n"
             "  ops                              every op of the IR and what works for it\n"
             "  compile MODEL --emit=ir          import a model and print its IR\n"
             "  run MODEL --inputs IN -o OUT      evaluate a model on the reference interpreter\n"
             "  opt FILE --passes=a,b            run IR passes on a model or IR text\n"
             "  train MODEL --data D --steps N   train on the reference interpreter (JSON lines)\n"
             "  generate gen.so --prompt-ids IDS greedy decoding with a library compiled with --mode decode\n\n"
             "'sgc <command> --help' describes each command.\n");
}
} // namespace

namespace {

int dispatch(int argc, char** argv) {
  using namespace sgc::driver;
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    usage(stdout);
    return 0;
  }
  if (cmd == "--version") {
    printf("sgc 0.1.0\n");
    return 0;
  }
  if (cmd == "inspect") return inspectMain(argc - 2, argv + 2);
  if (cmd == "ops") return opsMain(argc - 2, argv + 2);
  if (cmd == "compile") return compileMain(argc - 2, argv + 2);
  if (cmd == "run") return runMain(argc - 2, argv + 2);
  if (cmd == "opt") return optMain(argc - 2, argv + 2);
  if (cmd == "train") return trainMain(argc - 2, argv + 2);
  if (cmd == "generate") return generateMain(argc - 2, argv + 2);
  fprintf(stderr, "sgc: unknown command '%s'\n", cmd.c_str());
  usage(stderr);
  return 2;
}

} // namespace

int main(int argc, char** argv) {
  // Commands report errors as values; what still escapes as an exception becomes one line too.
  try {
    return dispatch(argc, argv);
  } catch (const std::bad_alloc&) {
    fprintf(stderr, "sgc: error: out of memory\n");
  } catch (const std::exception& e) {
    fprintf(stderr, "sgc: error: %s\n", e.what());
  } catch (...) {
    fprintf(stderr, "sgc: error: an unexpected failure\n");
  }
  return 1;
}
