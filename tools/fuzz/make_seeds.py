#!/usr/bin/env python3
"""Writes the seed corpora of the binary-format fuzzers (tests/fuzz/corpus/<target>/).

state_codec: encoded request states in the fuzzer's input layout: the JSON header, then each
frame, separated by the bytes 0x01 0x01 (frames are raw little-endian tensor bytes; no frame
written here contains 0x01 0x01).
gguf: small GGUF v3 files: tokenizer metadata (byte-level BPE and SentencePiece) and a tensor.
The protocol, pipeline and tokenizer seeds are text, written by hand and committed as they are.

  tools/fuzz/make_seeds.py [--out tests/fuzz/corpus]
"""
import argparse
import json
import pathlib
import struct

SEP = b"\x01\x01"


class State:
    def __init__(self):
        self.frames = []

    def tensor(self, dtype, shape, values):
        fmt = {"i32": "i", "i64": "q", "f32": "f", "u8": "B"}[dtype]
        data = struct.pack("<%d%s" % (len(values), fmt), *values)
        assert SEP not in data, "a frame must not contain the separator"
        self.frames.append(data)
        return {"frame": len(self.frames) - 1, "dtype": dtype, "shape": shape}

    def text(self, s):
        b = s.encode()
        return self.tensor("u8", [len(b)], list(b))


def base_header(st, tokens, text):
    return {
        "format": "sift.state/2",
        "id": "seed",
        "tokens": st.tensor("i32", [len(tokens)], tokens),
        "question_begin": max(0, len(tokens) - 2),
        "prompt_length": len(tokens),
        "generation": {"temperature": 0.0, "top_k": 0, "top_p": 1.0, "seed": 7,
                       "max_tokens": 8, "stop_strings": ["\n\n"], "stop_tokens": [2],
                       "ignore_eog": False},
        "cache": None,
        "next_position": len(tokens),
        "last_logits": None,
        "layer_stats": [],
        "kept_indices": [],
        "plan": {"stats": [], "reuse_leader": []},
        "result": {"tokens": [], "text": st.text(text), "finish": "length", "decode_ms": 0.0},
    }


def encode(header, st):
    return json.dumps(header, separators=(",", ":")).encode() + b"".join(SEP + f for f in st.frames)


def seeds():
    # 1. A fresh request: tokens only.
    st = State()
    yield "fresh", encode(base_header(st, [3, 4, 5, 6], ""), st)

    # 2. After a prefill: a 2-layer cache (1 KV head, head_dim 2), logits, stats, a plan.
    st = State()
    h = base_header(st, [3, 4, 5], "")
    layers = []
    for layer in range(2):
        n = 3 - layer  # ragged: layer 1 keeps 2 entries
        k = st.tensor("f32", [1, n, 2], [0.5 + i for i in range(2 * n)])
        v = st.tensor("f32", [1, n, 2], [1.5 + i for i in range(2 * n)])
        pos = st.tensor("i64", [1, n], list(range(n)))
        layers.append({"k": k, "v": v, "positions": pos})
    h["cache"] = {"num_layers": 2, "num_kv_heads": 1, "head_dim": 2, "dtype": "f32",
                  "layers": layers}
    h["last_logits"] = st.tensor("f32", [4], [0.25, -1.0, 2.0, 0.5])
    h["layer_stats"] = [{"layer": 0, "window_sum": st.tensor("f32", [1, 3], [0.2, 0.3, 0.5]),
                         "last_query": None, "column_sum": None, "max_prob": None,
                         "last_query_logit_sum": None}]
    h["kept_indices"] = [{"layer": 1, "indices": st.tensor("i64", [1, 2], [0, 2])}]
    h["plan"] = {"stats": [{"layer": 0, "window": 2, "last_query": True, "column_sum": False,
                            "max_from_query": -1, "last_query_logit_sum": False}],
                 "reuse_leader": [[1, 0]]}
    yield "prefilled", encode(h, st)

    # 3. After decoding: result text (UTF-8) and tokens.
    st = State()
    h = base_header(st, [3, 4], "caf\u00e9 \u2603")
    h["result"]["tokens"] = [9, 10, 11]
    h["result"]["finish"] = "stop"
    h["result"]["decode_ms"] = 12.5
    yield "decoded", encode(h, st)


# ---- GGUF ----

