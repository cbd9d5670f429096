#!/usr/bin/env python3
"""Writes chat-template golden fixtures for m3serve's C++ Jinja renderer (src/chat/template).

Two modes:

  python3 tools/goldens/make_template_goldens.py REPO_ROOT OUT_JSON
      Renders extra MiniMax-M3 conversations with HF transformers' apply_chat_template (transformers 5.17 +
      jinja2, no network) using the repo's tokenizer files and chat_template.jinja, and writes
      {"conversations": [{name, messages, tools, add_generation_prompt, kwargs, rendered, ids}]}.
      OUT_JSON is normally tests/fixtures/chat_template/extra_goldens.json.

  python3 tools/goldens/make_template_goldens.py --jinja-cases OUT_JSON
      Renders small interpreter test cases (one Jinja feature each) with jinja2 configured exactly as
      transformers configures it for chat templates (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks,
      loopcontrols, json.dumps tojson, raise_exception, strftime_now) and writes
      {"cases": [{name, template, context, expected} | {name, template, context, error}]}.
      Needs only jinja2; transformers' own environment is used when it is importable.
      OUT_JSON is normally tests/fixtures/chat_template/jinja_cases.json.
"""
import copy
import inspect
import json
import os
import shutil
import sys
import tempfile

# ---------------------------------------------------------------------------------------------------------------
# Conversations for the transformers goldens.

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. \"Paris\""},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}

NESTED_TOOL = {
    "type": "function",
    "function": {
        "name": "create_event",
        "description": "Create a calendar event — with attendees, recurrence and reminders.",
        "parameters": {
            "type": "object",
            "properties": {
                "title": {"type": "string"},
                "start": {"type": "string", "format": "date-time"},
                "duration_minutes": {"type": "integer", "minimum": 1},
                "attendees": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "email": {"type": "string"},
                            "optional": {"type": "boolean", "default": False},
                        },
                        "required": ["email"],
                    },
                },
                "recurrence": {
                    "anyOf": [
                        {"type": "null"},
                        {
                            "type": "object",
                            "properties": {
                                "freq": {"type": "string", "enum": ["daily", "weekly"]},
                                "until": {"type": "string"},
                            },
                        },
                    ]
                },
                "reminders": {"type": "array", "items": {"type": "number"}},
                "metadata": {"type": "object", "additionalProperties": {"type": "string"}},
            },
            "required": ["title", "start"],
        },
    },
}

SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "web_search",
        "description": "Search the web. Returns <b>HTML</b> snippets & links; quotes ' and \" are fine.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}, "top_k": {"type": "integer", "default": 5}},
            "required": ["query"],
        },
    },
}

NO_PARAMS_TOOL = {"type": "function", "function": {"name": "get_time", "description": "", "parameters": {}}}


