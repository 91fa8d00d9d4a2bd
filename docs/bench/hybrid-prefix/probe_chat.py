#!/usr/bin/env python3
"""probe.py's five requests as chat completions: which prompt positions a server computes again for a hybrid model
when the prompts come as conversations (a system prompt of about 1000 tokens and a short message; its next turn: that,
the reply and another message; another user's first turn with the same system prompt, then a third user's; the first
turn again). Both servers render the same template (start them with it: tessera `--chat-template FILE`, llama-server
`--jinja --chat-template-file FILE`). Prints each request's prompt tokens and the positions taken from the cache
(usage.prompt_tokens_details.cached_tokens; llama-server's timings.cache_n).
  probe_chat.py http://127.0.0.1:PORT"""
import json
import sys
import urllib.request

url = sys.argv[1]


def post(path, body):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req))


def chat(messages):  # -> (prompt tokens, cached positions, reply text)
    r = post("/v1/chat/completions", {"model": model, "messages": messages, "max_tokens": 16, "temperature": 0,
                                      "cache_prompt": True})
    usage = r.get("usage", {})
    cached = r["timings"]["cache_n"] if "timings" in r else usage["prompt_tokens_details"]["cached_tokens"]
    return usage.get("prompt_tokens"), cached, r["choices"][0]["message"].get("content") or ""


model = json.load(urllib.request.urlopen(url + "/v1/models"))["data"][0]["id"]
words = ("the library opens at nine on weekdays and at ten on saturdays while the reading room closes one hour "
         "earlier than the lending desk and every branch follows the same holiday calendar").split()
system = {"role": "system", "content": " ".join(words[i % len(words)] for i in range(175))}


def user(text):
    return {"role": "user", "content": text}


first = [system, user("When does the main branch open on a Saturday morning?")]
n, cached, reply = chat(first)
print(f"first turn: {n} prompt tokens, {cached} from the cache")
n, cached, _ = chat(first + [{"role": "assistant", "content": reply}, user("And on Sunday afternoons?")])
print(f"next turn: {n} prompt tokens, {cached} from the cache")
n, cached, _ = chat([system, user("Is the reading room open during school holidays?")])
print(f"another user: {n} prompt tokens, {cached} from the cache")
n, cached, _ = chat([system, user("Can I return books at any branch of the city?")])
print(f"a third user: {n} prompt tokens, {cached} from the cache")
n, cached, _ = chat(first)
print(f"first turn again: {n} prompt tokens, {cached} from the cache")
