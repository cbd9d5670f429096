// Reading structured-output request fields and attaching the compiled grammar.
#include "server/structured_output_params.h"

#include <algorithm>
#include <string>

#include "common/error.h"
#include "server/api_error.h"

namespace m3 {

using grammar::StructuredOutputSpec;
using nlohmann::json;
using nlohmann::ordered_json;

namespace {

using Kind = StructuredOutputSpec::Kind;

// A schema given as an object or as JSON text (vLLM accepts both for guided_json / structured_outputs.json).
ordered_json schema_of(const ordered_json& v, const char* field) {
  if (v.is_object() || v.is_boolean()) return v;
  if (v.is_string()) {
    try {
      return ordered_json::parse(v.get<std::string>());
    } catch (const json::exception&) {
      reject(std::string("'") + field + "' is not valid JSON", field);
    }
  }
  reject(std::string("'") + field + "' must be a JSON schema object", field);
}

std::string text_of(const ordered_json& v, const char* field) {
  if (!v.is_string() || v.get<std::string>().empty())
    reject(std::string("'") + field + "' must be a non-empty string", field);
  return v.get<std::string>();
}

std::vector<std::string> choices_of(const ordered_json& v, const char* field) {
  if (!v.is_array() || v.empty())
    reject(std::string("'") + field + "' must be a non-empty list of strings", field);
  std::vector<std::string> out;
  for (const auto& c : v) {
    if (!c.is_string()) reject(std::string("'") + field + "' must hold strings", field);
    out.push_back(c.get<std::string>());
  }
  return out;
}

StructuredOutputSpec json_schema_spec(ordered_json schema, bool strict) {
  StructuredOutputSpec s;
  s.kind = Kind::kJsonSchema;
  s.schema = std::move(schema);
  s.strict = strict;
  return s;
}

std::optional<StructuredOutputSpec> response_format(const ordered_json& rf) {
  if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string())
    reject("'response_format' must be an object with a 'type'", "response_format");
  const std::string type = rf["type"].get<std::string>();
  if (type == "text") return std::nullopt;
  if (type == "json_object") return StructuredOutputSpec{};
  if (type == "json_schema") {
    if (!rf.contains("json_schema") || !rf["json_schema"].is_object())
      reject("'response_format.json_schema' is required for type json_schema", "response_format.json_schema");
    const auto& js = rf["json_schema"];
    if (!js.contains("schema"))
      reject("'response_format.json_schema.schema' is required", "response_format.json_schema.schema");
    const bool strict = js.contains("strict") && js["strict"].is_boolean() && js["strict"].get<bool>();
    return json_schema_spec(schema_of(js["schema"], "response_format.json_schema.schema"), strict);
  }
  reject("'response_format.type' must be text, json_object or json_schema (got '" + type + "')",
         "response_format.type");
}

// vLLM's structured_outputs object: exactly one of json, regex, choice, grammar, json_object.
std::optional<StructuredOutputSpec> vllm_structured_outputs(const ordered_json& so) {
  if (!so.is_object()) reject("'structured_outputs' must be an object", "structured_outputs");
  std::optional<StructuredOutputSpec> spec;
  auto set = [&](StructuredOutputSpec s) {
    if (spec)
      reject("'structured_outputs' must set exactly one of json, regex, choice, grammar, json_object",
             "structured_outputs");
    spec = std::move(s);
  };
  for (const auto& [key, v] : so.items()) {
    if (v.is_null()) continue;
    StructuredOutputSpec s;
    if (key == "json") {
      s = json_schema_spec(schema_of(v, "structured_outputs.json"), false);
    } else if (key == "regex") {
      s.kind = Kind::kRegex;
      s.text = text_of(v, "structured_outputs.regex");
    } else if (key == "choice") {
      s.kind = Kind::kChoice;
      s.choices = choices_of(v, "structured_outputs.choice");
    } else if (key == "grammar") {
      s.kind = Kind::kGrammar;
      s.text = text_of(v, "structured_outputs.grammar");
    } else if (key == "json_object") {
      if (!v.is_boolean()) reject("'structured_outputs.json_object' must be a boolean", "structured_outputs");
      if (!v.get<bool>()) continue;
    } else if (key == "disable_any_whitespace" || key == "disable_additional_properties" ||
               key == "disable_fallback" || key == "whitespace_pattern") {
      continue;  // options, read below
    } else {
      reject("'structured_outputs." + key + "' is not supported (json, regex, choice, grammar, json_object)",
             "structured_outputs." + key);
    }
    set(std::move(s));
  }
  return spec;
}

}  // namespace

