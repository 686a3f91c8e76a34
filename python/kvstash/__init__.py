"""kvstash: KIVI-style 2-bit KV-cache blocks end to end.

Bindings over libkvstash (ctypes, no compiled extension):
  Runtime, Batch, Sequence   the decode runtime (prefill, fused decode
                             steps, publish, prefix attach, tail handoff)
  BlockStore                 where blocks are published and attached from
  Client, connect            a kvstashd: get / put / lookup / delete, the
                             tail handoff, stat; a BlockStore too
  Block, verify, span_id     opening, checking and dequantizing objects
  kernels                    the CUDA kernels on torch tensors
  transformers               a transformers Cache and attention function
                             (import kvstash.transformers; needs torch and
                             transformers)
  vllm                       a vLLM KV connector, KvstashConnector
                             (kv_connector_module_path="kvstash.vllm";
                             docs/VLLM.md)
NumPy arrays work with the CPU device; torch tensors with both.
"""

from ._lib import VERSION as __version__, WIRE_VERSION, KvsError, lib_path
from .blocks import Block, check_name, span_id, verify
from .runtime import Batch, BlockStore, Runtime, Sequence
from .client import Client, connect
from . import kernels


__all__ = [
    "Batch",
    "Block",
    "BlockStore",
    "Client",
    "KvsError",
    "WIRE_VERSION",
    "Runtime",
    "Sequence",
    "check_name",
    "connect",
    "kernels",
    "lib_path",
    "span_id",
    "verify",
]
