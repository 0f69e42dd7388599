"""The official OpenAI Python SDK against `vllm-rs serve` with Qwen2.5-Coder-0.5B (hermes tool
parser): tool_choice="required" on weather/calculator prompts gives calls whose arguments
validate against the tool's schema (pydantic, strict: no extra keys), streamed the same; a round
trip call -> tool result -> answer; `chat.completions.parse()` with a pydantic model. Run by
crates/cli/tests/serve_openai_sdk_tools.rs; exits non-zero (with the reason) on the first
mismatch."""

import json
import sys
from typing import Literal

from openai import OpenAI
from pydantic import BaseModel, ConfigDict, Field

base_url, model = sys.argv[1], sys.argv[2]
client = OpenAI(base_url=base_url + "/v1", api_key="none", max_retries=0, timeout=300)


class Weather(BaseModel):
    model_config = ConfigDict(extra="forbid")
    city: str = Field(max_length=40)
    unit: Literal["celsius", "fahrenheit"]


class Calculate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    expression: str = Field(max_length=40)


def tool(name, description, model_cls):
    schema = model_cls.model_json_schema()
    schema.pop("title", None)
    return {"type": "function", "function": {"name": name, "description": description, "parameters": schema}}


tools = [
    tool("get_weather", "Current weather in a city", Weather),
    tool("calculate", "Evaluate an arithmetic expression", Calculate),
]
validators = {"get_weather": Weather, "calculate": Calculate}

prompts = [
    "What's the weather in Paris?",
    "How warm is it in Berlin right now, in fahrenheit?",
    "What is 12 * 34?",
    "Compute 2 to the power of 10.",
    "Is it snowing in Oslo?",
]
for p in prompts:
    messages = [{"role": "user", "content": p}]
    r = client.chat.completions.create(
        model=model, messages=messages, tools=tools, tool_choice="required", max_tokens=100, temperature=0
    )
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls", (p, choice)
    calls = choice.message.tool_calls
    assert calls, (p, choice)
    for c in calls:
        assert c.type == "function" and c.id.startswith("chatcmpl-tool-"), c
        validators[c.function.name].model_validate_json(c.function.arguments)
    # Streamed: the same calls, name once then the arguments.
    names, args, finish = [], [], None
    for chunk in client.chat.completions.create(
        model=model, messages=messages, tools=tools, tool_choice="required", max_tokens=100, temperature=0,
        stream=True,
    ):
        if not chunk.choices:
            continue
        ch = chunk.choices[0]
        finish = ch.finish_reason or finish
        for tc in ch.delta.tool_calls or []:
            if tc.function and tc.function.name:
                assert tc.index == len(names), tc
                names.append(tc.function.name)
                args.append("")
            if tc.function and tc.function.arguments:
                args[tc.index] += tc.function.arguments
    assert names == [c.function.name for c in calls], (names, calls)
    assert args == [c.function.arguments for c in calls], (args, calls)
    assert finish == "tool_calls", finish

# Round trip: the call, the tool's result, then the answer.
messages = [{"role": "user", "content": "What is 12 * 34?"}]
r = client.chat.completions.create(
    model=model, messages=messages, tools=tools,
    tool_choice={"type": "function", "function": {"name": "calculate"}}, max_tokens=60, temperature=0,
)
call = r.choices[0].message.tool_calls[0]
assert r.choices[0].finish_reason == "stop", r  # a named function: OpenAI's "stop"
Calculate.model_validate_json(call.function.arguments)
messages.append(r.choices[0].message.model_dump(exclude_none=True))
messages.append({"role": "tool", "tool_call_id": call.id, "content": "408"})
# (Without the tools on this turn: with them this 0.5B model tends to call again.)
r = client.chat.completions.create(model=model, messages=messages, max_tokens=40, temperature=0)
answer = r.choices[0].message.content
assert answer and "408" in answer, r


# Structured output through the SDK's parse(): a pydantic model as response_format.
class City(BaseModel):
    name: str = Field(max_length=30)
    country: str = Field(max_length=30)
    population_millions: float = Field(ge=0, le=100)


parse = client.chat.completions.parse
r = parse(
    model=model,
    messages=[{"role": "user", "content": "Tell me about Tokyo."}],
    response_format=City,
    max_tokens=100,
    temperature=0,
)
city = r.choices[0].message.parsed
assert isinstance(city, City), r
print(json.dumps(city.model_dump()))
print("OK")
