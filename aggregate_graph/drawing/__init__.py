"""Drawing candidates: where a question goes and how its n candidates come back.

settings.py      `Sampler`, `CandidatePolicy`, `AdaptiveSampling`: the chat model(s) and how they are drawn
models.py        a chat model from a name (`provider:model`, `local`) or an object, bound to its settings
sampling.py      the draws themselves, blocking and async: n requests (or one with `n`), settling, streaming
course.py        a draw's course, the same for both: attempts, retries, what a failed `n` request leaves
n_support.py     what each endpoint does with `n` in one request, learned once per endpoint
retries.py       which failures are retried, and how (tenacity)
replies.py       the `Reply` a candidate is built from: text, tool calls, usage, metadata
"""
