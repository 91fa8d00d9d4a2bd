"""One user's conversation, turn after turn, against one server: a 1024-token system prompt, then 4 turns of a new
message (32 tokens, or 48 with a reply length given) and a greedy reply (64 tokens, or the length given), each turn
sending the whole history; writes every reply's logprobs (float.hex) to OUT and prints the cached positions.
  turns.py http://127.0.0.1:PORT OUT [REPLY_TOKENS]"""
import json, sys, urllib.request, random
url = sys.argv[1]
def post(body):
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req))
model = json.load(urllib.request.urlopen(url + "/v1/models"))["data"][0]["id"]
random.seed(5)
hist = [random.randrange(300, 5000) for _ in range(1024)]
out = []
for t in range(4):
    hist += [random.randrange(300, 5000) for _ in range(48 if len(sys.argv) > 3 else 32)]
    r = post({"model": model, "prompt": hist, "max_tokens": int(sys.argv[3]) if len(sys.argv) > 3 else 64, "temperature": 0, "logprobs": 0, "ignore_eos": True, "return_token_ids": True})
    c = r["choices"][0]
    out.append([float.hex(x) for x in c["logprobs"]["token_logprobs"]])
    hist += c["token_ids"]
    print(t, len(hist), r["usage"].get("prompt_tokens_details"), file=sys.stderr)
json.dump(out, open(sys.argv[2], "w"))