def gguf_string(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


GGUF_TYPES = {"u32": 4, "i32": 5, "f32": 6, "bool": 7, "str": 8, "arr": 9, "u64": 10}


def gguf_value(kind, v):
    if kind == "str":
        return gguf_string(v)
    if kind == "u32":
        return struct.pack("<I", v)
    if kind == "i32":
        return struct.pack("<i", v)
    if kind == "f32":
        return struct.pack("<f", v)
    if kind == "bool":
        return struct.pack("<B", 1 if v else 0)
    raise ValueError(kind)


def gguf_file(kvs, tensors):
    """kvs: [(key, kind, value)] with kind "arr:<elem>" for arrays; tensors: [(name, dims, f32s)]."""
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs))
    for key, kind, value in kvs:
        out += gguf_string(key)
        if kind.startswith("arr:"):
            elem = kind[4:]
            out += struct.pack("<IIQ", GGUF_TYPES["arr"], GGUF_TYPES[elem], len(value))
            out += b"".join(gguf_value(elem, x) for x in value)
        else:
            out += struct.pack("<I", GGUF_TYPES[kind]) + gguf_value(kind, value)
    offset = 0
    blobs = []
    for name, dims, values in tensors:
        out += gguf_string(name) + struct.pack("<I", len(dims))
        out += b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", 0, offset)  # type 0 = F32
        blob = struct.pack("<%df" % len(values), *values)
        blobs.append(blob)
        offset += (len(blob) + 31) // 32 * 32
    out += b"\0" * ((-len(out)) % 32)
    for blob in blobs:
        out += blob + b"\0" * ((-len(blob)) % 32)
    return out


def byte_symbol(b):
    printable = lambda x: 0x21 <= x <= 0x7E or 0xA1 <= x <= 0xAC or x >= 0xAE
    if printable(b):
        return chr(b)
    return chr(0x100 + sum(1 for x in range(b) if not printable(x)))


def gguf_seeds():
    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] + [byte_symbol(b) for b in range(256)]
    merges = ["t h", "th e", "\u0120 t"]
    tokens += ["th", "the", "\u0120t"]
    types = [3, 3, 3] + [1] * (len(tokens) - 3)
    byte_level = [
        ("general.architecture", "str", "llama"),
        ("general.name", "str", "seed"),
        ("general.alignment", "u32", 32),
        ("tokenizer.ggml.model", "str", "gpt2"),
        ("tokenizer.ggml.pre", "str", "smollm"),
        ("tokenizer.ggml.tokens", "arr:str", tokens),
        ("tokenizer.ggml.token_type", "arr:i32", types),
        ("tokenizer.ggml.merges", "arr:str", merges),
        ("tokenizer.ggml.eos_token_id", "u32", 0),
        ("tokenizer.chat_template", "str",
         "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
         "{% endfor %}"),
    ]
    yield "byte_level_bpe", gguf_file(byte_level, [("token_embd.weight", [2, 3],
                                                    [0.5, -1, 2, 0, 1, 3])])
    pieces = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)] + \
        ["\u2581the", "\u2581t", "he", "h", "e"]
    spm = [
        ("general.architecture", "str", "llama"),
        ("tokenizer.ggml.model", "str", "llama"),
        ("tokenizer.ggml.tokens", "arr:str", pieces),
        ("tokenizer.ggml.scores", "arr:f32", [0.0] * 259 + [-1.0, -2.0, -3.0, -4.0, -5.0]),
        ("tokenizer.ggml.token_type", "arr:i32", [2, 3, 3] + [6] * 256 + [1] * 5),
        ("tokenizer.ggml.unknown_token_id", "u32", 0),
        ("tokenizer.ggml.bos_token_id", "u32", 1),
        ("tokenizer.ggml.eos_token_id", "u32", 2),
        ("tokenizer.ggml.add_bos_token", "bool", True),
    ]
    yield "sentencepiece", gguf_file(spm, [])
    yield "tensors_only", gguf_file([("general.alignment", "u32", 64)],
                                    [("a", [4], [1, 2, 3, 4]), ("b", [1, 2, 1], [5, 6])])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(pathlib.Path(__file__).resolve().parents[2] /
                                         "tests" / "fuzz" / "corpus"))
    args = ap.parse_args()
    for target, made in (("state_codec", seeds()), ("gguf", gguf_seeds())):
        out = pathlib.Path(args.out) / target
        out.mkdir(parents=True, exist_ok=True)
        for name, data in made:
            (out / name).write_bytes(data)
            print(out / name, len(data), "bytes")


if __name__ == "__main__":
    main()