std::optional<StructuredOutputSpec> openai_output_format(const ordered_json& body, const char** field) {
  std::optional<StructuredOutputSpec> spec;
  const char* from = "";
  auto take = [&](std::optional<StructuredOutputSpec> s, const char* f) {
    if (!s) return;
    if (spec)
      reject(std::string("'") + f + "' and '" + from + "' both ask for structured output: use one", f);
    spec = std::move(s);
    from = f;
  };
  auto has = [&](const char* key) { return body.contains(key) && !body[key].is_null(); };
  if (has("response_format")) take(response_format(body["response_format"]), "response_format");
  if (has("structured_outputs"))
    take(vllm_structured_outputs(body["structured_outputs"]), "structured_outputs");
  if (has("guided_json"))
    take(json_schema_spec(schema_of(body["guided_json"], "guided_json"), false), "guided_json");
  if (has("guided_regex")) {
    StructuredOutputSpec s;
    s.kind = Kind::kRegex;
    s.text = text_of(body["guided_regex"], "guided_regex");
    take(std::move(s), "guided_regex");
  }
  if (has("guided_choice")) {
    StructuredOutputSpec s;
    s.kind = Kind::kChoice;
    s.choices = choices_of(body["guided_choice"], "guided_choice");
    take(std::move(s), "guided_choice");
  }
  if (has("guided_grammar")) {
    StructuredOutputSpec s;
    s.kind = Kind::kGrammar;
    s.text = text_of(body["guided_grammar"], "guided_grammar");
    take(std::move(s), "guided_grammar");
  }
  if (spec && has("guided_whitespace_pattern"))
    reject("'guided_whitespace_pattern' is not supported", "guided_whitespace_pattern");
  *field = from;
  // structured_outputs' options apply to whichever field asked for the structure.
  if (spec && has("structured_outputs")) {
    const ordered_json& so = body["structured_outputs"];
    if (so.contains("disable_any_whitespace") && so["disable_any_whitespace"].is_boolean())
      spec->any_whitespace = !so["disable_any_whitespace"].get<bool>();
    if (so.contains("disable_additional_properties") && so["disable_additional_properties"].is_boolean())
      spec->strict = spec->strict || so["disable_additional_properties"].get<bool>();
    if (so.contains("whitespace_pattern") && !so["whitespace_pattern"].is_null())
      reject("'structured_outputs.whitespace_pattern' is not supported",
             "structured_outputs.whitespace_pattern");
  }
  return spec;
}

std::optional<StructuredOutputSpec> anthropic_output_format(const ordered_json& body) {
  const char* field = "output_config.format";
  const ordered_json* format = nullptr;
  if (body.contains("output_config") && body["output_config"].is_object() &&
      body["output_config"].contains("format") && !body["output_config"]["format"].is_null())
    format = &body["output_config"]["format"];
  if (body.contains("output_format") && !body["output_format"].is_null()) {
    if (format)
      reject("'output_format' and 'output_config.format' both set the output format", "output_format");
    format = &body["output_format"];
    field = "output_format";
  }
  if (!format) return std::nullopt;
  if (!format->is_object() || format->value("type", "") != "json_schema")
    reject(std::string("'") + field + "' must be {\"type\": \"json_schema\", \"schema\": {...}}", field);
  if (!format->contains("schema"))
    reject(std::string("'") + field + ".schema' is required", std::string(field) + ".schema");
  return json_schema_spec(schema_of((*format)["schema"], field), /*strict=*/true);
}

namespace {

// A tool's definition: OpenAI's {type, function: {...}} or a flat one (Anthropic's {name, input_schema}).
const ordered_json& definition(const ordered_json& t) {
  return t.contains("function") ? t["function"] : t;
}

bool is_strict(const ordered_json& t) {
  const ordered_json& f = definition(t);
  return f.contains("strict") && f["strict"] == true;
}

}  // namespace

std::optional<StructuredOutputSpec> strict_tool_calls(const ordered_json& tools, bool parallel) {
  if (!tools.is_array() || std::none_of(tools.begin(), tools.end(), is_strict)) return std::nullopt;
  StructuredOutputSpec s = forced_tool_call(tools, "", parallel);
  s.content_first = true;
  for (size_t i = 0; i < s.tools.size(); ++i)
    if (!is_strict(tools[i])) s.tools[i].parameters = nullptr;  // any parameters
  return s;
}

StructuredOutputSpec forced_tool_call(const ordered_json& tools, const std::string& only, bool parallel) {
  StructuredOutputSpec s;
  s.kind = Kind::kToolCall;
  s.only_tool = only;
  s.parallel = parallel;
  for (const auto& t : tools) {
    const auto& f = definition(t);
    grammar::ToolSpec tool;
    tool.name = f["name"].get<std::string>();
    if (f.contains("input_schema") && f["input_schema"].is_object()) tool.parameters = f["input_schema"];
    if (f.contains("parameters") && f["parameters"].is_object()) tool.parameters = f["parameters"];
    s.tools.push_back(std::move(tool));
  }
  return s;
}

void attach_grammar(ServingContext& ctx, const StructuredOutputSpec& spec, ThinkingStart start,
                    bool reasoning_parser, const char* field, GenerationSpec& out) {
  GrammarConstraint c;
  try {
    c.grammar = ctx.grammar_cache().get(spec);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kInvalidArgument) throw;
    reject(e.what(), field);
  }
  if (reasoning_parser) {
    const auto think_start = ctx.tokenizer.token_to_id("<mm:think>");
    const auto think_end = ctx.tokenizer.token_to_id("</mm:think>");
    if (think_end) {
      c.think_end = *think_end;
      c.starts_in_reasoning = start == ThinkingStart::kStartsInReasoning;
      if (start == ThinkingStart::kAdaptive && think_start) c.think_start = *think_start;
    }
  }
  out.request.grammar = std::move(c);
}

}  // namespace m3
