# Preset candidates (accbench.py --extra): rotation of K and V, 16 sinks.
def candidates(Q, per_layer, L):
    c = {}
    u = lambda cfg: [cfg] * L
    kv = dict(rot_k=True, rot_v=True, sinks=16)
    c["K2g32-V2g32-rotKV-s16"] = u(Q(**kv))
    c["K2g16-V2g64-rotKV-s16"] = u(Q(gk=16, gv=64, **kv))
    c["K3g32-V2g64-rotKV-s16"] = u(Q(kbits=3, gv=64, **kv))
    c["K4g64-V2g64-rotKV-s16"] = u(Q(kbits=4, gk=64, gv=64, **kv))
    c["K4g64-V3g64-rotKV-s16"] = u(Q(kbits=4, vbits=3, gk=64, gv=64, **kv))
    c["K4g64-V4g64-rotKV-s16"] = u(Q(kbits=4, vbits=4, gk=64, gv=64, **kv))
    return c
