#!/usr/bin/env python3
"""Reference fixture for Llama 3 rope scaling read from a transformers >= 5 checkpoint.

Writes tests/fixtures/reference/llama3_rope/: a tiny random LlamaForCausalLM (2 layers, hidden 64,
head_dim 16, vocab 64; seed 0) saved by transformers' own save_pretrained, so config.json states
the rope as transformers >= 5 does (``rope_parameters`` with rope_type "llama3"), and logits.json:
transformers' fp32 logits (eager attention) for 96 token ids, at every position.

The scaling parameters make all three branches of Llama 3's frequency rule matter within 96
positions: rope_theta 1e4 and original_max_position_embeddings 32 give wavelengths 6.3 (kept,
< 32/4), 19.9 (smoothed, between 8 and 32) and >= 62.8 (divided by factor 8). The same model with
the scaling ignored gives logits that differ by far more than the test's tolerance (printed).

Test: tests/unit/safetensors_test.cc HfRopeScalingTest (sift's logits on the directory).
Usage: tools/.venv-ref/bin/python tools/make_rope_scaling_fixture.py [--out DIR]
(the reference environment of tools/make_reference_fixtures.py: torch, transformers >= 5).
"""
import argparse
import json
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(REPO / "tests/fixtures/reference/llama3_rope"))
    args = ap.parse_args()

    import torch
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    rope = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 32}
    config = LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                         max_position_embeddings=256, rms_norm_eps=1e-5, rope_parameters=rope,
                         tie_word_embeddings=False, attn_implementation="eager")
    model = LlamaForCausalLM(config).float().eval()
    with torch.no_grad():  # the default init (std 0.02) makes near-constant logits: widen it
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.2)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    saved = json.loads((out / "config.json").read_text())
    assert saved.get("rope_parameters", {}).get("rope_type") == "llama3", saved

    ids = [(7 * i + 3) % 64 for i in range(96)]
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0]
        plain = LlamaForCausalLM(LlamaConfig(**{**config.to_dict(), "rope_parameters": {
            "rope_type": "default", "rope_theta": 10000.0}})).float().eval()
        plain.load_state_dict(model.state_dict())
        unscaled = plain(torch.tensor([ids])).logits[0]
    doc = {"transformers": transformers.__version__, "torch": torch.__version__, "ids": ids,
           "logits": [[round(float(x), 6) for x in row] for row in logits]}
    (out / "logits.json").write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    print(f"wrote {out}; max |logit| {float(logits.abs().max()):.3f}; max |scaled - unscaled| "
          f"{float((logits - unscaled).abs().max()):.3f} (last 32 positions: "
          f"{float((logits[-32:] - unscaled[-32:]).abs().max()):.3f})")


if __name__ == "__main__":
    main()
