#!/usr/bin/env python3
"""Synthetic serving traces in the Mooncake format, for `kvstash bench trace`.

One JSON object a line: {"timestamp": ms, "input_length": tokens,
"output_length": tokens, "hash_ids": [ints]}, where hash_ids names the
prompt in blocks of --block-tokens tokens and the i-th id stands for the
prompt's first (i+1) x block_tokens tokens (ids are chained prefix hashes:
equal ids mean equal prefixes).  With --format csv, the CSV form of
docs/REPLAY.md.

A prompt is a list of segments, each a run of tokens with an identity
(a system prompt, one user turn, one model answer, a document, a
question).  Block i's id is interned from (block i-1's id, the pieces of
segments inside block i), so a block's id changes when anything before or
inside it changes, and a partial last block differs from the full block it
later becomes.  Ids are dense integers in order of first appearance.

Three kinds of request, mixed by --mix (weights, in this order):
  continue  the next turn of an open conversation: its previous prompt,
            the previous answer and a new user message (the conversation
            extends its own history; the prefix is its last prompt);
  start     a new conversation: one of --systems system prompts, picked
            by a Zipf law (--system-zipf), then a first user message;
  document  a question about one of --documents documents, picked by a
            Zipf law (--zipf), after the document application's own
            system prompt: [system][document][question].
Lengths are log-normal (medians below, clipped); arrivals are Poisson at
--rate requests/s.  At most --open conversations stay open (the oldest
closes), a conversation closes after a geometric number of turns
(mean --turns) or when its prompt passes --max-tokens.

Deterministic: the same arguments and --seed give the same bytes (Python's
random.Random, whose integer seeding and random() are stable across
Python 3 versions).
"""
import argparse
import bisect
import json
import math
import random
import sys


def zipf_cdf(n, alpha):
    weights = [1.0 / math.pow(k + 1, alpha) for k in range(n)]
    total = sum(weights)
    cdf, acc = [], 0.0
    for w in weights:
        acc += w / total
        cdf.append(acc)
    cdf[-1] = 1.0
    return cdf


def pick(rng, cdf):
    return bisect.bisect_left(cdf, rng.random())


def lognormal(rng, median, sigma, lo, hi):
    x = rng.lognormvariate(math.log(median), sigma)
    return int(min(max(x, lo), hi))


class Interner:
    def __init__(self):
        self.ids = {}

    def block_ids(self, segments, block_tokens):
        """Chained ids of the blocks of a prompt made of @segments, a list
        of (identity, length)."""
        total = sum(n for _, n in segments)
        out, prev = [], None
        seg, seg_start = 0, 0  # segment index and its first token
        pos = 0
        while pos < total:
            end = min(pos + block_tokens, total)
            pieces = []
            at = pos
            while at < end:
                ident, n = segments[seg]
                take = min(end, seg_start + n) - at
                pieces.append((ident, at - seg_start, at - seg_start + take))
                at += take
                if at == seg_start + n:
                    seg_start += n
                    seg += 1
            key = (prev, tuple(pieces))
            bid = self.ids.get(key)
            if bid is None:
                bid = len(self.ids)
                self.ids[key] = bid
            out.append(bid)
            prev = bid
            pos = end
        return out


