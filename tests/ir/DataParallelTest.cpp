// The placement of the gradient all-reduces (ir/passes/DataParallel.h) on a
// real training step, the bundled sample MLP with AdamW and clipping, at
// several bucket sizes: every gradient the optimizer reads is reduced exactly
// once; each bucket's AllReduce comes after the producers of all its
// gradients and right after the last of them (only other AllReduces between),
// never earlier; buckets respect the size limit unless one gradient alone
// exceeds it; and they follow the order in which the gradients are produced.
#include "frontend/onnx/Importer.h"
#include "ir/training/TrainingStep.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

using namespace sgc;

namespace {

class DataParallelPlacement : public ::testing::TestWithParam<double> {};

TEST_P(DataParallelPlacement, RightAfterTheLastGradientOfEachBucket) {
  auto g = onnx_import::importModel(SGC_SOURCE_DIR "/samples/mlp_train.onnx");
  ASSERT_TRUE(!!g) << errorText(g.takeError());
  ir::TrainingOptions o;
  o.optimizer.kind = "adamw";
  o.optimizer.clipGradNorm = 1.0;
  o.dataParallel = "allreduce";
  o.bucketMb = GetParam();
  ASSERT_FALSE(ir::buildTrainingStep(**g, o));
  std::vector<const ir::Node*> order;
  std::map<const ir::Node*, size_t> at;
  for (auto& n : (*g)->nodes()) {
    at[n.get()] = order.size();
    order.push_back(n.get());
  }
  std::set<const ir::Value*> reduced;
  size_t lastBucketEnd = 0;
  int buckets = 0;
  for (const ir::Node* n : order) {
    if (n->op != ir::Op::AllReduce || n->getInt("bucket", 0) < 0) continue;
    ++buckets;
    size_t last = 0;
    double bytes = 0;
    for (const ir::Value* v : n->inputs) {
      ASSERT_TRUE(v->producer) << v->name;
      EXPECT_LT(at[v->producer], at[n]) << "a bucket precedes the producer of " << v->name;
      last = std::max(last, at[v->producer]);
      bytes += (double)v->type.staticNumel().value_or(0) * 4;
    }
    for (size_t i = last + 1; i < at[n]; ++i)
      EXPECT_EQ(order[i]->op, ir::Op::AllReduce) << "bucket " << n->getInt("bucket", 0) << " is not right after its last gradient";
    if (n->inputs.size() > 1) {
      EXPECT_LE(bytes, GetParam() * 1024 * 1024) << "bucket " << n->getInt("bucket", 0) << " is over the limit";
    }
    EXPECT_GE(last, lastBucketEnd) << "buckets out of the order of production";
    lastBucketEnd = last;
    for (const ir::Value* v : n->outputs) reduced.insert(v);
  }
  EXPECT_GE(buckets, 1);
  int updates = 0;
  for (const ir::Node* n : order)
    if (n->op == ir::Op::AdamUpdate) {
      ++updates;
      // The optimizer reads a reduced gradient (through the clipping's scaling when clipping).
      const ir::Value* grad = n->inputs[1];
      bool fromReduced = reduced.count(grad) != 0;
      if (!fromReduced && grad->producer)
        for (const ir::Value* in : grad->producer->inputs) fromReduced = fromReduced || reduced.count(in);
      EXPECT_TRUE(fromReduced) << n->outputs[0]->name << " reads an unreduced gradient";
    }
  EXPECT_EQ(updates, 8); // the sample's parameters
}

INSTANTIATE_TEST_SUITE_P(BucketSizes, DataParallelPlacement, ::testing::Values(0.0001, 0.001, 0.004, 25.0));

} // namespace
