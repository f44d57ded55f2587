"""fp8emu.torch under torch.distributed: fp8_group's amax reduction, as TE's
reduce_and_update_fp8_tensors (an all-reduce MAX of this step's amaxes before each delayed-scaling
update). Two processes on gloo (CPU). Oracle: each rank's local amaxes, computed here from the
inputs each rank saw, whose maximum the reduced history must hold; and the ranks' equal scales.
"""

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed here: the fp8emu.torch tests are skipped "
                                            "(pip install torch to run them)")
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402


def _inputs(rank):
    g = torch.Generator().manual_seed(100 + rank)
    return torch.randn(16, 32, generator=g) * (1.0 + 4.0 * rank)  # rank 1's amax is the larger


def _worker(rank, world, init_file, out_dir, reduce_amax):
    import fp8emu
    import fp8emu.torch as te
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        torch.manual_seed(0)  # the same weights on every rank
        lin = te.Linear(32, 16)
        recipe = fp8emu.DelayedScaling(amax_history_len=4, reduce_amax=reduce_amax)
        x = _inputs(rank).requires_grad_(True)
        with te.fp8_autocast(enabled=True, fp8_recipe=recipe, fp8_group=None):
            y = lin(x)
        (y * (rank + 1)).sum().backward()
        meta = lin.fp8_meta
        np.savez(os.path.join(out_dir, f"rank{rank}.npz"), scale_fwd=meta["scaling_fwd"].scale.numpy(),
                 hist_fwd=meta["scaling_fwd"].amax_history.numpy(), scale_bwd=meta["scaling_bwd"].scale.numpy(),
                 hist_bwd=meta["scaling_bwd"].amax_history.numpy())
    finally:
        dist.destroy_process_group()


def _run(tmp_path, reduce_amax):
    init = tmp_path / f"init_{reduce_amax}"
    mp.spawn(_worker, args=(2, str(init), str(tmp_path), reduce_amax), nprocs=2, join=True)
    return [np.load(tmp_path / f"rank{r}.npz") for r in range(2)]


def test_fp8_group_reduces_the_amaxes_over_the_ranks(tmp_path):
    r0, r1 = _run(tmp_path, True)
    for key in ("scale_fwd", "hist_fwd", "scale_bwd", "hist_bwd"):
        assert np.array_equal(r0[key].view(np.uint32), r1[key].view(np.uint32)), key
    # The input slot's amax of this step (rolled to the last row) is the max over both ranks.
    want = max(float(_inputs(r).abs().max()) for r in range(2))
    assert r0["hist_fwd"][-1, 0] == np.float32(want)
    # grad_output of rank r is (r + 1) everywhere: the reduced amax is 2.
    assert r0["hist_bwd"][-1, 0] == 2.0


def test_reduce_amax_false_keeps_each_ranks_own(tmp_path):
    r0, r1 = _run(tmp_path, False)
    assert r0["hist_fwd"][-1, 0] == np.float32(float(_inputs(0).abs().max()))
    assert r1["hist_fwd"][-1, 0] == np.float32(float(_inputs(1).abs().max()))
    assert r0["scale_fwd"][0] != r1["scale_fwd"][0]
