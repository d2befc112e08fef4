"""vLLM's compile cache on a CPU: a warm start loads the compiled model instead of compiling again.

vLLM 0.32 on torch 2.13 saves its ahead-of-time compiled model but cannot load it back ("Compiling
model again due to a load failure ... 'function' object has no attribute 'finalize_loading'"), so
every start compiled the model again. Its other cache path (Dynamo traces the model, Inductor's
compiled graphs come from the cache) loads, so the server turns the AOT path off for vLLM-CPU
engines; ``embedtext bench --only startup`` shows what it saves. A user's own setting stands.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

AOT_COMPILE_VAR = "VLLM_USE_AOT_COMPILE"


def compile_cache_env(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The variable to add to a vLLM-CPU engine's environment (empty: the user chose).

    >>> compile_cache_env({})
    {'VLLM_USE_AOT_COMPILE': '0'}
    >>> compile_cache_env({'VLLM_USE_AOT_COMPILE': '1'})
    {}
    """
    return {} if AOT_COMPILE_VAR in environ else {AOT_COMPILE_VAR: "0"}
