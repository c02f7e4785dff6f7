"""speclab.methods.layer_step.RowCache: the one cache of the drafting heads' passes (one sequence, a batch,
the compiled head's fixed capacity), written and read by the fast path's own rule (fast_model.write_slots)."""
import pytest
import torch

from speclab.fast_model import FastLlama, write_slots
from speclab.methods.eagle import EagleHead
from speclab.methods.layer_step import RowCache
from speclab.models import tiny_model


@pytest.fixture(scope="module")
def step():
    head = EagleHead.for_target(tiny_model("llama", layers=2, seed=0)).eval()
    return head.layer_step


def feed(step, cache, rows, xs):
    """One begin/advance step: each row's rows xs[i] (n_i, H), padded to the widest; outputs per row."""
    widths = [len(x) for x in xs]
    x = torch.zeros(len(rows), max(widths), xs[0].shape[-1])
    for b, xb in enumerate(xs):
        x[b, :len(xb)] = xb
    positions, visible = cache.begin(rows, max(widths), x.device)
    out = step(x, cache, positions, visible)
    cache.advance(rows, widths)
    return [out[b, :n] for b, n in enumerate(widths)]


def test_a_batch_gives_each_row_what_its_sequence_gives_alone(step):
    """Rows of different lengths fed together (padded), rolled back apart, then fed again: each row's
    outputs are its sequence's on a cache of its own (one row, appended as DynamicCache's update does)."""
    torch.manual_seed(0)
    hidden = step.layer.self_attn.q_proj.in_features
    seqs = [[torch.randn(n, hidden) for n in plan] for plan in ((3, 2, 1), (5, 1, 2), (1, 4, 1))]
    batch, alone = RowCache(rows=3, capacity=4), [RowCache(capacity=4) for _ in seqs]
    with torch.no_grad():
        for t in range(3):
            together = feed(step, batch, [0, 1, 2], [s[t] for s in seqs])
            for b, (cache, s) in enumerate(zip(alone, seqs)):
                start = cache.get_seq_length()
                own = step(s[t], cache, torch.arange(start, start + len(s[t])))
                # float32 up to ~90 in size: a padded batch sums in another order than one row (by host's
                # kernels, a few units in the last place of the largest value); a wrong row or slot is O(1)
                scale = own.abs().max()
                assert torch.allclose(together[b], own, rtol=1e-5, atol=1e-5 * scale)
            if t == 0:  # roll rows 1 and 2 back, row 0 keeps its length
                for cache, (row, length) in zip((alone[1], alone[2]), ((1, 2), (2, 0))):
                    batch.rollback(row, length)
                    cache.crop(length - cache.get_seq_length())
    assert batch.lengths == [c.get_seq_length() for c in alone] == [6, 5, 5]
    assert batch.keys[0].shape[2] >= 6  # grew past its first 4 slots, keeping what it held


def test_one_sequence_is_a_cache_of_one_row_read_as_a_view():
    cache = RowCache(capacity=8)
    k, v = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4)
    keys, values = cache.update(k, v, 0)  # no step begun: appended to row 0
    assert cache.length == cache.get_seq_length() == 3 and keys._base is cache.keys[0]
    assert torch.equal(keys, k) and torch.equal(values, v)
    slots, visible = cache.begin([0], 2, torch.device("cpu"))
    assert slots.tolist() == [[3, 4]] and visible is None  # causal over the whole row: LayerStep's own mask
    with pytest.raises(ValueError, match="negative count"):
        cache.crop(1)


def test_a_fixed_cache_reads_whole_buckets_and_refuses_past_its_capacity():
    cache = RowCache(capacity=16, fixed=True, bucket=8)
    cache.allocate(2, 4, torch.float32, torch.device("cpu"), 16)
    cache.begin([0], 3, torch.device("cpu"))
    assert cache.end == 8
    keys, _ = cache.update(torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4), 0)
    cache.advance([0], [3])
    assert keys.shape[2] == 8 and cache.keys[0].shape[2] == 16
    cache.rollback(0, 1)
    cache.begin([0], 9, torch.device("cpu"))
    assert cache.end == 16
    with pytest.raises(ValueError, match="holds 16 positions"):
        cache.begin([0], 16, torch.device("cpu"))


def test_the_fast_paths_cache_and_the_heads_are_written_by_one_rule():
    """FastLlama writes its buffers with write_slots, as RowCache does: one sequence in place, a batch
    in the first rows as views, chosen rows gathered."""
    target = tiny_model("llama", layers=1, seed=0)
    net = FastLlama(target, max_len=8, max_batch=2)
    layer = net.layers[0]
    k = torch.randn(2, net.kv_heads, 2, net.head_dim)
    keys, _ = write_slots(layer.keys, layer.values, k, k, torch.tensor([[0, 1], [3, 4]]), 5)
    assert torch.equal(layer.keys[0, :, :2], k[0]) and torch.equal(layer.keys[1, :, 3:5], k[1])
    assert keys.shape == (2, net.kv_heads, 5, net.head_dim) and keys._base is layer.keys
    picked, _ = write_slots(layer.keys, layer.values, k[1:], k[1:], torch.tensor([[6, 7]]), 8, torch.tensor([2]))
    assert torch.equal(layer.keys[2, :, 6:8], k[1]) and torch.equal(picked[0], layer.keys[2])
