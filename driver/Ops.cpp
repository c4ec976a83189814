// sgc ops: every op of the IR's table (ir/Ops.def) with what works for it:
// imported from ONNX (domain and first opset), interpreted, compiled for the
// CPU and the GPU (or why not), differentiable.
#include "driver/Common.h"

#include "ir/Op.h"

#include <cstdio>
#include <cstring>

namespace sgc::driver {

int opsMain(int argc, char** argv) {
  if (argc > 0 && (!strcmp(argv[0], "--help") || !strcmp(argv[0], "-h"))) {
    printf("usage: sgc ops\n\nLists every op of sgc's IR: its class, where it is imported from (ONNX domain and first opset;\n"
           "'sgc' for the IR's own ops), and whether the interpreter runs it, the code generator compiles it for\n"
           "the CPU and the GPU (or why not) and autodiff differentiates it. ONNX ops built from other IR ops at\n"
           "import (Attention, RMSNormalization, RotaryEmbedding, Einsum, ConvTranspose, the sequence ops) are\n"
           "listed after the table.\n");
    return 0;
  }
  if (argc > 0) return reportError("ops takes no arguments (see sgc ops --help)");
  printf("%-26s %-12s %-26s %-7s %-9s %-5s %s\n", "op", "class", "imported", "interp", "cpu, gpu", "grad", "notes");
  int generated = 0, differentiable = 0;
  for (int i = 0; i < ir::numOps(); ++i) {
    const ir::OpInfo& o = ir::opInfo((ir::Op)i);
    std::string imported = o.domain == ir::OpDomain::Ir ? "sgc (IR only)" : std::string(ir::opDomainName(o.domain)) + " since " + std::to_string(o.since);
    generated += o.generated, differentiable += o.differentiable;
    printf("%-26s %-12s %-26s %-7s %-9s %-5s %s\n", std::string(o.name).c_str(), std::string(ir::opClassName(o.cls)).c_str(),
           imported.c_str(), "yes", o.generated ? "yes" : "no", o.differentiable ? "yes" : "-", std::string(o.notGenerated).c_str());
  }
  printf("\nbuilt from IR ops at import: Attention, RMSNormalization, RotaryEmbedding (opset 23), Einsum, ConvTranspose, Upsample,\n"
         "SplitToSequence, SequenceAt, SequenceConstruct, SequenceEmpty, SequenceInsert, SequenceErase, SequenceLength,\n"
         "ConcatFromSequence; model-local functions are inlined.\n");
  printf("%d ops: all interpreted, %d compiled for the CPU and the GPU, %d differentiable\n", ir::numOps(), generated, differentiable);
  return 0;
}

} // namespace sgc::driver
