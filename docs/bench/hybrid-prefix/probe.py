#!/usr/bin/env python3
"""Which prompt positions a server computes again for a hybrid model: five greedy completions against one server
(a first turn: a 1024-token system prompt and a 32-token message; its next turn: that, the reply and another
message; another user's first turn with the same system prompt, then a third user's; the first turn sent again), printing for each
the prompt length and the positions the server took from its cache. Against `tessera serve` (OpenAI API, usage's
cached_tokens, return_token_ids for the reply) or llama-server (its /completion, timings.cache_n, return_tokens).
  probe.py tessera http://127.0.0.1:PORT      probe.py llama http://127.0.0.1:PORT"""
import json
import random
import sys
import urllib.request

kind, url = sys.argv[1], sys.argv[2]


def post(path, body):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req))


def complete(prompt):  # -> (cached positions, reply ids)
    if kind == "llama":
        r = post("/completion", {"prompt": prompt, "n_predict": 16, "temperature": 0, "cache_prompt": True,
                                 "return_tokens": True})
        return r["timings"]["cache_n"], r["tokens"]
    r = post("/v1/completions", {"model": post_model(), "prompt": prompt, "max_tokens": 16, "temperature": 0,
                                 "return_token_ids": True})
    return r["usage"]["prompt_tokens_details"]["cached_tokens"], r["choices"][0]["token_ids"]


def post_model():
    return json.load(urllib.request.urlopen(url + "/v1/models"))["data"][0]["id"]


random.seed(3)
system = [random.randrange(300, 5000) for _ in range(1024)]
first = system + [random.randrange(300, 5000) for _ in range(32)]
cached, reply = complete(first)
print(f"first turn: {len(first)} prompt tokens, {cached} from the cache")
nxt = first + reply + [random.randrange(300, 5000) for _ in range(32)]
cached, _ = complete(nxt)
print(f"next turn: {len(nxt)} prompt tokens, {cached} from the cache")
other = system + [random.randrange(300, 5000) for _ in range(32)]
cached, _ = complete(other)
print(f"another user: {len(other)} prompt tokens, {cached} from the cache")
third = system + [random.randrange(300, 5000) for _ in range(32)]
cached, _ = complete(third)
print(f"a third user: {len(third)} prompt tokens, {cached} from the cache")
cached, _ = complete(first)
print(f"first turn again: {len(first)} prompt tokens, {cached} from the cache")
