#!/usr/bin/env python3
"""Writes a llama2.c checkpoint and its tokenizer as GGUF with llama.cpp's own Python writer (gguf-py).

The test of issue 27: a file as llama.cpp's converters write it, including "no such token" ids stored as -1
(uint32 4294967295, llama.cpp's LLAMA_TOKEN_NULL, and int32 -1), must load and generate as the original does.
The metadata follows convert_hf_to_gguf.py for a LlamaForCausalLM with a SentencePiece vocabulary; the tensors
are llama2.c's own, already in the interleaved rotary layout GGUF's llama expects (no q/k permutation).

Usage: write_llama2c.py MODEL.bin TOKENIZER.bin OUT.gguf   (PYTHONPATH must hold llama.cpp's gguf-py)
"""
import struct
import sys

import numpy as np
import gguf


def read_llama2c(path):
    with open(path, "rb") as f:
        dim, hidden, layers, heads, kv_heads, vocab, seq = struct.unpack("<7i", f.read(28))
        shared = vocab > 0
        vocab = abs(vocab)
        data = np.frombuffer(f.read(), dtype=np.float32)
    head = dim // heads
    kv_dim = kv_heads * head
    at = 0

    def take(*shape):
        nonlocal at
        n = int(np.prod(shape))
        t = data[at:at + n].reshape(shape)
        at += n
        return t

    w = {"token_embd": take(vocab, dim)}
    w["attn_norm"] = take(layers, dim)
    w["wq"] = take(layers, dim, dim)
    w["wk"] = take(layers, kv_dim, dim)
    w["wv"] = take(layers, kv_dim, dim)
    w["wo"] = take(layers, dim, dim)
    w["ffn_norm"] = take(layers, dim)
    w["w1"] = take(layers, hidden, dim)
    w["w2"] = take(layers, dim, hidden)
    w["w3"] = take(layers, hidden, dim)
    w["output_norm"] = take(dim)
    take(seq, head // 2)  # freq_cis_real, unused
    take(seq, head // 2)  # freq_cis_imag, unused
    w["output"] = w["token_embd"] if shared else take(vocab, dim)
    cfg = dict(dim=dim, hidden=hidden, layers=layers, heads=heads, kv_heads=kv_heads, vocab=vocab, seq=seq)
    return cfg, w


def read_llama2c_tokenizer(path, vocab):
    tokens, scores = [], []
    with open(path, "rb") as f:
        (_max_len,) = struct.unpack("<i", f.read(4))
        for _ in range(vocab):
            score, n = struct.unpack("<fi", f.read(8))
            tokens.append(f.read(n).decode("utf-8", errors="replace"))
            scores.append(score)
    return tokens, scores


def main():
    model, tok, out = sys.argv[1:4]
    cfg, w = read_llama2c(model)
    tokens, scores = read_llama2c_tokenizer(tok, cfg["vocab"])
    types = []
    for i, t in enumerate(tokens):
        if i == 0:
            types.append(gguf.TokenType.UNKNOWN)
        elif i in (1, 2):
            types.append(gguf.TokenType.CONTROL)
        elif t.startswith("<0x") and t.endswith(">") and len(t) == 6:
            types.append(gguf.TokenType.BYTE)
        else:
            types.append(gguf.TokenType.NORMAL)
    # llama2.c's tokenizer writes its pieces with spaces; SentencePiece (and GGUF's llama vocabulary) uses U+2581.
    tokens = [t.replace(" ", "\u2581") for t in tokens]

    arch = gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.LLAMA]
    wr = gguf.GGUFWriter(out, arch)
    wr.add_name("stories260K")
    wr.add_context_length(cfg["seq"])
    wr.add_embedding_length(cfg["dim"])
    wr.add_block_count(cfg["layers"])
    wr.add_feed_forward_length(cfg["hidden"])
    wr.add_head_count(cfg["heads"])
    wr.add_head_count_kv(cfg["kv_heads"])
    wr.add_rope_dimension_count(cfg["dim"] // cfg["heads"])
    wr.add_layer_norm_rms_eps(1e-5)
    wr.add_rope_freq_base(10000.0)
    wr.add_file_type(gguf.LlamaFileType.ALL_F32)
    wr.add_tokenizer_model("llama")
    wr.add_tokenizer_pre("default")
    wr.add_token_list(tokens)
    wr.add_token_scores(scores)
    wr.add_token_types(types)
    wr.add_bos_token_id(1)
    wr.add_eos_token_id(2)
    wr.add_unk_token_id(0)
    # "No such token", as llama.cpp's tools write it: -1 held in a uint32, and once as an int32.
    wr.add_uint32(gguf.Keys.Tokenizer.PAD_ID, 0xFFFFFFFF)
    wr.add_uint32(gguf.Keys.Tokenizer.SEP_ID, 0xFFFFFFFF)
    wr.add_uint32(gguf.Keys.Tokenizer.MASK_ID, 0xFFFFFFFF)
    wr.add_int32(gguf.Keys.Tokenizer.EOT_ID, -1)
    wr.add_add_bos_token(True)
    wr.add_add_eos_token(False)

    wr.add_tensor("token_embd.weight", w["token_embd"])
    for i in range(cfg["layers"]):
        wr.add_tensor(f"blk.{i}.attn_norm.weight", w["attn_norm"][i])
        wr.add_tensor(f"blk.{i}.attn_q.weight", w["wq"][i])
        wr.add_tensor(f"blk.{i}.attn_k.weight", w["wk"][i])
        wr.add_tensor(f"blk.{i}.attn_v.weight", w["wv"][i])
        wr.add_tensor(f"blk.{i}.attn_output.weight", w["wo"][i])
        wr.add_tensor(f"blk.{i}.ffn_norm.weight", w["ffn_norm"][i])
        wr.add_tensor(f"blk.{i}.ffn_gate.weight", w["w1"][i])
        wr.add_tensor(f"blk.{i}.ffn_down.weight", w["w2"][i])
        wr.add_tensor(f"blk.{i}.ffn_up.weight", w["w3"][i])
    wr.add_tensor("output_norm.weight", w["output_norm"])
    wr.add_tensor("output.weight", w["output"])
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()


if __name__ == "__main__":
    main()
