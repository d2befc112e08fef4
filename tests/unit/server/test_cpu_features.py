"""--dtype auto on a CPU follows its bfloat16 instructions (server/host/cpu_features.py)."""

from embedtext.server.host.cpu_features import cpu_flags, engine_dtype

EPYC_ZEN4 = "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16 avx512_vnni\n"
SAPPHIRE_RAPIDS = "processor\t: 0\nflags\t\t: fpu avx512f amx_bf16 amx_tile amx_int8\n"
SKYLAKE = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_vnni\n"
ARM = "processor\t: 0\nFeatures\t: fp asimd bf16\n"


def test_bfloat16_where_the_cpu_has_the_instructions():
    assert engine_dtype("auto", "cpu", cpu_flags(EPYC_ZEN4)).dtype == "bfloat16"
    assert engine_dtype("auto", "cpu", cpu_flags(SAPPHIRE_RAPIDS)).dtype == "bfloat16"


def test_float32_elsewhere_and_where_unmeasured():
    assert engine_dtype("auto", "cpu", cpu_flags(SKYLAKE)).dtype == "float32"
    assert engine_dtype("auto", "cpu", cpu_flags(ARM)).dtype == "float32"  # no x86 flags line
    assert engine_dtype("auto", "cpu", cpu_flags("")).dtype == "float32"


def test_a_named_dtype_stands_and_a_gpu_is_left_to_vllm():
    assert engine_dtype("float32", "cpu", cpu_flags(EPYC_ZEN4)).dtype == "float32"
    assert engine_dtype("bfloat16", "cpu", cpu_flags(SKYLAKE)).dtype == "bfloat16"
    assert engine_dtype("auto", "cuda", cpu_flags(EPYC_ZEN4)).dtype == "auto"


def test_the_reason_names_the_flag():
    assert "avx512_bf16" in engine_dtype("auto", "cpu", cpu_flags(EPYC_ZEN4)).note