def conversations():
    """Each entry: name, messages, tools (or None), add_generation_prompt, kwargs."""
    c = []

    def add(name, messages, tools=None, add_generation_prompt=True, **kwargs):
        c.append({"name": name, "messages": messages, "tools": tools,
                  "add_generation_prompt": add_generation_prompt, "kwargs": kwargs})

    hello = [{"role": "user", "content": "Hello!"}]
    for mode in ("enabled", "disabled", "adaptive", "bogus"):
        add(f"thinking_mode_{mode}", hello, thinking_mode=mode)
        add(f"thinking_mode_{mode}_no_gen_prompt", hello + [{"role": "assistant", "content": "Hi."}],
            add_generation_prompt=False, thinking_mode=mode)
    add("thinking_mode_undefined", hello)
    add("model_identity", hello, model_identity="You are Pirate-Bot. Speak like a pirate.")
    add("model_identity_ignored_with_system",
        [{"role": "system", "content": "System wins."}, {"role": "user", "content": "Hi"}],
        model_identity="Not used.")
    add("model_identity_and_mode", hello, model_identity="Identity X", thinking_mode="disabled")
    add("system_developer_root_combo",
        [{"role": "root", "content": "Root prompt."}, {"role": "system", "content": "System as developer."},
         {"role": "user", "content": "Q"}])
    add("root_only", [{"role": "root", "content": "Only root."}, {"role": "user", "content": "Q"}])
    add("root_empty_content", [{"role": "root", "content": ""}, {"role": "user", "content": "Q"}])
    add("developer_first", [{"role": "developer", "content": "Dev text."}, {"role": "user", "content": "Q"}])
    add("system_empty_string", [{"role": "system", "content": ""}, {"role": "user", "content": "Q"}])
    add("late_system_and_developer_dropped",
        [{"role": "user", "content": "A"}, {"role": "system", "content": "dropped"},
         {"role": "assistant", "content": "B"}, {"role": "developer", "content": "dropped too"},
         {"role": "user", "content": "C"}], thinking_mode="enabled")
    add("system_content_parts",
        [{"role": "system", "content": [{"type": "text", "text": "Part one. "}, {"type": "text", "text": "Part two."}]},
         {"role": "user", "content": "Q"}])
    add("user_content_parts_mixed",
        [{"role": "user", "content": [{"type": "text", "text": "Look: "}, {"type": "image"}, "plain string part",
                                      {"type": "video"}, {"type": "text", "text": " done"}]}])
    add("user_content_null", [{"role": "user", "content": None}])
    add("assistant_content_parts",
        [{"role": "user", "content": "Q"},
         {"role": "assistant", "content": [{"type": "text", "text": "<mm:think>inner</mm:think>"},
                                           {"type": "text", "text": "answer"}]},
         {"role": "user", "content": "Q2"}])
    add("reasoning_content_all_turns",
        [{"role": "user", "content": "Q1"},
         {"role": "assistant", "content": "A1", "reasoning_content": "R1"},
         {"role": "user", "content": "Q2"},
         {"role": "assistant", "content": "A2", "reasoning_content": "R2\nmulti-line"},
         {"role": "user", "content": "Q3"}], thinking_mode="enabled")
    add("reasoning_content_empty",
        [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "A", "reasoning_content": ""},
         {"role": "user", "content": "Q2"}])
    add("reasoning_in_content_with_newlines",
        [{"role": "user", "content": "Q"},
         {"role": "assistant", "content": "<mm:think>\nstep 1\nstep 2\n</mm:think>\n\nFinal."},
         {"role": "user", "content": "Q2"}])
    add("reasoning_in_content_nested_tags",
        [{"role": "user", "content": "Q"},
         {"role": "assistant", "content": "pre<mm:think>a<mm:think>b</mm:think>mid</mm:think>post"}])
    add("reasoning_content_and_think_in_content",
        [{"role": "user", "content": "Q"},
         {"role": "assistant", "content": "<mm:think>ignored?</mm:think>kept", "reasoning_content": "explicit"}])
    add("assistant_empty_content", [{"role": "user", "content": "Q"}, {"role": "assistant", "content": ""}])
    add("tools_single", [{"role": "user", "content": "Weather in Paris?"}], tools=[WEATHER_TOOL])
    add("tools_nested_schemas", [{"role": "system", "content": "Plan things."}, {"role": "user", "content": "Book it"}],
        tools=[NESTED_TOOL, SEARCH_TOOL, NO_PARAMS_TOOL], thinking_mode="enabled")
    add("tools_empty_list", [{"role": "user", "content": "Q"}], tools=[])
    add("tool_call_round_trip",
        [{"role": "user", "content": "Weather in Paris?"},
         {"role": "assistant", "content": "", "reasoning_content": "Need the tool.",
          "tool_calls": [{"id": "call_0", "type": "function",
                          "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]},
         {"role": "tool", "tool_call_id": "call_0", "content": "{\"temp\": 18, \"sky\": \"clear\"}"},
         {"role": "assistant", "content": "It is 18 °C and clear.", "reasoning_content": "Report it."},
         {"role": "user", "content": "Thanks"}], tools=[WEATHER_TOOL], thinking_mode="enabled")
    add("parallel_nested_tool_calls",
        [{"role": "user", "content": "Set up the meeting and search."},
         {"role": "assistant", "content": "On it.",
          "tool_calls": [
              {"id": "a", "type": "function", "function": {"name": "create_event", "arguments": {
                  "title": "Sync <weekly> & \"plan\"", "start": "2026-01-05T10:00:00Z", "duration_minutes": 30,
                  "attendees": [{"email": "a@x.org", "optional": False}, {"email": "b@x.org", "optional": True}],
                  "recurrence": {"freq": "weekly", "until": None}, "reminders": [5, 0.5, 1e-05, 1.0, 1e16, -3],
                  "metadata": {}, "notes": None, "nested": [[1, 2], [], [{"k": [True, None, "v"]}]]}}},
              {"id": "b", "type": "function", "function": {"name": "web_search",
                                                            "arguments": {"query": "naïve café ☕", "top_k": 3}}},
              {"id": "c", "type": "function", "function": {"name": "get_time", "arguments": {}}}]},
         {"role": "tool", "tool_call_id": "a", "content": "created"},
         {"role": "tool", "tool_call_id": "b", "content": [{"type": "text", "text": "result 1"},
                                                            {"type": "text", "text": "result 2"}]},
         {"role": "tool", "tool_call_id": "c", "content": "12:00"}],
        tools=[NESTED_TOOL, SEARCH_TOOL, NO_PARAMS_TOOL])
    add("flat_tool_call_format",
        [{"role": "user", "content": "Q"},
         {"role": "assistant", "content": None,
          "tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]},
         {"role": "tool", "content": "cold"}], tools=[WEATHER_TOOL])
    add("tool_results_structured",
        [{"role": "user", "content": "Q"},
         {"role": "assistant", "content": "",
          "tool_calls": [{"type": "function", "function": {"name": "web_search", "arguments": {"query": "x"}}}]},
         {"role": "tool", "content": [{"output": "out-field"}, {"type": "image"}, {"type": "text", "text": "txt"},
                                      {"type": "video"}, {"type": "other", "x": 1}, "bare string"]}],
        tools=[SEARCH_TOOL])
    add("tool_then_user_then_tool",
        [{"role": "user", "content": "Q"},
         {"role": "assistant", "content": "",
          "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "A"}}}]},
         {"role": "tool", "content": "r1"},
         {"role": "user", "content": "more"},
         {"role": "assistant", "content": "",
          "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "B"}}}]},
         {"role": "tool", "content": "r2"}], tools=[WEATHER_TOOL], thinking_mode="adaptive")
    add("unicode_everywhere",
        [{"role": "system", "content": "Réponds en français. 中文也可以。"},
         {"role": "user", "content": "Emoji 😀👍🏽, RTL עברית, combining é, zero-width\u200bspace, tab\tnewline\n"},
         {"role": "assistant", "content": "D'accord — ✓", "reasoning_content": "思考中…"},
         {"role": "user", "content": "\u2028line sep and \\ backslash \"quotes\""}],
        tools=[{"type": "function", "function": {"name": "traduire", "description": "Traduit un texte — vite.",
                                                 "parameters": {"type": "object", "properties": {
                                                     "texte": {"type": "string", "description": "Le texte à traduire"}}}}}])
    add("no_gen_prompt_tool_end",
        [{"role": "user", "content": "Q"},
         {"role": "assistant", "content": "",
          "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "A"}}}]},
         {"role": "tool", "content": "r"}], tools=[WEATHER_TOOL], add_generation_prompt=False)
    add("extra_kwargs_ignored", hello, reasoning_effort="high", enable_thinking=True)
    add("long_multi_turn", [m for k in range(6) for m in (
        {"role": "user", "content": f"Question {k}"},
        {"role": "assistant", "content": f"Answer {k}", "reasoning_content": f"Thought {k}" if k % 2 else None})],
        thinking_mode="enabled")
    return c


def find_apply_chat_template_tokenizer(repo_root, tmp):
    from transformers import AutoTokenizer
    fixtures = os.path.join(repo_root, "tests", "fixtures", "minimax-m3")
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(os.path.join(fixtures, name), os.path.join(tmp, name))
    tok = AutoTokenizer.from_pretrained(tmp)
    with open(os.path.join(fixtures, "chat_template.jinja"), encoding="utf-8") as f:
        template = f.read()
    if getattr(tok, "chat_template", None) != template:
        tok.chat_template = template
    return tok


def render_with(tok, messages, tools, add_generation_prompt, kwargs):
    args = dict(tokenize=False, add_generation_prompt=add_generation_prompt)
    if "return_dict" in inspect.signature(tok.apply_chat_template).parameters:
        args["return_dict"] = False
    if tools is not None:
        args["tools"] = copy.deepcopy(tools)
    rendered = tok.apply_chat_template(copy.deepcopy(messages), **args, **kwargs)
    if not isinstance(rendered, str):
        raise TypeError(f"apply_chat_template returned {type(rendered).__name__}, expected str")
    return rendered


def check_released_goldens(tok, repo_root):
    """The fixtures' goldens.json must still reproduce; otherwise this environment differs from the reference."""
    path = os.path.join(repo_root, "tests", "fixtures", "minimax-m3", "goldens.json")
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    bad = 0
    for k, conv in enumerate(doc["conversations"]):
        got = render_with(tok, conv["messages"], conv.get("tools"), conv["add_generation_prompt"], conv.get("kwargs", {}))
        if got != conv["rendered"]:
            bad += 1
            print(f"WARNING: goldens.json conversation {k} renders differently here", file=sys.stderr)
    print(f"goldens.json: {len(doc['conversations']) - bad}/{len(doc['conversations'])} conversations reproduce")


def make_conversation_goldens(repo_root, out_path):
    import transformers
    tmp = tempfile.mkdtemp(prefix="m3tpl")
    try:
        tok = find_apply_chat_template_tokenizer(repo_root, tmp)
        check_released_goldens(tok, repo_root)
        out = []
        for conv in conversations():
            kwargs = dict(conv["kwargs"])
            rendered = render_with(tok, conv["messages"], conv["tools"], conv["add_generation_prompt"], kwargs)
            ids = tok.encode(rendered, add_special_tokens=False)
            entry = {"name": conv["name"], "messages": conv["messages"], "add_generation_prompt": conv["add_generation_prompt"]}
            if conv["tools"] is not None:
                entry["tools"] = conv["tools"]
            if kwargs:
                entry["kwargs"] = kwargs
            entry["rendered"] = rendered
            entry["ids"] = ids
            out.append(entry)
        doc = {"generator": "tools/goldens/make_template_goldens.py", "transformers": transformers.__version__,
               "conversations": out}
        with open(out_path, "w", encoding="utf-8") as f:
            json.dump(doc, f, ensure_ascii=False, indent=1)
            f.write("\n")
        print(f"wrote {len(out)} conversations to {out_path}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------------------------------------------------------
# Interpreter cases.

def hf_environment():
    """transformers' chat-template environment, or a faithful replica when transformers is absent."""
    try:
        from transformers.utils.chat_template_utils import _compile_jinja_template

        class _Env:
            def from_string(self, source):
                return _compile_jinja_template(source)

        _Env().from_string("{{ 1 }}")
        return _Env(), "transformers"
    except Exception:  # noqa: BLE001 - any import/API difference falls back to the replica
        pass
    import jinja2
    from jinja2 import nodes
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class AssistantTracker(Extension):
        """transformers' {% generation %} block, without the assistant-mask bookkeeping."""
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

        def _generation_support(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        from datetime import datetime
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env, "jinja2-replica"


# Two realistic templates in the style of popular open models (written for these tests), exercising many
# features together: namespace bookkeeping, reversed loops, string methods, tojson, whitespace control.
TEMPLATE_CHATML_TOOLS = '''{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\n\n' }}
    {%- endif %}
    {{- "# Tools\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools><|im_end|>\n" }}
{%- elif messages[0].role == 'system' %}
    {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.role == "user" or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {%- set content = message.content or '' %}
        {%- if loop.index0 > ns.last_query_index and message.reasoning_content %}
            {{- '<|im_start|>assistant\n<think>\n' + message.reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
        {%- else %}
            {{- '<|im_start|>assistant\n' + content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls or [] %}
            {%- if tool_call.function %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {%- if tool_call.arguments is string %}
                {{- tool_call.arguments }}
            {%- else %}
                {{- tool_call.arguments | tojson }}
            {%- endif %}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
'''

TEMPLATE_LLAMA_STYLE = '''{{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not date_string is defined %}
    {%- set date_string = "26 Jul 2024" %}
{%- endif %}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- set tool_call = message.tool_calls[0].function %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
        {{- '{"name": "' + tool_call.name + '", ' }}
        {{- '"parameters": ' }}
        {{- tool_call.arguments | tojson }}
        {{- "}" }}
        {{- "<|eot_id|>" }}
    {%- else %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
'''

MSGS = [{"role": "system", "content": "S"}, {"role": "user", "content": "U1"},
        {"role": "assistant", "content": "A1"}, {"role": "user", "content": "U2"}]

# (name, template, context). Templates exercise one feature each; the expected output (or the fact that Jinja
# raises) comes from the environment above.
CASES = [
    # whitespace control, trim_blocks, lstrip_blocks
    ("ws_trim_blocks", "{% if true %}\nyes\n{% endif %}\nend", {}),
    ("ws_lstrip_blocks", "  {% if true %}\n  x\n  {% endif %}\ny", {}),
    ("ws_lstrip_not_after_text", "a {% if true %}b{% endif %} c", {}),
    ("ws_minus_both", "a   {%- if true -%}   b   {%- endif -%}   c", {}),
    ("ws_minus_var", "a \n {{- 'x' -}} \n b", {}),
    ("ws_plus_disables_lstrip", "  {%+ if true %}x{% endif %}", {}),
    ("ws_plus_disables_trim", "{% if true +%}\nx{% endif %}", {}),
    ("ws_var_no_trim", "{{ 'a' }}\n{{ 'b' }}\n", {}),
    ("ws_comment_trim", "a\n{# c #}\nb\n  {# indented #}\nc {#- x -#} d", {}),
    ("ws_trailing_newline_dropped", "x\n", {}),
    ("ws_crlf", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc", {}),
    ("ws_unicode_space_minus", "a\u3000\u00a0{{- 'b' -}}\u2003c", {}),
    ("ws_lstrip_tabs", "\t \t{% set x = 1 %}\n{{ x }}", {}),
    ("ws_lstrip_at_start_after_block", "{% if true %}\n   {% if true %}\n   z\n   {% endif %}\n{% endif %}", {}),
    ("ws_raw", "{% raw %}{{ not evaluated }} {% if %}{% endraw %}!", {}),
    ("ws_raw_minus", "a {%- raw -%}  x  {%- endraw -%}  b", {}),
    # literals and expressions
    ("lit_strings", "{{ 'a\\nb' }}|{{ \"q\\\"t\" }}|{{ 'x' 'y' }}|{{ '\\u00e9\\x41\\101\\t' }}|{{ '\\d' }}", {}),
    ("lit_numbers", "{{ 1 }}|{{ 1.0 }}|{{ 1.5e3 }}|{{ 0x1F }}|{{ 0b101 }}|{{ 0o17 }}|{{ 1_000 }}|{{ 2.5e-7 }}", {}),
    ("lit_consts", "{{ true }}|{{ True }}|{{ none }}|{{ None }}|{{ false }}", {}),
    ("lit_list_dict_tuple", "{{ [1, 'a', [none]] }}|{{ {'k': 1, 2: 'v'} }}|{{ (1,) }}|{{ (1, 2) }}|{{ () }}", {}),
    ("print_tuple", "{{ 1, 'a' }}", {}),
    ("arith", "{{ 7 // 2 }}|{{ -7 // 2 }}|{{ 7 % 3 }}|{{ -7 % 3 }}|{{ 7 / 2 }}|{{ 2 ** 10 }}|{{ 2 ** -1 }}|{{ 1 + 2.5 }}", {}),
    ("arith_precedence", "{{ 1 + 2 * 3 }}|{{ (1 + 2) * 3 }}|{{ 2 ** 3 ** 2 }}|{{ -2 ** 2 }}|{{ 10 - 2 - 3 }}", {}),
    ("concat", "{{ 'a' ~ 1 ~ none ~ true ~ [1] }}|{{ 'x' + 'y' }}|{{ [1] + [2] }}|{{ 'ab' * 3 }}|{{ 3 * [0] }}", {}),
    ("concat_undefined", "[{{ 'a' ~ nope ~ 'b' }}]", {}),
    ("compare", "{{ 1 < 2 }}|{{ 2 <= 1 }}|{{ 'a' < 'b' }}|{{ [1, 2] < [1, 3] }}|{{ 1 == 1.0 }}|{{ 1 < 2 < 3 }}|{{ 3 > 2 > 2 }}", {}),
    ("equality_mixed", "{{ 1 == true }}|{{ 'a' == 'a' }}|{{ [1] == [1] }}|{{ {'a': 1} == {'a': 1} }}|{{ none == none }}|{{ x == y }}", {}),
    ("in_operator", "{{ 'b' in 'abc' }}|{{ 2 in [1, 2] }}|{{ 'k' in {'k': 1} }}|{{ 3 not in [1] }}|{{ 'x' in nope }}", {}),
    ("logic_values", "{{ 0 or 'x' }}|{{ 1 and 'y' }}|{{ '' and 'z' }}|{{ none or none }}|{{ not 0 }}|{{ not not 'a' }}", {}),
    ("ternary", "{{ 'y' if 1 else 'n' }}|{{ 'y' if 0 else 'n' }}|[{{ 'y' if 0 }}]|{{ 'a' if 0 else 'b' if 1 else 'c' }}", {}),
    ("not_precedence", "{{ not 1 == 2 }}|{{ not x is defined }}|{{ not 'a' in 'abc' }}", {}),
    ("unary", "{{ -3 }}|{{ +3 }}|{{ -(1 + 2) }}|{{ - 2.5 }}|{{ -x|default(4) }}", {"x": None}),
    # attribute / item access
    ("getattr_getitem", "{{ d.a }}|{{ d['a'] }}|{{ d.b.c }}|{{ l[0] }}|{{ l[-1] }}|{{ l.1 }}|[{{ d.zz }}]|[{{ l[9] }}]",
     {"d": {"a": 1, "b": {"c": 2}}, "l": [10, 20, 30]}),
    ("dict_method_shadows_key", "{{ d.items()|list }}|{{ d['items'] }}|{{ d.get('items') }}",
     {"d": {"items": "key-value", "x": 1}}),
    ("slices", "{{ l[1:] }}|{{ l[:-1] }}|{{ l[::2] }}|{{ l[::-1] }}|{{ s[1:3] }}|{{ s[-2:] }}|{{ u[1:] }}|{{ l[5:9] }}",
     {"l": [1, 2, 3, 4], "s": "hello", "u": "héllo☕"}),
    ("string_index_unicode", "{{ u[0] }}{{ u[1] }}{{ u[-1] }}|{{ u|length }}", {"u": "é☕x"}),
    ("undefined_attr_error", "{{ nope.attr }}", {}),
    ("undefined_item_of_list_error", "{{ l[5].x }}", {"l": [1]}),
    ("none_attr_is_undefined", "[{{ n.x }}]|{{ n.x is defined }}", {"n": None}),
    ("str_attr_undefined", "[{{ s.foo }}]|{{ s.foo is defined }}", {"s": "abc"}),
    # undefined semantics
    ("undefined_print", "[{{ nope }}]|{{ nope is defined }}|{{ nope is undefined }}|{{ nope is none }}|{{ nope|length }}", {}),
    ("undefined_iter", "{% for x in nope %}x{% else %}empty{% endfor %}|{{ nope is iterable }}|{{ nope|list }}", {}),
    ("undefined_default", "{{ nope|default('d') }}|{{ none|default('d') }}|{{ ''|default('d', true) }}|{{ nope|d }}", {}),
    ("undefined_bool", "{% if nope %}t{% else %}f{% endif %}|{{ nope == nope2 }}|{{ nope == none }}", {}),
    ("undefined_arith_error", "{{ nope + 1 }}", {}),
    ("undefined_call_error", "{{ nope() }}", {}),
    ("undefined_compare_error", "{{ nope < 1 }}", {}),
    # for loops
    ("for_loop_vars",
     "{% for x in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}"
     "{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}", {"l": ["a", "b", "c"]}),
    ("for_prev_next", "{% for x in l %}[{{ loop.previtem }}<{{ x }}>{{ loop.nextitem }}]{% endfor %}", {"l": [1, 2, 3]}),
    ("for_cycle_changed", "{% for x in l %}{{ loop.cycle('o', 'e') }}{{ loop.changed(x) }} {% endfor %}", {"l": [1, 1, 2]}),
    ("for_else", "{% for x in [] %}x{% else %}none{% endfor %}|{% for x in [1] %}x{% else %}none{% endfor %}", {}),
    ("for_filter", "{% for x in l if x > 1 %}{{ x }}{{ loop.index }}{{ loop.last }},{% endfor %}", {"l": [1, 2, 3, 0, 5]}),
    ("for_unpack", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|{% for a, (b, c) in t %}{{ a }}{{ b }}{{ c }}{% endfor %}",
     {"d": {"x": 1, "y": [2]}, "t": [[1, [2, 3]], [4, [5, 6]]]}),
    ("for_items_filter_none", "{% for k, v in d.items() if v is not none %}{{ k }};{% endfor %}", {"d": {"a": 1, "b": None, "c": 0}}),
    ("for_dict_keys", "{% for k in d %}{{ k }}{% endfor %}", {"d": {"z": 1, "a": 2}}),
    ("for_string", "{% for ch in 'hé☕' %}[{{ ch }}]{% endfor %}", {}),
    ("for_nested_loop_var", "{% for a in [1, 2] %}{% for b in 'xy' %}{{ loop.index }}{% endfor %}{{ loop.index }}|{% endfor %}", {}),
    ("for_scope", "{% set x = 'outer' %}{% for i in [1, 2] %}{{ x }}{% set x = 'inner' ~ i %}{{ x }},{% endfor %}{{ x }}", {}),
    ("for_break_continue", "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}", {}),
    ("for_recursive", "{% for n in tree recursive %}<{{ n.name }}{% if n.children %}:{{ loop(n.children) }}{% endif %}>{% endfor %}",
     {"tree": [{"name": "a", "children": [{"name": "b", "children": []}, {"name": "c", "children": [{"name": "d"}]}]}, {"name": "e"}]}),
    ("for_recursive_depth", "{% for n in tree recursive %}{{ loop.depth }}{{ loop.depth0 }}{% if n.c %}{{ loop(n.c) }}{% endif %}{% endfor %}",
     {"tree": [{"c": [{"c": [{}]}]}]}),
    ("for_over_none_error", "{% for x in n %}{% endfor %}", {"n": None}),
    ("for_unpack_error", "{% for a, b in [[1, 2, 3]] %}{% endfor %}", {}),
    ("range", "{{ range(3)|list }}|{{ range(1, 7, 2)|list }}|{{ range(5, 0, -2)|list }}|{{ range(0)|list }}", {}),
    ("range_too_big_error", "{{ range(100001)|length }}", {}),
    # set / namespace / with
    ("set_basic", "{% set a = 1 %}{% set b, c = 2, 3 %}{{ a }}{{ b }}{{ c }}", {}),
    ("set_block", "{% set x %}hello {{ 'w' }}{% endset %}[{{ x }}]{% set y | upper %}abc{% endset %}{{ y }}", {}),
    ("namespace", "{% set ns = namespace(n=0, s='') %}{% for i in [1, 2, 3] %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}", {}),
    ("namespace_dict_arg", "{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}{{ ns['a'] }}[{{ ns.c }}]", {}),
    ("namespace_assign_error", "{% set x = 1 %}{% set x.y = 2 %}", {}),
    ("with_block", "{% set a = 1 %}{% with a = 2, b = a %}{{ a }}{{ b }}{% endwith %}{{ a }}", {}),
    ("set_overrides_context", "{% set bos_token = 'B' %}{{ bos_token }}", {"bos_token": "<s>"}),
    ("set_in_if_no_scope", "{% if true %}{% set z = 5 %}{% endif %}{{ z }}", {}),
    ("if_set_if_not_defined", "{% if v is not defined %}{% set v = 'dflt' %}{% endif %}{{ v }}", {}),
    ("if_set_if_not_defined_given", "{% if v is not defined %}{% set v = 'dflt' %}{% endif %}{{ v }}", {"v": "given"}),
    # if
    ("if_elif_else", "{% for x in [1, 2, 3] %}{% if x == 1 %}a{% elif x == 2 %}b{% else %}c{% endif %}{% endfor %}", {}),
    ("if_truthiness", "{% for v in [0, 1, '', 'x', [], [0], {}, none, 0.0] %}{{ 'T' if v else 'F' }}{% endfor %}", {}),
    # macros
    ("macro_basic", "{% macro m(a, b='B', c=none) %}{{ a }}{{ b }}{{ c }}{% endmacro %}{{ m(1) }}|{{ m(1, 2) }}|{{ m(1, c=3) }}|[{{ m() }}]", {}),
    ("macro_default_refers_arg", "{% macro m(a, b=a ~ '!') %}{{ b }}{% endmacro %}{{ m('x') }}", {}),
    ("macro_recursion", "{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(5) }}", {}),
    ("macro_to_xml",
     "{% macro to_xml(v) %}{% if v is mapping %}{% for k, x in v.items() if x is not none %}<{{ k }}>{{ to_xml(x) }}</{{ k }}>{% endfor %}"
     "{% elif v is iterable and v is not string %}{% for i in v %}<item>{{ to_xml(i) }}</item>{% endfor %}"
     "{% elif v is boolean %}{{ v|tojson }}{% else %}{{ v }}{% endif %}{% endmacro %}{{ to_xml(d) }}",
     {"d": {"a": [1, {"b": True, "n": None}], "f": 1.5, "e": 1e-05, "s": "x<y"}}),
    ("macro_result_as_value", "{% macro m() %}a</t>b{% endmacro %}{% set r = m() %}{{ '</t>' in r }}|{{ r.split('</t>')[1] }}|{{ r|length }}", {}),
    ("macro_sees_globals", "{% set g = 'G' %}{% macro m() %}{{ g }}{{ ctx }}{% endmacro %}{% set g = 'G2' %}{{ m() }}", {"ctx": "C"}),
    ("macro_local_set", "{% set x = 'outer' %}{% macro m() %}{% set x = 'inner' %}{{ x }}{% endmacro %}{{ m() }}{{ x }}", {}),
    ("macro_varargs_kwargs", "{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, k='v') }}", {}),
    ("macro_too_many_args_error", "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}", {}),
    ("macro_unknown_kwarg_error", "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(b=1) }}", {}),
    ("macro_call_block", "{% macro wrap(t) %}<{{ t }}>{{ caller() }}</{{ t }}>{% endmacro %}{% call wrap('p') %}inner{% endcall %}", {}),
    ("macro_call_block_args", "{% macro each(l) %}{% for x in l %}{{ caller(x) }}{% endfor %}{% endmacro %}{% call(v) each([1, 2]) %}[{{ v }}]{% endcall %}", {}),
    ("macro_no_loop_leak", "{% macro m() %}{{ loop is defined }}{% endmacro %}{% for i in [1] %}{{ m() }}{% endfor %}", {}),
    ("filter_block", "{% filter upper %}abc {{ 'd' }}{% endfilter %}|{% filter replace('a', 'b')|upper %}aaa{% endfilter %}", {}),
    ("generation_block", "{% generation %}gen {{ 1 }}{% endgeneration %}!", {}),
    # tests
    ("tests_types",
     "{% for v in [1, 1.5, 'a', [1], {'a': 1}, none, true, (1, 2)] %}"
     "{{ v is number }}{{ v is integer }}{{ v is float }}{{ v is string }}{{ v is mapping }}{{ v is iterable }}"
     "{{ v is sequence }}{{ v is boolean }}{{ v is none }}{{ v is true }}{{ v is false }}|{% endfor %}", {}),
    ("tests_numeric", "{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(2) }}{{ 2 is eq 2 }}{{ 2 is ne 3 }}"
     "{{ 1 is lt 2 }}{{ 1 is le 1 }}{{ 2 is gt 1 }}{{ 2 is ge 3 }}{{ 2 is in [1, 2] }}{{ 2 is equalto 2 }}{{ 1 is == 1 }}", {}),
    ("tests_misc", "{{ 'abc' is lower }}{{ 'ABC' is upper }}{{ none is sameas none }}{{ 'upper' is filter }}{{ 'odd' is test }}"
     "{{ range is callable }}{{ 'x' is callable }}{{ ns is mapping }}", {"ns": None}),
    ("test_unknown_error", "{{ 1 is frobnicated }}", {}),
    # filters
    ("filters_string",
     "{{ ' a b '|trim }}|{{ 'xxaxx'|trim('x') }}|{{ 'hello world'|title }}|{{ 'hELLO'|capitalize }}|{{ 'Ab'|upper }}{{ 'Ab'|lower }}"
     "|{{ 'aaa'|replace('a', 'b', 2) }}|{{ 'abc'|reverse }}|{{ 'a b  c'|wordcount }}|{{ 'x'|center(5) }}|{{ '<&>\"'|e }}", {}),
    ("filters_title_edge", "{{ \"it's a (test)-case [x] {y} <z>\"|title }}", {}),
    ("filters_list",
     "{{ [3, 1, 2]|sort }}|{{ [3, 1, 2]|sort(reverse=true) }}|{{ ['b', 'A', 'c']|sort }}|{{ ['b', 'A', 'c']|sort(case_sensitive=true) }}"
     "|{{ [1, 2, 3]|first }}|{{ [1, 2, 3]|last }}|{{ [1, 2, 3]|length }}|{{ [1, 2, 3]|sum }}|{{ [1, 2]|join(', ') }}"
     "|{{ [3, 1]|min }}|{{ [3, 1]|max }}|{{ [1, 1, 2, 'a', 'A']|unique|list }}|{{ [1, 2, 3, 4, 5]|batch(2)|list }}|{{ [1, 2]|reverse|list }}", {}),
    ("filters_attr_based",
     "{{ l|map(attribute='n')|join(',') }}|{{ l|selectattr('ok')|map(attribute='n')|list }}|{{ l|rejectattr('ok')|list|length }}"
     "|{{ l|selectattr('n', 'equalto', 2)|list }}|{{ l|sort(attribute='n', reverse=true)|map(attribute='n')|join }}"
     "|{{ l|sum(attribute='n') }}|{{ l|map(attribute='missing', default='D')|join }}|{{ l|max(attribute='n') }}"
     "|{{ l|unique(attribute='ok')|list|length }}|{{ l|map(attribute='tags.0')|list }}",
     {"l": [{"n": 1, "ok": True, "tags": ["a"]}, {"n": 3, "ok": False, "tags": ["b"]}, {"n": 2, "ok": True, "tags": ["c"]}]}),
    ("filters_select_tests", "{{ [1, 2, 3, 4]|select('odd')|list }}|{{ [1, 2, 3, 4]|reject('odd')|list }}"
     "|{{ [0, 1, '', 'a']|select|list }}|{{ ['a', 1]|select('string')|list }}|{{ [1, 5, 9]|select('gt', 4)|list }}", {}),
    ("filters_map_filter", "{{ ['a', 'B']|map('upper')|list }}|{{ ['a,b', 'c']|map('replace', ',', ';')|join('|') }}", {}),
    ("filters_dict", "{{ d|dictsort }}|{{ d|dictsort(by='value', reverse=true) }}|{{ d|items|list }}|{{ d|length }}|{{ d|list }}",
     {"d": {"b": 2, "a": 3, "C": 1}}),
    ("filters_numbers", "{{ '42'|int }}|{{ '4.7'|int }}|{{ 'x'|int(7) }}|{{ '0x1f'|int(base=16) }}|{{ 3.9|int }}|{{ '2.5'|float }}"
     "|{{ 'abc'|float }}|{{ -3|abs }}|{{ 2.5|round }}|{{ 3.5|round }}|{{ 2.675|round(2) }}|{{ 2.1|round(0, 'ceil') }}"
     "|{{ 7|round }}|{{ 1.25|round(1, 'floor') }}|{{ ' 12 '|int }}|{{ '1_000'|int }}", {}),
    ("filters_string_conv", "{{ 1|string }}|{{ none|string }}|{{ [1, 'a']|string }}|{{ {'a': none}|string }}|{{ 'x'|list }}", {}),
    ("filters_indent", "{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent('>', blank=true) }}", {}),
    ("filters_truncate", "{{ 'hello wonderful world'|truncate(12) }}|{{ 'hello wonderful world'|truncate(12, true) }}"
     "|{{ 'short'|truncate(3) }}|{{ 'hello wonderful world'|truncate(15, end='~') }}", {}),
    ("filters_format", "{{ '%s-%d-%.2f'|format('a', 3, 1.5) }}|{{ '%(x)s!'|format(x='kw') }}|{{ '%5s|%-4d|'|format('ab', 7) }}|{{ '%%'|format() }}", {}),
    ("filters_first_last_empty", "[{{ []|first }}][{{ []|last }}][{{ 'ab'|first }}{{ 'ab'|last }}][{{ {'k': 1}|first }}]", {}),
    ("filters_attr_filter", "{{ d|attr('x') }}|{{ (d|attr('items'))()|list }}|[{{ 'ab'|attr('nope') }}]", {"d": {"x": 1}}),
    ("filter_unknown_error", "{{ 1|frobnicate }}", {}),
    ("filter_items_non_mapping_error", "{{ [1]|items|list }}", {}),
    # tojson (HF: json.dumps, ensure_ascii=False, key order kept)
    ("tojson_basic", "{{ d|tojson }}", {"d": {"z": 1, "a": [True, None, 1.5, "é☕\"\\\n\t<>&'"], "m": {}, "l": []}}),
    ("tojson_floats", "{{ [1.0, 0.1, 1e-05, 1e16, 1e15, 123456789.123, -0.0, 3.0e-7, 1.5e300]|tojson }}", {}),
    ("tojson_indent", "{{ d|tojson(indent=2) }}|{{ d|tojson(indent='\\t') }}|{{ d|tojson(indent=0) }}|{{ []|tojson(indent=2) }}",
     {"d": {"a": [1, {"b": 2}], "c": {}}}),
    ("tojson_options", "{{ d|tojson(ensure_ascii=True) }}|{{ d|tojson(sort_keys=True) }}|{{ d|tojson(separators=(',', ':')) }}",
     {"d": {"k": "é😀", "a": 1}}),
    ("tojson_control_chars", "{{ s|tojson }}", {"s": "\u0000\u0001\u001f\u007f\u0080\u2028"}),
    ("tojson_scalars", "{{ 'x'|tojson }}|{{ 1|tojson }}|{{ none|tojson }}|{{ true|tojson }}|{{ (1, 2)|tojson }}", {}),
    ("tojson_int_keys", "{{ {1: 'a', true: 'b', none: 'c', 2.5: 'd'}|tojson }}", {}),
    ("tojson_undefined_error", "{{ nope|tojson }}", {}),
    # str() / repr() of values
    ("print_values", "{{ 1.0 }}|{{ 1e16 }}|{{ 1e-5 }}|{{ 0.1 + 0.2 }}|{{ 3.14 }}|{{ 100.0 }}|{{ 1e22 }}|{{ -0.0 }}", {}),
    ("print_containers", "{{ ['it\\'s', \"q\\\"\", 'both\\'\"', 'nl\\n', 'é', '\\x00', '\\u2028'] }}|{{ {'a': [1.5, none, true]} }}", {}),
    ("print_nested_tuple", "{{ [(1, 'a'), ()] }}|{{ ((1,),) }}", {}),
    # Python methods
    ("str_methods",
     "{{ ' x '.strip() }}|{{ '\\nx\\n'.strip('\\n') }}|{{ 'xax'.lstrip('x') }}|{{ 'xax'.rstrip('x') }}|{{ 'a,b,,c'.split(',') }}"
     "|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'a,b,c'.rsplit(',', 1) }}|{{ 'ab'.startswith('a') }}"
     "|{{ 'ab'.endswith(('x', 'b')) }}|{{ 'aXa'.replace('a', 'o') }}|{{ 'Ab'.upper() }}{{ 'Ab'.lower() }}|{{ 'hello world'.title() }}"
     "|{{ 'abc'.find('c') }}{{ 'abc'.find('z') }}|{{ 'aaa'.count('a') }}|{{ '-'.join(['a', 'b']) }}|{{ 'x{}y{}'.format(1, 2) }}"
     "|{{ '12'.isdigit() }}{{ 'a1'.isalpha() }}|{{ 'l1\\nl2\\r\\nl3'.splitlines() }}|{{ 'ab'.removeprefix('a') }}", {}),
    ("str_split_unicode_ws", "{{ 'a\\u3000b\\u00a0c'.split() }}|{{ '\\u2003x\\u2003'.strip() }}", {}),
    ("str_split_empty_sep_error", "{{ 'a'.split('') }}", {}),
    ("list_methods_readonly", "{{ [1, 2, 1].count(1) }}|{{ [1, 2].index(2) }}|{{ (1, 2).index(1) }}", {}),
    ("dict_methods", "{{ d.get('a') }}|{{ d.get('zz') }}|{{ d.get('zz', 5) }}|{{ d.keys()|list }}|{{ d.values()|list }}|{{ d.items()|list }}",
     {"d": {"a": 1, "b": [2]}}),
    ("strftime_now_type", "{{ strftime_now('%Y')|length }}", {}),
    # errors
    ("raise_exception", "{{ raise_exception('Custom failure: ' ~ 42) }}", {}),
    ("raise_in_macro", "{% macro m() %}{{ raise_exception('from macro') }}{% endmacro %}\n\nline3 {{ m() }}", {}),
    ("syntax_unclosed_if", "line1\n{% if true %}\nline3", {}),
    ("syntax_bad_expr", "a\nb\n{{ 1 + }}", {}),
    ("syntax_unknown_tag", "{% frobnicate %}", {}),
    ("syntax_unclosed_var", "{{ x ", {}),
    ("syntax_unclosed_comment", "{# abc", {}),
    ("syntax_bad_endtag", "{% for x in y %}{% endif %}", {}),
    ("syntax_unclosed_string", "{{ 'abc }}", {}),
    ("syntax_break_outside_loop", "{% break %}", {}),
    ("syntax_unbalanced", "{{ (1 }}", {}),
    ("type_error_add", "{{ 1 + 'a' }}", {}),
    ("type_error_compare", "{{ 1 < 'a' }}", {}),
    ("div_zero_error", "{{ 1 / 0 }}", {}),
    ("int_floordiv_zero_error", "{{ 1 // 0 }}", {}),
    ("call_non_callable_error", "{{ 'x'() }}", {}),
    # chat-template idioms
    ("idiom_messages_loop",
     "{% for m in messages %}{% if loop.first and m.role == 'system' %}[S:{{ m.content }}]{% else %}<{{ m.role }}>{{ m.content }}{% endif %}{% endfor %}"
     "{% if add_generation_prompt %}<assistant>{% endif %}", {"messages": MSGS, "add_generation_prompt": True}),
    ("idiom_last_user_index",
     "{% set ns = namespace(last=-1) %}{% for m in messages %}{% if m.role == 'user' %}{% set ns.last = loop.index0 %}{% endif %}{% endfor %}"
     "{{ ns.last }}|{{ messages[ns.last].content }}|{{ (messages|selectattr('role', 'equalto', 'user')|list)[-1].content }}",
     {"messages": MSGS}),
    ("idiom_reverse_find", "{% for m in messages[::-1] %}{% if m.role == 'assistant' %}{{ m.content }}{% break %}{% endif %}{% endfor %}",
     {"messages": MSGS}),
    ("idiom_tools_json", "{% for t in tools %}{{ t.function|tojson }}\n{% endfor %}",
     {"tools": [{"type": "function", "function": {"name": "f", "description": "d — é", "parameters": {"type": "object", "properties": {}}}}]}),
    ("idiom_tool_args_string_or_dict",
     "{% for c in calls %}{% if c.arguments is string %}{{ c.arguments }}{% else %}{{ c.arguments|tojson }}{% endif %};{% endfor %}",
     {"calls": [{"arguments": "{\"a\": 1}"}, {"arguments": {"a": 1}}]}),
    ("idiom_content_none_vs_missing", "{% for m in ms %}[{{ m.content is none }}{{ m.content is defined }}{{ m.content }}]{% endfor %}",
     {"ms": [{"content": None}, {}, {"content": ""}]}),
    ("idiom_bos_eos", "{{ bos_token }}x{{ eos_token }}", {"bos_token": "<s>", "eos_token": "</s>"}),
    # Jinja quirks the renderer reproduces on purpose
    ("quirk_for_else_after_continue", "{% for x in [1, 2] %}{% continue %}{% else %}E{% endfor %}|"
     "{% for x in [1, 2] %}{% break %}{% else %}E{% endfor %}|{% for x in [1, 2] %}{{ x }}{% break %}{% else %}E{% endfor %}", {}),
    ("quirk_lazy_loop_filter", "{% set ns = namespace(seen=[]) %}{% for x in [1, 2, 1, 3, 2] if x not in ns.seen %}"
     "{{ x }}{% set ns.seen = ns.seen + [x] %}{% endfor %}", {}),
    ("quirk_lazy_loop_filter_lookahead", "{% for x in [1, 2, 3, 4] if x > 1 %}{{ loop.length }}{{ loop.last }}{{ loop.nextitem }};{% endfor %}", {}),
    ("quirk_generator_truthiness", "{{ 'T' if [1]|select('gt', 5) else 'F' }}{{ 'T' if []|map('upper') else 'F' }}"
     "{{ 'T' if []|list else 'F' }}{{ [1, 2]|select('odd') is sequence }}", {}),
    ("quirk_generator_single_use", "{% set g = [1, 2]|map('string') %}{{ g|join }}|{{ g|join }}|{{ g|list }}", {}),
    ("quirk_dict_views", "{{ d.items() }}|{{ d.keys() }}|{{ d.values()|list }}|{{ d.items()|length }}", {"d": {"a": 1}}),
    ("quirk_top_level_set_hides_context", "{% for i in [1] %}[{{ s }}]{% endfor %}{% set s = 1 %}{{ s }}|"
     "{% macro m() %}<{{ t }}>{% endmacro %}{{ m() }}{% set t = 2 %}{{ m() }}", {"s": "ctx", "t": "ctx"}),
    ("quirk_conditional_set_keeps_context", "{% for i in [1] %}[{{ s }}]{% endfor %}{% if true %}{% set s = 1 %}{% endif %}{{ s }}",
     {"s": "ctx"}),
    ("quirk_loop_frame_set_hides_context", "{% for i in [1, 2] %}{% for j in [0] %}[{{ s }}]{% endfor %}{% set s = i %}{{ s }}{% endfor %}",
     {"s": "ctx"}),
    ("quirk_break_inside_filter_block", "{% for x in [1, 2] %}{% filter upper %}a{% break %}b{% endfilter %}{% endfor %}!", {}),
    ("quirk_slice_errors_propagate", "{{ n[1:] }}", {"n": None}),
    ("quirk_percent_with_undefined", "{{ 'plain' % nope }}|{{ 'x' % [1] }}", {}),
    ("quirk_truncate_non_string", "{{ [1, 2]|truncate(5) }}|{{ {'a': 1}|truncate(5) }}", {}),
    # realistic multi-feature templates
    ("template_chatml_tools", TEMPLATE_CHATML_TOOLS, {
        "messages": [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": "Weather?"},
                     {"role": "assistant", "content": "", "reasoning_content": "\nneed tool\n",
                      "tool_calls": [{"type": "function", "function": {"name": "w", "arguments": {"city": "Zürich", "n": 2}}}]},
                     {"role": "tool", "content": "{\"t\": 3}"}, {"role": "tool", "content": "second"},
                     {"role": "assistant", "content": "It is 3.", "reasoning_content": "done"}],
        "tools": [{"type": "function", "function": {"name": "w", "description": "weather — now", "parameters": {"type": "object"}}}],
        "add_generation_prompt": True}),
    ("template_llama_style", TEMPLATE_LLAMA_STYLE, {
        "bos_token": "<|begin_of_text|>",
        "messages": [{"role": "system", "content": "  Sys  "}, {"role": "user", "content": "Hi "},
                     {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": {"x": [1.5, None]}}}]},
                     {"role": "tool", "content": {"ok": True}}],
        "add_generation_prompt": True}),
]


def make_jinja_cases(out_path):
    env, flavour = hf_environment()
    out = []
    for name, template, context in CASES:
        entry = {"name": name, "template": template, "context": context}
        try:
            entry["expected"] = env.from_string(template).render(**copy.deepcopy(context))
        except Exception as e:  # noqa: BLE001 - any Jinja failure is an expected error case
            entry["error"] = f"{type(e).__name__}: {e}"
        out.append(entry)
    doc = {"generator": "tools/goldens/make_template_goldens.py --jinja-cases", "environment": flavour, "cases": out}
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {len(out)} cases ({flavour}) to {out_path}")


def main(argv):
    if len(argv) == 3 and argv[1] == "--jinja-cases":
        make_jinja_cases(argv[2])
    elif len(argv) == 3:
        make_conversation_goldens(argv[1], argv[2])
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
