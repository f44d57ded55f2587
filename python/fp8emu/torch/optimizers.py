"""TE's ``transformer_engine.pytorch.optimizers`` on PyTorch's optimizers.

``FusedAdam`` and ``FusedSGD`` take TE's constructor arguments and run PyTorch's ``torch.optim.AdamW``
/ ``Adam`` / ``SGD``: the same update rules in fp32, in PyTorch's order of operations, not TE's
multi-tensor CUDA kernel's (results may differ from a TE run in the last bits; a documented
choice, not measured). TE options that change the arithmetic or the state's dtypes raise
NotImplementedError naming them.
"""

from __future__ import annotations

from typing import Any, Iterable, Tuple

import torch

from ._unsupported import unsupported


def _refuse(cls: str, **options: Any) -> None:
    bad = [f"{k}={v!r}" for k, v in options.items() if v]
    if bad:
        raise NotImplementedError(f"{cls}: {', '.join(bad)} is not supported by fp8emu.torch (its optimizer is "
                                  f"PyTorch's, in fp32)")


def FusedAdam(params: Iterable[Any], lr: float = 1e-3, bias_correction: bool = True,
              betas: Tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, adam_w_mode: bool = True,
              weight_decay: float = 0.0, amsgrad: bool = False, set_grad_none: bool = True, capturable: bool = False,
              master_weights: bool = False, master_weight_dtype: Any = torch.float32,
              exp_avg_dtype: Any = torch.float32, exp_avg_sq_dtype: Any = torch.float32,
              use_decoupled_grad: bool = False, store_param_remainders: bool = False) -> torch.optim.Optimizer:
    """TE ``FusedAdam``: ``torch.optim.AdamW`` (``adam_w_mode=True``, TE's default) or
    ``torch.optim.Adam`` (L2 weight decay) with these ``lr``, ``betas``, ``eps``, ``weight_decay``.
    Raises:
        RuntimeError: ``amsgrad=True`` (TE: "FusedAdam does not support the AMSGrad variant.").
        NotImplementedError: ``bias_correction=False``, ``capturable``, ``master_weights``,
            ``use_decoupled_grad``, ``store_param_remainders``, non-fp32 state dtypes.
    """
    if amsgrad:
        raise RuntimeError("FusedAdam does not support the AMSGrad variant.")
    _refuse("FusedAdam", bias_correction_off=not bias_correction, capturable=capturable,
            master_weights=master_weights, use_decoupled_grad=use_decoupled_grad,
            store_param_remainders=store_param_remainders,
            non_fp32_state=any(d != torch.float32 for d in (master_weight_dtype, exp_avg_dtype, exp_avg_sq_dtype)))
    cls = torch.optim.AdamW if adam_w_mode else torch.optim.Adam
    return cls(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)


def FusedSGD(params: Iterable[Any], lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
             weight_decay: float = 0.0, nesterov: bool = False, wd_after_momentum: bool = False,
             materialize_master_grads: bool = True, set_grad_none: bool = False) -> torch.optim.Optimizer:
    """TE ``FusedSGD``: ``torch.optim.SGD`` with these arguments.
    Raises:
        NotImplementedError: ``wd_after_momentum=True``.
    """
    _refuse("FusedSGD", wd_after_momentum=wd_after_momentum)
    return torch.optim.SGD(params, lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                           nesterov=nesterov)


_MULTI_TENSOR = ("TE's multi-tensor CUDA kernels are not modelled (FusedAdam and FusedSGD run PyTorch's "
                 "optimizers)")
MultiTensorApply = unsupported("MultiTensorApply", _MULTI_TENSOR, __name__, "pytorch.optimizers")
multi_tensor_applier = unsupported("multi_tensor_applier", _MULTI_TENSOR, __name__, "pytorch.optimizers")
