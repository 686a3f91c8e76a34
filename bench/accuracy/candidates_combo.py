# Combination candidates (accbench.py --extra). Same naming as candidates_screen.py.
def candidates(Q, per_layer, L):
    c = {}
    u = lambda cfg: [cfg] * L
    c["K2g32-V2g32-rotV"] = u(Q(rot_v=True))
    c["K2g32-V2g32-rotKV"] = u(Q(rot_k=True, rot_v=True))
    c["K2g32-V2g32-pre"] = u(Q(prerope=True))
    c["K2g16-V2g64-rotV"] = u(Q(gk=16, gv=64, rot_v=True))
    c["K2g16-V2g64-rotV-s16"] = u(Q(gk=16, gv=64, rot_v=True, sinks=16))
    c["K3g32-V2g64-rotV"] = u(Q(kbits=3, gv=64, rot_v=True))
    c["K4g64-V2g64-rotV"] = u(Q(kbits=4, gk=64, gv=64, rot_v=True))
    c["K4g128-V2g64-rotV"] = u(Q(kbits=4, gk=128, gv=64, rot_v=True))
    c["K4g64-V2g32-rotV"] = u(Q(kbits=4, gk=64, rot_v=True))
    c["K4g32-V2g32-rotV"] = u(Q(kbits=4, rot_v=True))
    c["K4g64-V3g64-rotV"] = u(Q(kbits=4, vbits=3, gk=64, gv=64, rot_v=True))
    c["K4g64-V4g64-rotV"] = u(Q(kbits=4, vbits=4, gk=64, gv=64, rot_v=True))
    c["K4g32-V4g64-rotV"] = u(Q(kbits=4, vbits=4, gv=64, rot_v=True))
    return c
