#!/usr/bin/env python3
"""Does a greedy completion's logprobs change when other streams decode beside it? Sends a prompt of N token ids
alone (24 tokens, logprobs), then again while three other completions of 300 tokens are decoding, and prints the
largest logprob difference and the first token where they differ (None: the same to the bit).
  tessera serve --model q.gguf --threads 2 --port P --no-prefix-cache
  python3 batch_probe.py http://127.0.0.1:P MODEL N        (N: 900 and 2500 in docs/benchmarks.md)"""
import json
import sys
import threading
import time
import urllib.request

url, model, n = sys.argv[1], sys.argv[2], int(sys.argv[3])


def logprobs(prompt, tokens):
    body = {"model": model, "prompt": prompt, "max_tokens": tokens, "temperature": 0, "ignore_eos": True, "logprobs": 0}
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req))["choices"][0]["logprobs"]["token_logprobs"]


others = [[(53 * i + 7) % 5000 + 300 for i in range(60)]]
others += [others[0][::-1], others[0][1:]]
probe = [(71 * i + 5) % 5000 + 300 for i in range(n)]
alone = logprobs(probe, 24)
threads = [threading.Thread(target=logprobs, args=(p, 300)) for p in others]
for t in threads:
    t.start()
time.sleep(1.0)  # the three are decoding by now
beside = logprobs(probe, 24)
for t in threads:
    t.join()
gap = max(abs(a - b) for a, b in zip(alone, beside))
first = next((i for i, (a, b) in enumerate(zip(alone, beside)) if a != b), None)
print(f"prompt {n} beside 3 decodes: max gap {gap:.3e}, first differing {first}")
