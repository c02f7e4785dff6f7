"""Multi-token prediction (speclab.methods.mtp): DeepSeek-V3's module as a drafter, exact when greedy, lossless
when sampling, chained for several tokens, and refused for another target."""
import numpy as np
import pytest
import torch

import tests.test_lossless as lossless
from speclab import generate, speculative_generate
from speclab.methods import load_drafter
from speclab.measure.acceptance import chi_square_pvalue
from speclab.measure.lossless import replayed_passes
from speclab.methods.mtp import MtpDrafter, MtpModule
from speclab.train.data import target_features
from speclab.train.eagle import eagle3_loss
from tests.conftest import tiny_model

PROMPT = torch.tensor([5, 17, 42, 8, 23, 61, 7, 30, 5, 17, 42, 9])


def random_module(target, seed=0, scale=0.5):
    torch.manual_seed(seed)
    module = MtpModule.for_target(target)
    torch.nn.init.normal_(module.fc.weight, 0, scale / module.fc.weight.shape[1] ** 0.5)
    return module.eval()


def test_the_module_is_deepseek_v3s():
    """norm(h) and norm(embedding), concatenated and projected 2H -> H without bias, one block of the
    target's own kind (a copy of its last at the start), a norm (a copy of the final norm), the
    target's lm_head: nothing fused, nothing else stored."""
    target = tiny_model("llama", layers=2, seed=0)
    module = MtpModule.for_target(target)
    hidden = target.config.hidden_size
    assert module.fc.weight.shape == (hidden, 2 * hidden) and module.fc.bias is None
    assert not hasattr(module, "fuse_fc") and module.feature_layers == (-1,)
    assert type(module.model.layers[0]) is type(target.model.layers[0])
    assert torch.equal(module.model.layers[0].mlp.up_proj.weight, target.model.layers[-1].mlp.up_proj.weight)
    assert torch.equal(module.out_norm.weight, target.model.norm.weight)
    names = {name.split(".")[0] for name, _ in module.named_parameters()}
    assert names == {"fc", "model", "embed_norm", "feature_norm", "out_norm"}


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("num_tokens", [1, 3])
def test_greedy_mtp_equals_target_only(arch, num_tokens):
    target = tiny_model(arch, layers=2, seed=0)
    reference = generate(target, PROMPT, max_new_tokens=30).tokens.tolist()
    drafter = MtpDrafter(random_module(target), target, num_tokens=num_tokens)
    for k in (1, 4):
        result = speculative_generate(target, drafter, PROMPT, k=k, max_new_tokens=30)
        assert result.tokens.tolist() == reference
        assert max(len(r.drafted) for r in result.trace) <= min(k, num_tokens)


def test_one_training_step_deep_is_the_cross_entropy_of_the_token_two_ahead():
    target = tiny_model("llama", layers=2, seed=0).requires_grad_(False)
    rows = torch.randint(0, 96, (8, 24), generator=torch.Generator().manual_seed(0))
    h = target_features(target, rows, torch.device("cpu")).float()
    module = MtpModule.for_target(target)
    embed, lm_head = target.get_input_embeddings(), target.get_output_embeddings()
    opt = torch.optim.AdamW(module.parameters(), lr=3e-3)
    losses = []
    for _ in range(30):
        loss, per_step = eagle3_loss(module, embed, lm_head, rows, h, h, steps=1)
        assert len(per_step) == 1
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.8 * losses[0]


def sampled_joint(target, drafter, samples=lossless.SAMPLES) -> tuple[np.ndarray, int]:
    counts, accepted = np.zeros((lossless.VOCAB, lossless.VOCAB)), 0
    with replayed_passes():  # the target's passes computed once per history: the same samples, for less
        for seed in range(samples):
            result = speculative_generate(target, drafter, lossless.PROMPT, k=2, max_new_tokens=2, seed=seed,
                                          temperature=1.0)
            t1, t2 = result.tokens.tolist()
            counts[t1, t2] += 1
            accepted += result.stats.accepted
    return counts, accepted


