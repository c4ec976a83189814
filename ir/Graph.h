// The IR: an SSA tensor graph. Values are graph inputs, parameters (the
// model's float initializers), state (other persistent tensors, such as
// optimizer moments), constants, or node results; nodes are kept in a
// topological order. A training step lists `updates`: after the step, each
// parameter or state value takes the value of its update. The graph owns
// everything; pointers stay valid until the value or node is erased.
#pragma once
#include "ir/Op.h"
#include "ir/Tensor.h"
#include "ir/Type.h"

#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

namespace sgc::ir {

class Node;

enum class ValueKind : uint8_t { Input, Param, State, Const, Result };

struct Value {
  std::string name;
  Type type;
  ValueKind kind = ValueKind::Result;
  Node* producer = nullptr;           ///< Result only
  std::shared_ptr<const Tensor> data; ///< Param, State and Const only
};

using Attr = std::variant<int64_t, double, std::string, std::vector<int64_t>, std::vector<double>, Tensor>;

class Node {
public:
  Op op;
  std::string name;
  std::vector<Value*> inputs; ///< nullptr where an optional input is absent
  std::vector<Value*> outputs;
  std::map<std::string, Attr> attrs; ///< sorted by name: deterministic

  Value* input(size_t i) const { return i < inputs.size() ? inputs[i] : nullptr; }
  bool has(const std::string& a) const { return attrs.count(a) != 0; }
  int64_t getInt(const std::string& a, int64_t def) const;
  double getFloat(const std::string& a, double def) const;
  std::string getString(const std::string& a, const std::string& def) const;
  std::vector<int64_t> getInts(const std::string& a, std::vector<int64_t> def = {}) const;
  std::vector<double> getFloats(const std::string& a) const;
  const Tensor* getTensor(const std::string& a) const;
};

/// "node 'name' (Op)": how errors refer to a node.
std::string describe(const Node& n);

class Graph {
public:
  std::string name = "main";
  std::vector<Value*> inputs, params, state, consts, outputs;
  /// (persistent value, its new value after a step): parameters and state only.
  std::vector<std::pair<Value*, Value*>> updates;
  /// Constants a training step must not depend on, by name, and why: tensors an exporter folded
  /// out of a module's parameters in a way that training them could not train the parameters
  /// (passes/TrainingStep refuses a loss that reads one; inference may).
  std::map<std::string, std::string> untrainable;
  /// Why the graph as a whole is not the training graph of the module it was exported from
  /// (empty: it is); a training step refuses it.
  std::string notTrainable;

  Value* addInput(const std::string& name, Type type);
  /// Removes a graph input no node reads.
  void removeInput(Value* v);
  Value* addParam(const std::string& name, Tensor data);
  Value* addState(const std::string& name, Tensor data);
  /// State whose initial value other state shares (it is const): optimizer moments of equal
  /// shapes start from one tensor of zeros, not one each.
  Value* addState(const std::string& name, std::shared_ptr<const Tensor> data);
  Value* addConst(const std::string& name, Tensor data);
  /// A constant i64 vector (a shape, slice bounds, axes), named uniquely from `base`.
  Value* addI64s(const std::string& base, const std::vector<int64_t>& v);
  /// Appends a node with `numOutputs` result values named from `outNames`
  /// (or made unique from the node name when a name is empty or missing).
  Node* addNode(Op op, std::vector<Value*> inputs, int numOutputs, const std::string& name = "",
                const std::vector<std::string>& outNames = {});

  /// Puts the nodes in `order`, which must hold each of them once (passes that
  /// insert nodes build the new order, then call this).
  void setOrder(const std::vector<Node*>& order);
  /// Moves the nodes listed in `after` to just after their key, in the order listed (passes that
  /// append nodes meant to follow one: its replacements, a cast of its result); the rest keep
  /// their order.
  void placeAfter(const std::map<const Node*, std::vector<Node*>>& after);

  /// Gives an existing node one more result value.
  Value* addResult(Node* n, const std::string& name);

  const std::vector<std::unique_ptr<Node>>& nodes() const { return nodes_; }
  std::vector<std::unique_ptr<Node>>& nodes() { return nodes_; }
  const std::vector<std::unique_ptr<Value>>& values() const { return values_; }

  /// A value name not used yet, derived from `base`.
  std::string uniqueName(const std::string& base);
  Value* findValue(const std::string& name) const;

  /// Makes every use of `from` (node inputs, graph outputs) use `to`.
  void replaceAllUses(Value* from, Value* to);
  /// Turns a node result into a constant holding `data`, removing its producer
  /// when none of the producer's results is a Result anymore.
  void makeConst(Value* v, Tensor data);
  /// Removes nodes none of whose results is used, and unused constants.
  /// Returns whether anything was removed.
  bool removeDeadNodes();

private:
  Value* newValue(const std::string& name, ValueKind kind);
  Value* addInitializer(const std::string& name, ValueKind kind, std::shared_ptr<const Tensor> data, std::vector<Value*>& list);
  std::vector<std::unique_ptr<Value>> values_;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::map<std::string, Value*> byName_;
};

} // namespace sgc::ir
