#!/usr/bin/env python3
"""Generate sift's correctness fixtures from an independent reference implementation.

Two models, chosen with ``--model smollm2|qwen|PATH`` (a path is matched to a profile
by its sha256): SmolLM2-135M-Instruct Q4_1 (fixtures in tests/fixtures/reference/,
the section below describes it) and Qwen2.5-Coder-0.5B-Instruct Q4_K_M (fixtures in
tests/fixtures/reference/qwen/, see "Qwen" further down). Both are fetched by
tools/setup.sh (``bash tools/setup.sh model qwen`` for the second).

Reference used
--------------
Hugging Face ``transformers`` (real ``LlamaForCausalLM``, eager attention) loading
model and tokenizer straight from the local GGUF file
``models/SmolLM2-135M-Instruct.Q4_1.gguf`` (``from_pretrained(dir, gguf_file=...)``),
running on the CPU in float32 with torch. Pinned versions are in
``tools/reference_requirements.txt`` (the run that produced the committed fixtures
used torch 2.15.0, transformers 5.23.0, gguf 0.19.0, tokenizers 0.23.3,
accelerate 1.15.0, numpy 2.4.6 on CPython 3.11.7).

How transformers gets the weights: its GGUF loader reads every tensor with the
``gguf`` package and dequantises it with ``gguf.quants.dequantize`` (numpy) to
float32 (Q4_1 for the 210 matrices, Q8_0 for ``token_embd``, norms are F32), undoes
llama.cpp's Q/K row permutation, and ties ``lm_head`` to ``embed_tokens``. The whole
forward pass then runs in fp32 -- no activation quantisation (llama.cpp would
quantise activations to Q8_1 for its Q4_1 dot products, so llama.cpp's own logits
differ from these by ~1e-2).

Checks this script makes before writing anything (it fails loudly otherwise):
  * the GGUF's sha256 equals the profile's (PROFILES below);
  * every weight transformers holds equals a dequantisation written here from the
    ggml block layouts (Q4_1: y = q*d + m, Q8_0: y = q*d), independent of the
    gguf package's dequantiser, after undoing the Q/K permutation;
  * an independent ~40-line torch forward pass over the GGUF-layout weights
    (adjacent-pair "NORM" RoPE, as llama.cpp does it) reproduces transformers'
    last-position logits for two of the logit cases (|diff| < 2e-3);
  * greedy decoding by full recomputation equals ``model.generate`` (KV cache).

Tokenizer caveat (important): transformers 5.23's GGUF tokenizer builder does not
know llama.cpp's ``tokenizer.ggml.pre = "smollm"`` and falls back to a plain
ByteLevel pre-tokenizer, dropping the original SmolLM2 ``tokenizer.json``'s
``Digits(individual_digits=True)`` step. The two disagree where whitespace comes
right before a numeric (Unicode N) character: a run of >= 2 spaces/tabs/newlines
before a digit (``"a  1"``: Digits gives ``a``, ``ĠĠ``, ``1``), or a single space
before a numeric character that has a merge with ``Ġ`` (``" ½"``); 4 of the 58
tokenizer cases. This script
restores the original pre-tokenizer (Sequence[Digits(individual_digits=True),
ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)], the same as
llama.cpp's "smollm" regex list) before producing the ids; for every case where the
unpatched GGUF tokenizer gives different ids they are stored as
``hf_gguf_loader_ids`` so the difference stays visible. Everything else (vocab,
merges, the 17 special tokens, chat template) comes from the GGUF unchanged.

Outputs (tests/fixtures/reference/, ~45 KB in total):
  tokenizer.json  text -> ids (add_special_tokens=False, specials parsed as HF does)
  logits.json     last-position top-10 logits, summary stats and 50 sampled logits
                  for prompts of several lengths (ids stored, so the C++ test does
                  not depend on the tokenizer)
  greedy.json     32 forced greedy tokens for a chat prompt, with top-1/top-2 margins

Re-running
----------
The venv lives at tools/.venv-ref (gitignored). PyPI's torch wheel for Linux is a
CUDA build (torch 2.15.0: 539 MB wheel plus several GB of nvidia-* wheels). The
pinned requirements list only the parts that are needed to import it on a CPU-only
machine and are installed with ``--no-deps``; the remaining CUDA 13 runtime
libraries it links against (cublas, cudart, cudnn, ...) come from the CUDA 13
toolkit in /usr/local/cuda-13.0 on the project machines (nothing runs on a GPU).
On a machine without that toolkit use ``pip install torch==2.15.0`` with its
dependencies instead (~3 GB more) -- the CPU numerics are the same::

    python3 -m venv tools/.venv-ref            # CPython 3.11
    tools/.venv-ref/bin/pip install --no-deps -r tools/reference_requirements.txt
    OMP_NUM_THREADS=1 tools/.venv-ref/bin/python tools/make_reference_fixtures.py

Options: ``--model smollm2|qwen|PATH`` (default smollm2),
``--out DIR`` (default: the profile's fixture folder), ``--threads N`` (default 1, the
machine is shared), ``--export-hf [DIR]`` (also write a Hugging Face directory, below),
``--no-fixtures`` (only the export). Runtime on the shared 2-core dev machine with 1 thread: 4-6
minutes (measured 227 s and 342 s; roughly 1 min loading and checks, 1 min logits,
the rest greedy decoding by full recomputation). Installing the venv took ~5 minutes. Output is
deterministic: fp32 on CPU, fixed thread count, no sampling; a second run in a
freshly installed venv reproduced all three files byte for byte.

Qwen (``--model qwen``)
-----------------------
models/Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf (qwen2, 24 layers, hidden 896, 14/2
heads, rope base 1e6, tensors Q5_0/Q8_0/Q4_K/Q6_K/F32, a separate Q8_0 ``output.weight``)
loaded by ``Qwen2ForCausalLM`` with **sdpa** attention (eager attention would hold a
14 x 16K x 16K fp32 score tensor, 15 GB, at the longest case); the independent forward
below uses an explicit softmax, so agreement with it also checks sdpa. Differences from
SmolLM2's recipe:
  * the independent dequantiser also covers Q5_0, Q4_K and Q6_K (ggml block layouts:
    Q5_0 y = (q | h<<4) - 16) * d; Q4_K y = d*sc*q - dmin*m with 6-bit packed scales/mins
    per 32; Q6_K y = d*sc*(q - 32) with int8 scales per 16); llama.cpp does not permute
    qwen2's q/k rows (NeoX RoPE), so the independent forward uses rotate_half and adds
    the q/k/v biases, and lm_head is ``output.weight``;
  * the tokenizer: transformers' GGUF builder gives Qwen2's original pre-tokenizer
    (Split on the qwen2 regex + ByteLevel without regex) but drops the original
    ``tokenizer.json``'s NFC normalizer; the script restores it (``hf_gguf_loader_ids``
    keeps the unpatched ids where they differ: only the non-NFC cases added for Qwen);
  * logits at 5 lengths: raw_short, chat_short, essay_1024, essay_4096, essay_16384
    (ids stored; the 16K case makes logits.json ~150 KB); independent forward on
    chat_short and essay_1024;
  * greedy prompt candidates suited to a code model; the Fibonacci prompt's smallest
    top-2 margin is 0.010 (< GREEDY_MIN_MARGIN), so the hash-table prompt is taken
    (smallest margin 0.18).
Runtime with 1 thread on the shared 2-core machine: see tests/fixtures/reference/README.md.

Hugging Face directory (``--export-hf``)
----------------------------------------
After loading model and tokenizer from the GGUF (tokenizer restored as above), writes
``model.save_pretrained`` (fp32 safetensors) and ``tokenizer.save_pretrained`` to DIR
(default models/hf/<GGUF name without .gguf>/, ignored by git, where the C++ test
tests/model/hf_checkpoint_test.cc looks next to $SIFT_MODEL / $SIFT_MODEL_QWEN). transformers
then reloads the directory and must reproduce the GGUF-loaded model's ids and every tensor
exactly (logits to 1e-4: its GGUF-loaded graph rounds differently, 6e-6 measured on SmolLM2), so
the directory is what transformers itself considers the same model. With
transformers 5 the config.json keeps rope_theta under ``rope_parameters``. Takes ~1 min for
SmolLM2 (540 MB), ~3 min for Qwen (2 GB).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

# Never touch the network: everything comes from the local GGUF.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "tests" / "fixtures" / "reference"
ESSAYS_DIR = Path("/work/shared/data/pg_essays")

SPECIAL_TOKENS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<repo_name>", "<reponame>",
    "<file_sep>", "<filename>", "<gh_stars>", "<issue_start>", "<issue_comment>",
    "<issue_closed>", "<jupyter_start>", "<jupyter_text>", "<jupyter_code>",
    "<jupyter_output>", "<jupyter_script>", "<empty_output>",
]

# The chat template the GGUF should carry (SmolLM2-Instruct's tokenizer_config.json).
EXPECTED_CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
    "<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# Greedy prompt candidates, tried in order. A candidate is taken if the model does
# not emit an end-of-generation token within 32 steps and every step's top1-top2
# logit margin is >= GREEDY_MIN_MARGIN (well above the ~1e-4 logit error of an
# engine that dequantises to fp32), otherwise the one with the largest minimum margin.
# With SmolLM2 the first prompt ends after 8 tokens and the haiku prompt is taken
# (minimum margin 0.068).
GREEDY_CANDIDATES = [
    "What is the capital of France? Answer in one sentence.",
    "Write a haiku about the sea.",
    "Explain in a few sentences why the sky is blue.",
    "Give me three tips for staying healthy.",
    "Describe a cat to someone who has never seen one.",
]
GREEDY_STEPS = 32
GREEDY_MIN_MARGIN = 0.05

# Qwen2.5-Coder's added tokens (ids 151643..151664; <tool_call> and </tool_call> are not
# "special" in HF's sense, so decode(skip_special_tokens=True) keeps them).
QWEN_ADDED_TOKENS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
    "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>",
    "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
    "<|repo_name|>", "<|file_sep|>",
]
QWEN_FIRST_ADDED = 151643
QWEN_DEFAULT_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
QWEN2_SPLIT_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                     r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# Texts that NFC changes (Qwen2's normalizer): decomposed accents, a Hangul jamo pair, the
# Angstrom and Ohm signs, a combining sequence in canonical-order-sensitive order.
NFC_CASES = [
    "Cafe\u0301 nai\u0308ve re\u0301sume\u0301",
    "\u1100\u1161\u11a8 and \u212b and \u2126",
    "A\u030a ngstro\u0308m, q\u0323\u0307 and q\u0307\u0323",
]

CODE_PY = '''def fib(n: int) -> int:
    """Return the n-th Fibonacci number."""
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


if __name__ == "__main__":
    print([fib(i) for i in range(10)])  # [0, 1, 1, 2, ...]
'''

CODE_CPP = '''#include <vector>
#include <cstdio>

template <typename T>
T sum(const std::vector<T>& xs) {
\tT acc{};
\tfor (const auto& x : xs) acc += x;   // accumulate
\treturn acc;
}

int main() {
    std::vector<int> v{1, 2, 3};
    std::printf("%d\\n", sum(v));
    return v.size() != 3 ? 1 : 0;
}
'''


def log(msg: str) -> None:
    print(f"[make_reference_fixtures] {msg}", flush=True)


def die(msg: str) -> None:
    print(f"\nFATAL: {msg}\n", file=sys.stderr, flush=True)
    sys.exit(1)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def f32(x) -> float:
    """Shortest decimal that round-trips the float32 value (parsed back as float32)."""
    import numpy as np

    return float(np.format_float_positional(np.float32(x), unique=True, trim="0"))


def essay_texts() -> list[tuple[str, str]]:
    files = sorted(ESSAYS_DIR.glob("*.txt"))
    if len(files) < 4:
        die(f"need >= 4 essays in {ESSAYS_DIR}, found {len(files)}")
    return [(p.name, p.read_text(encoding="utf-8")) for p in files]


def first_words(text: str, n_words: int) -> str:
    """Prefix of `text` (original whitespace kept) that ends after its n-th word."""
    count, in_word = 0, False
    for i, ch in enumerate(text):
        if ch.isspace():
            if in_word:
                count += 1
                if count == n_words:
                    return text[:i]
            in_word = False
        else:
            in_word = True
    return text


# --------------------------------------------------------------------------- #
# Independent dequantisation and forward pass (GGUF layout, llama.cpp-style RoPE)
# --------------------------------------------------------------------------- #

def dequant_independent(t):
    """Dequantise a gguf ReaderTensor from the ggml block layouts (ggml src/ggml-common.h)."""
    import numpy as np

    name = t.tensor_type.name
    shape = [int(x) for x in reversed(list(t.shape))]  # torch order: (ne1, ne0)
    raw = np.asarray(t.data)
    if name == "F32":
        return raw.astype(np.float32).reshape(shape)
    rows = raw.reshape(-1, raw.shape[-1]) if raw.ndim > 1 else raw.reshape(1, -1)

    def f16(b):  # little-endian fp16 field of every block -> float32 [rows, blocks, 1]
        return b.copy().view(np.float16).astype(np.float32)

    if name == "Q4_1":
        blocks = rows.reshape(rows.shape[0], -1, 20)
        d = f16(blocks[:, :, 0:2])
        m = f16(blocks[:, :, 2:4])
        qs = blocks[:, :, 4:20]
        lo = (qs & 0x0F).astype(np.float32)
        hi = (qs >> 4).astype(np.float32)
        y = np.concatenate([lo * d + m, hi * d + m], axis=2)  # elements 0-15 then 16-31
    elif name == "Q8_0":
        blocks = rows.reshape(rows.shape[0], -1, 34)
        d = f16(blocks[:, :, 0:2])
        qs = blocks[:, :, 2:34].copy().view(np.int8).astype(np.float32)
        y = qs * d
    elif name == "Q5_0":
        # 22 bytes: d (f16), qh (u32: bit j = 5th bit of element j), qs[16] (low nibbles:
        # elements 0-15, high nibbles: 16-31); value = ((q | h << 4) - 16) * d.
        blocks = rows.reshape(rows.shape[0], -1, 22)
        d = f16(blocks[:, :, 0:2])
        qh = blocks[:, :, 2:6].copy().view(np.uint32)  # [rows, blocks, 1]
        qs = blocks[:, :, 6:22].astype(np.int32)
        bits = ((qh >> np.arange(32, dtype=np.uint32)) & 1).astype(np.int32)  # [rows, blocks, 32]
        lo = (qs & 0x0F) | (bits[:, :, 0:16] << 4)
        hi = (qs >> 4) | (bits[:, :, 16:32] << 4)
        y = np.concatenate([lo - 16, hi - 16], axis=2).astype(np.float32) * d
    elif name == "Q4_K":
        # 144 bytes per 256: d, dmin (f16), scales[12] (8 x 6-bit scale + 8 x 6-bit min),
        # qs[128]; sub-block j of 32: y = d*sc_j*q - dmin*m_j. Sub-blocks 2i and 2i+1 share
        # qs[32i:32i+32] (low then high nibbles).
        blocks = rows.reshape(rows.shape[0], -1, 144)
        d = f16(blocks[:, :, 0:2])
        dmin = f16(blocks[:, :, 2:4])
        sc = blocks[:, :, 4:16].astype(np.int32)
        qs = blocks[:, :, 16:144].astype(np.int32)
        scale, mins = [], []
        for j in range(8):
            if j < 4:
                scale.append(sc[:, :, j] & 63)
                mins.append(sc[:, :, j + 4] & 63)
            else:
                scale.append((sc[:, :, j + 4] & 0x0F) | ((sc[:, :, j - 4] >> 6) << 4))
                mins.append((sc[:, :, j + 4] >> 4) | ((sc[:, :, j] >> 6) << 4))
        parts = []
        for i in range(4):
            q = qs[:, :, 32 * i:32 * i + 32]
            for j, nib in ((2 * i, q & 0x0F), (2 * i + 1, q >> 4)):
                d1 = d * scale[j][:, :, None].astype(np.float32)
                m1 = dmin * mins[j][:, :, None].astype(np.float32)
                parts.append(d1 * nib.astype(np.float32) - m1)
        y = np.concatenate(parts, axis=2)
    elif name == "Q6_K":
        # 210 bytes per 256: ql[128] (low 4 bits), qh[64] (high 2 bits), scales[16] (i8),
        # d (f16); value = d * scale[16-group] * (q - 32), in two halves of 128.
        blocks = rows.reshape(rows.shape[0], -1, 210)
        ql = blocks[:, :, 0:128].astype(np.int32)
        qh = blocks[:, :, 128:192].astype(np.int32)
        scales = blocks[:, :, 192:208].copy().view(np.int8).astype(np.float32)
        d = f16(blocks[:, :, 208:210])
        out = []
        for half in range(2):
            L = ql[:, :, 64 * half:64 * half + 64]
            H = qh[:, :, 32 * half:32 * half + 32]
            S = scales[:, :, 8 * half:8 * half + 8]
            q1 = ((L[:, :, 0:32] & 0x0F) | (((H >> 0) & 3) << 4)) - 32
            q2 = ((L[:, :, 32:64] & 0x0F) | (((H >> 2) & 3) << 4)) - 32
            q3 = ((L[:, :, 0:32] >> 4) | (((H >> 4) & 3) << 4)) - 32
            q4 = ((L[:, :, 32:64] >> 4) | (((H >> 6) & 3) << 4)) - 32
            for k, q in enumerate((q1, q2, q3, q4)):
                # elements 32k..32k+31 of the half: scale index 2k (first 16) / 2k+1 (next 16)
                s16 = np.repeat(S[:, :, 2 * k:2 * k + 2], 16, axis=2)
                out.append(d * s16 * q.astype(np.float32))
        y = np.concatenate(out, axis=2)
    else:
        die(f"independent dequantiser: unexpected type {name} for {t.name}")
    return y.reshape(shape).astype(np.float32)


def unpermute_qk(w, n_head: int):
    """GGUF (llama.cpp-permuted) q/k rows -> HF row order (convert_hf_to_gguf.py's permute)."""
    out_f, in_f = w.shape
    hd = out_f // n_head
    return w.reshape(n_head, hd // 2, 2, in_f).swapaxes(1, 2).reshape(out_f, in_f)


class IndependentLlama:
    """Minimal fp32 Llama / Qwen2 forward over GGUF-layout weights (no HF code involved).

    llama: q/k rows permuted by llama.cpp, so RoPE rotates adjacent pairs (2i, 2i+1).
    qwen2: rows in HF order (llama.cpp's NeoX RoPE): rotate_half pairs (i, i + hd/2), and
    q/k/v biases. lm_head is output.weight when present, else the tied embedding.
    """

    def __init__(self, weights: dict, meta: dict):
        import torch

        self.w = {k: torch.from_numpy(v) for k, v in weights.items()}
        self.meta = meta

    def last_logits(self, ids: list[int]):
        import torch

        m, w = self.meta, self.w
        H, KV, L = m["n_head"], m["n_head_kv"], m["n_layer"]
        D = m["n_embd"]
        hd = D // H
        eps, base = m["eps"], m["rope_base"]
        neox = m["arch"] == "qwen2"
        T = len(ids)

        def rms(x, g):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g

        pos = torch.arange(T, dtype=torch.float32)[:, None]
        inv = base ** (-torch.arange(0, hd, 2, dtype=torch.float32) / hd)
        ang = pos * inv[None, :]  # (T, hd/2)
        cos, sin = torch.cos(ang)[:, None, :], torch.sin(ang)[:, None, :]

        def rope(x):  # x: (T, heads, hd)
            if neox:
                x0, x1 = x[..., : hd // 2], x[..., hd // 2:]
                return torch.cat([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1)
            x = x.view(T, x.shape[1], hd // 2, 2)
            x0, x1 = x[..., 0], x[..., 1]
            return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).view(T, -1, hd)

        def lin(h, name):
            y = h @ w[name + ".weight"].T
            b = w.get(name + ".bias")
            return y if b is None else y + b

        mask = torch.full((T, T), float("-inf")).triu(1)
        x = w["token_embd.weight"][torch.tensor(ids)]
        for l in range(L):
            p = f"blk.{l}."
            h = rms(x, w[p + "attn_norm.weight"])
            q = rope(lin(h, p + "attn_q").view(T, H, hd))
            k = rope(lin(h, p + "attn_k").view(T, KV, hd))
            v = lin(h, p + "attn_v").view(T, KV, hd)
            k = k.repeat_interleave(H // KV, dim=1)
            v = v.repeat_interleave(H // KV, dim=1)
            s = torch.einsum("qhd,khd->hqk", q, k) / (hd ** 0.5) + mask
            a = torch.einsum("hqk,khd->qhd", torch.softmax(s, dim=-1), v).reshape(T, D)
            x = x + a @ w[p + "attn_output.weight"].T
            h = rms(x, w[p + "ffn_norm.weight"])
            g = torch.nn.functional.silu(h @ w[p + "ffn_gate.weight"].T)
            x = x + (g * (h @ w[p + "ffn_up.weight"].T)) @ w[p + "ffn_down.weight"].T
        x = rms(x[-1], w["output_norm.weight"])
        return x @ w.get("output.weight", w["token_embd.weight"]).T


# --------------------------------------------------------------------------- #

def tokenizer_cases(essays, chat_prompt_text: str, missing_bytes: list[int],
                    specials: list[str] = SPECIAL_TOKENS, extra: list[str] = ()) -> list[str]:
    """The varied-string corpus; `specials` are the model's special token texts, `extra` its
    own additional cases (appended, so the SmolLM2 list stays as committed)."""
    long_par = first_words(essays[0][1], 500)
    ctrl_missing = "".join(chr(b) for b in missing_bytes if b < 0x80)
    cases = [
        "",
        " ",
        "   ",
        "a  b",
        "a\n\nb",
        "a\n\n",
        "a\n",
        "\n",
        "   leading spaces",
        "trailing spaces   ",
        "\n\n  mixed leading whitespace and trailing newline\n",
        "col1\tcol2\t\tcol3\t",
        "\t\tdouble tab indent",
        "line one\r\nline two\r\n",
        "2023-2025",
        "$250,000",
        "1234567890",
        "3.14159",
        "a 12b",
        "Version 1.2.3 was released on 2024-01-15 at 10:30pm (99.9% uptime).",
        "a  1",                      # whitespace run + digit: Digits pre-tokenizer matters
        "x   42 and\t\t7 and\n\n9",  # ditto
        "  1",
        "IT'S",
        "y'all",
        "we'll",
        "I'm sure they've said you'd go, but it's late and HE'LL WON'T don't DON'T Don't.",
        "...!!!???",
        "---",
        "Hello, world! How are you? (fine) [ok] {yes} <no> @#%^&*_+=|\\~`",
        CODE_PY,
        CODE_CPP,
        "https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct?x=1&y=two#frag",
        "Mail someone@example.org or see http://www.gnu.org/licenses/gpl-3.0.html.",
        "Café naïve résumé façade coöperate Ångström señor",
        "Größenordnung: Fußgängerübergänge über die Straße — ÄÖÜ äöü ß",
        "Привет, как дела? Москва — столица России.",
        "Καλημέρα κόσμε! Αλφαβητο: αβγδεζηθ",
        "你好，世界！今天天气很好。",
        "日本語のテキストとカタカナ、ひらがな。",
        "안녕하세요 세계",
        "مرحبا بالعالم، كيف حالك؟",
        "👍🏽 thumbs up 🎉🚀 and a family 👨‍👩‍👧‍👦",
        "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕄𝕒𝕥𝕙 😀",
        "x² + y³ = ½ and ① ② ③",
        "non\u00a0breaking\u3000ideographic\u2009thin space",
        "<|im_start|>user\nhi<|im_end|>",
        "<file_sep>",
        "before<filename>main.py<file_sep>after",
        "".join(specials),
        " ".join(f"t{i} {s}" for i, s in enumerate(specials)),
        "<|im_start|almost special <|im_end| > <file_sep",
        "\x04",
        "\x1d",
        "a\x04b\x1dc",
        "all control bytes without a vocab symbol: [" + ctrl_missing + "]",
        long_par,
        chat_prompt_text,
    ]
    return cases + list(extra)


# --------------------------------------------------------------------------- #
# Model profiles
# --------------------------------------------------------------------------- #

class Profile:
    """What differs between the two models' fixtures."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


def _restore_smollm2(tok) -> None:
    from tokenizers import pre_tokenizers

    log(f"  transformers' GGUF pre-tokenizer: {tok.backend_tokenizer.pre_tokenizer}")
    tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
    ])
    log(f"  restored SmolLM2 pre-tokenizer:   {tok.backend_tokenizer.pre_tokenizer}")


def _restore_qwen(tok) -> None:
    from tokenizers import normalizers

    bt = tok.backend_tokenizer
    pre = str(bt.pre_tokenizer)
    log(f"  transformers' GGUF pre-tokenizer: {pre}; normalizer: {bt.normalizer}")
    if "Split" not in pre or "use_regex=False" not in pre or r"\p{N}|" not in pre:
        die(f"unexpected Qwen2 pre-tokenizer from the GGUF: {pre}")
    if bt.normalizer is not None:
        die(f"expected no normalizer from transformers' GGUF builder, got {bt.normalizer}")
    bt.normalizer = normalizers.NFC()
    log(f"  restored Qwen2's NFC normalizer:  {bt.normalizer}")


def _check_smollm2_vocab(tok) -> None:
    if len(tok) != 49152:
        die(f"tokenizer size {len(tok)} != 49152")
    for i, s in enumerate(SPECIAL_TOKENS):
        if tok.convert_tokens_to_ids(s) != i:
            die(f"special token {s!r} is not id {i}")
    if tok.chat_template != EXPECTED_CHAT_TEMPLATE:
        die(f"unexpected chat template in GGUF:\n{tok.chat_template!r}")


def _check_qwen_vocab(tok) -> None:
    for i, s in enumerate(QWEN_ADDED_TOKENS):
        if tok.convert_tokens_to_ids(s) != QWEN_FIRST_ADDED + i:
            die(f"added token {s!r} is not id {QWEN_FIRST_ADDED + i}")
    added = tok.added_tokens_decoder
    for i, s in enumerate(QWEN_ADDED_TOKENS):
        special = s not in ("<tool_call>", "</tool_call>")
        if added[QWEN_FIRST_ADDED + i].special != special:
            die(f"added token {s!r}: special={added[QWEN_FIRST_ADDED + i].special}")
    rendered = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                       add_generation_prompt=True)
    expected = (f"<|im_start|>system\n{QWEN_DEFAULT_SYSTEM}<|im_end|>\n"
                "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    if rendered != expected:
        die(f"unexpected Qwen chat rendering:\n{rendered!r}")


PROFILES = {
    "smollm2": Profile(
        key="smollm2",
        file="SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        out=DEFAULT_OUT,
        hf_class="LlamaForCausalLM",
        attn="eager",
        restore=_restore_smollm2,
        check_vocab=_check_smollm2_vocab,
        specials=SPECIAL_TOKENS,
        extra_cases=[],
        eog_ids=(0, 2),  # <|endoftext|>, <|im_end|>
        essay_cases=(("essay_200", 1, 200), ("essay_1024", 2, 1024), ("essay_2048", 3, 2048)),
        independent_cases=("chat_short", "essay_200"),
        greedy_candidates=GREEDY_CANDIDATES,
        max_fixture_bytes=300_000,
        tok_notes="ids = tokenizer(text, add_special_tokens=False)['input_ids'] with the HF tokenizer "
                  "built from the GGUF and its pre-tokenizer restored to SmolLM2's original "
                  "Sequence[Digits(individual_digits=True), ByteLevel(add_prefix_space=False)] "
                  "(= llama.cpp 'smollm'). 'hf_gguf_loader_ids' (only where different) are the ids of "
                  "transformers' unpatched GGUF tokenizer, which lacks the Digits step. Special tokens are "
                  "parsed in text. decodes_to_text: decode(ids) == text (false only where the text "
                  "contains bytes with no vocab symbol, which HF drops).",
    ),
    "qwen": Profile(
        key="qwen",
        file="Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf",
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        out=DEFAULT_OUT / "qwen",
        hf_class="Qwen2ForCausalLM",
        attn="sdpa",
        restore=_restore_qwen,
        check_vocab=_check_qwen_vocab,
        specials=QWEN_ADDED_TOKENS,
        extra_cases=[
            "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
            "<|fim_prefix|>def add(a, b):\n    <|fim_suffix|>\n<|fim_middle|>",
            "<|repo_name|>sift<|file_sep|>README.md\n# sift",
            "x = [1, 22, 333, 4444, 55555]  # digits one by one",
        ] + NFC_CASES,
        eog_ids=(151643, 151645),  # <|endoftext|>, <|im_end|>
        essay_cases=(("essay_1024", 1, 1024), ("essay_4096", 2, 4096), ("essay_16384", 3, 16384)),
        independent_cases=("chat_short", "essay_1024"),
        greedy_candidates=[
            "Write a Python function that returns the n-th Fibonacci number.",
            "Explain in a few sentences what a hash table is.",
            "Write a C function that reverses a string in place.",
        ] + GREEDY_CANDIDATES,
        max_fixture_bytes=400_000,
        tok_notes="ids = tokenizer(text, add_special_tokens=False)['input_ids'] with the HF tokenizer "
                  "built from the GGUF (Qwen2's Split regex + ByteLevel pre-tokenizer, as the original "
                  "tokenizer.json) and the original tokenizer.json's NFC normalizer restored. "
                  "'hf_gguf_loader_ids' (only where different) are the ids of transformers' unpatched "
                  "GGUF tokenizer, which has no normalizer. Added tokens are parsed in text. "
                  "decodes_to_text: decode(ids) == text (false where NFC changed the text).",
    ),
}


def pick_profile(arg: str) -> tuple[Profile, Path, str]:
    """--model: a profile key or a path; returns (profile, path, sha256)."""
    if arg in PROFILES:
        prof = PROFILES[arg]
        path = REPO / "models" / prof.file
    else:
        path, prof = Path(arg), None
    if not path.is_file():
        die(f"model file not found: {path} (fetch it with: bash tools/setup.sh model "
            f"{prof.key if prof else 'smollm2|qwen'})")
    digest = sha256_file(path)
    match = [p for p in PROFILES.values() if p.sha256 == digest]
    if not match or (prof is not None and match[0] is not prof):
        die(f"model sha256 mismatch:\n  got      {digest}\n  expected one of "
            f"{[p.sha256 for p in PROFILES.values()]}\n"
            "These fixtures belong to exact files; refusing to continue.")
    return match[0], path, digest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2", help="smollm2, qwen or a GGUF path")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--export-hf", nargs="?", const="", default=None, metavar="DIR",
                    help="also write a Hugging Face directory (default models/hf/<GGUF stem>)")
    ap.add_argument("--no-fixtures", action="store_true", help="only --export-hf")
    args = ap.parse_args()
    t_start = time.time()

    # ---- 0. checksum -------------------------------------------------------
    prof, model_path, digest = pick_profile(args.model)
    out_dir = args.out or prof.out
    log(f"model: {model_path} (profile {prof.key})")
    log(f"sha256 OK ({digest})")
    if args.no_fixtures and args.export_hf is None:
        die("--no-fixtures without --export-hf leaves nothing to do")

    import numpy as np
    import torch
    import gguf
    import tokenizers
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    generator = (
        f"tools/make_reference_fixtures.py: HF transformers {transformers.__version__} "
        f"({prof.hf_class} + tokenizer loaded from the GGUF, GGUF dequantised to fp32 by "
        f"gguf {_pkg_version('gguf')}, {prof.attn} attention, CPU fp32), "
        f"torch {torch.__version__}, tokenizers {tokenizers.__version__}, numpy {np.__version__}, "
        f"python {sys.version.split()[0]}"
    )
    log(generator)

    mdir, mname = str(model_path.parent), model_path.name

    # ---- 1. tokenizer --------------------------------------------------------
    log("loading tokenizer from GGUF (takes ~20 s)...")
    tok_gguf = AutoTokenizer.from_pretrained(mdir, gguf_file=mname)
    tok = AutoTokenizer.from_pretrained(mdir, gguf_file=mname)
    prof.restore(tok)
    prof.check_vocab(tok)

    # byte values whose GPT-2 byte symbol is not in the vocab (dropped by HF)
    from transformers.convert_slow_tokenizer import bytes_to_unicode
    b2u = bytes_to_unicode()
    vocab = tok.get_vocab()
    missing_bytes = [b for b in range(256) if b2u[b] not in vocab]
    log(f"  {len(missing_bytes)} byte values without a vocab symbol: {[hex(b) for b in missing_bytes]}")

    essays = essay_texts()
    chat_messages = [
        {"role": "system", "content": "You are a concise assistant. Answer in plain English."},
        {"role": "user", "content": "Hi! Can you tell me what 2+2 is?"},
        {"role": "assistant", "content": "Sure: 2 + 2 = 4."},
        {"role": "user", "content": "And in Python?\n```python\nprint(2 + 2)\n```"},
    ]
    chat_prompt_text = tok.apply_chat_template(chat_messages, tokenize=False, add_generation_prompt=True)

    texts = tokenizer_cases(essays, chat_prompt_text, missing_bytes, prof.specials, prof.extra_cases)
    tok_cases, n_diff = [], 0
    for text in texts:
        ids = list(tok(text, add_special_tokens=False)["input_ids"])
        raw_ids = list(tok_gguf(text, add_special_tokens=False)["input_ids"])
        case = {"text": text, "ids": ids}
        if raw_ids != ids:
            case["hf_gguf_loader_ids"] = raw_ids
            n_diff += 1
        case["decodes_to_text"] = tok.decode(ids, skip_special_tokens=False) == text
        tok_cases.append(case)
    n_bad_rt = sum(1 for c in tok_cases if not c["decodes_to_text"])
    log(f"tokenizer: {len(tok_cases)} cases, {n_diff} differ from the unpatched GGUF tokenizer, "
        f"{n_bad_rt} do not round-trip (expected: only the ones with missing control bytes or NFC "
        f"changes)")
    for c in tok_cases:
        if (not c["decodes_to_text"] and not any(chr(b) in c["text"] for b in missing_bytes)
                and c["text"] not in NFC_CASES):
            die(f"unexpected decode mismatch for {c['text']!r}")

    # ---- 2. model ------------------------------------------------------------
    log("loading model from GGUF (dequantising to fp32, ~25 s)...")
    model = AutoModelForCausalLM.from_pretrained(
        mdir, gguf_file=mname, dtype=torch.float32, attn_implementation=prof.attn)
    model.eval()
    if type(model).__name__ != prof.hf_class:
        die(f"transformers built {type(model).__name__}, expected {prof.hf_class}")
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear) and type(mod) is not torch.nn.Linear:
            die(f"{name} is {type(mod)}, expected a plain dequantised nn.Linear")
    for name, p in model.named_parameters():
        if p.dtype != torch.float32:
            die(f"{name} is {p.dtype}, expected float32")
    cfg = model.config
    n_vocab = int(model.lm_head.weight.shape[0])
    log(f"  {cfg.num_hidden_layers} layers, hidden {cfg.hidden_size}, heads {cfg.num_attention_heads}/"
        f"{cfg.num_key_value_heads}, rope_theta {cfg.rope_parameters['rope_theta']}, eps {cfg.rms_norm_eps}, "
        f"vocab {n_vocab}, tied={model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()}")

    @torch.no_grad()
    def hf_logits_all(ids, m=model):
        return m(torch.tensor([ids]), use_cache=False, logits_to_keep=1).logits[0]

    short_chat = [{"role": "user", "content": "What is the capital of France?"}]
    short_chat_ids = list(tok.apply_chat_template(short_chat, tokenize=True, add_generation_prompt=True,
                                                  return_dict=True)["input_ids"])

    if args.export_hf is not None:
        export_hf(args.export_hf, model_path, model, tok, texts, short_chat_ids, hf_logits_all)
    if args.no_fixtures:
        log(f"done in {time.time() - t_start:.0f}s (export only)")
        return

    # ---- 3. independent dequantisation check ---------------------------------
    log("checking transformers' weights against an independent dequantisation...")
    reader = gguf.GGUFReader(str(model_path))

    def meta_val(key):
        return reader.fields[key].contents()

    arch = meta_val("general.architecture")
    meta = {
        "arch": arch,
        "n_embd": int(meta_val(f"{arch}.embedding_length")),
        "n_layer": int(meta_val(f"{arch}.block_count")),
        "n_head": int(meta_val(f"{arch}.attention.head_count")),
        "n_head_kv": int(meta_val(f"{arch}.attention.head_count_kv")),
        "eps": float(meta_val(f"{arch}.attention.layer_norm_rms_epsilon")),
        "rope_base": float(meta_val(f"{arch}.rope.freq_base")),
    }
    gguf_w = {t.name: dequant_independent(t) for t in reader.tensors}
    hf_sd = model.state_dict()
    name_map = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
                "output.weight": "lm_head.weight"}
    sub = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
           "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
           "ffn_norm": "post_attention_layernorm", "ffn_gate": "mlp.gate_proj",
           "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
    worst = 0.0
    for gname, w in gguf_w.items():
        if gname in name_map:
            hname, ref = name_map[gname], w
        else:
            _, layer, kind, suffix = gname.split(".")
            hname = f"model.layers.{layer}.{sub[kind]}.{suffix}"
            ref = w
            if arch == "llama" and kind == "attn_q":
                ref = unpermute_qk(w, meta["n_head"])
            elif arch == "llama" and kind == "attn_k":
                ref = unpermute_qk(w, meta["n_head_kv"])
        got = hf_sd[hname].numpy()
        if got.shape != ref.shape:
            die(f"{gname}: shape {ref.shape} vs transformers {hname} {got.shape}")
        diff = float(np.max(np.abs(got - ref)))
        worst = max(worst, diff)
        if diff > 1e-6:
            die(f"{gname} -> {hname}: max |diff| {diff} between independent and transformers dequantisation")
    log(f"  all {len(gguf_w)} tensors match (max |diff| {worst:g})")
    indep = IndependentLlama(gguf_w, meta)
    del hf_sd, reader

    # ---- 4. logits -------------------------------------------------------------
    sample_ids = list(range(10)) + [int(round(x)) for x in np.linspace(100, n_vocab - 1, 40)]
    assert len(set(sample_ids)) == 50

    def essay_ids(start_file: int, n_tokens: int):
        pieces, ids, names = [], [], []
        for name, text in essays[start_file:]:
            names.append(name)
            pieces.append(text)
            ids = tok("\n\n".join(pieces), add_special_tokens=False)["input_ids"]
            if len(ids) >= n_tokens:
                return list(ids[:n_tokens]), names
        die("not enough essay text")

    raw_short = "The quick brown fox jumps over the lazy dog."
    logit_specs = [
        ("raw_short", list(tok(raw_short, add_special_tokens=False)["input_ids"]), f"plain text {raw_short!r}"),
        ("chat_short", short_chat_ids, f"chat template, user: {short_chat[0]['content']!r}, add_generation_prompt"),
    ]
    for case_name, start, n in prof.essay_cases:
        ids, names = essay_ids(start, n)
        logit_specs.append((case_name, ids,
                            f"first {n} tokens of pg_essays {' + '.join(names)} (sorted file list, joined by \\n\\n)"))

    logit_cases = []
    for case_name, ids, source in logit_specs:
        t0 = time.time()
        last = hf_logits_all(ids)[-1]
        top = torch.topk(last, 11)
        l64 = last.double()
        case = {
            "name": case_name,
            "source": source,
            "n_tokens": len(ids),
            "ids": ids,
            "top_ids": [int(i) for i in top.indices[:10]],
            "top_logits": [f32(v) for v in top.values[:10]],
            "logit_11th": f32(top.values[10]),
            "max": f32(l64.max()),
            "mean": f32(l64.mean()),
            "std": f32(l64.std(unbiased=False)),
            "logits_sample": [f32(last[i]) for i in sample_ids],
        }
        if case_name in prof.independent_cases:
            ind = indep.last_logits(ids)
            d = float((ind - last).abs().max())
            case["independent_forward_max_abs_diff"] = f32(d)
            if d > 2e-3 or int(ind.argmax()) != int(last.argmax()):
                die(f"{case_name}: independent forward differs from transformers by {d}")
            log(f"  independent forward agrees on {case_name}: max |diff| {d:.2e}")
        logit_cases.append(case)
        log(f"logits {case_name}: {len(ids)} tokens, top1 {case['top_ids'][0]} "
            f"({tok.convert_ids_to_tokens(case['top_ids'][0])!r}) {case['top_logits'][0]:.4f}, "
            f"gap to 2nd {case['top_logits'][0] - case['top_logits'][1]:.4f}, {time.time() - t0:.1f}s")

    # ---- 5. greedy -------------------------------------------------------------
    chosen = None
    for prompt in prof.greedy_candidates:
        messages = [{"role": "user", "content": prompt}]
        prompt_ids = list(tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=True,
                                                  return_dict=True)["input_ids"])
        seq, toks, margins, stop = list(prompt_ids), [], [], None
        t0 = time.time()
        for step in range(GREEDY_STEPS):
            last = hf_logits_all(seq)[-1]  # full recomputation, no KV cache
            top2 = torch.topk(last, 2)
            nxt = int(top2.indices[0])
            toks.append(nxt)
            margins.append(f32(top2.values[0] - top2.values[1]))
            seq.append(nxt)
            if nxt in prof.eog_ids:
                stop = step
                break
        text = tok.decode(toks, skip_special_tokens=False)
        log(f"greedy candidate {prompt!r}: {len(toks)} tokens in {time.time() - t0:.1f}s, "
            f"min margin {min(margins):.3f}, EOG at step {stop}: {text!r}")
        if stop is not None:
            continue
        cand = {"messages": messages, "prompt_ids": prompt_ids, "tokens": toks, "text": text,
                "top2_margins": margins}
        if min(margins) >= GREEDY_MIN_MARGIN:
            chosen = cand
            break
        if chosen is None or min(margins) > min(chosen["top2_margins"]):
            chosen = cand
    if chosen is None:
        die("every greedy candidate hit end-of-generation within 32 tokens")

    gen = model.generate(torch.tensor([chosen["prompt_ids"]]), max_new_tokens=GREEDY_STEPS,
                         min_new_tokens=GREEDY_STEPS, do_sample=False, num_beams=1,
                         attention_mask=torch.ones(1, len(chosen["prompt_ids"]), dtype=torch.long))
    gen_toks = gen[0, len(chosen["prompt_ids"]):].tolist()
    if gen_toks != chosen["tokens"]:
        die(f"model.generate (KV cache) disagrees with full recomputation:\n {gen_toks}\n {chosen['tokens']}")
    log("  model.generate with KV cache reproduces the 32 tokens")
    greedy = {
        "generator": generator,
        "model_sha256": prof.sha256,
        "messages": chosen["messages"],
        "prompt_text": tok.apply_chat_template(chosen["messages"], tokenize=False, add_generation_prompt=True),
        "prompt_ids": chosen["prompt_ids"],
        "n_steps": GREEDY_STEPS,
        "tokens": chosen["tokens"],
        "text": chosen["text"],
        "top2_margins": chosen["top2_margins"],
        "notes": "Greedy argmax for exactly 32 steps, no stopping (no end-of-generation token occurs). "
                 "top2_margins[i] = logit(top1) - logit(top2) at step i, fp32; small margins mark steps "
                 "where a quantised engine may legitimately pick the other token.",
    }

    # ---- 6. write --------------------------------------------------------------
    out_dir.mkdir(parents=True, exist_ok=True)
    tok_doc = {
        "generator": generator,
        "model_sha256": prof.sha256,
        "notes": prof.tok_notes,
        "bytes_without_vocab_symbol": missing_bytes,
        "cases": tok_cases,
    }
    logits_doc = {
        "generator": generator,
        "model_sha256": prof.sha256,
        "dtype": "float32",
        "notes": "Logits at the LAST position of one full forward pass over 'ids' (positions 0..n-1, no "
                 "BOS added beyond what ids contain). top_ids/top_logits sorted descending; logit_11th is "
                 f"the 11th largest. max/mean/std over all {n_vocab} logits (std is population, ddof=0). "
                 "logits_sample[j] is the logit of token sample_ids[j]. independent_forward_max_abs_diff: "
                 "agreement of this script's own GGUF-layout forward pass with transformers.",
        "sample_ids": sample_ids,
        "cases": logit_cases,
    }
    for fname, doc in (("tokenizer.json", tok_doc), ("logits.json", logits_doc), ("greedy.json", greedy)):
        path = out_dir / fname
        with open(path, "w", encoding="utf-8") as f:
            f.write(dump_json(doc))
        log(f"wrote {path} ({path.stat().st_size} bytes)")
    total = sum((out_dir / n).stat().st_size for n in ("tokenizer.json", "logits.json", "greedy.json"))
    if total > prof.max_fixture_bytes:
        die(f"fixtures too large: {total} bytes")
    log(f"done in {time.time() - t_start:.0f}s; greedy text: {greedy['text']!r}")


def export_hf(arg: str, model_path: Path, model, tok, texts, check_ids, hf_logits_all) -> None:
    """save_pretrained model + tokenizer, then reload with transformers and check they agree."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = Path(arg) if arg else REPO / "models" / "hf" / model_path.stem
    t0 = time.time()
    out.mkdir(parents=True, exist_ok=True)
    # transformers >= 5.2x keeps its GGUF quantizer on a model loaded from a GGUF file and refuses
    # save_pretrained even when it dequantised every weight (no `kernels` package: no GGUF-block
    # modules, plain fp32 nn.Linear). Only then is it dropped; the reload check below proves the
    # result.
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:
        if getattr(quantizer, "packed_modules", None):
            die("the GGUF was loaded with weights left in GGUF blocks (the `kernels` package is "
                "installed); uninstall it to export a dequantised directory")
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
    model.save_pretrained(out)
    tok.save_pretrained(out)
    log(f"exported a Hugging Face directory to {out} ({time.time() - t0:.0f}s): "
        f"{sorted(p.name for p in out.iterdir())}")
    tok2 = AutoTokenizer.from_pretrained(out)
    bad = [t for t in texts if tok2(t, add_special_tokens=False)["input_ids"] !=
           tok(t, add_special_tokens=False)["input_ids"]]
    if bad:
        die(f"the exported tokenizer gives other ids for {len(bad)} texts, e.g. {bad[0]!r}")
    model2 = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32,
                                                  attn_implementation=model.config._attn_implementation)
    # The weights must come back bit for bit; the logits then differ by rounding only (the
    # GGUF-loaded model runs a differently fused graph: 6e-6 measured on SmolLM2).
    sd1, sd2 = model.state_dict(), model2.state_dict()
    if sorted(sd1) != sorted(sd2):
        die(f"the exported model has other tensors: {sorted(set(sd1) ^ set(sd2))[:5]}")
    unequal = [k for k in sd1 if not torch.equal(sd1[k], sd2[k])]
    if unequal:
        die(f"{len(unequal)} exported tensors differ from the GGUF-loaded ones, e.g. {unequal[0]}")
    d = float((hf_logits_all(check_ids, model2) - hf_logits_all(check_ids)).abs().max())
    if d > 1e-4:
        die(f"the exported model's logits differ from the GGUF-loaded model's by {d}")
    log(f"  transformers reloads it: same ids on {len(texts)} texts, {len(sd1)} identical tensors, "
        f"max |logit difference| {d:.1e} on chat_short")


def dump_json(doc: dict) -> str:
    """One top-level key per line and one list element (e.g. one case) per line: compact and diffable."""
    out = []
    for key, val in doc.items():
        if isinstance(val, list) and val and isinstance(val[0], dict):
            items = ",\n  ".join(json.dumps(v, ensure_ascii=False) for v in val)
            out.append(f" {json.dumps(key)}: [\n  {items}\n ]")
        else:
            out.append(f" {json.dumps(key)}: {json.dumps(val, ensure_ascii=False)}")
    text = "{\n" + ",\n".join(out) + "\n}\n"
    if json.loads(text) != doc:
        die("JSON formatting round-trip failed")
    return text


def _pkg_version(name: str) -> str:
    from importlib.metadata import version
    return version(name)


if __name__ == "__main__":
    main()
