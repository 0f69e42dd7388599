"""Tool use through the Anthropic SDK's Messages API and the OpenAI SDK's Responses API against
`vllm-rs serve` (Qwen2.5-Coder-0.5B, hermes tool parser): a forced call comes back as a
`tool_use` block / `function_call` item with the arguments the weather prompt implies, whole
and streamed, and the tool's result goes back in a second request (Messages: the conversation
resent; Responses: `previous_response_id` plus a `function_call_output`). Run by
crates/cli/tests/serve_sdk_responses_messages.rs with the base URL and the served model name."""

import json
import sys

import anthropic
from openai import OpenAI

base_url, model = sys.argv[1], sys.argv[2]
ac = anthropic.Anthropic(base_url=base_url, api_key="unused", max_retries=0, timeout=120)
oc = OpenAI(base_url=base_url + "/v1", api_key="unused", max_retries=0, timeout=120)

# This SDK has no `temperature` argument: greedy decoding goes in the body, as vLLM reads it.
greedy = {"temperature": 0}
schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
question = "What is the weather in Paris?"

# Messages: tool_choice "any" forces a call.
tools = [{"name": "get_weather", "description": "Get the weather for a city", "input_schema": schema}]
messages = [{"role": "user", "content": question}]
m = ac.messages.create(
    model=model, max_tokens=60, messages=messages, tools=tools, tool_choice={"type": "any"}, extra_body=greedy
)
assert m.stop_reason == "tool_use", m
calls = [b for b in m.content if b.type == "tool_use"]
assert len(calls) >= 1 and calls[0].name == "get_weather" and calls[0].input == {"city": "Paris"}, m.content

with ac.messages.stream(
    model=model, max_tokens=60, messages=messages, tools=tools, tool_choice={"type": "any"}, extra_body=greedy
) as s:
    final = s.get_final_message()
streamed = [b for b in final.content if b.type == "tool_use"]
assert [(b.name, b.input) for b in streamed] == [(b.name, b.input) for b in calls], (final.content, m.content)
assert final.stop_reason == "tool_use", final

# The result goes back; the model answers in text (tool_choice "none": no further call).
followup = messages + [
    {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m.content]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": calls[0].id, "content": "Sunny, 21 C"}]},
]
answer = ac.messages.create(
    model=model, max_tokens=30, messages=followup, tools=tools, tool_choice={"type": "none"}, extra_body=greedy
)
assert answer.content and answer.content[0].type == "text" and answer.content[0].text, answer
n_with = ac.messages.count_tokens(model=model, messages=followup, tools=tools).input_tokens
n_without = ac.messages.count_tokens(model=model, messages=followup[:2], tools=tools).input_tokens
assert n_with > n_without, (n_with, n_without)

# Responses: tool_choice "required" forces a call.
rtools = [{"type": "function", "name": "get_weather", "description": "Get the weather for a city",
           "parameters": schema}]
r = oc.responses.create(model=model, input=question, tools=rtools, tool_choice="required", max_output_tokens=60,
                        temperature=0)
fc = [o for o in r.output if o.type == "function_call"]
assert len(fc) >= 1 and fc[0].name == "get_weather" and json.loads(fc[0].arguments) == {"city": "Paris"}, r.output

events = list(oc.responses.create(model=model, input=question, tools=rtools, tool_choice="required",
                                  max_output_tokens=60, temperature=0, stream=True))
types = [e.type for e in events]
assert "response.function_call_arguments.delta" in types, types
args_done = [e for e in events if e.type == "response.function_call_arguments.done"]
assert json.loads(args_done[0].arguments) == {"city": "Paris"}, args_done
assert [o.name for o in events[-1].response.output if o.type == "function_call"] == [o.name for o in fc], events[-1]

r2 = oc.responses.create(
    model=model, previous_response_id=r.id, tools=rtools, tool_choice="none", max_output_tokens=30, temperature=0,
    input=[{"type": "function_call_output", "call_id": fc[0].call_id, "output": "Sunny, 21 C"}],
)
assert r2.status in ("completed", "incomplete") and r2.output_text, r2
assert r2.usage.input_tokens > r.usage.input_tokens + r.usage.output_tokens, (r.usage, r2.usage)

print("SDK tool use (messages, responses) OK")