def generate(args, out):
    rng = random.Random(args.seed)
    interner = Interner()
    systems = [lognormal(rng, args.system_tokens, 0.6, 100, 8000)
               for _ in range(args.systems)]
    system_cdf = zipf_cdf(args.systems, args.system_zipf)
    documents = [lognormal(rng, args.document_tokens, 0.8, 500, 60000)
                 for _ in range(args.documents)]
    document_cdf = zipf_cdf(args.documents, args.zipf)
    mix = [float(w) for w in args.mix.split(",")]
    if len(mix) != 3 or min(mix) < 0 or sum(mix) <= 0:
        raise SystemExit("trace_gen.py: --mix takes three non-negative "
                         "weights: continue,start,document")
    mix_cdf = [sum(mix[:i + 1]) / sum(mix) for i in range(3)]
    open_convs = []  # [segments, turns left, id, next turn]
    next_conv = 0
    clock_ms = 0.0
    if args.format == "csv":
        out.write("timestamp,input_length,output_length,hash_ids\n")
    for r in range(args.requests):
        clock_ms += rng.expovariate(args.rate) * 1000.0
        kind = pick(rng, mix_cdf)
        if kind == 0 and not open_convs:
            kind = 1
        answer = lognormal(rng, args.answer_tokens, 0.7, 10, 2000)
        if kind == 2:
            d = pick(rng, document_cdf)
            question = lognormal(rng, 60, 0.5, 8, 400)
            segments = [(("s", "doc"), args.system_tokens),
                        (("d", d), documents[d]), (("q", r), question)]
        else:
            if kind == 0:
                conv = open_convs[rng.randrange(len(open_convs))]
            else:
                s = pick(rng, system_cdf)
                turns = 1 + int(rng.expovariate(1.0 / args.turns))
                conv = [[(("s", s), systems[s])], turns, next_conv, 0]
                next_conv += 1
                open_convs.append(conv)
                if len(open_convs) > args.open:
                    open_convs.pop(0)
            user = lognormal(rng, args.user_tokens, 0.9, 5, 4000)
            conv[0].append((("u", conv[2], conv[3]), user))
            segments = list(conv[0])
            conv[0].append((("a", conv[2], conv[3]), answer))
            conv[3] += 1
            conv[1] -= 1
            length = sum(n for _, n in conv[0])
            if conv[1] <= 0 or length > args.max_tokens:
                for i, c in enumerate(open_convs):
                    if c is conv:
                        del open_convs[i]
                        break
        ids = interner.block_ids(segments, args.block_tokens)
        tokens = sum(n for _, n in segments)
        ts = int(clock_ms)
        if args.format == "csv":
            out.write("%d,%d,%d,%s\n" % (ts, tokens, answer,
                                         " ".join(map(str, ids))))
        else:
            out.write(json.dumps({"timestamp": ts, "input_length": tokens,
                                  "output_length": answer,
                                  "hash_ids": ids}) + "\n")


def main():
    p = argparse.ArgumentParser(
        description="Synthetic Mooncake-format traces (see the module "
                    "docstring).")
    p.add_argument("--requests", type=int, default=20000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--block-tokens", type=int, default=512)
    p.add_argument("--systems", type=int, default=16,
                   help="shared system prompts (default 16)")
    p.add_argument("--system-zipf", type=float, default=1.1)
    p.add_argument("--system-tokens", type=int, default=1200,
                   help="median system prompt length")
    p.add_argument("--documents", type=int, default=1000)
    p.add_argument("--zipf", type=float, default=0.9,
                   help="Zipf exponent of document popularity")
    p.add_argument("--document-tokens", type=int, default=6000,
                   help="median document length")
    p.add_argument("--user-tokens", type=int, default=250,
                   help="median user message length")
    p.add_argument("--answer-tokens", type=int, default=250,
                   help="median answer length")
    p.add_argument("--turns", type=float, default=5.0,
                   help="mean turns of a conversation")
    p.add_argument("--open", type=int, default=200,
                   help="conversations open at once")
    p.add_argument("--max-tokens", type=int, default=65536)
    p.add_argument("--mix", default="0.45,0.2,0.35",
                   help="weights of continue,start,document")
    p.add_argument("--rate", type=float, default=4.0,
                   help="arrivals per second")
    p.add_argument("--format", choices=["jsonl", "csv"], default="jsonl")
    p.add_argument("-o", "--output", default="-")
    args = p.parse_args()
    for name in ("requests", "block_tokens", "systems", "documents",
                 "open", "max_tokens"):
        if getattr(args, name) <= 0:
            p.error("--%s must be positive" % name.replace("_", "-"))
    if args.rate <= 0 or args.turns <= 0:
        p.error("--rate and --turns must be positive")
    if args.output == "-":
        generate(args, sys.stdout)
    else:
        with open(args.output, "w") as f:
            generate(args, f)


if __name__ == "__main__":
    main()
