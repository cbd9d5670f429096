// Public entry point of the Jinja interpreter: parse a template once, render it many times, concurrently if
// wanted (a Template is immutable; every render has its own heap and scopes). Invariants: failures are
// m3::Error(kInvalidArgument) (TemplateError) naming the template line; rendering is bounded by RenderLimits.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/template/ast.h"
#include "chat/template/evaluator.h"

namespace m3::jinja {

class Template {
 public:
  explicit Template(std::string_view source);

  // `context` is a JSON object whose members become template variables. The environment is HF's
  // apply_chat_template one: trim_blocks, lstrip_blocks, loopcontrols, tojson = json.dumps, raise_exception,
  // strftime_now.
  std::string render(const nlohmann::ordered_json& context, const RenderLimits& limits = {}) const;

  const Body& body() const { return *body_; }

 private:
  std::shared_ptr<const Body> body_;
  std::vector<std::string> undefined_at_start_;
};

}  // namespace m3::jinja
