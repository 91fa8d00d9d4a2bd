// The Jinja syntax tree: one node type with a kind, because the evaluator switches on kinds and the
// tree is built once per template and only read afterwards. Which fields a kind uses is listed beside it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tessera::model::jinja {

struct Node;
using NodePtr = std::unique_ptr<Node>;
using NodeList = std::vector<NodePtr>;

enum class NodeKind : uint8_t {
  kProgram,      // list: body
  kText,         // str
  kComment,      //
  kIf,           // x: test, list: body, list2: else (an elif is one nested kIf)
  kFor,          // x: target, y: iterable, list: body, list2: else
  kBreak,        //
  kContinue,     //
  kSet,          // x: target, y: value (null: block set), list: block body
  kMacro,        // str: name, list: parameters, list2: body
  kCallBlock,    // x: the call (kCall), list: caller parameters, list2: body
  kFilterBlock,  // y: filter (identifier or call), list: body
  kIdentifier,   // str
  kInt,          // i
  kFloat,        // f
  kString,       // str
  kArrayLit,     // list
  kTupleLit,     // list
  kObjectLit,    // pairs
  kMember,       // x: object, y: property, flag: computed (obj[...] rather than obj.name)
  kSlice,        // x, y, z: start, stop, step (each may be null)
  kCall,         // x: callee, list: arguments
  kKwarg,        // str: name, x: value
  kSpread,       // x   (*args)
  kKwSpread,     // x   (**kwargs)
  kUnary,        // str: operator, x
  kBinary,       // str: operator, x, y
  kFilter,       // x: operand, y: filter (identifier or call)
  kTest,         // x: operand, str: test name, flag: negated
  kSelect,       // x: value, y: condition   (`a if b` with no else)
  kTernary,      // x: condition, y: if true, z: if false
};

struct Node {
  NodeKind kind;
  int line = 0;
  std::string str;
  int64_t i = 0;
  double f = 0;
  bool flag = false;
  NodePtr x, y, z;
  NodeList list, list2;
  std::vector<std::pair<NodePtr, NodePtr>> pairs;
};

inline NodePtr make_node(NodeKind k, int line) {
  auto n = std::make_unique<Node>();
  n->kind = k;
  n->line = line;
  return n;
}

}  // namespace tessera::model::jinja
