// FusedAttentionGrad's scratch for its GPU form (see AttentionScratch.h).
#include "codegen/AttentionScratch.h"

namespace sgc::codegen {

int addAttentionScratch(ir::Graph& g, kir::GpuArch arch) {
  int added = 0;
  for (const auto& n : g.nodes()) {
    if (n->op != ir::Op::FusedAttentionGrad || n->outputs.size() > 4) continue;
    int64_t elements = kir::attentionScratchElements(*n, arch);
    if (elements == 0) continue;
    ir::Value* scratch = g.addResult(n.get(), n->outputs[3] ? n->outputs[3]->name + "_scratch" : "attention_scratch");
    scratch->type = ir::Type::ranked_(ir::DType::BF16, {ir::Dim::of(elements)});
    ++added;
  }
  return added;
}

} // namespace sgc::codegen
