// The Jinja runtime value: Python's None/bool/int/float/str/list/tuple/dict, Jinja's Undefined, namespace()
// objects and callables, with Python's str(), repr(), ==, <, truthiness and dict keys. Invariants: strings
// are immutable and shared; containers have reference semantics (as in Python) and are registered with the
// current Heap, which breaks reference cycles and enforces the allocation budget.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace m3::jinja {

class Value;
class Evaluator;

// A template failure. `line` is 0 until the evaluator attaches the line of the statement being rendered.
// `user_raised` marks raise_exception(): its message is the template author's text, kept verbatim.
class TemplateError : public m3::Error {
 public:
  TemplateError(const std::string& message, int line = 0, bool user_raised = false);
  int line() const { return line_; }
  bool user_raised() const { return user_raised_; }
  const std::string& bare_message() const { return bare_; }

 private:
  std::string bare_;
  int line_;
  bool user_raised_;
};

[[noreturn]] void raise(const std::string& message);

enum class Kind : uint8_t {
  kUndefined,
  kNone,
  kBool,
  kInt,
  kFloat,
  kString,
  kList,
  kTuple,
  kDict,
  kNamespace,
  kObject
};

// What Python object a kList value stands for. Jinja's map/select/unique/batch/items filters return
// generators and `reverse` an iterator: always truthy, no len(), consumed by the first iteration.
// dict.items()/keys()/ values() return views, which print as dict_items([...]).
enum class Flavor : uint8_t { kList, kGenerator, kIterator, kDictItems, kDictKeys, kDictValues };

// Anything a Value can own that may itself own Values (and so take part in a reference cycle).
class HeapObject {
 public:
  virtual ~HeapObject() = default;
  virtual void clear_refs() {}
};

struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
};

class Object;
struct ListData;
class DictData;

class Value {
 public:
  Value() = default;  // Undefined
  static Value undefined(std::string message = {});
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value number(double d);
  static Value string(std::string s);
  static Value list(std::vector<Value> items = {});
  static Value list(std::vector<Value> items, Flavor flavor);
  static Value tuple(std::vector<Value> items = {});
  static Value dict();
  static Value namespace_object();
  static Value object(std::shared_ptr<Object> obj);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return kind_ == Kind::kBool || kind_ == Kind::kInt || kind_ == Kind::kFloat; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_tuple() const { return kind_ == Kind::kTuple; }
  bool is_sequence() const { return kind_ == Kind::kList || kind_ == Kind::kTuple; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_object() const { return kind_ == Kind::kObject; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return kind_ == Kind::kBool ? (b_ ? 1 : 0) : i_; }
  double as_double() const;  // any number
  const std::string& str() const { return *str_; }
  // Message an Undefined raises when it is used (e.g. "'foo' is undefined").
  std::string undefined_message() const;
  std::vector<Value>& items() const;  // list or tuple
  Flavor flavor() const;  // kList unless a list-kind value stands for a generator / iterator / view
  bool is_lazy() const { return flavor() == Flavor::kGenerator || flavor() == Flavor::kIterator; }
  DictData& dict_data() const;  // dict or namespace
  Object& obj() const;
  const void* identity() const { return obj_.get(); }

  // Empties `values` without recursing into nested containers (see ListData's destructor).
  friend void release_deep(std::vector<Value>& values);

 private:
  Kind kind_ = Kind::kUndefined;
  union {
    bool b_;
    int64_t i_ = 0;
    double f_;
  };
  std::shared_ptr<const std::string> str_;
  std::shared_ptr<HeapObject> obj_;
};

void release_deep(std::vector<Value>& values);

// Containers free their children iteratively, so dropping a 100000-deep nested list cannot overflow the
// stack.
struct ListData : HeapObject {
  std::vector<Value> items;
  Flavor flavor = Flavor::kList;
  ~ListData() override { release_deep(items); }
  void clear_refs() override { release_deep(items); }
};

// Insertion-ordered dict with Python key equality (1 == 1.0 == True share a slot; lists are unhashable).
class DictData : public HeapObject {
 public:
  ~DictData() override { clear_refs(); }
  size_t size() const { return entries_.size(); }
  const std::vector<std::pair<Value, Value>>& entries() const { return entries_; }
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  void set(const Value& key, Value value);
  bool erase(const Value& key);
  void clear_refs() override;

 private:
  std::vector<std::pair<Value, Value>> entries_;
  std::unordered_map<std::string, size_t> index_;
};

// Callables and other opaque runtime objects (macros, bound methods, `loop`, builtins).
class Object : public HeapObject {
 public:
  virtual std::string type_name() const = 0;
  virtual bool get_attr(std::string_view name, Value& out) { return false; }
  virtual bool is_callable() const { return true; }
  virtual Value call(Evaluator& ev, CallArgs& args);
  // `obj.name(args)`: returns false when the object has no such method.
  virtual bool call_method(Evaluator& ev, const std::string& name, CallArgs& args, Value& out) {
    return false;
  }
  virtual std::string repr() const { return "<" + type_name() + " object>"; }
};

// Per-render arena bookkeeping. Every container created while a Heap is current is registered; when the Heap
// ends it empties them all, so cycles (a list appended to itself, a namespace holding itself) cannot leak and
// deep chains are freed without recursion. `charge` counts bytes produced by template operations against a
// monotonic budget so that no template can exhaust memory.
class Heap {
 public:
  explicit Heap(size_t alloc_budget);
  ~Heap();
  Heap(const Heap&) = delete;
  Heap& operator=(const Heap&) = delete;
  void track(const std::shared_ptr<HeapObject>& obj);
  void charge(size_t bytes);
  static Heap* current();

 private:
  std::vector<std::weak_ptr<HeapObject>> objects_;
  size_t compact_at_ = 1024;
  size_t budget_;
  size_t used_ = 0;
  Heap* previous_;
};

// Charges the current Heap (no-op without one).
void charge(size_t bytes);

bool truthy(const Value& v);
std::string to_str(const Value& v);  // Python str(); Undefined prints as ""
std::string repr(const Value& v);
bool equals(const Value& a, const Value& b);
int compare(const Value& a, const Value& b, const char* op);  // <0, 0, >0; raises TypeError like Python
std::string type_name(const Value& v);                        // Python type name: "str", "NoneType", ...
std::string object_type_repr(const Value& v);                 // Jinja's "dict object" / "None"
std::string hash_key(const Value& v);                         // raises for unhashable values

Value from_json(const nlohmann::ordered_json& j);
// Python json.dumps with HF's defaults: ensure_ascii off, key order kept, no indent. With `indented`, every
// item starts a new line prefixed by `indent_unit` per level (json.dumps' indent=N or indent="str").
struct JsonStyle {
  bool ensure_ascii = false;
  bool indented = false;
  std::string indent_unit;
  std::string item_sep = ", ";
  std::string key_sep = ": ";
  bool sort_keys = false;
};
std::string to_json(const Value& v, const JsonStyle& style);

}  // namespace m3::jinja
