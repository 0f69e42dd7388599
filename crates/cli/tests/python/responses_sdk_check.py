"""The official OpenAI Python SDK's Responses API against `vllm-rs serve`: create (plain,
streaming, with `previous_response_id`), retrieve, delete, and errors. Run by
crates/cli/tests/serve_sdk_responses_messages.rs with the base URL, the served model name and
the API key; exits non-zero (with the reason) on the first mismatch."""

import sys

import openai
from openai import OpenAI

base_url, model, api_key = sys.argv[1], sys.argv[2], sys.argv[3]
client = OpenAI(base_url=base_url + "/v1", api_key=api_key, max_retries=0, timeout=120)

question = "What is the capital of France?"
r = client.responses.create(
    model=model, input=question, instructions="Answer briefly.", max_output_tokens=12, temperature=0
)
assert r.object == "response" and r.id.startswith("resp_"), r
assert r.status in ("completed", "incomplete"), r.status
assert r.model == model and r.instructions == "Answer briefly.", r
assert r.output_text, r
assert r.output[-1].type == "message" and r.output[-1].role == "assistant", r.output
assert r.usage.output_tokens >= 1 and r.usage.input_tokens > 0, r.usage
assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens, r.usage
if r.status == "incomplete":
    assert r.usage.output_tokens == 12 and r.incomplete_details.reason == "max_output_tokens", r

# Streaming: OpenAI's event order, consecutive sequence numbers, the same text.
events = list(
    client.responses.create(
        model=model, input=question, instructions="Answer briefly.", max_output_tokens=12, temperature=0, stream=True
    )
)
types = [e.type for e in events]
assert [e.sequence_number for e in events] == list(range(len(events))), types
assert types[:2] == ["response.created", "response.in_progress"], types
assert types[-1] == ("response.completed" if r.status == "completed" else "response.incomplete"), types
expected = ["response.output_item.added", "response.content_part.added", "response.output_text.delta"]
first_delta = types.index("response.output_text.delta")
assert types[first_delta - 2 : first_delta + 1] == expected, types
tail = ["response.output_text.done", "response.content_part.done", "response.output_item.done"]
assert types[-4:-1] == tail, types
text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
assert text == r.output_text, (text, r.output_text)
done = [e for e in events if e.type == "response.output_text.done"][0]
assert done.text == text, done
final = events[-1].response
assert final.output_text == text and final.usage.output_tokens == r.usage.output_tokens, final
assert final.output[-1].id == done.item_id, (final.output, done)

# previous_response_id: the new prompt holds the previous prompt, its answer and the new input.
r2 = client.responses.create(
    model=model, previous_response_id=r.id, input="And of Germany?", max_output_tokens=8, temperature=0
)
assert r2.previous_response_id == r.id, r2
assert r2.usage.input_tokens > r.usage.input_tokens + r.usage.output_tokens, (r.usage, r2.usage)
assert r2.output_text, r2

# Stored responses: retrieve and delete; `store=False` keeps nothing.
got = client.responses.retrieve(r.id)
assert got.id == r.id and got.output_text == r.output_text, got
client.responses.delete(r.id)
for call in (lambda: client.responses.retrieve(r.id), lambda: client.responses.create(
        model=model, previous_response_id=r.id, input="x", max_output_tokens=1)):
    try:
        call()
        raise AssertionError("a deleted response must be gone")
    except openai.NotFoundError as e:
        assert e.status_code == 404 and r.id in str(e), e
unstored = client.responses.create(model=model, input="Hi", max_output_tokens=2, store=False)
try:
    client.responses.retrieve(unstored.id)
    raise AssertionError("store=False must not store")
except openai.NotFoundError:
    pass

try:
    client.responses.create(model=model, input="x", max_output_tokens=0)
    raise AssertionError("max_output_tokens=0 must be refused")
except openai.BadRequestError as e:
    assert e.status_code == 400, e

print("openai SDK responses", openai.__version__, "OK")
