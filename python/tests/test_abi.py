"""The ctypes mirrors of the public structs (kvstash._lib) against the C
headers: every size and every field offset as the compiler lays them out,
printed by the build's abi_layout program (the meson test sets
KVSTASH_ABI_LAYOUT to it)."""

import ctypes
import os
import subprocess

import pytest

from kvstash import _lib


def c_layout():
    exe = os.environ.get("KVSTASH_ABI_LAYOUT")
    if not exe:
        pytest.skip("KVSTASH_ABI_LAYOUT is not set (the meson test sets it)")
    out = subprocess.run([exe], check=True, capture_output=True, text=True).stdout
    return dict(line.rsplit(" ", 1) for line in out.splitlines())


def test_every_mirrored_struct_matches_its_header():
    layout = c_layout()
    names = sorted({key.split(".")[0] for key in layout})
    assert len(names) >= 17
    wrong = []
    for name in names:
        cls = getattr(_lib, name)
        if ctypes.sizeof(cls) != int(layout[name]):
            wrong.append("%s: size %d in Python, %s in C" % (name, ctypes.sizeof(cls), layout[name]))
        fields = [f[0] for f in cls._fields_]
        for field in fields:
            off = getattr(cls, field).offset
            c_off = layout.get("%s.%s" % (name, field))
            if c_off is None:
                wrong.append("%s.%s: not in the C struct" % (name, field))
            elif off != int(c_off):
                wrong.append("%s.%s: offset %d in Python, %s in C" % (name, field, off, c_off))
        c_fields = [k.split(".", 1)[1] for k in layout if k.startswith(name + ".")]
        assert c_fields == fields, name
    assert not wrong, "\n".join(wrong)
