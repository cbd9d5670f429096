// OpenAI chat-request messages and tools -> the dicts a chat template receives, prepared the way vLLM does
// (vllm/entrypoints/chat_utils.py): content parts, JSON-string tool-call arguments, the `reasoning` alias.
// Invariants: the input is never modified; malformed messages raise m3::Error naming the message index.
#pragma once

#include <nlohmann/json.hpp>

#include "chat/template/ast.h"

namespace m3::chat {

// vLLM's --chat-template-content-format: "string" joins text parts with "\n"; "openai" hands the template a
// list of {"type": "text", "text": ...} / {"type": "image"} parts (a plain string becomes one text part).
enum class ContentFormat { kString, kOpenAI };

// vLLM's "auto" detection: kOpenAI when the template loops over `message.content` (or `message['content']`)
// for a message drawn from `messages` (directly or through `set` aliases and slices), otherwise kString.
ContentFormat detect_content_format(const jinja::Body& body);

// Per message: keeps role, content (mapped per `format`), tool_calls (with `function.arguments` JSON strings
// parsed; an empty or missing value becomes {}; text that is not valid JSON stays as is), reasoning /
// reasoning_content (either spelling sets both), tool_call_id, name; drops every other key, as vLLM does.
// Image / video / audio parts become {"type": "image"|"video"|"audio"} in kOpenAI format; in kString format
// they raise kUnsupported (vLLM would splice in model-specific placeholder text).
nlohmann::ordered_json normalize_messages(const nlohmann::ordered_json& messages, ContentFormat format);

// vLLM's pydantic round trip of `tools`: {"type": "function", "function": {"name", "description",
// "parameters",
// ...extra keys}, ...extra keys}, with an absent description / parameters rendered as null.
nlohmann::ordered_json normalize_tools(const nlohmann::ordered_json& tools);

}  // namespace m3::chat