def test_sampled_mtp_follows_the_target():
    target = tiny_model("llama", layers=2, vocab=lossless.VOCAB, seed=10, init=0.2)
    counts, accepted = sampled_joint(target, MtpDrafter(random_module(target, scale=2.0), target, num_tokens=2))
    assert accepted > 100
    assert chi_square_pvalue(counts, lossless.exact_joint(target, dict(temperature=1.0))) > 1e-3


def test_the_check_catches_mtp_drafts_verified_without_the_residual(monkeypatch):
    import speclab.verification as verification
    target = tiny_model("llama", layers=2, vocab=lossless.VOCAB, seed=10, init=0.2)
    monkeypatch.setattr(verification, "residual_distribution", lambda p, q: p)
    counts, _ = sampled_joint(target, MtpDrafter(random_module(target, scale=2.0), target, num_tokens=2))
    assert chi_square_pvalue(counts, lossless.exact_joint(target, dict(temperature=1.0))) < 1e-3


def test_an_mtp_module_for_another_target_is_refused(tmp_path):
    target = tiny_model("llama", layers=2, seed=0)
    MtpModule.for_target(target).save(tmp_path / "mtp")
    assert isinstance(load_drafter("mtp", target, module=tmp_path / "mtp"), MtpDrafter)
    for other, what in ((tiny_model("llama", layers=2, vocab=128, seed=0), "vocab"),
                        (tiny_model("llama", layers=3, seed=0), "layers"),
                        (tiny_model("llama", layers=2, seed=4), "lm_head checksums")):
        with pytest.raises(ValueError, match=f"{what}.*train mtp"):
            load_drafter("mtp", other, module=tmp_path / "mtp")
    with pytest.raises(FileNotFoundError, match="An MTP module is not in .*train mtp"):
        load_drafter("mtp", target, module=tmp_path)
    with pytest.raises(ValueError, match="num_tokens"):
        load_drafter("mtp", target, module=tmp_path / "mtp", num_tokens=0)
    assert load_drafter("mtp", target, module=tmp_path / "mtp", num_speculative_tokens=3).num_tokens == 3


def test_train_mtp_micro_resumes_installs_and_drafts(tmp_path):
    import json

    import speclab
    from speclab.cli.train import main as train_main
    from speclab.train import install
    pair = tmp_path / "pair"
    train_main(["pair", "--out", str(pair), "--preset", "micro", "--device", "cpu", "--no-plain-draft"])
    out = tmp_path / "heads"
    train_main(["mtp", "--target", str(pair / "target"), "--out", str(out), "--preset", "micro", "--steps", "3"])
    train_main(["mtp", "--target", str(pair / "target"), "--out", str(out), "--preset", "micro", "--steps", "5"])
    record = json.loads((out / "mtp" / "record.json").read_text())
    assert record["method"] == "mtp" and [e["step"] for e in record["log"]["evals"]] == [0, 3, 5]
    assert len(record["log"]["train"][-1]) == 1 + 1  # step, and the one step's loss
    installed = install(out, "mtp", tmp_path / "package")
    target, _, tok, _ = speclab.load_pair(str(pair / "target"), draft=pair / "draft", device="cpu")
    drafter = speclab.load_drafter("mtp", target, module=installed, num_tokens=2)
    ids = tok("def f(x):\n", return_tensors="pt").input_ids[0]
    assert speclab.speculative_generate(target, drafter, ids, k=3, max_new_tokens=8).tokens.tolist() == \
        speclab.generate(target, ids, max_new_tokens=8).tokens.tolist()


@pytest.mark.parametrize("num_tokens", [1, 3])
def test_the_shipped_module_decodes_the_bundled_target_exactly(num_tokens):
    from speclab.models import load_pair
    pair = load_pair(device="cpu")
    ids = pair.tokenizer("def parse(text):\n    ", return_tensors="pt").input_ids[0]
    drafter = load_drafter("mtp", pair.target, num_tokens=num_tokens)
    assert speculative_generate(pair.target, drafter, ids, k=4, max_new_tokens=24).tokens.tolist() == \
        generate(pair.target, ids, max_new_tokens=24).tokens.tolist()
