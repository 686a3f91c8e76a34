# Screening candidates (passed to accbench.py with --extra). Names:
#   Kb gG - Vb gG   bits and group per side ("fp": full precision);
#   rotK / rotV: randomized Hadamard; sN: N sink tokens; pre: pre-RoPE Keys.
def candidates(Q, per_layer, L):
    c = {}
    u = lambda cfg: [cfg] * L
    # Keys alone (Values in full precision)
    for kb, gk in [(2, 8), (2, 16), (2, 64), (3, 32), (3, 64), (4, 64), (4, 128)]:
        c["K%dg%d-Vfp" % (kb, gk)] = u(Q(kbits=kb, gk=gk, vbits=16))
    c["K2g32-Vfp-rotK"] = u(Q(vbits=16, rot_k=True))
    c["K2g32-Vfp-pre"] = u(Q(vbits=16, prerope=True))
    c["K2g32-Vfp-s16"] = u(Q(vbits=16, sinks=16))
    c["K2g16-Vfp-rotK"] = u(Q(vbits=16, gk=16, rot_k=True))
    # Values alone (Keys in full precision)
    for vb, gv in [(2, 16), (2, 64), (3, 64), (4, 64)]:
        c["Kfp-V%dg%d" % (vb, gv)] = u(Q(kbits=16, vbits=vb, gv=gv))
    c["Kfp-V2g32-rotV"] = u(Q(kbits=16, rot_v=True))
    c["Kfp-V2g64-rotV"] = u(Q(kbits=16, gv=64, rot_v=True))
    c["Kfp-V2g32-s16"] = u(Q(kbits=16, sinks=16))
    # sinks on the default format
    for n in (4, 16, 32):
        c["K2g32-V2g32-s%d" % n] = u(Q(sinks=n))
    c["K2g32-V2g32-s16incl"] = u(Q(sinks=16, sink_mode="include"))
    return c
