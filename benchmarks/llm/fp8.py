"""fp8 training for the llm benchmark (``precision: fp8``): the decoder blocks' linear layers swapped for torchao's
Float8Linear (torchao.float8.convert_to_float8_training with a recipe: tensorwise, rowwise, rowwise_with_gw_hp),
where the device is a CUDA GPU of compute capability >= 8.9 and torchao imports; elsewhere the run keeps its base
precision and says why (``fp8_fallback_reason``). torchao is optional: nothing here imports it unless fp8 runs.

Under FSDP2 with the tensorwise recipe the sharded weights are cast to fp8 before their all-gather (torchao's
``enable_fsdp_float8_all_gather``: half the bytes of a bf16 all-gather, and each rank casts its shard only), and
their scales are computed once per step after the optimizer, for all weights in one all-reduce
(``precompute_float8_dynamic_scale_for_fsdp``). ``fp8_emulate`` runs torchao's emulated casts on any device (the
code path, not the speed: what the CPU tests run)."""
import dataclasses

import torch

MIN_CAPABILITY = (8, 9)       # Ada and Hopper onwards have fp8 tensor cores
RECIPES = ("tensorwise", "rowwise", "rowwise_with_gw_hp")


def import_torchao_float8():
    """(Float8LinearConfig, convert_to_float8_training) from torchao.float8; ImportError where it is missing."""
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    return Float8LinearConfig, convert_to_float8_training


def plan(precision, device_type, capability=None, device_name=None, find_torchao=import_torchao_float8,
         emulate=False):
    """(fp8 on?, why not): on where ``precision`` is fp8, the device a CUDA GPU of ``capability`` >= 8.9 (or
    ``emulate``: any device) and ``find_torchao`` succeeds; else (False, the reason), and (False, None) when fp8 was
    not asked for."""
    if precision != "fp8":
        return False, None
    if not emulate and device_type != "cuda":
        return False, f"fp8 needs a CUDA GPU of compute capability >= 8.9; this run is on {device_type}"
    if not emulate and (capability is None or tuple(capability) < MIN_CAPABILITY):
        have = "unknown" if capability is None else f"{capability[0]}.{capability[1]}"
        return False, f"fp8 needs compute capability >= 8.9 (Ada, Hopper or later); {device_name} is {have}"
    try:
        find_torchao()
    except Exception as e:  # not installed, or built for another torch
        return False, f"torchao.float8 does not import ({type(e).__name__}: {e}); pip install torchao to run fp8"
    return True, None


def plan_for(c, ctx):
    """plan() for this run's case (``c["precision"]``, ``c["fp8_emulate"]``) and device."""
    cuda = c["precision"] == "fp8" and ctx.is_cuda
    return plan(c["precision"], ctx.device.type,
                torch.cuda.get_device_capability(ctx.device) if cuda else None,
                torch.cuda.get_device_name(ctx.device) if cuda else None, emulate=c["fp8_emulate"] == "true")


def fsdp_all_gather(c, parallel):
    """Whether the weights are all-gathered in fp8: under FSDP2 with the tensorwise recipe, unless
    ``fp8_fsdp_all_gather`` is false (read_config refuses true with another recipe)."""
    return parallel == "fsdp" and c["fp8_recipe"] == "tensorwise" and c["fp8_fsdp_all_gather"] != "false"


def keep(module, fqn):
    """The linear layers that train in fp8: the decoder blocks' projections whose both sides are multiples of 16
    (fp8 GEMMs need it); the LM head (called through lm_loss on its weight, in bf16) stays out."""
    return (fqn.startswith("layers.") and isinstance(module, torch.nn.Linear)
            and module.in_features % 16 == 0 and module.out_features % 16 == 0)


def convert(model, recipe, all_gather=False, emulate=False):
    """Swap the blocks' nn.Linear for torchao's Float8Linear with ``recipe`` (and the fp8 all-gather of FSDP2,
    ``all_gather``; the emulated casts, ``emulate``), before compilation and sharding; returns how many were
    swapped."""
    config_cls, convert_fn = import_torchao_float8()
    config = dataclasses.replace(config_cls.from_recipe_name(recipe), enable_fsdp_float8_all_gather=all_gather,
                                 emulate=emulate)
    convert_fn(model, module_filter_fn=keep, config=config)
    return sum(1 for m in model.modules() if type(m).__name__ == "Float8Linear")


def fp8_gathered_weights(model):
    """How many of the model's Float8Linear weights FSDP2 all-gathers in fp8 (their local shard is torchao's
    WeightWithDynamicFloat8CastTensor): the proof, read from the model, that the fp8 all-gather is on."""
    n = 0
    for m in model.modules():
        if type(m).__name__ == "Float8Linear":
            local = getattr(m.weight, "_local_tensor", None)
            n += type(local).__name__ == "WeightWithDynamicFloat8CastTensor"
    return n


def precompute_scales(model):
    """After each optimizer step of an fp8 all-gather run: every fp8 weight's scale, in one all-reduce."""
    from torchao.float8 import precompute_float8_dynamic_scale_for_fsdp
    precompute_float8_dynamic_scale_for_fsdp(model)
