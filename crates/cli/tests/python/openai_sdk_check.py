"""The official OpenAI Python SDK against `vllm-rs serve`: models, completion, chat, streaming
with usage, and an error. Run by crates/cli/tests/serve_openai_sdk.rs with the base URL and the
served model name; exits non-zero (with the reason) on the first mismatch."""

import sys

import openai
from openai import OpenAI

base_url, model, api_key = sys.argv[1], sys.argv[2], sys.argv[3]
client = OpenAI(base_url=base_url + "/v1", api_key=api_key, max_retries=0, timeout=120)

models = client.models.list()
ids = [m.id for m in models.data]
assert ids == [model], ids

prompt = "The capital of France is"
c = client.completions.create(model=model, prompt=prompt, max_tokens=8, temperature=0, extra_body={"ignore_eos": True})
assert c.object == "text_completion", c
assert c.model == model
assert len(c.choices) == 1 and c.choices[0].finish_reason == "length", c
assert c.usage.completion_tokens == 8 and c.usage.total_tokens == c.usage.prompt_tokens + 8, c.usage

# Streaming completion with usage: same text as non-streaming.
text, usage = "", None
for chunk in client.completions.create(
    model=model, prompt=prompt, max_tokens=8, temperature=0, stream=True,
    stream_options={"include_usage": True}, extra_body={"ignore_eos": True},
):
    if chunk.choices:
        text += chunk.choices[0].text
    if chunk.usage is not None:
        usage = chunk.usage
assert text == c.choices[0].text, (text, c.choices[0].text)
assert usage is not None and usage.completion_tokens == 8 and usage.prompt_tokens == c.usage.prompt_tokens, usage

messages = [{"role": "user", "content": "What is the capital of France?"}]
r = client.chat.completions.create(model=model, messages=messages, max_tokens=16, temperature=0)
assert r.object == "chat.completion", r
msg = r.choices[0].message
assert msg.role == "assistant" and msg.content, r
assert r.usage.completion_tokens >= 1 and r.usage.prompt_tokens > 0, r.usage

text, usage, roles = "", None, []
stream = client.chat.completions.create(
    model=model, messages=messages, max_tokens=16, temperature=0, stream=True, stream_options={"include_usage": True}
)
for chunk in stream:
    if chunk.choices:
        delta = chunk.choices[0].delta
        if delta.role:
            roles.append(delta.role)
        text += delta.content or ""
    if chunk.usage is not None:
        usage = chunk.usage
assert roles == ["assistant"], roles
assert text == msg.content, (text, msg.content)
assert usage is not None and usage.completion_tokens == r.usage.completion_tokens, usage

lp = client.chat.completions.create(model=model, messages=messages, max_tokens=4, temperature=0, logprobs=True, top_logprobs=2)
content = lp.choices[0].logprobs.content
assert len(content) == lp.usage.completion_tokens and all(len(t.top_logprobs) == 2 for t in content), content

try:
    client.completions.create(model="no-such-model", prompt="x", max_tokens=1)
    raise AssertionError("an unknown model must fail")
except openai.NotFoundError as e:
    assert e.status_code == 404, e

try:
    client.chat.completions.create(model=model, messages=messages, response_format={"type": "json_schema"})
    raise AssertionError("a json_schema response_format without its schema must be rejected")
except openai.BadRequestError as e:
    assert "response_format" in str(e), e

bad = OpenAI(base_url=base_url + "/v1", api_key="wrong", max_retries=0)
try:
    bad.models.list()
    raise AssertionError("a wrong key must fail")
except openai.AuthenticationError:
    pass

print("openai SDK", openai.__version__, "OK")
