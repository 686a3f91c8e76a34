"""One vLLM engine (CPU), with or without the kvstash connector, over a
list of prompts, greedy; the vLLM tests' and benchmark's runner.

  run_llm.py --model DIR --prompts FILE.json --out OUT.json
             [--format raw|2bit|4bit --address HOST:PORT --key FILE
              --role kv_both|kv_producer|kv_consumer --save sync|async]
             [--servers HOST:PORT,HOST:PORT... in place of --address]
             [--rounds N] [--max-tokens N] [--dtype float32|bfloat16]
             [--prefix-caching] [--kill-pid PID --kill-round N] [--agree-tokens N]
             [--handoff-out FILE | --handoff-in FILE]

FILE.json is a list of prompts, each a list of token ids.  Each round
generates every prompt once, one at a time (vLLM's own prefix cache off
unless --prefix-caching, so a later round's prompt reaches the connector);
before round --kill-round the process --kill-pid is killed (SIGKILL).
OUT.json: {"rounds": [[{"tokens", "cached", "seconds", "logprobs"}...]...],
"startup_s"}: the generated token ids, the prompt tokens vLLM did not
compute (its prefix cache and the connector), the wall time of the call and
the log-probability of each generated token; with --agree-tokens, "agree":
one more pass over the prompts generating N tokens each.  --handoff-out
writes each prompt's kv_transfer_params of the last round (a prefill
instance's answer), --handoff-in gives them to the prompts (a decode
instance's requests).
"""

import argparse
import json
import os
import signal
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--format")
    ap.add_argument("--address")
    ap.add_argument("--servers")
    ap.add_argument("--key")
    ap.add_argument("--role", default="kv_both")
    ap.add_argument("--save", default="sync")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--max-model-len", type=int, default=4096)
    ap.add_argument("--prefix-caching", action="store_true")
    ap.add_argument("--kill-pid", type=int)
    ap.add_argument("--kill-round", type=int)
    ap.add_argument("--agree-tokens", type=int, default=0)
    ap.add_argument("--handoff-out")
    ap.add_argument("--handoff-in")
    a = ap.parse_args()

    from vllm import LLM, SamplingParams
    from vllm.config import KVTransferConfig

    kw = {}
    if a.format:
        kw["kv_transfer_config"] = KVTransferConfig(
            kv_connector="KvstashConnector", kv_connector_module_path="kvstash.vllm",
            kv_role=a.role, kv_load_failure_policy="recompute",
            kv_connector_extra_config={**({"servers": a.servers} if a.servers
                                          else {"address": a.address}), "key_file": a.key,
                                       "format": a.format, "save": a.save,
                                       "timeout_ms": 3000})
    t0 = time.monotonic()
    tokenizer = os.path.exists(os.path.join(a.model, "tokenizer.json"))
    llm = LLM(model=a.model, dtype=a.dtype, enforce_eager=True, max_model_len=a.max_model_len,
              skip_tokenizer_init=not tokenizer, enable_prefix_caching=a.prefix_caching,
              max_num_batched_tokens=a.max_model_len, seed=0, **kw)
    startup = time.monotonic() - t0
    prompts = json.load(open(a.prompts))

    handoff = json.load(open(a.handoff_in)) if a.handoff_in else [None] * len(prompts)
    params_out = []

    def one_pass(max_tokens):
        out = []
        params_out.clear()
        for p, h in zip(prompts, handoff):
            sp = SamplingParams(max_tokens=max_tokens, temperature=0.0, logprobs=0,
                                detokenize=False, ignore_eos=True,
                                extra_args={"kv_transfer_params": h} if h else None)
            t = time.monotonic()
            res = llm.generate([{"prompt_token_ids": p}], sp, use_tqdm=False)[0]
            dt = time.monotonic() - t
            params_out.append(res.kv_transfer_params)
            o = res.outputs[0]
            lps = [lp[tok].logprob for tok, lp in zip(o.token_ids, o.logprobs or [])]
            out.append({"tokens": list(o.token_ids), "cached": res.num_cached_tokens or 0,
                        "seconds": dt, "logprobs": lps})
        return out

    rounds = []
    for r in range(a.rounds):
        if a.kill_pid and a.kill_round == r:
            os.kill(a.kill_pid, signal.SIGKILL)
        rounds.append(one_pass(a.max_tokens))
    result = {"rounds": rounds, "startup_s": startup}
    if a.agree_tokens:
        result["agree"] = one_pass(a.agree_tokens)
    if a.handoff_out:
        with open(a.handoff_out, "w") as f:
            json.dump(params_out, f)
    with open(a.out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
