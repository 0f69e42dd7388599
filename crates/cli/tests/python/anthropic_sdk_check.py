"""The official Anthropic Python SDK's Messages API against `vllm-rs serve`: create (plain,
streaming, with a system prompt and stop sequences), count_tokens, and errors. Run by
crates/cli/tests/serve_sdk_responses_messages.rs with the base URL, the served model name and
the API key (sent as a bearer token); exits non-zero (with the reason) on the first mismatch."""

import sys

import anthropic

base_url, model, api_key = sys.argv[1], sys.argv[2], sys.argv[3]
client = anthropic.Anthropic(base_url=base_url, api_key=None, auth_token=api_key, max_retries=0, timeout=120)

# This SDK has no `temperature` argument: greedy decoding goes in the body, as vLLM reads it.
greedy = {"temperature": 0}
system = "Answer briefly."
messages = [{"role": "user", "content": "What is the capital of France?"}]
m = client.messages.create(model=model, max_tokens=12, system=system, messages=messages, extra_body=greedy)
assert m.type == "message" and m.role == "assistant" and m.model == model, m
assert m.id.startswith("msg_"), m.id
assert [b.type for b in m.content] == ["text"] and m.content[0].text, m.content
assert m.stop_reason in ("end_turn", "max_tokens"), m.stop_reason
assert m.usage.input_tokens > 0 and 1 <= m.usage.output_tokens <= 12, m.usage
text = m.content[0].text

# count_tokens counts the prompt the create call ran.
n = client.messages.count_tokens(model=model, system=system, messages=messages)
assert n.input_tokens == m.usage.input_tokens, (n, m.usage)

# Streaming through the SDK's helper: the same text, the same final message.
with client.messages.stream(model=model, max_tokens=12, system=system, messages=messages, extra_body=greedy) as s:
    streamed = "".join(s.text_stream)
    final = s.get_final_message()
assert streamed == text, (streamed, text)
assert final.content[0].text == text and final.stop_reason == m.stop_reason, final
assert final.usage.output_tokens == m.usage.output_tokens, final.usage

# The raw events, in Anthropic's order.
kinds = [e.type for e in client.messages.create(
    model=model, max_tokens=12, system=system, messages=messages, stream=True, extra_body=greedy)]
assert kinds[:2] == ["message_start", "content_block_start"], kinds
assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"], kinds
assert set(kinds[2:-3]) == {"content_block_delta"}, kinds

# A stop sequence taken from the answer ends it there.
words = text.split()
assert len(words) >= 2, text
stop = " " + words[1]
cut = client.messages.create(
    model=model, max_tokens=12, system=system, messages=messages, stop_sequences=[stop], extra_body=greedy
)
assert cut.stop_reason == "stop_sequence" and cut.stop_sequence == stop, cut
assert cut.content[0].text == text[: text.index(stop)], (cut.content, text)

try:
    client.messages.create(model="no-such-model", max_tokens=4, messages=messages)
    raise AssertionError("an unknown model must fail")
except anthropic.NotFoundError as e:
    assert e.status_code == 404 and e.body["error"]["type"] == "not_found_error", e.body
try:
    client.messages.create(model=model, max_tokens=-1, messages=messages)
    raise AssertionError("max_tokens=-1 must be refused")
except anthropic.BadRequestError as e:
    assert e.body["type"] == "error" and e.body["error"]["type"] == "invalid_request_error", e.body

print("anthropic SDK", anthropic.__version__, "OK")
