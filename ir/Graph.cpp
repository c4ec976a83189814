// Graph construction and the few whole-graph edits passes share.
#include "ir/Graph.h"

#include <algorithm>
#include <cassert>
#include <map>
#include <set>

namespace sgc::ir {

int64_t Node::getInt(const std::string& a, int64_t def) const {
  auto it = attrs.find(a);
  if (it == attrs.end()) return def;
  if (auto* v = std::get_if<int64_t>(&it->second)) return *v;
  return def;
}

double Node::getFloat(const std::string& a, double def) const {
  auto it = attrs.find(a);
  if (it == attrs.end()) return def;
  if (auto* v = std::get_if<double>(&it->second)) return *v;
  if (auto* v = std::get_if<int64_t>(&it->second)) return (double)*v;
  return def;
}

std::string Node::getString(const std::string& a, const std::string& def) const {
  auto it = attrs.find(a);
  if (it == attrs.end()) return def;
  if (auto* v = std::get_if<std::string>(&it->second)) return *v;
  return def;
}

std::vector<int64_t> Node::getInts(const std::string& a, std::vector<int64_t> def) const {
  auto it = attrs.find(a);
  if (it == attrs.end()) return def;
  if (auto* v = std::get_if<std::vector<int64_t>>(&it->second)) return *v;
  return def;
}

std::vector<double> Node::getFloats(const std::string& a) const {
  auto it = attrs.find(a);
  if (it == attrs.end()) return {};
  if (auto* v = std::get_if<std::vector<double>>(&it->second)) return *v;
  if (auto* v = std::get_if<std::vector<int64_t>>(&it->second)) return {v->begin(), v->end()};
  return {};
}

const Tensor* Node::getTensor(const std::string& a) const {
  auto it = attrs.find(a);
  if (it == attrs.end()) return nullptr;
  return std::get_if<Tensor>(&it->second);
}

std::string describe(const Node& n) {
  return "node '" + n.name + "' (" + std::string(opName(n.op)) + ")";
}

Value* Graph::newValue(const std::string& name, ValueKind kind) {
  assert(!byName_.count(name) && "value names are unique");
  values_.push_back(std::make_unique<Value>());
  Value* v = values_.back().get();
  v->name = name;
  v->kind = kind;
  byName_[name] = v;
  return v;
}

std::string Graph::uniqueName(const std::string& base) {
  std::string b = base.empty() ? "v" : base;
  if (!byName_.count(b)) return b;
  for (int i = 1;; ++i) {
    std::string n = b + "." + std::to_string(i);
    if (!byName_.count(n)) return n;
  }
}

Value* Graph::findValue(const std::string& n) const {
  auto it = byName_.find(n);
  return it == byName_.end() ? nullptr : it->second;
}

Value* Graph::addInput(const std::string& n, Type type) {
  Value* v = newValue(n, ValueKind::Input);
  v->type = std::move(type);
  inputs.push_back(v);
  return v;
}

Value* Graph::addInitializer(const std::string& n, ValueKind kind, std::shared_ptr<const Tensor> data, std::vector<Value*>& list) {
  Value* v = newValue(n, kind);
  v->type = Type::of(data->dtype, data->shape);
  v->data = std::move(data);
  list.push_back(v);
  return v;
}

Value* Graph::addParam(const std::string& n, Tensor data) {
  return addInitializer(n, ValueKind::Param, std::make_shared<const Tensor>(std::move(data)), params);
}
Value* Graph::addState(const std::string& n, Tensor data) {
  return addInitializer(n, ValueKind::State, std::make_shared<const Tensor>(std::move(data)), state);
}
Value* Graph::addState(const std::string& n, std::shared_ptr<const Tensor> data) { return addInitializer(n, ValueKind::State, std::move(data), state); }
Value* Graph::addConst(const std::string& n, Tensor data) {
  return addInitializer(n, ValueKind::Const, std::make_shared<const Tensor>(std::move(data)), consts);
}

Value* Graph::addI64s(const std::string& base, const std::vector<int64_t>& v) {
  return addConst(uniqueName(base), Tensor::fromI64(DType::I64, {(int64_t)v.size()}, v));
}

Node* Graph::addNode(Op op, std::vector<Value*> ins, int numOutputs, const std::string& n,
                     const std::vector<std::string>& outNames) {
  nodes_.push_back(std::make_unique<Node>());
  Node* node = nodes_.back().get();
  node->op = op;
  node->name = n;
  node->inputs = std::move(ins);
  for (int i = 0; i < numOutputs; ++i) {
    std::string on = i < (int)outNames.size() ? outNames[i] : "";
    if (on.empty()) on = uniqueName((n.empty() ? std::string(opName(op)) : n) + (numOutputs > 1 ? "." + std::to_string(i) : ""));
    Value* v = newValue(on, ValueKind::Result);
    v->producer = node;
    node->outputs.push_back(v);
  }
  return node;
}

void Graph::setOrder(const std::vector<Node*>& order) {
  assert(order.size() == nodes_.size() && "setOrder takes every node once");
  std::map<const Node*, std::unique_ptr<Node>> owned;
  for (auto& n : nodes_) owned[n.get()] = std::move(n);
  nodes_.clear();
  for (Node* n : order) nodes_.push_back(std::move(owned.at(n)));
}

void Graph::placeAfter(const std::map<const Node*, std::vector<Node*>>& after) {
  std::set<const Node*> moved;
  for (const auto& [key, nodes] : after) moved.insert(nodes.begin(), nodes.end());
  std::vector<Node*> order;
  for (const auto& n : nodes_) {
    if (moved.count(n.get())) continue;
    order.push_back(n.get());
    if (auto it = after.find(n.get()); it != after.end()) order.insert(order.end(), it->second.begin(), it->second.end());
  }
  setOrder(order);
}

Value* Graph::addResult(Node* n, const std::string& name) {
  Value* v = newValue(uniqueName(name), ValueKind::Result);
  v->producer = n;
  n->outputs.push_back(v);
  return v;
}

void Graph::removeInput(Value* v) {
  assert(std::none_of(nodes_.begin(), nodes_.end(), [&](const auto& n) { return std::count(n->inputs.begin(), n->inputs.end(), v); }));
  std::erase(inputs, v);
  byName_.erase(v->name);
  std::erase_if(values_, [&](const std::unique_ptr<Value>& p) { return p.get() == v; });
}

void Graph::replaceAllUses(Value* from, Value* to) {
  for (auto& n : nodes_)
    std::replace(n->inputs.begin(), n->inputs.end(), from, to);
  std::replace(outputs.begin(), outputs.end(), from, to);
  for (auto& u : updates)
    if (u.second == from) u.second = to;
}

void Graph::makeConst(Value* v, Tensor data) {
  assert(v->kind == ValueKind::Result && "only node results become constants");
  Node* producer = v->producer;
  v->kind = ValueKind::Const;
  v->producer = nullptr;
  v->type = Type::of(data.dtype, data.shape);
  v->data = std::make_shared<const Tensor>(std::move(data));
  consts.push_back(v);
  auto& outs = producer->outputs;
  for (auto& o : outs)
    if (o == v) o = nullptr;
  if (std::all_of(outs.begin(), outs.end(), [](Value* o) { return !o; }))
    nodes_.erase(std::find_if(nodes_.begin(), nodes_.end(), [&](auto& n) { return n.get() == producer; }));
}

bool Graph::removeDeadNodes() {
  std::set<const Value*> used(outputs.begin(), outputs.end());
  for (auto& u : updates) used.insert(u.second);
  bool changed = false;
  // Walk backwards so a chain of dead nodes goes in one sweep.
  for (size_t i = nodes_.size(); i-- > 0;) {
    Node* n = nodes_[i].get();
    bool live = std::any_of(n->outputs.begin(), n->outputs.end(), [&](Value* o) { return o && used.count(o); });
    if (!live) {
      for (Value* o : n->outputs)
        if (o) byName_.erase(o->name);
      nodes_.erase(nodes_.begin() + i);
      changed = true;
      continue;
    }
    for (Value* in : n->inputs)
      if (in) used.insert(in);
  }
  std::vector<Value*> kept;
  for (Value* v : consts) {
    if (used.count(v)) {
      kept.push_back(v);
      continue;
    }
    byName_.erase(v->name);
    changed = true;
  }
  consts = std::move(kept);
  // Erase value objects no longer reachable by name (results of removed nodes, dropped consts).
  std::erase_if(values_, [&](const std::unique_ptr<Value>& v) { return !byName_.count(v->name) || byName_[v->name] != v.get(); });
  return changed;
}

} // namespace sgc::ir
