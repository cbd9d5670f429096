// The structured-output fields of API requests, read into a grammar spec, compiled (cached) and attached to
// the engine request: OpenAI `response_format` (json_object / json_schema), vLLM's `structured_outputs` and
// `guided_json` / `guided_regex` / `guided_choice` / `guided_grammar`, forced tool choice (OpenAI `required`
// or a named function, Anthropic `any` / `tool`) as the MiniMax-M3 tool-call markup, and Anthropic
// `output_config.format`. A bad or unsupported spec is a 400 naming the field.
#pragma once

#include <optional>

#include <nlohmann/json.hpp>

#include "chat/parsers/reasoning_parser.h"
#include "grammar/structured_output.h"
#include "server/api_server.h"
#include "server/generation_run.h"

namespace m3 {

// response_format / structured_outputs / guided_* of an OpenAI chat or completions request (at most one of
// them); nullopt when the request asks for free text. *field: the field that asked.
std::optional<grammar::StructuredOutputSpec> openai_output_format(const nlohmann::ordered_json& body,
                                                                  const char** field);

// Anthropic output_config.format (and the beta's output_format); nullopt when absent.
std::optional<grammar::StructuredOutputSpec> anthropic_output_format(const nlohmann::ordered_json& body);

// The tool-call markup with arguments following each tool's schema. `tools`: OpenAI-shaped ({type, function:
// {name, parameters}}) or flat; `only`: the tool every call must name ("" = any of them).
grammar::StructuredOutputSpec forced_tool_call(const nlohmann::ordered_json& tools, const std::string& only,
                                               bool parallel);

// Auto tool choice when a tool sets `strict` (OpenAI function.strict, Anthropic tool.strict): prose first,
// then optionally the markup, where strict tools' arguments follow their schemas (the others' are free text).
// nullopt when no tool is strict.
std::optional<grammar::StructuredOutputSpec> strict_tool_calls(const nlohmann::ordered_json& tools,
                                                               bool parallel);

// Compiles `spec` (through the server's cache) and sets spec.request.grammar, waiting for the reasoning to
// end first when the reasoning parser is on. `field` names the request field in errors.
void attach_grammar(ServingContext& ctx, const grammar::StructuredOutputSpec& spec, ThinkingStart start,
                    bool reasoning_parser, const char* field, GenerationSpec& out);

}  // namespace m3
