// Template facade (see jinja.h): wires parsing, the per-render Heap, the global scope and the evaluator, and
// turns any stray C++ exception into a TemplateError so callers only ever see m3::Error.
#include "chat/template/jinja.h"

#include <new>

#include "chat/template/builtins.h"
#include "chat/template/parser.h"
#include "chat/template/scoping.h"

namespace m3::jinja {

Template::Template(std::string_view source) {
  auto body = std::make_shared<Body>(parse_template(source));
  undefined_at_start_ = analyze_scoping(*body);
  body_ = std::move(body);
}

std::string Template::render(const nlohmann::ordered_json& context, const RenderLimits& limits) const {
  if (!context.is_object() && !context.is_null()) raise("template context must be a JSON object");
  Heap heap(limits.max_alloc_bytes);
  try {
    auto globals = std::make_shared<Scope>();
    install_globals(*globals);
    if (context.is_object())
      for (auto it = context.begin(); it != context.end(); ++it)
        globals->set(it.key(), from_json(it.value()));
    Evaluator ev(limits, std::move(globals));
    return ev.render(*body_, undefined_at_start_);
  } catch (const m3::Error&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw TemplateError("out of memory while rendering the template");
  } catch (const std::exception& e) {
    throw TemplateError(std::string("internal error while rendering the template: ") + e.what());
  }
}

}  // namespace m3::jinja
