"""bench/llm_profile.py: where an llm step's time goes. Its kernel classes, checked on kernel names an H100 run
printed, and the script itself on two CPU ranks (torchrun, gloo) with fp8 emulated under FSDP2."""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

from .test_benchmarks_cpu import free_port

ROOT = Path(__file__).resolve().parents[2]


def load_profile_module():
    spec = importlib.util.spec_from_file_location("llm_profile", ROOT / "bench" / "llm_profile.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_kernel_classes_and_interval_union():
    p = load_profile_module()
    seen = {   # names from an 8B step on H100 (docs/results/frontier-h100x4/profile-8b_8k*.txt)
        "nvjet_sm90_qrtst_128x160_128x5_2x1_v_bz_coopA_algo2_TNT": "GEMM fp8",
        "nvjet_sm90_qqtst_320x128_128x3_1x2_h_bz_coopB_TNT": "GEMM fp8",
        "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT": "GEMM",
        "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)": "collectives (NCCL)",
        "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x128": "attention",
        "triton_per_fused__fused_rms_norm__fused_rms_norm_backward__scaled_mm__to_copy": "compiled (Triton)",
        "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FusedOptimizerTensorListMetadata<4>, "
        "FusedAdamMathFunctor<float, 4>>": "optimizer",
        "void at::native::vectorized_elementwise_kernel<4, at::native::float8_copy_kernel_cuda": "copy / cast",
        "void at::native::detail::chunk_cat_cuda_kernel<float, c10::BFloat16>": "copy / cast",
        "void at::native::vectorized_elementwise_kernel<4, launch_clamp_scalar>": "elementwise (eager)",
        "aten::mm": "GEMM", "aten::_scaled_mm": "GEMM fp8", "aten::silu": "other",
    }
    assert {name: p.kind(name) for name in seen} == seen
    assert "nccl:_all_gather_base".startswith(p.ANNOTATIONS) and "Optimizer.step#AdamW.step".startswith(p.ANNOTATIONS)
    assert p.union_ms([(0, 10), (5, 15), (20, 25), (21, 22)]) == 20
    assert p.union_ms([]) == 0


def test_profile_runs_the_benchmarks_own_step_on_cpu_ranks(tmp_path):
    out = tmp_path / "profile.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", MASTER_PORT=str(free_port()))
    p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                        "--master-port", env["MASTER_PORT"], str(ROOT / "bench" / "llm_profile.py"),
                        "--vendor", "cpu", "--hw", "quick", "--steps", "2", "--warmup", "1",
                        "--set", "precision=fp8", "--set", "fp8_emulate=true", "--json", str(out)],
                       capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "== llm profile: hw quick, preset tiny" in p.stdout
    assert "fp8 (14 float8 linears, recipe tensorwise, fp8 all-gather), fsdp on 2 x cpu" in p.stdout
    d = json.loads(out.read_text())
    assert (d["precision"], d["fp8_linears"], d["fp8_all_gather"], d["world_size"]) == ("fp8", 14, True, 2)
    assert d["step_ms"] > 0 and d["compute_ms"] > 0
    assert d["device_window"] == {"omitted": "device cpu: NVML reads NVIDIA GPUs only"}
    assert d["per_class_ms"]["GEMM"] > 0            # emulated fp8: the casts, then plain matmuls
    assert abs(sum(v for k, v in d["per_class_ms"].items()) - d["compute_ms"]) < 1e-6 * d["compute_ms"] + 1e-9
    bad = subprocess.run([sys.executable, str(ROOT / "bench" / "llm_profile.py"), "--vendor", "cpu", "--hw", "nope"],
                         capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert bad.returncode != 0 and "config_nope.yaml not found" in bad.stderr and "Traceback" not in bad.stderr
